package io.sparkivm.execution

import java.util.UUID

import org.apache.spark.sql.delta.actions.{AddFile, DeletionVectorDescriptor, FileAction}
import org.apache.spark.sql.delta.commands.DeletionVectorUtils
import org.apache.spark.sql.delta.deletionvectors.{RoaringBitmapArray, RoaringBitmapArrayFormat}
import org.apache.spark.sql.delta.ivm.DeltaInternals
import org.apache.spark.sql.delta.storage.dv.DeletionVectorStore
import org.apache.spark.sql.delta.util.PathWithFileSystem
import org.apache.spark.sql.delta.{DeltaLog, Snapshot}

/**
 * Removes rows from a backing table's files with Delta's deletion vectors (merge-on-read), as
 * Delta's own DELETE does when the table has them: the rows' positions are marked deleted in a
 * bitmap stored next to the files, merged with the file's earlier bitmap, and readers skip them.
 * An apply that removes the changed keys' rows this way and appends the new rows writes what
 * changed; rewriting every file that holds a changed key writes, when changes are spread over all
 * keys, the whole table.
 */
object DeletionVectorApply {

  /** A file losing more than this fraction of its rows is rewritten instead (it compacts). */
  val MaxDeletedFraction = 0.5

  private val ChangeFeedProperty = "delta.enableChangeDataFeed"

  /**
   * True if the table takes deletion vectors and has no change data feed on (a downstream view
   * reads the feed; a commit that rewrites files gives it the rows as Delta's own feed has them).
   */
  def usable(snapshot: Snapshot): Boolean =
    DeletionVectorUtils.deletionVectorsWritable(snapshot) &&
      !snapshot.metadata.configuration.get(ChangeFeedProperty).exists(_.equalsIgnoreCase("true"))

  /** True if `file` is better rewritten than marked, once `rows` more of its rows are deleted. */
  def rewrite(file: AddFile, rows: Int): Boolean = file.numPhysicalRecords match {
    case Some(n) if n > 0 =>
      val before = Option(file.deletionVector).map(_.cardinality).getOrElse(0L)
      before + rows > MaxDeletedFraction * n
    case _ => true
  }

  /**
   * The actions that delete the rows at `positions` (physical row indexes) from `file`: its removal
   * and its re-addition with a deletion vector holding them and those it already had.
   */
  def delete(log: DeltaLog, store: DeletionVectorStore, file: AddFile, positions: Seq[Long]): Seq[FileAction] = {
    val bitmap = Option(file.deletionVector).map(dv => store.read(dv, log.dataPath))
      .getOrElse(new RoaringBitmapArray())
    positions.foreach(bitmap.add)
    val id = UUID.randomUUID()
    val target = store.generateFileNameInTable(PathWithFileSystem.withConf(log.dataPath, log.newDeltaHadoopConf()),
      id, "")
    val writer = store.createWriter(target)
    val range =
      try writer.write(bitmap.serializeAsByteArray(RoaringBitmapArrayFormat.Portable))
      finally writer.close()
    val dv = DeletionVectorDescriptor.onDiskWithRelativePath(id, "", range.length, bitmap.cardinality,
      Some(range.offset), None)
    val (added, removed) = file.removeRows(dv, true)
    Seq(removed, added)
  }

  def store(log: DeltaLog): DeletionVectorStore = DeltaInternals.deletionVectorStore(log)
}
