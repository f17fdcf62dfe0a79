package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.ViewMetadata
import io.sparkivm.changes.DeltaSources
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{KeyProbe, SharedScans, ViewMaintenance}
import io.sparkivm.state.{
  Arrangement, StateBuilds, StateId, StateKind, StatePlace, StateRegistry, StateSize, TableCommit, TableStamp
}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, GenericInternalRow}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.delta.Snapshot
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.ivm.{DriverRows, PartitionedRows}
import org.apache.spark.sql.types.{DataType, LongType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * A view's backing table kept in the executors' memory between refreshes, indexed by its first
 * key column: an arrangement of the view itself, as Materialize and DBSP keep an operator's
 * output indexed by the key the next step looks it up by. A refresh folds its delta into the
 * old rows of its changed keys; for a view of hundreds of thousands of groups (TPC-H Q10 at
 * SF 10), reading those rows was a scan of every file of the table (a Spark job), because the
 * changed keys spread over all of them. Looked up here, they cost what the change does.
 *
 * Only the columns the fold reads are kept (keys, count and aggregate states, see
 * [[ViewMaintenance.foldColumns]]), with each row's place in the table's files (its file and row
 * index), so that the apply marks the old rows deleted without searching for them
 * ([[RewriteCommit]]). An entry is held in the executors' state ([[StateRegistry]]) by the
 * table's path and stamped with its Delta id and version. The rows as first read stay as they
 * are ([[PartitionedRows]]); each apply of spark-ivm's own records its changed keys' new rows
 * (or their absence) on top, on the driver, with the places [[DriverWrite]] wrote them at, and
 * moves the stamp to the version it committed ([[TableCommit]]). Any other commit to the table (a full refresh, a user's OPTIMIZE) leaves the entry
 * at an older version: it is dropped, and made again by a read of the table. A place the apply
 * finds no longer in the table (its file was compacted or rewritten) sends it back to its
 * search, so a place never needs to be corrected here.
 *
 * The rows are made (one read of the table, laid out by key) the second time a refresh of the
 * application reads the view's old rows by key, so an application that refreshes once never
 * pays for them; only for tables larger than [[SmallTableRows]] holds on the driver, and only
 * where they fit the executors' state budget (`spark.ivm.state.executorMaxBytes`).
 */
object KeyedViewRows {

  /** Rows recorded on top of the rows first read, past which the entry is made again. */
  private val MaxOverlayRows = 200000

  private final case class Arranged(id: String, version: Long, schema: StructType, keyCount: Int,
      base: PartitionedRows, baseBytes: Long, overlay: Map[InternalRow, Option[InternalRow]])
      extends Arrangement {
    override def place: StatePlace = StatePlace.Executors

    /** The kept rows as their block managers report them, and the overlay on the driver. */
    override def bytes: Long = baseBytes + overlay.size * OverlayRowBytes
    override def alive: Boolean = base.alive
    override def release(): Unit = base.release()
    override def shares(other: Arrangement): Boolean = other match {
      case a: Arranged => a.base eq base
      case _ => false
    }

    /**
     * Moved by an apply of spark-ivm's own: the rows of the removed keys recorded as gone, and
     * the new rows with the places they were written at (a place not known leaves the apply to
     * search for the row); None where the commit replaced every row or its rows are not known.
     */
    override def committed(c: TableCommit): Option[Arrangement] = {
      val at = columns.map(n => c.schema.fieldNames.indexOf(n))
      for {
        keys <- c.removedKeys
        fresh <- c.added
        if c.follows(version) && !c.replacesAll && !at.contains(-1) && overlay.size + keys.size <= MaxOverlayRows
      } yield {
        val added = fresh.map { case (r, place) =>
          val values = at.indices.map(i => r.get(at(i), types(i))) ++
            place.map { case (f, i) => Seq(UTF8String.fromString(f), i) }.getOrElse(Seq(null, null))
          val row = new GenericInternalRow(values.toArray)
          keyOf(row) -> Some(row)
        }
        copy(version = c.to, overlay = overlay ++ keys.iterator.map(_ -> None) ++ added)
      }
    }

    val types: Array[DataType] = schema.fields.map(_.dataType)

    /** The kept columns of the table (the schema ends with the places). */
    def columns: Seq[String] = schema.fieldNames.toSeq.dropRight(2)

    /** True if these are the rows of `columns` of the table at the snapshot. */
    def isAt(snapshot: Snapshot, columns: Seq[String]): Boolean =
      id == snapshot.metadata.id && version == snapshot.version && this.columns == columns
    def keyOf(r: InternalRow): InternalRow =
      new GenericInternalRow((0 until keyCount).map(i => r.get(i, types(i))).toArray)
  }

  /** The driver's bytes per row recorded on top of the kept rows (a row and its key). */
  private val OverlayRowBytes = 256L

  private def stateId(path: String) = StateId(StateKind.ViewRows, path)

  /**
   * The old rows of `keys` (rows of the view's key columns, in order, Catalyst values) in the
   * backing table at `snapshot`: `columns` (the first `keyCount` of them the keys), then
   * [[ViewMaintenance.PositionColumns]]. A key with no row has none. None where the table is
   * not arranged (and is not arranged now: see the object comment). `made` is called if the
   * rows were read from the table now, to be kept.
   */
  def rows(spark: SparkSession, meta: ViewMetadata, snapshot: Snapshot, columns: Seq[String], keyCount: Int,
      keys: Seq[InternalRow], refresh: String, made: () => Unit): Option[(Seq[Attribute], Seq[InternalRow])] = {
    val path = snapshot.deltaLog.dataPath.toString
    val id = stateId(path)
    // A table held on the driver whole (SmallTableRows) is read from there.
    if (keyCount == 0 || keys.isEmpty || SmallTableRows.at(spark, snapshot).isDefined) return None
    val found = StateRegistry.get[Arranged](id, TableStamp(snapshot.metadata.id, snapshot.version).toString)
      .filter { a =>
        val current = a.isAt(snapshot, columns) && a.base.alive(spark.sparkContext)
        if (!current) StateRegistry.remove(id, a)
        current
      }
    def hold(a: Arranged): Boolean = StateRegistry.put(id, TableStamp(a.id, a.version).toString, a,
      table = Some(path), view = Some(meta.view.unquotedString))
    found.orElse {
      if (!StateRegistry.ask(id, refresh)) None
      else if (IvmConf.StateBuildInBackground.get(spark)) {
        // Made after this refresh, at the version it commits (StateBuilds); read from the table now.
        StateBuilds.submit(spark, id) {
          arrange(spark, meta, snapshot.deltaLog.update(), columns, keyCount).foreach(hold)
        }
        None
      } else arrange(spark, meta, snapshot, columns, keyCount).filter(hold).map { a =>
        made()
        a
      }
    }.flatMap(a => lookup(spark, path, a, keys))
  }

  /** True if the table's `columns` at the snapshot are kept here (for EXPLAIN: asks nothing, makes nothing). */
  def keptAt(snapshot: Snapshot, columns: Seq[String]): Boolean =
    StateRegistry.latest[Arranged](stateId(snapshot.deltaLog.dataPath.toString)).exists(_._2.isAt(snapshot, columns))

  /** The table's rows at the snapshot, arranged; None if it is too small, too large or not indexable. */
  private def arrange(spark: SparkSession, meta: ViewMetadata, snapshot: Snapshot, columns: Seq[String],
      keyCount: Int): Option[Arranged] = {
    val bytes = DeltaSources.sizeInBytes(snapshot)
    val table = snapshot.metadata.schema
    val fields = columns.flatMap(c => table.find(_.name == c))
    val fits = StateRegistry.admits(spark, StatePlace.Executors, bytes * StateSize.ExecutorBytesPerFileByte)
    if (!fits || SmallTableRows.holdable(spark, snapshot) || fields.size != columns.size ||
      !fields.take(keyCount).forall(f => KeyProbe.equalsAsJvm(f.dataType)) ||
      !fields.forall(f => SharedScans.comparable(f.dataType))) {
      None
    } else {
      val Seq(file, row, _) = ViewMaintenance.PositionColumns
      val df = DeltaSources.snapshot(spark, meta.backing, snapshot.version)
        .select(columns.map(c => col(ViewMaintenance.quote(c))) :+ col("_metadata.file_path").as(file) :+
            col("_metadata.row_index").as(row): _*)
      val base = PartitionedState.rows(df, columns.head, PartitionedState.partitions(spark, bytes / (4L << 20) + 1))
      // Every partition now, so that lookups read in place from the first.
      base.load()
      Some(Arranged(snapshot.metadata.id, snapshot.version,
          StructType(fields.map(_.copy(nullable = true)) ++
            Seq(StructField(file, StringType), StructField(row, LongType))), keyCount, base,
          Some(base.storedBytes).filter(_ > 0).getOrElse(bytes * StateSize.ExecutorBytesPerFileByte), Map.empty))
    }
  }

  /** The rows of `keys` in `a`, with the version as the last column; None (and `a` dropped) if inconsistent. */
  private def lookup(spark: SparkSession, path: String, a: Arranged,
      keys: Seq[InternalRow]): Option[(Seq[Attribute], Seq[InternalRow])] = {
    val wanted = keys.toSet
    val firstType = a.schema.head.dataType
    val firsts = keys.iterator.filterNot(a.overlay.contains).map(k => if (k.isNullAt(0)) null else k.get(0, firstType))
      .toArray.distinct
    // In place (no job) where the partitions are kept in this JVM; else one job over the
    // partitions the keys hash to, which recomputes any that were evicted from the version's
    // files (gone if vacuumed since: then the table is read as if nothing were kept).
    val kept = if (firsts.isEmpty) Some(Nil)
    else
      try {
        a.base.rowsOfKeysInPlace(firsts).orElse(
          DriverRows.collect(spark, Seq(a.base.frameOfKeysByJob(spark, Some(firsts))), Int.MaxValue).map(_.head))
      } catch { case NonFatal(_) => None }
    if (kept.isEmpty) StateRegistry.remove(stateId(path), a)
    kept.flatMap { rows =>
      val fromBase = rows.filter { r =>
        val k = a.keyOf(r); wanted(k) && !a.overlay.contains(k)
      }
      val fromOverlay = keys.distinct.flatMap(k => a.overlay.get(k).flatten)
      val all = fromBase ++ fromOverlay
      if (all.map(a.keyOf).distinct.size != all.size) {
        // Two rows of one key: the entry is not the table it is stamped with.
        StateRegistry.remove(stateId(path), a)
        None
      } else {
        val out = all.map { r =>
          new GenericInternalRow((a.types.indices.map(i => r.get(i, a.types(i))) :+ a.version).toArray): InternalRow
        }
        Some((DataTypeUtils.toAttributes(a.schema.add(ViewMaintenance.PositionColumns(2), LongType)), out))
      }
    }
  }

}
