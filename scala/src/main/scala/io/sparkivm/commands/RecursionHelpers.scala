package io.sparkivm.commands

import java.util.{Locale, UUID}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{UnresolvedRelation, UnresolvedSubqueryColumnAliases}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnionLoop, UnresolvedWith}
import org.apache.spark.sql.ivm.SessionInternals

/**
 * A view that joins a recursive CTE with other tables, or computes over it anything the view
 * cannot keep r's rows for, is maintained through a helper view per recursive CTE: a
 * materialized view of the CTE's rows alone (`WITH RECURSIVE r AS (...) SELECT * FROM r`),
 * which counting maintains ([[io.sparkivm.planner.RecursiveRows]]), and the user's query with
 * r's definition replaced by a read of that view, which the rest of the engine maintains as a
 * view over a view (through the helper's change feed). Splitting a view over several stages of
 * state is how incremental engines maintain such plans (Materialize and DBSP keep an arrangement
 * per operator); here each stage is a Delta table with its own exactly-once commits.
 *
 * The split is textual, on the spans Spark's parser records for each CTE (so comments and
 * strings in the query are kept as written): the helpers take the WITH clause up to their CTE,
 * and the maintained query is the user's with each recursive CTE's body replaced. Only a
 * top-level `WITH RECURSIVE` is split; a recursive CTE in a subquery stays recomputed.
 */
object RecursionHelpers {

  /** The name prefix of helper views (SHOW MATERIALIZED VIEWS leaves them out). */
  val Prefix = "__ivm_rec_"

  /** One helper: the CTE it holds, its name, and its query. */
  case class Helper(cte: String, name: TableIdentifier, query: String)

  /** The helpers of a view, and the query that reads them in place of the recursive CTEs. */
  case class Split(helpers: Seq[Helper], maintainedQuery: String)

  /** True if the analyzed plan runs a recursion (so a split may make it incremental). */
  def recurses(plan: LogicalPlan): Boolean = plan.exists(_.isInstanceOf[UnionLoop])

  /** The split of `queryText` for view `view`, or None where its recursive CTEs are not those of
   * a top-level WITH RECURSIVE (or the parser recorded no span for one). */
  def split(spark: SparkSession, view: TableIdentifier, queryText: String): Option[Split] =
    SessionInternals.parser(spark).parsePlan(queryText) match {
      case w: UnresolvedWith if w.allowRecursion =>
        val defs = w.cteRelations.map { case (name, alias, _) =>
          val body = alias.child match {
            case c: UnresolvedSubqueryColumnAliases => c.child
            case other => other
          }
          (name, span(queryText, alias), span(queryText, body), readsItself(body, name))
        }
        if (!defs.exists(_._4) || defs.exists(d => d._2.isEmpty || d._3.isEmpty)) None
        else {
          val suffix = UUID.randomUUID().toString.take(8)
          // Each recursive body, replaced by a read of its helper (later helpers read earlier ones).
          val replaced = defs.filter(_._4).map { case (name, _, body, _) =>
            (name, body.get, s"SELECT * FROM ${helperName(view, name, suffix).quotedString}")
          }
          val helpers = defs.zipWithIndex.filter(_._1._4).map { case ((name, whole, _, _), i) =>
            val before = replaced.filter(r => defs.indexWhere(_._1 == r._1) < i)
            val clause = substitute(queryText, before, whole.get._2 + 1).substring(defs.head._2.get._1)
            Helper(name, helperName(view, name, suffix),
              s"WITH RECURSIVE $clause\nSELECT * FROM ${quote(name)}")
          }
          Some(Split(helpers, substitute(queryText, replaced, queryText.length)))
        }
      case _ => None
    }

  /** `text` up to `end`, with each span (start, stop inclusive) replaced by its text. */
  private def substitute(text: String, replaced: Seq[(String, (Int, Int), String)], end: Int): String = {
    val out = new StringBuilder
    var at = 0
    replaced.sortBy(_._2._1).filter(_._2._2 < end).foreach { case (_, (start, stop), by) =>
      out ++= text.substring(at, start) ++= by
      at = stop + 1
    }
    out ++= text.substring(at, end)
    out.toString
  }

  /** The plan's span in `text`, in chars: the parser counts code points (a character outside the
   * Basic Multilingual Plane, an emoji in a literal, is two chars). */
  private def span(text: String, plan: LogicalPlan): Option[(Int, Int)] =
    for (start <- plan.origin.startIndex; stop <- plan.origin.stopIndex)
      yield (text.offsetByCodePoints(0, start), text.offsetByCodePoints(0, stop + 1) - 1)

  private def readsItself(plan: LogicalPlan, name: String): Boolean = plan.exists {
    case u: UnresolvedRelation => u.multipartIdentifier.size == 1 && u.multipartIdentifier.head.equalsIgnoreCase(name)
    case _ => false
  }

  private def quote(name: String): String = "`" + name.replace("`", "``") + "`"

  /** `__ivm_rec_<view>_<cte>_<suffix>`, in the view's database ([a-z0-9_] only, as metastores ask). */
  private def helperName(view: TableIdentifier, cte: String, suffix: String): TableIdentifier =
    view.copy(table = s"${prefixOf(view)}${safe(cte)}_$suffix")

  /** How the names of a view's helpers begin (helpers of other views may begin so too). */
  def prefixOf(view: TableIdentifier): String = s"$Prefix${safe(view.table)}_"

  private def safe(s: String) =
    s.toLowerCase(Locale.ROOT).map(c => if (c.isLetterOrDigit && c < 128) c else '_').take(40)

  /** True if a name is a helper's (by its prefix; [[io.sparkivm.catalog.ViewMetadata.helperOf]] says whose). */
  def isHelperName(table: String): Boolean = table.toLowerCase(Locale.ROOT).startsWith(Prefix)
}
