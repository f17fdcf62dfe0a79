package io.sparkivm.access

import java.io.PrintWriter

import scala.util.Random

/**
 * The eps trade-off of heavy/light view trees (Zhang 2022, section 5.7, Ex. 5.29), measured on
 * the 4-cycle Q(A, C | B, D) = R(A, B), S(B, C), T(C, D), U(D, A) over one skewed graph (each
 * atom holds its edges), at several sizes and eps: preprocessing time, the work and time of a
 * single-edge update (an edge inserted, then deleted again; typical ones, and the worst light
 * ones), and the time and work (values visited) to the first answer and between answers of
 * lookups. Run by `benchmarks/cqap_tradeoff.py`, which fits the
 * exponents and plots them against the thesis's (update N^eps, delay N^(1-eps)).
 *
 * The graph: both endpoints of every edge drawn from a Zipf law of exponent 1 over N nodes, so
 * that a node's degree is about N / (rank H_N) and each degree class 2^i..2^(i+1) holds about
 * the same number of edges (the nodes of degree at least d number about N / (d H_N)): the
 * family where a threshold of N^eps leaves about N^(1-eps) heavy keys and light keys of degree up to N^eps.
 *
 * With `adversarial`, the graph is instead built per eps as the worst case of the bounds
 * ([[worstCase]]), where the costs should follow the thesis's exponents exactly.
 *
 * Arguments: output file, sizes (comma-separated), eps values, updates and lookups per point,
 * seed, and `zipf` (the default) or `adversarial`.
 */
object TradeOffBench {
  def main(args: Array[String]): Unit = {
    val out = new PrintWriter(args(0))
    val sizes = args(1).split(",").map(_.toInt)
    val epsilons = args(2).split(",").map(_.toDouble)
    val updates = args(3).toInt
    val lookups = args(4).toInt
    val seed = args(5).toLong
    val adversarial = args.length > 6 && args(6) == "adversarial"
    val q = Cqap(Seq(Atom("R", Set("A", "B")), Atom("S", Set("B", "C")), Atom("T", Set("C", "D")),
        Atom("U", Set("A", "D"))), Set("B", "D"), Set("A", "C"))
    // Each atom's variables in name order: R(A, B), S(B, C), T(C, D), U(A, D); U holds edges reversed.
    val atomVars = q.atoms.map(_.vars.toSeq.sorted.toIndexedSeq).toIndexedSeq
    def tuples(e: (Int, Int), atom: Int): IndexedSeq[Any] =
      if (atom == 3) IndexedSeq(e._2, e._1) else IndexedSeq(e._1, e._2)
    for (n <- sizes) {
      lazy val zipfEdges = graph(n, new Random(seed + n))
      for (eps <- epsilons) {
        val edges = if (adversarial) worstCase(n, eps) else zipfEdges
        val from = edges.groupMap(_._1)(_._2)
        // Degrees of a node as R's A (an edge's source) and as U's A (an edge's target).
        val degreeR = edges.groupMapReduce(_._1)(_ => 1)(_ + _)
        val degreeU = edges.groupMapReduce(_._2)(_ => 1)(_ + _)
        // A light tree holds R and U joined on every light key: past this many pairs the point
        // does not fit in memory (the worst case at eps = 1 is one key holding every edge).
        val pairs = degreeR.iterator.map { case (a, d) => d.toLong * degreeU.getOrElse(a, 0) }.sum
        if (pairs > 20000000L) {
          System.err.println(s"n = $n, eps = $eps skipped: its light trees would join $pairs pairs")
        } else {
          val trees = HeavyLightTrees.build(q, atomVars, eps).fold(why => sys.error(why), identity)
          System.gc()
          val t0 = System.nanoTime()
          trees.load(edges.iterator.flatMap(e => (0 until 4).iterator.map(a => (a, tuples(e, a), 1L))))
          val buildMs = (System.nanoTime() - t0) / 1e6
          // The same updates and requests at every eps.
          val rnd = new Random(seed * 31 + n)
          // Typical updates: an edge drawn as the graph's are, inserted into one atom and deleted again.
          val work0 = trees.updateWork
          val u0 = System.nanoTime()
          for (_ <- 0 until updates) {
            val atom = rnd.nextInt(4)
            val e = (zipf(n, rnd), zipf(n, rnd))
            trees.update(atom, tuples(e, atom), 1L)
            trees.update(atom, tuples(e, atom), -1L)
          }
          val updateNs = (System.nanoTime() - u0).toDouble / (2 * updates)
          val updateWork = (trees.updateWork - work0).toDouble / (2 * updates)
          // The worst light updates (Prop. 5.23's bound): R(a, b) for the light a with the most
          // tuples in U (below the threshold), which the update joins.
          val theta = trees.threshold
          val light = degreeU.filter { case (a, d) => d < theta && degreeR.getOrElse(a, 0) < theta }
          val worst = if (light.isEmpty) None else Some(light.maxBy(_._2))
          val w0 = trees.updateWork
          worst.foreach { case (a, _) =>
            for (i <- 0 until updates / 10) {
              val t = IndexedSeq[Any](a, n + 1 + i)
              trees.update(0, t, 1L)
              trees.update(0, t, -1L)
            }
          }
          val worstWork = if (worst.isEmpty) 0.0 else (trees.updateWork - w0).toDouble / (2 * (updates / 10))
          // Lookups of random (b, d), most without answers, and of the ends of paths b -> c -> d:
          // the time to the first answer (or to none) and to all, and the work (values visited)
          // between two answers, at most per lookup (the delay), averaged over lookups.
          def requests(paths: Boolean) = (0 until lookups).map { _ =>
            if (paths) {
              val (b, c) = edges(rnd.nextInt(edges.size))
              val out = from.getOrElse(c, IndexedSeq(b))
              Map[String, Any]("B" -> b, "D" -> out(rnd.nextInt(out.size)))
            } else Map[String, Any]("B" -> (1 + rnd.nextInt(n)), "D" -> (1 + rnd.nextInt(n)))
          }
          def measure(rs: Seq[Map[String, Any]]): (Double, Double, Double, Double, Long) = {
            var firstNs, totalNs, gaps = 0.0
            var answers = 0L
            for (inputs <- rs) {
              val l0 = System.nanoTime()
              var before = trees.lookupWork
              val it = trees.lookup(inputs)
              val answers0 = answers
              var first = true
              var gap = 0L
              // On the worst-case graphs a hub's paths have millions of answers: the first 1,000 tell the delay.
              while (it.hasNext && (!adversarial || answers - answers0 < 1000)) {
                it.next()
                if (first) { firstNs += System.nanoTime() - l0; first = false }
                gap = math.max(gap, trees.lookupWork - before)
                before = trees.lookupWork
                answers += 1
              }
              gap = math.max(gap, trees.lookupWork - before)
              val end = System.nanoTime()
              if (first) firstNs += end - l0
              totalNs += end - l0
              gaps += gap
            }
            (firstNs / rs.size / 1000, totalNs / rs.size / 1000, gaps / rs.size,
              totalNs / (answers + rs.size) / 1000, answers)
          }
          val (firstUs, lookupUs, delayWork, delayUs, answers) = measure(requests(paths = true))
          val (emptyUs, _, emptyWork, _, emptyAnswers) = measure(requests(paths = false))
          val line =
            f"""{"n": $n, "edges": ${edges.size}, "eps": $eps, "trees": ${trees.trees}, "build_ms": $buildMs%.1f, """ +
              f""""heavy_keys": ${trees.heavyKeys.map(_._2).sum}, "threshold": $theta%.2f, """ +
              f""""update_work": $updateWork%.2f, "update_us": ${updateNs / 1000}%.3f, "update_work_worst": $worstWork%.2f, """ +
              f""""lookups": $lookups, "answers": $answers, "first_answer_us": $firstUs%.3f, "lookup_us": $lookupUs%.3f, """ +
              f""""delay_us": $delayUs%.3f, "delay_work": $delayWork%.2f, "random_lookup_us": $emptyUs%.3f, """ +
              f""""random_delay_work": $emptyWork%.2f, "random_answers": $emptyAnswers}"""
          println(line)
          out.println(line)
          out.flush()
        }
      }
    }
    out.close()
  }

  /**
   * The worst case of the bounds at `eps` (about n edges, both directions of each): hubs of
   * degree 2 theta, heavy, about n^(1-eps) of them (a lookup without answers visits each), and
   * light keys of degree 0.9 theta (an update at one joins that many tuples), theta = (8n)^eps
   * the threshold the trees take after the first build (M = 2N + 1, N = 4n tuples); every
   * other end a leaf of degree 1.
   */
  private def worstCase(n: Int, eps: Double): IndexedSeq[(Int, Int)] = {
    val theta = math.pow(8.0 * n + 1, eps)
    val hubDegree = math.ceil(2 * theta).toInt
    // Half the edges to hubs, half to light keys; all to hubs where no key can be light (eps = 0).
    val hubs = if (hubDegree > n / 4) 0 else n / ((if (0.9 * theta < 1) 2 else 4) * hubDegree)
    // Light keys as heavy as stays light at the threshold the graph itself sets (fewer edges
    // than n make it lower than theta).
    def build(lightDegree: Int): IndexedSeq[(Int, Int)] = {
      val lights = if (lightDegree < 1) 0 else math.max(1, (n - 2 * hubs * hubDegree) / (2 * lightDegree))
      var leaf = 10 * n
      val keys = (1 to hubs).map(_ -> hubDegree) ++ (1 to lights).map(i => (hubs + i) -> lightDegree)
      keys.flatMap { case (k, d) => (1 to d).flatMap { _ => leaf += 1; Seq((k, leaf), (leaf, k)) } }
    }
    var lightDegree = math.min(math.floor(0.9 * theta).toInt, if (hubs == 0) n / 2 else n / 4)
    var edges = build(lightDegree)
    while (lightDegree > 1 && lightDegree >= math.pow(8.0 * edges.size + 1, eps)) {
      lightDegree = (lightDegree * 0.9).toInt
      edges = build(lightDegree)
    }
    edges
  }

  private[access] def graph(n: Int, rnd: Random): IndexedSeq[(Int, Int)] = {
    val edges = scala.collection.mutable.LinkedHashSet[(Int, Int)]()
    while (edges.size < n) {
      val (x, y) = (zipf(n, rnd), zipf(n, rnd))
      if (x != y) edges += ((x, y))
    }
    edges.toIndexedSeq
  }

  /** A rank in 1..n with probability proportional to 1/rank (inverse of the harmonic CDF, approximately). */
  private[access] def zipf(n: Int, rnd: Random): Int =
    math.min(n, math.max(1, math.exp(rnd.nextDouble() * math.log(n + 1.0)).toInt))
}
