package org.apache.spark.sql.ivm

import java.util.UUID
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.SparkContext
import org.apache.spark.scheduler.{
  SparkListener, SparkListenerJobStart, SparkListenerStageSubmitted, SparkListenerTaskEnd
}
import org.apache.spark.sql.SparkSession

/**
 * What the Spark jobs of one piece of work cost: jobs, tasks and rows read from storage, and
 * when each job started (epoch ms), so that jobs can be attributed to phases by time.
 */
case class WorkMetrics(jobs: Long, tasks: Long, rowsRead: Long, jobStarts: Seq[Long] = Nil)

/**
 * The Spark jobs, tasks and rows read from storage of one piece of work (a refresh, a
 * recomputation). Rows are the tasks' input metrics: what scans return after file skipping and
 * Parquet's row-group and page filtering (byte counts stay near zero for local files with
 * Hadoop 3.4's reads, so rows are the measure that works everywhere). Work is tagged by a local
 * property, which Spark copies to the jobs its thread (and threads it starts) submits. One
 * listener per SparkContext, holding counters only while work is measured, so it keeps no
 * session alive. Here because waiting for the listener bus is private[spark].
 */
object ReadMetrics {
  private val Key = "spark.ivm.metricsId"
  private val listeners = new ConcurrentHashMap[SparkContext, Listener]()

  private class Counters {
    val jobs = new AtomicLong
    val tasks = new AtomicLong
    val rows = new AtomicLong
    val starts = new java.util.concurrent.ConcurrentLinkedQueue[java.lang.Long]()
  }

  private class Listener extends SparkListener {
    val owner = new ConcurrentHashMap[Int, String]()
    val counters = new ConcurrentHashMap[String, Counters]()
    override def onJobStart(e: SparkListenerJobStart): Unit =
      Option(e.properties).flatMap(p => Option(p.getProperty(Key))).flatMap(id => Option(counters.get(id)))
        .foreach { c => c.jobs.incrementAndGet(); c.starts.add(e.time) }
    override def onStageSubmitted(e: SparkListenerStageSubmitted): Unit =
      Option(e.properties).flatMap(p => Option(p.getProperty(Key))).foreach { id =>
        if (counters.containsKey(id)) owner.put(e.stageInfo.stageId, id)
      }
    override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
      Option(owner.get(e.stageId)).flatMap(id => Option(counters.get(id))).foreach { c =>
        c.tasks.incrementAndGet()
        if (e.taskMetrics != null) c.rows.addAndGet(e.taskMetrics.inputMetrics.recordsRead)
      }
  }

  /** Counts rows this thread read on the driver, as a task would have ([[DriverBroadcastExec]]). */
  def readOnDriver(sc: SparkContext, rows: Long): Unit =
    Option(sc.getLocalProperty(Key)).foreach { id =>
      Option(listeners.get(sc)).flatMap(l => Option(l.counters.get(id))).foreach(_.rows.addAndGet(rows))
    }

  /** Starts counting the work of jobs this thread submits; returns the tag and the previous one. */
  def start(spark: SparkSession): (String, String) = {
    val sc = spark.sparkContext
    val l = listeners.computeIfAbsent(sc, _ => { val l = new Listener; sc.addSparkListener(l); l })
    val id = UUID.randomUUID().toString
    l.counters.put(id, new Counters)
    val previous = sc.getLocalProperty(Key)
    sc.setLocalProperty(Key, id)
    (id, previous)
  }

  /** Stops counting and returns the work done since `start`. */
  def stop(spark: SparkSession, started: (String, String)): WorkMetrics = {
    val sc = spark.sparkContext
    sc.setLocalProperty(Key, started._2)
    sc.listenerBus.waitUntilEmpty()
    val l = listeners.get(sc)
    val c = Option(l).flatMap(x => Option(x.counters.remove(started._1)))
    Option(l).foreach(x => x.owner.values().removeIf(_ == started._1))
    c.map(x =>
      WorkMetrics(x.jobs.get, x.tasks.get, x.rows.get,
        x.starts.toArray(Array.empty[java.lang.Long]).map(_.longValue).toSeq.sorted))
      .getOrElse(WorkMetrics(0, 0, 0))
  }

  def measure[T](spark: SparkSession)(body: => T): (T, WorkMetrics) = {
    val started = start(spark)
    var done = false
    try { val r = body; done = true; (r, stop(spark, started)) }
    finally if (!done) stop(spark, started)
  }

  /** For Python: the rows read by `spark.sql(sql)` run to completion. */
  def rowsReadBy(spark: SparkSession, sql: String): Long =
    measure(spark)(spark.sql(sql).collect())._2.rowsRead

  /** For Python: jobs, tasks and rows read of `spark.sql(sql)` run to completion, as a triple. */
  def workOf(spark: SparkSession, sql: String): Array[Long] = {
    val m = measure(spark)(spark.sql(sql).collect())._2
    Array(m.jobs, m.tasks, m.rowsRead)
  }
}
