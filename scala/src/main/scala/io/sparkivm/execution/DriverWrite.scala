package io.sparkivm.execution

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.sparkivm.errors.IvmErrors
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl
import org.apache.hadoop.mapreduce.{Job, JobID, TaskAttemptID, TaskID, TaskType}
import org.apache.parquet.hadoop.ParquetFileReader
import org.apache.parquet.hadoop.util.HadoopInputFile
import org.apache.spark.internal.Logging
import org.apache.spark.internal.io.FileNameSpec
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.RowOrdering
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.TypeUtils
import org.apache.spark.sql.delta.actions.AddFile
import org.apache.spark.sql.delta.constraints.Constraints
import org.apache.spark.sql.delta.files.DelayedCommitProtocol
import org.apache.spark.sql.delta.sources.DeltaSQLConf
import org.apache.spark.sql.delta.stats.DeltaJobStatisticsTracker
import org.apache.spark.sql.delta.{
  ColumnWithDefaultExprUtils, DeltaOptions, GeneratedColumn, NoMapping, OptimisticTransaction
}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{DataType, StructType}
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * Writes a few rows held on the driver into a new data file of a Delta table, in the driver's
 * own thread: no Spark job. A refresh's apply and its IVM^eps state writes add tens to
 * thousands of rows, and a Spark write job to add them (plan, schedule, task, commit protocol)
 * cost more than the rows: about 50-100 ms per table on a local master, three tables per
 * triangle refresh.
 *
 * It does what Delta's `TransactionalWrite.writeFiles` does for one task, with Delta's own
 * parts: the table's file format writes the file, Delta's commit protocol names it and builds
 * its `AddFile`, and Delta's statistics tracker computes its statistics (so data skipping sees
 * the file as it would any other). Tables whose writes Delta adds more to are left to
 * `writeFiles` (None): partitioned tables, column mapping, CHECK and NOT NULL constraints,
 * generated, identity and default-valued columns, CHAR/VARCHAR columns, Iceberg compatibility, clustering, and
 * rows whose columns are not the table's.
 */
object DriverWrite extends Logging {

  /**
   * The files holding `rows` (Catalyst rows of the table's columns, in its order), at most
   * `rowsPerFile` rows each (0: one file), sorted by column `sortBy` if given, those whose INT
   * column `apart` is 1 in files of their own; written but not
   * committed (the caller commits them in `txn`). None if the table needs Delta's write path.
   */
  def write(spark: SparkSession, txn: OptimisticTransaction, schema: StructType, rows: Seq[InternalRow],
      sortBy: Option[String] = None, rowsPerFile: Long = 0L): Option[Seq[AddFile]] =
    writePlaced(spark, txn, schema, rows, sortBy, rowsPerFile).map(_.map(_._1))

  /**
   * [[write]], with the rows each file holds in the order written: a row's place in its list is
   * its row index in the file (Spark's `_metadata.row_index`, which deletion vectors mark).
   */
  def writePlaced(spark: SparkSession, txn: OptimisticTransaction, schema: StructType, rows: Seq[InternalRow],
      sortBy: Option[String] = None, rowsPerFile: Long = 0L,
      apart: Option[String] = None): Option[Seq[(AddFile, Seq[InternalRow])]] = {
    if (!usable(spark, txn, schema)) return None
    // Every column written as nullable, as Delta's `makeOutputNullable` does: a plan may call a
    // column non-null that holds NULL (an emptied group's state), and Parquet writes no value
    // for a NULL in a required column, which makes the file unreadable.
    val fileSchema = SparkInternals.nullable(schema)
    val statsTracker =
      try statsTrackerOf(spark, txn)
      catch {
        case NonFatal(e) =>
          logWarning(s"Delta's statistics tracker is not reachable (${e.getMessage}); writing by a Spark job")
          return None
      }
    val ordered =
      sortBy.filter(c => schema.fieldNames.contains(c) && RowOrdering.isOrderable(schema(c).dataType)).map { c =>
        val at = schema.fieldIndex(c)
        val t = schema(at).dataType
        val ordering = TypeUtils.getInterpretedOrdering(t)
        rows.sortWith { (l, r) =>
          if (l.isNullAt(at)) !r.isNullAt(at)
          else !r.isNullAt(at) && ordering.lt(l.get(at, t), r.get(at, t))
        }
      }.getOrElse(rows)
    // Rows whose INT column `apart` is 1 in files of their own (a top-k view's marked rows).
    val groups = apart.filter(schema.fieldNames.contains).map { c =>
      val at = schema.fieldIndex(c)
      val (marked, rest) = ordered.partition(r => !r.isNullAt(at) && r.getInt(at) == 1)
      Seq(rest, marked)
    }.getOrElse(Seq(ordered))
    val chunks =
      groups.flatMap(g => if (rowsPerFile > 0) g.grouped(rowsPerFile.toInt).toSeq else Seq(g).filter(_.nonEmpty))
    Some(chunks.zipWithIndex.map { case (chunk, i) => writeFile(spark, txn, fileSchema, chunk, i, statsTracker) -> chunk })
  }

  /** True if Delta's writes to the table do nothing but write the rows and their statistics. */
  private def usable(spark: SparkSession, txn: OptimisticTransaction, schema: StructType): Boolean = {
    val metadata = txn.metadata
    val table = metadata.schema
    metadata.partitionColumns.isEmpty && metadata.columnMappingMode == NoMapping &&
    sameColumns(table, schema) &&
    Constraints.getAll(metadata, spark).isEmpty && !GeneratedColumn.hasGeneratedColumns(table) &&
    !ColumnWithDefaultExprUtils.hasIdentityColumn(table) &&
    !ColumnWithDefaultExprUtils.tableHasDefaultExpr(txn.protocol, metadata, false) &&
    !SparkInternals.declaresCharVarchar(metadata.schemaString) &&
    !metadata.configuration.exists { case (k, v) => k.startsWith("delta.enableIcebergCompat") && v == "true" } &&
    !txn.protocol.writerFeatureNames.exists(_.toLowerCase(java.util.Locale.ROOT).contains("clustering"))
  }

  /** True if two schemas have the same columns, by name and type, in order (nullability aside). */
  private[execution] def sameColumns(a: StructType, b: StructType): Boolean =
    a.length == b.length && a.fields.zip(b.fields).forall { case (x, y) =>
      x.name == y.name && DataType.equalsIgnoreNullability(x.dataType, y.dataType)
    }

  /**
   * Delta's statistics tracker for a write to the table, as `writeFiles` makes it. The method is
   * protected in Delta's `TransactionalWrite`, so it is called by reflection; None would mean
   * Delta collects no statistics (`spark.databricks.delta.stats.collect` off).
   */
  private def statsTrackerOf(spark: SparkSession, txn: OptimisticTransaction): Option[DeltaJobStatisticsTracker] = {
    val method = txn.getClass.getMethod("getOptionalStatsTrackerAndStatsCollection",
      classOf[Seq[_]], classOf[Path], classOf[StructType], classOf[org.apache.spark.sql.Dataset[_]])
    val output = DataTypeUtils.toAttributes(txn.metadata.schema).map(_.withNullability(true))
    val (tracker, _) =
      method.invoke(txn, output, txn.deltaLog.dataPath, new StructType(), spark.emptyDataFrame: DataFrame)
        .asInstanceOf[(Option[DeltaJobStatisticsTracker], Option[_])]
    tracker
  }

  /**
   * Checks the file just written from its footer before it can be committed: as many rows as
   * given, every column optional (readable whatever it holds), each column chunk holding a value
   * or a NULL for every row. A file that fails is deleted and never reaches the log.
   */
  private[execution] def verify(conf: org.apache.hadoop.conf.Configuration, path: Path, rows: Long): Unit = {
    val reader = ParquetFileReader.open(HadoopInputFile.fromPath(path, conf))
    val footer =
      try reader.getFooter
      finally reader.close()
    val blocks = footer.getBlocks.asScala.toSeq
    val written = blocks.map(_.getRowCount).sum
    val required = footer.getFileMetaData.getSchema.getFields.asScala
      .filter(_.isRepetition(org.apache.parquet.schema.Type.Repetition.REQUIRED)).map(_.getName)
    val short = blocks.flatMap(b =>
      b.getColumns.asScala.filter(c => c.getPath.size == 1 && c.getValueCount < b.getRowCount)
        .map(_.getPath.toDotString))
    if (written != rows || required.nonEmpty || short.nonEmpty) {
      scala.util.Try(path.getFileSystem(conf).delete(path, false))
      throw IvmErrors.internal(s"the driver wrote a file that would not read back ($path: $written of $rows rows, " +
        s"required columns ${required.mkString(", ")}, short columns ${short.mkString(", ")})")
    }
  }

  private def writeFile(spark: SparkSession, txn: OptimisticTransaction, schema: StructType, rows: Seq[InternalRow],
      task: Int, statsTracker: Option[DeltaJobStatisticsTracker]): AddFile = {
    val log = txn.deltaLog
    val hadoopConf = spark.sessionState.newHadoopConfWithOptions(txn.metadata.configuration ++ log.options)
    val job = Job.getInstance(hadoopConf)
    job.setOutputKeyClass(classOf[Void])
    job.setOutputValueClass(classOf[InternalRow])
    FileOutputFormat.setOutputPath(job, log.dataPath)
    val format = log.fileFormat(txn.protocol, txn.metadata)
    val factory = format.prepareWrite(spark, job, Map(DeltaOptions.WRITE_PARTITION_COLUMNS -> "false"), schema)
    // Delta's commit protocol, as `writeFiles` makes it (its data subdirectory, if set).
    val subdir = if (spark.sessionState.conf.getConf(DeltaSQLConf.WRITE_DATA_FILES_TO_SUBDIR)) Some("data") else None
    val committer = new DelayedCommitProtocol("delta", log.dataPath.toString, None, subdir)
    committer.setupJob(job)
    val jobId = new JobID("spark-ivm", 0)
    val attempt = new TaskAttemptID(new TaskID(jobId, TaskType.MAP, task), 0)
    val conf = job.getConfiguration
    conf.set("mapreduce.job.id", jobId.toString)
    conf.set("mapreduce.task.id", attempt.getTaskID.toString)
    conf.set("mapreduce.task.attempt.id", attempt.toString)
    conf.setBoolean("mapreduce.task.ismap", true)
    conf.setInt("mapreduce.task.partition", task)
    val context = new TaskAttemptContextImpl(conf, attempt)
    committer.setupTask(context)
    val path = committer.newTaskTempFile(context, None, FileNameSpec("", "-c000" + factory.getFileExtension(context)))
    val stats = statsTracker.map(_.newTaskInstance())
    val writer = factory.newInstance(path, schema, context)
    try {
      stats.foreach(_.newFile(path))
      rows.foreach { r =>
        writer.write(r)
        stats.foreach(_.newRow(path, r))
      }
    } finally writer.close()
    stats.foreach(_.closeFile(path))
    verify(hadoopConf, new Path(path), rows.size)
    val message = committer.commitTask(context)
    committer.commitJob(job, Seq(message))
    val now = System.currentTimeMillis()
    statsTracker.zip(stats).foreach { case (t, s) => t.processStats(Seq(s.getFinalStats(now)), now) }
    // One task writes one file.
    val Seq(added) = committer.addedStatuses.toSeq
    statsTracker.map(t => added.copy(stats = t.recordedStats(added.toPath.getName))).getOrElse(added)
  }
}
