package io.sparkivm.planner

import scala.collection.mutable.ArrayBuffer

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Ascending, Attribute, BindReferences, BoundReference, ExprId, Expression, NullsFirst, RowOrdering,
  WindowExpression
}
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * ORDER BY ... LIMIT / OFFSET at the top of a view's query: a top-k view. Its backing table
 * keeps every row of the query under them (one per group for a top-k of an aggregate),
 * maintained like any view's, and its catalog view applies them when it is read. So a refresh
 * costs what changed, whether or not the change reaches the top k (no deleted row can leave the
 * view short of candidates), and a read sorts the kept rows instead of the base tables.
 *
 * Where the query's ORDER BY lets distinct rows tie, the rows tied at the LIMIT are any of them,
 * in Spark's answer as in the view's; the view's read breaks the ties by its other columns, so
 * that every read gives the same rows.
 *
 * An ORDER BY of a value the view does not select is kept where that value is computed from the
 * view's columns (`ORDER BY c_customer_id` of a view selecting it `AS customer_id`, or
 * `ORDER BY sum_sales - avg_sales`): the read orders by the expression over its columns.
 *
 * @param order    per sort key: the view column's position, ascending, nulls first; a position
 *                 past the view's columns names the expression of `computed` at that index less
 *                 the number of columns
 * @param limit    LIMIT, if any
 * @param offset   OFFSET (0 if none)
 * @param tieBreak how many of the last keys of `order` are the view's, added to break ties
 * @param computed sort keys computed from the view's columns, each column bound to its position
 */
case class TopRows(order: Seq[(Int, Boolean, Boolean)], limit: Option[Int], offset: Int, tieBreak: Int = 0,
    computed: Seq[Expression] = Nil) {

  /** LIMIT + OFFSET: how many rows a read reaches down to. */
  def reach: Option[Int] = limit.map(_ + offset)

  /**
   * True if the backing table marks its first rows for the read ([[ViewMaintenance.markedTop]]):
   * a LIMIT of at most [[TopRows.MaxMarked]] rows with OFFSET (a larger one keeps only unmarked
   * rows, read whole), ordered by columns alone (marks compare stored values).
   */
  def marks: Boolean = computed.isEmpty && reach.exists(n => n > 0 && n <= TopRows.MaxMarked)

  /** The clause the catalog view ends with, over the view's column names. */
  def sql(columns: Seq[String], quote: String => String): String = clause(order, columns, quote)

  def describe(columns: Seq[String], marked: Boolean): String = {
    val ties = order.takeRight(tieBreak).map(o => columns(o._1))
    clause(order.dropRight(tieBreak), columns, identity).trim + ", applied when the view is read (the " +
      "backing table keeps every row of the query under it" +
      (if (marked) s" and marks the first ${reach.get} and a buffer of the next (spark.ivm.topRows.buffer), " +
         "the rows a read reads"
       else "") + ")" +
      (if (ties.isEmpty) "" else s"; rows tied at the limit are taken in the order of ${ties.mkString(", ")}")
  }

  private def clause(keys: Seq[(Int, Boolean, Boolean)], columns: Seq[String], quote: String => String) = {
    val sorted = keys.map { case (i, asc, nullsFirst) =>
      val key = if (i < columns.size) quote(columns(i)) else computedSql(computed(i - columns.size), columns)
      s"$key ${if (asc) "ASC" else "DESC"} NULLS ${if (nullsFirst) "FIRST" else "LAST"}"
    }
    s" ORDER BY ${sorted.mkString(", ")}" + limit.map(k => s" LIMIT $k").getOrElse("") +
      (if (offset > 0) s" OFFSET $offset" else "")
  }

  /** A computed sort key as SQL over the view's column names (a read resolves them by name). */
  private def computedSql(key: Expression, columns: Seq[String]): String =
    key.transform { case b: BoundReference => UnresolvedAttribute(Seq(columns(b.ordinal))) }.sql
}

object TopRows {

  /** The largest LIMIT + OFFSET whose rows the backing table marks (they are held on the driver). */
  val MaxMarked = 100000

  /**
   * The query under its top-level ORDER BY with LIMIT or OFFSET, and those; the query itself
   * and None where it has neither (or a LIMIT no row can reach). Refuses a LIMIT without ORDER BY
   * (any k rows would do, so a refresh could not say which to keep) and an ORDER BY of a value
   * the view's columns do not give.
   */
  def split(plan: LogicalPlan): (LogicalPlan, Option[TopRows]) = {
    val top = unwrap(plan)
    val (limit, underLimit) = top match {
      case GlobalLimit(k, LocalLimit(_, c)) => (Some(int(k)), c)
      case GlobalLimit(k, c) => (Some(int(k)), c)
      case LocalLimit(k, c) => (Some(int(k)), c)
      case other => (None, other)
    }
    val (offset, underOffset) = underLimit match {
      case Offset(o, c) => (int(o), c)
      case other => (0, other)
    }
    if (limit.isEmpty && offset == 0) return (plan, None)
    // A LIMIT no smaller than the most rows its input can have (a global aggregate's one row,
    // TPC-DS's `SELECT sum(...) ... LIMIT 100`) changes nothing: Spark's EliminateLimits.
    if (offset == 0 && underOffset.maxRows.exists(m => limit.exists(_ >= m))) return (underOffset, None)
    val (project, sort) = underOffset match {
      case p @ Project(_, s: Sort) if s.global => (Some(p), s)
      case s: Sort if s.global => (None, s)
      case _ =>
        throw IvmErrors.unsupported("LIMIT / OFFSET",
          "Without ORDER BY any rows of the query would do, so a refresh could not say which to keep: " +
            "add an ORDER BY whose columns order the rows completely, or apply LIMIT when reading the view.")
    }
    val output = project.getOrElse(sort).output
    val computed = ArrayBuffer.empty[Expression]
    val order = sort.order.map { o =>
      val key = overOutput(o.child, project, sort.child, output)
      val at = key match {
        case Some(a: Attribute) => output.indexWhere(_.exprId == a.exprId)
        case Some(e) =>
          computed += BindReferences.bindReference(e, output)
          output.size + computed.size - 1
        case None =>
          throw IvmErrors.unsupported(s"ORDER BY ${o.child.sql} under LIMIT, a value the view does not select",
            "Select it as a column of the view, or order by an expression of the view's columns: the view " +
              "then keeps the query's rows and applies ORDER BY ... LIMIT when it is read.")
      }
      (at, o.direction == Ascending, o.nullOrdering == NullsFirst)
    }
    val inner = project.map(_.copy(child = sort.child)).getOrElse(sort.child)
    val tieBreak = if (ordersCompletely(inner, output, order.map(_._1).toSet)) Nil
    else
      output.indices.filter(i => !order.exists(_._1 == i) && RowOrdering.isOrderable(output(i).dataType))
        .map(i => (i, true, true))
    (inner, Some(TopRows(order ++ tieBreak, limit, offset, tieBreak.size, computed.toSeq)))
  }

  /**
   * A sort key over the view's output attributes: the key itself where it is one, else the key
   * with each part the view's SELECT computes replaced by that column. A key of columns the
   * SELECT does not keep (Spark adds them below the sort, `ORDER BY a` of `SELECT a AS id`) is
   * first expanded to what they are. None where a part is neither (a column the view does not
   * select) or the key is not deterministic.
   */
  private def overOutput(key: Expression, project: Option[Project], sortChild: LogicalPlan,
      output: Seq[Attribute]): Option[Expression] = {
    val outputIds = output.map(_.exprId).toSet
    val below = sortChild match {
      case p: Project if project.isDefined => p.projectList.collect { case a: Alias => a }
      case _ => Nil
    }
    val selected = project.toSeq.flatMap(_.projectList).collect { case a: Alias => a } ++
      below.filter(a => outputIds.contains(a.exprId)) ++ computedBelow(sortChild, outputIds)
    val expanded = key.transform {
      case a: Attribute if !outputIds.contains(a.exprId) => below.find(_.exprId == a.exprId).map(_.child).getOrElse(a)
    }
    val rewritten = expanded.transformDown {
      case a: Attribute if outputIds.contains(a.exprId) => a
      case e if !e.foldable => selected.find(_.child.semanticEquals(e)).map(_.toAttribute).getOrElse(e)
    }
    Some(rewritten).filter(r => r.deterministic && r.references.forall(a => outputIds.contains(a.exprId)))
  }

  /**
   * The view's columns that nodes further below the sort compute, down to the aggregate. An
   * ORDER BY that repeats a selected expression instead of naming its alias (TPC-DS q70's
   * `CASE WHEN grouping(s_state) + grouping(s_county) = 0 ...` beside `... AS lochierarchy`)
   * reaches the sort as that expression over columns Spark passes up for it (the grouping id).
   * Attributes are unique in a plan, so an expression over them is the same value at the sort
   * as where the alias computes it: neither can hold an aggregate or a window function.
   */
  private def computedBelow(plan: LogicalPlan, outputIds: Set[ExprId]): Seq[Alias] = {
    def named(p: LogicalPlan): Seq[Alias] =
      p.expressions.collect { case a: Alias if outputIds.contains(a.exprId) => a }
        .filterNot(a =>
          a.child.exists(_.isInstanceOf[AggregateExpression]) ||
            a.child.exists(_.isInstanceOf[WindowExpression]))
    plan match {
      case p @ (_: Project | _: Window | _: Filter) => named(p) ++ computedBelow(p.children.head, outputIds)
      case a: Aggregate => named(a)
      case _ => Nil
    }
  }

  /**
   * True if no two distinct rows of `inner` tie on the ordered columns, so the rows a LIMIT
   * keeps are the same whichever order the rows are read in (the view reads its backing table,
   * the query its base tables): the ordered columns hold every GROUP BY key of a grouped
   * query, or every column of any other (identical rows are interchangeable).
   */
  private def ordersCompletely(inner: LogicalPlan, output: Seq[Attribute], ordered: Set[Int]): Boolean =
    ViewShape.of(inner) match {
      case a: AggregateShape if a.global => true
      case a: AggregateShape =>
        val agg = a.aggregate
        agg.groupingExpressions.forall { g =>
          agg.aggregateExpressions.zip(agg.output).exists { case (e, out) =>
            val computesKey = e match {
              case Alias(child, _) => child.semanticEquals(g)
              case other => other.semanticEquals(g)
            }
            computesKey && ordered.contains(output.indexWhere(_.exprId == out.exprId))
          }
        }
      case _ => output.indices.forall(ordered.contains)
    }

  private def unwrap(p: LogicalPlan): LogicalPlan = p match {
    case SubqueryAlias(_, c) => unwrap(c)
    case v: View => unwrap(v.child)
    case other => other
  }

  private def int(e: Expression): Int = e.eval() match {
    case i: Int => i
    case other => throw IvmErrors.unsupported(s"LIMIT / OFFSET of $other", "Use an integer literal.")
  }
}
