package io.sparkivm.commands

import io.sparkivm.catalog.ViewCatalog
import io.sparkivm.execution.{RefreshLog, RefreshPipeline, StateReport}
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.execution.command.LeafRunnableCommand
import org.apache.spark.sql.types.{LongType, StringType, TimestampType}
import org.apache.spark.sql.{Row, SparkSession}

/** The logical plans of spark-ivm's statements: Spark runs them eagerly, as its own DDL. */
object MaterializedViewCommands {
  def plan(statement: IvmStatement): LeafRunnableCommand = statement match {
    case s: CreateMaterializedView => CreateMaterializedViewCommand(s)
    case s: RefreshMaterializedView => RefreshMaterializedViewCommand(s)
    case s: DropMaterializedView => DropMaterializedViewCommand(s)
    case s: ShowMaterializedViews => ShowMaterializedViewsCommand(s)
    case s: DescribeMaterializedView => DescribeMaterializedViewCommand(s)
    case s: ExplainRefresh => ExplainRefreshCommand(s)
    case s: AlterMaterializedViewProperties => AlterMaterializedViewCommand(s)
    case s: AlterRefreshPolicy => AlterRefreshPolicyCommand(s)
    case s: AlterSchedule => AlterScheduleCommand(s)
    case s: ShowRefreshes => ShowRefreshesCommand(s)
    case s: ShowState => ShowStateCommand(s)
  }

  private[commands] def string(name: String): AttributeReference =
    AttributeReference(name, StringType, nullable = true)()
  private[commands] def long(name: String): AttributeReference =
    AttributeReference(name, LongType, nullable = false)()
  private[commands] def nullableLong(name: String): AttributeReference =
    AttributeReference(name, LongType, nullable = true)()
}
import MaterializedViewCommands._

case class CreateMaterializedViewCommand(statement: CreateMaterializedView) extends LeafRunnableCommand {

  /** CREATE OR REFRESH refreshes a view it declares as it is, and replaces any other. */
  override def run(spark: SparkSession): Seq[Row] = {
    if (!statement.orRefresh) ViewLifecycle.create(spark, statement)
    else if (ViewDefinition.existing(spark, statement).exists(ViewDefinition.unchanged(spark, statement, _))) {
      RefreshPipeline.refreshAll(spark, statement.name, full = false, cascade = false)
    } else ViewLifecycle.create(spark, statement.copy(orReplace = true, orRefresh = false))
    Nil
  }
}

case class RefreshMaterializedViewCommand(statement: RefreshMaterializedView) extends LeafRunnableCommand {

  /** A compact row per view (the reason in one sentence); the whole report as JSON on request. */
  override val output: Seq[Attribute] = Seq(string("view"), string("mode"), long("refresh_number"),
    long("source_rows_changed"), long("view_rows_changed"), long("duration_ms"), string("reason")) ++
    (if (statement.withReport) Seq(string("report")) else Nil)

  /** One row per view refreshed: with CASCADE the views it reads first, the named view last. */
  override def run(spark: SparkSession): Seq[Row] = {
    // REFRESH ... FULL of a view whose backing table is gone builds it again from its definition.
    val rebuilt = statement.full && ViewLifecycle.rebuildIfBackingMissing(spark, statement.name)
    RefreshPipeline.refreshAll(spark, statement.name, statement.full, statement.cascade,
      reason =
        if (rebuilt) Some("the view's backing table was gone: rebuilt from its definition, and recomputed") else None
    ).map { r =>
      val compact = Seq(r.view, r.mode, r.refreshNumber, r.sourceRowsChanged, r.viewRowsChanged, r.totalMs, r.reason)
      Row.fromSeq(if (statement.withReport) compact :+ r.toJson else compact)
    }
  }
}

case class DropMaterializedViewCommand(statement: DropMaterializedView) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = {
    ViewLifecycle.drop(spark, statement.name, statement.ifExists); Nil
  }
}

case class ShowMaterializedViewsCommand(statement: ShowMaterializedViews) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(string("namespace"), string("viewName"), string("refreshMode"),
    string("refreshPolicy"), string("schedule"), string("accessBy"))
  override def run(spark: SparkSession): Seq[Row] =
    ViewLifecycle.show(spark, statement.namespace).map { case (a, b, c, d, e, f) => Row(a, b, c, d, e, f) }
}

/**
 * DESCRIBE MATERIALIZED VIEW: rows in the layout of DESCRIBE TABLE EXTENDED, or with AS JSON
 * (as Spark's DESCRIBE TABLE ... AS JSON) one row whose `json_metadata` holds the same as fields.
 */
case class DescribeMaterializedViewCommand(statement: DescribeMaterializedView) extends LeafRunnableCommand {
  override val output: Seq[Attribute] =
    if (statement.asJson) Seq(string("json_metadata"))
    else Seq(string("col_name"), string("data_type"), string("comment"))
  override def run(spark: SparkSession): Seq[Row] = {
    val description = ViewExplainer.describe(spark, statement.name)
    if (statement.asJson) Seq(Row(description.json))
    else description.rows.map { case (a, b, c) => Row(a, b, c) }
  }
}

case class ExplainRefreshCommand(statement: ExplainRefresh) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(string("plan"))
  override def run(spark: SparkSession): Seq[Row] =
    Seq(Row(ViewExplainer.explain(spark, statement.name, statement.extended)))
}

case class AlterMaterializedViewCommand(statement: AlterMaterializedViewProperties) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = { ViewLifecycle.alter(spark, statement); Nil }
}

case class AlterRefreshPolicyCommand(statement: AlterRefreshPolicy) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = {
    ViewLifecycle.setPolicy(spark, statement.name, statement.policy); Nil
  }
}

case class AlterScheduleCommand(statement: AlterSchedule) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = { ViewLifecycle.alterSchedule(spark, statement); Nil }
}

/**
 * SHOW REFRESHES [FOR v] [LIMIT n]: past refreshes, newest first ([[RefreshLog]]). What is not
 * known is NULL: the number of a failed refresh (none was committed), the duration of one whose
 * process ended before measuring it, the rows changed in the sources of a recomputation (it reads
 * none of the changes).
 */
case class ShowRefreshesCommand(statement: ShowRefreshes) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(string("view"), nullableLong("refresh_number"),
    AttributeReference("start_time", TimestampType, nullable = false)(), nullableLong("duration_ms"),
    string("mode"), string("reason"), string("triggered_by"), nullableLong("source_rows_changed"),
    string("source_versions"), string("error"))
  override def run(spark: SparkSession): Seq[Row] =
    RefreshLog.list(spark, statement.name, statement.limit).map { case (view, e) =>
      Row(view, known(e.number), new java.sql.Timestamp(e.startMs), known(e.durationMs), e.mode, e.reason,
        e.trigger, known(e.sourceRowsChanged),
        e.sourceVersions.toSeq.sorted.map { case (t, v) => s"$t@$v" }.mkString(", "), e.error.orNull)
    }

  private def known(n: Long): java.lang.Long = if (n < 0) null else n
}

/**
 * SHOW MATERIALIZED VIEW STATE [FOR v]: the state spark-ivm holds between refreshes (of one
 * view: its own, its backing table's and its source tables'), least recently used first.
 */
case class ShowStateCommand(statement: ShowState) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(string("kind"), string("of"), string("place"), long("bytes"),
    string("view"), string("stamp"))
  override def run(spark: SparkSession): Seq[Row] = {
    val lines = statement.name.map(n => StateReport.of(spark, ViewCatalog.lookup(spark, n))).getOrElse(StateReport.all)
    lines.map(l => Row(l.kind, l.of, l.place, l.bytes, l.view.orNull, l.stamp))
  }
}
