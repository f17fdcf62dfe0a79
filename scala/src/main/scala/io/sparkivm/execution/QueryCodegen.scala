package io.sparkivm.execution

import java.util.concurrent.atomic.AtomicInteger

import io.sparkivm.conf.IvmConf
import io.sparkivm.policy.CostModel
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.plans.logical.{LeafNode, LogicalPlan}
import org.apache.spark.sql.execution.datasources.LogicalRelation
import org.apache.spark.sql.ivm.{OnDriver, SessionInternals}

/**
 * Which of a refresh's queries run with generated code. Generating and compiling a query's code
 * costs more than it saves on small inputs, and in a new application (a scheduled job) every
 * query's code is compiled anew, on the driver and in every executor. A refresh whose inputs
 * (every table it reads, at full size) fit `spark.ivm.refresh.interpretedMaxBytes` runs every
 * query interpreted ([[QueryCodegen.Interpreted]]).
 * An incremental refresh over larger tables still reads little of most of them (the rows of the
 * changed keys, the change itself), so each of its queries is sized by the files it scans
 * ([[QueryCodegen.scannedBytes]]): those over the limit run with the user's code generation, the
 * rest interpreted ([[QueryCodegen.PerQuery]]). A recomputation over larger tables generates code
 * throughout ([[QueryCodegen.Generated]]).
 */
sealed trait QueryCodegen {

  /** Runs `body`, which plans and runs `plan`, with generated code if `plan` needs it. */
  def apply[T](plan: LogicalPlan)(body: => T): T = scanning(QueryCodegen.scannedBytes(plan))(body)

  /** Runs `body`, a query that scans `bytes` of files, with generated code if it needs it. */
  def scanning[T](bytes: => Long)(body: => T): T

  /** What the report says of it, if anything. */
  def note: Option[String]

  /**
   * Once the refresh's queries have run: what the session runs later (the state builds queued
   * for between refreshes, which read whole tables) gets code generation as the refresh's
   * inputs' size decided it.
   */
  def release(): Unit = ()
}

object QueryCodegen {
  private[execution] val WholeStage = "spark.sql.codegen.wholeStage"
  // Spark's switch between generated and interpreted expressions (an internal setting).
  private[execution] val FactoryMode = "spark.sql.codegen.factoryMode"

  /** Every query with the session's settings as they are (the switch off, or a large recomputation). */
  case object Generated extends QueryCodegen {
    def scanning[T](bytes: => Long)(body: => T): T = body
    def note: Option[String] = None
  }

  /** Every query interpreted: the refresh's inputs total `inputBytes`, at most `maxBytes`. */
  final case class Interpreted(inputBytes: Long, maxBytes: Long) extends QueryCodegen {
    def scanning[T](bytes: => Long)(body: => T): T = body
    def note: Option[String] = Some(s"queries without generated code: ${CostModel.bytes(inputBytes)} of " +
      s"inputs, at most ${CostModel.bytes(maxBytes)} (${IvmConf.RefreshInterpretedMaxBytes.key})")
  }

  /**
   * Queries that scan at most `maxBytes` of files interpreted (the session's settings), larger
   * ones with `generated` (the user's values of the code-generation settings; None: Spark's default).
   */
  final class PerQuery(spark: SparkSession, maxBytes: Long, generated: Map[String, Option[String]]) extends QueryCodegen {
    private val ran = new AtomicInteger
    private val compiled = new AtomicInteger

    def scanning[T](bytes: => Long)(body: => T): T = {
      ran.incrementAndGet()
      if (bytes <= maxBytes) body
      else {
        compiled.incrementAndGet()
        SessionInternals.withConf(spark, generated)(body)
      }
    }

    override def release(): Unit = SessionInternals.setConf(spark, generated)

    def note: Option[String] =
      if (ran.get == 0) None
      else Some(s"generated code only for queries that scan more than ${CostModel.bytes(maxBytes)} of files " +
        s"(${IvmConf.RefreshInterpretedMaxBytes.key}): ${compiled.get} of ${ran.get}")
  }

  /**
   * The bytes of the files `plan` scans, at their tables' full size (what data skipping leaves is
   * known only once the scan is planned). Rows held on the driver scan none; any other leaf
   * counts as Spark sizes it (a checkpointed intermediate result, unknown, as large).
   */
  def scannedBytes(plan: LogicalPlan): Long = {
    val sizes = plan.collectWithSubqueries {
      case OnDriver(_) => BigInt(0)
      case r: LogicalRelation => BigInt(r.relation.sizeInBytes)
      case leaf: LeafNode => leaf.stats.sizeInBytes
    }
    sizes.sum.min(BigInt(Long.MaxValue)).toLong
  }
}
