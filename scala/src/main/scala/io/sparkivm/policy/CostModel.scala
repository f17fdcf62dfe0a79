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
 * base tables' bytes) and this view's own past refreshes:
 *
 *  - full = the time of the recent recomputations of this view, scaled to today's y; before
 *    there is one, the time its CREATE took (a recomputation that also built the view); before
 *    that, a prior.
 *  - incremental = F + x * c. F, the fixed cost, is the cheapest recent incremental refresh. c is
 *    the median cost per byte of recent incremental refreshes whose change was large enough (1 MiB)
 *    and that took clearly longer than F; until there is one, `factor`
 *    times what a base-table byte costs a recomputation beyond its fixed part (a changed byte
 *    goes through the view's joins, the apply and the commit, a scanned one is often skipped).
 *
 * A recomputation is chosen if it is estimated to save at least `minGainMs`, and only for a
 * change of at least `minChangeBytes`: a smaller one costs an incremental refresh about its fixed
 * part, whatever the tables' size, while the per-byte prior above, drawn from a recomputation
 * that on small tables is mostly fixed cost too, would overstate it. Where no
 * recomputation has been measured since CREATE and the incremental refresh is estimated at
 * least half as dear, AUTO runs one, to measure it (Snowflake's and Databricks' AUTO modes
 * learn from their refreshes likewise). Estimates are in ms, the units a user measures.
 */
object CostModel {
  /** Fixed cost of a refresh with no history to go by (one small query). */
  val PriorFixedMs = 1000.0
  /** Scan rate of a recomputation with no history to go by (bytes per ms). */
  val PriorFullBytesPerMs = 100000.0
  /** The smallest change whose incremental refresh measures what a changed byte costs. */
  val MinMeasuredChangeBytes: Long = 1L << 20
  /** Entries of each kind the fits look at. */
  private val Recent = 20

  def decide(history: Seq[HistoryEntry], changeBytes: Long, tableBytes: Long, factor: Double,
      minGainMs: Long, minChangeBytes: Long): PolicyDecision = {
    val ok = history.filter(e => !e.failed && e.durationMs > 0)
    val recomputations = ok.filter(e => e.mode == "full" && e.tableBytes > 0).takeRight(Recent)
    val creates = ok.filter(e => e.mode == "create" && e.tableBytes > 0).takeRight(1)
    val incs = ok.filter(e => e.mode == "incremental" && e.changeBytes >= 0).takeRight(Recent)
    val y = math.max(1L, tableBytes).toDouble

    val measured = if (recomputations.nonEmpty) recomputations else creates
    val fullMs = if (measured.isEmpty) PriorFixedMs + y / PriorFullBytesPerMs
      else median(measured.map(e => e.durationMs * y / e.tableBytes))
    val fixed = if (incs.nonEmpty) incs.map(_.durationMs.toDouble).min else math.min(fullMs, PriorFixedMs)
    // What a base-table byte costs a recomputation beyond its fixed part (at most half of it).
    val scanned = math.max(fullMs / 2, fullMs - PriorFixedMs) / y
    val floor = factor * scanned
    // Only changes large enough for their expected cost to stand clear of the fixed part say
    // what a byte costs: a small change that took long was slow for another reason (a busy
    // machine, a cold start), and must not make every small change look dear.
    val slopes = incs.filter(e => e.changeBytes >= MinMeasuredChangeBytes && e.durationMs > 1.5 * fixed)
      .map(e => (e.durationMs - fixed) / e.changeBytes)
    val perByte = if (slopes.isEmpty) floor else median(slopes)
    val incBasis = if (slopes.isEmpty) {
      f"${incs.size} incremental refreshes, none large enough to measure a changed byte's cost: " +
        f"$factor%.0fx a base-table byte's in a recomputation"
    } else s"cost per byte from ${slopes.size} of ${incs.size} incremental refreshes"
    val inc = Estimate("incremental", math.round(fixed + changeBytes * perByte),
      s"${bytes(changeBytes)} of changes; $incBasis")
    val full = Estimate("full", math.round(fullMs), s"${bytes(tableBytes)} of base tables; " +
      (if (recomputations.nonEmpty) s"${recomputations.size} recomputations measured"
       else if (creates.nonEmpty) "as long as the view's CREATE took" else "no recomputation measured yet"))
    val sizable = changeBytes >= math.max(1L, minChangeBytes)
    val explore = sizable && recomputations.isEmpty && inc.ms * 2 >= full.ms
    val chosen = if (sizable && (full.ms + minGainMs < inc.ms || explore)) full else inc
    val other = if (chosen eq full) inc else full
    val why = if (!sizable && full.ms + minGainMs < inc.ms) {
      s"; the change is under ${bytes(minChangeBytes)}, where AUTO stays incremental"
    } else if (explore && full.ms + minGainMs >= inc.ms) {
      "; no recomputation measured since CREATE: this one measures it"
    } else ""
    PolicyDecision(chosen.mode, s"AUTO chose ${chosen.mode}: estimated ${seconds(chosen.ms)} " +
      s"against ${seconds(other.ms)} for ${other.mode} (${bytes(changeBytes)} of changes, " +
      s"${bytes(tableBytes)} of base tables)$why", Seq(inc, full))
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
