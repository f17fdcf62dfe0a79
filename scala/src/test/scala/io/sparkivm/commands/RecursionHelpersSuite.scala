package io.sparkivm.commands

import io.sparkivm.TestSpark
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.scalatest.funsuite.AnyFunSuite

/**
 * RecursionHelpers.split: each recursive CTE of a top-level WITH RECURSIVE becomes a helper
 * query of the WITH clause up to it, and the maintained query reads the helpers in place of the
 * CTEs' bodies, keeping the rest of the text (comments, strings, other CTEs) as written; queries
 * without such a CTE are not split. The helpers and the maintained query compute the query's
 * rows: checked by running them over a table, with the helpers as temporary views.
 */
class RecursionHelpersSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("recursion-helpers")
  private val view = TableIdentifier("v", Some("default"), Some("spark_catalog"))

  private val twoRecursions =
    """WITH RECURSIVE r(src, dst) AS (
      |  SELECT src, dst FROM rh_edges -- a comment with a ) and a 'quote
      |  UNION ALL
      |  SELECT r.src, e.dst FROM r JOIN rh_edges e ON r.dst = e.src),
      |s AS (SELECT 'WITH RECURSIVE x AS (' AS label),
      |far(src, dst) AS (SELECT src, dst FROM r WHERE src = 0 UNION ALL
      |  SELECT far.src, r.dst FROM far JOIN r ON far.dst = r.src)
      |SELECT s.label, far.src, far.dst, count(*) AS n FROM far CROSS JOIN s GROUP BY 1, 2, 3""".stripMargin

  test("each recursive CTE gets a helper; the maintained query reads them and keeps the rest") {
    val split = RecursionHelpers.split(spark, view, twoRecursions).get
    assert(split.helpers.map(_.part) == Seq("r", "far"))
    split.helpers.foreach(h => assert(HelperViews.isHelperName(h.name.table) && h.name.database == view.database))
    val Seq(r, far) = split.helpers
    assert(r.query.startsWith("WITH RECURSIVE r(src, dst) AS (") && r.query.endsWith("SELECT * FROM `r`"), r.query)
    // the later helper reads the earlier one where its CTE would run the recursion again
    assert(far.query.startsWith("WITH RECURSIVE r(src, dst) AS (\n  SELECT * FROM " + r.name.quotedString + "),"),
      far.query)
    assert(far.query.contains("s AS (SELECT 'WITH RECURSIVE x AS (' AS label)"), far.query)
    assert(!split.maintainedQuery.contains("JOIN rh_edges"), split.maintainedQuery)
    assert(split.maintainedQuery.contains(s"far(src, dst) AS (SELECT * FROM ${far.name.quotedString})"))
    assert(split.maintainedQuery.endsWith("FROM far CROSS JOIN s GROUP BY 1, 2, 3"), split.maintainedQuery)
  }

  test("the helpers and the maintained query compute the query's rows") {
    spark.sql(
      "CREATE OR REPLACE TEMPORARY VIEW rh_edges AS SELECT * FROM VALUES (0, 1), (1, 2), (0, 2), (2, 3) AS t(src, dst)")
    val (expected, maintained) =
      SplitRows.of(spark, RecursionHelpers.split(spark, view, twoRecursions).get, twoRecursions)
    assert(expected.nonEmpty && maintained == expected)
  }

  test("queries without a top-level recursive CTE are not split") {
    Seq(
      "SELECT 1 AS x",
      "WITH a AS (SELECT 1 AS x) SELECT * FROM a",
      "WITH RECURSIVE a AS (SELECT 1 AS x) SELECT * FROM a",
      "SELECT * FROM (WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r) t"
    ).foreach(q => assert(RecursionHelpers.split(spark, view, q).isEmpty, q))
  }
}
