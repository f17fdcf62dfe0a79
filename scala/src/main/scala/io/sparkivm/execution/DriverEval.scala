package io.sparkivm.execution

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, Complete, DeclarativeAggregate}
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, BindReferences, EmptyRow, Expression, Generator, GenericInternalRow, If,
  InterpretedMutableProjection, InterpretedUnsafeProjection, JoinedRow, KnownFloatingPointNormalized, NamedExpression,
  Predicate, RuntimeReplaceable, UnsafeRow
}
import org.apache.spark.sql.catalyst.optimizer.PushDownPredicates
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys
import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, Distinct, Filter, Generate, Join, LogicalPlan, Project, SubqueryAlias, Union, View
}
import org.apache.spark.sql.catalyst.plans.{ExistenceJoin, Inner, LeftAnti, LeftOuter, LeftSemi}
import org.apache.spark.sql.catalyst.util.UnsafeRowUtils
import org.apache.spark.sql.ivm.{OnDriver, SparkInternals}
import org.apache.spark.sql.types.{DoubleType, FloatType}

/**
 * Evaluates a small plan (analyzed or optimized) on the driver, without a Spark job, when it
 * reads only rows on the driver ([[RefreshSteps.onDriver]]) through projections, filters, unions,
 * DISTINCTs, aggregates, generators and joins: the keys a change touches, whose plan is a DISTINCT over the
 * union of changes held on the driver; a global aggregate's state moved by its change
 * ([[io.sparkivm.planner.RunningAggregate]]); an operator recomputed for its changed keys over
 * rows looked up for them (a semi or anti join of those rows with the keys that have matches).
 * Spark folds only projections and filters of a local relation (`ConvertToLocalRelation`); each
 * of these would otherwise be a job with a shuffle. Expressions are interpreted (no code is
 * generated for a few rows); None for any other plan, or any expression that is not
 * deterministic or cannot be interpreted.
 *
 * Rows are grouped, made distinct and joined by the bytes of their keys, so a plan whose keys
 * compare otherwise is left to Spark: strings under a collation ('a' equals 'A' under
 * UTF8_LCASE), and floating-point values that Spark's optimizer has not normalized (-0.0 equals
 * 0.0, and every NaN equals every other).
 */
object DriverEval {

  /** The most rows an aggregate with functions is folded over here. */
  val FoldMaxRows = 50000

  /** The most pairs of rows a join without equi-join keys tests here. */
  val NestedLoopMaxPairs = 1000000L

  /**
   * Rows that several evaluations read unchanged (the tables a recursion joins at every step:
   * [[DriverRecursion]]), each hash-indexed once by the join keys it is looked up with. They are
   * known by identity, may exceed an evaluation's `maxRows`, and are the build side of an inner
   * join whatever side they are on.
   */
  final class FixedRows(rows: Seq[Seq[InternalRow]]) {
    private val fixed = new java.util.IdentityHashMap[Seq[InternalRow], mutable.Map[Seq[Expression], Index]]()
    rows.foreach(r => fixed.put(r, mutable.Map.empty))

    def contains(rows: Seq[InternalRow]): Boolean = fixed.containsKey(rows)

    private[DriverEval] def index(rows: Seq[InternalRow], key: Seq[Expression]): Option[Index] =
      Option(fixed.get(rows)).map(_.getOrElseUpdate(key, DriverEval.index(rows, key)))
  }

  private type Index = scala.collection.Map[UnsafeRow, mutable.ArrayBuffer[InternalRow]]

  /** Whether values of `key` are equal exactly when their unsafe bytes are. */
  private def equalAsBytes(key: Expression): Boolean =
    UnsafeRowUtils.isBinaryStable(key.dataType) && (key.isInstanceOf[KnownFloatingPointNormalized] ||
      !SparkInternals.existsNested(key.dataType)(t => t == FloatType || t == DoubleType))

  private val NoFixedRows = new FixedRows(Nil)

  def rows(plan: LogicalPlan, maxRows: Int, fixed: FixedRows = NoFixedRows): Option[Seq[InternalRow]] =
    // A plan that reads anything but rows held here, or whose expressions need the optimizer's
    // rewriting first (an analyzed plan's BETWEEN), is not evaluated at all (not even in part).
    if (!plan.collectLeaves().forall(OnDriver.unapply(_).isDefined) ||
      plan.exists(_.expressions.exists(_.exists(_.isInstanceOf[RuntimeReplaceable])))) None
    else
      // An analyzed plan keeps a WHERE above the joins it filters (`FROM a, b WHERE a.k = b.k`):
      // pushed into them, its equalities are join keys, and no pair of rows is tested in vain.
      try new Evaluation(maxRows, fixed).eval(PushDownPredicates(plan))
      catch { case NonFatal(_) => None }

  private def index(rows: Seq[InternalRow], key: Seq[Expression]): Index = {
    val keyOf = InterpretedUnsafeProjection.createProjection(key)
    val byKey = new java.util.HashMap[UnsafeRow, mutable.ArrayBuffer[InternalRow]]()
    rows.foreach { r =>
      val k = keyOf(r)
      if (!k.anyNull) {
        val found = byKey.get(k)
        if (found != null) found += r else byKey.put(k.copy(), mutable.ArrayBuffer(r))
      }
    }
    byKey.asScala
  }

  private final class Evaluation(maxRows: Int, fixed: FixedRows) {
    def eval(plan: LogicalPlan): Option[Seq[InternalRow]] = plan match {
      case OnDriver(data) => Some(data).filter(d => d.size <= maxRows || fixed.contains(d))
      case Project(list, child) if list.forall(_.deterministic) =>
        eval(child).map(project(list, child.output, _))
      case Filter(cond, child) if cond.deterministic =>
        eval(child).map { in =>
          val predicate = Predicate.createInterpreted(BindReferences.bindReference(cond, child.output))
          in.filter(predicate.eval)
        }
      case SubqueryAlias(_, child) => eval(child)
      case v: View => eval(v.child)
      case Distinct(child) if child.output.forall(equalAsBytes) =>
        eval(child).map(in => project(child.output, child.output, in).distinct)
      case u: Union if !u.byName && !u.allowMissingCol =>
        val parts = u.children.map(eval)
        if (parts.exists(_.isEmpty)) None
        else Some(parts.flatten.flatten).filter(_.size <= maxRows)
      // DISTINCT, and functions Spark declares as expressions over a buffer (COUNT, SUM, AVG, MIN ...).
      case Aggregate(groups, outputs, child, _)
          if (groups ++ outputs).forall(_.deterministic) && groups.forall(equalAsBytes) =>
        eval(child).flatMap(aggregate(groups, outputs, child.output, _)).filter(_.size <= maxRows)
      // A generator is a flatMap of its child's rows (LATERAL VIEW explode, posexplode, inline ...).
      case g: Generate if g.generator.deterministic =>
        eval(g.child).map { in =>
          val generator = BindReferences.bindReference(g.generator: Expression, g.child.output).asInstanceOf[Generator]
          lazy val none = new GenericInternalRow(g.generatorOutput.length)
          val joined = in.flatMap { row =>
            val made = generator.eval(row).iterator.map(_.copy()).toSeq
            (if (made.isEmpty && g.outer) Seq(none) else made).map(m => new JoinedRow(row, m): InternalRow)
          }
          project(g.output, g.child.output ++ g.qualifiedGeneratorOutput, joined)
        }.filter(_.size <= maxRows)
      case j: Join if j.condition.forall(_.deterministic) && (j.joinType match {
            case Inner | LeftOuter | LeftSemi | LeftAnti | ExistenceJoin(_) => true
            case _ => false
          }) =>
        for {
          left <- eval(j.left)
          right <- eval(j.right)
          out <- join(j, left, right) if out.size <= maxRows
        } yield project(j.output, j.output, out)
      case _ => None
    }

    /**
   * A hash join on the equi-join keys (a key with a NULL matches nothing, as in Spark's hash
   * joins; Spark's null-safe keys never are NULL), the rest of the condition tested per pair;
   * without equi-join keys, every pair tested (a NOT IN's null-aware condition included), up to
   * [[NestedLoopMaxPairs]] pairs. The right side is hashed, unless it is the left's rows that
   * are fixed (an inner join then probes their index with the right side's rows).
   */
    private def join(j: Join, left: Seq[InternalRow], right: Seq[InternalRow]): Option[Seq[InternalRow]] = {
      val (lk, rk, other) = j match {
        case ExtractEquiJoinKeys(_, l, r, o, _, _, _, _) => (l, r, o)
        case _ => (Nil, Nil, j.condition)
      }
      if (lk.isEmpty && left.size.toLong * right.size > NestedLoopMaxPairs) return None
      if (!(lk ++ rk).forall(equalAsBytes)) return None
      val test = other.map(c =>
        Predicate.createInterpreted(BindReferences.bindReference(c, j.left.output ++ j.right.output)))
      val leftKeys = lk.map(BindReferences.bindReference(_, j.left.output))
      val rightKeys = rk.map(BindReferences.bindReference(_, j.right.output))
      def pass(l: InternalRow, r: InternalRow): Boolean = test.forall(_.eval(new JoinedRow(l, r)))
      if (j.joinType == Inner && lk.nonEmpty && fixed.contains(left) && !fixed.contains(right)) {
        val byKey = fixed.index(left, leftKeys).get
        val rightKey = InterpretedUnsafeProjection.createProjection(rightKeys)
        return Some(right.flatMap { r =>
          val key = rightKey(r)
          val candidates = if (key.anyNull) Nil else byKey.getOrElse(key, Nil)
          candidates.iterator.filter(pass(_, r)).map(l => new JoinedRow(l, r): InternalRow)
        })
      }
      val leftKey = InterpretedUnsafeProjection.createProjection(leftKeys)
      val byKey = fixed.index(right, rightKeys).getOrElse(index(right, rightKeys))
      def matches(l: InternalRow): Iterator[InternalRow] = {
        val key = leftKey(l)
        val candidates = if (key.anyNull) Iterator.empty else byKey.getOrElse(key, Nil).iterator
        if (test.isEmpty) candidates else candidates.filter(pass(l, _))
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
