package io.sparkivm.commands

import java.sql.Timestamp

import scala.util.control.NonFatal

import io.sparkivm.access.{AccessPatterns, CqapAnalysis}
import io.sparkivm.catalog.{DeltaTables, RefreshMode, RefreshRecord, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.{ChangeFeed, ChangeRequest, DeltaSources, PinnedSource}
import io.sparkivm.conf.IvmConf
import io.sparkivm.epsilon.{TriangleMaintenance, TriangleStateTables, TriangleViews}
import io.sparkivm.execution.{
  AnalyzedView, BackingTable, CheckSteps, Freshness, KeyedViewRows, PinnedReader, PlanningConf, StateReport,
  ViewAnalysis
}
import io.sparkivm.planner.{AggregateState, PlanOnly, TimeFilters}
import io.sparkivm.policy.{CostModel, PolicyDecision, RefreshPolicies}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.ivm.{SessionInternals, SparkInternals}
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, render}

/** DESCRIBE MATERIALIZED VIEW as (name, value, comment) rows and as one JSON document. */
case class ViewDescription(rows: Seq[(String, String, String)], json: String)

/** DESCRIBE MATERIALIZED VIEW and EXPLAIN REFRESH MATERIALIZED VIEW. */
object ViewExplainer {

  /**
   * DESCRIBE MATERIALIZED VIEW: the view's columns, metadata, maintenance, sources and last
   * refresh, as rows (the layout of DESCRIBE TABLE EXTENDED) and as JSON fields.
   */
  def describe(spark: SparkSession, name: Seq[String]): ViewDescription = {
    val meta = ViewCatalog.lookup(spark, name)
    val view = SessionInternals.catalog(spark).getTableMetadata(meta.view)
    val (last, foreign) = ViewCatalog.lastRefresh(spark, meta)
    val columns = view.schema.fields.toSeq.map(f =>
      (f.name, f.dataType.simpleString,
        f.getComment().getOrElse("")))
    var strategy = if (meta.mode == RefreshMode.Full) "full" else "counting"
    var shape: Option[String] = None
    var epsilon: Option[JValue] = None
    var access: Option[Either[String, CqapAnalysis]] = None
    val maintenance =
      try {
        val a = ViewAnalysis.reanalyze(spark, meta, meta.mode == RefreshMode.Incremental)
        if (meta.accessBy.nonEmpty) access = Some(accessAnalysis(a, meta))
        val m = a.maintenance
        shape = Some(m.shape.kind)
        Seq(("Maintenance",
            if (meta.mode == RefreshMode.Full) "recomputed on every refresh"
            else s"counting IVM, ${m.shape.kind}", "")) ++
          m.states.map(s => ("Aggregate", AggregateState.describe(s), "")) ++
          m.appliedAtRead.map { case (k, v) => (k, v, "") } ++
          TriangleViews.query(spark, a, meta.mode == RefreshMode.Incremental).toSeq.flatMap { q =>
            strategy = "ivm_eps"
            val state = last.epsilon.filter(_.eps == meta.eps)
            epsilon = Some(state.map(_.toJson).getOrElse(JObject("eps" -> JDouble(meta.eps))))
            state.map(TriangleViews.describe(_, q)).getOrElse(Seq(
                ("Strategy", s"IVM^eps triangle (${q.describe})", ""),
                ("Epsilon", s"${meta.eps} (state not built yet: the next refresh builds it)", "")))
          }
      } catch {
        case NonFatal(e) =>
          strategy = "unavailable"
          Seq(("Maintenance", s"the query does not analyze now: ${e.getMessage}", ""))
      }
    val sources = meta.sources.map { s =>
      val current =
        try Some(DeltaSources.pin(spark,
              ViewCatalog.qualify(spark,
                s.table.split('.').toSeq.takeRight(2)), requireChangeFeed = false, autoEnable = false)
              .version)
        catch { case NonFatal(_) => None }
      (s.table, last.sourceVersions.get(s.table), current)
    }
    val warnings = if (foreign.isEmpty) Nil
    else Seq("the backing table was changed outside " +
      s"spark-ivm (${foreign.mkString("; ")}); run REFRESH ... FULL")
    val refreshedAt = new Timestamp(last.timestampMs)
    val fresh = Freshness.of(spark, meta, last)
    val lastReason = meta.history.lastOption.map(_.reason)
    val state = StateReport.of(spark, meta)
    val info = Seq(
      ("View", meta.viewName, ""), ("Backing table", meta.backing.quotedString, ""), ("Query", meta.queryText, "")) ++
      meta.helpers.map(h =>
        ("Helper view",
          s"${h.quotedString}: ${HelperViews.describe(h)}; refreshed before this view, which reads it in " +
            "the part's place", "")) ++
      meta.helperOf.map(v => ("Helper of", s"${v.quotedString} (dropped with it)", "")) ++ Seq(
        ("Refresh policy",
          meta.policy.sql + meta.fullBecause.map(w => s" (refreshed by recomputation: $w)")
            .getOrElse(""), ""), ("Refresh mode", meta.mode.name, ""),
        ("Schedule", meta.schedule.map(_.sql).getOrElse("none (REFRESH by hand)"), "")) ++
      Seq("PARTITIONED BY" -> meta.storage.partitionedBy, "CLUSTER BY" -> meta.storage.clusteredBy).collect {
        case (clause, columns) if columns.nonEmpty => ("Layout", s"$clause (${columns.mkString(", ")})", "")
      } ++
      (if (meta.accessBy.isEmpty) Nil
       else Seq(
         ("Access pattern", s"ACCESS BY (${meta.accessBy.mkString(", ")})", ""),
         ("Access class", access.map(AccessPatterns.summary).getOrElse("unavailable"), ""))) ++ Seq(
        ("Freshness",
          if (fresh.pendingCommits == 0 && fresh.instantMs.isEmpty) "up to date"
          else if (fresh.pendingCommits == 0) s"no base-table commit to apply; its time filters were read " +
            s"${fresh.lagMs / 1000.0} s ago"
          else
            s"${fresh.pendingCommits} base-table commits not applied, the oldest ${fresh.lagMs / 1000.0} s ago", "")) ++
      last.instant.map(t =>
        ("Time filters",
          s"read at ${new Timestamp(t / 1000L)} (the last refresh's instant); each refresh " +
            "reads them at its own and applies the rows that crossed their bounds since", "")) ++
      maintenance ++ sources.map { case (t, consumed, current) =>
        ("Source",
          s"$t: consumed version ${consumed.map(_.toString).getOrElse("none")}, current " +
            s"version ${current.map(_.toString).getOrElse("unavailable")}", "")
      } ++
      Seq(("Last refresh",
          s"#${last.number} (${last.mode}) at $refreshedAt, " +
            s"backing table version ${last.backingVersion}" + lastReason.map(r => s": $r").getOrElse(""), "")) ++
      Seq(("State held",
          if (state.isEmpty) s"none (${StateReport.summary(spark)})"
          else
            s"${StateReport.bytes(state.map(_.bytes).sum)} in ${state.size} arrangements (${StateReport.summary(spark)})",
          "")) ++
      state.map(l =>
        ("State", s"${l.kind} of ${l.of} at ${l.stamp}: ${StateReport.bytes(l.bytes)} in the ${l.place}", "")) ++
      meta.comment.map(c => ("Comment", c, "")) ++
      (if (meta.sqlConf.isEmpty) Nil
       else Seq(("SQL configurations",
           meta.sqlConf.toSeq.sorted.map { case (k, v) => s"$k=$v" }.mkString("[", ", ", "]"), ""))) ++
      meta.userProperties.toSeq.sorted.map { case (k, v) => ("Table property", s"$k=$v", "") } ++
      warnings.map(w => ("Warning", w, ""))
    def opt[T](o: Option[T])(f: T => JValue): JValue = o.map(f).getOrElse(JNull)
    val fields = JObject(
      "catalog" -> JString(meta.view.catalog.getOrElse("spark_catalog")),
      "database" -> JString(meta.view.database.getOrElse("")),
      "name" -> JString(meta.view.table),
      "qualified_name" -> JString(meta.viewName),
      "backing_table" -> JString(meta.backing.quotedString),
      "query" -> JString(meta.queryText),
      "helpers" -> JArray(meta.helpers.map(h => JString(h.unquotedString)).toList),
      "refresh_mode" -> JString(meta.mode.name),
      "refresh_policy" -> JString(meta.policy.sql),
      "full_because" -> opt(meta.fullBecause)(JString(_)),
      "schedule" -> opt(meta.schedule)(s => JString(s.sql)),
      "access_by" -> JArray(meta.accessBy.map(JString(_)).toList),
      "partitioned_by" -> JArray(meta.storage.partitionedBy.map(JString(_)).toList),
      "clustered_by" -> JArray(meta.storage.clusteredBy.map(JString(_)).toList),
      "access" -> opt(access) {
        case Right(a) => JObject("class" -> JString(a.cls.name),
            "inputs" -> JArray(a.query.inputs.toSeq.sorted.map(JString(_)).toList),
            "outputs" -> JArray(a.query.outputs.toSeq.sorted.map(JString(_)).toList),
            "components" -> JLong(a.components.size),
            "w" -> opt(a.widths)(w => JLong(w._1)), "delta" -> opt(a.widths)(w => JLong(w._2)),
            "epsilon" -> JDouble(meta.eps))
        case Left(why) => JObject("class" -> JNull, "reason" -> JString(why))
      },
      "freshness" -> JObject("pending_commits" -> JLong(fresh.pendingCommits), "lag_ms" -> JLong(fresh.lagMs),
        "time_filters_read_at" -> opt(last.instant)(t => JString(new Timestamp(t / 1000L).toString)),
        "sources" -> JArray(fresh.sources.map(l =>
            JObject("table" -> JString(l.table),
              "consumed_version" -> JLong(l.consumedVersion), "current_version" -> JLong(l.currentVersion),
              "pending_commits" -> JLong(l.pendingCommits),
              "oldest_pending" -> opt(l.oldestPendingMs)(t => JString(java.time.Instant.ofEpochMilli(t).toString))
            )).toList)),
      "comment" -> opt(meta.comment)(JString(_)),
      "columns" -> JArray(columns.map { case (n, t, _) => JArray(List(JString(n), JString(t))) }.toList),
      "maintenance" -> JObject("strategy" -> JString(strategy), "shape" -> opt(shape)(JString(_)),
        "epsilon" -> epsilon.getOrElse(JNull)),
      "sources" -> JArray(sources.map { case (t, consumed, current) =>
        JObject("table" -> JString(t), "consumed_version" -> opt(consumed)(JLong(_)),
          "current_version" -> opt(current)(JLong(_)))
      }.toList),
      "last_refresh" -> JObject("number" -> JLong(last.number), "mode" -> JString(last.mode),
        "reason" -> opt(lastReason)(JString(_)),
        "timestamp" -> JString(refreshedAt.toInstant.toString), "backing_version" -> JLong(last.backingVersion)),
      "properties" -> JObject(meta.userProperties.toSeq.sorted.map { case (k, v) => k -> JString(v) }.toList),
      "state" -> JArray(state.map(l =>
          JObject("kind" -> JString(l.kind), "of" -> JString(l.of),
            "place" -> JString(l.place), "bytes" -> JLong(l.bytes), "stamp" -> JString(l.stamp))).toList),
      "sql_configs" -> JObject(meta.sqlConf.toSeq.sorted.map { case (k, v) => k -> JString(v) }.toList),
      "warnings" -> JArray(warnings.map(JString(_)).toList),
      // The same as the rows' "# Materialized View Information" part: key -> value, or values.
      "info" -> JObject(info.groupBy(_._1).toSeq.sortBy { case (k, _) => info.indexWhere(_._1 == k) }.map {
        case (k, Seq(one)) => k -> JString(one._2)
        case (k, many) => k -> JArray(many.map(r => JString(r._2)).toList)
      }.toList))
    ViewDescription(columns ++ Seq(("", "", ""), ("# Materialized View Information", "", "")) ++ info,
      compact(render(fields)))
  }

  /** The mode the next refresh would run in, and why (as [[RefreshPipeline]] decides it). */
  private def policyDecision(spark: SparkSession, meta: ViewMetadata, last: RefreshRecord,
      pinned: Map[String, PinnedSource], analyzed: AnalyzedView): PolicyDecision =
    RefreshPolicies.fixedMode(meta, full = false, stale = last.epsilon.exists(_.eps != meta.eps)).getOrElse {
      val changed = pinned.values.filter(p => last.sourceVersions.get(p.name).exists(_ != p.version)).toSeq
      if (changed.isEmpty && last.instant.nonEmpty && last.instant != TimeFilters.instantOf(analyzed.plan)) {
        PolicyDecision("incremental", "no base table changed, and the view's time filters move to a new instant")
      } else if (changed.isEmpty && meta.helpers.nonEmpty && Freshness.of(spark, meta, last).pendingCommits > 0) {
        PolicyDecision("incremental",
          "base tables of its helper views changed: the helpers refresh first, and the view applies their changes")
      } else if (changed.isEmpty) PolicyDecision("noop", "no base table changed since the last refresh")
      else RefreshPolicies.choose(spark, meta,
        changed.map(p =>
          ChangeFeed.changeBytes(spark, meta.viewName,
            ChangeRequest(p.table, last.sourceVersions(p.name), p.version))).sum, pinned.values.map(_.sizeInBytes).sum)
    }

  /** Spark's plans are long (hundreds of lines for a join view): only EXPLAIN EXTENDED shows them. */
  private val SparkPlansOnRequest = "(EXPLAIN EXTENDED REFRESH MATERIALIZED VIEW adds Spark's plan)"

  /** EXPLAIN [EXTENDED] REFRESH: what the next refresh would run and why, in words; with
   * `extended`, Spark's optimized plan of the rows it would compute too. Changes nothing. */
  def explain(spark: SparkSession, name: Seq[String], extended: Boolean): String = {
    val meta = ViewCatalog.lookup(spark, name)
    val (last, _) = ViewCatalog.lastRefresh(spark, meta)
    val incremental = meta.mode == RefreshMode.Incremental
    val analyzed = ViewAnalysis.reanalyze(spark, meta, incremental)
    val pinned = ViewAnalysis.pin(spark, meta.viewName, analyzed, incremental = false, autoEnable = false)
    val out = new StringBuilder
    def line(s: String): Unit = out ++= s ++ "\n"
    line(s"== Refresh of materialized view ${meta.viewName} ==")
    line(s"Refresh policy: ${meta.policy.sql}; refresh mode: ${meta.mode.name}" +
      meta.fullBecause.map(w => s" (the query cannot be maintained incrementally: $w)").getOrElse(""))
    line(s"Backing table: ${meta.backing.quotedString}, after refresh #${last.number}")
    meta.helpers.foreach { h =>
      line(s"Helper view ${h.quotedString}, refreshed first: ${HelperViews.describe(h)}")
      explain(spark, Seq(h.database.get, h.table), extended).linesIterator.foreach(l => line(s"  $l"))
    }
    if (meta.accessBy.nonEmpty) {
      line(s"Access pattern: ACCESS BY (${meta.accessBy.mkString(", ")}) (Zhang 2022, conjunctive queries with " +
        "access patterns)")
      accessAnalysis(analyzed, meta) match {
        case Right(a) => a.describe.foreach(l => line(s"  $l"))
        case Left(why) => line(s"  not classified: $why")
      }
      line(s"  lookups: ${io.sparkivm.access.LookupTrees.explain(spark, meta)}")
    } else io.sparkivm.access.LookupTrees.enumeration(spark, meta).foreach(e => line(s"Enumeration of rows(): $e"))
    val decision = policyDecision(spark, meta, last, pinned, analyzed)
    line(s"Next refresh: ${decision.mode}, because ${decision.reason}")
    decision.candidates.foreach(c => line(s"  candidate ${c.mode}: estimated ${CostModel.seconds(c.ms)} (${c.basis})"))
    line("Sources:")
    pinned.values.toSeq.sortBy(_.name).foreach { p =>
      val from = last.sourceVersions.get(p.name)
      line(from match {
        case Some(v) if v == p.version => s"  ${p.name}: unchanged at version $v"
        case Some(v) => s"  ${p.name}: changes of versions ${v + 1}..${p.version} (change data feed, netted per row)"
        case None => s"  ${p.name}: not consumed yet, now at version ${p.version}"
      })
    }
    val maintenance = analyzed.maintenance
    if (!incremental || decision.mode == "full") {
      line("Plan: recompute the query and overwrite the backing table in one commit.")
      if (extended) {
        val rows = new PinnedReader(spark, Map.empty, pinned, meta.viewName).fullRows(maintenance)
        line("== Spark plan ==")
        line(rows.queryExecution.optimizedPlan.treeString)
      } else line(SparkPlansOnRequest)
      return out.toString
    }
    line(s"View shape: ${maintenance.shape.kind}; backing keys: " +
      (if (maintenance.keyNames.isEmpty) "none (one row)" else maintenance.keyNames.mkString(", ")))
    maintenance.states.foreach(s => line(s"Aggregate ${AggregateState.describe(s)}"))
    maintenance.appliedAtRead.foreach { case (k, v) => line(s"$k: $v") }
    TriangleViews.query(spark, analyzed, incremental) match {
      case Some(q) =>
        line(s"Strategy: IVM^eps triangle, ${q.describe} (Kara et al., heavy/light partitions and auxiliary views)")
        last.epsilon.filter(_.eps == meta.eps) match {
          case Some(state) =>
            TriangleViews.describe(state, q).drop(1).foreach { case (k, v, _) => line(s"  $k: $v") }
          case None => line(s"  no state for eps = ${meta.eps} yet: the next refresh rebuilds it")
        }
        line("Per changed occurrence X_j (X_p next, X_q previous in R, S, T; earlier ones at Post):")
        line("  D(X_j) x X_p^L x X_q   (light neighbours, then point lookups: LH, LL)")
        line("  D(X_j) x X_q^H x X_p^H (heavy values, then point lookups: HH)")
        line("  D(X_j) x V_p           (auxiliary view lookup: HL)")
        line("  then V_j += D^H x X_p^L, V_q += X_q^H x D^L, minor or major rebalancing")
        return out.toString
      case None =>
        line("Strategy: " + TriangleViews.genericBecause(analyzed).map(w =>
          s"generic delta rules (a cyclic join IVM^eps does not cover: $w)").getOrElse(
          "generic delta rules (counting IVM, FK pruning where keys are declared)"))
    }
    // Checks run (they are small and say which branches are pruned); nothing is materialized.
    val changed = pinned.values.toSeq.filter(p => last.sourceVersions.get(p.name).exists(_ != p.version))
    val reader = new PinnedReader(spark, last.sourceVersions, pinned, meta.viewName,
      new CheckSteps(spark, PlanningConf.probe(spark)),
      ChangeFeed.planned(spark, meta.viewName,
        changed.map(p => ChangeRequest(p.table, last.sourceVersions(p.name), p.version))), instantBefore = last.instant,
      recursiveRows = maintenance.recursiveRows(_, BackingTable.current(spark, meta)))
    try {
      val rules = reader.rules
      val branches = maintenance.branches(rules)
      line(s"FK pruning: ${if (PlanningConf.pruning(spark)) "on" else s"off (${IvmConf.FkPruningEnabled.key})"}" +
        s"; key probing: ${if (PlanningConf.probe(spark).enabled) "on" else s"off (${IvmConf.KeyProbingEnabled.key})"}")
      rules.fk.notes.foreach(n => line(s"  $n"))
      val occurrences = analyzed.leaves.size
      line("Delta rule: D(V) = sum_i Pre(R1..Ri-1) x D(Ri) x Post(Ri+1..Rn) " +
        "(counting IVM; Svingos et al. 2023, section 2)")
      if (branches.isEmpty) {
        line(s"Branches: none of the $occurrences table occurrences changed; the next refresh does nothing.")
      } else {
        line(s"Branches (${branches.size}, for $occurrences table occurrences):")
        branches.zipWithIndex.foreach { case (b, i) => line(s"  ${i + 1}. ${b.describe}") }
        val keys = if (maintenance.keyNames.isEmpty) "its one row" else maintenance.keyNames.mkString(", ")
        line(s"Apply: the changed rows are computed once and held on the driver (past " +
          s"${IvmConf.LocalMaxRows.key} rows, on the executors); the files of " +
          s"${meta.backing.quotedString} holding their keys ($keys) are rewritten with them " +
          (if (maintenance.global) "" else "(rows whose __ivm_count reaches 0 are dropped) ") +
          s"in one Delta commit with txn (view id, ${last.number + 1}) and the refresh record")
        val checks = rules.fk.notes.count(n =>
          n.startsWith("FK-Guard and integrity hold") ||
            n.startsWith("integrity fails"))
        val recompute = if (maintenance.states.exists(_.recompute.isDefined)) 2 else 0
        val kept = maintenance.keyNames.nonEmpty &&
          KeyedViewRows.keptAt(DeltaTables.log(spark, meta.backing).update(), maintenance.foldColumns)
        line("Old rows of the changed groups: " + (if (kept) "looked up in the view's rows kept in memory by key " +
                                                     s"(${IvmConf.StateExecutorMaxBytes.key}), no job"
                                                   else s"read from ${meta.backing.quotedString}"))
        line(s"Estimated Spark jobs: ${1 + checks + (if (kept) 0 else 1) + recompute + 2} (changes 1, integrity " +
          s"checks $checks, changed rows ${(if (kept) 0 else 1) + recompute}, apply and commit about 2)")
        if (extended) {
          maintenance.mergeSource(rules,
            () => BackingTable.current(spark, meta), PlanOnly).foreach { plan =>
            line("== Spark plan of the rows to merge ==")
            line(SparkInternals.dataFrame(spark, plan).queryExecution.optimizedPlan.treeString)
          }
        } else line(SparkPlansOnRequest)
      }
    } finally reader.release()
    out.toString
  }

  /** The view's query classified under its access pattern, or why it is not. */
  private def accessAnalysis(analyzed: AnalyzedView, meta: ViewMetadata): Either[String, CqapAnalysis] =
    if (analyzed.maintenance.atRead.isDefined) {
      Left("the view computes window functions without PARTITION BY when it is read, over all its rows")
    } else AccessPatterns.analysis(analyzed.plan, meta.columns, meta.accessBy)
}
