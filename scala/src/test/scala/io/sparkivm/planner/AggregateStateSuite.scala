package io.sparkivm.planner

import scala.util.Random

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, EqualNullSafe, Expression, NamedExpression
}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Join, JoinHint, LocalRelation, LogicalPlan, Project}
import org.apache.spark.sql.catalyst.plans.{FullOuter, LeftOuter}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.scalatest.funsuite.AnyFunSuite

/**
 * The invariant of every aggregate state (counting IVM's running aggregates): the state of Pre
 * merged with the state of a signed change, recomputed where the state asks, finishes to the
 * aggregate of Post (Pre plus the change), per group, NULLs and FILTER clauses included.
 */
class AggregateStateSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("aggregate-state")

  private val aggregates = Seq("count(*)", "count(x)", "sum(x)", "avg(x)", "min(x)", "max(x)",
    "sum(y)", "avg(y)", "min(s)", "max(s)", "sum(x) FILTER (WHERE y > 0)", "max(x) FILTER (WHERE s = 'b')",
    "count(DISTINCT x)")

  private def value(rnd: Random, v: => Any): Any = if (rnd.nextInt(5) == 0) null else v

  /** Rows (g, x, y, s); a change is such rows with a sign each. */
  private def rows(rnd: Random, n: Int): Seq[Seq[Any]] = Seq.fill(n)(Seq(rnd.nextInt(3),
      value(rnd, rnd.nextInt(7) - 2), value(rnd, rnd.nextInt(9) * 0.5 - 1.0),
      value(rnd, org.apache.spark.unsafe.types.UTF8String.fromString(Seq("a", "b", "c")(rnd.nextInt(3))))))

  private def run(plan: LogicalPlan): Map[Any, Seq[Any]] =
    SparkInternals.dataFrame(spark, plan).collect().map(r => r.get(0) -> r.toSeq.tail).toMap

  test("old state + change (+ recompute) finishes to the aggregate of Post, for every state kind") {
    val rnd = new Random(42)
    (1 to 3).foreach { round =>
      val pre = rows(rnd, 4 + rnd.nextInt(10))
      // Deletes of Pre rows and inserts of new ones; a row may be deleted and inserted again.
      val deleted = pre.filter(_ => rnd.nextInt(3) == 0)
      val inserted = rows(rnd, rnd.nextInt(6)) ++ deleted.filter(_ => rnd.nextBoolean())
      val post = deleted.foldLeft(pre)((left, r) => left.diff(Seq(r))) ++ inserted
      val change = deleted.map(_ :+ -1) ++ inserted.map(_ :+ 1)
      aggregates.foreach(a => check(a, pre, change, post, round))
    }
  }

  test("onNoRows is what a global aggregate of Spark's gives over no rows") {
    spark.createDataFrame(spark.sparkContext.emptyRDD[org.apache.spark.sql.Row],
      org.apache.spark.sql.types.StructType.fromDDL("g INT, x INT, y DOUBLE, s STRING"))
      .createOrReplaceTempView("no_rows")
    // Declared defaults (COUNT), functions the analyzer keeps unreplaced (count_if, regr_count,
    // bool_or), declarative and imperative ones without a default, and typed buffers.
    val functions = aggregates ++ Seq("count_if(x > 1)", "regr_count(x, y)", "bool_or(x > 0)", "every(x > 0)",
      "approx_count_distinct(s)", "collect_list(x)", "collect_set(s)", "stddev_samp(y)", "var_pop(x)",
      "percentile(x, 0.5)", "bit_or(x)", "max_by(s, x)", "count(DISTINCT s, x)", "sum(DISTINCT x)",
      "try_sum(x)", "try_avg(y)", "histogram_numeric(x, 2)", "listagg(s)", "kurtosis(y)")
    functions.foreach { f =>
      val df = spark.sql(s"SELECT $f FROM no_rows")
      val ae = SparkInternals.analyzed(df).collectFirst { case a: Aggregate => a }.get
        .aggregateExpressions.head.collectFirst { case a: AggregateExpression => a }.get
      val value = AggregateState.onNoRows(ae.aggregateFunction)
      assert(value.dataType == ae.dataType, f)
      val expected = df.collect().head.get(0)
      val got = SparkInternals.dataFrame(spark,
        Project(Seq(Alias(value, "v")()),
          LocalRelation.fromExternalRows(Nil, Seq(org.apache.spark.sql.Row())))).collect().head.get(0)
      assert(got == expected, s"$f over no rows: $got, Spark gives $expected")
    }
  }

  private def check(aggregate: String, pre: Seq[Seq[Any]], change: Seq[Seq[Any]], post: Seq[Seq[Any]],
      round: Int): Unit = {
    // The aggregate as Spark analyzes it, over the attributes of a relation of ours.
    spark.createDataFrame(spark.sparkContext.emptyRDD[org.apache.spark.sql.Row],
      org.apache.spark.sql.types.StructType.fromDDL("g INT, x INT, y DOUBLE, s STRING"))
      .createOrReplaceTempView("agg_rel")
    val analyzed = SparkInternals.analyzed(spark.sql(s"SELECT g, $aggregate FROM agg_rel GROUP BY g"))
    val agg = analyzed.collectFirst { case a: Aggregate => a }.get
    val input: Seq[Attribute] = agg.child.output
    val expr = agg.aggregateExpressions(1).collectFirst { case e: AggregateExpression => e }.get
    val state = AggregateState(expr, 0)
    val m = AttributeReference("__ivm_m", IntegerType)()
    val g = input.head
    def relation(attrs: Seq[Attribute], data: Seq[Seq[Any]]) =
      LocalRelation(attrs, data.map(r => InternalRow.fromSeq(r)))
    def named(es: Seq[Expression], prefix: String): Seq[NamedExpression] =
      es.zipWithIndex.map { case (e, i) => Alias(e, s"$prefix$i")() }

    val oldAgg = Aggregate(Seq(g), g +: named(state.full(), "old"), relation(input, pre))
    val dAgg = Aggregate(Seq(g), Alias(g, "dg")() +: named(state.deltas(m), "d"), relation(input :+ m, change))
    val oldAttrs = oldAgg.output.tail
    val dAttrs = dAgg.output.tail
    val dg = dAgg.output.head
    // The changed groups: every group of the change, with its old state if it had one.
    var joined: LogicalPlan = Join(dAgg, oldAgg, LeftOuter, Some(EqualNullSafe(dg, oldAgg.output.head)), JoinHint.NONE)
    val rec = state.recompute.map { r =>
      val recAgg = Aggregate(Seq(g), Seq(Alias(g, "rg")(), Alias(r, "rec")()), relation(input, post))
      joined = Join(joined, recAgg, FullOuter, Some(EqualNullSafe(dg, recAgg.output.head)), JoinHint.NONE)
      recAgg.output(1)
    }
    val merged = named(state.merge(oldAttrs, dAttrs, rec), "new")
    val withState = Project(dg +: merged, joined)
    val result = Project(Seq(withState.output.head, Alias(state.finish(withState.output.tail), "v")()), withState)
    val expected = run(Aggregate(Seq(g), Seq(g, Alias(expr, "v")()), relation(input, post)))
    val changedGroups = change.map(_.head).toSet
    val got = run(result).filter { case (k, _) => k != null }
    changedGroups.foreach { k =>
      // A group left with no rows has no Post value; its merged state finishes to the empty value.
      val want = expected.get(k).map(_.head)
      val have = got.get(k).map(_.head)
      want match {
        case Some(w) => assert(
            have.contains(w) || (w.isInstanceOf[Double] && have.exists(h =>
              h != null && math.abs(h.asInstanceOf[Double] - w.asInstanceOf[Double]) < 1e-9)),
            s"round $round, $aggregate, group $k: $have, recomputation $w")
        case None => assert(state.isInstanceOf[RecomputedState] || have.forall(v => v == null || v == 0L),
            s"round $round, $aggregate, emptied group $k: $have")
      }
    }
  }
}
