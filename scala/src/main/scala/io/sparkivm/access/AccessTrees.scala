package io.sparkivm.access

/**
 * What [[LookupTrees]] holds for a view: the view trees of its CQAP, updated one atom tuple at
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

  /** View entries held beside them (a light tree's views may outgrow the atoms). */
  def entries: Long

  /**
   * The most view entries an update may leave: past it the update throws [[AccessTrees.TooLarge]]
   * (the trees are then dropped, and lookups read the view's rows).
   */
  var entryLimit: Long = Long.MaxValue

  /** View entries written and tuples joined by updates so far: the cost measure of updates. */
  def updateWork: Long

  /** Values visited by lookups so far (each a step of enumeration or of a `contains`). */
  def lookupWork: Long

  /** A line on how they are laid out, for DESCRIBE and EXPLAIN. */
  def layout: String
}

object AccessTrees {

  /** View trees that would hold more entries than their limit. */
  final class TooLarge(val limit: Long)
      extends RuntimeException(s"the view trees would hold more than $limit view entries", null, false, false)
}
