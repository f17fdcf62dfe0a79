package io.sparkivm.execution

import scala.util.control.NonFatal

import io.sparkivm.catalog.DeltaTables
import io.sparkivm.changes.{DriverChange, PinnedSource, TableChange}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{CountedTable, FkDeltaPlanner, KeyCounts, KeyProbe, PlanOnly}
import io.sparkivm.state.{StateBuilds, StatePlace, StateRegistry, StoredKeyCounts}
import org.apache.hadoop.fs.Path
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.aggregate.Count
import org.apache.spark.sql.catalyst.expressions.{Alias, And, AttributeReference, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Filter, LocalRelation, LogicalPlan, Project}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.StructType

/**
 * The counts of a [[CountedTable]] kept in the executors' memory between refreshes, indexed by
 * key ([[PartitionedState]], [[org.apache.spark.sql.ivm.PartitionedRows]]), so that a refresh reads
 * the counts of its changed keys and nothing else.
 *
 * An entry is named by the table's Delta id and what is counted, and stamped with the table
 * version its counts are of. Counts are a function of one table version, so an entry is right
 * whatever became of the refresh that made it, and needs no exactly-once protocol of its own:
 * a refresh finds the entry at its Pre version and adds the change (held on the driver) to reach
 * Post, or finds it at Post (a retried refresh) and subtracts the change to reach Pre
 * (Pre = Post - D), or counts the table at Post once: the second time a refresh in the
 * application asks for them, so that an application that refreshes once never counts. Until
 * then, and in a new application, the copy kept in storage beside the view answers
 * ([[StoredKeyCounts]]: written at CREATE for the integrity checks, or between refreshes), and
 * every refresh moves that copy on by its change.
 */
object ArrangedKeyCounts extends Logging {
  private val CountColumn = "__ivm_cnt"

  /**
   * The counts of `keys` at `from` (Pre) and at `source.version` (Post), or None where they
   * are not kept: the setting is off, the table is small, the key's values cannot be indexed,
   * the change is too large to be held on the driver or its filters cannot be evaluated there,
   * or no earlier refresh (`refresh` names this one) has asked for them and `stored` (their
   * directory in storage) holds none at Pre.
   */
  def read(spark: SparkSession, t: CountedTable, keys: Seq[Any], source: PinnedSource, from: Long,
      change: Option[TableChange], post: => LogicalPlan, refresh: String,
      stored: Option[Path] = None): Option[KeyCounts] = {
    val kept = worthKeeping(spark, t, source)
    lazy val delta: Option[Map[Any, Long]] = change.filter(_.nonEmpty) match {
      case None => Some(Map.empty)
      // A filter the driver cannot evaluate: the table is read instead.
      case Some(DriverChange(schema, data)) =>
        try changeCounts(spark, t, schema, data)
        catch { case NonFatal(_) => None }
      case Some(_) => None
    }
    if (!kept) None
    else delta.flatMap { d =>
      val keyType = t.key.dataType
      val wanted = keys.filter(_ != null)
      val dOut = d.iterator.collect {
        case (k, n) if k != null && n != 0 =>
          CatalystTypeConverters.convertToScala(k, keyType) -> n
      }.toMap
      def plus(counts: Map[Any, Long], sign: Int): Map[Any, Long] = wanted.iterator.map { k =>
        k -> (counts.getOrElse(k, 0L) + sign * dOut.getOrElse(k, 0L))
      }.filter(_._2 != 0).toMap
      // The log's path with the id: a copied table keeps its id.
      val name = s"keycounts/${DeltaTables.log(spark, t.leaf.table).logPath}#${source.tableId}/${t.definition}"
      val (preStamp, postStamp) = (from.toString, source.version.toString)
      val askedBefore = PartitionedState.ask(name, refresh)
      // The counts in storage, read at Pre for a refresh that finds none in memory (the first
      // of an application), and moved on to Post by every refresh whatever answers it.
      lazy val fromStorage: Option[KeyCounts] = stored.flatMap { dir =>
        val wantedCatalyst = wanted.map(CatalystTypeConverters.convertToCatalyst).toSet
        StoredKeyCounts.at(spark, dir, from, keyType, wantedCatalyst).map { pre =>
          val p = pre.map { case (k, n) => CatalystTypeConverters.convertToScala(k, keyType) -> n }
          KeyCounts(p, plus(p, 1))
        }
      }
      stored.foreach { dir =>
        StoredKeyCounts.chainLength(spark, dir, from) match {
          // Nothing to record where the table did not change.
          case Some(_) =>
            if (source.version > from) StoredKeyCounts.addChange(spark, dir, from, source.version, keyType, d)
          // No chain reaches Pre (a change too large to hold, counts never written): a new base
          // at Post, beside this refresh.
          case None =>
            val plan = post
            StoredKeyCounts.writeBaseBeside(spark, dir, source.version, SparkInternals.dataFrame(spark, countsOf(t, plan)))
        }
      }
      PartitionedState.get(spark, name, postStamp) match {
        case Some(e) => e.sums(spark, wanted, CountColumn).map(p => KeyCounts(plus(p, -1), p))
        case None => PartitionedState.get(spark, name, preStamp) match {
            case Some(e) =>
              val counted = e.sums(spark, wanted, CountColumn).map(p => KeyCounts(p, plus(p, 1)))
              // The entry moves on to Post: the change's counts appended, as a refresh appends.
              val rows = d.iterator.map { case (k, n) => InternalRow(k, n) }.toSeq
              e.plus(postStamp, rows) match {
                case Some(next) => PartitionedState.put(name, next)
                case None => PartitionedState.remove(name)
              }
              counted
            // Counted the second time a refresh in this application asks: an application that
            // refreshes once (a scheduled job) reads the rows of its keys and never pays for counting.
            case None if !askedBefore => fromStorage
            // Counts take at most the table's rows (one per key), about their bytes in its files.
            case None if !StateRegistry.admits(spark, StatePlace.Executors, source.sizeInBytes) => fromStorage
            case None =>
              val plan = post
              def make(): PartitionedState.Entry = {
                val counts = countsOf(t, plan)
                val parts = PartitionedState.partitions(spark, source.sizeInBytes / (16L << 20) + 1)
                PartitionedState.Entry(postStamp,
                  PartitionedState.rows(SparkInternals.dataFrame(spark, counts), t.key.name, parts), Vector.empty)
              }
              if (IvmConf.StateBuildInBackground.get(spark)) {
                // Counted after this refresh, at its Post: the next refresh's Pre (StateBuilds).
                StateBuilds.submit(spark, PartitionedState.idOf(name)) {
                  val entry = make()
                  entry.base.load()
                  PartitionedState.put(name, entry)
                }
                fromStorage
              } else {
                val entry = make()
                PartitionedState.put(name, entry)
                entry.sums(spark, wanted, CountColumn).map(p => KeyCounts(plus(p, -1), p))
              }
          }
      }
    }
  }

  private def worthKeeping(spark: SparkSession, t: CountedTable, source: PinnedSource): Boolean =
    IvmConf.KeyCountsEnabled.get(spark) && KeyProbe.equalsAsJvm(t.key.dataType) &&
      source.sizeInBytes >= IvmConf.KeyCountsMinTableBytes.get(spark)

  /**
   * Writes to storage under `root` the counts that the integrity checks of `plan` read
   * ([[FkDeltaPlanner.integrityCounts]]), at the versions `reader` reads, for the tables large
   * enough to keep counts of: a view's first refresh in a new application then reads the counts
   * of its changed keys instead of scanning the referencing tables. A count that cannot be
   * written is left out (the refresh scans, as without it).
   */
  def store(spark: SparkSession, root: Path, plan: LogicalPlan, pinned: Map[String, PinnedSource],
      reader: PinnedReader): Unit =
    FkDeltaPlanner.integrityCounts(plan, PlanningConf.fk(spark, PlanOnly).keys).foreach { t =>
      pinned.get(t.leaf.name).filter(worthKeeping(spark, t, _)).foreach { source =>
        try {
          StoredKeyCounts.writeBase(spark, StoredKeyCounts.dirOf(root, source.tableId, t.definition), source.version,
            SparkInternals.dataFrame(spark, countsOf(t, reader.post(t.leaf))))
        } catch {
          case NonFatal(e) => logWarning(s"spark-ivm: the ${t.describe} were not stored (${e.getMessage})")
        }
      }
    }

  /** `SELECT key, count(*) FROM plan WHERE filters GROUP BY key`. */
  def countsOf(t: CountedTable, plan: LogicalPlan): LogicalPlan = {
    val filtered = t.filters.reduceOption(And).map(Filter(_, plan)).getOrElse(plan)
    Aggregate(Seq(t.key), Seq(t.key, Alias(Count(Literal(1)).toAggregateExpression(), CountColumn)()), filtered)
  }

  /**
   * The change's rows that pass the filters, counted per key (Catalyst values), with their
   * signs; None where the filters cannot be evaluated on the driver. The filters run as Spark's
   * optimizer leaves them (BETWEEN and the like replaced, common expressions factored out),
   * over the rows as a local relation, without a job ([[DriverEval]]).
   */
  private def changeCounts(spark: SparkSession, t: CountedTable, schema: StructType,
      data: Seq[InternalRow]): Option[Map[Any, Long]] = {
    val attrs = schema.fields.toSeq.map(f =>
      t.leaf.output.collectFirst {
        case a: AttributeReference if a.name.equalsIgnoreCase(f.name) && a.dataType == f.dataType => a
      }.getOrElse(AttributeReference(f.name, f.dataType)()))
    val key = attrs(schema.fieldNames.indexWhere(_.equalsIgnoreCase(t.key.name)))
    val rows = LocalRelation(attrs, data)
    val passing = Project(Seq(key, attrs.last), t.filters.reduceOption(And).map(Filter(_, rows)).getOrElse(rows))
    DriverEval.rows(SparkInternals.dataFrame(spark, passing).queryExecution.optimizedPlan, Int.MaxValue).map(
      _.groupMapReduce(r => if (r.isNullAt(0)) null else r.get(0, t.key.dataType))(_.getInt(1).toLong)(_ + _))
  }
}
