package io.sparkivm.execution

import io.sparkivm.changes.{DriverTableRead, KnownFiles}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import io.sparkivm.planner.{RowsShape, TopRows, ViewMaintenance}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum
import org.apache.spark.sql.catalyst.expressions.{
  Alias, And, Ascending, Attribute, Coalesce, Descending, EqualNullSafe, EqualTo, Expression, GenericInternalRow,
  GreaterThan, If, InterpretedOrdering, IsNotNull, IsNull, LessThan, Literal, NamedExpression, Not, NullsFirst,
  NullsLast, Or, SortOrder
}
import org.apache.spark.sql.catalyst.plans.LeftAnti
import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, Filter, GlobalLimit, Join, JoinHint, LocalLimit, LogicalPlan, Project, Sort, Union
}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.delta.Snapshot
import org.apache.spark.sql.execution.LogicalRDD
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.ivm.{DriverRows, SparkInternals}
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * The bounded state of a top-k view (`ORDER BY ... LIMIT k OFFSET o`). Its backing table keeps
 * every row of the query under the ORDER BY, maintained like any view's, and marks
 * ([[ViewMaintenance.TopColumn]]) a prefix of them in the view's order: every row at or above
 * the lowest marked one, at least k + o of them where the view has that many, at most
 * k + o + 2B (B = `spark.ivm.topRows.buffer`). The catalog view reads the marked rows alone, and
 * they lie in files of their own, so Delta's data skipping reads those few files, not the table.
 * This is the bounded arrangement Materialize's TopK keeps per group (its top rows and a buffer
 * below them), for the one group of a global top-k, kept in the view's own table so that it is
 * exactly-once with the rows and readable by a new application.
 *
 * A refresh moves the marks with its changed rows alone: a changed row is marked if it ranks at
 * or above the lowest marked row b, since every unmarked row ranks below b. Only when deletes
 * leave fewer than k + o marked rows (the buffer drained) does it refill: one scan of the table
 * after the change finds its first k + o + B rows, which become the marks. When inserts above b
 * leave more than k + o + 2B, it trims back to k + o + B, unmarking the lowest. A row whose mark
 * moves without a change of its own is rewritten in the refresh's commit with the changed rows,
 * so no read ever sees too short a prefix.
 */
object TopMarks {
  import ViewMaintenance.{CountColumn, ExistedColumn, HavingColumn, TopColumn}

  /** Marked rows: at least `least` (where the view has them), refilled or trimmed to `target`. */
  private case class Bounds(least: Int, target: Int, most: Int)

  private def bounds(spark: SparkSession, top: TopRows): Bounds = {
    val least = top.reach.get
    val buffer = math.min(IvmConf.TopRowsBuffer.get(spark), TopRows.MaxMarked)
    Bounds(least, least + buffer, least + 2 * buffer)
  }

  /**
   * The rows of a full write (CREATE, a full refresh) with their marks, laid out as `layout`
   * says with the marked rows in a file of their own; and what to call once they are written.
   */
  def laidOut(spark: SparkSession, maintenance: ViewMaintenance, rows: DataFrame,
      layout: Option[BackingLayout]): (DataFrame, () => Unit) = maintenance.markedTop match {
    case None => (BackingLayout.full(rows, layout), () => ())
    case Some(top) =>
      val b = bounds(spark, top)
      // The query runs once: its rows are held (a local checkpoint, which every later plan reads;
      // a cache was not found by the write's plan, which ran the query again), ranked, then written.
      val held = rows.localCheckpoint(eager = true)
      val plan = SparkInternals.analyzed(held)
      val order = ViewOrder(maintenance, top)
      val shown = Filter(visible(maintenance, plan), plan)
      val first = collect(spark, firstRows(shown, order, b.target))
      val mark = markColumn(maintenance, order, plan, boundary(first, b.target, order, shown.output))
      val marked = SparkInternals.dataFrame(spark, Project(plan.output :+ mark, plan))
      val topRows = marked.where(col(TopColumn) === 1).repartition(1)
      val rest = BackingLayout.full(marked.where(col(TopColumn) === 0), layout)
      (topRows.unionByName(rest), () => plan.collectFirst { case r: LogicalRDD => r.rdd.unpersist(blocking = false) })
  }

  /**
   * A refresh's changed rows (`rows`: complete new rows of the changed keys with
   * [[ViewMaintenance.ExistedColumn]] last, see `RewriteCommit.apply`) with their marks, and the
   * rows of other keys whose mark moves, at their places in the table; and what was done, for
   * the refresh's notes. `backing` reads the backing table at `snapshot`, the version the
   * refresh read.
   */
  def moved(spark: SparkSession, maintenance: ViewMaintenance, snapshot: => Snapshot, backing: () => LogicalPlan,
      rows: LogicalPlan, steps: RefreshSteps, codegen: QueryCodegen): (LogicalPlan, Option[String]) =
    maintenance.markedTop match {
      case None => (rows, None)
      case Some(top) => move(spark, maintenance, top, snapshot, backing, rows, steps, codegen)
    }

  private def move(spark: SparkSession, maintenance: ViewMaintenance, top: TopRows, snapshot: => Snapshot,
      backing: () => LogicalPlan, rows: LogicalPlan, steps: RefreshSteps,
      codegen: QueryCodegen): (LogicalPlan, Option[String]) = {
    val b = bounds(spark, top)
    val order = ViewOrder(maintenance, top)
    def keysOf(l: LogicalPlan, r: LogicalPlan): Option[Expression] =
      maintenance.keyNames.map(k => EqualNullSafe(column(l, k), column(r, k)): Expression).reduceOption(And)
    def others(l: LogicalPlan): LogicalPlan = Join(l, rows, LeftAnti, keysOf(l, rows), JoinHint.NONE)
    def weights(plan: LogicalPlan): Long = {
      val sum = Alias(Coalesce(Seq(Sum(weight(maintenance, plan)).toAggregateExpression(), Literal(0L))), "w")()
      collect(spark, Aggregate(Nil, Seq(sum), plan)).head.getLong(0)
    }
    // The marked rows before the refresh (in their own few files, read here where they can be
    // without a job), and the lowest of them.
    def isMarked(plan: LogicalPlan) =
      Filter(And(visible(maintenance, plan), EqualTo(column(plan, TopColumn), Literal(1))), plan)
    val held = {
      val s = snapshot
      val columns = DataTypeUtils.toAttributes(s.metadata.schema)
      val files = KnownFiles.matching(s.deltaLog, s, Seq(EqualTo(column(columns, TopColumn), Literal(1))))
      DriverTableRead.rows(spark, s, files).map(rs => isMarked(onDriver(columns, rs)))
    }
    lazy val read = backing()
    val marked = onDriver(held.getOrElse(read).output, collect(spark, held.getOrElse(isMarked(read))))
    val lowest = RefreshSteps.rowsOnDriver(marked).get.maxOption(order.ordering(marked.output))
      .map(order.values(marked.output, _))
    // The marked rows of unchanged keys, which stay marked unless trimmed.
    val kept = onDriver(marked.output, collect(spark, others(marked)))
    val fresh = Filter(visible(maintenance, rows), rows)
    def fromRows(v: Seq[Any]) = Filter(order.atOrAbove(rows, v), fresh)
    val reached = lowest.map(v => weights(kept) + weights(fromRows(v))).getOrElse(0L)

    val out = rows.output.filterNot(_.name == ExistedColumn)
    val existed = rows.output.filter(_.name == ExistedColumn)
    // Rows of unchanged keys, whose mark becomes `to`, as rows of `rows`' columns with the mark.
    def flipped(plan: LogicalPlan, rs: Seq[InternalRow], to: Int): Seq[InternalRow] = {
      val from = out.map(a => plan.output.indexWhere(_.name == a.name))
      rs.map { r =>
        new GenericInternalRow((out.zip(from).map { case (a, i) => if (i < 0) null else r.get(i, a.dataType) } ++
            Seq(to) ++ existed.map(_ => true)).toArray): InternalRow
      }
    }
    val (to, flips, note) =
      if (lowest.isEmpty || reached < b.least) {
        // Refill: the first rows of the table after the change. Its unchanged rows among them
        // that were not marked become marked.
        val table = backing()
        val unchanged = Filter(visible(maintenance, table), others(table))
        val tag = "__ivm_unchanged"
        // The rows of unchanged keys with their marks, and the changed rows, alike.
        val candidates = Union(
          Project(like(unchanged, out) ++ Seq(column(table, TopColumn), Alias(Literal(true), tag)()), unchanged),
          Project(out ++ Seq(Alias(Literal(1), TopColumn)(), Alias(Literal(false), tag)()), fresh))
        val first = codegen(table)(collect(spark, firstRows(candidates, order, b.target)))
        val to = boundary(first, b.target, order, candidates.output)
        val at = candidates.output.size
        val newly = first.filter(r => r.getBoolean(at - 1) && r.getInt(at - 2) == 0)
        (to, flipped(candidates, newly, 1),
          s"top rows refilled: the first ${first.size} of the view after the change marked " +
            s"(${newly.size} of unchanged rows newly), one scan of its rows")
      } else if (reached > b.most) {
        // Trim: the marked rows below the target-th are unmarked.
        val candidates = Union(Project(like(kept, out), kept), Project(out, fromRows(lowest.get)))
        val first = collect(spark, firstRows(candidates, order, b.target))
        val to = boundary(first, b.target, order, candidates.output)
        val below = to.map(v => collect(spark, Filter(Not(order.atOrAbove(kept, v)), kept))).getOrElse(Nil)
        (to, flipped(kept, below, 0), s"top rows trimmed to the first ${b.target}: ${below.size} unmarked")
      } else (lowest, Nil, "")
    val withMarks = Project(out ++ Seq(markColumn(maintenance, order, rows, to)) ++ existed, rows)
    val all = if (flips.isEmpty) withMarks
    else Union(withMarks, RefreshSteps.onDriver(withMarks.output.map(_.newInstance().withNullability(true)), flips))
    (steps.materialize(all), Some(note).filter(_.nonEmpty))
  }

  /**
   * `plan`'s columns named as `out`'s, NULL where it has none (the places of rows read from rows
   * held on the driver, which a read of the files gives).
   */
  private def like(plan: LogicalPlan, out: Seq[Attribute]): Seq[NamedExpression] =
    out.map(a => plan.output.find(_.name == a.name).getOrElse(Alias(Literal(null, a.dataType), a.name)()))

  /** The rows a read of the view shows. */
  private def visible(maintenance: ViewMaintenance, plan: LogicalPlan): Expression = {
    val count = GreaterThan(column(plan, CountColumn), Literal(0L))
    if (!maintenance.hasHaving) count
    else And(count, Coalesce(Seq(column(plan, HavingColumn), Literal(false))))
  }

  /** How many of the view's rows a backing row stands for. */
  private def weight(maintenance: ViewMaintenance, plan: LogicalPlan): Expression = maintenance.shape match {
    case r: RowsShape if !r.distinct => column(plan, CountColumn)
    case _ => Literal(1L)
  }

  /** The mark of `plan`'s rows: 1 on the visible rows at or above `to` (all visible ones with none). */
  private def markColumn(maintenance: ViewMaintenance, order: ViewOrder, plan: LogicalPlan,
      to: Option[Seq[Any]]): NamedExpression = {
    val mark = to.map(v => And(visible(maintenance, plan), order.atOrAbove(plan, v)))
      .getOrElse(visible(maintenance, plan))
    Alias(If(Coalesce(Seq(mark, Literal(false))), Literal(1), Literal(0)), TopColumn)()
  }

  private def firstRows(plan: LogicalPlan, order: ViewOrder, n: Int): LogicalPlan =
    GlobalLimit(Literal(n), LocalLimit(Literal(n), Sort(order.sortOrder(plan.output), global = true, plan)))

  /**
   * The order columns' values of the `n`-th of `first` (the first rows), which marks every row
   * at or above it; None if there are fewer rows than that (every row is marked).
   */
  private def boundary(first: Seq[InternalRow], n: Int, order: ViewOrder,
      output: Seq[Attribute]): Option[Seq[Any]] =
    if (first.size < n) None
    else Some(order.values(output, first.sorted(order.ordering(output))(n - 1)))

  /** A plan's rows: evaluated on the driver when it reads rows held there, else by a job. */
  private def collect(spark: SparkSession, plan: LogicalPlan): Seq[InternalRow] = {
    val df = SparkInternals.dataFrame(spark, plan)
    DriverEval.rows(df.queryExecution.analyzed, Int.MaxValue).getOrElse(
      DriverRows.collect(spark, Seq(df), Int.MaxValue).get.head)
  }

  private def onDriver(output: Seq[Attribute], rows: Seq[InternalRow]): LogicalPlan =
    RefreshSteps.onDriver(output, rows)

  private def column(plan: LogicalPlan, name: String): Attribute = column(plan.output, name)

  private def column(output: Seq[Attribute], name: String): Attribute = output.find(_.name == name).getOrElse(
    throw IvmErrors.internal(s"a top-k view's rows have no column $name"))

  private[execution] object ViewOrder {
    def apply(maintenance: ViewMaintenance, top: TopRows): ViewOrder =
      new ViewOrder(top.order.map { case (i, asc, nullsFirst) => (maintenance.outputStorage(i), asc, nullsFirst) })
  }

  /**
   * The view's ORDER BY over its stored columns (with the columns that break its ties): per
   * column its name, ascending, NULLs first.
   */
  private[execution] class ViewOrder(keys: Seq[(String, Boolean, Boolean)]) {

    def sortOrder(output: Seq[Attribute]): Seq[SortOrder] = keys.map { case (n, asc, nullsFirst) =>
      SortOrder(column(output, n), if (asc) Ascending else Descending, if (nullsFirst) NullsFirst else NullsLast, Nil)
    }

    def ordering(output: Seq[Attribute]): Ordering[InternalRow] = new InterpretedOrdering(sortOrder(output), output)

    /** A row's values of the ordered columns. */
    def values(output: Seq[Attribute], row: InternalRow): Seq[Any] = keys.map { case (n, _, _) =>
      val at = output.indexWhere(_.name == n)
      row.get(at, output(at).dataType)
    }

    /**
     * True for a row of `plan` that a sort in this order puts before the row whose ordered
     * values are `v`, or ties with it: lexicographic, each column in its direction with NULLs
     * where the ORDER BY puts them (Spark's comparisons order NaN as its sort does, above all).
     */
    def atOrAbove(plan: LogicalPlan, v: Seq[Any]): Expression =
      keys.zip(v).foldRight(Literal.TrueLiteral: Expression) { case (((n, asc, nullsFirst), value), rest) =>
        val a = column(plan, n)
        val bound = Literal(value, a.dataType)
        val before: Expression =
          if (value == null) { if (nullsFirst) Literal.FalseLiteral else IsNotNull(a) }
          else {
            val cmp = if (asc) LessThan(a, bound) else GreaterThan(a, bound)
            if (nullsFirst) Or(IsNull(a), cmp) else And(IsNotNull(a), cmp)
          }
        Or(before, And(EqualNullSafe(a, bound), rest))
      }
  }
}
