package io.sparkivm.policy

import io.sparkivm.catalog.{RefreshMode, RefreshPolicy, ViewMetadata}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.SparkSession

/** How a refresh's mode follows from the request, the view and its [[RefreshPolicy]]. */
object RefreshPolicies {

  /**
   * The mode when it is not the policy's to choose: REFRESH ... FULL, a view laid out for full
   * refreshes, or maintenance state that must be rebuilt (which an INCREMENTAL STRICT view
   * refuses to do by itself).
   */
  def fixedMode(meta: ViewMetadata, full: Boolean, stale: => Boolean): Option[PolicyDecision] =
    if (full) Some(PolicyDecision("full", "REFRESH ... FULL asked for a recomputation"))
    else if (meta.mode == RefreshMode.Full) Some(PolicyDecision("full",
        meta.fullBecause
          .map(w => s"the query cannot be maintained incrementally: $w")
          .getOrElse("REFRESH POLICY FULL recomputes the view on every refresh")))
    else if (stale) {
      val why = "the view's maintenance state was built for other settings (ivm.epsilon) and must be rebuilt"
      if (meta.policy == RefreshPolicy.IncrementalStrict) {
        throw IvmErrors.refreshNotIncremental(meta.viewName, why)
      }
      Some(PolicyDecision("full", why))
    } else None

  /** The mode of a refresh with changes to apply, by the view's policy. */
  def choose(spark: SparkSession, meta: ViewMetadata, changeBytes: Long, tableBytes: => Long): PolicyDecision =
    meta.policy match {
      case RefreshPolicy.Auto =>
        CostModel.decide(meta.history, changeBytes, tableBytes, IvmConf.RefreshPolicyAutoCostFactor.get(spark),
          IvmConf.RefreshPolicyAutoMinGainMs.get(spark), IvmConf.RefreshPolicyAutoMinChangeBytes.get(spark))
      case RefreshPolicy.Full => PolicyDecision("full", "REFRESH POLICY FULL recomputes the view on every refresh")
      case p => PolicyDecision("incremental", s"REFRESH POLICY $p")
    }

  /**
   * How long an incremental refresh AUTO chose may compute its changed rows before it is
   * stopped and the view recomputed instead: the estimated recomputation times
   * `spark.ivm.refreshPolicy.autoStopFactor`, and at least `autoStopMinMs`. None where AUTO did
   * not weigh the two (another policy, or a mode fixed by the request) or the setting is 0.
   */
  def stopAfterMs(spark: SparkSession, decision: PolicyDecision): Option[Long] = {
    val factor = IvmConf.RefreshPolicyAutoStopFactor.get(spark)
    if (!decision.incremental || factor <= 0) None
    else decision.candidates.find(_.mode == "full").map { full =>
      math.max(math.round(factor * full.ms), IvmConf.RefreshPolicyAutoStopMinMs.get(spark))
    }
  }

  /** The policy of a view created without REFRESH POLICY (nor the legacy `ivm.refresh`). */
  def default(spark: SparkSession): RefreshPolicy = RefreshPolicy.parse(IvmConf.RefreshPolicyDefault.get(spark))
    .getOrElse(RefreshPolicy.Default)
}
