package io.sparkivm.execution

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.{DeltaLog, Snapshot}
import org.apache.spark.sql.types.{IntegerType, StringType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/**
 * A small table's rows held on the driver by version: read once, found again at that version
 * only, moved to a later version by the net change in between (Post = Pre + D) and back
 * (Pre = Post - D), and refused where a change is not of the rows held or the table is too large.
 */
class SmallTableRowsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("held-table-rows")

  private def snapshot(table: String): Snapshot = DeltaLog.forTable(spark, TableIdentifier(table)).update()

  private def bag(schema: StructType, rows: Seq[InternalRow]): Map[Row, Int] = {
    val toRow = CatalystTypeConverters.createToScalaConverter(schema)
    rows.map(r => toRow(r).asInstanceOf[Row]).groupBy(identity).map { case (r, rs) => r -> rs.size }
  }

  private def tableBag(table: String): Map[Row, Int] =
    spark.table(table).collect().toSeq.groupBy(identity).map { case (r, rs) => r -> rs.size }

  private val schema = StructType(Seq(StructField("k", IntegerType), StructField("s", StringType)))
  private val changeSchema = schema.add(StructField("__ivm_m", IntegerType, nullable = false))

  private def row(k: Int, s: String, sign: Int): InternalRow =
    new GenericInternalRow(Array[Any](k, UTF8String.fromString(s), sign))

  test("read once and held at that version only") {
    spark.sql("DROP TABLE IF EXISTS ht_small")
    spark.sql("CREATE TABLE ht_small (k INT, s STRING) USING delta")
    spark.sql("INSERT INTO ht_small VALUES (1, 'a'), (2, 'b'), (2, 'b'), (3, NULL)")
    val v1 = snapshot("ht_small")
    assert(SmallTableRows.at(spark, v1).isEmpty)
    val rows = SmallTableRows.rows(spark, TableIdentifier("ht_small"), v1)
    assert(rows.map(bag(schema, _)) === Some(tableBag("ht_small")), "duplicates and NULLs as the table has them")
    assert(SmallTableRows.at(spark, v1).map(bag(schema, _)) === rows.map(bag(schema, _)))
    spark.sql("INSERT INTO ht_small VALUES (4, 'd')")
    assert(SmallTableRows.at(spark, snapshot("ht_small")).isEmpty, "a later version is not the one held")
  }

  test("moved forward by the net change, and back") {
    spark.sql("DROP TABLE IF EXISTS ht_moved")
    spark.sql("CREATE TABLE ht_moved (k INT, s STRING) USING delta")
    spark.sql("INSERT INTO ht_moved VALUES (1, 'a'), (2, 'b'), (2, 'b')")
    val pre = snapshot("ht_moved")
    val preRows = SmallTableRows.rows(spark, TableIdentifier("ht_moved"), pre).get
    spark.sql("INSERT INTO ht_moved VALUES (5, 'e'), (2, 'b')")
    spark.sql("DELETE FROM ht_moved WHERE k = 1")
    val post = snapshot("ht_moved")
    val change = Seq(row(5, "e", 1), row(2, "b", 1), row(1, "a", -1))
    val moved = SmallTableRows.advanced(spark, post, pre.version, changeSchema, change)
    assert(moved.map(bag(schema, _)) === Some(tableBag("ht_moved")))
    assert(SmallTableRows.at(spark, post).map(bag(schema, _)) === moved.map(bag(schema, _)), "held at Post")
    val back = SmallTableRows.plus(schema, moved.get, changeSchema, change, -1)
    assert(back.map(bag(schema, _)) === Some(bag(schema, preRows)), "Pre = Post - D")
    // Not from a version that is not held.
    assert(SmallTableRows.advanced(spark, post, pre.version - 1, changeSchema, change).isEmpty)
  }

  test("a change that deletes rows not held is refused") {
    val rows = Seq(row(1, "a", 0), row(2, "b", 0)).map(r => InternalRow(r.getInt(0), r.getUTF8String(1)))
    assert(SmallTableRows.plus(schema, rows, changeSchema, Seq(row(3, "c", -1)), 1).isEmpty)
    assert(SmallTableRows.plus(schema, rows, changeSchema, Seq(row(1, "a", -1), row(1, "a", -1)), 1).isEmpty)
    // A change of other columns is not of these rows either.
    assert(SmallTableRows.plus(schema, rows, schema, Seq(rows.head), 1).isEmpty)
  }

  test("without drops the rows of the given keys") {
    val rows = Seq(InternalRow(1, UTF8String.fromString("a")), InternalRow(2, UTF8String.fromString("b")),
      InternalRow(2, UTF8String.fromString("c")), InternalRow(null, UTF8String.fromString("n")))
    val kept = SmallTableRows.without(schema, rows, Seq(0), Set(InternalRow(2), InternalRow(null)))
    assert(bag(schema, kept) === Map(Row(1, "a") -> 1))
  }

  test("a table with more rows than spark.ivm.heldTables.maxRows is not held") {
    spark.sql("DROP TABLE IF EXISTS ht_large")
    spark.sql("CREATE TABLE ht_large (k INT, s STRING) USING delta")
    spark.sql("INSERT INTO ht_large VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.conf.set("spark.ivm.heldTables.maxRows", "2")
    try {
      val v = snapshot("ht_large")
      assert(!SmallTableRows.holdable(spark, v))
      assert(SmallTableRows.rows(spark, TableIdentifier("ht_large"), v).isEmpty)
      assert(SmallTableRows.at(spark, v).isEmpty)
    } finally spark.conf.unset("spark.ivm.heldTables.maxRows")
  }
}
