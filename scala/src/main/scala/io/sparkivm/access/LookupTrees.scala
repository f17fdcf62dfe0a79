package io.sparkivm.access

import scala.collection.mutable
import scala.util.control.NonFatal

import io.sparkivm.catalog.{DeltaTables, ViewCatalog, ViewMetadata}
import io.sparkivm.changes.{ChangeFeed, ChangeRequest, PinnedSource}
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import io.sparkivm.execution.{PinnedReader, ViewAnalysis}
import io.sparkivm.planner.SourceLeaf
import io.sparkivm.state.{Arrangement, StateId, StateKind, StatePlace, StateRegistry}
import net.razorvine.pickle.Pickler
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, Count}
import org.apache.spark.sql.catalyst.expressions.{Alias, And, Attribute, Cast, IsNotNull, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, Distinct, Filter, LogicalPlan, Project, Window}
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.execution.python.EvaluatePython
import org.apache.spark.sql.ivm.{SessionInternals, SparkInternals}
import org.apache.spark.sql.types.{StructField, StructType}

/**
 * The view trees of views with ACCESS BY ([[AccessTrees]]: [[ViewTree]] for CQAP0 views and for
 * cyclic ones over chain orders, [[HeavyLightTrees]] for other hierarchical ones), and of views
 * without ACCESS BY that list triangles (IVM^eps's trees, [[HeavyLightTrees.triangle]], which
 * their rows() enumerate as a lookup without inputs), held on the driver per view and kept at
 * the base-table versions of the view's last committed refresh, so that a lookup sees that
 * refresh: the trees are built from the tables at those versions on the
 * first lookup, and moved forward by the tables' net changes (their change data feeds) on the
 * first lookup after a later refresh. A lookup then reads only what matches its inputs.
 *
 * Lookups and the moves forward are serialized per view. While a lookup's answers are being
 * read (a cursor is open), the trees are not moved: a lookup that starts meanwhile answers from
 * the refresh the trees hold; a cursor left unread for [[IdleMs]] is closed, and the next move
 * goes ahead. A view that is a COUNT(*) grouped by all its other columns is answered from the
 * same trees (a count is a tuple's multiplicity). Views that are not conjunctive queries, that
 * have other aggregates or DISTINCT, or whose trees the driver's state budget
 * (`spark.ivm.state.driverMaxBytes`) cannot hold have no trees: their lookups read the view's rows.
 */
object LookupTrees extends Logging {
  val IdleMs: Long = 60000L

  /** A view's trees and what they were built from. */
  private final class Entry(val definition: String, val backing: TableIdentifier, val plan: TreePlan,
      val tree: AccessTrees, var versions: Map[String, Long], var backingVersion: Long,
      /** The backing table's log as the session that built the entry resolved it. */
      log: org.apache.spark.sql.delta.DeltaLog, context: org.apache.spark.SparkContext) {

    /**
     * The backing table's log for a lookup's check for a new refresh: the one resolved when the
     * entry was built while its Spark context runs (the catalog is not asked again); in another
     * context (a new session, maybe over another warehouse) resolved again, so that a table of
     * the same name elsewhere is not mistaken for this one.
     */
    def logFor(spark: SparkSession): org.apache.spark.sql.delta.DeltaLog =
      if ((spark.sparkContext eq context) && !context.isStopped) log else DeltaTables.log(spark, backing)
    val open: mutable.Map[LookupCursor, Long] = mutable.Map()
    var epoch = 0L

    /** Atom tuples the last move forward changed (each a path of views up its tree). */
    var moved = 0L

    /** The work of that move: view entries written and tuples joined ([[AccessTrees.updateWork]]). */
    var movedWork = 0L

    /** The entry as the driver's state holds it ([[StateRegistry]]), which may evict it. */
    val held: Trees = new Trees(backing, this)
  }

  /** A view's trees in the driver's state: evicted, they are dropped here and built again on a lookup. */
  private final class Trees(backing: TableIdentifier, entry: Entry) extends Arrangement {
    override def place: StatePlace = StatePlace.Driver
    override def bytes: Long = entry.tree.size * TupleBytes
    override def release(): Unit = entries.synchronized {
      entries.filterInPlace { case (_, e) => !e.contains(entry) }
    }
  }

  /** A tuple's bytes in the trees, with its place in each view that holds it. */
  private val TupleBytes = 100L

  private def stateId(view: TableIdentifier) = StateId(StateKind.LookupTrees, view.unquotedString)

  /** Holds (or measures again) `e`, the trees of `view`; false if they do not fit the driver's budget. */
  private def hold(view: TableIdentifier, e: Entry): Boolean =
    StateRegistry.put(stateId(view), "", e.held, view = Some(view.unquotedString))

  private val TooLargeForBudget = "they would take more than half the driver's state budget " +
    "(spark.ivm.state.driverMaxBytes)"

  /**
   * How a view's atoms are read (each atom's plan: its unit under its selections, projected to
   * its variables) and its columns: inputs and outputs by variable; an output without one is
   * the view's COUNT(*), a tuple's multiplicity (the view groups by all its other columns).
   */
  private case class TreePlan(atoms: IndexedSeq[(LogicalPlan, Seq[Attribute])], leaves: Seq[SourceLeaf],
      vars: IndexedSeq[IndexedSeq[String]], build: () => Either[String, AccessTrees], kind: String,
      inputs: Seq[(String, StructField)], outputs: Seq[(Option[String], StructField)])

  private val entries = mutable.Map[TableIdentifier, Either[(String, String), Entry]]()

  /**
   * One lock per view, held while its trees are found, built or moved forward: a build (a read
   * of every atom) blocks the lookups of that view only. `entries` itself is locked per access.
   */
  private val locks = mutable.Map[TableIdentifier, Object]()

  private def withView[T](id: TableIdentifier)(f: => T): T =
    entries.synchronized(locks.getOrElseUpdate(id, new Object)).synchronized(f)

  /**
   * Opens a lookup of `view` with the values of its ACCESS BY columns; null when the view has
   * no trees (the caller reads the view's rows instead). One call from Python: the input names
   * joined by NUL characters, their values pickled as a list (Py4J would send a list's
   * elements one round trip each).
   */
  def open(spark: SparkSession, view: String, names: String, pickledInputs: Array[Byte]): LookupCursor = {
    val values = new net.razorvine.pickle.Unpickler().loads(pickledInputs).asInstanceOf[java.util.List[Any]]
    val split = if (names.isEmpty) Array.empty[String] else names.split("\u0000", -1)
    open(spark, view,
      split.indices.map(i =>
        split(i) -> (values.get(i) match {
          case b: java.math.BigInteger => new java.math.BigDecimal(b)
          case v => v
        })))
  }

  private def open(spark: SparkSession, view: String, inputs: Seq[(String, Any)]): LookupCursor = {
    val id = idOf(spark, view)
    val entry = withView(id)(current(spark, id))
    val named = inputs.map { case (n, v) => n.toLowerCase(java.util.Locale.ROOT) -> v }.toMap
    entry match {
      // Inputs named otherwise than the view's (a view replaced since the caller read them).
      case Some(e) if e.plan.inputs.map(_._2.name.toLowerCase(java.util.Locale.ROOT)).toSet != named.keySet => null
      case None => null
      case Some(e) => e.synchronized {
          val bound = e.plan.inputs.map { case (v, field) =>
            v -> Cast(Literal(named(field.name.toLowerCase(java.util.Locale.ROOT))), field.dataType).eval()
          }.toMap
          val schema = StructType(e.plan.outputs.map(_._2))
          val counted = e.plan.outputs.exists(_._1.isEmpty)
          val answers = e.tree.lookup(bound).flatMap { case (at, m) =>
            val row = InternalRow.fromSeq(e.plan.outputs.map(o => o._1.map(at).getOrElse(m)))
            if (counted) Iterator.single(row) else Iterator.fill(m.toInt)(row)
          }
          val cursor = new LookupCursor(answers, schema, e, id.quotedString)
          e.open(cursor) = System.currentTimeMillis()
          cursor
        }
    }
  }

  /** Why a view has no trees, or a line on those it has (for EXPLAIN and tests). */
  def describe(spark: SparkSession, view: String): String = {
    val id = idOf(spark, view)
    withView(id) { current(spark, id); entries.synchronized(entries.get(id)) } match {
      case Some(Right(e)) => s"view trees held: ${e.tree.size} tuples at ${e.versions.toSeq.sorted.mkString(", ")}" +
          (if (e.epoch > 0) s"; the last refresh's changes moved ${e.moved} of them (work ${e.movedWork}: view " +
             "entries written and tuples joined)"
           else "") + s"; ${e.tree.layout}"
      case Some(Left((_, why))) => s"no view trees: $why"
      case None => "no view trees"
    }
  }

  /** How lookups of a view are answered, without building anything (EXPLAIN REFRESH). */
  def explain(spark: SparkSession, meta: ViewMetadata): String = plan(spark, meta) match {
    case Right(p) =>
      s"enumerate the view's ${p.kind}, held in the driver's memory: built on the first lookup, moved forward by " +
        "the tables' changes on the first lookup after a refresh"
    case Left(why) => s"read the materialized result filtered by the inputs (the eager baseline): no view trees, $why"
  }

  /** How rows() of a view without ACCESS BY is enumerated, if from trees (a triangle listing). */
  def enumeration(spark: SparkSession, meta: ViewMetadata): Option[String] =
    (try plan(spark, meta).toOption
    catch { case NonFatal(_) => None }).map(p =>
      s"${p.kind}, held in the driver's memory: built on the first rows(), moved forward by the tables' " +
        "changes on the first rows() after a refresh")

  private def idOf(spark: SparkSession, view: String): TableIdentifier =
    ViewCatalog.qualify(spark, SessionInternals.parser(spark).parseMultipartIdentifier(view))

  /** An atom tuple's values from a row that holds them first, in `types`' order (copied: rows are reused). */
  private def valuesOf(row: InternalRow, types: Seq[org.apache.spark.sql.types.DataType]): IndexedSeq[Any] =
    types.indices.map(j => InternalRow.copyValue(row.get(j, types(j))))

  /** Drops the trees of `view` (DROP MATERIALIZED VIEW). */
  def forget(view: TableIdentifier): Unit = withView(view) {
    entries.synchronized(entries.remove(view))
    StateRegistry.remove(stateId(view))
  }

  private def current(spark: SparkSession, id: TableIdentifier): Option[Entry] = {
    // The common case, one look at the backing table's log: the same table, no refresh since.
    entries.synchronized(entries.get(id)) match {
      case Some(Right(e)) =>
        val snapshot = e.logFor(spark).update()
        if (snapshot.version == e.backingVersion && e.definition.startsWith(snapshot.metadata.id + "|")) {
          if (StateRegistry.get[Trees](stateId(id), "").isDefined) return Some(e)
          // Evicted while they were being recorded here: built again below.
          entries.synchronized(entries.remove(id))
        }
      case _ =>
    }
    val meta = ViewCatalog.lookup(spark, id.nameParts)
    val log = DeltaTables.log(spark, meta.backing)
    val backing = log.update()
    val backingVersion = backing.version
    // A view dropped and created again has a new backing table: its trees are not these.
    val definition = Seq(backing.metadata.id, meta.queryText, meta.accessBy.mkString(","),
      meta.columns.mkString(","), meta.eps.toString).mkString("|")
    // Trees refused are tried again once the budget that refused them changes.
    val refused = s"$definition|${StateRegistry.largestAdmitted(spark, StatePlace.Driver)}"
    entries.synchronized(entries.get(id)) match {
      case Some(Right(e)) if e.definition == definition =>
        if (e.backingVersion == backingVersion) Some(e)
        else
          try {
            e.synchronized(moveForward(spark, meta, e, backingVersion))
            if (hold(id, e)) Some(e)
            else {
              entries.synchronized(entries(id) = Left((refused, TooLargeForBudget)))
              None
            }
          } catch {
            // A change feed no longer there, a table replaced: the trees are built again.
            case NonFatal(_) =>
              entries.synchronized(entries.remove(id))
              current(spark, id)
          }
      case Some(Left((d, _))) if d == refused => None
      case _ =>
        // Lookups never fail for the trees' sake: without them they read the view's rows.
        val built =
          try plan(spark, meta).flatMap { p =>
              val (record, _) = ViewCatalog.lastRefresh(spark, meta)
              p.build().flatMap(tree =>
                fill(spark, meta, p, tree, record.sourceVersions).map(_ =>
                  new Entry(definition, meta.backing, p, tree, record.sourceVersions, backingVersion, log,
                    spark.sparkContext)))
            }
          catch {
            case NonFatal(e) =>
              logWarning(s"spark-ivm: the view trees of ${meta.viewName} could not be built; its lookups " +
                  "read its rows", e)
              Left(s"building them failed (${e.getMessage})")
          }
        val held = built.flatMap(e => if (hold(id, e)) Right(e) else Left(TooLargeForBudget))
        entries.synchronized(entries(id) = held.left.map(why => (refused, why)))
        held.toOption
    }
  }

  /** The trees' plan, or why the view has none. */
  private def plan(spark: SparkSession, meta: ViewMetadata): Either[String, TreePlan] = {
    if (maxTuples(spark) == 0) {
      return Left(s"${IvmConf.StateDriverMaxBytes.key} is ${StateRegistry.budget(spark, StatePlace.Driver)} " +
        s"bytes: too little for one tuple ($TupleBytes bytes, in at most half the budget)")
    }
    val view =
      try ViewAnalysis.reanalyze(spark, meta, incremental = true)
      catch {
        case NonFatal(e) => return Left(s"the query is not maintained incrementally (${e.getMessage})")
      }
    if (view.maintenance.top.nonEmpty) {
      return Left("the view applies ORDER BY ... LIMIT when it is read, over rows the trees would not limit")
    }
    if (view.maintenance.atRead.nonEmpty) {
      return Left("the view computes window functions without PARTITION BY when it is read, over all its rows")
    }
    val analyzed = view.plan
    val count = countColumn(analyzed)
    val body = if (count.isDefined) analyzed.asInstanceOf[Aggregate].child else analyzed
    if (body.exists { case _: Aggregate | _: Distinct | _: Window => true; case _ => false }) {
      return Left("the view aggregates or removes duplicates: view trees hold joins of tables, and counts " +
        "(COUNT(*) grouped by all other columns)")
    }
    for {
      binding <- AccessPatterns.bind(analyzed, meta.columns, meta.accessBy)
      plan <- atoms(binding)
      // An atom's variables once each (two columns equal by a selection carry one variable).
      vars = plan.map(_._2.map(_._1).distinct.toIndexedSeq).toIndexedSeq
      chosen <- trees(CqapAnalysis.of(binding.query), binding.query, vars, meta.eps)
    } yield {
      val (build, kind) = chosen
      val lower = meta.columns.map(_.toLowerCase(java.util.Locale.ROOT))
      val fields = analyzed.schema.fields.toSeq.zip(meta.columns).map { case (f, n) => f.copy(name = n) }
      val inputCols = meta.accessBy.map(c => lower.indexOf(c.toLowerCase(java.util.Locale.ROOT)))
      val outputCols = meta.columns.indices.filterNot(inputCols.contains)
      val columnVars = binding.columnVars
      TreePlan(plan.zip(vars).map { case ((p, cols), vs) => (p, vs.map(v => cols.find(_._1 == v).get._2)) },
        binding.units.flatMap(_.collect { case SourceLeaf(l) => l }), vars,
        build, kind,
        inputCols.map(i => columnVars(i).get -> fields(i)), outputCols.map(i => columnVars(i) -> fields(i)))
    }
  }

  /**
   * The trees of a query, and what they are for EXPLAIN: CQAP0 view trees over ACC-TOP orders
   * (Zhang 2022, chapter 4); the heavy/light trees of chapter 5 if every component is
   * hierarchical; otherwise (a cyclic component, such as a triangle with inputs) view trees over
   * each component's chain order (its ACC-TOP order if CQAP0) with indicator projections, the
   * general trees of chapter 4.
   */
  private def trees(analysis: CqapAnalysis, q: Cqap, vars: IndexedSeq[IndexedSeq[String]],
      eps: Double): Either[String, (() => Either[String, AccessTrees], String)] = {
    val atomIndex = (a: Atom) => q.atoms.indexOf(a)
    if (q.inputs.isEmpty) {
      // Without ACCESS BY, only a triangle listing has trees: what its rows() enumerates.
      if (HeavyLightTrees.triangle(q, vars, eps).isEmpty) {
        Left("the view has no ACCESS BY (without one, only a triangle listing's rows() are enumerated from trees)")
      } else Right((() => HeavyLightTrees.triangle(q, vars, eps).toRight("not a triangle listing"),
          s"IVM^eps triangle view trees at eps = $eps (Kara et al. 2020, section 4: five trees over disjoint " +
            "heavy/light parts; O(N^max(eps, 1-eps)) amortized update, O(1) delay)"))
    } else if (analysis.cls == CqapClass.Cqap0) Right {
      (() => ViewTree.build(vars, analysis.components.map(c => (c.accessTopOrder, c.query)), atomIndex),
        "CQAP0 view trees (Zhang 2022, chapter 4: O(1) update and delay)")
    }
    else if (analysis.components.forall(_.hierarchical)) Right {
      (() => HeavyLightTrees.build(q, vars, eps),
        s"heavy/light view trees at eps = $eps (Zhang 2022, chapter 5: O(N^(delta eps)) amortized update, " +
          "O(N^(1-eps)) delay)")
    }
    else Right {
      val orders = analysis.components.map { c =>
        (if (c.cls == CqapClass.Cqap0) c.accessTopOrder else VariableOrder.chain(c.query), c.query)
      }
      (() =>
          ViewTree.build(vars, orders, atomIndex,
            layout = "view trees of chain orders with indicator " +
              "projections (chapter 4's general trees: O(1) delay, updates join what their tuple does not fix)",
            indicators = true),
        "view trees over a chain variable order of each cyclic component, with indicator projections (Zhang " +
          "2022, chapter 4, Thm. 3.4: O(1) delay; an update joins the atoms its tuple does not fix, for a " +
          "triangle up to O(N))")
    }
  }

  /**
   * The index of the view's COUNT(*) column if the view is `SELECT cols, count(*) ... GROUP BY
   * cols` (its other columns exactly its group keys, renamed or not): each group's count is then the
   * multiplicity of its tuple in the join, as the trees hold it.
   */
  private def countColumn(plan: LogicalPlan): Option[Int] = plan match {
    case Aggregate(groups, outputs, _, _) =>
      val counts = outputs.indices.filter(i =>
        outputs(i) match {
          case Alias(AggregateExpression(Count(Seq(l: Literal)), _, false, None, _), _) => l.value != null
          case _ => false
        })
      // A key is a group key as it is or renamed (`c.region AS region`).
      val keys = outputs.indices.filterNot(counts.contains).map(i =>
        outputs(i) match {
          case Alias(a: Attribute, _) => a
          case other => other
        })
      val plainKeys = keys.forall(k => k.isInstanceOf[Attribute] && groups.exists(_.semanticEquals(k))) &&
        groups.forall(g => keys.exists(_.semanticEquals(g)))
      if (counts.size == 1 && plainKeys) counts.headOption else None
    case _ => None
  }

  /** Each atom's plan: its unit under its selections, NULLs dropped from variables joined across atoms. */
  private def atoms(binding: CqapBinding): Either[String, IndexedSeq[(LogicalPlan, Seq[(String, Attribute)])]] = {
    val joined = binding.query.vars.filter(v => binding.query.atomsOf(v).size > 1)
    Right(binding.units.indices.map { i =>
      val unit = binding.units(i)
      if (!binding.selections(i).forall(_.references.subsetOf(unit.outputSet))) {
        return Left("a filter of the view reads a computed column")
      }
      val notNull = binding.atomColumns(i).collect { case (v, a) if joined.contains(v) => IsNotNull(a) }
      val conds = binding.selections(i) ++ notNull
      (conds.reduceOption(And).map(Filter(_, unit)).getOrElse(unit), binding.atomColumns(i))
    })
  }

  /** Fills empty trees with the atoms' tuples at `versions`. */
  private def fill(spark: SparkSession, meta: ViewMetadata, p: TreePlan, tree: AccessTrees,
      versions: Map[String, Long]): Either[String, Unit] = {
    val reader = new PinnedReader(spark, versions, pinnedAt(p, versions), meta.viewName)
    val max = maxTuples(spark)
    var held = 0L
    val tuples = p.atoms.zipWithIndex.iterator.flatMap { case ((atom, cols), i) =>
      val read = Project(cols, reader.rules.post(atom))
      val counted = SparkInternals.dataFrame(spark, read).groupBy(cols.indices.map(j =>
          org.apache.spark.sql.functions.col(s"`${cols(j).name}`")): _*).count()
      val types = cols.map(_.dataType)
      // Rows decoded one partition at a time, each its own (the plan's rows are reused buffers).
      counted.queryExecution.executedPlan.executeToIterator().map { row =>
        held += 1
        if (held > max) throw new TooManyTuples(max)
        (i, valuesOf(row, types), row.getLong(types.size))
      }
    }
    // The views may hold more than the atoms (a light tree's joins): at most 4 entries per tuple bound.
    tree.entryLimit = 4 * max
    try tree.load(tuples)
    catch {
      case e: TooManyTuples => return Left(s"its atoms hold more than ${e.max} tuples (half of " +
          s"${IvmConf.StateDriverMaxBytes.key}, at about $TupleBytes bytes each)")
      case e: AccessTrees.TooLarge => return Left(s"its views would hold more than ${e.limit} entries (4 per tuple " +
          "of the atoms' bound; a lower ivm.epsilon keeps heavy/light trees smaller)")
    }
    Right(())
  }

  /**
   * The most tuples a view's atoms may hold for its trees to be built: the largest arrangement
   * the driver's state budget admits, at [[TupleBytes]] each. The trees are measured and
   * admitted by the registry once built; this bound stops a build that could not be.
   */
  private def maxTuples(spark: SparkSession): Long =
    StateRegistry.largestAdmitted(spark, StatePlace.Driver) / TupleBytes

  private final class TooManyTuples(val max: Long) extends RuntimeException(null, null, false, false)

  /** Moves `e` to the versions of the view's last refresh by the tables' net changes. */
  private def moveForward(spark: SparkSession, meta: ViewMetadata, e: Entry, backingVersion: Long): Unit = {
    val now = System.currentTimeMillis()
    e.open.filterInPlace { case (_, used) => now - used < IdleMs }
    if (e.open.nonEmpty) return
    val (record, _) = ViewCatalog.lastRefresh(spark, meta)
    val target = record.sourceVersions
    val changed = e.plan.leaves.map(_.name).distinct.filter(t => e.versions.get(t) != target.get(t))
    e.moved = 0L
    val work = e.tree.updateWork
    if (changed.nonEmpty) {
      val requests = changed.map { t =>
        val leaf = e.plan.leaves.find(_.name == t).get
        ChangeRequest(leaf.table, e.versions(t), target(t))
      }
      val changes = ChangeFeed.read(spark, meta.viewName, requests, IvmConf.ChangesLocalMaxBytes.get(spark))
      try {
        val reader = new PinnedReader(spark, e.versions, pinnedAt(e.plan, target), meta.viewName, changes = changes)
        e.plan.atoms.zipWithIndex.foreach { case ((atom, cols), i) =>
          reader.rules.delta(atom).foreach { branch =>
            val signed = Project(cols :+ branch.plan.output.last, branch.plan)
            val types = cols.map(_.dataType)
            SparkInternals.dataFrame(spark, signed).queryExecution.executedPlan.executeCollect().foreach { row =>
              e.tree.update(i, valuesOf(row, types), row.getInt(types.size).toLong)
              e.moved += 1
            }
          }
        }
      } finally changes.values.foreach(_.release())
    }
    e.movedWork = e.tree.updateWork - work
    e.versions = target
    e.backingVersion = backingVersion
    e.epoch += 1
  }

  private def pinnedAt(p: TreePlan, versions: Map[String, Long]): Map[String, PinnedSource] =
    p.leaves.map(l => l.name -> PinnedSource(l.table, "", versions(l.name), StructType(Nil))()).toMap

  /** A lookup's answers, read in batches of pickled rows (what PySpark's collect reads). */
  final class LookupCursor private[LookupTrees] (answers: Iterator[InternalRow], schema: StructType, e: Entry,
      view: String) {
    private val epoch = e.epoch

    /** Up to `n` more answers; an empty batch at the end. */
    def next(n: Int): Array[Byte] = e.synchronized {
      if (answers.hasNext && (e.epoch != epoch || !e.open.contains(this))) {
        throw IvmErrors.lookupExpired(view)
      }
      val batch = new java.util.ArrayList[Any]()
      while (batch.size < n && answers.hasNext) batch.add(EvaluatePython.toJava(answers.next(), schema, true))
      if (answers.hasNext) e.open(this) = System.currentTimeMillis() else e.open.remove(this)
      EvaluatePython.registerPicklers()
      new Pickler(true, false).dumps(batch)
    }

    def close(): Unit = e.synchronized(e.open.remove(this))
  }
}
