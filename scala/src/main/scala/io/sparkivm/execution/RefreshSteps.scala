package io.sparkivm.execution

import scala.collection.mutable
import scala.util.Try

import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{PlanSteps, ProbeSettings}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.analysis.MultiInstanceRelation
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, IsNotNull}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LocalRelation, LogicalPlan, Project, UnionLoop}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.TypeUtils
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.ivm.{DriverRows, HeldRelation, OnDriver, SessionInternals, SparkInternals}

/**
 * How a refresh computes its intermediate results: each once, on the driver when it has at
 * most `maxLocalRows` rows (every later use is then free of Spark jobs, and a decision such as
 * "is it empty" is a look at the rows), else as a local checkpoint on the executors. Each query
 * that runs a job generates code or not as `codegen` decides for it, and none starts once `stop`
 * has run out of time.
 */
class RefreshSteps(spark: SparkSession, override val probe: ProbeSettings, maxLocalRows: Int,
    codegen: QueryCodegen = QueryCodegen.Generated, stop: Option[AutoStop] = None)
    extends PlanSteps {

  /**
   * Each step's result by the step's canonical plan: Spark's canonical form equates plans that
   * differ only in their attributes' ids, so a step repeated under other ids (each occurrence of
   * a CTE the query reads several times, TPC-DS q4's `year_total` six times, has the same changed
   * keys and the same restricted joins) runs once. A list, not a hash map: hashing a plan hashes
   * every row of the rows it holds, where comparing two plans stops at their first difference.
   */
  private val results = mutable.ArrayBuffer.empty[(LogicalPlan, MultiInstanceRelation with LogicalPlan)]

  def materialize(plan: LogicalPlan): LogicalPlan = {
    val canonical = Some(plan).filter(_.deterministic).flatMap(p => Try(p.canonicalized).toOption)
    canonical.flatMap(c => results.collectFirst { case (k, rows) if k == c => rows }) match {
      // Under attributes of its own: the plan may join it with the first use.
      case Some(rows) => return RefreshSteps.renamed(plan.output, rows.newInstance())
      case None =>
    }
    val done = computed(plan)
    (canonical, done) match {
      case (Some(c), Project(_, rows: MultiInstanceRelation)) => results += ((c, rows))
      case _ =>
    }
    done
  }

  private def computed(plan: LogicalPlan): LogicalPlan = {
    stop.foreach(_.check())
    val df = SparkInternals.dataFrame(spark, recursionsOnDriver(plan))
    // Rows on the driver are evaluated there (DriverEval): no job. The analyzed plan first: Spark's
    // optimizer costs more than evaluating a few rows; the optimized one where an expression
    // needs its rewriting.
    val evaluated = DriverEval.rows(df.queryExecution.analyzed, maxLocalRows)
      .orElse(DriverEval.rows(df.queryExecution.optimizedPlan, maxLocalRows))
    evaluated match {
      case Some(rows) => return RefreshSteps.heldOnDriver(spark, plan.output, rows)
      case None =>
    }
    codegen(plan) {
      DriverRows.collect(spark, Seq(df), maxLocalRows) match {
        case Some(Seq(rows)) if rows.size <= maxLocalRows => RefreshSteps.heldOnDriver(spark, plan.output, rows)
        case _ =>
          RefreshSteps.renamed(plan.output, SparkInternals.analyzed(df.localCheckpoint(eager = true)))
      }
    }
  }

  /** `plan` with its recursions stepped on the driver where they are small ([[DriverRecursion]]). */
  private def recursionsOnDriver(plan: LogicalPlan): LogicalPlan =
    if (!plan.exists(_.isInstanceOf[UnionLoop])) plan
    else {
      val conf = SessionInternals.sqlConf(spark)
      val limits = DriverRecursion.Limits(conf.getConf(SQLConf.CTE_RECURSION_LEVEL_LIMIT),
        conf.getConf(SQLConf.CTE_RECURSION_ROW_LIMIT))
      DriverRecursion.unroll(plan, maxLocalRows, IvmConf.RecursionDriverMaxRows.get(spark), limits, materialize,
        (input, max) => {
          val df = SparkInternals.dataFrame(spark, input)
          DriverEval.rows(df.queryExecution.analyzed, max).orElse(codegen(input) {
            DriverRows.collect(spark, Seq(df), max).map(_.head).filter(_.size <= max)
          })
        },
        notes += _)
    }

  /** What the steps chose where a refresh may want to know (its report's plan notes). */
  val notes: mutable.ArrayBuffer[String] = mutable.ArrayBuffer[String]()

  def isEmpty(plan: LogicalPlan): Boolean = RefreshSteps.rowsOnDriver(plan) match {
    case Some(rows) => rows.isEmpty
    case None =>
      stop.foreach(_.check())
      codegen(plan)(SparkInternals.dataFrame(spark, plan).isEmpty)
  }

  override def materializeVersioned(plan: LogicalPlan, definition: String, stamp: String): LogicalPlan =
    VersionedResults.get(definition, stamp) match {
      case Some(rows) => RefreshSteps.heldOnDriver(spark, plan.output, rows)
      case None =>
        val done = materialize(plan)
        RefreshSteps.rowsOnDriver(done).foreach(rows => VersionedResults.put(definition, stamp, rows))
        done
    }

  override def versioned(definition: String, stamp: String): Option[Seq[InternalRow]] =
    VersionedResults.get(definition, stamp)

  override def collects: Boolean = true

  override def rowsOnDriver(plan: LogicalPlan): Option[Seq[InternalRow]] = RefreshSteps.rowsOnDriver(plan)

  override def valuesOnDriver(plan: LogicalPlan, key: Attribute): Option[Set[Any]] =
    RefreshSteps.rowsOnDriver(plan).map { rows =>
      val at = plan.output.indexWhere(_.exprId == key.exprId)
      rows.iterator.map(_.get(at, key.dataType)).filter(_ != null).toSet
    }

  override def distinctValues(plan: LogicalPlan, key: Attribute, max: Int): Option[Seq[Any]] =
    valuesOnDriver(plan, key) match {
      // On the driver: sorted there, no job.
      case Some(values) =>
        if (values.size > max) None
        else Some(values.toSeq.sorted(TypeUtils.getInterpretedOrdering(key.dataType))
            .map(CatalystTypeConverters.convertToScala(_, key.dataType)))
      case None =>
        stop.foreach(_.check())
        codegen(plan) {
          BackingTable.distinctValues(SparkInternals.dataFrame(spark, Project(Seq(key), Filter(IsNotNull(key), plan))),
            max)
        }
    }
}

object RefreshSteps {

  /** Rows held on the driver, under the attributes of the plan they were computed from. */
  def onDriver(output: Seq[Attribute], rows: Seq[InternalRow]): LogicalPlan =
    renamed(output, LocalRelation(DataTypeUtils.toAttributes(DataTypeUtils.fromAttributes(output)), rows))

  /**
   * Rows held on the driver as [[onDriver]], many of them as a [[HeldRelation]]: a step's
   * result is read by the plans of later steps, each optimized by rules that would walk every
   * row of a local relation.
   */
  def heldOnDriver(spark: SparkSession, output: Seq[Attribute], rows: Seq[InternalRow]): LogicalPlan =
    renamed(output, HeldRelation.of(spark, DataTypeUtils.toAttributes(DataTypeUtils.fromAttributes(output)), rows))

  /** `rows` under the attributes of the plan they were computed from, column by column. */
  private def renamed(output: Seq[Attribute], rows: LogicalPlan): LogicalPlan =
    Project(output.zip(rows.output).map { case (o, n) => Alias(n, o.name)(exprId = o.exprId) }, rows)

  /** The rows of a plan made by [[onDriver]]. */
  def rowsOnDriver(plan: LogicalPlan): Option[Seq[InternalRow]] = plan match {
    case Project(_, OnDriver(data)) => Some(data)
    case OnDriver(data) => Some(data)
    case _ => None
  }
}

/** Runs the checks but materializes nothing and collects no keys (EXPLAIN). */
class CheckSteps(spark: SparkSession, probe: ProbeSettings) extends RefreshSteps(spark, probe, 0) {
  override def materialize(plan: LogicalPlan): LogicalPlan = plan
  override def distinctValues(plan: LogicalPlan, key: Attribute, max: Int): Option[Seq[Any]] = None
  override def collects: Boolean = false
}
