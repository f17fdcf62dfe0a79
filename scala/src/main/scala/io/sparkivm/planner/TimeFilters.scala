package io.sparkivm.planner

import java.time.{LocalDateTime, ZoneId, ZoneOffset}

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.plans.{Inner, LeftAnti, LeftOuter, LeftSemi, RightOuter}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.types.{DataType, DateType, TimestampNTZType, TimestampType}

/**
 * `current_timestamp()`, `now()`, `current_date()` or `localtimestamp()` in a view's filter,
 * bound to one refresh's instant (microseconds since the epoch). A refresh evaluates every time
 * filter of the view at its own instant, recorded with its commit, so that the next refresh
 * knows which instant the view's rows are at. Foldable: Spark folds it into a literal before
 * planning, so Delta's data skipping prunes files by it as by any constant.
 */
case class RefreshInstant(function: String, micros: Long, timeZoneId: Option[String], dataType: DataType)
    extends LeafExpression with CodegenFallback {
  override def foldable: Boolean = true
  override def nullable: Boolean = false

  private def zone: ZoneId = timeZoneId.map(DateTimeUtils.getZoneId).getOrElse(ZoneOffset.UTC)

  override def eval(input: InternalRow): Any = dataType match {
    case DateType => DateTimeUtils.microsToDays(micros, zone)
    case TimestampNTZType =>
      DateTimeUtils.localDateTimeToMicros(LocalDateTime.ofInstant(DateTimeUtils.microsToInstant(micros), zone))
    case _ => micros
  }

  /** The bound value as a literal: a definition read at two instants names two things. */
  override def sql: String = Literal(eval(null), dataType).sql
  override def toString: String = s"$function() at ${Literal(micros, TimestampType).sql}"
}

/**
 * Time-based filters (`WHERE ts >= current_timestamp() - INTERVAL 30 DAYS`): the view's rows at
 * one refresh are the query's rows at that refresh's instant t1. Between two refreshes the
 * view moves by D(Q) = Q(Post, t1) - Q(Pre, t0) = [Q(Post, t1) - Q(Pre, t1)] + [Q(Pre, t1) -
 * Q(Pre, t0)]: the first term is the delta of the tables' changes with every filter read at t1
 * (the ordinary delta rules over the bound plan); the second is the delta of the clock alone,
 * over the tables as the view last read them. For one filter s_c, the clock's delta is
 * s_{c(t1) and not c(t0)}(Pre) - s_{c(t0) and not c(t1)}(Pre): exactly the rows that crossed
 * the filter's bounds, which a range on a time column reads by Delta's data skipping (the
 * temporal filters of Materialize, `mz_now()`, over any time function and any filter shape).
 */
object TimeFilters {

  /** `plan` with the time functions of its filters bound to `micros`; inner-join (and one-sided
   * outer-join) conditions that read the time become filters first. */
  def bind(plan: LogicalPlan, micros: Long): LogicalPlan =
    toFilters(plan).transformUp {
      case f: Filter if readsTime(f.condition) => f.copy(condition = bindExpression(f.condition, micros))
    }

  /** `plan` with every bound instant moved to `micros`. */
  def rebind(plan: LogicalPlan, micros: Long): LogicalPlan = plan.transformAllExpressions {
    case r: RefreshInstant => r.copy(micros = micros)
  }

  /** The instant `plan`'s filters are bound to, if any is. */
  def instantOf(plan: LogicalPlan): Option[Long] =
    plan.collectFirst(Function.unlift((p: LogicalPlan) =>
        p.expressions.flatMap(_.collectFirst { case r: RefreshInstant => r.micros }).headOption))

  def bound(e: Expression): Boolean = e.exists(_.isInstanceOf[RefreshInstant])

  /** `e` as it evaluates: an analyzed expression keeps forms the optimizer replaces (`ts - INTERVAL`). */
  def evaluable(e: Expression): Expression = e.transform { case r: RuntimeReplaceable => r.replacement }

  /**
   * `e` as file statistics can be tested against: its constant parts (a bound instant and its
   * arithmetic) folded into literals, and NOT of a comparison turned into the opposite comparison
   * (both are NULL exactly where the column is).
   */
  def forSkipping(e: Expression): Expression = evaluable(e).transformDown {
    case c if c.foldable && !c.isInstanceOf[Literal] => Literal.create(c.eval(), c.dataType)
  }.transformUp {
    case Not(GreaterThanOrEqual(a, b)) => LessThan(a, b)
    case Not(GreaterThan(a, b)) => LessThanOrEqual(a, b)
    case Not(LessThanOrEqual(a, b)) => GreaterThan(a, b)
    case Not(LessThan(a, b)) => GreaterThanOrEqual(a, b)
  }

  def readsTime(e: Expression): Boolean = e.exists {
    case _: CurrentTimestampLike | _: CurrentDate | _: LocalTimestamp => true
    case _ => false
  }

  private def bindExpression(e: Expression, micros: Long): Expression = e.transform {
    case t: CurrentTimestampLike => RefreshInstant(t.prettyName, micros, None, TimestampType)
    case d: CurrentDate => RefreshInstant(d.prettyName, micros, d.timeZoneId, DateType)
    case l: LocalTimestamp => RefreshInstant(l.prettyName, micros, l.timeZoneId, TimestampNTZType)
  }

  /**
   * A join's conditions that read the time, where the same rows come of them as a filter: above
   * an inner join, or on the side an outer, semi or anti join keeps only where it matches.
   * Others stay, and [[PlanValidator]] refuses them.
   */
  private def toFilters(plan: LogicalPlan): LogicalPlan = plan.transformUp {
    case j: Join if j.condition.exists(readsTime) =>
      val (timed, rest) = splitConjunctivePredicates(j.condition.get).partition(readsTime)
      def only(side: LogicalPlan, c: Expression) = c.references.subsetOf(side.outputSet)
      val remaining = (c: Seq[Expression]) => (rest ++ c).reduceOption(And)
      j.joinType match {
        case Inner => Filter(timed.reduce(And), j.copy(condition = remaining(Nil)))
        case LeftOuter | LeftSemi | LeftAnti =>
          val (right, left) = timed.partition(only(j.right, _))
          if (right.isEmpty) j
          else j.copy(right = Filter(right.reduce(And), j.right), condition = remaining(left))
        case RightOuter =>
          val (left, right) = timed.partition(only(j.left, _))
          if (left.isEmpty) j
          else j.copy(left = Filter(left.reduce(And), j.left), condition = remaining(right))
        case _ => j
      }
  }

  private def splitConjunctivePredicates(e: Expression): Seq[Expression] = e match {
    case And(a, b) => splitConjunctivePredicates(a) ++ splitConjunctivePredicates(b)
    case other => Seq(other)
  }

  /**
   * Refuses a bound filter whose crossed rows a refresh could not apply: one over the view's
   * aggregate (HAVING, kept with each group's state, which a refresh reads only for the groups
   * whose rows changed), and one inside a global aggregate under the view's top (a scalar
   * subquery, whose value is kept per table version).
   */
  def check(shape: ViewShape): Unit = {
    val above = shape match {
      case a: AggregateShape => ViewShape.chainAbove(a.top, a.aggregate)
      case _ => Nil
    }
    if (above.exists(_.expressions.exists(bound))) {
      throw IvmErrors.unsupported("A time function in a filter over the view's aggregate (HAVING)",
        "Filter the rows by time before they are grouped (WHERE), or apply it when reading the view.")
    }
    val top = shape match {
      case a: AggregateShape => Some(a.aggregate)
      case _ => None
    }
    shape.top.foreach {
      case a: Aggregate
          if a.groupingExpressions.isEmpty && !top.exists(_ eq a) &&
            a.exists(_.expressions.exists(bound)) =>
        throw IvmErrors.unsupported("A time function in a filter inside a scalar subquery",
          "Its value is kept per version of the tables it reads; move the time filter out of the subquery.")
      case _ =>
    }
  }
}
