package io.sparkivm.changes

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, TableIdentifier}
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.ivm.ReadMetrics
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * A small table read by the driver from its files holds the rows Delta's reader returns, with
 * no Spark job, over every column type and a column added after some files were written; and
 * tables whose reading Delta adds to are left to Delta.
 */
class DriverTableReadSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("driver-table-read")

  private def readOnDriver(table: String): Option[Seq[Row]] = {
    val log = DeltaLog.forTable(spark, TableIdentifier(table))
    val snapshot = log.update()
    DriverTableRead.rows(spark, snapshot, KnownFiles.matching(log, snapshot, Nil)).map { rows =>
      val toRow = CatalystTypeConverters.createToScalaConverter(snapshot.schema)
      rows.map(r => toRow(r).asInstanceOf[Row])
    }
  }

  private def same(a: Seq[Row], b: Seq[Row]): Boolean = {
    def text(r: Row) = r.toSeq.map {
      case bytes: Array[Byte] => bytes.toSeq
      case v => v
    }.toString
    a.map(text).sorted == b.map(text).sorted
  }

  test("rows of every column type, NULLs and a column added later, as Delta reads them, with no job") {
    spark.sql("DROP TABLE IF EXISTS tr")
    spark.sql("CREATE TABLE tr (i INT, l BIGINT, d DECIMAL(12, 2), s STRING, b BINARY, dt DATE, " +
      "ts TIMESTAMP, ntz TIMESTAMP_NTZ, f DOUBLE, a ARRAY<INT>, st STRUCT<x: INT, y: STRING>, " +
      "m MAP<STRING, BIGINT>) USING delta")
    spark.sql("INSERT INTO tr VALUES (1, 10, 1.25, 'a', X'0102', DATE'2024-01-02', " +
      "TIMESTAMP'2024-01-02 03:04:05', TIMESTAMP_NTZ'2024-01-02 03:04:05', 0.5, array(1, NULL), " +
      "named_struct('x', 1, 'y', 'z'), map('k', 7)), " +
      "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")
    spark.sql("ALTER TABLE tr ADD COLUMN extra STRING")
    spark.sql("INSERT INTO tr (i, extra) VALUES (2, 'new')")
    spark.sql("DELETE FROM tr WHERE i = 99") // a version whose files are unchanged
    readOnDriver("tr") // the version's files listed first: listing is not what is measured
    val (read, work) = ReadMetrics.measure(spark)(readOnDriver("tr"))
    assert(read.isDefined)
    assert(same(read.get, spark.table("tr").collect().toSeq), read.get)
    assert(work.jobs === 0)
    // As a scan's rows, equal to them as rows: held rows are matched by equality against rows
    // Spark computes (an array in a generic row is not equal to the same array in an unsafe one).
    val log = DeltaLog.forTable(spark, TableIdentifier("tr"))
    val snapshot = log.update()
    val raw = DriverTableRead.rows(spark, snapshot, KnownFiles.matching(log, snapshot, Nil)).get
    val scanned = spark.table("tr").queryExecution.executedPlan.executeCollect().map(_.copy()).toSeq
    assert(raw.forall(_.isInstanceOf[org.apache.spark.sql.catalyst.expressions.UnsafeRow]))
    assert(raw.toSet === scanned.toSet)
  }

  test("deletion vectors, column mapping, partitions and CHAR columns are left to Delta") {
    spark.sql("DROP TABLE IF EXISTS trdv")
    spark.sql("CREATE TABLE trdv (i INT, s STRING) USING delta TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.sql("INSERT INTO trdv SELECT id, 'x' FROM range(20)")
    assert(readOnDriver("trdv").isDefined, "no deletion vector yet")
    spark.sql("DELETE FROM trdv WHERE i = 3")
    assert(readOnDriver("trdv").isEmpty)
    spark.sql("DROP TABLE IF EXISTS trcm")
    spark.sql("CREATE TABLE trcm (i INT) USING delta TBLPROPERTIES (delta.columnMapping.mode = 'name', " +
      "delta.minReaderVersion = '2', delta.minWriterVersion = '5')")
    spark.sql("INSERT INTO trcm VALUES (1)")
    assert(readOnDriver("trcm").isEmpty)
    spark.sql("DROP TABLE IF EXISTS trp")
    spark.sql("CREATE TABLE trp (i INT, p STRING) USING delta PARTITIONED BY (p)")
    spark.sql("INSERT INTO trp VALUES (1, 'a')")
    assert(readOnDriver("trp").isEmpty)
    spark.sql("DROP TABLE IF EXISTS trc")
    spark.sql("CREATE TABLE trc (c CHAR(4)) USING delta")
    spark.sql("INSERT INTO trc VALUES ('a')")
    assert(readOnDriver("trc").isEmpty)
  }
}
