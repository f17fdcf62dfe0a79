"""The SparkSession every benchmark runs in: local, all cores, spark-ivm and Delta configured."""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_ivm import configure_spark_with_ivm


def session(warehouse: str, memory: str, app: str = "spark-ivm benchmark") -> SparkSession:
    builder = (SparkSession.builder.master("local[*]").appName(app)
               .config("spark.driver.memory", memory)
               .config("spark.sql.warehouse.dir", warehouse)
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.ui.enabled", "false"))
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
