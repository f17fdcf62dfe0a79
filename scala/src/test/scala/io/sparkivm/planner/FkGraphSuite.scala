package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions.{
  And, AttributeReference, EqualTo, GreaterThanOrEqual, InSet, LessThanOrEqual, Literal, Or
}
import org.apache.spark.sql.types.{DoubleType, IntegerType, StringType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/** Algorithm 1 of Svingos et al. 2023 (section 3.5) and the key-probe filters, on small graphs. */
class FkGraphSuite extends AnyFunSuite {
  private def edge(from: Int, to: Int) = FkEdge(from, to, s"fk$from$to", Nil)
  private def graph(n: Int, edges: (Int, Int)*) = FkGraph(n, edges.map { case (a, b) => edge(a, b) })

  /** Every node in exactly one component; each non-root reached from an earlier node. */
  private def checkInvariants(g: FkGraph): Seq[Component] = {
    val cs = g.components
    assert(cs.flatMap(_.order).sorted == (0 until g.nodes))
    cs.foreach { c =>
      assert(c.order.head == c.root && !c.parentEdge.contains(c.root))
      c.order.tail.zipWithIndex.foreach { case (n, i) =>
        val e = c.parentEdge(n)
        assert(e.to == n && c.order.take(i + 1).contains(e.from), s"$n is joined before its parent")
      }
    }
    cs
  }

  test("a star and a snowflake are one component rooted at the fact table") {
    assert(checkInvariants(graph(4, 0 -> 1, 0 -> 2, 0 -> 3)).map(_.order) == Seq(Seq(0, 1, 2, 3)))
    // fact -> customer -> nation -> region, fact -> part: BFS keeps every join PK-FK.
    val snow = checkInvariants(graph(5, 0 -> 1, 1 -> 2, 2 -> 3, 0 -> 4))
    assert(snow.map(_.order) == Seq(Seq(0, 1, 4, 2, 3)))
  }

  test("Fig. 3a: the largest rooted component first, the cut edge stays a plain join") {
    // R1..R4 = 0..3 rooted at R1; R5 -> R6 = 4 -> 5; R5 -> R4 (4 -> 3) crosses components.
    val cs = checkInvariants(graph(6, 0 -> 1, 0 -> 2, 2 -> 3, 4 -> 5, 4 -> 3))
    assert(cs.map(_.nodes) == Seq(Set(0, 1, 2, 3), Set(4, 5)))
  }

  test("a DAG (Q5's shared nation), a cycle, and isolated nodes") {
    // lineitem 0 -> orders 1 -> customer 2 -> nation 4; lineitem 0 -> supplier 3 -> nation 4.
    val q5 = checkInvariants(graph(5, 0 -> 1, 1 -> 2, 2 -> 4, 0 -> 3, 3 -> 4))
    assert(q5.size == 1 && q5.head.root == 0)
    // A cycle inside a rooted graph: every node reaches the others; the first wins the tie.
    assert(checkInvariants(graph(3, 0 -> 1, 1 -> 2, 2 -> 0)).map(_.order) == Seq(Seq(0, 1, 2)))
    assert(checkInvariants(graph(3)).map(_.order) == Seq(Seq(0), Seq(1), Seq(2)))
  }

  test("dropping a dimension's incoming edges (failed guard) makes it its own root") {
    val g = graph(4, 0 -> 1, 1 -> 2, 0 -> 3)
    val cs = checkInvariants(g.without(_.to == 1))
    assert(cs.map(_.nodes) == Seq(Set(0, 3), Set(1, 2)))
  }

  test("key probes: few keys as equalities, many as ranges cut at the widest gaps") {
    assert(KeyProbe.cut(Seq(1, 2, 3), 5) == Seq(Seq(1), Seq(2), Seq(3)))
    assert(KeyProbe.cut(Seq(1, 2, 3, 100, 101, 1000), 3) == Seq(Seq(1, 2, 3), Seq(100, 101), Seq(1000)))
    assert(KeyProbe.cut(Seq("a", "b", "c", "d"), 2) == Seq(Seq("a", "b"), Seq("c", "d")))
    val k = AttributeReference("k", IntegerType)()
    assert(KeyProbe.filter(k, Nil, 4) == Literal.FalseLiteral)
    // Keys the JVM compares as Spark does: a hash set (one lookup per row), however many.
    assert(KeyProbe.filter(k, Seq(1, 5, 9, 50), 2) == InSet(k, Set(1, 5, 9, 50)))
    assert(KeyProbe.filter(k, Seq(7), 2) == EqualTo(k, Literal(7)))
    val s = AttributeReference("s", StringType)()
    assert(KeyProbe.filter(s, Seq("a", "b"), 2) == InSet(s, Set(UTF8String.fromString("a"), UTF8String.fromString("b"))))
    // Others (floating point: -0.0 and NaN are normalized by the join): ranges.
    val d = AttributeReference("d", DoubleType)()
    KeyProbe.filter(d, Seq(1.0, 5.0, 9.0, 50.0), 2) match {
      case Or(And(GreaterThanOrEqual(_, Literal(1.0, _)), LessThanOrEqual(_, Literal(9.0, _))),
            EqualTo(_, Literal(50.0, _))) =>
      case other => fail(s"unexpected $other")
    }
    assert(KeyProbe.sqlFilter("t.k", IntegerType, Seq(1, 5, 9, 50), 2) == "(t.k BETWEEN 1 AND 9 OR t.k = 50)")
  }

  test("key probes: the runs of many keys (a List, as a set's keys come) are contiguous and cut at the widest gaps") {
    // 200,000 keys in a List: the cut indexes them (a List's apply would make it quadratic).
    val rnd = new scala.util.Random(7)
    val keys = List.fill(200000)(rnd.nextInt(50000000)).distinct.sorted
    val runs = KeyProbe.cut(keys, 64)
    assert(runs.size == 64 && runs.flatten == keys)
    val gaps = keys.zip(keys.tail).map { case (a, b) => b - a }.sorted(Ordering[Int].reverse)
    val cutGaps = runs.zip(runs.tail).map { case (a, b) => b.head.asInstanceOf[Int] - a.last.asInstanceOf[Int] }
    assert(cutGaps.sorted(Ordering[Int].reverse) == gaps.take(63))
  }
}
