package io.sparkivm.commands

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.scalatest.funsuite.AnyFunSuite

/**
 * WindowHelpers.split: the derived table that a window without PARTITION BY below the top of a
 * query reads becomes a helper query (one per distinct text), and the maintained query reads the
 * helpers in its place, keeping the rest as written; windows at the top, over a table, over a
 * CTE or over a derived table with a column list are not split. The helpers and the maintained
 * query compute the query's rows: checked by running them, with the helpers as temporary views.
 */
class WindowHelpersSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("window-helpers")
  private val view = TableIdentifier("v", Some("default"), Some("spark_catalog"))

  private def ranked(order: String, alias: String) =
    s"""(SELECT * FROM (SELECT item, rank() OVER (ORDER BY total $order) AS rk
       |  FROM (SELECT item, sum(qty) AS total FROM wh_sales -- the ) of a comment
       |        GROUP BY item HAVING sum(qty) > (SELECT min(qty) FROM wh_sales)) AS $alias) WHERE rk <= 2)""".stripMargin

  // TPC-DS q44's shape: one aggregate ranked both ways, each kept to its top two, joined.
  private val bestAndWorst =
    s"""SELECT b.rk, b.item AS best, w.item AS worst, ')' AS paren
       |FROM ${ranked("DESC", "v1")} b JOIN ${ranked("ASC", "`v 2`")} w ON b.rk = w.rk""".stripMargin

  test("the derived table under each window becomes a helper, one per text; the rest is kept") {
    val split = WindowHelpers.split(spark, view, bestAndWorst).get
    val Seq(helper) = split.helpers
    assert(helper.part == "v1" && HelperViews.isHelperName(helper.name.table) && helper.name.database == view.database)
    assert(helper.name.table.startsWith(HelperViews.prefixesOf(view)(1)), helper.name)
    assert(helper.query.startsWith("SELECT item, sum(qty) AS total FROM wh_sales -- the ) of a comment"), helper.query)
    assert(helper.query.endsWith("(SELECT min(qty) FROM wh_sales)"), helper.query)
    val read = s"(SELECT * FROM ${helper.name.quotedString})"
    assert(split.maintainedQuery.contains(s"$read AS v1)") && split.maintainedQuery.contains(s"$read AS `v 2`)"),
      split.maintainedQuery)
    assert(!split.maintainedQuery.contains("GROUP BY"), split.maintainedQuery)
    assert(split.maintainedQuery.startsWith("SELECT b.rk, b.item AS best, w.item AS worst, ')' AS paren"))
  }

  test("the helpers and the maintained query compute the query's rows") {
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW wh_sales AS SELECT * FROM VALUES " +
      "(1, 5), (1, 2), (2, 9), (3, 1), (3, 3), (4, 4), (5, 8), (5, 1) AS t(item, qty)")
    val (expected, maintained) = SplitRows.of(spark, WindowHelpers.split(spark, view, bestAndWorst).get, bestAndWorst)
    assert(expected.nonEmpty && maintained == expected)
  }

  test("a derived table with a column list: its helper's columns are the list's names") {
    val q = "SELECT rk, count(*) AS n FROM (SELECT rank() OVER (ORDER BY q DESC) AS rk FROM " +
      "(SELECT item, sum(qty) FROM wh_sales GROUP BY item -- ) t(x)\n) AS t (i, q) WHERE q > 1) GROUP BY rk"
    val split = WindowHelpers.split(spark, view, q).get
    val Seq(helper) = split.helpers
    assert(helper.query == "SELECT * FROM (\nSELECT item, sum(qty) FROM wh_sales GROUP BY item -- ) t(x)\n) AS t (i, q)",
      helper)
    assert(split.maintainedQuery.contains(s"(SELECT * FROM ${helper.name.quotedString}) AS t (i, q) WHERE"),
      split.maintainedQuery)
    spark.sql(
      "CREATE OR REPLACE TEMPORARY VIEW wh_sales AS SELECT * FROM VALUES (1, 5), (2, 9), (3, 5), (4, 1) AS t(item, qty)")
    assert(spark.sql(helper.query).columns.toSeq == Seq("i", "q"))
    val (expected, maintained) = SplitRows.of(spark, split, q)
    assert(expected.nonEmpty && maintained == expected)
  }

  test("a derived table reading CTEs: its helper holds the top-level WITH up to the last it reads") {
    val q = "WITH a AS (SELECT item, qty FROM wh_sales), s AS (SELECT item, sum(qty) AS total FROM a GROUP BY item), " +
      "u AS (SELECT 1 AS one) SELECT rk, count(*) AS n, max(one) AS one FROM " +
      "(SELECT rank() OVER (ORDER BY total) AS rk FROM (SELECT total FROM s WHERE total > 1) t) CROSS JOIN u GROUP BY rk"
    val split = WindowHelpers.split(spark, view, q).get
    val Seq(helper) = split.helpers
    assert(
      helper.query == "WITH a AS (SELECT item, qty FROM wh_sales), " +
        "s AS (SELECT item, sum(qty) AS total FROM a GROUP BY item)\nSELECT total FROM s WHERE total > 1", helper)
    assert(split.maintainedQuery.startsWith("WITH a AS (SELECT item, qty FROM wh_sales), s AS"), split.maintainedQuery)
    assert(split.maintainedQuery.contains(s"(SELECT * FROM ${helper.name.quotedString}) t)"), split.maintainedQuery)
    spark.sql(
      "CREATE OR REPLACE TEMPORARY VIEW wh_sales AS SELECT * FROM VALUES (1, 5), (2, 9), (3, 5), (3, 1) AS t(item, qty)")
    val (expected, maintained) = SplitRows.of(spark, split, q)
    assert(expected.nonEmpty && maintained == expected)
  }

  test("a named window without PARTITION BY is split like one written in place") {
    val q = "SELECT rk, count(*) AS n FROM (SELECT rank() OVER w AS rk FROM (SELECT qty FROM wh_sales) t " +
      "WINDOW w AS (ORDER BY qty)) GROUP BY rk"
    val Seq(helper) = WindowHelpers.split(spark, view, q).get.helpers
    assert(helper.query == "SELECT qty FROM wh_sales", helper)
    assert(WindowHelpers.split(spark, view, q.replace("(ORDER BY qty)", "(PARTITION BY qty ORDER BY qty)")).isEmpty)
  }

  test("a window over a CTE of the top-level WITH: the helper holds the clause up to it") {
    val q = "WITH /* c */ s(i, q) AS (SELECT item, sum(qty) FROM wh_sales GROUP BY item), u AS (SELECT 1 AS one) " +
      "SELECT rk, count(*) AS n FROM (SELECT rank() OVER (ORDER BY q) AS rk FROM s, u WHERE one = 1) GROUP BY rk"
    assert(WindowHelpers.split(spark, view, q).isEmpty, "a join under the window")
    val single = q.replace("FROM s, u WHERE one = 1", "FROM s AS t WHERE q > 0")
    val split = WindowHelpers.split(spark, view, single).get
    val Seq(helper) = split.helpers
    assert(helper.part == "s" && helper.query ==
        "WITH s(i, q) AS (SELECT item, sum(qty) FROM wh_sales GROUP BY item)\nSELECT * FROM `s`", helper)
    assert(split.maintainedQuery.startsWith(
        s"WITH /* c */ s(i, q) AS (SELECT * FROM ${helper.name.quotedString}), u AS"), split.maintainedQuery)
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW wh_sales AS SELECT * FROM VALUES (1, 5), (2, 9), (3, 5) AS t(item, qty)")
    val (expected, maintained) = SplitRows.of(spark, split, single)
    assert(expected.nonEmpty && maintained == expected)
  }

  test("windows at the top, over a table or over a derived table reading a nested WITH's CTE are not split") {
    Seq(
      "SELECT item, rank() OVER (ORDER BY qty) AS rk FROM (SELECT item, qty FROM wh_sales) t",
      "SELECT * FROM (SELECT item, rank() OVER (ORDER BY qty) AS rk FROM (SELECT item, qty FROM wh_sales) t) " +
        "WHERE rk < 3 ORDER BY rk LIMIT 2",
      "SELECT rk, count(*) FROM (SELECT rank() OVER (ORDER BY qty) AS rk FROM wh_sales) GROUP BY rk",
      "SELECT rk, count(*) FROM (WITH s AS (SELECT qty FROM wh_sales) " +
        "SELECT rank() OVER (ORDER BY qty) AS rk FROM (SELECT qty FROM s) t) GROUP BY rk",
      "WITH s AS (SELECT item, qty FROM wh_sales) SELECT rk, count(*) FROM (WITH s AS (SELECT 1 AS qty) " +
        "SELECT rank() OVER (ORDER BY qty) AS rk FROM s) GROUP BY rk",
      "SELECT rk, count(*) FROM (SELECT rank() OVER (PARTITION BY item ORDER BY qty) AS rk " +
        "FROM (SELECT item, qty FROM wh_sales) t) GROUP BY rk"
    ).foreach(q => assert(WindowHelpers.split(spark, view, q).isEmpty, q))
  }
}
