package io.sparkivm.execution

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.plans.logical.{Join, LocalRelation}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.functions._
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Plans over rows held on the driver are evaluated there exactly as Spark evaluates them
 * (DISTINCT over unions of projections and filters, aggregates of COUNT, SUM, AVG, MIN and MAX
 * with and without GROUP BY, NULLs, decimals and strings included; inner, outer, semi, anti and
 * existence joins, NOT IN's null-aware anti join among them), and plans
 * DriverEval does not know, or that read a table, are left to Spark.
 */
class DriverEvalSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("local-eval")

  private def local(df: DataFrame): DataFrame = {
    val rows = df.collect().toSeq
    val converter = CatalystTypeConverters.createToCatalystConverter(df.schema)
    val relation =
      LocalRelation(DataTypeUtils.toAttributes(df.schema), rows.map(r => converter(r).asInstanceOf[InternalRow]))
    SparkInternals.dataFrame(spark, relation)
  }

  /** Plans evaluated from their analyzed form (a refresh tries that first), by kind of plan. */
  private val fromAnalyzed = scala.collection.mutable.Set[String]()

  /**
   * The rows DriverEval gives for the optimized plan; where it evaluates the analyzed plan too
   * (before Spark's optimizer rewrote it), those must be Spark's rows as well.
   */
  private def evaluated(df: DataFrame, kind: String = ""): Option[Seq[Row]] = {
    val toScala = CatalystTypeConverters.createToScalaConverter(df.schema)
    def of(rows: Seq[InternalRow]) = rows.map(r => toScala(r).asInstanceOf[Row])
    DriverEval.rows(df.queryExecution.analyzed, 1000).map(of).foreach { rows =>
      assert(sorted(rows) == sorted(df.collect().toSeq), df.queryExecution.analyzed)
      fromAnalyzed += kind
    }
    DriverEval.rows(df.queryExecution.optimizedPlan, 1000).map(of)
  }

  private def sorted(rows: Seq[Row]): Seq[String] = rows.map(_.toString).sorted

  /** Each query evaluated here gives Spark's rows, and some of them from the analyzed plan. */
  private def matchSpark(queries: Seq[String], kind: String): Unit = {
    queries.foreach { q =>
      val df = spark.sql(q)
      val got = evaluated(df, kind)
      assert(got.isDefined, df.queryExecution.optimizedPlan)
      assert(sorted(got.get) == sorted(df.collect().toSeq), q)
    }
    assert(fromAnalyzed(kind))
  }

  test("DISTINCT over unions of filtered projections equals Spark's result") {
    import spark.implicits._
    val a = local(Seq((Some(1), "x", 1), (Some(1), "x", -1), (None, "y", 1), (Some(2), null, 1)).toDF("k", "s", "m"))
    val b = local(Seq((Some(1), "x"), (Some(3), "z"), (None, "y")).toDF("k", "s"))
    val plans = Seq(
      a.select($"k", $"s").union(b).distinct(),
      a.where($"m" > 0).select(($"k" + 1).as("k1")).union(b.select($"k")).distinct(),
      a.select($"s").distinct().where($"s".isNotNull),
      a.groupBy($"k").agg($"k".as("again")))
    plans.foreach { df =>
      val got = evaluated(df, "distinct")
      assert(got.isDefined, df.queryExecution.optimizedPlan)
      assert(sorted(got.get) == sorted(df.collect().toSeq), df.queryExecution.optimizedPlan)
    }
    assert(fromAnalyzed("distinct"))
  }

  test("aggregates of declared functions equal Spark's result, NULLs, decimals and no rows included") {
    import spark.implicits._
    val a = local(Seq((Some(1), Some(BigDecimal("2.50")), 1), (Some(1), None, -1), (None, Some(BigDecimal("-7.25")), 1),
        (Some(2), Some(BigDecimal("0.01")), -1), (Some(2), Some(BigDecimal("3.00")), 1)).toDF("k", "v", "m"))
    val none = a.where($"m" > 5)
    val plans = Seq(
      a.groupBy($"k").agg(count($"v"), sum($"v"), avg($"v"), min($"v"), max($"m"), count(lit(1))),
      a.agg(sum($"v" * $"m"), avg($"v"), count($"k"), sum(when($"v".isNotNull, $"m").otherwise(0L))),
      a.agg(expr("count(*) FILTER (WHERE m > 0)"), expr("sum(v) FILTER (WHERE k = 2)")),
      none.agg(sum($"v"), avg($"v"), count(lit(1))), // one row of initial values
      none.groupBy($"k").agg(sum($"v")), // no rows
      a.groupBy($"k").agg((sum($"m") * 2 + avg($"m")).as("e")).where($"e" > 0))
    plans.foreach { df =>
      val got = evaluated(df)
      assert(got.isDefined, df.queryExecution.optimizedPlan)
      assert(sorted(got.get) == sorted(df.collect().toSeq), df.queryExecution.optimizedPlan)
    }
  }

  test("joins of rows held here equal Spark's result: NULL keys, duplicates, null-safe keys, NOT IN") {
    import spark.implicits._
    local(Seq((Some(1), 10), (Some(1), 11), (Some(2), 20), (None, 30), (Some(4), 40)).toDF("k", "v"))
      .createOrReplaceTempView("le_a")
    local(Seq((Some(1), "x"), (Some(1), "y"), (Some(2), "z"), (None, "n"), (Some(3), "w")).toDF("k", "s"))
      .createOrReplaceTempView("le_b")
    local(Seq(Some(1), Some(5)).toDF("k")).createOrReplaceTempView("le_c") // no NULL: NOT IN keeps rows
    val queries = Seq(
      "SELECT a.k, v, s FROM le_a a JOIN le_b b ON a.k = b.k",
      "SELECT a.k, v, s FROM le_a a JOIN le_b b ON a.k <=> b.k",
      "SELECT a.k, v, s FROM le_a a JOIN le_b b ON a.k = b.k AND v > 10",
      "SELECT a.k, v, s FROM le_a a JOIN le_b b ON a.k < b.k",
      "SELECT a.k, v, s FROM le_a a LEFT JOIN le_b b ON a.k = b.k AND s <> 'y'",
      "SELECT * FROM le_a a WHERE EXISTS (SELECT 1 FROM le_b b WHERE b.k = a.k)",
      "SELECT * FROM le_a a WHERE NOT EXISTS (SELECT 1 FROM le_b b WHERE b.k = a.k AND b.s <> 'z')",
      "SELECT * FROM le_a a WHERE EXISTS (SELECT 1 FROM le_b b WHERE b.k = a.k) OR v > 25",
      "SELECT * FROM le_a WHERE k NOT IN (SELECT k FROM le_b)", // a NULL on the right: no rows
      "SELECT * FROM le_a WHERE k NOT IN (SELECT k FROM le_c)", // NULL on the left: not kept
      "SELECT a.k, count(*) AS n, sum(v) AS sv FROM le_a a LEFT JOIN le_b b ON a.k = b.k GROUP BY a.k")
    matchSpark(queries, "join")
  }

  test("a WHERE over joined rows is evaluated as their join's condition, not over every pair") {
    import spark.implicits._
    // 1,500 x 1,000 pairs: more than a join without keys tests; as a hash join on k, a few rows.
    local((1 to 1500).map(i => (i, i % 7)).toDF("k", "v")).createOrReplaceTempView("le_wa")
    local((1 to 1000).map(i => (i * 3, s"s$i")).toDF("k", "s")).createOrReplaceTempView("le_wb")
    val df = spark.sql("SELECT a.k, v, s FROM le_wa a, le_wb b WHERE a.k = b.k AND v > 2")
    assert(df.queryExecution.analyzed.collectFirst { case j: Join => j.condition }.contains(None))
    val got = DriverEval.rows(df.queryExecution.analyzed, 10000)
    assert(got.isDefined)
    val toScala = CatalystTypeConverters.createToScalaConverter(df.schema)
    assert(sorted(got.get.map(r => toScala(r).asInstanceOf[Row])) == sorted(df.collect().toSeq))
  }

  test("generators over rows held here equal Spark's result: outer, positions, structs, empty arrays") {
    import spark.implicits._
    local(Seq((1, Seq(1, 2), Map("a" -> 1)), (2, Seq.empty[Int], Map.empty[String, Int]), (3, null, null))
        .toDF("k", "xs", "m")).createOrReplaceTempView("ge_a")
    val queries = Seq(
      "SELECT k, x FROM ge_a LATERAL VIEW explode(xs) t AS x",
      "SELECT k, x FROM ge_a LATERAL VIEW OUTER explode(xs) t AS x",
      "SELECT k, p, x FROM ge_a LATERAL VIEW posexplode(xs) t AS p, x WHERE x > 1",
      "SELECT k, key, value FROM ge_a LATERAL VIEW explode(m) t AS key, value",
      "SELECT x, count(*) AS n FROM ge_a LATERAL VIEW OUTER explode(xs) t AS x GROUP BY x",
      "SELECT k, a, b FROM ge_a LATERAL VIEW inline(array(named_struct('a', k, 'b', 1), named_struct('a', k + 1, 'b', 2))) t AS a, b")
    matchSpark(queries, "generate")
  }

  test("plans with other aggregate functions or reads of tables are left to Spark") {
    import spark.implicits._
    val a = local(Seq((1, 2), (1, 3)).toDF("k", "v"))
    assert(evaluated(a.groupBy($"k").agg(collect_list($"v"))).isEmpty)
    assert(evaluated(a.groupBy($"k").agg(countDistinct($"v"))).isEmpty)
    assert(evaluated(spark.range(3).toDF("k").union(a.select($"k".cast("long"))).distinct()).isEmpty)
    // Past the row bound the rows are not held here.
    assert(DriverEval.rows(a.distinct().queryExecution.optimizedPlan, 1).isEmpty)
  }
}
