package io.sparkivm.execution

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.{HistoryEntry, ViewCatalog}
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.SparkSession

/**
 * Failed refreshes, kept in the driver's memory (the last few per view) for SHOW REFRESHES and
 * the refresh service. A failure commits nothing, by design: the view and its backing table stay
 * exactly as they were, so the durable history ([[io.sparkivm.catalog.RefreshHistory]]) holds
 * the refreshes that committed, and failures are known to the process that saw them.
 */
object RefreshFailures {
  private val PerView = 20
  private val failures = mutable.Map[String, mutable.Queue[HistoryEntry]]()

  /** Records a failed refresh of `name`, if it names a materialized view (the error of one that
   * does not is the caller's to see, not history). */
  def record(spark: SparkSession, name: Seq[String], trigger: String, startMs: Long, error: Throwable): Unit =
    try if (ViewCatalog.isMaterializedView(spark, name)) {
        val key = ViewCatalog.qualify(spark, name).unquotedString
        val message = error match {
          case e: IvmException => e.getMessage
          case e => s"${e.getClass.getSimpleName}: ${Option(e.getMessage).getOrElse("")}"
        }
        val entry = HistoryEntry(-1, startMs, System.currentTimeMillis() - startMs, "failed",
          "the refresh failed; nothing was committed", -1, Map.empty, -1, -1, trigger,
          Some(message.linesIterator.toSeq.headOption.getOrElse(message)))
        failures.synchronized {
          val q = failures.getOrElseUpdate(key, mutable.Queue[HistoryEntry]())
          q.enqueue(entry)
          while (q.size > PerView) q.dequeue()
        }
      }
    catch { case NonFatal(_) => }

  /** The failures seen for a view (by its qualified name), oldest first. */
  def of(viewKey: String): Seq[HistoryEntry] =
    failures.synchronized(failures.get(viewKey).map(_.toSeq).getOrElse(Nil))

  /** Forgets a view's failures (it was dropped or created anew). */
  def forget(viewKey: String): Unit = failures.synchronized(failures.remove(viewKey))
}
