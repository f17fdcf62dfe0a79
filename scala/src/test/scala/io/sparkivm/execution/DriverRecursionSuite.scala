package io.sparkivm.execution

import scala.util.Random

import io.sparkivm.TestSpark
import org.apache.spark.SparkException
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnionLoop}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * A recursion stepped on the driver gives the rows Spark's own recursion gives, each as many
 * times, over random graphs (paths multiply along diamonds); where a step outgrows the driver's
 * bound, Spark steps on from the last rows; and Spark's limits on levels and rows fail it with
 * Spark's errors, as they fail Spark's recursion.
 */
class DriverRecursionSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("driver-recursion")

  private val Query =
    "WITH RECURSIVE r(a, b, d) AS (SELECT src, dst, 1 FROM g UNION ALL " +
      "SELECT r.a, g.dst, r.d + g.w FROM r JOIN g ON r.b = g.src WHERE r.d < 9) SELECT a, b, d FROM r"

  /** A generator in the recursive part: each edge leads to its end and one past it. */
  private val WithGenerator =
    "WITH RECURSIVE r(a, b, d) AS (SELECT src, dst, 1 FROM g UNION ALL " +
      "SELECT r.a, x, r.d + 1 FROM r JOIN g ON r.b = g.src LATERAL VIEW explode(array(g.dst, g.dst + 1)) t AS x " +
      "WHERE r.d < 5) SELECT a, b, d FROM r"

  private def graph(seed: Int): Unit = {
    import spark.implicits._
    val rng = new Random(seed)
    // edges from lower to higher nodes: no cycle, so every path is finite
    val edges = Seq.fill(24) {
      val a = rng.nextInt(11)
      (a, a + 1 + rng.nextInt(12 - a), 1 + rng.nextInt(2))
    }
    edges.toDF("src", "dst", "w").createOrReplaceTempView("g")
  }

  private def rows(plan: LogicalPlan): Seq[InternalRow] =
    SparkInternals.dataFrame(spark, plan).queryExecution.toRdd.map(_.copy()).collect().toSeq

  private def unrolled(df: DataFrame, maxRows: Int, limits: DriverRecursion.Limits): LogicalPlan =
    DriverRecursion.unroll(df.queryExecution.optimizedPlan, maxRows, 1000, limits,
      p => RefreshSteps.onDriver(p.output, rows(p)), (p, max) => Some(rows(p)).filter(_.size <= max))

  private def sorted(rows: Seq[Row]): Seq[String] = rows.map(_.toString).sorted

  private val NoLimits = DriverRecursion.Limits(-1, -1)

  test("a recursion stepped on the driver gives Spark's rows, counts included, generators too") {
    for (seed <- 1 to 6; query <- Seq(Query, WithGenerator)) {
      graph(seed)
      val df = spark.sql(query)
      val plan = unrolled(df, 100000, NoLimits)
      assert(!plan.exists(_.isInstanceOf[UnionLoop]), plan)
      assert(sorted(SparkInternals.dataFrame(spark, plan).collect().toSeq) == sorted(df.collect().toSeq),
        s"seed $seed: $query")
    }
  }

  test("a step larger than the driver's bound leaves the rest of the recursion to Spark") {
    graph(7)
    val df = spark.sql(Query)
    val expected = sorted(df.collect().toSeq)
    val seedRows = spark.sql("SELECT * FROM g").count().toInt
    // The seed fits; some later step does not.
    val plan = unrolled(df, seedRows, NoLimits)
    assert(plan.exists(_.isInstanceOf[UnionLoop]), plan)
    assert(sorted(SparkInternals.dataFrame(spark, plan).collect().toSeq) == expected)
  }

  test("Spark's limits on levels and rows fail a recursion stepped on the driver with Spark's errors") {
    graph(3)
    val df = spark.sql(Query)
    val levels = intercept[SparkException](unrolled(df, 100000, DriverRecursion.Limits(2, -1)))
    assert(levels.getCondition == "RECURSION_LEVEL_LIMIT_EXCEEDED", levels)
    val total = intercept[SparkException](unrolled(df, 100000, DriverRecursion.Limits(-1, 30)))
    assert(total.getCondition == "RECURSION_ROW_LIMIT_EXCEEDED", total)
    // Spark's own recursion fails alike.
    TestSpark.withConf(spark, "spark.sql.cteRecursionLevelLimit" -> "2") {
      val spark2 = intercept[Exception](spark.sql(Query).collect())
      assert(spark2.getMessage.contains("RECURSION_LEVEL_LIMIT_EXCEEDED"), spark2)
    }
  }
}
