package io.sparkivm.planner

import scala.collection.mutable

import io.sparkivm.errors.IvmErrors
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate.{Max, Min}
import org.apache.spark.sql.catalyst.plans.logical._
import org.apache.spark.sql.catalyst.plans.{Inner, LeftSemi}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.types.{IntegerType, LongType}

/** What FK-aware delta planning needs from the layers around the planner. */
case class FkSettings(pruning: Boolean, probe: ProbeSettings, keys: SourceLeaf => TableKeys,
    /** Runs small plans: the guard and integrity checks, probe keys, materialized steps. */
    steps: PlanSteps,
    /** Join blocks start every branch from its delta, then each unit that shares a conjunct. */
    deltaFirst: Boolean = false,
    /** Restricted reads of tables at least this large are held and shared ([[SharedScans]]). */
    sharedReadMinBytes: Long = Long.MaxValue)

object FkSettings {
  val Off: FkSettings = FkSettings(pruning = false, ProbeSettings.Off, _ => TableKeys.Empty, PlanOnly)
}

/**
 * Delta plans for join blocks that use declared foreign keys (Svingos et al. 2023, section 3) and key
 * probing. For one block:
 *  1. the FK graph of its units (FkGraph.of);
 *  2. for every edge x -> y whose dimension y changed, the FK-Guard (no key of y both deleted
 *     and inserted, Theorem 5.3) and the integrity check below; a dimension failing the guard
 *     loses all its incoming edges, an edge failing integrity is dropped, for this refresh only
 *     (the paper's dynamic variant, section 4.1);
 *  3. Algorithm 1 on what is left: per rooted component C, D(C) = D(root) x PreDel(dims) in BFS
 *     order (Theorem 5.7, joined along PK-FK edges as Wang & Yi's Theorem 11 asks); components,
 *     and units outside every edge, combine by the generic rule
 *     D = sum_i Pre(C1..Ci-1) x D(Ci) x Post(Ci+1..Ck).
 *
 * Integrity. For V = x join y on x.f = y.p, D(x) x PreDel(y) minus the exact delta is
 * Post(x) x Del(y) - Pre(x) x Ins(y) (expand PreDel = Post + Del = Pre + Ins). So pruning is
 * exact when no Post(x) row references a deleted key of y and no Pre(x) row an inserted one;
 * the same holds at every step of a component, since each joined row carries its x row. The
 * paper derives this from referential integrity and the guard; Delta does not enforce foreign
 * keys, so every refresh checks it directly, probing x with the changed keys of y. A failing
 * check costs only the pruning of that edge, never a wrong view.
 */
class FkDeltaPlanner(rules: DeltaRules, reader: LeafReader, settings: FkSettings) {
  private val checked = mutable.Map[(String, String, Seq[String]), Option[String]]()
  private val lines = mutable.LinkedHashSet[String]()

  /** What the planner decided, in words: graph, components, checks, probes. */
  def notes: Seq[String] = lines.toSeq

  /** The branches of `plan` if it is a join block this planner handles. */
  def delta(plan: LogicalPlan): Option[Seq[Branch]] =
    if (!settings.pruning && !settings.probe.enabled && !settings.deltaFirst) None
    // Outer, semi and anti joins and windows are units of the block (JoinBlock stops at them):
    // FK edges join table units only, and such units are restricted to the keys they join with.
    // Called once per plan and refresh: DeltaRules.delta keeps what it returns.
    else JoinBlock.of(plan).flatMap(b => updatesLast(plan, b).orElse(planBlock(b)))

  /**
   * Updates of dimension rows (a key both deleted and inserted), which fail the FK-Guard, applied
   * as a change of their own after all the others. A refresh's change may be split and applied
   * in any order (the view's delta is the sum of the steps' deltas):
   *  1. every change but the updated keys' rows: the dimension goes from Pre to
   *     S = Post - D_U (its other keys changed; the updated keys still hold their old rows). The
   *     guard holds on this step, so the block is FK-pruned as usual, with PreDel(y) =
   *     S + Del_R = Post(y) without the updated keys + Del(y);
   *  2. the updated keys' change D_U, with every other table already at Post: D_U x Post(rest)
   *     by the generic rule, which reads the rest of the block only for those keys (probed).
   * Without this, the dimension would lose its pruning (Svingos et al. 2023, section 4.1, dynamic
   * variant) and every branch would read Pre and Post of the whole block. Used when the change of
   * the dimension is held on the driver, its primary key is one column, and the block reads it
   * once.
   */
  private def updatesLast(plan: LogicalPlan, block: JoinBlock): Option[Seq[Branch]] = {
    if (!settings.pruning) return None
    val declared = FkGraph.of(block, settings.keys)
    val splits = declared.edges.map(_.to).distinct.flatMap(updatedKeys(block, _)).map(s => s.leaf.name -> s).toMap
    if (splits.isEmpty) return None
    val others = new DeltaRules(new UpdatesSplitReader(reader, splits, rules.multiplicity, updatesOnly = false),
      rules.multiplicity, settings)
    val updates = new DeltaRules(new UpdatesSplitReader(reader, splits, rules.multiplicity, updatesOnly = true),
      rules.multiplicity,
      // The updates are few: join them first, then along the block's conjuncts.
      settings.copy(pruning = false, deltaFirst = true))
    val first = others.delta(plan)
    val last = updates.delta(plan)
    splits.values.toSeq.sortBy(_.leaf.name).foreach { s =>
      lines += s"${s.keys.size} updated keys of ${s.leaf.name} (deleted and inserted): applied after the " +
        "other changes, joined with Post of the rest of the block (the FK-Guard holds on the rest)"
    }
    lines ++= others.fk.notes
    lines ++= updates.fk.notes
    // In step 2 every other table is at Post (its reader's Pre is Post): name the terms so.
    def step2(term: String) =
      if (term.startsWith("D(")) term.dropRight(1) + " updates)"
      else if (term.startsWith("Pre(")) "Post(" + term.stripPrefix("Pre(") else term
    Some(first ++ last.map(b => b.copy(terms = b.terms.map(step2))))
  }

  /** The keys of dimension unit y both deleted and inserted, when the update can be split off. */
  private def updatedKeys(block: JoinBlock, y: Int): Option[UpdatedKeys] = for {
    (leaf, _) <- block.leafOf(y)
    if block.units.indices.count(u => block.leafOf(u).exists(_._1.name == leaf.name)) == 1
    pk <- settings.keys(leaf).primaryKey.filter(_.size == 1).map(_.head)
    local <- reader.deltaOnDriver(leaf)
    keys = signsPerKey(local, Seq(pk)).collect { case (k, (lo, hi)) if lo < 0 && hi > 0 => k.head }.toSet
    if keys.nonEmpty
  } yield UpdatedKeys(leaf, pk, keys)

  private def planBlock(block: JoinBlock): Option[Seq[Branch]] = {
    val declared = if (settings.pruning) FkGraph.of(block, settings.keys) else FkGraph(block.units.size, Nil)
    if (declared.edges.isEmpty && !settings.deltaFirst &&
      !block.units.indices.exists(u => probes(block, u) || restricts(block, u))) return None
    val name = block.units.indices.map(unitName(block, _))
    def edgeName(e: FkEdge) = s"${name(e.from)} -> ${name(e.to)} (${e.fk})"
    if (declared.edges.nonEmpty) lines += "FK graph: " + declared.edges.map(edgeName).mkString(", ")

    // The guard per dimension, then integrity per edge, for dimensions that changed.
    val guardFails = declared.edges.map(_.to).distinct.filter { y =>
      guard(block, y).exists { why =>
        lines += s"FK-Guard fails on ${name(y)}: $why; its " +
          "incoming edges fall back to the generic rule for this refresh"; true
      }
    }.toSet
    // RELY: the referencing rows are trusted to be valid (no scan of the referencing table).
    declared.edges.filter(e => e.rely && !guardFails(e.to) && changed(block, e.to)).foreach { e =>
      lines += s"integrity of ${edgeName(e)} relied on (FOREIGN KEY ... RELY), not re-checked"
    }
    val integrityFails = declared.edges.filterNot(e => guardFails(e.to) || e.rely).filter { e =>
      integrity(block, e).exists { why =>
        lines += s"integrity fails on ${edgeName(e)}: $why; the " +
          "edge falls back to the generic rule for this refresh"; true
      }
    }.toSet
    declared.edges.map(_.to).distinct.filterNot(guardFails).filterNot(y => integrityFails.exists(_.to == y))
      .filter(y => changed(block, y)).foreach { y =>
        lines += s"FK-Guard and integrity hold on ${name(y)}"
      }
    val graph = declared.without(e => guardFails(e.to) || integrityFails(e))
    val components = graph.components
    components.filter(_.order.size > 1).foreach { c =>
      lines += s"component rooted at ${name(c.root)}: D(${name(c.root)}) x " +
        c.order.tail.map(n => s"PreDel(${name(n)})").mkString(" x ") + " (pruned: " +
        c.order.tail.map(name).mkString(", ") + ")"
    }
    val componentOf = components.zipWithIndex.flatMap { case (c, i) => c.order.map(_ -> i) }.toMap

    val branches = components.zipWithIndex.flatMap { case (c, i) =>
      signedTogether(block.units(c.root), rules.delta(block.units(c.root))).map { b =>
        // Name the delta of a table occurrence as the view does (its alias), like the others.
        val start = if (block.leafOf(c.root).isDefined) b.copy(terms = Seq(s"D(${name(c.root)})")) else b
        val side: Int => (LogicalPlan, String, Boolean) = u =>
          if (c.nodes(u)) (rules.preDel(block.units(u)), s"PreDel(${name(u)})", true)
          else if (componentOf(u) < i) (rules.pre(block.units(u)), s"Pre(${name(u)})", false)
          else (rules.post(block.units(u)), s"Post(${name(u)})", false)
        // The component in BFS order first, then the other units, each one joined to what is
        // already joined where the conjuncts allow.
        val rest = block.units.indices.filterNot(c.nodes)
        val order = c.order.tail ++ connectedOrder(block, c.order.toSet, rest)
        joinAll(block, start, order, side)
      }
    }
    Some(branches)
  }

  /**
   * The branches of one unit's delta as one (their union), where each gives the unit's columns
   * and the multiplicity: an aggregate's -Pre and +Post of its changed groups then meet the other
   * units once, not once each (join distributes over union), which halves the steps computed
   * and the keys that restrict the other units (TPC-DS's self-joined aggregates, queries 4, 11
   * and 74, ran 80-180 jobs a refresh).
   */
  private def signedTogether(unit: LogicalPlan, branches: Seq[Branch]): Seq[Branch] = {
    val columns = unit.output :+ rules.multiplicity
    def aligned(plan: LogicalPlan): Option[LogicalPlan] = {
      val found = columns.map(a => plan.output.find(_.exprId == a.exprId))
      if (found.forall(_.isDefined)) Some(if (plan.output == columns) plan else Project(found.flatten, plan)) else None
    }
    val plans = branches.map(b => aligned(b.plan))
    if (branches.size < 2 || plans.exists(_.isEmpty)) branches
    else Seq(Branch(rules.unionAll(plans.flatten), Seq(branches.map(_.describe).mkString("(", " ", ")"))))
  }

  /** Units in an order where each one, if possible, shares a conjunct with those before it. */
  private def connectedOrder(block: JoinBlock, joined: Set[Int], rest: Seq[Int]): Seq[Int] = {
    var have = joined.flatMap(u => block.units(u).outputSet.toSeq.map(_.exprId))
    var left = rest
    val out = Seq.newBuilder[Int]
    while (left.nonEmpty) {
      val next = left.find { u =>
        val ids = block.units(u).outputSet.toSeq.map(_.exprId).toSet
        block.conditions.exists { c =>
          val refs = c.references.map(_.exprId)
          refs.exists(ids.contains) && refs.exists(have.contains)
        }
      }.getOrElse(left.head)
      out += next
      have ++= block.units(next).outputSet.toSeq.map(_.exprId)
      left = left.filterNot(_ == next)
    }
    out.result()
  }

  /** Joins a delta branch with the other units in `order`, then applies the block's output. */
  private def joinAll(block: JoinBlock, start: Branch, order: Seq[Int],
      side: Int => (LogicalPlan, String, Boolean)): Branch = {
    var acc = start.plan
    var terms = start.terms
    var pending = block.conditions
    order.foreach { u =>
      val (preDel, term, isPreDel) = side(u)
      val unitOut = block.units(u).outputSet
      val avail = acc.outputSet ++ unitOut
      val (now, later) = pending.partition(_.references.subsetOf(avail))
      pending = later
      val equi = now.collect {
        case EqualTo(a: Attribute, b: Attribute) if acc.outputSet.contains(a) && unitOut.contains(b) => (a, b)
        case EqualTo(b: Attribute, a: Attribute) if acc.outputSet.contains(a) && unitOut.contains(b) => (a, b)
      }
      val covered = if (!isPreDel || !settings.steps.collects) None
      else {
        // Computed once: its keys decide what of the dimension is read.
        acc = settings.steps.materialize(acc)
        coveredPreDel(block, u, equi, acc, term)
      }
      val raw = covered.getOrElse(preDel)
      val probed = if (covered.isDefined || equi.isEmpty) raw
      else if (restricts(block, u)) {
        // Computed once: its join keys restrict the unit, down to the unit's scans.
        acc = settings.steps.materialize(acc)
        val keys = settings.steps.materialize(Distinct(Project(equi.zipWithIndex.map { case ((a, _), i) =>
            Alias(a, s"__ivm_j$i")()
          }, acc)))
        lines += s"$term restricted to the keys joined so far (${equi.map(_._2.name).mkString(", ")}), " +
          "down to its scans"
        rules.restriction(raw, equi.map(_._2), keys)
      } else if (!probes(block, u)) raw
      else {
        // The keys are read from what is joined so far, which the join reads again: compute it once.
        acc = settings.steps.materialize(acc)
        probe(acc, equi, raw, term)
      }
      if (settings.steps.collects && covered.isEmpty && equi.nonEmpty && large(block, u)) {
        // Computed before it meets a large table: held, it is broadcast, and the table is read
        // once without a shuffle (adaptive execution is off for small refreshes).
        acc = settings.steps.materialize(acc)
      }
      acc = Join(acc, probed, Inner, now.reduceOption(And), JoinHint.NONE)
      terms :+= term
    }
    val filtered = pending.reduceOption(And).map(Filter(_, acc)).getOrElse(acc)
    Branch(Project(block.outputs :+ rules.multiplicity, filtered), terms)
  }

  /**
   * PreDel(y) as the rows joined so far need it, when they are held on the driver and join y on
   * its primary key (one column). PreDel(y) = Post(y) + Del(y) (Svingos et al. 2023, section
   * 1.4); for a key k the rows joined so far reference:
   *  - k deleted from y: no row of Post(y) has k (the FK-Guard holds: k was not also inserted,
   *    and k is y's primary key), so the rows are those of Del(y), which are on the driver;
   *  - k inserted into y: Post(y)'s one row of key k is the inserted row (k is y's primary
   *    key), which is on the driver too;
   *  - any other k: the rows of Post(y) with key k, read with the keys as a filter pushed into
   *    the scan (Delta skips the files that hold none of them).
   * So a dimension whose referenced keys all changed is not read at all (a fact row inserted or
   * deleted with its parent, as TPC-H's refresh functions do), and otherwise only for the keys
   * referenced (new parents are usually clustered at the end of the key range).
   */
  private def coveredPreDel(block: JoinBlock, u: Int, equi: Seq[(Attribute, Attribute)], joined: LogicalPlan,
      term: String): Option[LogicalPlan] = for {
    (leaf, cols) <- block.leafOf(u)
    pk <- settings.keys(leaf).primaryKey.filter(_.size == 1).map(_.head)
    (a, _) <- equi.find { case (_, b) => cols.get(b.exprId).exists(_.equalsIgnoreCase(pk)) }
    needed <- settings.steps.valuesOnDriver(joined, a)
    if needed.size <= settings.probe.maxKeys.max(100000)
    pkAttr <- leaf.output.find(_.name.equalsIgnoreCase(pk))
    if KeyProbe.equalsAsJvm(pkAttr.dataType) // the keys become an InSet, matched by JVM equality
  } yield {
    def keysSigned(negative: Boolean): Set[Any] = reader.deltaOnDriver(leaf).map { local =>
      val at = local.positions(Seq(pk)).head
      local.rows.iterator.filter(r => (r.getInt(local.signAt) < 0) == negative).map(_.get(at, pkAttr.dataType)).toSet
    }.getOrElse(Set.empty[Any])
    val (deleted, inserted) = (keysSigned(negative = true), keysSigned(negative = false))
    val fromPost = needed -- deleted -- inserted
    // Post's rows of those keys from the table's rows kept in memory by its key, where they are.
    val kept = if (fromPost.isEmpty) None else rules.keptPost(leaf, pkAttr, fromPost)
    val fromChange = needed.size - fromPost.size
    lines += s"$term read for the ${needed.size} keys joined so far: $fromChange from its changed rows " +
      s"(${needed.count(deleted)} deleted), ${fromPost.size} from Post(${leaf.table.table})" +
      kept.map(_ => " kept in memory").getOrElse("")
    rules.withLeaves(block.units(u),
      l => {
        // All of D(y) without its signs: Del(y), and Post(y)'s rows of the inserted keys (it is
        // small, and rows not referenced drop out in the join). Without a change held on the
        // driver (`inserted` is empty), Del(y) alone.
        val changedRows = reader.delta(l).map { d =>
          Project(l.output, if (inserted.isEmpty) Filter(LessThan(rules.multiplicity, Literal(0)), d) else d)
        }
        val post = if (fromPost.isEmpty) None
        else kept.orElse(Some(Filter(InSet(pkAttr, fromPost), reader.post(l))))
        (changedRows.toSeq ++ post.toSeq) match {
          case Seq() => LocalRelation(l.output)
          case Seq(one) => one
          case both => Union(both)
        }
      })
  }

  /** `large` filtered to the keys `small` has on the first equi-join column, if that pays. */
  private def probe(small: LogicalPlan, equi: Seq[(Attribute, Attribute)], large: LogicalPlan,
      term: String): LogicalPlan = {
    val p = settings.probe
    equi.find { case (_, b) => KeyProbe.probeable(b.dataType) } match {
      case Some((a, b)) if p.enabled =>
        settings.steps.distinctValues(small, a, p.maxKeys) match {
          case Some(keys) =>
            lines += s"probe $term on ${b.name}: ${keys.size} keys" +
              (if (keys.size > p.maxRanges) s" in ${p.maxRanges} ranges" else "")
            KeyProbe.probe(large, b, keys, p.maxRanges)
          case None if settings.steps.collects =>
            lines += s"probe $term on ${b.name}: more than ${p.maxKeys} keys; plain join"
            large
          case None =>
            lines += s"probe $term on ${b.name}: keys of the rows joined so far, collected when the refresh runs"
            large
        }
      case _ => large
    }
  }

  /**
   * True if unit u is not a table but a subplan with something a key restriction cuts below
   * its scans (an aggregate, a window, an outer, semi or anti join): see [[KeyRestriction]].
   */
  private def restricts(block: JoinBlock, u: Int): Boolean = block.leafOf(u).isEmpty &&
    block.units(u).exists(p => p.isInstanceOf[Aggregate] || p.isInstanceOf[Window] || p.isInstanceOf[Join])

  /** True if unit u reads a table of at least `spark.ivm.keyProbing.minTableBytes`. */
  private def large(block: JoinBlock, u: Int): Boolean =
    block.leafOf(u).exists { case (leaf, _) => reader.sizeInBytes(leaf) >= settings.probe.minTableBytes }

  /** True if unit u reads a table large enough for probing to pay. */
  private def probes(block: JoinBlock, u: Int): Boolean =
    block.leafOf(u).exists { case (leaf, _) => settings.probe.worth(reader.sizeInBytes(leaf)) }

  private def changed(block: JoinBlock, u: Int): Boolean =
    block.leafOf(u).exists { case (leaf, _) => reader.delta(leaf).isDefined }

  /** The leaf attributes of the named columns of a unit's table. */
  private def leafAttrs(leaf: SourceLeaf, cols: Seq[String]): Seq[Attribute] =
    cols.map(c =>
      leaf.output.find(_.name.equalsIgnoreCase(c)).getOrElse(
        throw IvmErrors.internal(s"${leaf.name} has no column $c")))

  /** Why the FK-Guard fails on dimension unit y (a key deleted and inserted), if it does. */
  private def guard(block: JoinBlock, y: Int): Option[String] = {
    val (leaf, _) = block.leafOf(y).get
    val pk = settings.keys(leaf).primaryKey.getOrElse(Nil)
    val why = s"a key of ${leaf.name} was both deleted and inserted (an update of the row)"
    reader.delta(leaf).flatMap { d =>
      checked.getOrElseUpdate((leaf.name, "guard", pk),
        reader.deltaOnDriver(leaf) match {
          case Some(local) =>
            // Decided on the driver from the change held there: no Spark job.
            if (signsPerKey(local, pk).values.exists { case (lo, hi) => lo < 0 && hi > 0 }) Some(why) else None
          case None =>
            val keys = leafAttrs(leaf, pk)
            val lo = Alias(Min(rules.multiplicity).toAggregateExpression(), "__ivm_lo")()
            val hi = Alias(Max(rules.multiplicity).toAggregateExpression(), "__ivm_hi")()
            val both = Filter(And(LessThan(lo.toAttribute, Literal(0)), GreaterThan(hi.toAttribute, Literal(0))),
              Aggregate(keys, keys ++ Seq(lo, hi), d))
            if (settings.steps.isEmpty(both)) None else Some(why)
        })
    }
  }

  /** The (lowest, highest) sign of each key of a change held on the driver. */
  private def signsPerKey(local: DriverDeltaRows, cols: Seq[String]): Map[Seq[Any], (Int, Int)] = {
    val at = local.positions(cols)
    val types = at.map(i => local.schema(i).dataType)
    local.rows.groupMapReduce(r => at.zip(types).map { case (i, t) => r.get(i, t) })(r =>
      (r.getInt(local.signAt), r.getInt(local.signAt))) { case ((a, b), (c, d)) => (math.min(a, c), math.max(b, d)) }
  }

  /**
   * Why pruning edge x -> y would not be exact on these changes, if so: a row of Post(x)
   * references a deleted key of y, or a row of Pre(x) an inserted one (see the class comment).
   * Pre(x) counts are Post(x) counts minus the net change of x.
   */
  private def integrity(block: JoinBlock, e: FkEdge): Option[String] = {
    val (yLeaf, yCols) = block.leafOf(e.to).get
    val (xLeaf, xCols) = block.leafOf(e.from).get
    reader.delta(yLeaf).flatMap { dy =>
      val fkCols = e.pairs.map { case (a, _) => xCols(a.exprId) }
      val pkCols = e.pairs.map { case (_, b) => yCols(b.exprId) }
      val why = s"rows of ${xLeaf.name} reference keys of ${yLeaf.name} that this refresh deletes " +
        "or inserts (deleted parents with remaining children, or late-arriving parents)"
      checked.getOrElseUpdate((xLeaf.name + "->" + yLeaf.name, "integrity", fkCols),
        integrityByCounts(xLeaf, fkCols, yLeaf, pkCols).map { bad =>
          lines += s"integrity of ${e.fk} from the counts of ${xLeaf.name} rows per ${fkCols.head}"
          Some(why).filter(_ => bad)
        }.getOrElse {
          // The changed keys under fresh names: x and y may be the same table (a self-reference).
          val pk = leafAttrs(yLeaf, pkCols)
          // Each changed key of y with its direction (max m: +1 inserted, -1 deleted; the guard
          // holds, so no key is both), computed on the driver when the change is held there.
          val (changedKeys, ck, dirAttr) = reader.deltaOnDriver(yLeaf) match {
            case Some(local) =>
              val attrs = pk.zipWithIndex.map { case (k, i) => AttributeReference(s"__ivm_k$i", k.dataType)() }
              val d = AttributeReference("__ivm_dir", IntegerType, nullable = false)()
              val rows = signsPerKey(local, pkCols).toSeq.map { case (k, (_, hi)) =>
                new GenericInternalRow((k :+ hi).toArray): InternalRow
              }
              (LocalRelation(attrs :+ d, rows), attrs, d: Attribute)
            case None =>
              val keyAliases = pk.zipWithIndex.map { case (k, i) => Alias(k, s"__ivm_k$i")() }
              val dir = Alias(Max(rules.multiplicity).toAggregateExpression(), "__ivm_dir")()
              (settings.steps.materialize(Aggregate(pk, keyAliases :+ dir, dy)), keyAliases.map(_.toAttribute),
                dir.toAttribute)
          }
          // Post(x) rows count +1 in both Post and Pre; the net change of x moves Pre by -m.
          val fk = leafAttrs(xLeaf, fkCols)
          val postX = reader.post(xLeaf)
          val probedPost = ck.headOption
            .filter(k => settings.probe.worth(reader.sizeInBytes(xLeaf)) && KeyProbe.probeable(k.dataType))
            .flatMap(k => settings.steps.distinctValues(changedKeys, k, settings.probe.maxKeys))
            .map(keys => KeyProbe.probe(postX, fk.head, keys, settings.probe.maxRanges)).getOrElse(postX)
          // Only the rows of x that reference a changed key are counted: a (broadcast) semi-join
          // before the aggregate, so the fact table is scanned but never grouped.
          val referencing = Join(probedPost, changedKeys, LeftSemi,
            Some(fk.zip(ck).map { case (f, k) => EqualTo(f, k): Expression }.reduce(And)), JoinHint.NONE)
          val refs = fk.indices.map(i => s"__ivm_f$i")
          def counts(p: LogicalPlan, post: Expression, pre: Expression): LogicalPlan =
            Project(fk.zip(refs).map { case (f, n) => Alias(f, n)() } ++
                Seq(Alias(post, "__ivm_post")(), Alias(pre, "__ivm_pre")()), p)
          val fromPost = counts(referencing, Literal(1L), Literal(1L))
          val fromDelta = reader.delta(xLeaf).map(dx =>
            counts(dx, Literal(0L), UnaryMinus(Cast(rules.multiplicity, LongType)))).toSeq
          val all = rules.unionAll(fromPost +: fromDelta)
          val fAttrs = fromPost.output.take(fk.size)
          val post = Alias(aggregate.Sum(fromPost.output(fk.size)).toAggregateExpression(), "__ivm_np")()
          val pre = Alias(aggregate.Sum(fromPost.output(fk.size + 1)).toAggregateExpression(), "__ivm_nq")()
          val perKey = Aggregate(fAttrs, fAttrs ++ Seq(post, pre), all)
          val on = fAttrs.zip(ck).map { case (f, k) => EqualTo(f, k): Expression }.reduce(And)
          val bad = Filter(
            Or(
              And(LessThan(dirAttr, Literal(0)), GreaterThan(post.toAttribute, Literal(0L))),
              And(GreaterThan(dirAttr, Literal(0)), GreaterThan(pre.toAttribute, Literal(0L)))),
            Join(changedKeys, perKey, Inner, Some(on), JoinHint.NONE))
          if (settings.steps.isEmpty(bad)) None else Some(why)
        })
    }
  }

  /**
   * The integrity check from the counts of x's rows per foreign key kept by the reader (Wang &
   * Yi 2020's reference counts `I(R, Rc)`), without reading x: true if a deleted key of y has
   * rows of Post(x) referencing it, or an inserted one rows of Pre(x). None where the counts
   * are not kept (a key of several columns, a change not held on the driver, a small x).
   */
  private def integrityByCounts(xLeaf: SourceLeaf, fkCols: Seq[String], yLeaf: SourceLeaf,
      pkCols: Seq[String]): Option[Boolean] = for {
    local <- reader.deltaOnDriver(yLeaf) if fkCols.size == 1 && settings.steps.collects
    fk = leafAttrs(xLeaf, fkCols).head
    pkType = local.schema(local.positions(pkCols).head).dataType if pkType == fk.dataType
    // Each changed key of y with its direction (max m: +1 inserted, -1 deleted; the guard holds).
    dirs = signsPerKey(local, pkCols).collect {
      case (Seq(k), (_, hi)) if k != null =>
        CatalystTypeConverters.convertToScala(k, pkType) -> hi
    } if dirs.size <= settings.probe.maxKeys
    counts <- reader.keyCounts(CountedTable(xLeaf, Nil, fk), dirs.keys.toSeq)
  } yield dirs.exists { case (k, dir) =>
    if (dir < 0) counts.post.getOrElse(k, 0L) > 0 else counts.pre.getOrElse(k, 0L) > 0
  }

  private def unitName(block: JoinBlock, u: Int): String = {
    def alias(p: LogicalPlan): Option[String] = p match {
      case SubqueryAlias(id, _) => Some(id.name)
      case Filter(_, c) => alias(c)
      case Project(_, c) => alias(c)
      case _ => None
    }
    alias(block.units(u)).orElse(block.leafOf(u).map(_._1.table.table)).getOrElse(block.units(u).nodeName)
  }
}

object FkDeltaPlanner {

  /**
   * The counts that the integrity checks of `plan`'s join blocks read ([[FkDeltaPlanner]]'s
   * `integrityByCounts`): per edge x -> y whose key is one column and not RELY, x's rows counted
   * per foreign key. One per table and key.
   */
  def integrityCounts(plan: LogicalPlan, keys: SourceLeaf => TableKeys): Seq[CountedTable] =
    plan.flatMap(p => JoinBlock.of(p).toSeq).flatMap { block =>
      FkGraph.of(block, keys).edges.filter(e => !e.rely && e.pairs.size == 1).flatMap { e =>
        block.leafOf(e.from).flatMap { case (leaf, cols) =>
          cols.get(e.pairs.head._1.exprId).flatMap(c => leaf.output.find(_.name.equalsIgnoreCase(c)))
            .map(CountedTable(leaf, Nil, _))
        }
      }
    }.groupBy(t => (t.leaf.name, t.definition)).values.map(_.head).toSeq.sortBy(_.leaf.name)
}

/** The keys of a dimension table that a refresh's change both deletes and inserts (updates). */
private case class UpdatedKeys(leaf: SourceLeaf, pk: String, keys: Set[Any])

/**
 * The tables of a block as one of the two steps of [[FkDeltaPlanner]]'s `updatesLast` sees them.
 * With `updatesOnly` false (step 1), an updated dimension's change is its change without the
 * updated keys, and its state after the step is S = Post - D_U (the updated keys keep their old
 * rows); with `updatesOnly` true (step 2), its change is that of the updated keys alone, from S to
 * Post, and every other table is unchanged at Post.
 */
private class UpdatesSplitReader(base: LeafReader, splits: Map[String, UpdatedKeys], m: Attribute,
    updatesOnly: Boolean)
    extends LeafReader {
  private def keyIn(plan: LogicalPlan, s: UpdatedKeys): Expression =
    InSet(plan.output.find(_.name.equalsIgnoreCase(s.pk)).get, s.keys)

  private def deleted(leaf: SourceLeaf, onlyUpdated: Boolean): Option[LogicalPlan] = base.delta(leaf).map { d =>
    val del = Filter(LessThan(m, Literal(0)), d)
    Project(leaf.output, if (onlyUpdated) Filter(keyIn(d, splits(leaf.name)), del) else del)
  }

  /** Post without the updated keys' rows, with the deleted rows (of the updated keys only, or all). */
  private def withoutUpdates(leaf: SourceLeaf, onlyUpdatedDeletes: Boolean): LogicalPlan = {
    val post = base.post(leaf)
    Union(Filter(Not(keyIn(post, splits(leaf.name))), post) +: deleted(leaf, onlyUpdatedDeletes).toSeq)
  }

  /** S = Post - D_U: Post without the updated keys' new rows, with their old ones. */
  private def afterOthers(leaf: SourceLeaf): LogicalPlan = withoutUpdates(leaf, onlyUpdatedDeletes = true)

  def pre(leaf: SourceLeaf): LogicalPlan = splits.get(leaf.name) match {
    case Some(_) if updatesOnly => afterOthers(leaf)
    case None if updatesOnly => base.post(leaf)
    case _ => base.pre(leaf)
  }

  def post(leaf: SourceLeaf): LogicalPlan =
    if (splits.contains(leaf.name) && !updatesOnly) afterOthers(leaf) else base.post(leaf)

  def delta(leaf: SourceLeaf): Option[LogicalPlan] = splits.get(leaf.name) match {
    // No change at all in this step when none of the rows held on the driver belong to it.
    case Some(_) if deltaOnDriver(leaf).exists(_.rows.isEmpty) => None
    case Some(s) => base.delta(leaf).map(d => Filter(if (updatesOnly) keyIn(d, s) else Not(keyIn(d, s)), d))
    case None => if (updatesOnly) None else base.delta(leaf)
  }

  def preDel(leaf: SourceLeaf): LogicalPlan = splits.get(leaf.name) match {
    // S + Del_R: Post without the updated keys, with every deleted row.
    case Some(_) if !updatesOnly => withoutUpdates(leaf, onlyUpdatedDeletes = false)
    case Some(_) => Union(base.post(leaf) +: deleted(leaf, onlyUpdated = true).toSeq)
    case None => if (updatesOnly) base.post(leaf) else base.preDel(leaf)
  }

  override def sizeInBytes(leaf: SourceLeaf): Long = base.sizeInBytes(leaf)

  override def deltaOnDriver(leaf: SourceLeaf): Option[DriverDeltaRows] = splits.get(leaf.name) match {
    case Some(s) => base.deltaOnDriver(leaf).map { local =>
        val at = local.positions(Seq(s.pk)).head
        val t = local.schema(at).dataType
        local.copy(rows = local.rows.filter(r => s.keys.contains(r.get(at, t)) == updatesOnly))
      }
    case None => if (updatesOnly) None else base.deltaOnDriver(leaf)
  }
}
