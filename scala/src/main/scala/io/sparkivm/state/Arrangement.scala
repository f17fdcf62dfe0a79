package io.sparkivm.state

/**
 * State kept between refreshes: rows of a table (or of results computed from tables) indexed by
 * the key a refresh looks them up by, as Materialize's arrangements and DBSP's traces keep an
 * operator's input. An arrangement is of fixed table versions (its stamp, kept by the
 * [[StateRegistry]]), so it is right for as long as it is held, whatever became of the refresh
 * that made it: a version's rows never change.
 */
trait Arrangement {

  /** Where it is held. */
  def place: StatePlace

  /** Its size in the place's memory, in bytes (an estimate, the same one the budget counts). */
  def bytes: Long

  /** False once what holds it is gone (the Spark context that kept executor rows stopped). */
  def alive: Boolean = true

  /** Frees what it holds outside the JVM's heap (executor blocks); called once, when dropped. */
  def release(): Unit = ()

  /**
   * True if this arrangement holds what `other` holds (the next version of it, sharing its
   * executor blocks): replacing `other` by it then releases nothing.
   */
  def shares(other: Arrangement): Boolean = this eq other

  /**
   * This arrangement moved forward by a commit of spark-ivm's own to the table it is of, at the
   * version the commit read; None if the commit cannot move it (it is then dropped, and made
   * again by the next refresh that asks for it).
   */
  def committed(commit: TableCommit): Option[Arrangement] = None
}
