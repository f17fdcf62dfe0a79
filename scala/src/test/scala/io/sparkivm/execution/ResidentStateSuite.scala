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
class ResidentStateSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("resident")

  private def row(k: Int, s: String, w: Long): InternalRow = InternalRow(k, UTF8String.fromString(s), w)

  test("entries answer for their stamp only and move on by adding changes") {
    import spark.implicits._
    val base = ResidentState.rows(Seq((1, "a", 1L), (2, "b", 1L), (3, "c", 1L)).toDF("a0", "b0", "w"), "a0", 4)
    val owner = ResidentState.Owner(TableIdentifier("v", Some("db")), "instance-1")
    val name = owner.name(0, "a")
    ResidentState.put(name, ResidentState.Entry(owner.stamp("t@1"), base, Vector.empty))
    assert(ResidentState.get(spark, name, owner.stamp("t@1")).isDefined)
    assert(ResidentState.get(spark, name, owner.stamp("t@2")).isEmpty)
    // Another instance of a view under the same name never reads this one's rows.
    assert(ResidentState.get(spark, name, ResidentState.Owner(owner.backing, "instance-2").stamp("t@1")).isEmpty)

    val moved = ResidentState.get(spark, name, owner.stamp("t@1")).get
      .plus(owner.stamp("t@2"), Seq(row(2, "b", -1L), row(4, "d", 1L))).get
    ResidentState.put(name, moved)
    val rows = ResidentState.get(spark, name, owner.stamp("t@2")).get.frame(spark, Some(Seq(2, 4)))
      .where("a0 IN (2, 4)").collect().map(r => (r.getInt(0), r.getString(1), r.getLong(2))).sorted.toSeq
    assert(rows == Seq((2, "b", -1L), (2, "b", 1L), (4, "d", 1L)))
    // Past the bound on appended rows the entry is not moved on (the next refresh reads the tables).
    assert(moved.plus(owner.stamp("t@3"), Seq.fill(ResidentState.MaxAppendedRows)(row(5, "e", 1L))).isEmpty)
  }

  test("degrees of an entry add the rows it holds on the driver to the kept rows' sums") {
    import spark.implicits._
    val kept =
      ResidentState.rows(Seq((1, "a", 1L), (1, "b", 1L), (2, "c", 1L), (3, "d", 1L)).toDF("a0", "b0", "w"), "a0", 4)
    val entry = ResidentState.Entry("v", kept, Vector(row(1, "a", -1L), row(4, "e", 1L), row(5, "f", 1L)))
    // Key 1 loses a row, 4 exists only on the driver, 6 nowhere, 5 is not asked for.
    assert(entry.sums(spark, Seq(1, 2, 4, 6), "w").get == Map[Any, Long](1 -> 1L, 2 -> 1L, 4 -> 1L))
    // Rows laid out but not indexed (a key type the JVM compares otherwise than Spark) have none.
    val doubles = ResidentState.rows(Seq((1.0, 1L)).toDF("a0", "w"), "a0", 2)
    assert(!doubles.indexed && ResidentState.Entry("v", doubles, Vector.empty).sums(spark, Seq(1.0), "w").isEmpty)
    Seq(kept, doubles).foreach(_.release())
  }

  test("dropping a view drops its entries and keeps those of a view whose name it prefixes") {
    import spark.implicits._
    val rows = ResidentState.rows(Seq((1, "a", 1L)).toDF("a0", "b0", "w"), "a0", 2)
    val tri = ResidentState.Owner(TableIdentifier("tri", Some("db")), "i")
    val tri2 = ResidentState.Owner(TableIdentifier("tri2", Some("db")), "j")
    Seq(tri, tri2).foreach(o => ResidentState.put(o.name(0, "b"), ResidentState.Entry(o.stamp("t@1"), rows, Vector.empty)))
    ResidentState.removeView(tri.backing)
    assert(ResidentState.get(spark, tri.name(0, "b"), tri.stamp("t@1")).isEmpty)
    assert(ResidentState.get(spark, tri2.name(0, "b"), tri2.stamp("t@1")).isDefined)
    ResidentState.removeView(tri2.backing)
  }
}
