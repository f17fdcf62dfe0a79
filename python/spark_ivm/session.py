"""Session set-up: the spark-ivm jar, the Delta package and the extension confs."""

from __future__ import annotations

import glob
import os
from importlib import metadata
from typing import Iterable, List, Optional

from pyspark.sql import SparkSession

IVM_EXTENSION = "io.sparkivm.IvmSparkSessionExtensions"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def ivm_jar_path() -> str:
    """Path of the spark-ivm jar shipped inside this package."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars")
    jars = sorted(glob.glob(os.path.join(here, "spark-ivm_2.13-*.jar")))
    if not jars:
        raise FileNotFoundError(
            f"no spark-ivm jar in {here}: build it with `make install` (or `make jar`)"
        )
    return jars[-1]


def delta_package() -> str:
    """Maven coordinates of the Delta jar matching the installed pyspark and delta-spark."""
    spark_minor = ".".join(metadata.version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{metadata.version('delta-spark')}"


def _session_confs(extra_packages: Iterable[str]) -> dict[str, str]:
    return {
        "spark.jars": ivm_jar_path(),
        "spark.jars.packages": ",".join([delta_package(), *extra_packages]),
        "spark.sql.extensions": f"{DELTA_EXTENSION},{IVM_EXTENSION}",
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    }


def configure_spark_with_ivm(
    builder: SparkSession.Builder, extra_packages: Optional[Iterable[str]] = None
) -> SparkSession.Builder:
    """Return ``builder`` configured for spark-ivm.

    Adds the spark-ivm jar, the Delta package (fetched from Maven Central on first use, as
    ``delta.configure_spark_with_delta_pip`` does), the Delta and spark-ivm session extensions
    and the Delta catalog. Works for ``local[*]`` and cluster masters alike: the jars are
    shipped to executors.
    """
    for key, value in _session_confs(extra_packages or []).items():
        builder = builder.config(key, value)
    return builder


def spark_sql_args(extra_packages: Optional[Iterable[str]] = None) -> List[str]:
    """Command-line arguments that start ``spark-sql`` (or ``spark-submit``) with spark-ivm."""
    confs = _session_confs(extra_packages or [])
    args = ["--jars", confs.pop("spark.jars"), "--packages", confs.pop("spark.jars.packages")]
    for key, value in confs.items():
        args += ["--conf", f"{key}={value}"]
    return args
