package io.sparkivm.planner

import scala.collection.mutable

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow

/**
 * Rows counted by their values, as a Z-relation holds them (a count per distinct row, which a
 * delta moves up or down), and expanded back into a bag of rows. Keeps first-seen order.
 */
final class RowCounts {
  private val counts = mutable.LinkedHashMap[Seq[Any], Long]()

  def add(values: Seq[Any], weight: Long): Unit = counts(values) = counts.getOrElse(values, 0L) + weight

  /** Each row repeated by its count; None if some count is negative (the rows are no bag). */
  def rows: Option[Seq[InternalRow]] =
    if (counts.valuesIterator.exists(_ < 0)) None
    else Some(counts.iterator.flatMap { case (v, n) =>
      Iterator.fill(n.toInt)(new GenericInternalRow(v.toArray): InternalRow)
    }.toSeq)
}
