package io.sparkivm.changes

import scala.util.control.NonFatal

import io.sparkivm.catalog.{DeltaTables, SourceInfo}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.{IvmErrors, IvmException}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.delta.Snapshot
import org.apache.spark.sql.delta.ivm.DeltaInternals
import org.apache.spark.sql.functions._
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.{Column, DataFrame, SparkSession}

/**
 * A Delta base table as pinned for one refresh: its identity and the version read. Its size is
 * read only if asked for (key probing): without a checksum file, Delta computes it by a job.
 */
case class PinnedSource(table: TableIdentifier, tableId: String, version: Long, schema: StructType)(
    size: () => Long = () => Long.MaxValue) {
  def name: String = table.unquotedString
  lazy val sizeInBytes: Long = size()
  def info: SourceInfo =
    SourceInfo(name, tableId, schema.fields.toSeq.map(f => f.name -> f.dataType.catalogString))
}

/**
 * Reads Delta base tables in the Z-relation model (docs/architecture.md, "The model"): a snapshot at a
 * version has multiplicity 1 per row; the change between two versions is the change data feed
 * summed per full row, +1 for insert and update_postimage, -1 for delete and
 * update_preimage, zeros dropped. That is the *net* change Svingos et al. 2023, section 1.4 asks for
 * (a row inserted then deleted in the interval cancels out).
 */
object DeltaSources extends Logging {
  val Multiplicity = "__ivm_m"
  private val ChangeType = "_change_type"
  private val CdfProperty = "delta.enableChangeDataFeed"

  /**
   * The current version of a Delta table, after checking it records its changes. A refresh gives
   * `consumed`, the view and the table as it consumed it: another table of the name (dropped and
   * created again) is IVM_SOURCE_CHANGED before anything else is asked of it. `at`: the version
   * to pin instead of the latest (one another refresh of the same instant read).
   */
  def pin(spark: SparkSession, table: TableIdentifier, requireChangeFeed: Boolean,
      autoEnable: Boolean, consumed: Option[(String, SourceInfo)] = None, at: Option[Long] = None): PinnedSource = {
    val log = DeltaTables.log(spark, table)
    var snapshot = log.update()
    at.filter(_ < snapshot.version).foreach(v => snapshot = log.getSnapshotAt(v))
    consumed.foreach { case (view, before) =>
      if (before.tableId != snapshot.metadata.id) {
        throw IvmErrors.sourceChanged(view, before.table, "it was dropped and created again")
      }
    }
    val cdf = snapshot.metadata.configuration.get(CdfProperty).exists(_.equalsIgnoreCase("true"))
    if (requireChangeFeed && !cdf) {
      if (!autoEnable) throw IvmErrors.changeFeedDisabled(table.quotedString, consumed.map(_._1))
      logWarning(s"spark-ivm: enabling the change data feed of ${table.quotedString} so that " +
        "views over it can be refreshed incrementally")
      spark.sql(s"ALTER TABLE ${table.quotedString} SET TBLPROPERTIES ($CdfProperty = true)")
      DeltaTables.forget(spark, table)
      snapshot = DeltaTables.log(spark, table).update()
    }
    val pinned = snapshot
    PinnedSource(table, pinned.metadata.id, pinned.version, pinned.schema)(() => sizeInBytes(pinned))
  }

  /**
   * The bytes of a table version's files without rebuilding its state where that can be
   * avoided: from the version's checksum file (Delta writes one per commit), else from the files
   * held on the driver ([[KnownFiles]]), else from Delta's state (a Spark job). Delta's own
   * `sizeInBytes` always takes the last way.
   */
  def sizeInBytes(snapshot: Snapshot): Long =
    DeltaInternals.sizeInBytesIfKnown(snapshot)
      .orElse(KnownFiles.held(snapshot).map(_.sizeInBytes))
      .getOrElse(snapshot.sizeInBytes)

  /** The Delta table id and current version of a table, from its log (no Spark job). */
  def current(spark: SparkSession, table: TableIdentifier): (String, Long) = {
    val snapshot = DeltaTables.log(spark, table).update()
    snapshot.metadata.id -> snapshot.version
  }

  /** The table as of a version (from its files as held on the driver, see [[KnownFiles]]). */
  def snapshot(spark: SparkSession, table: TableIdentifier, version: Long): DataFrame =
    (if (IvmConf.KnownFilesEnabled.get(spark)) KnownFiles.read(spark, table, version) else None)
      .getOrElse(spark.read.format("delta").option("versionAsOf", version).table(table.quotedString))

  /** The name of the sign column of [[signedChanges]]. */
  val Sign = "__ivm_sign"

  /**
   * The change data feed of versions (fromVersion, toVersion]: the table's columns and [[Sign]],
   * +1 for `insert` and `update_postimage`, -1 for `delete` and `update_preimage`. Delta checks
   * that the feed covers the versions as the read is built (here) and when it runs.
   */
  def signedChanges(spark: SparkSession, table: TableIdentifier, fromVersion: Long, toVersion: Long): DataFrame = {
    val feed = DeltaInternals.changeFeed(spark, table, fromVersion + 1, toVersion)
    val data = feed.columns.toSeq.filterNot(c => c.startsWith("_commit_") || c == ChangeType)
    feed.select(data.map(quoted) :+
        when(col(ChangeType).isin("insert", "update_postimage"), lit(1)).otherwise(lit(-1)).as(Sign): _*)
  }

  /**
   * The net change of a table between two versions (exclusive, inclusive], one row per unit of
   * multiplicity: a row inserted twice appears twice with `__ivm_m = 1`, so that every later
   * rule can treat `__ivm_m` as a sign.
   */
  def netChanges(spark: SparkSession, table: TableIdentifier, fromVersion: Long,
      toVersion: Long, viewName: String): DataFrame = {
    // Feed errors, when the read is built (here) and when it runs (PinnedReader.changeCounts),
    // are both reported as IVM_CHANGES_UNAVAILABLE.
    try {
      val signed = signedChanges(spark, table, fromVersion, toVersion)
      val dataCols = signed.columns.toSeq.filterNot(_ == Sign)
      val net = "__ivm_net"
      signed.groupBy(dataCols.map(quoted): _*)
        .agg(sum(col(Sign)).as(net))
        .where(col(net) =!= 0)
        .select(dataCols.map(quoted) :+
            explode(array_repeat(signum(col(net)).cast("int"), abs(col(net)).cast("int"))).as(Multiplicity): _*)
    } catch {
      case NonFatal(e) => throw IvmErrors.changeFeedUnavailable(viewName, table.quotedString, e)
    }
  }

  /** Checks a pinned table against what the view consumed last time. */
  def checkUnchangedShape(view: String, before: SourceInfo, now: PinnedSource): Unit = {
    if (before.tableId != now.tableId) {
      throw IvmErrors.sourceChanged(view, before.table, "it was dropped and created again")
    }
    val current = now.info.columns.map { case (n, t) => n.toLowerCase -> t }.toMap
    before.columns.foreach { case (n, t) =>
      current.get(n.toLowerCase) match {
        case None => throw IvmErrors.sourceChanged(view, before.table, s"column $n was dropped")
        case Some(t2) if t2 != t =>
          throw IvmErrors.sourceChanged(view, before.table, s"column $n changed type from $t to $t2")
        case _ =>
      }
    }
  }

  def quoted(name: String): Column = col("`" + name.replace("`", "``") + "`")

  def requireDelta(table: TableIdentifier, provider: Option[String]): Unit = {
    if (!provider.exists(_.equalsIgnoreCase("delta"))) {
      throw IvmErrors.notDelta(table.quotedString, provider.getOrElse("non-Delta"))
    }
  }

  def wrap(view: String, table: String)(body: => PinnedSource): PinnedSource =
    try body
    catch {
      case e: IvmException => throw e
      case NonFatal(e) => throw IvmErrors.sourceMissing(view, table, e)
    }
}
