package io.sparkivm.execution

import io.sparkivm.catalog.DeltaTables
import io.sparkivm.changes.{DriverChange, PinnedSource, TableChange}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{KeyProbe, RowCounts, SharedScans}
import io.sparkivm.state.{StateBuilds, StatePlace, StateRegistry, StateSize}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, Expression, GenericInternalRow, Literal, Predicate}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow, TableIdentifier}
import org.apache.spark.sql.ivm.{DriverRows, SparkInternals}
import org.apache.spark.sql.types.StructField

/**
 * The rows of a table that a view reads by key (an operator recomputed for its changed keys:
 * [[io.sparkivm.planner.SharedScans]]), kept in the executors' memory between refreshes and
 * indexed by that key ([[PartitionedState]], [[org.apache.spark.sql.ivm.PartitionedRows]]): an
 * arrangement, as Materialize and DBSP keep their inputs indexed by the keys their operators
 * look them up with. A refresh then reads the rows of its changed keys in place, where it would
 * otherwise scan the table for them. TPC-H Q22's NOT EXISTS, recomputed for the customers whose
 * orders changed, read all of `customer` in every refresh for a few thousand of its rows.
 *
 * Only the columns the view reads are kept, each row with a weight (1 as read). An entry is
 * named by the table (its log's path and Delta id), the key and the columns, and stamped with
 * the table version it holds, as [[ArrangedKeyCounts]]' counts are: a version's rows never
 * change, so an entry needs no durable copy. A refresh finds the entry at its Pre version and
 * appends the change's rows (held on the driver) with their signs as weights, which moves it to
 * Post; or finds it at the version it reads; or reads the table once at Post, the second time a
 * refresh in the application reads it by that key (an application that refreshes once never
 * pays for it). Rows appended past [[PartitionedState.MaxAppendedRows]] drop the entry, and the
 * next refresh that asks reads the table again.
 */
object KeyedTableRows {
  private val WeightColumn = "__ivm_w"

  /**
   * The rows of the table whose column `key` holds one of `keys` (Catalyst values; a null reads
   * the rows whose key is NULL), their values in the order of `columns` (lower-case names, a
   * subset of the table's), at Post (`source.version`) if `atPost`, else at Pre (`from`); None
   * where they are not kept: the setting is off, the table is larger than it allows, a column's
   * values do not compare as the JVM's `equals` does, the change cannot move an entry from Pre
   * to Post, or no earlier refresh (`refresh` names this one) asked for them. `all` is the
   * table's rows at Post with `columns`, in order, read to make the entry.
   */
  def read(spark: SparkSession, table: TableIdentifier, key: String, columns: Seq[StructField],
      keys: Iterable[Any], source: PinnedSource, from: Long, atPost: Boolean, change: Option[TableChange],
      all: => LogicalPlan, refresh: String): Option[Seq[InternalRow]] = {
    val keyAt = columns.indexWhere(_.name == key)
    val fits = StateRegistry.admits(spark, StatePlace.Executors, source.sizeInBytes * StateSize.ExecutorBytesPerFileByte)
    if (!fits || keyAt < 0 || !KeyProbe.equalsAsJvm(columns(keyAt).dataType) ||
      !columns.forall(c => SharedScans.comparable(c.dataType))) return None
    val keyType = columns(keyAt).dataType
    val name = s"${prefix(spark, table, source)}$key/${signature(columns)}"
    val (preStamp, postStamp) = (from.toString, source.version.toString)
    // The keys are Catalyst values of the key's type: looked up in place as they are; a job's
    // filter takes external values.
    lazy val external = keys.map(k => if (k == null) null else CatalystTypeConverters.convertToScala(k, keyType))
    val askedBefore = PartitionedState.ask(name, refresh)

    def rowsOf(e: PartitionedState.Entry): Option[Seq[InternalRow]] = {
      val found = e.base.rowsOfKeysInPlace(keys.toArray.distinct, e.appended).orElse(
        DriverRows.collect(spark, Seq(e.frame(spark, Some(external.toSeq))), Int.MaxValue).map(_.head))
      found.flatMap(net(_, columns)) match {
        case None =>
          PartitionedState.remove(name)
          None
        case rows => rows
      }
    }
    val wantedStamp = if (atPost) postStamp else preStamp
    PartitionedState.get(spark, name, wantedStamp) match {
      case Some(e) => rowsOf(e)
      case None if !atPost => None
      case None =>
        PartitionedState.get(spark, name, preStamp).flatMap(e => moved(e, change, columns, postStamp)) match {
          case Some(next) =>
            PartitionedState.put(name, next)
            rowsOf(next)
          case None if !askedBefore => None
          case None =>
            val plan = all
            def make(): PartitionedState.Entry = {
              val named = Project(plan.output.zip(columns).map { case (a, c) => Alias(a, c.name)() } :+
                  Alias(Literal(1L), WeightColumn)(), plan)
              val parts = PartitionedState.partitions(spark, source.sizeInBytes / (16L << 20) + 1)
              val base = PartitionedState.rows(SparkInternals.dataFrame(spark, named), key, parts)
              // Every partition now, so that lookups read in place from the first.
              base.load()
              PartitionedState.Entry(postStamp, base, Vector.empty)
            }
            if (IvmConf.StateBuildInBackground.get(spark)) {
              // Made after this refresh, at its Post: the next refresh's Pre (StateBuilds).
              StateBuilds.submit(spark, PartitionedState.idOf(name))(PartitionedState.put(name, make()))
              None
            } else {
              val entry = make()
              PartitionedState.put(name, entry)
              rowsOf(entry)
            }
        }
    }
  }

  /** Entries of a table start with this; then the key, a slash and the columns' [[signature]]. */
  private def prefix(spark: SparkSession, table: TableIdentifier, source: PinnedSource): String =
    s"rows/${DeltaTables.log(spark, table).logPath}#${source.tableId}/"

  private def signature(columns: Seq[StructField]): String =
    columns.map(c => s"${c.name} ${c.dataType.catalogString}").mkString(",")

  /**
   * The rows of the table at Post (`source.version`) with `columns`, in order, for which
   * `where` (bound to `columns` by position) holds, from an entry kept for those columns (by
   * any key) at Post, or at Pre (`from`) and moved to Post by `change` as [[read]] moves it,
   * read in place: every kept row is tested, as a scan would, but in memory and without a job.
   * None where no such entry is kept or it cannot be read in place.
   */
  def where(spark: SparkSession, table: TableIdentifier, columns: Seq[StructField], source: PinnedSource,
      from: Long, change: Option[TableChange], where: Expression): Option[Seq[InternalRow]] = {
    val (start, end) = (prefix(spark, table, source), "/" + signature(columns))
    def find(version: Long) = PartitionedState.find(spark, version.toString)(n => n.startsWith(start) && n.endsWith(end))
    val atPost = find(source.version).map(_._2).orElse(find(from).flatMap { case (name, e) =>
      moved(e, change, columns, source.version.toString).map { next =>
        PartitionedState.put(name, next)
        next
      }
    })
    atPost.flatMap { e =>
      val test = Predicate.create(where)
      test.initialize(0)
      e.base.allInPlace(test.eval).flatMap(kept => net(kept ++ e.appended.filter(test.eval), columns))
    }
  }

  /**
   * The entry at Pre moved to Post (`next`): the change's rows, in the entry's columns, with their
   * signs as weights; None where the change is not held on the driver.
   */
  private def moved(e: PartitionedState.Entry, change: Option[TableChange], columns: Seq[StructField],
      next: String): Option[PartitionedState.Entry] = change.filter(_.nonEmpty) match {
    case None => Some(e.copy(version = next))
    case Some(DriverChange(schema, data)) =>
      val at = columns.map(c => schema.fieldNames.indexWhere(_.equalsIgnoreCase(c.name)))
      if (at.contains(-1)) None
      else {
        val sign = schema.length - 1
        e.plus(next,
          data.map { r =>
            val values = new Array[Any](columns.length + 1)
            columns.indices.foreach(i => values(i) = r.get(at(i), columns(i).dataType))
            values(columns.length) = r.getInt(sign).toLong
            new GenericInternalRow(values): InternalRow
          })
      }
    case Some(_) => None
  }

  /**
   * Each distinct row as many times as its weights sum to, without the weight; None if a sum
   * is negative (the entry does not hold what its stamp says: it is dropped).
   */
  private def net(rows: Seq[InternalRow], columns: Seq[StructField]): Option[Seq[InternalRow]] = {
    val n = columns.length
    val types = columns.map(_.dataType)
    def values(r: InternalRow): Array[Any] = types.indices.map(i => r.get(i, types(i))).toArray
    if (rows.forall(_.getLong(n) == 1L)) Some(rows.map(r => new GenericInternalRow(values(r))))
    else {
      val counts = new RowCounts
      rows.foreach(r => counts.add(values(r).toSeq, r.getLong(n)))
      counts.rows
    }
  }
}
