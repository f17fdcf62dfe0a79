package io.sparkivm.execution

import java.nio.file.Files

import io.sparkivm.TestSpark
import io.sparkivm.changes.{DriverChange, PinnedSource}
import io.sparkivm.planner.{CountedTable, KeyCounts, SourceLeaf}
import io.sparkivm.state.StoredKeyCounts
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{GreaterThan, Literal}
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.{IntegerType, StructField, StructType}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Counts per key of a table (Wang & Yi 2020's reference counts): the first refresh of an
 * application that asks is answered from storage or not at all, never by counting; the second
 * counts the table once, at Post; each answer holds the counts at Pre and at Post of the keys
 * asked, equal to counting the table at those versions; and every refresh moves the stored copy
 * on by its change.
 */
class ArrangedKeyCountsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("resident-key-counts")

  private val schema = StructType(Seq(StructField("id", IntegerType), StructField("fk", IntegerType)))
  private val changeSchema = schema.add(StructField("__ivm_m", IntegerType, nullable = false))

  private def counts(table: String, version: Long, keys: Seq[Int], where: String): Map[Any, Long] =
    spark.sql(s"SELECT fk, count(*) FROM $table VERSION AS OF $version WHERE fk IS NOT NULL AND $where GROUP BY fk")
      .collect().map(r => (r.getInt(0): Any) -> r.getLong(1)).toMap.filter { case (k, _) => keys.contains(k) }

  /** A table at two versions, the net change between them, and what the reader is given. */
  private def fixture(name: String) = {
    spark.sql(s"DROP TABLE IF EXISTS $name")
    spark.sql(s"CREATE TABLE $name (id INT, fk INT) USING delta")
    spark.sql(s"INSERT INTO $name VALUES (1, 10), (2, 10), (3, 20), (4, 30), (5, NULL), (6, 10)")
    val log = DeltaLog.forTable(spark, TableIdentifier(name))
    val pre = log.update().version
    spark.sql(s"INSERT INTO $name VALUES (7, 20), (8, 40)")
    spark.sql(s"DELETE FROM $name WHERE id IN (1, 4)")
    val post = log.update()
    val change = DriverChange(changeSchema,
      IndexedSeq(InternalRow(7, 20, 1), InternalRow(8, 40, 1),
        InternalRow(1, 10, -1), InternalRow(4, 30, -1)))
    val leaf = SparkInternals.analyzed(spark.table(name)).collectFirst { case SourceLeaf(l) => l }.get
    val fk = leaf.output.find(_.name == "fk").get
    // Counted where id > 1: a filter the driver evaluates over the change.
    val counted = CountedTable(leaf, Seq(GreaterThan(leaf.output.head, Literal(1))), fk)
    // 10 MiB: large enough to count (with keyCounts.minTableBytes 0), small enough to admit.
    val source = PinnedSource(leaf.table, post.metadata.id, post.version, schema)(() => 10L << 20)
    (leaf, counted, source, pre, change)
  }

  private def withSettings[T](body: => T): T = {
    spark.conf.set("spark.ivm.keyCounts.minTableBytes", "0")
    spark.conf.set("spark.ivm.state.buildInBackground", "false")
    try body
    finally {
      spark.conf.unset("spark.ivm.keyCounts.minTableBytes")
      spark.conf.unset("spark.ivm.state.buildInBackground")
    }
  }

  private val keys = Seq[Any](10, 20, 30, 40, 50)

  test("asked once, nothing is counted; asked again, the table is counted once at Post") {
    withSettings {
      val (leaf, counted, source, pre, change) = fixture("rk_resident")
      // Post as the refresh reads it: the occurrence's own attributes.
      def ask(refresh: String) = ArrangedKeyCounts.read(spark, counted, keys, source, pre, Some(change), leaf.plan,
        refresh)
      assert(ask("first").isEmpty, "the first refresh that asks does not count")
      val got = ask("second")
      val ints = keys.map(_.asInstanceOf[Int])
      assert(got === Some(KeyCounts(counts("rk_resident", pre, ints, "id > 1"),
          counts("rk_resident", source.version, ints, "id > 1"))))
      // A retried refresh (the entry is at Post) answers the same.
      assert(ask("third") === got)
    }
  }

  test("a new application's first ask is answered from storage, which the refresh moves on") {
    withSettings {
      val (leaf, counted, source, pre, change) = fixture("rk_stored")
      val dir = new Path(Files.createTempDirectory("ivm-rk").toUri.toString, "counts")
      val ints = keys.map(_.asInstanceOf[Int])
      StoredKeyCounts.writeBase(spark, dir, pre,
        spark.sql(s"SELECT fk, count(*) FROM rk_stored VERSION AS OF $pre WHERE id > 1 GROUP BY fk").toDF("k", "n"))
      val got = ArrangedKeyCounts.read(spark, counted, keys, source, pre, Some(change), leaf.plan, "only", Some(dir))
      StoredKeyCounts.awaitWrites()
      assert(got === Some(KeyCounts(counts("rk_stored", pre, ints, "id > 1"),
          counts("rk_stored", source.version, ints, "id > 1"))))
      val byKey = ints.map(k => k: Any).toSet
      assert(StoredKeyCounts.at(spark, dir, source.version, IntegerType, byKey) ===
          Some(counts("rk_stored", source.version, ints, "id > 1")), "the stored copy is at Post now")
    }
  }

  test("small tables and disabled counts are not kept") {
    withSettings {
      val (leaf, counted, source, pre, change) = fixture("rk_small")
      def ask(s: PinnedSource, refresh: String) = ArrangedKeyCounts.read(spark, counted, keys, s, pre,
        Some(change), leaf.plan, refresh)
      spark.conf.set("spark.ivm.keyCounts.enabled", "false")
      try {
        ask(source, "a")
        assert(ask(source, "b").isEmpty, "keyCounts.enabled = false")
      } finally spark.conf.unset("spark.ivm.keyCounts.enabled")
      spark.conf.set("spark.ivm.keyCounts.minTableBytes", "1m")
      val small = PinnedSource(source.table, source.tableId, source.version, source.schema)(() => 10L)
      ask(small, "c")
      assert(ask(small, "d").isEmpty, "under keyCounts.minTableBytes")
    }
  }
}
