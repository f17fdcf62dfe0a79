package org.apache.spark.sql.delta.ivm

import org.apache.spark.sql.delta.{DeltaLog, Snapshot}
import org.apache.spark.sql.delta.storage.dv.DeletionVectorStore

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
}
