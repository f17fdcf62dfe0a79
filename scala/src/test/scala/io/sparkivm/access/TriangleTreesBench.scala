package io.sparkivm.access

import java.io.PrintWriter

import scala.util.Random

/**
 * IVM^eps's trees for listing triangles (Kara et al. 2020, section 4; [[HeavyLightTrees.triangle]])
 * against one view tree over a chain order with indicator projections (Zhang 2022, chapter 4's
 * general trees, what a triangle CQAP with inputs gets), on skewed graphs of several sizes: each
 * edge is a tuple of R, S and T, as when one edge table is joined three times. Per size and eps:
 *
 *  - the work (view entries written and tuples joined) of a single-edge change, typical (an edge
 *    drawn as the graph's are, averaged) and at hubs (the costliest of the edges between the
 *    four nodes of highest degree, whose change a first-order rule joins with a hub's edges),
 *    each inserted into the three atoms and deleted again;
 *  - the delay of enumerating the listing: the most values visited between two answers, and
 *    the time per answer, over the first 100,000 answers;
 *  - the view entries held and the time to build.
 *
 * The paper's bounds: update O(N^max(eps, 1-eps)) amortized, delay O(1); the chain tree's
 * update is O(N) at a hub. Run by `benchmarks/triangle_enumeration.py`.
 *
 * Arguments: output file, sizes (edges, comma-separated), eps values, updates per point, seed.
 */
object TriangleTreesBench {
  private val q = Cqap(Seq(Atom("R", Set("A", "B")), Atom("S", Set("B", "C")), Atom("T", Set("A", "C"))),
    Set.empty, Set("A", "B", "C"))
  // Each atom's variables in name order: R(A, B), S(B, C), T(A, C); T(C, A) holds an edge (c, a) as (a, c).
  private val atomVars = q.atoms.map(_.vars.toSeq.sorted.toIndexedSeq).toIndexedSeq
  private def tuples(e: (Int, Int)): Seq[(Int, IndexedSeq[Any])] =
    Seq((0, IndexedSeq(e._1, e._2)), (1, IndexedSeq(e._1, e._2)), (2, IndexedSeq(e._2, e._1)))

  def main(args: Array[String]): Unit = {
    val out = new PrintWriter(args(0))
    val sizes = args(1).split(",").map(_.toInt)
    val epsilons = args(2).split(",").map(_.toDouble)
    val updates = args(3).toInt
    val seed = args(4).toLong
    for (n <- sizes) {
      val edges = TradeOffBench.graph(n, new Random(seed + n))
      val degree = edges.flatMap(e => Seq(e._1, e._2)).groupMapReduce(identity)(_ => 1)(_ + _)
      // Edges among the 4 nodes of highest degree, both ways: where a first-order rule joins a hub's edges.
      val hubs = degree.toSeq.sortBy(-_._2).take(4).map(_._1)
      val hubEdges = for (x <- hubs; y <- hubs if x != y) yield (x, y)
      val rnd = new Random(seed * 31 + n)
      val typical = (0 until updates).map(_ => (TradeOffBench.zipf(n, rnd), TradeOffBench.zipf(n, rnd)))
      val points = epsilons.map(e => (f"$e", () => HeavyLightTrees.triangle(q, atomVars, e).get: AccessTrees)) :+
        ("chain",
          () =>
            ViewTree.build(atomVars, Seq((VariableOrder.chain(q), q)), (a: Atom) => q.atoms.indexOf(a),
              indicators = true).fold(sys.error, identity): AccessTrees)
      for ((label, make) <- points) {
        val trees = make()
        def work = trees.updateWork
        def visited = trees.lookupWork
        System.gc()
        val t0 = System.nanoTime()
        trees.load(edges.iterator.flatMap(e => tuples(e).iterator.map { case (a, t) => (a, t, 1L) }))
        val buildMs = (System.nanoTime() - t0) / 1e6
        def change(es: Seq[(Int, Int)]): (Double, Double) = {
          val (w0, u0) = (work, System.nanoTime())
          es.foreach { e =>
            tuples(e).foreach { case (a, t) => trees.update(a, t, 1L) }
            tuples(e).foreach { case (a, t) => trees.update(a, t, -1L) }
          }
          ((work - w0).toDouble / (2 * es.size), (System.nanoTime() - u0) / 1e3 / (2 * es.size))
        }
        val (typicalWork, typicalUs) = change(typical)
        val hub = hubEdges.map(e => change(Seq(e)))
        val (hubWork, hubUs) = (hub.map(_._1).max, hub.map(_._2).max)
        var before = visited
        var gap = 0L
        var answers = 0L
        val e0 = System.nanoTime()
        val it = trees.lookup(Map.empty)
        while (it.hasNext && answers < 100000) {
          it.next()
          gap = math.max(gap, visited - before)
          before = visited
          answers += 1
        }
        val perAnswerUs = (System.nanoTime() - e0) / 1e3 / math.max(1L, answers)
        val heavy = trees match {
          case t: HeavyLightTrees => t.heavyKeys.map(_._2).sum
          case _ => 0
        }
        val line =
          f"""{"n": $n, "edges": ${edges.size}, "eps": "$label", "build_ms": $buildMs%.1f, "heavy_keys": $heavy, """ +
            f""""entries": ${trees.entries}, "update_work": $typicalWork%.2f, "update_us": $typicalUs%.3f, """ +
            f""""hub_update_work": $hubWork%.2f, "hub_update_us": $hubUs%.3f, "hub_degrees": [${hubs.map(
                degree).mkString(", ")}], "hub_works": [${hub.map(_._1).mkString(", ")}], """ +
            f""""answers": $answers, "delay_work": $gap, "per_answer_us": $perAnswerUs%.3f}"""
        println(line)
        out.println(line)
        out.flush()
      }
    }
    out.close()
  }
}
