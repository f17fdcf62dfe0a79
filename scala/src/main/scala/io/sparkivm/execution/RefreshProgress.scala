package io.sparkivm.execution

import java.io.PrintStream
import java.util.Locale
import java.util.concurrent.{ConcurrentHashMap, Executors, TimeUnit}

import io.sparkivm.conf.IvmConf
import org.apache.spark.sql.SparkSession

/**
 * What a running refresh is doing, where users look for it.
 *
 *  - Spark's UI and listeners: every job a refresh runs carries a job tag per view
 *    (`spark-ivm-refresh:<view>`, with which `SparkContext.cancelJobsWithTag` cancels a refresh's
 *    jobs) and a description naming the view and the phase ("REFRESH MATERIALIZED VIEW v:
 *    reading the changes"), in place of the call site Spark shows otherwise. Both are the calling
 *    thread's local properties (which [[org.apache.spark.sql.ivm.Parallel]] hands on to its
 *    tasks); a user's own job group and tags stay, and their description is back when it ends.
 *  - The console: a refresh running longer than `spark.ivm.refresh.progressIntervalMs` prints its
 *    view, phase and time so far to standard error, again after each interval, where Spark's
 *    console progress bar is on (`spark.ivm.refresh.progress`): the bar shows a stage's tasks,
 *    not whose they are.
 */
object RefreshProgress {
  // The local property Spark reads a job's description from (SparkContext.setJobDescription).
  private val Description = "spark.job.description"

  private class Running(val view: String, val intervalMs: Long, val console: PrintStream) {
    val startedNs: Long = System.nanoTime()
    @volatile var phase: String = "starting"
    @volatile var shownNs: Long = startedNs
  }

  private val running = ConcurrentHashMap.newKeySet[Running]()
  private val current = new ThreadLocal[Running]

  private lazy val ticker = {
    val t = Executors.newSingleThreadScheduledExecutor { r =>
      val thread = new Thread(r, "spark-ivm-refresh-progress")
      thread.setDaemon(true)
      thread
    }
    t.scheduleWithFixedDelay(() => running.forEach(show), 200, 200, TimeUnit.MILLISECONDS)
    t
  }

  private def show(r: Running): Unit = {
    val now = System.nanoTime()
    if ((now - r.shownNs) / 1000000L >= r.intervalMs) {
      r.shownNs = now
      r.console.println(
        f"spark-ivm: REFRESH MATERIALIZED VIEW ${r.view}: ${r.phase} (${(now - r.startedNs) / 1e9}%.0f s)")
    }
  }

  /** The tag of every job a refresh of `view` (`catalog.db.name`) runs: lower case, as Spark's
   * catalog compares names, and without commas, which Spark's tags may not hold. */
  def tag(view: String): String = s"spark-ivm-refresh:${view.toLowerCase(Locale.ROOT).replace(',', '_')}"

  /** Whether refreshes in `spark` print their progress to the console. */
  def toConsole(spark: SparkSession): Boolean = IvmConf.RefreshProgress.get(spark) match {
    case "on" => true
    case "off" => false
    case _ => spark.sparkContext.getConf.getBoolean("spark.ui.showConsoleProgress", defaultValue = false)
  }

  /** Runs the refresh of `view` with its jobs tagged, and its progress shown if so configured. */
  def during[T](spark: SparkSession, view: String, console: PrintStream = System.err)(body: => T): T = {
    val sc = spark.sparkContext
    val description = sc.getLocalProperty(Description)
    val t = tag(view)
    val tagged = sc.getJobTags().contains(t) // a cascade's refreshes nest
    sc.addJobTag(t)
    val outer = current.get
    val r = new Running(view, IvmConf.RefreshProgressIntervalMs.get(spark), console)
    current.set(r)
    if (toConsole(spark)) { ticker; running.add(r) }
    try body
    finally {
      running.remove(r)
      current.set(outer)
      sc.setLocalProperty(Description, description)
      if (!tagged) sc.removeJobTag(t)
    }
  }

  /** The jobs that follow (and the console) describe `what` as the phase the refresh is in. */
  def phase(spark: SparkSession, view: String, what: String): Unit = {
    Option(current.get).foreach(_.phase = what)
    spark.sparkContext.setJobDescription(s"REFRESH MATERIALIZED VIEW $view: $what")
  }
}
