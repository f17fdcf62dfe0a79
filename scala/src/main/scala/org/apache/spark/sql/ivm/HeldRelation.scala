package org.apache.spark.sql.ivm

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.analysis.MultiInstanceRelation
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.statsEstimation.EstimationUtils
import org.apache.spark.sql.catalyst.plans.logical.{LeafNode, LocalRelation, LogicalPlan, Statistics}
import org.apache.spark.sql.execution.{LocalTableScanExec, SparkPlan, SparkStrategy}
import org.apache.spark.sql.{SparkSession, classic}

/** The rows of a local or held relation: rows on the driver. */
object OnDriver {
  def unapply(plan: LogicalPlan): Option[Seq[InternalRow]] = plan match {
    case l: LocalRelation => Some(l.data)
    case h: HeldRelation => Some(h.rows)
    case _ => None
  }
}

/**
 * Rows held on the driver, as one value: not a collection, so Catalyst's generic tree walks
 * (which take a `LocalRelation`'s rows for its expressions, and map or hash every one of them in
 * rule after rule: `ConvertToLocalRelation`, `PropagateEmptyRelation`, canonicalization) pass
 * over them. Equal where they hold equal rows, as local relations are: two reads of one held
 * table, change or filter of them in a refresh are one plan to Spark's canonical comparison, so
 * a repeated step still runs once ([[io.sparkivm.execution.RefreshSteps]]). The rows are hashed
 * once, and compared only where the hashes are equal and the rows not the same object.
 */
final class HeldRows(val rows: Seq[InternalRow]) {
  private lazy val hash = rows.hashCode()
  override def equals(other: Any): Boolean = other match {
    case o: HeldRows => (o.rows eq rows) || (o.hashCode == hashCode && o.rows == rows)
    case _ => false
  }
  override def hashCode(): Int = hash
  override def toString: String = s"${rows.length} rows"
}

/**
 * A relation over many rows held on the driver (a refresh's held tables, changes and steps),
 * planned as Spark plans a local relation (a local scan), whose rows the optimizer leaves alone.
 */
case class HeldRelation(output: Seq[Attribute], held: HeldRows) extends LeafNode with MultiInstanceRelation {

  def rows: Seq[InternalRow] = held.rows

  override def newInstance(): LogicalPlan = HeldRelation(output.map(_.newInstance()), held)

  override def computeStats(): Statistics =
    Statistics(sizeInBytes = EstimationUtils.getSizePerRow(output) * rows.length, rowCount = Some(rows.length))

  override def simpleString(maxFields: Int): String = s"HeldRelation ${output.mkString("[", ", ", "]")}, $held"
}

object HeldRelation {

  /**
   * Relations of at most this many rows stay `LocalRelation`s: walking them costs little, and
   * Spark folds projections and filters of them and prunes empty ones.
   */
  val MaxLocalRows = 1000

  /**
   * A relation over `rows`: held if many and the session plans held relations (spark-ivm's
   * extension adds [[Planning]] to its planner), else local.
   */
  def of(spark: SparkSession, output: Seq[Attribute], rows: Seq[InternalRow]): LogicalPlan =
    if (rows.length <= MaxLocalRows || !plans(spark)) LocalRelation(output, rows)
    else HeldRelation(output, new HeldRows(rows))

  private def plans(spark: SparkSession): Boolean =
    spark.asInstanceOf[classic.SparkSession].sessionState.planner.strategies.contains(Planning)

  /** Plans a held relation as Spark plans a local one. */
  object Planning extends SparkStrategy {
    override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
      case h: HeldRelation => LocalTableScanExec(h.output, h.rows, None) :: Nil
      case _ => Nil
    }
  }
}
