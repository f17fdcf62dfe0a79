package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.ivm.OnDriver

/**
 * The rows of one table, under filters over its own columns, counted per value of one column:
 * `SELECT key, count(*) FROM table WHERE filters GROUP BY key`. Such counts are all that a
 * semi, anti or existence join on `key` asks of its right side (a key matches while its count
 * is positive: the match counts of Larson & Zhou 2007 for outer joins), and all that the
 * integrity check of an FK edge x -> y asks of x (Wang & Yi 2020's reference counts
 * `I(R, Rc)`: how many rows of x reference a key of y). A refresh reads them for its changed
 * keys only, at Pre and at Post, instead of scanning the table for those keys.
 */
final case class CountedTable(leaf: SourceLeaf, filters: Seq[Expression], key: Attribute) {

  /**
   * What the counts are of, independent of the plan they were found in (attribute ids left
   * out): two views that count the same table the same way share them.
   */
  def definition: String = {
    // SQL text (literals quoted, types of casts named), and the session settings casts read.
    val named = filters.map(_.transform { case a: AttributeReference =>
      AttributeReference(a.name.toLowerCase(java.util.Locale.ROOT), a.dataType, a.nullable)(exprId = ExprId(0))
    }.sql).sorted
    s"${key.name.toLowerCase(java.util.Locale.ROOT)}|${named.mkString(" AND ")}|${CountedTable.sessionSemantics}"
  }

  def describe: String =
    s"rows of ${leaf.name} per ${key.name}" + (if (filters.isEmpty) "" else " (filtered)")
}

object CountedTable {

  /**
   * `plan` as one table under deterministic filters and projections, with `key` (an output of
   * `plan`) one of the table's columns passed through: the filters are then over the table's
   * own columns. None for any other shape.
   */
  def of(plan: LogicalPlan, key: Attribute): Option[CountedTable] = {
    def walk(p: LogicalPlan, key: Attribute, above: Seq[Expression]): Option[CountedTable] = p match {
      case SourceLeaf(leaf) =>
        leaf.output.find(_.exprId == key.exprId).filter(_ =>
          above.forall(_.references.subsetOf(
              AttributeSet(leaf.output)))).map(k => CountedTable(leaf, above, k))
      case SubqueryAlias(_, child) => walk(child, key, above)
      case v: View => walk(v.child, key, above)
      case Filter(cond, child) if plain(cond) => walk(child, key, above :+ cond)
      case Project(list, child) if list.forall(e => plain(e)) =>
        val aliases = KeyRestriction.aliases(list)
        val below = aliases.get(key) match {
          case Some(a: Attribute) => Some(a)
          case Some(_) => None
          case None => Some(key).filter(k => list.exists(_.exprId == k.exprId))
        }
        below.flatMap(k => walk(child, k, above.map(KeyRestriction.substitute(_, aliases))))
      case _ => None
    }
    walk(plan, key, Nil)
  }

  /**
   * What `plan` computes over its tables, independent of attribute ids and of the plan it was
   * found in, when its expressions are all [[plain]]: its canonical tree (attribute ids
   * normalized, no field left out) with the tables it reads in their order, and
   * [[sessionSemantics]]. Rows computed from the same definition at the same table versions are
   * the same rows.
   */
  def definition(plan: LogicalPlan): Option[String] =
    // A plan's text leaves out the rows of a VALUES list: such plans get no name either.
    if (plan.exists(p =>
        p.expressions.exists(e => !plain(e)) || (p match {
          case OnDriver(data) => data.nonEmpty
          case _ => false
        }))) None
    else {
      // Canonical plans keep their children's order but drop names: the tables are listed in it.
      val tables = plan.collect { case SourceLeaf(leaf) => leaf.table.unquotedString }
      val unnamed = plan.transformDown { case SourceLeaf(leaf) => LocalRelation(leaf.output) }
      val text = unnamed.canonicalized.treeString(verbose = true, maxFields = Int.MaxValue)
      Some(s"$text|${tables.mkString(",")}|$sessionSemantics")
    }

  /**
   * The session settings that change what an expression computes: the time zone (casts between
   * strings and timestamps) and ANSI mode (a cast that fails instead of giving NULL).
   */
  def sessionSemantics: String = {
    val conf = org.apache.spark.sql.internal.SQLConf.get
    s"${conf.sessionLocalTimeZone}|ansi=${conf.ansiEnabled}"
  }

  /** Deterministic, and nothing whose meaning a name would not fix (a subquery, a user's function). */
  private def plain(e: Expression): Boolean = e.deterministic && !SubqueryExpression.hasSubquery(e) &&
    !e.exists(_.isInstanceOf[UserDefinedExpression])
}

/** Counts of a [[CountedTable]] for some keys (external values), at Pre and at Post; 0 is left out. */
final case class KeyCounts(pre: Map[Any, Long], post: Map[Any, Long])
