package io.sparkivm.commands

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{UnresolvedRelation, UnresolvedSubqueryColumnAliases}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnionLoop, UnresolvedWith}
import org.apache.spark.sql.ivm.SessionInternals

/**
 * Helper views of recursive CTEs ([[HelperViews]]): a view that joins a recursive CTE with other
 * tables, or computes over it anything the view cannot keep r's rows for, is maintained through
 * a helper view per recursive CTE, a materialized view of the CTE's rows alone (`WITH RECURSIVE
 * r AS (...) SELECT * FROM r`), which counting maintains ([[io.sparkivm.planner.RecursiveRows]]),
 * and the user's query with r's definition replaced by a read of that view.
 *
 * The helpers take the WITH clause up to their CTE, and the maintained query is the user's with
 * each recursive CTE's body replaced. Only a top-level `WITH RECURSIVE` is split; a recursive
 * CTE in a subquery stays recomputed.
 */
object RecursionHelpers {
  import HelperViews.{Helper, Split, quote, span, substitute}

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
          val suffix = HelperViews.suffix()
          def helperName(cte: String) = HelperViews.name(HelperViews.RecursionPrefix, view, cte, suffix)
          // Each recursive body, replaced by a read of its helper (later helpers read earlier ones).
          val replaced = defs.filter(_._4).map { case (name, _, body, _) =>
            (name, body.get, s"SELECT * FROM ${helperName(name).quotedString}")
          }
          val helpers = defs.zipWithIndex.filter(_._1._4).map { case ((name, whole, _, _), i) =>
            val before = replaced.filter(r => defs.indexWhere(_._1 == r._1) < i)
            val clause = substitute(queryText, before, whole.get._2 + 1).substring(defs.head._2.get._1)
            Helper(name, helperName(name), s"WITH RECURSIVE $clause\nSELECT * FROM ${quote(name)}")
          }
          Some(Split(helpers, substitute(queryText, replaced, queryText.length)))
        }
      case _ => None
    }

  private def readsItself(plan: LogicalPlan, name: String): Boolean = plan.exists {
    case u: UnresolvedRelation => u.multipartIdentifier.size == 1 && u.multipartIdentifier.head.equalsIgnoreCase(name)
    case _ => false
  }
}
