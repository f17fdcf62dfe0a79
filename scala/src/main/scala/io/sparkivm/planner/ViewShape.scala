package io.sparkivm.planner

import org.apache.spark.sql.catalyst.plans.logical._

/**
 * The top of a view's plan, which decides what a row of the backing table is:
 *  - [[AggregateShape]]: GROUP BY (or a global aggregate), possibly under HAVING, projections
 *    and outer filters: one row per group with the state of its aggregates;
 *  - [[RowsShape]]: anything else (joins, DISTINCT, UNION ALL, nested aggregates): one row per
 *    distinct output row, with its multiplicity in `__ivm_count`.
 */
sealed trait ViewShape {

  /** The plan whose rows the view shows (top-level ORDER BY removed: a table has no order). */
  def top: LogicalPlan
  def kind: String
}

case class AggregateShape(top: LogicalPlan, aggregate: Aggregate) extends ViewShape {
  def global: Boolean = aggregate.groupingExpressions.isEmpty
  def kind: String = if (global) "global aggregate" else "grouped aggregate"
}

case class RowsShape(top: LogicalPlan, rows: LogicalPlan, distinct: Boolean) extends ViewShape {
  def kind: String = if (distinct) "distinct rows" else "rows with multiplicities"
}

object ViewShape {
  def of(analyzed: LogicalPlan): ViewShape = {
    val top = stripTop(analyzed)
    aggregateUnder(top) match {
      case Some(agg) => AggregateShape(top, agg)
      case None => top match {
          case Distinct(child) => RowsShape(top, child, distinct = true)
          case other => RowsShape(top, other, distinct = false)
        }
    }
  }

  /** The nodes from `top` down to (not including) `aggregate`. */
  def chainAbove(top: LogicalPlan, aggregate: Aggregate): Seq[LogicalPlan] =
    if (top eq aggregate) Nil else top +: top.children.flatMap(chainAbove(_, aggregate))

  private def stripTop(p: LogicalPlan): LogicalPlan = p match {
    case s: Sort => stripTop(s.child)
    case SubqueryAlias(_, c) => stripTop(c)
    case v: View => stripTop(v.child)
    case other => other
  }

  /** The aggregate under a chain of projections and filters (HAVING, outer WHERE). */
  private def aggregateUnder(p: LogicalPlan): Option[Aggregate] = p match {
    case a: Aggregate => Some(a)
    case Project(_, c) => aggregateUnder(c)
    case Filter(_, c) => aggregateUnder(c)
    case SubqueryAlias(_, c) => aggregateUnder(c)
    case v: View => aggregateUnder(v.child)
    case s: Sort => aggregateUnder(s.child)
    case _ => None
  }
}
