package org.apache.spark.sql.ivm

import java.util.UUID
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.SparkContext
import org.apache.spark.scheduler.{SparkListener, SparkListenerStageSubmitted, SparkListenerTaskEnd}
import org.apache.spark.sql.SparkSession

/**
 * Rows read from storage by the Spark jobs of one piece of work (a refresh, a recomputation),
 * from the tasks' input metrics: what scans return after file skipping and Parquet's row-group
 * and page filtering. (Their byte counts stay near zero for local files with Hadoop 3.4's
 * reads, so rows are the measure that works everywhere.) Work is tagged by a local property, which Spark copies to
 * the stages its thread submits. Here because waiting for the listener bus is private[spark].
 */
object ReadMetrics {
  private val Key = "spark.ivm.readMetricsId"
  private val listeners = new ConcurrentHashMap[SparkContext, Listener]()

  private class Listener extends SparkListener {
    val owner = new ConcurrentHashMap[Int, String]()
    val bytes = new ConcurrentHashMap[String, AtomicLong]()
    override def onStageSubmitted(e: SparkListenerStageSubmitted): Unit =
      Option(e.properties).flatMap(p => Option(p.getProperty(Key))).foreach { id =>
        owner.put(e.stageInfo.stageId, id)
        bytes.computeIfAbsent(id, _ => new AtomicLong)
      }
    override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
      Option(owner.get(e.stageId)).filter(_ => e.taskMetrics != null).foreach { id =>
        Option(bytes.get(id)).foreach(_.addAndGet(e.taskMetrics.inputMetrics.recordsRead))
      }
  }

  /** Starts counting the rows read by jobs this thread submits; returns the previous tag. */
  def start(spark: SparkSession): (String, String) = {
    val sc = spark.sparkContext
    val l = listeners.computeIfAbsent(sc, _ => { val l = new Listener; sc.addSparkListener(l); l })
    val id = UUID.randomUUID().toString
    l.bytes.put(id, new AtomicLong)
    val previous = sc.getLocalProperty(Key)
    sc.setLocalProperty(Key, id)
    (id, previous)
  }

  /** Stops counting and returns the rows read since `start`. */
  def stop(spark: SparkSession, started: (String, String)): Long = {
    val sc = spark.sparkContext
    sc.setLocalProperty(Key, started._2)
    sc.listenerBus.waitUntilEmpty()
    val l = listeners.get(sc)
    Option(l).flatMap(x => Option(x.bytes.remove(started._1))).map(_.get()).getOrElse(0L)
  }

  def measure[T](spark: SparkSession)(body: => T): (T, Long) = {
    val started = start(spark)
    var done = false
    try { val r = body; done = true; (r, stop(spark, started)) }
    finally if (!done) spark.sparkContext.setLocalProperty(Key, started._2)
  }

  /** For Python: the rows read by `spark.sql(sql)` run to completion. */
  def rowsReadBy(spark: SparkSession, sql: String): Long =
    measure(spark)(spark.sql(sql).collect())._2
}
