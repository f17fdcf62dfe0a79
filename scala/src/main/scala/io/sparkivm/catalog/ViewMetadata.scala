package io.sparkivm.catalog

import org.apache.spark.sql.catalyst.TableIdentifier

/**
 * How a view's backing table is laid out and so how it can be brought up to date: with the
 * state of counting IVM (incremental; a refresh may still recompute) or as plain rows
 * (full: every refresh recomputes). Chosen at CREATE from the [[RefreshPolicy]] and the query.
 */
sealed abstract class RefreshMode(val name: String)
object RefreshMode {
  case object Incremental extends RefreshMode("incremental")
  case object Full extends RefreshMode("full")
  def parse(value: String): Option[RefreshMode] =
    Seq(Incremental, Full).find(_.name.equalsIgnoreCase(value.trim))
}

/** A base table as it was when a view last consumed it: Delta table id and column types. */
case class SourceInfo(table: String, tableId: String, columns: Seq[(String, String)])

/**
 * What spark-ivm knows of one materialized view. It is stored as properties of the backing
 * Delta table (`ivm.*`), so it travels with the data; the catalog view only points to it.
 */
case class ViewMetadata(
    view: TableIdentifier,
    backing: TableIdentifier,
    id: String,
    queryText: String,
    database: String,
    mode: RefreshMode,
    sources: Seq[SourceInfo],
    userProperties: Map[String, String],
    comment: Option[String],
    /** The view's column names, from the catalog view (empty until it exists). */
    columns: Seq[String] = Nil,
    /** `ivm.epsilon`, if the user set it (triangle views use [[EpsilonState.Default]] otherwise). */
    epsilon: Option[Double] = None,
    policy: RefreshPolicy = RefreshPolicy.Default,
    schedule: Option[Schedule] = None,
    /** Why a view whose policy allows incremental refreshes is laid out for full ones only. */
    fullBecause: Option[String] = None,
    /** The last refreshes, oldest first ([[RefreshHistory]]). */
    history: Seq[HistoryEntry] = Nil,
    /** ACCESS BY: the input columns of the view's access pattern (empty: none declared). */
    accessBy: Seq[String] = Nil,
    /** The SQL settings captured at CREATE, under which every refresh analyzes and runs the query
     * (empty for views created before they were captured). */
    sqlConf: Map[String, String] = Map.empty,
    /** The query that is maintained, where it is not `queryText`: the user's query with each
     * recursive CTE it joins or otherwise computes over read from a helper view of its own. */
    maintainedQuery: Option[String] = None,
    /** The helper views `maintainedQuery` reads (each refreshed before this view, dropped with it). */
    helpers: Seq[TableIdentifier] = Nil,
    /** For a helper view, the view it is kept for. */
    helperOf: Option[TableIdentifier] = None,
    /** The column list as CREATE gave it (empty: none given, or a view made before it was kept). */
    declared: Seq[ViewColumn] = Nil,
    /** PARTITIONED BY or CLUSTER BY, as declared. */
    storage: ViewStorage = ViewStorage()) {
  def viewName: String = view.quotedString

  /** The query a refresh analyzes and maintains. */
  def analyzedQuery: String = maintainedQuery.getOrElse(queryText)
  def eps: Double = epsilon.getOrElse(EpsilonState.Default)
}

/**
 * The record each refresh commits with its data, in the commit's `userMetadata`: the refresh
 * number (also Delta's `txnVersion`, so a refresh applies at most once) and the base-table
 * versions it consumed (and, for a view whose filters read the time, the instant they were read
 * at). All are in the same Delta commit as the change to the view.
 */
case class RefreshRecord(
    number: Long,
    mode: String,
    sourceVersions: Map[String, Long],
    attempt: String,
    backingVersion: Long,
    timestampMs: Long,
    /** The IVM^eps state committed with this refresh (triangle views only). */
    epsilon: Option[EpsilonState] = None,
    /** This refresh's entry for [[RefreshHistory]], appended in the same commit (not read back
     * from a record: the history property holds it). */
    entry: Option[HistoryEntry] = None,
    /** The instant (microseconds) at which the view's time filters were read, for views that
     * have them: the next refresh moves the view from it. */
    instant: Option[Long] = None)
