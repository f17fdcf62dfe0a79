package io.sparkivm.execution

import java.util.concurrent.Executors

import scala.collection.mutable
import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration.Duration
import scala.jdk.CollectionConverters._

import io.sparkivm.catalog.EpsilonState
import io.sparkivm.planner.{DeltaRules, TriangleQuery}
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Cast, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.functions.{broadcast, col, lit, sum}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{DataType, LongType, StructField, StructType}

/**
 * IVM^eps for a triangle view (ivm-epsilon-triangles.md; Kara et al.), batched per refresh.
 *
 * Each occurrence i of R(A,B), S(B,C), T(C,A) is a weighted relation with columns `a<i>` (its
 * partition variable), `b<i>` (the variable it shares with occurrence i+1), `p<i>_<k>` (columns
 * the view reads) and `w` (multiplicity). Its heavy part is the rows whose `a<i>` is in the
 * heavy-key table; the rest is light. Auxiliary view V_i = X_i^H x X_{i+1}^L on b_i = a_{i+1}
 * (V_RS, V_ST, V_TR of section 4.1), with b_i summed out unless the view reads it.
 *
 * A refresh applies the net changes of R, S and T in that order (the multi-way delta rule:
 * for the change of X_j, earlier occurrences are at Post, later ones at Pre), each as a batch
 * form of ApplyUpdate (Fig. 8). With p = j+1, q = j+2, the change D of X_j meets
 *  1. X_p^L, probed by the B-values of D (fewer than 3/2 N^eps light neighbours each), then X_q
 *     by point lookups: the paper's LH and LL branches (lines 5-6);
 *  2. X_q^H, probed by the A-values of D (at most 2 N^(1-eps) heavy C-values), then X_p^H by
 *     point lookups: HH (line 3);
 *  3. V_p, a lookup: HL (line 4);
 * and the auxiliary views are maintained as in lines 9-11: V_j += D^H x X_p^L and
 * V_q += X_q^H x D^L. Every probe is a filter on the probed columns pushed into the scan, so
 * the rows entering a join are the bounded sets of the paper. Then keys whose degree crossed
 * 1/2 N^eps or 3/2 N^eps move (minor rebalancing, Fig. 16), or, if |D| left [N/4, N), the
 * state is rebuilt strictly with a new N (major rebalancing, section 6).
 *
 * Batching the paper's single-tuple updates changes neither the result (each step is linear in
 * the change of one occurrence) nor the bounds per changed tuple; a key's moves are decided
 * once per batch from its degree after the batch.
 */
class TriangleMaintenance(spark: SparkSession, q: TriangleQuery, rules: DeltaRules, maxKeys: Int) {
  import TriangleMaintenance._

  private val sides = 0 until 3
  def sideName(i: Int): String = q.sides(i).name
  private def next(i: Int) = (i + 1) % 3

  def cols(i: Int): Seq[String] =
    Seq(s"a$i", s"b$i") ++ q.sides(i).payload.indices.map(k => s"p${i}_$k")
  private def payload(i: Int): Seq[String] = cols(i).drop(2)
  private val types: Map[String, DataType] =
    sides.flatMap(i => cols(i).zip(q.sides(i).columns.map(_.dataType))).toMap
  /** The columns of the block's delta rows: every occurrence's columns, then `w`. */
  val allCols: Seq[String] = sides.flatMap(cols)

  /** Columns of auxiliary view i: a_i, b_i if read above, payloads, b_{i+1}. */
  def auxCols(i: Int): Seq[String] = {
    val j = next(i)
    Seq(s"a$i") ++ (if (q.needsY(i)) Seq(s"b$i") else Nil) ++ payload(i) ++ Seq(s"b$j") ++ payload(j)
  }

  private def frame(i: Int, plan: LogicalPlan, weight: Option[Attribute]): DataFrame = {
    val named = q.sides(i).columns.zip(cols(i)).map { case (a, n) => Alias(a, n)() }
    val w = Alias(weight.map(m => Cast(m, LongType)).getOrElse(Literal(1L)), W)()
    SparkInternals.dataFrame(spark, Project(named :+ w, plan))
  }

  private val preFrames = mutable.Map[Int, DataFrame]()
  private val postFrames = mutable.Map[Int, DataFrame]()
  // Read from the threads of `parallel`: the maps are guarded.
  def pre(i: Int): DataFrame =
    preFrames.synchronized(preFrames.getOrElseUpdate(i, frame(i, rules.pre(q.sides(i).plan), None)))
  def post(i: Int): DataFrame =
    postFrames.synchronized(postFrames.getOrElseUpdate(i, frame(i, rules.post(q.sides(i).plan), None)))

  /** The net change of each occurrence, materialized, with its rows on the driver. */
  lazy val deltas: IndexedSeq[Option[LocalDelta]] = sides.map { i =>
    val branches = rules.delta(q.sides(i).plan)
    if (branches.isEmpty) None else {
      val raw = frame(i, rules.unionAll(branches.map(_.plan)), Some(rules.m))
      val net = small(raw.groupBy(cols(i).map(col): _*).agg(sum(W).as(W)).filter(col(W) =!= 0))
      if (net.isEmpty) None else Some(net)
    }
  }

  /** Change of |D| (rows) by this refresh. */
  def sizeChange: Long = deltas.flatten.map(_.weight).sum

  // ---- parts ----

  /**
   * The heavy keys of an occurrence: `table` is None when every key is heavy (eps = 0); `keys`
   * holds them on the driver when there are at most maxKeys, so that splitting rows into parts
   * is a filter in the scan (rows of the other part never enter a join), not a join.
   */
  case class HeavySet(table: Option[DataFrame], size: Long, keys: Option[Set[Any]] = None) {
    def empty: Boolean = table.isDefined && size == 0
  }

  /** The heavy set of occurrence i read from its table, with its keys collected if few. */
  def heavySet(i: Int, table: DataFrame, size: Long): HeavySet =
    HeavySet(Some(table), size,
      if (size <= maxKeys) Some(table.collect().map(_.get(0)).toSet) else None)

  private def heavyPart(df: DataFrame, i: Int, h: HeavySet): DataFrame = (h.table, h.keys) match {
    case (None, _) => df
    case (Some(_), _) if h.empty => df.limit(0)
    case (_, Some(keys)) => df.where(col(s"a$i").isin(keys.toSeq: _*))
    case (Some(t), None) => df.join(hint(t, h.size), Seq(s"a$i"), "left_semi")
  }
  private def lightPart(df: DataFrame, i: Int, h: HeavySet): DataFrame = (h.table, h.keys) match {
    case (None, _) => df.limit(0)
    case (Some(_), _) if h.empty => df
    case (_, Some(keys)) => df.where(!col(s"a$i").isin(keys.toSeq: _*))
    case (Some(t), None) => df.join(hint(t, h.size), Seq(s"a$i"), "left_anti")
  }
  private def hint(t: DataFrame, size: Long) = if (size <= BroadcastKeys) broadcast(t) else t

  // ---- probes and weighted joins ----

  /** Rows of `df` whose columns hold one of the given values (None: no restriction). */
  private def probe(df: DataFrame, filters: (String, Option[Seq[Any]])*): DataFrame =
    filters.foldLeft(df) {
      case (d, (c, Some(values))) => d.where(col(c).isin(values: _*))
      case (d, (_, None)) => d
    }

  private def keysOf(rows: Seq[Row], c: String, schema: StructType): Option[Seq[Any]] = {
    val idx = schema.fieldIndex(c)
    val vs = rows.iterator.map(_.get(idx)).filter(_ != null).toSet
    if (vs.size > maxKeys) None else Some(vs.toSeq)
  }
  private def keysOf(d: LocalDelta, c: String): Option[Seq[Any]] =
    if (d.local) keysOf(d.rows, c, d.frame.schema) else keysOf(d.frame, c)

  private def keysOf(df: DataFrame, c: String): Option[Seq[Any]] = {
    val vs = df.select(col(c)).where(col(c).isNotNull).distinct().limit(maxKeys + 1).collect().map(_.get(0))
    if (vs.length > maxKeys) None else Some(vs.toSeq)
  }

  private def join(l: DataFrame, r: DataFrame, on: Seq[(String, String)]): DataFrame = {
    val rr = r.withColumnRenamed(W, "__w_r")
    val cond = on.map { case (a, b) => l(a) === rr(b) }.reduce(_ && _)
    l.join(rr, cond).withColumn(W, col(W) * col("__w_r")).drop("__w_r")
  }

  private def materialize(df: DataFrame): DataFrame = small(df).frame

  /**
   * `df` computed now: on the driver when it is small (the bounded sets of one batch are), so
   * that taking its keys and joining it cost no further job; checkpointed otherwise.
   */
  private def small(df: DataFrame): LocalDelta = {
    val rows = df.limit(LocalRows + 1).collect().toSeq
    if (rows.size <= LocalRows) LocalDelta(spark.createDataFrame(rows.asJava, df.schema), rows)
    else {
      val done = df.localCheckpoint(eager = true)
      LocalDelta(done, Nil, local = false)
    }
  }

  private def aggregate(df: DataFrame, keys: Seq[String]): DataFrame =
    df.groupBy(keys.map(col): _*).agg(sum(W).as(W)).filter(col(W) =!= 0)

  /** `df` with every column of the block's delta rows (nulls for those the view never reads). */
  private def complete(df: DataFrame): DataFrame = {
    val have = df.columns.toSet
    df.select(allCols.map { c =>
      if (have(c)) col(c) else lit(null).cast(types(c)).as(c)
    } :+ col(W): _*)
  }

  /** Auxiliary view i's rows from its heavy side (columns of i) joined with its light side (i+1). */
  private def aux(i: Int, heavy: DataFrame, light: DataFrame): DataFrame =
    join(heavy, light, Seq(s"b$i" -> s"a${next(i)}")).select((auxCols(i) :+ W).map(col): _*)

  /** Sign-weighted rows of occurrence i whose partition key is in `plus` or `minus`. */
  private def moved(df: DataFrame, i: Int, plus: Set[Any], minus: Set[Any]): DataFrame = {
    val a = col(s"a$i")
    val in = if (plus.isEmpty) df.limit(0) else df.where(a.isin(plus.toSeq: _*))
    val out = if (minus.isEmpty) df.limit(0) else df.where(a.isin(minus.toSeq: _*)).withColumn(W, -col(W))
    in.unionByName(out)
  }

  // ---- one refresh ----

  private val pending = Array.fill(3)(Seq.empty[DataFrame])
  /** What each step ran, for the report and EXPLAIN. */
  val notes: mutable.ArrayBuffer[String] = mutable.ArrayBuffer[String]()

  /**
   * The delta of the join block (columns [[allCols]] and `w`), from the state before the
   * refresh: heavy sets and auxiliary views as of `state`, read from `tables`.
   */
  def blockDelta(state: EpsilonState, heavy: IndexedSeq[HeavySet], auxTable: Int => DataFrame): DataFrame = {
    val out = mutable.ArrayBuffer[DataFrame]()
    def emit(df: DataFrame): Unit = { val rows = small(complete(df)).frame; out.synchronized(out += rows) }
    for (j <- sides; d <- deltas(j)) {
      val p = next(j)
      val qq = next(p)
      def at(k: Int) = if (k < j) post(k) else pre(k)
      val aKeys = keysOf(d, s"a$j")
      val bKeys = keysOf(d, s"b$j")
      val allHeavy = heavy(p).table.isEmpty
      val work = Seq.newBuilder[() => Unit]
      // 1. Light neighbours of each B-value (LH and LL), then point lookups in X_q.
      if (!allHeavy) work += { () =>
        val first = small(join(d.frame, lightPart(probe(at(p), s"a$p" -> bKeys), p, heavy(p)),
          Seq(s"b$j" -> s"a$p")))
        emit(join(first.frame, probe(at(qq), s"a$qq" -> keysOf(first, s"b$p"), s"b$qq" -> aKeys),
          Seq(s"b$p" -> s"a$qq", s"a$j" -> s"b$qq")))
      }
      // 2. Heavy C-values pointing at each A-value (HH), then point lookups in X_p^H.
      if (!heavy(p).empty && !heavy(qq).empty) work += { () =>
        val second = small(join(d.frame, heavyPart(probe(at(qq), s"b$qq" -> aKeys), qq, heavy(qq)),
          Seq(s"a$j" -> s"b$qq")))
        emit(join(second.frame, heavyPart(probe(at(p), s"a$p" -> bKeys, s"b$p" -> keysOf(second, s"a$qq")),
          p, heavy(p)), Seq(s"b$j" -> s"a$p", s"a$qq" -> s"b$p")))
      }
      // 3. The auxiliary view V_p = X_p^H x X_q^L as of this step (HL): a lookup.
      if (!allHeavy && !heavy(p).empty) work += { () =>
        val v = (probe(auxTable(p), s"a$p" -> bKeys, s"b$qq" -> aKeys) +: pending(p))
          .reduce(_ unionByName _)
        val hit = join(d.frame, v, Seq(s"b$j" -> s"a$p", s"a$j" -> s"b$qq"))
        emit(if (q.needsY(p)) hit.withColumn(s"a$qq", col(s"b$p")) else hit)
      }
      // Lines 9-11: V_j gains D^H x X_p^L; V_q gains X_q^H x D^L (used by later steps).
      val toJ = if (!allHeavy && !heavy(j).empty) Some(() => materialize(aux(j,
        heavyPart(d.frame, j, heavy(j)), lightPart(probe(at(p), s"a$p" -> bKeys), p, heavy(p))))) else None
      val toQ = if (!allHeavy && !heavy(qq).empty) Some(() => materialize(aux(qq,
        heavyPart(probe(at(qq), s"b$qq" -> aKeys), qq, heavy(qq)), lightPart(d.frame, j, heavy(j))))) else None
      toJ.foreach(f => work += { () => val v = f(); pending.synchronized(pending(j) :+= v) })
      toQ.foreach(f => work += { () => val v = f(); pending.synchronized(pending(qq) :+= v) })
      // The branches of one step are independent: run their (small, latency-bound) jobs side by side.
      parallel(work.result())
      notes += s"D(${q.sides(j).name}): ${d.count} changed rows"
    }
    if (out.isEmpty) spark.createDataFrame(spark.sparkContext.emptyRDD[Row],
      StructType(allCols.map(c => StructField(c, types(c))) :+ StructField(W, LongType)))
    else materialize(aggregate(out.reduce(_ unionByName _), allCols))
  }

  /** The auxiliary views' changes from the data, one per view (after [[blockDelta]]). */
  def auxChanges: IndexedSeq[Option[DataFrame]] = sides.map { i =>
    if (pending(i).isEmpty) None else Some(aggregate(pending(i).reduce(_ unionByName _), auxCols(i)))
  }

  /**
   * Minor rebalancing (Fig. 16), decided from the degrees after the refresh of the keys it
   * touched: a heavy key below 1/2 N^eps turns light, a light key at 3/2 N^eps or more turns
   * heavy. Returns the keys turning heavy and light per occurrence.
   */
  def moves(state: EpsilonState, heavy: IndexedSeq[HeavySet]): IndexedSeq[(Set[Any], Set[Any])] =
    parallel(sides.map(i => () => movesOf(i, state, heavy))).toIndexedSeq

  private def movesOf(i: Int, state: EpsilonState, heavy: IndexedSeq[HeavySet]): (Set[Any], Set[Any]) =
    deltas(i) match {
      case Some(d) if !state.allHeavy =>
        val touched = keysOf(d, s"a$i").getOrElse(
          d.frame.select(s"a$i").where(col(s"a$i").isNotNull).distinct().collect().map(_.get(0)).toSeq)
        val degree = probe(post(i), s"a$i" -> Some(touched)).groupBy(s"a$i").agg(sum(W))
          .collect().map(r => r.get(0) -> r.getLong(1)).toMap
        val wasHeavy = heavy(i).keys.map(_.intersect(touched.toSet)).getOrElse(
          heavy(i).table.filterNot(_ => heavy(i).empty)
            .map(t => probe(t, s"a$i" -> Some(touched)).collect().map(_.get(0)).toSet).getOrElse(Set.empty[Any]))
        val theta = state.threshold
        val turnLight = wasHeavy.filter(k => degree.getOrElse(k, 0L) < 0.5 * theta)
        val turnHeavy = touched.toSet.diff(wasHeavy).filter(k => degree.getOrElse(k, 0L) >= 1.5 * theta)
        (turnHeavy, turnLight)
      case _ => (Set.empty[Any], Set.empty[Any])
    }

  /**
   * The auxiliary views' changes from moving keys between parts, over Post:
   * V_i' - V_i = D(X_i^H) x X_{i+1}^L' + X_i^H x D(X_{i+1}^L) (MoveTuples through the delta rule).
   */
  def rebalanceChanges(heavy: IndexedSeq[HeavySet], mv: IndexedSeq[(Set[Any], Set[Any])])
      : IndexedSeq[Option[DataFrame]] = sides.map { i =>
    val j = next(i)
    val (inI, outI) = mv(i)
    val (inJ, outJ) = mv(j)
    val movedJ = inJ ++ outJ
    val terms = Seq.newBuilder[DataFrame]
    if (inI.nonEmpty || outI.nonEmpty) {
      val dH = moved(post(i), i, inI, outI)
      // X_{j}^L after the moves: light before, minus keys turning heavy, plus keys turning light.
      val target = probe(post(j), s"a$j" -> keysOf(dH, s"b$i"))
      val lightAfter = lightPart(target.where(!col(s"a$j").isin(movedJ.toSeq: _*)), j, heavy(j))
        .unionByName(if (outJ.isEmpty) target.limit(0) else target.where(col(s"a$j").isin(outJ.toSeq: _*)))
      terms += aux(i, dH, lightAfter)
    }
    if (movedJ.nonEmpty) {
      val dL = moved(post(j), j, outJ, inJ)
      terms += aux(i, heavyPart(probe(post(i), s"b$i" -> Some(movedJ.toSeq)), i, heavy(i)), dL)
    }
    terms.result().reduceOption(_ unionByName _).map(t => materialize(aggregate(t, auxCols(i))))
  }

  // ---- building from scratch ----

  /** |D|: rows of the three occurrences at Post. */
  def postSize(): Long = sides.map(i => post(i).count()).sum

  /** Strict partition (heavy iff degree >= N^eps) of occurrence i at Post: its heavy keys. */
  def strictHeavy(i: Int, theta: Double): DataFrame =
    post(i).groupBy(s"a$i").agg(sum(W).as("deg")).where(col("deg") >= theta && col(s"a$i").isNotNull)
      .select(col(s"a$i").as(KeyColumn))

  /** Auxiliary view i from scratch, given the heavy sets. */
  def auxFromScratch(i: Int, heavy: IndexedSeq[HeavySet]): DataFrame = {
    val j = next(i)
    aggregate(aux(i, heavyPart(post(i), i, heavy(i)), lightPart(post(j), j, heavy(j))), auxCols(i))
  }

  /** The keys of occurrence i as a one-column DataFrame named for its heavy table. */
  def keyFrame(i: Int, keys: Iterable[Any]): DataFrame = spark.createDataFrame(
    spark.sparkContext.parallelize(keys.toSeq.map(k => Row(k)), 1),
    StructType(Seq(StructField(KeyColumn, types(s"a$i")))))

  def keyType(i: Int): DataType = types(s"a$i")
}

object TriangleMaintenance {
  /**
   * Runs independent pieces of work side by side: they are small Spark jobs whose time goes to
   * planning and scheduling, which overlap well. Threads created here inherit the caller's
   * Spark local properties (job group, read metrics).
   */
  def parallel[T](tasks: Seq[() => T]): Seq[T] = tasks match {
    case Seq() => Nil
    case Seq(one) => Seq(one())
    case many =>
      val pool = Executors.newFixedThreadPool(many.size)
      implicit val ec: ExecutionContext = ExecutionContext.fromExecutorService(pool)
      try Await.result(Future.sequence(many.map(t => Future(t()))), Duration.Inf)
      finally pool.shutdown()
  }

  val W = "w"
  val KeyColumn = "key"
  /** Heavy sets up to this many keys are broadcast to split rows into parts. */
  val BroadcastKeys = 2000000L

  /** Rows held on the driver above this many are checkpointed instead. */
  val LocalRows = 200000

  /** A computed result: its rows on the driver (`local`), or a checkpoint of them. */
  case class LocalDelta(frame: DataFrame, rows: Seq[Row], local: Boolean = true) {
    def isEmpty: Boolean = if (local) rows.isEmpty else frame.isEmpty
    def count: Long = if (local) rows.size.toLong else frame.count()
    /** The sum of the weights (the change of the relation's size). */
    def weight: Long =
      if (local) rows.map(_.getAs[Long](W)).sum
      else Option(frame.agg(sum(W)).first().get(0)).map(_.asInstanceOf[Long]).getOrElse(0L)
  }
}
