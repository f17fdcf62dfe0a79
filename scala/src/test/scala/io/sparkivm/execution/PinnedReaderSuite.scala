package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.changes.{DeltaSources, DriverChange}
import io.sparkivm.planner.SourceLeaf
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{IntegerType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Each occurrence of a table read at the versions a refresh pinned: Pre at the version the view
 * consumed, Post at the pinned one, the net change with its signs, and PreDel (Post with the
 * deleted rows): each the rows of a scan of the table at that version, with the occurrence's
 * own attributes. Pre of a small table is derived from Post and the change (Pre = Post - D).
 */
class PinnedReaderSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("pinned-reader")

  private def rows(plan: LogicalPlan): Seq[Row] =
    SparkInternals.dataFrame(spark, plan).collect().toSeq.sortBy(_.toString)

  private def scan(table: String, version: Long): Seq[Row] =
    spark.sql(s"SELECT * FROM $table VERSION AS OF $version").collect().toSeq.sortBy(_.toString)

  test("Pre, Post, the change and PreDel are the table's rows at the pinned versions") {
    spark.sql("DROP TABLE IF EXISTS pr_t")
    spark.sql("CREATE TABLE pr_t (k INT, v INT) USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO pr_t VALUES (1, 10), (2, 20), (2, 20), (3, 30)")
    val consumed = DeltaSources.current(spark, TableIdentifier("pr_t"))._2
    spark.sql("INSERT INTO pr_t VALUES (4, 40)")
    spark.sql("DELETE FROM pr_t WHERE k = 1")
    val pinned = DeltaSources.pin(spark, TableIdentifier("pr_t", Some("default")), requireChangeFeed = true,
      autoEnable = false)
    // Later commits are not read: the refresh reads what it pinned.
    spark.sql("INSERT INTO pr_t VALUES (5, 50)")
    val leaf = SparkInternals.analyzed(spark.table("pr_t")).collectFirst { case SourceLeaf(l) => l }.get
    val schema = StructType(Seq(StructField("k", IntegerType), StructField("v", IntegerType),
        StructField(DeltaSources.Multiplicity, IntegerType, nullable = false)))
    val change = DriverChange(schema, IndexedSeq(InternalRow(4, 40, 1), InternalRow(1, 10, -1)))
    val reader = new PinnedReader(spark, Map(leaf.name -> consumed), Map(leaf.name -> pinned), "pr_view",
      changes = Map(leaf.name -> change))

    val post = reader.post(leaf)
    assert(post.output.map(_.exprId) == leaf.output.map(_.exprId), "the occurrence's own attributes")
    assert(rows(post) == scan("pr_t", pinned.version))
    assert(rows(reader.pre(leaf)) == scan("pr_t", consumed))
    assert(rows(reader.delta(leaf).get) == Seq(Row(1, 10, -1), Row(4, 40, 1)))
    assert(rows(reader.preDel(leaf)) == (scan("pr_t", pinned.version) :+ Row(1, 10)).sortBy(_.toString))
    assert(reader.versions(leaf).contains((pinned.tableId, consumed, pinned.version)))
    assert(reader.changeCounts() == Map(leaf.name -> 2L))
    // A table the reader did not pin (a view refreshed in full only) is read as it is.
    val other = leaf.copy(table = TableIdentifier("pr_other", Some("default"), Some("spark_catalog")))
    assert(reader.post(other) eq other.plan)
  }
}
