package io.sparkivm.access

import scala.collection.immutable.ArraySeq
import scala.collection.mutable

/**
 * The view trees of a CQAP whose fracture components are hierarchical, with the heavy/light
 * trade-off of Zhang 2022, chapter 5: for components outside CQAP0, update time O(N^(delta eps))
 * amortized and enumeration delay O(N^(1-eps)), eps in [0, 1] (Thm. 3.5); CQAP0 components keep
 * their single access-top tree (constant update and delay).
 *
 * Each component's orders come from [[HeavyLightTrees.omega]] (section 5.3, Fig. 5.5): where a
 * variable X is bound with free variables below it, or an output with inputs below it, its atoms
 * are split on the key anc(X) + X into a heavy part (at most N^(1-eps) keys, each of degree at
 * least N^eps / 2 in some atom; X is then ordered as an input and its values enumerated) and a
 * light part (every key of degree below 3/2 N^eps in every atom; ACC-TOP's access-top order,
 * whose update joins at most N^eps tuples per unfixed atom). A tuple goes to the trees whose
 * parts its keys are in (section 5.2). A request's answer is the UNION of the trees' answers
 * (section 5.5), each answer listed once with its multiplicities summed: the parts are disjoint
 * and together the query (Prop. 5.9), so multiplicities add.
 *
 * Rebalancing (section 5.6): with N tuples and M the size bound, floor(M/4) <= N < M must hold,
 * else M becomes 2N + 1 and every key is partitioned again strictly at theta = M^eps (major);
 * after each update, a light key reaching 3/2 theta tuples in some atom, or a heavy key below
 * theta / 2 in all of them, moves to the other part (minor). Not thread-safe.
 */
final class HeavyLightTrees private (val query: Cqap, atomVars: IndexedSeq[IndexedSeq[String]], val eps: Double,
    components: Seq[HeavyLightTrees.ComponentTrees], kind: String = "heavy/light view tree(s)")
    extends AccessTrees {
  import HeavyLightTrees._

  private val store = atomVars.map(vs => new Counts(vs))
  private val componentOf: Map[Int, ComponentTrees] =
    components.flatMap(c => c.atoms.map(_ -> c)).toMap

  /** Each partition key: its variables and the atoms (all containing them) whose degrees decide it. */
  private val keys: IndexedSeq[(IndexedSeq[String], Set[Int])] =
    components.flatMap(_.variants.flatMap(_.parts)).map(p => (p.key, p.atoms)).distinct.toIndexedSeq
  private val keyIds: Map[IndexedSeq[String], Int] = keys.map(_._1).zipWithIndex.toMap
  private val heavy = keys.map(_ => mutable.HashSet[Key]())

  /** The partition keys each atom's tuples are placed by. */
  private val keysOf: IndexedSeq[Seq[Int]] = atomVars.indices.map(a => keys.indices.filter(k => keys(k)._2.contains(a)))
  private var n = 0L
  private var bound = 1L
  private var moves = 0L
  private var majors = 0L

  /** Tuples held (distinct per atom). */
  def size: Long = n
  def layout: String = {
    val heavyNow = heavyKeys.map(_._2).sum
    f"$trees $kind at eps = $eps%.2f (threshold M^eps = $threshold%.1f, $heavyNow heavy " +
      s"key(s); rebalancing so far: ${moves} tuple(s) moved, $majors major)"
  }

  /** The threshold of the current partition, M^eps. */
  def threshold: Double = math.pow(bound.toDouble, eps)
  def entries: Long = components.flatMap(_.variants).map(_.tree.entries).sum + n

  /** Work done by updates so far: view entries written and tuples joined, over all trees. */
  def updateWork: Long = components.flatMap(_.variants).map(_.tree.updateWork).sum

  /** Values visited by lookups so far, over all trees. */
  def lookupWork: Long = components.flatMap(_.variants).map(_.tree.lookupWork).sum

  /** Tuples moved between parts by minor rebalancing, and major rebalancings, so far. */
  def rebalancing: (Long, Long) = (moves, majors)

  /** Heavy keys per partition key, for EXPLAIN and tests. */
  def heavyKeys: Seq[(Seq[String], Int)] = keys.indices.map(k => (keys(k)._1: Seq[String]) -> heavy(k).size)

  /** The number of view trees. */
  def trees: Int = components.map(_.variants.size).sum

  private def positions(atom: Int, key: Int): IndexedSeq[Int] = keys(key)._1.map(atomVars(atom).indexOf(_))
  private def project(atom: Int, key: Int, t: Key): Key = ArraySeq.from(positions(atom, key).map(t))
  private def degree(atom: Int, key: Int, value: Key): Int = store(atom).matchCount(positions(atom, key), value)

  private def belongs(v: Variant, atom: Int, t: Key): Boolean = v.parts.forall { p =>
    !p.atoms.contains(atom) || heavy(keyIds(p.key)).contains(project(atom, keyIds(p.key), t)) == p.heavy
  }

  /** Each tree may hold the limit less what the others hold (checked by the tree being updated). */
  private def limitTrees(): Unit = if (entryLimit != Long.MaxValue) {
    val all = components.flatMap(_.variants)
    val total = entries
    all.foreach(v => v.tree.entryLimit = entryLimit - (total - v.tree.entries))
  }

  /** Adds `delta` to atom `atom`'s tuple `values`, then rebalances where the invariants broke. */
  def update(atom: Int, values: IndexedSeq[Any], delta: Long): Unit = if (delta != 0) {
    limitTrees()
    val t = hold(atom, values, delta)
    componentOf(atom).variants.foreach(v => if (belongs(v, atom, t)) v.tree.update(atom, values, delta))
    if (n >= bound || n < bound / 4) major()
    else keysOf(atom).foreach(k => minor(k, project(atom, k, t)))
  }

  /** Loads tuples in bulk (the first build): held, then partitioned strictly and the trees built once. */
  override def load(tuples: Iterator[(Int, IndexedSeq[Any], Long)]): Unit = {
    tuples.foreach { case (atom, values, m) => if (m != 0) hold(atom, values, m) }
    major()
  }

  /** Adds to the held tuples (not the trees), keeping N; the tuple as a key. */
  private def hold(atom: Int, values: IndexedSeq[Any], delta: Long): Key = {
    val t = ArraySeq.from(values)
    val before = store(atom).get(t)
    store(atom).add(t, delta)
    if (before == 0) n += 1 else if (before + delta == 0) n -= 1
    t
  }

  /** Minor rebalancing of one key value (section 5.6.2). */
  private def minor(key: Int, value: Key): Unit = {
    val degrees = keys(key)._2.toSeq.map(a => degree(a, key, value))
    val theta = threshold
    if (!heavy(key).contains(value) && degrees.exists(_ >= 1.5 * theta)) move(key, value, toHeavy = true)
    else if (heavy(key).contains(value) && degrees.forall(_ < 0.5 * theta)) move(key, value, toHeavy = false)
  }

  /** Moves a key value's tuples to the other part: a delete from the trees they leave, an insert into those they join. */
  private def move(key: Int, value: Key, toHeavy: Boolean): Unit = {
    val tuples =
      keys(key)._2.toSeq.flatMap(a => store(a).matching(positions(a, key), value).map(e => (a, e._1, e._2)).toList)
    val before = tuples.map { case (a, t, _) => componentOf(a).variants.filter(belongs(_, a, t)) }
    if (toHeavy) heavy(key) += value else heavy(key) -= value
    tuples.zip(before).foreach { case ((a, t, m), was) =>
      val now = componentOf(a).variants.filter(belongs(_, a, t))
      was.filterNot(now.contains).foreach(_.tree.update(a, t, -m))
      now.filterNot(was.contains).foreach(_.tree.update(a, t, m))
      moves += 1
    }
  }

  /** Major rebalancing (section 5.6.1): M = 2N + 1, every key partitioned strictly at M^eps, every tree rebuilt. */
  private def major(): Unit = {
    bound = 2 * n + 1
    majors += 1
    val theta = threshold
    keys.indices.foreach { k =>
      heavy(k).clear()
      keys(k)._2.foreach { a =>
        store(a).counts.keysIterator.map(project(a, k, _)).toSeq.groupBy(identity).foreach { case (value, ts) =>
          if (ts.size >= theta) heavy(k) += value
        }
      }
    }
    components.foreach(_.variants.foreach(v => v.tree = v.fresh()))
    components.foreach(_.variants.foreach { v =>
      limitTrees()
      v.tree.load(v.atoms.iterator.flatMap(a =>
          store(a).counts.iterator.collect {
            case (t, m) if belongs(v, a, t) => (a, t: IndexedSeq[Any], m)
          }))
    })
  }

  /**
   * The answers to one access request (every input bound): each component's trees' answers
   * merged by UNION, the components' answers multiplied (the fracture's Cartesian product).
   */
  def lookup(inputs: Map[String, Any]): Iterator[(Map[String, Any], Long)] =
    ViewTree.product(components.map(c => () => c.answers(inputs)))

  /** Where the trees or the partition break their invariants (for tests). */
  private[access] def violations(): Seq[String] = {
    val theta = threshold
    val out = Seq.newBuilder[String]
    if (n >= bound || n < bound / 4) out += s"size invariant: N = $n, M = $bound"
    keys.indices.foreach { k =>
      val values = keys(k)._2.flatMap(a => store(a).counts.keysIterator.map(project(a, k, _)))
      values.foreach { value =>
        val degrees = keys(k)._2.toSeq.map(a => degree(a, k, value))
        if (heavy(k).contains(value) && !degrees.exists(_ >= 0.5 * theta))
          out += s"heavy $value of ${keys(k)._1} too light"
        if (!heavy(k).contains(value) && degrees.exists(_ >= 1.5 * theta))
          out += s"light $value of ${keys(k)._1} too heavy"
      }
    }
    components.foreach(_.variants.foreach { v =>
      out ++= v.tree.violations()
      v.atoms.foreach { a =>
        if (v.tree.atomTuples(a) != store(a).counts.filter(e => belongs(v, a, e._1))) {
          out += s"the tree over ${v.parts.map(_.describe).mkString(", ")} does not hold exactly its part of atom $a"
        }
      }
    })
    out.result()
  }
}

object HeavyLightTrees {
  type Key = ArraySeq[Any]

  /** A part of some atoms: their tuples whose `key` values are heavy, or light. */
  case class Part(atoms: Set[Int], key: IndexedSeq[String], heavy: Boolean) {
    def describe: String = s"${key.mkString("")}->${if (heavy) "H" else "L"}"
  }

  /** One of Omega's orders with the parts its atoms are restricted to and its pseudo-inputs. */
  case class Order(order: Seq[VoTree], parts: Seq[Part], pseudo: Set[String])

  private[access] final class Variant(val order: Order, val atoms: Seq[Int], val fresh: () => ViewTree) {
    def parts: Seq[Part] = order.parts
    var tree: ViewTree = fresh()
  }

  private[access] final class ComponentTrees(val query: Cqap, val atoms: Seq[Int], val variants: Seq[Variant]) {
    def answers(inputs: Map[String, Any]): Iterator[(Map[String, Any], Long)] = {
      val at = inputs.filter(kv => query.inputs.contains(kv._1))
      // With every variable free, an answer fixes each atom's tuple and so the one part, and
      // tree, it comes from: the trees' answers are disjoint and are listed one after another.
      def outputs(o: Map[String, Any]) = o.filter(kv => query.outputs.contains(kv._1))
      if (query.bound.isEmpty) return variants.iterator.flatMap(_.tree.lookup(at).map(a => (outputs(a._1), a._2)))
      val parts = variants.map { v =>
        (() => v.tree.lookup(at).map(a => outputs(a._1)),
          (o: Map[String, Any]) => v.tree.multiplicity(at ++ o))
      }
      ViewTree.merged(parts)
    }
  }

  private def cqap0(q: Cqap): Boolean = q.hierarchical && q.freeDominant && q.inputDominant

  /** `q` with the pseudo-inputs as inputs (a heavy part's key is fixed by its enumeration). */
  private def ordered(q: Cqap, pseudo: Set[String]): Cqap = Cqap(q.atoms, q.inputs ++ pseudo, q.outputs -- pseudo)

  /**
   * Omega (Zhang 2022, section 5.3, Fig. 5.5) over a hierarchical component's canonical order:
   * at X, with Q_X the query of X's subtree (inputs: X's ancestors and the inputs below; outputs:
   * the outputs below), if Q_X is in CQAP0, ACC-TOP of the subtree; else if X is an input, or an
   * output with no input below, X over the combinations of its children's orders; else two
   * branches, heavy (X ordered as an input, recursively) and light (ACC-TOP), each with the
   * subtree's atoms restricted to that part of the key anc(X) + X.
   */
  def omega(tree: VoTree, q: Cqap, atomIndex: Atom => Int, ancestors: Seq[String] = Nil,
      pseudo: Set[String] = Set.empty): Seq[Order] = tree match {
    case leaf: AtomLeaf => Seq(Order(Seq(leaf), Nil, pseudo))
    case node @ VarNode(x, children) =>
      val eff = ordered(q, pseudo)
      val below = node.vars
      val used = node.atoms.flatMap(_.vars).toSet
      val sub = Cqap(node.atoms, (ancestors.toSet & used) ++ (eff.inputs & below), eff.outputs & below)
      if (cqap0(sub)) Seq(Order(VariableOrder.accessTop(node, eff), Nil, pseudo))
      else if (eff.inputs.contains(x) || (eff.outputs.contains(x) && (eff.inputs & (below - x)).isEmpty)) {
        combinations(children.map(omega(_, q, atomIndex, ancestors :+ x, pseudo))).map { parts =>
          Order(Seq(VarNode(x, parts.flatMap(_.order))), parts.flatMap(_.parts).distinct,
            parts.flatMap(_.pseudo).toSet ++ pseudo)
        }
      } else {
        val atoms = node.atoms.map(atomIndex).toSet
        val key = ancestors.filter(used.contains).toIndexedSeq :+ x
        omega(tree, q, atomIndex, ancestors, pseudo + x).map(o =>
          o.copy(parts = Part(atoms, key, heavy = true) +: o.parts)) :+
          Order(VariableOrder.accessTop(node, eff), Seq(Part(atoms, key, heavy = false)), pseudo)
      }
  }

  private def combinations(options: Seq[Seq[Order]]): Seq[Seq[Order]] =
    options.foldLeft(Seq(Seq.empty[Order]))((acc, os) => acc.flatMap(prefix => os.map(prefix :+ _)))

  /** Omega over a component's whole canonical order (its roots combined). */
  def orders(c: Cqap, atomIndex: Atom => Int): Seq[Order] =
    combinations(VariableOrder.canonical(c).map(omega(_, c, atomIndex))).map { parts =>
      Order(parts.flatMap(_.order), parts.flatMap(_.parts).distinct, parts.flatMap(_.pseudo).toSet)
    }

  /**
   * Empty trees for `q` (every fracture component hierarchical), atoms given by their variables
   * in the order their tuples give them, at `eps`; or why not.
   */
  def build(q: Cqap, atomVars: IndexedSeq[IndexedSeq[String]], eps: Double): Either[String, HeavyLightTrees] = {
    require(eps >= 0 && eps <= 1, s"eps must be in [0, 1]: $eps")
    val atomIndex = (a: Atom) => q.atoms.indexOf(a)
    val comps = q.fracture.map { c =>
      if (!c.hierarchical) return Left(s"component $c is not hierarchical")
      val variants = orders(c, atomIndex).map { o =>
        def fresh() = ViewTree.build(atomVars, Seq((o.order, c)), atomIndex, o.pseudo)
        fresh().left.foreach(why => return Left(why))
        new Variant(o, c.atoms.map(atomIndex), () => fresh().toOption.get)
      }
      new ComponentTrees(c, c.atoms.map(atomIndex), variants)
    }
    Right(new HeavyLightTrees(q, atomVars, eps, comps))
  }

  /**
   * IVM^eps's trees for listing triangles, Q(A, B, C) = R(A, B), S(B, C), T(C, A) with every
   * variable free and no input (Kara et al. 2020, section 4, Fig. 10), or None if `q` is not
   * that query. R is partitioned on A, S on B, T on C; five trees over disjoint parts whose
   * union is the query:
   *
   *  - R^H S^H T^H and R^L S^L T^L over the order A-B-C, with indicator projections so that the
   *    leaf view holds triangles only (the paper materializes these two as listings);
   *  - R^H S^L T, R S^H T^L and R^L S T^H over the orders A-C-B, B-A-C and C-B-A, so that their
   *    leaf views are V_RS(a, b, c) = R^H S^L and its rotations, and the root joins the third
   *    relation by a lookup.
   *
   * Each update then joins either a light part's values (fewer than 3/2 N^eps per key) or the
   * heavy values (at most 2 N^(1-eps)); [[ViewTree]]'s join takes the smaller of two
   * candidates. Update O(N^max(eps, 1-eps)) amortized, delay O(1) (the paper's Theorem 3); the
   * partitions and rebalancing are this class's, with each part's key a single variable.
   */
  def triangle(q: Cqap, atomVars: IndexedSeq[IndexedSeq[String]], eps: Double): Option[HeavyLightTrees] = {
    require(eps >= 0 && eps <= 1, s"eps must be in [0, 1]: $eps")
    if (q.atoms.size != 3 || q.inputs.nonEmpty || q.vars.size != 3 || q.outputs != q.vars ||
      atomVars.exists(_.size != 2) || q.hierarchical) return None
    // R is atom 0 over (A, B); S the other atom with B; T the third, which must hold C and A.
    val (a, b) = (atomVars(0)(0), atomVars(0)(1))
    val s = (1 to 2).find(i => atomVars(i).contains(b)).getOrElse(return None)
    val t = 3 - s
    val c = atomVars(s).find(_ != b).get
    if (atomVars(t).toSet != Set(c, a)) return None
    val atoms = IndexedSeq(0, s, t).map(q.atoms)
    def chain(order: String*): Seq[VoTree] = {
      def lowest(atom: Atom) = atom.vars.map(order.indexOf).max
      def node(i: Int): VoTree = VarNode(order(i),
        (if (i + 1 < order.size) Seq(node(i + 1)) else Nil) ++ atoms.filter(lowest(_) == i).map(AtomLeaf))
      Seq(node(0))
    }
    val (h, l) = (true, false)
    def parts(r: Option[Boolean], sp: Option[Boolean], tp: Option[Boolean]) =
      Seq(r.map(Part(Set(0), IndexedSeq(a), _)), sp.map(Part(Set(s), IndexedSeq(b), _)),
        tp.map(Part(Set(t), IndexedSeq(c), _))).flatten
    val atomIndex = (x: Atom) => q.atoms.indexOf(x)
    val variants = Seq(
      (chain(a, b, c), parts(Some(h), Some(h), Some(h)), true), (chain(a, b, c), parts(Some(l), Some(l), Some(l)), true),
      (chain(a, c, b), parts(Some(h), Some(l), None), false), (chain(b, a, c), parts(None, Some(h), Some(l)), false),
      (chain(c, b, a), parts(Some(l), None, Some(h)), false)
    ).map { case (order, ps, indicators) =>
      def fresh() = ViewTree.build(atomVars, Seq((order, q)), atomIndex, indicators = indicators,
        layout = "").toOption.get
      new Variant(Order(order, ps, Set.empty), q.atoms.indices, () => fresh())
    }
    Some(new HeavyLightTrees(q, atomVars, eps, Seq(new ComponentTrees(q, q.atoms.indices, variants)),
        kind = "IVM^eps triangle view trees"))
  }

  /** What EXPLAIN prints of the trees of `q`: per component, each order with its parts. */
  def describe(q: Cqap): Seq[String] = {
    val atomIndex = (a: Atom) => q.atoms.indexOf(a)
    q.fracture.filter(_.hierarchical).zipWithIndex.flatMap { case (c, i) =>
      val os = orders(c, atomIndex)
      s"component ${i + 1}: ${os.size} view tree(s)" +: os.flatMap { o =>
        val parts = if (o.parts.isEmpty) "all tuples" else o.parts.map(_.describe).mkString(", ")
        val pseudo = if (o.pseudo.isEmpty) "" else s"; enumerated: ${o.pseudo.toSeq.sorted.mkString(", ")}"
        s"  tree over $parts$pseudo:" +: VariableOrder.render(o.order, "    ")
      }
    }
  }
}
