package io.sparkivm.state

import io.sparkivm.conf.IvmConf
import org.apache.spark.SparkContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.ivm.PartitionedRows

/**
 * The bytes each place may hold. Unset (-1), the driver may hold a fifth of its heap, and the
 * executors half of their storage memory (Spark's unified memory pool less execution's share:
 * the rest stays for cached tables and shuffles).
 */
private[state] object StateBudget {
  def of(session: Option[SparkSession], place: StatePlace): Long = session match {
    case Some(spark) => of(spark, place)
    case None => if (place == StatePlace.Driver) driverDefault else 0L
  }

  private def driverDefault: Long = Runtime.getRuntime.maxMemory / 5

  def of(spark: SparkSession, place: StatePlace): Long = place match {
    case StatePlace.Driver =>
      val set = IvmConf.StateDriverMaxBytes.get(spark)
      if (set >= 0) set else driverDefault
    case StatePlace.Executors =>
      val set = IvmConf.StateExecutorMaxBytes.get(spark)
      if (set >= 0) set
      else if (spark.sparkContext.isStopped) 0L
      else executorStorage(spark.sparkContext) / 2
  }

  /** The executors' storage memory, asked of the block manager master at most once a second. */
  private def executorStorage(sc: SparkContext): Long = synchronized {
    val now = System.currentTimeMillis()
    if (!asked.exists { case (ctx, at, _) => (ctx eq sc) && now - at < 1000 }) {
      asked = Some((sc, now, PartitionedRows.executorStorageBytes(sc)))
    }
    asked.get._3
  }

  private var asked: Option[(SparkContext, Long, Long)] = None
}
