package io.sparkivm.state

import java.nio.charset.StandardCharsets
import java.security.MessageDigest
import java.util.UUID
import java.util.concurrent.{ConcurrentLinkedQueue, Executors, ThreadFactory}

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.ivm.{DriverParquet, Parallel, ReadMetrics, SparkInternals}
import org.apache.spark.sql.types.{DataType, LongType, StructField, StructType}
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * A table's rows counted per key, kept in storage beside a view's backing table, so that the
 * first refresh of a new application reads the counts of its changed keys (Wang & Yi 2020's
 * reference counts `I(R, Rc)`, section 4) instead of scanning the table: a scheduled job
 * refreshes once per application, and the counts kept in memory ([[StateRegistry]]) are gone by
 * the next one.
 *
 * Counts are a function of one table version, so files named by the versions they are at are
 * right for as long as they exist, whatever became of the refresh that wrote them; nothing needs
 * a commit protocol of its own, and Delta's log cleanup cannot make them wrong. A directory holds:
 *  - `base-<v>/`: every key's count at table version v, written by a Spark job (at CREATE, or
 *    between refreshes);
 *  - `change-<a>-<b>.parquet`: the change of the counts from version a to version b, written on
 *    the driver by the refresh that consumed those versions (the change it holds anyway).
 * The counts at version t are a base at some v <= t plus a chain of changes from v to t; a
 * version no chain reaches has no counts here (the refresh scans, as without them). A chain is
 * kept short without a job: the change that would make it longer than [[MaxChain]] is written
 * summed with the chain's changes, as one change from the base (their keys only: small beside
 * the base while fewer than [[MaxMergedRows]]), so an application that refreshes once, and never
 * has time between refreshes to write a new base, reads a few files. Files are written under a
 * hidden name and renamed into place, so a reader sees whole files only; a reader that fails (a
 * file removed meanwhile) answers nothing.
 */
object StoredKeyCounts extends Logging {
  private val Base = "base-(\\d+)".r
  private val Change = "change-(\\d+)-(\\d+)\\.parquet".r

  /** Changes in a chain past which the next change is written summed with them (reads stay few files). */
  val MaxChain = 8

  /** Rows of a summed change past which changes are chained again (driver memory), until a new base. */
  val MaxMergedRows = 500000L

  /** The directory of the counts `definition` of the table with Delta id `tableId`, under `root`. */
  def dirOf(root: Path, tableId: String, definition: String): Path = {
    val digest = MessageDigest.getInstance("SHA-256").digest(s"$tableId|$definition".getBytes(StandardCharsets.UTF_8))
    new Path(root, "keycounts/" + digest.take(12).map("%02x".format(_)).mkString)
  }

  private def schemaOf(keyType: DataType) = StructType(Seq(StructField("key", keyType), StructField("count", LongType)))

  private final case class Files(bases: Map[Long, Path], changes: Seq[(Long, Long, Path)])

  private def list(fs: FileSystem, dir: Path): Files =
    if (!fs.exists(dir)) Files(Map.empty, Nil)
    else {
      val paths = fs.listStatus(dir).map(_.getPath).toSeq
      Files(
        paths.flatMap(p =>
          p.getName match {
            case Base(v) => Some(v.toLong -> p)
            case _ => None
          }).toMap,
        paths.flatMap(p =>
          p.getName match {
            case Change(a, b) => Some((a.toLong, b.toLong, p))
            case _ => None
          }))
    }

  /**
   * The base and changes whose sums are the counts at `version`: the newest base with a chain of
   * changes to `version` (the fewest changes, breadth first); None if none reaches it.
   */
  private def chainTo(files: Files, version: Long): Option[(Path, Seq[Path])] =
    chainFrom(files, version).map { case (_, base, changes) => base -> changes.map(_._3) }

  /** [[chainTo]] with the base's version and each change's versions. */
  private def chainFrom(files: Files, version: Long): Option[(Long, Path, Seq[(Long, Long, Path)])] = {
    val from = files.changes.groupBy(_._1)
    files.bases.toSeq.filter(_._1 <= version).sortBy(-_._1).iterator.flatMap { case (v, base) =>
      val via = mutable.Map[Long, Seq[(Long, Long, Path)]](v -> Nil)
      var frontier = Seq(v)
      while (frontier.nonEmpty && !via.contains(version)) {
        frontier = frontier.flatMap { a =>
          from.getOrElse(a, Nil).collect {
            case c @ (_, b, _) if b <= version && !via.contains(b) =>
              via(b) = via(a) :+ c
              b
          }
        }
      }
      via.get(version).map(changes => (v, base, changes))
    }.nextOption()
  }

  private def fsOf(spark: SparkSession, dir: Path): (FileSystem, Configuration) = {
    val conf = spark.sessionState.newHadoopConf()
    (dir.getFileSystem(conf), conf)
  }

  /** The length of the chain of changes that reaches `version`, if one does. */
  def chainLength(spark: SparkSession, dir: Path, version: Long): Option[Int] =
    try {
      val (fs, _) = fsOf(spark, dir)
      chainTo(list(fs, dir), version).map(_._2.size)
    } catch { case NonFatal(_) => None }

  /**
   * The counts at `version` of `keys` (Catalyst values of `keyType`; keys without rows left
   * out), read on the driver from the files of a chain; None if no chain reaches the version or
   * a file cannot be read.
   */
  def at(spark: SparkSession, dir: Path, version: Long, keyType: DataType, keys: Set[Any]): Option[Map[Any, Long]] =
    try {
      val (fs, conf) = fsOf(spark, dir)
      chainTo(list(fs, dir), version).map { case (base, changes) =>
        val files = fs.listStatus(base).filter(s =>
          s.isFile && !s.getPath.getName.startsWith("_") &&
            !s.getPath.getName.startsWith(".")).map(s => s.getPath -> s.getLen).toSeq ++
          changes.map(p => p -> fs.getFileStatus(p).getLen)
        val schema = schemaOf(keyType)
        val read = DriverParquet.reader(spark, schema, conf)
        // Per file: the sums of the wanted keys, and the rows read.
        val perFile = Parallel.run(spark,
          files.map { case (path, bytes) =>
            () => {
              val sums = mutable.Map[Any, Long]()
              var rows = 0L
              read(path, bytes).foreach { r =>
                rows += 1
                if (!r.isNullAt(0)) {
                  val k = r.get(0, keyType)
                  if (keys.contains(k)) {
                    val kept = InternalRow.copyValue(k)
                    sums(kept) = sums.getOrElse(kept, 0L) + r.getLong(1)
                  }
                }
              }
              (sums.toMap, rows)
            }
          })
        ReadMetrics.readOnDriver(spark.sparkContext, perFile.map(_._2).sum)
        perFile.flatMap(_._1).groupMapReduce(_._1)(_._2)(_ + _).filter(_._2 != 0)
      }
    } catch {
      case NonFatal(e) =>
        logInfo(s"spark-ivm: stored key counts in $dir not read (${e.getMessage})")
        None
    }

  /** Writes of changes, one at a time beside the refresh that asked for them. */
  private val writer = Executors.newSingleThreadExecutor(new ThreadFactory {
    override def newThread(r: Runnable): Thread = {
      val t = new Thread(r, "spark-ivm-stored-counts")
      t.setDaemon(true)
      t
    }
  })
  private val pending = new ConcurrentLinkedQueue[java.util.concurrent.Future[_]]()

  /**
   * Records the change of the counts from version `from` to `to` (Catalyst keys), if a chain
   * reaches `from`: nothing is written that no reader could use. Written on the driver, on a
   * thread of its own while the refresh goes on; [[awaitWrites]] waits for it.
   */
  def addChange(spark: SparkSession, dir: Path, from: Long, to: Long, keyType: DataType,
      change: Map[Any, Long]): Unit =
    beside(addChangeNow(spark, dir, from, to, keyType, change))

  /** Runs `work` on the writer's thread; [[awaitWrites]] waits for it. */
  private def beside(work: => Unit): Unit =
    pending.add(writer.submit(new Runnable {
      override def run(): Unit = work
    }))

  /**
   * Waits for the changes being written: a refresh ends with its writes done, so that an
   * application that stops after it (a scheduled job) leaves the chain whole.
   */
  def awaitWrites(): Unit =
    Iterator.continually(pending.poll()).takeWhile(_ != null).foreach { f =>
      try f.get()
      catch { case NonFatal(_) => }
    }

  private def addChangeNow(spark: SparkSession, dir: Path, from: Long, to: Long, keyType: DataType,
      change: Map[Any, Long]): Unit =
    try {
      val (fs, conf) = fsOf(spark, dir)
      val files = list(fs, dir)
      for ((baseVersion, _, chain) <- chainFrom(files, from)
        if to > from && !files.changes.exists(c => c._1 == from && c._2 == to)) {
        val schema = schemaOf(keyType)
        // Past MaxChain, the chain's changes and this one summed, as one change from the base.
        val merged = if (chain.size < MaxChain) None
        else {
          val read = DriverParquet.reader(spark, schema, conf)
          val sums = mutable.Map[Any, Long]()
          chain.foreach { case (_, _, p) =>
            read(p, fs.getFileStatus(p).getLen).foreach { r =>
              val k = if (r.isNullAt(0)) null else InternalRow.copyValue(r.get(0, keyType))
              sums(k) = sums.getOrElse(k, 0L) + r.getLong(1)
            }
          }
          change.foreach { case (k, n) => sums(k) = sums.getOrElse(k, 0L) + n }
          Some(sums).filter(_.size <= MaxMergedRows)
        }
        val (start, counts) = merged.map(baseVersion -> _.toMap).getOrElse(from -> change)
        val tmp = new Path(dir, s".tmp-${UUID.randomUUID()}.parquet")
        DriverParquet.write(spark, conf, tmp, schema,
          counts.iterator.filter(_._2 != 0).map { case (k, n) => InternalRow(k, n) })
        if (!fs.rename(tmp, new Path(dir, s"change-$start-$to.parquet"))) fs.delete(tmp, false)
        // Changes a summed change covers, once no refresh reads them: a refresh at Pre `from`
        // reads the shortest chain, which is the summed change where it ends at or before `from`.
        files.changes.filter { case (a, b, p) =>
          files.changes.exists(c => c._3 != p && c._1 <= a && b <= c._2 && c._2 <= from)
        }.foreach(c => fs.delete(c._3, false))
      }
    } catch {
      case NonFatal(e) => logInfo(s"spark-ivm: stored key counts in $dir not advanced (${e.getMessage})")
    }

  /**
   * [[writeBase]] beside the refresh that asks, on the writer's thread ([[awaitWrites]] waits for
   * it): where no chain reaches a refresh's Pre, an application that refreshes once would
   * otherwise never have the time between refreshes to write a base, and every later refresh
   * would scan.
   */
  def writeBaseBeside(spark: SparkSession, dir: Path, version: Long, counts: => DataFrame): Unit =
    beside {
      try {
        SparkInternals.clearLocalProperties(spark.sparkContext)
        writeBase(spark, dir, version, counts)
      } catch {
        case NonFatal(e) => logInfo(s"spark-ivm: stored key counts in $dir not written (${e.getMessage})")
      }
    }

  /**
   * Writes `counts` (columns key and count: every key's count at table version `version`) as
   * the base at that version, by a Spark job, and removes the files no chain from it needs.
   */
  def writeBase(spark: SparkSession, dir: Path, version: Long, counts: DataFrame): Unit = {
    val (fs, _) = fsOf(spark, dir)
    val tmp = new Path(dir, s".tmp-base-${UUID.randomUUID()}")
    counts.toDF("key", "count").write.parquet(tmp.toString)
    val target = new Path(dir, s"base-$version")
    if (fs.exists(target) || !fs.rename(tmp, target)) fs.delete(tmp, true)
    else {
      // Older bases and the changes before this one: a reader at an older version scans instead.
      val files = list(fs, dir)
      files.bases.foreach { case (v, p) => if (v < version) fs.delete(p, true) }
      files.changes.foreach { case (a, _, p) => if (a < version) fs.delete(p, false) }
    }
  }
}
