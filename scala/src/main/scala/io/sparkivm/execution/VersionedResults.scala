package io.sparkivm.execution

import io.sparkivm.state.{Arrangement, StateId, StateKind, StatePlace, StateRegistry, StateSize}
import org.apache.spark.sql.catalyst.InternalRow

/**
 * Small results of earlier refreshes in this application, by what they compute and the table
 * versions they were computed at ([[io.sparkivm.planner.PlanSteps]]' `materializeVersioned`).
 * A global aggregate that a refresh computes at its Post versions is the next refresh's Pre:
 * TPC-H Q22's `avg(c_acctbal)` then costs one scan of `customer` per refresh instead of two.
 *
 * An entry is right whatever became of the refresh that made it (a failed or retried refresh
 * leaves only rows that are a function of table versions), so nothing is invalidated; it is held
 * in the driver's state ([[StateRegistry]]) under its definition, at the last two stamps (the
 * versions) it was computed at, and only results of at most [[MaxRows]] rows are kept.
 */
object VersionedResults {
  val MaxRows = 16

  /** A refresh reads a result at its Pre and computes it at its Post: both are kept. */
  private val StampsKept = 2

  /** A definition's results at its last [[StampsKept]] stamps, the newest last. */
  private final case class Results(byStamp: Vector[(String, Seq[InternalRow])]) extends Arrangement {
    override def place: StatePlace = StatePlace.Driver
    override val bytes: Long = byStamp.map(r => StateSize.of(r._2)).sum
    def at(stamp: String): Option[Seq[InternalRow]] = byStamp.collectFirst { case (`stamp`, rows) => rows }
    def plus(stamp: String, rows: Seq[InternalRow]): Results =
      Results((byStamp.filterNot(_._1 == stamp) :+ (stamp -> rows)).takeRight(StampsKept))
  }

  private def id(definition: String) = StateId(StateKind.Results, definition)

  def get(definition: String, stamp: String): Option[Seq[InternalRow]] =
    StateRegistry.get[Results](id(definition), "").flatMap(_.at(stamp))

  def put(definition: String, stamp: String, rows: Seq[InternalRow]): Unit = if (rows.size <= MaxRows) {
    val before = StateRegistry.get[Results](id(definition), "").getOrElse(Results(Vector.empty))
    StateRegistry.put(id(definition), "", before.plus(stamp, rows.map(_.copy())))
  }
}
