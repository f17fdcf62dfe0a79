package io.sparkivm.commands

import java.util.{Locale, UUID}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Window}

/**
 * Helper views: a view whose query the engine cannot maintain as one stage is maintained
 * through materialized views of parts of it (each a view of its own, refreshed before it), and
 * the user's query with those parts replaced by reads of them, which the rest of the engine
 * maintains as a view over views (through the helpers' change feeds). Splitting a view over
 * several stages of state is how incremental engines maintain such plans (Materialize and DBSP
 * keep an arrangement per operator); here each stage is a Delta table with its own exactly-once
 * commits. Two kinds, each split textually on the spans Spark's parser records (so comments and
 * strings in the query are kept as written):
 *  - a recursive CTE the view joins or computes over ([[RecursionHelpers]]);
 *  - the rows under a window function without PARTITION BY below the top of the query
 *    ([[WindowHelpers]]).
 */
object HelperViews {

  /** The name prefixes of helper views, by kind (SHOW MATERIALIZED VIEWS leaves them out). */
  val RecursionPrefix = "__ivm_rec_"
  val WindowPrefix = "__ivm_win_"

  /** One helper: the part of the query it holds (a CTE's or a subquery's name), its name, and its query. */
  case class Helper(part: String, name: TableIdentifier, query: String)

  /** The helpers of a view, and the query that reads them in place of the parts they hold. */
  case class Split(helpers: Seq[Helper], maintainedQuery: String)

  /** True if the analyzed plan has a part a helper may hold: a recursion, or a window without PARTITION BY. */
  def mayHelp(plan: LogicalPlan): Boolean = RecursionHelpers.recurses(plan) || plan.exists {
    case w: Window => w.partitionSpec.isEmpty
    case _ => false
  }

  /** The split of `queryText` for view `view`, or None where no part of it is one a helper holds. */
  def split(spark: SparkSession, view: TableIdentifier, queryText: String, plan: LogicalPlan): Option[Split] =
    (if (RecursionHelpers.recurses(plan)) RecursionHelpers.split(spark, view, queryText) else None)
      .orElse(WindowHelpers.split(spark, view, queryText))

  /** True if a name is a helper's (by its prefix; [[io.sparkivm.catalog.ViewMetadata.helperOf]] says whose). */
  def isHelperName(table: String): Boolean = {
    val lower = table.toLowerCase(Locale.ROOT)
    lower.startsWith(RecursionPrefix) || lower.startsWith(WindowPrefix)
  }

  /** How the names of a view's helpers begin, by kind (helpers of other views may begin so too). */
  def prefixesOf(view: TableIdentifier): Seq[String] =
    Seq(RecursionPrefix, WindowPrefix).map(p => s"$p${safe(view.table)}_")

  /** True if a helper holds the rows under a window ([[WindowHelpers]]), by its name. */
  def holdsWindowRows(helper: TableIdentifier): Boolean = helper.table.toLowerCase(Locale.ROOT).startsWith(WindowPrefix)

  /** What a helper holds, for DESCRIBE and EXPLAIN. */
  def describe(helper: TableIdentifier): String =
    if (holdsWindowRows(helper)) {
      "the rows under a window function without PARTITION BY, maintained by their changes; the window " +
        "is computed again over them before and after each refresh"
    } else "a recursive CTE of the query, kept with its counts and maintained by counting"

  /** A fresh suffix for the helpers one CREATE makes. */
  private[commands] def suffix(): String = UUID.randomUUID().toString.take(8)

  /** `<prefix><view>_<part>_<suffix>`, in the view's database ([a-z0-9_] only, as metastores ask). */
  private[commands] def name(prefix: String, view: TableIdentifier, part: String, suffix: String): TableIdentifier =
    view.copy(table = s"$prefix${safe(view.table)}_${safe(part)}_$suffix")

  /** `text` up to `end`, with each span (start, stop inclusive) replaced by its text. */
  private[commands] def substitute(text: String, replaced: Seq[(String, (Int, Int), String)], end: Int): String = {
    val out = new StringBuilder
    var at = 0
    replaced.sortBy(_._2._1).filter(_._2._2 < end).foreach { case (_, (start, stop), by) =>
      out ++= text.substring(at, start) ++= by
      at = stop + 1
    }
    out ++= text.substring(at, end)
    out.toString
  }

  /** The plan's span in `text`, in chars: the parser counts code points (a character outside the
   * Basic Multilingual Plane, an emoji in a literal, is two chars). */
  private[commands] def span(text: String, plan: LogicalPlan): Option[(Int, Int)] =
    for (start <- plan.origin.startIndex; stop <- plan.origin.stopIndex)
      yield (text.offsetByCodePoints(0, start), text.offsetByCodePoints(0, stop + 1) - 1)

  private[commands] def quote(name: String): String = "`" + name.replace("`", "``") + "`"

  private def safe(s: String) =
    s.toLowerCase(Locale.ROOT).map(c => if (c.isLetterOrDigit && c < 128) c else '_').take(40)
}
