package io.sparkivm.epsilon

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{EpsilonState, RefreshMode, ViewMetadata}
import io.sparkivm.errors.IvmException
import io.sparkivm.execution.StateConflictException
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.types.{IntegerType, LongType, StructField, StructType}
import org.apache.spark.sql.{DataFrame, Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * TriangleStateTables: each write of a view's IVM^eps state is one Delta version tagged with its
 * refresh attempt, and readers read the version recorded (older ones stay readable); appends of
 * rows held on the driver and of distributed rows both land; a restore brings a table ahead of
 * the recorded version back to its content, and one behind it is refused; a version written by
 * another attempt is a conflict; heavy keys are read once per version; an auxiliary view's
 * lookup holds every row of the keys asked for, before and after an append.
 */
class TriangleStateTablesSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("triangle-state-tables")

  private def meta(name: String) = {
    val id = (t: String) => TableIdentifier(t, Some("default"), Some("spark_catalog"))
    ViewMetadata(id(name), id(s"tst_${name}_backing"), "id", "", "default", RefreshMode.Incremental, Nil, Map.empty,
      None)
  }

  private val keySchema = StructType(Seq(StructField("key", IntegerType)))
  private val auxSchema = StructType(Seq(StructField("a0", IntegerType), StructField("b1", IntegerType),
      StructField("w", LongType)))
  private def keys(ks: Int*): DataFrame = spark.createDataFrame(
    spark.sparkContext.parallelize(ks.map(Row(_)), 1), keySchema)
  private def aux(rows: (Int, Int, Long)*): Seq[Row] = rows.map { case (a, b, w) => Row(a, b, w) }
  private def frame(rows: Seq[Row]): DataFrame =
    spark.createDataFrame(spark.sparkContext.parallelize(rows, 2), auxSchema)
  private def ints(df: DataFrame): Set[Int] = df.collect().map(_.getInt(0)).toSet
  private def triples(df: DataFrame): Seq[(Int, Int, Long)] =
    df.collect().map(r => (r.getInt(0), r.getInt(1), r.getLong(2))).toSeq.sorted

  test("each write is a version of its own; a recorded version stays readable") {
    val t = new TriangleStateTables(spark, meta("tst_w"), "attempt-1")
    assert(t.names.map(_.table) == EpsilonState.tables(meta("tst_w").backing).map(_.table))
    val v1 = t.overwrite(0, keys(1, 2, 3), "key")
    val v2 = t.overwrite(0, keys(7), "key")
    assert(v2 == v1 + 1 && t.version(0) == v2)
    assert(ints(t.read(0, v1)) == Set(1, 2, 3) && ints(t.read(0, v2)) == Set(7))
    t.drop()
    assert(!spark.catalog.tableExists(t.names.head.table))
  }

  test("appends of rows held here and of distributed rows land, each in one version") {
    val t = new TriangleStateTables(spark, meta("tst_a"), "attempt-1")
    val v0 = t.overwrite(3, frame(aux((1, 10, 1L))), "a0")
    val v1 = t.append(3, WeightedDelta.onDriver(spark, auxSchema, aux((2, 20, 2L))), "a0")
    val v2 = t.append(3, WeightedDelta.distributed(frame(aux((3, 30, -1L), (1, 10, 1L)))), "a0")
    assert(v1 == v0 + 1 && v2 == v1 + 1)
    assert(triples(t.read(3, v2)) == Seq((1, 10, 1L), (1, 10, 1L), (2, 20, 2L), (3, 30, -1L)))
    assert(triples(t.read(3, v1)) == Seq((1, 10, 1L), (2, 20, 2L)))
    t.checkOwn(3, v0, v2) // all this attempt's
    t.drop()
  }

  test("restore brings back the recorded version; another attempt's version is a conflict") {
    val mine = new TriangleStateTables(spark, meta("tst_r"), "attempt-1")
    // Table 4 written as a refresh writes it; the others only need to exist.
    val versions = mine.names.indices.map { i =>
      if (i == 4) mine.overwrite(4, frame(aux((1, 1, 1L))), "a0")
      else {
        spark.sql(s"CREATE TABLE ${mine.names(i).quotedString} (key INT) USING delta")
        mine.version(i)
      }
    }
    val state = EpsilonState(0.5, 10, 5, Seq(1, 1, 1), Seq(1, 1, 1), Seq(1, 1, 1), versions)
    // A refresh killed before its view commit left table 4 ahead.
    val other = new TriangleStateTables(spark, meta("tst_r"), "attempt-2")
    val ahead = other.append(4, WeightedDelta.onDriver(spark, auxSchema, aux((9, 9, 9L))), "a0")
    intercept[StateConflictException](mine.checkOwn(4, versions(4), ahead))
    val restored = mine.restore(state)
    assert(restored(4) > ahead && restored.updated(4, versions(4)) == versions, restored)
    assert(triples(mine.read(4, restored(4))) == Seq((1, 1, 1L)))
    // The recorded versions are ahead of the tables: refused.
    val e = intercept[IvmException](mine.restore(state.copy(versions = restored.updated(2, restored(2) + 5))))
    assert(e.getCondition == "IVM_BACKING_TABLE_ALTERED" && e.getMessage.contains("older than the recorded"),
      e.getMessage)
    TriangleStateTables.dropFor(spark, meta("tst_r").backing)
    assert(EpsilonState.tables(meta("tst_r").backing).forall(n => !spark.catalog.tableExists(n.table)))
  }

  test("heavy keys are read once per version") {
    val t = new TriangleStateTables(spark, meta("tst_h"), "attempt-1")
    val v = t.overwrite(1, keys(4, 5), "key")
    var reads = 0
    def read(at: Long) = { reads += 1; ints(t.read(1, at)).map(k => k: Any) }
    assert(t.heavyKeys(1, v, read(v)) == Set(4, 5))
    assert(t.heavyKeys(1, v, read(v)) == Set(4, 5) && reads == 1)
    val next = t.overwrite(1, keys(6), "key")
    assert(t.heavyKeys(1, next, read(next)) == Set(6) && reads == 2)
    t.drop()
  }

  test("an auxiliary view's lookup holds every row of the keys asked for, resident or read") {
    Seq("true", "false").foreach { resident =>
      spark.conf.set("spark.ivm.epsilon.residentState", resident)
      try {
        val t = new TriangleStateTables(spark, meta(s"tst_x$resident"), "attempt-1")
        val rows = aux((1, 10, 1L), (2, 10, 1L), (3, 30, 2L), (4, 40, 1L))
        val v0 = t.overwrite(3, frame(rows), "b1")
        def check(v: Long, n: Long, all: Seq[Row]): Unit = {
          val got = t.aux(0, v, n, "b1", Some(Seq(10, 40))).all
            .map(r => (r.getAs[Int]("a0"), r.getAs[Int]("b1"), r.getAs[Long]("w")))
          val want = all.map(r => (r.getInt(0), r.getInt(1), r.getLong(2))).filter(r => Set(10, 40)(r._2))
          assert(got.filter(r => Set(10, 40)(r._2)).sorted == want.sorted, resident)
          val where = t.aux(0, v, n, "b1", Some(Seq(10)), Seq("a0" -> Seq(2))).all
            .map(r => (r.getAs[Int]("a0"), r.getAs[Int]("b1")))
          assert(where.contains((2, 10)), resident)
        }
        check(v0, 4, rows)
        val change = aux((5, 40, 1L), (1, 10, -1L))
        val v1 = t.appendAux(0, v0, WeightedDelta.onDriver(spark, auxSchema, change), "b1")
        assert(v1 == v0 + 1)
        check(v1, 6, rows ++ change)
        t.drop()
      } finally spark.conf.unset("spark.ivm.epsilon.residentState")
    }
  }
}
