package io.sparkivm

import java.nio.file.Files

import org.apache.spark.sql.SparkSession

/** The local session the suites share (they run in one JVM: the first suite to ask creates it). */
object TestSpark {
  def session(name: String): SparkSession = SparkSession.builder()
    .master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2")
    // A Delta version read for the first time is rebuilt from its log by a job of this many tasks
    // (50 by default); the suites read many versions of small tables.
    .config("spark.databricks.delta.snapshotPartitions", "2")
    .config("spark.sql.warehouse.dir", Files.createTempDirectory(s"ivm-$name").toString)
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .getOrCreate()
}
