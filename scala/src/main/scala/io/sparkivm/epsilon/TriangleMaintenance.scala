package io.sparkivm.epsilon

import scala.collection.mutable

import io.sparkivm.catalog.EpsilonState
import io.sparkivm.errors.IvmErrors
import io.sparkivm.execution.{DriverEval, PartitionedState}
import io.sparkivm.planner.{DeltaRules, KeyProbe, TriangleQuery}
import org.apache.spark.sql.catalyst.CatalystTypeConverters
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Cast, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project, Union}
import org.apache.spark.sql.functions.{broadcast, col, sum}
import org.apache.spark.sql.ivm.{DriverRows, JoinMetrics, OnDriver, PartitionedRows, SparkInternals}
import org.apache.spark.sql.types._
import org.apache.spark.sql.{DataFrame, Row, SparkSession}

/**
 * IVM^eps for a triangle view (Kara et al. 2020), batched per refresh.
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
class TriangleMaintenance(spark: SparkSession, q: TriangleQuery, rules: DeltaRules, maxKeys: Int,
    stateOwner: Option[PartitionedState.Owner] = None) {
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
    val w = Alias(weight.map(m => Cast(m, LongType)).getOrElse(Literal(1L)), Weight)()
    SparkInternals.dataFrame(spark, Project(named :+ w, plan))
  }

  private val postFrames = mutable.Map[Int, DataFrame]()
  def post(i: Int): DataFrame =
    postFrames.synchronized(postFrames.getOrElseUpdate(i, frame(i, rules.post(q.sides(i).plan), None)))

  /**
   * Occurrence i as of the last refresh, Pre = Post - D as a weighted relation (the Z-relation
   * identity): no time travel, so no Delta snapshot of an old version is rebuilt. Every join
   * here multiplies weights and every result is summed per row, so the negated rows cancel.
   */
  def pre(i: Int): DataFrame = deltas(i) match {
    case Some(d) => post(i).unionByName(d.negated.frame)
    case None => post(i)
  }

  /** The net change of each occurrence, with its rows on the driver (no Spark job when the
   * base tables' changes are held there, as they are when small). */
  lazy val deltas: IndexedSeq[Option[WeightedDelta]] = sides.map { i =>
    val branches = rules.delta(q.sides(i).plan)
    if (branches.isEmpty) None
    else {
      val raw = frame(i, rules.unionAll(branches.map(_.plan)), Some(rules.multiplicity))
      val net = rowsOnDriver(raw).map { rows =>
        // Folded on the driver: the rows are here already.
        onDriver(raw.schema, fold(rows, cols(i).size))
      }.getOrElse(small(aggregate(raw, cols(i))))
      if (net.isEmpty) None else Some(net)
    }
  }

  /**
   * `df`'s rows, as `collect` returns them, when they are computed on the driver without a job:
   * its analyzed plan reads only rows held here through operators [[DriverEval]] computes (no
   * optimizer run), or its optimized plan is rows held here (Spark folds filters and
   * projections over rows held here into one) or a union of them, which Spark would run as a job.
   */
  private def rowsOnDriver(df: DataFrame): Option[Seq[Row]] = {
    val toRow = CatalystTypeConverters.createToScalaConverter(df.schema)
    DriverEval.rows(df.queryExecution.analyzed, MaxLocalRows).map(_.map(r => toRow(r).asInstanceOf[Row]))
      .orElse(optimizedRows(df))
  }

  private def optimizedRows(df: DataFrame): Option[Seq[Row]] = {
    val held = df.queryExecution.optimizedPlan match {
      case OnDriver(data) => Some(data)
      case u: Union if u.children.forall(OnDriver.unapply(_).isDefined) =>
        Some(u.children.flatMap(OnDriver.unapply(_).get))
      case _ => None
    }
    held.map { rows =>
      val toRow = CatalystTypeConverters.createToScalaConverter(df.schema)
      rows.map(r => toRow(r).asInstanceOf[Row])
    }
  }

  /** Rows whose first `width` columns are the same, their weights (the last column) summed, zeros dropped. */
  private def fold(rows: Seq[Row], width: Int): Seq[Row] =
    rows.groupMapReduce(r => r.toSeq.take(width))(_.getLong(width))(_ + _).toSeq.collect {
      case (k, w) if w != 0 => Row.fromSeq(k :+ w)
    }

  /** Rows on the driver; the rows keep the schema (columns are read by name). */
  private def onDriver(schema: StructType, rows: Seq[Row]): WeightedDelta = WeightedDelta.onDriver(spark, schema, rows)

  /** Change of |D| (rows) by this refresh. */
  def sizeChange: Long = deltas.flatten.map(_.weight).sum

  // ---- parts ----

  /**
   * The heavy keys of an occurrence (`allHeavy` when every key is heavy, at eps = 0). `keys`
   * holds them on the driver when there are at most maxKeys, so that splitting rows into parts
   * is a filter in the scan (rows of the other part never enter a join), not a join; the table
   * is read only when they are not.
   */
  class HeavySet(val allHeavy: Boolean, val size: Long, val keys: Option[Set[Any]], read: () => DataFrame) {
    lazy val table: DataFrame = read()
    def empty: Boolean = !allHeavy && size == 0
  }
  object HeavySet {
    val all: HeavySet = new HeavySet(true, 0, None,
      () => throw IvmErrors.internal("the keys of a set where every key is heavy were asked for"))
  }

  /** The heavy set of occurrence i read from its table, with its keys collected if few. */
  def heavySet(i: Int, table: => DataFrame, size: Long, cached: (=> Set[Any]) => Set[Any]): HeavySet = {
    lazy val t = table
    new HeavySet(false, size, if (size <= maxKeys) Some(cached(t.collect().map(_.get(0)).toSet)) else None, () => t)
  }

  private def heavyPart(df: DataFrame, i: Int, h: HeavySet): DataFrame =
    if (h.allHeavy) df
    else if (h.empty) df.limit(0)
    else h.keys match {
      case Some(keys) => df.where(col(s"a$i").isin(keys.toSeq: _*))
      case None => df.join(hint(h.table, h.size), Seq(s"a$i"), "left_semi")
    }
  private def lightPart(df: DataFrame, i: Int, h: HeavySet): DataFrame =
    if (h.allHeavy) df.limit(0)
    else if (h.empty) df
    else h.keys match {
      case Some(keys) => df.where(!col(s"a$i").isin(keys.toSeq: _*))
      case None => df.join(hint(h.table, h.size), Seq(s"a$i"), "left_anti")
    }

  /** The parts of rows held here, split on the driver when the heavy keys are held here too. */
  private def heavyPart(d: WeightedDelta, i: Int, h: HeavySet): WeightedDelta =
    if (h.allHeavy) d
    else if (h.empty) d.none
    else h.keys match {
      case Some(keys) if d.isOnDriver && keysOnDriver => d.where(s"a$i", keys)
      case _ => WeightedDelta.distributed(heavyPart(d.frame, i, h))
    }
  private def lightPart(d: WeightedDelta, i: Int, h: HeavySet): WeightedDelta =
    if (h.allHeavy) d.none
    else if (h.empty) d
    else h.keys match {
      case Some(keys) if d.isOnDriver && keysOnDriver => d.where(s"a$i", k => !keys(k))
      case _ => WeightedDelta.distributed(lightPart(d.frame, i, h))
    }

  /**
   * True if rows held here may be filtered by key on the driver: every partition and shared
   * variable (a_i, b_i) has one type whose values compare as the JVM's, so a key taken from one
   * column equals a value of another exactly when SQL's `IN` would say so (no coercion).
   */
  private lazy val keysOnDriver: Boolean = {
    val keyTypes = sides.flatMap(i => Seq(types(s"a$i"), types(s"b$i"))).distinct
    keyTypes.size == 1 && KeyProbe.equalsAsJvm(keyTypes.head)
  }

  /**
   * Probe keys of an occurrence's light (heavy) part: those not in (those in) its heavy set when
   * it is held here, so that a probe of one part never reads the rows of the other's keys (a
   * light probe by a heavy key would read all of its up to N rows only to drop them). The part's
   * filter still applies: a key of another type than the set's is kept here, not dropped.
   */
  private def lightOnly(h: HeavySet, keys: Option[Seq[Any]]): Option[Seq[Any]] =
    h.keys.filter(_ => !h.allHeavy).fold(keys)(set => keys.map(_.filterNot(set)))
  private def heavyOnly(h: HeavySet, keys: Option[Seq[Any]]): Option[Seq[Any]] =
    h.keys.filter(_ => !h.allHeavy).fold(keys)(set => keys.map(_.filter(set)))

  private def hint(t: DataFrame, size: Long) = if (size <= BroadcastKeys) broadcast(t) else t

  // ---- kept occurrences ----

  private def positions(i: Int): Seq[Int] =
    q.sides(i).columns.map(c => q.sides(i).plan.output.indexWhere(_.exprId == c.exprId))

  /** The first occurrence defined as i is: a self-join's occurrences share resident rows. */
  private lazy val group: IndexedSeq[Int] = sides.map(i =>
    sides.find(k =>
      k == i ||
        (q.sides(k).plan.canonicalized == q.sides(i).plan.canonicalized && positions(k) == positions(i))).get)

  /**
   * Occurrence i at Post from the executors' memory, laid out by its column `layout` ("a" or
   * "b"), only the partitions that can hold `keys` (the caller filters the rows). The kept rows
   * as of the last refresh's versions plus this refresh's change make the rows at Post (no Delta
   * read); with no kept rows, the occurrence is read at Post once and kept. None when resident
   * state is off or the occurrence does not read pinned Delta tables.
   */
  private def keptPost(i: Int, layout: String, keys: Seq[Any],
      where: Seq[(String, Seq[Any])]): Option[WeightedDelta] =
    keptEntry(i, layout).map { entry =>
      val at = where.map { case (c, v) => cols(i).indexOf(c) -> v }
      // The entry's columns are an occurrence's (a self-join's occurrences share it), named here as i's.
      val named = StructType(entry.base.schema.fields.zip(cols(i) :+ Weight).map { case (f, n) => f.copy(name = n) })
      entry.rowsOnDriver(keys, at).filter(_ => keysOnDriver).map(WeightedDelta.internal(spark, named, _))
        .getOrElse(WeightedDelta.distributed(entry.frame(spark, Some(keys), at).toDF(cols(i) :+ Weight: _*)))
    }

  /** The kept rows of occurrence i at Post laid out by `layout` (see [[keptPost]]). */
  private def keptEntry(i: Int, layout: String): Option[PartitionedState.Entry] = for {
    owner <- stateOwner
    (preVersions, postVersions) <- rules.stamps(q.sides(i).plan)
  } yield {
    val name = owner.name(group(i), layout)
    val (preStamp, postStamp) = (owner.stamp(preVersions), owner.stamp(postVersions))
    PartitionedState.synchronized {
      PartitionedState.get(spark, name, postStamp).getOrElse {
        val advanced = PartitionedState.get(spark, name, preStamp).flatMap { kept =>
          deltas(i) match {
            case None => Some(kept.copy(version = postStamp))
            case Some(d) if d.isOnDriver => kept.plus(postStamp, PartitionedRows.toInternal(kept.base.schema, d.rows))
            case Some(_) => None
          }
        }
        val entry = advanced.getOrElse {
          val bytes = rules.sizeInBytes(q.sides(i).plan)
          val parts = PartitionedState.partitions(spark,
            if (bytes == Long.MaxValue) 0L else bytes / PartitionedState.BytesPerPartition)
          PartitionedState.Entry(postStamp, PartitionedState.rows(post(i), s"$layout$i", parts), Vector.empty)
        }
        PartitionedState.put(name, entry)
        entry
      }
    }
  }

  /**
   * Occurrence k at Post (`atPost`) or Pre, rows whose columns hold the given values: resident
   * rows when a filter is on its a or b column, else read from the Delta tables.
   */
  private def side(k: Int, atPost: Boolean, filters: (String, Option[Seq[Any]])*): WeightedDelta = {
    val probes = filters.collect { case (c, Some(v)) if c == s"a$k" || c == s"b$k" => (c, v) }
    // A point lookup by both columns reads the layout whose keys have fewer rows (a heavy key's
    // rows by a, its few in-edges by b), when both are kept here to count.
    val sized = if (probes.size < 2) Nil
    else probes.map { case (c, v) =>
      keptEntry(k, c.take(1)).flatMap(_.base.sizeInPlace(v))
    }
    val chosen =
      if (sized.nonEmpty && sized.forall(_.isDefined)) Some(probes.zip(sized).minBy(_._2.get)._1)
      else probes.headOption
    val kept = chosen.flatMap { case (probed, v) =>
      keptPost(k, probed.take(1), v, filters.collect { case (c, Some(vs)) if c != probed => c -> vs })
    }
    val rows = kept match {
      case Some(postRows) if atPost => postRows
      case Some(postRows) => deltas(k).fold(postRows)(d => postRows.unionByName(d.negated))
      case None => WeightedDelta.distributed(if (atPost) post(k) else pre(k))
    }
    probe(rows, filters: _*)
  }

  // ---- probes and weighted joins ----

  /** Rows of `df` whose columns hold one of the given values (None: no restriction). */
  private def probe(df: DataFrame, filters: (String, Option[Seq[Any]])*): DataFrame =
    filters.foldLeft(df) {
      case (d, (c, Some(values))) => d.where(col(c).isin(values: _*))
      case (d, (_, None)) => d
    }
  private def probe(d: WeightedDelta, filters: (String, Option[Seq[Any]])*): WeightedDelta =
    if (d.isOnDriver && keysOnDriver) filters.foldLeft(d) {
      case (rows, (c, Some(values))) =>
        val set = values.toSet
        rows.where(c, set)
      case (rows, (_, None)) => rows
    }
    else WeightedDelta.distributed(probe(d.frame, filters: _*))

  private def keysOf(rows: Seq[Row], c: String, schema: StructType): Option[Seq[Any]] = {
    val idx = schema.fieldIndex(c)
    val vs = rows.iterator.map(_.get(idx)).filter(_ != null).toSet
    if (vs.size > maxKeys) None else Some(vs.toSeq)
  }
  private def keysOf(d: WeightedDelta, c: String): Option[Seq[Any]] =
    if (d.isOnDriver) keysOf(d.rows, c, d.schema) else keysOf(d.frame, c)

  private def keysOf(df: DataFrame, c: String): Option[Seq[Any]] = {
    val vs = df.select(col(c)).where(col(c).isNotNull).distinct().limit(maxKeys + 1).collect().map(_.get(0))
    if (vs.length > maxKeys) None else Some(vs.toSeq)
  }

  private def join(l: DataFrame, r: DataFrame, on: Seq[(String, String)]): DataFrame = {
    val rr = r.withColumnRenamed(Weight, "__w_r")
    val cond = on.map { case (a, b) => l(a) === rr(b) }.reduce(_ && _)
    l.join(rr, cond).withColumn(Weight, col(Weight) * col("__w_r")).drop("__w_r")
  }

  /**
   * `df` computed now: on the driver when it is small (the bounded sets of one batch are), so
   * that taking its keys and joining it cost no further job; checkpointed otherwise.
   */
  private def small(df: DataFrame): WeightedDelta = smallAll(Seq(WeightedDelta.distributed(df))).head

  /** Several results computed in one Spark job (see [[small]]); those held here already stay. */
  private def smallAll(ds: Seq[WeightedDelta]): Seq[WeightedDelta] = {
    val done = mutable.Map[Int, WeightedDelta]()
    val dfs = ds.map(d => if (d.isOnDriver) null else d.frame)
    val remote = dfs.zipWithIndex.filter { case (df, i) =>
      if (ds(i).isOnDriver) { done(i) = ds(i); false }
      else rowsOnDriver(df).map(rows => done(i) = onDriver(df.schema, rows)).isEmpty
    }
    DriverRows.collect(spark, remote.map(_._1), MaxLocalRows) match {
      case Some(all) if all.forall(_.size <= MaxLocalRows) =>
        remote.zip(all).foreach { case ((df, i), rows) =>
          val toRow = CatalystTypeConverters.createToScalaConverter(df.schema)
          done(i) = onDriver(df.schema, rows.map(r => toRow(r).asInstanceOf[Row]))
        }
      case _ => remote.foreach { case (df, i) =>
          done(i) = WeightedDelta.distributed(df.localCheckpoint(eager = true))
        }
    }
    dfs.indices.map(done)
  }

  private def aggregate(df: DataFrame, keys: Seq[String]): DataFrame =
    df.groupBy(keys.map(col): _*).agg(sum(Weight).as(Weight)).filter(col(Weight) =!= 0)

  /** `d` summed per row of `keys` (weights `w`), computed now: on the driver when it is there. */
  def settled(d: WeightedDelta, keys: Seq[String]): WeightedDelta = {
    val cols = d.select(keys :+ Weight)
    if (cols.isOnDriver) onDriver(cols.schema, fold(cols.rows, keys.size))
    else rowsOnDriver(cols.frame).map(rows => onDriver(cols.frame.schema, fold(rows, keys.size)))
      .getOrElse(small(aggregate(cols.frame, keys)))
  }

  /** The columns of the block's delta rows and `w`. */
  private lazy val blockSchema =
    StructType(allCols.map(c => StructField(c, types(c))) :+ StructField(Weight, LongType))

  /** `d` with every column of the block's delta rows (nulls for those the view never reads). */
  private def complete(d: WeightedDelta): WeightedDelta = d.complete(blockSchema)

  /** Auxiliary view i's rows from its heavy side (columns of i) joined with its light side (i+1). */
  private def aux(i: Int, heavy: DataFrame, light: DataFrame): DataFrame =
    join(heavy, light, Seq(s"b$i" -> s"a${next(i)}")).select((auxCols(i) :+ Weight).map(col): _*)

  /** Sign-weighted rows of occurrence i whose partition key is in `plus` or `minus`. */
  private def moved(df: DataFrame, i: Int, plus: Set[Any], minus: Set[Any]): DataFrame = {
    val a = col(s"a$i")
    val in = if (plus.isEmpty) df.limit(0) else df.where(a.isin(plus.toSeq: _*))
    val out = if (minus.isEmpty) df.limit(0) else df.where(a.isin(minus.toSeq: _*)).withColumn(Weight, -col(Weight))
    in.unionByName(out)
  }

  // ---- one refresh ----

  private val pending = Array.fill(3)(Seq.empty[WeightedDelta])

  /** What each step ran, for the report and EXPLAIN. */
  val notes: mutable.ArrayBuffer[String] = mutable.ArrayBuffer[String]()

  /**
   * The delta of the join block (columns [[allCols]] and `w`), from the state before the
   * refresh: heavy sets and auxiliary views as of `state`, read from `tables`.
   *
   * The steps of the batch (one per changed occurrence j, in order) run as two Spark jobs in
   * all: first every step's first hops (F1 = D x X_p^L probed by the B-values of D, and
   * F2 = D x X_q^H probed by its A-values) are computed together and held on the driver; the
   * auxiliary views' changes of lines 9-11 follow from them without a job (V_j gains D^H x
   * X_p^L, which is F1 restricted to D's heavy rows; V_q gains X_q^H x D^L, F2 restricted to
   * its light rows). Then every step's second hops (point lookups keyed by F1 and F2) and
   * auxiliary-view lookups (V_p as of the step: stored plus earlier steps' changes) are one
   * query, summed per row. Where the resident rows are read in place (a local master), the
   * hops run no job at all: each probe is a local relation ([[PartitionedState.Entry.frame]]).
   *
   * `auxTable(i, keys, where)` gives auxiliary view i's rows whose b_{i+1} is in `keys` (its
   * light side's variable) and whose columns in `where` hold the values given, or more rows.
   *
   * Where every input is held here ([[WeightedDelta]]: the changes, the resident rows read in place,
   * the heavy keys), the steps run on the rows themselves, with no DataFrame built but the result.
   */
  def blockDelta(state: EpsilonState, heavy: IndexedSeq[HeavySet],
      auxTable: (Int, Option[Seq[Any]], Seq[(String, Seq[Any])]) => WeightedDelta): DataFrame = {
    val changed = sides.flatMap(j => deltas(j).map(j -> _))
    // 1. First hops of every step, in one job.
    val hops = changed.map { case (j, d) =>
      val p = next(j)
      val prev = next(p)
      val aKeys = keysOf(d, s"a$j")
      val bKeys = keysOf(d, s"b$j")
      val allHeavy = heavy(p).allHeavy
      val f1 = if (allHeavy) None
      else Some(Hop(d,
          lightPart(side(p, p < j, s"a$p" -> lightOnly(heavy(p), bKeys)), p, heavy(p)), Seq(s"b$j" -> s"a$p")))
      val needF2 = !heavy(prev).empty && (!heavy(p).empty || !allHeavy)
      val f2 = if (!needF2) None
      else Some(Hop(d,
          heavyPart(side(prev, prev < j, s"b$prev" -> aKeys), prev,
            heavy(prev)), Seq(s"a$j" -> s"b$prev")))
      (j, d, f1, f2)
    }
    val firsts = hopsAll(hops.flatMap { case (_, _, f1, f2) => f1.toSeq ++ f2.toSeq }).iterator
    val computed = hops.map { case (j, d, f1, f2) => (j, d, f1.map(_ => firsts.next()), f2.map(_ => firsts.next())) }
    // 2. Second hops and lookups of every step, in one job.
    val seconds = mutable.ArrayBuffer[(Hop, WeightedDelta => WeightedDelta)]()
    computed.foreach { case (j, d, f1, f2) =>
      val p = next(j)
      val prev = next(p)
      val aKeys = keysOf(d, s"a$j")
      val bKeys = keysOf(d, s"b$j")
      val allHeavy = heavy(p).allHeavy
      // Light neighbours of each B-value (LH and LL), then point lookups in X_q.
      f1.foreach { first =>
        seconds += Hop(first, side(prev, prev < j, s"a$prev" -> keysOf(first, s"b$p"), s"b$prev" -> aKeys),
          Seq(s"b$p" -> s"a$prev", s"a$j" -> s"b$prev")) -> complete
      }
      // Heavy C-values pointing at each A-value (HH), then point lookups in X_p^H.
      f2.filter(_ => !heavy(p).empty).foreach { second =>
        val heavyB = if (types(s"b$j") == types(s"a$p")) heavyOnly(heavy(p), bKeys) else bKeys
        seconds += Hop(second,
          heavyPart(side(p, p < j, s"a$p" -> heavyB, s"b$p" -> keysOf(second, s"a$prev")), p,
            heavy(p)), Seq(s"b$j" -> s"a$p", s"a$prev" -> s"b$p")) -> complete
      }
      // The auxiliary view V_p = X_p^H x X_q^L as of this step (HL): a lookup.
      if (!allHeavy && !heavy(p).empty) {
        val v = (probe(auxTable(p, aKeys, bKeys.map(s"a$p" -> _).toSeq), s"a$p" -> bKeys, s"b$prev" -> aKeys) +:
          pending(p)).reduce(_ unionByName _)
        seconds += Hop(d, v, Seq(s"b$j" -> s"a$p", s"a$j" -> s"b$prev")) -> { hit =>
          complete(if (q.needsY(p)) hit.copyColumn(s"b$p", s"a$prev") else hit)
        }
      }
      // Lines 9-11, from the first hops: V_j gains D^H x X_p^L, V_q gains X_q^H x D^L.
      if (!allHeavy && !heavy(j).empty) f1.foreach { first =>
        pending(j) :+= heavyPart(first, j, heavy(j)).select(auxCols(j) :+ Weight)
      }
      if (!allHeavy && !heavy(prev).empty) f2.foreach { second =>
        pending(prev) :+= lightPart(second, j, heavy(j)).select(auxCols(prev) :+ Weight)
      }
      notes += s"D(${q.sides(j).name}): ${d.count} changed rows"
    }
    val out = hopsAll(seconds.map(_._1).toSeq).zip(seconds.map(_._2)).map { case (hit, finish) => finish(hit) }
    if (out.forall(_.isOnDriver)) {
      // Every term is held here: summed per row here, no job.
      onDriver(blockSchema, fold(out.flatMap(_.rows).toSeq, allCols.size)).frame
    } else small(aggregate(out.map(_.frame).reduce(_ unionByName _), allCols)).frame
  }

  /** A join of rows computed before with a probe of the state (weights multiplied). */
  private case class Hop(left: WeightedDelta, right: WeightedDelta, on: Seq[(String, String)])

  /**
   * Several hops computed in one Spark job. When a hop's left side is held on the driver, only
   * its probed rows are collected (the paper's bounded sets) and joined here: Spark would run a
   * job of its own to broadcast the left side. Otherwise Spark joins them.
   */
  private def hopsAll(hops: Seq[Hop]): Seq[WeightedDelta] = {
    val here: Seq[Boolean] = hops.map(h =>
      h.left.isOnDriver && h.on.forall { case (l, r) =>
        val lt = h.left.schema(l).dataType
        lt == h.right.schema(r).dataType && KeyProbe.equalsAsJvm(lt)
      })
    val done = smallAll(hops.zip(here).map { case (h, driver) =>
      if (driver) h.right else WeightedDelta.distributed(join(h.left.frame, h.right.frame, h.on))
    })
    hops.indices.map { i =>
      val (h, result) = (hops(i), done(i))
      if (!here(i)) result
      else if (result.isOnDriver) joinOnDriver(h.left, result, h.on)
      else small(join(h.left.frame, result.frame, h.on))
    }
  }

  /** [[join]] of two results held on the driver, as a hash join here (null keys match nothing). */
  private def joinOnDriver(l: WeightedDelta, r: WeightedDelta, on: Seq[(String, String)]): WeightedDelta = {
    val (ls, rs) = (l.schema, r.schema)
    val (lKeys, rKeys) = (on.map(c => ls.fieldIndex(c._1)), on.map(c => rs.fieldIndex(c._2)))
    val (lW, rW) = (ls.fieldIndex(Weight), rs.fieldIndex(Weight))
    val rKept = rs.fields.indices.filter(_ != rW)
    JoinMetrics.recordRows(l.rows.size.toLong + r.rows.size)
    val byKey = r.rows.groupBy(row => rKeys.map(row.get))
    val rows = for {
      lr <- l.rows
      key = lKeys.map(lr.get) if !key.contains(null)
      rr <- byKey.getOrElse(key, Nil)
    } yield Row.fromSeq(lr.toSeq.updated(lW, lr.getLong(lW) * rr.getLong(rW)) ++ rKept.map(rr.get))
    onDriver(StructType(ls.fields ++ rKept.map(rs.fields)), rows)
  }

  /** The auxiliary views' changes from the data, one per view (after [[blockDelta]]). */
  def auxChanges: IndexedSeq[Option[WeightedDelta]] = sides.map { i =>
    // Not summed here: [[settled]] sums them on the driver when they are held there.
    pending(i).reduceOption(_ unionByName _)
  }

  /**
   * Minor rebalancing (Fig. 16), decided from the degrees after the refresh of the keys it
   * touched: a heavy key below 1/2 N^eps turns light, a light key at 3/2 N^eps or more turns
   * heavy. Returns the keys turning heavy and light per occurrence.
   */
  def moves(state: EpsilonState, heavy: IndexedSeq[HeavySet]): IndexedSeq[(Set[Any], Set[Any])] = {
    val touched = sides.map(i =>
      deltas(i).filter(_ => !state.allHeavy).map { d =>
        keysOf(d, s"a$i").getOrElse(
          d.frame.select(s"a$i").where(col(s"a$i").isNotNull).distinct().collect().map(_.get(0)).toSeq)
      })
    // The degrees after the refresh of every touched key: from the resident rows' index where
    // they are kept (a sum per key, no shuffle), else of all occurrences in one job.
    val queried = sides.filter(touched(_).isDefined)
    // Occurrences of one table (a self-join) share their rows: one lookup for all their keys.
    val indexed = queried.groupBy(group).values.toSeq.flatMap { same =>
      val keys = same.flatMap(touched(_).get).distinct
      keptEntry(same.head, "a").flatMap(_.sums(spark, keys, Weight)).toSeq.flatMap(d => same.map(_ -> d))
    }.toMap
    val summed = queried.filterNot(indexed.contains)
    val degrees = indexed ++ summed.zip(smallAll(summed.map { i =>
      WeightedDelta.distributed(side(i, atPost = true, s"a$i" -> touched(i)).frame.groupBy(s"a$i").agg(sum(Weight)))
    }).map(_.all.map(r => r.get(0) -> r.getLong(1)).toMap)).toMap
    sides.map { i =>
      touched(i) match {
        case Some(keys) =>
          val degree = degrees(i)
          val wasHeavy = heavy(i).keys.map(_.intersect(keys.toSet)).getOrElse(
            if (heavy(i).empty) Set.empty[Any]
            else probe(heavy(i).table, s"a$i" -> Some(keys)).collect().map(_.get(0)).toSet)
          val theta = state.threshold
          val turnLight = wasHeavy.filter(k => degree.getOrElse(k, 0L) < 0.5 * theta)
          val turnHeavy = keys.toSet.diff(wasHeavy).filter(k => degree.getOrElse(k, 0L) >= 1.5 * theta)
          (turnHeavy, turnLight)
        case None => (Set.empty[Any], Set.empty[Any])
      }
    }
  }

  /**
   * The auxiliary views' changes from moving keys between parts, over Post:
   * V_i' - V_i = D(X_i^H) x X_{i+1}^L' + X_i^H x D(X_{i+1}^L) (MoveTuples through the delta rule).
   */
  def rebalanceChanges(heavy: IndexedSeq[HeavySet], mv: IndexedSeq[(Set[Any], Set[Any])])
      : IndexedSeq[Option[WeightedDelta]] = sides.map { i =>
    val j = next(i)
    val (inI, outI) = mv(i)
    val (inJ, outJ) = mv(j)
    val movedJ = inJ ++ outJ
    val terms = Seq.newBuilder[DataFrame]
    if (inI.nonEmpty || outI.nonEmpty) {
      val dH = moved(side(i, atPost = true, s"a$i" -> Some((inI ++ outI).toSeq)).frame, i, inI, outI)
      // X_{j}^L after the moves: light before, minus keys turning heavy, plus keys turning light.
      val target = side(j, atPost = true, s"a$j" -> keysOf(dH, s"b$i")).frame
      val lightAfter = lightPart(target.where(!col(s"a$j").isin(movedJ.toSeq: _*)), j, heavy(j))
        .unionByName(if (outJ.isEmpty) target.limit(0) else target.where(col(s"a$j").isin(outJ.toSeq: _*)))
      terms += aux(i, dH, lightAfter)
    }
    if (movedJ.nonEmpty) {
      val dL = moved(side(j, atPost = true, s"a$j" -> Some(movedJ.toSeq)).frame, j, outJ, inJ)
      terms += aux(i, heavyPart(side(i, atPost = true, s"b$i" -> Some(movedJ.toSeq)).frame, i, heavy(i)), dL)
    }
    terms.result().reduceOption(_ unionByName _).map(t => small(aggregate(t, auxCols(i))))
  }

  // ---- building from scratch ----

  /** |D|: rows of the three occurrences at Post. */
  def postSize(): Long = sides.map(i => post(i).count()).sum

  /** Strict partition (heavy iff degree >= N^eps) of occurrence i at Post: its heavy keys. */
  def strictHeavy(i: Int, theta: Double): DataFrame =
    post(i).groupBy(s"a$i").agg(sum(Weight).as("deg")).where(col("deg") >= theta && col(s"a$i").isNotNull)
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
  val Weight = "w"
  val KeyColumn = "key"

  /** Heavy sets up to this many keys are broadcast to split rows into parts. */
  val BroadcastKeys = 2000000L

  /** Rows held on the driver above this many are checkpointed instead. */
  val MaxLocalRows = 200000
}
