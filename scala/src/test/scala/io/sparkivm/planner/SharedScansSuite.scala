package io.sparkivm.planner

import io.sparkivm.TestSpark
import io.sparkivm.execution.RefreshSteps
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Add, Alias, Attribute, AttributeReference, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan, Project}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{IntegerType, StringType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Reads of a table restricted to a set of keys, computed once per refresh and shared: the rows
 * of the keys at Post, read once and filtered for fewer keys; Pre's derived from them and the
 * change held on the driver (Pre = Post - D) without reading Pre; only the columns the view
 * reads kept (others NULL); and no sharing where it does not apply.
 */
class SharedScansSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("shared-scans")

  override def beforeAll(): Unit = {
    spark.sql("DROP TABLE IF EXISTS ss_t")
    spark.sql("CREATE TABLE ss_t (k INT, a INT, b STRING) USING delta")
  }

  private def leaf(): SourceLeaf =
    SparkInternals.analyzed(spark.table("ss_t")).collectFirst { case SourceLeaf(l) => l }.get

  private val schema = StructType(Seq(StructField("k", IntegerType), StructField("a", IntegerType),
      StructField("b", StringType)))

  private def internal(k: Int, a: Int, b: String): InternalRow = InternalRow(k, a, UTF8String.fromString(b))

  // The table at Pre and at Post, and the net change between them (the columns, then the sign).
  private val preRows = Seq(internal(1, 10, "x"), internal(2, 20, "y"), internal(2, 21, "y"), internal(3, 30, "z"))
  private val postRows = Seq(internal(1, 11, "x"), internal(2, 20, "y"), internal(3, 30, "z"), internal(4, 40, "w"))
  private val change = Seq(
    InternalRow(1, 10, UTF8String.fromString("x"), -1), InternalRow(1, 11, UTF8String.fromString("x"), 1),
    InternalRow(2, 21, UTF8String.fromString("y"), -1), InternalRow(4, 40, UTF8String.fromString("w"), 1))

  /** Pre and Post as relations with the occurrence's attributes; counts the reads of each. */
  private class VersionedReader(size: Long) extends LeafReader {
    var preReads = 0
    var postReads = 0
    private def rel(l: SourceLeaf, rows: Seq[InternalRow]): LogicalPlan = {
      val fresh = l.output.map(_.newInstance())
      Project(l.output.zip(fresh).map { case (o, n) => Alias(n, o.name)(exprId = o.exprId) }, LocalRelation(fresh, rows))
    }
    def pre(l: SourceLeaf): LogicalPlan = { preReads += 1; rel(l, preRows) }
    def post(l: SourceLeaf): LogicalPlan = { postReads += 1; rel(l, postRows) }
    def preDel(l: SourceLeaf): LogicalPlan = post(l)
    def delta(l: SourceLeaf): Option[LogicalPlan] = Some(LocalRelation(l.output :+ m, change))
    override def deltaOnDriver(l: SourceLeaf): Option[DriverDeltaRows] =
      Some(DriverDeltaRows(schema.add(StructField("__ivm_m", IntegerType)), change))
    override def versions(l: SourceLeaf): Option[(String, Long, Long)] = Some(("table-id", 1L, 2L))
    override def sizeInBytes(l: SourceLeaf): Long = size
  }

  private val m: Attribute = AttributeReference("__ivm_m", IntegerType)()

  /** Counts the plans it runs. */
  private class CountingSteps extends RefreshSteps(spark, ProbeSettings.Off, 1000) {
    var runs = 0
    override def materialize(plan: LogicalPlan): LogicalPlan = { runs += 1; super.materialize(plan) }
  }

  private def keys(ks: Int*): LogicalPlan =
    LocalRelation.fromExternalRows(Seq(AttributeReference("__k", IntegerType)()), ks.map(k => Row(k)))

  private def rowsOf(plan: LogicalPlan): Seq[Row] =
    SparkInternals.dataFrame(spark, plan).collect().toSeq.sortBy(_.toString)

  private def setUp(size: Long = Long.MaxValue, maxKeys: Int = 100) = {
    val l = leaf()
    val reader = new VersionedReader(size)
    val steps = new CountingSteps
    val shared = new SharedScans(reader, steps, minBytes = 1000, maxKeys = maxKeys)
    // The view reads k and a of the table, not b.
    shared.noteColumnsRead(Project(l.output.take(2), l.plan))
    (l, reader, steps, shared)
  }

  private def key(plan: LogicalPlan): Seq[Attribute] = Seq(plan.output.head)

  test("Post's rows of the keys are read once; fewer keys are filtered from them") {
    val (l, _, steps, shared) = setUp()
    val post = shared.post(l)
    val got = shared.restrict(post, key(post), keys(1, 2), None).get
    assert(got.output.map(_.exprId) == post.output.map(_.exprId), "the read's own attributes")
    assert(rowsOf(got) == Seq(Row(1, 11, null), Row(2, 20, null)), "b is not read by the view: NULL")
    assert(steps.runs == 1)
    val again = shared.post(l)
    assert(rowsOf(shared.restrict(again, key(again), keys(2), None).get) == Seq(Row(2, 20, null)))
    assert(steps.runs == 1, "a subset of the keys read is filtered from the held rows")
    val more = shared.post(l)
    assert(rowsOf(shared.restrict(more, key(more), keys(2, 3), None).get) == Seq(Row(2, 20, null), Row(3, 30, null)))
    assert(steps.runs == 2, "keys not held are read")
  }

  test("Pre's rows are Post's less the change, without reading Pre") {
    val (l, reader, steps, shared) = setUp()
    val pre = shared.pre(l)
    val got = shared.restrict(pre, key(pre), keys(1, 2, 4), None).get
    assert(rowsOf(got) == Seq(Row(1, 10, null), Row(2, 20, null), Row(2, 21, null)))
    assert(steps.runs == 1, "one read, of Post")
    val expected = preRows.filter(r => Set(1, 2, 4)(r.getInt(0))).map(r => Row(r.getInt(0), r.getInt(1), null))
    assert(rowsOf(got) == expected.sortBy(_.toString))
    val post = shared.post(l)
    assert(rowsOf(shared.restrict(post, key(post), keys(4), None).get) == Seq(Row(4, 40, null)))
    assert(steps.runs == 1, "Post's rows of the keys were read for Pre and are shared")
    assert(reader.preReads == 1, "Pre was only planned (tracked), never computed")
  }

  test("not shared: a small table, keys that are not columns, too many keys, an untracked plan") {
    val (l, _, _, small) = setUp(size = 10)
    val p = small.post(l)
    assert(small.restrict(p, key(p), keys(1), None).isEmpty, "under minBytes")
    val (l2, _, _, shared) = setUp(maxKeys = 1)
    val p2 = shared.post(l2)
    assert(shared.restrict(p2, key(p2), keys(1, 2), None).isEmpty, "more keys than maxKeys")
    assert(shared.restrict(p2, Seq(Add(p2.output.head, Literal(1))), keys(1), None).isEmpty, "an expression key")
    val untracked = l2.plan
    assert(shared.restrict(untracked, key(untracked), keys(1), None).isEmpty, "not a read of pre or post")
  }
}
