package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions.{And, Attribute, AttributeSet, EqualTo, Expression, PredicateHelper}
import org.apache.spark.sql.catalyst.plans.logical._

/**
 * One relation occurrence of a triangle: the unit of the join block (a table occurrence with
 * its own filters, or any subtree) as the paper's K(X, Y), where X is the variable it shares
 * with the previous occurrence and the one it is partitioned on, and Y the one it shares with
 * the next (R(A,B), S(B,C), T(C,A); Kara et al. 2020, section 1).
 *
 * @param plan     the unit, with the conjuncts of the block that only it references on top
 * @param x        the partition column (A of R, B of S, C of T)
 * @param y        the column joined with the next occurrence's x
 * @param payload  other columns of the unit that the view reads above the join
 */
case class TriangleSide(name: String, plan: LogicalPlan, x: Attribute, y: Attribute,
    payload: Seq[Attribute]) {
  def columns: Seq[Attribute] = Seq(x, y) ++ payload
}

/**
 * A join block that is a triangle: three occurrences R(A,B), S(B,C), T(C,A) joined in a cycle
 * by equalities, each with optional filters of its own (Kara et al. 2020, section 1; the
 * common case is one edge table used three times). The block's result is
 * `Project(outputs, R x S x T)`; `needsY(i)` says whether the variable joining side i to side
 * i+1 is read above the join (when it is not, auxiliary views sum it out, as the paper's
 * V_RS(a, c) = sum_b R^H(a, b) S^L(b, c) does).
 */
case class TriangleQuery(block: JoinBlock, sides: IndexedSeq[TriangleSide], needed: AttributeSet) {
  def root: LogicalPlan = block.root
  def needsY(i: Int): Boolean =
    needed.contains(sides(i).y) || needed.contains(sides((i + 1) % 3).x)
  def describe: String = sides.map(s => s"${s.name}(${s.x.name}, ${s.y.name})").mkString(" x ")
}

object TriangleQuery extends PredicateHelper {

  /**
   * The triangle block of a view's plan, if it has one: the first join block met from the top
   * whose units are three and whose cross-unit conjuncts are exactly the three equalities of
   * a cycle, each unit using two different columns. `Left(why)` explains a cyclic block that
   * keeps the generic rule; `Right(None)` means the plan has no cyclic block at all.
   */
  def find(plan: LogicalPlan): Either[String, Option[TriangleQuery]] = {
    val blocks = collectBlocks(plan)
    blocks.headOption match {
      case None => Right(None)
      case Some(block) =>
        // What the view reads of the block: references above it, and the view's own output
        // when the block is its top (a view listing the triangles).
        val above = referencedAbove(plan, block.root) ++ plan.outputSet
        of(block, above) match {
          case Right(q) => Right(Some(q))
          case Left(why) if cyclic(block) => Left(why)
          case Left(_) => Right(None)
        }
    }
  }

  /** Maximal join blocks, outermost first. */
  private def collectBlocks(plan: LogicalPlan): Seq[JoinBlock] = JoinBlock.of(plan) match {
    case Some(b) => Seq(b)
    case None => plan.children.flatMap(collectBlocks)
  }

  /** Attributes read by the nodes above `root` (the view's projections, keys, aggregates). */
  private def referencedAbove(plan: LogicalPlan, root: LogicalPlan): AttributeSet =
    if (plan eq root) AttributeSet.empty
    else plan.children.foldLeft(plan.references) { case (acc, c) => acc ++ referencedAbove(c, root) }

  /** True if the units joined by cross-unit conjuncts contain a cycle. */
  private def cyclic(block: JoinBlock): Boolean = {
    val pairs = block.conditions.map(c => unitsOf(block, c)).filter(_.size == 2).map(_.toSeq.sorted).distinct
    // A graph on n nodes with at least n edges has a cycle; fewer may too, so check each component.
    val parent = Array.tabulate(block.units.size)(identity)
    def root(i: Int): Int = if (parent(i) == i) i else root(parent(i))
    pairs.exists {
      case Seq(a, b) =>
        val (ra, rb) = (root(a), root(b))
        if (ra == rb) true else { parent(ra) = rb; false }
      case _ => false
    }
  }

  private def unitsOf(block: JoinBlock, e: Expression): Set[Int] =
    e.references.toSeq.flatMap(block.unitOf).toSet

  def of(block: JoinBlock, above: AttributeSet): Either[String, TriangleQuery] = {
    if (block.units.size != 3) {
      return Left(s"a cyclic join of ${block.units.size} relations (IVM^eps covers triangles of three)")
    }
    val local = block.conditions.filter(c => unitsOf(block, c).size <= 1)
    val cross = block.conditions.filter(c => unitsOf(block, c).size > 1)
    val equalities = cross.collect {
      case EqualTo(l: Attribute, r: Attribute) => (l, r)
    }
    if (equalities.size != cross.size) {
      return Left("a join condition other than column equality between two relations: " +
        cross.filterNot(c => c.isInstanceOf[EqualTo]).map(_.sql).headOption.getOrElse(cross.head.sql))
    }
    val byPair = equalities.groupBy { case (l, r) =>
      Set(block.unitOf(l).get, block.unitOf(r).get)
    }
    if (byPair.size != 3 || byPair.values.exists(_.size != 1)) {
      return Left("the three relations are not joined in a cycle by one equality per pair " +
        s"(${equalities.size} equalities over ${byPair.size} pairs)")
    }
    // Orient the cycle from unit 0: R = 0, S = the unit joined with R first in the query.
    def eq(a: Int, b: Int): (Attribute, Attribute) = {
      val (l, r) = byPair(Set(a, b)).head
      if (block.unitOf(l).contains(a)) (l, r) else (r, l)
    }
    val order = IndexedSeq(0, 1, 2)
    val (y0, x1) = eq(order(0), order(1))
    val (y1, x2) = eq(order(1), order(2))
    val (y2, x0) = eq(order(2), order(0))
    val xs = IndexedSeq(x0, x1, x2)
    val ys = IndexedSeq(y0, y1, y2)
    if (order.exists(i => xs(i).exprId == ys(i).exprId)) {
      return Left("a relation joins both neighbours on the same column (a star, not a triangle)")
    }
    // What the view reads of the block, in unit columns (the block's outputs have its
    // projections' aliases inlined).
    val used = AttributeSet(block.outputs.filter(o => above.contains(o.toAttribute))
        .flatMap(_.references))
    val sides = order.map { i =>
      val unit = block.units(i)
      val filters = local.filter(c => unitsOf(block, c) == Set(i))
      val plan = filters.reduceOption(And).map(Filter(_, unit)).getOrElse(unit)
      val payload = unit.output.filter(a =>
        used.contains(a) && a.exprId != xs(i).exprId &&
          a.exprId != ys(i).exprId)
      val name = JoinBlock.leafColumns(unit).map(_._1.name).getOrElse(s"relation ${i + 1}")
      TriangleSide(s"${Seq("R", "S", "T")(i)}=$name", plan, xs(i), ys(i), payload)
    }
    if (local.exists(c => unitsOf(block, c).isEmpty)) {
      return Left("a condition over no relation (a constant filter on the join)")
    }
    Right(TriangleQuery(block, sides, used))
  }
}
