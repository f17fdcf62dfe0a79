package io.sparkivm.execution

import scala.util.control.NonFatal

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, BindReferences, Expression,
  InterpretedUnsafeProjection, NamedExpression, Predicate, UnsafeRow}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Filter, LocalRelation, LogicalPlan, Project,
  Union}

/**
 * Evaluates a small optimized plan on the driver, without a Spark job, when it reads only rows
 * held here ([[RefreshSteps.local]]) through projections, filters, unions and DISTINCT (which the
 * optimizer plans as an aggregate without aggregate functions): the keys a change touches, whose
 * plan is a DISTINCT over the union of changes held on the driver. Spark folds only projections
 * and filters of a local relation (`ConvertToLocalRelation`); each of these would otherwise be a
 * job with a shuffle. Expressions are interpreted (no code is generated for a few rows); None for
 * any other plan, or any expression that is not deterministic or cannot be interpreted.
 */
object LocalEval {
  def rows(plan: LogicalPlan, maxRows: Int): Option[Seq[InternalRow]] =
    try eval(plan, maxRows) catch { case NonFatal(_) => None }

  private def eval(plan: LogicalPlan, maxRows: Int): Option[Seq[InternalRow]] = plan match {
    case l: LocalRelation => Some(l.data).filter(_.size <= maxRows)
    case Project(list, child) if list.forall(_.deterministic) =>
      eval(child, maxRows).map(project(list, child.output, _))
    case Filter(cond, child) if cond.deterministic =>
      eval(child, maxRows).map { in =>
        val predicate = Predicate.createInterpreted(BindReferences.bindReference(cond, child.output))
        in.filter(predicate.eval)
      }
    case u: Union if !u.byName && !u.allowMissingCol =>
      val parts = u.children.map(eval(_, maxRows))
      if (parts.exists(_.isEmpty)) None
      else Some(parts.flatten.flatten).filter(_.size <= maxRows)
    // DISTINCT: every output is a grouping expression.
    case Aggregate(groups, outputs, child, _) if groups.forall(_.deterministic) && outputs.forall(isGroup(_, groups)) =>
      eval(child, maxRows).map { in =>
        // UnsafeRows compare by their bytes: equal keys are equal rows.
        val named = groups.map(asNamed)
        val keys = project(named, child.output, in).distinct
        val keyAttrs = named.map(_.toAttribute)
        project(outputs.map(o => rebind(o, groups, keyAttrs)), keyAttrs, keys)
      }
    case _ => None
  }

  private def project(list: Seq[Expression], input: Seq[Attribute], rows: Seq[InternalRow]): Seq[InternalRow] = {
    val projection = InterpretedUnsafeProjection.createProjection(list.map(BindReferences.bindReference(_, input)))
    rows.map(r => projection(r).copy(): UnsafeRow)
  }

  private def asNamed(e: Expression): NamedExpression = e match {
    case n: NamedExpression => n
    case other => Alias(other, "k")()
  }

  private def isGroup(e: Expression, groups: Seq[Expression]): Boolean =
    groups.exists(_.semanticEquals(e)) || (e match {
      case Alias(c, _) => isGroup(c, groups)
      case _ => false
    })

  /** An output over the grouping expressions, rewritten over the evaluated keys. */
  private def rebind(e: Expression, groups: Seq[Expression], keys: Seq[Attribute]): Expression =
    e.transformDown {
      case g if groups.exists(_.semanticEquals(g)) => keys(groups.indexWhere(_.semanticEquals(g)))
    }
}
