package io.sparkivm.access

import scala.collection.immutable.ArraySeq
import scala.collection.mutable

/**
 * The view trees of a CQAP (Zhang 2022, chapters 4 and 5), held in memory: one tree per
 * fracture component over a variable order, each node X keeping
 *
 *  - V_X(dep(X), X): the multiplicity of the join of X's subtree per value of X, grouped by
 *    dep(X) (the ancestors its atoms use), so that a lookup that fixes dep(X) iterates X's
 *    values directly; and
 *  - V'_X(dep(X)): the same summed over X (section 4.1), what X's parent joins.
 *
 * Atom i is kept as its tuples' multiplicities. An update of one tuple changes the views on the
 * path from its atom to the root (section 4.2): at each node the change is joined with the
 * node's other atoms and children's V'. When the tuple fixes every variable of the path (an
 * access-top order of a CQAP0 query) each join is a lookup and the update costs the depth of
 * the tree, whatever the data (Thm. 3.11); otherwise the join enumerates the missing values
 * through an index ([[Counts]]), which a light part bounds by N^eps (section 5.4, Prop. 5.23).
 *
 * A lookup binds the inputs and enumerates the outputs top-down; a value is listed only if
 * V_X > 0. Bound variables sit below free ones (free-top); their subtrees contribute their V'
 * as a multiplicity. `pseudo` variables are not bound by a request but were ordered as inputs
 * (a heavy part's key, section 5.3): their values are enumerated from V_X, at most N^(1-eps) of
 * them, and where such a variable is bound (summed out), the answers under its values are
 * merged by the UNION of section 5.5 (Fig. 5.12), each listed once with their summed
 * multiplicity ([[HeavyLightTrees]]).
 *
 * Values are Catalyst's internal values; a key is the values of its variables in order. Not
 * thread-safe: [[LookupTrees]] serializes updates and lookups.
 */
final class ViewTree private (atomVars: IndexedSeq[IndexedSeq[String]], components: Seq[ViewTree.Component],
    lowest: IndexedSeq[Option[ViewTree.Node]], val layout: String,
    indicators: Map[Int, Seq[Int]])
    extends AccessTrees {
  import ViewTree._

  private val atomCounts = atomVars.map(vs => new Counts(vs))
  private var tuples = 0L
  private var work = 0L
  private var visits = 0L
  private var held = 0L

  /** Tuples held across all atoms (distinct per atom). */
  def size: Long = tuples

  /** Atom `atom`'s tuples and multiplicities (for tests). */
  private[access] def atomTuples(atom: Int): collection.Map[Key, Long] = atomCounts(atom).counts

  /** View entries written and tuples joined by updates so far: the cost measure of section 5.4. */
  def updateWork: Long = work

  /** View entries held (V_X and V'_X), beside the atoms' tuples. */
  def entries: Long = held

  /** Values visited by lookups so far (each a step of enumeration or of a `contains`): their cost measure. */
  def lookupWork: Long = visits

  /**
   * Adds `delta` to the multiplicity of atom `atom`'s tuple `values` (one per variable of the
   * atom). Where the tuple enters or leaves the atom, its indicator projections (if the tree has
   * them) change too, after the atom's own change: then the views they restrict gain or lose the
   * tuple's combinations, joined with the atom's new count above them.
   */
  def update(atom: Int, values: IndexedSeq[Any], delta: Long): Unit = if (delta != 0) {
    val before = atomCounts(atom).get(ArraySeq.from(values))
    countTuple(before, delta)
    propagate(atom, values, delta)
    if (before == 0 || before + delta == 0) {
      indicators.getOrElse(atom, Nil).foreach(i => propagate(i, values, if (before == 0) 1L else -1L))
    }
  }

  /**
   * Loads tuples into empty trees in bulk: the atoms (and their indicator projections) first,
   * then each node's views once, bottom-up, as the join of its atoms and children's V'. The
   * same views as one update per tuple, without walking a tuple's path to the root.
   */
  override def load(input: Iterator[(Int, IndexedSeq[Any], Long)]): Unit = {
    require(tuples == 0, "load fills empty trees")
    input.foreach { case (atom, values, m) =>
      if (m != 0) {
        val key = ArraySeq.from(values)
        countTuple(atomCounts(atom).get(key), m)
        atomCounts(atom).add(key, m)
      }
    }
    indicators.foreach { case (a, ids) =>
      ids.foreach(i => atomCounts(a).counts.keysIterator.foreach(t => atomCounts(i).add(t, 1L)))
    }
    def fill(n: Node): Unit = {
      n.children.foreach(fill)
      val rels = n.atoms.map(a => Rel(atomVars(a), atomCounts(a))) ++ n.children.map(c => Rel(c.dep, c.total))
      join(Map.empty, 1L, rels).foreach { case (at, m) => if (m != 0) addOwn(n, keyOf(n.dep, at), at(n.variable), m) }
      n.own.foreach { case (dep, xs) => addTotal(n, dep, xs.valuesIterator.sum) }
      if (held > entryLimit) throw new AccessTrees.TooLarge(entryLimit)
    }
    components.foreach(_.roots.foreach(fill))
  }

  /** One atom's change, up the path from its node to the root (section 4.2). */
  private def propagate(atom: Int, values: IndexedSeq[Any], delta: Long): Unit = {
    atomCounts(atom).add(ArraySeq.from(values), delta)
    lowest(atom).foreach { node =>
      var changes: Iterable[(Map[String, Any], Long)] = Seq(atomVars(atom).zip(values).toMap -> delta)
      var n = node
      var from: Node = null
      while (n != null && changes.nonEmpty) {
        val rels = n.atoms.filter(a => !(from == null && a == atom)).map(a => Rel(atomVars(a), atomCounts(a))) ++
          n.children.filter(_ ne from).map(c => Rel(c.dep, c.total))
        val own = mutable.HashMap[(Key, Any), Long]()
        changes.foreach { case (at, d) =>
          join(at, d, rels).foreach { case (full, m) =>
            val k = (keyOf(n.dep, full), full(n.variable))
            own(k) = own.getOrElse(k, 0L) + m
          }
        }
        val totals = mutable.HashMap[Key, Long]()
        own.foreach { case ((dep, x), d) =>
          if (d != 0) {
            addOwn(n, dep, x, d)
            totals(dep) = totals.getOrElse(dep, 0L) + d
          }
        }
        totals.foreach { case (dep, d) => addTotal(n, dep, d) }
        if (held > entryLimit) throw new AccessTrees.TooLarge(entryLimit)
        changes = totals.filter(_._2 != 0).map { case (dep, d) => n.dep.zip(dep).toMap -> d }
        from = n
        n = n.parent
      }
    }
  }

  /** A distinct tuple entering or leaving an atom: `before` its multiplicity, `delta` the change. */
  private def countTuple(before: Long, delta: Long): Unit =
    if (before == 0) tuples += 1 else if (before + delta == 0) tuples -= 1

  /** Adds `d` to V_X(dep, x) of node `n`, keeping the count of entries held. */
  private def addOwn(n: Node, dep: Key, x: Any, d: Long): Unit = {
    val xs = n.own.getOrElseUpdate(dep, mutable.LinkedHashMap[Any, Long]())
    val had = xs.contains(x)
    add(xs, x, d)
    held += (if (xs.contains(x)) 1 else 0) - (if (had) 1 else 0)
    if (xs.isEmpty) n.own.remove(dep)
    work += 1
  }

  /** Adds `d` to V'_X(dep) of node `n`, keeping the count of entries held. */
  private def addTotal(n: Node, dep: Key, d: Long): Unit = {
    val had = n.total.get(dep) != 0
    n.total.add(dep, d)
    held += (if (n.total.get(dep) != 0) 1 else 0) - (if (had) 1 else 0)
  }

  private case class Rel(vars: IndexedSeq[String], counts: Counts)

  /**
   * The assignment `at` (multiplicity `m`) joined with `rels`: relations whose variables `at`
   * fixes first (lookups), then the one sharing most variables with it, through an index; of
   * several such, the one with the fewest matching tuples. That choice is what bounds a cyclic
   * join's update: of a light part's values and the heavy values, it enumerates whichever side
   * is smaller (Kara et al. 2020, section 4, Fig. 11).
   */
  private def join(at: Map[String, Any], m: Long, rels: Seq[Rel]): Iterator[(Map[String, Any], Long)] =
    if (rels.isEmpty) Iterator.single(at -> m)
    else {
      def fixed(r: Rel) = r.vars.indices.filter(i => at.contains(r.vars(i)))
      def fanOut(r: Rel) = { val f = fixed(r); r.counts.matchCount(f, ArraySeq.from(f.map(i => at(r.vars(i))))) }
      val r = rels.find(_.vars.forall(at.contains)).getOrElse {
        val most = rels.map(_.vars.count(at.contains)).max
        val tied = rels.filter(_.vars.count(at.contains) == most)
        if (tied.size == 1) tied.head else tied.minBy(fanOut)
      }
      val rest = rels.filterNot(_ eq r)
      if (r.vars.forall(at.contains)) {
        val c = r.counts.get(keyOf(r.vars, at))
        if (c == 0) Iterator.empty else join(at, m * c, rest)
      } else {
        val f = fixed(r)
        r.counts.matching(f, ArraySeq.from(f.map(i => at(r.vars(i))))).flatMap { case (t, c) =>
          work += 1
          join(at ++ r.vars.zip(t), m * c, rest)
        }
      }
    }

  /**
   * Where the views disagree with their definition (for tests): each V_X entry must be the
   * product of X's atoms and children's V' at its key, for exactly the keys of the joins of
   * tuples below X, and V'_X the sum of V_X over X. Local agreement at every node is agreement
   * with the query's join, by induction from the atoms up.
   */
  private[access] def violations(): Seq[String] = {
    val out = Seq.newBuilder[String]
    def check(n: Node): Unit = {
      n.children.foreach(check)
      // Every assignment of the node's variables that its atoms' and children's entries join to.
      val rels = n.atoms.map(a => Rel(atomVars(a), atomCounts(a))) ++ n.children.map(c => Rel(c.dep, c.total))
      val expected = mutable.HashMap[(Key, Any), Long]()
      def all(at: Map[String, Any], m: Long, rs: Seq[Rel]): Unit = rs match {
        case Seq() => val k = (keyOf(n.dep, at), at(n.variable)); expected(k) = expected.getOrElse(k, 0L) + m
        case r +: rest => r.counts.counts.foreach { case (t, c) =>
            val bound = r.vars.zip(t)
            if (bound.forall { case (v, x) => at.get(v).forall(_ == x) }) all(at ++ bound, m * c, rest)
          }
      }
      all(Map.empty, 1L, rels)
      expected.foreach { case ((dep, x), e) =>
        val held = n.own.get(dep).flatMap(_.get(x)).getOrElse(0L)
        if (held != e) out += s"V_${n.variable}($dep, $x) = $held, expected $e"
      }
      n.own.foreach { case (dep, xs) =>
        xs.keys.filterNot(x => expected.get((dep, x)).exists(_ != 0))
          .foreach(x => out += s"V_${n.variable}($dep, $x) has no tuples")
        if (n.total.get(dep) != xs.values.sum) out += s"V'_${n.variable}($dep) is not the sum of V_${n.variable}"
      }
      n.total.counts.keys.filterNot(n.own.contains).foreach(dep =>
        out += s"V'_${n.variable}($dep) without V_${n.variable}")
    }
    components.foreach(_.roots.foreach(check))
    indicators.foreach { case (a, ids) =>
      ids.foreach { i =>
        if (atomCounts(i).counts != atomCounts(a).counts.map { case (t, _) => t -> 1L }) {
          out += s"the indicator projection $i is not the support of atom $a"
        }
      }
    }
    out.result()
  }

  /**
   * The answers to one access request: assignments of the output variables (and of the inputs
   * and pseudo-inputs that are free) with their multiplicities, lazily. `inputs` binds every
   * input variable.
   */
  def lookup(inputs: Map[String, Any]): Iterator[(Map[String, Any], Long)] =
    ViewTree.product(components.map { c => () =>
      val rootAtoms = atomsAt(c.rootAtoms, inputs)
      if (rootAtoms == 0) Iterator.empty else combined(c.roots, inputs, rootAtoms, c.inputs)
    })

  /**
   * The multiplicity of one answer: `at` binds every free variable (inputs and outputs), so
   * only bound variables are summed (a pseudo-input's by its values, at most N^(1-eps)).
   * The `contains` of the thesis's view iterators.
   */
  def multiplicity(at: Map[String, Any]): Long =
    components.foldLeft(1L) { (acc, c) =>
      if (acc == 0) 0L
      else acc * atomsAt(c.rootAtoms, at) *
        c.roots.foldLeft(1L)((p, r) => if (p == 0) 0L else p * below(r, at))
    }

  private def below(n: Node, at: Map[String, Any]): Long =
    if (!n.free) n.total.get(keyOf(n.dep, at))
    else at.get(n.variable) match {
      case Some(_) => product(n, at)
      case None => // a pseudo-input bound variable: summed over its values
        n.own.get(keyOf(n.dep, at)).iterator.flatMap(_.keysIterator)
          .map(x => product(n, at.updated(n.variable, x))).sum
    }

  /** The product of the multiplicities of `atoms` at `at`, which fixes their variables. */
  private def atomsAt(atoms: Seq[Int], at: Map[String, Any]): Long =
    atoms.foldLeft(1L)((acc, a) => if (acc == 0) 0L else acc * atomCounts(a).get(keyOf(atomVars(a), at)))

  /** The product of `node`'s atoms and children at `at`, the children evaluated by [[below]]. */
  private def product(node: Node, at: Map[String, Any]): Long = {
    visits += 1
    var p = atomsAt(node.atoms, at)
    val children = node.children.iterator
    while (p != 0 && children.hasNext) p *= below(children.next(), at)
    p
  }

  /** The Cartesian product of sibling subtrees' answers under the assignment `at`. */
  private def combined(nodes: Seq[Node], at: Map[String, Any], m: Long,
      inputs: Set[String]): Iterator[(Map[String, Any], Long)] =
    nodes.foldLeft(Iterator.single((at, m))) { (partial, n) =>
      partial.flatMap { case (a, k) => subtree(n, a, inputs).map { case (b, j) => (b, k * j) } }
    }

  private def subtree(n: Node, at: Map[String, Any], inputs: Set[String]): Iterator[(Map[String, Any], Long)] = {
    val dep = keyOf(n.dep, at)
    def under(x: Any): Iterator[(Map[String, Any], Long)] = {
      visits += 1
      val extended = at.updated(n.variable, x)
      val atoms = atomsAt(n.atoms, extended)
      if (atoms == 0) Iterator.empty else combined(n.children, extended, atoms, inputs)
    }
    if (!n.free) Iterator.single((at, n.total.get(dep))).filter(_._2 != 0)
    else if (inputs.contains(n.variable)) {
      val x = at(n.variable)
      if (n.own.get(dep).exists(_.getOrElse(x, 0L) != 0)) under(x) else Iterator.empty
    } else {
      val xs = n.own.get(dep).iterator.flatMap(_.keysIterator)
      if (!n.hidden) xs.flatMap(under)
      else {
        // A bound pseudo-input: the same answer may come from several of its values. One
        // iterator per value, merged so that each answer is listed once (section 5.5), with the
        // sum of its multiplicities under every value.
        val values = xs.toIndexedSeq
        val parts = values.map(x =>
          (() => under(x).map(_._1 - n.variable),
            (o: Map[String, Any]) => product(n, o.updated(n.variable, x))))
        ViewTree.merged(parts)
      }
    }
  }
}

object ViewTree {
  type Key = ArraySeq[Any]

  private[access] final class Node(val variable: String, val free: Boolean, val hidden: Boolean, val parent: Node) {
    var dep: IndexedSeq[String] = IndexedSeq.empty
    var children: Seq[Node] = Nil
    var atoms: Seq[Int] = Nil
    val own: mutable.HashMap[Key, mutable.LinkedHashMap[Any, Long]] = mutable.HashMap()
    lazy val total: Counts = new Counts(dep)
  }

  private[access] case class Component(roots: Seq[Node], rootAtoms: Seq[Int], inputs: Set[String])

  private def keyOf(vars: IndexedSeq[String], at: Map[String, Any]): Key = ArraySeq.from(vars.map(at))

  private def add[K](map: mutable.Map[K, Long], key: K, delta: Long): Unit = {
    val n = map.getOrElse(key, 0L) + delta
    if (n == 0) map.remove(key) else map(key) = n
  }

  /**
   * The Cartesian product of the fracture components' answers (each opened by a function),
   * assignments merged and multiplicities multiplied. Every component is opened once first: one
   * without answers empties the product before any other is enumerated for nothing; the later
   * ones are opened again per answer of the earlier ones, so the delay stays theirs.
   */
  def product(parts: Seq[() => Iterator[(Map[String, Any], Long)]]): Iterator[(Map[String, Any], Long)] = {
    val firsts = parts.map(_())
    if (firsts.exists(!_.hasNext)) Iterator.empty
    else firsts.indices.foldLeft(Iterator.single((Map.empty[String, Any], 1L))) { (partial, i) =>
      var first = Option(firsts(i))
      partial.flatMap { case (at, m) =>
        val answers = first.getOrElse(parts(i)())
        first = None
        answers.map { case (b, k) => (at ++ b, m * k) }
      }
    }
  }

  /**
   * UNION (Zhang 2022, Fig. 5.12): every element of several iterators, each listed once, each
   * iterator with its `contains`. For the first iterator and the union U of the others: an
   * element of the first that U contains is replaced by U's next (it comes out of U instead),
   * others are listed; then the rest of U. Each step lists an element after at most one call
   * per iterator, so the delay is the iterators' count times the slowest one's.
   */
  private def union[T](parts: Seq[(() => Iterator[T], T => Long)]): Iterator[T] = parts match {
    case Seq() => Iterator.empty
    case Seq((only, _)) => only()
    case (first, _) +: others =>
      val rest = union(others)
      val inRest = (t: T) => others.exists(_._2(t) != 0)
      // (Each of the others lists what it contains, so U has a next whenever the first's element
      // is in it: the guard only keeps a tree whose counts went negative from failing the lookup.)
      first().map(t => if (inRest(t) && rest.hasNext) rest.next() else t) ++ rest
  }

  /** [[union]], each element with its multiplicity: the sum of the iterators' `contains`. */
  def merged[T](parts: Seq[(() => Iterator[T], T => Long)]): Iterator[(T, Long)] =
    union(parts).map(o => o -> parts.map(_._2(o)).sum)

  /**
   * Empty view trees for `atomVars` (each atom's variables, in the order its tuples give them)
   * over the given orders of the components, or why an order does not allow them: no free
   * variable may sit below a bound one (free-top). `pseudo` variables are ordered as inputs
   * but not bound by requests (the keys of heavy parts); where the query sums them out, their
   * answers are merged. For an access-top order of a CQAP0 query every update is a path of lookups.
   */
  def build(atomVars: IndexedSeq[IndexedSeq[String]], components: Seq[(Seq[VoTree], Cqap)],
      atomIndex: Atom => Int, pseudo: Set[String] = Set.empty,
      layout: String = "view trees of access-top orders (CQAP0: O(1) update and delay)",
      indicators: Boolean = false): Either[String, ViewTree] = {
    val lowest = Array.fill[Option[Node]](atomVars.size)(None)
    def node(t: VarNode, parent: Node, path: Seq[String], q: Cqap): Either[String, Node] = {
      val free = q.free.contains(t.v) || pseudo.contains(t.v)
      if (free && parent != null && !parent.free) return Left(s"free variable ${t.v} is below a bound one")
      val n = new Node(t.v, free, hidden = pseudo.contains(t.v) && !q.free.contains(t.v), parent)
      val here = path :+ t.v
      val kids = t.children.collect { case v: VarNode => node(v, n, here, q) }
      kids.collectFirst { case Left(why) => return Left(why) }
      n.children = kids.collect { case Right(c) => c }
      n.atoms = t.children.collect { case AtomLeaf(a) => atomIndex(a) }
      n.atoms.foreach(i => lowest(i) = Some(n))
      val used = t.atoms.flatMap(_.vars).toSet
      n.dep = path.filter(used.contains).toIndexedSeq
      Right(n)
    }
    val built = components.map { case (order, q) =>
      val roots = order.collect { case v: VarNode => node(v, null, Nil, q) }
      roots.collectFirst { case Left(why) => return Left(why) }
      Component(roots.collect { case Right(r) => r }, order.collect { case AtomLeaf(a) => atomIndex(a) }, q.inputs)
    }
    // Indicator projections (section 4.3): an atom above a node whose variables its view's key
    // holds restricts that view to the atom's support, which keeps the views of a cyclic join
    // to the combinations the rest of the join can use (a triangle's wedge view to triangles).
    val extra = mutable.ArrayBuffer[(Int, Node)]()
    if (indicators) {
      def visit(n: Node): Unit = {
        var up = n.parent
        while (up != null) {
          up.atoms.filter(_ < atomVars.size).foreach { a =>
            if (atomVars(a).forall(n.dep.contains)) extra += ((a, n))
          }
          up = up.parent
        }
        n.children.foreach(visit)
      }
      built.foreach(_.roots.foreach(visit))
      extra.zipWithIndex.foreach { case ((_, n), i) => n.atoms = n.atoms :+ (atomVars.size + i) }
    }
    val allVars = atomVars ++ extra.map { case (a, _) => atomVars(a) }
    val allLowest = lowest.toIndexedSeq ++ extra.map { case (_, n) => Some(n) }
    val byAtom = extra.toSeq.zipWithIndex.groupMap(_._1._1)(e => atomVars.size + e._2).map { case (a, ids) =>
      a -> ids.toSeq
    }
    Right(new ViewTree(allVars, built, allLowest, s"${built.size} $layout", byAtom))
  }
}
