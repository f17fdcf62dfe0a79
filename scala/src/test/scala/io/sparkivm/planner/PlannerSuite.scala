package io.sparkivm.planner

import io.sparkivm.TestSpark
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, EvalMode, IsNull, Literal, Multiply, OuterReference, PredicateHelper, UnaryMinus
}
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, Filter, Join, LocalRelation, LogicalPlan, OneRowRelation, Project
}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/** Classification, validation and delta rules on analyzed plans of real Delta tables. */
class PlannerSuite extends AnyFunSuite with BeforeAndAfterAll with PredicateHelper {
  private lazy val spark: SparkSession = TestSpark.session("planner")

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE r (a INT, b INT, x DOUBLE) USING delta")
    spark.sql("CREATE TABLE s (b INT, c INT) USING delta")
    spark.sql("CREATE TABLE t (c INT, a INT) USING delta")
    spark.sql("CREATE TABLE p (k INT) USING parquet")
  }

  override def afterAll(): Unit = spark.stop()

  private def analyzed(sql: String): LogicalPlan = SparkInternals.analyzed(spark.sql(sql))

  /** A reader that marks every leaf: Pre and Post are the leaf itself, deltas a stub. */
  private class MarkingReader(changed: Set[String]) extends LeafReader {
    def pre(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def post(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def preDel(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def delta(leaf: SourceLeaf): Option[LogicalPlan] =
      if (changed.contains(leaf.table.table)) Some(leaf.plan) else None
  }
  private val m: Attribute = AttributeReference("__ivm_m", IntegerType)()

  private def branches(sql: String, changed: Set[String]): Seq[String] = {
    val plan = analyzed(sql)
    new DeltaRules(new MarkingReader(changed), m).delta(plan).map(_.describe)
  }

  test("one branch per changed occurrence, Pre to the left and Post to the right") {
    val q = "SELECT r.a FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c"
    assert(branches(q, Set("r", "s", "t")) == Seq(
      "D(spark_catalog.default.r) x Post(spark_catalog.default.s) x Post(spark_catalog.default.t)",
      "Pre(spark_catalog.default.r) x D(spark_catalog.default.s) x Post(spark_catalog.default.t)",
      "Pre(spark_catalog.default.r) x Pre(spark_catalog.default.s) x D(spark_catalog.default.t)"))
    assert(branches(q, Set("s")).size == 1)
    assert(branches(q, Set.empty).isEmpty)
  }

  test("a self-join has a branch per occurrence") {
    val b = branches("SELECT r1.a FROM r r1 JOIN r r2 ON r1.b = r2.a JOIN r r3 ON r2.b = r3.a", Set("r"))
    assert(b.size == 3)
    assert(b.map(_.count(_ == 'D')) == Seq(1, 1, 1))
  }

  test("filters, projections, unions and subqueries pass deltas through") {
    assert(branches("SELECT a + 1 AS a1 FROM (SELECT * FROM r WHERE x > 0) q", Set("r")).size == 1)
    assert(branches("SELECT b FROM r UNION ALL SELECT b FROM s", Set("r", "s")).size == 2)
    assert(branches("SELECT b FROM r UNION ALL SELECT b FROM s", Set("s")).size == 1)
  }

  test("an aggregate below the top regroups the changed groups: -Pre and +Post") {
    val b = branches("SELECT b, count(*) AS n FROM r GROUP BY b", Set("r"))
    assert(b.size == 2)
    assert(b.head.startsWith("-Pre(Aggregate over spark_catalog.default.r)"))
    assert(b(1).startsWith("+Post(Aggregate over spark_catalog.default.r)"))
    assert(branches("SELECT DISTINCT b FROM r", Set("r")).size == 2)
    assert(branches("SELECT b, count(*) AS n FROM r GROUP BY b", Set("s")).isEmpty)
  }

  private def rewritten(sql: String): LogicalPlan = QueryRewrites(analyzed(sql))

  test("multiplicities fail past their range under any ANSI setting, never wrap") {
    val rules = new DeltaRules(new MarkingReader(Set("r")), m)
    val (plan, _) = rules.weightedPre(analyzed("SELECT r1.a FROM r r1 JOIN r r2 ON r1.b = r2.a")).get
    val expressions = plan.flatMap(_.expressions)
    val products = expressions.flatMap(_.collect { case x: Multiply => x })
    val negations = expressions.flatMap(_.collect { case x: UnaryMinus => x })
    assert(products.nonEmpty && products.forall(_.evalMode == EvalMode.ANSI), products)
    assert(negations.nonEmpty && negations.forall(_.failOnError), negations)
    val overflow = Multiply(Literal(Int.MaxValue), Literal(2), EvalMode.ANSI)
    intercept[ArithmeticException](overflow.eval())
  }

  private def joinTypes(plan: LogicalPlan): Seq[String] = plan.collect { case j: Join => j.joinType.sql }

  /** The inner joins of `plan` whose two sides share no condition (of a join or a WHERE). */
  private def crossJoins(plan: LogicalPlan): Int = {
    val conditions = plan.flatMap {
      case j: Join => j.condition.toSeq
      case f: Filter => Seq(f.condition)
      case _ => Nil
    }.flatMap(splitConjunctivePredicates)
    plan.collect { case j: Join if j.joinType == Inner => j }.count { j =>
      !conditions.exists(c =>
        c.references.intersect(j.left.outputSet).nonEmpty && c.references.intersect(j.right.outputSet).nonEmpty)
    }
  }

  test("inner joins written across tables that share no condition are put in a connected order") {
    // r and t share a; s shares b with r and c with t. As written, r x s then t would be fine,
    // but `FROM r, t, s WHERE r.b = s.b AND s.c = t.c` crosses r with t.
    val q = "SELECT r.x, t.a FROM r, t, s WHERE r.b = s.b AND s.c = t.c AND r.x > 0"
    assert(crossJoins(analyzed(q)) == 1, "as written: r crossed with t")
    val plan = rewritten(q)
    assert(crossJoins(plan) == 0, plan)
    assert(plan.output.map(_.name) == Seq("x", "a"))
    // The one-table conjunct filters its table, below the joins.
    assert(plan.collect { case f: Filter => f }.exists(f =>
        f.condition.references.map(_.name).toSet == Set("x") && f.child.output.map(_.name) == Seq("a", "b", "x")), plan)
    // Joins written in a connected order, and a cross join no order avoids, stay as written.
    Seq("SELECT r.x FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c", "SELECT r.x FROM r, s, t WHERE r.b = s.b")
      .map(analyzed).foreach(p => assert(QueryRewrites(p) eq p))
    // The delta joins a change of t with s before r.
    assert(new DeltaRules(new MarkingReader(Set("t")), m).delta(plan).map(_.describe) ==
      Seq("Pre(spark_catalog.default.r) x Pre(spark_catalog.default.s) x D(spark_catalog.default.t)"))
  }

  test("subquery expressions become joins, the innermost first; CTEs are inlined") {
    assert(joinTypes(rewritten("SELECT a FROM r WHERE EXISTS (SELECT 1 FROM s WHERE s.b = r.b)")) == Seq("LEFT SEMI"))
    assert(joinTypes(rewritten("SELECT a FROM r WHERE b NOT IN (SELECT b FROM s)")) == Seq("LEFT ANTI"))
    // NOT IN keeps its NULL semantics: the condition is true when the comparison is unknown.
    val notIn = rewritten("SELECT a FROM r WHERE b NOT IN (SELECT b FROM s)").collectFirst { case j: Join => j }.get
    assert(notIn.condition.get.exists(_.isInstanceOf[IsNull]))
    // A correlated scalar subquery inside an IN subquery: both levels decorrelated.
    val nested = rewritten("SELECT a FROM r WHERE b IN (SELECT b FROM s WHERE c > " +
      "(SELECT max(t.a) FROM t WHERE t.c = s.c))")
    assert(joinTypes(nested).toSet == Set("LEFT SEMI", "LEFT OUTER"))
    assert(!nested.exists(_.expressions.exists(_.exists(_.isInstanceOf[OuterReference]))))
    // An uncorrelated scalar subquery over a global aggregate: an inner join with one row.
    val scalar = rewritten("SELECT a FROM r WHERE x > (SELECT avg(x) FROM r)")
    assert(joinTypes(scalar) == Seq("INNER"))
    assert(scalar.collectFirst { case j: Join => j.left.outputSet.intersect(j.right.outputSet).isEmpty }.get,
      "the subquery's copy of r has ids of its own")
    assert(!rewritten("WITH q AS (SELECT b FROM r) SELECT * FROM q JOIN q q2 ON q.b = q2.b")
        .exists(_.nodeName.startsWith("CTE")))
    assert(PlanValidator.validate(rewritten("SELECT a FROM r WHERE b IN (SELECT b FROM s)")).size == 2)
  }

  test("a scalar subquery that is not an aggregate gives its one row's value, NULL or its error") {
    def value(over: String): Any = {
      val plan = rewritten(s"SELECT (SELECT v FROM VALUES (5), (6), (NULL) AS t(v) WHERE $over) AS s")
      assert(joinTypes(plan) == Seq("INNER") && plan.exists(_.isInstanceOf[Aggregate]))
      SparkInternals.dataFrame(spark, plan).collect().map(_.get(0)).toSeq match { case Seq(v) => v }
    }
    assert(value("v = 6") == 6)
    assert(value("v IS NULL") == null)
    assert(value("v > 6") == null)
    val tooMany = intercept[Exception](value("v > 4"))
    assert(Iterator.iterate[Throwable](tooMany)(_.getCause).takeWhile(_ != null)
        .exists(_.getMessage.contains("SCALAR_SUBQUERY_TOO_MANY_ROWS")), tooMany)
  }

  test("a top-level ORDER BY with LIMIT or OFFSET is split off the query the view maintains") {
    def split(sql: String) = TopRows.split(analyzed(sql))
    def refused(sql: String): String =
      intercept[IvmException](PlanValidator.validate(split(sql)._1)).getMessage
    val (inner, top) = split("SELECT b, sum(x) AS sx FROM r GROUP BY b ORDER BY sx DESC, b LIMIT 3 OFFSET 1")
    assert(top.contains(TopRows(Seq((1, false, false), (0, true, true)), Some(3), 1)))
    assert(inner.isInstanceOf[Aggregate] && ViewShape.of(inner).kind == "grouped aggregate")
    assert(top.get.sql(Seq("b", "sx"), ViewMaintenance.quote) ==
      " ORDER BY `sx` DESC NULLS LAST, `b` ASC NULLS FIRST LIMIT 3 OFFSET 1")
    // A projection between the limit and the sort stays; OFFSET alone is a top too.
    val (projected, byA) = split("SELECT x, a FROM r ORDER BY a, x OFFSET 2")
    assert(byA.contains(TopRows(Seq((1, true, true), (0, true, true)), None, 2)) &&
      projected.output.map(_.name) == Seq("x", "a"))
    // Where rows can tie on the ORDER BY, the view's other columns break the ties.
    assert(split("SELECT x, a FROM r ORDER BY a LIMIT 2")._2.contains(
        TopRows(Seq((1, true, true), (0, true, true)), Some(2), 0, tieBreak = 1)))
    assert(split("SELECT b, a, sum(x) AS sx FROM r GROUP BY b, a ORDER BY sx, b LIMIT 2")._2.contains(
        TopRows(Seq((2, true, true), (0, true, true), (1, true, true)), Some(2), 0, tieBreak = 1)))
    assert(split("SELECT b, a, sum(x) AS sx FROM r GROUP BY b, a ORDER BY sx, a, b LIMIT 2")._2.isDefined)
    // A LIMIT that a global aggregate's one row cannot reach changes nothing (LIMIT 0 does).
    assert(split("SELECT sum(x) AS sx FROM r ORDER BY sx LIMIT 1")._2.isEmpty)
    assert(split("SELECT sum(x) AS sx FROM r LIMIT 3")._2.isEmpty)
    assert(split("SELECT sum(x) AS sx FROM r ORDER BY sx LIMIT 0")._2.isDefined)
    // A key the view's columns give: an expression of them, or a column under its old name.
    val byShare =
      split("SELECT b, sum(x) AS sx, count(*) AS n FROM r GROUP BY b ORDER BY sx / n DESC, b LIMIT 2")._2.get
    assert(byShare.sql(Seq("b", "sx", "n"), ViewMaintenance.quote) ==
      " ORDER BY (sx / CAST(n AS DOUBLE)) DESC NULLS LAST, `b` ASC NULLS FIRST LIMIT 2")
    assert(!byShare.marks, "marks compare stored columns")
    assert(split("SELECT a AS id, x FROM r ORDER BY a, x LIMIT 2")._2.contains(
        TopRows(Seq((0, true, true), (1, true, true)), Some(2), 0)))
    // A key repeating a selected expression of the grouping id instead of its alias (TPC-DS q70).
    val byLevel = split("SELECT b, a, grouping(b) + grouping(a) AS lvl, sum(x) AS sx FROM r GROUP BY rollup(b, a) " +
      "ORDER BY lvl DESC, CASE WHEN grouping(b) + grouping(a) = 0 THEN b END, sx LIMIT 2")._2.get
    assert(byLevel.sql(Seq("b", "a", "lvl", "sx"), ViewMaintenance.quote) ==
      " ORDER BY `lvl` DESC NULLS LAST, CASE WHEN (CAST(lvl AS INT) = 0) THEN b END ASC NULLS FIRST, " +
      "`sx` ASC NULLS FIRST, `b` ASC NULLS FIRST, `a` ASC NULLS FIRST LIMIT 2")
    assert(split("SELECT a FROM r ORDER BY a")._2.isEmpty)
    assert(refused("SELECT a FROM r LIMIT 2").contains("Without ORDER BY"))
    assert(refused("SELECT b FROM r GROUP BY b ORDER BY sum(x) LIMIT 2").contains("does not select"))
    assert(refused("SELECT * FROM (SELECT a FROM r ORDER BY a LIMIT 2) WHERE a > 1").contains("LIMIT"))
  }

  test("outer, semi and anti joins and windows recompute their changed keys") {
    def keyed(sql: String, changed: Set[String]) =
      new DeltaRules(new MarkingReader(changed), m).delta(rewritten(sql)).map(_.describe)
    val left = keyed("SELECT r.a, s.c FROM r LEFT JOIN s ON r.b = s.b", Set("s"))
    assert(left.map(_.takeWhile(_ != '(')) == Seq("-Pre", "+Post"))
    assert(left.forall(_.endsWith("on changed keys")))
    val window = keyed("SELECT a, rank() OVER (PARTITION BY b ORDER BY x) AS k FROM r", Set("r"))
    assert(window.forall(_.contains("on changed partitions")), window)
    // No equality to split by: the whole join is recomputed.
    assert(keyed("SELECT r.a, s.c FROM r LEFT JOIN s ON r.b < s.b", Set("s")).forall(_.contains("all of it")))
    // Only the left side changed: its changed rows meet the right side, keyed or not, as an inner
    // join's do (a left outer, semi, anti or existence join is linear in its left side).
    for (sql <- Seq("SELECT r.a, s.c FROM r LEFT JOIN s ON r.b = s.b", "SELECT r.a, s.c FROM r LEFT JOIN s ON r.b < s.b",
        "SELECT a FROM r WHERE b NOT IN (SELECT b FROM s)",
        "SELECT a FROM r WHERE EXISTS (SELECT 1 FROM s WHERE s.b = r.b)"))
      assert(keyed(sql, Set("r")) == Seq("D(spark_catalog.default.r) x Post(spark_catalog.default.s)"), sql)
    assert(keyed("SELECT r.a, s.c FROM r LEFT JOIN s ON r.b = s.b", Set("r", "s")).forall(_.endsWith("on changed keys")))
    assert(keyed("SELECT a FROM r WHERE b NOT IN (SELECT b FROM s)", Set.empty).isEmpty)
    val e = intercept[IvmException](PlanValidator.validate(rewritten("SELECT a, rank() OVER (ORDER BY x) AS k FROM r")))
    assert(e.getMessage.contains("window function without PARTITION BY"))
  }

  test("view shapes") {
    assert(ViewShape.of(analyzed("SELECT b, sum(x) FROM r GROUP BY b")).isInstanceOf[AggregateShape])
    assert(ViewShape.of(analyzed("SELECT count(*) FROM r")).asInstanceOf[AggregateShape].global)
    assert(ViewShape.of(analyzed("SELECT b, sum(x) s FROM r GROUP BY b HAVING s > 1 ORDER BY b"))
        .isInstanceOf[AggregateShape])
    assert(ViewShape.of(analyzed("SELECT DISTINCT b FROM r")).asInstanceOf[RowsShape].distinct)
    assert(!ViewShape.of(analyzed("SELECT b FROM r")).asInstanceOf[RowsShape].distinct)
    val having = new ViewMaintenance(ViewShape.of(analyzed(
          "SELECT b, sum(x) s FROM r WHERE a > 0 GROUP BY b HAVING s > 1")), Seq("b", "s"))
    assert(having.hasHaving)
    val noHaving = new ViewMaintenance(ViewShape.of(analyzed(
          "SELECT b, sum(x) s FROM r WHERE a > 0 GROUP BY b")), Seq("b", "s"))
    assert(!noHaving.hasHaving)
  }

  test("aggregate states: one per distinct aggregate, the right kind each") {
    val vm = new ViewMaintenance(
      ViewShape.of(analyzed(
          "SELECT b, count(*), count(x), sum(x), avg(x), min(a), max(a), count(DISTINCT a), sum(x) + 1 " +
            "FROM r GROUP BY b")), (1 to 9).map(i => s"c$i"))
    assert(vm.states.map(_.getClass.getSimpleName) == Seq("CountState", "CountState", "SumState",
      "SumState", "ExtremeState", "ExtremeState", "RecomputedState"))
    assert(vm.backingColumns.take(2) == Seq("__ivm_g0", "__ivm_count"))
  }

  test("validation names the operator") {
    def refused(sql: String): String = intercept[IvmException](PlanValidator.validate(analyzed(sql))).getMessage
    assert(refused("SELECT * FROM r TABLESAMPLE (10 PERCENT)").contains("TABLESAMPLE"))
    assert(refused("SELECT * FROM r LIMIT 1").contains("LIMIT"))
    assert(refused("SELECT rand() FROM r").contains("rand"))
    assert(refused("SELECT row_number() OVER (ORDER BY a) FROM r").contains("window"))
    assert(refused("SELECT * FROM r WHERE b IN (SELECT b FROM s)").contains("subquery"))
    // Set operations are rewritten into joins the rules maintain (as Spark's optimizer plans them).
    assert(PlanValidator.validate(QueryRewrites(analyzed("SELECT * FROM r INTERSECT SELECT * FROM r"))).size == 2)
    assert(PlanValidator.validate(QueryRewrites(analyzed(
          "SELECT * FROM r WHERE b IN (SELECT b FROM s EXCEPT ALL SELECT a FROM r)"))).size == 3)
    assert(intercept[IvmException](PlanValidator.validate(analyzed("SELECT * FROM p")))
      .getCondition == "IVM_SOURCE_NOT_DELTA")
    assert(PlanValidator.validate(analyzed(
        "SELECT r.a FROM r JOIN s ON r.b = s.b JOIN r r2 ON r2.a = s.c")).size == 3)
    assert(PlanValidator.validate(analyzed("SELECT 1 AS one")).isEmpty)
    assert(SourceLeaf.isConstant(OneRowRelation()))
  }

  test("a plan's definition names what it computes, not the plan it was found in") {
    def definition(sql: String) = CountedTable.definition(analyzed(sql))
    val avg = "SELECT avg(x) FROM r WHERE b > 1"
    // Analyzed twice, with new attribute ids: the same definition (a refresh finds it again).
    assert(definition(avg).isDefined && definition(avg) == definition(avg))
    assert(definition(avg) != definition("SELECT avg(x) FROM r WHERE b > 2"))
    spark.sql("CREATE TABLE IF NOT EXISTS r_twin (a INT, b INT, x DOUBLE) USING delta")
    assert(definition(avg) != definition("SELECT avg(x) FROM r_twin WHERE b > 1"))
    // Tables of one schema, joined in either order: told apart by their names.
    assert(definition("SELECT sum(r.x) FROM r JOIN r_twin w ON r.a = w.b") !=
      definition("SELECT sum(w.x) FROM r_twin w JOIN r ON w.a = r.b"))
    // What a name does not fix is not named: results of it are never reused.
    assert(definition("SELECT avg(x) FROM r WHERE b IN (SELECT c FROM s)").isEmpty)
    assert(definition("SELECT sum(r.x) FROM r JOIN (VALUES (1)) v(k) ON r.a = v.k").isEmpty)
    spark.udf.register("ivm_plus_one", (i: Int) => i + 1)
    assert(definition("SELECT sum(ivm_plus_one(a)) FROM r").isEmpty)
    // Casts read the session's time zone.
    val ts = "SELECT count(*) FROM r WHERE cast(cast(a AS timestamp) AS string) > '2020'"
    val before = definition(ts)
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
    try assert(definition(ts) != before)
    finally spark.conf.unset("spark.sql.session.timeZone")
  }

  test("a global aggregate's state moved by its change equals the state recomputed") {
    import spark.implicits._
    import org.apache.spark.sql.functions._
    def internal(plan: LogicalPlan) = SparkInternals.dataFrame(spark, plan).queryExecution.executedPlan.executeCollect()
    def value(df: org.apache.spark.sql.DataFrame) = df.collect().map(_.toString).toSeq
    val pre = Seq((1, Some(BigDecimal("2.50"))), (2, None), (3, Some(BigDecimal("-1.25"))), (3, Some(BigDecimal("0.10"))))
    val (ins, del) = (Seq((4, Some(BigDecimal("7.00"))), (5, None)), Seq((1, Some(BigDecimal("2.50"))), (2, None)))
    val post = pre.diff(del) ++ ins
    def aggregated(rows: Seq[(Int, Option[BigDecimal])]) = rows.toDF("k", "v")
      .agg(count(lit(1)), sum($"v"), (avg($"v") * 2).as("twice"), count($"v"), sum($"k"),
        expr("count(*) FILTER (WHERE k > 2)"))
    val a = SparkInternals.analyzed(aggregated(pre)).asInstanceOf[Aggregate]
    val running = RunningAggregate.of(a).get
    val old = internal(running.full(a.child)).head
    // Rows of the aggregate's input, each with the sign m.
    def signed(rows: Seq[(Int, Option[BigDecimal], Int)]): LogicalPlan = {
      val change = SparkInternals.analyzed(rows.toDF("k", "v", "m"))
      Project((a.child.output :+ m).zip(change.output).map { case (o, n) => Alias(n, o.name)(exprId = o.exprId) },
        change)
    }
    def movedBy(rows: Seq[(Int, Option[BigDecimal], Int)]) = value(SparkInternals.dataFrame(spark,
        running.value(LocalRelation(running.stateOutput, internal(running.moved(old, signed(rows), m)).toSeq))))
    assert(movedBy(ins.map(r => (r._1, r._2, 1)) ++ del.map(r => (r._1, r._2, -1))) == value(aggregated(post)))
    // All rows deleted: counts 0 and sums NULL, as recomputation over no rows.
    assert(movedBy(pre.map(r => (r._1, r._2, -1))) == value(aggregated(Nil)))
    // A floating-point sum, MIN/MAX, DISTINCT and GROUP BY are not kept running.
    Seq("SELECT avg(x) FROM r", "SELECT min(a) FROM r", "SELECT count(DISTINCT a) FROM r",
      "SELECT b, count(*) FROM r GROUP BY b").foreach { sql =>
      assert(RunningAggregate.of(analyzed(sql).collectFirst { case g: Aggregate => g }.get).isEmpty, sql)
    }
  }

  test("storage names are Delta-safe and unique") {
    assert(ViewMaintenance.storageNames(Seq("a", "count(1)", "A", "__ivm_x", "ok_1")) ==
      Seq("__ivm_c0", "__ivm_c1", "__ivm_c2", "__ivm_c3", "ok_1"))
  }
}
