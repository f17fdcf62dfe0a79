package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.catalog.ViewCatalog
import io.sparkivm.changes.DeltaSources
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.parser.IvmStatementParser
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.functions.{col, lit}
import org.apache.spark.sql.ivm.SparkInternals
import org.apache.spark.sql.types.DoubleType
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * RefreshVerification: a committed refresh is compared with its query recomputed at the versions
 * it consumed. A correct refresh checked at `changed` checks exactly its changed keys and finds
 * nothing; committed rows missing a group or holding one too many are found (named in the sample
 * as expected or committed); doubles within a relative 1e-9 are equal and farther ones are not;
 * `off` checks nothing, and a global aggregate over tables above the whole-view limit is not
 * checked at `changed`, saying why. A wrong apply is repaired by a recomputation.
 */
class RefreshVerificationSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("refresh-verification")

  private val query = "SELECT k, sum(x) AS s, count(*) AS n FROM rver_base GROUP BY k"

  private def create(sql: String): Unit =
    ViewLifecycle.create(spark, IvmStatementParser.recognise(sql).get.asInstanceOf[CreateMaterializedView])

  private def withConf[T](kv: (String, String)*)(body: => T): T = TestSpark.withConf(spark, kv: _*)(body)

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE rver_base (k INT, x DOUBLE) USING delta")
    spark.sql("INSERT INTO rver_base VALUES (1, 0.1), (2, 0.2), (3, 0.3)")
    create(s"CREATE MATERIALIZED VIEW rver_mv REFRESH POLICY INCREMENTAL AS $query")
  }

  /** The check of the view's current rows, as `committed` changes them, at `level`. */
  private def check(level: String, committed: DataFrame => DataFrame): Option[VerifyReport] = {
    val meta = ViewCatalog.lookup(spark, Seq("rver_mv"))
    val analyzed = ViewAnalysis.reanalyze(spark, meta, incremental = true)
    val pinned = ViewAnalysis.pin(spark, meta.viewName, analyzed, incremental = false, autoEnable = false)
    val (last, _) = ViewCatalog.lastRefresh(spark, meta)
    def rows: LogicalPlan =
      SparkInternals.analyzed(committed(DeltaSources.snapshot(spark, meta.backing, last.backingVersion)))
    withConf("spark.ivm.verify" -> level) {
      RefreshVerification.run(spark, meta.viewName, () => rows, analyzed.maintenance, pinned, None)
    }
  }

  private def scaled(f: Double)(df: DataFrame): DataFrame = df.select(df.schema.fields.toSeq.map { c =>
    if (c.dataType == DoubleType) (col(c.name) * lit(f)).as(c.name) else col(c.name)
  }: _*)

  test("a correct refresh checked at `changed` checks its changed keys and finds nothing") {
    spark.sql("INSERT INTO rver_base VALUES (1, 1.5), (4, 4.0)")
    val report = withConf("spark.ivm.verify" -> "changed")(RefreshPipeline.refresh(spark, Seq("rver_mv"), full = false))
    assert(report.mode == "incremental", report)
    val v = report.verify.get
    assert(v.level == "changed" && v.keysChecked == 2 && v.rowsChecked == 2 && v.differences == 0, v)
    assert(v.repairedBy.isEmpty && v.describe.startsWith("verified (changed): 2 rows of 2 keys equal to the query"),
      v.describe)
    assert(check("off", identity).isEmpty)
  }

  test("committed rows missing a group or holding an extra one are found, at `all`") {
    val whole = check("all", identity).get
    // The whole view is compared by Spark: how many rows is not counted.
    assert(whole.differences == 0 && whole.keysChecked == -1 && whole.rowsChecked == -1, whole)
    assert(whole.describe.startsWith("verified (all): the whole view equal to the query ("), whole.describe)
    val missing = check("all", df => df.where(col(df.columns.head) =!= 2)).get
    assert(missing.differences == 1 && missing.sample.size == 1 && missing.sample.head.startsWith("expected ("),
      missing)
    val extra = check("all", df => df.unionByName(df.where(col(df.columns.head) === 2))).get
    assert(extra.differences == 1 && extra.sample.head.startsWith("committed ("), extra)
  }

  test("doubles are equal within a relative 1e-9, and differ beyond it") {
    assert(check("all", scaled(1 + 1e-12)).get.differences == 0)
    assert(check("all", scaled(1 + 1e-6)).get.differences > 0)
  }

  test("a global aggregate over tables above the whole-view limit is checked only at `all`") {
    create("CREATE MATERIALIZED VIEW rver_total AS SELECT sum(x) AS s FROM rver_base")
    spark.sql("INSERT INTO rver_base VALUES (5, 5.0)")
    val report = withConf("spark.ivm.verify" -> "changed", "spark.ivm.verify.wholeMaxBytes" -> "1") {
      RefreshPipeline.refresh(spark, Seq("rver_total"), full = false)
    }
    val v = report.verify.get
    assert(v.sample.head.startsWith("not checked: the view has no keys"), v)
    assert(v.describe.startsWith("verify (changed): not checked"), v.describe)
  }

  test("a wrong apply is found and repaired by a recomputation") {
    spark.sql("INSERT INTO rver_base VALUES (2, 2.0), (6, 6.0)")
    val report = withConf("spark.ivm.verify" -> "changed", "spark.ivm.testing.corruptApply" -> "true") {
      RefreshPipeline.refresh(spark, Seq("rver_mv"), full = false)
    }
    val v = report.verify.get
    assert(v.differences > 0 && v.repairedBy.contains(report.refreshNumber) && report.mode == "full", report)
    val rows = spark.table("rver_mv").collect().map(r => (r.getInt(0), r.getDouble(1), r.getLong(2))).sortBy(_._1)
    val expected = spark.sql(query).collect().map(r => (r.getInt(0), r.getDouble(1), r.getLong(2))).sortBy(_._1)
    assert(rows.map(r => (r._1, r._3)).toSeq == expected.map(r => (r._1, r._3)).toSeq)
    rows.zip(expected).foreach { case (a, b) => assert(math.abs(a._2 - b._2) < 1e-9) }
  }
}
