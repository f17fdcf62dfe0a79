package io.sparkivm.planner

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.expressions.{Alias, Ascending, Attribute, Expression, NullsFirst, RowOrdering}
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
 * @param order    per sort key: the view column's position, ascending, nulls first
 * @param limit    LIMIT, if any
 * @param offset   OFFSET (0 if none)
 * @param tieBreak how many of the last keys of `order` are the view's, added to break ties
 */
case class TopRows(order: Seq[(Int, Boolean, Boolean)], limit: Option[Int], offset: Int, tieBreak: Int = 0) {

  /** LIMIT + OFFSET: how many rows a read reaches down to. */
  def reach: Option[Int] = limit.map(_ + offset)

  /**
   * True if the backing table marks its first rows for the read ([[ViewMaintenance.markedTop]]):
   * a LIMIT of at most [[TopRows.MaxMarked]] rows with OFFSET (a larger one keeps only unmarked
   * rows, read whole).
   */
  def marks: Boolean = reach.exists(n => n > 0 && n <= TopRows.MaxMarked)

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
      s"${quote(columns(i))} ${if (asc) "ASC" else "DESC"} NULLS ${if (nullsFirst) "FIRST" else "LAST"}"
    }
    s" ORDER BY ${sorted.mkString(", ")}" + limit.map(k => s" LIMIT $k").getOrElse("") +
      (if (offset > 0) s" OFFSET $offset" else "")
  }
}

object TopRows {

  /** The largest LIMIT + OFFSET whose rows the backing table marks (they are held on the driver). */
  val MaxMarked = 100000

  /**
   * The query under its top-level ORDER BY with LIMIT or OFFSET, and those; the query itself
   * and None where it has neither. Refuses a LIMIT without ORDER BY (any k rows would do, so a
   * refresh could not say which to keep) and an ORDER BY of a value the view does not select.
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
    val (project, sort) = underOffset match {
      case p @ Project(_, s: Sort) if s.global => (Some(p), s)
      case s: Sort if s.global => (None, s)
      case _ =>
        throw IvmErrors.unsupported("LIMIT / OFFSET",
          "Without ORDER BY any rows of the query would do, so a refresh could not say which to keep: " +
            "add an ORDER BY whose columns order the rows completely, or apply LIMIT when reading the view.")
    }
    val output = project.getOrElse(sort).output
    val order = sort.order.map { o =>
      val at = o.child match {
        case a: Attribute => output.indexWhere(_.exprId == a.exprId)
        case _ => -1
      }
      if (at < 0) {
        throw IvmErrors.unsupported(s"ORDER BY ${o.child.sql} under LIMIT, a value the view does not select",
          "Select it as a column of the view: the view then keeps the query's rows and applies ORDER BY " +
            "... LIMIT when it is read.")
      }
      (at, o.direction == Ascending, o.nullOrdering == NullsFirst)
    }
    val inner = project.map(_.copy(child = sort.child)).getOrElse(sort.child)
    val tieBreak = if (ordersCompletely(inner, output, order.map(_._1).toSet)) Nil
    else
      output.indices.filter(i => !order.exists(_._1 == i) && RowOrdering.isOrderable(output(i).dataType))
        .map(i => (i, true, true))
    (inner, Some(TopRows(order ++ tieBreak, limit, offset, tieBreak.size)))
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
