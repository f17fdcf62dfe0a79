package io.sparkivm.changes

import scala.util.control.NonFatal

import io.sparkivm.catalog.DeltaTables
import io.sparkivm.errors.IvmErrors
import io.sparkivm.state.{Arrangement, StateId, StateKind, StatePlace, StateRegistry}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.util.CharVarcharUtils
import org.apache.spark.sql.delta.actions.{Action, AddFile, FileAction, RemoveFile}
import org.apache.spark.sql.delta.files.TahoeBatchFileIndex
import org.apache.spark.sql.delta.{DeltaLog, Snapshot}
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * The files of Delta table versions, held on the driver, so that a refresh reads a table version
 * without the Spark jobs Delta runs to list and skip its files.
 *
 * Delta plans every scan with a new filter by a job over the version's file list (and rebuilds that
 * list from the log by another job the first time a version is read), tens to hundreds of
 * milliseconds each, several per refresh. Here a version's list is computed once per session:
 * from a list already known for an earlier version of the same table plus the commits in between
 * (read from the log on the driver: no Spark job), or by one job when none is known. A version's
 * files never change, so an entry is never stale; entries are held in the driver's state
 * ([[StateRegistry]]) for the few latest versions of each table read (a refresh's Pre is the
 * last refresh's Post). A scan built by [[read]] skips
 * files on the driver by the statistics in the log ([[FileSkipping]]), and is otherwise Delta's own
 * scan of those files (deletion vectors and column mapping included).
 */
object KnownFiles extends Logging {

  /** The files of one table version, by Delta's identity of a file (path and deletion vector). */
  final class Version(val tableId: String, val version: Long, val files: Map[(String, String), KnownFile])
      extends Arrangement {

    /** The bytes of the version's files (summed once: every query planned over it asks). */
    lazy val sizeInBytes: Long = files.valuesIterator.map(_.add.size).sum
    override def place: StatePlace = StatePlace.Driver

    /** A file's action, its path twice and its statistics (as a string and parsed). */
    override lazy val bytes: Long = files.valuesIterator.map { f =>
      FileBytes + 4L * (f.add.path.length + Option(f.add.stats).map(_.length).getOrElse(0))
    }.sum
  }

  /** A held file's objects, less its strings. */
  private val FileBytes = 600L

  /** A table's identity here: its log's location and Delta's table id (a copied directory keeps the id). */
  private def idOf(log: DeltaLog, tableId: String): String = s"${log.logPath}#$tableId"
  private def idOf(snapshot: Snapshot): String = idOf(snapshot.deltaLog, snapshot.metadata.id)

  private val VersionsPerTable = 3

  private def stateId(tableId: String, version: Long) = StateId(StateKind.FileLists, s"$tableId@$version")
  private def get(tableId: String, version: Long): Option[Version] =
    StateRegistry.get[Version](stateId(tableId, version), "")
  private def ofTable(tableId: String): Seq[Version] =
    StateRegistry.find[Version](StateKind.FileLists)(_.name.startsWith(s"$tableId@")).map(_._3)
      .filter(_.tableId == tableId)

  private def key(f: FileAction): (String, String) =
    (f.pathAsUri.toString, Option(f.deletionVector).map(_.uniqueId).orNull)

  /** The files of `snapshot`'s version of the table of `log`. */
  def of(log: DeltaLog, snapshot: Snapshot): Version = {
    val (hit, earlier) = lookup(snapshot)
    hit.getOrElse {
      // Pre first, where a refresh asked for that and nothing earlier is held (listFirst).
      val pre = if (earlier.isDefined) None else listFirstHint(log, snapshot).map(v => of(log, this.snapshot(log, v)))
      val files = earlier.orElse(pre).flatMap(advance(log, _, snapshot.version))
        .orElse(fromFirstCommit(log, snapshot))
        .orElse(fromCheckpoint(log, snapshot))
        .getOrElse(snapshot.allFiles.collect().iterator.map(a => key(a) -> new KnownFile(a)).toMap)
      remember(new Version(idOf(snapshot), snapshot.version, files))
    }
  }

  /** Per table log, the Pre version a refresh asked to list first ([[listFirst]]). */
  private val firstVersions = new java.util.concurrent.ConcurrentHashMap[String, java.lang.Long]()

  /**
   * Asks that the files of version `from` of `table` (a refresh's Pre) be listed first when the
   * refresh lists any version up to `to` (its Post) and none is held, so that the refresh
   * lists each table once: Post's files are then Pre's advanced by the commits in between, on
   * the driver, where reading Post first would leave Pre to a second listing (Delta's state
   * reconstruction: a Spark job, the largest part of a refresh in a new application). Only
   * when at most [[ReplayMaxCommits]] commits lie in between (replaying more on the driver may
   * cost more than a second listing). Nothing is listed here: a table the refresh reads no file
   * of (its counts and change answer it) is not listed at all.
   */
  def listFirst(spark: SparkSession, table: TableIdentifier, from: Long, to: Long): Unit =
    if (from < to && to - from <= ReplayMaxCommits)
      try firstVersions.put(DeltaTables.log(spark, table).logPath.toString, from)
      catch {
        case NonFatal(e) => logInfo(s"spark-ivm: listing version $from of $table first: ${e.getMessage}")
      }

  /**
   * The version [[listFirst]] asked to list before `snapshot`'s (taken: asked once), if it lies
   * at most [[ReplayMaxCommits]] commits before it and the table has a checkpoint (before one,
   * any version is replayed from the first commit on the driver, with no job).
   */
  private def listFirstHint(log: DeltaLog, snapshot: Snapshot): Option[Long] =
    Option(firstVersions.remove(log.logPath.toString)).map(_.longValue).filter { from =>
      val young = snapshot.logSegment.checkpointProvider.version < 0 && snapshot.version < ReplayMaxCommits
      from < snapshot.version && snapshot.version - from <= ReplayMaxCommits && !young
    }

  /**
   * The files of `snapshot`'s version if they cost no Spark job: held, or advanced on the driver
   * from a held earlier version at most [[ReplayMaxCommits]] commits before it, or replayed from
   * a young table's first commit (a view just created, a table just written). Not from a
   * checkpoint: a query of any table would read and hold its checkpoint on the driver, though
   * a large table's scan is then left to Delta (`spark.ivm.knownFiles.queryMaxBytes`).
   */
  def withoutJob(log: DeltaLog, snapshot: Snapshot): Option[Version] = {
    val (hit, earlier) = lookup(snapshot)
    hit.orElse(earlier.filter(snapshot.version - _.version <= ReplayMaxCommits)
        .flatMap(advance(log, _, snapshot.version))
        .orElse(fromFirstCommit(log, snapshot))
        .map(files => remember(new Version(idOf(snapshot), snapshot.version, files))))
  }

  /** The held version of `snapshot` (now the most recently used), and the latest held before it. */
  private def lookup(snapshot: Snapshot): (Option[Version], Option[Version]) = {
    val id = idOf(snapshot)
    val hit = get(id, snapshot.version)
    (hit, if (hit.isDefined) None else ofTable(id).filter(_.version < snapshot.version).maxByOption(_.version))
  }

  /** Commits replayed on the driver, at most, to list a version no earlier version is known for. */
  private val ReplayMaxCommits = 32

  /**
   * The files of a young table's version (no checkpoint yet, few commits: a table created by the
   * session, the tables of tests) by replaying its commits from the first, on the driver, which
   * costs a few file reads against the two Spark jobs of rebuilding the version's state.
   */
  private def fromFirstCommit(log: DeltaLog, snapshot: Snapshot): Option[Map[(String, String), KnownFile]] = {
    val segment = snapshot.logSegment
    if (segment.checkpointProvider.version >= 0 || snapshot.version >= ReplayMaxCommits) None
    else advance(log, new Version(idOf(snapshot), -1L, Map.empty), snapshot.version)
  }

  /**
   * The files of a version at most [[ReplayMaxCommits]] commits after a classic checkpoint: the
   * checkpoint's adds read on the driver ([[CheckpointFiles]]), advanced by the commits after it.
   */
  private def fromCheckpoint(log: DeltaLog, snapshot: Snapshot): Option[Map[(String, String), KnownFile]] =
    if (snapshot.version - snapshot.logSegment.checkpointProvider.version > ReplayMaxCommits) None
    else CheckpointFiles.adds(SparkSession.active, snapshot).flatMap { case (version, adds) =>
      val files = adds.iterator.map(a => key(a) -> new KnownFile(a)).toMap
      advance(log, new Version(idOf(snapshot), version, files), snapshot.version)
    }

  /** The files of `snapshot`'s version if held now (no work is done to get them). */
  def held(snapshot: Snapshot): Option[Version] = get(idOf(snapshot), snapshot.version)

  /** The files at `to`, from those at `from.version` and the commits in between, if all are in the log. */
  private def advance(log: DeltaLog, from: Version, to: Long): Option[Map[(String, String), KnownFile]] =
    try {
      var files = from.files
      var at = from.version
      log.getChanges(from.version + 1).takeWhile(_._1 <= to).foreach { case (v, actions) =>
        if (v != at + 1) throw IvmErrors.internal(s"version ${at + 1} is missing from the log")
        files = applied(files, actions)
        at = v
      }
      if (at == to) Some(files) else None
    } catch {
      case NonFatal(e) =>
        logInfo(s"spark-ivm: listing files of version $to from the snapshot: ${e.getMessage}")
        None
    }

  /** `files` after one commit's `actions` (its removes first: a commit may re-add a path). */
  private def applied(files: Map[(String, String), KnownFile], actions: Seq[Action]): Map[(String, String), KnownFile] = {
    val removed = actions.foldLeft(files) {
      case (fs, r: RemoveFile) => fs - key(r)
      case (fs, _) => fs
    }
    actions.foldLeft(removed) {
      case (fs, a: AddFile) => fs + (key(a) -> new KnownFile(a))
      case (fs, _) => fs
    }
  }

  /**
   * Records the files of a version this process just committed on top of `readVersion` (when
   * `version` directly follows it), so that the next read of the table, by the next refresh,
   * needs no listing: all of them when the commit replaced every file, else the held files of
   * `readVersion` advanced by the commit. The commit's actions are read back from the log (one
   * small file): Delta fills in fields when it commits (row ids under row tracking).
   */
  def committed(log: DeltaLog, deltaTableId: String, readVersion: Long, version: Long, replacesAll: Boolean): Unit =
    if (version == readVersion + 1) {
      val tableId = idOf(log, deltaTableId)
      val from = if (replacesAll) Some(new Version(tableId, readVersion, Map.empty))
      else get(tableId, readVersion)
      from.flatMap(advance(log, _, version)).foreach(files => remember(new Version(tableId, version, files)))
    }

  private def remember(v: Version): Version = {
    StateRegistry.put(stateId(v.tableId, v.version), "", v)
    ofTable(v.tableId).sortBy(-_.version).drop(VersionsPerTable)
      .foreach(o => StateRegistry.remove(stateId(o.tableId, o.version), o))
    v
  }

  /** Forgets every version (tests). */
  def clear(): Unit = StateRegistry.removeWhere(_.id.kind == StateKind.FileLists)

  /** The snapshot of a table at a version: Delta's current one when it is that version. */
  def snapshot(log: DeltaLog, version: Long): Snapshot = {
    val current = log.unsafeVolatileSnapshot
    if (current.version == version) current else log.getSnapshotAt(version)
  }

  /**
   * The table at `version`, read from its known files, or None when its columns need more than a
   * scan of its files (CHAR and VARCHAR columns, which a table read pads or checks).
   */
  def read(spark: SparkSession, table: TableIdentifier, version: Long): Option[DataFrame] = {
    val log = DeltaTables.log(spark, table)
    val snap = snapshot(log, version)
    if (CharVarcharUtils.hasCharVarchar(snap.metadata.schema)) return None
    val files = of(log, snap).files.values.toSeq
    val index = new SkippingFileIndex(spark, log, snap, files)
    val df = log.createDataFrame(snap, Nil)
    Some(SparkInternals.dataFrame(spark,
        SparkInternals.analyzed(df).transform {
          case l @ LogicalRelation(r: HadoopFsRelation, _, _, _, _) =>
            l.copy(relation = r.copy(location = index)(r.sparkSession))
        }))
  }

  /** The files of `snapshot` that may hold rows matching `filters` (driver-side skipping). */
  def matching(log: DeltaLog, snapshot: Snapshot, filters: Seq[Expression]): Seq[AddFile] = {
    val skipping = FileSkipping.of(snapshot.metadata.schema)
    of(log, snapshot).files.values.iterator.filter(f => skipping.mayMatch(f, filters)).map(_.add).toSeq
  }
}

/**
 * Delta's scan of a given list of files, with the files that cannot match a scan's data filters
 * skipped on the driver ([[FileSkipping]]) before Delta's own partition pruning.
 */
class SkippingFileIndex(spark: SparkSession, log: DeltaLog, snapshot: Snapshot, files: Seq[KnownFile])
    extends TahoeBatchFileIndex(spark, "read", files.map(_.add), log, log.dataPath, snapshot) {

  override def matchingFiles(partitionFilters: Seq[Expression], dataFilters: Seq[Expression]): Seq[AddFile] = {
    val skipping = FileSkipping.of(snapshot.metadata.schema)
    val kept = files.iterator.filter(f => skipping.mayMatch(f, dataFilters)).map(_.add).toSeq
    if (partitionFilters.isEmpty) kept
    else new TahoeBatchFileIndex(spark, "read", kept, log, log.dataPath, snapshot)
      .matchingFiles(partitionFilters, dataFilters)
  }

  // Equal where they list the same files of the same table version, so that two reads of a table
  // at one version are one plan to Spark's canonical comparison (a refresh runs such a step once).
  override def equals(other: Any): Boolean = other match {
    case o: SkippingFileIndex =>
      (this eq o) || (o.deltaLog.dataPath == deltaLog.dataPath && o.snapshot.version == snapshot.version &&
        o.addFiles == addFiles)
    case _ => false
  }

  override def hashCode(): Int = (deltaLog.dataPath, snapshot.version, addFiles.size).hashCode()
}
