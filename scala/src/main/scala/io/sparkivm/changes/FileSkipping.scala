package io.sparkivm.changes

import java.time.ZoneOffset
import java.util.Locale

import scala.util.Try

import com.fasterxml.jackson.databind.JsonNode
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.util.{DateTimeUtils, TypeUtils}
import org.apache.spark.sql.delta.actions.AddFile
import org.apache.spark.sql.delta.util.JsonUtils
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** A file of a Delta table version with its statistics, parsed once when first needed. */
final class KnownFile(val add: AddFile) {
  lazy val stats: Option[JsonNode] =
    Option(add.stats).filter(_.nonEmpty).flatMap(s => Try(JsonUtils.mapper.readTree(s)).toOption)
}

/**
 * Data skipping on the driver: whether a file may hold rows matching a scan's data filters, from
 * the per-file minimum, maximum and null count that Delta keeps in its log. It answers "may"
 * whenever it cannot decide (no statistics, a type or predicate it does not read), so a file is
 * skipped only when its bounds exclude every match. This is the test Delta's own data skipping
 * makes, run over a file list held on the driver ([[KnownFiles]]) instead of a Spark job.
 *
 * Types read: integral numbers, dates, timestamps (kept to the millisecond: a maximum is read as
 * up to 999 us more), and strings of binary collation (Delta cuts string statistics at a prefix,
 * so a maximum that may be cut is not used as an upper bound).
 * Statistics are keyed by the physical column name (`physical`), which differs from the logical
 * one under column mapping.
 */
class FileSkipping(physical: String => Option[String]) {
  private val StringPrefix = 32

  def mayMatch(file: KnownFile, filters: Seq[Expression]): Boolean =
    file.stats.forall(s => filters.forall(f => may(s, f)))

  private def may(s: JsonNode, e: Expression): Boolean = e match {
    case And(a, b) => may(s, a) && may(s, b)
    case Or(a, b) => may(s, a) || may(s, b)
    case EqualTo(a: Attribute, Literal(v, _)) => within(s, a, v, v)
    case EqualTo(Literal(v, _), a: Attribute) => within(s, a, v, v)
    case EqualNullSafe(a: Attribute, Literal(v, _)) if v != null => within(s, a, v, v)
    case EqualNullSafe(Literal(v, _), a: Attribute) if v != null => within(s, a, v, v)
    case in @ InSet(a: Attribute, values) => anyWithin(s, a, in, values.toSeq)
    case in @ In(a: Attribute, list) if list.forall(_.isInstanceOf[Literal]) =>
      anyWithin(s, a, in, list.map(_.asInstanceOf[Literal].value))
    case LessThan(a: Attribute, Literal(v, _)) => bound(s, a, "minValues").forall(lo => lt(a, lo, v))
    case LessThanOrEqual(a: Attribute, Literal(v, _)) => bound(s, a, "minValues").forall(lo => !lt(a, v, lo))
    case GreaterThan(a: Attribute, Literal(v, _)) => bound(s, a, "maxValues").forall(hi => lt(a, v, hi))
    case GreaterThanOrEqual(a: Attribute, Literal(v, _)) => bound(s, a, "maxValues").forall(hi => !lt(a, hi, v))
    case LessThan(l: Literal, a: Attribute) => may(s, GreaterThan(a, l))
    case LessThanOrEqual(l: Literal, a: Attribute) => may(s, GreaterThanOrEqual(a, l))
    case GreaterThan(l: Literal, a: Attribute) => may(s, LessThan(a, l))
    case GreaterThanOrEqual(l: Literal, a: Attribute) => may(s, LessThanOrEqual(a, l))
    case IsNull(a: Attribute) => column(a).flatMap(c => Option(s.path("nullCount").get(c)))
        .filter(_.isNumber).forall(_.asLong > 0)
    case _ => true
  }

  private def readable(t: DataType): Boolean = t match {
    case ByteType | ShortType | IntegerType | LongType | DateType | TimestampType | TimestampNTZType => true
    case st: StringType => st == StringType // binary collation
    case _ => false
  }

  private def column(a: Attribute): Option[String] = if (readable(a.dataType)) physical(a.name) else None

  /** The file's minimum or maximum of `a` in Catalyst's internal form, if known. */
  private def bound(s: JsonNode, a: Attribute, which: String): Option[Any] =
    column(a).flatMap(c => Option(s.path(which).get(c))).filterNot(_.isNull).flatMap { n =>
      a.dataType match {
        case ByteType if n.canConvertToLong => Some(n.asLong.toByte)
        case ShortType if n.canConvertToLong => Some(n.asLong.toShort)
        case IntegerType if n.canConvertToInt => Some(n.asInt)
        case LongType if n.canConvertToLong => Some(n.asLong)
        case DateType if n.isTextual => DateTimeUtils.stringToDate(UTF8String.fromString(n.asText))
        // Delta keeps timestamps to the millisecond, cut: a maximum may be up to 999 us short.
        case TimestampType if n.isTextual =>
          DateTimeUtils.stringToTimestamp(UTF8String.fromString(n.asText), ZoneOffset.UTC).map(cutUp(which, _))
        case TimestampNTZType if n.isTextual =>
          DateTimeUtils.stringToTimestampWithoutTimeZone(UTF8String.fromString(n.asText)).map(cutUp(which, _))
        case _: StringType if n.isTextual =>
          val text = n.asText
          if (which == "maxValues" && text.codePointCount(0, text.length) >= StringPrefix) None
          else Some(UTF8String.fromString(text))
        case _ => None
      }
    }

  private def cutUp(which: String, micros: Long): Long = if (which == "maxValues") micros + 999L else micros

  private def lt(a: Attribute, x: Any, y: Any): Boolean =
    TypeUtils.getInterpretedOrdering(a.dataType).lt(x, y)

  private def within(s: JsonNode, a: Attribute, lo: Any, hi: Any): Boolean =
    lo == null || (bound(s, a, "minValues").forall(min => !lt(a, hi, min)) &&
      bound(s, a, "maxValues").forall(max => !lt(a, max, lo)))

  /** The sorted non-null values of each IN list seen: computed once per scan, not per file. */
  private val sortedLists = new java.util.IdentityHashMap[Expression, Array[Any]]()

  private def anyWithin(s: JsonNode, a: Attribute, in: Expression, values: => Seq[Any]): Boolean = {
    if (!readable(a.dataType)) return true
    val ordering = TypeUtils.getInterpretedOrdering(a.dataType)
    val sorted = sortedLists.synchronized {
      sortedLists.computeIfAbsent(in, _ => values.filter(_ != null).sorted(ordering).toArray)
    }
    // The first value at or above the minimum must not lie above the maximum.
    val from = bound(s, a, "minValues").map { min =>
      var (lo, hi) = (0, sorted.length)
      while (lo < hi) {
        val mid = (lo + hi) >>> 1
        if (ordering.lt(sorted(mid), min)) lo = mid + 1 else hi = mid
      }
      lo
    }.getOrElse(0)
    from < sorted.length && bound(s, a, "maxValues").forall(max => !ordering.lt(max, sorted(from)))
  }
}

object FileSkipping {
  private val PhysicalName = "delta.columnMapping.physicalName"

  /** Skipping over a table whose logical schema is `schema` (with column-mapping metadata). */
  def of(schema: StructType): FileSkipping = {
    val byName = schema.fields.map(f =>
      f.name.toLowerCase(Locale.ROOT) ->
        (if (f.metadata.contains(PhysicalName)) f.metadata.getString(PhysicalName) else f.name)).toMap
    new FileSkipping(n => byName.get(n.toLowerCase(Locale.ROOT)))
  }
}
