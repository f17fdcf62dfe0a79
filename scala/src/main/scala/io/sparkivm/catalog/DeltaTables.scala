package io.sparkivm.catalog

import java.util.concurrent.ConcurrentHashMap
import java.util.{Collections, WeakHashMap}

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.analysis.{NoSuchDatabaseException, NoSuchTableException}
import org.apache.spark.sql.catalyst.catalog.CatalogTable
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.ivm.SessionInternals

/**
 * Delta logs of catalog tables, with each table's catalog entry fetched once per refresh.
 *
 * Finding a table's Delta log by name (`DeltaLog.forTable(spark, id)`) asks the catalog for the
 * table's entry every time: one metastore call, about 10 ms with an embedded metastore once
 * warm, more in a new application or over the network to a remote one. A refresh looks up the
 * same few tables (its sources, the backing table) from many places, about 40 times. A session
 * in [[scoped]] (one per refresh) keeps each entry from its first lookup until [[release]]; any
 * other session asks each time, as DDL between two statements may move or replace a table. A
 * refresh that drops or creates a table itself calls [[forget]].
 */
object DeltaTables {
  private val entries =
    Collections.synchronizedMap(new WeakHashMap[SparkSession, ConcurrentHashMap[TableIdentifier, CatalogTable]]())

  /** Keeps catalog entries looked up through `spark` until [[release]]. */
  def scoped(spark: SparkSession): SparkSession = {
    entries.put(spark, new ConcurrentHashMap[TableIdentifier, CatalogTable]())
    spark
  }

  def release(spark: SparkSession): Unit = entries.remove(spark)

  /** Drops a kept entry: the table was dropped, created or replaced. */
  def forget(spark: SparkSession, id: TableIdentifier): Unit =
    Option(entries.get(spark)).foreach(_.remove(qualified(spark, id)))

  /** The table's catalog entry. */
  def entry(spark: SparkSession, id: TableIdentifier): CatalogTable = {
    val catalog = SessionInternals.catalog(spark)
    Option(entries.get(spark)) match {
      case Some(kept) => kept.computeIfAbsent(qualified(spark, id), q => catalog.getTableMetadata(q))
      case None => catalog.getTableMetadata(id)
    }
  }

  /** The table's catalog entry, or None if the table (or its database) does not exist. */
  def entryIfExists(spark: SparkSession, id: TableIdentifier): Option[CatalogTable] =
    try Some(entry(spark, id))
    catch { case NonFatal(e) if isMissing(e) => None }

  /** Whether `e` is the catalog's answer for a table or database that does not exist. */
  def isMissing(e: Throwable): Boolean = e match {
    case _: NoSuchTableException | _: NoSuchDatabaseException => true
    case _ => false
  }

  /** The Delta log of the table of a catalog entry (no lookup of its own). */
  def log(spark: SparkSession, entry: CatalogTable): DeltaLog = DeltaLog.forTable(spark, entry)

  /** The table's Delta log (as `DeltaLog.forTable(spark, id)`, from the kept entry if any). */
  def log(spark: SparkSession, id: TableIdentifier): DeltaLog =
    if (entries.containsKey(spark) && !isPath(id)) DeltaLog.forTable(spark, entry(spark, id))
    else DeltaLog.forTable(spark, id)

  /** delta.`/path/to/table`: no catalog entry to keep. */
  private def isPath(id: TableIdentifier): Boolean =
    id.database.exists(_.equalsIgnoreCase("delta")) && new Path(id.table).isAbsolute

  private def qualified(spark: SparkSession, id: TableIdentifier): TableIdentifier =
    SessionInternals.catalog(spark).qualifyIdentifier(id)
}
