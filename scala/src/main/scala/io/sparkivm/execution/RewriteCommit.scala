package io.sparkivm.execution

import io.sparkivm.catalog.ViewMetadata
import io.sparkivm.planner.{KeyProbe, ViewMaintenance}
import org.apache.spark.sql.{DataFrame, SaveMode, SparkSession}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, CreateStruct, Expression,
  GenericInternalRow, InSet, IsNull, Literal, Not, Or}
import org.apache.spark.sql.catalyst.plans.logical.Filter
import org.apache.spark.sql.delta.{DeltaLog, DeltaOperations}
import org.apache.spark.sql.delta.actions.{Action, AddFile, SetTransaction}
import org.apache.spark.sql.delta.commands.DeltaCommand
import org.apache.spark.sql.functions.{col, input_file_name}
import org.apache.spark.sql.ivm.{LocalRows, SessionInternals, SparkInternals}
import org.apache.spark.sql.catalyst.util.TypeUtils
import org.apache.spark.sql.types.StructType

/**
 * Applies a refresh's changed view rows to the backing table in one Delta commit, without
 * MERGE: the new rows of the changed keys are on the driver, so the keys are known. The files
 * that may hold a changed key (Delta's data skipping on the first key, then, when that leaves
 * much to rewrite, one job that finds the files that really do) are rewritten without the
 * changed keys' rows, together with the new rows, in one write job; the commit removes the old
 * files, adds the new ones and carries the view's transaction (txnAppId = view id, txnVersion =
 * refresh number), so a refresh number applies at most once. Measured against MERGE in
 * docs/benchmarks.md: a MERGE of a few hundred rows runs about 12 Spark jobs, this one or two.
 * Readers see an ordinary Delta table; the change feed (if a downstream view turned it on) shows
 * the rewritten files' rows as deleted and inserted, which nets to the real change.
 */
object RewriteCommit extends DeltaCommand {
  /** Candidate files up to this size are rewritten without first finding which hold a key. */
  private val RewriteWithoutSearchBytes = 8L << 20
  /** Ranges of changed keys tested against each file's min and max. */
  private val SkippingRanges = 64

  /**
   * Writes `rows` (complete new rows of the changed keys, count 0 for keys that emptied;
   * columns named as the backing table's) in one commit. Returns the metrics, or None if the
   * refresh number was already committed.
   */
  def apply(spark: SparkSession, meta: ViewMetadata, maintenance: ViewMaintenance, schema: StructType,
      rows: Seq[InternalRow], number: Long, existed: Int => Boolean,
      written: () => Unit = () => ()): Option[MergeMetrics] = {
    val log = DeltaLog.forTable(spark, meta.backing)
    val txn = log.startTransaction(Some(SessionInternals.catalog(spark).getTableMetadata(meta.backing)), None)
    if (txn.txnVersion(meta.id) >= number) return None
    val countAt = schema.fieldIndex(ViewMaintenance.CountColumn)
    val keep: InternalRow => Boolean = r => maintenance.global || r.getLong(countAt) != 0L
    val keyNames = maintenance.keyNames
    val candidates = keyNames.headOption match {
      case None => txn.filterFiles()
      case Some(first) => txn.filterFiles(Seq(skipping(schema, rows, first)), keepNumRecords = false)
    }
    // Rows of the changed keys, as a filter (null-safe: struct values compare NULL = NULL).
    val keyAt = keyNames.map(schema.fieldIndex)
    val keySet: Set[Any] = rows.map(r => new GenericInternalRow(keyAt.map(i => r.get(i, schema(i).dataType)).toArray)
      : InternalRow).toSet
    def changedKeys(df: DataFrame): Expression = {
      val plan = SparkInternals.analyzed(df)
      val attrs = keyNames.map(k => plan.output.find(_.name == k).get)
      InSet(CreateStruct(attrs), keySet)
    }
    def where(df: DataFrame, cond: DataFrame => Expression): DataFrame =
      SparkInternals.dataFrame(spark, Filter(cond(df), SparkInternals.analyzed(df)))
    val touched: Seq[AddFile] =
      if (candidates.isEmpty || keyNames.isEmpty || candidates.map(_.size).sum <= RewriteWithoutSearchBytes) candidates
      else {
        val scan = log.createDataFrame(txn.snapshot, candidates)
        val fileMap = generateCandidateFileMap(log.dataPath, candidates)
        where(scan, changedKeys).select(input_file_name()).distinct()
          .collect().toSeq.map(r => getTouchedFile(log.dataPath, r.getString(0), fileMap))
      }
    val columns = maintenance.backingColumns.map(c => col(ViewMaintenance.quote(c)))
    val fresh = LocalRows.frame(spark, schema, rows.filter(keep)).select(columns: _*)
    val kept = if (touched.isEmpty) None else {
      val scan = log.createDataFrame(txn.snapshot, touched)
      Some((if (keyNames.isEmpty) scan.limit(0) else where(scan, df => Not(changedKeys(df)))).select(columns: _*))
    }
    val data = kept.map(_.unionByName(fresh)).getOrElse(fresh)
    val adds = txn.writeFiles(data)
    written()
    val now = System.currentTimeMillis()
    val actions: Seq[Action] = touched.map(_.removeWithTimestamp(now, dataChange = true)) ++ adds :+
      SetTransaction(meta.id, number, Some(now))
    txn.commit(actions, DeltaOperations.Write(SaveMode.Append,
      predicate = Some(s"spark-ivm refresh $number of ${meta.viewName}")))
    val inserted = rows.indices.count(i => keep(rows(i)) && !existed(i))
    val updated = rows.indices.count(i => keep(rows(i)) && existed(i))
    val deleted = rows.indices.count(i => !keep(rows(i)) && existed(i))
    Some(MergeMetrics(inserted, updated, deleted))
  }

  /** A filter on the first key for Delta's data skipping: the changed values, as ranges. */
  private def skipping(schema: StructType, rows: Seq[InternalRow], key: String): Expression = {
    val at = schema.fieldIndex(key)
    val t = schema(at).dataType
    if (!KeyProbe.probeable(t)) return Literal.TrueLiteral
    val column = AttributeReference(key, t)()
    val values = rows.map(_.get(at, t))
    val sorted = values.filter(_ != null).distinct.sorted(TypeUtils.getInterpretedOrdering(t))
      .map(v => CatalystTypeConverters.convertToScala(v, t))
    val ranges = KeyProbe.filter(column, sorted, SkippingRanges)
    if (values.contains(null)) Or(ranges, IsNull(column)) else ranges
  }
}
