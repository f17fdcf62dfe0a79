package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.changes.{DriverChange, PinnedSource}
import org.apache.spark.sql.catalyst.expressions.{BoundReference, GreaterThan, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{IntegerType, StringType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/**
 * A table's rows kept in the executors' memory by a key column: not read for the first refresh
 * of an application that asks; read once at Post by the second; then looked up in place at
 * Post, or at Pre before the change moves them; and the same rows a scan of the table at that
 * version finds, for the keys asked, NULL keys included.
 */
class KeyedTableRowsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("resident-table-rows")

  private val schema = StructType(Seq(StructField("k", IntegerType), StructField("s", StringType)))
  private val changeSchema = schema.add(StructField("__ivm_m", IntegerType, nullable = false))

  private def scan(table: String, version: Long, keys: Set[Any]): Seq[Row] =
    spark.sql(s"SELECT k, s FROM $table VERSION AS OF $version").collect().toSeq
      .filter(r => keys(if (r.isNullAt(0)) null else r.getInt(0))).sortBy(_.toString)

  private def external(rows: Seq[InternalRow]): Seq[Row] = {
    val toRow = CatalystTypeConverters.createToScalaConverter(schema)
    rows.map(r => toRow(r).asInstanceOf[Row]).sortBy(_.toString)
  }

  private def withBuildsInRefresh[T](body: => T): T = {
    spark.conf.set("spark.ivm.state.buildInBackground", "false")
    try body
    finally spark.conf.unset("spark.ivm.state.buildInBackground")
  }

  test("kept from the second ask, read in place at Post and at Pre, NULL keys included") {
    withBuildsInRefresh {
      spark.sql("DROP TABLE IF EXISTS rt_t")
      spark.sql("CREATE TABLE rt_t (k INT, s STRING) USING delta")
      spark.sql("INSERT INTO rt_t VALUES (1, 'a'), (1, 'b'), (2, 'c'), (NULL, 'n'), (3, 'd')")
      val log = DeltaLog.forTable(spark, TableIdentifier("rt_t"))
      val pre = log.update().version
      spark.sql("INSERT INTO rt_t VALUES (2, 'e'), (4, 'f')")
      spark.sql("DELETE FROM rt_t WHERE s = 'a'")
      val post = log.update()
      val change = DriverChange(changeSchema,
        IndexedSeq(
          InternalRow(2, UTF8String.fromString("e"), 1), InternalRow(4, UTF8String.fromString("f"), 1),
          InternalRow(1, UTF8String.fromString("a"), -1)))
      val source = PinnedSource(TableIdentifier("rt_t"), post.metadata.id, post.version, schema)(() => 1L << 20)
      val all: LogicalPlan = {
        val p = SparkInternals.analyzed(spark.table("rt_t"))
        Project(p.output, p)
      }
      val keys = Set[Any](1, 2, null)
      def read(atPost: Boolean, refresh: String) = KeyedTableRows.read(spark, TableIdentifier("rt_t"), "k",
        schema.fields.toSeq.map(f => f.copy(name = f.name.toLowerCase)), keys, source, pre, atPost, Some(change),
        all, refresh)
      assert(read(atPost = true, "first").isEmpty, "the first refresh that asks does not read the table")
      val atPost = read(atPost = true, "second")
      assert(atPost.map(external) === Some(scan("rt_t", post.version, keys)))
      assert(read(atPost = true, "third").map(external) === atPost.map(external), "looked up in place")
      // Not kept at Pre: the entry is at Post.
      assert(read(atPost = false, "third").isEmpty)
      // Rows where a filter holds, from the kept rows, without a scan.
      val where = GreaterThan(BoundReference(0, IntegerType, nullable = true), Literal(1))
      val filtered = KeyedTableRows.where(spark, TableIdentifier("rt_t"),
        schema.fields.toSeq.map(f => f.copy(name = f.name.toLowerCase)), source, pre, Some(change), where)
      assert(filtered.map(external) === Some(spark.sql(s"SELECT k, s FROM rt_t VERSION AS OF ${post.version} " +
          "WHERE k > 1").collect().toSeq.sortBy(_.toString)))
    }
  }
}
