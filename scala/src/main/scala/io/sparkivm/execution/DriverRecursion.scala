package io.sparkivm.execution

import scala.collection.mutable

import org.apache.spark.SparkException
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan, Union, UnionLoop, UnionLoopRef}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.ivm.OnDriver

/**
 * A recursion stepped on the driver: the delta of a recursive CTE (D = S0 + B'(D), built by
 * [[io.sparkivm.planner.DeltaRules]]) has a few thousand rows per step where the CTE has
 * millions, and Spark's `UnionLoopExec` runs every step as a job or two that reads the tables
 * the recursive part joins (all of `edges`, for a reachability view) again. Here the seed is
 * computed once; the recursive part's other inputs (its subtrees that do not read the recursion)
 * are read once, held on the driver and hash-indexed by their join keys
 * ([[DriverEval.FixedRows]]); and each step joins the last step's rows with them there, with no
 * job, as semi-naive evaluation steps from the last step's rows alone (Abiteboul, Hull & Vianu
 * 1995, section 13.1).
 *
 * The steps are those of `UnionLoopExec` (Spark 4.1's recursive CTEs), with its limits:
 * `spark.sql.cteRecursionLevelLimit` and `spark.sql.cteRecursionRowLimit` fail the refresh with
 * Spark's own errors. Where a step cannot be evaluated here (an expression or operator
 * [[DriverEval]] does not interpret), or a step or all of them together outgrow the driver's
 * bound, the rest of the recursion is left to Spark, seeded by the last step's rows.
 */
object DriverRecursion {

  /** Spark's bounds on a recursion (-1: none): steps, and rows of all steps together. */
  final case class Limits(levels: Int, rows: Int)

  /**
   * `plan` with each recursion computed on the driver (its rows as a local relation) where the
   * other inputs of its recursive part have at most `maxFixedRows` rows in all: `materialize`
   * computes the seed, and `collect` reads those inputs (None past its bound). Past `maxRows` rows
   * in a step, or in all steps together, Spark steps on. `note` hears how each recursion was
   * stepped, and why. `plan` itself where it has no recursion.
   */
  def unroll(plan: LogicalPlan, maxRows: Int, maxFixedRows: Int, limits: Limits,
      materialize: LogicalPlan => LogicalPlan, collect: (LogicalPlan, Int) => Option[Seq[InternalRow]],
      note: String => Unit = _ => ()): LogicalPlan =
    if (maxFixedRows <= 0 || !plan.exists(_.isInstanceOf[UnionLoop])) plan
    else
      plan.transformUp {
        case u: UnionLoop if u.limit.isEmpty && u.maxDepth.isEmpty && !u.recursion.exists(_.isInstanceOf[UnionLoop]) =>
          var budget = maxFixedRows
          new Stepping(u, maxRows, limits, note).run(materialize(u.anchor),
            sub =>
              collect(sub, budget).map { rows =>
                budget -= rows.size
                rows
              })
      }

  private val What = "the recursive CTE's change"

  private final class Stepping(u: UnionLoop, maxRows: Int, limits: Limits, note: String => Unit) {
    def run(seed: LogicalPlan, collect: LogicalPlan => Option[Seq[InternalRow]]): LogicalPlan = {
      val seedRows = RefreshSteps.rowsOnDriver(seed).filter(_.size <= maxRows)
      if (seedRows.isEmpty) {
        note(s"$What stepped by Spark: its seed has more than spark.ivm.localMaxRows rows")
        return u.copy(anchor = seed)
      }
      if (seedRows.get.isEmpty) return RefreshSteps.onDriver(u.output, Nil)
      // The recursive part's largest subtrees that do not read the recursion: read once, if the
      // driver can evaluate a step over them at all (tried over no rows).
      def fixedBy(rowsOf: LogicalPlan => Option[Seq[InternalRow]]): Option[LogicalPlan] = {
        var fits = true
        val done = u.recursion.transformDown {
          case sub if fits && !reads(sub, u.id) && OnDriver.unapply(sub).isEmpty =>
            rowsOf(sub).map(LocalRelation(sub.output, _)).getOrElse { fits = false; sub }
        }
        Some(done).filter(_ => fits)
      }
      val evaluable = fixedBy(_ => Some(Nil)).exists(p => DriverEval.rows(at(p, Nil), maxRows).isDefined)
      if (!evaluable) {
        note(s"$What stepped by Spark: its recursive part computes what the driver does not evaluate")
        return u.copy(anchor = seed)
      }
      fixedBy(collect) match {
        case Some(recursion) => steps(seedRows.get, recursion)
        case None =>
          note(s"$What stepped by Spark: the inputs its recursive part joins have more than " +
            "spark.ivm.recursion.driverMaxRows rows")
          u.copy(anchor = seed)
      }
    }

    private def steps(seedRows: Seq[InternalRow], recursion: LogicalPlan): LogicalPlan = {
      val fixed = recursion.collect { case OnDriver(data) => data }
      val fixedRows = new DriverEval.FixedRows(fixed)
      val steps = mutable.ArrayBuffer[Seq[InternalRow]]()
      var last = seedRows
      var total = 0L
      var level = 1
      while (last.nonEmpty) {
        if (limits.levels != -1 && level > limits.levels) {
          throw new SparkException("RECURSION_LEVEL_LIMIT_EXCEEDED", Map("levelLimit" -> limits.levels.toString), null)
        }
        steps += last
        total += last.size
        if (limits.rows != -1 && total > limits.rows) {
          throw new SparkException("RECURSION_ROW_LIMIT_EXCEEDED", Map("rowLimit" -> limits.rows.toString), null)
        }
        // All steps together are held here as well: past the bound Spark steps on.
        val next = if (total > maxRows) None else DriverEval.rows(at(recursion, last), maxRows, fixedRows)
        next match {
          case Some(next) => last = next
          case None =>
            // Spark steps on from the last rows computed here (its own limits then count from them).
            val fresh = DataTypeUtils.toAttributes(DataTypeUtils.fromAttributes(u.output))
            val rest = u.copy(anchor = LocalRelation(fresh, last), recursion = recursion)
            note(s"$What stepped on the driver for ${steps.size - 1} steps, then by Spark: a step, or all " +
              "steps together, has more than spark.ivm.localMaxRows rows")
            return Union(RefreshSteps.onDriver(u.output, steps.dropRight(1).flatten.toSeq), rest)
        }
        level += 1
      }
      note(s"$What stepped on the driver: ${steps.size} steps, $total rows, joined with " +
        s"${fixed.map(_.size).sum} rows of its inputs read once")
      RefreshSteps.onDriver(u.output, steps.flatten.toSeq)
    }

    /** The recursive part over `rows` as the recursion's last step. */
    private def at(recursion: LogicalPlan, rows: Seq[InternalRow]): LogicalPlan = recursion.transformDown {
      case r: UnionLoopRef if r.loopId == u.id => LocalRelation(r.output, rows)
    }
  }

  private def reads(plan: LogicalPlan, loopId: Long): Boolean =
    plan.exists {
      case r: UnionLoopRef => r.loopId == loopId
      case _ => false
    }
}
