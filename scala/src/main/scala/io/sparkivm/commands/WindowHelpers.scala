package io.sparkivm.commands

import java.util.Locale

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{UnresolvedRelation, UnresolvedSubqueryColumnAliases}
import org.apache.spark.sql.catalyst.expressions.{Expression, WindowExpression, WindowSpecDefinition}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.ivm.SessionInternals

/**
 * Helper views of the rows under a window function without PARTITION BY below the top of a
 * query ([[HelperViews]]): TPC-DS q44's `rank() OVER (ORDER BY rank_col)` over a per-item
 * aggregate, kept to its top ten and joined with `item`. Every row of such a window depends on
 * every row under it, so no rule derives its change from its input's change alone; but it can be
 * computed again before and after a refresh over its input's rows, and that costs what the
 * input's rows are, not what its tables are, once those rows are a materialized view's. So the
 * derived table the window reads (`FROM (SELECT ... GROUP BY ss_item_sk) V1`) becomes a helper
 * view, maintained by its changes, and the view's query reads it in the subquery's place; the
 * planner then recomputes the window over the helper's rows at Pre and at Post
 * ([[io.sparkivm.planner.PlanValidator]]), and everything above it is maintained as usual.
 *
 * A derived table is split where the window's SELECT reads it alone (under WHERE filters at
 * most), it has no column list (`AS v(a, b)`), and it reads no CTE of the query (its helper
 * could not). Windows in the query's top chain of projections and filters are not split: the
 * view computes those when it is read ([[io.sparkivm.planner.ComputedAtRead]]). Derived tables of
 * the same text share one helper (q44 ranks the same aggregate ascending and descending).
 */
object WindowHelpers {
  import HelperViews.{Helper, Split, span, substitute}

  /** An alias after a derived table's closing parenthesis: ` v1`, ` AS v1`, `` AS `v 1` ``. */
  private val AliasAfter = """(?is)\)\s*(?:AS\s+)?(?:`(?:[^`]|``)+`|[\p{L}_][\p{L}\p{N}_]*)\s*""".r

  /** The split of `queryText` for view `view`, or None where no window below its top reads a
   * derived table that a helper can hold. */
  def split(spark: SparkSession, view: TableIdentifier, queryText: String): Option[Split] = {
    val parsed = SessionInternals.parser(spark).parsePlan(queryText)
    val ctes = parsed.collectWithSubqueries { case w: UnresolvedWith =>
      w.cteRelations.map(_._1.toLowerCase(Locale.ROOT))
    }.flatten.toSet
    val top = topChain(parsed)
    val derived = parsed.collectWithSubqueries {
      case p: Project if !top.exists(_ eq p) && p.projectList.exists(globalWindow) => input(p.child)
    }.flatten.flatMap { alias =>
      for {
        (start, stop) <- span(queryText, alias)
        close = queryText.lastIndexOf(')', stop)
        if queryText.charAt(start) == '(' && close > start &&
          AliasAfter.pattern.matcher(queryText.substring(close, stop + 1)).matches() &&
          !readsAny(alias.child, ctes)
      } yield (alias.alias, (start + 1, close - 1))
    }.sortBy(_._2._1)
    // A derived table inside another one that is split goes with it.
    val outer = derived.filterNot { case (_, (s, e)) =>
      derived.exists { case (_, (s2, e2)) => s2 < s && e <= e2 }
    }
    if (outer.isEmpty) return None
    val suffix = HelperViews.suffix()
    def text(at: (Int, Int)) = queryText.substring(at._1, at._2 + 1).trim
    val helpers = outer.distinctBy(d => text(d._2)).map { case (alias, at) =>
      text(at) -> Helper(alias, HelperViews.name(HelperViews.WindowPrefix, view, alias, suffix), text(at))
    }.toMap
    val replaced = outer.map { case (alias, at) =>
      (alias, at, s"SELECT * FROM ${helpers(text(at)).name.quotedString}")
    }
    Some(Split(outer.map(d => text(d._2)).distinct.map(helpers), substitute(queryText, replaced, queryText.length)))
  }

  private def globalWindow(e: Expression): Boolean = e.exists {
    case WindowExpression(_, spec: WindowSpecDefinition) => spec.partitionSpec.isEmpty
    case _ => false
  }

  /** The derived table a window's SELECT reads alone, under filters. */
  private def input(plan: LogicalPlan): Option[SubqueryAlias] = plan match {
    case Filter(_, child) => input(child)
    case a @ SubqueryAlias(_, child)
        if !child.isInstanceOf[UnresolvedRelation] &&
          !child.isInstanceOf[UnresolvedSubqueryColumnAliases] => Some(a)
    case _ => None
  }

  /** The nodes from the root down through what a view computes when it is read. */
  private def topChain(plan: LogicalPlan): List[LogicalPlan] = plan match {
    case _: Project | _: Filter | _: SubqueryAlias | _: Sort | _: GlobalLimit | _: LocalLimit | _: Offset |
        _: WithWindowDefinition | _: UnresolvedWith => plan :: topChain(plan.children.head)
    case _ => Nil
  }

  private def readsAny(plan: LogicalPlan, names: Set[String]): Boolean = plan.collectWithSubqueries {
    case u: UnresolvedRelation
        if u.multipartIdentifier.size == 1 && names.contains(u.multipartIdentifier.head.toLowerCase(Locale.ROOT)) =>
  }.nonEmpty
}
