package io.sparkivm.commands

import io.sparkivm.catalog.{RefreshPolicy, Schedule, ViewColumn, ViewStorage}

/** The statements spark-ivm adds to Spark SQL, as parsed; see [[IvmStatementParser]]. */
sealed trait IvmStatement

case class CreateMaterializedView(
    name: Seq[String],
    ifNotExists: Boolean,
    orReplace: Boolean,
    /** The column list; empty: the query's own names. */
    columns: Seq[ViewColumn],
    comment: Option[String],
    properties: Map[String, String],
    queryText: String,
    /** The query text with the statement's head blanked out, so that Spark's parse errors
     *  point at the right line and position of the whole statement. */
    queryTextInPlace: String,
    policy: Option[RefreshPolicy] = None,
    schedule: Option[Schedule] = None,
    /** ACCESS BY (col, ...): the view's input columns (Zhang 2022's access pattern). */
    accessBy: Seq[String] = Nil,
    storage: ViewStorage = ViewStorage(),
    /** CREATE OR REFRESH: a view of the same definition is refreshed, one of another replaced. */
    orRefresh: Boolean = false)
    extends IvmStatement {
  def columnNames: Seq[String] = columns.map(_.name)
}

/** REFRESH MATERIALIZED VIEW name [FULL] [CASCADE] [WITH REPORT]. */
case class RefreshMaterializedView(name: Seq[String], full: Boolean, cascade: Boolean = false,
    withReport: Boolean = false)
    extends IvmStatement
case class DropMaterializedView(name: Seq[String], ifExists: Boolean) extends IvmStatement
case class ShowMaterializedViews(namespace: Option[Seq[String]]) extends IvmStatement

/** DESCRIBE MATERIALIZED VIEW name [AS JSON]. */
case class DescribeMaterializedView(name: Seq[String], asJson: Boolean = false) extends IvmStatement
case class ExplainRefresh(name: Seq[String], extended: Boolean = false) extends IvmStatement
case class AlterMaterializedViewProperties(
    name: Seq[String], set: Map[String, String], unset: Seq[String])
    extends IvmStatement

/** ALTER MATERIALIZED VIEW name SET REFRESH POLICY policy. */
case class AlterRefreshPolicy(name: Seq[String], policy: RefreshPolicy) extends IvmStatement

/** ALTER MATERIALIZED VIEW name {ADD | ALTER} schedule, or DROP {SCHEDULE | TRIGGER} (no schedule). */
case class AlterSchedule(name: Seq[String], action: String, schedule: Option[Schedule]) extends IvmStatement

/** SHOW REFRESHES [FOR name] [LIMIT n]. */
case class ShowState(name: Option[Seq[String]]) extends IvmStatement
case class ShowRefreshes(name: Option[Seq[String]], limit: Option[Int]) extends IvmStatement
