package io.sparkivm.policy

import io.sparkivm.catalog.HistoryEntry

/** The estimated time of one way to refresh, and what the estimate rests on. */
case class Estimate(mode: String, ms: Long, basis: String)

/** The mode a refresh runs in, why, and the candidates it was chosen from (empty if none were
 * weighed: the policy or the view fixed the mode). */
case class PolicyDecision(mode: String, reason: String, candidates: Seq[Estimate] = Nil) {
  def incremental: Boolean = mode == "incremental"
}

/**
 * The AUTO policy's choice between an incremental refresh and a recomputation, from the sizes
 * the Delta logs give without a Spark job (x: the bytes the change data feed will read; y: the
 * base tables' bytes, which a recomputation reads) and this view's own past refreshes:
 *
 *  - full(y) = F + y / R, incremental(x) = F + x * c.
 *  - F, the fixed cost of a refresh (pinning, planning, the commit), is taken to be the same for
 *    both: it is the cheapest recent incremental refresh, or before there is one what the view's
 *    recomputations (its CREATE is one) took beyond their scan. What differs with the data is
 *    reading the change against reading the tables, so on small tables, where both cost F,
 *    the refresh stays incremental.
 *  - R, the scan rate, is [[PriorFullBytesPerMs]] unless a recomputation of this view measured a
 *    faster one (one recomputation cannot tell a slow scan from a slow start, and small tables
 *    start slowly).
 *  - c is the median cost per byte of recent incremental refreshes whose change was large enough
 *    (expected to cost at least F) and took clearly longer than F; until there is one,
 *    `factor` / R (`factor`: how much more a changed byte costs an incremental refresh than a
 *    scanned byte costs a recomputation).
 *
 * A recomputation is chosen only if it is estimated to save at least `minGainMs`. Estimates are
 * in ms, so the choice is explained in the units a user measures.
 */
object CostModel {
  /** Fixed cost of a refresh with no history to go by (one small query). */
  val PriorFixedMs = 1000.0
  /** Scan rate of a recomputation with no faster one measured (bytes per ms). */
  val PriorFullBytesPerMs = 100000.0
  /** Entries of each kind the fits look at. */
  private val Recent = 20

  def decide(history: Seq[HistoryEntry], changeBytes: Long, tableBytes: Long, factor: Double,
      minGainMs: Long): PolicyDecision = {
    val ok = history.filter(e => !e.failed && e.durationMs > 0)
    val fulls = ok.filter(e => (e.mode == "full" || e.mode == "create") && e.tableBytes > 0).takeRight(Recent)
    val incs = ok.filter(e => e.mode == "incremental" && e.changeBytes >= 0).takeRight(Recent)

    // A recomputation's scan at the prior rate, or faster if it took less than that; the rest of
    // its time is fixed cost.
    val rate = if (fulls.isEmpty) PriorFullBytesPerMs
      else median(fulls.map(e => math.max(PriorFullBytesPerMs, e.tableBytes.toDouble / e.durationMs)))
    val fixed = if (incs.nonEmpty) incs.map(_.durationMs.toDouble).min
      else if (fulls.nonEmpty) median(fulls.map(e => math.max(0.0, e.durationMs - e.tableBytes / rate)))
      else PriorFixedMs
    val floor = factor / rate
    // Only changes large enough for their expected cost to stand clear of the fixed part say
    // what a byte costs: a small change that took long was slow for another reason (a busy
    // machine, a cold start), and must not make every small change look dear.
    val slopes = incs.filter(e => e.changeBytes * floor >= fixed && e.durationMs > 1.5 * fixed)
      .map(e => (e.durationMs - fixed) / e.changeBytes)
    val perByte = if (slopes.isEmpty) floor else median(slopes)
    val incBasis = if (slopes.isEmpty) {
      f"${incs.size} incremental refreshes, none large enough to measure a changed byte's cost: " +
        f"$factor%.1fx a scanned byte's"
    } else s"cost per byte from ${slopes.size} of ${incs.size} incremental refreshes"
    val inc = Estimate("incremental", math.round(fixed + changeBytes * perByte),
      s"${bytes(changeBytes)} of changes; $incBasis")
    val full = Estimate("full", math.round(fixed + tableBytes / rate),
      s"${bytes(tableBytes)} of base tables at ${bytes(math.round(rate * 1000))}/s" +
        (if (fulls.isEmpty) " (no recomputation measured yet)" else s" (${fulls.size} recomputations measured)"))
    val chosen = if (full.ms + minGainMs < inc.ms) full else inc
    val other = if (chosen eq full) inc else full
    PolicyDecision(chosen.mode, s"AUTO chose ${chosen.mode}: estimated ${seconds(chosen.ms)} " +
      s"against ${seconds(other.ms)} for ${other.mode} (${bytes(changeBytes)} of changes, " +
      s"${bytes(tableBytes)} of base tables)", Seq(inc, full))
  }

  private def median(xs: Seq[Double]): Double = {
    val s = xs.sorted
    if (s.size % 2 == 1) s(s.size / 2) else (s(s.size / 2 - 1) + s(s.size / 2)) / 2
  }

  def seconds(ms: Long): String = f"${ms / 1000.0}%.2f s"

  def bytes(n: Long): String =
    if (n < 0) "unknown bytes"
    else if (n < 1024) s"$n B"
    else if (n < (1L << 20)) f"${n / 1024.0}%.1f KiB"
    else if (n < (1L << 30)) f"${n / 1048576.0}%.1f MiB"
    else f"${n / 1073741824.0}%.2f GiB"
}
