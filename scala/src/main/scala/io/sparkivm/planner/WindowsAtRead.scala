package io.sparkivm.planner

import java.util.Locale

import scala.collection.mutable

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.types.DataType

/**
 * Window functions without PARTITION BY at the top of a view's query: a global `rank()`,
 * `row_number()`, running total or `ntile`, with what projects or filters them above (`WHERE rk
 * <= 10`). One row in or out can move every row's window value (every rank below it shifts), so
 * no refresh could cost the change if the view stored those values. The view stores instead the
 * rows under the lowest such window, maintained like any view's, and its catalog view computes
 * the windows and everything above them when it is read: a refresh costs what changed, and a
 * read sorts the kept rows once instead of recomputing the query from its tables.
 *
 * @param rowColumns the kept rows' columns (the query under the windows), unique names
 * @param rowTypes   their types
 * @param select     what a read applies, as SQL over a relation [[Rows]] of those columns,
 *                   giving the view's columns
 * @param columns    the view's columns
 * @param types      their types, as the query gives them
 * @param functions  the window functions, as SQL (for DESCRIBE and EXPLAIN)
 * @param query      the query, as analyzed: what a read must compute again
 * @param rows       its plan of the kept rows
 */
case class WindowsAtRead(rowColumns: Seq[String], rowTypes: Seq[DataType], select: String,
    columns: Seq[String], types: Seq[DataType], functions: Seq[String])(query: LogicalPlan, rows: LogicalPlan) {

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
  def sql(rows: String): String = s"WITH ${WindowsAtRead.Rows} AS ($rows) $select"

  def describe: String =
    s"${functions.mkString(", ")}, computed when the view is read (the backing table keeps the rows " +
      "under them, and a window without PARTITION BY depends on every one)"
}

/** A column of the relation a read part reads, by its name, always quoted (a keyword is a name). */
private case class ColumnName(name: String, dataType: DataType) extends LeafExpression with Unevaluable {
  override def nullable: Boolean = true
  override def sql: String = ViewMaintenance.quote(name)
}

object WindowsAtRead {

  /** The relation the read part reads the kept rows from. */
  val Rows = "__ivm_rows"

  /**
   * The rows under the lowest window without PARTITION BY in the chain of projections, filters
   * and windows at the top of `plan`, and what a read applies above them; `plan` itself and None
   * where the chain has no such window. `columns` are the view's column names.
   */
  def split(plan: LogicalPlan, columns: Seq[String]): (LogicalPlan, Option[WindowsAtRead]) = {
    val chain = topChain(plan)
    val lowest = chain.lastIndexWhere {
      case w: Window => w.partitionSpec.isEmpty
      case _ => false
    }
    if (lowest < 0) return (plan, None)
    val above = chain.take(lowest + 1)
    above.foreach(check)
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
        val name = names.getOrElse(a.exprId, throw IvmErrors.internal(s"no column for ${a.sql} above the windows"))
        if (read) ColumnName(name, a.dataType) else a.withName(name).withQualifier(Nil)
      // Spark gives a ranking function its window's ORDER BY as arguments; the SQL takes none.
      case r: RankLike => r.withOrder(Nil)
    }.sql
    def named(e: NamedExpression): (String, String) = e match {
      case a: Attribute => (render(a), names(a.exprId))
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
        case _ => from
      }
    }
    val select = s"SELECT ${list(plan.output.map(a => ViewMaintenance.quote(names(a.exprId))).zip(columns))} " +
      s"FROM ($from) AS ${fresh()}"
    val functions = above.collect { case w: Window => w.windowExpressions.map(e => render(unalias(e), read = false)) }
      .reverse.flatten
    (rows,
      Some(WindowsAtRead(rowColumns, rows.output.map(_.dataType), select, columns,
          plan.output.map(_.dataType), functions)(plan, rows)))
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
  private def check(p: LogicalPlan): Unit = p.expressions.foreach { e =>
    if (e.exists(_.isInstanceOf[SubqueryExpression])) {
      throw IvmErrors.unsupported("A subquery above a window function without PARTITION BY",
        "The view computes such a window when it is read, and a read does not read the tables: compute the " +
          "subquery below the window.")
    }
    e.find(x => TimeFilters.readsTime(x) || PlanValidator.contextDependent(x)).foreach { x =>
      throw IvmErrors.unsupported(s"The function ${x.prettyName}() above a window function without PARTITION BY",
        "The view computes such a window when it is read, and a read would see its own time and user: " +
          "compute it below the window.")
    }
    if (!e.deterministic) {
      throw IvmErrors.unsupported(s"The non-deterministic expression ${e.sql} above a window without PARTITION BY",
        "Compute it when reading the view.")
    }
    e.find(x => x.isInstanceOf[UserDefinedExpression] || x.isInstanceOf[VariableReference]).foreach { x =>
      throw IvmErrors.unsupported(s"${x.prettyName} above a window function without PARTITION BY",
        "The view computes such a window when it is read, and a view's definition cannot name a function " +
          "or variable of a session: compute it below the window.")
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
