package org.apache.spark.sql.ivm

import org.apache.spark.SparkContext
import org.apache.spark.rdd.{PartitionPruningRDD, RDD}
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.catalyst.expressions.BoundReference
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.classic
import org.apache.spark.sql.execution.LogicalRDD
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.StructType
import org.apache.spark.storage.StorageLevel

/**
 * Rows kept in the executors' memory (spilling to their disks) across queries and sessions of
 * one SparkContext, hash-partitioned by one column exactly as Spark's `HashPartitioning` lays
 * rows out, so that a lookup by a few values of that column reads only the partitions that can
 * hold them. Holds the RDD, not a DataFrame: each read builds its plan in the reading session
 * (the RDD's lineage keeps the plan, and so the session, that first computed the rows).
 */
final class PartitionedRows private (val schema: StructType, keyIndex: Int, partitions: Int,
    rdd: RDD[InternalRow]) {
  private val partitionId = {
    val key = BoundReference(keyIndex, schema(keyIndex).dataType, nullable = true)
    HashPartitioning(Seq(key), partitions).partitionIdExpression
  }
  private val toCatalyst = CatalystTypeConverters.createToCatalystConverter(schema(keyIndex).dataType)

  /** The partition a key value (an external value, as `Row.get` returns it) is held in. */
  private def partitionOf(key: Any): Int = {
    val row = new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(schema.length)
    row.update(keyIndex, toCatalyst(key))
    partitionId.eval(row).asInstanceOf[Int]
  }

  /** True while the rows' SparkContext runs (a stopped context has lost them). */
  def alive(sc: SparkContext): Boolean = (rdd.context eq sc) && !sc.isStopped

  /**
   * The rows whose key column holds one of `keys` (all rows when None) as a DataFrame of
   * `spark`. Rows of the read partitions with other keys are left for the caller's filter.
   */
  def frame(spark: SparkSession, keys: Option[Iterable[Any]]): DataFrame = {
    val read = keys match {
      case Some(ks) =>
        val ids = ks.iterator.map(partitionOf).toSet
        PartitionPruningRDD.create(rdd, ids.contains)
      case None => rdd
    }
    SparkInternals.dataFrame(spark, LogicalRDD(DataTypeUtils.toAttributes(schema), read)(
      spark.asInstanceOf[classic.SparkSession]))
  }

  /** Frees the executors' memory; later reads recompute from the source. */
  def release(): Unit = rdd.unpersist(blocking = false)
}

object PartitionedRows {
  /**
   * `df`'s rows laid out by `keyColumn` in `partitions` partitions, kept once computed. Lazy:
   * the first read computes them (one shuffle of `df`), later reads only the kept partitions.
   */
  def apply(df: DataFrame, keyColumn: String, partitions: Int): PartitionedRows = {
    val laid = df.repartition(partitions, col(keyColumn))
    val rdd = laid.queryExecution.toRdd.map(_.copy()).persist(StorageLevel.MEMORY_AND_DISK)
    new PartitionedRows(laid.schema, laid.schema.fieldIndex(keyColumn), partitions, rdd)
  }

  /** External rows (as `collect` returns them) as Catalyst rows of `schema`. */
  def toInternal(schema: StructType, rows: Seq[org.apache.spark.sql.Row]): IndexedSeq[InternalRow] = {
    val convert = CatalystTypeConverters.createToCatalystConverter(schema)
    rows.iterator.map(r => convert(r).asInstanceOf[InternalRow]).toIndexedSeq
  }
}
