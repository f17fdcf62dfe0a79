package io.sparkivm.access

import scala.util.Random

import org.scalatest.funsuite.AnyFunSuite

/**
 * The view trees of CQAP0 queries (Zhang 2022, chapter 4) against the query evaluated by brute
 * force over Z-relations: after every single-tuple insert or delete, every view of the tree
 * agrees with its definition (so no value without answers is ever listed), and each access
 * request's answer is the query's, each output tuple listed once, with its multiplicity, none
 * with multiplicity zero (the oracle and exactly-once invariants of the thesis).
 */
class ViewTreeSuite extends AnyFunSuite {
  private def atom(name: String, vars: String*) = Atom(name, vars.toSet)

  /** `chain`: over the chain order of each component (any query) instead of ACC-TOP's. */
  private def check(q: Cqap, seed: Int, steps: Int = 120, cqap0: Boolean = true, chain: Boolean = false,
      indicators: Boolean = false): ViewTree = {
    val analysis = CqapAnalysis.of(q)
    assert((analysis.cls == CqapClass.Cqap0) == cqap0, q)
    val atomVars = q.atoms.map(_.vars.toSeq.sorted.toIndexedSeq).toIndexedSeq
    val orders = analysis.components.map(c => (if (chain) VariableOrder.chain(c.query) else c.accessTopOrder, c.query))
    val tree = ViewTree.build(atomVars, orders, a => q.atoms.indexOf(a), indicators = indicators)
      .fold(why => fail(why), identity)
    val rnd = new Random(seed)
    val domain = Seq[Any](1, 2, 3)
    val db = Array.fill(q.atoms.size)(Map.empty[Seq[Any], Long])
    val requests = CqapOracle.requests(q, domain, outside = 4)
    for (step <- 1 to steps) {
      val i = rnd.nextInt(q.atoms.size)
      // Deletes only of present tuples (bag semantics), inserts sometimes several at once.
      val present = db(i).keys.toSeq
      val (tuple, delta) = if (present.nonEmpty && rnd.nextInt(3) == 0) {
        val t = present(rnd.nextInt(present.size))
        (t, -math.min(db(i)(t), 1L + rnd.nextInt(2)))
      } else (atomVars(i).map(_ => domain(rnd.nextInt(domain.size))), 1L + rnd.nextInt(2))
      db(i) = (db(i) + (tuple -> (db(i).getOrElse(tuple, 0L) + delta))).filter(_._2 != 0)
      tree.update(i, tuple.toIndexedSeq, delta)
      assert(tree.violations().isEmpty, s"$q, step $step: ${tree.violations()}")
      if (step % 10 == 0) requests.foreach { inputs =>
        val got = tree.lookup(inputs).toSeq.map { case (at, m) => at.filter(kv => q.outputs.contains(kv._1)) -> m }
        assert(got.forall(_._2 > 0), s"$q $inputs: a listed tuple has no multiplicity: $got")
        assert(got.map(_._1).distinct.size == got.size, s"$q $inputs: a tuple listed twice: $got")
        assert(got.toMap == CqapOracle.answers(q, db.toSeq, inputs, domain), s"$q, step $step, request $inputs")
      }
    }
    assert(tree.size == db.map(_.size).sum)
    // The same tuples loaded in bulk into empty trees: the same views, entries and answers.
    val loaded = ViewTree.build(atomVars, orders, a => q.atoms.indexOf(a), indicators = indicators)
      .fold(why => fail(why), identity)
    loaded.load(db.indices.iterator.flatMap(i => db(i).iterator.map { case (t, m) => (i, t.toIndexedSeq, m) }))
    assert(loaded.violations().isEmpty, s"$q loaded: ${loaded.violations()}")
    assert(loaded.entries == tree.entries && loaded.size == tree.size, q)
    requests.foreach(inputs => assert(loaded.lookup(inputs).toMap == tree.lookup(inputs).toMap, s"$q loaded, $inputs"))
    tree
  }

  test("the thesis's example with two fracture components: Q(B, C, D, E | A) = R(A, B, C), S(A, B, D), T(A, E)") {
    check(Cqap(Seq(atom("R", "A", "B", "C"), atom("S", "A", "B", "D"), atom("T", "A", "E")),
        Set("A"), Set("B", "C", "D", "E")), seed = 1)
  }

  test("bound variables below free ones count as multiplicities: Q(A | .) = R(A, B), S(A, B)") {
    check(Cqap(Seq(atom("R", "A", "B"), atom("S", "A", "B")), Set.empty, Set("A")), seed = 2)
    check(Cqap(Seq(atom("R", "A", "B", "C"), atom("S", "A", "B"), atom("T", "A", "D")), Set("A"), Set("B")), seed = 3)
  }

  test("inputs that break a cycle: C_lookup Q(. | A, B, C) over a triangle; one atom Q(C | A, B)") {
    check(Cqap(Seq(atom("R", "A", "B"), atom("S", "B", "C"), atom("T", "C", "A")), Set("A", "B", "C"), Set.empty),
      seed = 4)
    check(Cqap(Seq(atom("R", "A", "B", "C")), Set("A", "B"), Set("C")), seed = 5)
  }

  test("an order whose atoms lack variables of their paths is maintained by joins: Ex. 2.1's Q(C | A) = R(A, B), S(B, C)") {
    // ACC-TOP puts A and C above B, so an update of S(B, C) joins R on B to find A (not CQAP0:
    // its cost grows with B's degree, which the heavy/light partition of chapter 5 bounds).
    val q = Cqap(Seq(atom("R", "A", "B"), atom("S", "B", "C")), Set("A"), Set("C"))
    assert(CqapAnalysis.of(q).cls != CqapClass.Cqap0)
    check(q, seed = 6, cqap0 = false)
  }

  test("triangle CQAPs over chain orders (chapter 4's general view trees): every class of section 6") {
    val triangle = Seq(atom("R", "A", "B"), atom("S", "B", "C"), atom("T", "C", "A"))
    val patterns = Seq(
      (Set.empty[String], Set.empty[String]), // C_count
      (Set("A"), Set.empty[String]), (Set.empty[String], Set("A")), (Set("A"), Set("B")), (Set("A"), Set("B", "C")), // C1
      (Set("A", "B"), Set.empty[String]), (Set.empty[String], Set("A", "B")), (Set("A", "B"), Set("C")), // C2
      (Set.empty[String], Set("A", "B", "C"))) // C3
    patterns.zipWithIndex.foreach { case ((inputs, outputs), i) =>
      val q = Cqap(triangle, inputs, outputs)
      // The same stream with and without indicator projections: the same answers, and the
      // projections keep the views to what the rest of the join can use (section 4.3).
      val plain = check(q, seed = 70 + i, steps = 90, cqap0 = false, chain = true)
      val projected = check(q, seed = 70 + i, steps = 90, cqap0 = false, chain = true, indicators = true)
      assert(projected.entries <= plain.entries, (q, projected.entries, plain.entries))
    }
    // The 4-cycle with no inputs: one cyclic component.
    check(Cqap(Seq(atom("R", "A", "B"), atom("S", "B", "C"), atom("T", "C", "D"), atom("U", "D", "A")),
        Set.empty, Set("A", "C")), seed = 80, steps = 90, cqap0 = false, chain = true)
  }
}
