package org.apache.spark.sql.ivm

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl
import org.apache.hadoop.mapreduce.{Job, JobID, TaskAttemptID, TaskID, TaskType}
import org.apache.spark.paths.SparkPath
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat
import org.apache.spark.sql.execution.datasources.{FileFormat, PartitionedFile}
import org.apache.spark.sql.types.StructType

/**
 * Parquet files read and written on the driver's thread with Spark's own Parquet format, for
 * the few small files a refresh reads or writes whole (changes, checkpoints, counts): planning
 * and running a Spark job for them would cost more than their rows.
 */
object DriverParquet {

  /**
   * A reader of whole files as rows of `schema` (each row valid until the next is read: copy
   * what is kept).
   */
  def reader(spark: SparkSession, schema: StructType, conf: Configuration): (Path, Long) => Iterator[InternalRow] = {
    val read = new ParquetFileFormat().buildReaderWithPartitionValues(spark, schema, new StructType(), schema,
      Nil, Map(FileFormat.OPTION_RETURNING_BATCH -> "false"), conf)
    (path, bytes) =>
      read(PartitionedFile(InternalRow.empty, SparkPath.fromPath(path), 0L, bytes, Array.empty[String], 0L, bytes))
  }

  /** Writes `rows` of `schema` as one Parquet file at `path`. */
  def write(spark: SparkSession, conf: Configuration, path: Path, schema: StructType, rows: Iterator[InternalRow])
      : Unit = {
    val job = Job.getInstance(conf)
    val factory = new ParquetFileFormat().prepareWrite(spark, job, Map.empty, schema)
    val attempt = new TaskAttemptID(new TaskID(new JobID("spark-ivm", 0), TaskType.MAP, 0), 0)
    val jobConf = job.getConfiguration
    jobConf.set("mapreduce.task.attempt.id", attempt.toString)
    val writer = factory.newInstance(path.toString, schema, new TaskAttemptContextImpl(jobConf, attempt))
    try rows.foreach(writer.write)
    finally writer.close()
  }
}
