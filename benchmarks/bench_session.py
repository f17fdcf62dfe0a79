"""The SparkSession every benchmark runs in: local, all cores, spark-ivm and Delta configured.

Incremental refreshes and recomputations run in the same session with the same settings:
spark-ivm's session defaults (Delta snapshot partitions and shuffle partitions sized for the
local cores, adaptive execution on) apply to both.
"""

from __future__ import annotations

import os
from typing import Dict, Optional

from pyspark.sql import SparkSession
from spark_ivm import configure_spark_with_ivm


def session(warehouse: str, memory: str, app: str = "spark-ivm benchmark",
            extra: Optional[Dict[str, str]] = None) -> SparkSession:
    builder = (SparkSession.builder.master("local[*]").appName(app)
               .config("spark.driver.memory", memory)
               .config("spark.sql.warehouse.dir", warehouse)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    log_dir = os.environ.get("SPARK_IVM_BENCH_EVENT_LOG")
    if log_dir:  # profile any benchmark: its Spark event log, read by benchmarks/jobs.py
        os.makedirs(log_dir, exist_ok=True)
        extra = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir,
                 "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false",
                 **(extra or {})}
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
