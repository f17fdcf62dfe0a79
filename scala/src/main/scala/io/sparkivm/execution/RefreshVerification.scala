package io.sparkivm.execution

import scala.util.Random
import scala.util.control.NonFatal

import io.sparkivm.changes.{DeltaSources, PinnedSource}
import io.sparkivm.conf.IvmConf
import io.sparkivm.planner.{RowsShape, ViewMaintenance}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{
  And, AttributeReference, EqualNullSafe, Expression, In, IsNull, Literal, Or
}
import org.apache.spark.sql.catalyst.plans.LeftSemi
import org.apache.spark.sql.catalyst.plans.logical.{Filter, Join, JoinHint, LogicalPlan}
import org.apache.spark.sql.functions.{col, format_string, lit}
import org.apache.spark.sql.ivm.{SessionInternals, SparkInternals}
import org.apache.spark.sql.types.{DoubleType, FloatType}
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.json4s._

/** What the check of one refresh found (`spark.ivm.verify`). */
case class VerifyReport(level: String, keysChecked: Long, rowsChecked: Long, differences: Long,
    sample: Seq[String], ms: Long, repairedBy: Option[Long] = None) {
  def toJson: JValue = JObject(
    "level" -> JString(level), "keys_checked" -> JLong(keysChecked), "rows_checked" -> JLong(rowsChecked),
    "differences" -> JLong(differences), "sample" -> JArray(sample.map(JString(_)).toList),
    "ms" -> JLong(ms), "repaired_by" -> repairedBy.map(JLong(_)).getOrElse(JNull))

  def describe: String = if (sample.exists(_.startsWith("not checked"))) s"verify ($level): ${sample.head}"
  else
    s"verified ($level): ${if (keysChecked < 0) "the whole view" else s"$rowsChecked rows of $keysChecked keys"} " +
      (if (differences == 0) "equal to the query" else s"$differences differ from the query") + s" ($ms ms)"
}

/**
 * Checks a committed refresh against its query: the view's rows recomputed from the base tables
 * at the versions the refresh consumed (the recomputation of a full refresh, restricted to the
 * checked keys, a filter Spark pushes through the aggregate into the scans, where data skipping
 * reads only the files that can hold them) against the rows the refresh committed, read from
 * the backing table at its commit's version. Levels of `spark.ivm.verify`:
 *  - `changed`: the groups (or rows) the refresh changed;
 *  - `sample`: at most `spark.ivm.verify.sampleKeys` of them, chosen at random;
 *  - `all`: the whole view (a recomputation).
 * A view without keys (a global aggregate) has one row, checked by a recomputation: at every
 * level where its tables are at most `spark.ivm.verify.wholeMaxBytes`, else only under `all`.
 * Rows are compared as multisets with their count; floating-point values within a relative
 * 1e-9, since an incremental sum adds in another order than a recomputation, and arrays as
 * multisets (collect_list gathers in the order rows arrive).
 */
object RefreshVerification extends Logging {

  /** Rows of differences kept for the report. */
  private val SampleRows = 3

  /** Candidate differences collected to the driver, at most. */
  private val MaxCandidates = 10000

  /**
   * The check of a refresh of a view whose rows, as committed, `committed` reads, from `changed`
   * (the new rows of its changed keys, as applied); None if `spark.ivm.verify` is off.
   */
  def run(spark: SparkSession, view: String, committed: () => LogicalPlan,
      maintenance: ViewMaintenance, pinned: Map[String, PinnedSource], changed: Option[LogicalPlan])
      : Option[VerifyReport] = {
    val level = IvmConf.Verify.get(spark)
    if (level == "off") return None
    val startMs = System.currentTimeMillis()
    // The refresh is committed: a check that cannot run says so, and fails nothing.
    try check(spark, view, committed, maintenance, pinned, changed, level, startMs)
    catch {
      case NonFatal(e) =>
        logWarning(s"spark-ivm: the check of a refresh of $view could not run", e)
        val why = Option(e.getMessage).flatMap(_.linesIterator.toSeq.headOption).getOrElse(e.toString)
        Some(VerifyReport(level, 0, 0, 0, Seq(s"not checked: $why"), System.currentTimeMillis() - startMs))
    }
  }

  private def check(spark: SparkSession, view: String, committed: () => LogicalPlan,
      maintenance: ViewMaintenance, pinned: Map[String, PinnedSource], changed: Option[LogicalPlan],
      level: String, startMs: Long): Option[VerifyReport] = {
    def done(keys: Long, rows: Long, diffs: Long, sample: Seq[String]) =
      Some(VerifyReport(level, keys, rows, diffs, sample, System.currentTimeMillis() - startMs))
    val keyNames = maintenance.keyNames
    val keyed = level != "all" && keyNames.nonEmpty
    // A view without keys has one row, which only a recomputation checks: at `changed` and
    // `sample`, only where its tables are small enough for that to cost little.
    lazy val inputBytes = pinned.values.map(_.sizeInBytes).foldLeft(0L)(safeAdd)
    if (level != "all" && keyNames.isEmpty && inputBytes > IvmConf.VerifyWholeMaxBytes.get(spark)) {
      return Some(VerifyReport(level, 0, 0, 0,
          Seq(s"not checked: the view has no keys to read by, and its " +
            s"tables are over ${IvmConf.VerifyWholeMaxBytes.key}; spark.ivm.verify = all checks it whole"), 0))
    }
    // The changed keys, as Catalyst values (of any type a key may have: structs, arrays, binary).
    val keys: Option[Seq[InternalRow]] = if (!keyed) None
    else changed match {
      case None => return done(0, 0, 0, Nil)
      case Some(plan) =>
        val at = keyNames.map(k => plan.output.indexWhere(_.name == k))
        val types = at.map(plan.output(_).dataType)
        val rows = RefreshSteps.rowsOnDriver(plan).getOrElse(
          SparkInternals.dataFrame(spark, plan).queryExecution.toRdd.map(_.copy()).collect().toSeq)
        val all = rows.map(r => InternalRow.fromSeq(at.zip(types).map { case (i, t) => r.get(i, t) }))
          .map(_.copy()).distinct
        Some(if (level == "sample") Random.shuffle(all).take(IvmConf.VerifySampleKeys.get(spark)) else all)
    }
    if (keys.exists(_.isEmpty)) return done(0, 0, 0, Nil)
    val compared = (keyNames ++ (maintenance.shape match {
      case _: RowsShape => Nil // its keys are its columns
      case _ => maintenance.outputStorage
    }) ++
      Seq(ViewMaintenance.CountColumn) ++ (if (maintenance.hasHaving) Seq(ViewMaintenance.HavingColumn) else Nil))
      .distinct
    // Both sides read from storage: base-table rows held in memory between refreshes are part of
    // what is checked, so the recomputation does not use them.
    val small = inputBytes <= IvmConf.RefreshInterpretedMaxBytes.get(spark)
    SessionInternals.withConf(spark,
      Seq(IvmConf.HeldTablesMaxRows.key -> Some("0")) ++
        (if (small) Seq("spark.sql.shuffle.partitions" -> Some("1")) else Nil)) {
      compare(spark, view, committed, maintenance, pinned, keys, keyNames, compared)
    } match {
      case (missing, extra, rows) =>
        val diffs = missing.size + extra.size
        val sample = missing.take(SampleRows).map(r => s"expected ${render(compared, r)}") ++
          extra.take(SampleRows).map(r => s"committed ${render(compared, r)}")
        done(keys.map(_.size.toLong).getOrElse(-1L), rows, diffs, sample.take(SampleRows))
    }
  }

  /** (rows the query gives that were not committed, rows committed it does not give, rows checked). */
  private def compare(spark: SparkSession, view: String, committed: () => LogicalPlan, maintenance: ViewMaintenance,
      pinned: Map[String, PinnedSource], keys: Option[Seq[InternalRow]], keyNames: Seq[String],
      compared: Seq[String]): (Seq[Row], Seq[Row], Long) = {
    def prepare(df: DataFrame): DataFrame = {
      val live = if (maintenance.global) df else df.where(col(ViewMaintenance.CountColumn) > 0)
      keys.map(k => restrict(spark, live, keyNames, k)).getOrElse(live).select(compared.map(DeltaSources.quoted): _*)
    }
    val expected = prepare(new PinnedReader(spark, Map.empty, pinned, view).fullRows(maintenance))
    val actual = prepare(SparkInternals.dataFrame(spark, committed()))
    if (keys.isDefined) {
      // Both sides in one collect.
      val side = "__ivm_side"
      val both = expected.withColumn(side, lit(0)).unionByName(actual.withColumn(side, lit(1))).collect().toSeq
      val (e, a) = both.partition(_.getInt(compared.size) == 0)
      def strip(rs: Seq[Row]) = rs.map(r => Row.fromSeq(r.toSeq.dropRight(1)))
      (minus(strip(e), strip(a)), minus(strip(a), strip(e)), e.size.toLong)
    } else {
      // The whole view: Spark compares, with floating-point values to 12 digits; only if that
      // finds candidates are the exact rows that differ collected, for the driver to pair those
      // that differ only in the last digits.
      val (en, an) = (normalized(expected), normalized(actual))
      if (en.exceptAll(an).isEmpty && an.exceptAll(en).isEmpty) (Nil, Nil, -1L)
      else {
        val e = expected.exceptAll(actual).limit(MaxCandidates).collect().toSeq
        val a = actual.exceptAll(expected).limit(MaxCandidates).collect().toSeq
        (minus(e, a), minus(a, e), -1L)
      }
    }
  }

  /**
   * `df`'s rows of the `keys`: each key column filtered to its values (an IN list, which Spark
   * pushes through the aggregate into the scans, for data skipping), then, for several key
   * columns, joined to the key tuples null-safely.
   */
  private def restrict(spark: SparkSession, df: DataFrame, keyNames: Seq[String], keys: Seq[InternalRow]): DataFrame = {
    val plan = SparkInternals.analyzed(df)
    val attrs = keyNames.map(k => plan.output.find(_.name == k).get)
    val filters = attrs.zipWithIndex.map { case (a, i) =>
      val values = keys.map(_.get(i, a.dataType)).distinct
      val present = values.filter(_ != null).map(v => Literal(v, a.dataType))
      val in: Expression = if (present.isEmpty) Literal(false) else In(a, present)
      if (values.contains(null)) Or(in, IsNull(a)) else in
    }
    val filtered: LogicalPlan = Filter(filters.reduce(And), plan)
    SparkInternals.dataFrame(spark,
      if (attrs.size == 1) filtered
      else {
        val tuples = RefreshSteps.onDriver(attrs.map(a => AttributeReference(a.name, a.dataType)()), keys)
        Join(filtered, tuples, LeftSemi,
          Some(attrs.zip(tuples.output).map { case (a, t) => EqualNullSafe(a, t): Expression }.reduce(And)),
          JoinHint.NONE)
      })
  }

  private def normalized(df: DataFrame): DataFrame = df.select(df.schema.fields.toSeq.map { f =>
    val c = DeltaSources.quoted(f.name)
    (f.dataType match {
      case DoubleType | FloatType => format_string("%.11e", c)
      case _ => c
    }).as(f.name)
  }: _*)

  /** `a` less `b` as multisets, rows equal when their values are ([[same]]). */
  private def minus(a: Seq[Row], b: Seq[Row]): Seq[Row] = {
    val left = scala.collection.mutable.ArrayBuffer(b: _*)
    a.filter { r =>
      val at = left.indexWhere(same(r, _))
      if (at >= 0) { left.remove(at); false }
      else true
    }
  }

  /** Equal values, floating-point ones within a relative 1e-9 (NaN equal to NaN). */
  private def same(a: Any, b: Any): Boolean = (a, b) match {
    case (x: Double, y: Double) => close(x, y)
    case (x: Float, y: Float) => close(x.toDouble, y.toDouble)
    case (x: java.math.BigDecimal, y: java.math.BigDecimal) => x.compareTo(y) == 0
    case (x: Row, y: Row) => x.length == y.length && (0 until x.length).forall(i => same(x.get(i), y.get(i)))
    // Arrays as multisets: collect_list's order is the order rows reached it, which differs
    // between a refresh and a recomputation of the same group.
    case (x: scala.collection.Seq[_], y: scala.collection.Seq[_]) =>
      x.length == y.length && minus(x.toSeq.map(Row(_)), y.toSeq.map(Row(_))).isEmpty
    case (x: scala.collection.Map[_, _], y: scala.collection.Map[_, _]) =>
      x.size == y.size && x.forall { case (k, v) =>
        y.asInstanceOf[scala.collection.Map[Any, Any]].get(k).exists(same(v, _))
      }
    case (x: Array[Byte], y: Array[Byte]) => java.util.Arrays.equals(x, y)
    case _ => a == b
  }

  private def safeAdd(a: Long, b: Long): Long = if (a > Long.MaxValue - b) Long.MaxValue else a + b

  private def close(x: Double, y: Double): Boolean =
    x == y || (x.isNaN && y.isNaN) || math.abs(x - y) <= 1e-9 * math.max(math.abs(x), math.abs(y))

  private def render(columns: Seq[String], r: Row): String =
    columns.zipWithIndex.map { case (c, i) =>
      s"$c=${r.get(i) match {
          case b: Array[Byte] => b.map("%02x".format(_)).mkString("X'", "", "'")
          case v => String.valueOf(v)
        }}"
    }.mkString("(", ", ", ")")
}
