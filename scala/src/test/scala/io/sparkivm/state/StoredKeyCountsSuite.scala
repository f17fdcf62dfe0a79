package io.sparkivm.state

import java.nio.file.Files

import io.sparkivm.TestSpark
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.types.{LongType, StringType}
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/**
 * Counts kept in storage: the counts at a version are a base plus a chain of changes that
 * reaches exactly that version, and nothing at all where no chain reaches it.
 */
class StoredKeyCountsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("stored-key-counts")

  private def newDir(): Path = new Path(Files.createTempDirectory("ivm-keycounts").toUri.toString, "counts")

  test("counts at a version: a base and the chain of changes that reaches it") {
    import spark.implicits._
    val dir = newDir()
    // Version 3: keys 0..99, key k counted k % 5 times (0 times: no row).
    val base = (0L until 100L).map(k => (k, k % 5)).filter(_._2 > 0).toDF("k", "n")
    StoredKeyCounts.writeBase(spark, dir, 3, base)
    val all = (0L until 100L).map(k => k: Any).toSet
    def expected(k: Long) = k % 5
    assert(StoredKeyCounts.at(spark, dir, 3, LongType, Set(1L, 5L, 7L)) === Some(Map(1L -> 1L, 7L -> 2L)))
    assert(StoredKeyCounts.at(spark, dir, 2, LongType, all) === None, "before the base")
    assert(StoredKeyCounts.at(spark, dir, 4, LongType, all) === None, "no change recorded to 4")

    // 3 -> 5: key 1 loses its row, key 5 gains two, key 200 appears.
    StoredKeyCounts.addChange(spark, dir, 3, 5, LongType, Map(1L -> -1L, 5L -> 2L, 200L -> 1L))
    StoredKeyCounts.awaitWrites()
    // A change from a version no chain reaches is not written.
    StoredKeyCounts.addChange(spark, dir, 4, 6, LongType, Map(1L -> 7L))
    StoredKeyCounts.awaitWrites()
    assert(StoredKeyCounts.chainLength(spark, dir, 6) === None)
    val at5 = StoredKeyCounts.at(spark, dir, 5, LongType, all + 200L).get
    assert(at5 === (0L until 100L).map(k => k -> expected(k)).toMap.updated(1L, 0L).updated(5L, 2L)
      .updated(200L, 1L).filter(_._2 != 0))
    assert(StoredKeyCounts.at(spark, dir, 3, LongType, Set(1L)) === Some(Map(1L -> 1L)), "still at 3")

    // A refresh that consumed 5 -> 9 and did not commit, then one that consumed 5 -> 8 and 8 -> 9:
    // the shortest chain is read, and both chains agree.
    StoredKeyCounts.addChange(spark, dir, 5, 9, LongType, Map(7L -> 3L))
    StoredKeyCounts.awaitWrites()
    StoredKeyCounts.addChange(spark, dir, 5, 8, LongType, Map(7L -> 1L))
    StoredKeyCounts.addChange(spark, dir, 8, 9, LongType, Map(7L -> 2L))
    StoredKeyCounts.awaitWrites()
    assert(StoredKeyCounts.chainLength(spark, dir, 9) === Some(2))
    assert(StoredKeyCounts.at(spark, dir, 9, LongType, Set(7L)) === Some(Map(7L -> 5L)))
    assert(StoredKeyCounts.at(spark, dir, 8, LongType, Set(7L)) === Some(Map(7L -> 3L)))

    // A new base at 9 removes what no chain from it needs; older versions are then not read.
    StoredKeyCounts.writeBase(spark, dir, 9, Seq((7L, 5L), (200L, 1L)).toDF("k", "n"))
    assert(StoredKeyCounts.at(spark, dir, 9, LongType, Set(7L, 200L)) === Some(Map(7L -> 5L, 200L -> 1L)))
    assert(StoredKeyCounts.at(spark, dir, 5, LongType, Set(7L)) === None)
    val fs = dir.getFileSystem(spark.sessionState.newHadoopConf())
    assert(fs.listStatus(dir).map(_.getPath.getName).sorted.toSeq === Seq("base-9"))
  }

  test("string keys, and a directory per table and definition") {
    import spark.implicits._
    val root = newDir()
    val a = StoredKeyCounts.dirOf(root, "table-1", "k||UTC|ansi=true")
    assert(a !== StoredKeyCounts.dirOf(root, "table-2", "k||UTC|ansi=true"))
    assert(a !== StoredKeyCounts.dirOf(root, "table-1", "k||UTC|ansi=false"))
    StoredKeyCounts.writeBase(spark, a, 0, Seq(("x", 2L), ("y", 1L)).toDF("k", "n"))
    StoredKeyCounts.addChange(spark, a, 0, 1, StringType, Map(UTF8String.fromString("y") -> -1L))
    StoredKeyCounts.awaitWrites()
    assert(StoredKeyCounts.at(spark, a, 1, StringType, Set("x", "y", "z").map(UTF8String.fromString)) ===
      Some(Map(UTF8String.fromString("x") -> 2L)))
  }

  test("a long chain is summed into one change from the base, and its covered changes go") {
    import spark.implicits._
    val dir = newDir()
    StoredKeyCounts.writeBase(spark, dir, 0, (0L until 50L).map(k => (k, 1L)).toDF("k", "n"))
    val fs = dir.getFileSystem(spark.sessionState.newHadoopConf())
    def names = fs.listStatus(dir).map(_.getPath.getName).filterNot(_.startsWith(".")).sorted.toSeq
    val rnd = new scala.util.Random(7)
    val expected = scala.collection.mutable.Map[Any, Long]((0L until 50L).map(k => (k: Any) -> 1L): _*)
    // 30 refreshes, each the only one of its application: every one finds a short chain.
    (0 until 30).foreach { i =>
      val change = (0 until 5).map(_ => (rnd.nextInt(60).toLong: Any) -> (rnd.nextInt(5) - 2).toLong)
        .groupMapReduce(_._1)(_._2)(_ + _)
      StoredKeyCounts.addChange(spark, dir, i, i + 1, LongType, change)
      StoredKeyCounts.awaitWrites()
      change.foreach { case (k, n) => expected(k) = expected.getOrElse(k, 0L) + n }
      val length = StoredKeyCounts.chainLength(spark, dir, i + 1)
      assert(length.exists(_ <= StoredKeyCounts.MaxChain), s"version ${i + 1}: chain $length")
      assert(StoredKeyCounts.at(spark, dir, i + 1, LongType, (0L until 60L).toSet[Any]) ===
          Some(expected.filter(_._2 != 0).toMap), s"version ${i + 1}")
    }
    // Summed at the 9th change (0 -> 9), the 17th (0 -> 17) and the 25th (0 -> 25); the changes
    // the sum covers are removed by the change after it, as no refresh reads them then.
    assert(names.contains("change-0-25.parquet"))
    assert(!names.contains("change-0-17.parquet") && !names.contains("change-3-4.parquet"))
    assert(names.size <= StoredKeyCounts.MaxChain + 2, names)
  }
}
