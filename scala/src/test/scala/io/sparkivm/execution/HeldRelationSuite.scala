package io.sparkivm.execution

import io.sparkivm.planner.ProbeSettings
import io.sparkivm.{MappedRows, TestSpark}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, EqualTo, GreaterThan, Literal}
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical.{Filter, Join, JoinHint, LocalRelation, LogicalPlan, Project}
import org.apache.spark.sql.ivm.{HeldRelation, HeldRows, OnDriver, ReadMetrics, SparkInternals}
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Many rows held on the driver are a [[HeldRelation]]: Spark's optimizer leaves its rows alone
 * (a `LocalRelation`'s rows are walked by rule after rule), Spark plans it as a local scan, and
 * the driver evaluates plans over it as over a local relation. Few rows stay a `LocalRelation`.
 */
class HeldRelationSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("held-relation")

  /** `body` in a session that plans held relations, as spark-ivm's extension makes it. */
  private def planning[T](body: => T): T = {
    val before = spark.experimental.extraStrategies
    spark.experimental.extraStrategies = before :+ HeldRelation.Planning
    try body
    finally spark.experimental.extraStrategies = before
  }

  private def rows(plan: LogicalPlan): Set[Row] = SparkInternals.dataFrame(spark, plan).collect().toSet

  test("the optimizer leaves a held relation's rows alone; Spark and the driver read the same rows") {
    planning(heldRowsAlone())
  }

  private def heldRowsAlone(): Unit = {
    val n = HeldRelation.MaxLocalRows * 3
    val data = new MappedRows((0 until n).map(i => InternalRow(i, i % 10)))
    val (k, g) = (AttributeReference("k", IntegerType)(), AttributeReference("g", IntegerType)())
    val held = HeldRelation(Seq(k, g), new HeldRows(data))
    val other = spark.range(20).selectExpr("CAST(id AS INT) AS g2").queryExecution.analyzed
    val plan = Project(Seq(k, g),
      Join(Filter(GreaterThan(k, Literal(n - 100)), held), other, Inner,
        Some(EqualTo(g, other.output.head)), JoinHint.NONE))
    val df = SparkInternals.dataFrame(spark, plan)
    assert(df.queryExecution.optimizedPlan.collectFirst { case h: HeldRelation => h }.isDefined)
    assert(data.mapped == 0, "the optimizer mapped the held rows")
    val local = LocalRelation(Seq(k, g), data.toIndexedSeq)
    val expected = (n - 99 until n).map(i => Row(i, i % 10)).toSet
    assert(df.collect().toSet == expected)
    assert(rows(plan.transformDown { case _: HeldRelation => local }) == expected)
    // On the driver, no job.
    val (evaluated, work) = ReadMetrics.measure(spark)(DriverEval.rows(Filter(GreaterThan(k, Literal(n - 100)),
          held), maxRows = n))
    assert(work.jobs == 0 && evaluated.map(_.map(_.getInt(0)).toSet).contains((n - 99 until n).toSet))
  }

  test("a step's rows on the driver are local when few, held when many, and read back as such") {
    planning(stepRows())
  }

  test("two reads of the same held rows, or of equal copies, are one plan to Spark's canonical comparison") {
    planning {
      val data = (0 until HeldRelation.MaxLocalRows * 2).map(i => InternalRow(i))
      val copy = data.filter(_ => true).map(_.copy())
      val other = data.updated(7, InternalRow(-7))
      def read(rows: Seq[InternalRow]) = HeldRelation.of(spark, Seq(AttributeReference("v", IntegerType)()), rows)
      assert(read(data).isInstanceOf[HeldRelation])
      assert(read(data).canonicalized == read(data).canonicalized, "a repeated step would run again")
      assert(read(data).canonicalized == read(copy).canonicalized, "a repeated filter of a held table too")
      assert(read(data).canonicalized != read(other).canonicalized)
    }
  }

  test("a session that does not plan held relations gets local ones") {
    val steps = new RefreshSteps(spark, ProbeSettings.Off, maxLocalRows = 100000)
    val many =
      steps.materialize(spark.range(HeldRelation.MaxLocalRows + 1).selectExpr("id AS v").queryExecution.analyzed)
    assert(many.collectFirst { case l: LocalRelation => l }.isDefined)
    assert(rows(many).size == HeldRelation.MaxLocalRows + 1)
  }

  private def stepRows(): Unit = {
    val steps = new RefreshSteps(spark, ProbeSettings.Off, maxLocalRows = 100000)
    def materialized(n: Int) = steps.materialize(spark.range(n).selectExpr("id AS v").queryExecution.analyzed)
    val few = materialized(HeldRelation.MaxLocalRows)
    val many = materialized(HeldRelation.MaxLocalRows + 1)
    assert(few.collectFirst { case l: LocalRelation => l }.isDefined)
    assert(many.collectFirst { case h: HeldRelation => h }.isDefined)
    assert(RefreshSteps.rowsOnDriver(many).map(_.size).contains(HeldRelation.MaxLocalRows + 1))
    assert(rows(many).size == HeldRelation.MaxLocalRows + 1)
    assert(many.collectLeaves().forall(OnDriver.unapply(_).isDefined))
  }
}
