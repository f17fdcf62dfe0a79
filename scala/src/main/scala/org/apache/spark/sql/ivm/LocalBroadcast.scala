package org.apache.spark.sql.ivm

import org.apache.spark.SparkException
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.physical.{BroadcastMode, BroadcastPartitioning, Partitioning}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, LocalTableScanExec, SparkPlan, UnaryExecNode}
import org.apache.spark.sql.execution.exchange.BroadcastExchangeExec

/**
 * The broadcast of rows a local scan holds on the driver, built there without a Spark job.
 * Spark's broadcast exchange collects its child by a job even when the child is a local scan;
 * a refresh joins many small results held on the driver (changes, the rows joined so far), each
 * such join cost a job of its own.
 */
case class LocalBroadcastExec(mode: BroadcastMode, child: LocalTableScanExec) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = BroadcastPartitioning(mode)

  @transient private lazy val relation: Broadcast[Any] = {
    val rows = child.executeCollect()
    sparkContext.broadcast(mode.transform(rows.iterator, Some(rows.length.toLong)))
  }

  override protected def doExecute(): RDD[InternalRow] =
    throw SparkException.internalError("LocalBroadcastExec does not support the execute() code path")

  override protected[sql] def doExecuteBroadcast[T](): Broadcast[T] = relation.asInstanceOf[Broadcast[T]]

  override protected def withNewChildInternal(newChild: SparkPlan): SparkPlan =
    copy(child = newChild.asInstanceOf[LocalTableScanExec])
}

/**
 * Replaces broadcast exchanges of local scans by [[LocalBroadcastExec]]. Only without adaptive
 * execution, whose query stages must be exchanges (a refresh plans its small queries
 * statically). Runs after the exchanges are planned, as a pre-columnar rule.
 */
object LocalBroadcast extends Rule[SparkPlan] {
  def apply(plan: SparkPlan): SparkPlan =
    if (conf.adaptiveExecutionEnabled) plan
    else plan.transformUp {
      case BroadcastExchangeExec(mode, scan: LocalTableScanExec) => LocalBroadcastExec(mode, scan)
    }

  val columnarRule: ColumnarRule = new ColumnarRule {
    override def preColumnarTransitions: Rule[SparkPlan] = LocalBroadcast
  }
}
