package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, Complete, DeclarativeAggregate}
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, BindReferences, EmptyRow, Expression, GenericInternalRow, If,
  InterpretedMutableProjection, InterpretedUnsafeProjection, JoinedRow, NamedExpression, Predicate, RuntimeReplaceable,
  UnsafeRow
}
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys
import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, Distinct, Filter, Join, LocalRelation, LogicalPlan, Project, SubqueryAlias, Union, View
}
import org.apache.spark.sql.catalyst.plans.{ExistenceJoin, Inner, LeftAnti, LeftOuter, LeftSemi}

/**
 * Evaluates a small plan (analyzed or optimized) on the driver, without a Spark job, when it
 * reads only rows on the driver ([[RefreshSteps.onDriver]]) through projections, filters, unions,
 * DISTINCTs, aggregates and joins: the keys a change touches, whose plan is a DISTINCT over the
 * union of changes held on the driver; a global aggregate's state moved by its change
 * ([[io.sparkivm.planner.RunningAggregate]]); an operator recomputed for its changed keys over
 * rows looked up for them (a semi or anti join of those rows with the keys that have matches).
 * Spark folds only projections and filters of a local relation (`ConvertToLocalRelation`); each
 * of these would otherwise be a job with a shuffle. Expressions are interpreted (no code is
 * generated for a few rows); None for any other plan, or any expression that is not
 * deterministic or cannot be interpreted.
 */
object DriverEval {

  /** The most rows an aggregate with functions is folded over here. */
  val FoldMaxRows = 50000

  /** The most pairs of rows a join without equi-join keys tests here. */
  val NestedLoopMaxPairs = 1000000L

  def rows(plan: LogicalPlan, maxRows: Int): Option[Seq[InternalRow]] =
    // A plan that reads anything but rows held here, or whose expressions need the optimizer's
    // rewriting first (an analyzed plan's BETWEEN), is not evaluated at all (not even in part).
    if (!plan.collectLeaves().forall(_.isInstanceOf[LocalRelation]) ||
      plan.exists(_.expressions.exists(_.exists(_.isInstanceOf[RuntimeReplaceable])))) None
    else
      try eval(plan, maxRows)
      catch { case NonFatal(_) => None }

  private def eval(plan: LogicalPlan, maxRows: Int): Option[Seq[InternalRow]] = plan match {
    case l: LocalRelation => Some(l.data).filter(_.size <= maxRows)
    case Project(list, child) if list.forall(_.deterministic) =>
      eval(child, maxRows).map(project(list, child.output, _))
    case Filter(cond, child) if cond.deterministic =>
      eval(child, maxRows).map { in =>
        val predicate = Predicate.createInterpreted(BindReferences.bindReference(cond, child.output))
        in.filter(predicate.eval)
      }
    case SubqueryAlias(_, child) => eval(child, maxRows)
    case v: View => eval(v.child, maxRows)
    case Distinct(child) =>
      eval(child, maxRows).map(in => project(child.output, child.output, in).distinct)
    case u: Union if !u.byName && !u.allowMissingCol =>
      val parts = u.children.map(eval(_, maxRows))
      if (parts.exists(_.isEmpty)) None
      else Some(parts.flatten.flatten).filter(_.size <= maxRows)
    // DISTINCT, and functions Spark declares as expressions over a buffer (COUNT, SUM, AVG, MIN ...).
    case Aggregate(groups, outputs, child, _) if (groups ++ outputs).forall(_.deterministic) =>
      eval(child, maxRows).flatMap(aggregate(groups, outputs, child.output, _)).filter(_.size <= maxRows)
    case j: Join if j.condition.forall(_.deterministic) && (j.joinType match {
          case Inner | LeftOuter | LeftSemi | LeftAnti | ExistenceJoin(_) => true
          case _ => false
        }) =>
      for {
        left <- eval(j.left, maxRows)
        right <- eval(j.right, maxRows)
        out <- join(j, left, right) if out.size <= maxRows
      } yield project(j.output, j.output, out)
    case _ => None
  }

  /**
   * A hash join on the equi-join keys (a key with a NULL matches nothing, as in Spark's hash
   * joins; Spark's null-safe keys never are NULL), the rest of the condition tested per pair;
   * without equi-join keys, every pair tested (a NOT IN's null-aware condition included), up to
   * [[NestedLoopMaxPairs]] pairs.
   */
  private def join(j: Join, left: Seq[InternalRow], right: Seq[InternalRow]): Option[Seq[InternalRow]] = {
    val (lk, rk, other) = j match {
      case ExtractEquiJoinKeys(_, l, r, o, _, _, _, _) => (l, r, o)
      case _ => (Nil, Nil, j.condition)
    }
    if (lk.isEmpty && left.size.toLong * right.size > NestedLoopMaxPairs) return None
    val test = other.map(c =>
      Predicate.createInterpreted(BindReferences.bindReference(c, j.left.output ++ j.right.output)))
    val leftKey = InterpretedUnsafeProjection.createProjection(lk.map(BindReferences.bindReference(_, j.left.output)))
    val rightKey = InterpretedUnsafeProjection.createProjection(rk.map(BindReferences.bindReference(_, j.right.output)))
    val byKey: Map[UnsafeRow, Seq[InternalRow]] = right.iterator.map(r => rightKey(r).copy() -> r)
      .filterNot(_._1.anyNull).toSeq.groupMap(_._1)(_._2)
    def matches(l: InternalRow): Iterator[InternalRow] = {
      val key = leftKey(l)
      val candidates = if (key.anyNull) Iterator.empty else byKey.getOrElse(key, Nil).iterator
      test.map(t => candidates.filter(r => t.eval(new JoinedRow(l, r)))).getOrElse(candidates)
    }
    lazy val padding = new GenericInternalRow(j.right.output.length)
    Some(j.joinType match {
      case Inner => left.flatMap(l => matches(l).map(r => new JoinedRow(l, r)))
      case LeftOuter => left.flatMap { l =>
          val found = matches(l).map(r => new JoinedRow(l, r): InternalRow).toSeq
          if (found.isEmpty) Seq(new JoinedRow(l, padding)) else found
        }
      case LeftSemi => left.filter(matches(_).hasNext)
      case LeftAnti => left.filterNot(matches(_).hasNext)
      case ExistenceJoin(_) => left.map(l => new JoinedRow(l, InternalRow(matches(l).hasNext)))
      case other => throw IvmErrors.internal(s"no local join for $other")
    })
  }

  /**
   * Each group's buffers folded over its rows by the functions' own update expressions, then
   * finished by their evaluate expressions; None if a function is not declarative, DISTINCT
   * or not in Complete mode. Without GROUP BY, no rows still give one row (of initial values).
   */
  private def aggregate(groups: Seq[Expression], outputs: Seq[NamedExpression], input: Seq[Attribute],
      rows: Seq[InternalRow]): Option[Seq[InternalRow]] = {
    val functions = outputs.flatMap(_.collect { case ae: AggregateExpression => ae }).distinct
    // Interpreted update expressions per row: past this many rows a Spark job is cheaper.
    if (functions.nonEmpty && rows.size > FoldMaxRows) return None
    val declared = functions.collect {
      case ae @ AggregateExpression(f: DeclarativeAggregate, Complete, false, _, _) => (ae, f)
    }
    if (declared.size != functions.size) return None
    val buffer = declared.flatMap(_._2.aggBufferAttributes)
    val initial = InterpretedMutableProjection.createProjection(declared.flatMap(_._2.initialValues))
    val update = InterpretedMutableProjection.createProjection(declared.flatMap { case (ae, f) =>
      ae.filter match {
        case None => f.updateExpressions
        case Some(cond) => f.updateExpressions.zip(f.aggBufferAttributes).map { case (u, b) => If(cond, u, b) }
      }
    }.map(BindReferences.bindReference(_, buffer ++ input)))
    val named = groups.map(asNamed)
    val keyOf = InterpretedUnsafeProjection.createProjection(
      named.map(n => BindReferences.bindReference(n: Expression, input)))
    val folded = scala.collection.mutable.LinkedHashMap[InternalRow, InternalRow]()
    if (groups.isEmpty) folded(keyOf(EmptyRow).copy()) = initial(EmptyRow).copy()
    rows.foreach { row =>
      val key = keyOf(row).copy()
      val before = folded.getOrElseUpdate(key, initial(EmptyRow).copy())
      folded(key) = update(new JoinedRow(before, row)).copy()
    }
    val results = declared.map { case (_, f) => f.evaluateExpression }
    val resultAttrs = declared.map { case (ae, f) => AttributeReference("agg", f.dataType)(exprId = ae.resultId) }
    val finish = InterpretedUnsafeProjection.createProjection(results.map(BindReferences.bindReference(_, buffer)))
    val keyAttrs = named.map(_.toAttribute)
    val byId = declared.map(_._1).zip(resultAttrs).toMap
    val outputExprs = outputs.map(o =>
      rebind(o, groups, keyAttrs).transformDown {
        case ae: AggregateExpression => byId(ae)
      })
    val joined = folded.toSeq.map { case (key, buf) => new JoinedRow(key, finish(buf).copy()) }
    Some(project(outputExprs, keyAttrs ++ resultAttrs, joined))
  }

  private def project(list: Seq[Expression], input: Seq[Attribute], rows: Seq[InternalRow]): Seq[InternalRow] = {
    val projection = InterpretedUnsafeProjection.createProjection(list.map(BindReferences.bindReference(_, input)))
    rows.map(r => projection(r).copy(): UnsafeRow)
  }

  private def asNamed(e: Expression): NamedExpression = e match {
    case n: NamedExpression => n
    case other => Alias(other, "k")()
  }

  /** An output over the grouping expressions, rewritten over the evaluated keys. */
  private def rebind(e: Expression, groups: Seq[Expression], keys: Seq[Attribute]): Expression =
    e.transformDown {
      case g if groups.exists(_.semanticEquals(g)) => keys(groups.indexWhere(_.semanticEquals(g)))
    }
}
