package io.sparkivm.execution

import java.util.UUID

import scala.annotation.tailrec

import io.sparkivm.IvmErrors
import io.sparkivm.catalog.{RefreshMode, RefreshRecord, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.{DeltaSources, PinnedSource}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.delta.DeltaConcurrentModificationException
import org.apache.spark.sql.ivm.{JoinMetrics, ReadMetrics, SparkInternals}

/**
 * REFRESH MATERIALIZED VIEW. One refresh:
 *  1. reads the last refresh record from the backing table (refresh number k, base-table
 *     versions consumed) and refuses to go on if rows were changed there by anyone else;
 *  2. re-analyzes the query and pins every base table at its current version (Post); commits
 *     made from now on go to the next refresh;
 *  3. builds the delta plan from the net changes between the consumed and pinned versions;
 *  4. MERGEs the changed groups into the backing table in one Delta commit that also records
 *     refresh k+1 and the pinned versions, as Delta transaction (view id, k+1).
 * A refresh killed before step 4 commits leaves nothing behind; one killed after it is done.
 * Two refreshes racing for k+1: Delta lets one commit; the other fails its commit on the
 * conflict and starts again from step 1, where it finds only the newer changes.
 */
object Refresher extends Logging {
  val AutoEnableConf = "spark.ivm.autoEnableChangeDataFeed"
  private val MaxAttempts = 4

  def autoEnable(spark: SparkSession): Boolean =
    spark.conf.getOption(AutoEnableConf).forall(_.trim.equalsIgnoreCase("true"))

  def refresh(spark: SparkSession, name: Seq[String], full: Boolean): RefreshReport = {
    val ((report, rows), joined) = JoinMetrics.measure(spark) {
      ReadMetrics.measure(spark)(attempt(spark, name, full, 1))
    }
    report.copy(rowsRead = rows, rowsJoined = joined)
  }

  @tailrec
  private def attempt(spark: SparkSession, name: Seq[String], full: Boolean, n: Int): RefreshReport = {
    val result = try Right(refreshOnce(spark, name, full)) catch {
      case e: Exception if n < MaxAttempts && isConflict(e) =>
        logWarning(s"spark-ivm: refresh of ${name.mkString(".")} lost a commit race; retrying", e)
        Left(e)
    }
    result match {
      case Right(report) => report
      case Left(_) => attempt(spark, name, full, n + 1)
    }
  }

  private def isConflict(e: Throwable): Boolean = e match {
    case null => false
    case _: DeltaConcurrentModificationException => true
    case _: StateConflictException => true
    case other => isConflict(other.getCause)
  }

  private def refreshOnce(spark: SparkSession, name: Seq[String], full: Boolean): RefreshReport = {
    val timer = new PhaseTimer
    val meta = ViewCatalog.lookup(spark, name)
    FaultInjection.point(spark, "refresh-start")
    val (last, foreign) = ViewCatalog.lastRefresh(spark, meta)
    val recompute = full || meta.mode == RefreshMode.Full
    if (foreign.nonEmpty && !recompute) {
      throw IvmErrors.backingAltered(meta.viewName, s"commits ${foreign.mkString("; ")}")
    }
    val incremental = meta.mode == RefreshMode.Incremental
    val analyzed = ViewAnalysis.reanalyze(spark, meta, incremental)
    val pinned = ViewAnalysis.pin(spark, meta.viewName, analyzed, incremental, autoEnable(spark))
    val number = last.number + 1
    val attemptId = UUID.randomUUID().toString
    val versions = pinned.map { case (t, p) => t -> p.version }

    val triangle = TriangleViews.query(spark, analyzed, incremental)
    // A triangle view without state for its eps (eps changed, or a killed ALTER) is rebuilt.
    val stale = triangle.isDefined && !last.epsilon.exists(_.eps == meta.eps)
    if (recompute || stale) {
      timer.mark("prepare")
      val reader = new PinnedReader(spark, Map.empty, pinned, meta.viewName)
      val rows = reader.fullRows(analyzed.maintenance)
      val epsilon = triangle.map { q =>
        val tables = new TriangleStateTables(spark, meta, attemptId)
        val engine = new TriangleMaintenance(spark, q, reader.rules, PlanningConf.probe(spark).maxKeys)
        TriangleViews.build(spark, engine, tables, meta.eps)
      }
      val record = RefreshRecord(number, "full", versions, attemptId, -1, 0, epsilon)
      FaultInjection.point(spark, "before-commit")
      BackingTable.overwrite(spark, meta, rows, record)
      timer.mark("recompute")
      FaultInjection.point(spark, "after-commit")
      val updated = meta.copy(sources = pinned.values.toSeq.sortBy(_.name).map(_.info))
      ViewCatalog.updateSources(spark, updated)
      return report(spark, meta, number, attemptId, "full", last, pinned, Map.empty, Nil,
        epsilon.map(e => s"IVM^eps state rebuilt: eps = ${e.eps}, N = ${e.n}").toSeq,
        MergeMetrics(-1, -1, -1), timer)
    }

    checkSources(meta, last, pinned)
    val changed = pinned.filter { case (t, p) => last.sourceVersions(t) != p.version }
    timer.mark("prepare")
    if (changed.isEmpty) {
      return RefreshReport(meta.viewName, "noop", last.number, sourceReports(last, pinned, Map.empty),
        Nil, Nil, 0, 0, 0, timer.result, last.backingVersion,
        "no base table changed since the last refresh")
    }
    FaultInjection.point(spark, "after-pin")
    val probe = PlanningConf.probe(spark)
    val steps = new BackingTable.Checkpoints(spark,
      // The backing table's size is read only when probing is on at all.
      probe.copy(enabled = probe.enabled && probe.worth(BackingTable.sizeInBytes(spark, meta))))
    val reader = new PinnedReader(spark, last.sourceVersions, pinned, meta.viewName, steps)
    try {
      analyzed.tables.foreach(reader.changesOf)
      val counts = reader.changeCounts()
      timer.mark("changes")
      FaultInjection.point(spark, "after-changes")
      // IVM^eps: the triangle block's delta from the state, then the rest of the view as usual.
      val eps = triangle.map(q => new TriangleRefresh(spark, meta, q, reader, last.epsilon.get, attemptId))
      val rules = eps.map(_.rules).getOrElse(reader.rules)
      val branches = analyzed.maintenance.branches(rules).map(_.describe)
      timer.mark("delta-plan")
      val source: DataFrame = BackingTable.materialize(analyzed.maintenance
        .mergeSource(rules, () => BackingTable.current(spark, meta),
          steps)
        .map(SparkInternals.dataFrame(spark, _))
        .getOrElse(spark.table(meta.backing.quotedString).limit(0)))
      timer.mark("delta")
      val epsNotes = scala.collection.mutable.ArrayBuffer[String]()
      val epsilon = eps.map { e =>
        val next = e.advance(epsNotes)
        timer.mark("state")
        FaultInjection.point(spark, "after-state")
        next
      }
      val record = RefreshRecord(number, "incremental", versions, attemptId, -1, 0, epsilon)
      FaultInjection.point(spark, "before-commit")
      val metrics = BackingTable.merge(spark, meta, analyzed.maintenance, source, record, steps.probe)
      timer.mark("merge")
      FaultInjection.point(spark, "after-commit")
      report(spark, meta, number, attemptId, "incremental", last, pinned, counts, branches,
        rules.fk.notes ++ epsNotes, metrics, timer)
    } finally {
      reader.release()
    }
  }

  /** Base tables must be the same tables, with the columns the view read, as last time. */
  private def checkSources(meta: ViewMetadata, last: RefreshRecord,
      pinned: Map[String, PinnedSource]): Unit = {
    pinned.values.foreach { p =>
      meta.sources.find(_.table == p.name) match {
        case Some(before) => DeltaSources.checkUnchangedShape(meta.viewName, before, p)
        case None => throw IvmErrors.sourceChanged(meta.viewName, p.name,
          "the query now reads it but the view never did (was a view it reads redefined?)")
      }
      if (!last.sourceVersions.contains(p.name)) {
        throw IvmErrors.sourceChanged(meta.viewName, p.name, "no consumed version is recorded")
      }
    }
  }

  private def sourceReports(last: RefreshRecord, pinned: Map[String, PinnedSource],
      counts: Map[String, Long]): Seq[SourceReport] =
    pinned.values.toSeq.sortBy(_.name).map { p =>
      SourceReport(p.name, last.sourceVersions.getOrElse(p.name, -1L), p.version,
        counts.getOrElse(p.name, 0L))
    }

  private def report(spark: SparkSession, meta: ViewMetadata, number: Long, attemptId: String,
      mode: String, last: RefreshRecord, pinned: Map[String, PinnedSource], counts: Map[String, Long],
      branches: Seq[String], notes: Seq[String], metrics: MergeMetrics, timer: PhaseTimer): RefreshReport = {
    val (committed, _) = ViewCatalog.lastRefresh(spark, meta)
    val skipped = committed.attempt != attemptId
    val (ins, upd, del) = if (metrics.inserted >= 0) (metrics.inserted, metrics.updated, metrics.deleted)
      else (spark.table(meta.backing.quotedString).count(), 0L, 0L)
    timer.mark("report")
    RefreshReport(meta.viewName, if (skipped) "skipped" else mode, committed.number,
      sourceReports(last, pinned, counts), branches, notes, ins, upd, del, timer.result,
      committed.backingVersion,
      if (skipped) s"refresh ${committed.number} was committed by a concurrent refresh; " +
        "nothing was applied twice" else s"refresh $number committed")
  }
}
