package io.sparkivm.epsilon

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.{DeltaTables, EpsilonState, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.DeltaSources
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import io.sparkivm.execution.{DriverWrite, PartitionedState, StateConflictException}
import io.sparkivm.state.{Arrangement, StateId, StateKind, StatePlace, StateRegistry, StateSize}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.util.FileNames
import org.apache.spark.sql.delta.{DeltaHistoryManager, DeltaLog, DeltaOperations}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.ivm.{PartitionedRows, SessionInternals}
import org.apache.spark.sql.types.DataType
import org.apache.spark.sql.{DataFrame, Row, SaveMode, SparkSession}

/**
 * The Delta tables holding a triangle view's IVM^eps state (heavy keys and auxiliary views,
 * [[EpsilonState.tables]]). They cannot commit in the view's own Delta commit, so:
 *  - every write is tagged with the refresh attempt (commit `userMetadata`);
 *  - the view's commit records the versions written, and readers read those versions only;
 *  - a refresh first restores any table that has versions past the recorded one (left by a
 *    refresh killed before its view commit), and before committing checks that every version
 *    it built on top of is its own (a concurrent refresh of the same view makes it retry).
 */
class TriangleStateTables(spark: SparkSession, meta: ViewMetadata, attempt: String) {
  val names: Seq[TableIdentifier] = EpsilonState.tables(meta.backing)
  private val tag = s"""{"ivmState":"$attempt"}"""

  private def log(i: Int): DeltaLog = DeltaTables.log(spark, names(i))
  def version(i: Int): Long = log(i).update().version

  private val ids = mutable.Map[Int, String]()

  /** Table i's Delta id (kept by appends, overwrites and RESTORE; new if it is re-created). */
  private def id(i: Int): String = ids.synchronized(ids.getOrElseUpdate(i, log(i).update().metadata.id))

  /** This instance of the view's state: the Delta id of its first state table (new when re-created). */
  def instance: String = id(0)

  private val resident = IvmConf.EpsilonResidentState.get(spark)
  private def stamp(i: Int, version: Long): String = s"${id(i)}@$version"

  private val reads = scala.collection.mutable.Map[(Int, Long), DataFrame]()

  /** Table i as of a recorded version (resolved once per refresh: it loads a Delta snapshot). */
  def read(i: Int, version: Long): DataFrame = reads.synchronized(reads.getOrElseUpdate((i, version),
      DeltaSources.snapshot(spark, names(i), version)))

  /**
   * The heavy keys in table i as of a version, read once per JVM: a version of a Delta table
   * never changes, so the keys stay resident between refreshes (IVM^eps keeps its partitions
   * in memory, as the paper's hash maps are; the Delta table is their checkpoint).
   */
  def heavyKeys(i: Int, version: Long, read: => Set[Any]): Set[Any] = {
    // By version: a refresh reads a table at its Pre and its Post.
    val state = StateId(StateKind.HeavyKeys, s"${id(i)}@$version")
    StateRegistry.get[TriangleStateTables.HeavyKeys](state, "").map(_.keys).getOrElse {
      val keys = read
      StateRegistry.put(state, "", TriangleStateTables.HeavyKeys(keys))
      keys
    }
  }

  /**
   * Brings every table back to the content of the version a committed refresh recorded, and
   * returns each table's version now: the base on which this refresh's writes must follow.
   */
  def restore(state: EpsilonState): Seq[Long] = names.indices.map { i =>
    val recorded = state.versions(i)
    val current =
      try version(i)
      catch {
        case NonFatal(e) => throw IvmErrors.backingAltered(meta.viewName,
            s"its IVM^eps state table ${names(i).quotedString} cannot be read (${e.getMessage}); " +
              "run REFRESH MATERIALIZED VIEW ... FULL to rebuild it")
      }
    if (current > recorded) {
      spark.sql(s"RESTORE TABLE ${names(i).quotedString} TO VERSION AS OF $recorded")
      version(i)
    } else if (current < recorded) {
      throw IvmErrors.backingAltered(meta.viewName,
        s"its IVM^eps state table " +
          s"${names(i).quotedString} is at version $current, older than the recorded $recorded")
    } else current
  }

  /**
   * Auxiliary view i as of a version, the rows whose first column (its probe key) is one of
   * `keys` and whose columns named in `where` hold one of the values given, or more rows:
   * resident when kept ([[PartitionedState]]), else read from its table and kept.
   */
  def aux(i: Int, version: Long, rows: Long, keyColumn: String, keys: Option[Seq[Any]],
      where: Seq[(String, Seq[Any])] = Nil): WeightedDelta =
    if (!resident) WeightedDelta.distributed(read(3 + i, version))
    else {
      val table = PartitionedState.tableName(names(3 + i))
      val entry = PartitionedState.get(spark, table, stamp(3 + i, version)).getOrElse {
        val parts = PartitionedState.partitions(spark, rows / PartitionedState.RowsPerPartition + 1)
        val built = PartitionedState.Entry(stamp(3 + i, version),
          PartitionedState.rows(read(3 + i, version), keyColumn, parts), Vector.empty)
        PartitionedState.put(table, built)
        built
      }
      val at = where.map { case (c, v) => entry.base.schema.fieldIndex(c) -> v }
      keys.flatMap(entry.rowsOnDriver(_, at)).map(WeightedDelta.internal(spark, entry.base.schema, _))
        .getOrElse(WeightedDelta.distributed(entry.frame(spark, keys, at)))
    }

  /** Replaces table i's rows, laid out in files by `sortKey`; returns the new version. */
  def overwrite(i: Int, rows: DataFrame, sortKey: String, rowsPerFile: Long = 200000L): Long = {
    val files = math.max(1L, rows.sparkSession.sparkContext.defaultParallelism.toLong)
    val laid = rows.repartitionByRange(files.toInt, col(sortKey)).sortWithinPartitions(sortKey)
    laid.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
      .option("maxRecordsPerFile", rowsPerFile).option("userMetadata", tag).saveAsTable(names(i).quotedString)
    PartitionedState.remove(PartitionedState.tableName(names(i)))
    version(i)
  }

  /**
   * Appends rows to table i in one Delta transaction of its own; returns the new version. Not
   * `saveAsTable`: a write command analyzes, resolves the table in the catalog and reads the
   * new version back, which cost more than the write of a refresh's few rows. Rows held here
   * are written by the driver ([[DriverWrite]]), with no Spark job.
   */
  def append(i: Int, rows: WeightedDelta, sortKey: String): Long = {
    val txn = log(i).startTransaction(Some(DeltaTables.entry(spark, names(i))), None)
    val table = txn.metadata.schema
    // Rows held here whose columns have the table's types are written here, without a job.
    val here =
      if (!rows.isOnDriver || !table.fields.forall(f =>
          rows.schema.fieldNames.contains(f.name) &&
            DataType.equalsIgnoreNullability(rows.schema(f.name).dataType, f.dataType))) None
      else {
        val at = table.fieldNames.map(rows.schema.fieldIndex)
        val toInternal = CatalystTypeConverters.createToCatalystConverter(table)
        DriverWrite.write(spark, txn, table,
          rows.rows.map(r =>
            toInternal(Row.fromSeq(at.map(r.get).toSeq)).asInstanceOf[InternalRow]), Some(sortKey))
      }
    val adds = here.getOrElse {
      // The table's columns, in its order and types (a transaction writes rows as they are).
      val columns = table.fields.map(f => col(f.name).cast(f.dataType).as(f.name))
      txn.writeFiles(rows.frame.select(columns.toIndexedSeq: _*).sortWithinPartitions(sortKey))
    }
    txn.commit(adds, DeltaOperations.Write(SaveMode.Append, userMetadata = Some(tag)))
  }

  /**
   * Appends a refresh's change to auxiliary view i, which was at version `from`; the resident
   * rows follow when the append is the next version and the change is held on the driver.
   */
  def appendAux(i: Int, from: Long, change: WeightedDelta, sortKey: String): Long = {
    val table = PartitionedState.tableName(names(3 + i))
    val to = append(3 + i, change, sortKey)
    val followed = for {
      entry <- PartitionedState.get(spark, table, stamp(3 + i, from)) if change.isOnDriver && to == from + 1
      schema = entry.base.schema
      next <- entry.plus(stamp(3 + i, to),
        PartitionedRows.toInternal(schema,
          change.rows.map(r => Row.fromSeq(schema.fieldNames.toSeq.map(n => r.getAs[Any](n))))))
    } yield next
    followed match {
      case Some(entry) => PartitionedState.put(table, entry)
      case None => PartitionedState.remove(table)
    }
    to
  }

  /** Fails as a commit conflict if a version after `from` up to `to` is not this attempt's. */
  def checkOwn(i: Int, from: Long, to: Long): Unit = {
    val l = log(i)
    val conf = l.newDeltaHadoopConf()
    (from + 1 to to).foreach { v =>
      val info = DeltaHistoryManager.getCommitInfoOpt(l.store, FileNames.unsafeDeltaFile(l.logPath, v), conf)
      if (!info.exists(_.userMetadata.contains(tag))) {
        throw new StateConflictException(s"IVM^eps state table " +
          s"${names(i).quotedString} version $v was written by another refresh")
      }
    }
  }

  def drop(): Unit = names.foreach { n =>
    PartitionedState.remove(PartitionedState.tableName(n))
    spark.sql(s"DROP TABLE IF EXISTS ${n.quotedString}")
    DeltaTables.forget(spark, n)
  }
}

object TriangleStateTables {

  /** The heavy keys of a state table at one version (held by its Delta id, stamped by the version). */
  private final case class HeavyKeys(keys: Set[Any]) extends Arrangement {
    override def place: StatePlace = StatePlace.Driver
    override lazy val bytes: Long = StateSize.of(keys)
  }

  /** Drops the state tables of a view's backing table, if there are any. */
  def dropFor(spark: SparkSession, backing: TableIdentifier): Unit = {
    PartitionedState.removeView(backing)
    EpsilonState.tables(backing).foreach { n =>
      PartitionedState.remove(PartitionedState.tableName(n))
      if (ViewCatalog.exists(spark, n)) spark.sql(s"DROP TABLE IF EXISTS ${n.quotedString}")
      DeltaTables.forget(spark, n)
    }
  }
}
