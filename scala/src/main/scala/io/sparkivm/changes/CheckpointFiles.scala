package io.sparkivm.changes

import scala.util.control.NonFatal

import org.apache.hadoop.fs.FileStatus
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder
import org.apache.spark.sql.delta.actions.{Action, AddFile, SingleAction}
import org.apache.spark.sql.delta.{CheckpointProvider, Snapshot}
import org.apache.spark.sql.ivm.DriverParquet
import org.apache.spark.sql.types.{StructField, StructType}

/**
 * The live files a classic Delta checkpoint records, read by the driver with Spark's own Parquet
 * reader: no Spark job. Delta lists a version's files by state reconstruction, a job over the
 * checkpoint and the commits after it (three with adaptive execution), which in a new
 * application costs seconds of planning, code generation and scheduling for a file of a few
 * megabytes; a scheduled refresh, the first of its application, lists each table it probes that
 * way once a table has a checkpoint (Delta writes one every ten commits).
 *
 * A checkpoint holds the reconciled state at its version (one `add` per live file), so its adds,
 * advanced by the commits after it, are the files of any later version. Only classic
 * checkpoints (one Parquet file or several parts) are read: a V2 checkpoint keeps its adds in
 * sidecar files, left to Delta, as is a checkpoint over [[MaxBytes]] or one that fails to read.
 */
object CheckpointFiles extends Logging {

  /** Checkpoint bytes read on the driver, at most (about 100,000 files with their statistics). */
  private val MaxBytes = 64L << 20

  private lazy val addSchema: StructType = StructType(Seq(StructField("add", Action.addFileSchema)))

  /** The version of the checkpoint `snapshot` starts from and its live files, if read here. */
  def adds(spark: SparkSession, snapshot: Snapshot): Option[(Long, Seq[AddFile])] = {
    val provider = snapshot.logSegment.checkpointProvider
    val parts = provider.topLevelFiles
    val readable = provider.version >= 0 && parts.nonEmpty &&
      parts.forall(_.getPath.getName.endsWith(".parquet")) && parts.map(_.getLen).sum <= MaxBytes &&
      !CheckpointProvider.isV2CheckpointEnabled(snapshot)
    if (!readable) None
    else
      try Some(provider.version -> read(spark, snapshot, parts))
      catch {
        case NonFatal(e) =>
          logInfo(s"spark-ivm: reading checkpoint ${provider.version} on the driver: ${e.getMessage}")
          None
      }
  }

  private def read(spark: SparkSession, snapshot: Snapshot, parts: Seq[FileStatus]): Seq[AddFile] = {
    val reader = DriverParquet.reader(spark, addSchema, snapshot.deltaLog.newDeltaHadoopConf())
    val toAdd = SingleAction.addFileEncoder.asInstanceOf[ExpressionEncoder[AddFile]].resolveAndBind()
      .createDeserializer()
    val width = Action.addFileSchema.length
    parts.flatMap { part =>
      reader(part.getPath, part.getLen).filterNot(_.isNullAt(0)).map(r => toAdd(r.getStruct(0, width).copy())).toSeq
    }
  }
}
