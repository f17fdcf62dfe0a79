package io.sparkivm.execution

import io.sparkivm.planner.KeyProbe
import io.sparkivm.state.{Arrangement, StateId, StateKind, StatePlace, StateRegistry}
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.ivm.{DriverRows, PartitionedRows}
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * State kept between refreshes as rows partitioned by key, first IVM^eps's: the relation
 * occurrences and the auxiliary views. Kara et al. (2020, section 4) keep them as in-memory maps
 * probed by key; here they are rows in the executors' memory, partitioned and indexed by the key
 * a refresh probes them with ([[PartitionedRows]]), so a refresh reads neither a Delta table nor
 * any row but those of the keys it probes (and computes the degrees of its keys from those rows
 * alone).
 *
 * Delta tables stay the durable copy. An entry is named (an auxiliary view's state table, or a
 * view's occurrence in one layout) and stamped with the Delta table ids and versions its rows
 * are, and a version's rows never change, so an entry is right for as long as it is kept,
 * whether or not the refresh that advanced it commits. A refresh that finds no entry for the
 * versions it reads (a new session, a killed refresh whose writes were restored away, a
 * compaction) reads the tables and keeps that. One entry per name, held in the executors' state
 * ([[StateRegistry]]): the rows as first read, plus the changes refreshes added since, held on
 * the driver (the small per-refresh changes). The same entries keep the rows and counts by key
 * of the tables kept beside it ([[KeyedTableRows]], [[ArrangedKeyCounts]], [[KeyedViewRows]]),
 * named under their own prefixes.
 */
object PartitionedState {

  /** Appended rows held on the driver past this many: the entry is dropped and rebuilt. */
  val MaxAppendedRows = 200000

  /** Rows per partition of an auxiliary view, bytes per partition of a table occurrence. */
  val RowsPerPartition = 50000L
  val BytesPerPartition: Long = 1L << 20
  val MaxPartitions = 256

  /** Partitions for rows first read: `wanted`, at least two per core, at most [[MaxPartitions]]. */
  def partitions(spark: SparkSession, wanted: Long): Int =
    math.max(2L * spark.sparkContext.defaultParallelism, math.min(MaxPartitions.toLong, wanted)).toInt

  /**
   * `df`'s rows kept in memory, laid out and (where the key type allows) indexed by `keyColumn`,
   * so that a probe by a few keys reads only their rows.
   */
  def rows(df: DataFrame, keyColumn: String, partitions: Int): PartitionedRows =
    PartitionedRows(df, keyColumn, partitions, KeyProbe.equalsAsJvm(df.schema(keyColumn).dataType))

  /** The driver's bytes per appended row (a row of a few columns and its array slot). */
  private val AppendedRowBytes = 128L

  final case class Entry(version: String, base: PartitionedRows, appended: Vector[InternalRow]) extends Arrangement {
    override def place: StatePlace = StatePlace.Executors

    /** Measured when held, and again while it measures 0 (rows first read by a later lookup). */
    override def bytes: Long = base.storedBytes + appended.size * AppendedRowBytes
    override def alive: Boolean = base.alive
    override def release(): Unit = base.release()
    override def shares(other: Arrangement): Boolean = other match {
      case e: Entry => e.base eq base
      case _ => false
    }

    /**
     * The rows whose probe key is one of `keys`, and whose columns at the indexes in `where`
     * hold one of the values given (or more rows: the caller filters). Read in place
     * where they can be, the kept and the appended rows are one local relation, which Spark
     * computes on the driver (and folds the caller's filters into) without a job.
     */
    def frame(spark: SparkSession, keys: Option[Seq[Any]], where: Seq[(Int, Seq[Any])] = Nil): DataFrame =
      keys.flatMap(rowsOnDriver(_, where)) match {
        case Some(rows) => DriverRows.frame(spark, base.schema, rows)
        case None =>
          val kept = base.frameByJob(spark, keys)
          if (appended.isEmpty) kept else kept.union(DriverRows.frame(spark, base.schema, appended))
      }

    /**
     * The rows of [[frame]] (kept and appended, of the keys, pre-filtered by `where`) read in
     * place on the driver; None where they cannot be (a cluster).
     */
    def rowsOnDriver(keys: Seq[Any], where: Seq[(Int, Seq[Any])] = Nil): Option[Seq[InternalRow]] = {
      // Pre-filters in place by the other columns the caller filters on, where values compare as the JVM's.
      val tests = where.filter { case (i, _) => KeyProbe.equalsAsJvm(base.schema(i).dataType) }
      base.rowsInPlace(keys, appended, tests)
    }

    /**
     * Per key of `keys`, the sum of the BIGINT column `weight` over its rows (keys without
     * rows left out), without reading other rows; None when the rows are not indexed.
     */
    def sums(spark: SparkSession, keys: Seq[Any], weight: String): Option[Map[Any, Long]] =
      if (!base.indexed) None
      else {
        val w = base.schema.fieldIndex(weight)
        val wanted = keys.toSet
        val added = appended.iterator.map(r => base.keyOf(r) -> r.getLong(w)).filter(p => wanted(p._1))
          .toSeq.groupMapReduce(_._1)(_._2)(_ + _)
        val kept = base.sums(spark, keys, w)
        Some((kept.keySet ++ added.keySet).iterator
            .map(k => k -> (kept.getOrElse(k, 0L) + added.getOrElse(k, 0L))).toMap)
      }

    /** The entry of the next version, with rows added (in the base's column order). */
    def plus(next: String, rows: Seq[InternalRow]): Option[Entry] =
      if (appended.size + rows.size > MaxAppendedRows) None else Some(Entry(next, base, appended ++ rows))
  }

  /** The kind of state an entry's name holds (see the tables above). */
  private def kindOf(name: String): StateKind =
    if (name.startsWith("keycounts/")) StateKind.KeyCounts
    else if (name.startsWith("rows/")) StateKind.KeyedRows
    else StateKind.EpsilonState

  def idOf(name: String): StateId = StateId(kindOf(name), name)

  private val Kinds = Set[StateKind](StateKind.KeyCounts, StateKind.KeyedRows, StateKind.EpsilonState)

  /** The entry of a name for exactly this version, if one is kept and its context runs. */
  def get(spark: SparkSession, name: String, version: String): Option[Entry] =
    StateRegistry.get[Entry](idOf(name), version).filter { e =>
      val current = e.base.alive(spark.sparkContext)
      if (!current) StateRegistry.remove(idOf(name), e)
      current
    }

  /**
   * An entry whose name passes `named`, with its name, for exactly this version, if one is kept
   * and its context runs.
   */
  def find(spark: SparkSession, version: String)(named: String => Boolean): Option[(String, Entry)] =
    Kinds.iterator.flatMap(k => StateRegistry.find[Entry](k)(id => named(id.name)))
      .collectFirst { case (id, stamp, e) if stamp == version && e.base.alive(spark.sparkContext) => id.name -> e }

  /** Holds `entry` under `name` (if it fits the executors' budget); false if it is not held. */
  def put(name: String, entry: Entry): Boolean = StateRegistry.put(idOf(name), entry.version, entry)

  def remove(name: String): Unit = StateRegistry.remove(idOf(name))

  /**
   * Marks the entry `name` as asked for by `refresh`; true if an earlier refresh asked for it
   * too ([[StateRegistry.ask]]: an entry is made the second time).
   */
  def ask(name: String, refresh: String): Boolean = StateRegistry.ask(idOf(name), refresh)

  /**
   * Whose occurrences an entry holds: a view's backing table, and an id of this instance of the
   * view (a view dropped and created again under its name reads the same tables, maybe not
   * the same way).
   */
  final case class Owner(backing: TableIdentifier, instance: String) {
    def name(occurrence: Int, layout: String): String = s"${backing.unquotedString}/$occurrence/$layout"
    def stamp(versions: String): String = s"$instance|$versions"
  }

  /** Drops the entries of a view's occurrences: the view was dropped. */
  def removeView(backing: TableIdentifier): Unit = {
    val prefix = s"${backing.unquotedString}/"
    StateRegistry.removeWhere(h => Kinds(h.id.kind) && h.id.name.startsWith(prefix))
  }

  /** The name of a state table's entry. */
  def tableName(table: TableIdentifier): String = table.unquotedString
}
