package io.sparkivm.catalog

import scala.util.control.NonFatal

import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse}

/**
 * One refresh, as SHOW REFRESHES lists it and the AUTO policy's cost model learns from it.
 * `durationMs` runs from the start of the refresh to its commit. `changeBytes` is what the
 * change data feed had to read, `tableBytes` the size of the base tables (what a recomputation
 * reads); -1 where not measured.
 */
case class HistoryEntry(
    number: Long,
    startMs: Long,
    durationMs: Long,
    mode: String,
    reason: String,
    sourceRowsChanged: Long,
    sourceVersions: Map[String, Long],
    changeBytes: Long,
    tableBytes: Long,
    trigger: String,
    error: Option[String] = None,
    /** A recomputation that followed an incremental attempt AUTO stopped: how long that ran. */
    stoppedMs: Option[Long] = None) {
  def failed: Boolean = error.isDefined

  def toJson: JValue = JObject(
    "n" -> JLong(number), "start" -> JLong(startMs), "ms" -> JLong(durationMs), "mode" -> JString(mode),
    "why" -> JString(reason), "rows" -> JLong(sourceRowsChanged),
    "versions" -> JObject(sourceVersions.toList.sortBy(_._1).map { case (t, v) => t -> JLong(v) }),
    "changeBytes" -> JLong(changeBytes), "tableBytes" -> JLong(tableBytes), "by" -> JString(trigger),
    "error" -> error.map(JString(_)).getOrElse(JNothing), "stoppedMs" -> stoppedMs.map(JLong(_)).getOrElse(JNothing))
}

/**
 * The last refreshes of a view, newest last, kept in the backing table's `ivm.history` property:
 * written in the same Delta commit as the refresh (so it costs no write of its own and survives
 * the log's cleanup, as table properties are in every checkpoint). A failed refresh commits
 * nothing to the table, so its entry is added by a commit of its own that changes only the
 * property ([[io.sparkivm.execution.RefreshFailures]]).
 */
object RefreshHistory {
  val Property = "ivm.history"

  /** Entries kept: enough to fit the cost model and to show a day of hourly refreshes. */
  val MaxEntries = 50

  /** Longest error message kept in an entry. */
  private val MaxErrorChars = 500

  /**
   * Durations measured once a refresh is done, by view id: (refresh number, ms). A commit's
   * metadata is fixed before its files are written, so the entry a commit appends holds the time
   * up to then; the whole time, write included, is known only after. The view's next commit
   * writes it into that entry, and until then this process reads it from here.
   */
  private val measured = new java.util.concurrent.ConcurrentHashMap[String, (Long, Long)]()

  /** The whole duration of refresh `number` of the view with this id, known after its commit. */
  def measuredAfterCommit(viewId: String, number: Long, durationMs: Long): Unit =
    measured.put(viewId, (number, durationMs))

  def read(configuration: Map[String, String]): Seq[HistoryEntry] = {
    val entries = configuration.get(Property).map(parseAll).getOrElse(Nil)
    configuration.get(ViewCatalog.IdProperty).flatMap(id => Option(measured.get(id))) match {
      case Some((number, ms)) => entries.map(e => if (e.number == number && !e.failed) e.copy(durationMs = ms) else e)
      case None => entries
    }
  }

  /** The property's new value with `entry` appended (and the oldest entries dropped). */
  def appended(configuration: Map[String, String], entry: HistoryEntry): String = {
    val kept = entry.copy(error = entry.error.map(_.take(MaxErrorChars)))
    render((read(configuration) :+ kept).takeRight(MaxEntries))
  }

  /**
   * `configuration` with `entry` appended to its history, the entry's duration (if not given)
   * measured up to now, the moment of its commit.
   */
  def recorded(configuration: Map[String, String], entry: Option[HistoryEntry]): Map[String, String] =
    entry.fold(configuration) { e =>
      val timed = if (e.durationMs >= 0) e else e.copy(durationMs = System.currentTimeMillis() - e.startMs)
      configuration + (Property -> appended(configuration, timed))
    }

  def render(entries: Seq[HistoryEntry]): String =
    compact(org.json4s.jackson.JsonMethods.render(JArray(entries.map(_.toJson).toList)))

  private def parseAll(json: String): Seq[HistoryEntry] =
    try {
      parse(json) match {
        case JArray(items) => items.flatMap(parseEntry)
        case _ => Nil
      }
    } catch { case NonFatal(_) => Nil }

  private def parseEntry(v: JValue): Option[HistoryEntry] =
    try {
      def long(key: String) = v \ key match { case JInt(n) => n.toLong; case JLong(n) => n; case _ => -1L }
      def str(key: String) = v \ key match { case JString(s) => s; case _ => "" }
      Some(HistoryEntry(long("n"), long("start"), long("ms"), str("mode"), str("why"), long("rows"),
          v \ "versions" match {
            case JObject(fields) => fields.collect { case (t, JInt(n)) => t -> n.toLong }.toMap
            case _ => Map.empty
          },
          long("changeBytes"), long("tableBytes"), str("by"),
          v \ "error" match { case JString(e) => Some(e); case _ => None },
          Some(long("stoppedMs")).filter(_ >= 0)))
    } catch { case NonFatal(_) => None }
}
