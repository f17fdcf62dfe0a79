package io.sparkivm.changes

import java.time.ZoneOffset

import io.sparkivm.{MappedRows, TestSpark}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, Union}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.catalyst.{InternalRow, TableIdentifier}
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.delta.actions.AddFile
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.ivm.{ReadMetrics, SparkInternals}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * File lists held on the driver: the list of every version, however it was reached (advanced
 * from an earlier version through the log, replayed from the first commit, or listed by Delta),
 * is Delta's own; a scan over them
 * returns the table's rows; skipping keeps every file that may hold a match.
 */
class KnownFilesSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("known-files")

  private def paths(files: Iterable[AddFile]): Set[(String, Option[String])] =
    files.map(f => (f.path, Option(f.deletionVector).map(_.uniqueId))).toSet

  test("every version's files equal Delta's, advanced through the log or listed") {
    spark.sql("DROP TABLE IF EXISTS kf")
    spark.sql("CREATE TABLE kf (k INT, s STRING) USING delta " +
      "TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.sql("INSERT INTO kf SELECT id, CAST(id AS STRING) FROM range(100)")
    spark.sql("INSERT INTO kf SELECT id, 'x' FROM range(100, 200)")
    spark.sql("DELETE FROM kf WHERE k % 7 = 0") // deletion vectors
    spark.sql("UPDATE kf SET s = 'u' WHERE k < 10")
    spark.sql("OPTIMIZE kf")
    spark.sql("INSERT INTO kf SELECT id, 'y' FROM range(200, 210)")
    val log = DeltaLog.forTable(spark, TableIdentifier("kf"))
    val last = log.update().version
    def check(v: Long): Unit = {
      val snap = KnownFiles.snapshot(log, v)
      assert(paths(KnownFiles.of(log, snap).files.values.map(_.add)) == paths(snap.allFiles.collect()), s"version $v")
      val read = KnownFiles.read(spark, TableIdentifier("kf"), v).get
      val expected = spark.read.format("delta").option("versionAsOf", v).table("kf")
      assert(read.collect().toSet == expected.collect().toSet, s"rows of version $v")
    }
    KnownFiles.clear()
    (0L to last).foreach(check) // each version advanced from the one before
    KnownFiles.clear()
    (last to 0L by -1L).foreach(check) // each version replayed from the first commit (a young table)
    // After a checkpoint, a version is listed from it (its log is no longer replayed from 0).
    log.checkpoint()
    spark.sql("DELETE FROM kf WHERE k = 205")
    KnownFiles.clear()
    check(last + 1)
    // Sizes come from the checksum or the held files, and agree with Delta's own.
    (0L to last + 1).foreach { v =>
      val snap = KnownFiles.snapshot(log, v)
      assert(DeltaSources.sizeInBytes(snap) == snap.sizeInBytes, s"size of version $v")
    }
    // A scan with a filter reads only what matches, and the same rows as Delta's.
    val filtered = KnownFiles.read(spark, TableIdentifier("kf"), last).get.where("k IN (3, 150, 205)")
    assert(filtered.collect().map(_.getInt(0)).sorted.toSeq == Seq(3, 150, 205))
  }

  test("a version after a checkpoint is listed from it on the driver: parts and deletion vectors, no job") {
    Seq(None, Some("3")).foreach { partSize =>
      spark.sql("DROP TABLE IF EXISTS ck")
      spark.sql("CREATE TABLE ck (k INT, s STRING) USING delta TBLPROPERTIES (delta.enableDeletionVectors = true)")
      (0 until 4).foreach(i => spark.sql(s"INSERT INTO ck SELECT id, 'v$i' FROM range(${i * 50}, ${i * 50 + 50})"))
      spark.sql("DELETE FROM ck WHERE k % 9 = 0")
      val log = DeltaLog.forTable(spark, TableIdentifier("ck"))
      partSize.foreach(spark.conf.set("spark.databricks.delta.checkpoint.partSize", _))
      try log.checkpoint()
      finally spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
      val checkpointed = log.update().version
      spark.sql("INSERT INTO ck VALUES (1000, 'new')")
      spark.sql("UPDATE ck SET s = 'u' WHERE k < 20")
      spark.sql("DELETE FROM ck WHERE k = 1000")
      val last = log.update().version
      Seq(checkpointed, last).foreach { v =>
        KnownFiles.clear()
        DeltaLog.clearCache()
        val fresh = DeltaLog.forTable(spark, TableIdentifier("ck"))
        val snap = KnownFiles.snapshot(fresh, v)
        val parts = snap.logSegment.checkpointProvider.topLevelFiles.size
        assert((parts > 1) == partSize.isDefined, s"checkpoint parts at version $v: $parts")
        val (files, work) = ReadMetrics.measure(spark)(KnownFiles.of(fresh, snap))
        assert(work.jobs == 0, s"version $v listed with ${work.jobs} jobs")
        assert(paths(files.files.values.map(_.add)) == paths(snap.allFiles.collect()), s"version $v")
        val read = KnownFiles.read(spark, TableIdentifier("ck"), v).get
        assert(read.collect().toSet == spark.read.format("delta").option("versionAsOf", v).table("ck")
            .collect().toSet, s"rows of version $v")
      }
    }
  }

  test("a young table's first read lists its files from its log: no job but the scan's") {
    spark.sql("DROP TABLE IF EXISTS young")
    spark.sql("CREATE TABLE young (k INT, s STRING) USING delta")
    spark.sql("INSERT INTO young SELECT id, CAST(id AS STRING) FROM range(50)")
    spark.sql("DELETE FROM young WHERE k < 5")
    spark.sql("INSERT INTO young VALUES (100, 'x')")
    val log = DeltaLog.forTable(spark, TableIdentifier("young"))
    KnownFiles.clear()
    DeltaLog.clearCache() // as a new session finds it: no state of any version built
    val (rows, work) = ReadMetrics.measure(spark) {
      // The rule spark-ivm's extension adds to the optimizer, applied as it would be.
      val df = SparkInternals.dataFrame(spark,
        KnownFileScans(spark)(spark.table("young").where("k >= 40").queryExecution.analyzed))
      assert(df.queryExecution.optimizedPlan.collectFirst {
        case LogicalRelation(r: HadoopFsRelation, _, _, _, _) => r.location
      }.exists(_.isInstanceOf[SkippingFileIndex]))
      df.collect().map(_.getInt(0)).sorted.toSeq
    }
    assert(rows == (40 until 50) :+ 100)
    assert(work.jobs == 1, "Delta's state rebuild and file listing ran no job")
    assert(KnownFiles.held(log.update()).isDefined)
  }

  test("scans in subqueries are planned from held lists; a local relation's rows are not walked") {
    spark.sql("DROP TABLE IF EXISTS held_sub")
    spark.sql("CREATE TABLE held_sub (k INT) USING delta")
    spark.sql("INSERT INTO held_sub SELECT CAST(id AS INT) FROM range(10)")
    val rows = new MappedRows((100 to 199).map(i => InternalRow(i)))
    val local = LocalRelation(Seq(AttributeReference("k", IntegerType)()), rows)
    val query = spark.sql("SELECT k FROM held_sub WHERE k IN (SELECT k + 1 FROM held_sub WHERE k > 5)")
    val planned = KnownFileScans(spark)(Union(Seq(query.queryExecution.analyzed, local)))
    val indexes = planned.collectWithSubqueries { case LogicalRelation(r: HadoopFsRelation, _, _, _, _) =>
      r.location
    }
    assert(indexes.size == 2 && indexes.forall(_.isInstanceOf[SkippingFileIndex]), indexes)
    assert(rows.mapped == 0, "the rule mapped the local relation's rows")
    val df = SparkInternals.dataFrame(spark, planned)
    assert(df.collect().map(_.getInt(0)).sorted.toSeq == (7 to 9) ++ (100 to 199))
  }

  private def file(stats: String): KnownFile =
    new KnownFile(AddFile("f", Map.empty, 1L, 0L, dataChange = true, stats = stats))

  test("skipping keeps every file that may hold a match and drops only excluded ones") {
    val schema = StructType(Seq(StructField("k", IntegerType), StructField("d", DateType),
        StructField("s", StringType), StructField("x", DoubleType)))
    val skipping = FileSkipping.of(schema)
    val f = file("""{"numRecords":10,"minValues":{"k":10,"d":"2020-01-01","s":"b"},""" +
      """"maxValues":{"k":20,"d":"2020-12-31","s":"d"},"nullCount":{"k":0,"s":2}}""")
    val k = AttributeReference("k", IntegerType)()
    val d = AttributeReference("d", DateType)()
    val s = AttributeReference("s", StringType)()
    val x = AttributeReference("x", DoubleType)()
    def may(e: Expression) = skipping.mayMatch(f, Seq(e))
    assert(may(EqualTo(k, Literal(15))) && !may(EqualTo(k, Literal(21))) && !may(EqualTo(Literal(9), k)))
    assert(may(InSet(k, Set(1, 2, 20))) && !may(InSet(k, Set(1, 2, 21, 30))) && !may(InSet(k, Set.empty)))
    assert(may(In(k, Seq(Literal(5), Literal(10)))) && !may(In(k, Seq(Literal(5), Literal(25)))))
    assert(!may(LessThan(k, Literal(10))) && may(LessThanOrEqual(k, Literal(10))))
    assert(!may(GreaterThan(k, Literal(20))) && may(GreaterThanOrEqual(k, Literal(20))))
    assert(!may(GreaterThan(Literal(10), k)) && may(LessThan(Literal(19), k)))
    assert(!may(And(EqualTo(k, Literal(15)), EqualTo(k, Literal(30)))))
    assert(may(Or(EqualTo(k, Literal(15)), EqualTo(k, Literal(30)))))
    val date = Literal.create(java.sql.Date.valueOf("2021-01-01"), DateType)
    assert(!may(EqualTo(d, date)) && may(LessThan(d, date)))
    assert(may(EqualTo(s, Literal(UTF8String.fromString("c"), StringType))))
    assert(!may(EqualTo(s, Literal(UTF8String.fromString("e"), StringType))))
    assert(!may(IsNull(k)) && may(IsNull(s)) && may(IsNull(d)))
    // What it cannot read, it keeps: other types, other predicates, missing statistics.
    assert(may(EqualTo(x, Literal(1.0))) && may(Not(EqualTo(k, Literal(15)))))
    assert(skipping.mayMatch(file(null), Seq(EqualTo(k, Literal(99)))))
    // A maximum Delta may have cut (32 characters) is not an upper bound.
    val long = file(s"""{"minValues":{"s":"a"},"maxValues":{"s":"${"b" * 32}"}}""")
    assert(skipping.mayMatch(long, Seq(EqualTo(s, Literal(UTF8String.fromString("c"), StringType)))))
    // Statistics are keyed by the physical name under column mapping.
    val mapped = FileSkipping.of(StructType(Seq(StructField("k", IntegerType, nullable = true,
            new MetadataBuilder().putString("delta.columnMapping.physicalName", "col-1").build()))))
    val phys = file("""{"minValues":{"col-1":1},"maxValues":{"col-1":2}}""")
    assert(!mapped.mayMatch(phys, Seq(EqualTo(k, Literal(5)))) && mapped.mayMatch(phys, Seq(EqualTo(k, Literal(2)))))
  }

  test("timestamps are read to the millisecond Delta keeps, a maximum as up to 999 us more") {
    val skipping = FileSkipping.of(StructType(Seq(StructField("t", TimestampType), StructField("n", TimestampNTZType))))
    val f = file("""{"numRecords":2,"minValues":{"t":"2026-11-01T10:00:00.000Z","n":"2026-11-01T10:00:00.000"},""" +
      """"maxValues":{"t":"2026-11-01T12:00:00.500Z","n":"2026-11-01T12:00:00.500"},"nullCount":{"t":0}}""")
    val t = AttributeReference("t", TimestampType)()
    val n = AttributeReference("n", TimestampNTZType)()
    def at(text: String, ntz: Boolean) =
      if (ntz) Literal(DateTimeUtils.stringToTimestampWithoutTimeZone(UTF8String.fromString(text)).get, TimestampNTZType)
      else Literal(DateTimeUtils.stringToTimestamp(UTF8String.fromString(text + "Z"), ZoneOffset.UTC).get, TimestampType)
    for ((a, ntz) <- Seq(t -> false, n -> true)) {
      def may(e: Expression) = skipping.mayMatch(f, Seq(e))
      assert(!may(LessThan(a, at("2026-11-01 10:00:00", ntz))) && may(LessThan(a, at("2026-11-01 10:00:00.000001", ntz))))
      assert(!may(GreaterThanOrEqual(a, at("2026-11-01 12:00:00.501", ntz))))
      // The maximum 12:00:00.500 may stand for up to .500999: a row at .5005 may be there.
      assert(may(GreaterThanOrEqual(a, at("2026-11-01 12:00:00.5005", ntz))))
      assert(!may(And(GreaterThanOrEqual(a, at("2026-11-02 00:00:00", ntz)), LessThan(a, at("2026-11-02 01:00:00", ntz)))))
    }
  }
}
