package io.sparkivm.planner

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.analysis.DeduplicateRelations
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate.{Count, Max}
import org.apache.spark.sql.catalyst.optimizer.{
  InlineCTE, PullupCorrelatedPredicates, PushDownPredicates, ReorderJoin, ReplaceExceptWithAntiJoin,
  ReplaceIntersectWithSemiJoin, RewriteCorrelatedScalarSubquery, RewriteExceptAll, RewriteIntersectAll,
  RewriteLateralSubquery, RewritePredicateSubquery
}
import org.apache.spark.sql.catalyst.planning.ExtractFiltersAndInnerJoins
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types.{MapType, StringType}

/**
 * Rewrites a view's analyzed query into the operators the delta rules know, before it is
 * validated: common table expressions inlined, INTERSECT and EXCEPT turned into semi and anti
 * joins under DISTINCT (their ALL forms into a signed count per row, replicated), and subquery
 * expressions turned into joins, as Spark's optimizer plans them all anyway:
 *  - EXISTS, NOT EXISTS, IN and NOT IN become semi, anti and existence joins (NOT IN keeps
 *    its NULL semantics: a null-aware anti join condition);
 *  - a correlated scalar subquery becomes an aggregate left-joined back on its correlation;
 *  - a LATERAL subquery whose correlation Spark can pull up becomes a join on it;
 *  - an uncorrelated scalar subquery becomes an inner join with a global aggregate (exactly one
 *    row): itself if it is one, else the aggregate that gives its value or its error,
 *    whose delta the aggregate and join rules then give;
 *  - inner joins written in an order that joins tables sharing no condition (`FROM a, b, c WHERE
 *    a.x = c.x AND b.y = c.y`) are put in an order where each meets a condition ([[connected]]).
 * The rewritten plan computes the same rows; recomputation (FULL) runs the original one.
 */
object QueryRewrites {

  def apply(plan: LogicalPlan): LogicalPlan = {
    val inlined = InlineCTE(alwaysInline = true)(plan)
    if (!inlined.exists(_.expressions.exists(SubqueryExpression.hasSubquery))) {
      return connected(setOperations(inlined))
    }
    // A subquery may read what the outer query reads: give the joined copies their own ids.
    connected(DeduplicateRelations(rewrite(inlined)))
  }

  /**
   * Each tree of inner joins that joins two parts sharing no condition, where another order
   * avoids that, in the order Spark's optimizer gives it ([[ReorderJoin]]: each next input the
   * first one that shares a condition with those joined), with the conditions of one input as a
   * filter on it. The delta rules join a change along the tree as written, and each join's
   * multiplicity is a projection that Spark's own reordering does not see through: TPC-DS
   * query 18's `FROM catalog_sales, customer_demographics cd1, customer_demographics cd2,
   * customer` joined a change of cd1 with all of cd2 before meeting customer (47 s of nested
   * loops at SF 0.01, where the query takes 0.5 s). Trees with conditions that read the time or
   * are not deterministic, or with an input of one row (a scalar subquery, which the delta rules
   * recognize where it is written), are left as written.
   */
  private def connected(plan: LogicalPlan): LogicalPlan = plan.transformDown {
    case p @ ExtractFiltersAndInnerJoins(inputs, conditions)
        if inputs.size > 2 && inputs.forall(_._2 == Inner) && conditions.nonEmpty &&
          conditions.forall(c => c.deterministic && !TimeFilters.readsTime(c)) &&
          !inputs.exists(i => singleRow(i._1)) =>
      val crossed = crossings(p, conditions)
      if (crossed == 0) p
      else {
        val (local, joining) = conditions.partition(c =>
          c.references.nonEmpty && inputs.exists(i => c.references.subsetOf(i._1.outputSet)))
        val filtered = inputs.map { case (input, t) =>
          local.filter(_.references.subsetOf(input.outputSet)).reduceOption(And)
            .map(c => Filter(c, input): LogicalPlan).getOrElse(input) -> t
        }
        val ordered = ReorderJoin.createOrderedJoin(filtered, joining)
        if (crossings(ordered, joining) >= crossed) p
        else if (ordered.output == p.output) ordered
        else Project(p.output, ordered)
      }
  }

  /** The inner joins of `p`'s tree (as [[ExtractFiltersAndInnerJoins]] walks it) whose two sides
   * share none of `conditions`. */
  private def crossings(p: LogicalPlan, conditions: Seq[Expression]): Int = p match {
    case Filter(_, j: Join) => crossings(j, conditions)
    case j @ Join(left, right, Inner, _, JoinHint.NONE) =>
      val shared = conditions.exists { c =>
        val refs = c.references
        refs.intersect(left.outputSet).nonEmpty && refs.intersect(right.outputSet).nonEmpty &&
        refs.subsetOf(j.outputSet)
      }
      crossings(left, conditions) + (if (shared) 0 else 1)
    case _ => 0
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

  /** True if `p` is a global aggregate (one row), under projections and aliases. */
  def singleRow(p: LogicalPlan): Boolean = p match {
    case a: Aggregate => a.groupingExpressions.isEmpty
    case Project(_, c) => singleRow(c)
    case SubqueryAlias(_, c) => singleRow(c)
    case v: View => singleRow(v.child)
    case _ => false
  }

  /**
   * A scalar subquery that is not a global aggregate (`WHERE d = (SELECT id FROM dept WHERE
   * name = 'SALES')`) as the one-row aggregate that gives the same value: NULL over no rows,
   * the value over one row, and over more the error Spark raises for it
   * (SCALAR_SUBQUERY_TOO_MANY_ROWS), since `max` of one value is that value. Its count and max
   * are then maintained like any global aggregate's, and a refresh that would give the
   * subquery a second row fails as the query does, before anything is applied.
   */
  private def atMostOneRow(plan: LogicalPlan): LogicalPlan = {
    val value = plan.output.head
    if (!RowOrdering.isOrderable(value.dataType)) {
      throw IvmErrors.unsupported(
        s"A scalar subquery of type ${value.dataType.simpleString} that is not " +
          "a global aggregate",
        "Write it as an aggregate without GROUP BY, which returns exactly one row, or as a join.")
    }
    val rows = Count(Literal(1)).toAggregateExpression()
    val tooMany = RaiseError(Literal("SCALAR_SUBQUERY_TOO_MANY_ROWS"),
      Literal.create(Map.empty[String, String], MapType(StringType, StringType)), value.dataType)
    val one = If(GreaterThan(rows, Literal(1L)), tooMany, Max(value).toAggregateExpression())
    Aggregate(Nil, Seq(Alias(one, value.name)()), plan)
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
          val one = if (singleRow(s.plan)) s.plan else atMostOneRow(s.plan)
          joined = Join(joined, one, Inner, None, JoinHint.NONE)
          one.output.head
      }
      val rebuilt = replaced.withNewChildren(Seq(joined))
      rebuilt match {
        case f: Filter => Project(child.output, f)
        case other => other
      }
  }
}
