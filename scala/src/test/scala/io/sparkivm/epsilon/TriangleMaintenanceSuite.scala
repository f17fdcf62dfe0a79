package io.sparkivm.epsilon

import io.sparkivm.TestSpark
import io.sparkivm.catalog.EpsilonState
import io.sparkivm.planner.{DeltaRules, TriangleQuery}
import org.apache.spark.SparkException
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeReference}
import org.apache.spark.sql.functions.{col, sum}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.IntegerType
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * TriangleMaintenance, the batched IVM^eps of a triangle over an edge relation at Pre and Post
 * (rows given here, read through delta rules as a refresh reads them): for every partition of
 * the keys (all heavy at eps = 0, all light, a hub heavy with its keys held on the driver or
 * read from a table), the block delta equals the triangles at Post less those at Pre, for a view
 * that reads every vertex and for a count that sums them out; the auxiliary views' changes from
 * the data, and then from the keys that cross 1/2 N^eps or 3/2 N^eps (the moves computed as
 * the paper says from the degrees after the batch), give the auxiliary views defined over Post
 * with the new parts; the building blocks (|D|, strict heavy keys, key frames) are what their
 * definitions give.
 */
class TriangleMaintenanceSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("triangle-maintenance")

  private val join = "FROM tmn_edges e1 JOIN tmn_edges e2 ON e1.dst = e2.src " +
    "JOIN tmn_edges e3 ON e2.dst = e3.src AND e3.dst = e1.src"
  private val m: Attribute = AttributeReference("__ivm_m", IntegerType)()

  override def beforeAll(): Unit = spark.sql("CREATE TABLE tmn_edges (src INT, dst INT) USING delta")

  private def query(select: String): TriangleQuery =
    TriangleQuery.find(SparkInternals.analyzed(spark.sql(s"SELECT $select $join"))).toOption.flatten.get
  private lazy val listing = query("e1.src AS a, e2.src AS b, e3.src AS c")
  private lazy val counting = query("count(*) AS n")

  type Edges = Seq[(Int, Int)]

  private def engine(q: TriangleQuery, pre: Edges, post: Edges, maxKeys: Int = 1000) =
    new TriangleMaintenance(spark, q, new DeltaRules(new EdgeChangeReader(pre, post, m), m), maxKeys)

  /** The triangles (x, y, z): edges x->y, y->z, z->x, with multiplicity. */
  private def triangles(edges: Edges): Map[(Int, Int, Int), Long] = {
    val out = edges.groupBy(_._1)
    (for {
      (x, y) <- edges
      (_, z) <- out.getOrElse(y, Nil)
      if edges.contains((z, x))
    } yield (x, y, z)).groupBy(identity).map { case (k, v) => k -> v.size.toLong }
  }

  private def minus(a: Map[(Int, Int, Int), Long], b: Map[(Int, Int, Int), Long]) =
    (a.keySet ++ b.keySet).map(k => k -> (a.getOrElse(k, 0L) - b.getOrElse(k, 0L))).filter(_._2 != 0).toMap

  /** A hub (0) with edges to and from 1..12, a ring on 1..6 both ways, a chord 7->3. */
  private val pre: Edges = ((1 to 12).flatMap(k => Seq((0, k), (k, 0))) ++
    (1 to 6).flatMap(k => Seq((k, k % 6 + 1), (k % 6 + 1, k))) :+ ((7, 3))).distinct

  /** New triangles at the hub and on 13, one ring edge gone, the hub losing most of its out-edges, 7 gaining. */
  private val post: Edges = (pre.filterNot(e => e == ((2, 3)) || (e._1 == 0 && e._2 > 1)) ++
    Seq((0, 13), (13, 0), (13, 1), (1, 13), (3, 5), (5, 3)) ++ (8 to 16).map(k => (7, k))).distinct

  /** A state over Pre at threshold base `n`: heavy keys by degree >= n^eps, auxiliary views from scratch. */
  private case class Built(heavyKeys: IndexedSeq[Set[Any]], auxRows: IndexedSeq[WeightedDelta], state: EpsilonState) {
    def aux(i: Int): DataFrame = auxRows(i).frame
  }

  private def build(q: TriangleQuery, eps: Double, n: Long): Built = {
    val before = engine(q, pre, pre)
    val theta = EpsilonState.threshold(n, eps)
    val keys = (0 until 3).map(i =>
      if (eps == 0.0) Set.empty[Any] else before.strictHeavy(i, theta).collect().map(_.get(0)).toSet)
    val heavy = (0 until 3).map(i => heavySet(before, i, eps, keys(i), 1000))
    // Held here, as a refresh holds the rows it looks up.
    val aux = (0 until 3).map { i =>
      val df = before.auxFromScratch(i, heavy)
      WeightedDelta.onDriver(spark, df.schema, df.collect().toSeq)
    }
    Built(keys, aux, EpsilonState(eps, n, 3L * pre.size, keys.map(_.size.toLong), Seq(0, 0, 0), Seq(0, 0, 0), Nil))
  }

  private def heavySet(e: TriangleMaintenance, i: Int, eps: Double, keys: Set[Any], maxKeys: Int): e.HeavySet =
    if (eps == 0.0) e.HeavySet.all
    else e.heavySet(i, e.keyFrame(i, keys).select(col(TriangleMaintenance.KeyColumn).as(s"a$i")), keys.size,
      k => k)

  private def auxLookup(b: Built)(i: Int, keys: Option[Seq[Any]], where: Seq[(String, Seq[Any])]) = b.auxRows(i)

  /** Rows summed per `cols` (weights `w`), zeros dropped. */
  private def summed(df: DataFrame, cols: Seq[String]): Map[Seq[Any], Long] =
    df.groupBy(cols.map(col): _*).agg(sum("w").as("w")).where(col("w") =!= 0).collect()
      .map(r => cols.indices.map(r.get) -> r.getLong(cols.size)).toMap

  private val configurations = Seq(
    ("every key heavy (eps = 0)", 0.0, 100L, 1000), ("every key light", 0.5, 1000000L, 1000),
    ("the hub heavy, its keys held here", 0.5, 36L, 1000), ("the hub heavy, its keys read from a table", 0.5, 36L, 0))

  test("the block delta is the triangles at Post less those at Pre, for every partition") {
    val expected = minus(triangles(post), triangles(pre))
    assert(expected.nonEmpty && expected.values.exists(_ < 0) && expected.values.exists(_ > 0))
    configurations.foreach { case (what, eps, n, maxKeys) =>
      // The count, which sums every vertex out, where the parts differ most.
      val shapes = if (maxKeys == 0 || eps == 0.0) Seq(listing -> true, counting -> false) else Seq(listing -> true)
      shapes.foreach { case (q, listed) =>
        val b = build(q, eps, n)
        if (what.startsWith("the hub")) assert(b.heavyKeys(0) == Set(0), b.heavyKeys)
        val e = engine(q, pre, post, maxKeys)
        val heavy = (0 until 3).map(i => heavySet(e, i, eps, b.heavyKeys(i), maxKeys))
        val block = e.blockDelta(b.state, heavy, auxLookup(b))
        assert(block.columns.toSeq == e.allCols :+ "w")
        if (listed) {
          val got = summed(block, Seq("a0", "a1", "a2"))
          assert(got == expected.map { case ((x, y, z), w) => Seq[Any](x, y, z) -> w }, what)
          // Each occurrence's second vertex is the next one's first.
          block.collect().foreach { r =>
            (0 until 3).foreach(i => assert(r.isNullAt(2 * i + 1) || r.get(2 * i + 1) == r.get((2 * i + 2) % 6), r))
          }
        } else {
          val total = block.agg(sum("w")).head().get(0)
          assert(total == expected.values.sum, what)
        }
        assert(e.notes.size == 3 && e.notes.forall(_.matches("D\\(.*\\): \\d+ changed rows")), e.notes)
      }
    }
  }

  test("the auxiliary views' changes, from the data and from the keys that move, give them over Post") {
    val (eps, n) = (0.5, 36L) // threshold 6: moves below 3, at 9 or more
    val b = build(listing, eps, n)
    val e = engine(listing, pre, post)
    val heavy = (0 until 3).map(i => heavySet(e, i, eps, b.heavyKeys(i), 1000))
    e.blockDelta(b.state, heavy, auxLookup(b))
    val fromData = e.auxChanges
    // Over Post with the parts as they were: stored + the data's changes.
    (0 until 3).foreach { i =>
      val cols = e.auxCols(i)
      val updated = fromData(i).map(d => b.aux(i).select((cols :+ "w").map(col): _*).unionByName(d.frame))
        .getOrElse(b.aux(i))
      assert(summed(updated, cols) == summed(e.auxFromScratch(i, heavy), cols), i)
    }
    // The moves: from the degrees at Post of the keys the change touched.
    val moves = e.moves(b.state, heavy)
    val degree = post.groupBy(_._1).map { case (k, es) => (k: Any) -> es.size }
    val touched = (post.diff(pre) ++ pre.diff(post)).map(_._1: Any).toSet
    (0 until 3).foreach { i =>
      val theta = b.state.threshold
      val (turnHeavy, turnLight) = moves(i)
      assert(turnLight == b.heavyKeys(i).intersect(touched).filter(k => degree.getOrElse(k, 0) < 0.5 * theta))
      assert(turnHeavy == touched.diff(b.heavyKeys(i)).filter(k => degree.getOrElse(k, 0) >= 1.5 * theta))
    }
    assert(moves(0) == (Set(7), Set(0)), moves)
    // Stored + the data's changes + the moves' changes = defined over Post with the new parts.
    val rebalance = e.rebalanceChanges(heavy, moves)
    val after = (0 until 3).map { i =>
      heavySet(e, i, eps, b.heavyKeys(i) -- moves(i)._2 ++ moves(i)._1, 1000)
    }
    (0 until 3).foreach { i =>
      val cols = e.auxCols(i)
      val parts = Seq(Some(b.aux(i).select((cols :+ "w").map(col): _*)), fromData(i).map(_.frame),
        rebalance(i).map(_.frame)).flatten
      val settled = e.settled(WeightedDelta.distributed(parts.reduce(_ unionByName _)), cols)
      assert(summed(settled.frame, cols) == summed(e.auxFromScratch(i, after), cols), i)
    }
  }

  test("|D|, its change, strict heavy keys and key frames are their definitions") {
    val e = engine(counting, pre, post)
    assert(e.postSize() == 3L * post.size)
    assert(e.sizeChange == 3L * (post.size - pre.size))
    val degree = post.groupBy(_._1).map { case (k, es) => k -> es.size }
    Seq(2.0, 4.0, 6.5).foreach { theta =>
      (0 until 3).foreach { i =>
        assert(e.strictHeavy(i, theta).collect().map(_.getInt(0)).toSet == degree.filter(_._2 >= theta).keySet)
      }
    }
    val frame = e.keyFrame(1, Seq(3, 1))
    assert(frame.columns.toSeq == Seq(TriangleMaintenance.KeyColumn) && e.keyType(1) == IntegerType)
    assert(frame.collect().map(_.getInt(0)).toSet == Set(1, 3))
    assert(e.cols(2) == Seq("a2", "b2") && e.allCols == Seq("a0", "b0", "a1", "b1", "a2", "b2"))
    assert(e.sideName(0).endsWith("spark_catalog.default.tmn_edges"), e.sideName(0))
    // Every vertex is read: each auxiliary view keeps its shared variable.
    assert(engine(listing, pre, pre).auxCols(0) == Seq("a0", "b0", "b1"))
    assert(e.auxCols(0) == Seq("a0", "b1"))
    val all = e.HeavySet.all
    assert(all.allHeavy && !all.empty)
    intercept[SparkException](all.table)
    // No change: no delta, no size change.
    val idle = engine(counting, pre, pre)
    assert(idle.deltas.forall(_.isEmpty) && idle.sizeChange == 0L)
  }
}
