package io.sparkivm.changes

import scala.util.control.NonFatal

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection
import org.apache.spark.sql.delta.{NoMapping, Snapshot}
import org.apache.spark.sql.ivm.{DriverParquet, ReadMetrics, SparkInternals}

/**
 * A small table's rows at one version read by the driver from its data files, with Spark's own
 * Parquet reader and no Spark job: for a dimension of a few rows, planning and running a scan
 * costs far more than its rows (a cold application's first scan most of all). Tables whose
 * reading Delta adds to are left to Delta's reader (None): partitions, column mapping, deletion
 * vectors, CHAR and VARCHAR columns, any reader feature but those that change nothing here, and
 * files whose statistics count other rows than were read. Rows read here count in a refresh's
 * rows read, as a scan's would.
 */
object DriverTableRead {
  private val Plain = Set("deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck")

  /** The table's rows at the snapshot, in its columns, from `files` (its files at that version). */
  def rows(spark: SparkSession, snapshot: Snapshot,
      files: Seq[org.apache.spark.sql.delta.actions.AddFile]): Option[IndexedSeq[InternalRow]] = {
    val metadata = snapshot.metadata
    // CHAR columns are padded by the plan Spark builds to read them, not in the files.
    if (metadata.partitionColumns.nonEmpty || metadata.columnMappingMode != NoMapping ||
      SparkInternals.declaresCharVarchar(metadata.schemaString) ||
      !snapshot.protocol.readerFeatureNames.subsetOf(Plain) || files.exists(_.deletionVector != null)) {
      None
    } else {
      try {
        val log = snapshot.deltaLog
        val schema = SparkInternals.nullable(metadata.schema)
        val read = DriverParquet.reader(spark, schema, log.newDeltaHadoopConf())
        // Unsafe rows, as a scan's: held rows are matched against rows computed by Spark (a
        // change's, an apply's) by equality, and an array read into a generic row is not equal
        // to the same array in an unsafe one.
        val unsafe = UnsafeProjection.create(schema)
        val rows = files.flatMap(f =>
          read(DriverChangeRead.absolute(log, f.path), f.size).map(r => unsafe(r).copy(): InternalRow)).toIndexedSeq
        val counted = files.map(_.numLogicalRecords)
        if (counted.forall(_.isDefined) && counted.flatten.sum != rows.size) None
        else {
          ReadMetrics.readOnDriver(spark.sparkContext, rows.size)
          Some(rows)
        }
      } catch {
        case NonFatal(_) => None
      }
    }
  }
}
