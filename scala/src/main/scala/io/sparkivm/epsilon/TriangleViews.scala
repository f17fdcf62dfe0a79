package io.sparkivm.epsilon

import io.sparkivm.catalog.EpsilonState
import io.sparkivm.conf.IvmConf
import io.sparkivm.errors.IvmErrors
import io.sparkivm.execution.AnalyzedView
import io.sparkivm.planner.{Branch, DeltaRules, TriangleQuery}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Cast, Literal, NamedExpression}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.functions.{col, lit, sum}
import org.apache.spark.sql.ivm.{Parallel, SparkInternals}
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.sql.{DataFrame, SparkSession}

/**
 * The IVM^eps life cycle of a triangle view: building its state (at CREATE, on a full refresh,
 * on a change of eps, and as major rebalancing), advancing it by one refresh, and checking the
 * paper's invariants (in test mode, `spark.ivm.epsilon.checkInvariants`).
 */
object TriangleViews extends Logging {

  /** Appended auxiliary-view rows are folded back (compacted) past this many, or the view's size. */
  val CompactMinRows = 100000L

  import TriangleMaintenance.{KeyColumn, Weight}

  /** The triangle IVM^eps maintains in an incrementally maintained view, if there is one. */
  def query(spark: SparkSession, analyzed: AnalyzedView, incremental: Boolean): Option[TriangleQuery] =
    if (!incremental || !IvmConf.EpsilonEnabled.get(spark)) None
    else TriangleQuery.find(analyzed.plan).toOption.flatten

  /** Why a cyclic join of the view keeps the generic rule, if it has one. */
  def genericBecause(analyzed: AnalyzedView): Option[String] =
    TriangleQuery.find(analyzed.plan).left.toOption

  private def checking(spark: SparkSession): Boolean =
    IvmConf.EpsilonCheckInvariants.get(spark)

  def heavySets(state: EpsilonState, tables: TriangleStateTables, versions: Seq[Long],
      engine: TriangleMaintenance): IndexedSeq[engine.HeavySet] = (0 until 3).map { i =>
    if (state.allHeavy) engine.HeavySet.all
    else engine.heavySet(i, tables.read(i, versions(i)).select(col(KeyColumn).as(s"a$i")), state.heavy(i),
      keys => tables.heavyKeys(i, versions(i), keys))
  }

  /**
   * Builds the state from Post with strict partitions (heavy iff degree >= N^eps); N = 2|D|+1
   * unless given (Definition 13; major rebalancing passes the doubled or halved N).
   */
  def build(spark: SparkSession, engine: TriangleMaintenance, tables: TriangleStateTables, eps: Double,
      n: Option[Long] = None, size: Option[Long] = None): EpsilonState = {
    val d = size.getOrElse(engine.postSize())
    val base = n.getOrElse(2 * d + 1)
    val theta = EpsilonState.threshold(base, eps)
    val heavyVersions = (0 until 3).map { i =>
      val keys = if (eps == 0.0) engine.keyFrame(i, Nil) else engine.strictHeavy(i, theta)
      tables.overwrite(i, keys, KeyColumn)
    }
    val heavyCounts = (0 until 3).map(i => tables.read(i, heavyVersions(i)).count())
    val partial = EpsilonState(eps, base, d, heavyCounts, Nil, Nil, heavyVersions)
    val heavy = heavySets(partial, tables, heavyVersions, engine)
    val auxVersions = (0 until 3).map(i => tables.overwrite(3 + i, engine.auxFromScratch(i, heavy), s"a$i"))
    val auxRows = (0 until 3).map(i => tables.read(3 + i, auxVersions(i)).count())
    val state = EpsilonState(eps, base, d, heavyCounts, auxRows, auxRows, heavyVersions ++ auxVersions)
    if (checking(spark)) check(spark, engine, tables, state, strict = true)
    state
  }

  /**
   * The state's heavy sets and auxiliary views as of `state`, for one refresh's delta. An
   * auxiliary view V_i = X_i^H x X_{i+1}^L is looked up by its light side's variable b_{i+1}:
   * each value has at most one row per heavy key (fewer than 2 N^(1-eps), Kara et al. 2020,
   * section 4), where a heavy key's rows by a_i can number N.
   */
  def blockDelta(engine: TriangleMaintenance, tables: TriangleStateTables, state: EpsilonState)(
      heavy: IndexedSeq[engine.HeavySet]): DataFrame =
    engine.blockDelta(state, heavy,
      (i, keys, where) =>
        tables.aux(i, state.versions(3 + i), state.auxRows(i), s"b${(i + 1) % 3}", keys, where))

  /**
   * The state after a refresh whose block delta `engine` computed: auxiliary-view changes
   * appended, keys moved (minor rebalancing), or everything rebuilt if |D| left [N/4, N)
   * (major rebalancing). Writes the state tables; the view's commit makes them current.
   */
  def advance(spark: SparkSession, engine: TriangleMaintenance, tables: TriangleStateTables,
      state: EpsilonState, base: Seq[Long], notes: collection.mutable.Buffer[String])(
      heavy: IndexedSeq[engine.HeavySet]): EpsilonState = {
    val size = state.size + engine.sizeChange
    val next = if (size >= state.n || size < state.n / 4) {
      var n = state.n
      while (size >= n) n *= 2
      while (n > 1 && size < n / 4) n = math.max(1L, n / 2 - 1)
      if (size >= n) n = 2 * size + 1
      notes += s"major rebalancing: |D| = $size left [${state.n / 4}, ${state.n}); N = $n, " +
        "partitions and auxiliary views rebuilt"
      build(spark, engine, tables, state.eps, Some(n), Some(size))
    } else {
      val dataChanges = engine.auxChanges
      val moves = engine.moves(state, heavy)
      val rebalance = engine.rebalanceChanges(heavy, moves)
      val versions = state.versions.toArray
      val heavyCounts = state.heavy.toArray
      val auxRows = state.auxRows.toArray
      val auxCompact = state.auxCompact.toArray
      val compacted = Array.fill(3)(false)
      // The three occurrences' writes are independent: side by side.
      Parallel.run(spark,
        (0 until 3).map(i =>
          () => {
            val (turnHeavy, turnLight) = moves(i)
            if (turnHeavy.nonEmpty || turnLight.nonEmpty) {
              val kept = tables.read(i, state.versions(i))
              val after = (if (turnLight.isEmpty) kept else kept.where(!col(KeyColumn).isin(turnLight.toSeq: _*)))
                .unionByName(engine.keyFrame(i, turnHeavy)).localCheckpoint(eager = true)
              versions(i) = tables.overwrite(i, after, KeyColumn)
              heavyCounts(i) = after.count()
            }
            Seq(dataChanges(i), rebalance(i)).flatten.reduceOption(_ unionByName _).foreach { change =>
              val rows = engine.settled(change, engine.auxCols(i))
              if (!rows.isEmpty) {
                versions(3 + i) = tables.appendAux(i, versions(3 + i), rows, s"a$i")
                auxRows(i) += rows.count
              }
            }
            if (auxRows(i) - auxCompact(i) > math.max(auxCompact(i), CompactMinRows)) {
              val current = tables.read(3 + i, versions(3 + i))
              val folded = current.groupBy(engine.auxCols(i).map(col): _*).agg(sum(Weight).as(Weight))
                .filter(col(Weight) =!= 0).localCheckpoint(eager = true)
              versions(3 + i) = tables.overwrite(3 + i, folded, s"a$i")
              auxRows(i) = folded.count()
              auxCompact(i) = auxRows(i)
              compacted(i) = true
            }
          }))
      (0 until 3).foreach { i =>
        val (turnHeavy, turnLight) = moves(i)
        if (turnHeavy.nonEmpty || turnLight.nonEmpty) {
          notes += s"minor rebalancing of ${engine.sideName(i)}: ${turnHeavy.size} keys turn heavy, " +
            s"${turnLight.size} turn light"
        }
        if (compacted(i)) notes += s"${EpsilonState.Views(i)} compacted to ${auxRows(i)} rows"
      }
      EpsilonState(state.eps, state.n, size, heavyCounts.toSeq, auxRows.toSeq, auxCompact.toSeq,
        versions.toSeq)
    }
    // `base`: the versions after restoring; what follows them must all be this refresh's.
    (0 until 6).foreach(i => tables.checkOwn(i, base(i), next.versions(i)))
    if (checking(spark)) check(spark, engine, tables, next, strict = false)
    next
  }

  /**
   * The join block's delta rows as the plan the view's delta rules expect: the block's output
   * attributes (columns the view never reads are NULL) and the sign column `m` carrying the
   * weight of each row (a lookup in an auxiliary view yields one row for many triangles).
   */
  def branch(spark: SparkSession, q: TriangleQuery, engine: TriangleMaintenance, block: DataFrame,
      m: Attribute): Branch = {
    val plan = SparkInternals.analyzed(block)
    val byName = plan.output.map(a => a.name -> a).toMap
    val carried = (0 until 3).flatMap(i => q.sides(i).columns.zip(engine.cols(i))).map { case (a, c) =>
      a.exprId -> (Alias(byName(c), a.name)(exprId = a.exprId): NamedExpression)
    }.toMap
    val unitAttrs = q.block.units.flatMap(_.output).map { a =>
      carried.getOrElse(a.exprId, Alias(Literal(null, a.dataType), a.name)(exprId = a.exprId))
    }
    val sign = Alias(Cast(byName(Weight), IntegerType), m.name)(exprId = m.exprId)
    val units = Project(unitAttrs :+ sign, plan)
    Branch(Project(q.block.outputs :+ m, units),
      Seq("IVM^eps: D(R) x (S^L x T + S^H x T^H + V_ST), " +
        "D(S) x (T^L x R + T^H x R^H + V_TR), D(T) x (R^L x S + R^H x S^H + V_RS)"))
  }

  /** DESCRIBE lines for the state. */
  def describe(state: EpsilonState, q: TriangleQuery): Seq[(String, String, String)] = Seq(
    ("Strategy", s"IVM^eps triangle (${q.describe})", ""),
    ("Epsilon", state.eps.toString, "ALTER MATERIALIZED VIEW ... SET TBLPROPERTIES ('ivm.epsilon' = ...)"),
    ("Threshold base N", state.n.toString, s"|D| = ${state.size} rows; floor(N/4) <= |D| < N"),
    ("Heavy threshold", f"${state.threshold}%.2f", "N^eps")) ++
    (0 until 3).map(i =>
      ("Heavy keys",
        s"${q.sides(i).name}: ${
            if (state.allHeavy) "all (eps = 0)" else state.heavy(i).toString
          }", "")) ++
    (0 until 3).map(i =>
      ("Auxiliary view", s"${EpsilonState.Views(i)}: ${state.auxRows(i)} rows",
        s"${state.auxRows(i) - state.auxCompact(i)} appended since last compaction"))

  /**
   * The paper's invariants over the state and Post (Kara et al. 2020, Definition 13 and the
   * rebalancing invariants): |D| and floor(N/4) <= |D| < N; heavy keys have degree >= N^eps / 2, light keys
   * < 3/2 N^eps (strict after a build: heavy iff >= N^eps), at most 2 N^(1-eps) heavy keys;
   * each auxiliary view equals its definition over the current parts.
   */
  def check(spark: SparkSession, engine: TriangleMaintenance, tables: TriangleStateTables,
      state: EpsilonState, strict: Boolean): Unit = {
    def fail(what: String) = throw IvmErrors.epsilonInvariant(what, state)
    val theta = state.threshold
    val heavy = heavySets(state, tables, state.versions, engine)
    def checkSide(i: Int): Long = {
      val degrees = engine.post(i).groupBy(s"a$i").agg(sum(Weight).as("deg"))
      val joined = (if (heavy(i).allHeavy) degrees.withColumn("heavy", lit(true))
                    else degrees.join(heavy(i).table.withColumn("heavy", lit(true)), Seq(s"a$i"), "full_outer")).collect()
      if (!heavy(i).allHeavy) {
        val heavyCount = joined.count(_.getAs[Any]("heavy") != null)
        if (heavyCount != state.heavy(i)) fail(s"${engine.sideName(i)} has $heavyCount heavy keys, " +
          s"the state says ${state.heavy(i)}")
        if (heavyCount > 2 * math.pow(state.n.toDouble, 1 - state.eps)) {
          fail(s"${engine.sideName(i)} has $heavyCount heavy keys, more than 2 N^(1-eps)")
        }
        joined.foreach { r =>
          val deg = Option(r.getAs[Any]("deg")).map(_.asInstanceOf[Long]).getOrElse(0L)
          val isHeavy = r.getAs[Any]("heavy") != null
          val key = r.get(0)
          if (isHeavy && deg < (if (strict) theta else 0.5 * theta)) {
            fail(s"heavy key $key of ${engine.sideName(i)} has degree $deg")
          }
          if (!isHeavy && deg >= (if (strict) theta else 1.5 * theta)) {
            fail(s"light key $key of ${engine.sideName(i)} has degree $deg")
          }
        }
      }
      joined.map(r => Option(r.getAs[Any]("deg")).map(_.asInstanceOf[Long]).getOrElse(0L)).sum
    }
    val size = Parallel.run(spark, (0 until 3).map(i => () => checkSide(i))).sum
    if (size != state.size) fail(s"|D| is $size, the state says ${state.size}")
    if (!(state.n / 4 <= size && size < state.n)) fail(s"|D| = $size outside [floor(N/4), N)")
    Parallel.run(spark,
      (0 until 3).map(i =>
        () => {
          // The stored view minus its definition, folded per row: empty when they are equal.
          val cols = engine.auxCols(i).map(col)
          val stored = tables.read(3 + i, state.versions(3 + i)).select(cols :+ col(Weight): _*)
          val defined = engine.auxFromScratch(i, heavy)
          val differing = stored.unionByName(defined.withColumn(Weight, -col(Weight))).groupBy(cols: _*)
            .agg(sum(Weight).as(Weight)).filter(col(Weight) =!= 0).limit(5).collect()
          if (differing.nonEmpty) {
            fail(s"${EpsilonState.Views(i)} differs from its definition, e.g. by ${differing.mkString(", ")}")
          }
        }))
  }
}
