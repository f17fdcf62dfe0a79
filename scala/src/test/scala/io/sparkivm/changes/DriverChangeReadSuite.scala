package io.sparkivm.changes

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, TableIdentifier}
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.delta.actions.{AddCDCFile, AddFile}
import org.apache.spark.sql.ivm.ReadMetrics
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * The change feed read by the driver equals Delta's own change data feed, row for row with its
 * signs, over every kind of commit (appends, deletes and updates that write change files,
 * merges, whole files removed, compaction that changes no data), runs no Spark job, and leaves
 * to Delta what it does not read itself.
 */
class DriverChangeReadSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("driver-change-read")

  private def feedByDelta(table: String, from: Long, to: Long): Map[Row, Int] =
    DeltaSources.signedChanges(spark, TableIdentifier(table), from, to).collect().toSeq
      .groupMapReduce(r => Row.fromSeq(r.toSeq.dropRight(1)))(r => r.getInt(r.length - 1))(_ + _)

  private def feedByDriver(table: String, from: Long, to: Long): Option[Map[Row, Int]] = {
    val log = DeltaLog.forTable(spark, TableIdentifier(table))
    val schema = log.update().schema
    DriverChangeRead.read(spark, TableIdentifier(table), schema, from, to, 1L << 20).map { case (s, rows) =>
      val toRow = CatalystTypeConverters.createToScalaConverter(s)
      rows.map(r => toRow(r).asInstanceOf[Row]).groupMapReduce(r => Row.fromSeq(r.toSeq.dropRight(1)))(r =>
        r.getInt(r.length - 1))(_ + _)
    }
  }

  private def version(table: String): Long = DeltaLog.forTable(spark, TableIdentifier(table)).update().version

  test("every kind of commit reads as Delta's change feed does, with no Spark job") {
    spark.sql("DROP TABLE IF EXISTS cf")
    spark.sql("CREATE TABLE cf (k INT, s STRING, x DOUBLE) USING delta " +
      "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO cf SELECT id, CAST(id AS STRING), id * 0.5 FROM range(100)")
    val steps = Seq(
      "INSERT INTO cf VALUES (1000, 'new', NULL), (1001, NULL, 2.5), (1000, 'new', NULL)",
      "DELETE FROM cf WHERE k % 10 = 0",
      "UPDATE cf SET s = 'u' WHERE k < 5",
      "MERGE INTO cf t USING (SELECT 3 AS k UNION ALL SELECT 2000) s ON t.k = s.k " +
        "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (k, s, x) VALUES (s.k, 'm', 0.0)",
      "OPTIMIZE cf",
      "DELETE FROM cf")
    steps.foreach { sql =>
      val before = version("cf")
      spark.sql(sql)
      val after = version("cf")
      val (byDriver, work) = ReadMetrics.measure(spark)(feedByDriver("cf", before, after))
      assert(byDriver.contains(feedByDelta("cf", before, after)), sql)
      assert(work.jobs == 0, sql)
    }
    // Several commits at once: their rows, each with its sign.
    assert(feedByDriver("cf", 0, version("cf")).contains(feedByDelta("cf", 0, version("cf"))))
  }

  test("a change spread over many files is read by several threads, in full") {
    spark.sql("DROP TABLE IF EXISTS cfm")
    spark.sql("CREATE TABLE cfm (k INT, s STRING) USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO cfm SELECT /*+ REPARTITION(40) */ id, CAST(id AS STRING) FROM range(4000)")
    val before = version("cfm")
    spark.sql("DELETE FROM cfm WHERE k % 97 = 0") // change files
    spark.sql("INSERT INTO cfm SELECT /*+ REPARTITION(30) */ id, 'again' FROM range(0, 4000, 97)") // 30 files
    val after = version("cfm")
    val files = DeltaLog.forTable(spark, TableIdentifier("cfm")).getChanges(before + 1).takeWhile(_._1 <= after)
      .map(_._2.count(a => a.isInstanceOf[AddCDCFile] || a.isInstanceOf[AddFile])).sum
    assert(files >= 30, files)
    val (byDriver, work) = ReadMetrics.measure(spark)(feedByDriver("cfm", before, after))
    assert(byDriver.contains(feedByDelta("cfm", before, after)))
    assert(byDriver.get.values.map(math.abs).sum == 2 * 42)
    assert(work.jobs == 0)
  }

  test("what it does not read itself is left to Delta's reader") {
    spark.sql("DROP TABLE IF EXISTS cfp")
    spark.sql("CREATE TABLE cfp (k INT, p INT) USING delta PARTITIONED BY (p) " +
      "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO cfp VALUES (1, 1)")
    assert(feedByDriver("cfp", 0, 1).isEmpty, "partitioned")
    spark.sql("DROP TABLE IF EXISTS cfs")
    spark.sql("CREATE TABLE cfs (k INT) USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO cfs VALUES (1)")
    spark.sql("ALTER TABLE cfs ADD COLUMN (j INT)")
    spark.sql("INSERT INTO cfs VALUES (2, 3)")
    assert(feedByDriver("cfs", 1, 3).isEmpty, "a schema change in the interval")
    assert(feedByDriver("cfs", 2, 3).contains(feedByDelta("cfs", 2, 3)))
    val log = DeltaLog.forTable(spark, TableIdentifier("cfs"))
    assert(DriverChangeRead.read(spark, TableIdentifier("cfs"), log.update().schema, 2, 3, maxBytes = 1).isEmpty,
      "more than maxBytes")
  }
}
