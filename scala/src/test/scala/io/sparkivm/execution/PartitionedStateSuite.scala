package io.sparkivm.execution

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * IVM^eps state kept between refreshes: an entry answers only for the exact versions it is
 * stamped with, moves on by adding a change, stops holding appended rows past its bound, and
 * dropping a view drops its entries and no other view's.
 */
class PartitionedStateSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("resident")

  private def row(k: Int, s: String, w: Long): InternalRow = InternalRow(k, UTF8String.fromString(s), w)

  test("entries answer for their stamp only and move on by adding changes") {
    import spark.implicits._
    val base = PartitionedState.rows(Seq((1, "a", 1L), (2, "b", 1L), (3, "c", 1L)).toDF("a0", "b0", "w"), "a0", 4)
    val owner = PartitionedState.Owner(TableIdentifier("v", Some("db")), "instance-1")
    val name = owner.name(0, "a")
    PartitionedState.put(name, PartitionedState.Entry(owner.stamp("t@1"), base, Vector.empty))
    assert(PartitionedState.get(spark, name, owner.stamp("t@1")).isDefined)
    assert(PartitionedState.get(spark, name, owner.stamp("t@2")).isEmpty)
    // Another instance of a view under the same name never reads this one's rows.
    assert(PartitionedState.get(spark, name, PartitionedState.Owner(owner.backing, "instance-2").stamp("t@1")).isEmpty)

    val moved = PartitionedState.get(spark, name, owner.stamp("t@1")).get
      .plus(owner.stamp("t@2"), Seq(row(2, "b", -1L), row(4, "d", 1L))).get
    PartitionedState.put(name, moved)
    val rows = PartitionedState.get(spark, name, owner.stamp("t@2")).get.frame(spark, Some(Seq(2, 4)))
      .where("a0 IN (2, 4)").collect().map(r => (r.getInt(0), r.getString(1), r.getLong(2))).sorted.toSeq
    assert(rows == Seq((2, "b", -1L), (2, "b", 1L), (4, "d", 1L)))
    // Past the bound on appended rows the entry is not moved on (the next refresh reads the tables).
    assert(moved.plus(owner.stamp("t@3"), Seq.fill(PartitionedState.MaxAppendedRows)(row(5, "e", 1L))).isEmpty)
  }

  test("degrees of an entry add the rows it holds on the driver to the kept rows' sums") {
    import spark.implicits._
    val kept =
      PartitionedState.rows(Seq((1, "a", 1L), (1, "b", 1L), (2, "c", 1L), (3, "d", 1L)).toDF("a0", "b0", "w"), "a0", 4)
    val entry = PartitionedState.Entry("v", kept, Vector(row(1, "a", -1L), row(4, "e", 1L), row(5, "f", 1L)))
    // Key 1 loses a row, 4 exists only on the driver, 6 nowhere, 5 is not asked for.
    assert(entry.sums(spark, Seq(1, 2, 4, 6), "w").get == Map[Any, Long](1 -> 1L, 2 -> 1L, 4 -> 1L))
    // Rows laid out but not indexed (a key type the JVM compares otherwise than Spark) have none.
    val doubles = PartitionedState.rows(Seq((1.0, 1L)).toDF("a0", "w"), "a0", 2)
    assert(!doubles.indexed && PartitionedState.Entry("v", doubles, Vector.empty).sums(spark, Seq(1.0), "w").isEmpty)
    Seq(kept, doubles).foreach(_.release())
  }

  test("dropping a view drops its entries and keeps those of a view whose name it prefixes") {
    import spark.implicits._
    val rows = PartitionedState.rows(Seq((1, "a", 1L)).toDF("a0", "b0", "w"), "a0", 2)
    val tri = PartitionedState.Owner(TableIdentifier("tri", Some("db")), "i")
    val tri2 = PartitionedState.Owner(TableIdentifier("tri2", Some("db")), "j")
    Seq(tri, tri2).foreach(o =>
      PartitionedState.put(o.name(0, "b"), PartitionedState.Entry(o.stamp("t@1"), rows, Vector.empty)))
    PartitionedState.removeView(tri.backing)
    assert(PartitionedState.get(spark, tri.name(0, "b"), tri.stamp("t@1")).isEmpty)
    assert(PartitionedState.get(spark, tri2.name(0, "b"), tri2.stamp("t@1")).isDefined)
    PartitionedState.removeView(tri2.backing)
  }
}
