package io.sparkivm.execution

import java.util.{Locale, UUID}

import scala.annotation.tailrec
import scala.collection.mutable
import scala.util.Try
import scala.util.control.NonFatal

import io.sparkivm.catalog.{
  DeltaTables, HistoryEntry, RefreshHistory, RefreshMode, RefreshPolicy, RefreshRecord, ViewCatalog, ViewMetadata
}
import io.sparkivm.changes.{ChangeFeed, ChangeRequest, DeltaSources, DriverChange, KnownFiles, PinnedSource}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import io.sparkivm.policy.{CostModel, PolicyDecision, RefreshPolicies, ViewGraph}
import io.sparkivm.state.{StateBuilds, StoredKeyCounts}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Literal
import org.apache.spark.sql.catalyst.plans.logical.Filter
import org.apache.spark.sql.delta.DeltaConcurrentModificationException
import org.apache.spark.sql.ivm.{CapturedSqlConf, JoinMetrics, ReadMetrics, SessionInternals, SparkInternals}

/**
 * The session a refresh runs in: a clone of the user's, so that the settings a refresh needs
 * for its own reads and writes change nothing for the user's other work.
 */
object RefreshSession {
  private val SnapshotPartitions = "spark.databricks.delta.snapshotPartitions"

  /** A session of the refresh's own, which keeps catalog entries until [[DeltaTables.release]]. */
  def of(user: SparkSession): SparkSession = {
    val spark = DeltaTables.scoped(SparkInternals.isolated(user))
    // A Delta version read for the first time is rebuilt from its log by a job of this many
    // tasks; Delta's default of 50 is meant for clusters and large logs.
    if (!SessionInternals.isSet(user, SnapshotPartitions)) {
      spark.conf.set(SnapshotPartitions, math.max(1, math.min(8, spark.sparkContext.defaultParallelism)).toString)
    }
    // Pinning reads Delta logs and the view's records: small work, whose expressions (Delta's
    // log replay among them) are interpreted until forSmallInputs has sized the inputs.
    if (IvmConf.RefreshInterpretedMaxBytes.get(spark) > 0) spark.conf.set(QueryCodegen.FactoryMode, "NO_CODEGEN")
    spark
  }

  /**
   * Small queries over changes held on the driver: adaptive execution would run each of
   * their stages as a Spark job of its own and re-plan between them; planned statically (their
   * inputs' sizes are known exactly) each query is one job.
   */
  def active[T](spark: SparkSession)(body: => T): T = {
    val previous = SparkSession.getActiveSession
    SparkSession.setActiveSession(spark)
    try body
    finally previous match {
        case Some(p) => SparkSession.setActiveSession(p)
        case None => SparkSession.clearActiveSession()
      }
  }

  def forSmallWork(spark: SparkSession): Unit = spark.conf.set("spark.sql.adaptive.enabled", "false")

  /**
   * Small inputs: operators run one by one, without whole-stage code generation, whose code
   * depends on the shape of the whole stage and so is compiled anew for many of a refresh's
   * plans, which costs more than running them over small inputs (up to about 25 MiB, where both
   * ways cost the same: docs/benchmarks.md). Their expressions are interpreted too
   * (`spark.sql.codegen.factoryMode`): Spark generates the Java source of every projection,
   * predicate and ordering each time an operator starts, on the driver and in every task, before
   * its cache of compiled classes can answer, and compiles what the cache does not hold, which
   * in a new application is all of it. Over a few thousand rows interpreting them costs no more
   * (docs/benchmarks.md, "First refresh of an application").
   * Larger inputs get the `user`'s code generation back: for a recomputation (and a strategy
   * that runs queries of its own), every query; with `perQuery`, each query that scans more than
   * the limit ([[QueryCodegen]]).
   */
  def forSmallInputs(spark: SparkSession, user: SparkSession, inputBytes: => Long,
      perQuery: Boolean): QueryCodegen = {
    import QueryCodegen.{FactoryMode, WholeStage}
    val max = IvmConf.RefreshInterpretedMaxBytes.get(spark)
    lazy val bytes = inputBytes // sized only when the switch is on
    val users = Seq(WholeStage, FactoryMode).map(k => k -> user.conf.getOption(k)).toMap
    if (max <= 0 || (bytes > max && !perQuery)) {
      SessionInternals.setConf(spark, users)
      QueryCodegen.Generated
    } else {
      SessionInternals.setConf(spark, Seq(WholeStage -> Some("false"), FactoryMode -> Some("NO_CODEGEN")))
      if (bytes <= max) QueryCodegen.Interpreted(bytes, max) else new QueryCodegen.PerQuery(spark, max, users)
    }
  }
}

/**
 * REFRESH MATERIALIZED VIEW: one pipeline for every view, whatever its strategy.
 *
 *  1. **pin**: the last refresh record of the backing table (refresh number k, base-table
 *     versions consumed) and the current version of each base table, from the Delta logs on
 *     the driver. If none changed, the refresh is a no-op and has run no Spark job.
 *  2. **changes**: the net changes of all changed tables, read together ([[ChangeFeed]]: one
 *     Spark job, netted on the driver, when they are small).
 *  3. **plan**: the view's [[MaintenanceStrategy]] gives the delta rules; the changed groups'
 *     complete new rows are computed in one query and held on the driver ([[RefreshSteps]]).
 *     A strategy with state (IVM^eps) writes it here, before the commit.
 *  4. **apply + commit**: the rows replace those of their keys in the backing table in one Delta
 *     commit ([[RewriteCommit]]) that records refresh k+1 and the pinned versions (in the table's
 *     properties, so that they survive the log's cleanup) and Delta's transaction (view id, k+1).
 * A refresh killed before step 4 commits leaves nothing behind; one killed after it is done.
 * Two refreshes racing for k+1: Delta lets one commit; the other fails its commit on the
 * conflict and starts again from step 1, where it finds only the newer changes.
 */
object RefreshPipeline extends Logging {
  private val MaxAttempts = 4

  /**
   * Refreshes a view; with `cascade`, first the materialized views it reads, in dependency
   * order (each refresh is a no-op where nothing changed). Returns the reports in the order
   * the views were refreshed, the named view's last. `trigger` says who asked (for the history).
   */
  def refreshAll(user: SparkSession, name: Seq[String], full: Boolean, cascade: Boolean,
      trigger: String = "sql", reason: Option[String] = None): Seq[RefreshReport] = {
    if (!cascade) return Seq(refresh(user, name, full, trigger, reason))
    val meta = ViewCatalog.lookup(user, name)
    // The helpers are refreshed with their view (below), not as views of their own. Upstream views
    // are named by database and table, helpers with their catalog too.
    def key(parts: Seq[String]) = parts.takeRight(2).mkString(".").toLowerCase(Locale.ROOT)
    val helpers = meta.helpers.map(h => key(h.database.toSeq :+ h.table)).toSet
    val upstream = ViewGraph.upstream(user, meta).filterNot(v => helpers.contains(key(v)))
    upstream.map(v => refresh(user, v, full = false, "cascade")) :+ refresh(user, name, full, trigger, reason)
  }

  /**
   * Refreshes a view; `reason`, if given, is why it runs (kept in the history). A view kept
   * through helper views ([[ViewMetadata.helpers]]) refreshes them first, FULL if it is; its
   * report lists their refreshes in its `plan_notes`.
   */
  def refresh(user: SparkSession, name: Seq[String], full: Boolean, trigger: String = "sql",
      reason: Option[String] = None): RefreshReport = {
    val (viewName, helpers) =
      try {
        val meta = ViewCatalog.lookup(user, name)
        meta.viewName -> meta.helpers.map(h => ViewCatalog.lookup(user, Seq(h.database.get, h.table)))
      } catch { case NonFatal(_) => ("", Nil) } // the refresh says what is wrong
    // One instant for all: each helper, and then the view, reads the base tables at the versions
    // the helpers before it read (and each helper at the version its refresh committed), so that
    // the view never joins a recursion's rows of one version with the tables of another.
    val at = mutable.Map[String, Long]()
    val first = helpers.map { h =>
      val startMs = System.currentTimeMillis()
      val r =
        try refreshView(user, Seq(h.view.database.get, h.view.table), full, "helper", None, at.toMap)
        catch {
          case NonFatal(e) =>
            // The view's refresh failed: in its history, and named as the view the user refreshed.
            val named = IvmErrors.throughHelper(viewName, h.view.table, e)
            RefreshFailures.record(user, name, trigger, startMs, named)
            throw named
        }
      at ++= r.sources.map(s => s.table -> s.toVersion) += h.backing.unquotedString -> r.backingVersion
      h.view -> r
    }
    if (first.nonEmpty) FaultInjection.point(user, "after-helpers")
    val report = refreshView(user, name, full, trigger, reason, at.toMap)
    if (first.isEmpty) report
    else {
      // The helpers' work is the view's: their sources among its own, and a phase of its own in its
      // time, jobs and rows read.
      val done = first.map(_._2)
      report.copy(
        // A table read by the view and its helpers is read at one version: listed once.
        sources = (report.sources.filterNot(s => helpers.exists(_.backing.unquotedString == s.table)) ++
          done.flatMap(_.sources)).distinctBy(_.table),
        planNotes = first.map { case (h, r) =>
          s"helper view ${h.quotedString} refreshed first: ${r.mode}, ${r.sourceRowsChanged} source rows " +
            s"changed, ${r.viewRowsChanged} of its rows changed, ${r.totalMs} ms"
        } ++ report.planNotes,
        phasesMs = ("helpers" -> done.map(_.totalMs).sum) +: report.phasesMs,
        phasesJobs = ("helpers" -> done.map(_.sparkJobs).sum) +: report.phasesJobs,
        sparkJobs = report.sparkJobs + done.map(_.sparkJobs).sum,
        sparkTasks = report.sparkTasks + done.map(_.sparkTasks).sum,
        rowsRead = report.rowsRead + done.map(_.rowsRead).sum)
    }
  }

  /** A refresh; `at` pins base tables at the versions given (the others at their latest). */
  private def refreshView(user: SparkSession, name: Seq[String], full: Boolean, trigger: String,
      reason: Option[String], at: Map[String, Long]): RefreshReport = {
    // State is made between refreshes, never during one (StateBuilds).
    StateBuilds.refreshStarted(user)
    try refreshVerified(user, name, full, trigger, reason, at)
    finally {
      StoredKeyCounts.awaitWrites()
      StateBuilds.refreshEnded()
    }
  }

  private def refreshVerified(user: SparkSession, name: Seq[String], full: Boolean, trigger: String,
      reason: Option[String], at: Map[String, Long]): RefreshReport = {
    val report = refreshChecked(user, name, full, trigger, reason, at)
    report.verify.filter(_.differences > 0) match {
      case None => report
      case Some(v) =>
        // A wrong view never stays: recomputed at once, and the mismatch is kept in its history.
        val why = s"spark.ivm.verify = ${v.level} found ${v.differences} rows of refresh " +
          s"#${report.refreshNumber} differing from the query (${v.sample.mkString("; ")}): recomputed to repair it"
        logWarning(s"spark-ivm: $why")
        val repaired = refreshChecked(user, name, full = true, "verify", Some(why), at)
        val checked = v.copy(repairedBy = Some(repaired.refreshNumber))
        if (repaired.policy == RefreshPolicy.IncrementalStrict.sql) {
          throw IvmErrors.verifyMismatch(report.view, report.refreshNumber, v.level, v.differences,
            v.sample.mkString("; "), s"The view was repaired by refresh #${repaired.refreshNumber}, a recomputation.")
        }
        repaired.copy(verify = Some(checked), planNotes = repaired.planNotes :+ checked.describe)
    }
  }

  /** A refresh, checked if `spark.ivm.verify` says so; `because` names why a full one was asked for. */
  private def refreshChecked(user: SparkSession, name: Seq[String], full: Boolean, trigger: String,
      because: Option[String], at: Map[String, Long]): RefreshReport = {
    val spark = RefreshSession.of(user)
    val measureJoins = IvmConf.MetricsRowsJoined.get(spark)
    val timer = new PhaseTimer
    // Active for the refresh: Delta's commands read their settings from the active session.
    def run() = RefreshProgress.during(spark, ViewCatalog.qualify(spark, name).unquotedString) {
      RefreshSession.active(spark)(attempt(spark, user, name, full, 1, timer, trigger, because, at))
    }
    val ((report, work), joined) =
      try {
        if (measureJoins) JoinMetrics.measure(spark)(ReadMetrics.measure(spark)(run()))
        else (ReadMetrics.measure(spark)(run()), 0L)
      } catch {
        case e: Throwable =>
          RefreshFailures.record(user, name, trigger, timer.startedAtMs, e)
          throw IvmErrors.inView(name.mkString("."), e)
      } finally DeltaTables.release(spark)
    report.copy(rowsRead = work.rowsRead, rowsJoined = joined, sparkJobs = work.jobs, sparkTasks = work.tasks,
      phasesJobs = timer.jobsPerPhase(work.jobStarts))
  }

  @tailrec
  private def attempt(spark: SparkSession, user: SparkSession, name: Seq[String], full: Boolean, n: Int,
      timer: PhaseTimer, trigger: String, because: Option[String], at: Map[String, Long]): RefreshReport = {
    // Left: the next attempt's reason, if it must recompute.
    val result =
      try Right(refreshOnce(spark, user, name, full, timer, trigger, because, at))
      catch {
        case e: Exception if n < MaxAttempts && isConflict(e) =>
          logWarning(s"spark-ivm: refresh of ${name.mkString(".")} lost a commit race; retrying", e)
          Left(None)
        case e: Exception if !full && n < MaxAttempts && recomputesInstead(spark, name, e) =>
          val why = "AUTO recomputed the view, as the base tables' changes since the last refresh cannot be " +
            s"followed: ${IvmErrors.changesNotFollowable(e).map(_.getMessage).getOrElse(e.getMessage)}"
          logWarning(s"spark-ivm: ${name.mkString(".")}: $why")
          Left(Some(because.fold(why)(b => s"$b; $why")))
      }
    result match {
      case Right(report) => report
      case Left(None) =>
        timer.mark("retry")
        attempt(spark, user, name, full, n + 1, timer, trigger, because, at)
      case Left(recompute) =>
        timer.mark("stopped")
        attempt(spark, user, name, full = true, n + 1, timer, trigger, recompute, at)
    }
  }

  /**
   * Under REFRESH POLICY AUTO, a refresh that cannot follow the changes since the last one
   * ([[IvmErrors.changesNotFollowable]]: they were vacuumed, a base table was replaced) recomputes
   * the view, as AUTO does wherever incremental maintenance is not possible. Under INCREMENTAL
   * and INCREMENTAL STRICT the error stands, and says to run REFRESH ... FULL. Nothing was
   * written: the attempt failed before its commit.
   */
  private def recomputesInstead(spark: SparkSession, name: Seq[String], e: Exception): Boolean =
    IvmErrors.changesNotFollowable(e).isDefined &&
      Try(ViewCatalog.lookup(spark, name).policy).toOption.contains(RefreshPolicy.Auto)

  private def isConflict(e: Throwable): Boolean = e match {
    case null => false
    case _: DeltaConcurrentModificationException => true
    case _: StateConflictException => true
    case other => isConflict(other.getCause)
  }

  /** One attempt, run in `spark` (the refresh's own session); fault-injection points of tests are
   * set on the `user`'s session. */
  private def refreshOnce(spark: SparkSession, user: SparkSession, name: Seq[String], full: Boolean,
      timer: PhaseTimer, trigger: String, because: Option[String], at: Map[String, Long]): RefreshReport = {
    val meta = ViewCatalog.lookup(spark, name)
    def phase(what: String): Unit = RefreshProgress.phase(spark, meta.viewName, what)
    phase("finding the base tables' changes")
    // The refresh's own session analyzes and runs the query under the settings the view captured.
    CapturedSqlConf.applyTo(spark, meta.sqlConf)
    FaultInjection.point(user, "refresh-start")
    val (last, foreign) = ViewCatalog.lastRefresh(spark, meta)
    val recompute = full || meta.mode == RefreshMode.Full
    // A version older than the one consumed (another refresh of the view has gone past it) is not
    // pinned: the view moves forward only.
    val pinAt = at.filter { case (t, v) => last.sourceVersions.get(t).forall(_ <= v) }
    if (foreign.nonEmpty && !recompute) {
      throw IvmErrors.backingAltered(meta.viewName, s"commits ${foreign.mkString("; ")}")
    }
    // Pin from the recorded sources first: with nothing new there is nothing to analyze. A view
    // whose filters read the time has something new at every later instant.
    if (!recompute && last.epsilon.forall(_.eps == meta.eps) && last.instant.isEmpty &&
      unchanged(spark, meta, last, pinAt)) {
      timer.mark("pin")
      return RefreshReport(meta.viewName, "noop", last.number,
        meta.sources.map { s =>
          val v = last.sourceVersions.getOrElse(s.table, -1L)
          SourceReport(s.table, v, v, 0L)
        }, Nil, Nil, 0, 0, 0, timer.result, last.backingVersion, "no base table changed since the last refresh",
        policy = meta.policy.sql, reason = "no base table changed since the last refresh")
    }

    val incremental = meta.mode == RefreshMode.Incremental
    val analyzed = ViewAnalysis.reanalyze(spark, meta, incremental)
    // A refresh never changes a base table's properties: the change feed is turned on at CREATE
    // only (spark.ivm.autoEnableChangeDataFeed), and one turned off since is an error.
    val pinned = ViewAnalysis.pin(spark, meta.viewName, analyzed, incremental && !recompute, autoEnable = false,
      if (recompute) Nil else meta.sources, pinAt)
    val number = last.number + 1
    val attemptId = UUID.randomUUID().toString
    val versions = pinned.map { case (t, p) => t -> p.version }
    val strategy = MaintenanceStrategy.of(spark, analyzed, incremental)
    def context(reader: PinnedReader) = RefreshContext(spark, meta, analyzed, last, reader, attemptId)
    def entry(mode: String, decision: PolicyDecision, rows: Long, changeBytes: Long, tableBytes: Long) =
      Some(HistoryEntry(number, timer.startedAtMs, -1, mode, decision.reason, rows, versions, changeBytes,
          tableBytes, trigger))

    // The mode: fixed by the request, the view's layout or stale state; else by the policy.
    val fixed = RefreshPolicies.fixedMode(meta, full, strategy.stale(meta, last))
      .map(d => because.map(r => d.copy(reason = r)).getOrElse(d))
    val (changed, sizes) = if (fixed.isDefined) (Nil, Map.empty[String, Long])
    else {
      checkSources(meta, last, pinned)
      val changed = pinned.values.filter(p => last.sourceVersions(p.name) != p.version).toSeq
      if (changed.isEmpty && (last.instant.isEmpty || last.instant == analyzed.instant)) {
        timer.mark("pin")
        return RefreshReport(meta.viewName, "noop", last.number, sourceReports(last, pinned, Map.empty),
          Nil, Nil, 0, 0, 0, timer.result, last.backingVersion,
          "no base table changed since the last refresh", policy = meta.policy.sql,
          reason = "no base table changed since the last refresh")
      }
      (changed, changed.map(p => p.name -> ChangeFeed.changeBytes(spark, meta.viewName, request(p, last))).toMap)
    }
    val decision = fixed.getOrElse(RefreshPolicies.choose(spark, meta, sizes.values.sum,
        pinned.values.map(_.sizeInBytes).sum))
    FaultInjection.point(user, "after-pin")
    // Read from the backing table's Delta log at most once, and only by those that need it.
    lazy val backingBytes = BackingTable.sizeInBytes(spark, meta)
    val codegen = RefreshSession.forSmallInputs(spark, user, pinned.values.map(_.sizeInBytes).sum + backingBytes,
      perQuery = decision.incremental && strategy.sizesQueries)

    // `stopped`: an incremental attempt of this refresh that AUTO stopped, and its change's bytes.
    def recomputeAll(decision: PolicyDecision, stopped: Option[(AutoStop.Stopped, Long)]): RefreshReport = {
      timer.mark(if (stopped.isDefined) "stopped" else "pin")
      phase("recomputing the query")
      val reader = new PinnedReader(spark, Map.empty, pinned, meta.viewName)
      val rows = reader.fullRows(analyzed.maintenance)
      val epsilon = strategy.build(context(reader))
      val tableBytes = pinned.values.map(_.sizeInBytes).sum
      val record = RefreshRecord(number, "full", versions, attemptId, -1, 0, epsilon,
        entry("full", decision, -1, stopped.fold(-1L)(_._2), tableBytes).map(_.copy(stoppedMs =
            stopped.map(_._1.elapsedMs))), analyzed.instant)
      FaultInjection.point(user, "before-commit")
      // The base tables' shape as read now, in the same commit.
      BackingTable.overwrite(spark, meta.copy(sources = pinned.values.toSeq.sortBy(_.name).map(_.info)), rows, record,
        analyzed.maintenance)
      CatalogViews.matchTypes(spark, meta, analyzed)
      timer.mark("recompute")
      FaultInjection.point(user, "after-commit")
      report(spark, meta, number, attemptId, "full", last, pinned, Map.empty, Nil,
        epsilon.map(e => s"IVM^eps state rebuilt: eps = ${e.eps}, N = ${e.n}").toSeq ++ codegen.note,
        ApplyMetrics(-1, -1, -1), timer, decision)
    }
    if (!decision.incremental) return recomputeAll(decision, None)

    if (IvmConf.KnownFilesEnabled.get(spark)) {
      changed.foreach(p => KnownFiles.listFirst(spark, p.table, last.sourceVersions(p.name), p.version))
    }
    timer.mark("pin")
    phase("reading the changes")
    val changes = ChangeFeed.read(spark, meta.viewName, changed.map(request(_, last)),
      IvmConf.ChangesLocalMaxBytes.get(spark), sizes)
    val probe = PlanningConf.probe(spark)
    val stop = RefreshPolicies.stopAfterMs(spark, decision).map(new AutoStop(spark.sparkContext, _, attemptId))
    val steps = new RefreshSteps(spark,
      // The backing table's size is read only when probing is on at all.
      probe.copy(enabled = probe.enabled && probe.worth(backingBytes)),
      IvmConf.LocalMaxRows.get(spark), codegen, stop)
    // Small changes (held on the driver) make small queries: run them for latency.
    if (changes.values.forall(_.isInstanceOf[DriverChange])) RefreshSession.forSmallWork(spark)
    // The backing table's version, read once for every way of reading its old rows.
    lazy val backingNow = BackingTable.latest(spark, meta)
    val old = () => BackingTable.at(spark, meta, backingNow, positions = true)
    val reader = new PinnedReader(spark, last.sourceVersions, pinned, meta.viewName, steps, changes,
      Some(BackingTable.stateRoot(spark, meta.backing)), last.instant,
      analyzed.maintenance.recursiveRows(_, BackingTable.at(spark, meta, backingNow, positions = false)))
    try {
      // Nothing is written until the changed rows are computed: AUTO may stop that and recompute.
      val (counts, run, branches, rows, lookedUp) = AutoStop.guard(stop) {
        val counts = reader.changeCounts()
        timer.mark("changes")
        FaultInjection.point(user, "after-changes")
        phase("computing the changed rows")
        val run = strategy.begin(context(reader))
        val rules = run.rules
        val branches = analyzed.maintenance.branches(rules).map(_.describe)
        timer.mark("delta-plan")
        var lookedUp = Option.empty[String]
        val rows = analyzed.maintenance.mergeSource(rules, old, steps, markExisting = true,
          keys => {
            var made = false
            val kept = BackingTable.oldOfKeys(spark, meta, backingNow, analyzed.maintenance, keys, attemptId,
              () => made = true)
            kept.map { plan =>
              lookedUp = Some(s"old rows of the ${keys.size} changed groups looked up in the view's rows kept in " +
                "memory by key (spark.ivm.state.executorMaxBytes)" +
                (if (made) ", read from the table now to be kept" else ", not read from the table"))
              plan
            }
          }).map(steps.materialize)
        timer.mark("delta")
        (counts, run, branches, rows, lookedUp)
      }
      // Only the clock moved, and no row crossed a time filter's bound: nothing to commit. The
      // view stays at its recorded instant, and the next refresh moves it from there.
      if (changed.isEmpty && rows.forall(steps.isEmpty)) {
        val why = "no base table changed, and no row crossed a time filter's bounds since " +
          last.instant.map(t => new java.sql.Timestamp(t / 1000L)).getOrElse("the last refresh")
        return RefreshReport(meta.viewName, "noop", last.number, sourceReports(last, pinned, Map.empty),
          branches, Nil, 0, 0, 0, timer.result, last.backingVersion, why, policy = meta.policy.sql, reason = why)
      }
      val notes = mutable.ArrayBuffer[String]() ++= run.notes ++= lookedUp ++= steps.notes
      phase("moving the view's state")
      val epsilon = run.advance(notes)
      if (epsilon.isDefined) {
        timer.mark("state")
        FaultInjection.point(user, "after-state")
      }
      val tableBytes = if (decision.candidates.isEmpty) -1L else pinned.values.map(_.sizeInBytes).sum
      val record = RefreshRecord(number, "incremental", versions, attemptId, -1, 0, epsilon,
        entry("incremental", decision, counts.values.sum, sizes.values.sum, tableBytes), analyzed.instant)
      FaultInjection.point(user, "before-commit")
      // A top-k view's marks move with its changed rows (and, where they must, other rows').
      val marked = rows.map { r =>
        val (plan, note) = TopMarks.moved(spark, analyzed.maintenance, backingNow, old, r, steps, codegen)
        notes ++= note
        plan
      }
      val applied = if (FaultInjection.corruptApply(user)) marked.map(Filter(Literal(false), _)) else marked
      phase("applying the changed rows in one commit")
      // The apply scans the files of the backing table that hold the changed keys.
      val metrics = codegen.scanning(backingBytes + applied.map(QueryCodegen.scannedBytes).sum) {
        BackingTable.apply(spark, meta, analyzed.maintenance, applied, record, () => timer.mark("apply"))
      }
      notes ++= codegen.note
      timer.mark("commit")
      FaultInjection.point(user, "after-commit")
      val done = report(spark, meta, number, attemptId, "incremental", last, pinned, counts, branches, notes.toSeq,
        metrics, timer, decision)
      if (done.mode != "incremental") done
      else {
        // The committed rows as any reader reads them, from the files (not rows held in memory,
        // which are what the check is to check).
        def committed() = SparkInternals.analyzed(DeltaSources.snapshot(spark, meta.backing, done.backingVersion))
        phase("verifying the committed rows")
        // The check recomputes the query for the changed keys from the tables at full size.
        val verified = codegen.scanning(pinned.values.map(_.sizeInBytes).sum) {
          RefreshVerification.run(spark, meta.viewName, () => committed(), analyzed.maintenance, pinned, rows)
        }
        if (verified.isDefined) timer.mark("verify")
        done.copy(verify = verified, planNotes = done.planNotes ++ verified.map(_.describe),
          phasesMs = timer.result)
      }
    } catch {
      case stopped: AutoStop.Stopped =>
        val why = s"AUTO stopped the incremental refresh after ${CostModel.seconds(stopped.elapsedMs)}, " +
          s"past spark.ivm.refreshPolicy.autoStopFactor times the recomputation it estimated " +
          s"(${decision.candidates.find(_.mode == "full").map(e => CostModel.seconds(e.ms)).getOrElse("?")}), " +
          "before it wrote anything, and recomputed the view"
        logWarning(s"spark-ivm: ${meta.viewName}: $why")
        recomputeAll(decision.copy(mode = "full", reason = why), Some((stopped, sizes.values.sum)))
    } finally {
      reader.release()
      codegen.release()
    }
  }

  private def request(p: PinnedSource, last: RefreshRecord) =
    ChangeRequest(p.table, last.sourceVersions(p.name), p.version, Some(p.schema))

  /**
   * True if every base table the view consumed is still the same table (its Delta table id: one
   * dropped and created again may have reached the same version number) at the consumed version.
   */
  private def unchanged(spark: SparkSession, meta: ViewMetadata, last: RefreshRecord,
      at: Map[String, Long]): Boolean =
    meta.sources.nonEmpty && meta.sources.forall { s =>
      last.sourceVersions.get(s.table).exists { v =>
        val id = ViewCatalog.qualify(spark, s.table.split('.').toSeq.takeRight(2))
        try {
          val (tableId, latest) = DeltaSources.current(spark, id)
          tableId == s.tableId && at.getOrElse(s.table, latest) == v
        } catch { case _: Exception => false }
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
      branches: Seq[String], notes: Seq[String], metrics: ApplyMetrics, timer: PhaseTimer,
      decision: PolicyDecision): RefreshReport = {
    val (committed, _) = ViewCatalog.lastRefresh(spark, meta)
    val skipped = committed.attempt != attemptId
    if (!skipped) RefreshHistory.measuredAfterCommit(meta.id, number, System.currentTimeMillis() - timer.startedAtMs)
    val (ins, upd, del) = if (metrics.inserted >= 0) (metrics.inserted, metrics.updated, metrics.deleted)
    else (SparkInternals.dataFrame(spark, BackingTable.current(spark, meta)).count(), 0L, 0L)
    timer.mark("report")
    RefreshReport(meta.viewName, if (skipped) "skipped" else mode, committed.number,
      sourceReports(last, pinned, counts), branches, notes, ins, upd, del, timer.result,
      committed.backingVersion,
      if (skipped) s"refresh ${committed.number} was committed by a concurrent refresh; " +
        "nothing was applied twice"
      else s"refresh $number committed",
      policy = meta.policy.sql, reason = decision.reason, candidates = decision.candidates)
  }
}
