package io.sparkivm.execution

import io.sparkivm.catalog.{DeltaTables, RefreshHistory, RefreshRecord, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.{DeltaSources, KnownFiles}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{KeyProbe, ViewMaintenance}
import io.sparkivm.state.{StateRegistry, TableCommit}
import org.apache.spark.sql.catalyst.expressions.{
  AttributeReference, CreateStruct, Expression, GenericInternalRow, InSet, IsNull, Literal, Not, Or
}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.TypeUtils
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.delta.actions.{Action, AddFile, FileAction, SetTransaction}
import org.apache.spark.sql.delta.commands.DeltaCommand
import org.apache.spark.sql.delta.commands.cdc.CDCReader
import org.apache.spark.sql.delta.util.DeltaFileOperations
import org.apache.spark.sql.delta.{DeltaConfigs, DeltaLog, DeltaOperations, OptimisticTransaction}
import org.apache.spark.sql.functions.{col, input_file_name, lit, sum, when}
import org.apache.spark.sql.ivm.{DriverRows, SessionInternals, SparkInternals}
import org.apache.spark.sql.types.{DataType, StructType}
import org.apache.spark.sql.{Column, DataFrame, SaveMode, SparkSession}

/**
 * The commits that write a view's rows to its backing table. Each is one Delta commit that
 * carries the refresh record twice, in the commit's `userMetadata` and in the table property
 * `ivm.lastRefresh` (which Delta's checkpoints keep after the commit file is cleaned up), and
 * Delta's idempotent-write transaction (appId = the view's id, version = the refresh number),
 * so a refresh number applies at most once even if two refreshes race or one is retried.
 *
 * An incremental refresh rewrites only the files that hold a changed key, without MERGE, which
 * runs about a dozen Spark jobs for a few hundred rows where this runs one or two. When the changed rows are on the driver their keys are known:
 * data skipping on the key the table is ordered by ([[BackingLayout]]; on the driver,
 * [[KnownFiles]]) finds the candidate files, and when they hold much, one job finds the rows that
 * really hold a key, which are then marked deleted by deletion vectors ([[DeletionVectorApply]])
 * or their files rewritten. When the rows are distributed (more than
 * `spark.ivm.localMaxRows`), the same is done with semi and anti joins on the keys. Once the
 * table holds `spark.ivm.apply.compactMinFiles` small files, the apply rewrites them too
 * ([[smallFiles]]), so that marking and appending keeps the view's files few. When no file is
 * rewritten and the new rows are on the driver, the driver writes them ([[DriverWrite]]: no
 * job), and the new version's rows are held for the next refresh when the table is small
 * ([[SmallTableRows]]). Readers see an ordinary Delta table; where a downstream view turned its
 * change feed on, a commit that rewrites files writes the change as change files ([[changeFiles]]).
 */
object RewriteCommit extends DeltaCommand {

  /** Size of the files written when the rows to write are known to be few. */
  private val TargetFileBytes = 128L << 20

  /** Ranges of changed keys tested against each file's min and max. */
  private val SkippingRanges = 64

  /**
   * Writes `plan`'s rows (complete new rows of the changed keys, count 0 for keys that emptied,
   * columns named as the backing table's, and [[ViewMaintenance.ExistedColumn]] last) in one
   * commit carrying `record`. Returns the metrics, or None if the refresh number was already
   * committed.
   */
  def apply(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance, plan: LogicalPlan,
      record: RefreshRecord, written: () => Unit = () => ()): Option[ApplyMetrics] = {
    val (log, txn) = start(spark, meta)
    if (committed(txn, meta) >= record.number) return None
    // Delta takes a metadata change only before the transaction writes data.
    recordIn(txn, record, Map.empty, None)
    val layout = BackingLayout.of(meta, maintenance)
    val changed = RefreshSteps.rowsOnDriver(plan) match {
      case Some(rows) => new DriverChangedRows(spark, DataTypeUtils.fromAttributes(plan.output), rows, maintenance,
          BackingLayout.skippingKey(layout, maintenance))
      case None => new DistributedChangedRows(spark, SparkInternals.dataFrame(spark, plan), maintenance)
    }
    val operation = DeltaOperations.Write(SaveMode.Append,
      predicate = Some(s"spark-ivm refresh ${record.number} of ${meta.viewName}"))
    // No changed row, held here (the change cancelled out: an UPDATE that set the values its rows
    // had): the commit carries the record alone, and what is held of the table moves to its new
    // version unchanged. (A view without keys rewrites every file, its one row replaced by the
    // changed rows, which here would be none.)
    if (changed.keysOnDriver.exists(_.isEmpty)) {
      written()
      val version = commit(txn, meta, record.number, Nil, operation, replacesAll = false)
      StateRegistry.committed(TableCommit(log.dataPath.toString, txn.metadata.id, txn.readVersion, version,
          replacesAll = false, maintenance.keyNames, Some(Set.empty), txn.metadata.schema, Some(Nil)))
      return Some(changed.metrics)
    }
    // The new rows, where they are held here (projected to the table's columns once).
    val freshOnDriver = changed.freshOnDriver(maintenance.backingColumns)
    // A small table held on the driver at the version read is written whole by the driver.
    val whole = wholeOnDriver(spark, txn, maintenance, changed.keysOnDriver, freshOnDriver)
    // A view without keys (a global aggregate) has one row: every file is a candidate.
    val candidates = candidateFiles(spark, log, txn, if (whole.isDefined) Nil else changed.skipping.toSeq)
    // Candidates worth searching: which of them hold a changed key, and where.
    val search = whole.isEmpty && candidates.nonEmpty && maintenance.keyNames.nonEmpty &&
      candidates.map(_.size).sum > IvmConf.ApplyRewriteWithoutSearchBytes.get(spark)
    // `touched`: files rewritten without the changed keys' rows; `marked`: files whose rows of
    // changed keys are marked deleted by deletion vectors instead (large tables, see
    // DeletionVectorApply), so the write is the new rows and the files they compact.
    val small = smallFiles(spark, log, txn)
    val (found, marked): (Seq[AddFile], Seq[FileAction]) =
      if (!search) (candidates, Nil)
      else {
        val fileMap = generateCandidateFileMap(log.dataPath, candidates)
        def file(path: String) = getTouchedFile(log.dataPath, path, fileMap)
        // The old rows' places, as the delta's read of this version found them; else one job
        // finds them.
        val known = changed.positions(txn.snapshot.version).filter(_.keys.forall { p =>
          scala.util.Try(file(p)).isSuccess
        })
        lazy val holding = changed.holdingKeys(log.createDataFrame(txn.snapshot, candidates))
        if (!(changed.onDriver && IvmConf.ApplyDeletionVectors.get(spark) && DeletionVectorApply.usable(
            txn.snapshot))) {
          (known.map(_.keys.toSeq).getOrElse(holding.select(input_file_name()).distinct().collect().toSeq
                .map(_.getString(0))).map(file), Nil)
        } else {
          val positions = known.getOrElse(holding.select(input_file_name(), col("_metadata.row_index")).collect()
              .toSeq.groupBy(_.getString(0)).map { case (path, rows) => path -> rows.map(_.getLong(1)) })
            .map { case (path, rows) => file(path) -> rows }
          val (rewrite, mark) = positions.partition { case (f, rows) =>
            small.contains(f.path) || DeletionVectorApply.rewrite(f, rows.size)
          }
          val store = DeletionVectorApply.store(log)
          (rewrite.keys.toSeq, mark.toSeq.flatMap { case (f, rows) => DeletionVectorApply.delete(log, store, f, rows) })
        }
      }
    // The small files are rewritten too (compacted into the file written), the changed keys'
    // rows left out as from every rewritten file.
    val foundPaths = found.iterator.map(_.path).toSet
    val touched = found ++ small.values.filter(f => !foundPaths(f.path))
    val columns = maintenance.backingColumns.map(c => col(ViewMaintenance.quote(c)))
    lazy val kept = if (touched.isEmpty) None
    else {
      val scan = log.createDataFrame(txn.snapshot, touched)
      Some((if (maintenance.keyNames.isEmpty) scan.limit(0) else changed.withoutKeys(scan)).select(columns: _*))
    }
    // When no row of a rewritten file is kept (none is rewritten, or a view without keys has
    // its one row replaced), the new rows held here are written by the driver, with no job.
    // A top-k view's marked rows go to files of their own, which its read alone reads.
    val apart = maintenance.markedTop.map(_ => ViewMaintenance.TopColumn)
    def writeOnDriver(schema: StructType, rows: Seq[InternalRow]) =
      DriverWrite.writePlaced(spark, txn, schema, rows, layout.map(_.column), IvmConf.LayoutRowsPerFile.get(spark),
        apart)
    val here = whole.map((writeOnDriver _).tupled).getOrElse {
      if (touched.nonEmpty && maintenance.keyNames.nonEmpty) None
      else freshOnDriver.flatMap((writeOnDriver _).tupled)
    }
    val adds = here.map(_.map(_._1)).getOrElse {
      val fresh = changed.fresh.select(columns: _*)
      val rows = kept.map(_.unionByName(fresh)).getOrElse(fresh)
      // The rewritten files and the new rows in as few files as their size needs: each task of
      // the write adds a file, and small files make every later read and rewrite dearer.
      val files = math.max(1L, touched.map(_.size).sum / TargetFileBytes)
      def write(df: DataFrame) = txn.writeFiles(BackingLayout.sorted(if (changed.onDriver) df.coalesce(files.toInt)
          else df, layout), BackingLayout.deltaOptions(spark))
      (apart.map(c => col(ViewMaintenance.quote(c)) === 1) match {
        // The second read of the rewritten files skips those without marked rows by their footers.
        case Some(marked) => write(rows.where(!marked)) ++
            txn.writeFiles(rows.where(marked).coalesce(1), BackingLayout.deltaOptions(spark))
        case None => write(rows)
      }) ++ changeFiles(spark, txn, touched.nonEmpty,
        changed.holdingKeys(log.createDataFrame(txn.snapshot, touched))
          .select(columns: _*), fresh)
    }
    written()
    val now = System.currentTimeMillis()
    val version = commit(txn, meta, record.number,
      touched.map(_.removeWithTimestamp(now, dataChange = true)) ++ marked ++ adds, operation, replacesAll = false)
    // The state of the table moves to the new version: the rows of the changed keys removed,
    // the new rows added at the places the driver wrote them, if it did.
    val placed = here.map(_.flatMap { case (add, rows) =>
      // Escaped, as Spark's `_metadata.file_path` gives a place, and as `getTouchedFile` takes it.
      val path = DeltaFileOperations.absolutePath(log.dataPath.toString, add.path).toUri.toString
      rows.zipWithIndex.map { case (r, i) => r -> Option(path -> i.toLong) }
    }).orElse(freshOnDriver.map(_._2.map(_ -> None)))
    val path = log.dataPath.toString
    val replacesAll = maintenance.keyNames.isEmpty || whole.isDefined
    val added = whole.map(_._2.map(_ -> Option.empty[(String, Long)])).orElse(placed)
    StateRegistry.committed(TableCommit(path, txn.metadata.id, txn.readVersion, version, replacesAll,
        maintenance.keyNames, changed.keysOnDriver, whole.orElse(freshOnDriver).map(_._1).getOrElse(new StructType()),
        added))
    // Rows that replaced all others are known whether or not the old ones were held.
    for ((schema, rows) <- whole.orElse(freshOnDriver.filter(_ => replacesAll))) {
      SmallTableRows.replaced(spark, path, txn.metadata.id, version, schema, rows)
    }
    Some(changed.metrics)
  }

  /**
   * The commit's change as Delta change files, where the table has a change data feed (a view
   * reads it) and files are rewritten: the changed keys' old rows deleted, their new rows
   * inserted. Without them Delta derives the change from the rewritten files, and a view over
   * this one reads every row of them (whole files for a few changed keys spread over many); with
   * them, the rows that changed. Delta's writer puts rows with a change type in change files.
   */
  private def changeFiles(spark: SparkSession, txn: OptimisticTransaction, rewritten: Boolean, old: => DataFrame,
      fresh: DataFrame): Seq[FileAction] =
    if (!rewritten || !DeltaConfigs.CHANGE_DATA_FEED.fromMetaData(txn.metadata)) Nil
    else {
      val kind = CDCReader.CDC_TYPE_COLUMN_NAME
      val changes = old.withColumn(kind, lit(CDCReader.CDC_TYPE_DELETE_STRING))
        .unionByName(fresh.withColumn(kind, lit(CDCReader.CDC_TYPE_INSERT)))
      txn.writeFiles(changes.coalesce(1), BackingLayout.deltaOptions(spark))
    }

  /**
   * The table's rows after the apply (its columns, with their schema), when they are all known on
   * the driver: the table's rows at the version read are held there ([[SmallTableRows]]), the
   * table is at most `spark.ivm.apply.rewriteWithoutSearchBytes` (so it would be rewritten
   * without a search anyway) and has no change data feed (whose readers would see every row
   * deleted and inserted). They are the held rows less those of the changed keys, plus the new
   * rows; the apply then replaces every file with them, written by the driver with no job, where
   * rewriting the candidate files took a Spark job to read the rows they keep.
   */
  private def wholeOnDriver(spark: SparkSession, txn: OptimisticTransaction, maintenance: ViewMaintenance,
      keysOnDriver: Option[Set[InternalRow]], freshOnDriver: Option[(StructType, Seq[InternalRow])])
      : Option[(StructType, Seq[InternalRow])] =
    if (maintenance.keyNames.isEmpty || DeltaConfigs.CHANGE_DATA_FEED.fromMetaData(txn.metadata)) None
    else for {
      held <- SmallTableRows.at(spark, txn.snapshot)
      if DeltaSources.sizeInBytes(txn.snapshot) <= IvmConf.ApplyRewriteWithoutSearchBytes.get(spark)
      keys <- keysOnDriver
      (schema, fresh) <- freshOnDriver
      if DriverWrite.sameColumns(txn.metadata.schema, schema)
    } yield schema -> (SmallTableRows.without(schema, held, maintenance.keyNames.map(schema.fieldIndex), keys) ++ fresh)

  /**
   * Replaces all rows of the backing table by `rows` (a full refresh), with the schema of `rows`
   * and the view's metadata `properties`, in one commit carrying `record`. Returns false if the
   * refresh number was already committed.
   */
  def overwrite(spark: SparkSession, meta: ViewMetadata, rows: DataFrame, properties: Map[String, String],
      record: RefreshRecord): Boolean = {
    val (log, txn) = start(spark, meta)
    if (txn.txnVersion(meta.id) >= record.number) return false
    StateRegistry.removeWhere(_.table.contains(log.dataPath.toString))
    val old = candidateFiles(spark, log, txn, Nil)
    recordIn(txn, record, properties, Some(SparkInternals.nullable(rows.schema)))
    val adds = txn.writeFiles(rows, BackingLayout.deltaOptions(spark))
    val now = System.currentTimeMillis()
    commit(txn, meta, record.number, old.map(_.removeWithTimestamp(now, dataChange = true)) ++ adds,
      DeltaOperations.Write(SaveMode.Overwrite,
        predicate = Some(s"spark-ivm full refresh ${record.number} of ${meta.viewName}")),
      replacesAll = true)
    true
  }

  /**
   * The files that may hold a key matching `filters` (all files, with none), skipped on the
   * driver from the table's file list when it is known there ([[KnownFiles]]: after spark-ivm's
   * own commits it is, where Delta would rebuild the version's state by two Spark jobs);
   * recorded as the transaction's reads either way, so that Delta's conflict checks are those
   * of `txn.filterFiles`.
   */
  private def candidateFiles(spark: SparkSession, log: DeltaLog, txn: OptimisticTransaction,
      filters: Seq[Expression]): Seq[AddFile] =
    if (!IvmConf.KnownFilesEnabled.get(spark)) txn.filterFiles(filters, keepNumRecords = false)
    else {
      val files = KnownFiles.matching(log, txn.snapshot, filters)
      txn.trackReadPredicates(filters)
      txn.trackFilesRead(files)
      files
    }

  /** Files under this size count as small for compaction (an apply's appended file is). */
  private val SmallFileBytes = 8L << 20

  /**
   * The table's small files, by path, when there are at least `spark.ivm.apply.compactMinFiles`
   * of them (else none). An apply that marks rows deleted appends one small file of new rows, so
   * a view refreshed hourly would gather thousands, and every read of the view opens each. This
   * is Delta's auto compaction (`delta.autoOptimize.autoCompact`) folded into the apply's own
   * commit: no second commit, and the compacted files' changed keys are dropped as they are read.
   * A file the layout filled ([[BackingLayout]]: at least a quarter of
   * `spark.ivm.layout.rowsPerFile` rows) is not small, whatever its bytes: it is kept narrow for
   * lookups and applies by key.
   */
  private def smallFiles(spark: SparkSession, log: DeltaLog, txn: OptimisticTransaction): Map[String, AddFile] = {
    val min = IvmConf.ApplyCompactMinFiles.get(spark)
    val layoutRows = IvmConf.LayoutRowsPerFile.get(spark)
    def isSmall(f: AddFile) = f.size < SmallFileBytes &&
      (layoutRows <= 0 || f.numPhysicalRecords.forall(_ < layoutRows / 4))
    if (min <= 0 || !IvmConf.KnownFilesEnabled.get(spark)) Map.empty
    else {
      val small = KnownFiles.matching(log, txn.snapshot, Nil).filter(isSmall)
      if (small.size < min) Map.empty
      else {
        txn.trackFilesRead(small)
        small.map(f => f.path -> f).toMap
      }
    }
  }

  private def start(spark: SparkSession, meta: ViewMetadata): (DeltaLog, OptimisticTransaction) = {
    val log = DeltaTables.log(spark, meta.backing)
    (log, log.startTransaction(Some(DeltaTables.entry(spark, meta.backing)), None))
  }

  /** The refresh record (and other `properties`, a new `schema`) into the table's metadata. */
  private def recordIn(txn: OptimisticTransaction, record: RefreshRecord, properties: Map[String, String],
      schema: Option[StructType]): Unit = {
    val metadata = txn.metadata
    txn.updateMetadata(metadata.copy(schemaString = schema.map(keepingNotNull(_, metadata.schema).json)
          .getOrElse(metadata.schemaString),
        configuration = RefreshHistory.recorded(metadata.configuration ++ properties +
            (ViewCatalog.RecordProperty -> ViewCatalog.renderRecord(record)), record.entry)))
  }

  /**
   * `schema` with the columns the table declares NOT NULL (a view's column list, see
   * [[io.sparkivm.catalog.ViewColumn]]) still NOT NULL where their type is unchanged: Delta then
   * checks every write of them.
   */
  private def keepingNotNull(schema: StructType, old: StructType): StructType =
    StructType(schema.map { f =>
      if (old.exists(o =>
          o.name == f.name && !o.nullable && DataType.equalsIgnoreNullability(o.dataType, f.dataType))) {
        f.copy(nullable = false)
      } else f
    })

  /**
   * The last refresh number committed, from the record in the table's properties (read from the
   * version's metadata, which Delta holds without rebuilding the version's state); from Delta's
   * transaction identifiers for tables written before the property existed. Two refreshes racing
   * for one number still conflict: each commit changes the metadata.
   */
  private def committed(txn: OptimisticTransaction, meta: ViewMetadata): Long =
    ViewCatalog.recordedNumber(txn.metadata.configuration).getOrElse(txn.txnVersion(meta.id))

  /**
   * Commits `actions` with the view's transaction (view id, refresh number); the new version's
   * files are then held on the driver for the next refresh ([[KnownFiles]]).
   */
  private def commit(txn: OptimisticTransaction, meta: ViewMetadata, number: Long, actions: Seq[Action],
      op: DeltaOperations.Operation, replacesAll: Boolean): Long = {
    val version = txn.commit(actions :+ SetTransaction(meta.id, number, Some(System.currentTimeMillis())), op)
    KnownFiles.committed(txn.deltaLog, txn.metadata.id, txn.readVersion, version, replacesAll)
    version
  }

  /** The changed rows of a refresh, as [[apply]] needs them. */
  private sealed trait ChangedRows {

    /** True if the changed rows are held on the driver (and so are few). */
    def onDriver: Boolean

    /** A filter on one key (the layout's, see [[BackingLayout]]) for Delta's data skipping. */
    def skipping: Option[Expression]

    /** The rows of `scan` whose key is a changed key. */
    def holdingKeys(scan: DataFrame): DataFrame

    /** The rows of `scan` whose key is not a changed key. */
    def withoutKeys(scan: DataFrame): DataFrame

    /** The rows to write: those whose count is not 0 (a global aggregate keeps its one row). */
    def fresh: DataFrame

    /** [[fresh]]'s named columns, held here, with their schema; None if the rows are not here. */
    def freshOnDriver(columns: Seq[String]): Option[(StructType, Seq[InternalRow])]

    /** The changed keys (rows of the key columns), held here; None if the rows are not here. */
    def keysOnDriver: Option[Set[InternalRow]]

    /**
     * The rows of the changed keys in the table at `version`, as row indexes by file path, where
     * the changed rows carry them ([[ViewMaintenance.PositionColumns]]) from a read of that version.
     */
    def positions(version: Long): Option[Map[String, Seq[Long]]] = None
    def metrics: ApplyMetrics
  }

  /** Rows held on the driver: the keys filter as an InSet of key structs (null-safe). */
  private class DriverChangedRows(spark: SparkSession, schema: StructType, rows: Seq[InternalRow],
      maintenance: ViewMaintenance, skippingKey: Option[String])
      extends ChangedRows {
    private val countAt = schema.fieldIndex(ViewMaintenance.CountColumn)
    private val existedAt = schema.fieldIndex(ViewMaintenance.ExistedColumn)
    private def keep(r: InternalRow) = maintenance.global || r.getLong(countAt) != 0L
    private val keyAt = maintenance.keyNames.map(schema.fieldIndex)
    def onDriver: Boolean = true
    private val keySet: Set[InternalRow] = rows.map(r =>
      new GenericInternalRow(keyAt.map(i => r.get(i, schema(i).dataType)).toArray): InternalRow).toSet
    def keysOnDriver: Option[Set[InternalRow]] = Some(keySet)

    override def positions(version: Long): Option[Map[String, Seq[Long]]] =
      ViewMaintenance.PositionColumns.map(n => schema.fieldNames.indexOf(n)) match {
        case Seq(file, row, read) if file >= 0 && row >= 0 && read >= 0 =>
          // Every key that existed has its place, and the places are of the version to change.
          val existed = rows.filter(_.getBoolean(existedAt))
          if (existed.exists(r =>
              r.isNullAt(file) || r.isNullAt(row) || r.isNullAt(read) ||
                r.getLong(read) != version)) None
          else Some(existed.groupBy(_.getUTF8String(file).toString).map { case (p, rs) => p -> rs.map(_.getLong(row)) })
        case _ => None
      }

    def skipping: Option[Expression] = skippingKey.map { key =>
      val at = schema.fieldIndex(key)
      val t = schema(at).dataType
      if (!KeyProbe.probeable(t)) Literal.TrueLiteral
      else {
        val column = AttributeReference(key, t)()
        val values = rows.map(_.get(at, t))
        val sorted = values.filter(_ != null).distinct.sorted(TypeUtils.getInterpretedOrdering(t))
          .map(v => CatalystTypeConverters.convertToScala(v, t))
        val ranges = KeyProbe.filter(column, sorted, SkippingRanges)
        if (values.contains(null)) Or(ranges, IsNull(column)) else ranges
      }
    }

    private def inKeys(df: DataFrame): Expression = {
      val plan = SparkInternals.analyzed(df)
      InSet(CreateStruct(maintenance.keyNames.map(k => plan.output.find(_.name == k).get)), keySet.toSet[Any])
    }
    private def where(df: DataFrame, cond: Expression): DataFrame =
      SparkInternals.dataFrame(spark, Filter(cond, SparkInternals.analyzed(df)))

    def holdingKeys(scan: DataFrame): DataFrame = where(scan, inKeys(scan))
    def withoutKeys(scan: DataFrame): DataFrame = where(scan, Not(inKeys(scan)))
    def fresh: DataFrame = DriverRows.frame(spark, schema, rows.filter(keep))
    def freshOnDriver(columns: Seq[String]): Option[(StructType, Seq[InternalRow])] = {
      val at = columns.map(schema.fieldIndex).toArray
      val types = at.map(schema(_).dataType)
      Some(StructType(at.map(schema(_))) -> rows.filter(keep).map { r =>
        new GenericInternalRow(at.indices.map(i => r.get(at(i), types(i))).toArray): InternalRow
      })
    }

    def metrics: ApplyMetrics = {
      val existed = (r: InternalRow) => r.getBoolean(existedAt)
      ApplyMetrics(rows.count(r => keep(r) && !existed(r)), rows.count(r => keep(r) && existed(r)),
        rows.count(r => !keep(r) && existed(r)))
    }
  }

  /** Rows computed on the executors (already checkpointed): the keys filter as joins. */
  private class DistributedChangedRows(spark: SparkSession, rows: DataFrame, maintenance: ViewMaintenance)
      extends ChangedRows {
    private val count = rows.col(ViewMaintenance.quote(ViewMaintenance.CountColumn))
    private val existed = rows.col(ViewMaintenance.quote(ViewMaintenance.ExistedColumn))
    private val keep: Column = if (maintenance.global) lit(true) else count =!= 0L
    private val keys = rows.select(maintenance.keyNames.map(k => rows.col(ViewMaintenance.quote(k))): _*)

    def onDriver: Boolean = false
    def skipping: Option[Expression] = None

    private def on(scan: DataFrame): Column = maintenance.keyNames.map { k =>
      val q = ViewMaintenance.quote(k)
      scan.col(q) <=> keys.col(q)
    }.reduceOption(_ && _).getOrElse(lit(true)) // a view without keys: its one row is its key's

    def holdingKeys(scan: DataFrame): DataFrame = scan.join(keys, on(scan), "left_semi")
    def withoutKeys(scan: DataFrame): DataFrame = scan.join(keys, on(scan), "left_anti")
    def fresh: DataFrame = rows.where(keep)
    def freshOnDriver(columns: Seq[String]): Option[(StructType, Seq[InternalRow])] = None
    def keysOnDriver: Option[Set[InternalRow]] = None

    def metrics: ApplyMetrics = {
      def n(c: Column) = sum(when(c, 1L).otherwise(0L))
      val r = rows.agg(n(keep && !existed), n(keep && existed), n(!keep && existed)).head()
      def at(i: Int) = if (r.isNullAt(i)) 0L else r.getLong(i)
      ApplyMetrics(at(0), at(1), at(2))
    }
  }
}
