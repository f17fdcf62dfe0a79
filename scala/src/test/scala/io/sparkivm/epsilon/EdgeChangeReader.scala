package io.sparkivm.epsilon

import io.sparkivm.planner.{LeafReader, SourceLeaf}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan}

/**
 * A reader for the triangle suites: every occurrence of the one edge table reads `pre` at Pre
 * and `post` at Post, held on the driver; its change is their difference, signed in `m`.
 */
class EdgeChangeReader(pre: Seq[(Int, Int)], post: Seq[(Int, Int)], m: Attribute) extends LeafReader {
  private def rel(leaf: SourceLeaf, rows: Seq[(Int, Int)]) =
    LocalRelation(leaf.output, rows.map { case (a, b) => InternalRow(a, b) })
  def pre(leaf: SourceLeaf): LogicalPlan = rel(leaf, pre)
  def post(leaf: SourceLeaf): LogicalPlan = rel(leaf, post)
  def preDel(leaf: SourceLeaf): LogicalPlan = rel(leaf, (pre ++ post).distinct)
  def delta(leaf: SourceLeaf): Option[LogicalPlan] = {
    val change = post.diff(pre).map((_, 1)) ++ pre.diff(post).map((_, -1))
    if (change.isEmpty) None
    else Some(LocalRelation(leaf.output :+ m, change.map { case ((a, b), s) => InternalRow(a, b, s) }))
  }
}
