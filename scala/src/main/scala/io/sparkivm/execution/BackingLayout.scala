package io.sparkivm.execution

import java.util.Locale

import io.sparkivm.catalog.ViewMetadata
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.ViewMaintenance
import org.apache.spark.sql.catalyst.expressions.RowOrdering
import org.apache.spark.sql.delta.DeltaOptions
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * How a backing table's rows lie in its files: ordered by one column, the view's first
 * `ACCESS BY` input if it has one, else its first key, in files of at most
 * `spark.ivm.layout.rowsPerFile` rows. Each file then holds a narrow range of that column, so
 * Delta's file statistics let a lookup by the input (`mv.lookup`, a filter on the column) and a
 * refresh's apply (which finds the files holding a changed key by the same statistics) read the
 * few files that may match instead of all of them.
 *
 * A full write (CREATE, a full refresh) sorts each write task's rows, so a value lies in at most
 * one file per task. A view with `ACCESS BY` is range-partitioned by its input first (Spark
 * samples the rows for the ranges: one more pass over them), so a value lies in one file or a few
 * neighbours: lookups are what such a view is for. An incremental apply sorts the rows it writes
 * (the changed keys' rows and those of the files it rewrites), so the files it adds stay narrow.
 */
case class BackingLayout(column: String, ranged: Boolean, partitions: Seq[String] = Nil) {
  private def by = col(ViewMaintenance.quote(column))

  /** The order within a write task: by partition first (Spark's file writer wants it), then the column. */
  private def order = partitions.map(p => col(ViewMaintenance.quote(p))) :+ by

  /** True if `rows` has the column and Spark can order it (not a MAP or VARIANT, say). */
  private def orders(rows: DataFrame): Boolean =
    rows.schema.find(_.name == column).exists(f => RowOrdering.isOrderable(f.dataType))

  /** The rows of a full write, laid out by the column. */
  def full(rows: DataFrame): DataFrame =
    if (!orders(rows)) rows
    else if (ranged) rows.repartitionByRange(by).sortWithinPartitions(order: _*)
    else rows.sortWithinPartitions(order: _*)

  /** The rows of an incremental write, sorted within their partitions by the column. */
  def sorted(rows: DataFrame): DataFrame = if (orders(rows)) rows.sortWithinPartitions(order: _*) else rows
}

object BackingLayout {

  /**
   * The layout of a view's backing table, if the view has any column to order by: its first
   * ACCESS BY input, else its first CLUSTER BY column (the user's choice for reads; Delta's
   * OPTIMIZE clusters further), else its first key; within the view's partitions, if it has any.
   */
  def of(meta: ViewMetadata, maintenance: ViewMaintenance): Option[BackingLayout] = {
    val columns = maintenance.backingColumns
    def find(name: String) = columns.find(_.toLowerCase(Locale.ROOT) == name.toLowerCase(Locale.ROOT))
    val partitions = meta.storage.partitionedBy.flatMap(maintenance.storedColumn)
    meta.accessBy.headOption.flatMap(find).map(BackingLayout(_, ranged = true, partitions))
      .orElse(meta.storage.clusteredBy.headOption.flatMap(maintenance.storedColumn)
          .map(BackingLayout(_, ranged = false, partitions)))
      .orElse(maintenance.keyNames.headOption.map(BackingLayout(_, ranged = false, partitions)))
  }

  /**
   * The key an apply skips files by: the layout's column when it is one of the view's keys (the
   * files are narrow in it), else the first key.
   */
  def skippingKey(layout: Option[BackingLayout], maintenance: ViewMaintenance): Option[String] =
    layout.map(_.column).filter(maintenance.keyNames.contains).orElse(maintenance.keyNames.headOption)

  def full(rows: DataFrame, layout: Option[BackingLayout]): DataFrame = layout.map(_.full(rows)).getOrElse(rows)

  def sorted(rows: DataFrame, layout: Option[BackingLayout]): DataFrame =
    layout.map(_.sorted(rows)).getOrElse(rows)

  /** Write options bounding the rows per file (none when the bound is off). */
  def writeOptions(spark: SparkSession): Map[String, String] = {
    val rows = IvmConf.LayoutRowsPerFile.get(spark)
    if (rows <= 0) Map.empty else Map(DeltaOptions.MAX_RECORDS_PER_FILE -> rows.toString)
  }

  def deltaOptions(spark: SparkSession): Option[DeltaOptions] =
    Some(new DeltaOptions(writeOptions(spark), SQLConf.get))
}
