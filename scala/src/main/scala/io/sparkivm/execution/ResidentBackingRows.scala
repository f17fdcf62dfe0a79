package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.ViewMetadata
import io.sparkivm.changes.DeltaSources
import io.sparkivm.conf.IvmConf
import io.sparkivm.epsilon.ResidentState
import io.sparkivm.planner.{KeyProbe, SharedScans, ViewMaintenance}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, GenericInternalRow}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.delta.Snapshot
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.ivm.{LocalRows, PartitionedRows}
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
 * ([[RewriteCommit]]). An entry is named by the table's path and stamped with its Delta id and
 * version. The rows as first read stay as they are ([[PartitionedRows]]); each apply of
 * spark-ivm's own records its changed keys' new rows (or their absence) on top, on the driver,
 * with the places [[DriverWrite]] wrote them at, and moves the stamp to the version it
 * committed. Any other commit to the table (a full refresh, a user's OPTIMIZE) leaves the entry
 * at an older version: it is dropped, and made again by a read of the table. A place the apply
 * finds no longer in the table (its file was compacted or rewritten) sends it back to its
 * search, so a place never needs to be corrected here.
 *
 * The rows are made (one read of the table, laid out by key) the second time a refresh of the
 * application reads the view's old rows by key, so an application that refreshes once never
 * pays for them; only for tables larger than [[HeldTableRows]] holds on the driver, and at most
 * `spark.ivm.residentViews.maxTableBytes`.
 */
object ResidentBackingRows {
  /** Rows recorded on top of the rows first read, past which the entry is made again. */
  private val MaxOverlayRows = 200000
  /** Tables arranged at once (the most recently used). */
  private val MaxTables = 8
  private val asks = new ResidentAsks(16)

  private final case class Arranged(id: String, version: Long, schema: StructType, keyCount: Int,
      base: PartitionedRows, overlay: Map[InternalRow, Option[InternalRow]]) {
    val types: Array[DataType] = schema.fields.map(_.dataType)
    /** The kept columns of the table (the schema ends with the places). */
    def columns: Seq[String] = schema.fieldNames.toSeq.dropRight(2)
    /** True if these are the rows of `columns` of the table at the snapshot. */
    def isAt(snapshot: Snapshot, columns: Seq[String]): Boolean =
      id == snapshot.metadata.id && version == snapshot.version && this.columns == columns
    def keyOf(r: InternalRow): InternalRow =
      new GenericInternalRow((0 until keyCount).map(i => r.get(i, types(i))).toArray)
  }

  private val arranged = new java.util.LinkedHashMap[String, Arranged](16, 0.75f, true) {
    override def removeEldestEntry(e: java.util.Map.Entry[String, Arranged]): Boolean = {
      val drop = size() > MaxTables
      if (drop) e.getValue.base.release()
      drop
    }
  }

  /**
   * The old rows of `keys` (rows of the view's key columns, in order, Catalyst values) in the
   * backing table at `snapshot`: `columns` (the first `keyCount` of them the keys), then
   * [[ViewMaintenance.PositionColumns]]. A key with no row has none. None where the table is
   * not arranged (and is not arranged now: see the object comment). `made` is called if the
   * rows were read from the table now, to be kept.
   */
  def rows(spark: SparkSession, meta: ViewMetadata, snapshot: Snapshot, columns: Seq[String], keyCount: Int,
      keys: Seq[InternalRow], refresh: String, made: () => Unit): Option[(Seq[Attribute], Seq[InternalRow])] = {
    val max = IvmConf.ResidentViewMaxBytes.get(spark)
    val path = snapshot.deltaLog.dataPath.toString
    if (max <= 0) forget(path)
    // A table held on the driver whole (HeldTableRows) is read from there.
    if (max <= 0 || keyCount == 0 || keys.isEmpty || HeldTableRows.at(spark, snapshot).isDefined) return None
    val found = arranged.synchronized(Option(arranged.get(path))).filter { a =>
      val current = a.isAt(snapshot, columns) && a.base.alive(spark.sparkContext)
      if (!current) remove(path, a)
      current
    }
    found.orElse {
      if (!asks.touch(path, refresh)) None
      else arrange(spark, meta, snapshot, columns, keyCount, max).map { a =>
        arranged.synchronized(Option(arranged.put(path, a))).filter(_.base ne a.base).foreach(_.base.release())
        made()
        a
      }
    }.flatMap(a => lookup(spark, path, a, keys))
  }

  /** True if the table's `columns` at the snapshot are kept here (for EXPLAIN: asks nothing, makes nothing). */
  def keptAt(snapshot: Snapshot, columns: Seq[String]): Boolean =
    arranged.synchronized(Option(arranged.get(snapshot.deltaLog.dataPath.toString))).exists(_.isAt(snapshot, columns))

  /**
   * Kept rows take about this many times their bytes in the table's files (decompressed and
   * decoded, as rows and hash maps); on a local master they must fit in half the block
   * manager's memory, else they would spill to disk and each lookup would read them back.
   */
  private val MemoryPerFileByte = 4

  /** The table's rows at the snapshot, arranged; None if it is too small, too large or not indexable. */
  private def arrange(spark: SparkSession, meta: ViewMetadata, snapshot: Snapshot, columns: Seq[String],
      keyCount: Int, max: Long): Option[Arranged] = {
    val bytes = DeltaSources.sizeInBytes(snapshot)
    val table = snapshot.metadata.schema
    val fields = columns.flatMap(c => table.find(_.name == c))
    val fits = PartitionedRows.localStorageBytes(spark.sparkContext).forall(bytes * MemoryPerFileByte <= _ / 2)
    if (bytes > max || !fits || HeldTableRows.holdable(spark, snapshot) || fields.size != columns.size ||
      !fields.take(keyCount).forall(f => KeyProbe.equalsAsJvm(f.dataType)) ||
      !fields.forall(f => SharedScans.comparable(f.dataType))) {
      None
    } else {
      val Seq(file, row, _) = ViewMaintenance.PositionColumns
      val df = DeltaSources.snapshot(spark, meta.backing, snapshot.version)
        .select(columns.map(c => col(ViewMaintenance.quote(c))) :+ col("_metadata.file_path").as(file) :+
          col("_metadata.row_index").as(row): _*)
      val base = ResidentState.rows(df, columns.head, ResidentState.partitions(spark, bytes / (4L << 20) + 1))
      // Every partition now, so that lookups read in place from the first.
      base.load()
      Some(Arranged(snapshot.metadata.id, snapshot.version, StructType(fields.map(_.copy(nullable = true)) ++
        Seq(StructField(file, StringType), StructField(row, LongType))), keyCount, base, Map.empty))
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
    val kept = if (firsts.isEmpty) Some(Nil) else try {
      a.base.rowsOfKeysInPlace(firsts).orElse(
        LocalRows.collect(spark, Seq(a.base.frameOfKeysByJob(spark, Some(firsts))), Int.MaxValue).map(_.head))
    } catch { case NonFatal(_) => None }
    if (kept.isEmpty) remove(path, a)
    kept.flatMap { rows =>
      val fromBase = rows.filter { r => val k = a.keyOf(r); wanted(k) && !a.overlay.contains(k) }
      val fromOverlay = keys.distinct.flatMap(k => a.overlay.get(k).flatten)
      val all = fromBase ++ fromOverlay
      if (all.map(a.keyOf).distinct.size != all.size) {
        // Two rows of one key: the entry is not the table it is stamped with.
        remove(path, a)
        None
      } else {
        val out = all.map { r =>
          new GenericInternalRow((a.types.indices.map(i => r.get(i, a.types(i))) :+ a.version).toArray): InternalRow
        }
        Some((DataTypeUtils.toAttributes(a.schema.add(ViewMaintenance.PositionColumns(2), LongType)), out))
      }
    }
  }

  /**
   * Records an apply of spark-ivm's own that committed version `to` of the table at `path` (Delta
   * id `id`) on top of `from`: the rows of `keys` (rows of the key columns) were removed and
   * `fresh` (rows of `schema`, the table's columns, each with the file and row index it was
   * written at, if known) added. Drops the entry where it was not at `from` or the rows are not
   * known here (`keys` None).
   */
  def committed(path: String, id: String, from: Long, to: Long, keys: Option[Set[InternalRow]],
      schema: StructType, fresh: Seq[(InternalRow, Option[(String, Long)])]): Unit = arranged.synchronized {
    Option(arranged.get(path)).foreach { a =>
      val at = a.columns.map(n => schema.fieldNames.indexOf(n))
      if (a.id != id || a.version != from || to != from + 1 || keys.isEmpty || at.contains(-1) ||
        a.overlay.size + keys.get.size > MaxOverlayRows) forget(path)
      else {
        val added = fresh.map { case (r, place) =>
          val values = at.indices.map(i => r.get(at(i), a.types(i))) ++
            place.map { case (f, i) => Seq(UTF8String.fromString(f), i) }.getOrElse(Seq(null, null))
          val row = new GenericInternalRow(values.toArray)
          a.keyOf(row) -> Some(row)
        }
        arranged.put(path, a.copy(version = to,
          overlay = a.overlay ++ keys.get.iterator.map(_ -> None) ++ added))
      }
    }
  }

  /** Drops the rows kept for the table at `path` (its view is dropped, or its rows replaced). */
  def forget(path: String): Unit = arranged.synchronized {
    Option(arranged.remove(path)).foreach(_.base.release())
  }

  /** Drops `a`, if it is still the entry kept for `path` (a concurrent apply may have moved it on). */
  private def remove(path: String, a: Arranged): Unit = arranged.synchronized {
    if (arranged.get(path) eq a) forget(path)
  }
}
