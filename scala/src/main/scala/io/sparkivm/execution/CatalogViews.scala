package io.sparkivm.execution

import io.sparkivm.catalog.{CatalogGuard, ViewCatalog, ViewColumns, ViewMetadata}
import io.sparkivm.planner.ViewMaintenance
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.util.QuotingUtils.quoteIdentifier
import org.apache.spark.sql.ivm.SessionInternals

/** The catalog view of a materialized view: a view over its backing table, with its definition. */
object CatalogViews {

  /** The user-facing catalog view over the backing table. */
  def create(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance,
      replace: Boolean): Unit = {
    val comment = meta.comment.map(c => s" COMMENT ${ViewCatalog.sqlString(c)}").getOrElse("")
    // ACCESS BY is mirrored on the catalog view: a lookup reads it without touching the backing table.
    // So is the definition, when it fits a metastore's property value: REFRESH ... FULL rebuilds
    // a view from it whose backing table (and with it the full metadata) was lost.
    val definition = if (meta.queryText.length > MirroredQueryMaxChars) Nil
    else
      Seq(ViewCatalog.QueryProperty -> meta.queryText, ViewCatalog.DatabaseProperty -> meta.database,
        ViewCatalog.PolicyProperty -> meta.policy.name) ++
        meta.sqlConf.map { case (k, v) => (ViewCatalog.SqlConfPrefix + k) -> v }
    val props = (Seq(ViewCatalog.MarkerProperty -> "true",
      ViewCatalog.BackingProperty -> meta.backing.unquotedString.stripPrefix("spark_catalog.")) ++
      ViewCatalog.properties(meta).get(ViewCatalog.AccessByProperty).map(ViewCatalog.AccessByProperty -> _) ++
      ViewColumns.properties(meta.declared, meta.storage) ++
      definition)
      .map { case (k, v) => s"${ViewCatalog.sqlString(k)} = ${ViewCatalog.sqlString(v)}" }
      .mkString(", ")
    // The declared columns' comments, where any has one: Spark's view column list takes them.
    val columns = if (!meta.declared.exists(_.comment.isDefined)) ""
    else
      meta.declared.map(c => quoteIdentifier(c.name) + c.commentSql).mkString(" (", ", ", ")")
    CatalogGuard.internal(spark.sql(s"CREATE ${if (replace) "OR REPLACE " else ""}VIEW " +
        s"${meta.view.quotedString}$columns$comment TBLPROPERTIES ($props) AS ${maintenance.viewSql(meta.backing.quotedString)}"))
  }

  /**
   * After a full refresh: the catalog view's columns take the types the query gives now (a base
   * column retyped since CREATE), as CREATE OR REPLACE would give them; the backing table took
   * them in the refresh's commit.
   */
  def matchTypes(spark: SparkSession, meta: ViewMetadata, analyzed: AnalyzedView): Unit = {
    val view = SessionInternals.catalog(spark).getTableMetadata(meta.view)
    val types = analyzed.maintenance.atRead.map(_.types).getOrElse(analyzed.plan.output.map(_.dataType))
    if (view.schema.length != types.length || view.schema.fields.zip(types).exists { case (f, t) =>
        !org.apache.spark.sql.types.DataType.equalsIgnoreNullability(f.dataType, t)
      }) {
      create(spark, meta, analyzed.maintenance, replace = true)
    }
  }

  /** Hive's metastore keeps property values of up to 4,000 characters. */
  private val MirroredQueryMaxChars = 3500
}
