package io.sparkivm.catalog

import java.util.Locale

import scala.util.control.NonFatal

import io.sparkivm.errors.IvmErrors
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.catalog.{CatalogTable, CatalogTableType}
import org.apache.spark.sql.delta.DeltaHistoryManager
import org.apache.spark.sql.delta.util.FileNames
import org.apache.spark.sql.ivm.SessionInternals
import org.apache.spark.sql.{AnalysisException, SparkSession}
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

/**
 * Where materialized views live in Spark's catalog. A view `db.v` is two catalog objects:
 *  - the backing Delta table `db.__ivm_backing_v`, holding the view's rows with their
 *    multiplicity (`__ivm_count`) and aggregate state, and the view's metadata as `ivm.*`
 *    table properties;
 *  - the catalog view `db.v` over it (property `ivm.materialized`), which hides the `__ivm_*`
 *    columns and the rows whose count is 0, so that any Spark session can read it.
 */
object ViewCatalog extends Logging {
  val MarkerProperty = "ivm.materialized"
  val BackingProperty = "ivm.backing"
  val ViewProperty = "ivm.view"
  val IdProperty = "ivm.id"
  val QueryProperty = "ivm.query"
  val DatabaseProperty = "ivm.database"
  val RefreshProperty = "ivm.refresh"
  val SourcesProperty = "ivm.sources"
  val CommentProperty = "ivm.comment"

  /** The last refresh record: in the table's metadata, which Delta's checkpoints keep. */
  val RecordProperty = "ivm.lastRefresh"

  /** The view's [[RefreshPolicy]]; views made before policies existed take it from `ivm.refresh`. */
  val PolicyProperty = "ivm.refreshPolicy"
  val FullBecauseProperty = "ivm.fullBecause"

  /** ACCESS BY's input columns, as a JSON array. */
  val AccessByProperty = "ivm.accessBy"

  /** A view maintained through helper views ([[ViewMetadata.helpers]]): the query it maintains,
   * and the helpers as a JSON array of qualified names; a helper names its view. */
  val MaintainedQueryProperty = "ivm.maintainedQuery"
  val HelpersProperty = "ivm.helpers"
  val HelperOfProperty = "ivm.helperOf"

  /** Prefix of the SQL settings captured at CREATE ([[ViewMetadata.sqlConf]]). */
  val SqlConfPrefix = "ivm.sqlConf."
  private val ReservedProperties = Set(MarkerProperty, BackingProperty, ViewProperty, IdProperty,
    QueryProperty, DatabaseProperty, SourcesProperty, CommentProperty, RecordProperty, PolicyProperty,
    FullBecauseProperty, Schedule.Property, RefreshHistory.Property, AccessByProperty, MaintainedQueryProperty,
    HelpersProperty, HelperOfProperty, ViewColumns.ColumnsProperty, ViewColumns.StorageProperty)
  val BackingPrefix = "__ivm_backing_"
  private val SessionCatalogName = "spark_catalog"

  /** A view name as the user wrote it, qualified with the current database. */
  def qualify(spark: SparkSession, parts: Seq[String]): TableIdentifier = parts match {
    case Seq(name) => TableIdentifier(name, Some(spark.catalog.currentDatabase), Some(SessionCatalogName))
    case Seq(db, name) => TableIdentifier(name, Some(db), Some(SessionCatalogName))
    case Seq(cat, db, name) if cat.equalsIgnoreCase(SessionCatalogName) =>
      TableIdentifier(name, Some(db), Some(SessionCatalogName))
    case _ => throw IvmErrors.invalidName(parts.mkString("."), SessionCatalogName)
  }

  /**
   * `__ivm_backing_<view>`. Metastores accept only [a-z0-9_] in table names, so other
   * characters become `_`, with a hash of the real name appended to keep names apart.
   */
  def backingTable(view: TableIdentifier): TableIdentifier = {
    val lower = view.table.toLowerCase(Locale.ROOT)
    val safe = lower.map(c => if (c.isLetterOrDigit && c < 128 || c == '_') c else '_')
    val suffix = if (safe == lower) "" else "_" + Integer.toHexString(lower.hashCode)
    view.copy(table = BackingPrefix + safe + suffix)
  }

  /** The backing table of materialized view `id`, whose catalog view is `view`: as its
   *  `ivm.backing` property names it, or by the name it would have been given. */
  def backingOf(spark: SparkSession, id: TableIdentifier, view: CatalogTable): TableIdentifier =
    view.properties.get(BackingProperty).map(b => qualify(spark, b.split('.').toSeq)).getOrElse(backingTable(id))

  /** The backing table of the materialized view `id`, if `id` names one. */
  def backingOf(spark: SparkSession, id: TableIdentifier): Option[TableIdentifier] =
    catalogTable(spark, id).filter(isMaterializedView).map(backingOf(spark, id, _))

  // One metastore call, not two: a Hive metastore answers `tableExists` with a `getTable` of its
  // own (a network round trip to a remote one).
  private def catalogTable(spark: SparkSession, id: TableIdentifier): Option[CatalogTable] =
    try Some(SessionInternals.catalog(spark).getTableMetadata(id))
    catch { case NonFatal(e) if DeltaTables.isMissing(e) => None }

  /** True if a table or view of this name exists. */
  def exists(spark: SparkSession, id: TableIdentifier): Boolean =
    SessionInternals.catalog(spark).tableExists(id)

  def isMaterializedView(table: CatalogTable): Boolean =
    table.tableType == CatalogTableType.VIEW && table.properties.contains(MarkerProperty)

  /** What a catalog object is, for errors: "a table", "a view". */
  def kindOf(table: CatalogTable): String =
    if (table.tableType == CatalogTableType.VIEW) "a view" else "a table"

  /** True if the name (as a user wrote it) is a materialized view. */
  def isMaterializedView(spark: SparkSession, parts: Seq[String]): Boolean =
    catalogTable(spark, qualify(spark, parts)).exists(isMaterializedView)

  /**
   * True if `name` (SQL text: `view`, `db.view`, back-quoted parts) is a materialized view; false
   * for any name that is not one, or that cannot be one (not parsable, another catalog). For the
   * Python API: one catalog lookup where a SQL statement would parse, analyze and run. A failure
   * of the catalog itself is thrown.
   */
  def isMaterializedView(spark: SparkSession, name: String): Boolean =
    try isMaterializedView(spark, SessionInternals.parser(spark).parseMultipartIdentifier(name))
    catch { case _: AnalysisException => false }

  /** The metadata of a materialized view, or IVM_VIEW_NOT_FOUND. */
  def lookup(spark: SparkSession, parts: Seq[String]): ViewMetadata = {
    val id = qualify(spark, parts)
    val view = catalogTable(spark, id) match {
      case Some(t) if isMaterializedView(t) => t
      case Some(t) => throw IvmErrors.notMaterializedView(id.quotedString, kindOf(t),
          "MATERIALIZED VIEW statements apply to materialized views only; SHOW MATERIALIZED VIEWS lists them.")
      case None => throw IvmErrors.notFound(id.quotedString)
    }
    val backing = backingOf(spark, id, view)
    val backingEntry = DeltaTables.entryIfExists(spark, backing).getOrElse(
      throw IvmErrors.backingAltered(id.quotedString, s"its backing table $backing was dropped"))
    val props = DeltaTables.log(spark, backingEntry).update().metadata.configuration
    read(id.copy(table = view.identifier.table), backing, props)
      .copy(columns = view.schema.fieldNames.toSeq)
  }

  /** The metadata stored in a backing table's properties. */
  def read(view: TableIdentifier, backing: TableIdentifier, props: Map[String, String]): ViewMetadata = {
    def need(key: String) = props.getOrElse(key,
      throw IvmErrors.backingAltered(view.quotedString, s"table property $key is missing"))
    val mode = RefreshMode.parse(need(RefreshProperty)).getOrElse(
      throw IvmErrors.invalidProperty(RefreshProperty, props(RefreshProperty), "incremental or full"))
    ViewMetadata(
      view = view,
      backing = backing,
      id = need(IdProperty),
      queryText = need(QueryProperty),
      database = need(DatabaseProperty),
      mode = mode,
      sources = parseSources(need(SourcesProperty)),
      userProperties = props.filter { case (k, _) =>
        !ReservedProperties.contains(k) && k != RefreshProperty &&
        !k.startsWith(SqlConfPrefix) &&
        !k.startsWith("delta.") && k != EpsilonState.Property
      },
      comment = props.get(CommentProperty),
      epsilon = props.get(EpsilonState.Property).map(v =>
        EpsilonState.parse(v).getOrElse(
          throw IvmErrors.invalidProperty(EpsilonState.Property, v, "a number in [0, 1]"))),
      policy = props.get(PolicyProperty).flatMap(RefreshPolicy.parse).getOrElse(RefreshPolicy.ofMode(mode)),
      schedule = props.get(Schedule.Property).flatMap(Schedule.fromJson),
      fullBecause = props.get(FullBecauseProperty),
      history = RefreshHistory.read(props),
      accessBy = accessByOf(props),
      sqlConf = props.collect { case (k, v) if k.startsWith(SqlConfPrefix) => k.stripPrefix(SqlConfPrefix) -> v },
      maintainedQuery = props.get(MaintainedQueryProperty),
      helpers = names(props.get(HelpersProperty)).map(n => identifier(n)),
      helperOf = props.get(HelperOfProperty).map(identifier),
      declared = ViewColumns.columns(props),
      storage = ViewColumns.storage(props))
  }

  /** A qualified name as properties store it (`spark_catalog.db.v` or `db.v`). */
  private def identifier(name: String): TableIdentifier = {
    val parts = name.split('.').toSeq.takeRight(2)
    TableIdentifier(parts.last, Some(parts.head), Some(SessionCatalogName))
  }

  private def names(json: Option[String]): Seq[String] = json.toSeq.flatMap(v =>
    parse(v) match {
      case JArray(items) => items.collect { case JString(c) => c }
      case _ => Nil
    })

  /** ACCESS BY's input columns, from the properties of a backing table or catalog view. */
  def accessByOf(props: Map[String, String]): Seq[String] = names(props.get(AccessByProperty))

  /** The properties that store a view's metadata on its backing table. */
  def properties(meta: ViewMetadata): Map[String, String] = meta.userProperties ++ Map(
    ViewProperty -> meta.view.unquotedString,
    IdProperty -> meta.id,
    QueryProperty -> meta.queryText,
    DatabaseProperty -> meta.database,
    RefreshProperty -> meta.mode.name,
    SourcesProperty -> renderSources(meta.sources),
    PolicyProperty -> meta.policy.name) ++ meta.comment.map(CommentProperty -> _) ++
    meta.epsilon.map(e => EpsilonState.Property -> e.toString) ++
    meta.schedule.map(s => Schedule.Property -> Schedule.json(s)) ++
    meta.fullBecause.map(FullBecauseProperty -> _) ++
    (if (meta.accessBy.isEmpty) Nil
     else Seq(AccessByProperty -> compact(render(JArray(meta.accessBy.map(JString(_)).toList))))) ++
    meta.sqlConf.map { case (k, v) => (SqlConfPrefix + k) -> v } ++
    meta.maintainedQuery.map(MaintainedQueryProperty -> _) ++
    (if (meta.helpers.isEmpty) Nil
     else Seq(HelpersProperty -> compact(render(JArray(meta.helpers.map(h => JString(h.unquotedString)).toList))))) ++
    meta.helperOf.map(HelperOfProperty -> _.unquotedString) ++
    ViewColumns.properties(meta.declared, meta.storage)

  def renderSources(sources: Seq[SourceInfo]): String = compact(render(JArray(sources.toList.map { s =>
    JObject("table" -> JString(s.table), "id" -> JString(s.tableId),
      "columns" -> JArray(s.columns.toList.map { case (n, t) => JArray(List(JString(n), JString(t))) }))
  })))

  private def parseSources(json: String): Seq[SourceInfo] = parse(json) match {
    case JArray(items) => items.map { item =>
        val JString(table) = item \ "table": @unchecked
        val JString(tid) = item \ "id": @unchecked
        val JArray(cols) = item \ "columns": @unchecked
        SourceInfo(table, tid,
          cols.map {
            case JArray(List(JString(n), JString(t))) => n -> t
            case other => throw IvmErrors.internal(s"a source column entry of ivm.sources is $other")
          })
      }
    case other => throw IvmErrors.internal(s"ivm.sources is $other")
  }

  def setProperties(spark: SparkSession, table: TableIdentifier, props: Map[String, String]): Unit =
    if (props.nonEmpty) {
      val list = props.map { case (k, v) => s"${sqlString(k)} = ${sqlString(v)}" }.mkString(", ")
      spark.sql(s"ALTER TABLE ${table.quotedString} SET TBLPROPERTIES ($list)")
    }

  /** A SQL string literal. */
  def sqlString(s: String): String = "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"

  /** Materialized views of a database, by name. */
  def list(spark: SparkSession, database: String): Seq[(TableIdentifier, CatalogTable)] = {
    val catalog = SessionInternals.catalog(spark)
    catalog.listTables(database).filter(_.table != null).flatMap { id =>
      try {
        val t = catalog.getTableMetadata(id)
        if (isMaterializedView(t)) Some(id -> t) else None
      } catch { case NonFatal(_) => None }
    }.sortBy(_._1.table)
  }

  // ---- refresh records, kept in the commits of the backing table ----

  def renderRecord(r: RefreshRecord): String = compact(render(JObject(
        "ivm" -> JObject(
          "refresh" -> JLong(r.number),
          "mode" -> JString(r.mode),
          "attempt" -> JString(r.attempt),
          "sources" -> JObject(r.sourceVersions.toList.sortBy(_._1).map { case (t, v) => t -> JLong(v) }),
          "epsilon" -> r.epsilon.map(_.toJson).getOrElse(JNothing),
          "instant" -> r.instant.map(JLong(_)).getOrElse(JNothing)))))

  /** The number of the refresh recorded in a backing table's properties, if any. */
  def recordedNumber(configuration: Map[String, String]): Option[Long] =
    configuration.get(RecordProperty).flatMap(parseRecord(_, -1L, 0L)).map(_.number)

  private def parseRecord(json: String, version: Long, ts: Long): Option[RefreshRecord] =
    try {
      parse(json) \ "ivm" match {
        case obj: JObject =>
          val JInt(n) = obj \ "refresh": @unchecked
          val JString(mode) = obj \ "mode": @unchecked
          val JString(attempt) = obj \ "attempt": @unchecked
          val JObject(srcs) = obj \ "sources": @unchecked
          Some(RefreshRecord(n.toLong, mode,
              srcs.map {
                case (k, JInt(v)) => k -> v.toLong
                case (k, v) => throw IvmErrors.internal(s"a refresh record gives version $v for $k")
              }.toMap,
              attempt, version, ts, EpsilonState.fromJson(obj \ "epsilon"),
              instant = obj \ "instant" match {
                case JInt(v) => Some(v.toLong)
                case _ => None
              }))
        case _ => None
      }
    } catch { case NonFatal(_) => None }

  /** Operations on a backing table that do not change its rows. */
  private val MaintenanceOperations = Set("OPTIMIZE", "VACUUM START", "VACUUM END",
    "SET TBLPROPERTIES", "UNSET TBLPROPERTIES", "REORG", "CLUSTER BY",
    "CHANGE COLUMN", "UPGRADE PROTOCOL", "ADD CONSTRAINT", "DROP CONSTRAINT", "DROP FEATURE",
    "COMPUTE STATS", "ANALYZE")

  /**
   * The last refresh committed to a backing table, and the commits after it that were not made
   * by spark-ivm and change rows (which would make the view wrong). The record is the table
   * property [[RecordProperty]], written in the refresh's own commit; the commits after it are
   * found by reading commit files from the newest back, on the driver (usually the newest commit
   * is the refresh's). Delta deletes commit files older than the log's retention once a
   * checkpoint covers them: the walk stops there, and the property still holds the record.
   * Views written before the property existed have the record only in their commits.
   */
  def lastRefresh(spark: SparkSession, meta: ViewMetadata): (RefreshRecord, Seq[String]) = {
    val log = DeltaTables.log(spark, meta.backing)
    val conf = log.newDeltaHadoopConf()
    val snapshot = log.update()
    val stored = snapshot.metadata.configuration.get(RecordProperty)
      .flatMap(parseRecord(_, snapshot.version, snapshot.timestamp))
    val foreign = Seq.newBuilder[String]
    var version = snapshot.version
    var found: Option[RefreshRecord] = None
    var readable = true
    while (found.isEmpty && readable && version >= 0) {
      val info =
        try {
          DeltaHistoryManager.getCommitInfoOpt(log.store, FileNames.unsafeDeltaFile(log.logPath, version), conf)
        } catch {
          case _: java.io.FileNotFoundException if stored.isDefined => readable = false; None
          case NonFatal(e) => throw IvmErrors.backingAltered(meta.viewName,
              s"the log entry of version $version cannot be read (${e.getMessage}), and with it the " +
                "record of its last refresh")
        }
      info.foreach { c =>
        c.userMetadata.flatMap(parseRecord(_, version, c.timestamp.getTime)) match {
          case Some(r) => found = Some(r)
          case None if MaintenanceOperations.contains(c.operation) =>
          case None => foreign += s"version $version: ${c.operation}"
        }
      }
      version -= 1
    }
    // Both hold the same record when both exist; the property wins if the commit is older.
    val record = (found, stored) match {
      case (Some(c), Some(p)) if p.number > c.number => Some(p)
      case (Some(c), _) => Some(c)
      case (None, p) => p
    }
    record.map(_ -> foreign.result()).getOrElse(throw IvmErrors.backingAltered(meta.viewName,
        "no commit of it records a refresh by spark-ivm"))
  }
}
