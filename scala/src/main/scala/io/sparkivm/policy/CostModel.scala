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
 * base tables' bytes) and what this view's own refreshes took, in both modes:
 *
 *  - full = the time of the recent recomputations of this view, scaled to today's y; before
 *    there is one, the time its CREATE took (a recomputation that also built the view); before
 *    that, a prior.
 *  - incremental = F + c * x, fitted to the view's recent incremental refreshes (their change
 *    bytes and times) by Theil and Sen's estimator: c the median slope between refreshes whose
 *    changes differ at least twofold, F the median of what remains; robust to the odd slow
 *    refresh (a cold start). A change beyond the largest measured is charged the prior per
 *    byte beyond it. Before any incremental refresh of the view is measured, the prior:
 *    F = a small query, c = `factor` times what a base-table byte costs a recomputation beyond
 *    its fixed part (a changed byte goes through the view's joins, the apply and the commit).
 *
 * An incremental attempt AUTO stopped ([[RefreshPolicies.stopAfterMs]]) counts as an incremental
 * refresh as long as it ran, and the recomputation after it as one without that time.
 *
 * Measured estimates decide: a recomputation runs when it is estimated at least 10% and
 * `minGainMs` cheaper. The prior alone does not overrule a small change (under `minChangeBytes`),
 * whose first incremental refresh is tried and measured, and the reason says so; but a change
 * as large as the tables (every row updated) is recomputed from the first. Where no recomputation has been measured since CREATE and the incremental
 * refresh is estimated at least half as dear (for a change of `minChangeBytes`; 80% for any),
 * AUTO runs one, to measure it (Snowflake's and
 * Databricks' AUTO modes learn from their refreshes likewise). Estimates are in ms.
 */
object CostModel {

  /** Fixed cost of a refresh with no history to go by (one small query). */
  val PriorFixedMs = 1000.0

  /** Scan rate of a recomputation with no history to go by (bytes per ms). */
  val PriorFullBytesPerMs = 100000.0

  /** Entries of each kind the fits look at. */
  private val Recent = 20

  /** The smallest change that counts as one of the whole tables. */
  private val WholeMinBytes = 64L << 10

  /** How much cheaper a recomputation must be estimated, relatively, to be chosen. */
  private val MinRelativeGain = 1.1

  def decide(history: Seq[HistoryEntry], changeBytes: Long, tableBytes: Long, factor: Double,
      minGainMs: Long, minChangeBytes: Long): PolicyDecision = {
    val ok = history.filter(e => !e.failed && e.durationMs > 0)
    // A recomputation that followed a stopped incremental attempt took its time less the attempt's,
    // and the attempt counts as an incremental refresh at least that long for its change.
    val recomputations = ok.filter(e => e.mode == "full" && e.tableBytes > 0).takeRight(Recent)
      .map(e => e.copy(durationMs = math.max(1L, e.durationMs - e.stoppedMs.getOrElse(0L))))
    val creates = ok.filter(e => e.mode == "create" && e.tableBytes > 0).takeRight(1)
    val incs = ok.flatMap { e =>
      if (e.mode == "incremental") Some(e)
      else e.stoppedMs.map(ms => e.copy(mode = "incremental", durationMs = ms))
    }.filter(_.changeBytes >= 0).takeRight(Recent)
    val y = math.max(1L, tableBytes).toDouble
    val x = math.max(0L, changeBytes).toDouble

    val measured = if (recomputations.nonEmpty) recomputations else creates
    val fullMs = if (measured.isEmpty) PriorFixedMs + y / PriorFullBytesPerMs
    else median(measured.map(e => e.durationMs * y / e.tableBytes))
    // What a base-table byte costs a recomputation beyond its fixed part (at most half of it), and
    // at most the prior scan rate's: a recomputation of small tables is nearly all fixed cost.
    val scanned = math.min(math.max(fullMs / 2, fullMs - PriorFixedMs) / y, 1.0 / PriorFullBytesPerMs)
    val priorPerByte = factor * scanned
    val (incMs, incBasis) = if (incs.isEmpty) {
      (math.min(fullMs, PriorFixedMs) + x * priorPerByte,
        f"no incremental refresh of this view measured yet: prior of $factor%.0fx a base-table byte's " +
          "cost in a recomputation per changed byte")
    } else {
      val points = incs.map(e => (e.changeBytes.toDouble, e.durationMs.toDouble))
      val slopes = for {
        (a, i) <- points.zipWithIndex; (b, j) <- points.zipWithIndex
        if i < j && math.max(a._1, b._1) >= 2 * math.max(1.0, math.min(a._1, b._1))
      } yield (b._2 - a._2) / (b._1 - a._1)
      val slope = if (slopes.isEmpty) 0.0 else math.max(0.0, median(slopes))
      val fixed = math.max(0.0, median(points.map { case (px, d) => d - slope * px }))
      val largest = points.map(_._1).max
      val beyond = if (slopes.isEmpty) math.max(0.0, x - largest) * priorPerByte else 0.0
      (fixed + slope * x + beyond,
        s"fitted to ${incs.size} incremental refreshes of this view" +
          (if (beyond > 0) s" (up to ${bytes(largest.toLong)} of changes; the prior per byte beyond)" else ""))
    }
    val inc = Estimate("incremental", math.round(incMs), s"${bytes(changeBytes)} of changes; $incBasis")
    val full = Estimate("full", math.round(fullMs),
      s"${bytes(tableBytes)} of base tables; " +
        (if (recomputations.nonEmpty) s"${recomputations.size} recomputations measured"
         else if (creates.nonEmpty) "as long as the view's CREATE took" else "no recomputation measured yet"))
    val cheaper = full.ms * MinRelativeGain < inc.ms && full.ms + minGainMs <= inc.ms
    // The prior alone does not send a small change to a recomputation: its incremental refresh is
    // tried, and measured.
    val untried = incs.isEmpty && changeBytes < math.max(1L, minChangeBytes)
    // A recomputation is measured once, where the incremental refresh may be the dearer: a change
    // large enough to weigh, estimated at least half as dear, or any change estimated at least 80%
    // as dear (a CREATE, which the estimate of `full` rests on, takes longer than a recomputation).
    val sizable = changeBytes >= math.max(1L, minChangeBytes)
    val explore = !untried && recomputations.isEmpty &&
      (sizable && inc.ms * 2 >= full.ms || inc.ms * 5 >= full.ms * 4)
    // Before any incremental refresh is measured, a change as large as the tables is recomputed:
    // applying it reads at least as much as a recomputation, and more besides.
    // (Below WholeMinBytes both modes cost their fixed part, and file overheads blur the ratio.)
    val whole = incs.isEmpty && changeBytes >= math.max(tableBytes, WholeMinBytes)
    val chosen = if (whole || !untried && (cheaper || explore)) full else inc
    val other = if (chosen eq full) inc else full
    val why = if (untried && !whole && cheaper) {
      s"; no incremental refresh of this view has been measured, and the change is under " +
        s"${bytes(minChangeBytes)}: AUTO tries one rather than trust the prior"
    } else if (chosen eq full) {
      if (cheaper) ""
      else if (whole) "; the change is as large as the base tables, which a recomputation reads"
      else "; no recomputation measured since CREATE: this one measures it"
    } else if (full.ms < inc.ms) {
      s"; within 10% or ${minGainMs} ms of each other, AUTO stays incremental"
    } else ""
    PolicyDecision(chosen.mode,
      s"AUTO chose ${chosen.mode}: estimated ${seconds(chosen.ms)} " +
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
