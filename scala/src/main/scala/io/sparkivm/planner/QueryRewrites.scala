package io.sparkivm.planner

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.analysis.DeduplicateRelations
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.optimizer.{
  InlineCTE, PullupCorrelatedPredicates, PushDownPredicates, ReplaceExceptWithAntiJoin, ReplaceIntersectWithSemiJoin,
  RewriteCorrelatedScalarSubquery, RewriteExceptAll, RewriteIntersectAll, RewriteLateralSubquery,
  RewritePredicateSubquery
}
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * Rewrites a view's analyzed query into the operators the delta rules know, before it is
 * validated: common table expressions inlined, INTERSECT and EXCEPT turned into semi and anti
 * joins under DISTINCT (their ALL forms into a signed count per row, replicated), and subquery
 * expressions turned into joins, as Spark's optimizer plans them all anyway:
 *  - EXISTS, NOT EXISTS, IN and NOT IN become semi, anti and existence joins (NOT IN keeps
 *    its NULL semantics: a null-aware anti join condition);
 *  - a correlated scalar subquery becomes an aggregate left-joined back on its correlation;
 *  - a LATERAL subquery whose correlation Spark can pull up becomes a join on it;
 *  - an uncorrelated scalar subquery over a global aggregate (exactly one row) becomes an inner
 *    join with that aggregate, whose delta the aggregate and join rules then give.
 * The rewritten plan computes the same rows; recomputation (FULL) runs the original one.
 */
object QueryRewrites {

  def apply(plan: LogicalPlan): LogicalPlan = {
    val inlined = InlineCTE(alwaysInline = true)(plan)
    if (!inlined.exists(_.expressions.exists(SubqueryExpression.hasSubquery))) return setOperations(inlined)
    // A subquery may read what the outer query reads: give the joined copies their own ids.
    DeduplicateRelations(rewrite(inlined))
  }

  /**
   * The subquery expressions of `plan` as joins, the innermost first (as Spark's optimizer
   * rewrites each subquery's plan before the query around it). At each level, correlated
   * predicates are first pulled up into the subquery's join condition, and the other conjuncts
   * of a WHERE pushed into the joins below it, as Spark's optimizer does before it rewrites
   * subqueries: otherwise the join that replaces a subquery would sit on top of the WHERE's
   * cross products, and a change's keys would be computed over them.
   */
  private def rewrite(plan: LogicalPlan): LogicalPlan = {
    val inner = PushDownPredicates(PullupCorrelatedPredicates(setOperations(plan))).transformUp { case p =>
      p.transformExpressions { case s: SubqueryExpression => s.withNewPlan(rewrite(s.plan)) }
    }
    RewriteCorrelatedScalarSubquery(RewritePredicateSubquery(uncorrelatedScalars(RewriteLateralSubquery(inner))))
  }

  /** INTERSECT and EXCEPT, DISTINCT or ALL, in the joins, aggregates and generators Spark plans them as. */
  private def setOperations(plan: LogicalPlan): LogicalPlan =
    if (!plan.exists(p => p.isInstanceOf[Intersect] || p.isInstanceOf[Except])) plan
    else Seq(RewriteExceptAll, RewriteIntersectAll, ReplaceIntersectWithSemiJoin, ReplaceExceptWithAntiJoin)
      .foldLeft(plan)((p, rule) => rule(p))

  /** A plan that returns exactly one row: a global aggregate under projections. */
  /** True if `p` is a global aggregate (one row), under projections and aliases. */
  def singleRow(p: LogicalPlan): Boolean = p match {
    case a: Aggregate => a.groupingExpressions.isEmpty
    case Project(_, c) => singleRow(c)
    case SubqueryAlias(_, c) => singleRow(c)
    case v: View => singleRow(v.child)
    case _ => false
  }

  private def uncorrelated(s: ScalarSubquery): Boolean =
    s.outerAttrs.isEmpty && s.joinCond.isEmpty && !SubqueryExpression.hasCorrelatedSubquery(s)

  /**
   * Each uncorrelated scalar subquery of a Filter or Project as a column joined from its one
   * row. (One inside an aggregate's expressions stays a subquery, refused by the validator: the
   * joined column would be neither grouped nor aggregated.)
   */
  private def uncorrelatedScalars(plan: LogicalPlan): LogicalPlan = plan.transformUp {
    case node @ (_: Filter | _: Project)
        if node.expressions.exists(_.exists { case s: ScalarSubquery => uncorrelated(s); case _ => false }) =>
      val child = node.children.head
      var joined = child
      val replaced = node.transformExpressionsUp {
        case s: ScalarSubquery if uncorrelated(s) =>
          if (!singleRow(s.plan)) {
            throw IvmErrors.unsupported("A scalar subquery that is not a global aggregate",
              "Write it as an aggregate without GROUP BY (max(...), sum(...)), which returns " +
                "exactly one row, or as a join.")
          }
          joined = Join(joined, s.plan, Inner, None, JoinHint.NONE)
          s.plan.output.head
      }
      val rebuilt = replaced.withNewChildren(Seq(joined))
      rebuilt match {
        case f: Filter => Project(child.output, f)
        case other => other
      }
  }
}
