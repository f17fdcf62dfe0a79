package io.sparkivm.planner

import org.apache.spark.sql.catalyst.expressions.RowOrdering
import org.apache.spark.sql.types.{ArrayType, DataType, MapType, StructType}

/** What Spark can do with values of a column's type that keeping a view's rows relies on. */
object ColumnTypes {

  /**
   * The part of `t` whose values Spark cannot compare for equality in a MERGE's condition (a
   * MAP: Spark's equality leaves maps out) or cannot order (VARIANT, and spatial types where
   * Spark has them), at any depth; None if every part compares.
   */
  def uncomparable(t: DataType): Option[DataType] = t match {
    case _: MapType => Some(t)
    case a: ArrayType => uncomparable(a.elementType)
    case s: StructType => s.fields.iterator.flatMap(f => uncomparable(f.dataType)).nextOption()
    case _ if !RowOrdering.isOrderable(t) => Some(t)
    case _ => None
  }

  /** True if Spark can group by values of `t` (it sorts a MAP's entries to group by it). */
  def groupable(t: DataType): Boolean = t match {
    case m: MapType => groupable(m.keyType) && groupable(m.valueType)
    case a: ArrayType => groupable(a.elementType)
    case s: StructType => s.fields.forall(f => groupable(f.dataType))
    case _ => RowOrdering.isOrderable(t)
  }
}
