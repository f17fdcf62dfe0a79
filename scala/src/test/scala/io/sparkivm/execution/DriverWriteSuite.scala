package io.sparkivm.execution

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.actions.AddFile
import org.apache.spark.sql.delta.util.JsonUtils
import org.apache.spark.sql.delta.{DeltaLog, DeltaOperations}
import org.apache.spark.sql.ivm.ReadMetrics
import org.apache.spark.sql.{SaveMode, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Files written by the driver (no Spark job) are Delta's: the rows read back are those
 * written, the statistics are those Delta's own write computes for the same rows (so data
 * skipping treats the file as any other), and tables whose writes Delta adds to are left to it.
 */
class DriverWriteSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("driver-write")

  private val columns = "k INT, s STRING, x DOUBLE, t TIMESTAMP, d DATE, m DECIMAL(10, 2), b BOOLEAN"
  private val values =
    "(3, 'c', 1.5, TIMESTAMP'2024-01-02 03:04:05.678', DATE'2024-01-02', 12.34, true), " +
      "(1, NULL, -2.0, NULL, DATE'1999-12-31', -0.01, false), " +
      s"(2, '${"z" * 40}', NULL, TIMESTAMP'2030-06-30 23:59:59.999', NULL, NULL, NULL), " +
      "(NULL, 'a', 0.0, TIMESTAMP'1970-01-01 00:00:00', DATE'1970-01-01', 99999999.99, true)"

  /** The values in the table's types (a literal such as 1.5 is a DECIMAL). */
  private val source = "SELECT CAST(k AS INT) k, s, CAST(x AS DOUBLE) x, t, d, CAST(m AS DECIMAL(10, 2)) m, b " +
    s"FROM VALUES $values AS v(k, s, x, t, d, m, b)"

  private def rowsOf(sql: String): Seq[InternalRow] =
    spark.sql(sql).queryExecution.toRdd.collect().map(_.copy()).toSeq

  private def stats(adds: Seq[AddFile]): Seq[Map[String, Any]] =
    adds.map(a => JsonUtils.fromJson[Map[String, Any]](a.stats) - "tightBounds")

  test("a file written by the driver holds the rows, with Delta's own statistics, and runs no job") {
    spark.sql("DROP TABLE IF EXISTS dw")
    spark.sql(s"CREATE TABLE dw ($columns) USING delta")
    val log = DeltaLog.forTable(spark, TableIdentifier("dw"))
    val rows = rowsOf(source)
    // Delta's own write of the same rows (not committed), for its statistics.
    val byDelta = log.startTransaction().writeFiles(spark.sql(source).coalesce(1)).collect { case a: AddFile => a }
    val txn = log.startTransaction()
    val (adds, work) = ReadMetrics.measure(spark) {
      DriverWrite.write(spark, txn, txn.metadata.schema, rows, sortBy = Some("k")).get
    }
    assert(work.jobs == 0)
    assert(adds.size == 1 && stats(adds) == stats(byDelta))
    assert(stats(adds).head("numRecords") == 4)
    txn.commit(adds, DeltaOperations.Write(SaveMode.Append))
    val expected = spark.sql(source).collect().toSet
    assert(spark.table("dw").collect().toSet == expected)
    // Sorted by k (NULL first) in the file, as a sorted write lays it out.
    val inFile = spark.read.parquet(s"${log.dataPath}/${adds.head.path}").collect().map(r => Option(r.get(0)))
    assert(inFile.toSeq == Seq(None, Some(1), Some(2), Some(3)))
    // A file per `rowsPerFile` rows.
    val txn2 = log.startTransaction()
    val split = DriverWrite.write(spark, txn2, txn2.metadata.schema, rows ++ rows, rowsPerFile = 3).get
    assert(split.map(a => stats(Seq(a)).head("numRecords")) == Seq(3, 3, 2))
    txn2.commit(split, DeltaOperations.Write(SaveMode.Append))
    assert(spark.table("dw").count() == 12)
    // Data skipping reads the statistics as any file's.
    assert(spark.table("dw").where("k = 2").collect().length == 3)
  }

  test("tables whose writes Delta adds to are left to Delta's write") {
    def refused(ddl: String, rowSql: String): Unit = {
      spark.sql("DROP TABLE IF EXISTS dw2")
      spark.sql(ddl)
      val txn = DeltaLog.forTable(spark, TableIdentifier("dw2")).startTransaction()
      assert(DriverWrite.write(spark, txn, txn.metadata.schema, rowsOf(rowSql)).isEmpty, ddl)
    }
    refused("CREATE TABLE dw2 (k INT, p INT) USING delta PARTITIONED BY (p)", "SELECT 1, 2")
    refused("CREATE TABLE dw2 (k INT NOT NULL) USING delta", "SELECT 1")
    refused("CREATE TABLE dw2 (k INT, g INT GENERATED ALWAYS AS (k + 1)) USING delta", "SELECT 1, 2")
    refused("CREATE TABLE dw2 (k INT) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'name')", "SELECT 1")
    spark.sql("DROP TABLE IF EXISTS dw2")
    spark.sql("CREATE TABLE dw2 (k INT) USING delta")
    spark.sql("ALTER TABLE dw2 ADD CONSTRAINT positive CHECK (k > 0)")
    val txn = DeltaLog.forTable(spark, TableIdentifier("dw2")).startTransaction()
    assert(DriverWrite.write(spark, txn, txn.metadata.schema, rowsOf("SELECT -1")).isEmpty)
    // Rows of other columns than the table's.
    val other = DeltaLog.forTable(spark, TableIdentifier("dw")).startTransaction()
    assert(DriverWrite.write(spark, other, new org.apache.spark.sql.types.StructType().add("k", "int"),
        rowsOf("SELECT 1")).isEmpty)
  }

  test("a NULL in a column its plan calls non-null is written readable, and files are checked before commit") {
    spark.sql("DROP TABLE IF EXISTS dw3")
    spark.sql("CREATE TABLE dw3 (c BIGINT, d DECIMAL(20, 2), s STRING) USING delta")
    val log = DeltaLog.forTable(spark, TableIdentifier("dw3"))
    val txn = log.startTransaction()
    // An emptied group's state: the plan says the column is never NULL, the row holds NULL.
    val strict = org.apache.spark.sql.types.StructType(txn.metadata.schema.fields.map(_.copy(nullable = false)))
    val rows = Seq(InternalRow(null, null, null),
      InternalRow(3L, null,
        org.apache.spark.unsafe.types.UTF8String
          .fromString("x")))
    val adds = DriverWrite.write(spark, txn, strict, rows).get
    txn.commit(adds, DeltaOperations.Write(SaveMode.Append))
    for (vectorized <- Seq("true", "false")) {
      spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
      try assert(spark.table("dw3").collect().map(_.toSeq).toSet == Set(Seq(null, null, null), Seq(3L, null, "x")))
      finally spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
    }
    // The footer check refuses a file that does not hold the rows it was given.
    val file = new org.apache.hadoop.fs.Path(log.dataPath, adds.head.path)
    val e = intercept[org.apache.spark.SparkException](
      DriverWrite.verify(spark.sessionState.newHadoopConf(), file, rows.size + 1L))
    assert(e.getCondition == "INTERNAL_ERROR" && e.getMessage.contains("would not read back"))
  }
}
