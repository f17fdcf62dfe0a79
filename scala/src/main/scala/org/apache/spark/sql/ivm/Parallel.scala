package org.apache.spark.sql.ivm

import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.{Executors, ThreadFactory}

import scala.concurrent.duration.Duration
import scala.concurrent.{Await, ExecutionContext, Future}

import org.apache.spark.sql.SparkSession
import org.apache.spark.util.Utils

/**
 * Runs independent pieces of a refresh side by side (planning several scans, small
 * latency-bound jobs) on one pool shared by the JVM, never a pool per call. A task runs with
 * the caller's Spark local properties (job group, the refresh's metrics tag) and active
 * session, which pooled threads would not otherwise inherit. Each task gets its own copy of the
 * properties: Spark sets and restores keys in a thread's properties object in place (the SQL
 * execution id around every query a task plans or runs), so tasks sharing the caller's object
 * would leave the caller's jobs tagged with a finished execution's id, and Spark's scheduler
 * keeps the jobs of an execution that never ends (with their broadcast relations) forever.
 */
object Parallel {
  private lazy val pool: ExecutionContext = ExecutionContext.fromExecutorService(
    Executors.newCachedThreadPool(new ThreadFactory {
      private val n = new AtomicInteger
      override def newThread(r: Runnable): Thread = {
        val t = new Thread(r, s"spark-ivm-${n.incrementAndGet()}")
        t.setDaemon(true)
        t
      }
    }))

  def run[T](spark: SparkSession, tasks: Seq[() => T]): Seq[T] = tasks match {
    case Seq() => Nil
    case Seq(one) => Seq(one())
    case many =>
      val sc = spark.sparkContext
      val props = sc.getLocalProperties
      val active = SparkSession.getActiveSession
      val futures = many.map(task =>
        Future {
          val before = sc.getLocalProperties
          sc.setLocalProperties(Utils.cloneProperties(props))
          active.foreach(SparkSession.setActiveSession)
          try task()
          finally {
            sc.setLocalProperties(before)
            SparkSession.clearActiveSession()
          }
        }(pool))
      Await.result(Future.sequence(futures)(implicitly, pool), Duration.Inf)
  }
}
