package io.sparkivm.changes

import java.net.URI

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.DeltaTables
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.delta.actions.{AddCDCFile, AddFile, Metadata, Protocol, RemoveFile}
import org.apache.spark.sql.delta.{DeltaLog, NoMapping}
import org.apache.spark.sql.ivm.{DriverParquet, Parallel, SparkInternals}
import org.apache.spark.sql.types.{IntegerType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * The change data feed of a few small commits read by the driver, with no Spark job: the
 * change files are listed from the commits in the Delta log and read with Spark's own Parquet
 * reader, on the driver's thread. Delta's batch reader plans a file index per kind of change
 * file and converts each index's file list into a DataFrame to filter it, and then runs a job;
 * for a refresh's few kilobytes of changes that planning and the job cost far more than reading
 * the rows.
 *
 * It follows Delta's rule for what a commit changed: the change files (AddCDCFile) if the
 * commit wrote any, with `_change_type` giving each row's sign; else every row of the files it
 * added (+1) and removed (-1) with `dataChange`. Anything else is left to Delta's reader (None):
 * a partitioned table, column mapping, a commit that changed the schema or protocol, files
 * with deletion vectors outside change-file commits, a missing commit, more than `maxBytes`,
 * or any failure to read (a vacuumed file: Delta's reader then reports it as such).
 */
object DriverChangeRead {
  private val ChangeType = "_change_type"

  /**
   * The signed rows of versions (from, to] of `table`, whose columns at `to` are `schema`: the
   * table's columns (nullable) and [[DeltaSources.Sign]], in the schema returned.
   */
  def read(spark: SparkSession, table: org.apache.spark.sql.catalyst.TableIdentifier, schema: StructType,
      from: Long, to: Long, maxBytes: Long): Option[(StructType, IndexedSeq[InternalRow])] =
    try {
      val log = DeltaTables.log(spark, table)
      val atEnd = log.unsafeVolatileSnapshot
      if (atEnd.version != to || atEnd.metadata.partitionColumns.nonEmpty ||
        atEnd.metadata.columnMappingMode != NoMapping) return None
      // (file, bytes, sign: 0 for a change file, whose rows carry theirs)
      val files = mutable.ArrayBuffer[(Path, Long, Int)]()
      var version = from
      val readable = log.getChanges(from + 1, None, false).takeWhile(_._1 <= to).forall { case (v, actions) =>
        val contiguous = v == version + 1
        version = v
        val cdc = actions.collect { case c: AddCDCFile => c }
        val data = actions.collect {
          case a: AddFile if a.dataChange => (a.path, Some(a.size), a.deletionVector, 1)
          case r: RemoveFile if r.dataChange => (r.path, r.size, r.deletionVector, -1)
        }
        if (!contiguous || actions.exists(a => a.isInstanceOf[Metadata] || a.isInstanceOf[Protocol])) false
        else if (cdc.nonEmpty) {
          files ++= cdc.map(c => (absolute(log, c.path), c.size, 0))
          true
        } else if (data.exists { case (_, size, dv, _) => size.isEmpty || dv != null }) false
        else {
          files ++= data.map { case (path, size, _, sign) => (absolute(log, path), size.get, sign) }
          true
        }
      }
      if (!readable || version != to || files.map(_._2).sum > maxBytes) None
      else Some(rows(spark, log, SparkInternals.nullable(schema), files.toSeq))
    } catch {
      case NonFatal(_) => None
    }

  /** A data file's path in the log, made absolute. */
  def absolute(log: DeltaLog, path: String): Path = {
    val p = new Path(new URI(path))
    if (p.isAbsolute) p else new Path(log.dataPath, p)
  }

  private def rows(spark: SparkSession, log: DeltaLog, schema: StructType,
      files: Seq[(Path, Long, Int)]): (StructType, IndexedSeq[InternalRow]) = {
    val hadoopConf = log.newDeltaHadoopConf()
    def reader(fileSchema: StructType) = DriverParquet.reader(spark, fileSchema, hadoopConf)
    val withType = schema.add(StructField(ChangeType, StringType))
    // Built before the threads start (they share them), and only those needed.
    val readData = if (files.exists(_._3 != 0)) Some(reader(schema)) else None
    val readChanges = if (files.exists(_._3 == 0)) Some(reader(withType)) else None
    val types = schema.fields.map(_.dataType)
    def read(group: Seq[(Path, Long, Int)]): IndexedSeq[InternalRow] = {
      val out = IndexedSeq.newBuilder[InternalRow]
      group.foreach { case (path, bytes, sign) =>
        val it = (if (sign == 0) readChanges else readData).get(path, bytes)
        it.foreach { r =>
          val values = new Array[Any](types.length + 1)
          var i = 0
          while (i < types.length) {
            values(i) = if (r.isNullAt(i)) null else InternalRow.copyValue(r.get(i, types(i)))
            i += 1
          }
          values(types.length) = if (sign != 0) sign else signOf(r.getUTF8String(types.length))
          out += new GenericInternalRow(values)
        }
      }
      out.result()
    }
    // A change spread over many files (a DELETE of rows in every file writes a change file per
    // file it rewrote) is read by a few threads side by side: each file costs its open and
    // footer more than its rows.
    val groups = files.grouped(math.max(FilesPerThread, (files.size + Threads - 1) / Threads)).toSeq
    val rows = Parallel.run(spark, groups.map(g => () => read(g))).flatten.toIndexedSeq
    (schema.add(StructField(DeltaSources.Sign, IntegerType, nullable = false)), rows)
  }

  /** Threads that read one table's change files, at most; and files each reads, at least. */
  private val Threads = 4
  private val FilesPerThread = 8

  private val Inserted = Set("insert", "update_postimage").map(UTF8String.fromString)

  private def signOf(changeType: UTF8String): Int = if (Inserted(changeType)) 1 else -1
}
