package org.apache.spark.sql.ivm

import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.adaptive.{AdaptiveSparkPlanExec, QueryStageExec}
import org.apache.spark.sql.execution.exchange.ReusedExchangeExec
import org.apache.spark.sql.execution.joins.BaseJoinExec
import org.apache.spark.sql.execution.{QueryExecution, SparkPlan}
import org.apache.spark.sql.util.QueryExecutionListener

/**
 * Rows entering joins: for every join of every query a session runs to completion, the rows
 * its inputs produced (SQL metric `numOutputRows` of the nearest node below each side that
 * counts them: a filtered scan, an aggregate, a broadcast). This is the work measure of the
 * IVM^eps benchmark ("rows touched"), comparable across refresh strategies and recomputation.
 * One counter for the JVM: work measured at the same time in other threads is counted too
 * (benchmarks measure one thing at a time). Joins spark-ivm runs on the driver over rows held
 * there count their inputs the same way ([[recordRows]]). Queries Delta runs inside its own commands (MERGE's
 * internal joins) are not seen by query listeners and not counted.
 */
object JoinMetrics {
  private val total = new AtomicLong
  // Weak: a session stopped and dropped by its user is not kept alive by having been measured.
  private val registered = java.util.Collections.newSetFromMap(
    new java.util.WeakHashMap[SparkSession, java.lang.Boolean]())

  private object Listener extends QueryExecutionListener {
    override def onSuccess(funcName: String, qe: QueryExecution, durationNs: Long): Unit =
      total.addAndGet(rowsEnteringJoins(qe.executedPlan))
    override def onFailure(funcName: String, qe: QueryExecution, exception: Exception): Unit = ()
  }

  def rowsEnteringJoins(plan: SparkPlan): Long = {
    def produced(p: SparkPlan): Long = p.metrics.get("numOutputRows").map(_.value).getOrElse(p match {
      case a: AdaptiveSparkPlanExec => produced(a.executedPlan)
      case s: QueryStageExec => produced(s.plan)
      case r: ReusedExchangeExec => produced(r.child)
      case other => other.children.map(produced).sum
    })
    def walk(p: SparkPlan): Long = {
      val here = p match {
        case j: BaseJoinExec => j.children.map(produced).sum
        case _ => 0L
      }
      val below = p match {
        case a: AdaptiveSparkPlanExec => walk(a.executedPlan)
        case s: QueryStageExec => walk(s.plan)
        case r: ReusedExchangeExec => walk(r.child)
        case other => other.children.map(walk).sum
      }
      here + below + p.subqueries.map(walk).sum
    }
    walk(plan)
  }

  /**
   * Counts the joins of a plan that ran outside a Dataset action (spark-ivm collects several
   * plans in one job through their RDDs, which query listeners do not see). Its SQL metrics are
   * final once the job has returned.
   */
  def record(plan: SparkPlan): Unit = if (!registered.isEmpty) total.addAndGet(rowsEnteringJoins(plan))

  /** Counts a join spark-ivm ran on the driver, whose inputs were `rows` rows in all. */
  def recordRows(rows: Long): Unit = if (!registered.isEmpty) total.addAndGet(rows)

  /** Runs `body` and returns the rows that entered joins in the queries it ran. */
  def measure[T](spark: SparkSession)(body: => T): (T, Long) = {
    registered.synchronized {
      if (!registered.contains(spark)) {
        spark.listenerManager.register(Listener)
        registered.add(spark)
      }
    }
    spark.sparkContext.listenerBus.waitUntilEmpty()
    val before = total.get()
    val result = body
    spark.sparkContext.listenerBus.waitUntilEmpty()
    (result, total.get() - before)
  }

  /** For Python: rows entering joins while `spark.sql(sql)` runs to completion. */
  def rowsJoinedBy(spark: SparkSession, sql: String): Long = measure(spark)(spark.sql(sql).collect())._2
}
