package io.sparkivm.planner

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.planning.ExtractEquiJoinKeys
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.plans.{ExistenceJoin, Inner, LeftAnti, LeftOuter, LeftSemi}

/** How each table occurrence is read in one refresh (see [[io.sparkivm.execution.Refresher]]). */
trait LeafReader {

  /** The table at the version the view last consumed; output attributes are `leaf.output`. */
  def pre(leaf: SourceLeaf): LogicalPlan

  /** The table at the version pinned for this refresh; output attributes are `leaf.output`. */
  def post(leaf: SourceLeaf): LogicalPlan

  /** The net change, output `leaf.output :+ multiplicity`; None when the table did not change. */
  def delta(leaf: SourceLeaf): Option[LogicalPlan]

  /**
   * Every row the table held since the view's last refresh, PreDel = Post + Del (Svingos et al. 2023
   * section 1.4); output attributes are `leaf.output`.
   */
  def preDel(leaf: SourceLeaf): LogicalPlan

  /**
   * Pre as a scan of the table's files, never rows kept in memory: for reads that a filter
   * restricts to a few files by their statistics (the rows a time filter's move lets in or out).
   */
  def preFiles(leaf: SourceLeaf): LogicalPlan = pre(leaf)

  /**
   * Pre's rows of `leaf` for which `where` (over `leaf.output`) holds, held on the driver where
   * the files that may hold them are few and small (read without a Spark job); None where they
   * must be scanned.
   */
  def preFilesWhere(leaf: SourceLeaf, where: Expression): Option[LogicalPlan] = None

  /** The size of the table at the pinned version (Long.MaxValue if unknown). */
  def sizeInBytes(leaf: SourceLeaf): Long = Long.MaxValue

  /** The net change as rows on the driver, when it is held there (decisions then run no job). */
  def deltaOnDriver(leaf: SourceLeaf): Option[DriverDeltaRows] = None

  /** The table's Delta id and the versions read as Pre and as Post, if it is a pinned Delta table. */
  def versions(leaf: SourceLeaf): Option[(String, Long, Long)] = None

  /**
   * The counts of `table` for `keys` (external values) at Pre and at Post, when they are kept
   * for it (see [[CountedTable]]); None where the table must be read instead.
   */
  def keyCounts(table: CountedTable, keys: Seq[Any]): Option[KeyCounts] = None

  /**
   * The rows of `leaf` at Post (`atPost`) or at Pre whose column `key` holds one of `keys`
   * (Catalyst values), with `columns` (lower-case names) in order, from rows kept between
   * refreshes where the reader keeps them; None where the table must be read instead. `all` is
   * the plan of all of the table's rows at Post with those columns, read to keep them.
   */
  def keyedRows(leaf: SourceLeaf, key: String, columns: Seq[org.apache.spark.sql.types.StructField],
      keys: Iterable[Any], atPost: Boolean, all: => LogicalPlan): Option[Seq[InternalRow]] = None

  /**
   * The rows of `leaf` at Post with `columns` (lower-case names) in order, for which
   * `where` (over `columns`, bound by position) holds, from rows kept between refreshes (by
   * [[keyedRows]]) where the reader keeps them; None where the table must be read instead.
   */
  def rowsWhere(leaf: SourceLeaf, columns: Seq[org.apache.spark.sql.types.StructField],
      where: Expression): Option[Seq[InternalRow]] = None

  /**
   * The rows of the recursive CTE `loop` before the refresh, with their multiplicity as a weight
   * (output: `loop.output`, then the weight), where the view keeps them ([[RecursiveRows]]).
   */
  def recursiveRowsAtPre(loop: UnionLoop): Option[(LogicalPlan, Attribute)] = None
}

/** A net change held on the driver: the table's columns by name, then its signed multiplicity. */
case class DriverDeltaRows(schema: org.apache.spark.sql.types.StructType,
    rows: Seq[org.apache.spark.sql.catalyst.InternalRow]) {

  /** Column positions of `names` (case-insensitive), and the position of the sign. */
  def positions(names: Seq[String]): Seq[Int] =
    names.map(n => schema.fieldNames.indexWhere(_.equalsIgnoreCase(n)))
  def signAt: Int = schema.length - 1
}

/** One term of the delta union: a plan whose rows carry a signed multiplicity, and how it was built. */
case class Branch(plan: LogicalPlan, terms: Seq[String]) {
  def describe: String = terms.mkString(" x ")
}

/**
 * The delta rules of counting IVM over Catalyst plans (Svingos et al. 2023, section 2, Theorem 4.2 and its
 * multi-way unfolding): for a join, D(L x R) = D(L) x Post(R) + Pre(L) x D(R); filters and
 * projections commute with D; D of a UNION ALL is the union of the Ds. Unfolded over a join
 * tree this is sum_i Pre(R1..Ri-1) x D(Ri) x Post(Ri+1..Rn): one branch per changed occurrence,
 * so self-joins need nothing special. Every branch contains exactly one delta leaf, so the sign
 * `multiplicity` of a row passes through joins unchanged.
 *
 * Every plan returned outputs the attributes (same expression ids) of the node it stands for,
 * plus `multiplicity` for delta branches, so the expressions of the parents apply to it unchanged.
 */
class DeltaRules(reader: LeafReader, val multiplicity: Attribute, fkSettings: FkSettings = FkSettings.Off,
    /** Branches computed elsewhere for given subtrees (IVM^eps for a triangle block). */
    precomputed: LogicalPlan => Option[Seq[Branch]] = _ => None,
    /** The instant the view's rows are at, where its filters read the time ([[TimeFilters]]). */
    instantBefore: Option[Long] = None,
    /** The rules of the clock's own delta: tables at Pre, time filters moving from `instantBefore`. */
    clockOnly: Boolean = false,
    /** Recursive CTEs held at their rows before the refresh, weighted: see [[recursive]]. */
    loopsAtPre: Map[Long, (LogicalPlan, Attribute)] = Map.empty) {

  /** Restricted reads of large tables, each computed once per refresh and shared. */
  private val scans = new SharedScans(reader, fkSettings.steps, fkSettings.sharedReadMinBytes,
    fkSettings.probe.maxKeys)

  /** Subplans restricted to a set of keys, the restriction pushed down to the scans. */
  val restriction: KeyRestriction = new KeyRestriction(fkSettings.steps, scans.restrict)

  /** Delta plans of join blocks with foreign keys and key probing (None when both are off). */
  val fk: FkDeltaPlanner = new FkDeltaPlanner(this, reader, fkSettings)

  def pre(plan: LogicalPlan): LogicalPlan =
    substitute(aggregatesOnDriver(if (clockOnly) TimeFilters.rebind(plan, instantBefore.get) else plan, atPre = true),
      scans.pre)
  def post(plan: LogicalPlan): LogicalPlan = substitute(aggregatesOnDriver(plan, atPre = false), scans.post)

  /** Global aggregates computed so far, at Pre and at Post: one row each, held on the driver. */
  private val globals = scala.collection.mutable.Map[(LogicalPlan, Boolean), LogicalPlan]()

  /**
   * `plan` with each global aggregate over tables (an uncorrelated scalar subquery, as
   * [[QueryRewrites]] joins it) computed once per refresh and version and held on the driver:
   * its one row is read by every plan of the refresh that needs it (the value's change, the
   * restricted reads at Pre and at Post, the apply), which would each aggregate its input again.
   * TPC-H Q22's `avg(c_acctbal)` scanned `customer` in six queries of each refresh. Its value
   * at Post is the next refresh's value at Pre, so that one is not computed again.
   */
  private def aggregatesOnDriver(plan: LogicalPlan, atPre: Boolean): LogicalPlan =
    if (!fkSettings.steps.collects) plan
    else plan.transformDown {
      case a: Aggregate
          if a.groupingExpressions.isEmpty && a.aggregateExpressions.forall(_.deterministic) &&
            a.exists { case SourceLeaf(_) => true; case _ => false } =>
        globals.getOrElseUpdate((a, atPre), aggregateOnDriver(a, atPre))
    }

  /**
   * One global aggregate's row at Pre or at Post, named by its definition and the versions read
   * ([[PlanSteps]]' `materializeVersioned`). A [[RunningAggregate]] is held as its state: its
   * Post state is its Pre state moved by the change of its input (rows held on the driver,
   * where the change is small: no job), so only a refresh that finds no earlier state reads the
   * aggregate's tables, once.
   */
  private def aggregateOnDriver(a: Aggregate, atPre: Boolean): LogicalPlan = {
    val steps = fkSettings.steps
    val read = substitute(a, if (atPre) scans.pre else scans.post)
    val named = for ((pre, post) <- stamps(a); definition <- CountedTable.definition(a)) yield (pre, post, definition)
    named.map { case (pre, post, definition) =>
      RunningAggregate.of(a) match {
        case None => steps.materializeVersioned(read, definition, if (atPre) pre else post)
        case Some(running) =>
          val kept = s"state of $definition"
          val fromPre = if (atPre) None else steps.versioned(kept, pre).flatMap(_.headOption)
          val state = fromPre match {
            case Some(old) if pre != post =>
              steps.materializeVersioned(running.moved(old,
                  unionAll(delta(a.child).map(_.plan) match {
                    case Nil => Seq(LocalRelation(a.child.output :+ multiplicity))
                    case plans => plans
                  }), multiplicity), kept, post)
            case _ => steps.materializeVersioned(running.full(substitute(a.child,
                    if (atPre) scans.pre else scans.post)), kept, if (atPre) pre else post)
          }
          steps.materialize(running.value(state))
      }
    }.getOrElse(steps.materialize(read))
  }

  /**
   * Records which columns of each table the view reads (`plan`: the view's aggregate, or the
   * plan of its rows), so that reads restricted by key hold only those ([[SharedScans]]).
   */
  def noteColumnsRead(plan: LogicalPlan): Unit = scans.noteColumnsRead(plan)

  def preDel(plan: LogicalPlan): LogicalPlan = substitute(plan, reader.preDel)

  /** Post's rows of `leaf` whose `key` is one of `keys`, from rows kept in memory ([[SharedScans.keptPost]]). */
  def keptPost(leaf: SourceLeaf, key: Attribute, keys: Set[Any]): Option[LogicalPlan] =
    scans.keptPost(leaf, key, keys)

  /** `plan` with each table occurrence read by `read` (its output attributes kept). */
  def withLeaves(plan: LogicalPlan, read: SourceLeaf => LogicalPlan): LogicalPlan = substitute(plan, read)

  private def substitute(plan: LogicalPlan, read: SourceLeaf => LogicalPlan): LogicalPlan =
    plan match {
      case SourceLeaf(leaf) => read(leaf)
      case r: UnionLoopRef if loopsAtPre.contains(r.loopId) => loopAtPre(r, weighted = false)._1
      case SubqueryAlias(_, child) => substitute(child, read)
      case v: View => substitute(v.child, read)
      case other => other.mapChildren(substitute(_, read))
    }

  /**
   * Pre of a tree of table occurrences, filters, projections and inner joins as a weighted
   * relation, Pre = Post - D (the Z-relation identity): each row of Post with weight 1, each row
   * of the net change with weight -multiplicity, weights multiplied across joins. It reads the tables at
   * the pinned version (whose Delta snapshots are loaded) instead of travelling back to the
   * consumed one, whose snapshot would be rebuilt from the log. None for other trees.
   */
  def weightedPre(plan: LogicalPlan, where: Option[Expression] = None): Option[(LogicalPlan, Attribute)] =
    plan match {
      case SourceLeaf(leaf) =>
        val w = AttributeReference("__ivm_w", multiplicity.dataType, nullable = false)()
        // `where` (a filter the caller keeps above) narrows the Post read where the rows are kept.
        val read = where.filter(_.references.subsetOf(AttributeSet(leaf.output)))
          .flatMap(scans.postWhere(leaf, _)).getOrElse(scans.post(leaf))
        val post = Project(leaf.output :+ Alias(Literal(1), w.name)(exprId = w.exprId), read)
        Some(reader.delta(leaf) match {
          case None => (post, w)
          case Some(d) =>
            val minus = Project(leaf.output :+ Alias(negated(multiplicity), w.name)(), d)
            (Union(post, minus), w)
        })
      case r: UnionLoopRef if loopsAtPre.contains(r.loopId) => Some(loopAtPre(r, weighted = true))
      case SubqueryAlias(_, child) => weightedPre(child, where)
      case v: View => weightedPre(v.child, where)
      case Filter(cond, child) if !moves(cond) => weightedPre(child, where).map { case (p, w) => (Filter(cond, p), w) }
      // `where` passes a projection that passes the columns it reads.
      case Project(list, child) =>
        val passed = where.filter(_.references.subsetOf(AttributeSet(list.collect { case a: Attribute => a })))
        weightedPre(child, passed).map { case (p, w) => (Project(list :+ w, p), w) }
      case g: Generate => weightedPre(g.child).map { case (p, w) =>
          (Project(g.output :+ w, g.copy(unrequiredChildIndex = Nil, child = p)), w)
        }
      case e: Expand => weightedPre(e.child).map { case (p, w) =>
          (Expand(e.projections.map(_ :+ w), e.output :+ w, p), w)
        }
      case j: Join if j.joinType == Inner =>
        for ((l, wl) <- weightedPre(j.left); (r, wr) <- weightedPre(j.right)) yield {
          val w = AttributeReference("__ivm_w", multiplicity.dataType, nullable = false)()
          (Project(j.output :+ Alias(times(wl, wr), w.name)(exprId = w.exprId), j.copy(left = l, right = r)), w)
        }
      case _ => None
    }

  /**
   * The delta of `plan` as a union of branches (empty when nothing under it changed). Computed
   * once per subtree and refresh: a refresh asks for the view's branches to report them, then
   * again to fold them, and an operator recomputed by key runs jobs to plan its delta (its
   * changed keys, its right side's counts) that would otherwise run again each time.
   */
  def delta(plan: LogicalPlan): Seq[Branch] = deltas.getOrElseUpdate(plan,
    precomputed(plan).orElse(overScalar(plan, scans.needed(plan))).orElse(fk.delta(plan)).getOrElse(generic(plan)))

  private val deltas = scala.collection.mutable.Map[LogicalPlan, Seq[Branch]]()

  /**
   * D of a filter over an inner join with a one-row global aggregate (an uncorrelated scalar
   * subquery, as [[QueryRewrites]] joins it: TPC-H Q22's `c_acctbal > (SELECT avg(...))`):
   * D(L) x Post(A), plus Pre(L) x D(A), where D(A) is the old row leaving and the new one
   * coming. A row of L whose condition holds for both values, or for neither, cancels in
   * Pre(L) x D(A), so only the rows for which the two values decide differently are read (the
   * condition with each value as a literal: a filter on L that Spark pushes to its scans),
   * instead of all of Pre(L) twice. That holds only where nothing above reads the value itself
   * (`needed`: the attributes the nodes above read): a value in the view's columns
   * (`SELECT x, (SELECT max(y) FROM t)`) changes every row, and all of Pre(L) is read. Both
   * values are computed first (on the driver, one row each); None where they cannot be
   * (EXPLAIN) or the plan has another shape.
   */
  private def overScalar(plan: LogicalPlan, needed: AttributeSet): Option[Seq[Branch]] = plan match {
    case Filter(cond, j: Join) if cond.deterministic && scalarJoin(j) => scalarDelta(j, Some(cond), needed)
    case j: Join if scalarJoin(j) => scalarDelta(j, None, needed)
    // Above such a join (before the FK planner takes the filters and projections as its block).
    case Filter(cond, child) if cond.deterministic =>
      overScalar(child, needed ++ cond.references).map(_.map(b => b.copy(plan = Filter(cond, b.plan))))
    case Project(list, child) if list.forall(_.deterministic) =>
      overScalar(child, AttributeSet(list.filter(e => needed.contains(e.toAttribute)).flatMap(_.references)))
        .map(_.map(b => b.copy(plan = Project(list :+ multiplicity, b.plan))))
    case SubqueryAlias(_, child) => overScalar(child, needed)
    case _ => None
  }

  private def scalarJoin(j: Join): Boolean = j.joinType == Inner && fkSettings.steps.collects &&
    QueryRewrites.singleRow(j.right) && j.condition.forall(_.deterministic)

  private def scalarDelta(j: Join, filter: Option[Expression], needed: AttributeSet): Option[Seq[Branch]] = {
    val right = j.right
    def filtered(p: LogicalPlan) = filter.map(Filter(_, p)).getOrElse(p)
    val fromLeft = delta(j.left).map { b =>
      Branch(filtered(Project(j.output :+ multiplicity, j.copy(left = b.plan, right = post(right)))),
        b.terms ++ leafNames(right).map(n => s"Post($n)"))
    }
    if (delta(right).isEmpty) return Some(fromLeft)
    val steps = fkSettings.steps
    val (oldRow, newRow) = (steps.materialize(pre(right)), steps.materialize(post(right)))
    for {
      Seq(o) <- steps.rowsOnDriver(oldRow)
      Seq(n) <- steps.rowsOnDriver(newRow)
    } yield {
      val types = right.output.map(_.dataType)
      val (ov, nv) = (o.toSeq(types), n.toSeq(types))
      if (ov == nv) fromLeft
      else {
        val theta = (filter.toSeq ++ j.condition).reduceOption(And).getOrElse(Literal.TrueLiteral)
        def at(values: Seq[Any]) = Coalesce(Seq(theta.transform {
            case a: Attribute if right.outputSet.contains(a) =>
              val i = right.output.indexWhere(_.exprId == a.exprId)
              Literal(values(i), types(i))
          }, Literal.FalseLiteral))
        // Where the value is read above, a row changes with it whatever the condition decides.
        val valueRead = needed.intersect(right.outputSet).nonEmpty
        val decides = if (valueRead) Literal.TrueLiteral else Not(EqualTo(at(ov), at(nv)))
        val inner = AttributeReference("__ivm_m_in", multiplicity.dataType, nullable = false)()
        val change = Union(Seq(-1 -> oldRow, 1 -> newRow).map { case (sign, row) =>
          Project(row.output :+ Alias(Literal(sign), inner.name)(exprId = inner.exprId), row)
        })
        val (left, sign) = weightedPre(j.left, if (valueRead) None else Some(decides)) match {
          case Some((weighted, w)) => (weighted, times(inner, w))
          case None => (pre(j.left), inner)
        }
        fromLeft :+ Branch(filtered(Project(j.output :+ Alias(sign, multiplicity.name)(exprId = multiplicity.exprId),
              j.copy(left = Filter(decides, left), right = change))),
          leafNames(j.left).map(n =>
            if (valueRead) s"Pre($n)"
            else s"Pre($n) where the old and new value decide differently") :+
            s"D(${right.nodeName} over ${leafNames(right).distinct.mkString(", ")})")
      }
    }
  }

  /** True where `cond` is a time filter whose instant moves in these rules (the clock's delta). */
  private def moves(cond: Expression): Boolean = clockOnly && TimeFilters.bound(cond)

  /**
   * The delta of the clock alone, Q(Pre, t1) - Q(Pre, t0), where the view's filters read the
   * time and the refresh's instant t1 is not the instant t0 its rows are at ([[TimeFilters]]);
   * the branches of [[delta]] are Q(Post, t1) - Q(Pre, t1). Nil for other views.
   */
  def timeBranches(plan: LogicalPlan): Seq[Branch] = instantBefore match {
    case Some(t0) if !clockOnly && plan.exists(_.expressions.exists(_.exists {
          case r: RefreshInstant => r.micros != t0
          case _ => false
        })) =>
      clock.delta(plan)
    case _ => Nil
  }

  private lazy val clock =
    new DeltaRules(new AtPre(reader), multiplicity, FkSettings.Off, instantBefore = instantBefore, clockOnly = true)

  /**
   * The rows of `child` at Pre that a time filter's move from t0 to t1 lets in or out:
   * s_{c(t1) and not c(t0)}(Pre) - s_{c(t0) and not c(t1)}(Pre). Per time conjunct c_i, one
   * branch each way whose condition is a conjunction (c(t1), c_1(t0) .. c_{i-1}(t0), not c_i(t0)),
   * so that Spark pushes each to the scan and Delta skips the files outside the crossed range;
   * the branches are disjoint and sum to the difference.
   */
  private def crossed(cond: Expression, child: LogicalPlan): Seq[Branch] = if (!moves(cond)) Nil
  else {
    val t0 = instantBefore.get
    val (timed, others) = splitConjuncts(cond).partition(TimeFilters.bound)
    val before = timed.map(c => c.transform { case r: RefreshInstant => r.copy(micros = t0) })
    lazy val read = pre(child)
    def side(in: Seq[Expression], out: Seq[Expression], sign: Int, what: String) = in.indices.map { i =>
      val c = (others ++ in ++ out.take(i) :+ not(out(i))).reduce(And)
      // A filter over a table occurrence: the crossed rows read on the driver where they are few.
      val rows = tableUnder(child).filter(l => c.references.subsetOf(AttributeSet(l.output)))
        .flatMap(reader.preFilesWhere(_, c)).getOrElse(read)
      Branch(Project(child.output :+ Alias(Literal(sign), multiplicity.name)(exprId = multiplicity.exprId),
          Filter(c, rows)),
        leafNames(child).map(n => s"Pre($n) $what the time filter ${describe(timed(i))}"))
    }
    side(timed, before, 1, "entering") ++ side(before, timed, -1, "leaving")
  }

  private def describe(c: Expression): String = {
    val at = c.collectFirst { case r: RefreshInstant => r.micros }.get
    def ts(micros: Long) = Literal(micros, org.apache.spark.sql.types.TimestampType).sql
    c.transform { case r: RefreshInstant => UnresolvedInstant(r.function) }.sql +
      s" as the instant moves from ${ts(instantBefore.get)} to ${ts(at)}"
  }

  private def tableUnder(plan: LogicalPlan): Option[SourceLeaf] = plan match {
    case SourceLeaf(leaf) => Some(leaf)
    case SubqueryAlias(_, child) => tableUnder(child)
    case v: View => tableUnder(v.child)
    case _ => None
  }

  /** Not `c` where it is true, as a predicate Spark pushes to a scan where `c` is a comparison of a
   * column with a value (null only where the column is, whatever the instant). */
  private def not(c: Expression): Expression = c match {
    case b: BinaryComparison if b.left.references.isEmpty || b.right.references.isEmpty => Not(b)
    case other => Not(Coalesce(Seq(other, Literal.FalseLiteral)))
  }

  private def splitConjuncts(e: Expression): Seq[Expression] = e match {
    case And(a, b) => splitConjuncts(a) ++ splitConjuncts(b)
    case other => Seq(other)
  }

  private def generic(plan: LogicalPlan): Seq[Branch] = plan match {
    case SourceLeaf(leaf) =>
      reader.delta(leaf).map(p => Branch(p, Seq(s"D(${leaf.name})"))).toSeq
    case leaf: LeafNode if SourceLeaf.isConstant(leaf) => Nil
    case u: UnionLoop => recursive(u)
    // Where a rule reaches the reference itself, its rows do not change (see `recursive`).
    case _: UnionLoopRef => Nil
    case SubqueryAlias(_, child) => delta(child)
    case v: View => delta(v.child)
    case s: Sort => delta(s.child)
    case Filter(cond, child) => delta(child).map(b => b.copy(plan = Filter(cond, b.plan))) ++ crossed(cond, child)
    case Project(list, child) => delta(child).map(b => b.copy(plan = Project(list :+ multiplicity, b.plan)))
    case j: Join if j.joinType == Inner =>
      val out = j.output :+ multiplicity
      delta(j.left).map { b =>
        Branch(Project(out, j.copy(left = b.plan, right = post(j.right))),
          b.terms ++ leafNames(j.right).map(n => s"Post($n)"))
      } ++ delta(j.right).map { b =>
        weightedPre(j.left) match {
          case Some((left, w)) =>
            // Pre(L) = Post(L) - D(L), weighted: a row's sign is its delta sign times its weight.
            val inner = AttributeReference("__ivm_m_in", multiplicity.dataType, nullable = false)()
            val right =
              Project(b.plan.output.filterNot(_.exprId == multiplicity.exprId) :+ Alias(multiplicity, inner.name)(
                  exprId = inner.exprId),
                b.plan)
            Branch(Project(j.output :+ Alias(times(inner, w), multiplicity.name)(exprId = multiplicity.exprId),
                j.copy(left = left, right = right)),
              leafNames(j.left).map(n => s"Pre($n)") ++ b.terms)
          case None =>
            Branch(Project(out, j.copy(left = pre(j.left), right = b.plan)),
              leafNames(j.left).map(n => s"Pre($n)") ++ b.terms)
        }
      }
    case u: Union =>
      u.children.zipWithIndex.flatMap { case (child, i) =>
        delta(child).map { b =>
          if (i == 0) b
          else b.copy(plan = Project(child.output.zip(u.output).map { case (c, o) =>
              Alias(c, o.name)(exprId = o.exprId)
            } :+ multiplicity, b.plan))
        }
      }
    case a: Aggregate => onChangedKeys(a, Some(Seq(a.groupingExpressions)), "groups")
    case d: Distinct => onChangedKeys(d, Some(Seq(d.child.output)), "rows")
    // A generator is a flatMap: each input row's output rows carry its sign.
    case g: Generate =>
      delta(g.child).map(b =>
        b.copy(plan = Project(g.output :+ multiplicity, g.copy(unrequiredChildIndex = Nil, child = b.plan))))
    // GROUPING SETS / ROLLUP / CUBE: each input row once per grouping set, with its sign.
    case e: Expand => delta(e.child).map(b =>
        b.copy(plan = Expand(e.projections.map(_ :+ multiplicity), e.output :+ multiplicity, b.plan)))
    // A left outer, semi, anti or existence join gives each left row its output from that row
    // and the right side alone: it is linear in its left side. Where only the left side changed,
    // D(L op R) = D(L) op R (Griffin & Kumar 1998 derive such rules), where recomputing the
    // changed keys would read every left row of a key a change touched, at Pre and at Post (a
    // fact table LEFT JOIN a dimension on a key of a few values, TPC-DS q72's promotion). The
    // keys of the left side's change are the join's changed keys for an operator above it that
    // is recomputed by the same keys, as on the keyed path; computed only if it asks.
    case j: Join if leftLinear(j) && delta(j.right).isEmpty && delta(j.left).nonEmpty =>
      j match {
        case ExtractEquiJoinKeys(_, lk, rk, _, _, _, _, _) =>
          lazy val affected = fkSettings.steps.materialize(changedKeys(j, Seq(lk, rk), Seq(delta(j.left), Nil)))
          changedKeysOf(j) = (Seq(lk, rk), () => affected)
        case _ =>
      }
      delta(j.left).map { b =>
        Branch(Project(j.output :+ multiplicity, j.copy(left = b.plan, right = post(j.right))),
          b.terms ++ leafNames(j.right).map(n => s"Post($n)"))
      }
    // Outer, semi, anti and existence joins: the output for an equi-join key depends only on
    // the rows of both sides with that key (Larson & Zhou 2007 maintain outer joins by key the
    // same way); with no equi-join key, on all of them.
    case j: Join => onChangedKeys(j,
        j match {
          case ExtractEquiJoinKeys(_, lk, rk, _, _, _, _, _) => Some(Seq(lk, rk))
          case _ => None
        }, "keys")
    case w: Window if w.partitionSpec.nonEmpty => onChangedKeys(w, Some(Seq(w.partitionSpec)), "partitions")
    // Without PARTITION BY, over a materialized view's rows (PlanValidator): all of it, at Pre and at Post.
    case w: Window => onChangedKeys(w, None, "partitions")
    case other => throw IvmErrors.internal(s"no delta rule for ${other.nodeName}")
  }

  /**
   * D of a recursive CTE's rows R = A + B(R): one recursion of its own, D = S0 + B'(D), where
   * S0 = D(A) + (B'(R) - B(R)) ([[RecursiveRows]] derives it). S0's second term is B's delta over its
   * tables with R held at its rows before the refresh (`loopsAtPre`, read from the view); the
   * recursion then steps with B over the tables at Post through the change alone, each row
   * keeping its sign as a delta's row keeps it through a join. Spark's own limits on a recursion
   * (spark.sql.cteRecursionLevelLimit, spark.sql.cteRecursionRowLimit) bound it, as they bound
   * the query.
   */
  private def recursive(u: UnionLoop): Seq[Branch] = {
    val held = reader.recursiveRowsAtPre(u).getOrElse(
      throw IvmErrors.internal(s"the rows of recursive CTE ${u.id} before the refresh are not kept"))
    val atPre = new DeltaRules(reader, multiplicity, FkSettings.Off, loopsAtPre = loopsAtPre + (u.id -> held))
    val seeds = delta(u.anchor) ++ atPre.delta(u.recursion)
    if (seeds.isEmpty) return Nil
    val id = CTERelationDef.newId
    val stepThrough = new DeltaRules(new AtPost(reader), multiplicity, FkSettings.Off,
      precomputed = {
        case r: UnionLoopRef if r.loopId == u.id =>
          Some(Seq(Branch(UnionLoopRef(id, r.output :+ multiplicity, accumulated = false), Seq("D(recursive rows)"))))
        case _ => None
      })
    val steps = stepThrough.delta(u.recursion)
    val output = (u.output :+ multiplicity).map(_.newInstance())
    val loop = UnionLoop(id, unionAll(seeds.map(b => RecursiveRows.freshIds(b.plan))),
      unionAll(steps.map(b => RecursiveRows.freshIds(b.plan))), output.map(_.exprId))
    Seq(Branch(Project((u.output :+ multiplicity).zip(loop.output).map { case (a, o) =>
            Alias(o, a.name)(exprId = a.exprId)
          }, loop),
        Seq(s"recursion seeded by [${seeds.map(_.describe).mkString(" + ")}], stepping by " +
          steps.map(_.describe).mkString(" + "))))
  }

  /** A reference to a recursive CTE held at its rows before the refresh, as its output (weighted or not). */
  private def loopAtPre(r: UnionLoopRef, weighted: Boolean): (LogicalPlan, Attribute) = {
    val (rows, w) = loopsAtPre(r.loopId)
    val named = r.output.zip(rows.output).map { case (a, o) => Alias(o, a.name)(exprId = a.exprId) }
    if (weighted) {
      val weight = AttributeReference("__ivm_w", multiplicity.dataType, nullable = false)()
      (Project(named :+ Alias(Cast(w, multiplicity.dataType, None, EvalMode.ANSI), weight.name)(exprId = weight.exprId),
          rows), weight)
    } else {
      // Each row as many times as its multiplicity: the bag the query's own recursion would read.
      val i = AttributeReference("__ivm_i", org.apache.spark.sql.types.LongType, nullable = false)()
      val exploded = Generate(Explode(new Sequence(Literal(1L), w)), Nil, outer = false, None, Seq(i), rows)
      (Project(named, exploded), w)
    }
  }

  /**
   * D of an operator whose output for a key depends only on its inputs' rows with that key
   * (GROUP BY keys, a join's equi-join keys, a window's PARTITION BY): the output of the keys
   * that changed leaves with its Pre value (multiplicity -1) and comes back with its Post
   * value (+1); rows of unchanged keys are not read, and what did not change cancels when the
   * view sums the multiplicities. `keys(i)` are the key expressions over child i; None (or no keys) when the
   * output does not split by key: then all of it is recomputed when anything under it changed.
   * A NULL key matches null-safely, so rows with NULL keys are recomputed with their key.
   */
  private def onChangedKeys(node: LogicalPlan, keys: Option[Seq[Seq[Expression]]], what: String): Seq[Branch] = {
    val changed = node.children.map(delta)
    if (changed.forall(_.isEmpty)) return Nil
    val keyed = keys.filter(_.head.nonEmpty)
    val inputs = node.children.flatMap(leafNames).distinct.mkString(", ")
    // The changed keys are computed once and read by every side and child: kept as a plan, they
    // would repeat the delta below 2 x children times per level, exponentially in the nesting.
    lazy val affected = fkSettings.steps.materialize(changedKeys(node, keyed.get, changed))
    keyed.foreach(perChild => changedKeysOf(node) = (perChild, () => affected))
    lazy val probes = keyed.map(perChild => probeKeys(node, perChild, affected)).getOrElse(node.children.map(_ => None))
    // A semi, anti or existence join asks of its right side only whether a key has rows.
    lazy val matches = keyed.flatMap(_ => matchedKeys(node, affected))
    def side(read: LogicalPlan => LogicalPlan, sign: Int, label: String): Branch = {
      val restricted = node.children.zipWithIndex.map {
        case (_, 1) if matches.isDefined => if (sign < 0) matches.get._1 else matches.get._2
        case (child, i) =>
          keyed.map(perChild => restriction(read(child), perChild(i), affected, probes(i))).getOrElse(read(child))
      }
      Branch(Project(node.output :+ Alias(Literal(sign), multiplicity.name)(exprId = multiplicity.exprId),
          node.withNewChildren(restricted)),
        Seq(s"$label(${node.nodeName} over $inputs) on changed " + (if (keyed.isDefined) what else "input: all of it") +
          matches.map(x => s", its right side from the ${x._3}").getOrElse("")))
    }
    Seq(side(pre, -1, "-Pre"), side(post, 1, "+Post"))
  }

  /**
   * For a semi, anti or existence join on one equi-join key and nothing else, whose right side
   * is one table under filters ([[CountedTable]]): the changed keys that have rows on the right
   * at Pre and at Post, from the right side's counts per key, where the reader keeps them. The
   * join then matches each changed left row as it would against the right side's rows, which
   * are not read (for TPC-H Q22's NOT EXISTS, `orders` is not scanned for the changed customers).
   */
  private def matchedKeys(node: LogicalPlan, affected: => LogicalPlan): Option[(LogicalPlan, LogicalPlan, String)] =
    node match {
      case j: Join if j.joinType == LeftSemi || j.joinType == LeftAnti || j.joinType.isInstanceOf[ExistenceJoin] =>
        for {
          (table, rk) <- countedRight(j)
          keys <- fkSettings.steps.distinctValues(affected, affected.output.head, fkSettings.probe.maxKeys)
          counts <- reader.keyCounts(table, keys)
        } yield {
          val toCatalyst = org.apache.spark.sql.catalyst.CatalystTypeConverters.createToCatalystConverter(rk.dataType)
          def present(at: Map[Any, Long]) = LocalRelation(Seq(rk.toAttribute),
            at.iterator.collect { case (k, n) if n > 0 => InternalRow(toCatalyst(k)) }.toSeq)
          (present(counts.pre), present(counts.post), table.describe)
        }
      case _ => None
    }

  /**
   * Filters that let each large child skip the files that cannot hold a changed key (Delta's
   * min/max statistics; see [[KeyProbe]]): the changed values of the first key (from `affected`,
   * the materialized changed keys) if there are at most `maxKeys`, as ranges. Rows with a NULL
   * key are kept (they may be changed keys too); the semi join above still matches exactly.
   */
  private def probeKeys(node: LogicalPlan, keys: Seq[Seq[Expression]],
      affected: LogicalPlan): Seq[Option[Expression]] = {
    val p = fkSettings.probe
    val large = node.children.zip(keys).map { case (child, ks) =>
      ks.head match {
        case a: Attribute if KeyProbe.probeable(a.dataType) && sizeInBytes(child) >= p.minTableBytes => Some(a)
        case _ => None
      }
    }
    if (large.forall(_.isEmpty)) return large.map(_ => None)
    fkSettings.steps.distinctValues(affected, affected.output.head, p.maxKeys) match {
      case Some(values) => large.map(_.map(a => Or(IsNull(a), KeyProbe.filter(a, values, p.maxRanges))))
      case None => large.map(_ => None)
    }
  }

  /**
   * A join linear in its left side whose delta is taken as such: a left outer join, and a semi,
   * anti or existence join unless its right side is one table whose counts per key a refresh
   * may read instead of the table ([[matchedKeys]]: TPC-H Q22's NOT EXISTS reads no row of
   * `orders` for its changed customers).
   */
  private def leftLinear(j: Join): Boolean = j.joinType match {
    case LeftOuter => true
    case LeftSemi | LeftAnti | ExistenceJoin(_) => countedRight(j).isEmpty
    case _ => false
  }

  /**
   * The right side of a join on one equi-join key and nothing else, as one table under filters
   * whose counts per key a refresh may read ([[CountedTable]]), with that key.
   */
  private def countedRight(j: Join): Option[(CountedTable, Attribute)] = j match {
    case ExtractEquiJoinKeys(_, _, Seq(rk: Attribute), None, _, _, right, _)
        if fkSettings.steps.collects && j.right.output.exists(_.exprId == rk.exprId) =>
      CountedTable.of(right, rk).map(_ -> rk)
    case _ => None
  }

  /**
   * The distinct keys of the changed rows of every child (`keys(i)` over child i). A child
   * that is itself recomputed by the same keys (an aggregate over an outer join on its group
   * key, an anti join over a semi join on the same key: TPC-H Q13, Q21) gives its own changed
   * keys instead, a superset of the keys its delta has, computed already: its delta, whose Pre
   * and Post sides read its inputs again, is then not computed for its keys at all.
   */
  private def changedKeys(node: LogicalPlan, keys: Seq[Seq[Expression]], changed: Seq[Seq[Branch]]): LogicalPlan = {
    val names = keys.head.indices.map(i => s"__ivm_k$i")
    def named(ks: Seq[Expression], rows: LogicalPlan) = Project(ks.zip(names).map { case (k, n) => Alias(k, n)() }, rows)
    val perChild = keys.lazyZip(changed).lazyZip(node.children).toSeq.filter(_._2.nonEmpty)
    Distinct(unionAll(perChild.map { case (ks, branches, child) =>
      sameKeysBelow(child, ks).map(below => named(below.output, below))
        .getOrElse(named(ks, unionAll(branches.map(_.plan))))
    }))
  }

  /** The changed keys of each operator recomputed by key so far: its keys per child, and them. */
  private val changedKeysOf = scala.collection.mutable.Map[LogicalPlan, (Seq[Seq[Expression]], () => LogicalPlan)]()

  /**
   * The changed keys of the keyed operator under `plan` (through filters and projections), if
   * they are `keys`: the keys of the operator's output rows (a join's first side, whose rows
   * it keeps or pads; an aggregate's groups; a window's partitions; a DISTINCT's rows).
   */
  private def sameKeysBelow(plan: LogicalPlan, keys: Seq[Expression]): Option[LogicalPlan] = {
    def same(a: Seq[Expression], b: Seq[Expression]) =
      a.size == b.size && a.zip(b).forall { case (x, y) => x.semanticEquals(y) }
    plan match {
      case Filter(_, c) => sameKeysBelow(c, keys)
      case SubqueryAlias(_, c) => sameKeysBelow(c, keys)
      case Project(list, c) =>
        val ks = keys.map(KeyRestriction.substitute(_, KeyRestriction.aliases(list)))
        if (ks.forall(_.references.subsetOf(c.outputSet))) sameKeysBelow(c, ks) else None
      case n => changedKeysOf.get(n).flatMap { case (perChild, affected) =>
          val outputKeys = n match {
            case j: Join
                if j.joinType == LeftOuter || j.joinType == LeftSemi || j.joinType == LeftAnti ||
                  j.joinType.isInstanceOf[ExistenceJoin] => Some(keys)
            case a: Aggregate =>
              val ks = keys.map(KeyRestriction.substitute(_, KeyRestriction.groups(a)))
              Some(ks).filter(_.forall(_.references.subsetOf(a.child.outputSet)))
            case _: Window | _: Distinct => Some(keys)
            case _ => None
          }
          outputKeys.filter(same(_, perChild.head)).map(_ => affected())
        }
    }
  }

  def unionAll(plans: Seq[LogicalPlan]): LogicalPlan = plans match {
    case Seq(one) => one
    case many => Union(many)
  }

  /**
   * What `plan` reads as Pre and as Post, as stamps ("id@version" of each Delta table it reads,
   * sorted): rows computed from the same stamp are the same rows. None if a leaf is not pinned.
   */
  def stamps(plan: LogicalPlan): Option[(String, String)] = {
    val versions = plan.collect { case SourceLeaf(leaf) => reader.versions(leaf) }
    if (versions.isEmpty || versions.exists(_.isEmpty)) None
    else {
      def stamp(v: ((String, Long, Long)) => Long) =
        versions.flatten.map(t => s"${t._1}@${v(t)}").distinct.sorted.mkString(",")
      Some((stamp(_._2), stamp(_._3)))
    }
  }

  /** Bytes of the tables `plan` reads, at the pinned versions (Long.MaxValue if unknown). */
  def sizeInBytes(plan: LogicalPlan): Long = plan.collect { case SourceLeaf(leaf) => reader.sizeInBytes(leaf) }
    .foldLeft(0L)((a, b) => if (a == Long.MaxValue || b == Long.MaxValue) Long.MaxValue else a + b)

  private def leafNames(plan: LogicalPlan): Seq[String] = plan.collect {
    case SourceLeaf(leaf) => leaf.name
    case _: UnionLoopRef => "recursive rows"
  }

  // Multiplicities are counts, not values of the query: past their type's range a refresh fails
  // (ARITHMETIC_OVERFLOW, the view left as it was) under any ANSI setting, never wraps.
  private def times(a: Expression, b: Expression): Expression = Multiply(a, b, EvalMode.ANSI)
  private def negated(m: Expression): Expression = UnaryMinus(m, failOnError = true)
}

/** A reader of the tables as the view last read them, unchanged: the clock's delta's reader. */
private class AtPre(reader: LeafReader) extends LeafReader {
  def pre(leaf: SourceLeaf): LogicalPlan = reader.preFiles(leaf)
  def post(leaf: SourceLeaf): LogicalPlan = reader.preFiles(leaf)
  def delta(leaf: SourceLeaf): Option[LogicalPlan] = None
  def preDel(leaf: SourceLeaf): LogicalPlan = reader.preFiles(leaf)
  override def preFilesWhere(leaf: SourceLeaf, where: Expression): Option[LogicalPlan] =
    reader.preFilesWhere(leaf, where)
}

/** A reader of the tables at Post, unchanged: the reader a recursive delta steps with. */
private class AtPost(reader: LeafReader) extends LeafReader {
  def pre(leaf: SourceLeaf): LogicalPlan = reader.post(leaf)
  def post(leaf: SourceLeaf): LogicalPlan = reader.post(leaf)
  def delta(leaf: SourceLeaf): Option[LogicalPlan] = None
  def preDel(leaf: SourceLeaf): LogicalPlan = reader.post(leaf)
  override def sizeInBytes(leaf: SourceLeaf): Long = reader.sizeInBytes(leaf)
}

/** A time function by name, for descriptions only. */
private case class UnresolvedInstant(function: String) extends LeafExpression with Unevaluable {
  override def dataType: org.apache.spark.sql.types.DataType = org.apache.spark.sql.types.TimestampType
  override def nullable: Boolean = false
  override def sql: String = s"$function()"
}
