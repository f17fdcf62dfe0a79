package io.sparkivm.planner

import java.util.Locale

import scala.collection.mutable

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types.DataType

/**
 * What a view computes when it is read, over rows its backing table keeps and maintains like any
 * view's:
 *  - window functions without PARTITION BY at the top of its query: a global `rank()`,
 *    `row_number()`, running total or `ntile`, with what projects or filters them above (`WHERE
 *    rk <= 10`). One row in or out can move every row's window value (every rank below it
 *    shifts), so no refresh could cost the change if the view stored those values. The view
 *    keeps the rows under the lowest such window;
 *  - the aggregates, filters, projections and windows over a recursive CTE (`SELECT src,
 *    count(*) FROM reach GROUP BY src`). A refresh derives the recursion's change from its rows
 *    before the refresh ([[RecursiveRows]]), so the view keeps those rows, as a view of the
 *    CTE alone would.
 * A refresh costs what changed, and a read computes the rest over the kept rows once instead of
 * recomputing the query from its tables.
 *
 * @param rowColumns the kept rows' columns (the query under the windows), unique names
 * @param rowTypes   their types
 * @param select     what a read applies, as SQL over a relation [[Rows]] of those columns,
 *                   giving the view's columns
 * @param columns    the view's columns
 * @param types      their types, as the query gives them
 * @param functions  the window functions (or the aggregates over the recursion), as SQL (for
 *                   DESCRIBE and EXPLAIN)
 * @param recursive  true if the kept rows are a recursive CTE's
 * @param query      the query, as analyzed: what a read must compute again
 * @param rows       its plan of the kept rows
 */
case class ComputedAtRead(rowColumns: Seq[String], rowTypes: Seq[DataType], select: String,
    columns: Seq[String], types: Seq[DataType], functions: Seq[String], recursive: Boolean = false)(
    query: LogicalPlan, rows: LogicalPlan) {

  /**
   * The query with the rows under its windows read from `leaf` (a relation of [[rowColumns]]),
   * and without its top-level ORDER BY: what [[select]] over `leaf` must compute.
   */
  def queryOver(leaf: LogicalPlan): LogicalPlan = query.transformDown {
    case p if p eq rows =>
      Project(rows.output.zip(leaf.output).map { case (a, l) => Alias(l, a.name)(exprId = a.exprId) }, leaf)
    case s: Sort if s.global => s.child
  }

  /** The catalog view's query, given the kept rows' query over the backing table. */
  def sql(rows: String): String = s"WITH ${ComputedAtRead.Rows} AS ($rows) $select"

  /** The row of DESCRIBE and EXPLAIN that says what a read computes. */
  def label: String = if (recursive) "Computed at read" else "Windows"

  def describe: String =
    if (!recursive) {
      s"${functions.mkString(", ")}, computed when the view is read (the backing table keeps the rows " +
        "under them, and a window without PARTITION BY depends on every one)"
    } else {
      (if (functions.isEmpty) "the query over the recursive CTE" else functions.mkString(", ")) +
        ", computed when the view is read (the backing table keeps the recursive CTE's rows, whose " +
        "change each refresh derives from them)"
    }
}

/** A column of the relation a read part reads, by its name, always quoted (a keyword is a name). */
private case class ColumnName(name: String, dataType: DataType) extends LeafExpression with Unevaluable {
  override def nullable: Boolean = true
  override def sql: String = ViewMaintenance.quote(name)
}

object ComputedAtRead {

  /** The relation the read part reads the kept rows from. */
  val Rows = "__ivm_rows"

  /**
   * The rows under the lowest window without PARTITION BY in the chain of projections, filters
   * and windows at the top of `plan`, else a recursive CTE's rows under what computes more than
   * a choice of their columns ([[recursionChain]]), and what a read applies above them; `plan`
   * itself and None where there is neither. `columns` are the view's column names.
   */
  def split(plan: LogicalPlan, columns: Seq[String]): (LogicalPlan, Option[ComputedAtRead]) = {
    val chain = topChain(plan)
    val lowest = chain.lastIndexWhere {
      case w: Window => w.partitionSpec.isEmpty
      case _ => false
    }
    val overRecursion = if (lowest >= 0) None else recursionChain(plan)
    if (lowest < 0 && overRecursion.isEmpty) return (plan, None)
    val above = overRecursion.getOrElse(chain.take(lowest + 1))
    val what = if (overRecursion.isDefined) "a recursive CTE" else "a window function without PARTITION BY"
    above.foreach(check(_, what))
    val rows = above.last.children.head
    val rowColumns = unique(rows.output.map(_.name))
    val names = mutable.Map[ExprId, String]() ++ rows.output.map(_.exprId).zip(rowColumns)
    val taken = rowColumns.map(_.toLowerCase(Locale.ROOT)).toSet
    var next = 0
    def fresh(): String = {
      next += 1
      while (taken.contains(s"__ivm_v$next")) next += 1
      s"__ivm_v$next"
    }
    // For a read, every name quoted; for DESCRIBE, only where it must be.
    def render(e: Expression, read: Boolean = true): String = e.transformDown {
      case a: AttributeReference =>
        val name = names.getOrElse(a.exprId, throw IvmErrors.internal(s"no column for ${a.sql} above the kept rows"))
        if (read) ColumnName(name, a.dataType) else a.withName(name).withQualifier(Nil)
      // Spark gives a ranking function its window's ORDER BY as arguments; the SQL takes none.
      case r: RankLike => r.withOrder(Nil)
    }.sql
    def named(e: NamedExpression): (String, String) = e match {
      case a: Attribute => (render(a), names(a.exprId))
      // A column aliased to its own name keeps it where nothing else takes it: the optimizer
      // drops such an alias from the query's plan, and so must it from the read's.
      case Alias(a: Attribute, name)
          if names.get(a.exprId).exists(_.equalsIgnoreCase(name)) &&
            !names.exists { case (id, n) => n == names(a.exprId) && id != a.exprId } =>
        names(e.exprId) = names(a.exprId)
        (render(a), names(a.exprId))
      case other =>
        val n = fresh()
        names(other.exprId) = n
        (render(other match { case Alias(c, _) => c; case x => x }), n)
    }
    def list(items: Seq[(String, String)]): String =
      items.map { case (e, n) => s"$e AS ${ViewMaintenance.quote(n)}" }.mkString(", ")
    val from = above.reverse.foldLeft(s"SELECT * FROM $Rows") { (from, node) =>
      val relation = s"($from) AS ${fresh()}"
      node match {
        case w: Window => s"SELECT *, ${list(w.windowExpressions.map(named))} FROM $relation"
        case p: Project =>
          s"SELECT ${list(p.projectList.map(named).distinct)} FROM $relation"
        case f: Filter => s"SELECT * FROM $relation WHERE ${render(f.condition)}"
        case a: Aggregate =>
          val groups = if (a.groupingExpressions.isEmpty) ""
          else a.groupingExpressions.map(render(_)).mkString(" GROUP BY ", ", ", "")
          s"SELECT ${list(a.aggregateExpressions.map(named).distinct)} FROM $relation$groups"
        case _ => from
      }
    }
    val select = s"SELECT ${list(plan.output.map(a => ViewMaintenance.quote(names(a.exprId))).zip(columns))} " +
      s"FROM ($from) AS ${fresh()}"
    val functions = above.collect {
      case w: Window => w.windowExpressions.map(e => render(unalias(e), read = false))
      case a: Aggregate => a.aggregateExpressions.filter(_.exists(_.isInstanceOf[AggregateExpression]))
          .map(e => render(unalias(e), read = false))
    }.reverse.flatten.distinct
    (rows,
      Some(ComputedAtRead(rowColumns, rows.output.map(_.dataType), select, columns,
          plan.output.map(_.dataType), functions, overRecursion.isDefined)(plan, rows)))
  }

  /**
   * The chain of aggregates, filters, projections and windows from the top of `p` down to a
   * recursive CTE's rows (under the CTE's names for its columns), where it computes more than a
   * choice of those columns: a view of those alone keeps them as they are ([[RecursiveRows.kept]]).
   */
  private def recursionChain(p: LogicalPlan): Option[List[LogicalPlan]] = {
    def down(q: LogicalPlan): Option[List[LogicalPlan]] = q match {
      case _: UnionLoop => Some(Nil)
      case _: Project | _: Filter | _: Window | _: Aggregate => down(q.children.head).map(q :: _)
      case s: Sort if s.global => down(s.child).map(s :: _)
      case s: SubqueryAlias => down(s.child).map(s :: _)
      case v: View if !v.isTempView => down(v.child).map(v :: _)
      case _ => None
    }
    def renames(q: LogicalPlan) = q match {
      case _: SubqueryAlias | _: View => true
      case Project(list, _) => list.forall {
          case _: Attribute | Alias(_: Attribute, _) => true
          case _ => false
        }
      case _ => false
    }
    // The CTE's own names for its columns (its column list) belong to the kept rows.
    down(p).map(_.reverse.dropWhile(renames).reverse).filter(_.exists(!renames(_)))
  }

  /** Projections, filters and windows from the top of `p` down, through aliases. */
  private def topChain(p: LogicalPlan): List[LogicalPlan] = p match {
    case _: Project | _: Filter | _: Window => p :: topChain(p.children.head)
    // An ORDER BY without LIMIT: a table has no order.
    case s: Sort if s.global => s :: topChain(s.child)
    case s: SubqueryAlias => s :: topChain(s.child)
    case v: View if !v.isTempView => v :: topChain(v.child)
    case _ => Nil
  }

  /**
   * What a read may compute: the plan's own values, deterministically, without the tables, and
   * with what a permanent view may name (no temporary function or session variable). Whether
   * the SQL a read runs computes the same is checked against the query at CREATE
   * (`ViewAnalysis.requireReadable`).
   */
  private def check(p: LogicalPlan, what: String): Unit = p.expressions.foreach { e =>
    val below = if (what.startsWith("a window")) "below the window" else "in the recursive CTE"
    if (e.exists(_.isInstanceOf[SubqueryExpression])) {
      throw IvmErrors.unsupported(s"A subquery above $what",
        s"The view computes it when it is read, and a read does not read the tables: compute the subquery $below.")
    }
    e.find(x => TimeFilters.readsTime(x) || PlanValidator.contextDependent(x)).foreach { x =>
      throw IvmErrors.unsupported(s"The function ${x.prettyName}() above $what",
        s"The view computes it when it is read, and a read would see its own time and user: compute it $below.")
    }
    if (!e.deterministic) {
      throw IvmErrors.unsupported(s"The non-deterministic expression ${e.sql} above $what",
        "Compute it when reading the view.")
    }
    e.find(x => x.isInstanceOf[UserDefinedExpression] || x.isInstanceOf[VariableReference]).foreach { x =>
      throw IvmErrors.unsupported(s"${x.prettyName} above $what",
        "The view computes it when it is read, and a view's definition cannot name a function or variable " +
          s"of a session: compute it $below.")
    }
  }

  private def unalias(e: NamedExpression): Expression = e match {
    case Alias(c, _) => c
    case other => other
  }

  /** The names, made unique (case-insensitively) by a suffix. */
  private def unique(names: Seq[String]): Seq[String] = {
    val seen = mutable.Set[String]()
    names.map { n =>
      var candidate = n
      var i = 1
      while (!seen.add(candidate.toLowerCase(Locale.ROOT))) {
        i += 1
        candidate = s"${n}_$i"
      }
      candidate
    }
  }
}
