package io.sparkivm.access

import scala.collection.immutable.ArraySeq
import scala.collection.mutable

/**
 * The view trees of a CQAP0 query (Zhang 2022, chapter 4), held in memory: one tree per
 * fracture component, over its access-top variable order, each node X keeping
 *
 *  - V_X(dep(X), X): the multiplicity of the join of X's subtree per value of X, grouped by
 *    dep(X) (the ancestors its atoms use), so that a lookup that fixes dep(X) iterates X's
 *    values directly; and
 *  - V'_X(dep(X)): the same summed over X (section 4.1), what X's parent joins.
 *
 * Atom i is kept as its tuples' multiplicities. An update of one tuple changes one entry of each
 * view on the path from its atom to the root (the propagation of section 4.2: each step
 * multiplies by the siblings' views at the tuple's own values), so it costs the depth of the
 * tree times its fan-out, whatever the data (Thm. 3.11: constant for CQAP0). A lookup binds the
 * inputs, which an access-top order puts first, and enumerates the outputs top-down: a value
 * is listed only if every child has matches (V_X > 0), so there are no dead ends and the delay
 * between answers does not depend on the data. Bound variables sit below free ones (free-top);
 * their subtrees contribute their V' as a multiplicity.
 *
 * Values are Catalyst's internal values; a key is the values of its variables in order. Not
 * thread-safe: [[ResidentTrees]] serializes updates and lookups.
 */
final class ViewTree private (atomVars: IndexedSeq[IndexedSeq[String]], components: Seq[ViewTree.Component],
    lowest: IndexedSeq[Option[ViewTree.Node]]) {
  import ViewTree._

  private val atomCounts = atomVars.map(_ => mutable.HashMap[Key, Long]())
  private var tuples = 0L

  /** Tuples held across all atoms (distinct per atom). */
  def size: Long = tuples

  /** Adds `delta` to the multiplicity of atom `atom`'s tuple `values` (one per variable of the atom). */
  def update(atom: Int, values: IndexedSeq[Any], delta: Long): Unit = if (delta != 0) {
    val at: Map[String, Any] = atomVars(atom).zip(values).toMap
    val key = keyOf(atomVars(atom), at)
    val before = atomCounts(atom).getOrElse(key, 0L)
    add(atomCounts(atom), key, delta)
    if (before == 0) tuples += 1 else if (before + delta == 0) tuples -= 1
    lowest(atom).foreach { node =>
      var d = delta * product(node, at, skipAtom = atom, skipChild = null)
      var n = node
      while (n != null && d != 0) {
        val dep = keyOf(n.dep, at)
        val own = n.own.getOrElseUpdate(dep, mutable.LinkedHashMap[Any, Long]())
        add(own, at(n.variable), d)
        if (own.isEmpty) n.own.remove(dep)
        add(n.total, dep, d)
        val parent = n.parent
        if (parent != null) d *= product(parent, at, skipAtom = -1, skipChild = n)
        n = parent
      }
    }
  }

  /** The product of `node`'s atoms and children at `at`, all but one atom or child. */
  private def product(node: Node, at: Map[String, Any], skipAtom: Int, skipChild: Node): Long = {
    var p = 1L
    val atoms = node.atoms.iterator
    while (p != 0 && atoms.hasNext) {
      val a = atoms.next()
      if (a != skipAtom) p *= atomCounts(a).getOrElse(keyOf(atomVars(a), at), 0L)
    }
    val children = node.children.iterator
    while (p != 0 && children.hasNext) {
      val c = children.next()
      if (c ne skipChild) p *= c.total.getOrElse(keyOf(c.dep, at), 0L)
    }
    p
  }

  /**
   * Where the views disagree with their definition (for tests): each V_X entry must be the
   * product of X's atoms and children's V' at its key, for exactly the keys of the tuples
   * below X, and V'_X the sum of V_X over X. Local agreement at every node is agreement with
   * the query's join, by induction from the atoms up.
   */
  private[access] def violations(): Seq[String] = {
    val out = Seq.newBuilder[String]
    def below(n: Node): Seq[Int] = n.atoms ++ n.children.flatMap(below)
    def check(n: Node): Unit = {
      n.children.foreach(check)
      val tuples = below(n).flatMap(a => atomCounts(a).keys.map(t => atomVars(a).zip(t).toMap))
      val keys = tuples.map(at => (keyOf(n.dep, at), at(n.variable)) -> at).toMap
      keys.foreach { case ((dep, x), at) =>
        val expected = product(n, at, skipAtom = -1, skipChild = null)
        val held = n.own.get(dep).flatMap(_.get(x)).getOrElse(0L)
        if (held != expected) out += s"V_${n.variable}($dep, $x) = $held, expected $expected"
      }
      n.own.foreach { case (dep, xs) =>
        xs.keys.filterNot(x => keys.contains((dep, x))).foreach(x => out += s"V_${n.variable}($dep, $x) has no tuples")
        if (n.total.getOrElse(dep, 0L) != xs.values.sum) {
          out += s"V'_${n.variable}($dep) is not the sum of V_${n.variable}"
        }
      }
      n.total.keys.filterNot(n.own.contains).foreach(dep => out += s"V'_${n.variable}($dep) without V_${n.variable}")
    }
    components.foreach(_.roots.foreach(check))
    out.result()
  }

  /**
   * The answers to one access request: assignments of the output variables with their
   * multiplicities, lazily. `inputs` binds every input variable.
   */
  def lookup(inputs: Map[String, Any]): Iterator[(Map[String, Any], Long)] =
    components.foldLeft(Iterator.single((inputs, 1L))) { (partial, c) =>
      partial.flatMap { case (at, m) =>
        val rootAtoms = c.rootAtoms.foldLeft(m)((acc, a) => acc * atomCounts(a).getOrElse(keyOf(atomVars(a), at), 0L))
        if (rootAtoms == 0) Iterator.empty else combined(c.roots, at, rootAtoms, c.inputs)
      }
    }

  /** The Cartesian product of sibling subtrees' answers under the assignment `at`. */
  private def combined(nodes: Seq[Node], at: Map[String, Any], m: Long,
      inputs: Set[String]): Iterator[(Map[String, Any], Long)] =
    nodes.foldLeft(Iterator.single((at, m))) { (partial, n) =>
      partial.flatMap { case (a, k) => subtree(n, a, inputs).map { case (b, j) => (b, k * j) } }
    }

  private def subtree(n: Node, at: Map[String, Any], inputs: Set[String]): Iterator[(Map[String, Any], Long)] = {
    val dep = keyOf(n.dep, at)
    def below(x: Any): Iterator[(Map[String, Any], Long)] = {
      val extended = at.updated(n.variable, x)
      val atoms = n.atoms.foldLeft(1L)((acc, a) => acc * atomCounts(a).getOrElse(keyOf(atomVars(a), extended), 0L))
      if (atoms == 0) Iterator.empty else combined(n.children, extended, atoms, inputs)
    }
    if (!n.free) Iterator.single((at, n.total.getOrElse(dep, 0L))).filter(_._2 != 0)
    else if (inputs.contains(n.variable)) {
      val x = at(n.variable)
      if (n.own.get(dep).exists(_.getOrElse(x, 0L) != 0)) below(x) else Iterator.empty
    } else n.own.get(dep).iterator.flatMap(_.keysIterator).flatMap(below)
  }
}

object ViewTree {
  type Key = ArraySeq[Any]

  private[access] final class Node(val variable: String, val free: Boolean, val parent: Node) {
    var dep: IndexedSeq[String] = IndexedSeq.empty
    var children: Seq[Node] = Nil
    var atoms: Seq[Int] = Nil
    val own: mutable.HashMap[Key, mutable.LinkedHashMap[Any, Long]] = mutable.HashMap()
    val total: mutable.HashMap[Key, Long] = mutable.HashMap()
  }

  private[access] case class Component(roots: Seq[Node], rootAtoms: Seq[Int], inputs: Set[String])

  private def keyOf(vars: IndexedSeq[String], at: Map[String, Any]): Key = ArraySeq.from(vars.map(at))

  private def add[K](map: mutable.Map[K, Long], key: K, delta: Long): Unit = {
    val n = map.getOrElse(key, 0L) + delta
    if (n == 0) map.remove(key) else map(key) = n
  }

  /**
   * Empty view trees for `atomVars` (each atom's variables, in the order its tuples give them)
   * over the access-top orders of the components, or why the orders do not allow them: every
   * atom must hold all variables on its path to the root (so that an update fixes the key of
   * every view it changes), and no free variable may sit below a bound one (free-top). For a
   * CQAP0 query both hold.
   */
  def build(atomVars: IndexedSeq[IndexedSeq[String]], components: Seq[(Seq[VoTree], Cqap)],
      atomIndex: Atom => Int): Either[String, ViewTree] = {
    val lowest = Array.fill[Option[Node]](atomVars.size)(None)
    def node(t: VarNode, parent: Node, path: Seq[String], q: Cqap): Either[String, Node] = {
      val free = q.free.contains(t.v)
      if (free && parent != null && !parent.free) return Left(s"free variable ${t.v} is below a bound one")
      val n = new Node(t.v, free, parent)
      val here = path :+ t.v
      val kids = t.children.collect { case v: VarNode => node(v, n, here, q) }
      kids.collectFirst { case Left(why) => return Left(why) }
      n.children = kids.collect { case Right(c) => c }
      n.atoms = t.children.collect { case AtomLeaf(a) => atomIndex(a) }
      n.atoms.foreach { i =>
        val missing = here.filterNot(atomVars(i).contains)
        if (missing.nonEmpty) return Left(s"atom ${t.atoms.find(a => atomIndex(a) == i).get} does not hold " +
          s"${missing.mkString(", ")} of its path")
        lowest(i) = Some(n)
      }
      val used = t.atoms.flatMap(_.vars).toSet
      n.dep = path.filter(used.contains).toIndexedSeq
      Right(n)
    }
    val built = components.map { case (order, q) =>
      val roots = order.collect { case v: VarNode => node(v, null, Nil, q) }
      roots.collectFirst { case Left(why) => return Left(why) }
      Component(roots.collect { case Right(r) => r }, order.collect { case AtomLeaf(a) => atomIndex(a) }, q.inputs)
    }
    Right(new ViewTree(atomVars, built, lowest.toIndexedSeq))
  }
}
