package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.planner.ProbeSettings
import org.apache.spark.sql.catalyst.expressions.EqualTo
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical.{Join, JoinHint, LogicalPlan}
import org.apache.spark.sql.ivm.{ReadMetrics, SparkInternals}
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * RefreshSteps runs a step once per refresh: a step equal to an earlier one but for its
 * attributes' ids (each occurrence of a CTE read twice) reads the earlier result, under ids of
 * its own, whether the rows are on the driver or in a checkpoint; other steps, and steps that
 * are not deterministic, run.
 */
class RefreshStepsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("refresh-steps")

  private def grouped(mod: Int): LogicalPlan =
    spark.range(1000).selectExpr(s"id % $mod AS k", "id AS v").groupBy("k").sum("v").queryExecution.analyzed

  private def rows(plan: LogicalPlan): Set[Row] = SparkInternals.dataFrame(spark, plan).collect().toSet

  for ((where, maxLocalRows) <- Seq("on the driver" -> 1000, "in a checkpoint" -> 0)) {
    test(s"a step repeated under other attribute ids runs once, its rows $where") {
      val steps = new RefreshSteps(spark, ProbeSettings.Off, maxLocalRows)
      val (first, second) = (grouped(7), grouped(7))
      assert(first.output.map(_.exprId) != second.output.map(_.exprId))
      val (once, ran) = ReadMetrics.measure(spark)(steps.materialize(first))
      assert(ran.jobs >= 1)
      val (again, repeated) = ReadMetrics.measure(spark)(steps.materialize(second))
      assert(repeated.jobs == 0, "the repeated step read the first one's rows")
      assert(again.output.map(_.exprId) == second.output.map(_.exprId))
      assert(rows(again) == rows(second) && rows(once) == rows(first) && rows(first).size == 7)
      // Both uses in one plan: a self-join of the result, each side under its own attributes.
      val joined = Join(once, again, Inner, Some(EqualTo(once.output.head, again.output.head)), JoinHint.NONE)
      assert(SparkInternals.dataFrame(spark, joined).count() == 7)

      val (_, other) = ReadMetrics.measure(spark)(steps.materialize(grouped(5)))
      assert(other.jobs >= 1, "a different step runs")
      def random = spark.range(10).selectExpr("rand() AS r").queryExecution.analyzed
      val r1 = steps.materialize(random)
      val r2 = steps.materialize(random)
      assert(rows(r1) != rows(r2), "a step that is not deterministic runs each time")
    }
  }
}
