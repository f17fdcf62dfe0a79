package io.sparkivm.service

import java.util.concurrent.ConcurrentHashMap

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sparkivm.catalog.{DeltaTables, Schedule, ViewCatalog, ViewMetadata}
import io.sparkivm.conf.IvmConf
import io.sparkivm.execution.{RefreshFailures, RefreshPipeline, RefreshReport}
import io.sparkivm.policy.ViewGraph
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.ivm.SessionInternals
import org.json4s._
import org.json4s.jackson.JsonMethods.{compact, parse, render}

/** What the service did for one view (`catalog.db.view`) in one pass: `refreshed` (with the
 * report) or `failed`. */
case class ServiceRun(view: String, action: String, atMs: Long, report: Option[RefreshReport],
    error: Option[String]) {
  def toJson: JValue = JObject("view" -> JString(view), "action" -> JString(action), "at_ms" -> JLong(atMs),
    "report" -> report.map(r => parse(r.toJson)).getOrElse(JNothing),
    "error" -> error.map(JString(_)).getOrElse(JNothing))
}

/** The service's memory of one view: when it was last refreshed or tried, and its failures. */
case class ViewState(lastMs: Long, failures: Int = 0, retryAtMs: Long = 0L, lastError: Option[String] = None)

/**
 * Runs the schedules and triggers of materialized views ([[Schedule]]) in the session that starts
 * it. Each pass ([[runOnce]]) lists the views of the watched databases, and refreshes, in
 * dependency order (so a commit flows through a chain of views in one pass), each view that is
 * due:
 *  - SCHEDULE EVERY / CRON: the schedule's next time after the view's last refresh has come;
 *  - TRIGGER ON UPDATE: a base table has a commit the view has not applied (read from the Delta
 *    logs on the driver: a pass with nothing to do runs no Spark job) and the rate limit allows.
 * A failed refresh is recorded ([[RefreshFailures]]) and retried after a wait that doubles with
 * each failure in a row; the other views go on. A service runs one pass at a time and the pass
 * one refresh at a time, so it never runs two refreshes of a view at once; other services (in
 * this process or others) may refresh the same view, and a refresh's exactly-once commit means
 * a change is applied once whoever runs it (the other refresh reports `skipped` or `noop`).
 *
 * @param databases the databases watched (all of the session catalog's if empty)
 * @param clock the time in epoch ms (tests pass their own to [[runOnce]] instead)
 */
class RefreshService(spark: SparkSession, databases: Seq[String], clock: () => Long) extends Logging {
  def this(spark: SparkSession) = this(spark, Nil, () => System.currentTimeMillis())
  def this(spark: SparkSession, databases: java.util.List[String]) =
    this(spark, databases.asScala.toSeq, () => System.currentTimeMillis())

  private val states = new ConcurrentHashMap[String, ViewState]()
  private val wake = new Object
  @volatile private var stopping = false
  @volatile private var thread: Option[Thread] = None

  /** Starts the service's thread (a daemon), which runs a pass every poll interval. */
  def start(): this.type = synchronized {
    if (thread.exists(_.isAlive)) return this
    stopping = false
    val t = new Thread(() => loop(), "spark-ivm-refresh-service")
    t.setDaemon(true)
    thread = Some(t)
    t.start()
    this
  }

  /** Stops the thread after the refresh it may be running; false if that took over `timeoutMs`. */
  def stop(timeoutMs: Long): Boolean = {
    stopping = true
    wake.synchronized(wake.notifyAll())
    thread.forall { t => t.join(timeoutMs); !t.isAlive }
  }

  def stop(): Boolean = stop(60000L)

  def isRunning: Boolean = thread.exists(_.isAlive) && !stopping

  private def loop(): Unit = {
    val pollMs = IvmConf.ServicePollIntervalMs.get(spark)
    while (!stopping) {
      try runOnce(clock())
      catch {
        case NonFatal(e) => logWarning("spark-ivm: refresh service pass failed; the next pass retries", e)
      }
      wake.synchronized { if (!stopping) wake.wait(pollMs) }
    }
  }

  def runOnce(): Seq[ServiceRun] = runOnce(clock())

  /** One pass at time `nowMs`: refreshes the views that are due, in dependency order. */
  def runOnce(nowMs: Long): Seq[ServiceRun] = synchronized {
    val runs = Seq.newBuilder[ServiceRun]
    ViewGraph.ordered(spark, scheduledViews(nowMs, runs)).foreach { meta =>
      if (!stopping) due(meta, nowMs).foreach(_ => runs ++= refresh(meta, nowMs))
    }
    runs.result()
  }

  /** The same pass, as JSON (for Python). */
  def runOnceJson(nowMs: Long): String = compact(render(JArray(runOnce(nowMs).map(_.toJson).toList)))

  /** The service's state of each view it has seen, by qualified name. */
  def status: Map[String, ViewState] = states.asScala.toMap

  def statusJson: String = compact(render(JObject(status.toList.sortBy(_._1).map { case (v, s) =>
    v -> JObject("last_ms" -> JLong(s.lastMs), "failures" -> JInt(s.failures), "retry_at_ms" -> JLong(s.retryAtMs),
      "last_error" -> s.lastError.map(JString(_)).getOrElse(JNothing))
  })))

  private def scheduledViews(nowMs: Long, runs: mutable.Builder[ServiceRun, Seq[ServiceRun]]): Seq[ViewMetadata] = {
    val dbs = if (databases.nonEmpty) databases else SessionInternals.catalog(spark).listDatabases()
    dbs.flatMap(db =>
      try ViewCatalog.list(spark, db)
      catch { case NonFatal(_) => Nil }).flatMap { case (id, t) =>
      val key = id.copy(catalog = Some("spark_catalog")).unquotedString
      try Some(ViewCatalog.lookup(spark, Seq(id.database.get, id.table)))
      catch {
        case NonFatal(e) =>
          // A broken view with a schedule is reported (with backoff), not skipped silently.
          if (t.properties.contains(ViewCatalog.MarkerProperty) && retryAllowed(key, nowMs)) {
            runs += failed(key, nowMs, e)
          }
          None
      }
    }.filter(_.schedule.isDefined)
  }

  private def retryAllowed(key: String, nowMs: Long): Boolean =
    Option(states.get(key)).forall(_.retryAtMs <= nowMs)

  /** Some(()) if the view is due at `nowMs`. */
  private def due(meta: ViewMetadata, nowMs: Long): Option[Unit] = {
    val key = meta.view.unquotedString
    val state = states.computeIfAbsent(key, _ => ViewState(lastMs = initialLast(meta, nowMs)))
    if (state.retryAtMs > nowMs) return None
    val isDue = meta.schedule.get match {
      case s: Schedule.OnUpdate => nowMs >= s.nextDue(state.lastMs) && hasNewCommits(meta)
      case s => nowMs >= s.nextDue(state.lastMs)
    }
    if (isDue) Some(()) else None
  }

  /** When a view was last refreshed, as the service starts watching it: from its durable history
   * (a trigger counts from 0, so that commits waiting already are applied at once). */
  private def initialLast(meta: ViewMetadata, nowMs: Long): Long = meta.schedule.get match {
    case _: Schedule.OnUpdate => 0L
    case _ => meta.history.lastOption.map(_.startMs).getOrElse(nowMs)
  }

  private def hasNewCommits(meta: ViewMetadata): Boolean =
    try {
      val (last, _) = ViewCatalog.lastRefresh(spark, meta)
      // Rows enter and leave a view whose filters read the time as time passes: it is never up
      // to date for good, and the service's poll interval (and rate limit) paces its refreshes.
      last.instant.isDefined || meta.sources.exists { s =>
        val id = ViewCatalog.qualify(spark, s.table.split('.').toSeq.takeRight(2))
        last.sourceVersions.get(s.table).forall(v => DeltaTables.log(spark, id).update().version > v)
      } || meta.helpers.exists(h => hasNewCommits(ViewCatalog.lookup(spark, Seq(h.database.get, h.table))))
    } catch { case NonFatal(_) => true } // let the refresh say what is wrong

  private def refresh(meta: ViewMetadata, nowMs: Long): Option[ServiceRun] = {
    val key = meta.view.unquotedString
    try {
      val report = RefreshPipeline.refresh(spark, Seq(meta.view.database.get, meta.view.table), full = false,
        trigger = "service")
      states.put(key, ViewState(lastMs = nowMs))
      Some(ServiceRun(key, "refreshed", nowMs, Some(report), None))
    } catch {
      case NonFatal(e) =>
        logWarning(s"spark-ivm: scheduled refresh of ${meta.viewName} failed; it will be retried", e)
        Some(failed(key, nowMs, e))
    }
  }

  private def failed(key: String, nowMs: Long, e: Throwable): ServiceRun = {
    val previous = Option(states.get(key))
    val failures = previous.map(_.failures).getOrElse(0) + 1
    val backoff = math.min(IvmConf.ServiceMaxBackoffMs.get(spark),
      RefreshService.FirstBackoffMs << math.min(failures - 1, 20))
    val message = Option(e.getMessage).map(_.linesIterator.toSeq.headOption.getOrElse("")).getOrElse(e.toString)
    states.put(key, ViewState(previous.map(_.lastMs).getOrElse(nowMs), failures, nowMs + backoff, Some(message)))
    ServiceRun(key, "failed", nowMs, None, Some(message))
  }
}

object RefreshService {

  /** The first wait before retrying a failed view; it doubles with each failure in a row. */
  val FirstBackoffMs = 5000L
}
