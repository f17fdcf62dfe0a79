package io.sparkivm.epsilon

import scala.collection.mutable

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{EpsilonState, RefreshMode, ViewMetadata}
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.errors.IvmException
import io.sparkivm.execution.{RefreshPipeline, ViewAnalysis}
import io.sparkivm.parser.IvmStatementParser
import io.sparkivm.planner.{DeltaRules, TriangleQuery}
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{IntegerType, LongType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * TriangleViews, the IVM^eps life cycle: a state built from Post holds the paper's invariants
 * (strictly) and a state that breaks one (|D|, the heavy keys' count, an auxiliary view) fails
 * the check naming it; advancing by a refresh moves the keys whose degrees crossed the bounds
 * (minor rebalancing) and keeps the invariants, and a |D| that leaves [N/4, N) rebuilds the state
 * with a new N (major rebalancing); only incremental triangle views are IVM^eps's, and a
 * triangle view refreshed through it equals its query.
 */
class TriangleViewsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("triangle-views")

  private val join = "FROM tvw_edges e1 JOIN tvw_edges e2 ON e1.dst = e2.src " +
    "JOIN tvw_edges e3 ON e2.dst = e3.src AND e3.dst = e1.src"
  private val m: Attribute = AttributeReference("__ivm_m", IntegerType)()

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE tvw_edges (src INT, dst INT) USING delta")
    spark.conf.set("spark.ivm.epsilon.checkInvariants", "true")
  }
  override def afterAll(): Unit = spark.conf.unset("spark.ivm.epsilon.checkInvariants")

  private lazy val q: TriangleQuery =
    TriangleQuery.find(SparkInternals.analyzed(spark.sql(s"SELECT count(*) AS n $join"))).toOption.flatten.get

  type Edges = Seq[(Int, Int)]

  private def engine(pre: Edges, post: Edges) =
    new TriangleMaintenance(spark, q, new DeltaRules(new EdgeChangeReader(pre, post, m), m),
      1000)

  private def tables(name: String) = {
    val id = (t: String) => TableIdentifier(t, Some("default"), Some("spark_catalog"))
    new TriangleStateTables(spark,
      ViewMetadata(id(name), id(s"${name}_backing"), "id", "", "default", RefreshMode.Incremental, Nil, Map.empty, None),
      "attempt")
  }

  /** A hub (0) with edges to and from 1..12, a ring on 1..6 both ways, a chord 7->3. */
  private val pre: Edges = ((1 to 12).flatMap(k => Seq((0, k), (k, 0))) ++
    (1 to 6).flatMap(k => Seq((k, k % 6 + 1), (k % 6 + 1, k))) :+ ((7, 3))).distinct

  /** The hub losing most of its out-edges, 7 gaining many, one ring edge gone, new triangles. */
  private val post: Edges = (pre.filterNot(e => e == ((2, 3)) || (e._1 == 0 && e._2 > 1)) ++
    Seq((0, 13), (13, 0), (13, 1), (1, 13), (3, 5), (5, 3)) ++ (8 to 16).map(k => (7, k))).distinct

  private def invariant(f: => Unit): String = {
    val e = intercept[IvmException](f)
    assert(e.getCondition == "IVM_EPSILON_INVARIANT", e.getMessage)
    e.getMessage
  }

  /** The state built over Pre (checked strictly inside, in test mode), shared by the first two tests. */
  private lazy val built: (TriangleStateTables, EpsilonState) = {
    val t = tables("tvw_state")
    (t, TriangleViews.build(spark, engine(pre, pre), t, 0.3))
  }

  test("a built state holds the invariants; a state that breaks one fails the check naming it") {
    val (t, state) = built
    val e = engine(pre, pre)
    assert(state.size == 3L * pre.size && state.n == 2 * state.size + 1)
    assert(state.heavy == Seq(1L, 1L, 1L), state) // the hub, in each occurrence
    assert(invariant(TriangleViews.check(spark, e, t, state.copy(size = state.size + 1), strict = true))
        .contains(s"|D| is ${state.size}, the state says ${state.size + 1}"))
    assert(invariant(TriangleViews.check(spark, e, t, state.copy(heavy = Seq(2L, 1L, 1L)), strict = true))
        .contains("has 1 heavy keys, the state says 2"))
    // The view's lines in DESCRIBE.
    val lines = TriangleViews.describe(state, q).map(l => l._1 -> l._2)
    assert(lines.head._1 == "Strategy" && lines.head._2.startsWith("IVM^eps triangle ("))
    assert(lines.count(_._1 == "Heavy keys") == 3 && lines.filter(_._1 == "Heavy keys").forall(_._2.endsWith(": 1")))
    assert(lines.contains("Threshold base N" -> state.n.toString))
  }

  test("a refresh moves the keys that crossed the bounds; leaving [N/4, N) rebuilds with a new N") {
    val (t, state) = built
    // `base`: the tables' versions after restoring, which this refresh's writes follow.
    def advance(from: EpsilonState, base: Seq[Long], before: Edges, after: Edges): (EpsilonState, Seq[String]) = {
      val e = engine(before, after)
      val heavy = TriangleViews.heavySets(from, t, from.versions, e)
      val block = TriangleViews.blockDelta(e, t, from)(heavy)
      val branch = TriangleViews.branch(spark, q, e, block, m)
      assert(branch.plan.output.map(_.exprId) == (q.block.outputs :+ m).map(_.exprId))
      val notes = mutable.ArrayBuffer[String]()
      spark.conf.set("spark.ivm.epsilon.checkInvariants", "false")
      val next =
        try TriangleViews.advance(spark, e, t, from, base, notes)(heavy)
        finally spark.conf.set("spark.ivm.epsilon.checkInvariants", "true")
      TriangleViews.check(spark, e, t, next, strict = false)
      (next, notes.toSeq)
    }
    val (minor, notes) = advance(state, state.versions, pre, post)
    assert(minor.n == state.n && minor.size == 3L * post.size)
    assert(notes.count(_.endsWith(": 1 keys turn heavy, 1 turn light")) == 3, notes)
    val few = post.filter(_._1 == 13)
    val (major, rebuilt) = advance(minor, minor.versions, post, few)
    assert(rebuilt.exists(_.startsWith(s"major rebalancing: |D| = ${3 * few.size} left")), rebuilt)
    assert(major.size == 3L * few.size && major.n / 4 <= major.size && major.size < major.n, major)
    // An auxiliary view's row that its definition does not give.
    val schema = StructType(engine(few, few).auxCols(0).map(StructField(_, IntegerType)) :+ StructField("w", LongType))
    val stray =
      t.append(3, WeightedDelta.onDriver(spark, schema, Seq(Row.fromSeq(schema.fields.init.toSeq.map(_ => 99) :+ 1L))),
        "a0")
    assert(invariant(TriangleViews.check(spark, engine(few, few), t,
          major.copy(versions = major.versions.updated(3,
            stray)), strict = false)).contains("V_RS differs from its definition"))
    t.drop()
  }

  test("only incremental triangle views are IVM^eps's, and one refreshed through it equals its query") {
    // The invariants are the tests above'; here the view against its query.
    spark.conf.set("spark.ivm.epsilon.checkInvariants", "false")
    spark.sql("INSERT INTO tvw_edges VALUES (1, 2), (2, 3), (3, 1), (1, 3), (3, 2), (2, 1), (1, 4)")
    val query = s"SELECT e1.src AS a, count(*) AS n $join GROUP BY e1.src"
    ViewLifecycle.create(spark,
      IvmStatementParser.recognise(s"CREATE MATERIALIZED VIEW tvw_mv " +
        s"TBLPROPERTIES ('ivm.epsilon' = '0.5') REFRESH POLICY INCREMENTAL AS $query").get.asInstanceOf[
        CreateMaterializedView])
    val meta = io.sparkivm.catalog.ViewCatalog.lookup(spark, Seq("tvw_mv"))
    val analyzed = ViewAnalysis.reanalyze(spark, meta, incremental = true)
    assert(TriangleViews.query(spark, analyzed, incremental = true).isDefined)
    assert(TriangleViews.query(spark, analyzed, incremental = false).isEmpty)
    spark.conf.set("spark.ivm.epsilon.enabled", "false")
    try assert(TriangleViews.query(spark, analyzed, incremental = true).isEmpty)
    finally spark.conf.unset("spark.ivm.epsilon.enabled")
    assert(TriangleViews.genericBecause(analyzed).isEmpty)
    spark.sql("INSERT INTO tvw_edges VALUES (4, 1), (4, 3), (3, 4)")
    spark.sql("DELETE FROM tvw_edges WHERE src = 2 AND dst = 3")
    val report = RefreshPipeline.refresh(spark, Seq("tvw_mv"), full = false)
    assert(report.mode == "incremental" && report.branches.exists(_.contains("IVM^eps")), report)
    assert(spark.table("tvw_mv").collect().toSet == spark.sql(query).collect().toSet)
  }
}
