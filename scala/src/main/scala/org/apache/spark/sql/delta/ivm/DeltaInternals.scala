package org.apache.spark.sql.delta.ivm

import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.delta.commands.cdc.CDCReader
import org.apache.spark.sql.delta.storage.dv.DeletionVectorStore
import org.apache.spark.sql.delta.{DeltaLog, Snapshot}
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * The few Delta internals spark-ivm needs that are `private[delta]`, kept in one place so that a
 * Delta upgrade has one file to look at (as `org.apache.spark.sql.ivm.SparkInternals` for Spark).
 */
object DeltaInternals {

  /** Where a table's deletion vectors are read and written. */
  def deletionVectorStore(log: DeltaLog): DeletionVectorStore =
    DeletionVectorStore.createInstance(log.newDeltaHadoopConf())

  /**
   * A version's size from its checksum file, if Delta read one. (Delta's `sizeInBytesIfKnown`
   * and `sizeInBytes` rebuild the version's state, two Spark jobs, even when a checksum is there.)
   */
  def sizeInBytesIfKnown(snapshot: Snapshot): Option[Long] = snapshot.checksumOpt.map(_.tableSizeBytes)

  /**
   * The change data feed of versions [start, end] as Delta's batch reader builds it (the change
   * files of commits that wrote them, else the files added and removed, with deletion vectors
   * compared), in the schema of version `end`. `readChangeFeed` wraps the same DataFrame in a
   * relation whose scan plans it as a query of its own and converts its rows to Java objects and
   * back, a cost of the order of reading a small change itself; planned here, it is one plan with
   * the query that reads it.
   */
  def changeFeed(spark: SparkSession, table: TableIdentifier, start: Long, end: Long): DataFrame = {
    val catalogTable = spark.sessionState.catalog.getTableMetadata(table)
    val log = DeltaLog.forTable(spark, catalogTable)
    val latest = log.unsafeVolatileSnapshot
    val atEnd = if (latest.version == end) latest else log.getSnapshotAt(end)
    CDCReader.changesToBatchDF(log, start, end, spark, catalogTableOpt = Some(catalogTable),
      readSchemaSnapshot = Some(atEnd),
      startVersionSnapshot = if (start == end) Some(atEnd) else None)
  }
}
