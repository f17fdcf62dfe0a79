package io.sparkivm.planner

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{IntegerType, StructField, StructType}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * FK-pruned delta plans (Svingos et al. 2023, section 3, Algorithm 1) of a snowflake: the
 * fact f references dimensions s and t, and t references u. Every decision here (FK-Guard,
 * integrity from reference counts, Wang & Yi 2020's I(R, Rc)) is taken from changes and counts
 * held on the driver, as a refresh takes it: the steps fail the test if asked to run a plan.
 */
class FkDeltaPlannerSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("fk-planner")

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE fkf (k INT, s_id INT, t_id INT, v INT) USING delta")
    spark.sql("CREATE TABLE fks (id INT, w INT) USING delta")
    spark.sql("CREATE TABLE fkt (id INT, u_id INT) USING delta")
    spark.sql("CREATE TABLE fku (id INT, x INT) USING delta")
  }

  private val query = "SELECT f.v, s.w, u.x FROM fkf f JOIN fks s ON f.s_id = s.id " +
    "JOIN fkt t ON f.t_id = t.id JOIN fku u ON t.u_id = u.id"

  private def keys(rely: Boolean): SourceLeaf => TableKeys = leaf =>
    leaf.table.table match {
      case "fkf" => TableKeys(Some(Seq("k")),
          Seq(
            ForeignKeyRef("f_s", Seq("s_id"), "spark_catalog.default.fks", Seq("id"), rely),
            ForeignKeyRef("f_t", Seq("t_id"), "spark_catalog.default.fkt", Seq("id"), rely)))
      case "fkt" => TableKeys(Some(Seq("id")),
          Seq(
            ForeignKeyRef("t_u", Seq("u_id"), "spark_catalog.default.fku", Seq("id"), rely)))
      case _ => TableKeys(Some(Seq("id")), Nil)
    }

  /** Decisions must come from what is held on the driver: running a plan fails the test. */
  private object DriverOnly extends PlanSteps {
    def materialize(plan: LogicalPlan): LogicalPlan = plan
    def isEmpty(plan: LogicalPlan): Boolean = fail(s"a plan was run:\n$plan")
    override def collects: Boolean = true
    override def probe: ProbeSettings = ProbeSettings(enabled = false, 1000, 64, Long.MaxValue)
  }

  /**
   * Pre and Post are the leaf itself; a changed table's change is held on the driver as
   * (its columns' values..., sign) rows; the fact's counts per foreign key are given.
   */
  private class DriverDeltaReader(changes: Map[String, Seq[Seq[Int]]], counts: Map[String, KeyCounts])
      extends LeafReader {
    def pre(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def post(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def preDel(leaf: SourceLeaf): LogicalPlan = leaf.plan
    def delta(leaf: SourceLeaf): Option[LogicalPlan] = changes.get(leaf.table.table).map(_ => leaf.plan)
    override def deltaOnDriver(leaf: SourceLeaf): Option[DriverDeltaRows] = changes.get(leaf.table.table).map { rows =>
      val schema = StructType(leaf.output.map(a => StructField(a.name, a.dataType)) :+
        StructField("__ivm_m", IntegerType))
      DriverDeltaRows(schema, rows.map(r => InternalRow.fromSeq(r)))
    }
    override def keyCounts(table: CountedTable, keys: Seq[Any]): Option[KeyCounts] =
      counts.get(s"${table.leaf.table.table}.${table.key.name}")
  }

  private val m: Attribute = AttributeReference("__ivm_m", IntegerType)()

  private def plan(changes: Map[String, Seq[Seq[Int]]], rely: Boolean,
      counts: Map[String, KeyCounts] = Map.empty): (Seq[String], Seq[String]) = {
    val analyzed = SparkInternals.analyzed(spark.sql(query))
    val rules = new DeltaRules(new DriverDeltaReader(changes, counts), m,
      FkSettings(pruning = true, DriverOnly.probe, keys(rely), DriverOnly))
    (rules.delta(analyzed).map(_.describe), rules.fk.notes)
  }

  // Rows of a change: the table's columns, then the sign.
  private val factInserted = Seq(Seq(10, 1, 1, 5, 1))
  private val dimsInserted = Map("fks" -> Seq(Seq(7, 70, 1)), "fkt" -> Seq(Seq(8, 3, 1)), "fku" -> Seq(Seq(9, 90, 1)))

  test("a fact change joins the dimensions as PreDel, in BFS order along the FK edges") {
    val (branches, notes) = plan(Map("fkf" -> factInserted), rely = true)
    assert(branches == Seq("D(f) x PreDel(s) x PreDel(t) x PreDel(u)"))
    assert(notes.exists(_.startsWith("FK graph: ")))
    assert(notes.exists(_.startsWith("component rooted at f: D(f) x PreDel(s) x PreDel(t) x PreDel(u)")))
  }

  test("Theorem 5.7: with the guard and integrity holding, dimension changes add no branch") {
    val (branches, notes) = plan(Map("fkf" -> factInserted) ++ dimsInserted, rely = true)
    assert(branches == Seq("D(f) x PreDel(s) x PreDel(t) x PreDel(u)"))
    Seq("s", "t", "u").foreach(d => assert(notes.contains(s"FK-Guard and integrity hold on $d"), notes))
    assert(notes.count(_.contains("relied on (FOREIGN KEY ... RELY)")) == 3)
    // Only the dimensions changed: no branch at all, the view is unchanged.
    assert(plan(dimsInserted, rely = true)._1.isEmpty)
  }

  test("without the pruning every changed occurrence has its branch (the generic rule)") {
    val analyzed = SparkInternals.analyzed(spark.sql(query))
    val generic = new DeltaRules(new DriverDeltaReader(Map("fkf" -> factInserted) ++ dimsInserted, Map.empty), m)
    assert(generic.delta(analyzed).size == 4)
  }

  test("a key deleted and inserted (an update) is applied after the rest, against Post") {
    val updated = Map("fks" -> Seq(Seq(7, 70, -1), Seq(7, 71, 1)))
    val (branches, notes) = plan(Map("fkf" -> factInserted) ++ updated, rely = true)
    // Split off (FkDeltaPlanner.updatesLast): the rest of the change is pruned with the guard
    // holding, then the updated keys' change is joined with Post of the rest of the block.
    assert(branches == Seq("D(f) x PreDel(s) x PreDel(t) x PreDel(u)", "D(s updates) x Post(f) x Post(t) x Post(u)"))
    assert(notes.head.startsWith("1 updated keys of spark_catalog.default.fks (deleted and inserted)"), notes)
  }

  test("integrity from the fact's reference counts (not RELY): a deleted key still referenced fails") {
    val deleted = Map("fks" -> Seq(Seq(7, 70, -1)))
    val referenced = Map("fkf.s_id" -> KeyCounts(pre = Map(7 -> 2L), post = Map(7 -> 1L)))
    val (failing, notes) = plan(Map("fkf" -> factInserted) ++ deleted, rely = false, referenced)
    assert(notes.exists(_.startsWith("integrity fails on f -> s")), notes)
    // The edge is dropped: s is a component of its own, combined with f's by the generic rule
    // (earlier components at Pre, later ones at Post).
    assert(failing == Seq("D(f) x PreDel(t) x PreDel(u) x Post(s)", "D(s) x Pre(f) x Pre(t) x Pre(u)"))
    // Its children deleted with it: no row of Post(f) references it, the edge holds.
    val released = Map("fkf.s_id" -> KeyCounts(pre = Map(7 -> 2L), post = Map.empty))
    val (holding, notes2) = plan(Map("fkf" -> factInserted) ++ deleted, rely = false, released)
    assert(notes2.contains("FK-Guard and integrity hold on s"), notes2)
    assert(notes2.exists(_.startsWith("integrity of f_s from the counts of ")), notes2)
    assert(holding == Seq("D(f) x PreDel(s) x PreDel(t) x PreDel(u)"))
  }
}
