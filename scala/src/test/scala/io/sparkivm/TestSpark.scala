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
    .config(Interpreted.toMap)
    .getOrCreate()

  /** `body` with the session's settings `kv`, each put back as it was after. */
  def withConf[T](spark: SparkSession, kv: (String, String)*)(body: => T): T = {
    val before = kv.map { case (k, _) => k -> spark.conf.getOption(k) }
    kv.foreach { case (k, v) => spark.conf.set(k, v) }
    try body
    finally before.foreach {
        case (k, Some(v)) => spark.conf.set(k, v)
        case (k, None) => spark.conf.unset(k)
      }
  }

  /**
   * Queries interpreted, not compiled: the suites run many queries of a few rows, each of a
   * shape of its own, whose code costs more to generate than to run (the Python suite runs
   * Spark's default, generated code).
   */
  val Interpreted: Seq[(String, String)] =
    Seq("spark.sql.codegen.wholeStage" -> "false", "spark.sql.codegen.factoryMode" -> "NO_CODEGEN")
}
