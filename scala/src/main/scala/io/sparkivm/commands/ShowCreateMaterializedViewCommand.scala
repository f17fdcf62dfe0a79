package io.sparkivm.commands

import io.sparkivm.catalog.{EpsilonState, ViewCatalog, ViewMetadata}
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.catalyst.util.QuotingUtils.quoteIdentifier
import org.apache.spark.sql.execution.command.LeafRunnableCommand
import org.apache.spark.sql.types.StringType
import org.apache.spark.sql.{Row, SparkSession}

/**
 * Spark's `SHOW CREATE TABLE` of a materialized view: the CREATE MATERIALIZED VIEW statement that
 * makes it again (Spark's own would give the plain view over the backing table that keeps its
 * rows, which no refresh maintains). `AS SERDE` stays Spark's.
 */
case class ShowCreateMaterializedViewCommand(name: Seq[String]) extends LeafRunnableCommand {
  override val output: Seq[Attribute] = Seq(AttributeReference("createtab_stmt", StringType, nullable = false)())

  override def run(spark: SparkSession): Seq[Row] =
    Seq(Row(ShowCreateMaterializedViewCommand.statement(ViewCatalog.lookup(spark, name))))
}

object ShowCreateMaterializedViewCommand {

  /** The statement, one clause per line, with the policy in force and the user's properties. */
  def statement(meta: ViewMetadata): String = {
    val properties = meta.userProperties ++ meta.epsilon.map(e => EpsilonState.Property -> e.toString)
    val columns = if (meta.declared.nonEmpty) meta.declared.map(_.sql) else meta.columns.map(quoteIdentifier)
    def names(clause: String, columns: Seq[String]) =
      if (columns.isEmpty) None else Some(columns.map(quoteIdentifier).mkString(s"$clause (", ", ", ")"))
    val clauses = Seq(
      Some(s"CREATE MATERIALIZED VIEW ${meta.view.copy(catalog = None).quotedString}" +
        (if (columns.isEmpty) "" else columns.mkString(" (", ", ", ")"))),
      meta.comment.map(c => s"COMMENT ${ViewCatalog.sqlString(c)}"),
      names("PARTITIONED BY", meta.storage.partitionedBy),
      names("CLUSTER BY", meta.storage.clusteredBy),
      Some(s"REFRESH POLICY ${meta.policy.sql}"),
      meta.schedule.map(_.sql),
      names("ACCESS BY", meta.accessBy),
      if (properties.isEmpty) None
      else
        Some(properties.toSeq.sorted.map { case (k, v) => s"${ViewCatalog.sqlString(k)} = ${ViewCatalog.sqlString(v)}" }
            .mkString("TBLPROPERTIES (", ", ", ")")),
      Some(s"AS ${meta.queryText}"))
    clauses.flatten.mkString("\n") + "\n"
  }
}
