package io.sparkivm.execution

import scala.util.Random

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, BindReferences, GenericInternalRow}
import org.apache.spark.sql.types.{DataType, DoubleType, IntegerType, StringType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/**
 * The test a refresh marks a changed row by: "at or above the lowest marked row" must be exactly
 * "not after it" in the view's sort order, for every direction and NULL placement, over NULLs,
 * NaN and ties, or the marks stop being a prefix of the view's rows.
 */
class TopMarksSuite extends AnyFunSuite {
  private val columns = Seq(
    AttributeReference("i", IntegerType)(), AttributeReference("s", StringType)(), AttributeReference("d", DoubleType)())

  private def value(rng: Random, t: DataType): Any =
    if (rng.nextInt(5) == 0) null
    else t match {
      case IntegerType => rng.nextInt(3)
      case StringType => UTF8String.fromString(Seq("a", "b", "ab")(rng.nextInt(3)))
      case DoubleType => Seq(-0.5, 1.5, Double.NaN)(rng.nextInt(3))
    }

  test("at or above a row is not after it in the order, in every direction and NULL placement") {
    val rng = new Random(20261201)
    for (_ <- 1 to 40) {
      val used = rng.shuffle(columns).take(1 + rng.nextInt(3))
      val order = new TopMarks.ViewOrder(used.map(a => (a.name, rng.nextBoolean(), rng.nextBoolean())))
      val ordering = order.ordering(columns)
      val rows = Seq.fill(30)(new GenericInternalRow(columns.map(a => value(rng, a.dataType)).toArray): InternalRow)
      for (bound <- rows.take(6); row <- rows) {
        val predicate = BindReferences.bindReference(order.atOrAbove(
            org.apache.spark.sql.catalyst.plans.logical.LocalRelation(columns), order.values(columns, bound)), columns)
        val expected = ordering.compare(row, bound) <= 0
        assert(predicate.eval(row) == expected, s"${used.map(_.name)} row $row bound $bound")
      }
    }
  }
}
