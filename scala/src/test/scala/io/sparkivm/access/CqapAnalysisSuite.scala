package io.sparkivm.access

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

/**
 * Classification of CQAPs (Zhang 2022): the thesis's examples, the smallest queries on each
 * side of each class boundary (section 3.1), and the invariants that tie the classes to the
 * widths, over random queries.
 */
class CqapAnalysisSuite extends AnyFunSuite {
  private def q(outputs: String, inputs: String, atoms: (String, String)*): Cqap =
    Cqap(atoms.map { case (n, vs) => Atom(n, vs.map(_.toString).toSet) }, inputs.map(_.toString).toSet,
      outputs.map(_.toString).toSet)

  private def analysis(query: Cqap) = CqapAnalysis.of(query)

  test("the CQAP0 example: Q(B,C,D,E | A) = R(A,B,C), S(A,B,D), T(A,E) fractures in two, constant update and delay") {
    val a = analysis(q("BCDE", "A", "R" -> "ABC", "S" -> "ABD", "T" -> "AE"))
    assert(a.components.map(_.query.atoms.map(_.name)) == Seq(Seq("R", "S"), Seq("T")))
    assert(a.cls == CqapClass.Cqap0 && a.widths.contains((1, 0)))
    // Section 4.1's view tree for the first component: A -> B -> {C, D}.
    val tree = VariableOrder.viewTree(a.components.head.accessTopOrder).map(_.name)
    assert(tree == Seq("V_A(A)", "V_B(A, B)", "V'_C(A, B)", "V_C(A, B, C)", "V'_D(A, B)", "V_D(A, B, D)"), tree)
  }

  test("Example 5.3: Q(C,D | E) = R(A,B,C), S(A,B,D), T(A,E) is hierarchical with w = 3, delta = 2") {
    val a = analysis(q("CD", "E", "R" -> "ABC", "S" -> "ABD", "T" -> "AE"))
    assert(a.components.size == 1)
    val c = a.components.head
    assert(c.query.hierarchical && !c.query.freeDominant && !c.query.almostFreeDominant)
    assert(a.cls == CqapClass.Hierarchical && a.widths.contains((3, 2)))
    // Its access-top order puts E, then C and D, above the bound A and B (Fig. 5.4).
    assert(VariableOrder.render(c.accessTopOrder).map(_.trim).take(5) == Seq("E", "C", "D", "A", "B"))
  }

  test("the 4-cycle Q(A,C | B,D) fractures into two hierarchical paths and is CQAP1 (Example 3.9)") {
    val a = analysis(q("AC", "BD", "R" -> "AB", "S" -> "BC", "T" -> "CD", "U" -> "AD"))
    assert(!a.query.hierarchical)
    assert(a.components.size == 2 && a.components.forall(_.hierarchical))
    assert(a.components.forall(c => !c.query.inputDominant && c.query.almostInputDominant))
    assert(a.cls == CqapClass.Cqap1 && a.widths.contains((2, 1)))
    // And with the roles swapped, Q(B,D | A,C).
    assert(analysis(q("BD", "AC", "R" -> "AB", "S" -> "BC", "T" -> "CD", "U" -> "AD")).cls == CqapClass.Cqap1)
  }

  test("the smallest queries outside CQAP0 are CQAP1 with delta = 1 (section 3.1)") {
    for ((out, in) <- Seq(("A", ""), ("B", "A"), ("", "A"))) {
      val a = analysis(q(out, in, "R" -> "AB", "S" -> "B"))
      assert(a.cls == CqapClass.Cqap1 && a.widths.exists(_._2 == 1), s"Q($out | $in): ${a.describe.mkString("\n")}")
    }
    // Their neighbours inside CQAP0: q-hierarchical CQs, and inputs that break the join.
    assert(analysis(q("AB", "", "R" -> "AB", "S" -> "B")).cls == CqapClass.Cqap0)
    assert(analysis(q("A", "B", "R" -> "AB", "S" -> "B")).cls == CqapClass.Cqap0)
  }

  test("C_lookup Q(. | A,B,C) over a triangle is CQAP0; the triangle Q(B,C | A) is not hierarchical") {
    val lookup = analysis(q("", "ABC", "R" -> "AB", "S" -> "BC", "T" -> "CA"))
    assert(lookup.components.size == 3 && lookup.cls == CqapClass.Cqap0)
    val tri = analysis(q("BC", "A", "R" -> "AB", "S" -> "BC", "T" -> "CA"))
    assert(tri.components.size == 1 && tri.cls == CqapClass.Triangle && tri.widths.isEmpty)
    assert(analysis(q("AD", "", "R" -> "AB", "S" -> "BC", "T" -> "CD")).cls == CqapClass.General)
  }

  test("invariants over random queries: CQAP0 iff delta = 0, CQAP1 has delta = 1, delta is w or w - 1, " +
    "access-top orders are valid and access-top") {
    val rnd = new Random(7)
    val names = "ABCDE".map(_.toString)
    var hierarchicalSeen = 0
    for (_ <- 1 to 3000) {
      val atoms = (0 until 1 + rnd.nextInt(4)).map { i =>
        Atom(s"R$i", names.filter(_ => rnd.nextInt(3) == 0).toSet + names(rnd.nextInt(names.size)))
      }
      val vars = atoms.flatMap(_.vars).distinct
      val roles = vars.map(v => v -> rnd.nextInt(3)).toMap
      val query = Cqap(atoms, vars.filter(roles(_) == 0).toSet, vars.filter(roles(_) == 1).toSet)
      CqapAnalysis.of(query).components.filter(_.hierarchical).foreach { c =>
        hierarchicalSeen += 1
        val (w, d) = c.widths.get
        assert((c.cls == CqapClass.Cqap0) == (d == 0), s"Prop. 5.30 on ${c.query}: delta = $d")
        if (c.cls == CqapClass.Cqap1) assert(d == 1, s"Lemma 5.31 on ${c.query}")
        assert(d == w || d == w - 1, s"Prop. 5.27 on ${c.query}: w = $w, delta = $d")
        checkAccessTop(c.accessTopOrder, c.query)
      }
    }
    assert(hierarchicalSeen > 1000)
  }

  /** Every atom's variables lie on its root path; no variable sits above one of a stronger role. */
  private def checkAccessTop(order: Seq[VoTree], query: Cqap): Unit = {
    def rank(v: String) = if (query.inputs(v)) 0 else if (query.outputs(v)) 1 else 2
    def walk(t: VoTree, path: Seq[String]): Unit = t match {
      case AtomLeaf(a) => assert(a.vars.subsetOf(path.toSet), s"$a off its path $path in $query")
      case VarNode(x, children) =>
        path.foreach(p => assert(rank(p) <= rank(x), s"$p above $x in $query"))
        children.foreach(walk(_, path :+ x))
    }
    order.foreach(walk(_, Nil))
    assert(order.flatMap(_.vars).sorted == query.vars.toSeq.sorted)
  }
}
