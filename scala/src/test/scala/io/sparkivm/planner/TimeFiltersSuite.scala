package io.sparkivm.planner

import io.sparkivm.TestSpark
import org.apache.spark.sql.catalyst.expressions.{And, Attribute, AttributeReference, Expression, LessThan, Literal, Not}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Filter, Join, LogicalPlan}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.execution.FileSourceScanExec
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Time filters ([[TimeFilters]]): bound to an instant where a refresh can move them (filters,
 * an inner join's condition), and the clock's delta, Q(Pre, t1) - Q(Pre, t0), as branches
 * that sum to that difference and each read only the files of the crossed range.
 */
class TimeFiltersSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("time-filters")
  private val hour = 3600L * 1000 * 1000
  private val start = DateTimeUtils.instantToMicros(java.time.Instant.parse("2026-11-01T00:00:00Z"))

  override def beforeAll(): Unit = {
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.sql("CREATE TABLE tf_e (id INT, ts TIMESTAMP, v INT) USING delta")
    spark.sql("CREATE TABLE tf_d (id INT, name STRING) USING delta")
    // Ten files, one a day, 24 rows each (one an hour); the first also holds a row without a time.
    (0 until 10).foreach { day =>
      spark.sql(s"INSERT INTO tf_e SELECT /*+ COALESCE(1) */ * FROM (SELECT CAST(id % 3 AS INT), " +
        s"TIMESTAMP '2026-11-01 00:00:00' + make_interval(0, 0, 0, $day, CAST(id AS INT)), CAST(id AS INT) " +
        s"FROM range(24)${if (day == 0) " UNION ALL SELECT 1, NULL, 8" else ""})")
    }
    spark.sql("INSERT INTO tf_d VALUES (0, 'a'), (1, 'b'), (2, 'c')")
  }

  /** Pre and Post are the table as it is; nothing changed but the clock. */
  private object Unchanged extends LeafReader {
    def pre(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def post(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def preDel(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def delta(leaf: SourceLeaf): Option[LogicalPlan] = None
  }

  private val m: Attribute = AttributeReference("__ivm_m", IntegerType, nullable = false)()

  private val query = "SELECT d.name, e.v, e.ts FROM tf_e e JOIN tf_d d ON e.id = d.id AND " +
    "e.ts >= current_timestamp() - INTERVAL 36 HOURS WHERE e.ts < now() AND e.v % 2 = 0"

  private def bound(at: Long): LogicalPlan = TimeFilters.bind(SparkInternals.analyzed(spark.sql(query)), at)

  private def rows(plan: LogicalPlan): Seq[Row] = SparkInternals.dataFrame(spark, plan).collect().toSeq

  /** The multiset a signed set of rows sums to: row -> count, zeros left out. */
  private def summed(signed: Seq[(Row, Int)]): Map[Row, Int] =
    signed.groupMapReduce(_._1)(_._2)(_ + _).filter(_._2 != 0)

  test("an inner join's time condition becomes a filter; every time function is bound to the instant") {
    val plan = bound(start)
    assert(plan.collectFirst { case j: Join => j.condition.exists(TimeFilters.readsTime) }.contains(false))
    assert(plan.collect { case f: Filter if TimeFilters.bound(f.condition) => f }.size == 2)
    assert(!plan.exists(_.expressions.exists(TimeFilters.readsTime)))
    assert(TimeFilters.instantOf(plan).contains(start))
    assert(TimeFilters.instantOf(TimeFilters.rebind(plan, start + hour)).contains(start + hour))
  }

  test("the clock's delta is Q(t1) - Q(t0), forwards, backwards and not at all") {
    val t0 = start + 5 * 24 * hour + 30 * 60 * 1000L * 1000
    for (t1 <- Seq(t0 + 3 * hour, t0 + 50 * hour, t0 - 7 * hour, t0)) {
      val plan = bound(t1)
      val rules = new DeltaRules(Unchanged, m, instantBefore = Some(t0))
      val branches = rules.timeBranches(plan)
      val got = summed(branches.flatMap(b => rows(b.plan).map(r => Row(r.toSeq.init: _*) -> r.getInt(r.length - 1))))
      val expected = summed(rows(plan).map(_ -> 1) ++ rows(TimeFilters.rebind(plan, t0)).map(_ -> -1))
      assert(got == expected, s"t1 - t0 = ${(t1 - t0) / hour} h")
      if (t1 == t0) assert(branches.isEmpty)
      else {
        assert(expected.nonEmpty)
        // One branch each way per time conjunct (the join's and the WHERE's).
        assert(branches.size == 4, branches.map(_.describe))
        assert(branches.forall(_.describe.contains("the time filter")), branches.map(_.describe))
      }
    }
  }

  test("each branch reads only the files that can hold the crossed rows") {
    val t0 = start + 5 * 24 * hour
    val plan = bound(t0 + 2 * hour)
    val files = new DeltaRules(Unchanged, m, instantBefore = Some(t0)).timeBranches(plan).map { b =>
      val df = SparkInternals.dataFrame(spark, b.plan)
      df.collect()
      df.queryExecution.executedPlan.collect { case s: FileSourceScanExec => s.metrics("numFiles").value }.sum
    }
    // The join's lower bound moves over day 3, the WHERE's upper bound over day 5: one file each
    // (and the dimension's one file); a read of the whole window would open two or three days.
    assert(files.forall(_ <= 2), files)
  }

  test("a bound filter as file statistics test it: instants folded, NOT of a comparison flipped") {
    def conjuncts(e: Expression): Seq[Expression] = e match {
      case And(a, b) => conjuncts(a) ++ conjuncts(b)
      case other => Seq(other)
    }
    val timed = bound(start).collect { case f: Filter => conjuncts(f.condition) }.flatten.filter(TimeFilters.bound)
    assert(timed.size == 2)
    val skipping = timed.map(c => TimeFilters.forSkipping(Not(c)))
    assert(skipping.forall(_.collectFirst { case _: RefreshInstant | _: Not => true }.isEmpty), skipping)
    assert(skipping.exists {
        case LessThan(a: Attribute, Literal(v: Long, _)) => a.name == "ts" && v == start - 36 * hour
        case _ => false
      }, skipping)
  }

  test("the clock's delta through an aggregate of a join") {
    val aggregate = SparkInternals.analyzed(spark.sql("SELECT d.name, count(*) AS n, sum(e.v) AS s FROM tf_e e " +
        "JOIN tf_d d ON e.id = d.id WHERE e.ts BETWEEN current_timestamp() - INTERVAL 1 DAY AND now() GROUP BY d.name"))
    val t0 = start + 4 * 24 * hour + 90 * 60 * 1000L * 1000
    val t1 = t0 + 11 * hour
    val plan = TimeFilters.bind(aggregate, t1).collectFirst { case a: Aggregate => a.child }.get
    val branches = new DeltaRules(Unchanged, m, instantBefore = Some(t0)).timeBranches(plan)
    val got = summed(branches.flatMap(b => rows(b.plan).map(r => Row(r.toSeq.init: _*) -> r.getInt(r.length - 1))))
    val expected = summed(rows(plan).map(_ -> 1) ++ rows(TimeFilters.rebind(plan, t0)).map(_ -> -1))
    assert(got == expected && expected.values.exists(_ < 0) && expected.values.exists(_ > 0))
  }
}
