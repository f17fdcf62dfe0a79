package org.apache.spark.sql.ivm

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.SQLExecution
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.{DataFrame, SparkSession, classic}

/**
 * Small results held on the driver as Catalyst rows, and plans over them. A refresh's deltas
 * are small; holding them as a `LocalRelation` makes every later use free of Spark jobs (Spark
 * plans a local relation as a local scan, and [[DriverBroadcast]] broadcasts it without a job).
 */
object DriverRows {

  /**
   * The rows of several DataFrames in one Spark job, or None if some task produced more than
   * `maxRowsPerTask` rows (the caller then computes them distributed). Rows come back as
   * copies, in the DataFrames' order. With `tasks`, the last stage runs as at most that many
   * tasks (for reads of many small files, whose tasks would each cost more to start than to run).
   * The tasks see `spark`'s SQL settings, as a Dataset action's do (code generation among them).
   */
  def collect(spark: SparkSession, dfs: Seq[DataFrame], maxRowsPerTask: Int,
      tasks: Option[Int] = None): Option[Seq[IndexedSeq[InternalRow]]] = {
    if (dfs.isEmpty) return Some(Nil)
    val rdds = dfs.zipWithIndex.map { case (df, i) =>
      df.queryExecution.toRdd.mapPartitions { it =>
        val buf = new ArrayBuffer[(Int, InternalRow)]()
        while (it.hasNext && buf.size <= maxRowsPerTask) buf += ((i, it.next().copy()))
        if (buf.size > maxRowsPerTask) Iterator((-1, null: InternalRow)) else buf.iterator
      }
    }
    val union = spark.sparkContext.union(rdds)
    val all = SQLExecution.withSQLConfPropagated(spark.asInstanceOf[classic.SparkSession]) {
      tasks.filter(_ < union.getNumPartitions).map(union.coalesce(_)).getOrElse(union).collect()
    }
    dfs.foreach(df => JoinMetrics.record(df.queryExecution.executedPlan))
    if (all.exists(_._1 < 0)) None
    else {
      val byDf = all.groupBy(_._1)
      Some(dfs.indices.map(i => byDf.get(i).map(_.map(_._2).toIndexedSeq).getOrElse(IndexedSeq.empty)))
    }
  }

  /** A DataFrame over rows held here, with fresh attributes (each call may join with another). */
  def frame(spark: SparkSession, schema: StructType, rows: Seq[InternalRow]): DataFrame =
    SparkInternals.dataFrame(spark, LocalRelation(DataTypeUtils.toAttributes(schema), rows))
}
