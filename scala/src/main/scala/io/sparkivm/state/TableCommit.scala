package io.sparkivm.state

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.StructType

/**
 * A commit of spark-ivm's own to a Delta table (a view's backing table), published by the apply
 * so that each arrangement of the table moves itself forward ([[Arrangement.committed]]),
 * instead of the apply moving each store by hand.
 *
 * @param path the table's data path
 * @param id the table's Delta id
 * @param from the version the commit read
 * @param to the version it committed
 * @param replacesAll every row of `from` was removed (a full refresh, a view without keys)
 * @param keyColumns the table's key columns, by name
 * @param removedKeys the keys (rows of `keyColumns`) whose rows were removed, if known here
 * @param schema the table's columns, of the rows in `added`
 * @param added the rows added, each with the file and row index it was written at if known;
 *              None if they are not known on the driver
 */
final case class TableCommit(path: String, id: String, from: Long, to: Long, replacesAll: Boolean,
    keyColumns: Seq[String], removedKeys: Option[Set[InternalRow]], schema: StructType,
    added: Option[Seq[(InternalRow, Option[(String, Long)])]]) {

  /** True if the commit is the one right after `version` (nothing else committed in between). */
  def follows(version: Long): Boolean = from == version && to == from + 1
}
