package io.sparkivm.state

/** Where held state lives: each place has its own memory budget. */
sealed abstract class StatePlace(val name: String) {
  override def toString: String = name
}

object StatePlace {

  /** The driver's heap: rows a refresh joins or folds with no Spark job. */
  case object Driver extends StatePlace("driver")

  /** The executors' block managers: rows partitioned and indexed by key, read by partition. */
  case object Executors extends StatePlace("executors")

  val all: Seq[StatePlace] = Seq(Driver, Executors)
}
