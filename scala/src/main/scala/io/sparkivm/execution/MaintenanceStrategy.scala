package io.sparkivm.execution

import java.util.ServiceLoader

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import io.sparkivm.catalog.{EpsilonState, RefreshRecord, ViewMetadata}
import io.sparkivm.planner.DeltaRules
import org.apache.spark.sql.SparkSession

/** What a strategy sees of one refresh (or build): the view, its query, and its readers. */
case class RefreshContext(spark: SparkSession, meta: ViewMetadata, analyzed: AnalyzedView,
    last: RefreshRecord, reader: PinnedReader, attempt: String)

/**
 * How a view is maintained. The refresh pipeline ([[RefreshPipeline]]: pin, changes, plan,
 * apply, commit) is the same for every view; a strategy plugs into *plan* by giving the delta
 * rules whose branches make the view's delta, and owns whatever state it keeps between
 * refreshes, which it writes before the view's commit and which that commit records.
 */
trait MaintenanceStrategy {

  /** In words, for reports, DESCRIBE and EXPLAIN. */
  def name: String

  /** Builds the strategy's state from Post (CREATE, REFRESH ... FULL, a changed eps). */
  def build(ctx: RefreshContext): Option[EpsilonState] = None

  /** Starts one incremental refresh. */
  def begin(ctx: RefreshContext): StrategyRefresh

  /** True if the state recorded with the last refresh cannot be advanced (it must be rebuilt). */
  def stale(meta: ViewMetadata, last: RefreshRecord): Boolean = false

  /**
   * True if every query of its incremental refresh that reads tables runs through the refresh's
   * [[RefreshSteps]] or its apply, which size each query for code generation ([[QueryCodegen]]);
   * a strategy that runs queries of its own over large tables has them generate code throughout.
   */
  def sizesQueries: Boolean = false
}

/** One incremental refresh of a strategy. */
trait StrategyRefresh {

  /** The delta rules of this refresh (the view's delta is the union of their branches). */
  def rules: DeltaRules

  /** Writes the state for the next refresh, after the delta; returns what the commit records. */
  def advance(notes: mutable.Buffer[String]): Option[EpsilonState] = None

  /** What the strategy decided, in words (FK graph, guards, IVM^eps steps). */
  def notes: Seq[String] = rules.fk.notes
}

/**
 * Counting IVM (Svingos et al. 2023, sections 1-2): the delta rules over the whole plan, with
 * foreign-key pruning of join blocks where keys are declared (section 3, Algorithm 1) and the
 * FK-Guard and integrity checks of each refresh. No state beyond the backing table.
 */
object CountingStrategy extends MaintenanceStrategy {
  def name: String = "counting IVM"
  override def sizesQueries: Boolean = true
  def begin(ctx: RefreshContext): StrategyRefresh = new StrategyRefresh {
    val rules: DeltaRules = ctx.reader.rules
  }
}

/** A strategy's state was written by another refresh of the same view at once: the refresh retries. */
class StateConflictException(message: String) extends RuntimeException(message)

/**
 * Offers a strategy for the views it can maintain better than counting IVM (IVM^eps for a
 * triangle). Providers are found by Java's ServiceLoader, listed in
 * `META-INF/services/io.sparkivm.execution.StrategyProvider` as Spark lists its data sources, so
 * that the pipeline depends on no strategy built on it.
 */
trait StrategyProvider {
  def strategy(spark: SparkSession, analyzed: AnalyzedView, incremental: Boolean): Option[MaintenanceStrategy]
}

object MaintenanceStrategy {
  private[sparkivm] lazy val providers: Seq[StrategyProvider] =
    ServiceLoader.load(classOf[StrategyProvider], getClass.getClassLoader).asScala.toSeq.sortBy(_.getClass.getName)

  /** The strategy of a view: the first a provider offers (IVM^eps for a triangle), else counting. */
  def of(spark: SparkSession, analyzed: AnalyzedView, incremental: Boolean): MaintenanceStrategy =
    // A strategy's state follows the tables' changes; only the delta rules move a view's time filters.
    if (analyzed.instant.isDefined) CountingStrategy
    else providers.iterator.flatMap(_.strategy(spark, analyzed, incremental)).nextOption().getOrElse(CountingStrategy)
}
