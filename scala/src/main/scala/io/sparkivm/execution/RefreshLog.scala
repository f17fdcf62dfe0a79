package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.{HistoryEntry, ViewCatalog}
import org.apache.spark.sql.SparkSession

/** SHOW REFRESHES: the durable history of each view (committed refreshes) with the failures this
 * process saw ([[RefreshFailures]]), newest first; of all views, helper views left out. */
object RefreshLog {
  def list(spark: SparkSession, name: Option[Seq[String]], limit: Option[Int]): Seq[(String, HistoryEntry)] = {
    val views = name match {
      case Some(n) => Seq(ViewCatalog.lookup(spark, n))
      case None =>
        ViewCatalog.list(spark, spark.catalog.currentDatabase).flatMap { case (id, _) =>
          // A helper's refreshes are its view's (listed in their plan notes).
          try Some(ViewCatalog.lookup(spark, Seq(id.database.get, id.table))).filter(_.helperOf.isEmpty)
          catch { case NonFatal(_) => None }
        }
    }
    val all = views.flatMap { m =>
      (m.history ++ RefreshFailures.of(m.view.unquotedString)).map(m.viewName -> _)
    }.sortBy { case (_, e) => (-e.startMs, -e.number) }
    limit.map(all.take).getOrElse(all)
  }
}
