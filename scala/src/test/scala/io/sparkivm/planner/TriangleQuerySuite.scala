package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions.Alias
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, Count}
import org.apache.spark.sql.catalyst.expressions.{And, AttributeReference, EqualTo, GreaterThan, Literal}
import org.apache.spark.sql.catalyst.plans.Inner
import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, Filter, Join, JoinHint, LocalRelation, LogicalPlan, Project
}
import org.apache.spark.sql.types.IntegerType
import org.scalatest.funsuite.AnyFunSuite

/** Which join blocks are triangles (Kara et al. 2020, section 1), and which are not. */
class TriangleQuerySuite extends AnyFunSuite {

  /** An edge relation occurrence: (src, dst, w), fresh attributes each time. */
  private def edges(): LocalRelation = LocalRelation(Seq("src", "dst", "w").map(AttributeReference(_, IntegerType)()))
  private def c(r: LogicalPlan, name: String) = r.output.find(_.name == name).get
  private def join(l: LogicalPlan, r: LogicalPlan, cond: org.apache.spark.sql.catalyst.expressions.Expression) =
    Join(l, r, Inner, Some(cond), JoinHint.NONE)
  private def count(child: LogicalPlan) =
    Aggregate(Nil,
      Seq(Alias(AggregateExpression(Count(Seq(Literal(1))), org.apache.spark.sql.catalyst.expressions.aggregate.Complete,
            isDistinct = false), "n")()), child)

  private def triangle(
      extra: Option[(LogicalPlan, LogicalPlan, LogicalPlan) => org.apache.spark.sql.catalyst.expressions.Expression] =
        None) = {
    val (e1, e2, e3) = (edges(), edges(), edges())
    val j12 = join(e1, e2, EqualTo(c(e1, "dst"), c(e2, "src")))
    val cond = And(EqualTo(c(e2, "dst"), c(e3, "src")), EqualTo(c(e3, "dst"), c(e1, "src")))
    (e1, e2, e3, join(j12, e3, extra.map(f => And(cond, f(e1, e2, e3))).getOrElse(cond)))
  }

  test("one edge table three times, the count: R(src,dst) S(src,dst) T(src,dst), nothing read above") {
    val (e1, e2, e3, block) = triangle()
    val q = TriangleQuery.find(count(block)).toOption.flatten.get
    assert(q.sides.map(_.x) == Seq(c(e1, "src"), c(e2, "src"), c(e3, "src")))
    assert(q.sides.map(_.y) == Seq(c(e1, "dst"), c(e2, "dst"), c(e3, "dst")))
    assert(q.sides.forall(_.payload.isEmpty) && (0 until 3).forall(i => !q.needsY(i)))
  }

  test("filters of one relation stay with it; columns read above become payload or kept variables") {
    val (e1, e2, e3, block) = triangle(Some((a, _, _) => GreaterThan(c(a, "w"), Literal(3))))
    val top = Project(Seq(c(e1, "src"), c(e2, "src"), c(e3, "w")), block)
    val q = TriangleQuery.find(top).toOption.flatten.get
    assert(q.sides(0).plan.isInstanceOf[Filter])
    assert(q.sides(2).payload == Seq(c(e3, "w")))
    // V_RS keeps B (e2.src is read), V_TR keeps A (e1.src is read), V_ST sums out C.
    assert(q.needsY(0) && !q.needsY(1) && q.needsY(2))
  }

  test("not triangles: a path, a 4-cycle, a theta condition between relations") {
    val (e1, e2) = (edges(), edges())
    assert(TriangleQuery.find(count(join(e1, e2, EqualTo(c(e1, "dst"), c(e2, "src"))))) == Right(None))
    val es = Seq.fill(4)(edges())
    val chain = (1 until 4).foldLeft(es.head: LogicalPlan) { (acc, i) =>
      val cond = EqualTo(c(es(i - 1), "dst"), c(es(i), "src"))
      join(acc, es(i), if (i == 3) And(cond, EqualTo(c(es(3), "dst"), c(es(0), "src"))) else cond)
    }
    assert(TriangleQuery.find(count(chain)).left.toOption.exists(_.contains("4 relations")))
    val (_, _, _, theta) = triangle(Some((a, b, _) => GreaterThan(c(a, "w"), c(b, "w"))))
    assert(TriangleQuery.find(count(theta)).left.toOption.exists(_.contains("other than column equality")))
  }
}
