package io.sparkivm.access

import io.sparkivm.errors.IvmErrors

/**
 * A variable order (Zhang 2022, section 2.3): a rooted forest with one node per variable, each
 * atom a leaf under the lowest of its variables, every atom's variables on one root path.
 */
sealed trait VoTree {
  def vars: Set[String]
  def atoms: Seq[Atom]
}
case class VarNode(v: String, children: Seq[VoTree]) extends VoTree {
  def vars: Set[String] = children.flatMap(_.vars).toSet + v
  def atoms: Seq[Atom] = children.flatMap(_.atoms)
}
case class AtomLeaf(atom: Atom) extends VoTree {
  def vars: Set[String] = Set.empty
  def atoms: Seq[Atom] = Seq(atom)
}

/** A view of a view tree: its variable, schema, and whether it is auxiliary (section 4.1). */
case class TreeView(variable: String, schema: Seq[String], auxiliary: Boolean, depth: Int) {
  def name: String = (if (auxiliary) s"V'_$variable" else s"V_$variable") + schema.mkString("(", ", ", ")")
}

object VariableOrder {

  /**
   * The canonical variable order of a hierarchical query (section 2.3): a variable's parent is
   * the variable with the smallest atom set containing its own (equal sets form a chain, in
   * name order); each atom hangs under its lowest variable, so its schema is exactly its path.
   */
  def canonical(q: Cqap): Seq[VoTree] = {
    require(q.hierarchical, s"not hierarchical: $q")
    val order = q.vars.toSeq.sortBy(v => (-q.atomsOf(v).size, v))
    val parent: Map[String, Option[String]] = order.zipWithIndex.map { case (v, i) =>
      v -> order.take(i).filter(u => q.atomsOf(v).subsetOf(q.atomsOf(u))).lastOption
    }.toMap
    val depth: Map[String, Int] = {
      def d(v: String): Int = parent(v).map(d(_) + 1).getOrElse(0)
      order.map(v => v -> d(v)).toMap
    }
    def lowest(a: Atom): Option[String] = if (a.vars.isEmpty) None else Some(a.vars.maxBy(v => (depth(v), v)))
    def node(v: String): VarNode = VarNode(v,
      order.filter(c => parent(c).contains(v)).map(node) ++
        q.atoms.filter(a => lowest(a).contains(v)).map(AtomLeaf))
    order.filter(v => parent(v).isEmpty).map(node) ++ q.atoms.filter(_.vars.isEmpty).map(AtomLeaf)
  }

  /**
   * ACC-TOP (section 5.2.1, Fig. 5.1) over a canonical order: at X, the variables D taken from its
   * subtree (none if X is an input; the inputs below it if it is an output; the free variables
   * below it if it is bound) are put above X as a chain, inputs first. The result is an
   * access-top order with the query's static and dynamic widths (Prop. 5.4).
   */
  def accessTop(tree: VoTree, q: Cqap): Seq[VoTree] = tree match {
    case leaf: AtomLeaf => Seq(leaf)
    case VarNode(x, children) =>
      val below = children.flatMap(_.vars).toSet
      val d = if (q.inputs.contains(x)) Set.empty[String]
      else if (q.outputs.contains(x)) below & q.inputs
      else below & q.free
      val rest = VarNode(x, children.flatMap(delete(_, d)).flatMap(accessTop(_, q)))
      val chain = (d & q.inputs).toSeq.sorted ++ (d & q.outputs).toSeq.sorted
      Seq(chain.foldRight(rest: VoTree)((v, t) => VarNode(v, Seq(t))))
  }

  /**
   * A chain over all of a (possibly cyclic) query's variables, inputs first, then outputs, then
   * bound variables (most atoms first), each atom under the lowest of its variables: every atom's
   * variables lie on the one root path, so it is a variable order of any query, access-top and
   * free-top (section 4.1; Thm. 3.4's general view trees, without indicator projections). Its view
   * trees give constant delay; an update joins the atoms that do not hold its path's variables.
   */
  def chain(q: Cqap): Seq[VoTree] = {
    val order = q.inputs.toSeq.sorted ++ q.outputs.toSeq.sorted ++ q.bound.toSeq.sortBy(v => (-q.atomsOf(v).size, v))
    val position = order.zipWithIndex.toMap
    def lowest(a: Atom): Int = a.vars.map(position).max
    def node(i: Int): VoTree = VarNode(order(i),
      (if (i + 1 < order.size) Seq(node(i + 1)) else Nil) ++
        q.atoms.filter(a => a.vars.nonEmpty && lowest(a) == i).map(AtomLeaf))
    (if (order.isEmpty) Nil else Seq(node(0))) ++ q.atoms.filter(_.vars.isEmpty).map(AtomLeaf)
  }

  /** Fig. 5.2: `tree` without the variables in `d` (a deleted variable's children move up). */
  private def delete(tree: VoTree, d: Set[String]): Seq[VoTree] = tree match {
    case leaf: AtomLeaf => Seq(leaf)
    case VarNode(x, children) =>
      val kept = children.flatMap(delete(_, d))
      if (d.contains(x)) kept else Seq(VarNode(x, kept))
  }

  /** rho: the fewest atoms that together contain `vars` (= rho* for hierarchical queries, Lemma 5.13). */
  def edgeCover(vars: Set[String], atoms: Seq[Atom]): Int = {
    if (vars.isEmpty) return 0
    val useful = atoms.filter(a => (a.vars & vars).nonEmpty).distinct
    (1 to useful.size).find(k => useful.combinations(k).exists(c => vars.subsetOf(c.flatMap(_.vars).toSet)))
      .getOrElse(throw IvmErrors.internal(s"no atoms cover ${vars.mkString(", ")}"))
  }

  /**
   * The static and dynamic widths (w, delta) of a hierarchical query, from its canonical order
   * (Lemma 5.11): w = max(1, xi), xi the largest edge cover of the free variables below a bound
   * variable or of the inputs below an output one; delta = kappa, the same after removing the
   * schema of one atom below that variable (an update fixes it).
   */
  def widths(q: Cqap): (Int, Int) = {
    var xi = 0
    var kappa = 0
    def visit(t: VoTree): Unit = t match {
      case AtomLeaf(_) =>
      case n @ VarNode(x, children) =>
        val target = if (q.bound.contains(x)) Some(n.vars & q.free)
        else if (q.outputs.contains(x)) Some(n.vars & q.inputs) else None
        target.foreach { vs =>
          xi = math.max(xi, edgeCover(vs, n.atoms))
          n.atoms.foreach(r => kappa = math.max(kappa, edgeCover(vs -- r.vars, n.atoms)))
        }
        children.foreach(visit)
    }
    canonical(q).foreach(visit)
    (math.max(1, xi), kappa)
  }

  /**
   * The view tree tau(omega) of an order (section 4.1), top-down: at each variable X the view
   * V_X over {X} and dep(X) (the ancestors that variables of X's subtree share an atom with),
   * and V'_X summing X out when X has siblings.
   */
  def viewTree(order: Seq[VoTree]): Seq[TreeView] = {
    def walk(t: VoTree, ancestors: Seq[String], siblings: Boolean, depth: Int): Seq[TreeView] = t match {
      case AtomLeaf(_) => Nil
      case n @ VarNode(x, children) =>
        val used = n.atoms.flatMap(_.vars).toSet
        val dep = ancestors.filter(used.contains)
        val own = TreeView(x, dep :+ x, auxiliary = false, depth)
        val aux = if (siblings) Seq(TreeView(x, dep, auxiliary = true, depth)) else Nil
        aux ++ (own +: children.flatMap(walk(_, ancestors :+ x, children.size > 1, depth + 1)))
    }
    order.flatMap(walk(_, Nil, order.size > 1, 0))
  }

  /** An order as indented text, one variable or atom per line. */
  def render(order: Seq[VoTree], indent: String = ""): Seq[String] = order.flatMap {
    case AtomLeaf(a) => Seq(s"$indent$a")
    case VarNode(x, children) => s"$indent$x" +: render(children, indent + "  ")
  }
}
