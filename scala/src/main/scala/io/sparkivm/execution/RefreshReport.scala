package io.sparkivm.execution

import io.sparkivm.policy.Estimate
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, render}

/** What one base table contributed to a refresh. */
case class SourceReport(table: String, fromVersion: Long, toVersion: Long, changedRows: Long)

/**
 * What a refresh did. `mode` is `incremental`, `full`, `noop` (no base table changed) or
 * `skipped` (a concurrent refresh committed the same changes first).
 */
case class RefreshReport(
    view: String,
    mode: String,
    refreshNumber: Long,
    sources: Seq[SourceReport],
    branches: Seq[String],
    /** FK graph, components, guard and integrity outcomes, key probes (see FkDeltaPlanner). */
    planNotes: Seq[String],
    rowsInserted: Long,
    rowsUpdated: Long,
    rowsDeleted: Long,
    phasesMs: Seq[(String, Long)],
    backingVersion: Long,
    message: String,
    /** Rows the refresh's Spark jobs read from storage (tasks' input metrics). */
    rowsRead: Long = 0L,
    /** Rows that entered joins in the queries the refresh ran (when `spark.ivm.metrics.rowsJoined`). */
    rowsJoined: Long = 0L,
    /** Spark jobs the refresh ran (Delta's own commands included). */
    sparkJobs: Long = 0L,
    /** Spark tasks of those jobs. */
    sparkTasks: Long = 0L,
    /** Spark jobs started in each phase (same phases as `phasesMs`). */
    phasesJobs: Seq[(String, Long)] = Nil,
    /** The view's refresh policy, and why this refresh ran in its mode. */
    policy: String = "",
    reason: String = "",
    /** What AUTO weighed: estimated ms of each candidate mode. */
    candidates: Seq[Estimate] = Nil,
    /** The check of the refresh against its query (`spark.ivm.verify`), if one ran. */
    verify: Option[VerifyReport] = None) {

  def sourceRowsChanged: Long = sources.map(_.changedRows).sum
  def viewRowsChanged: Long = rowsInserted + rowsUpdated + rowsDeleted
  def totalMs: Long = phasesMs.map(_._2).sum

  def toJson: String = compact(render(JObject(
        "view" -> JString(view),
        "mode" -> JString(mode),
        "refresh_number" -> JLong(refreshNumber),
        "sources" -> JArray(sources.toList.map(s =>
            JObject(
              "table" -> JString(s.table), "from_version" -> JLong(s.fromVersion),
              "to_version" -> JLong(s.toVersion), "changed_rows" -> JLong(s.changedRows)))),
        "branches" -> JArray(branches.toList.map(JString(_))),
        "plan_notes" -> JArray(planNotes.toList.map(JString(_))),
        "rows_inserted" -> JLong(rowsInserted),
        "rows_updated" -> JLong(rowsUpdated),
        "rows_deleted" -> JLong(rowsDeleted),
        "phases_ms" -> JObject(phasesMs.toList.map { case (k, v) => k -> JLong(v) }),
        "backing_version" -> JLong(backingVersion),
        "message" -> JString(message),
        "rows_read" -> JLong(rowsRead), "rows_joined" -> JLong(rowsJoined),
        "spark_jobs" -> JLong(sparkJobs), "spark_tasks" -> JLong(sparkTasks),
        "phases_jobs" -> JObject(phasesJobs.toList.map { case (k, v) => k -> JLong(v) }),
        "policy" -> JString(policy), "reason" -> JString(reason),
        "candidates" -> JArray(candidates.toList.map(c =>
            JObject("mode" -> JString(c.mode), "estimated_ms" -> JLong(c.ms), "basis" -> JString(c.basis)))),
        "verify" -> verify.map(_.toJson).getOrElse(JNull))))
}

/** Wall time per named phase, and when each phase ended (to attribute jobs to phases). */
class PhaseTimer {
  private val phases = Seq.newBuilder[(String, Long)]
  private val ends = Seq.newBuilder[(String, Long)]
  private var last = System.nanoTime()
  val startedAtMs: Long = System.currentTimeMillis()
  def mark(name: String): Unit = {
    val now = System.nanoTime()
    phases += name -> (now - last) / 1000000L
    ends += name -> System.currentTimeMillis()
    last = now
  }
  def result: Seq[(String, Long)] = phases.result()

  /** How many of the jobs started at these times fall in each phase. */
  def jobsPerPhase(jobStarts: Seq[Long]): Seq[(String, Long)] = {
    var from = Long.MinValue
    ends.result().map { case (name, end) =>
      val n = jobStarts.count(t => t > from && t <= end).toLong
      from = end
      name -> n
    }
  }
}
