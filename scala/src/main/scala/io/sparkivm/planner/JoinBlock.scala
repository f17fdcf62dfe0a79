package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * A tree of inner joins, filters and projections, flattened into its units (the inputs of the
 * joins: a table occurrence with its own filters and projections, or any other subtree) and
 * the conjuncts over them. Aliases computed between joins are inlined into the conjuncts and
 * outputs, so the block is `Project(outputs, Filter(conditions, units(0) x ... x units(n-1)))`
 * and its joins can be rebuilt in any order.
 */
case class JoinBlock(root: LogicalPlan, units: IndexedSeq[LogicalPlan], conditions: Seq[Expression],
    outputs: Seq[NamedExpression]) {

  /** The occurrence a unit reads, with its columns by expression id, if it reads exactly one. */
  def leafOf(unit: Int): Option[(SourceLeaf, Map[ExprId, String])] = JoinBlock.leafColumns(units(unit))

  /** The unit that produces an attribute. */
  def unitOf(a: Attribute): Option[Int] = units.indexWhere(_.outputSet.contains(a)) match {
    case -1 => None
    case i => Some(i)
  }
}

object JoinBlock extends PredicateHelper {

  /** The block rooted at `plan`, if `plan` is a block of at least two units. */
  def of(plan: LogicalPlan): Option[JoinBlock] = {
    if (!hasJoin(plan)) return None
    val units = IndexedSeq.newBuilder[LogicalPlan]
    val conds = Seq.newBuilder[Expression]
    var aliases = Map.empty[ExprId, Expression]
    def inline(e: Expression): Expression = e.transformUp {
      case a: Attribute if aliases.contains(a.exprId) => aliases(a.exprId)
    }
    def walk(p: LogicalPlan): Unit = p match {
      case j: Join if j.joinType == Inner =>
        walk(j.left); walk(j.right)
        j.condition.foreach(c => conds ++= splitConjunctivePredicates(c).map(inline))
      case Filter(c, child) if hasJoin(child) =>
        walk(child); conds ++= splitConjunctivePredicates(c).map(inline)
      case Project(list, child) if hasJoin(child) =>
        walk(child)
        list.foreach {
          case a @ Alias(e, _) => aliases += a.exprId -> inline(e)
          case _ =>
        }
      case SubqueryAlias(_, child) if hasJoin(child) => walk(child)
      case v: View if hasJoin(v.child) => walk(v.child)
      case other => units += other
    }
    walk(plan)
    val outputs = plan.output.map { a =>
      aliases.get(a.exprId).map(e => Alias(e, a.name)(exprId = a.exprId): NamedExpression).getOrElse(a)
    }
    val us = units.result()
    if (us.size < 2) None else Some(JoinBlock(plan, us, conds.result(), outputs))
  }

  /** True if an inner join is reachable through filters, projections and aliases only. */
  private def hasJoin(p: LogicalPlan): Boolean = p match {
    case j: Join => j.joinType == Inner
    case Filter(_, c) => hasJoin(c)
    case Project(_, c) => hasJoin(c)
    case SubqueryAlias(_, c) => hasJoin(c)
    case v: View => hasJoin(v.child)
    case _ => false
  }

  /**
   * The table occurrence under a chain of filters, projections and aliases, and the leaf column
   * each output attribute of the chain carries (directly, or renamed by `col AS name`).
   */
  def leafColumns(unit: LogicalPlan): Option[(SourceLeaf, Map[ExprId, String])] = unit match {
    case SourceLeaf(leaf) => Some((leaf, leaf.output.map(a => a.exprId -> a.name).toMap))
    case Filter(_, c) => leafColumns(c)
    case SubqueryAlias(_, c) => leafColumns(c)
    case v: View => leafColumns(v.child)
    case Project(list, c) => leafColumns(c).map { case (leaf, cols) =>
        (leaf,
          list.flatMap {
            case a: Attribute => cols.get(a.exprId).map(a.exprId -> _)
            case al @ Alias(a: Attribute, _) => cols.get(a.exprId).map(al.exprId -> _)
            case _ => None
          }.toMap)
      }
    case _ => None
  }
}
