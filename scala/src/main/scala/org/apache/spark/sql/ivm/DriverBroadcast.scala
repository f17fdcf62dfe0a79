package org.apache.spark.sql.ivm

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.broadcast.Broadcast
import org.apache.spark.executor.TaskMetrics
import org.apache.spark.memory.TaskMemoryManager
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.optimizer.BuildLeft
import org.apache.spark.sql.catalyst.plans.physical.{BroadcastMode, BroadcastPartitioning, Partitioning}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.delta.files.TahoeBatchFileIndex
import org.apache.spark.sql.delta.stats.PreparedDeltaFileIndex
import org.apache.spark.sql.execution.datasources.PartitioningAwareFileIndex
import org.apache.spark.sql.execution.exchange.BroadcastExchangeExec
import org.apache.spark.sql.execution.joins.{BroadcastHashJoinExec, BroadcastNestedLoopJoinExec}
import org.apache.spark.sql.execution.{
  ColumnarRule, FileSourceScanExec, FilterExec, LocalTableScanExec, ProjectExec, SparkPlan, UnaryExecNode, UnionExec
}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.{SparkEnv, SparkException, TaskContext, TaskContextImpl}

/**
 * The broadcast of a small input built on the driver without a Spark job. Spark's broadcast
 * exchange collects its child by a job even when the child is a local scan or a few kilobytes of
 * a file; a refresh joins many small inputs (changes and rows held on the driver, small tables
 * and the versions of them a refresh reads), and each such join cost a job of its own, about
 * half of a small refresh's jobs. The child is a local scan, or a plan without exchanges whose
 * file scans are small: its partitions are computed one after the other in the driver's thread,
 * each with a task context of its own, as an executor would compute them.
 */
case class DriverBroadcastExec(mode: BroadcastMode, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = BroadcastPartitioning(mode)

  @transient private lazy val relation: Broadcast[Any] = {
    val rows = child match {
      case scan: LocalTableScanExec => scan.executeCollect()
      case plan => DriverBroadcast.computeOnDriver(plan.execute())
    }
    sparkContext.broadcast(mode.transform(rows.iterator, Some(rows.length.toLong)))
  }

  override protected def doExecute(): RDD[InternalRow] =
    throw SparkException.internalError("DriverBroadcastExec does not support the execute() code path")

  override protected[sql] def doExecuteBroadcast[T](): Broadcast[T] = relation.asInstanceOf[Broadcast[T]]

  override protected def withNewChildInternal(newChild: SparkPlan): SparkPlan = copy(child = newChild)
}

/**
 * Replaces broadcast exchanges of small inputs by [[DriverBroadcastExec]]: local scans, and plans
 * of projections, filters, unions and broadcast joins over them and over file scans of at most
 * `maxBytes` in all (`spark.ivm.broadcast.driverReadMaxBytes`, read by the caller; sized from the files the scan's index already
 * holds: a Delta version's list as a refresh reads it, Delta's prepared scan of a query; never by
 * listing). Only without adaptive execution, whose query stages must be exchanges (a refresh
 * plans its small queries statically). Runs after the exchanges are planned, as a pre-columnar
 * rule, so that Spark adds the columnar-to-row transition under the new node.
 */
class DriverBroadcast(maxBytes: SQLConf => Long) extends Rule[SparkPlan] {
  def apply(plan: SparkPlan): SparkPlan =
    if (conf.adaptiveExecutionEnabled) plan
    else {
      val maxBytes = this.maxBytes(conf)
      plan.transformUp {
        case BroadcastExchangeExec(mode, scan: LocalTableScanExec) => DriverBroadcastExec(mode, scan)
        case BroadcastExchangeExec(mode, child) if maxBytes > 0 && fileBytes(child).exists(_ <= maxBytes) =>
          DriverBroadcastExec(mode, child)
      }
    }

  /** The bytes of the files `plan` scans, if it is made of operators that run on the driver
   * as they would in a task and its scans' sizes are known without listing files. */
  private def fileBytes(plan: SparkPlan): Option[Long] = plan match {
    case _: LocalTableScanExec => Some(0L)
    case scan: FileSourceScanExec => scan.relation.location match {
        case index: TahoeBatchFileIndex => Some(index.sizeInBytes)
        case index: PreparedDeltaFileIndex => Some(index.preparedScan.files.map(_.size).sum)
        case index: PartitioningAwareFileIndex => Some(index.sizeInBytes)
        case _ => None
      }
    case _: ProjectExec | _: FilterExec | _: UnionExec =>
      plan.children.foldLeft(Option(0L))((sum, c) => sum.flatMap(s => fileBytes(c).map(_ + s)))
    // A nested broadcast is built before this plan runs (by its own job, or on the driver).
    case j: BroadcastHashJoinExec => fileBytes(if (j.buildSide == BuildLeft) j.right else j.left)
    case j: BroadcastNestedLoopJoinExec => fileBytes(if (j.buildSide == BuildLeft) j.right else j.left)
    case _ => None
  }
}

object DriverBroadcast {
  // Far above the attempt ids of the scheduler's tasks, which count up from 0 per SparkContext.
  private val driverAttempts = new java.util.concurrent.atomic.AtomicLong(Long.MaxValue / 2)

  /** The rows of `rdd`, each partition computed in this thread as a task would compute it. */
  private[ivm] def computeOnDriver(rdd: RDD[InternalRow]): Array[InternalRow] = {
    val rows = ArrayBuffer[InternalRow]()
    val previous = TaskContext.get()
    val env = SparkEnv.get
    rdd.partitions.foreach { partition =>
      // An attempt id of its own, registered with the block manager as an executor registers
      // its tasks' (reading a broadcast takes a read lock on its block in the task's name).
      val attempt = driverAttempts.getAndIncrement()
      env.blockManager.registerTask(attempt)
      val memory = new TaskMemoryManager(env.memoryManager, attempt)
      val context = new TaskContextImpl(0, 0, partition.index, attempt, 0, rdd.partitions.length, memory,
        rdd.sparkContext.getLocalProperties, env.metricsSystem, TaskMetrics.empty, 1, Map.empty)
      TaskContext.setTaskContext(context)
      var failure: Option[Throwable] = None
      try {
        rdd.iterator(partition, context).foreach(row => rows += row.copy())
        ReadMetrics.readOnDriver(rdd.sparkContext, context.taskMetrics.inputMetrics.recordsRead)
      } catch { case e: Throwable => failure = Some(e); throw e }
      finally {
        try context.markTaskCompleted(failure)
        finally {
          memory.cleanUpAllAllocatedMemory()
          env.blockManager.releaseAllLocksForTask(attempt)
          if (previous == null) TaskContext.unset() else TaskContext.setTaskContext(previous)
        }
      }
    }
    rows.toArray
  }

  /** The rule, run before Spark's columnar transitions; `maxBytes` as in [[DriverBroadcast]]. */
  def columnarRule(maxBytes: SQLConf => Long): ColumnarRule = new ColumnarRule {
    override def preColumnarTransitions: Rule[SparkPlan] = new DriverBroadcast(maxBytes)
  }
}
