package io.sparkivm.policy

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.{DeltaTables, ViewCatalog, ViewMetadata}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier

/**
 * Materialized views that read materialized views. A view over a view reads the other's backing
 * table (the catalog view resolves to it), whose `ivm.view` property names the view it stores;
 * so the graph follows from each view's recorded sources. It has no cycle: a view can only read
 * views that existed when it was created.
 */
object ViewGraph {

  /** The view a backing table stores, if the table is one. */
  def viewOf(spark: SparkSession, table: String): Option[TableIdentifier] = {
    val parts = table.split('.').toSeq.takeRight(2)
    if (!parts.last.startsWith(ViewCatalog.BackingPrefix)) None
    else
      try {
        val id = ViewCatalog.qualify(spark, parts)
        if (!ViewCatalog.exists(spark, id)) None
        else DeltaTables.log(spark, id).update().metadata.configuration.get(ViewCatalog.ViewProperty)
          .map(v => ViewCatalog.qualify(spark, v.split('.').toSeq.takeRight(2)))
      } catch { case NonFatal(_) => None }
  }

  /** The views `meta` reads directly. */
  def reads(spark: SparkSession, meta: ViewMetadata): Seq[TableIdentifier] =
    meta.sources.flatMap(s => viewOf(spark, s.table)).distinct

  /**
   * Every view `meta` reads, directly or through other views, each after the views it reads
   * (the order a cascading refresh runs them in). Views that cannot be looked up are left out:
   * refreshing the view that reads them reports why.
   */
  def upstream(spark: SparkSession, meta: ViewMetadata): Seq[Seq[String]] = {
    val order = mutable.LinkedHashSet[String]()
    def visit(m: ViewMetadata, seen: Set[String]): Unit = reads(spark, m).foreach { id =>
      val key = id.unquotedString
      if (!seen.contains(key) && !order.contains(key)) {
        try visit(ViewCatalog.lookup(spark, Seq(id.database.get, id.table)), seen + key)
        catch {
          case NonFatal(_) =>
        }
        order += key
      }
    }
    visit(meta, Set(meta.view.unquotedString))
    order.toSeq.map(_.split('.').toSeq.takeRight(2))
  }

  /** Views in an order where each comes after the views it reads (Kahn's algorithm; stable). */
  def ordered(spark: SparkSession, views: Seq[ViewMetadata]): Seq[ViewMetadata] = {
    val byKey = views.map(v => v.view.unquotedString -> v).toMap
    val deps = views.map(v =>
      v.view.unquotedString ->
        reads(spark, v).map(_.unquotedString).filter(byKey.contains).toSet).toMap
    val done = mutable.LinkedHashSet[String]()
    var left = views.map(_.view.unquotedString)
    while (left.nonEmpty) {
      val (ready, waiting) = left.partition(k => deps(k).forall(done.contains))
      // No cycle can exist; if the catalog were inconsistent, take the rest as they come.
      val next = if (ready.nonEmpty) ready else waiting
      next.foreach(done += _)
      left = if (ready.nonEmpty) waiting else Nil
    }
    done.toSeq.map(byKey)
  }
}
