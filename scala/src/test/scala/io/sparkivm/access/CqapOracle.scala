package io.sparkivm.access

/** A CQAP evaluated by brute force over Z-relations: the oracle of the view-tree suites. */
object CqapOracle {

  /**
   * The answers to `inputs`: every assignment of the other variables over `domain`, each
   * atom's tuple (its variables in name order) looked up in `db`, multiplicities multiplied,
   * summed per output tuple; none of multiplicity zero.
   */
  def answers(q: Cqap, db: Seq[Map[Seq[Any], Long]], inputs: Map[String, Any],
      domain: Seq[Any]): Map[Map[String, Any], Long] = {
    val vars = q.vars.toSeq.sorted.filterNot(inputs.contains)
    val assignments = vars.foldLeft(Seq(inputs)) { (acc, v) => acc.flatMap(a => domain.map(x => a + (v -> x))) }
    assignments.map { at =>
      val m = q.atoms.indices.map(i => db(i).getOrElse(q.atoms(i).vars.toSeq.sorted.map(at), 0L)).product
      at.filter { case (v, _) => q.outputs.contains(v) } -> m
    }.groupMapReduce(_._1)(_._2)(_ + _).filter(_._2 != 0)
  }

  /** Every request: each input variable over `domain` and one value outside it. */
  def requests(q: Cqap, domain: Seq[Any], outside: Any): Seq[Map[String, Any]] =
    q.inputs.toSeq.sorted.foldLeft(Seq(Map.empty[String, Any])) { (acc, v) =>
      acc.flatMap(a => (domain :+ outside).map(x => a + (v -> x)))
    }
}
