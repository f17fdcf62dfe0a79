package io.sparkivm.commands

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{DeltaTables, ViewCatalog}
import io.sparkivm.execution.RefreshPipeline
import io.sparkivm.parser.IvmStatementParser
import org.apache.spark.sql.SparkSession
import org.json4s._
import org.json4s.jackson.JsonMethods.parse
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * ViewExplainer: DESCRIBE's rows and its JSON say the same of a view (columns, metadata, sources
 * consumed and current, the last refresh), and EXPLAIN REFRESH changes nothing and names the
 * mode the next refresh then runs in: noop with no change, incremental with its branches after
 * one, full for a view refreshed by recomputation.
 */
class ViewExplainerSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("view-explainer")

  private def create(sql: String): Unit =
    ViewLifecycle.create(spark, IvmStatementParser.recognise(sql).get.asInstanceOf[CreateMaterializedView])
  private def version(table: String): Long =
    DeltaTables.log(spark, ViewCatalog.qualify(spark, Seq(table))).update().version
  private def nextMode(plan: String): String =
    plan.linesIterator.find(_.startsWith("Next refresh: ")).get.stripPrefix("Next refresh: ").takeWhile(_ != ',')

  override def beforeAll(): Unit = {
    spark.sql("CREATE TABLE ve_base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO ve_base VALUES (1, 10), (2, 20)")
    create(
      "CREATE MATERIALIZED VIEW ve_mv COMMENT 'sums' TBLPROPERTIES ('team' = 'ivm') REFRESH POLICY INCREMENTAL AS " +
        "SELECT k, sum(v) AS s FROM ve_base GROUP BY k")
  }

  test("DESCRIBE's rows and JSON describe the same view, its sources and last refresh") {
    val d = ViewExplainer.describe(spark, Seq("ve_mv"))
    val rows = d.rows
    assert(rows.take(2).map(r => (r._1, r._2)) == Seq(("k", "int"), ("s", "bigint")), rows)
    val info = rows.dropWhile(_._1 != "# Materialized View Information").drop(1).map(r => r._1 -> r._2)
    val byName = info.toMap
    assert(byName("View") == "`spark_catalog`.`default`.`ve_mv`")
    assert(byName("Refresh mode") == "incremental")
    assert(byName("Comment") == "sums")
    assert(byName("Freshness") == "up to date")
    assert(byName("Source").matches(".*ve_base: consumed version (\\d+), current version \\1"), byName("Source"))
    assert(byName("Table property") == "team=ivm")
    assert(byName("Last refresh").startsWith("#0 "), byName("Last refresh"))

    val json = parse(d.json)
    assert((json \ "name") == JString("ve_mv"))
    assert((json \ "refresh_mode") == JString("incremental"))
    assert((json \ "columns") == JArray(List(JArray(List(JString("k"), JString("int"))),
        JArray(List(JString("s"), JString("bigint"))))))
    assert((json \ "properties" \ "team") == JString("ivm"))
    assert((json \ "maintenance" \ "strategy") == JString("counting"))
    val consumed = (json \ "sources")(0) \ "consumed_version"
    assert(consumed == JLong(version("ve_base")) || consumed == JInt(version("ve_base")), json)
    // The JSON's info holds the rows' information part.
    val jsonInfo = (json \ "info").asInstanceOf[JObject].obj.toMap
    info.groupBy(_._1).foreach {
      case (k, Seq((_, v))) => assert(jsonInfo(k) == JString(v), k)
      case (k, many) => assert(jsonInfo(k) == JArray(many.map(r => JString(r._2)).toList), k)
    }
  }

  test("EXPLAIN REFRESH changes nothing and names the mode the next refresh runs in") {
    val before = (version("ve_base"), version("__ivm_backing_ve_mv"))
    val idle = ViewExplainer.explain(spark, Seq("ve_mv"), extended = false)
    assert(nextMode(idle) == "noop", idle)
    assert(idle.contains("Branches: none of the 1 table occurrences changed"), idle)
    spark.sql("INSERT INTO ve_base VALUES (1, 5), (3, 30)")
    val changed = ViewExplainer.explain(spark, Seq("ve_mv"), extended = true)
    assert(changed.contains(s"ve_base: changes of versions ${before._1 + 1}..${before._1 + 1}"), changed)
    assert(changed.contains("Branches (1, for 1 table occurrences):"), changed)
    assert(changed.contains("== Spark plan of the rows to merge =="), changed)
    assert(version("__ivm_backing_ve_mv") == before._2)
    val report = RefreshPipeline.refresh(spark, Seq("ve_mv"), full = false)
    assert(report.mode == nextMode(changed), changed)
    assert(nextMode(ViewExplainer.explain(spark, Seq("ve_mv"), extended = false)) == "noop")
  }

  test("a view refreshed by recomputation explains a full refresh of its query") {
    create("CREATE MATERIALIZED VIEW ve_full REFRESH POLICY FULL AS SELECT k, v FROM ve_base WHERE v > 10")
    spark.sql("INSERT INTO ve_base VALUES (4, 40)")
    val plan = ViewExplainer.explain(spark, Seq("ve_full"), extended = true)
    assert(nextMode(plan) == "full", plan)
    assert(plan.contains("Plan: recompute the query and overwrite the backing table in one commit."), plan)
    assert(plan.contains("== Spark plan =="), plan)
    val info = ViewExplainer.describe(spark, Seq("ve_full")).rows.map(r => r._1 -> r._2).toMap
    assert(info("Refresh mode") == "full" && info("Maintenance") == "recomputed on every refresh", info)
    assert(info("Freshness").startsWith("1 base-table commits not applied"), info)
  }
}
