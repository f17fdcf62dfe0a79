package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans._
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * A subplan restricted to the rows whose key is among a small set of keys, by semi joins pushed
 * down to the scans (semi-join reduction: Bernstein & Chiu 1981; the full reducer of Yannakakis
 * 1981 applies it along a join tree). A delta is small, and what it joins with or is recomputed
 * for is one key's worth of each input: pushed below an aggregate, a semi join drops the other
 * keys' rows before they are aggregated. Spark's optimizer pushes a semi join through an
 * aggregate only in some plan shapes (not under a HAVING filter, not into the other side of a
 * join), so TPC-H Q18's refresh aggregated all of `lineitem` several times.
 *
 * `apply(plan, keys, affected)` returns `plan`'s rows whose `keys` (expressions over its output)
 * equal, null-safely, a row of `affected`; the output attributes stay `plan`'s. The restriction
 * goes below:
 *  - filters, projections and generators (keys substituted through aliases);
 *  - aggregates and partitioned windows whose groups or partitions contain the keys (a group's
 *    output depends only on its input rows);
 *  - unions, to every child;
 *  - joins, to the side the keys come from (inner, outer on the preserved side, semi, anti,
 *    existence), and to the other side through the join's equalities: rows there whose join key
 *    is not among the first side's cannot match. Where the keys are not join keys, the first
 *    side's restricted rows are computed once (when `steps` runs plans) and their join keys
 *    restrict the other side: the Yannakakis step.
 * It stops where the restriction would change the result (a full outer join, an aggregate over
 * other columns, nondeterministic expressions), and semi-joins there.
 */
class KeyRestriction(steps: PlanSteps,
    /** A restricted table read computed elsewhere (held and shared: [[SharedScans]]), if any. */
    shared: (LogicalPlan, Seq[Expression], LogicalPlan, Option[Expression]) => Option[LogicalPlan] =
      (_, _, _, _) => None)
    extends PredicateHelper {

  def apply(plan: LogicalPlan, keys: Seq[Expression], affected: LogicalPlan,
      probe: Option[Expression] = None): LogicalPlan =
    shared(plan, keys, affected, probe).getOrElse(pushDown(plan, keys, affected, probe))

  private def pushDown(plan: LogicalPlan, keys: Seq[Expression], affected: LogicalPlan,
      probe: Option[Expression]): LogicalPlan = {
    def here: LogicalPlan = {
      val cond = keys.zip(affected.output).map { case (k, a) => EqualNullSafe(k, a): Expression }.reduce(And)
      Join(probe.map(Filter(_, plan)).getOrElse(plan), affected, LeftSemi, Some(cond), JoinHint.NONE)
    }
    val all = keys ++ probe
    def within(p: LogicalPlan) = all.forall(_.references.subsetOf(p.outputSet))
    // The keys over `child` through `passed` (output attribute -> expression over child), if they pass.
    def through(passed: AttributeMap[Expression], child: LogicalPlan)(rebuild: LogicalPlan => LogicalPlan) = {
      val (ks, pr) = (keys.map(KeyRestriction.substitute(_, passed)), probe.map(KeyRestriction.substitute(_, passed)))
      if ((ks ++ pr).forall(_.references.subsetOf(child.outputSet))) rebuild(apply(child, ks, affected, pr))
      else here
    }
    if (!all.forall(_.deterministic)) return here
    plan match {
      case Filter(cond, child) if cond.deterministic => Filter(cond, apply(child, keys, affected, probe))
      case Project(list, child) if list.forall(_.deterministic) =>
        through(KeyRestriction.aliases(list), child)(Project(list, _))
      case g: Generate if g.generator.deterministic && within(g.child) =>
        g.copy(child = apply(g.child, keys, affected, probe))
      case a: Aggregate if a.groupingExpressions.nonEmpty && a.aggregateExpressions.forall(_.deterministic) =>
        val grouped = KeyRestriction.groups(a)
        if (all.forall(_.references.forall(grouped.contains))) through(grouped, a.child)(c => a.copy(child = c))
        else here
      case w: Window
          if within(w.child) &&
            all.forall(_.references.forall(r => w.partitionSpec.exists(_.semanticEquals(r)))) =>
        w.copy(child = apply(w.child, keys, affected, probe))
      case u: Union if !u.byName && !u.allowMissingCol =>
        u.withNewChildren(u.children.map { c =>
          val byPosition = AttributeMap(u.output.zip(c.output.map(a => a: Expression)))
          apply(c, keys.map(KeyRestriction.substitute(_, byPosition)), affected,
            probe.map(KeyRestriction.substitute(_, byPosition)))
        })
      case j: Join
          if j.condition.forall(_.deterministic) && within(j.left) &&
            (Seq(Inner, LeftOuter, LeftSemi, LeftAnti).contains(j.joinType) || j.joinType.isInstanceOf[
              ExistenceJoin]) =>
        val (left, right) = reduce(apply(j.left, keys, affected, probe), j.right, equalities(j, fromLeft = true),
          keys, affected)
        j.copy(left = left, right = right)
      case j: Join
          if j.condition.forall(_.deterministic) && within(j.right) &&
            Seq(Inner, RightOuter).contains(j.joinType) =>
        val (right, left) = reduce(apply(j.right, keys, affected, probe), j.left, equalities(j, fromLeft = false),
          keys, affected)
        j.copy(left = left, right = right)
      case _ => here
    }
  }

  /** The join's equalities as (this side's expression, the other side's), the keys' side first. */
  private def equalities(j: Join, fromLeft: Boolean): Seq[(Expression, Expression)] = {
    val (mine, theirs) = if (fromLeft) (j.left, j.right) else (j.right, j.left)
    j.condition.toSeq.flatMap(splitConjunctivePredicates).collect {
      case EqualTo(a, b)
          if a.references.subsetOf(mine.outputSet) && b.references.subsetOf(theirs.outputSet) &&
            a.references.nonEmpty && b.references.nonEmpty => (a, b)
      case EqualTo(b, a)
          if a.references.subsetOf(mine.outputSet) && b.references.subsetOf(theirs.outputSet) &&
            a.references.nonEmpty && b.references.nonEmpty => (a, b)
    }
  }

  /**
   * A join's first side, restricted, and its other side:
   *  - where each key is a join key, restricted to the same keys: a semi join with the small
   *    set of keys, which spares the join a shuffle of the whole side (an outer join cannot
   *    broadcast its preserved side, and the planner does not know the first side is small);
   *  - else, if the other side has something to cut below its scans (an aggregate, a window, a
   *    join), restricted to the join keys of the first side's restricted rows (computed once,
   *    and the first side then read from them): the Yannakakis step.
   */
  private def reduce(first: LogicalPlan, side: LogicalPlan, eqs: Seq[(Expression, Expression)],
      keys: Seq[Expression], affected: LogicalPlan): (LogicalPlan, LogicalPlan) = {
    val mapped = keys.map(k => eqs.find(_._1.semanticEquals(k)).map(_._2))
    if (eqs.isEmpty) (first, side)
    else if (mapped.forall(_.isDefined)) (first, apply(side, mapped.flatten, affected))
    else if (!steps.collects || !side.exists(p =>
        p.isInstanceOf[Aggregate] || p.isInstanceOf[Window] ||
          p.isInstanceOf[Join])) (first, side)
    else {
      val held = steps.materialize(first)
      val joinKeys = steps.materialize(Distinct(Project(eqs.zipWithIndex.map { case ((e, _), i) =>
          Alias(e, s"__ivm_j$i")()
        }, held)))
      (held, apply(side, eqs.map(_._2), joinKeys))
    }
  }
}

object KeyRestriction {

  /** A projection's aliased outputs and the expressions they stand for. */
  def aliases(list: Seq[NamedExpression]): AttributeMap[Expression] =
    AttributeMap(list.collect { case a: Alias => (a.toAttribute, a.child) })

  /** An aggregate's outputs that pass a grouping expression through, and that expression. */
  def groups(a: Aggregate): AttributeMap[Expression] = AttributeMap(a.aggregateExpressions.collect {
    case al @ Alias(e, _) if a.groupingExpressions.exists(_.semanticEquals(e)) => (al.toAttribute, e)
    case at: Attribute if a.groupingExpressions.exists(_.semanticEquals(at)) => (at, at: Expression)
  })

  /** `e` with the attributes of `map` replaced by what they stand for. */
  def substitute(e: Expression, map: AttributeMap[Expression]): Expression =
    e.transform { case a: Attribute if map.contains(a) => map(a) }
}
