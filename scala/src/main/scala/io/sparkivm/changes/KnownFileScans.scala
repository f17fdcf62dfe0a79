package io.sparkivm.changes

import io.sparkivm.conf.IvmConf
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.QueryPlanningTracker
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreeNodeTag
import org.apache.spark.sql.catalyst.trees.TreePattern.PLAN_EXPRESSION
import org.apache.spark.sql.delta.OptimisticTransaction
import org.apache.spark.sql.delta.files.TahoeLogFileIndex
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}

/**
 * Plans a query's scans of Delta table versions whose file lists spark-ivm holds on the driver
 * ([[KnownFiles]]) from those lists, instead of Delta's planning.
 *
 * Delta plans a scan of a version it has not read before by rebuilding the version's state from
 * its log (a DataFrame planned on the driver, then a Spark job) and then listing and skipping its
 * files (another job). A refresh leaves the versions it read and the backing table's version it
 * wrote held, so the reads that typically follow (the view itself, a check of it against its
 * query, a downstream view) need neither. Profiled on the tests' small tables: about half of the
 * driver's time in such a read was Delta's state rebuild.
 *
 * Only scans of at most `spark.ivm.knownFiles.queryMaxBytes` (larger ones keep Delta's data
 * skipping, which reads more kinds of statistics than [[FileSkipping]]), of the latest or a
 * time-travelled version as Delta would choose it (`TahoeLogFileIndex.getSnapshot`, so a
 * re-executed DataFrame still reads the table's latest version), and only outside a Delta
 * transaction: a transaction records the files it reads for
 * its conflict checks, so its scans stay Delta's. Runs in the operator-optimization batch, before
 * Delta's own scan preparation (a pre-CBO rule), which leaves other indexes alone.
 */
case class KnownFileScans(spark: SparkSession) extends Rule[LogicalPlan] {
  import KnownFileScans.triedNow

  override def apply(plan: LogicalPlan): LogicalPlan = {
    val maxBytes = IvmConf.KnownFilesQueryMaxBytes.get(spark)
    if (!IvmConf.KnownFilesEnabled.get(spark) || maxBytes <= 0 || OptimisticTransaction.getActive().isDefined) plan
    else withHeldFiles(plan, maxBytes)
  }

  /**
   * `plan` with its Delta scans and those of its subqueries planned from held file lists. Only
   * nodes that hold a subquery have their expressions walked: walking a local relation's would
   * map every one of its rows, in every run of the batch.
   */
  private def withHeldFiles(plan: LogicalPlan, maxBytes: Long): LogicalPlan =
    plan.transform {
      case l @ LogicalRelation(r: HadoopFsRelation, _, _, _, _) => r.location match {
          // The batch runs to a fixed point: ask Delta for the version once per relation and
          // planning (a DataFrame planned again, by a new tracker, may read a newer version).
          case index: TahoeLogFileIndex if index.partitionFilters.isEmpty && !triedNow(l) =>
            val snapshot = index.getSnapshot
            KnownFiles.withoutJob(index.deltaLog, snapshot)
              .filter(_.sizeInBytes <= maxBytes).map { held =>
                val files = new SkippingFileIndex(spark, index.deltaLog, snapshot, held.files.values.toSeq)
                l.copy(relation = r.copy(location = files)(r.sparkSession))
              }.getOrElse(l)
          case _ => l
        }
    }.transformWithPruning(_.containsPattern(PLAN_EXPRESSION)) { case p =>
      p.transformExpressionsWithPruning(_.containsPattern(PLAN_EXPRESSION)) {
        case s: SubqueryExpression => s.withNewPlan(withHeldFiles(s.plan, maxBytes))
      }
    }
}

object KnownFileScans {
  private val Tried = TreeNodeTag[QueryPlanningTracker]("spark-ivm.knownFileScans.tried")

  /** Whether this planning has looked at `l` already; marks it looked at. */
  private def triedNow(l: LogicalRelation): Boolean = QueryPlanningTracker.get.exists { tracker =>
    val tried = l.getTagValue(Tried).exists(_ eq tracker)
    l.setTagValue(Tried, tracker)
    tried
  }
}
