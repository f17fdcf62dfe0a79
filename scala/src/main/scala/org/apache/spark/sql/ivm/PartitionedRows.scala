package org.apache.spark.sql.ivm

import java.util.{HashMap => JHashMap}

import scala.collection.mutable
import scala.collection.mutable.ArrayBuffer

import org.apache.spark.rdd.{PartitionPruningRDD, RDD}
import org.apache.spark.sql.catalyst.expressions.{BoundReference, Cast, EvalMode, GenericInternalRow, Literal}
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.classic
import org.apache.spark.sql.execution.LogicalRDD
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{DataType, Decimal, StructType}
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.storage.{RDDBlockId, StorageLevel}
import org.apache.spark.{SparkContext, SparkEnv}

/**
 * Rows kept in the executors' memory (spilling to their disks) across queries and sessions of
 * one SparkContext, hash-partitioned by one column exactly as Spark's `HashPartitioning` lays
 * rows out, so that a lookup by a few values of that column reads only the partitions that can
 * hold them. With `indexed`, each partition also keeps its rows in a hash map by key, so that
 * such a lookup touches only the rows of its keys, not the whole partition: the hash maps of
 * Kara et al.'s computational model (2020, section 2.3), whose lookups cost what they return.
 * Index only keys whose values Spark compares as the JVM's `equals` does (no floating point,
 * no collated strings).
 *
 * Holds the RDD, not a DataFrame: each read builds its plan in the reading session (the RDD's
 * lineage keeps the plan, and so the session, that first computed the rows).
 *
 * On a local master the one executor is this JVM: a lookup of indexed rows reads the kept hash
 * maps in place from its block manager, with no Spark job, as the paper's model probes its maps
 * (a job costs tens of milliseconds to schedule, far more than a lookup of a few keys). The
 * rows read that way are a local relation. A partition not kept (not computed yet, evicted)
 * and other masters read through a job.
 */
final class PartitionedRows private (val schema: StructType, keyIndex: Int, partitions: Int,
    val indexed: Boolean, rdd: RDD[JHashMap[Any, Array[InternalRow]]]) {
  private val keyType = schema(keyIndex).dataType
  private val partitionId = {
    val key = BoundReference(keyIndex, keyType, nullable = true)
    HashPartitioning(Seq(key), partitions).partitionIdExpression
  }

  /**
   * Key values (external values, as `Row.get` returns them) as Catalyst values of the key
   * column's type: a value of another type (an INT probe of a BIGINT column) hashes and
   * compares as the column's values do. A value none of them can equal is dropped; a null
   * stays. One converter per class of value, so that thousands of keys cost no analysis each.
   */
  private def toKeys(keys: Iterable[Any]): Array[Any] = toKeyPairs(keys).map(_._2).distinct

  /** Each key value (not null) with its Catalyst value of type `to`, where it has one. */
  private def toKeyPairs(keys: Iterable[Any], to: DataType = keyType): Array[(Any, Any)] = {
    // By class and, for decimals, by the value's own precision and scale: a converter made for
    // 1.25 (DECIMAL(3, 2)) would overflow on 12.50.
    val converters = mutable.HashMap[(Class[_], DataType), Any => Any]()
    def converter(sample: Any): Any => Any = {
      val from = typeOf(sample)
      val toCatalyst = CatalystTypeConverters.createToCatalystConverter(from)
      if (from == to) toCatalyst
      else {
        val cast = Cast(BoundReference(0, from, nullable = true), to,
          Some(SQLConf.get.sessionLocalTimeZone), EvalMode.TRY)
        v => cast.eval(InternalRow(toCatalyst(v)))
      }
    }
    keys.iterator.flatMap { k =>
      if (k == null) Some((null, null))
      else {
        val decimal = k match {
          case _: java.math.BigDecimal | _: scala.math.BigDecimal | _: Decimal => typeOf(k)
          case _ => null
        }
        Option(converters.getOrElseUpdate((k.getClass, decimal), converter(k))(k)).map(k -> _)
      }
    }.toArray
  }

  /**
   * The Catalyst type of an external value, by `Literal`'s match on its class. (`Literal.create`
   * of a value typed `Any` fails its Scala reflection, tens of milliseconds a call, and then
   * makes this same match.)
   */
  private def typeOf(value: Any): DataType = Literal(value).dataType

  /**
   * The partitions that can hold `keys`. Indexed, a lookup costs a task more to start than to
   * run, so the partitions are read by at most one task per core (grouped where their blocks
   * are: Spark's coalescing keeps cached partitions' locations).
   */
  private def prune(keys: Array[Any]): RDD[JHashMap[Any, Array[InternalRow]]] = {
    val pruned = PartitionPruningRDD.create(rdd, keys.map(partitionOf).toSet.contains)
    val tasks = rdd.context.defaultParallelism
    if (indexed && pruned.getNumPartitions > tasks) pruned.coalesce(tasks) else pruned
  }

  /** The key of a row held here (an appended row, say) as an external value, or null. */
  def keyOf(row: InternalRow): Any =
    if (row.isNullAt(keyIndex)) null
    else CatalystTypeConverters.convertToScala(row.get(keyIndex, keyType), keyType)

  /** The partition a key (a Catalyst value of the key type) is held in. */
  private def partitionOf(key: Any): Int = {
    val row = new GenericInternalRow(schema.length)
    row.update(keyIndex, key)
    partitionId.eval(row).asInstanceOf[Int]
  }

  /**
   * The kept hash map of each partition that can hold `keys` (Catalyst values), read in place
   * from this JVM's block manager (see the class comment); None unless the master is local and
   * every such partition is kept.
   */
  private def inPlace(keys: Array[Any]): Option[Seq[JHashMap[Any, Array[InternalRow]]]] =
    inPartitions(keys.iterator.map(partitionOf).toSet)

  /** The kept hash maps of `parts`, read in place; None unless every one is kept here. */
  private def inPartitions(parts: Iterable[Int]): Option[Seq[JHashMap[Any, Array[InternalRow]]]] =
    if (!indexed || !rdd.context.isLocal || rdd.context.isStopped ||
      rdd.getStorageLevel == StorageLevel.NONE) None
    else {
      val blocks = SparkEnv.get.blockManager
      val found = ArrayBuffer[JHashMap[Any, Array[InternalRow]]]()
      val all = parts.forall { p =>
        blocks.getLocalValues(RDDBlockId(rdd.id, p)).exists { result =>
          val values = result.data
          val index = if (values.hasNext) values.next() else null
          // Read to the end: the block's read lock is released when its iterator completes.
          while (values.hasNext) values.next()
          index match {
            case m: JHashMap[_, _] =>
              found += m.asInstanceOf[JHashMap[Any, Array[InternalRow]]]
              true
            case _ => false
          }
        }
      }
      if (all) Some(found.toSeq) else None
    }

  /**
   * The rows whose key is one of `keys`, read in place if they can be (see [[inPlace]]), and
   * those of `more` (rows of this schema held on the driver) with such a key; of those, with
   * `where`, only the rows whose column at each given index holds one of the given values
   * (external values; for columns whose values compare as the JVM's `equals` does): a point
   * lookup by two columns reads a key's rows but keeps only its matches.
   */
  def rowsInPlace(keys: Iterable[Any], more: Seq[InternalRow] = Nil,
      where: Seq[(Int, Iterable[Any])] = Nil): Option[Seq[InternalRow]] =
    rowsOfKeysInPlace(toKeys(keys), more, where)

  /** As [[rowsInPlace]], for keys that are Catalyst values of the key column's type already. */
  def rowsOfKeysInPlace(wanted: Array[Any], more: Seq[InternalRow] = Nil,
      where: Seq[(Int, Iterable[Any])] = Nil): Option[Seq[InternalRow]] = {
    inPlace(wanted).map { maps =>
      val set = wanted.toSet
      val tests = where.map { case (i, values) =>
        val t = schema(i).dataType
        val allowed = toKeyPairs(values, t).iterator.map(_._2).filter(_ != null).toSet
        (r: InternalRow) => !r.isNullAt(i) && allowed(r.get(i, t))
      }
      def kept(r: InternalRow) = tests.forall(_(r))
      maps.flatMap(PartitionedRows.groupsOf(_, wanted).flatMap(_._2.iterator.filter(kept))) ++
        more.filter(r => set(if (r.isNullAt(keyIndex)) null else r.get(keyIndex, keyType)) && kept(r))
    }
  }

  /**
   * Every kept row, read in place (see the class comment) and filtered by `keep` as it is read;
   * None unless the master is local and every partition is kept.
   */
  def allInPlace(keep: InternalRow => Boolean): Option[Seq[InternalRow]] =
    inPartitions(0 until partitions).map(_.flatMap(m => PartitionedRows.allRows(m).filter(keep)))

  /** How many kept rows `keys` have, counted in place; None where they cannot be read in place. */
  def sizeInPlace(keys: Iterable[Any]): Option[Long] = {
    val wanted = toKeys(keys)
    inPlace(wanted).map(_.iterator.flatMap(PartitionedRows.groupsOf(_, wanted))
        .map(_._2.length.toLong).sum)
  }

  /**
   * Computes and keeps every partition now, in one job, so that later lookups find them all
   * in place (a lookup through a job computes only the partitions its keys hash to).
   */
  def load(): Unit = rdd.count()

  /** True while the rows' SparkContext runs (a stopped context has lost them). */
  def alive(sc: SparkContext): Boolean = (rdd.context eq sc) && !sc.isStopped

  /** True while the rows' SparkContext runs. */
  def alive: Boolean = !rdd.context.isStopped

  /**
   * The bytes the kept partitions take in the executors' block managers (memory and disk), as
   * they report them; 0 before any partition is computed.
   */
  def storedBytes: Long =
    if (rdd.context.isStopped) 0L
    else rdd.context.getRDDStorageInfo(_.id == rdd.id).iterator.map(i => i.memSize + i.diskSize).sum

  /**
   * The rows whose key column holds one of `keys` (all rows when None) as a DataFrame of
   * `spark`. Indexed rows are exactly those; otherwise the read partitions' rows with other
   * keys are left for the caller's filter. A null key reads the rows whose key is null.
   */
  def frame(spark: SparkSession, keys: Option[Iterable[Any]]): DataFrame =
    keys.flatMap(rowsInPlace(_)).map(DriverRows.frame(spark, schema, _)).getOrElse(frameByJob(spark, keys))

  /** [[frame]] read through a job, for a caller that found the rows cannot be read in place. */
  def frameByJob(spark: SparkSession, keys: Option[Iterable[Any]]): DataFrame =
    frameOfKeysByJob(spark, keys.map(toKeys))

  /** [[frameByJob]] for keys that are Catalyst values of the key column's type already. */
  def frameOfKeysByJob(spark: SparkSession, keys: Option[Array[Any]]): DataFrame = {
    val read: RDD[InternalRow] = keys match {
      case Some(wanted) =>
        val pruned = prune(wanted)
        val rows: JHashMap[Any, Array[InternalRow]] => Iterator[InternalRow] =
          if (indexed) PartitionedRows.groupsOf(_, wanted).flatMap(_._2.iterator) else PartitionedRows.allRows
        pruned.mapPartitions(_.flatMap(rows))
      case None => rdd.mapPartitions(_.flatMap(PartitionedRows.allRows))
    }
    SparkInternals.dataFrame(spark,
      LogicalRDD(DataTypeUtils.toAttributes(schema), read)(
        spark.asInstanceOf[classic.SparkSession]))
  }

  /**
   * For each key value of `keys` (not null) that has rows, the sum of the BIGINT column at
   * `weight` over its rows: read in place, or one Spark job over the partitions the keys hash
   * to, whose tasks read only the keys' rows and return one number per key (the degrees
   * IVM^eps tests its heavy/light thresholds on in minor rebalancing, Kara et al. 2020,
   * section 7; the key counts of semi and anti joins). Indexed rows only.
   */
  def sums(spark: SparkSession, keys: Iterable[Any], weight: Int): Map[Any, Long] = {
    require(indexed, "sums need rows indexed by key")
    val pairs = toKeyPairs(keys).filter(_._2 != null)
    val wanted = pairs.map(_._2).distinct
    if (wanted.isEmpty) return Map.empty
    val found = inPlace(wanted) match {
      case Some(maps) => maps.iterator.flatMap(PartitionedRows.sumsOf(_, wanted, weight)).toMap
      case None =>
        prune(wanted).mapPartitions(_.flatMap(PartitionedRows.sumsOf(_, wanted, weight))).collect().toMap
    }
    pairs.iterator.flatMap { case (k, key) => found.get(key).map(k -> _) }.toMap
  }

  /**
   * Frees the executors' memory; later reads recompute from the source. The blocks of a stopped
   * context went with it (and its block manager can no longer be asked): nothing to free.
   */
  def release(): Unit = if (!rdd.context.isStopped) rdd.unpersist(blocking = false)
}

object PartitionedRows {

  /**
   * `df`'s rows laid out by `keyColumn` in `partitions` partitions, kept once computed, with a
   * hash index by key in each partition when `indexed`. Lazy: the first read computes them (one
   * shuffle of `df`), later reads only the kept partitions.
   */
  def apply(df: DataFrame, keyColumn: String, partitions: Int, indexed: Boolean): PartitionedRows = {
    // Quoted: a column name may hold a dot or a backtick.
    val laid = df.repartition(partitions, col("`" + keyColumn.replace("`", "``") + "`"))
    val keyIndex = laid.schema.fieldIndex(keyColumn)
    val keyType = laid.schema(keyIndex).dataType
    // Unindexed rows are one group (key null): the layout, not the index, prunes their reads.
    val rdd = laid.queryExecution.toRdd.mapPartitions { it =>
      val groups = new JHashMap[Any, ArrayBuffer[InternalRow]]()
      it.foreach { r =>
        val row = r.copy()
        val key = if (!indexed || row.isNullAt(keyIndex)) null else row.get(keyIndex, keyType)
        var group = groups.get(key)
        if (group == null) {
          group = new ArrayBuffer[InternalRow]()
          groups.put(key, group)
        }
        group += row
      }
      val index = new JHashMap[Any, Array[InternalRow]](math.max(16, groups.size * 4 / 3 + 1))
      groups.forEach((k, g) => index.put(k, g.toArray))
      Iterator.single(index)
    }.persist(StorageLevel.MEMORY_AND_DISK)
    new PartitionedRows(laid.schema, keyIndex, partitions, indexed, rdd)
  }

  /** The rows of each of `keys` that has some, in one partition's index (in the executors). */
  private def groupsOf(index: JHashMap[Any, Array[InternalRow]],
      keys: Array[Any]): Iterator[(Any, Array[InternalRow])] =
    keys.iterator.flatMap(k => Option(index.get(k)).map(k -> _))

  /** Per key of `keys` that has rows in one partition's index, the sum of its BIGINT column `weight`. */
  private def sumsOf(index: JHashMap[Any, Array[InternalRow]], keys: Array[Any],
      weight: Int): Iterator[(Any, Long)] =
    groupsOf(index, keys).map { case (k, rows) => k -> rows.iterator.map(_.getLong(weight)).sum }

  /** Every row of one partition's index (in the executors: no reference to the driver's object). */
  private def allRows(index: JHashMap[Any, Array[InternalRow]]): Iterator[InternalRow] = {
    val groups = index.values().iterator()
    new Iterator[Array[InternalRow]] {
      def hasNext: Boolean = groups.hasNext
      def next(): Array[InternalRow] = groups.next()
    }.flatMap(_.iterator)
  }

  /**
   * The storage memory of the executors' block managers, summed (on a cluster, not the driver's,
   * which holds no executor's partitions).
   */
  def executorStorageBytes(sc: SparkContext): Long = {
    val status = sc.getExecutorMemoryStatus
    if (sc.isLocal || status.size <= 1) status.values.map(_._1).sum
    else {
      val driver = sc.env.blockManager.blockManagerId
      status.collect { case (at, (max, _)) if at != s"${driver.host}:${driver.port}" => max }.sum
    }
  }

  /** External rows (as `collect` returns them) as Catalyst rows of `schema`. */
  def toInternal(schema: StructType, rows: Seq[org.apache.spark.sql.Row]): IndexedSeq[InternalRow] = {
    val convert = CatalystTypeConverters.createToCatalystConverter(schema)
    rows.iterator.map(r => convert(r).asInstanceOf[InternalRow]).toIndexedSeq
  }
}
