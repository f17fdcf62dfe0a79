package io.sparkivm.planner

import scala.util.Try

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate._
import org.apache.spark.sql.types._

/**
 * One aggregate function of a view and the state that maintains it in the backing table.
 * Inputs carry a sign `m` (+1 inserted, -1 deleted; a row standing for k rows carries +-k); each state is a group of columns that
 * `deltas` fold from signed rows and `merge` adds to the old state.
 *
 *  - COUNT: the count.  SUM and AVG: the sum and the count of non-null inputs, so that a
 *    group whose inputs are all NULL or gone gives NULL as recomputation does (a floating-point
 *    sum recomputed where a NaN or an infinity would not cancel).
 *  - MIN / MAX: the extreme and the non-null count. Inserts fold in directly; a group whose
 *    current extreme was deleted is recomputed from Post (docs/architecture.md, "The model").
 *  - anything else (COUNT(DISTINCT), stddev, collect_set ...): recomputed from Post for the
 *    groups whose input changed.
 */
sealed trait AggregateState {
  def index: Int
  def expr: AggregateExpression

  /** Names and types of the state columns in the backing table. */
  def columns: Seq[(String, DataType)]

  /** State of a group computed from all its rows. */
  def full(): Seq[Expression]

  /** Change of the state from signed rows. */
  def deltas(m: Expression): Seq[Expression]

  /** True if the group must be recomputed, from old state and folded deltas. */
  def needsRecompute(old: Seq[Expression], d: Seq[Expression]): Option[Expression]

  /** New state from old state (null for a new group), deltas and, if recomputed, `rec`. */
  def merge(old: Seq[Expression], d: Seq[Expression], rec: Option[Expression]): Seq[Expression]

  /** The aggregate input used to recompute a group. */
  def recompute: Option[Expression]

  /** The aggregate's value from the state columns. */
  def finish(state: Seq[Expression]): Expression

  protected def col(suffix: String) = s"__ivm_a${index}_$suffix"

  /** The aggregate's input with its FILTER clause applied. */
  protected def masked(e: Expression): Expression =
    expr.filter.map(f => If(f, e, Literal(null, e.dataType))).getOrElse(e)

  /**
   * `e` counted m times. Delta rows carry m = +1 or -1, except rows that stand for many
   * (IVM^eps looks up an auxiliary view that holds a count), whose m is that count.
   */
  protected def signed(m: Expression, e: Expression): Expression =
    If(EqualTo(m, Literal(1)), e,
      If(EqualTo(m, Literal(-1)), UnaryMinus(e),
        Cast(Multiply(e, Cast(m, e.dataType)), e.dataType)))
  protected def countOf(m: Expression, e: Expression): Expression =
    Sum(If(IsNotNull(e), Cast(m, LongType), Literal(0L))).toAggregateExpression()
  protected def plus(a: Expression, b: Expression, t: DataType): Expression =
    Cast(Add(Coalesce(Seq(a, Literal.default(t))), Coalesce(Seq(b, Literal.default(t)))), t)
}

object AggregateState {
  def apply(expr: AggregateExpression, index: Int): AggregateState = expr.aggregateFunction match {
    case c: Count if !expr.isDistinct => CountState(index, expr, c)
    case s: Sum if !expr.isDistinct => SumState(index, expr, s.child, s.dataType, None)
    case a: Average if !expr.isDistinct =>
      SumState(index, expr, a.child, a.aggBufferAttributes.head.dataType, Some(a))
    case mn: Min => ExtremeState(index, expr, mn.child, isMin = true)
    case mx: Max => ExtremeState(index, expr, mx.child, isMin = false)
    case _ => RecomputedState(index, expr)
  }

  /**
   * What `f` gives over no rows, as a global aggregate of an empty input does: COUNT and
   * `count_if` 0, SUM and MIN NULL. Evaluated as Spark's aggregation does, from the buffer's
   * initial values, so that an aggregate the analyzer keeps unreplaced (`count_if`, whose
   * replacement is a COUNT) or one without a declared default gives the same value.
   */
  def onNoRows(f: AggregateFunction): Expression = {
    val value = f.defaultResult.filter(_.dataType == f.dataType).orElse(Try(f match {
      case r: RuntimeReplaceableAggregate => r.replacement match {
          case a: AggregateFunction => onNoRows(a)
          case _ => Literal(null, f.dataType)
        }
      case d: DeclarativeAggregate =>
        val initial = AttributeMap(d.aggBufferAttributes.zip(d.initialValues))
        val evaluated = d.evaluateExpression.transform { case a: AttributeReference if initial.contains(a) => initial(a) }
        Literal.create(evaluated.eval(), f.dataType)
      case i: ImperativeAggregate =>
        val buffer = new GenericInternalRow(i.aggBufferAttributes.length)
        val at0 = i.withNewMutableAggBufferOffset(0)
        at0.initialize(buffer)
        Literal.create(at0.eval(buffer), f.dataType)
    }).toOption)
    value.map(v => if (v.dataType == f.dataType) v else Cast(v, f.dataType)).getOrElse(Literal(null, f.dataType))
  }

  /** What the state does, for EXPLAIN and DESCRIBE. */
  def describe(s: AggregateState): String = {
    val name = s.expr.sql
    s match {
      case _: CountState => s"$name: running count"
      case x: SumState =>
        s"$name: running sum and ${if (x.avg.isDefined) "count" else "non-null count"}" +
          (if (x.recompute.isDefined) "; recomputes a group when a NaN or infinite input is deleted" else "")
      case e: ExtremeState => s"$name: folds inserts; recomputes a group when its " +
          s"${if (e.isMin) "minimum" else "maximum"} is deleted"
      case _: RecomputedState => s"$name: recomputed from Post for the groups whose rows changed"
    }
  }
}

case class CountState(index: Int, expr: AggregateExpression, count: Count) extends AggregateState {
  def columns: Seq[(String, DataType)] = Seq(col("c") -> LongType)
  def full(): Seq[Expression] = Seq(expr)
  def deltas(m: Expression): Seq[Expression] = {
    val counted = (count.children.map(IsNotNull(_): Expression) ++ expr.filter).reduceOption(And)
      .getOrElse(Literal(true))
    Seq(Sum(If(counted, Cast(m, LongType), Literal(0L))).toAggregateExpression())
  }
  def needsRecompute(old: Seq[Expression], d: Seq[Expression]): Option[Expression] = None
  def merge(old: Seq[Expression], d: Seq[Expression], rec: Option[Expression]): Seq[Expression] =
    Seq(plus(old.head, d.head, LongType))
  def recompute: Option[Expression] = None
  def finish(state: Seq[Expression]): Expression = state.head
}

/**
 * SUM (avg = None) and AVG: a sum of type `sumType` and a non-null count.
 *
 * A floating-point sum cannot take back a NaN or an infinity (x - x is NaN for them), nor a
 * finite value from a sum that overflowed: a group recomputes its sum from Post when a deleted
 * input is not finite, or when its old sum is not finite and an input is deleted. Inserts, and
 * deletes of finite values from a finite sum, stay a running sum.
 */
case class SumState(index: Int, expr: AggregateExpression, input: Expression, sumType: DataType,
    avg: Option[Average])
    extends AggregateState {
  private def x = Cast(masked(input), sumType)
  private def floating = sumType == DoubleType || sumType == FloatType
  private def notFinite(e: Expression): Expression = {
    val infinity = if (sumType == FloatType) Literal(Float.PositiveInfinity) else Literal(Double.PositiveInfinity)
    Or(IsNaN(e), EqualTo(Abs(e), infinity))
  }
  private def sumOfAll: Expression =
    Coalesce(Seq(Cast(Sum(x).toAggregateExpression(), sumType), Literal.default(sumType)))
  def columns: Seq[(String, DataType)] = Seq(col("s") -> sumType, col("n") -> LongType)
  def full(): Seq[Expression] = Seq(sumOfAll, Count(Seq(masked(input))).toAggregateExpression())
  def deltas(m: Expression): Seq[Expression] = Seq(
    Cast(Sum(signed(m, x)).toAggregateExpression(), sumType), countOf(m, masked(input))) ++
    // Floating point: 0 no input deleted, 1 finite ones only, 2 one that is not finite.
    (if (floating) {
       Seq(Max(If(And(LessThan(m, Literal(0)), IsNotNull(x)), If(notFinite(x), Literal(2), Literal(1)),
             Literal(0))).toAggregateExpression())
     } else Nil)
  def needsRecompute(old: Seq[Expression], d: Seq[Expression]): Option[Expression] =
    if (!floating) None
    else Some(Or(EqualTo(d(2), Literal(2)), And(EqualTo(d(2), Literal(1)), notFinite(old.head))))
  def merge(old: Seq[Expression], d: Seq[Expression], rec: Option[Expression]): Seq[Expression] = {
    val n = plus(old(1), d(1), LongType)
    val running = plus(old.head, d.head, sumType)
    val sum = rec.map(r => If(needsRecompute(old, d).get, r, running)).getOrElse(running)
    // With no inputs left the sum is exactly zero; this also drops floating-point residue.
    Seq(If(EqualTo(n, Literal(0L)), Literal.default(sumType), sum), n)
  }
  def recompute: Option[Expression] = if (floating) Some(sumOfAll) else None
  def finish(state: Seq[Expression]): Expression = avg match {
    case Some(a) =>
      // Spark's own final step of AVG over our buffer, so types and rounding match.
      val Seq(sumBuf, countBuf) = a.aggBufferAttributes
      a.evaluateExpression.transform {
        case r: AttributeReference if r.exprId == sumBuf.exprId => state.head
        case r: AttributeReference if r.exprId == countBuf.exprId => state(1)
      }
    case None => If(EqualTo(state(1), Literal(0L)), Literal(null, sumType), state.head)
  }
}

case class ExtremeState(index: Int, expr: AggregateExpression, input: Expression, isMin: Boolean) extends AggregateState {
  private def t = input.dataType
  private def fold(e: Expression): Expression =
    (if (isMin) Min(e) else Max(e)).toAggregateExpression()
  private def only(cond: Expression) = If(cond, masked(input), Literal(null, t))
  def columns: Seq[(String, DataType)] = Seq(col("v") -> t, col("n") -> LongType)
  def full(): Seq[Expression] = Seq(fold(masked(input)), Count(Seq(masked(input))).toAggregateExpression())
  def deltas(m: Expression): Seq[Expression] = Seq(
    fold(only(GreaterThan(m, Literal(0)))), // extreme among inserted values
    fold(only(LessThan(m, Literal(0)))), // extreme among deleted values
    countOf(m, masked(input)))

  /** The extreme of the old values and the inserted ones (NULLs skipped). */
  private def folded(old: Seq[Expression], d: Seq[Expression]): Expression =
    if (isMin) Least(Seq(old.head, d.head)) else Greatest(Seq(old.head, d.head))

  /**
   * A deleted value that reaches the folded extreme may be that extreme: recompute. The
   * comparison is with old *and inserted* values, since one batch can insert and delete the
   * same value (an update of a joined row does).
   */
  def needsRecompute(old: Seq[Expression], d: Seq[Expression]): Option[Expression] = {
    val candidate = folded(old, d)
    val reaches = if (isMin) LessThanOrEqual(d(1), candidate) else GreaterThanOrEqual(d(1), candidate)
    Some(And(IsNotNull(d(1)), Or(IsNull(candidate), reaches)))
  }
  def merge(old: Seq[Expression], d: Seq[Expression], rec: Option[Expression]): Seq[Expression] = {
    val n = plus(old(1), d(2), LongType)
    val v = rec.map(r => If(needsRecompute(old, d).get, r, folded(old, d))).getOrElse(folded(old, d))
    Seq(If(EqualTo(n, Literal(0L)), Literal(null, t), v), n)
  }
  def recompute: Option[Expression] = Some(fold(masked(input)))
  def finish(state: Seq[Expression]): Expression = state.head
}

case class RecomputedState(index: Int, expr: AggregateExpression) extends AggregateState {
  def columns: Seq[(String, DataType)] = Seq(col("v") -> expr.dataType)
  def full(): Seq[Expression] = Seq(expr)
  def deltas(m: Expression): Seq[Expression] = Nil
  def needsRecompute(old: Seq[Expression], d: Seq[Expression]): Option[Expression] = Some(Literal(true))
  def merge(old: Seq[Expression], d: Seq[Expression], rec: Option[Expression]): Seq[Expression] =
    // No recomputation happens when every changed group emptied (its row is deleted).
    Seq(rec.getOrElse(Literal(null, expr.dataType)))
  def recompute: Option[Expression] = Some(expr)
  def finish(state: Seq[Expression]): Expression = state.head
}
