package io.sparkivm.epsilon

import scala.util.Random

import io.sparkivm.TestSpark
import org.apache.spark.sql.ivm.ReadMetrics
import org.apache.spark.sql.types.{IntegerType, LongType, StringType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * IVM^eps's weighted relations: every operation on rows held on the driver gives the rows (with
 * their weights) that the same operation gives on a DataFrame, over random relations with NULLs
 * and negative weights, and it runs nothing.
 */
class WeightedDeltaSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("weighted-delta")

  private val schema = StructType(Seq(StructField("a0", IntegerType), StructField("b0", StringType),
      StructField("w", LongType, nullable = false)))

  private def relation(rnd: Random, n: Int): Seq[Row] = Seq.fill(n) {
    Row(if (rnd.nextInt(6) == 0) null else rnd.nextInt(5),
      if (rnd.nextInt(6) == 0) null else s"v${rnd.nextInt(4)}", (rnd.nextInt(5) - 2).toLong)
  }

  /** The same rows on the driver and as a DataFrame. */
  private def both(rows: Seq[Row]): (WeightedDelta, WeightedDelta) =
    (WeightedDelta.onDriver(spark, schema, rows),
      WeightedDelta.distributed(spark.createDataFrame(
          spark.sparkContext.parallelize(rows, 2), schema)))

  private def bag(d: WeightedDelta): Map[Seq[Any], Int] =
    d.all.map(r => d.schema.fieldNames.toSeq.map(n => r.get(r.fieldIndex(n)))).groupBy(identity).map {
      case (k, v) => k -> v.size
    }

  private def same(onDriver: WeightedDelta, distributed: WeightedDelta): Unit = {
    assert(onDriver.isOnDriver && !distributed.isOnDriver)
    assert(onDriver.schema.fieldNames.toSeq == distributed.schema.fieldNames.toSeq)
    assert(bag(onDriver) == bag(distributed))
  }

  test("each operation on rows on the driver equals it on a DataFrame") {
    val rnd = new Random(7)
    (1 to 8).foreach { _ =>
      val (l, r) = both(relation(rnd, rnd.nextInt(12)))
      val (l2, r2) = both(relation(rnd, rnd.nextInt(12)))
      same(l.negated, r.negated)
      same(l.unionByName(l2), r.unionByName(r2))
      same(l.select(Seq("w", "a0")), r.select(Seq("w", "a0")))
      val wider = schema.add(StructField("c0", IntegerType))
      same(l.complete(wider), r.complete(wider))
      same(l.copyColumn("a0", "c0"), r.copyColumn("a0", "c0"))
      same(l.copyColumn("a0", "w"), r.copyColumn("a0", "w"))
      assert(l.weight == r.weight)
      assert(l.count == r.count && l.isEmpty == r.isEmpty)
      assert(l.none.isEmpty && l.none.schema == l.schema)
    }
  }

  test("operations on rows on the driver run no Spark job") {
    val (l, _) = both(relation(new Random(3), 10))
    val (_, work) = ReadMetrics.measure(spark) {
      val d = l.negated.unionByName(l).select(Seq("a0", "w")).copyColumn("a0", "c0")
        .complete(schema.add(StructField("c0", IntegerType))).where("a0", _ != 2)
      (d.count, d.weight, d.isEmpty)
    }
    assert(work.jobs == 0)
  }

  test("a union with a DataFrame is a DataFrame; negation twice is the identity") {
    val rnd = new Random(11)
    val (l, r) = both(relation(rnd, 6))
    assert(!l.unionByName(r).isOnDriver && l.unionByName(r).count == 12)
    assert(bag(l.negated.negated) == bag(l))
    assert(l.negated.weight == -l.weight)
  }

  test("where keeps the rows whose value is accepted, never a NULL, and only for rows on the driver") {
    val rows = Seq(Row(1, "x", 1L), Row(null, "y", 2L), Row(3, null, -1L), Row(1, "z", 4L))
    val (l, r) = both(rows)
    assert(l.where("a0", _ == 1).all.map(_.getLong(2)) == Seq(1L, 4L))
    assert(l.where("a0", _ => true).count == 3)
    assert(l.where("b0", _ => true).count == 3)
    intercept[IllegalArgumentException](r.where("a0", _ == 1))
  }
}
