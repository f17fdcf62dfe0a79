package io.sparkivm.epsilon

import scala.collection.mutable

import io.sparkivm.catalog.{EpsilonState, RefreshRecord, ViewMetadata}
import io.sparkivm.conf.IvmConf
import io.sparkivm.execution.{
  AnalyzedView, MaintenanceStrategy, PartitionedState, PinnedReader, PlanningConf, RefreshContext, StrategyProvider,
  StrategyRefresh
}
import io.sparkivm.planner.{DeltaRules, TriangleQuery}
import org.apache.spark.sql.SparkSession

/**
 * IVM^eps for a triangle view (Kara, Nikolic, Ngo, Olteanu, Zhang: "Maintaining Triangle
 * Queries under Updates", heavy/light partitions and auxiliary views): the triangle block's
 * delta comes from the state as of the last refresh; the rest of the view (aggregates above the
 * block) is maintained by the counting rules. The state is written before the view's commit,
 * which records its versions ([[TriangleStateTables]]).
 */
class EpsilonStrategy(q: TriangleQuery) extends MaintenanceStrategy {
  def name: String = s"IVM^eps triangle (${q.describe})"

  def query: TriangleQuery = q

  override def build(ctx: RefreshContext): Option[EpsilonState] = {
    val tables = new TriangleStateTables(ctx.spark, ctx.meta, ctx.attempt)
    val engine = new TriangleMaintenance(ctx.spark, q, ctx.reader.rules, PlanningConf.probe(ctx.spark).maxKeys)
    Some(TriangleViews.build(ctx.spark, engine, tables, ctx.meta.eps))
  }

  /** No state for the view's eps (eps changed, or a killed ALTER): the refresh rebuilds it. */
  override def stale(meta: ViewMetadata, last: RefreshRecord): Boolean = !last.epsilon.exists(_.eps == meta.eps)

  def begin(ctx: RefreshContext): StrategyRefresh = {
    val refresh = new TriangleRefresh(ctx.spark, ctx.meta, q, ctx.reader, ctx.last.epsilon.get, ctx.attempt)
    new StrategyRefresh {
      val rules: DeltaRules = refresh.rules
      override def advance(notes: mutable.Buffer[String]): Option[EpsilonState] = Some(refresh.advance(notes))
    }
  }
}

object EpsilonStrategy {

  /** The IVM^eps strategy of a view whose first join block is a triangle, if it is maintained so. */
  def of(spark: SparkSession, analyzed: AnalyzedView, incremental: Boolean): Option[EpsilonStrategy] =
    TriangleViews.query(spark, analyzed, incremental).map(new EpsilonStrategy(_))
}

/** Offers IVM^eps to the pipeline ([[MaintenanceStrategy.of]] finds it by ServiceLoader). */
class EpsilonStrategyProvider extends StrategyProvider {
  def strategy(spark: SparkSession, analyzed: AnalyzedView, incremental: Boolean): Option[MaintenanceStrategy] =
    EpsilonStrategy.of(spark, analyzed, incremental)
}

/**
 * One incremental refresh of a triangle view: the block's delta from the state as of the last
 * refresh (after restoring state tables a failed refresh left ahead), then the next state.
 */
class TriangleRefresh(spark: SparkSession, meta: ViewMetadata, q: TriangleQuery, reader: PinnedReader,
    state: EpsilonState, attempt: String) {
  private val tables = new TriangleStateTables(spark, meta, attempt)
  private val base = tables.restore(state)
  private val engine = new TriangleMaintenance(spark, q, reader.rules, PlanningConf.probe(spark).maxKeys,
    Some(PartitionedState.Owner(meta.backing, tables.instance)).filter(_ => IvmConf.EpsilonResidentState.get(spark)))
  // Read once: the delta and the next state both split rows by the heavy keys as of `state`.
  private val heavy = TriangleViews.heavySets(state, tables, state.versions, engine)
  private val branch = TriangleViews.branch(spark, q, engine,
    TriangleViews.blockDelta(engine, tables, state)(heavy), reader.rules.multiplicity)

  /** The view's delta rules, with the triangle block's branch computed by IVM^eps. */
  def rules: DeltaRules = reader.rulesWith(p => if (p eq q.root) Some(Seq(branch)) else None)

  /** Writes the next state (see [[TriangleViews.advance]]); `notes` gets what was done. */
  def advance(notes: mutable.Buffer[String]): EpsilonState = {
    notes ++= engine.notes
    TriangleViews.advance(spark, engine, tables, state, base, notes)(heavy)
  }
}
