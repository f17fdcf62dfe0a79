package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.{SourceInfo, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.{DeltaSources, PinnedSource}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.{IvmErrors, IvmException}
import io.sparkivm.planner.{
  ComputedAtRead, PlanValidator, QueryRewrites, RecursiveRows, RowsShape, SourceLeaf, TimeFilters, TopRows,
  ViewMaintenance, ViewShape
}
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.analysis.{SQLFunctionNode, UnresolvedFunction, UnresolvedRelation}
import org.apache.spark.sql.catalyst.expressions.{Alias, PipeOperator, SubqueryExpression, VariableReference}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.delta.schema.{SchemaUtils => DeltaSchemaUtils}
import org.apache.spark.sql.delta.sources.DeltaSQLConf
import org.apache.spark.sql.ivm.{CapturedSqlConf, SessionInternals, SparkInternals}
import org.apache.spark.sql.types.{StringType, StructField, StructType}
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.unsafe.types.UTF8String

/** A view's query, analyzed now, with what maintaining it takes. */
case class AnalyzedView(plan: LogicalPlan, leaves: Seq[SourceLeaf], maintenance: ViewMaintenance) {

  /** The instant its time filters are read at ([[TimeFilters]]); None where it reads no time. */
  def instant: Option[Long] = TimeFilters.instantOf(plan)

  /** The distinct tables the query reads. */
  def tables: Seq[SourceLeaf] = leaves.groupBy(_.name).values.map(_.head).toSeq.sortBy(_.name)
}

object ViewAnalysis {

  /** Parses and analyzes query text with `database` as the current database. */
  def analyze(spark: SparkSession, queryText: String, database: String): LogicalPlan = {
    val previous = spark.catalog.currentDatabase
    if (previous != database) spark.catalog.setCurrentDatabase(database)
    try {
      val parsed = SessionInternals.parser(spark).parsePlan(queryText)
      // SQL pipe syntax (`FROM t |> WHERE ...`) and SQL table functions leave nodes that compute
      // nothing, which Spark's optimizer removes (EliminatePipeOperators,
      // EliminateSQLFunctionNode); the view's plan is read without them.
      val analyzed = SparkInternals.analyzed(SparkInternals.dataFrame(spark, parsed))
        .transformUpWithSubqueries {
          case PipeOperator(child) => child
          case SQLFunctionNode(_, child) => child
        }
      SourceLeaf.withTimeTravelUnnamed(analyzed)
    } finally {
      if (previous != database) spark.catalog.setCurrentDatabase(previous)
    }
  }

  /** Refusals that mean "not incrementally", not "not at all": under REFRESH POLICY AUTO or
   * INCREMENTAL such a view is refreshed by recomputation. */
  val NotIncrementalizable: Set[String] = Set("IVM_UNSUPPORTED_OPERATOR", "IVM_SOURCE_NOT_DELTA")

  /**
   * The plan and its maintenance. Incremental views must pass [[PlanValidator]]; views with
   * `ivm.refresh = full` may use any query, stored as rows with multiplicities.
   */
  def prepare(plan: LogicalPlan, columns: Seq[String], incremental: Boolean, instant: => Long): AnalyzedView = {
    PlanValidator.requirePermanent(plan)
    if (incremental) {
      // A top-level ORDER BY ... LIMIT is applied when the view is read, over the rows under it.
      val (split, top) = TopRows.split(QueryRewrites(plan))
      // So are windows without PARTITION BY, over the rows under them, and what is above a
      // recursive CTE, over its rows.
      val (rows, atRead) = ComputedAtRead.split(split, columns)
      val rowColumns = atRead.map(_.rowColumns).getOrElse(columns)
      val rewritten = TimeFilters.bind(rows, instant)
      val leaves = PlanValidator.validate(rewritten)
      val shape = ViewShape.of(rewritten)
      TimeFilters.check(shape)
      RecursiveRows.check(shape)
      PlanValidator.requireComparableRows(shape, rowColumns)
      AnalyzedView(rewritten, leaves, new ViewMaintenance(shape, rowColumns, top, atRead))
    } else {
      val leaves = plan.collect { case SourceLeaf(l) if l.provider.exists(_.equalsIgnoreCase("delta")) => l }
      AnalyzedView(plan, leaves,
        new ViewMaintenance(
          RowsShape(plan, plan, distinct = false), columns))
    }
  }

  /**
   * Throws IVM_UNSUPPORTED_OPERATOR unless what the view computes when it is read
   * ([[ComputedAtRead]]) computes what its query does over the rows it keeps: the SQL, analyzed
   * and optimized over a relation of those rows, must be the query's plan over the same relation
   * (an expression whose SQL drops one of its settings, such as an accuracy, is caught here).
   */
  def requireReadable(spark: SparkSession, analyzed: AnalyzedView): Unit =
    analyzed.maintenance.atRead.foreach { w =>
      // A relation the optimizer knows nothing of: an empty local one would be optimized away.
      val leaf = SparkInternals.analyzed(spark.createDataFrame(spark.sparkContext.emptyRDD[Row],
          StructType(w.rowColumns.zip(w.rowTypes).map { case (n, t) => StructField(n, t) })))
      // Both named alike, by position: only what they compute may differ.
      def computed(plan: LogicalPlan) = SparkInternals.dataFrame(spark,
        Project(plan.output.zipWithIndex.map { case (a, i) => Alias(a, s"c$i")() }, plan))
        .queryExecution.optimizedPlan.canonicalized
      val why =
        try {
          val read = SessionInternals.parser(spark).parsePlan(w.select).transformUp {
            case u: UnresolvedRelation if u.multipartIdentifier == Seq(ComputedAtRead.Rows) => leaf
          }
          if (computed(read) == computed(w.queryOver(leaf))) None
          else Some("the SQL that states them computes something else")
        } catch {
          case NonFatal(e) => Some(s"the SQL that states them does not analyze: ${e.getMessage}")
        }
      why.foreach { reason =>
        if (w.recursive) {
          throw IvmErrors.unsupported(s"What the query computes over its recursive CTE (${w.functions.mkString(", ")})",
            s"The view computes it when it is read, over the recursive rows it keeps, and $reason; define a " +
              "view of the recursive CTE alone and compute the rest when reading it.")
        }
        throw IvmErrors.unsupported(s"The window functions ${w.functions.mkString(", ")}",
          s"The view computes them when it is read, over the rows it keeps, and $reason; add PARTITION BY, " +
            "or compute them when reading the view.")
      }
    }

  /**
   * The instant a refresh (or CREATE) reads the time at, in microseconds: the session's
   * `spark.ivm.refresh.instant`, else now.
   */
  def instant(spark: SparkSession): Long = IvmConf.RefreshInstant.get(spark) match {
    case "" => DateTimeUtils.instantToMicros(java.time.Instant.now())
    case text => DateTimeUtils.stringToTimestamp(UTF8String.fromString(text),
        DateTimeUtils.getZoneId(spark.sessionState.conf.sessionLocalTimeZone)).get
  }

  /** The view's query as it analyzes now; a missing or broken base table is IVM_SOURCE_MISSING. */
  def reanalyze(user: SparkSession, meta: ViewMetadata, incremental: Boolean): AnalyzedView = {
    // Under the SQL settings the view captured at CREATE, whatever the session's are now.
    val spark = CapturedSqlConf.session(user, meta.sqlConf)
    val plan =
      try analyze(spark, meta.analyzedQuery, meta.database)
      catch {
        case e: IvmException => throw e
        case NonFatal(e) =>
          val table = meta.sources.map(_.table).find(t =>
            !ViewCatalog.exists(spark,
              ViewCatalog.qualify(spark, t.split('.').toSeq.takeRight(2))))
          if (table.isEmpty) changedShape(spark, meta).foreach(throw _)
          throw IvmErrors.sourceMissing(meta.viewName, table.getOrElse("of the query"), e)
      }
    requireRowData(meta.viewName, plan)
    prepare(plan, meta.columns, incremental, instant(user))
  }

  /**
   * The first base table that is no longer as the view consumed it (another table of the name,
   * a column dropped or retyped), as IVM_SOURCE_CHANGED: why a query that analyzed before no
   * longer does.
   */
  private def changedShape(spark: SparkSession, meta: ViewMetadata): Option[Exception] =
    meta.sources.iterator.flatMap { s =>
      try {
        val id = ViewCatalog.qualify(spark, s.table.split('.').toSeq.takeRight(2))
        DeltaSources.checkUnchangedShape(meta.viewName, s,
          DeltaSources.pin(spark, id,
            requireChangeFeed = false, autoEnable = false))
        None
      } catch {
        case e: IvmException => Some(e)
        case NonFatal(_) => None
      }
    }.nextOption()

  /**
   * IVM_UNSUPPORTED_COLUMN_TYPE for the first column of a backing table's `schema` that Delta
   * cannot store (by Delta's own check, which its CREATE would fail with, naming spark-ivm's
   * internal columns): the view column, grouping key or aggregate that needs it, and what to write
   * instead. Strings under a collation are the case a query can produce.
   */
  def requireStorable(spark: SparkSession, view: String, schema: StructType, maintenance: ViewMaintenance): Unit =
    if (spark.sessionState.conf.getConf(DeltaSQLConf.DELTA_SCHEMA_TYPE_CHECK)) {
      // Delta names a nested field by its path (`c.x`, `c[]`): the top-level column holds it.
      val unstorable = DeltaSchemaUtils.findUnsupportedDataTypes(schema).map { u =>
        val column = schema.fieldNames.filter(n =>
          u.column == n || u.column.startsWith(n + ".") ||
            u.column.startsWith(n + "[")).maxByOption(_.length).getOrElse(u.column)
        (column, schema.fields.find(_.name == column).map(_.dataType).getOrElse(u.dataType))
      }
      // The view column the user wrote first, then what the view keeps for it.
      val shown = unstorable.filter(u => maintenance.outputStorage.contains(u._1))
      (shown ++ unstorable).headOption.foreach { case (column, dataType) =>
        val collated = SparkInternals.existsNested(dataType) {
          case s: StringType => s != StringType
          case _ => false
        }
        val hint = if (collated) {
          "A Delta table keeps strings without a collation: cast the value to STRING in the query " +
            "(CAST(... AS STRING), or lower(...) for a case-insensitive key), and apply the collation " +
            "where the view is read."
        } else "Convert the value in the query to a type Delta stores."
        throw IvmErrors.unsupportedColumnType(view, maintenance.keptIn(column), dataType.sql, hint)
      }
    }

  /**
   * IVM_TEMPORARY_SOURCE if the query (its text, and `plan` as analyzed) names what lives only as
   * long as the session: a temporary function (SQL, or registered with `spark.udf`) or a session
   * variable. Spark's CREATE VIEW refuses them alike; a refresh in another application could not
   * resolve them (nor can the refresh's own session a variable).
   */
  def requireOutlivesSession(spark: SparkSession, queryText: String, plan: LogicalPlan): Unit = {
    val catalog = SessionInternals.catalog(spark)
    // Function names as written, before analysis inlines or resolves them; a CTE's definitions
    // are inner children of the parsed plan.
    def functions(p: LogicalPlan): Seq[String] = {
      val own = p.expressions.flatMap(_.collect {
        case f: UnresolvedFunction if f.nameParts.size == 1 =>
          f.nameParts.head
      })
      val nested = p.expressions.flatMap(_.collect { case s: SubqueryExpression => s.plan }) ++ p.children ++
        p.innerChildren.collect { case c: LogicalPlan => c }
      own ++ nested.flatMap(functions)
    }
    functions(SessionInternals.parser(spark).parsePlan(queryText))
      .find(f => catalog.isTemporaryFunction(FunctionIdentifier(f)))
      .foreach(f => throw IvmErrors.temporarySource(s"the temporary function $f"))
    plan.foreachWithSubqueries(_.expressions.foreach(_.foreach {
      case v: VariableReference =>
        throw IvmErrors.temporarySource(s"the session variable ${v.originalNameParts.mkString(".")}")
      case _ =>
    }))
  }

  /** IVM_ROW_LOCATION_IN_QUERY if the query reads where rows are stored ([[PlanValidator.rowLocation]]). */
  def requireRowData(view: String, plan: LogicalPlan): Unit =
    PlanValidator.rowLocation(plan).foreach(what => throw IvmErrors.rowLocation(view, what))

  /**
   * Pins every base table at its current version. A refresh gives the `consumed` tables (as the
   * view last read them), checked to be the same tables, and `at`, versions to pin some at
   * instead of their latest.
   */
  def pin(spark: SparkSession, view: String, analyzed: AnalyzedView, incremental: Boolean,
      autoEnable: Boolean, consumed: Seq[SourceInfo] = Nil, at: Map[String, Long] = Map.empty)
      : Map[String, PinnedSource] =
    analyzed.tables.map { leaf =>
      // A backing table read by a view gets its change feed whatever the setting: it is ours,
      // and kept off until a view reads it.
      val backing = leaf.table.table.startsWith(ViewCatalog.BackingPrefix)
      leaf.name -> DeltaSources.wrap(view, leaf.name) {
        DeltaSources.pin(spark, leaf.table, requireChangeFeed = incremental, autoEnable || backing,
          consumed.find(_.table == leaf.name).map(view -> _), at.get(leaf.name))
      }
    }.toMap
}
