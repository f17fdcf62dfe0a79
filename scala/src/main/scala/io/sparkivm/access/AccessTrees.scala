package io.sparkivm.access

/**
 * What [[ResidentTrees]] holds for a view: the view trees of its CQAP, updated one atom tuple at
 * a time and enumerated per access request. [[ViewTree]] for CQAP0 views (constant update and
 * delay), [[HeavyLightTrees]] for hierarchical ones outside CQAP0 (the eps trade-off).
 */
trait AccessTrees {
  /** Adds `delta` to the multiplicity of atom `atom`'s tuple `values`. */
  def update(atom: Int, values: IndexedSeq[Any], delta: Long): Unit
  /** Adds tuples in bulk (the first build). */
  def load(tuples: Iterator[(Int, IndexedSeq[Any], Long)]): Unit =
    tuples.foreach { case (atom, values, m) => update(atom, values, m) }
  /** The answers to one request (every input bound): output assignments and multiplicities. */
  def lookup(inputs: Map[String, Any]): Iterator[(Map[String, Any], Long)]
  /** Atom tuples held (distinct per atom). */
  def size: Long
  /** A line on how they are laid out, for DESCRIBE and EXPLAIN. */
  def layout: String
}
