package org.apache.spark.sql.ivm

import scala.util.Random

import io.sparkivm.TestSpark
import org.apache.spark.rdd.{PartitionPruningRDD, RDD}
import org.apache.spark.sql.execution.LogicalRDD
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.Decimal
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Rows kept resident and partitioned by key (the layout of IVM^eps's resident state): a lookup
 * by keys sees every row with those keys, reads only the partitions the keys hash to, and the
 * same rows from another session; rows follow their SparkContext.
 */
class PartitionedRowsSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("rows")

  /** The RDD a read reads; None when it reads the rows in place (a local relation). */
  private def readRdd(df: org.apache.spark.sql.DataFrame): Option[RDD[_]] =
    SparkInternals.analyzed(df).collectFirst { case l: LogicalRDD => l.rdd }

  /** The Spark jobs `body` runs. */
  private def jobsOf[T](body: => T): (T, Long) = {
    val (result, work) = ReadMetrics.measure(spark)(body)
    (result, work.jobs)
  }

  /** The partitions a read kept of the resident ones (before any grouping into tasks). */
  private def prunedTo(rdd: RDD[_]): Int = rdd match {
    case p: PartitionPruningRDD[_] => p.getNumPartitions
    case other => prunedTo(other.dependencies.head.rdd)
  }

  test("decimal keys of any precision find their rows, in place and through a job") {
    import spark.implicits._
    // A converter made for the first key's own precision (1.25: DECIMAL(3, 2)) once overflowed
    // on a longer one (12.50), and the key found no rows.
    val df = Seq(("1.25", 1L), ("12.50", 2L), ("123.75", 3L), ("0.00", 4L)).toDF("k", "w")
      .select(col("k").cast("decimal(10, 2)").as("k"), col("w"))
    val kept = PartitionedRows(df, "k", 4, indexed = true)
    kept.load()
    val keys = Seq(BigDecimal("1.25"), BigDecimal("12.50"), BigDecimal("123.75"))
    def weights(read: org.apache.spark.sql.DataFrame) = read.collect().map(_.getLong(1)).sorted.toSeq
    assert(weights(kept.frameByJob(spark, Some(keys))) == Seq(1L, 2L, 3L))
    assert(weights(kept.frame(spark, Some(keys))) == Seq(1L, 2L, 3L))
    val catalyst = keys.map(k => Decimal(k, 10, 2): Any).toArray
    assert(weights(kept.frameOfKeysByJob(spark, Some(catalyst))) == Seq(1L, 2L, 3L))
    assert(kept.rowsOfKeysInPlace(catalyst).map(_.map(_.getLong(1)).sorted) == Some(Seq(1L, 2L, 3L)))
    kept.release()
  }

  for (indexed <- Seq(true, false)) {
    test(s"a lookup by keys sees the rows of those keys, from the partitions they hash to (indexed: $indexed)") {
      import spark.implicits._
      val rng = new Random(7)
      val data = Seq.fill(5000)((rng.nextInt(300), rng.nextInt(1000).toString, rng.nextLong()))
      val df = data.toDF("k", "v", "w")
      val kept = PartitionedRows(df, "k", 16, indexed)
      (1 to 20).foreach { round =>
        val keys = Seq.fill(1 + rng.nextInt(5))(rng.nextInt(320)) // some keys have no rows
        val want = data.filter(r => keys.contains(r._1)).map(r => Seq(r._1, r._2, r._3)).sortBy(_.toString)
        val read = kept.frame(spark, Some(keys))
        val got = read.where(col("k").isin(keys: _*)).collect().map(_.toSeq).sortBy(_.toString)
        assert(got.toSeq == want, s"round $round, keys $keys")
        // Indexed, a lookup returns only the rows of its keys; unindexed, whole partitions.
        val all = read.count()
        if (indexed) assert(all == want.size) else assert(all >= want.size)
        readRdd(read) match {
          case Some(rdd) =>
            val parts = prunedTo(rdd)
            assert(parts <= keys.distinct.size && parts < 16)
            // Indexed lookups run as at most one task per core.
            if (indexed) assert(rdd.getNumPartitions <= spark.sparkContext.defaultParallelism)
          // Read in place: only indexed rows, whose partitions an earlier lookup computed.
          case None => assert(indexed)
        }
      }
      assert(kept.frame(spark, None).count() == data.size)
      if (!indexed) assert(prunedTo(readRdd(kept.frame(spark, Some(Nil))).get) == 0)
      kept.release()
    }
  }

  test("on a local master, lookups of kept partitions read them in place, without a job") {
    import spark.implicits._
    val rng = new Random(5)
    val data = Seq.fill(4000)((rng.nextInt(500), rng.nextInt(9) - 4L))
    val kept = PartitionedRows(data.toDF("k", "w"), "k", 8, indexed = true)
    val keys = Seq(4, 40, 400, 4000)
    val want = data.filter(r => keys.contains(r._1)).map(r => (r._1, r._2)).sorted
    def read() = kept.frame(spark, Some(keys)).as[(Int, Long)].collect().toSeq.sorted
    // The first lookup computes (and keeps) the partitions of its keys by a job.
    val (first, firstJobs) = jobsOf(read())
    assert(first == want && firstJobs >= 1)
    val (again, againJobs) = jobsOf(read())
    assert(again == want && againJobs == 0 && readRdd(kept.frame(spark, Some(keys))).isEmpty)
    // Rows held on the driver join those read in place, only those of the keys.
    val more = PartitionedRows.toInternal(kept.schema, Seq(Row(40, 100L), Row(41, 1L)))
    assert(kept.rowsInPlace(keys, more).get.map(r => (r.getInt(0), r.getLong(1))).sorted ==
      (want :+ ((40, 100L))).sorted)
    val sums = want.groupMapReduce(_._1)(_._2)(_ + _).map { case (k, w) => (k: Any) -> w }
    val (summed, sumJobs) = jobsOf(kept.sums(spark, keys, 1))
    assert(summed == sums && sumJobs == 0)
    // Freed rows are read through a job again.
    kept.release()
    val (afterRelease, releasedJobs) = jobsOf(read())
    assert(afterRelease == want && releasedJobs >= 1 && kept.rowsInPlace(keys).isEmpty)
  }

  test("sums per key, from the rows of the keys only") {
    import spark.implicits._
    val rng = new Random(11)
    val data = Seq.fill(3000)((rng.nextInt(200), rng.nextInt(7) - 3L))
    val kept = PartitionedRows(data.toDF("k", "w"), "k", 8, indexed = true)
    val keys = Seq(3, 17, 150, 999, 3) // 999 has no rows; 3 twice
    val want = data.filter(r => keys.contains(r._1)).groupMapReduce(_._1)(_._2)(_ + _)
    assert(kept.sums(spark, keys, 1) == want.map { case (k, w) => (k: Any) -> w })
    assert(kept.sums(spark, Nil, 1).isEmpty)
    kept.release()
  }

  test("keys of another type than the key column find the rows of the equal values") {
    import spark.implicits._
    val kept = PartitionedRows(Seq((1L, "a"), (2L, "b"), (3000000000L, "c")).toDF("k", "v"), "k", 4, indexed = true)
    // INT and string probes of a BIGINT column; a value no BIGINT equals finds nothing.
    assert(kept.frame(spark, Some(Seq(2, "3000000000", "x"))).collect().map(_.getString(1)).sorted.toSeq ==
      Seq("b", "c"))
    kept.release()
  }

  test("string keys and null keys hash as Spark lays them out; other sessions read the same rows") {
    val rows = Seq(Row("a", 1L), Row("b", 2L), Row(null, 3L), Row("a", 4L))
    val schema = org.apache.spark.sql.types.StructType.fromDDL("k STRING, w BIGINT")
    val kept = PartitionedRows(spark.createDataFrame(java.util.Arrays.asList(rows: _*), schema), "k", 4,
      indexed = true)
    val other = spark.newSession()
    assert(kept.frame(other, Some(Seq("a"))).collect().map(_.getLong(1)).sorted.toSeq == Seq(1L, 4L))
    assert(kept.frame(spark, Some(Seq(null))).collect().map(_.getLong(1)).toSeq == Seq(3L))
    assert(kept.alive(spark.sparkContext))
    val rowsOut = PartitionedRows.toInternal(schema, Seq(Row("c", 5L)))
    assert(rowsOut.head.getUTF8String(0).toString == "c" && rowsOut.head.getLong(1) == 5L)
  }
}
