package io.sparkivm.execution

import io.sparkivm.changes.{DeltaSources, DriverTableRead, KnownFiles}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{RowCounts, SharedScans}
import io.sparkivm.state.{Arrangement, StateId, StateKind, StatePlace, StateRegistry, StateSize, TableCommit, TableStamp}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.Snapshot
import org.apache.spark.sql.ivm.DriverRows
import org.apache.spark.sql.types.StructType

/**
 * The rows of small Delta tables held on the driver, one version per table: backing tables and
 * the base tables a refresh reads. A refresh reads the backing rows of its changed keys to fold
 * the delta into them; for a small view (a global aggregate's one row, a few thousand groups)
 * that read was a Spark job of its own, and the largest part of a 10^6-edge triangle refresh
 * once the IVM^eps steps ran on the driver. A small base table (a dimension such as TPC-H's
 * `nation`) read as a scan likewise made a Spark job of every query that joined it
 * ([[PinnedReader]]).
 *
 * A version's rows never change, so they are held in the driver's state ([[StateRegistry]]) by
 * the table's path, stamped with its Delta id and version, and need no invalidation. They are
 * known without reading the table after spark-ivm's own apply: the rows held at the version it
 * read, less the rows of the changed keys, plus the new rows it wrote (which is what
 * [[RewriteCommit]] commits); or, for a view without keys, just the new rows. Otherwise a small
 * table in a few files is read once when a refresh asks for it: on the driver from its files
 * ([[DriverTableRead]]), or by one job.
 */
object SmallTableRows {

  /** Tables with more rows (`spark.ivm.heldTables.maxRows`), or more bytes, are not held. */
  val MaxBytes: Long = 2L << 20

  /** Nor are tables in more files than this per core, unless an apply's rows make them held. */
  val MaxFilesPerCore = 2
  private case class TableVersionRows(id: String, version: Long, schema: StructType, rows: IndexedSeq[InternalRow],
      maxRows: Long)
      extends Arrangement {
    override def place: StatePlace = StatePlace.Driver
    override lazy val bytes: Long = StateSize.of(rows)

    /**
     * The rows of the commit's version: those held less the rows of the changed keys, plus the
     * new rows; None where they are not all known here or are too many.
     */
    override def committed(c: TableCommit): Option[Arrangement] = {
      def kept = if (c.replacesAll) Some(IndexedSeq.empty)
      else c.removedKeys.map(keys => without(schema, rows, c.keyColumns.map(c.schema.fieldIndex), keys))
      for {
        added <- c.added if c.follows(version) && DriverWrite.sameColumns(schema, c.schema)
        k <- kept
        next = k ++ added.map(_._1) if next.size <= maxRows
      } yield copy(version = c.to, rows = next)
    }
  }

  private def stateId(path: String) = StateId(StateKind.TableRows, path)

  /** The rows held for the table at `path` if they are of table `id` at `version`, with `schema`. */
  private def lookup(path: String, id: String, version: Long, schema: StructType): Option[TableVersionRows] =
    StateRegistry.get[TableVersionRows](stateId(path), TableStamp(id, version).toString)
      .filter(h => DriverWrite.sameColumns(h.schema, schema))

  private def lookup(path: String, snapshot: Snapshot): Option[TableVersionRows] =
    lookup(path, snapshot.metadata.id, snapshot.version, snapshot.metadata.schema)

  /** The table's rows at the snapshot's version if they are held (and holding is on). */
  def at(spark: SparkSession, snapshot: Snapshot): Option[Seq[InternalRow]] =
    if (IvmConf.HeldTablesMaxRows.get(spark) <= 0) None
    else lookup(snapshot.deltaLog.dataPath.toString, snapshot).map(_.rows)

  /**
   * The table's rows at the snapshot's version, in its columns: held, or read now (one job) and
   * held if the table is small; None if it is not.
   */
  def rows(spark: SparkSession, table: TableIdentifier, snapshot: Snapshot): Option[Seq[InternalRow]] = {
    val path = snapshot.deltaLog.dataPath.toString
    val maxRows = IvmConf.HeldTablesMaxRows.get(spark)
    if (maxRows <= 0) return None
    lookup(path, snapshot).map(_.rows).orElse {
      if (!holdable(spark, snapshot)) None
      else {
        // Read here from its few files (no job), or by Delta's reader where that adds to them.
        def scanned = DriverRows.collect(spark, Seq(DeltaSources.snapshot(spark, table, snapshot.version)),
          maxRows.toInt).flatMap(_.headOption)
        DriverTableRead.rows(spark, snapshot, KnownFiles.matching(snapshot.deltaLog, snapshot, Nil))
          .orElse(scanned).filter(_.size <= maxRows).map { rows =>
            put(path, TableVersionRows(snapshot.metadata.id, snapshot.version, snapshot.metadata.schema, rows, maxRows))
            rows
          }
      }
    }
  }

  /**
   * True if the table at the snapshot is small enough to be held: by the file list's statistics
   * (held on the driver: no job), before any row is read; and in a few files: a table in many (a
   * view laid out for lookups by key) is read by a refresh only in the files that may hold its
   * changed keys, less than all of it.
   */
  def holdable(spark: SparkSession, snapshot: Snapshot): Boolean = {
    val maxRows = IvmConf.HeldTablesMaxRows.get(spark)
    maxRows > 0 && IvmConf.KnownFilesEnabled.get(spark) && snapshot.metadata.partitionColumns.isEmpty && {
      val files = KnownFiles.matching(snapshot.deltaLog, snapshot, Nil)
      val records = files.map(_.numLogicalRecords)
      files.size <= MaxFilesPerCore * spark.sparkContext.defaultParallelism && files.map(_.size).sum <= MaxBytes &&
      records.forall(_.isDefined) && records.flatten.sum <= maxRows
    }
  }

  /**
   * The rows at the snapshot's version from those held at version `from` and the net change in
   * between (rows of `changeSchema`: the table's columns by name, then the sign), Post = Pre + D,
   * and held; None if the rows at `from` are not held or cannot be counted ([[plus]]).
   */
  def advanced(spark: SparkSession, snapshot: Snapshot, from: Long, changeSchema: StructType,
      change: Seq[InternalRow]): Option[Seq[InternalRow]] = {
    val path = snapshot.deltaLog.dataPath.toString
    for {
      h <- lookup(path, snapshot.metadata.id, from, snapshot.metadata.schema)
      rows <- plus(h.schema, h.rows, changeSchema, change, 1) if rows.size <= IvmConf.HeldTablesMaxRows.get(spark)
    } yield {
      put(path, h.copy(version = snapshot.version, rows = rows))
      rows
    }
  }

  /**
   * `rows` (of `schema`) with each row of `change` (of `changeSchema`: `schema`'s columns by
   * name, then an integer sign) counted `sign` times its own sign, as a bag; None if a count
   * goes negative (the change is not of these rows) or a column's values do not compare by
   * `equals`.
   */
  def plus(schema: StructType, rows: Seq[InternalRow], changeSchema: StructType, change: Seq[InternalRow],
      sign: Int): Option[IndexedSeq[InternalRow]] = {
    val types = schema.fields.map(_.dataType)
    val at = schema.fieldNames.map(n => changeSchema.fieldNames.indexWhere(_.equalsIgnoreCase(n)))
    if (changeSchema.length != schema.length + 1 || at.contains(-1) || !types.forall(SharedScans.comparable)) None
    else {
      val counts = new RowCounts
      def values(r: InternalRow, pos: Int => Int) = types.indices.map(i => r.get(pos(i), types(i)))
      rows.foreach(r => counts.add(values(r, identity), 1L))
      change.foreach(r => counts.add(values(r, at), sign.toLong * r.getInt(schema.length)))
      counts.rows.map(_.toIndexedSeq)
    }
  }

  /**
   * Records the rows of version `to` of the table at `path` when an apply replaced all of them by
   * `rows` (of `schema`, the table's columns), where no rows were held before.
   */
  def replaced(spark: SparkSession, path: String, id: String, to: Long, schema: StructType,
      rows: Seq[InternalRow]): Unit = {
    val maxRows = IvmConf.HeldTablesMaxRows.get(spark)
    if (maxRows > 0 && rows.size <= maxRows && lookup(path, id, to, schema).isEmpty) {
      put(path, TableVersionRows(id, to, schema, rows.toIndexedSeq, maxRows))
    }
  }

  /** `rows` (of `schema`) less those whose columns at `keyAt` hold one of `keys`. */
  def without(schema: StructType, rows: Seq[InternalRow], keyAt: Seq[Int], keys: Set[InternalRow])
      : IndexedSeq[InternalRow] =
    rows.iterator.filterNot { r =>
      keys(new GenericInternalRow(keyAt.map(i => r.get(i, schema(i).dataType)).toArray))
    }.toIndexedSeq

  private def put(path: String, h: TableVersionRows): Unit =
    StateRegistry.put(stateId(path), TableStamp(h.id, h.version).toString, h, table = Some(path))
}
