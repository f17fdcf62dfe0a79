package io.sparkivm.execution

import java.util.concurrent.Executors

import scala.collection.mutable
import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration.Duration
import scala.util.control.NonFatal

import io.sparkivm.IvmErrors
import io.sparkivm.changes.{DeltaSources, PinnedSource}
import io.sparkivm.planner.{Branch, DeltaRules, LeafReader, PlanOnly, PlanSteps, SourceLeaf, ViewMaintenance}
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, AttributeReference, LessThan, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan, Project, Union}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.storage.StorageLevel

/**
 * Reads each table occurrence at the versions pinned at the start of a refresh: Pre at the
 * version the view consumed last, Post at the pinned version, and the net change in between.
 * The net change of a table is computed once per refresh and cached (it is small, and a
 * self-join reads it once per occurrence); `release` frees it.
 */
class PinnedReader(spark: SparkSession, consumed: Map[String, Long],
    pinned: Map[String, PinnedSource], view: String, steps: PlanSteps = PlanOnly) extends LeafReader {

  /** The sign column of delta rows, shared by this reader's deltas and its rules. */
  private val m: Attribute =
    AttributeReference(DeltaSources.Multiplicity, IntegerType, nullable = false)()

  private val fkSettings = PlanningConf.fk(spark, steps)

  /** The delta rules over this reader's leaves. */
  val rules: DeltaRules = new DeltaRules(this, m, fkSettings)

  /** The same rules, with the branches of some subtrees computed elsewhere. */
  def rulesWith(precomputed: LogicalPlan => Option[Seq[Branch]]): DeltaRules =
    new DeltaRules(this, m, fkSettings, precomputed)

  /** The view's rows from scratch, at the pinned versions. */
  def fullRows(maintenance: ViewMaintenance): DataFrame =
    SparkInternals.dataFrame(spark, maintenance.fullPlan(rules))

  private val changes = mutable.LinkedHashMap[String, Option[DataFrame]]()

  // A fresh read per call: plans built here join occurrences of one table at one version
  // (self-joins), and each must have its own attribute ids.
  private def snapshot(leaf: SourceLeaf, version: Long): DataFrame =
    DeltaSources.snapshot(spark, leaf.table, version)

  def pre(leaf: SourceLeaf): LogicalPlan = consumed.get(leaf.name) match {
    case Some(v) => bind(leaf, snapshot(leaf, v), None)
    case None => throw new IllegalStateException(s"no consumed version for ${leaf.name}")
  }

  def post(leaf: SourceLeaf): LogicalPlan = pinned.get(leaf.name) match {
    case Some(p) => bind(leaf, snapshot(leaf, p.version), None)
    case None => leaf.plan // not a Delta table (views with ivm.refresh = full only): read as is
  }

  def delta(leaf: SourceLeaf): Option[LogicalPlan] =
    changesOf(leaf).map(df => bind(leaf, df, Some(m)))

  override def sizeInBytes(leaf: SourceLeaf): Long =
    pinned.get(leaf.name).map(_.sizeInBytes).getOrElse(Long.MaxValue)

  def preDel(leaf: SourceLeaf): LogicalPlan = changesOf(leaf) match {
    case None => post(leaf)
    case Some(df) =>
      val d = bind(leaf, df, Some(m))
      val deleted = Project(leaf.output, Filter(LessThan(m, Literal(0)), d))
      Union(post(leaf), deleted)
  }

  /** The cached net change of a table, None when it did not change. */
  def changesOf(leaf: SourceLeaf): Option[DataFrame] = changes.getOrElseUpdate(leaf.name, {
    val from = consumed.getOrElse(leaf.name, pinned(leaf.name).version)
    val to = pinned(leaf.name).version
    if (from == to) None
    else {
      val net = DeltaSources.netChanges(spark, leaf.table, from, to, view)
      // Caching plans the read, where Delta checks again that the feed covers the versions.
      try Some(net.persist(StorageLevel.MEMORY_AND_DISK)) catch {
        case NonFatal(e) => throw IvmErrors.changeFeedUnavailable(view, leaf.name, e)
      }
    }
  })

  /** Rows of each changed table's net change (runs the cached change plans). */
  def changeCounts(): Map[String, Long] = {
    val changed = changes.collect { case (t, Some(df)) => (t, df) }.toSeq
    // One small job per table, latency-bound: run them side by side. Pool threads are created
    // here, so they inherit this thread's Spark local properties (job group, read metrics).
    val pool = Executors.newFixedThreadPool(math.max(1, math.min(4, changed.size)))
    implicit val ec: ExecutionContext = ExecutionContext.fromExecutorService(pool)
    try {
      val counts = changed.map { case (t, df) => Future {
        // The change feed is read here first; Delta reports a gap in it (disabled for a
        // while, or vacuumed) only when it is read.
        try t -> df.count() catch {
          case NonFatal(e) => throw IvmErrors.changeFeedUnavailable(view, t, e)
        }
      } }
      Await.result(Future.sequence(counts), Duration.Inf).toMap
    } finally pool.shutdown()
  }

  def release(): Unit = changes.values.flatten.foreach(_.unpersist(blocking = false))

  /** The plan of `df`, with the occurrence's own attributes (by name) and `m` if given. */
  private def bind(leaf: SourceLeaf, df: DataFrame, mAttr: Option[Attribute]): LogicalPlan = {
    val src = SparkInternals.analyzed(df)
    val byName = src.output.map(a => a.name.toLowerCase(java.util.Locale.ROOT) -> a).toMap
    def find(name: String) = byName.getOrElse(name.toLowerCase(java.util.Locale.ROOT),
      throw new IllegalStateException(s"${leaf.name} has no column $name"))
    val cols = leaf.output.map(a => Alias(find(a.name), a.name)(exprId = a.exprId))
    val sign = mAttr.map(ma => Alias(find(DeltaSources.Multiplicity), ma.name)(exprId = ma.exprId))
    Project(cols ++ sign, src)
  }
}
