package io.sparkivm.execution

import org.apache.spark.sql.catalyst.InternalRow

/**
 * Small results of earlier refreshes in this application, by what they compute and the table
 * versions they were computed at ([[io.sparkivm.planner.PlanSteps]]' `materializeVersioned`).
 * A global aggregate that a refresh computes at its Post versions is the next refresh's Pre:
 * TPC-H Q22's `avg(c_acctbal)` then costs one scan of `customer` per refresh instead of two.
 *
 * An entry is right whatever became of the refresh that made it (a failed or retried refresh
 * leaves only rows that are a function of table versions), so nothing is invalidated; the
 * least recently used entries are dropped past [[MaxEntries]], and only results of at most
 * [[MaxRows]] rows are kept.
 */
object VersionedResults {
  val MaxEntries = 64
  val MaxRows = 16

  private val entries = new java.util.LinkedHashMap[(String, String), Seq[InternalRow]](16, 0.75f, true) {
    override def removeEldestEntry(e: java.util.Map.Entry[(String, String), Seq[InternalRow]]): Boolean =
      size > MaxEntries
  }

  def get(definition: String, stamp: String): Option[Seq[InternalRow]] = entries.synchronized {
    Option(entries.get((definition, stamp)))
  }

  def put(definition: String, stamp: String, rows: Seq[InternalRow]): Unit =
    if (rows.size <= MaxRows) entries.synchronized { entries.put((definition, stamp), rows.map(_.copy())) }
}
