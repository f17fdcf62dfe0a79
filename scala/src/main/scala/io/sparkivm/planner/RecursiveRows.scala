package io.sparkivm.planner

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.expressions.{
  Alias, Attribute, AttributeReference, Cast, ExprId, GreaterThan, Literal
}
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types.LongType

/**
 * Recursive CTEs (`WITH RECURSIVE r AS (A UNION ALL B(r)) ...`), maintained by counting. Spark
 * evaluates r as the bag R = A + B(A) + B(B(A)) + ..., where B reads r once, through projections,
 * filters, inner joins, UNION ALL and generators: B is linear in R (each row of R makes its rows
 * of B(R) alone). After a change, R' = A' + B'(R') with the tables at Post, so the change
 * D = R' - R satisfies
 *
 *   D = S0 + B'(D),   S0 = D(A) + (B'(R) - B(R))
 *
 * since B'(R + D) = B'(R) + B'(D). S0 is the anchor's delta plus B's delta over its tables with r
 * held at its rows before the refresh; D is then a recursion of its own ([[DeltaRules]]), seeded
 * with S0 and stepping through the change only, each row carrying its sign. This is the counting
 * algorithm of Gupta, Mumick & Subrahmanian (1993) applied to a recursive view, which it allows
 * when every row has finitely many derivations: here exactly when Spark's own evaluation of the
 * query ends. Deletions need no rederivation: a row's count is the number of its derivations,
 * and a deleted derivation subtracts one.
 *
 * R before the refresh is read from the view itself, so r must be what the view keeps:
 * `SELECT [DISTINCT] <r's columns> FROM r`, the multiplicity of each row in `__ivm_count`.
 */
object RecursiveRows {

  /** The name of a recursive CTE in messages. */
  val Name = "A recursive CTE"

  /**
   * Refuses recursive CTEs that the delta above does not maintain: r not kept as it is by the
   * view, B not linear in r, a recursion with its own limit, time filters.
   */
  def check(shape: ViewShape): Unit = {
    val loops = shape.top.collect { case u: UnionLoop => u }
    if (loops.isEmpty) return
    if (loops.size > 1 || kept(shape).isEmpty) {
      throw IvmErrors.unsupported(s"$Name under ${above(shape)}",
        "A refresh reads the recursive rows as they were from the view itself, so the view must keep " +
          "them as they are: SELECT [DISTINCT] with each of the CTE's columns, FROM the CTE alone. " +
          "Define that view, and aggregate or filter it in a view (or a query) over it.")
    }
    val u = loops.head
    if (u.limit.isDefined || u.maxDepth.isDefined) {
      throw IvmErrors.unsupported(s"$Name with a LIMIT or a MAX RECURSION LEVEL",
        "Its rows depend on the order in which the recursion found them; drop the limit.")
    }
    val refs = u.recursion.collect { case r: UnionLoopRef if r.loopId == u.id => r }
    if (refs.size != 1 || refs.head.accumulated || !linear(u.recursion, u.id)) {
      throw IvmErrors.unsupported(
        s"$Name whose recursive part reads it other than once through " +
          "projections, filters, inner joins, UNION ALL and generators",
        "Only such a recursion is linear in its rows, which counting maintains.")
    }
    if (TimeFilters.instantOf(shape.top).isDefined) {
      throw IvmErrors.unsupported(s"$Name with a time filter",
        "Move the time filter into a view over the recursive one.")
    }
  }

  /**
   * The recursive CTE the view keeps as it is, and for each of its columns the view column that
   * holds it; None for any other view.
   */
  def kept(shape: ViewShape): Option[(UnionLoop, Seq[Int])] = shape match {
    case r: RowsShape => columnsOf(r.rows).flatMap { case (u, ids) =>
        val at = u.output.map(a => ids.indexOf(a.exprId))
        if (at.contains(-1)) None else Some((u, at))
      }
    case _ => None
  }

  /** For projections of bare columns over a recursive CTE: the CTE, and the column each output is. */
  private def columnsOf(p: LogicalPlan): Option[(UnionLoop, Seq[ExprId])] = p match {
    case u: UnionLoop => Some((u, u.output.map(_.exprId)))
    case SubqueryAlias(_, c) => columnsOf(c)
    case v: View => columnsOf(v.child)
    case Project(list, c) => columnsOf(c).flatMap { case (u, ids) =>
        val byId = c.output.map(_.exprId).zip(ids).toMap
        val mapped = list.map {
          case a: Attribute => byId.get(a.exprId)
          case Alias(a: Attribute, _) => byId.get(a.exprId)
          case _ => None
        }
        if (mapped.forall(_.isDefined)) Some((u, mapped.flatten)) else None
      }
    case _ => None
  }

  /**
   * R before the refresh, from the view's backing rows `backing` (read as the view last wrote
   * them): its rows with weight `__ivm_count`, output as `loop.output` followed by the weight.
   */
  def rowsAtPre(loop: UnionLoop, columnAt: Seq[Int], storage: Seq[String],
      backing: LogicalPlan): (LogicalPlan, Attribute) = {
    def column(name: String) = backing.output.find(_.name == name).getOrElse(
      throw IvmErrors.internal(s"the backing table has no column $name"))
    val count = column(ViewMaintenance.CountColumn)
    val w = AttributeReference("__ivm_w", LongType, nullable = false)()
    val rows = loop.output.zip(columnAt).map { case (a, i) =>
      Alias(Cast(column(storage(i)), a.dataType), a.name)(exprId = a.exprId)
    }
    (Project(rows :+ Alias(count, w.name)(exprId = w.exprId), Filter(GreaterThan(count, Literal(0L)), backing)), w)
  }

  /**
   * `plan` with a new id for each attribute its projections name. The branches of a recursion's
   * delta read the tables under the ids of the view's occurrences, and name the sign alike;
   * Spark's analyzer takes two parts of a loop that name the same attribute for a self-join to
   * rewrite, and loses references above the rewrite. The loop's reference keeps its ids.
   */
  def freshIds(plan: LogicalPlan): LogicalPlan = plan.transformUpWithNewOutput {
    case p @ Project(list, _) if list.exists(_.isInstanceOf[Alias]) =>
      val renamed = p.copy(projectList = list.map {
        case a: Alias => a.newInstance()
        case other => other
      })
      (renamed, p.output.zip(renamed.output).filter { case (a, b) => a.exprId != b.exprId })
  }

  /** True if every node from `plan` down to the reference of loop `id` passes its rows linearly. */
  private def linear(plan: LogicalPlan, id: Long): Boolean = {
    def reads(p: LogicalPlan) = p.exists {
      case r: UnionLoopRef => r.loopId == id
      case _ => false
    }
    if (!reads(plan)) true
    else plan match {
      case _: UnionLoopRef => true
      case _: Project | _: Filter | _: SubqueryAlias | _: View | _: Union | _: Generate =>
        plan.children.forall(linear(_, id))
      case j: Join if j.joinType == Inner => j.children.forall(linear(_, id))
      case _ => false
    }
  }

  private def above(shape: ViewShape): String = shape match {
    case a: AggregateShape => s"an aggregate (${a.kind})"
    case _ => "a filter, a join or an expression"
  }
}
