package org.apache.spark.sql.ivm

import java.io.{ByteArrayInputStream, ByteArrayOutputStream, DataInputStream, DataOutputStream}

import org.apache.spark.SparkEnv
import org.apache.spark.io.CompressionCodec
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
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
    // Each task's rows as one compressed block of unsafe rows, as Spark's own collect sends them:
    // Java serialization of every row costs about a microsecond a row (a second per million).
    val rdds = dfs.zipWithIndex.map { case (df, i) =>
      val schema = df.schema
      df.queryExecution.toRdd.mapPartitions { it =>
        val toUnsafe = UnsafeProjection.create(schema)
        val codec = CompressionCodec.createCodec(SparkEnv.get.conf)
        val bytes = new ByteArrayOutputStream()
        val out = new DataOutputStream(codec.compressedOutputStream(bytes))
        val buffer = new Array[Byte](4096)
        var n = 0
        while (it.hasNext && n <= maxRowsPerTask) {
          val row = it.next() match {
            case u: UnsafeRow => u
            case other => toUnsafe(other)
          }
          out.writeInt(row.getSizeInBytes)
          row.writeToStream(out, buffer)
          n += 1
        }
        out.close()
        Iterator(if (n > maxRowsPerTask) (i, -1, null: Array[Byte]) else (i, n, bytes.toByteArray))
      }
    }
    val union = spark.sparkContext.union(rdds)
    val all = SQLExecution.withSQLConfPropagated(spark.asInstanceOf[classic.SparkSession]) {
      tasks.filter(_ < union.getNumPartitions).map(union.coalesce(_)).getOrElse(union).collect()
    }
    dfs.foreach(df => JoinMetrics.record(df.queryExecution.executedPlan))
    if (all.exists(_._2 < 0)) None
    else {
      val codec = CompressionCodec.createCodec(spark.sparkContext.getConf)
      val fields = dfs.map(_.schema.length)
      val byDf = all.groupBy(_._1)
      Some(dfs.indices.map { i =>
        byDf.get(i).map(_.toIndexedSeq.flatMap { case (_, n, block) => decode(codec, block, n, fields(i)) })
          .getOrElse(IndexedSeq.empty)
      })
    }
  }

  private def decode(codec: CompressionCodec, block: Array[Byte], n: Int, fields: Int): IndexedSeq[InternalRow] = {
    val in = new DataInputStream(codec.compressedInputStream(new ByteArrayInputStream(block)))
    try {
      IndexedSeq.fill(n) {
        val size = in.readInt()
        val bytes = new Array[Byte](size)
        in.readFully(bytes)
        val row = new UnsafeRow(fields)
        row.pointTo(bytes, size)
        row
      }
    } finally in.close()
  }

  /** A DataFrame over rows held here, with fresh attributes (each call may join with another). */
  def frame(spark: SparkSession, schema: StructType, rows: Seq[InternalRow]): DataFrame =
    SparkInternals.dataFrame(spark, LocalRelation(DataTypeUtils.toAttributes(schema), rows))
}
