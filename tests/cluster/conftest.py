"""A SparkSession on a local-cluster master (two executor JVMs), so that nothing relies on
state that only exists in the driver. Run as its own pytest run: one session per run."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pyspark
import pytest
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import SESSION_JIT_OPTIONS, make_session, resolved_jars  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # local-cluster starts its workers from SPARK_HOME; pyspark's wheel is a Spark home.
    os.environ.setdefault("SPARK_HOME", os.path.dirname(os.path.abspath(pyspark.__file__)))
    # Executors must load Delta and spark-ivm from their launch classpath: jars added at run
    # time live in a child classloader, where Scala collections fail to deserialize. The jars
    # are those `make install` resolved (a short local session resolves them where it has not).
    jars = resolved_jars()
    if not jars:
        probe = make_session(master="local[1]", warehouse=str(tmp_path_factory.mktemp("probe")))
        jars = (probe.sparkContext.getConf().get("spark.repl.local.jars") or "").split(",")
        probe.stop()
    # Only Delta's and ours: the Hadoop and Parquet jars Delta's kernel pulls in would shadow
    # Spark's own versions.
    wanted = [j.replace("file://", "") for j in jars if "spark-ivm" in j or "/io.delta_" in j]
    classpath = os.pathsep.join(wanted)
    session = make_session(master="local-cluster[2,1,1024]",
                           warehouse=str(tmp_path_factory.mktemp("cluster-warehouse")),
                           extra={"spark.executor.extraClassPath": classpath,
                                  "spark.executor.extraJavaOptions": SESSION_JIT_OPTIONS})
    yield session
    session.stop()
