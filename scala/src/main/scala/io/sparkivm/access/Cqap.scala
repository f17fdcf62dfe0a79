package io.sparkivm.access

/** One atom R(X) of a conjunctive query: a table occurrence and the variables of its columns. */
case class Atom(name: String, vars: Set[String]) {
  override def toString: String = s"$name(${vars.toSeq.sorted.mkString(", ")})"
}

/**
 * A conjunctive query with access pattern Q(O | I) (Zhang 2022, section 2.1): atoms over
 * variables, the input variables I an access request binds, the output variables O it returns;
 * every other variable is bound (summed out).
 */
case class Cqap(atoms: Seq[Atom], inputs: Set[String], outputs: Set[String]) {
  require((inputs & outputs).isEmpty, "a variable is either input or output")
  val vars: Set[String] = atoms.flatMap(_.vars).toSet
  def free: Set[String] = inputs ++ outputs
  def bound: Set[String] = vars -- free

  /** The atoms that contain `v`. */
  def atomsOf(v: String): Set[Int] = atoms.indices.filter(i => atoms(i).vars.contains(v)).toSet

  /** B dominates A iff atoms(A) is a strict subset of atoms(B) (section 3.1). */
  def dominates(b: String, a: String): Boolean = {
    val (ab, aa) = (atomsOf(b), atomsOf(a))
    aa.subsetOf(ab) && aa != ab
  }

  /** For any two variables, their atom sets are nested or disjoint. */
  def hierarchical: Boolean = {
    val sets = vars.toSeq.map(atomsOf)
    sets.forall(a => sets.forall(b => a.subsetOf(b) || b.subsetOf(a) || (a & b).isEmpty))
  }

  /** Variables that break `role`-dominance: not in `role`, dominating a variable in `role`. */
  private def violators(role: Set[String]): Set[String] =
    (vars -- role).filter(b => role.exists(a => dominates(b, a)))

  /** Every variable dominating a free variable is free (Def. 3.7). */
  def freeDominant: Boolean = violators(free).isEmpty

  /** Every variable dominating an input variable is an input (Def. 3.7). */
  def inputDominant: Boolean = violators(inputs).isEmpty

  /**
   * Def. 3.8: every violating variable B has, for each of its atoms R, another atom S of B such
   * that R and S together contain all the `role` variables B dominates.
   */
  private def almost(role: Set[String]): Boolean = violators(role).forall { b =>
    val dominated = role.filter(a => dominates(b, a))
    val mine = atomsOf(b).toSeq
    mine.forall(r => mine.exists(s => s != r && dominated.subsetOf(atoms(r).vars ++ atoms(s).vars)))
  }
  def almostFreeDominant: Boolean = !freeDominant && almost(free)
  def almostInputDominant: Boolean = !inputDominant && almost(inputs)

  /**
   * The fracture (Def. 3.1): each input variable is copied once per atom, the components of the
   * resulting hypergraph are taken, and within a component the copies of one input are merged
   * back. A request's answer is the Cartesian product of the components' answers.
   */
  def fracture: Seq[Cqap] = {
    // Atoms are connected by shared non-input variables (inputs are copied per atom).
    val parent = Array.tabulate(atoms.size)(identity)
    def find(i: Int): Int = if (parent(i) == i) i else { parent(i) = find(parent(i)); parent(i) }
    for (v <- vars -- inputs; group = atomsOf(v).toSeq; i <- group.drop(1)) {
      parent(find(i)) = find(group.head)
    }
    atoms.indices.groupBy(find).values.toSeq.sortBy(_.min).map { members =>
      val as = members.sorted.map(atoms)
      val vs = as.flatMap(_.vars).toSet
      Cqap(as, inputs & vs, outputs & vs)
    }
  }

  override def toString: String = {
    def list(s: Set[String]) = if (s.isEmpty) "·" else s.toSeq.sorted.mkString(", ")
    s"Q(${list(outputs)} | ${list(inputs)}) = ${atoms.mkString(", ")}"
  }
}
