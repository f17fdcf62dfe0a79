package io.sparkivm.catalog

import scala.util.control.NonFatal

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{
  UnresolvedIdentifier, UnresolvedRelation, UnresolvedTable, UnresolvedTableOrView, UnresolvedView
}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.ivm.SessionInternals

/**
 * Spark's own DDL and DML on the two catalog objects of a materialized view ([[ViewCatalog]]):
 * DROP VIEW, ALTER VIEW ... AS, CREATE OR REPLACE VIEW and RENAME of the catalog view, and DROP,
 * RENAME and writes (INSERT, UPDATE, DELETE, MERGE, TRUNCATE) of the backing table would each
 * leave a view that is missing, hijacked or different from its query while it still looks
 * maintained. They are refused as they are parsed, naming the materialized-view statement to
 * use. spark-ivm's own statements on these objects run [[internal]]ly.
 */
object CatalogGuard {
  private val inside = new ThreadLocal[Int] { override def initialValue(): Int = 0 }

  /** Runs `body` (spark-ivm's own statements on a view's objects) without the guard. */
  def internal[T](body: => T): T = {
    inside.set(inside.get + 1)
    try body
    finally inside.set(inside.get - 1)
  }

  /** What a statement would do to an object it names: (statement, name parts, what it would do). */
  private case class Target(statement: String, parts: Seq[String], ofView: String, ofBacking: String)

  private val Unreadable = "leave the materialized view without its rows"
  private val Differ = "make the materialized view differ from its query"

  private def targetOf(plan: LogicalPlan): Option[Target] = {
    def parts(p: LogicalPlan): Option[Seq[String]] = p match {
      case u: UnresolvedIdentifier => Some(u.nameParts)
      case u: UnresolvedView => Some(u.multipartIdentifier)
      case u: UnresolvedTableOrView => Some(u.multipartIdentifier)
      case u: UnresolvedTable => Some(u.multipartIdentifier)
      case u: UnresolvedRelation => Some(u.multipartIdentifier)
      case SubqueryAlias(_, child) => parts(child)
      case _ => None
    }
    def target(statement: String, p: LogicalPlan, ofView: String, ofBacking: String) =
      parts(p).map(Target(statement, _, ofView, ofBacking))
    val hijack = "turn it into a plain view that no refresh maintains"
    plan match {
      case d: DropView => target("DROP VIEW", d.child, "leave its stored rows behind", Unreadable)
      case d: DropTable => target("DROP TABLE", d.child, "leave its stored rows behind", Unreadable)
      case a: AlterViewAs => target("ALTER VIEW ... AS", a.child, hijack, hijack)
      case c: CreateView if c.replace => target("CREATE OR REPLACE VIEW", c.child, hijack, hijack)
      case r: RenameTable => target(if (r.isView) "ALTER VIEW ... RENAME" else "ALTER TABLE ... RENAME", r.child,
          "separate it from its stored rows and refresh records", Unreadable)
      case i: InsertIntoStatement => target("INSERT", i.table, "", Differ)
      case u: UpdateTable => target("UPDATE", u.table, "", Differ)
      case d: DeleteFromTable => target("DELETE", d.table, "", Differ)
      case m: MergeIntoTable => target("MERGE", m.targetTable, "", Differ)
      case t: TruncateTable => target("TRUNCATE TABLE", t.child, "", Differ)
      case _ => None
    }
  }

  /** IVM_MATERIALIZED_VIEW_OBJECT if `plan` (as parsed) would change a materialized view's objects. */
  def check(spark: SparkSession, plan: LogicalPlan): Unit = if (inside.get == 0) {
    // Writes matter only to backing tables (Spark refuses writes to any view itself): other
    // INSERTs and DML cost no catalog lookup.
    targetOf(plan).filter(t =>
      t.ofView.nonEmpty ||
        t.parts.lastOption.exists(_.toLowerCase(java.util.Locale.ROOT).startsWith(ViewCatalog.BackingPrefix))).foreach {
      t =>
        val catalog = SessionInternals.catalog(spark)
        val id =
          try Some(ViewCatalog.qualify(spark, t.parts))
          catch { case NonFatal(_) => None }
        // A temporary view of the name is what the statement acts on.
        if (t.parts.size == 1 && catalog.getTempView(t.parts.head).isDefined) return
        id.flatMap(i =>
          try Option(catalog.getTableMetadata(i))
          catch { case NonFatal(_) => None }).foreach { table =>
          val name = table.identifier.copy(catalog = Some("spark_catalog")).quotedString
          if (ViewCatalog.isMaterializedView(table)) {
            if (t.ofView.nonEmpty) throw IvmErrors.materializedViewObject(name, "is a materialized view", t.statement,
              t.ofView, insteadForView(t.statement, name))
          } else if (table.identifier.table.startsWith(ViewCatalog.BackingPrefix)) {
            // A backing table that no materialized view keeps (its view dropped by a session
            // without spark-ivm, or replaced by a DataFrame write) is the user's to drop.
            viewOfBacking(spark, table.identifier).filter(keeps(spark, _, table.identifier)).foreach { view =>
              throw IvmErrors.materializedViewObject(name, s"stores the rows of materialized view $view",
                t.statement, t.ofBacking, insteadForBacking(t.statement, view))
            }
          }
        }
    }
  }

  private def insteadForView(statement: String, name: String): String = statement match {
    case "DROP VIEW" | "DROP TABLE" => s"DROP MATERIALIZED VIEW $name"
    case s if s.contains("RENAME") =>
      s"CREATE MATERIALIZED VIEW under the new name and DROP MATERIALIZED VIEW $name"
    case _ => s"CREATE OR REPLACE MATERIALIZED VIEW $name AS ... to change its query, or " +
        s"DROP MATERIALIZED VIEW $name first to make a plain view of the name"
  }

  private def insteadForBacking(statement: String, view: String): String = statement match {
    case "DROP TABLE" => s"DROP MATERIALIZED VIEW $view"
    case s if s.contains("RENAME") => s"DROP MATERIALIZED VIEW $view and CREATE it again under another name"
    case _ => s"REFRESH MATERIALIZED VIEW $view: change its base tables and refresh it"
  }

  /** True if the materialized view named `view` (quoted, qualified) keeps its rows in `backing`. */
  private def keeps(spark: SparkSession, view: String, backing: TableIdentifier): Boolean =
    try {
      val id = ViewCatalog.qualify(spark, SessionInternals.parser(spark).parseMultipartIdentifier(view))
      ViewCatalog.backingOf(spark, id).exists(b =>
        b.table.equalsIgnoreCase(backing.table) && b.database.forall(d => backing.database.forall(_.equalsIgnoreCase(d))))
    } catch { case NonFatal(_) => true }

  /** The materialized view a backing table stores, from its Delta metadata (`ivm.view`). */
  private def viewOfBacking(spark: SparkSession, table: TableIdentifier): Option[String] =
    try {
      DeltaTables.log(spark, table).update().metadata.configuration.get(ViewCatalog.ViewProperty)
        .map(v => ViewCatalog.qualify(spark, v.split('.').toSeq.takeRight(2)).quotedString)
    } catch { case NonFatal(_) => None }
}
