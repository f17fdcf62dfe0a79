package io.sparkivm.changes

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.DeltaTables
import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.expressions.{BoundReference, GenericInternalRow, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.delta.actions.{AddCDCFile, AddFile, RemoveFile}
import org.apache.spark.sql.ivm.{DriverRows, Parallel}
import org.apache.spark.sql.types.{IntegerType, StructField, StructType}
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.storage.StorageLevel

/**
 * The versions (from, to] of one base table whose net change a refresh needs; `schema`, the
 * table's columns at `to`, when it is known (then a small change is read by the driver).
 */
case class ChangeRequest(table: TableIdentifier, from: Long, to: Long, schema: Option[StructType] = None) {
  def name: String = table.unquotedString
}

/**
 * The net change of one table in the Z-relation model: data columns plus `__ivm_m`, one row
 * per unit of multiplicity (+1 inserted, -1 deleted), zeros dropped.
 */
sealed trait TableChange {

  /** Rows of the net change (-1 when not computed). */
  def rows: Long

  /** False only when the change is known to be empty. */
  def nonEmpty: Boolean = rows != 0

  /** The change as a DataFrame; a fresh plan (fresh attribute ids) per call. */
  def frame(spark: SparkSession): DataFrame
  def release(): Unit = ()
}

/** A change held on the driver: later reads of it run no Spark job. */
case class DriverChange(schema: StructType, data: IndexedSeq[InternalRow]) extends TableChange {
  def rows: Long = data.size.toLong
  def frame(spark: SparkSession): DataFrame = DriverRows.frame(spark, schema, data)
}

/** A change too large for the driver: netted by a distributed aggregate, computed once. */
case class DistributedChange(df: DataFrame, rows: Long) extends TableChange {
  def frame(spark: SparkSession): DataFrame = TableChange.fresh(df)
  override def release(): Unit = df.unpersist(blocking = false)
}

/** A change planned but not computed (EXPLAIN, which runs nothing). */
case class PlannedChange(df: DataFrame) extends TableChange {
  def rows: Long = -1L
  def frame(spark: SparkSession): DataFrame = TableChange.fresh(df)
}

object TableChange {

  /** `df` under a new projection: its own attribute ids, so that it can join another read of it. */
  def fresh(df: DataFrame): DataFrame = df.select(df.columns.toIndexedSeq.map(DeltaSources.quoted): _*)
}

/**
 * Reads the net changes of all changed base tables of a refresh together: the change data feed
 * of every table whose change files are small (by the sizes in the Delta log, read on the
 * driver) is read by the driver where it can be ([[DriverChangeRead]], up to
 * [[DriverReadMaxBytes]]), else in one Spark job, and netted per full row on the driver; larger
 * ones are netted by a distributed aggregate and cached. Netting makes a row inserted then
 * deleted in the interval cancel (Svingos et al. 2023, section 1.4: deltas are net changes).
 */
object ChangeFeed {

  /**
   * Change files a driver reads itself, at most (per table): a few megabytes of Parquet take it
   * tens of milliseconds, about what a Spark job costs to start on a local master.
   */
  val DriverReadMaxBytes: Long = 4L << 20

  def read(spark: SparkSession, view: String, requests: Seq[ChangeRequest],
      localMaxBytes: Long, sizes: Map[String, Long] = Map.empty): Map[String, TableChange] = {
    val (small, large) = requests.partition { r =>
      sizes.getOrElse(r.name, changeBytes(spark, view, r)) <= localMaxBytes
    }
    // Read by the driver where it can; the rest (and the planning of Delta's reads, driver work
    // that overlaps well) side by side.
    val here = Parallel.run(spark,
      small.map(r =>
        () =>
          r -> r.schema.flatMap(s =>
            DriverChangeRead.read(spark, r.table, s, r.from, r.to, math.min(localMaxBytes, DriverReadMaxBytes))
              .map { case (schema, rows) => net(schema, rows) })))
    val byDriver = here.collect { case (r, Some(change)) => r.name -> (change: TableChange) }
    val feeds = Parallel.run(spark, here.collect { case (r, None) => r }.map(r => () => r -> signedFeed(spark, view, r)))
    // Rows per task are bounded by the files' sizes checked above; the bound is a safeguard.
    // One task per core: the change files are small, and a task per file costs more to start than to read.
    val collected =
      try DriverRows.collect(spark, feeds.map(_._2), Int.MaxValue - 1,
          Some(spark.sparkContext.defaultParallelism))
      catch {
        case NonFatal(e) => throw unavailable(view, feeds.map(_._1), e)
      }
    val local = feeds.zip(collected.getOrElse(Nil)).map { case ((r, feed), rows) =>
      r.name -> (net(feed.schema, rows): TableChange)
    }
    val distributed = large.map(r => r.name -> distributedNet(spark, view, r))
    (byDriver ++ local ++ distributed).toMap
  }

  /** The net changes as plans that run nothing until used (EXPLAIN). */
  def planned(spark: SparkSession, view: String, requests: Seq[ChangeRequest]): Map[String, TableChange] =
    requests.map(r => r.name -> PlannedChange(DeltaSources.netChanges(spark, r.table, r.from, r.to, view))).toMap

  /** Bytes of the change files of versions (from, to]: CDC files where a commit wrote them, else
   * the data files it added and removed (which the change feed then reads). */
  def changeBytes(spark: SparkSession, view: String, r: ChangeRequest): Long =
    try {
      DeltaTables.log(spark, r.table).getChanges(r.from + 1, None, false)
        .takeWhile(_._1 <= r.to).map { case (_, actions) =>
          val cdc = actions.collect { case c: AddCDCFile => c.size }
          if (cdc.nonEmpty) cdc.sum
          else actions.collect {
            case a: AddFile if a.dataChange => a.size
            case d: RemoveFile if d.dataChange => d.size.getOrElse(Long.MaxValue / 1024)
          }.sum
        }.sum
    } catch {
      case NonFatal(e) => throw IvmErrors.changeFeedUnavailable(view, r.table.quotedString, e)
    }

  /** The change feed with the table's columns and a sign per row (+1 insert, -1 delete). */
  private def signedFeed(spark: SparkSession, view: String, r: ChangeRequest): DataFrame =
    try {
      val signed = DeltaSources.signedChanges(spark, r.table, r.from, r.to)
      // Planned now, beside the other tables' reads.
      signed.queryExecution.executedPlan
      signed
    } catch {
      case NonFatal(e) => throw IvmErrors.changeFeedUnavailable(view, r.table.quotedString, e)
    }

  /** Nets signed feed rows per full row on the driver, one output row per unit of multiplicity. */
  private def net(feedSchema: StructType, rows: Seq[InternalRow]): DriverChange = {
    val dataFields = feedSchema.fields.dropRight(1)
    val key = UnsafeProjection.create(dataFields.indices.map(i =>
        BoundReference(i, dataFields(i).dataType, dataFields(i).nullable)))
    val signAt = dataFields.length
    // Byte equality of UnsafeRows: the pre- and post-images of one row are the same bytes.
    val counts = mutable.LinkedHashMap[UnsafeRow, Long]()
    rows.foreach { r =>
      val k = key(r).copy()
      counts(k) = counts.getOrElse(k, 0L) + r.getInt(signAt)
    }
    val types = dataFields.map(_.dataType)
    val out = IndexedSeq.newBuilder[InternalRow]
    counts.foreach {
      case (k, n) if n != 0 =>
        val values = k.toSeq(types.toIndexedSeq)
        val sign = if (n > 0) 1 else -1
        (0L until math.abs(n)).foreach(_ => out += new GenericInternalRow((values :+ sign).toArray))
      case _ =>
    }
    DriverChange(StructType(dataFields :+ StructField(DeltaSources.Multiplicity, IntegerType, nullable = false)),
      out.result())
  }

  private def distributedNet(spark: SparkSession, view: String, r: ChangeRequest): DistributedChange = {
    val net = DeltaSources.netChanges(spark, r.table, r.from, r.to, view)
    try {
      val cached = net.persist(StorageLevel.MEMORY_AND_DISK)
      DistributedChange(cached, cached.count())
    } catch {
      case NonFatal(e) => throw IvmErrors.changeFeedUnavailable(view, r.table.quotedString, e)
    }
  }

  private def unavailable(view: String, tables: Seq[ChangeRequest], e: Throwable) =
    IvmErrors.changeFeedUnavailable(view, tables.map(_.table.quotedString).mkString(", "), e)
}
