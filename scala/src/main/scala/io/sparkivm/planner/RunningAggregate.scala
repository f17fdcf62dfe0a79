package io.sparkivm.planner

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types.{DoubleType, FloatType}

/**
 * A global aggregate (no GROUP BY) kept as the running state of its functions, so that its
 * value at Post is its value at Pre moved by the change of its input: counting IVM of one group
 * (the states of [[AggregateState]]: a count, a sum and a non-null count). TPC-H Q22's
 * `avg(c_acctbal)` then costs the rows of `customer` that changed instead of a scan.
 *
 * Only COUNT, SUM and AVG of exact types qualify: a floating-point sum moved by a change differs
 * in its last bits from the sum recomputation adds up in another order.
 */
final case class RunningAggregate private (aggregate: Aggregate, states: Seq[AggregateState]) {

  /** The state's columns, in the order of `states`. */
  val stateOutput: Seq[Attribute] = states.flatMap(_.columns).map { case (name, t) =>
    AttributeReference(name, t, nullable = true)()
  }

  /** State `at`'s part of a row over `stateOutput`. */
  private def partOf[T](at: Int, row: Seq[T]): Seq[T] = {
    val from = states.take(at).map(_.columns.size).sum
    row.slice(from, from + states(at).columns.size)
  }

  /** The state computed from all rows of `input` (the aggregate's child, read at some version). */
  def full(input: LogicalPlan): LogicalPlan =
    Aggregate(Nil, named(states.flatMap(_.full()), stateOutput), input)

  /**
   * The state moved by `change` (rows of the aggregate's child with the sign `m`) from `old`,
   * the state's row before it.
   */
  def moved(old: InternalRow, change: LogicalPlan, m: Attribute): LogicalPlan = {
    val deltas = states.map(_.deltas(m).map(e => Alias(e, "__ivm_d")()))
    val oldValues = stateOutput.zipWithIndex.map { case (a, i) => Literal(old.get(i, a.dataType), a.dataType) }
    val merged = states.indices.flatMap(i =>
      states(i).merge(partOf(i, oldValues), deltas(i).map(_.toAttribute), None))
    Project(named(merged, stateOutput), Aggregate(Nil, deltas.flatten, change))
  }

  /** The aggregate's row (its output attributes) from its state's row. */
  def value(state: LogicalPlan): LogicalPlan = {
    val finished = states.indices.map(i => states(i).expr -> states(i).finish(partOf(i, stateOutput))).toMap
    Project(aggregate.aggregateExpressions.map(_.transformDown {
        case ae: AggregateExpression => finished(ae)
      }.asInstanceOf[NamedExpression]), state)
  }

  private def named(exprs: Seq[Expression], as: Seq[Attribute]): Seq[NamedExpression] =
    exprs.zip(as).map { case (e, a) => Alias(e, a.name)(exprId = a.exprId) }
}

object RunningAggregate {

  /** `a` as a running aggregate, or None if it groups or one of its functions does not qualify. */
  def of(a: Aggregate): Option[RunningAggregate] = {
    val functions = a.aggregateExpressions.flatMap(_.collect { case ae: AggregateExpression => ae }).distinct
    val exact = a.groupingExpressions.isEmpty && functions.nonEmpty && functions.forall { ae =>
      !ae.isDistinct && (ae.aggregateFunction match {
        case _: Count => true
        case s: Sum => !Seq(FloatType, DoubleType).contains(s.child.dataType)
        case v: Average => !Seq(FloatType, DoubleType).contains(v.child.dataType)
        case _ => false
      })
    }
    if (!exact) None
    else Some(RunningAggregate(a, functions.zipWithIndex.map { case (ae, i) => AggregateState(ae, i) }))
  }
}
