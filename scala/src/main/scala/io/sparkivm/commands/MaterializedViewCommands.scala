package io.sparkivm.commands

import io.sparkivm.execution.{RefreshPipeline, ViewExplainer, ViewLifecycle}
import io.sparkivm.parser._
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.execution.command.LeafRunnableCommand
import org.apache.spark.sql.types.{LongType, StringType}

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
  }

  private[commands] def string(name: String): AttributeReference =
    AttributeReference(name, StringType, nullable = true)()
  private[commands] def long(name: String): AttributeReference =
    AttributeReference(name, LongType, nullable = false)()
}
import MaterializedViewCommands._

case class CreateMaterializedViewCommand(statement: CreateMaterializedView) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = { ViewLifecycle.create(spark, statement); Nil }
}

case class RefreshMaterializedViewCommand(statement: RefreshMaterializedView) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(string("view"), string("mode"), long("refresh_number"),
    long("source_rows_changed"), long("view_rows_changed"), long("duration_ms"), string("report"))
  override def run(spark: SparkSession): Seq[Row] = {
    val r = RefreshPipeline.refresh(spark, statement.name, statement.full)
    Seq(Row(r.view, r.mode, r.refreshNumber, r.sourceRowsChanged, r.viewRowsChanged, r.totalMs, r.toJson))
  }
}

case class DropMaterializedViewCommand(statement: DropMaterializedView) extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = {
    ViewLifecycle.drop(spark, statement.name, statement.ifExists); Nil
  }
}

case class ShowMaterializedViewsCommand(statement: ShowMaterializedViews) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(string("namespace"), string("viewName"), string("refreshMode"))
  override def run(spark: SparkSession): Seq[Row] =
    ViewLifecycle.show(spark, statement.namespace).map { case (a, b, c) => Row(a, b, c) }
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
  override def run(spark: SparkSession): Seq[Row] = Seq(Row(ViewExplainer.explain(spark, statement.name)))
}

case class AlterMaterializedViewCommand(statement: AlterMaterializedViewProperties)
  extends LeafRunnableCommand {
  override def run(spark: SparkSession): Seq[Row] = { ViewLifecycle.alter(spark, statement); Nil }
}
