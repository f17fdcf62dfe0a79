package io.sparkivm.catalog

import org.apache.spark.sql.catalyst.TableIdentifier

/** How a view is brought up to date. */
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
    epsilon: Option[Double] = None) {
  def viewName: String = view.quotedString
  def eps: Double = epsilon.getOrElse(EpsilonState.Default)
}

/**
 * The record each refresh commits with its data, in the commit's `userMetadata`: the refresh
 * number (also Delta's `txnVersion`, so a refresh applies at most once) and the base-table
 * versions it consumed. Both are in the same Delta commit as the change to the view.
 */
case class RefreshRecord(
    number: Long,
    mode: String,
    sourceVersions: Map[String, Long],
    attempt: String,
    backingVersion: Long,
    timestampMs: Long,
    /** The IVM^eps state committed with this refresh (triangle views only). */
    epsilon: Option[EpsilonState] = None)
