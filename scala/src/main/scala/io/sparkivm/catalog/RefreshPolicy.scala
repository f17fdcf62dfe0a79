package io.sparkivm.catalog

import java.util.Locale

/**
 * How each refresh of a view chooses between incremental maintenance and recomputation
 * (`REFRESH POLICY ...`, in the syntax of Databricks' materialized views):
 *  - AUTO: incremental or full, whichever the cost model expects to be cheaper this time
 *    ([[io.sparkivm.policy.CostModel]]); full always if the query cannot be maintained;
 *  - INCREMENTAL: incremental when the query can be maintained, full otherwise;
 *  - INCREMENTAL STRICT: incremental or an error (CREATE fails with IVM_NOT_INCREMENTALIZABLE);
 *  - FULL: always recompute (the backing table then keeps no maintenance state).
 */
sealed abstract class RefreshPolicy(val sql: String) {

  /** The value stored in the view's `ivm.refreshPolicy` property. */
  def name: String = sql.toLowerCase(Locale.ROOT).replace(' ', '_')
  override def toString: String = sql
}

object RefreshPolicy {
  case object Auto extends RefreshPolicy("AUTO")
  case object Incremental extends RefreshPolicy("INCREMENTAL")
  case object IncrementalStrict extends RefreshPolicy("INCREMENTAL STRICT")
  case object Full extends RefreshPolicy("FULL")

  val all: Seq[RefreshPolicy] = Seq(Auto, Incremental, IncrementalStrict, Full)

  /** The policy of new views. */
  val Default: RefreshPolicy = Auto

  /** From its SQL form (`INCREMENTAL STRICT`) or stored name (`incremental_strict`). */
  def parse(value: String): Option[RefreshPolicy] = {
    val v = value.trim.replaceAll("[\\s_]+", " ")
    all.find(_.sql.equalsIgnoreCase(v))
  }

  /** The policy that the legacy `ivm.refresh` property's value stands for. */
  def ofMode(mode: RefreshMode): RefreshPolicy = mode match {
    case RefreshMode.Incremental => Incremental
    case RefreshMode.Full => Full
  }
}
