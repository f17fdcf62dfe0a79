package io.sparkivm.commands

import java.util.Locale

import io.sparkivm.catalog.{DeltaTables, EpsilonState, ViewCatalog, ViewColumn, ViewMetadata, ViewStorage}
import io.sparkivm.errors.{IvmErrors, IvmException}
import io.sparkivm.planner.ViewMaintenance
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/** What a CREATE statement declares about a view beyond its query, and how it compares. */
object ViewDefinition {

  /**
   * PARTITIONED BY or CLUSTER BY with each name resolved to the view's column (case-insensitively,
   * as Spark resolves names), or IVM_INVALID_LAYOUT naming the clause and the column.
   */
  def storageOf(view: String, storage: ViewStorage, columns: Seq[String]): ViewStorage = {
    def resolve(clause: String, names: Seq[String]): Seq[String] = {
      val resolved = names.map { n =>
        columns.find(_.equalsIgnoreCase(n)).getOrElse(throw IvmErrors.invalidLayout(view, clause,
            s"'$n' is not a column of the view; its columns are ${columns.mkString(", ")}"))
      }
      resolved.diff(resolved.distinct).headOption.foreach { dup =>
        throw IvmErrors.invalidLayout(view, clause, s"'$dup' is named twice")
      }
      resolved
    }
    ViewStorage(resolve("PARTITIONED BY", storage.partitionedBy), resolve("CLUSTER BY", storage.clusteredBy))
  }

  /**
   * IVM_INVALID_LAYOUT unless every column the view is partitioned or clustered by, or declares
   * NOT NULL, is one its backing table keeps as a read gives it (not one a read computes, as
   * a global window's), and unless a view with NOT NULL keeps only the rows a read shows: Delta
   * checks NOT NULL on every row of the table, and a view's top rows, HAVING or windows keep
   * rows a read leaves out.
   */
  def requireStored(view: String, columns: Seq[ViewColumn], storage: ViewStorage,
      maintenance: ViewMaintenance): Unit = {
    val notNull = columns.filter(_.notNull).map(_.name)
    Seq("PARTITIONED BY" -> storage.partitionedBy, "CLUSTER BY" -> storage.clusteredBy, "NOT NULL" -> notNull)
      .foreach { case (clause, names) =>
        names.find(maintenance.storedColumn(_).isEmpty).foreach { n =>
          throw IvmErrors.invalidLayout(view, clause,
            s"the view computes '$n' when it is read (${maintenance.appliedAtRead.map(_._1).mkString(", ")}); " +
              "name a column it keeps")
        }
      }
    val unshown = (if (maintenance.top.isDefined) Seq("the rows below its top rows") else Nil) ++
      (if (maintenance.hasHaving) Seq("the groups its HAVING leaves out") else Nil) ++
      (if (maintenance.atRead.isDefined) Seq("the rows a read computes over") else Nil)
    if (notNull.nonEmpty && unshown.nonEmpty) {
      throw IvmErrors.invalidLayout(view, "NOT NULL",
        s"the view keeps ${unshown.mkString(" and ")}, where '${notNull.head}' may be NULL; " +
          s"filter the NULLs in the query (WHERE ${notNull.head} IS NOT NULL) and leave NOT NULL out")
    }
  }

  /**
   * The column list a rebuild of `meta` gives: the declared one, else (a view made before column
   * lists were kept) its names where they differ from the query's.
   */
  def declaredColumns(meta: ViewMetadata, plan: LogicalPlan): Seq[ViewColumn] =
    if (meta.declared.nonEmpty) meta.declared
    else if (meta.columns == plan.output.map(_.name)) Nil
    else meta.columns.map(ViewColumn(_))

  /**
   * True if CREATE OR REFRESH `stmt` declares the view `meta` as it is: the same query text, read
   * in the same database, the same column list, layout, comment, properties (Delta's as the
   * backing table has them), refresh policy, schedule and access pattern. Such a view is
   * refreshed; any other is replaced. The SQL settings a view captured are its own: a session
   * with other settings refreshes it under them, as REFRESH does.
   */
  def unchanged(spark: SparkSession, stmt: CreateMaterializedView, meta: ViewMetadata): Boolean = {
    val props = stmt.properties
    lazy val backingProps = DeltaTables.log(spark, meta.backing).update().metadata.configuration
    def user(p: Map[String, String]) = p.filter { case (k, _) =>
      !k.startsWith("ivm.") && !k.toLowerCase(Locale.ROOT).startsWith("delta.")
    }
    meta.helperOf.isEmpty &&
    meta.queryText == stmt.queryText &&
    meta.database.equalsIgnoreCase(spark.catalog.currentDatabase) &&
    meta.declared == stmt.columns &&
    meta.storage == storageOf(meta.viewName, stmt.storage, meta.columns) &&
    meta.comment == stmt.comment &&
    user(meta.userProperties) == user(props) &&
    props.filter(_._1.toLowerCase(Locale.ROOT).startsWith("delta.")).forall { case (k, v) =>
      backingProps.get(k).contains(v)
    } &&
    meta.epsilon == props.get(EpsilonState.Property).flatMap(EpsilonState.parse) &&
    meta.policy == ViewLifecycle.policyOf(spark, stmt) &&
    meta.schedule == stmt.schedule &&
    meta.accessBy == stmt.accessBy
  }

  /** The view `stmt` names as it is, if it is a materialized view spark-ivm can read. */
  def existing(spark: SparkSession, stmt: CreateMaterializedView): Option[ViewMetadata] =
    if (!ViewCatalog.isMaterializedView(spark, stmt.name)) None
    else
      try Some(ViewCatalog.lookup(spark, stmt.name))
      catch { case _: IvmException => None }
}
