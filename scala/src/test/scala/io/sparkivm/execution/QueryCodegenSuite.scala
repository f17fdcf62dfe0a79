package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.catalog.DeltaTables
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.functions.{col, udf}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.ivm.{DriverRows, SparkInternals}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Which of a refresh's queries generate code: all or none by the size of the refresh's inputs,
 * or, for an incremental refresh over large tables, each by the files it scans; the settings a
 * query runs with reach its tasks, and never the user's session.
 */
class QueryCodegenSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("query-codegen")
  private val WholeStage = QueryCodegen.WholeStage
  private val FactoryMode = QueryCodegen.FactoryMode

  private lazy val table = {
    spark.sql("CREATE TABLE qc_t (k INT, v STRING) USING delta")
    spark.sql("INSERT INTO qc_t SELECT id, CAST(id AS STRING) FROM range(100)")
    SparkInternals.analyzed(spark.table("qc_t"))
  }

  private def tableBytes: Long =
    DeltaTables.log(spark, TableIdentifier("qc_t", Some("default"))).update().sizeInBytes

  test("a query scans its tables' files at full size, rows held on the driver none") {
    val held = RefreshSteps.onDriver(table.output, Seq.empty)
    assert(tableBytes > 0)
    assert(QueryCodegen.scannedBytes(held) == 0)
    assert(QueryCodegen.scannedBytes(table) == tableBytes)
    val joined = SparkInternals.analyzed(spark.table("qc_t").as("a").join(spark.table("qc_t").as("b"), "k"))
    assert(QueryCodegen.scannedBytes(joined) == 2 * tableBytes)
    val withSubquery = SparkInternals.analyzed(spark.sql("SELECT k FROM range(3) r(k) WHERE k IN (SELECT k FROM qc_t)"))
    assert(QueryCodegen.scannedBytes(withSubquery) >= tableBytes)
  }

  test("per query: large scans run with the user's code generation, small ones interpreted") {
    val refresh = SparkInternals.isolated(spark)
    refresh.conf.set(WholeStage, "false")
    refresh.conf.set(FactoryMode, "NO_CODEGEN")
    val code = new QueryCodegen.PerQuery(refresh, tableBytes - 1, Map(WholeStage -> Some("true"), FactoryMode -> None))
    assert(code.note.isEmpty, "no query ran")
    def settings = (refresh.conf.get(WholeStage), refresh.conf.getOption(FactoryMode))
    assert(code(RefreshSteps.onDriver(table.output, Seq.empty))(settings) == ("false", Some("NO_CODEGEN")))
    assert(code(table)(settings) == ("true", Some("FALLBACK")), "Spark's default")
    assert(settings == ("false", Some("NO_CODEGEN")), "restored after the query")
    intercept[IllegalArgumentException](code(table)(throw new IllegalArgumentException("fails")))
    assert(settings == ("false", Some("NO_CODEGEN")), "restored after a failed query")
    assert(code.note.exists(_.endsWith(": 2 of 3")), code.note)
    // What runs after the refresh (state builds over whole tables) generates code as the user's would.
    code.release()
    assert(settings == ("true", Some("FALLBACK")))
  }

  test("all or none by the refresh's inputs; the user's session keeps its settings") {
    TestSpark.withConf(spark, WholeStage -> "true", "spark.ivm.refresh.interpretedMaxBytes" -> "1000") {
      val refresh = SparkInternals.isolated(spark)
      assert(RefreshSession.forSmallInputs(refresh, spark, 10, perQuery = true)
          .note.exists(_.startsWith("queries without generated code: 10 B of inputs")))
      assert(refresh.conf.get(WholeStage) == "false" && refresh.conf.get(FactoryMode) == "NO_CODEGEN")
      assert(RefreshSession.forSmallInputs(refresh, spark, 2000, perQuery = true).isInstanceOf[QueryCodegen.PerQuery])
      assert(refresh.conf.get(WholeStage) == "false" && refresh.conf.get(FactoryMode) == "NO_CODEGEN")
      assert(RefreshSession.forSmallInputs(refresh, spark, 2000, perQuery = false) == QueryCodegen.Generated)
      assert(refresh.conf.get(WholeStage) == "true" && refresh.conf.getOption(FactoryMode) == spark.conf
        .getOption(FactoryMode))
      assert(spark.conf.get(WholeStage) == "true")
    }
  }

  test("a job collected to the driver runs its tasks with its session's settings") {
    val refresh = SparkInternals.isolated(spark)
    refresh.conf.set("spark.qc.testing.probe", "the refresh's")
    val probe = udf(() => SQLConf.get.getConfString("spark.qc.testing.probe", "unset"))
    val df = refresh.range(2).repartition(2).select(probe().as("seen"), col("id"))
    val Some(Seq(rows)) = DriverRows.collect(refresh, Seq(df), 10)
    assert(rows.map(_.getUTF8String(0).toString).toSet == Set("the refresh's"))
    assert(spark.conf.getOption("spark.qc.testing.probe").isEmpty)
  }
}
