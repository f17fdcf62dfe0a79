package io.sparkivm.access

import java.util.Locale

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.planner.JoinBlock
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Equality, ExprId, Expression, PredicateHelper}
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * A view's CQAP and where its parts are in the view's plan: atom i is `units(i)` (a table
 * occurrence under filters and projections) under `selections(i)`, its variables the columns
 * `atomColumns(i)`; view column j carries the variable `columnVars(j)` (None: an aggregate).
 */
case class CqapBinding(query: Cqap, units: Seq[LogicalPlan], atomColumns: Seq[Seq[(String, Attribute)]],
    selections: Seq[Seq[Expression]], columnVars: Seq[Option[String]])

/**
 * A view's query as a CQAP (Zhang 2022, section 2.1): its table occurrences are the atoms, the
 * columns that inner-join equalities make equal are one variable, the view's columns named by
 * ACCESS BY are the inputs and its other columns that carry a variable (a table column or a
 * group key) are the outputs; aggregates are the values summed over the bound variables.
 */
object AccessPatterns extends PredicateHelper {

  /** The CQAP of a view's query (as maintained: CTEs inlined, subqueries rewritten), or why it is none. */
  def cqap(plan: LogicalPlan, columns: Seq[String], accessBy: Seq[String]): Either[String, Cqap] =
    bind(plan, columns, accessBy).map(_.query)

  /** The CQAP of a view's query with what each atom and view column is in the plan, or why it is none. */
  def bind(plan: LogicalPlan, columns: Seq[String], accessBy: Seq[String]): Either[String, CqapBinding] = {
    val body = bodyOf(plan)
    val block = JoinBlock.of(body)
    val units: Seq[LogicalPlan] = block.map(_.units.toSeq).getOrElse(Seq(body))
    val conditions: Seq[Expression] = block.map(_.conditions).getOrElse(Nil)
    units.find(u => JoinBlock.leafColumns(u).isEmpty).foreach { u =>
      return Left(s"it reads ${u.nodeName} where an access pattern needs a table: access patterns classify " +
        "conjunctive queries (inner equi-joins of tables, filters, projections, GROUP BY)")
    }
    val unitOf: Map[ExprId, Int] = units.zipWithIndex.flatMap { case (u, i) => u.output.map(_.exprId -> i) }.toMap
    // Variables: the classes of columns that equalities between units make equal.
    val parent = mutable.Map[ExprId, ExprId]()
    def find(e: ExprId): ExprId = parent.get(e) match {
      case Some(p) if p != e => val r = find(p); parent(e) = r; r
      case _ => e
    }
    conditions.foreach { c =>
      val touched = c.references.flatMap(a => unitOf.get(a.exprId)).toSet
      c match {
        case Equality(a: Attribute, b: Attribute) if unitOf.contains(a.exprId) && unitOf.contains(b.exprId) =>
          parent(find(a.exprId)) = find(b.exprId)
        case _ if touched.size > 1 =>
          return Left(s"the join condition ${c.sql} is not an equality of columns")
        case _ => // a selection on one table: it does not change the query's hypergraph
      }
    }
    // The view's columns: each a variable (through aliases and group keys) or an aggregate value.
    val aliases = mutable.Map[ExprId, Expression]()
    plan.foreach(_.expressions.foreach(_.foreach {
      case a: Alias => aliases(a.exprId) = a.child
      case _ =>
    }))
    def origin(e: Expression): Expression = e match {
      case a: Attribute if !unitOf.contains(a.exprId) && aliases.contains(a.exprId) => origin(aliases(a.exprId))
      case other => other
    }
    val columnVar: Seq[Option[ExprId]] = plan.output.zip(columns).map { case (out, name) =>
      origin(out) match {
        case a: Attribute if unitOf.contains(a.exprId) => Some(find(a.exprId))
        case e if e.exists(_.isInstanceOf[AggregateExpression]) => None
        case e => return Left(s"column $name is computed (${e.sql}): an access pattern classifies columns that are " +
            "table columns or group keys")
      }
    }
    val lower = columns.map(_.toLowerCase(Locale.ROOT))
    val inputIds = accessBy.map(c => columnVar(lower.indexOf(c.toLowerCase(Locale.ROOT)))).map(
      _.getOrElse(return Left(s"an input column is an aggregate's value, not a variable"))).toSet
    val freeIds = columnVar.flatten.toSet
    // Names: a free variable by its first view column, a bound one by its first table column.
    val leafNames = units.map(u => JoinBlock.leafColumns(u).get)
    def tableColumn(e: ExprId): String = {
      val i = unitOf(e)
      s"${leafNames(i)._1.table.table}.${leafNames(i)._2.getOrElse(e, "?")}"
    }
    val members: Map[ExprId, Seq[ExprId]] = unitOf.keys.toSeq.groupBy(find)
    val varName: Map[ExprId, String] = members.keys.map { v =>
      val col = columnVar.indexOf(Some(v))
      v -> (if (col >= 0) columns(col) else members(v).map(tableColumn).min)
    }.toMap
    // A bound variable in one atom only is summed out within its atom: it changes no class or width.
    def relevant(v: ExprId): Boolean = freeIds.contains(v) || members(v).map(unitOf).distinct.size > 1
    val counts = mutable.Map[String, Int]()
    val atoms = units.indices.map { i =>
      val table = leafNames(i)._1.table.table
      val n = counts.getOrElse(table, 0) + 1
      counts(table) = n
      Atom(if (n == 1) table else s"$table#$n",
        units(i).output.map(a => find(a.exprId)).filter(relevant).map(varName).toSet)
    }
    val atomColumns = units.indices.map { i =>
      units(i).output.filter(a => relevant(find(a.exprId))).map(a => varName(find(a.exprId)) -> a)
    }
    // Conditions over one unit are its selections; equalities between units are the joins.
    // Without a join the filters were taken off with the projections: each is then the unit's.
    val selections = if (block.isDefined) units.indices.map(i =>
      conditions.filter(c =>
        c.references.nonEmpty && c.references.forall(a => unitOf.get(a.exprId).contains(i))))
    else Seq(plan.collect { case Filter(c, _) => splitConjunctivePredicates(c) }.flatten)
    Right(CqapBinding(Cqap(atoms, inputIds.map(varName), (freeIds -- inputIds).map(varName)), units, atomColumns,
        selections, columnVar.map(_.map(varName))))
  }

  /** The joins under the view's projections, filters, DISTINCT and (one) GROUP BY. */
  private def bodyOf(plan: LogicalPlan, grouped: Boolean = false): LogicalPlan = plan match {
    case Project(_, c) if JoinBlock.of(plan).isEmpty => bodyOf(c, grouped)
    case Filter(_, c) if JoinBlock.of(plan).isEmpty => bodyOf(c, grouped)
    case Sort(_, _, c, _) => bodyOf(c, grouped)
    case SubqueryAlias(_, c) => bodyOf(c, grouped)
    case v: View => bodyOf(v.child, grouped)
    case Distinct(c) if !grouped => bodyOf(c, grouped)
    case a: Aggregate if !grouped => bodyOf(a.child, grouped = true)
    case other => other
  }

  /** The classification of a view's query under its access pattern, or why it has none. */
  def analysis(plan: LogicalPlan, columns: Seq[String], accessBy: Seq[String]): Either[String, CqapAnalysis] =
    try cqap(plan, columns, accessBy).map(CqapAnalysis.of)
    catch {
      // A shape this analysis does not expect is reported, never a failed DESCRIBE or EXPLAIN.
      case NonFatal(e) => Left(s"the query's shape is not analyzed (${e.getMessage})")
    }

  /** One line: the class and widths, or why the query is not classified. */
  def summary(result: Either[String, CqapAnalysis]): String = result match {
    case Right(a) => a.cls.name + a.widths.map { case (w, d) => s" (w = $w, delta = $d)" }.getOrElse("") +
        s", ${a.components.size} fracture component${if (a.components.size == 1) "" else "s"}"
    case Left(why) => s"not classified: $why"
  }

  /** The access pattern of a view as CREATE validates it: existing columns, each once. */
  def check(columns: Seq[String], accessBy: Seq[String]): Option[String] = {
    val lower = columns.map(_.toLowerCase(Locale.ROOT))
    val named = accessBy.map(_.toLowerCase(Locale.ROOT))
    named.find(c => !lower.contains(c)).map(c => s"the view has no column $c (its columns: ${columns.mkString(", ")})")
      .orElse(named.diff(named.distinct).headOption.map(c => s"column $c is named twice"))
  }
}
