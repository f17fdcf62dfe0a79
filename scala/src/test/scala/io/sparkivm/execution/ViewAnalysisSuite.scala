package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.errors.IvmException
import io.sparkivm.planner.ViewMaintenance
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.TableIdentifier
import org.apache.spark.sql.delta.DeltaLog
import org.apache.spark.sql.ivm.SparkInternals
import org.scalatest.funsuite.AnyFunSuite

/**
 * A view's query analyzed in the database it was created in, whatever the session's current one,
 * which is left as it was; its maintenance prepared (ORDER BY ... LIMIT split off, the tables
 * read); queries that read where rows are stored refused; and every table pinned at its current
 * version, with its change data feed required (or enabled) for incremental views.
 */
class ViewAnalysisSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("view-analysis")

  private def table(name: String, cdf: Boolean): Unit = {
    spark.sql(s"DROP TABLE IF EXISTS $name")
    spark.sql(s"CREATE TABLE $name (k INT, v INT) USING delta" +
      (if (cdf) " TBLPROPERTIES (delta.enableChangeDataFeed = true)" else ""))
    spark.sql(s"INSERT INTO $name VALUES (1, 10), (2, 20)")
  }

  test("analyzed in the view's database; the session's current database is left as it was") {
    spark.sql("CREATE DATABASE IF NOT EXISTS va_db")
    table("va_db.va_t", cdf = true)
    val before = spark.catalog.currentDatabase
    val plan = ViewAnalysis.analyze(spark, "SELECT k, sum(v) AS s FROM va_t GROUP BY k", "va_db")
    assert(plan.resolved)
    assert(spark.catalog.currentDatabase == before)
    val view = ViewAnalysis.prepare(plan, Seq("k", "s"), incremental = true, instant = 0L)
    assert(view.tables.map(_.name) == Seq("spark_catalog.va_db.va_t"))
    intercept[Exception](ViewAnalysis.analyze(spark, "SELECT k FROM va_t", before))
    assert(spark.catalog.currentDatabase == before, "restored after a failure too")
  }

  test("a top-level ORDER BY ... LIMIT is split off; a self-join reads its table once") {
    table("va_top", cdf = true)
    val query = "SELECT a.k, a.v + b.v AS w FROM va_top a JOIN va_top b ON a.k = b.k ORDER BY w DESC"
    val view = ViewAnalysis.prepare(ViewAnalysis.analyze(spark, s"$query, k LIMIT 1", "default"), Seq("k", "w"),
      incremental = true, instant = 0L)
    assert(view.maintenance.top.isDefined)
    assert(view.leaves.size == 2 && view.tables.size == 1)
    assert(view.maintenance.top.get.tieBreak == 0)
    // An order that lets rows tie: the read breaks the ties by the view's other columns.
    val tied = ViewAnalysis.prepare(ViewAnalysis.analyze(spark, s"$query LIMIT 1", "default"),
      Seq("k", "w"), incremental = true, instant = 0L).maintenance.top.get
    assert(tied.tieBreak == 1 && tied.order.last == ((0, true, true)), tied)
    assert(tied.describe(Seq("k", "w"), marked = false).startsWith("ORDER BY w DESC NULLS LAST LIMIT 1, applied"))
    assert(tied.describe(Seq("k", "w"), marked = false).endsWith("taken in the order of k"))
    // The backing table marks the first row and a buffer below it, which a read reads alone.
    val marked = ViewAnalysis.prepare(ViewAnalysis.analyze(spark, s"$query LIMIT 1", "default"),
      Seq("k", "w"), incremental = true, instant = 0L).maintenance
    assert(marked.markedTop.isDefined && marked.backingColumns.last == ViewMaintenance.TopColumn)
    assert(marked.viewSql("b").contains(s"${ViewMaintenance.TopColumn} = 1"))
    assert(tied.describe(Seq("k", "w"), marked = true).contains("marks the first 1 and a buffer"))
  }

  test("what is above a recursive CTE is computed when read, over the recursion's rows kept") {
    table("va_rec", cdf = false)
    spark.sql("INSERT INTO va_rec VALUES (10, 30)")
    val cte = "WITH RECURSIVE r(a, b) AS (SELECT k, v FROM va_rec UNION ALL " +
      "SELECT r.a, e.v FROM r JOIN va_rec e ON r.b = e.k) "
    val query = cte + "SELECT a, count(*) AS n, max(b) AS m FROM r GROUP BY a HAVING count(*) > 1"
    val view = ViewAnalysis.prepare(ViewAnalysis.analyze(spark, query, "default"), Seq("a", "n", "m"),
      incremental = true, instant = 0L)
    val at = view.maintenance.atRead.get
    // The kept rows are the CTE's, under its own names for them; the view keeps them as they are.
    assert(at.recursive && at.rowColumns == Seq("a", "b"), at)
    assert(at.label == "Computed at read" && at.describe.startsWith("count(1), max(b), computed when the view is read"),
      at.describe)
    ViewAnalysis.requireReadable(spark, view)
    SparkInternals.dataFrame(spark, view.plan).toDF(at.rowColumns: _*).createOrReplaceTempView("va_rec_kept")
    assert(spark.sql(at.sql("SELECT * FROM va_rec_kept")).collect().toSet == spark.sql(query).collect().toSet)
    // A view of the CTE's columns alone keeps them with nothing to compute at read.
    val plain = ViewAnalysis.prepare(ViewAnalysis.analyze(spark, cte + "SELECT b, a FROM r", "default"),
      Seq("b", "a"), incremental = true, instant = 0L)
    assert(plain.maintenance.atRead.isEmpty)
  }

  test("windows without PARTITION BY at the top are computed when read, over the rows under them") {
    table("va_win", cdf = true)
    def prepared(query: String, columns: Seq[String]) =
      ViewAnalysis.prepare(ViewAnalysis.analyze(spark, query, "default"), columns, incremental = true, instant = 0L)
    val query = "SELECT k, rk, run FROM (SELECT k, rank() OVER (ORDER BY v DESC) AS rk, " +
      "sum(v * 2) OVER (ORDER BY k) AS run, ntile(2) OVER (PARTITION BY k % 2 ORDER BY v) AS half FROM va_win) " +
      "WHERE rk <= 2"
    val view = prepared(query, Seq("k", "rk", "run"))
    val w = view.maintenance.atRead.get
    assert(w.rowColumns.size == view.plan.output.size && w.rowColumns.map(_.toLowerCase).distinct == w.rowColumns)
    assert(w.functions.map(_.toLowerCase.takeWhile(_ != ')')) ==
        Seq("rank(", "sum(_w1", "ntile(2"), w.functions)
    ViewAnalysis.requireReadable(spark, view)
    // The read gives the query's rows from the kept rows.
    SparkInternals.dataFrame(spark, view.plan).toDF(w.rowColumns: _*).createOrReplaceTempView("va_win_kept")
    assert(spark.sql(w.sql("SELECT * FROM va_win_kept")).collect().toSet == spark.sql(query).collect().toSet)
    // A window below an aggregate or a join stays refused; a LIMIT over a window is a top-k.
    val e = intercept[IvmException](prepared(
        "SELECT rk, count(*) AS n FROM (SELECT k, rank() OVER (ORDER BY v) AS rk FROM va_win) GROUP BY rk",
        Seq("rk", "n")))
    assert(e.getMessage.contains("without PARTITION BY below the top"), e.getMessage)
    val top = prepared("SELECT k, v, row_number() OVER (ORDER BY v, k) AS n FROM va_win ORDER BY n, k, v LIMIT 1",
      Seq("k", "v", "n"))
    assert(top.maintenance.atRead.isDefined && top.maintenance.top.isDefined)
    // So is an ORDER BY without LIMIT (a table has no order); a keyword is a column's name.
    spark.sql("DROP TABLE IF EXISTS va_win_kw")
    spark.sql("CREATE TABLE va_win_kw (`true` INT, v INT) USING delta")
    Seq("SELECT k, rank() OVER (ORDER BY v DESC) AS rk FROM va_win ORDER BY rk",
      "SELECT `true`, sum(v) OVER (ORDER BY `true`) AS s FROM va_win_kw",
      "SELECT k, collect_list(v) OVER (ORDER BY k) AS l FROM va_win").foreach { q =>
      val analyzed = ViewAnalysis.analyze(spark, q, "default")
      val readable = ViewAnalysis.prepare(analyzed, analyzed.output.map(_.name), incremental = true, instant = 0L)
      assert(readable.maintenance.atRead.isDefined, q)
      ViewAnalysis.requireReadable(spark, readable)
    }
    // What the SQL of a read would not compute as the query does is refused: an accuracy, or
    // IGNORE NULLS, that the function's SQL leaves out.
    Seq("SELECT k, approx_count_distinct(v, 0.01) OVER () AS n FROM va_win",
      "SELECT k, last_value(v) IGNORE NULLS OVER (ORDER BY k) AS l FROM va_win").foreach { q =>
      val e = intercept[IvmException](ViewAnalysis.requireReadable(spark, prepared(q, Seq("k", "x"))))
      assert(e.getMessage.contains("computes something else"), e.getMessage)
    }
    // Functions of the reader's context are refused above the window.
    val user = intercept[IvmException](prepared(
        "SELECT * FROM (SELECT k, rank() OVER (ORDER BY v) AS rk FROM va_win) WHERE current_user() = 'x'", Seq("k", "rk")))
    assert(user.getMessage.contains("current_user"), user.getMessage)
  }

  test("a query that reads where rows are stored is refused") {
    table("va_meta", cdf = true)
    val plan = ViewAnalysis.analyze(spark, "SELECT k, _metadata.file_path AS f FROM va_meta", "default")
    val e = intercept[IvmException](ViewAnalysis.requireRowData("va_view", plan))
    assert(e.getCondition == "IVM_ROW_LOCATION_IN_QUERY", e.getMessage)
  }

  test("tables pinned at their current version; the change feed required or enabled") {
    table("va_cdf", cdf = true)
    table("va_plain", cdf = false)
    val plan = ViewAnalysis.analyze(spark,
      "SELECT c.k, p.v FROM va_cdf c JOIN va_plain p ON c.k = p.k", "default")
    val view = ViewAnalysis.prepare(plan, Seq("k", "v"), incremental = true, instant = 0L)
    val e = intercept[IvmException](ViewAnalysis.pin(spark, "va_view", view, incremental = true, autoEnable = false))
    assert(e.getCondition == "IVM_CHANGE_FEED_DISABLED", e.getMessage)
    // A full-refresh view needs no change feed.
    val full = ViewAnalysis.pin(spark, "va_view", view, incremental = false, autoEnable = false)
    assert(full.keySet == Set("spark_catalog.default.va_cdf", "spark_catalog.default.va_plain"))
    val pinned = ViewAnalysis.pin(spark, "va_view", view, incremental = true, autoEnable = true)
    val plainLog = DeltaLog.forTable(spark, TableIdentifier("va_plain"))
    assert(plainLog.update().metadata.configuration.get("delta.enableChangeDataFeed").contains("true"))
    assert(pinned("spark_catalog.default.va_plain").version == plainLog.update().version,
      "pinned at the version with the change feed on")
    assert(pinned("spark_catalog.default.va_cdf").version ==
      DeltaLog.forTable(spark, TableIdentifier("va_cdf")).update().version)
  }
}
