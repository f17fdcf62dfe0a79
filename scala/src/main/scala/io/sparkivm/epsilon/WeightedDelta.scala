package io.sparkivm.epsilon

import scala.jdk.CollectionConverters._

import io.sparkivm.epsilon.TriangleMaintenance.Weight
import org.apache.spark.sql.catalyst.CatalystTypeConverters
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericRowWithSchema
import org.apache.spark.sql.functions.{col, sum}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.{DataFrame, Row, SparkSession}

/**
 * A weighted relation of one IVM^eps refresh (a column `w` holds each row's multiplicity): its
 * rows on the driver (`isOnDriver`), or a DataFrame on the executors (`distributed`). A batch's
 * bounded sets are a few thousand rows, and with the partitioned state read in place every input
 * of a step is on the driver; the operations below then run on the rows themselves, without
 * building a DataFrame, which would cost Spark's analysis per operation, more than the operation
 * on a few thousand rows. The DataFrame of rows on the driver is built only if asked for.
 */
final class WeightedDelta private (spark: SparkSession, givenSchema: Option[StructType], val rows: Seq[Row],
    distributedFrame: Option[DataFrame]) {
  def isOnDriver: Boolean = distributedFrame.isEmpty

  lazy val schema: StructType = givenSchema.getOrElse(distributedFrame.get.schema)

  /** The rows as a DataFrame (built on first use for rows on the driver). */
  lazy val frame: DataFrame = distributedFrame.getOrElse(spark.createDataFrame(rows.asJava, schema))

  private def onDriver(s: StructType, rs: Seq[Row]): WeightedDelta = WeightedDelta.onDriver(spark, s, rs)

  def isEmpty: Boolean = if (isOnDriver) rows.isEmpty else frame.isEmpty

  /** Every row, on the driver. */
  def all: Seq[Row] = if (isOnDriver) rows else frame.collect().toSeq
  def count: Long = if (isOnDriver) rows.size.toLong else frame.count()

  /** The sum of the weights (the change of the relation's size). */
  def weight: Long =
    if (isOnDriver) rows.map(_.getLong(schema.fieldIndex(Weight))).sum
    else Option(frame.agg(sum(Weight)).first().get(0)).map(_.asInstanceOf[Long]).getOrElse(0L)

  /** No rows, with the same columns. */
  def none: WeightedDelta = if (isOnDriver) onDriver(schema, Nil) else WeightedDelta.distributed(frame.limit(0))

  /**
   * Rows whose column `c` holds a value `keep` accepts (a NULL never does). Only for rows on
   * the driver; values compare as the JVM's, so the caller keeps this to types where that is SQL's
   * equality ([[io.sparkivm.planner.KeyProbe.equalsAsJvm]]).
   */
  def where(c: String, keep: Any => Boolean): WeightedDelta = {
    require(isOnDriver, "where: rows not held here")
    val at = schema.fieldIndex(c)
    onDriver(schema, rows.filter(r => !r.isNullAt(at) && keep(r.get(at))))
  }

  /** The rows with their weights negated. */
  def negated: WeightedDelta =
    if (!isOnDriver) WeightedDelta.distributed(frame.withColumn(Weight, -col(Weight)))
    else {
      val at = schema.fieldIndex(Weight)
      onDriver(schema, rows.map(r => withValue(r, at, -r.getLong(at))))
    }

  /** Rows of both, by column name (a DataFrame unless both are on the driver). */
  def unionByName(other: WeightedDelta): WeightedDelta =
    if (!isOnDriver || !other.isOnDriver) WeightedDelta.distributed(frame.unionByName(other.frame))
    else {
      val from = schema.fieldNames.map(other.schema.fieldIndex)
      onDriver(schema, rows ++ other.rows.map(r => new GenericRowWithSchema(from.map(r.get), schema)))
    }

  /** The named columns, in that order. */
  def select(names: Seq[String]): WeightedDelta =
    if (!isOnDriver) WeightedDelta.distributed(frame.select(names.map(col): _*))
    else {
      val from = names.map(schema.fieldIndex)
      val s = StructType(from.map(schema.fields))
      onDriver(s, rows.map(r => new GenericRowWithSchema(from.map(r.get).toArray, s)))
    }

  /** The columns of `target`, by name: those this lacks are NULL. */
  def complete(target: StructType): WeightedDelta =
    if (!isOnDriver) {
      val have = frame.columns.toSet
      WeightedDelta.distributed(frame.select(target.fields.toIndexedSeq.map { f =>
        if (have(f.name)) col(f.name) else org.apache.spark.sql.functions.lit(null).cast(f.dataType).as(f.name)
      }: _*))
    } else {
      val from = target.fieldNames.map(n => if (schema.fieldNames.contains(n)) schema.fieldIndex(n) else -1)
      onDriver(target, rows.map(r => new GenericRowWithSchema(from.map(i => if (i < 0) null else r.get(i)), target)))
    }

  /** Column `to` replaced (or added) with the values of column `from`. */
  def copyColumn(from: String, to: String): WeightedDelta =
    if (!isOnDriver) WeightedDelta.distributed(frame.withColumn(to, col(from)))
    else if (schema.fieldNames.contains(to)) {
      val (f, t) = (schema.fieldIndex(from), schema.fieldIndex(to))
      onDriver(schema, rows.map(r => withValue(r, t, r.get(f))))
    } else {
      val f = schema.fieldIndex(from)
      val s = schema.add(schema(from).copy(name = to))
      onDriver(s, rows.map(r => new GenericRowWithSchema((r.toSeq :+ r.get(f)).toArray, s)))
    }

  private def withValue(r: Row, at: Int, v: Any): Row = {
    val values = r.toSeq.toArray
    values(at) = v
    new GenericRowWithSchema(values, schema)
  }
}

object WeightedDelta {

  /** Rows on the driver; each keeps `schema` (columns are read by name). */
  def onDriver(spark: SparkSession, schema: StructType, rows: Seq[Row]): WeightedDelta =
    new WeightedDelta(spark, Some(schema),
      rows.map {
        case r: GenericRowWithSchema if r.schema eq schema => r
        case r => new GenericRowWithSchema(r.toSeq.toArray, schema)
      }, None)

  /** Catalyst rows on the driver (as the partitioned state keeps them), as rows of `schema`. */
  def internal(spark: SparkSession, schema: StructType, rows: Seq[InternalRow]): WeightedDelta = {
    val toRow = CatalystTypeConverters.createToScalaConverter(schema)
    onDriver(spark, schema, rows.map(r => toRow(r).asInstanceOf[Row]))
  }

  /** A DataFrame on the executors, not computed. */
  def distributed(df: DataFrame): WeightedDelta = new WeightedDelta(df.sparkSession, None, Nil, Some(df))
}
