package io.sparkivm.execution

import io.delta.tables.DeltaTable
import io.sparkivm.catalog.{DeltaTables, RefreshHistory, RefreshRecord, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.DeltaSources
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.ViewMaintenance
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.catalyst.expressions.AttributeReference
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.util.QuotingUtils.quoteIfNeeded
import org.apache.spark.sql.catalyst.util.ResolveDefaultColumns
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.Snapshot
import org.apache.spark.sql.functions.{col, lit}
import org.apache.spark.sql.ivm.{SessionInternals, SparkInternals}
import org.apache.spark.sql.types.{BooleanType, MetadataBuilder, StructType}
import org.apache.spark.sql.{DataFrame, SparkSession}

/** Rows a commit changed in a backing table. */
case class ApplyMetrics(inserted: Long, updated: Long, deleted: Long) {
  def total: Long = inserted + updated + deleted
}

/**
 * Writes to a view's backing table. Every write is one Delta commit that carries the refresh
 * record (in the commit's `userMetadata` and in the table property `ivm.lastRefresh`, which
 * survives the log's cleanup) and Delta's idempotent-write transaction (`txnAppId` = the view's
 * id, `txnVersion` = the refresh number), so a refresh number is applied at most once even if two
 * refreshes race or one is retried after a crash.
 */
object BackingTable {
  private val TxnAppId = "spark.databricks.delta.write.txnAppId"
  private val TxnVersion = "spark.databricks.delta.write.txnVersion"
  private val UserMetadata = "spark.databricks.delta.commitInfo.userMetadata"
  private val DeletionVectorsProperty = "delta.enableDeletionVectors"

  /** Runs `body` with the commit confs set, restoring the session's previous values after. */
  private def inCommit[T](spark: SparkSession, meta: ViewMetadata, record: RefreshRecord)(body: => T): T = {
    SessionInternals.withConf(spark,
      Seq(TxnAppId -> Some(meta.id), TxnVersion -> Some(record.number.toString),
        UserMetadata -> Some(ViewCatalog.renderRecord(record))))(body)
  }

  def create(spark: SparkSession, meta: ViewMetadata, rows: DataFrame, record: RefreshRecord,
      maintenance: ViewMaintenance): Unit =
    full(spark, meta, maintenance, rows) { laidOut =>
      // No change data feed unless a materialized view comes to read this one (ViewAnalysis.pin).
      // A view rebuilt by ALTER keeps its history.
      val earlier = if (meta.history.isEmpty) Map.empty[String, String]
      else Map(RefreshHistory.Property -> RefreshHistory.render(meta.history))
      val props = RefreshHistory.recorded(ViewCatalog.properties(meta) ++ earlier +
          (ViewCatalog.RecordProperty -> ViewCatalog.renderRecord(record)), record.entry) ++
        (if (IvmConf.ApplyDeletionVectors.get(spark)) Map(DeletionVectorsProperty -> "true") else Map.empty)
      if (meta.storage.isEmpty && !meta.declared.exists(_.notNull)) {
        inCommit(spark, meta, record) {
          val writer = BackingLayout.writeOptions(spark).foldLeft(
            laidOut.writeTo(meta.backing.quotedString).using("delta")) {
            case (w, (k, v)) => w.option(k, v)
          }
          props.foldLeft(writer) { case (w, (k, v)) => w.tableProperty(k, v) }.create()
        }
      } else {
        // Delta takes neither NOT NULL nor clustering from the rows of a CREATE ... AS: the table
        // is declared empty, and the rows written by a full refresh's commit, carrying the record.
        declare(spark, meta, maintenance, laidOut.schema, props)
        inCommit(spark, meta, record) {
          RewriteCommit.overwrite(spark, meta, laidOut, Map.empty, record)
        }
      }
    }

  /** An empty backing table with the view's declared NOT NULL columns, partitioning and clustering. */
  private def declare(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance, schema: StructType,
      props: Map[String, String]): Unit = {
    def stored(names: Seq[String]) = names.flatMap(maintenance.storedColumn)
    val notNull = stored(meta.declared.filter(_.notNull).map(_.name)).toSet
    val columns = StructType(schema.map(f => f.copy(nullable = !notNull.contains(f.name))))
    val builder = props.foldLeft(
      DeltaTable.create(spark).tableName(meta.backing.copy(catalog = None).quotedString).addColumns(columns)) {
      case (b, (k, v)) => b.property(k, v)
    }
    val storage = meta.storage
    (if (storage.partitionedBy.nonEmpty) builder.partitionedBy(stored(storage.partitionedBy): _*)
     else if (storage.clusteredBy.nonEmpty) builder.clusterBy(stored(storage.clusteredBy): _*)
     else builder).execute()
  }

  /** `write` of a full write's rows laid out in files ([[BackingLayout]], [[TopMarks]]). */
  private def full(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance, rows: DataFrame)(
      write: DataFrame => Unit): Unit = {
    val (laidOut, written) =
      TopMarks.laidOut(spark, maintenance, withoutDefaults(rows), BackingLayout.of(meta, maintenance))
    try write(laidOut)
    finally written()
  }

  private val DefaultKeys = Seq(ResolveDefaultColumns.CURRENT_DEFAULT_COLUMN_METADATA_KEY,
    ResolveDefaultColumns.EXISTS_DEFAULT_COLUMN_METADATA_KEY)

  /**
   * `rows` without the DEFAULT values that columns read as they are carry from a base table's
   * columns: only spark-ivm writes a backing table, and Delta refuses a table with defaults
   * unless it has the allowColumnDefaults feature (WRONG_COLUMN_DEFAULTS_FOR_DELTA_FEATURE_NOT_ENABLED).
   */
  private def withoutDefaults(rows: DataFrame): DataFrame =
    if (!rows.schema.exists(f => DefaultKeys.exists(f.metadata.contains))) rows
    else
      rows.select(rows.schema.map { f =>
        val metadata = DefaultKeys.foldLeft(new MetadataBuilder().withMetadata(f.metadata))(_.remove(_)).build()
        col(quoteIfNeeded(f.name)).as(f.name, metadata)
      }: _*)

  /**
   * Replaces the view's rows (a full refresh) in one commit that also records the base tables'
   * shape as `meta.sources` has it.
   */
  def overwrite(spark: SparkSession, meta: ViewMetadata, rows: DataFrame, record: RefreshRecord,
      maintenance: ViewMaintenance): Unit =
    full(spark, meta, maintenance, rows) { laidOut =>
      inCommit(spark, meta, record) {
        RewriteCommit.overwrite(spark, meta, laidOut,
          Map(ViewCatalog.SourcesProperty -> ViewCatalog.renderSources(meta.sources)), record)
      }
    }

  /**
   * The backing table's current rows, as a plan (the old state a refresh merges into). With
   * `positions`, a read of the table's files also gives each row's place
   * ([[ViewMaintenance.PositionColumns]]: Spark's `_metadata.file_path` and `_metadata.row_index`,
   * and the version read), which the apply then marks deleted without reading the table again.
   */
  def current(spark: SparkSession, meta: ViewMetadata, positions: Boolean = false): LogicalPlan =
    at(spark, meta, latest(spark, meta), positions)

  /**
   * Where a view keeps state in storage beside its rows ([[io.sparkivm.state.StoredKeyCounts]]):
   * a hidden directory of the backing table's, which Delta's VACUUM leaves alone and a DROP
   * removes with the table.
   */
  def stateRoot(spark: SparkSession, backing: TableIdentifier): Path =
    new Path(DeltaTables.log(spark, backing).dataPath, "_ivm_state")

  /** The backing table's latest snapshot. */
  def latest(spark: SparkSession, meta: ViewMetadata): Snapshot = DeltaTables.log(spark, meta.backing).update()

  /** [[current]] at `snapshot`, which a refresh reads once for its delta's reads of the table. */
  def at(spark: SparkSession, meta: ViewMetadata, snapshot: Snapshot, positions: Boolean): LogicalPlan = {
    // A small table's rows held on the driver ([[SmallTableRows]]): no job reads them.
    SmallTableRows.rows(spark, meta.backing, snapshot) match {
      case Some(rows) => RefreshSteps.onDriver(DataTypeUtils.toAttributes(snapshot.metadata.schema), rows)
      case None =>
        val df = DeltaSources.snapshot(spark, meta.backing, snapshot.version)
        val Seq(file, row, version) = ViewMaintenance.PositionColumns
        SparkInternals.analyzed(if (!positions) df
          else df.select(col("*"), col("_metadata.file_path").as(file),
            col("_metadata.row_index").as(row), lit(snapshot.version).as(version)))
    }
  }

  /**
   * The old rows of a refresh's changed keys (rows of the key columns) where the table is kept
   * in memory by key ([[KeyedViewRows]]): the columns the fold reads, with their places.
   * `made` is called if the table was read now to keep them.
   */
  def oldOfKeys(spark: SparkSession, meta: ViewMetadata, snapshot: Snapshot, maintenance: ViewMaintenance,
      keys: Seq[InternalRow], refresh: String, made: () => Unit): Option[LogicalPlan] =
    KeyedViewRows.rows(spark, meta, snapshot, maintenance.foldColumns, maintenance.keyNames.size, keys,
      refresh, made).map { case (output, rows) => RefreshSteps.onDriver(output, rows) }

  def sizeInBytes(spark: SparkSession, meta: ViewMetadata): Long =
    DeltaSources.sizeInBytes(latest(spark, meta))

  /**
   * Applies a refresh's changed rows (complete new rows of the changed keys, see
   * [[ViewMaintenance.mergeSource]] with `markExisting`) by [[RewriteCommit]], in one commit
   * carrying `record`. `rows` is None when no branch has a change (the commit records the
   * versions).
   */
  def apply(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance, rows: Option[LogicalPlan],
      record: RefreshRecord, written: () => Unit = () => ()): ApplyMetrics =
    inCommit(spark, meta, record) {
      val plan = rows.getOrElse {
        val backing = SparkInternals.analyzed(spark.table(meta.backing.quotedString).limit(0)).output
        RefreshSteps.onDriver(backing :+ AttributeReference(ViewMaintenance.ExistedColumn, BooleanType)(), Nil)
      }
      RewriteCommit.apply(spark, meta, maintenance, plan, record, written).getOrElse(ApplyMetrics(0, 0, 0))
    }

  /** Sorted distinct values of a one-column DataFrame, or None if there are more than `max`. */
  def distinctValues(df: DataFrame, max: Int): Option[Seq[Any]] = {
    val rows = df.distinct().orderBy(df.columns.toIndexedSeq.map(c => df.col(c)): _*).limit(max + 1).collect()
    if (rows.length > max) None else Some(rows.map(_.get(0)).toSeq)
  }
}
