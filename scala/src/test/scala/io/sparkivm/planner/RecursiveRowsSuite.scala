package io.sparkivm.planner

import io.sparkivm.TestSpark
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.catalyst.expressions.aggregate.Count
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, AttributeReference, Literal}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Recursive CTEs ([[RecursiveRows]], [[DeltaRules]]): the delta's one recursion, seeded by the
 * anchor's delta and by the tables' delta over the rows before the change, sums to R(Post) -
 * R(Pre), counts included, for inserts, updates and deletes of one derivation of a row among
 * several; and the recursions counting does not maintain are refused. (The Python suite's
 * test_recursive runs such views through refreshes, cycles under a depth bound included.)
 */
class RecursiveRowsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("recursive-rows")

  private val m: Attribute = AttributeReference("__ivm_m", IntegerType, nullable = false)()

  private def version(table: String): Long =
    spark.sql(s"DESCRIBE HISTORY $table").select("version").collect().map(_.getLong(0)).max

  /** Each table at version `pre` and as it is now, its change the difference of the two. */
  private class Versions(pre: Map[String, Long]) extends LeafReader {
    private def read(leaf: SourceLeaf, v: Option[Long]): LogicalPlan = SparkInternals.analyzed(
      v.fold(spark.table(leaf.name))(n => spark.read.format("delta").option("versionAsOf", n).table(leaf.name)))
    private def named(leaf: SourceLeaf, plan: LogicalPlan, extra: Seq[Attribute] = Nil): LogicalPlan =
      Project((leaf.output ++ extra).zip(plan.output).map { case (a, o) => Alias(o, a.name)(exprId = a.exprId) }, plan)
    private def before(leaf: SourceLeaf) = Some(pre(leaf.table.table))
    def pre(leaf: SourceLeaf): LogicalPlan = named(leaf, read(leaf, before(leaf)))
    def post(leaf: SourceLeaf): LogicalPlan = named(leaf, read(leaf, None))
    def preDel(leaf: SourceLeaf): LogicalPlan = pre(leaf)
    def delta(leaf: SourceLeaf): Option[LogicalPlan] = {
      def signed(a: LogicalPlan, b: LogicalPlan, sign: Int) = Project(a.output :+ Alias(Literal(sign), "s")(),
        Except(a, b, isAll = true))
      Some(named(leaf,
          Union(signed(read(leaf, None), read(leaf, before(leaf)), 1),
            signed(read(leaf, before(leaf)), read(leaf, None), -1)),
          Seq(m)))
    }
    // R before the change, as the view would keep it: each distinct row with its multiplicity,
    // read as rows of their own (as the view's are).
    override def recursiveRowsAtPre(loop: UnionLoop): Option[(LogicalPlan, Attribute)] = {
      val rows = new DeltaRules(this, m).pre(loop)
      val counted = Aggregate(rows.output, rows.output :+ Alias(Count(Seq(Literal(1))).toAggregateExpression(), "w")(),
        rows)
      val kept = LocalRelation(counted.output.map(_.newInstance()),
        SparkInternals.dataFrame(spark, counted).queryExecution.executedPlan.executeCollect().map(_.copy()).toSeq)
      Some((kept, kept.output.last))
    }
  }

  private def counted(rows: Seq[Row]): Map[Row, Long] = rows.groupMapReduce(identity)(_ => 1L)(_ + _)

  /**
   * R(Post) - R(Pre) as the delta computes it, and as the two evaluations of `rows` (R itself:
   * the view's query without its DISTINCT, whose counts the view keeps) give it.
   */
  private def compare(query: String, rows: String, change: => Unit, tables: String*): Unit = {
    val plan = QueryRewrites(SparkInternals.analyzed(spark.sql(query)))
    val shape = ViewShape.of(plan)
    RecursiveRows.check(shape)
    val (loop, _) = RecursiveRows.kept(shape).getOrElse(fail(s"not kept: $query"))
    val before = counted(spark.sql(rows).collect().toSeq)
    val pre = tables.map(t => t -> version(t)).toMap
    change
    val after = counted(spark.sql(rows).collect().toSeq)
    val branches = new DeltaRules(new Versions(pre), m).delta(loop)
    val signed = branches.flatMap { b =>
      SparkInternals.dataFrame(spark, b.plan).collect().toSeq.map(r =>
        Row.fromSeq(r.toSeq.init) -> r.getInt(r.length - 1).toLong)
    }
    val delta = signed.groupMapReduce(_._1)(_._2)(_ + _).filter(_._2 != 0)
    val expected = (before.keySet ++ after.keySet).map(k => k -> (after.getOrElse(k, 0L) - before.getOrElse(k, 0L)))
      .filter(_._2 != 0).toMap
    assert(delta === expected, s"for $query")
    assert(branches.size <= 1, "one recursion")
  }

  test("paths of a DAG, r on either side of the join: inserts, updates, and deletes that remove one " +
    "derivation of a row but not the row") {
    spark.sql("CREATE TABLE rr_e (src INT, dst INT) USING delta")
    spark.sql("INSERT INTO rr_e VALUES (1, 2), (2, 3), (3, 4), (1, 3), (4, 5), (2, 4)")
    // r on the right: a table's change joins r's rows before it, each as many times as it has
    // derivations (paths). Under DISTINCT the view keeps those counts, which the delta moves.
    val back = "WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM rr_e UNION ALL " +
      "SELECT e.src, r.dst FROM rr_e e JOIN r ON e.dst = r.src) SELECT src, dst FROM r"
    // (1, 4) is reached through 2 and through 3: losing (1, 3) keeps it, with fewer paths.
    compare("SELECT DISTINCT * FROM (" + back + ")", back, {
        spark.sql("INSERT INTO rr_e VALUES (5, 6), (0, 1)")
        spark.sql("DELETE FROM rr_e WHERE src = 1 AND dst = 3")
        spark.sql("UPDATE rr_e SET dst = 6 WHERE src = 2 AND dst = 3")
      }, "rr_e")
  }

  test("recursions that counting does not maintain, or that the view does not keep, are refused") {
    spark.sql("CREATE TABLE IF NOT EXISTS rr_x (src INT, dst INT) USING delta")
    def refused(query: String, what: String) = {
      val shape = ViewShape.of(QueryRewrites(SparkInternals.analyzed(spark.sql(query))))
      val e = intercept[IvmException](RecursiveRows.check(shape))
      assert(e.getMessage.contains(what), e.getMessage)
    }
    val r = "WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM rr_x UNION ALL " +
      "SELECT r.src, e.dst FROM r JOIN rr_x e ON r.dst = e.src) "
    refused(r + "SELECT src, count(*) FROM r GROUP BY src", "A recursive CTE under an aggregate")
    refused(r + "SELECT src FROM r", "A recursive CTE under")
    refused(r + "SELECT src, dst FROM r WHERE src > 1", "A recursive CTE under")
    refused(
      "WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM rr_x UNION ALL " +
        "SELECT r.src, e.dst FROM r LEFT JOIN rr_x e ON r.dst = e.src WHERE e.dst IS NOT NULL) SELECT * FROM r",
      "other than once through")
    // The whole CTE kept, its columns in another order and twice: maintained.
    val kept = ViewShape.of(QueryRewrites(SparkInternals.analyzed(spark.sql(r + "SELECT dst, src, dst AS d2 FROM r"))))
    RecursiveRows.check(kept)
    assert(RecursiveRows.kept(kept).map(_._2) === Some(Seq(1, 0)))
  }
}
