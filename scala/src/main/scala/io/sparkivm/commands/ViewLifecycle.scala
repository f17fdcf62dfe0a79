package io.sparkivm.commands

import java.util.{Locale, UUID}

import scala.util.control.NonFatal

import io.sparkivm.access.AccessPatterns
import io.sparkivm.catalog.{
  CatalogGuard, DeltaTables, EpsilonState, HistoryEntry, RefreshHistory, RefreshMode, RefreshPolicy, RefreshRecord,
  Schedule, ViewCatalog, ViewColumn, ViewColumns, ViewMetadata
}
import io.sparkivm.conf.IvmConf
import io.sparkivm.epsilon.{EpsilonStrategy, TriangleStateTables, TriangleViews}
import io.sparkivm.errors.{IvmErrors, IvmException}
import io.sparkivm.execution.{
  AnalyzedView, ArrangedKeyCounts, BackingTable, CatalogViews, FaultInjection, MaintenanceStrategy, PinnedReader,
  RefreshContext, RefreshFailures, RefreshPipeline, ViewAnalysis
}
import io.sparkivm.planner.ViewMaintenance
import io.sparkivm.policy.RefreshPolicies
import io.sparkivm.state.StateRegistry
import org.apache.hadoop.fs.Path
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.delta.DeltaConcurrentModificationException
import org.apache.spark.sql.ivm.{CapturedSqlConf, SessionInternals}
import org.apache.spark.sql.types.DataType
import org.apache.spark.sql.{AnalysisException, SparkSession}

/** CREATE, DROP, ALTER and SHOW MATERIALIZED VIEW(S). */
object ViewLifecycle extends Logging {

  /** `ivm.*` properties a user may set; the others are spark-ivm's own bookkeeping. */
  val SettableProperties = Set(ViewCatalog.RefreshProperty, EpsilonState.Property)

  /**
   * CREATE [OR REPLACE] MATERIALIZED VIEW. Everything is validated and built before anything
   * the user can see changes: the query is analyzed and checked, its base tables pinned, and
   * the new backing table (and IVM^eps state) written under a name no existing view uses; only
   * then does one catalog operation (CREATE [OR REPLACE] VIEW) make it the view. A failure or
   * kill at any point before that leaves the old view as it was (the half-built backing table is
   * dropped, or cleaned up by the next CREATE of the name); after it, the old backing table is
   * dropped.
   */
  def create(spark: SparkSession, stmt: CreateMaterializedView): Unit =
    create(spark, stmt, spark.catalog.currentDatabase, Nil)

  /** CREATE with the query analyzed in `database` (ALTER rebuilds a view in its own, and keeps its
   * `history` and the SQL settings it captured, `sqlConf`). */
  private def create(spark: SparkSession, stmt: CreateMaterializedView, database: String,
      history: Seq[HistoryEntry], sqlConf: Option[Map[String, String]] = None,
      helperOf: Option[TableIdentifier] = None): Unit = sqlConf match {
    case Some(captured) if !CapturedSqlConf.matches(spark, captured) =>
      create(CapturedSqlConf.session(spark, captured), stmt, database, history, None, helperOf)
    case _ => createInSession(spark, stmt, database, history, helperOf)
  }

  private def createInSession(spark: SparkSession, stmt: CreateMaterializedView, database: String,
      history: Seq[HistoryEntry], helperOf: Option[TableIdentifier]): Unit = {
    val startMs = System.currentTimeMillis()
    val id = ViewCatalog.qualify(spark, stmt.name)
    val replacing = if (!ViewCatalog.exists(spark, id)) None
    else {
      val existing = SessionInternals.catalog(spark).getTableMetadata(id)
      if (stmt.ifNotExists) return
      if (!stmt.orReplace || !ViewCatalog.isMaterializedView(existing)) throw IvmErrors.alreadyExists(id.quotedString)
      // The old backing table, as the catalog view names it (it may be gone: a broken view is
      // replaced as well).
      Some(ViewCatalog.backingOf(spark, id, existing))
    }
    checkProperties(stmt.properties)
    val policy = policyOf(spark, stmt)
    val plan = ViewAnalysis.analyze(spark, stmt.queryTextInPlace, database)
    ViewAnalysis.requireOutlivesSession(spark, stmt.queryTextInPlace, plan)
    ViewAnalysis.requireRowData(id.quotedString, plan)
    val columns = if (stmt.columnNames.isEmpty) plan.output.map(_.name)
    else {
      if (stmt.columnNames.size != plan.output.size) {
        throw IvmErrors.columnCountMismatch(id.quotedString, stmt.columnNames.size, plan.output.size)
      }
      stmt.columnNames
    }
    val lower = columns.map(_.toLowerCase(Locale.ROOT))
    lower.diff(lower.distinct).headOption.foreach { dup =>
      throw IvmErrors.duplicateColumn(id.quotedString, dup)
    }
    stmt.columns.zip(plan.output).foreach { case (c, a) =>
      c.dataType.filterNot(DataType.equalsIgnoreNullability(_, a.dataType)).foreach { declared =>
        throw IvmErrors.columnTypeMismatch(id.quotedString, c.name, declared.sql, a.dataType.sql)
      }
    }
    val storage = ViewDefinition.storageOf(id.quotedString, stmt.storage, columns)
    AccessPatterns.check(columns, stmt.accessBy).foreach { reason =>
      throw IvmErrors.invalidAccessPattern(id.quotedString, reason)
    }
    val oldHelpers = if (replacing.isEmpty) Nil
    else scala.util.Try(ViewCatalog.lookup(spark, stmt.name).helpers).getOrElse(Nil)
    val instant = ViewAnalysis.instant(spark)
    val (analyzed, mode, fullBecause, split) =
      if (policy == RefreshPolicy.Full) {
        (ViewAnalysis.prepare(plan, columns, incremental = false, instant), RefreshMode.Full, None, None)
      } else incrementalLayout(spark, plan, columns, instant) match {
        case Right(a) => (a, RefreshMode.Incremental, None, None)
        case Left(refused) =>
          // A recursive CTE the view does not keep as it is: kept by helper views, if they and the
          // query over them are maintained; else the view is laid out as the refusal says.
          // A source that is not Delta is not one a helper could keep either.
          val helped =
            if (helperOf.isDefined || refused.getCondition == "IVM_SOURCE_NOT_DELTA" ||
              !HelperViews.mayHelp(plan)) Left(refused)
            else withHelpers(spark, id, stmt.queryText, plan, database, columns, instant, refused)
          helped match {
            case Right((a, s)) => (a, RefreshMode.Incremental, None, Some(s))
            case Left(e) =>
              val (a, m, why) = refusedLayout(id.quotedString, plan, columns, policy, instant, e)
              (a, m, why, None)
          }
      }
    val helpers = split.toSeq.flatMap(_.helpers.map(_.name))
    try {
      if (helpers.nonEmpty) FaultInjection.point(spark, "create-after-helpers")
      val incremental = mode == RefreshMode.Incremental
      if (stmt.accessBy.nonEmpty && analyzed.instant.isDefined) {
        throw IvmErrors.invalidAccessPattern(id.quotedString,
          "the view's filters read the time, and its lookup trees follow the tables' changes only; " +
            "filter by time when looking up, or keep the time filter in a view the lookups do not use")
      }
      ViewDefinition.requireStored(id.quotedString, stmt.columns, storage, analyzed.maintenance)
      val epsilon = stmt.properties.get(EpsilonState.Property).map(parseEpsilon)
      val strategy = MaintenanceStrategy.of(spark, analyzed, incremental)
      // eps sets IVM^eps's partition of a triangle view, and the heavy/light view trees that answer
      // the lookups of a view with an access pattern.
      if (epsilon.isDefined && !strategy.isInstanceOf[EpsilonStrategy] && stmt.accessBy.isEmpty) {
        throw notTriangle(id.quotedString, analyzed)
      }
      // The whole plan is built (and so checked) against the base tables as they are before any
      // of them changes: a refused CREATE turns no change data feed on.
      val validated = new PinnedReader(spark, Map.empty,
        ViewAnalysis.pin(spark, id.quotedString, analyzed, incremental = false,
          autoEnable = false), id.quotedString).fullRows(analyzed.maintenance)
      ViewAnalysis.requireStorable(spark, id.quotedString, validated.schema, analyzed.maintenance)
      // Validated: from here on, things are written. A backing table name no existing view uses
      // and no concurrent CREATE is writing: the standard one if it is free (or a dead CREATE's
      // orphan) and nothing lies at its location (files of a CREATE killed before its commit, or
      // being written by a concurrent one), else the standard one with a random suffix.
      val standard = ViewCatalog.backingTable(id)
      val backing =
        if (!replacing.exists(_.table == standard.table) &&
          (!ViewCatalog.exists(spark, standard) || dropOrphanBacking(spark, id, standard, failIfForeign = true)) &&
          !locationTaken(spark, standard)) {
          standard
        } else standard.copy(table = standard.table + "_" + UUID.randomUUID().toString.take(8))
      val pinned = ViewAnalysis.pin(spark, id.quotedString, analyzed, incremental,
        IvmConf.AutoEnableChangeDataFeed.get(spark))
      val meta = ViewMetadata(id, backing, UUID.randomUUID().toString, stmt.queryText, database, mode,
        pinned.values.toSeq.sortBy(_.name).map(_.info),
        stmt.properties.filter { case (k, _) => !k.startsWith("ivm.") }, stmt.comment, columns,
        epsilon, policy, stmt.schedule, fullBecause, history, stmt.accessBy, CapturedSqlConf.capture(spark),
        split.map(_.maintainedQuery), helpers, helperOf, stmt.columns, storage)
      try {
        val reader = new PinnedReader(spark, Map.empty, pinned, id.quotedString)
        val rows = reader.fullRows(analyzed.maintenance)
        val attempt = UUID.randomUUID().toString
        val state = strategy.build(RefreshContext(spark, meta, analyzed,
            RefreshRecord(-1, "create", Map.empty, attempt, -1, 0), reader, attempt))
        val versions = pinned.map { case (t, p) => t -> p.version }
        val entry = HistoryEntry(0, startMs, -1, "create",
          fullBecause.map(w => s"created for full refreshes: $w")
            .getOrElse(s"created with REFRESH POLICY $policy"), -1, versions, -1, pinned.values.map(_.sizeInBytes).sum,
          if (history.isEmpty) "create" else "alter")
        val record = RefreshRecord(0, "create", versions, attempt, -1, 0, state, Some(entry), analyzed.instant)
        try BackingTable.create(spark, meta, rows, record, analyzed.maintenance)
        catch {
          case e: Exception if isCreateConflict(e) =>
            // A concurrent CREATE of this view made the table first: it is that CREATE's, not ours.
            throw IvmErrors.alreadyExists(id.quotedString)
        }
        RefreshHistory.measuredAfterCommit(meta.id, 0, System.currentTimeMillis() - startMs)
        if (incremental)
          ArrangedKeyCounts.store(spark, BackingTable.stateRoot(spark, backing), analyzed.plan, pinned, reader)
        FaultInjection.point(spark, "create-after-backing")
        CatalogViews.create(spark, meta, analyzed.maintenance, replace = replacing.isDefined)
      } catch {
        case e: IvmException if e.getCondition == "IVM_VIEW_ALREADY_EXISTS" => throw e
        case e: Throwable =>
          // Nothing the user sees has changed: drop what this CREATE wrote.
          scala.util.Try(CatalogGuard.internal(spark.sql(s"DROP TABLE IF EXISTS ${backing.quotedString}")))
          scala.util.Try(TriangleStateTables.dropFor(spark, backing))
          e match {
            // A concurrent CREATE of the same name made its catalog view first.
            case a: AnalysisException if a.getCondition == "TABLE_OR_VIEW_ALREADY_EXISTS" =>
              throw IvmErrors.alreadyExists(id.quotedString)
            case _ => throw IvmErrors.inView(id.quotedString, e)
          }
      }
    } catch {
      case e: Throwable =>
        // Nothing the user sees has changed: the helpers this CREATE made go too.
        dropHelpers(spark, helpers)
        throw e
    }
    replacing.foreach { old =>
      forgetKept(spark, old)
      CatalogGuard.internal(spark.sql(s"DROP TABLE IF EXISTS ${old.quotedString}"))
      TriangleStateTables.dropFor(spark, old)
      dropHelpers(spark, oldHelpers)
    }
    if (helpers.nonEmpty || oldHelpers.nonEmpty) {
      dropOrphanHelpers(spark, id, keep = helpers, System.currentTimeMillis() - AbandonedHelperMs)
    }
  }

  /**
   * Drops the helpers made for view `id` that it does not read (left by a CREATE killed midway),
   * of those made before `madeBefore`: a younger one may belong to a CREATE OR REPLACE running
   * beside this statement, which names it in its view when it ends. A CREATE passes an hour ago
   * (longer than a CREATE runs between making its helpers and its view), a DROP its own start.
   */
  private def dropOrphanHelpers(spark: SparkSession, id: TableIdentifier, keep: Seq[TableIdentifier],
      madeBefore: Long): Unit = {
    val mine = HelperViews.prefixesOf(id)
    def of(h: TableIdentifier) = scala.util.Try(ViewCatalog.lookup(spark, Seq(id.database.get, h.table)).helperOf)
      .toOption.flatten.exists(_.unquotedString.equalsIgnoreCase(id.unquotedString))
    val catalog = SessionInternals.catalog(spark)
    mine.flatMap(prefix => catalog.listTables(id.database.get, s"$prefix*")).filter { h =>
      // Metastores keep creation times in whole seconds.
      !keep.exists(_.table.equalsIgnoreCase(h.table)) &&
      scala.util.Try(catalog.getTableMetadata(h).createTime < madeBefore - 1000).getOrElse(false) && of(h)
    }.foreach(h => dropHelpers(spark, Seq(h)))
  }

  /**
   * The view maintained through helper views ([[HelperViews]]): each helper is created
   * (INCREMENTAL STRICT: a helper recomputed would gain nothing), then the query over them is
   * laid out. Left: why not (the first refusal, or a helper's or the query's own), with nothing
   * left behind. A window's helper that fails otherwise (a subquery's column a Delta table
   * cannot name) leaves the first refusal too: the view is then laid out as it says.
   */
  private def withHelpers(spark: SparkSession, id: TableIdentifier, queryText: String, plan: LogicalPlan,
      database: String, columns: Seq[String], instant: Long, refused: IvmException)
      : Either[IvmException, (AnalyzedView, HelperViews.Split)] =
    HelperViews.split(spark, id, queryText, plan) match {
      case None => Left(refused)
      case Some(split) =>
        val made = scala.collection.mutable.ArrayBuffer[TableIdentifier]()
        def undo[T](e: IvmException): Either[IvmException, T] = { dropHelpers(spark, made.toSeq); Left(e) }
        try {
          split.helpers.foreach { h =>
            create(spark,
              CreateMaterializedView(Seq(h.name.database.get, h.name.table), ifNotExists = false, orReplace = false,
                Nil, None, Map.empty, h.query, h.query, Some(RefreshPolicy.IncrementalStrict), None, Nil),
              database, Nil, helperOf = Some(id))
            made += h.name
          }
          val maintained = ViewAnalysis.analyze(spark, split.maintainedQuery, database)
          if (maintained.output.size != columns.size) undo(refused)
          else incrementalLayout(spark, maintained, columns, instant).fold(undo, a => Right((a, split)))
        } catch {
          case e: IvmException if e.getCondition == "IVM_NOT_INCREMENTALIZABLE" =>
            undo(IvmErrors.unsupported(e.parameters("operator"), e.parameters("hint")))
          // A helper is INCREMENTAL STRICT, which refuses a source that is not Delta as it is.
          case e: IvmException if ViewAnalysis.NotIncrementalizable.contains(e.getCondition) => undo(e)
          case NonFatal(_) if split.helpers.forall(h => HelperViews.holdsWindowRows(h.name)) => undo(refused)
          case e: Throwable => dropHelpers(spark, made.toSeq); throw e
        }
    }

  /** Drops helper views (of a view dropped, replaced, or whose CREATE failed). */
  private def dropHelpers(spark: SparkSession, helpers: Seq[TableIdentifier]): Unit =
    helpers.foreach { h =>
      scala.util.Try(drop(spark, Seq(h.database.get, h.table), ifExists = true, internal = true))
    }

  /**
   * The view's maintenance under its policy: incremental if the policy allows it and the query
   * can be maintained; else (AUTO, INCREMENTAL) laid out for full refreshes, with the reason, or
   * (INCREMENTAL STRICT) IVM_NOT_INCREMENTALIZABLE naming what cannot be maintained.
   */
  private def layout(spark: SparkSession, view: String, plan: LogicalPlan, columns: Seq[String],
      policy: RefreshPolicy, instant: Long): (AnalyzedView, RefreshMode, Option[String]) =
    if (policy == RefreshPolicy.Full) {
      (ViewAnalysis.prepare(plan, columns, incremental = false, instant), RefreshMode.Full, None)
    } else incrementalLayout(spark, plan, columns, instant) match {
      case Right(analyzed) => (analyzed, RefreshMode.Incremental, None)
      case Left(e) => refusedLayout(view, plan, columns, policy, instant, e)
    }

  /** The query laid out for incremental refreshes, or why it cannot be. */
  private def incrementalLayout(spark: SparkSession, plan: LogicalPlan, columns: Seq[String],
      instant: Long): Either[IvmException, AnalyzedView] =
    try {
      val analyzed = ViewAnalysis.prepare(plan, columns, incremental = true, instant)
      ViewAnalysis.requireReadable(spark, analyzed)
      Right(analyzed)
    } catch {
      case e: IvmException if ViewAnalysis.NotIncrementalizable.contains(e.getCondition) => Left(e)
    }

  /** A query refused for incremental refreshes: laid out for full ones, with the reason, or
   * (INCREMENTAL STRICT) IVM_NOT_INCREMENTALIZABLE naming what cannot be maintained. */
  private def refusedLayout(view: String, plan: LogicalPlan, columns: Seq[String], policy: RefreshPolicy,
      instant: Long, e: IvmException): (AnalyzedView, RefreshMode, Option[String]) = {
    if (policy == RefreshPolicy.IncrementalStrict) {
      if (e.getCondition == "IVM_SOURCE_NOT_DELTA") throw e // says what to do (CONVERT TO DELTA)
      val p = e.parameters
      throw IvmErrors.notIncrementalizable(view, p("operator"), p("hint"))
    }
    val why = if (e.getCondition == "IVM_UNSUPPORTED_OPERATOR") {
      s"${e.parameters("operator")} (${e.parameters("hint").stripSuffix(".")})"
    } else e.getMessage.stripPrefix(s"[${e.getCondition}] ").replaceAll(" SQLSTATE: \\w+$", "")
    logInfo(s"spark-ivm: $view is refreshed by recomputation: $why")
    (ViewAnalysis.prepare(plan, columns, incremental = false, instant), RefreshMode.Full, Some(why))
  }

  /** The error of a CREATE TABLE that lost a race with another for the same table (which made
   * it first, or had written files at its location but not yet committed them). */
  private def isCreateConflict(e: Throwable): Boolean = e match {
    case null => false
    case _: DeltaConcurrentModificationException => true
    case a: AnalysisException
        if Set("TABLE_OR_VIEW_ALREADY_EXISTS",
          "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION").contains(a.getCondition) => true
    case other => isCreateConflict(other.getCause)
  }

  /**
   * REFRESH ... FULL of a view whose backing table is gone (dropped by an application without
   * spark-ivm, or its files deleted): the view is built again, as CREATE OR REPLACE would, from
   * the definition its catalog view keeps (query, database, policy, SQL settings, ACCESS BY; the
   * schedule, properties and history went with the table). True if it was rebuilt.
   */
  def rebuildIfBackingMissing(spark: SparkSession, name: Seq[String]): Boolean = {
    val id = ViewCatalog.qualify(spark, name)
    val view =
      try Some(SessionInternals.catalog(spark).getTableMetadata(id))
      catch {
        case _: NoSuchTableException => None
      }
    view.filter(ViewCatalog.isMaterializedView).exists { v =>
      val props = v.properties
      val backing = ViewCatalog.backingOf(spark, id, v)
      val definition = for (query <- props.get(ViewCatalog.QueryProperty);
        database <- props.get(ViewCatalog.DatabaseProperty)) yield (query, database)
      (!ViewCatalog.exists(spark, backing)) && definition.exists { case (query, database) =>
        logWarning(s"spark-ivm: the backing table of ${id.quotedString} is gone; rebuilding the view")
        val captured = props.collect {
          case (k, value) if k.startsWith(ViewCatalog.SqlConfPrefix) =>
            k.stripPrefix(ViewCatalog.SqlConfPrefix) -> value
        }
        create(spark,
          CreateMaterializedView(name, ifNotExists = false, orReplace = true,
            Some(ViewColumns.columns(props)).filter(_.nonEmpty).getOrElse(v.schema.fieldNames.toSeq.map(ViewColumn(_))),
            v.comment, Map.empty, query, query, props.get(ViewCatalog.PolicyProperty).flatMap(RefreshPolicy.parse),
            None, ViewCatalog.accessByOf(props), ViewColumns.storage(props)),
          database, Nil, Some(captured).filter(_.nonEmpty))
        true
      }
    }
  }

  /**
   * A backing table without its catalog view is what a CREATE killed midway, or a DROP killed
   * between its two steps, leaves; it is dropped. A table of that name that is not a backing
   * table of this view is someone else's and is an error.
   */
  private def dropOrphanBacking(spark: SparkSession, view: TableIdentifier, backing: TableIdentifier,
      failIfForeign: Boolean, spareRecent: Boolean = true): Boolean = {
    if (!ViewCatalog.exists(spark, backing)) return false
    val snapshot = scala.util.Try(DeltaTables.log(spark, backing).update()).toOption
    val props = snapshot.map(_.metadata.configuration).getOrElse(Map.empty[String, String])
    if (props.get(ViewCatalog.ViewProperty).exists(_.equalsIgnoreCase(view.unquotedString))) {
      // Written moments ago: a CREATE that is still running (it makes its catalog view next).
      // A DROP of the view asks for it gone whatever its age.
      val lastCommit = snapshot.map(_.timestamp).getOrElse(0L)
      if (spareRecent && System.currentTimeMillis() - lastCommit < CreateInProgressMs) return false
      forgetKept(spark, backing)
      CatalogGuard.internal(spark.sql(s"DROP TABLE IF EXISTS ${backing.quotedString}"))
      TriangleStateTables.dropFor(spark, backing)
      true
    } else if (failIfForeign) {
      throw IvmErrors.alreadyExists(backing.quotedString)
    } else false
  }

  /** Drops the state kept of a backing table ([[StateRegistry]]): the table is dropped. */
  private def forgetKept(spark: SparkSession, backing: TableIdentifier): Unit =
    scala.util.Try(DeltaTables.log(spark, backing).dataPath.toString).foreach { path =>
      StateRegistry.removeWhere(_.table.contains(path))
    }

  /** True if something lies at the location a managed table of this name would have. */
  private def locationTaken(spark: SparkSession, table: TableIdentifier): Boolean = {
    val path = new Path(SessionInternals.catalog(spark).defaultTablePath(table))
    path.getFileSystem(spark.sessionState.newHadoopConf()).exists(path)
  }

  /**
   * A backing table without a catalog view whose last commit is younger than this is taken to
   * belong to a CREATE still running, and is left alone (a CREATE makes its catalog view right
   * after the backing table's commit).
   */
  private val CreateInProgressMs = 60000L

  /** A helper its view does not name is taken to be abandoned by a CREATE once this old. */
  private val AbandonedHelperMs = 3600000L

  /** DROP MATERIALIZED VIEW, and the view's helpers with it. A helper is dropped only with its
   * view (`internal`), or once its view is gone. */
  def drop(spark: SparkSession, name: Seq[String], ifExists: Boolean, internal: Boolean = false): Unit = {
    val startMs = System.currentTimeMillis()
    val id = ViewCatalog.qualify(spark, name)
    val meta = scala.util.Try(ViewCatalog.lookup(spark, name)).toOption
    def helperIn(v: TableIdentifier) = scala.util.Try(ViewCatalog.lookup(spark, Seq(v.database.get, v.table)))
      .toOption.exists(_.helpers.exists(_.table.equalsIgnoreCase(id.table)))
    // A helper its view no longer names (a CREATE killed after making it) goes like any orphan.
    meta.flatMap(_.helperOf).filter(v => !internal && helperIn(v)).foreach { v =>
      throw IvmErrors.notMaterializedView(id.quotedString, s"a helper view of ${v.quotedString}",
        s"It holds a recursive CTE of that view; DROP MATERIALIZED VIEW ${v.quotedString} drops it.")
    }
    io.sparkivm.access.LookupTrees.forget(id)
    StateRegistry.removeWhere(_.view.contains(id.unquotedString))
    // The view may vanish under a concurrent DROP at any step: then this DROP found none.
    val table =
      try Some(SessionInternals.catalog(spark).getTableMetadata(id))
      catch {
        case _: NoSuchTableException => None
      }
    if (table.isDefined) {
      if (!ViewCatalog.isMaterializedView(table.get)) {
        throw IvmErrors.notMaterializedView(id.quotedString, ViewCatalog.kindOf(table.get),
          "Use DROP TABLE or DROP VIEW.")
      }
      val backing = ViewCatalog.backingOf(spark, id, table.get)
      forgetKept(spark, backing)
      CatalogGuard.internal(spark.sql(s"DROP VIEW IF EXISTS ${id.quotedString}"))
      CatalogGuard.internal(spark.sql(s"DROP TABLE IF EXISTS ${backing.quotedString}"))
      TriangleStateTables.dropFor(spark, backing)
      RefreshFailures.forget(id.unquotedString)
      dropHelpers(spark, meta.toSeq.flatMap(_.helpers))
      // A view whose metadata cannot be read (its backing table gone) may have had helpers too.
      if (!internal && meta.forall(_.helpers.nonEmpty)) dropOrphanHelpers(spark, id, keep = Nil, startMs)
    } else {
      val orphan = dropOrphanBacking(spark, id, ViewCatalog.backingTable(id), failIfForeign = false,
        spareRecent = false)
      if (!internal) dropOrphanHelpers(spark, id, keep = Nil, startMs)
      if (!orphan && !ifExists) throw IvmErrors.notFound(id.quotedString)
    }
  }

  /**
   * ALTER ... SET REFRESH POLICY. A policy that needs another layout of the backing table (FULL
   * against the others, or a query that cannot be maintained) rebuilds the view as CREATE OR
   * REPLACE would, keeping its schedule and history; otherwise only the property changes.
   */
  def setPolicy(spark: SparkSession, name: Seq[String], policy: RefreshPolicy,
      extraSet: Map[String, String] = Map.empty, extraUnset: Set[String] = Set.empty): Unit = {
    val meta = ViewCatalog.lookup(spark, name)
    val plan = ViewAnalysis.analyze(spark, meta.analyzedQuery, meta.database)
    val instant = ViewAnalysis.instant(spark)
    // A recursive CTE not kept by helpers yet: the rebuild decides (it makes them where it can).
    val rebuild = policy != RefreshPolicy.Full && meta.helpers.isEmpty && HelperViews.mayHelp(plan) &&
      incrementalLayout(spark, plan, meta.columns, instant).isLeft
    lazy val (_, mode, fullBecause) = layout(spark, meta.viewName, plan, meta.columns, policy, instant)
    if (rebuild || mode != meta.mode) {
      val props = (meta.userProperties ++ extraSet ++
        meta.epsilon.map(e => EpsilonState.Property -> e.toString)).filter { case (k, _) => !extraUnset.contains(k) }
      create(spark,
        CreateMaterializedView(name, ifNotExists = false, orReplace = true, ViewDefinition.declaredColumns(meta, plan),
          meta.comment,
          props, meta.queryText, meta.queryText, Some(policy), meta.schedule, meta.accessBy, meta.storage),
        meta.database,
        meta.history, Some(meta.sqlConf).filter(_.nonEmpty))
    } else {
      ViewCatalog.setProperties(spark, meta.backing,
        extraSet ++ Map(ViewCatalog.PolicyProperty -> policy.name) ++
          fullBecause.map(ViewCatalog.FullBecauseProperty -> _))
      val unset = extraUnset ++ (if (fullBecause.isEmpty && meta.fullBecause.isDefined) {
                                   Set(ViewCatalog.FullBecauseProperty)
                                 } else Set.empty)
      if (unset.nonEmpty) unsetProperties(spark, meta, unset.toSeq)
    }
  }

  /** ALTER ... {ADD | ALTER} SCHEDULE / TRIGGER, or DROP SCHEDULE. */
  def alterSchedule(spark: SparkSession, stmt: AlterSchedule): Unit = {
    val meta = ViewCatalog.lookup(spark, stmt.name)
    def conflict(what: String, instead: String) = IvmErrors.scheduleConflict(meta.viewName, what, instead)
    (stmt.action, meta.schedule) match {
      case ("ADD", Some(existing)) => throw conflict(s"already has a schedule (${existing.sql})",
          s"ALTER MATERIALIZED VIEW ${meta.viewName} ALTER ${stmt.schedule.get.sql} to replace it")
      case ("ALTER", None) => throw conflict("has no schedule to alter",
          s"ALTER MATERIALIZED VIEW ${meta.viewName} ADD ${stmt.schedule.get.sql}")
      case ("DROP", None) => throw conflict("has no schedule to drop",
          "SHOW MATERIALIZED VIEWS to see the views' schedules")
      case ("DROP", Some(_)) => unsetProperties(spark, meta, Seq(Schedule.Property))
      case (_, _) => ViewCatalog.setProperties(spark, meta.backing,
          Map(Schedule.Property -> Schedule.json(stmt.schedule.get)))
    }
  }

  private def unsetProperties(spark: SparkSession, meta: ViewMetadata, keys: Seq[String]): Unit =
    spark.sql(s"ALTER TABLE ${meta.backing.quotedString} UNSET TBLPROPERTIES IF EXISTS (" +
      keys.map(ViewCatalog.sqlString).mkString(", ") + ")")

  def alter(spark: SparkSession, stmt: AlterMaterializedViewProperties): Unit = {
    val meta = ViewCatalog.lookup(spark, stmt.name)
    checkProperties(stmt.set)
    stmt.unset.filter(_.startsWith("ivm.")).foreach { k =>
      if (!SettableProperties.contains(k)) throw reserved(k)
    }
    val newEpsilon = stmt.set.get(EpsilonState.Property).map(parseEpsilon)
      .orElse(if (stmt.unset.contains(EpsilonState.Property)) Some(EpsilonState.Default) else None)
    // The legacy `ivm.refresh` stands for a policy: 'full' for FULL, 'incremental' for INCREMENTAL.
    val newPolicy = stmt.set.get(ViewCatalog.RefreshProperty).map(parseMode).map(RefreshPolicy.ofMode)
      .orElse(if (stmt.unset.contains(ViewCatalog.RefreshProperty)) Some(RefreshPolicies.default(spark)) else None)
    val plain = stmt.set.filter { case (k, _) => !k.startsWith("ivm.") }
    // Validated before anything is written: ivm.epsilon applies to triangle views and views with
    // an access pattern only.
    lazy val analyzed = ViewAnalysis.reanalyze(spark, meta, meta.mode == RefreshMode.Incremental)
    lazy val triangle = TriangleViews.query(spark, analyzed, meta.mode == RefreshMode.Incremental).isDefined
    if (stmt.set.contains(EpsilonState.Property) && !triangle && meta.accessBy.isEmpty) {
      throw notTriangle(meta.viewName, analyzed)
    }
    newPolicy.filter(_ != meta.policy) match {
      case Some(policy) =>
        setPolicy(spark, stmt.name, policy, plain ++ newEpsilon.map(e => EpsilonState.Property -> e.toString),
          stmt.unset.filterNot(_.startsWith("ivm.")).toSet)
        return
      case None =>
        ViewCatalog.setProperties(spark, meta.backing, plain)
    }
    newEpsilon.filter(_ != meta.eps).foreach { eps =>
      if (!triangle && meta.accessBy.isEmpty) throw notTriangle(meta.viewName, analyzed)
      // The state for the old eps stays valid until the rebuild commits: a killed ALTER leaves
      // the new eps set and the old state, which the next refresh sees as stale and rebuilds.
      // A view with an access pattern keeps its rows; its lookups' trees are built again.
      ViewCatalog.setProperties(spark, meta.backing, Map(EpsilonState.Property -> eps.toString))
      if (triangle) RefreshPipeline.refresh(spark, stmt.name, full = true)
    }
    val unsetPlain = stmt.unset.filterNot(_.startsWith("ivm."))
    if (unsetPlain.nonEmpty) unsetProperties(spark, meta, unsetPlain)
  }

  /** (namespace, name, refresh mode, refresh policy, schedule, access pattern) of the materialized
   * views of a database. */
  def show(spark: SparkSession, namespace: Option[Seq[String]])
      : Seq[(String, String, String, String, String, String)] = {
    val db = namespace.map(_.last).getOrElse(spark.catalog.currentDatabase)
    ViewCatalog.list(spark, db).filterNot(v => HelperViews.isHelperName(v._1.table)).map { case (id, _) =>
      try {
        val meta = ViewCatalog.lookup(spark, Seq(db, id.table))
        (db, id.table, meta.mode.name, meta.policy.sql, meta.schedule.map(_.sql).orNull,
          if (meta.accessBy.isEmpty) null else meta.accessBy.mkString(", "))
      } catch {
        case e: IvmException => (db, id.table, s"broken: ${e.getCondition}", null, null, null)
      }
    }
  }

  private def parseEpsilon(v: String): Double = EpsilonState.parse(v).getOrElse(
    throw IvmErrors.invalidProperty(EpsilonState.Property, v, "a number in [0, 1]"))

  private def notTriangle(view: String, analyzed: AnalyzedView) = IvmErrors.propertyNotSettable(
    EpsilonState.Property,
    "it applies to views that IVM^eps maintains (a triangle of three relations " +
      s"joined in a cycle) and to views with ACCESS BY (their lookups' heavy/light view trees), and $view is neither" + TriangleViews.genericBecause(
        analyzed).map(w => s": $w").getOrElse(""))

  private def parseMode(v: String): RefreshMode = RefreshMode.parse(v).getOrElse(
    throw IvmErrors.invalidProperty(ViewCatalog.RefreshProperty, v,
      "'incremental' or 'full' (or use REFRESH POLICY AUTO | INCREMENTAL | INCREMENTAL STRICT | FULL)"))

  /**
   * The refresh policy a CREATE declares: REFRESH POLICY, else the older `ivm.refresh` property
   * (refused where it contradicts REFRESH POLICY), else the session's default.
   */
  private[commands] def policyOf(spark: SparkSession, stmt: CreateMaterializedView): RefreshPolicy = {
    val legacy = stmt.properties.get(ViewCatalog.RefreshProperty).map(parseMode).map(RefreshPolicy.ofMode)
    if (stmt.policy.isDefined && legacy.exists(_ != stmt.policy.get)) {
      throw IvmErrors.propertyNotSettable(ViewCatalog.RefreshProperty,
        s"it contradicts REFRESH POLICY ${stmt.policy.get}; give REFRESH POLICY only")
    }
    stmt.policy.orElse(legacy).getOrElse(RefreshPolicies.default(spark))
  }

  private def checkProperties(props: Map[String, String]): Unit =
    props.keys.filter(_.startsWith("ivm.")).foreach { k =>
      if (!SettableProperties.contains(k)) throw reserved(k)
    }

  private def reserved(key: String) = IvmErrors.propertyNotSettable(key,
    s"the ivm.* properties a user may set are ${SettableProperties.toSeq.sorted.mkString(", ")}")
}
