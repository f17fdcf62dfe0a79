package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.{RefreshRecord, ViewCatalog, ViewMetadata}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.delta.util.FileNames
import org.apache.spark.sql.delta.{DeltaHistoryManager, DeltaLog}

/** A base table's commits that a view has not applied yet. */
case class SourceLag(table: String, consumedVersion: Long, currentVersion: Long,
    /** When the first commit not applied was made (epoch ms), if there is one. */
    oldestPendingMs: Option[Long]) {
  def pendingCommits: Long = math.max(0L, currentVersion - consumedVersion)
}

/**
 * How fresh a view is: per base table, the commits not yet applied, and the view's lag, the
 * time since the oldest of them was made (0 when the view is up to date). Read from the Delta
 * logs on the driver: no Spark job.
 */
case class Freshness(sources: Seq[SourceLag], nowMs: Long,
    /** For a view whose filters read the time, the instant (epoch ms) its rows are at. */
    instantMs: Option[Long] = None) {
  def pendingCommits: Long = sources.map(_.pendingCommits).sum

  /** The age of the oldest commit not applied; for a view whose filters read the time, at least
   * the time since the instant its rows are at (time has moved its window since). */
  def lagMs: Long = (sources.flatMap(_.oldestPendingMs) ++ instantMs).map(t => math.max(0L, nowMs - t))
    .maxOption.getOrElse(0L)
}

object Freshness {

  /** The view's freshness; a view kept through helper views counts their base tables' commits too. */
  def of(spark: SparkSession, meta: ViewMetadata, last: RefreshRecord): Freshness = {
    val own = direct(spark, meta, last)
    val helpers = meta.helpers.flatMap { h =>
      try {
        val helper = ViewCatalog.lookup(spark, Seq(h.database.get, h.table))
        of(spark, helper, ViewCatalog.lastRefresh(spark, helper)._1).sources
      } catch { case NonFatal(_) => Nil }
    }
    // A table the view reads directly too counts once, at the version the view consumed.
    own.copy(sources = (own.sources ++ helpers).distinctBy(_.table))
  }

  private def direct(spark: SparkSession, meta: ViewMetadata, last: RefreshRecord): Freshness = {
    val now = System.currentTimeMillis()
    Freshness(meta.sources.map { s =>
        val consumed = last.sourceVersions.getOrElse(s.table, -1L)
        try {
          val log = DeltaLog.forTable(spark, ViewCatalog.qualify(spark, s.table.split('.').toSeq.takeRight(2)))
          val current = log.update().version
          val oldest = if (current <= consumed) None
          else
            try {
              DeltaHistoryManager.getCommitInfoOpt(log.store, FileNames.unsafeDeltaFile(log.logPath, consumed + 1),
                log.newDeltaHadoopConf()).map(_.timestamp.getTime)
            } catch { case NonFatal(_) => None }
          SourceLag(s.table, consumed, current, oldest)
        } catch { case NonFatal(_) => SourceLag(s.table, consumed, -1L, None) }
      }, now, last.instant.map(_ / 1000L))
  }
}
