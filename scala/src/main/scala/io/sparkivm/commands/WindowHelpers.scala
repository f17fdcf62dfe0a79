package io.sparkivm.commands

import java.util.Locale

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{UnresolvedRelation, UnresolvedSubqueryColumnAliases}
import org.apache.spark.sql.catalyst.expressions.{
  Expression, UnresolvedWindowExpression, WindowExpression, WindowSpecDefinition, WindowSpecReference
}
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
 * most); with a column list (`AS v(a, b)`), its helper's columns are those names. Where it reads
 * CTEs of the query's top-level WITH, its helper holds that clause up to the last one it reads;
 * where it reads a CTE of a nested WITH, it is not split. A CTE of the top-level WITH that the
 * window's SELECT reads so is split too: its helper holds the WITH clause up to it, and the
 * maintained query reads the helper in its body's place (every reference to it then reads the
 * helper). Windows in the query's top chain of projections and filters are not split: the view
 * computes those when it is read ([[io.sparkivm.planner.ComputedAtRead]]). Derived tables of the
 * same text share one helper (q44 ranks the same aggregate ascending and descending).
 */
object WindowHelpers {
  import HelperViews.{Helper, Split, span, substitute}

  /** A name, quoted or not. */
  private val Name = """(?:`(?:[^`]|``)+`|[\p{L}_][\p{L}\p{N}_]*)"""

  /** An alias after a derived table's closing parenthesis: ` v1`, ` AS v1`, `` AS `v 1` ``. */
  private val AliasAfter = raw"""(?is)\)\s*(?:AS\s+)?$Name\s*""".r

  /** The same with a column list: ` AS v1(a, b)`. */
  private val AliasWithColumnsAfter = raw"""(?is)\)\s*(?:AS\s+)?$Name\s*\([^()]*\)\s*""".r

  /** A CTE's definition up to its body's opening parenthesis: `s AS (`, `` `s 1`(a, b) AS ( ``. */
  private val CteHead = raw"""(?is)$Name\s*(?:\([^)]*\))?\s*AS\s*\(""".r

  /** The split of `queryText` for view `view`, or None where no window below its top reads a
   * derived table or CTE that a helper can hold. */
  def split(spark: SparkSession, view: TableIdentifier, queryText: String): Option[Split] = {
    val parsed = SessionInternals.parser(spark).parsePlan(queryText)
    val cteNames = parsed.collectWithSubqueries { case w: UnresolvedWith => w }
      .flatMap(_.cteRelations.map(_._1.toLowerCase(Locale.ROOT)))
    val ctes = cteNames.toSet
    // The top-level WITH's CTEs, unless a nested WITH reuses one of their names.
    val topCtes = parsed match {
      case w: UnresolvedWith if cteNames.size == ctes.size => w.cteRelations
      case _ => Nil
    }
    val top = topChain(parsed)
    // Named windows (`OVER w ... WINDOW w AS (ORDER BY x)`) are defined just above their SELECT.
    val named = parsed.collectWithSubqueries { case w: WithWindowDefinition => (w.child, w.windowDefinitions) }
    def definitions(p: Project) = named.find(_._1 eq p).map(_._2).getOrElse(Map.empty[String, WindowSpecDefinition])
    // Each part a helper holds: its name, the span its text is replaced at, and the helper's query.
    val parts = parsed.collectWithSubqueries {
      case p: Project if !top.exists(_ eq p) && p.projectList.exists(globalWindow(_, definitions(p))) => input(p.child)
    }.flatten.flatMap {
      case alias: SubqueryAlias =>
        val columns = alias.child.isInstanceOf[UnresolvedSubqueryColumnAliases]
        for {
          (start, stop) <- span(queryText, alias)
          // The derived table's closing parenthesis, before its column list if it has one.
          close = queryText.lastIndexOf(')', if (columns) queryText.lastIndexOf('(', stop) else stop)
          if queryText.charAt(start) == '(' && close > start &&
            (if (columns) AliasWithColumnsAfter else AliasAfter).pattern.matcher(queryText.substring(close, stop + 1))
              .matches()
          body = queryText.substring(start + 1, close).trim
          ctePrefix <- withClauseFor(queryText, topCtes, readNames(alias.child, ctes), body)
        } yield (alias.alias, (start + 1, close - 1),
          // Its columns as the list names them: the body's own names may be an expression's text
          // (`sum(qty)`), which a Delta table's column cannot be. The newline ends a line comment.
          ctePrefix + (if (columns)
                         s"SELECT * FROM (\n$body\n)${queryText.substring(close + 1, stop + 1).stripTrailing()}"
                       else body))
      case ref: UnresolvedRelation =>
        // The body's parser span covers only its last clause where it is not a UNION: it is the
        // text between the parentheses after AS.
        val at = topCtes.indexWhere(_._1.equalsIgnoreCase(ref.multipartIdentifier.head))
        for {
          (name, alias, _) <- topCtes.lift(at)
          prefix <- withClause(queryText, topCtes, at)
          whole <- span(queryText, alias)
          open <- CteHead.findPrefixMatchOf(queryText.substring(whole._1, whole._2 + 1)).map(whole._1 + _.end)
          if open <= whole._2
        } yield (name, (open, whole._2 - 1), s"${prefix}SELECT * FROM ${HelperViews.quote(name)}")
      case _ => None
    }.distinctBy(_._2).sortBy(_._2._1)
    // A part inside another one that is split goes with it.
    val outer = parts.filterNot { case (_, (s, e), _) =>
      parts.exists { case (_, (s2, e2), _) => s2 < s && e <= e2 }
    }
    if (outer.isEmpty) return None
    val suffix = HelperViews.suffix()
    val helpers = outer.distinctBy(_._3).map { case (name, _, query) =>
      query -> Helper(name, HelperViews.name(HelperViews.WindowPrefix, view, name, suffix), query)
    }
    val byQuery = helpers.toMap
    val replaced = outer.map { case (name, at, query) => (name, at, s"SELECT * FROM ${byQuery(query).name.quotedString}") }
    Some(Split(helpers.map(_._2), substitute(queryText, replaced, queryText.length)))
  }

  private def globalWindow(e: Expression, definitions: Map[String, WindowSpecDefinition]): Boolean = e.exists {
    case WindowExpression(_, spec: WindowSpecDefinition) => spec.partitionSpec.isEmpty
    case UnresolvedWindowExpression(_, WindowSpecReference(name)) =>
      definitions.get(name).exists(_.partitionSpec.isEmpty)
    case _ => false
  }

  /** The derived table or CTE (by name) a window's SELECT reads alone, under filters. */
  private def input(plan: LogicalPlan): Option[LogicalPlan] = plan match {
    case Filter(_, child) => input(child)
    case SubqueryAlias(_, r: UnresolvedRelation) => input(r)
    case r: UnresolvedRelation if r.multipartIdentifier.size == 1 => Some(r)
    case a: SubqueryAlias => Some(a)
    case _ => None
  }

  /** The nodes from the root down through what a view computes when it is read. */
  private def topChain(plan: LogicalPlan): List[LogicalPlan] = plan match {
    case _: Project | _: Filter | _: SubqueryAlias | _: Sort | _: GlobalLimit | _: LocalLimit | _: Offset |
        _: WithWindowDefinition | _: UnresolvedWith => plan :: topChain(plan.children.head)
    case _ => Nil
  }

  /** The CTE names among `names` that `plan` reads. */
  private def readNames(plan: LogicalPlan, names: Set[String]): Set[String] = plan.collectWithSubqueries {
    case u: UnresolvedRelation
        if u.multipartIdentifier.size == 1 && names.contains(u.multipartIdentifier.head.toLowerCase(Locale.ROOT)) =>
      u.multipartIdentifier.head.toLowerCase(Locale.ROOT)
  }.toSet

  /**
   * The WITH clause a derived table's helper needs before its `body`: none if it reads no CTE;
   * the top-level WITH's CTEs up to the last one it reads (a CTE reads only those before it) if
   * they are all it reads; None (no helper) if it reads another CTE, or its body has a WITH of
   * its own.
   */
  private def withClauseFor(text: String, topCtes: Seq[(String, SubqueryAlias, Any)],
      read: Set[String], body: String): Option[String] =
    if (read.isEmpty) Some("")
    else {
      val last = topCtes.lastIndexWhere(c => read.contains(c._1.toLowerCase(Locale.ROOT)))
      val covered = topCtes.take(last + 1).map(_._1.toLowerCase(Locale.ROOT)).toSet
      if (!read.subsetOf(covered) || body.toUpperCase(Locale.ROOT).startsWith("WITH")) None
      else withClause(text, topCtes, last)
    }

  /** `WITH` and the top-level CTEs' text up to the one at `upTo` (ending in its `)`), then a newline. */
  private def withClause(text: String, topCtes: Seq[(String, SubqueryAlias, Any)], upTo: Int): Option[String] =
    for {
      first <- topCtes.headOption.flatMap(c => span(text, c._2))
      end <- topCtes.lift(upTo).flatMap(c => span(text, c._2)).map(_._2)
      if text.charAt(end) == ')'
    } yield s"WITH ${text.substring(first._1, end + 1)}\n"
}
