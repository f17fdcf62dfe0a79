package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan}
import org.apache.spark.sql.types._

/** How a refresh may probe large inputs with the keys of small ones (docs/architecture.md, "Key probing"). */
case class ProbeSettings(enabled: Boolean, maxKeys: Int, maxRanges: Int, minTableBytes: Long) {

  /**
   * Probing costs a small Spark job or two (collect the keys, compute the small side once);
   * it pays only where it can skip files, so small tables are joined as they are.
   */
  def worth(tableBytes: => Long): Boolean = enabled && tableBytes >= minTableBytes
}

object ProbeSettings {
  val Off: ProbeSettings = ProbeSettings(enabled = false, 0, 0, Long.MaxValue)
}

/**
 * Key probing: when a small input joins a large one on `small.a = large.b`, the distinct values
 * of `a` become a filter on `b` under the join. Spark pushes the filter into the scan, where
 * Delta's file skipping (min/max per file) and Parquet's row-group statistics keep only the
 * files and row groups that can hold one of the keys. The filter is a disjunction of at most
 * `maxRanges` ranges (single keys when there are few): Delta tests a disjunction against every
 * file's min and max, whereas an IN list is reduced to one range from its minimum to its
 * maximum. Keys of types compared as the JVM compares them become a hash set instead (see
 * `filter`), which the driver's file skipping tests exactly. Ranges are cut at the widest gaps
 * between sorted keys; the join itself still matches exact keys, so a range may cover more
 * values than the keys.
 */
object KeyProbe {

  /**
   * Types whose values Spark's join equality compares as the JVM's equals does (no floating
   * point: NaN and -0.0 are normalized by Spark; no binary or collated strings), so that a set
   * of values held on the driver (an InSet, a hash map) matches exactly as the join would.
   */
  def equalsAsJvm(t: DataType): Boolean = t match {
    case ByteType | ShortType | IntegerType | LongType | BooleanType | DateType | TimestampType |
        TimestampNTZType => true
    case _: DecimalType => true
    case s: StringType => s == StringType
    case _ => false
  }

  def probeable(t: DataType): Boolean = t match {
    case _: NumericType | StringType | DateType | TimestampType | TimestampNTZType => true
    case _ => false
  }

  /**
   * The filter on `column` that keeps the rows that may match `keys` (sorted, distinct, not
   * null); `false` when there are no keys.
   */
  def filter(column: Attribute, keys: Seq[Any], maxRanges: Int): Expression = {
    if (keys.isEmpty) return Literal.FalseLiteral
    // A hash set: one lookup per row, where a disjunction of ranges costs up to 2 x maxRanges
    // comparisons per row and compiles into a stage method too large for the JIT to compile
    // (HotSpot leaves methods over 8,000 bytes of bytecode interpreted: TPC-H Q18's refresh
    // scanned `lineitem` at a tenth of its speed). The driver's file skipping (FileSkipping)
    // tests the set against each file's bounds exactly; Delta's own skipping, used when the
    // files are not held, reduces it to its minimum and maximum.
    if (keys.size > 1 && equalsAsJvm(column.dataType)) {
      return InSet(column, keys.map(k => Literal.create(k, column.dataType).value).toSet)
    }
    val groups = cut(keys, math.max(1, maxRanges))
    val terms = groups.map { g =>
      val lo = Literal.create(g.head, column.dataType)
      val hi = Literal.create(g.last, column.dataType)
      if (g.size == 1) EqualTo(column, lo)
      else And(GreaterThanOrEqual(column, lo), LessThanOrEqual(column, hi))
    }
    balancedOr(terms)
  }

  /** The same filter as SQL text over a column reference (a MERGE condition). */
  def sqlFilter(column: String, dataType: DataType, keys: Seq[Any], maxRanges: Int): String =
    if (keys.isEmpty) "false"
    else cut(keys, math.max(1, maxRanges)).map { g =>
      val lo = Literal.create(g.head, dataType).sql
      if (g.size == 1) s"$column = $lo" else s"$column BETWEEN $lo AND ${Literal.create(g.last, dataType).sql}"
    }.mkString("(", " OR ", ")")

  def probe(plan: LogicalPlan, column: Attribute, keys: Seq[Any], maxRanges: Int): LogicalPlan =
    Filter(filter(column, keys, maxRanges), plan)

  /** Sorted keys in at most `n` runs, split at the widest gaps (numbers) or evenly (others). */
  private[planner] def cut(allKeys: Seq[Any], n: Int): Seq[Seq[Any]] = {
    // Indexed: the keys may come as a List, whose apply(i) would make this quadratic.
    val keys = allKeys.toIndexedSeq
    if (keys.size <= n) return keys.map(Seq(_))
    val splits: Seq[Int] = keys.head match {
      case _: Number =>
        val values = keys.map(k => k.asInstanceOf[Number].doubleValue()).toArray
        (1 until values.length).sortBy(i => -(values(i) - values(i - 1))).take(n - 1).sorted
      case _ =>
        (1 until n).map(i => i * keys.size / n).distinct
    }
    (0 +: splits :+ keys.size).sliding(2).collect { case Seq(a, b) if b > a => keys.slice(a, b) }.toSeq
  }

  private def balancedOr(terms: Seq[Expression]): Expression =
    if (terms.size == 1) terms.head
    else {
      val (l, r) = terms.splitAt(terms.size / 2)
      Or(balancedOr(l), balancedOr(r))
    }
}
