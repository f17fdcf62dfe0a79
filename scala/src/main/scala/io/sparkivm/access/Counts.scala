package io.sparkivm.access

import scala.collection.immutable.ArraySeq
import scala.collection.mutable

/**
 * Multiplicities of tuples over `vars`, with indexes by subsets of the variables built on first
 * use and kept up to date by every later [[add]]: what the update of a view tree joins through
 * when a tuple does not fix every variable of a view's key (a light part's fan-out, Zhang 2022,
 * section 5.4). Entries of multiplicity zero are removed.
 */
final class Counts(val vars: IndexedSeq[String]) {
  import Counts._

  val counts: mutable.HashMap[Key, Long] = mutable.HashMap()

  /** Index by the variables at these positions: their values, then the matching tuples. */
  private val indexes = mutable.HashMap[IndexedSeq[Int], mutable.HashMap[Key, mutable.HashMap[Key, Long]]]()

  def get(key: Key): Long = counts.getOrElse(key, 0L)

  def add(key: Key, delta: Long): Unit = if (delta != 0) {
    val n = counts.getOrElse(key, 0L) + delta
    if (n == 0) counts.remove(key) else counts(key) = n
    indexes.foreach { case (at, index) =>
      val part = ArraySeq.from(at.map(key))
      val tuples = index.getOrElseUpdate(part, mutable.HashMap())
      if (n == 0) tuples.remove(key) else tuples(key) = n
      if (tuples.isEmpty) index.remove(part)
    }
  }

  private def index(at: IndexedSeq[Int]) = indexes.getOrElseUpdate(at, {
      val index = mutable.HashMap[Key, mutable.HashMap[Key, Long]]()
      counts.foreach { case (k, n) => index.getOrElseUpdate(ArraySeq.from(at.map(k)), mutable.HashMap())(k) = n }
      index
    })

  /** The tuples whose variables at `at` (positions in [[vars]]) have the values `values`. */
  def matching(at: IndexedSeq[Int], values: Key): Iterator[(Key, Long)] =
    index(at).get(values).iterator.flatMap(_.iterator)

  /** How many tuples [[matching]] lists: the degree of `values`. */
  def matchCount(at: IndexedSeq[Int], values: Key): Int = index(at).get(values).map(_.size).getOrElse(0)

  def size: Int = counts.size
}

object Counts {
  type Key = ArraySeq[Any]
}
