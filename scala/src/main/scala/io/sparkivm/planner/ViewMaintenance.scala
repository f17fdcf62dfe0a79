package io.sparkivm.planner

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate._
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.plans.{LeftOuter, LeftSemi}
import org.apache.spark.sql.types.LongType

/**
 * The plans that maintain one view: its rows from scratch, and the rows to MERGE into its
 * backing table for one refresh. The backing table has
 *  - key columns: the group keys (`__ivm_g<i>`) of an aggregate view, or the output columns
 *    of a rows view;
 *  - `__ivm_count`: the number of input rows of the group, or the multiplicity of the row;
 *  - the state of each aggregate (`__ivm_a<j>_*`, see [[AggregateState]]);
 *  - for aggregate views, the output columns computed from that state, and `__ivm_having`
 *    when filters sit above the aggregate (the group's state is kept even when it is hidden).
 */
class ViewMaintenance(val shape: ViewShape, val viewColumns: Seq[String], val top: Option[TopRows] = None,
    val atRead: Option[ComputedAtRead] = None) {
  import ViewMaintenance._

  /** The columns a reader sees: the view's, which differ from the kept rows' under [[atRead]]. */
  def shownColumns: Seq[String] = atRead.map(_.columns).getOrElse(viewColumns)

  /** What the catalog view computes when it is read, for DESCRIBE and EXPLAIN. */
  def appliedAtRead: Seq[(String, String)] =
    atRead.map(w => w.label -> w.describe).toSeq ++ top.map(t =>
      "Top rows" -> t.describe(shownColumns, markedTop.isDefined))

  /** Where each view column is stored. */
  val outputStorage: Seq[String] = storageNames(viewColumns)

  /**
   * The backing table's column that keeps view column `name` as a read gives it, if one does
   * (not a column a read computes, [[atRead]]).
   */
  def storedColumn(name: String): Option[String] =
    if (atRead.exists(!_.columns.exists(_.equalsIgnoreCase(name)))) None
    else viewColumns.indexWhere(_.equalsIgnoreCase(name)) match {
      case -1 => None
      case i => Some(outputStorage(i))
    }

  /**
   * The top rows whose first rows the backing table marks in [[TopColumn]], so that a read
   * reads those rows alone (see `io.sparkivm.execution.TopMarks`): a LIMIT over stored columns
   * (not what a read computes) of a view with more than one row.
   */
  def markedTop: Option[TopRows] = top.filter(t => atRead.isEmpty && !global && t.marks)

  private val (keyExprs: Seq[Expression], child: LogicalPlan) = shape match {
    case a: AggregateShape => (a.aggregate.groupingExpressions, a.aggregate.child)
    case r: RowsShape => (r.rows.output, r.rows)
  }

  val keyNames: Seq[String] = shape match {
    case _: AggregateShape => keyExprs.indices.map(i => s"__ivm_g$i")
    case _: RowsShape => outputStorage
  }

  val states: Seq[AggregateState] = shape match {
    case a: AggregateShape =>
      val all = a.aggregate.aggregateExpressions.flatMap(_.collect { case ae: AggregateExpression => ae })
      all.groupBy(_.canonicalized).values.map(_.head).toSeq
        .sortBy(ae => all.indexWhere(_.canonicalized == ae.canonicalized))
        .zipWithIndex.map { case (ae, i) => AggregateState(ae, i) }
    case _ => Nil
  }

  /** True if a filter sits above the aggregate (HAVING, or WHERE of an outer query). */
  val hasHaving: Boolean = shape match {
    case a: AggregateShape => ViewShape.chainAbove(a.top, a.aggregate).exists(_.isInstanceOf[Filter])
    case _ => false
  }

  def global: Boolean = shape match {
    case a: AggregateShape => a.global
    case _ => false
  }

  /** The catalog view's query over the backing table. */
  def viewSql(backing: String): String = {
    val source = shape match {
      case _: AggregateShape => outputStorage
      case _: RowsShape => keyNames
    }
    val cols = source.zip(viewColumns).map { case (s, v) => s"${quote(s)} AS ${quote(v)}" }
      .mkString(", ")
    val conditions = (if (global) Nil else Seq(s"$CountColumn > 0")) ++
      (if (hasHaving) Seq(HavingColumn) else Nil) ++ markedTop.map(_ => s"$TopColumn = 1")
    val where = if (conditions.isEmpty) "" else conditions.mkString(" WHERE ", " AND ", "")
    val rows = shape match {
      case r: RowsShape if !r.distinct =>
        s"SELECT $cols FROM $backing LATERAL VIEW explode(sequence(1L, $CountColumn)) __ivm_r AS __ivm_i$where"
      case _ => s"SELECT $cols FROM $backing$where"
    }
    atRead.map(_.sql(rows)).getOrElse(rows) + top.map(_.sql(shownColumns, quote)).getOrElse("")
  }

  /**
   * The rows of the recursive CTE `loop` before the refresh, weighted by their multiplicity, from
   * `backing` (the backing table as the last refresh wrote it), where the view keeps them as they
   * are ([[RecursiveRows]]); None for any other view.
   */
  def recursiveRows(loop: UnionLoop, backing: => LogicalPlan): Option[(LogicalPlan, Attribute)] =
    RecursiveRows.kept(shape).filter(_._1.id == loop.id).map { case (u, at) =>
      RecursiveRows.rowsAtPre(u, at, outputStorage, backing)
    }

  /** The backing table's rows computed from scratch, from Post. */
  def fullPlan(rules: DeltaRules): LogicalPlan = {
    val keys = keyAliases()
    shape match {
      // Rows Spark cannot group (a VARIANT column; only recomputation keeps such a view) are
      // kept one by one, each with count 1, which the view's read repeats once.
      case _: RowsShape if !keyExprs.forall(e => ColumnTypes.groupable(e.dataType)) =>
        Project(keys :+ Alias(Literal(1L), CountColumn)(), rules.post(child))
      case _ =>
        val count = Alias(Count(Seq(Literal(1))).toAggregateExpression(), CountColumn)()
        val stateCols = states.flatMap(s => s.full().zip(s.columns).map { case (e, (n, _)) => Alias(e, n)() })
        finish(Aggregate(keyExprs, keys ++ (count +: stateCols), rules.post(child)))
    }
  }

  /** The delta branches that a refresh with these changes runs. */
  def branches(rules: DeltaRules): Seq[Branch] = {
    rules.noteColumnsRead(shape match {
      case a: AggregateShape => a.aggregate
      case r: RowsShape => r.rows
    })
    rules.delta(child) ++ rules.timeBranches(child)
  }

  /**
   * The rows to MERGE into the backing table (complete new rows of the groups that changed,
   * with `__ivm_count` 0 for those that emptied), or None when no base table changed.
   *
   * `old` reads the backing table. `oldOfKeys`, given the changed keys (rows of the key
   * columns) when the folded delta is held on the driver, gives their old rows where they are
   * kept in memory ([[foldColumns]], then [[PositionColumns]]), so that the table is not read.
   * `steps` decides how intermediate results are computed: a refresh materializes the folded
   * delta once and skips recomputation when no group needs it; EXPLAIN keeps everything as one
   * plan and runs nothing.
   */
  def mergeSource(rules: DeltaRules, old: () => LogicalPlan, steps: PlanSteps,
      markExisting: Boolean = false,
      oldOfKeys: Seq[InternalRow] => Option[LogicalPlan] = _ => None): Option[LogicalPlan] = {
    val changed = branches(rules)
    if (changed.isEmpty) return None
    val m = rules.multiplicity
    val keys = keyAliases()
    val dCount = Alias(Sum(Cast(m, LongType)).toAggregateExpression(), "__ivm_dcount")()
    val dStates = states.map(s =>
      s.deltas(m).zipWithIndex.map { case (e, i) =>
        Alias(e, s"__ivm_d${s.index}_$i")()
      })
    // The delta, folded per key: small. A refresh computes it ahead: its keys select the backing
    // rows to read (and a group's recomputation is decided from it). EXPLAIN keeps it part of the
    // one query that computes the new rows.
    val foldedPlan = Aggregate(keyExprs, keys ++ (dCount +: dStates.flatten), rules.unionAll(changed.map(_.plan)))
    val folded = if (states.exists(_.recompute.isDefined) || steps.probe.enabled || steps.collects) {
      steps.materialize(foldedPlan)
    } else foldedPlan
    lazy val probed = probeBacking(old(), folded, keys, steps)
    def column(plan: LogicalPlan, name: String) = plan.output.find(_.name == name).getOrElse(
      throw IvmErrors.internal(s"the backing table has no column $name"))
    def on(backing: LogicalPlan) = keys.zip(keyNames).map { case (k, n) =>
      EqualNullSafe(k.toAttribute, column(backing, n)): Expression
    }.reduceOption(And)
    // The changed groups' old rows, when the folded delta is held here: a semi join of the table
    // with the changed keys (broadcast; the table is streamed in one stage), held here too (there
    // are no more of them than changed groups), so that the outer join below runs on the driver.
    // An outer join that keeps the few changed groups could only broadcast the table.
    // Only the columns the fold reads are read: keys, count, states and places (a view's output
    // columns are computed again from them). Where the old rows are kept in memory by key, they
    // are looked up instead.
    val read = (foldColumns ++ PositionColumns).toSet
    val backing = steps.rowsOnDriver(folded) match {
      case Some(rows) =>
        val at = keys.map(k => folded.output.indexWhere(_.exprId == k.exprId))
        lazy val changedKeys = rows.map(r =>
          new GenericInternalRow(at.indices.map(i => r.get(at(i), keys(i).dataType)).toArray): InternalRow)
        val arranged = if (keys.isEmpty || at.contains(-1)) None else oldOfKeys(changedKeys)
        arranged.getOrElse {
          if (steps.rowsOnDriver(probed).isDefined) probed
          else steps.materialize(Project(probed.output.filter(a => read(a.name)),
              Join(probed, folded, LeftSemi, on(probed), JoinHint.NONE)))
        }
      case None => probed
    }
    def col(name: String) = column(backing, name)
    val joined = Join(folded, backing, LeftOuter, on(backing), JoinHint.NONE)
    def oldOf(s: AggregateState) = s.columns.map(c => col(c._1))
    def dOf(s: AggregateState) = dStates(states.indexOf(s)).map(_.toAttribute)
    val newCount = plusLong(col(CountColumn), dCount.toAttribute)

    val recomputed = states.filter(_.recompute.isDefined)
    val flags = recomputed.map(s => s.needsRecompute(oldOf(s), dOf(s)).get)
    val neededKeys = keys.zipWithIndex.map { case (k, i) => Alias(k.toAttribute, s"__ivm_rk$i")() }
    // Groups that still have rows and need an extreme (or a general aggregate) recomputed.
    val need = if (recomputed.isEmpty) None
    else Some(steps.materialize(Distinct(Project(neededKeys,
            Filter(And(flags.reduce(Or), GreaterThan(newCount, Literal(0L))), joined)))))
      .filterNot(steps.isEmpty)
    val (withRec, recOf) = need match {
      case None => (joined, (_: AggregateState) => None)
      case Some(needed) =>
        val semi = keyExprs.zip(neededKeys).map { case (e, a) => EqualNullSafe(e, a.toAttribute): Expression }
          .reduceOption(And)
        val recomputedKeys = keyExprs.zipWithIndex.map { case (e, i) => Alias(e, s"__ivm_rg$i")() }
        val recs = recomputed.map(s => Alias(s.recompute.get, s"__ivm_r${s.index}")())
        val rec = Aggregate(keyExprs, recomputedKeys ++ recs,
          Join(rules.post(child), needed, LeftSemi, semi, JoinHint.NONE))
        val on = keys.zip(recomputedKeys).map { case (k, g) => EqualNullSafe(k.toAttribute, g.toAttribute): Expression }
          .reduceOption(And)
        val byState = recomputed.zip(recs.map(_.toAttribute)).toMap
        (Join(joined, rec, LeftOuter, on, JoinHint.NONE), (s: AggregateState) => byState.get(s))
    }
    val stateCols = states.flatMap { s =>
      s.merge(oldOf(s), dOf(s), recOf(s)).zip(s.columns).map { case (e, (n, _)) => Alias(e, n)() }
    }
    // With `markExisting`, whether each key had a row before (for the apply's metrics).
    val existing = if (markExisting) Seq(Alias(IsNotNull(col(CountColumn)), ExistedColumn)()) else Nil
    // The old rows' positions, when the backing read gives them: for the apply, with `markExisting`.
    val positions = if (markExisting) PositionColumns.flatMap(n => backing.output.find(_.name == n)) else Nil
    val rows = finish(Project(keys.map(_.toAttribute) ++ (Alias(newCount, CountColumn)() +: stateCols) ++
          positions ++ existing, withRec))
    Some(if (markExisting) Project(rows.output.filterNot(_.name == ExistedColumn) ++
          rows.output.filter(_.name == ExistedColumn), rows)
      else rows)
  }

  /**
   * The backing table restricted to the rows (and so the files) that may hold the changed groups'
   * first key: the exact keys when the folded delta is held on the driver, else ranges of its
   * keys when probing is on. A NULL key matches null-safely: rows with NULL keys are kept too.
   */
  private def probeBacking(backing: LogicalPlan, folded: LogicalPlan, keys: Seq[Alias],
      steps: PlanSteps): LogicalPlan = {
    val p = steps.probe
    (keys.headOption, keyNames.headOption) match {
      case (Some(k), Some(n)) =>
        val target = backing.output.find(_.name == n).get
        def keep(cond: Expression) = Filter(Or(IsNull(target), cond), backing)
        steps.valuesOnDriver(folded, k.toAttribute) match {
          case Some(values) if KeyProbe.equalsAsJvm(k.dataType) => keep(InSet(target, values))
          case _ if p.enabled && KeyProbe.probeable(k.dataType) =>
            steps.distinctValues(folded, k.toAttribute, p.maxKeys)
              .map(values => keep(KeyProbe.filter(target, values, p.maxRanges))).getOrElse(backing)
          case _ => backing
        }
      case _ => backing
    }
  }

  private def keyAliases(): Seq[Alias] =
    keyExprs.zip(keyNames).map { case (e, n) => Alias(e, n)() }

  /** Backing rows from a plan of keys, count and state: adds the outputs of aggregate views. */
  private def finish(state: LogicalPlan): LogicalPlan = shape match {
    case _: RowsShape => state
    case a: AggregateShape =>
      val attr = state.output.map(o => o.name -> o).toMap
      val stateOf = states.map(s => s.expr.canonicalized -> s).toMap
      val agg = a.aggregate
      val outputs = agg.aggregateExpressions.map { ne =>
        val body = ne match { case Alias(c, _) => c; case other => other }
        val rewritten = body.transformDown {
          case ae: AggregateExpression =>
            val s = stateOf(ae.canonicalized)
            val value = s.finish(s.columns.map(c => attr(c._1)))
            // A global aggregate over no rows is what the function gives on empty input
            // (COUNT(DISTINCT x) is 0), whatever its state holds once every row is gone.
            if (!global) value
            else If(EqualTo(attr(CountColumn), Literal(0L)),
              AggregateState.onNoRows(ae.aggregateFunction),
              value)
          case e if keyExprs.exists(_.semanticEquals(e)) =>
            attr(keyNames(keyExprs.indexWhere(_.semanticEquals(e))))
        }
        Alias(rewritten, ne.name)(exprId = ne.exprId)
      }
      val (upper, having) = rebuild(a.top, Project(state.output ++ outputs, state), state.output)
      val viewOut = a.top.output.zip(outputStorage).map { case (o, n) => Alias(o, n)() }
      Project(state.output ++ viewOut ++ having.map(h => Alias(h, HavingColumn)()), upper)
  }

  /**
   * The projections and filters above the aggregate, over the finished groups. A filter
   * becomes a flag (`__ivm_having`) instead of dropping the group, whose state is still needed.
   */
  private def rebuild(node: LogicalPlan, base: LogicalPlan, keep: Seq[Attribute])
      : (LogicalPlan, Option[Attribute]) = node match {
    case _: Aggregate => (base, None)
    case SubqueryAlias(_, c) => rebuild(c, base, keep)
    case v: View => rebuild(v.child, base, keep)
    case s: Sort => rebuild(s.child, base, keep)
    case Filter(cond, c) =>
      val (p, flag) = rebuild(c, base, keep)
      val next = Alias(flag.map(f => And(f, cond)).getOrElse(cond), HavingColumn)()
      (Project(p.output.filterNot(o => flag.exists(_.exprId == o.exprId)) :+ next, p),
        Some(next.toAttribute))
    case Project(list, c) =>
      val (p, flag) = rebuild(c, base, keep)
      (Project(list ++ keep ++ flag, p), flag)
    case other => throw IvmErrors.internal(s"unexpected ${other.nodeName} above an aggregate")
  }

  /**
   * What a backing table column keeps, in the user's terms: the view column stored there, or the
   * grouping key or aggregate whose state it holds.
   */
  def keptIn(name: String): String =
    outputStorage.indexOf(name) match {
      case i if i >= 0 => s"column ${quote(viewColumns(i))}"
      case _ if keyNames.contains(name) => s"the grouping key ${keyExprs(keyNames.indexOf(name)).sql}"
      case _ => states.find(_.columns.exists(_._1 == name))
          .map(s => s"the state of ${s.expr.sql}").getOrElse(s"the internal column $name")
    }

  /** The backing table's columns a refresh folds its delta into: keys, count and aggregate states. */
  def foldColumns: Seq[String] = keyNames ++ (CountColumn +: states.flatMap(_.columns.map(_._1)))

  /** The names of the backing table's columns, in order. */
  def backingColumns: Seq[String] = keyNames ++ Seq(CountColumn) ++ states.flatMap(_.columns.map(_._1)) ++
    (shape match {
      case _: AggregateShape => outputStorage ++ (if (hasHaving) Seq(HavingColumn) else Nil)
      case _ => Nil
    }) ++ markedTop.map(_ => TopColumn)
}

/** How [[ViewMaintenance.mergeSource]] computes its intermediate results. */
trait PlanSteps {

  /** A plan with the same output attributes whose rows are computed now (or not at all). */
  def materialize(plan: LogicalPlan): LogicalPlan

  /**
   * `materialize` for a plan whose rows are a function of `definition` (what it computes,
   * independent of attribute ids) at the table versions `stamp`: a refresh may reuse the rows
   * an earlier refresh of the application computed for the same definition and stamp.
   */
  def materializeVersioned(plan: LogicalPlan, definition: String, stamp: String): LogicalPlan =
    materialize(plan)

  /** The rows an earlier `materializeVersioned` computed for `definition` at `stamp`, if held. */
  def versioned(definition: String, stamp: String): Option[Seq[org.apache.spark.sql.catalyst.InternalRow]] = None

  /** True if the plan has no rows; a planner that runs nothing answers false. */
  def isEmpty(plan: LogicalPlan): Boolean

  /**
   * The distinct non-null values of `key` in `plan`, sorted, or None if there are more than
   * `max` (or the planner runs nothing).
   */
  def distinctValues(plan: LogicalPlan, key: Attribute, max: Int): Option[Seq[Any]] = None

  /** False if `distinctValues` never runs anything (EXPLAIN). */
  def collects: Boolean = false

  /**
   * The distinct non-null values of `key` (Catalyst's internal representation) if `plan` is
   * held on the driver (see `materialize`), without running anything; None otherwise.
   */
  def valuesOnDriver(plan: LogicalPlan, key: Attribute): Option[Set[Any]] = None

  /** The rows of `plan` (in its output's order) if it is held on the driver (see `materialize`). */
  def rowsOnDriver(plan: LogicalPlan): Option[Seq[org.apache.spark.sql.catalyst.InternalRow]] = None

  /** Whether and how to probe large inputs with the keys of small ones. */
  def probe: ProbeSettings = ProbeSettings.Off
}

/** Keeps everything as one plan and runs nothing (EXPLAIN). */
object PlanOnly extends PlanSteps {
  def materialize(plan: LogicalPlan): LogicalPlan = plan
  def isEmpty(plan: LogicalPlan): Boolean = false
}

object ViewMaintenance {
  val CountColumn = "__ivm_count"
  val HavingColumn = "__ivm_having"

  /** 1 on the rows of a top-k view's backing table that its read reads ([[markedTop]]), else 0. */
  val TopColumn = "__ivm_top"

  /** In a refresh's changed rows only (never stored): the key had a row before the refresh. */
  val ExistedColumn = "__ivm_existed"

  /**
   * Where the old row of a changed key lies, when the backing table's read gives it (see
   * `BackingTable.current`): its file's path, its row index in the file and the table version
   * read. Carried to the changed rows, so that the apply marks the old rows deleted without a
   * second read of the table. Never stored.
   */
  val PositionColumns: Seq[String] = Seq("__ivm_file", "__ivm_row", "__ivm_read_version")

  def quote(name: String): String = "`" + name.replace("`", "``") + "`"

  private def plusLong(a: Expression, b: Expression): Expression =
    Add(Coalesce(Seq(a, Literal(0L))), Coalesce(Seq(b, Literal(0L))))

  /**
   * Column names for the backing table: the view's own where Delta accepts them and they are
   * unique, `__ivm_c<i>` otherwise (Delta refuses " ,;{}()\n\t=" in names, and a query may
   * produce two columns called `count(1)`).
   */
  def storageNames(names: Seq[String]): Seq[String] = {
    val lower = names.map(_.toLowerCase(java.util.Locale.ROOT))
    names.zipWithIndex.map { case (n, i) =>
      val plain = n.matches("[A-Za-z_][A-Za-z0-9_]*") && !lower(i).startsWith("__ivm_") &&
        lower.count(_ == lower(i)) == 1
      if (plain) n else s"__ivm_c$i"
    }
  }
}
