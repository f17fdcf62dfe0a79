package io.sparkivm

import org.apache.spark.sql.catalyst.InternalRow

/** Rows that count how often they are mapped: a plan walk that maps a relation's rows shows. */
final class MappedRows(rows: IndexedSeq[InternalRow]) extends IndexedSeq[InternalRow] {
  var mapped = 0
  override def apply(i: Int): InternalRow = rows(i)
  override def length: Int = rows.length
  override def map[B](f: InternalRow => B): IndexedSeq[B] = {
    mapped += 1
    super.map(f)
  }
}
