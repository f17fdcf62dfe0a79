package io.sparkivm.execution

import io.sparkivm.catalog.{RefreshRecord, ViewCatalog, ViewMetadata}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{KeyProbe, ProbeSettings, ViewMaintenance}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.ivm.SparkInternals
import io.delta.tables.DeltaTable
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.{DataFrame, SparkSession}

/** Rows a commit changed in a backing table. */
case class MergeMetrics(inserted: Long, updated: Long, deleted: Long) {
  def total: Long = inserted + updated + deleted
}

/**
 * Writes to a view's backing table. Every write is one Delta commit that carries the refresh
 * record (commit `userMetadata`) and Delta's idempotent-write transaction (`txnAppId` = the
 * view's id, `txnVersion` = the refresh number), so a refresh number is applied at most once
 * even if two refreshes race or one is retried after a crash.
 */
object BackingTable {
  private val TxnAppId = "spark.databricks.delta.write.txnAppId"
  private val TxnVersion = "spark.databricks.delta.write.txnVersion"
  private val UserMetadata = "spark.databricks.delta.commitInfo.userMetadata"
  private val MaterializeSource = "spark.databricks.delta.merge.materializeSource"

  /** Runs `body` with the commit confs set, restoring the session's previous values after. */
  private def inCommit[T](spark: SparkSession, meta: ViewMetadata, record: RefreshRecord)(body: => T): T = {
    val confs = Map(TxnAppId -> meta.id, TxnVersion -> record.number.toString,
      UserMetadata -> ViewCatalog.renderRecord(record))
    val previous = confs.keys.map(k => k -> spark.conf.getOption(k)).toMap
    confs.foreach { case (k, v) => spark.conf.set(k, v) }
    try body finally previous.foreach {
      case (k, Some(v)) => spark.conf.set(k, v)
      case (k, None) => spark.conf.unset(k)
    }
  }

  def create(spark: SparkSession, meta: ViewMetadata, rows: DataFrame, record: RefreshRecord): Unit =
    inCommit(spark, meta, record) {
      // No change data feed unless a materialized view comes to read this one (ViewAnalysis.pin).
      val props = ViewCatalog.properties(meta)
      props.foldLeft(rows.writeTo(meta.backing.quotedString).using("delta")) {
        case (w, (k, v)) => w.tableProperty(k, v)
      }.create()
    }

  def overwrite(spark: SparkSession, meta: ViewMetadata, rows: DataFrame, record: RefreshRecord): Unit =
    inCommit(spark, meta, record) {
      rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        .saveAsTable(meta.backing.quotedString)
    }

  /** The backing table's current rows, as a plan (the old state a refresh merges into). */
  def current(spark: SparkSession, meta: ViewMetadata): LogicalPlan =
    SparkInternals.analyzed(spark.table(meta.backing.quotedString))

  def sizeInBytes(spark: SparkSession, meta: ViewMetadata): Long =
    DeltaLog.forTable(spark, meta.backing).update().sizeInBytes

  /**
   * Applies a refresh's changed rows (complete new rows of the changed keys, see
   * [[ViewMaintenance.mergeSource]] with `markExisting`) in one commit carrying `record`: by
   * [[RewriteCommit]] when they are held on the driver and `spark.ivm.apply.mode` is `rewrite`,
   * else by MERGE. `rows` is None when no branch has a change (the commit records the versions).
   */
  def apply(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance, rows: Option[LogicalPlan],
      record: RefreshRecord, steps: RefreshSteps, written: () => Unit = () => ()): MergeMetrics =
    inCommit(spark, meta, record) {
      val plan = rows.getOrElse(RefreshSteps.local(SparkInternals.analyzed(
        spark.table(meta.backing.quotedString).limit(0)).output, Nil))
      val existedAt = plan.output.indexWhere(_.name == ViewMaintenance.ExistedColumn)
      (RefreshSteps.localRows(plan), IvmConf.ApplyMode.get(spark)) match {
        case (Some(local), "rewrite") =>
          RewriteCommit.apply(spark, meta, maintenance, DataTypeUtils.fromAttributes(plan.output), local,
            record.number, i => existedAt >= 0 && local(i).getBoolean(existedAt), written)
            .getOrElse(MergeMetrics(0, 0, 0))
        case _ =>
          val source = SparkInternals.dataFrame(spark, Project(plan.output.filterNot(_.name ==
            ViewMaintenance.ExistedColumn), plan))
          // MERGE reads its source twice: compute it once (a local plan already is).
          val once = if (RefreshSteps.localRows(plan).isDefined) source else source.localCheckpoint(eager = true)
          merge(spark, meta, maintenance, once, steps.probe)
      }
    }

  /** Sorted distinct values of a one-column DataFrame, or None if there are more than `max`. */
  def distinctValues(df: DataFrame, max: Int): Option[Seq[Any]] = {
    val rows = df.distinct().orderBy(df.columns.toIndexedSeq.map(c => df.col(c)): _*).limit(max + 1).collect()
    if (rows.length > max) None else Some(rows.map(_.get(0)).toSeq)
  }

  /**
   * MERGE rows from [[materialize]] into the backing table, in one commit: a group whose count
   * reached 0 is deleted (a global aggregate keeps its one row), others are updated or inserted
   * whole. Keys match null-safely.
   */
  private def merge(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance,
      source: DataFrame, probe: ProbeSettings): MergeMetrics = {
    val previous = spark.conf.getOption(MaterializeSource)
    try {
      // Already materialized, and deterministic: Delta need not copy it again.
      spark.conf.set(MaterializeSource, "none")
      runMerge(spark, meta, maintenance, source, probe)
    } finally {
      previous.map(spark.conf.set(MaterializeSource, _)).getOrElse(spark.conf.unset(MaterializeSource))
    }
  }

  private def runMerge(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance,
      source: DataFrame, probe: ProbeSettings): MergeMetrics = {
    val count = ViewMaintenance.CountColumn
    val keyMatch = if (maintenance.keyNames.isEmpty) "true" else maintenance.keyNames.map { k =>
      val q = ViewMaintenance.quote(k)
      s"t.$q <=> s.$q"
    }.mkString(" AND ")
    // Key probing of the target: a condition on the target's key alone lets Delta's MERGE skip
    // the files that hold none of the changed groups. NULL keys need the files with nulls.
    val on = maintenance.keyNames.headOption.filter(_ => probe.enabled)
      .filter(k => KeyProbe.probeable(source.schema(k).dataType))
      .flatMap { k =>
        val col = source.col(ViewMaintenance.quote(k))
        distinctValues(source.select(col).where(col.isNotNull), probe.maxKeys).map { keys =>
          val t = s"t.${ViewMaintenance.quote(k)}"
          val nulls = if (source.where(col.isNull).isEmpty) "" else s" OR $t IS NULL"
          s"($keyMatch) AND (${KeyProbe.sqlFilter(t, source.schema(k).dataType, keys, probe.maxRanges)}$nulls)"
        }
      }.getOrElse(keyMatch)
    val builder = DeltaTable.forName(spark, meta.backing.quotedString).as("t")
      .merge(source.as("s"), on)
    val withDelete = if (maintenance.global) builder
      else builder.whenMatched(s"s.$count = 0").delete()
    val result = withDelete.whenMatched().updateAll()
      .whenNotMatched(if (maintenance.global) "true" else s"s.$count <> 0").insertAll()
      .execute()
    val row = result.collect().headOption
    def metric(name: String): Long = row.flatMap(r =>
      if (r.schema.fieldNames.contains(name)) Option(r.getAs[Any](name)).map(_.toString.toLong)
      else None).getOrElse(0L)
    MergeMetrics(metric("num_inserted_rows"), metric("num_updated_rows"), metric("num_deleted_rows"))
  }
}
