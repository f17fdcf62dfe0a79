package io.sparkivm.execution

import io.sparkivm.TestSpark
import io.sparkivm.catalog.{DeltaTables, ViewCatalog}
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.parser.IvmStatementParser
import org.apache.spark.sql.{Row, SparkSession}
import org.scalatest.funsuite.AnyFunSuite

/**
 * RewriteCommit, through refreshes: whichever way the changed rows are applied (the whole small
 * table rewritten by the driver; candidate files searched and their rows marked deleted by
 * deletion vectors; distributed rows applied by semi and anti joins; small files compacted into
 * the apply), the view's rows equal its query's after inserts, updates and deletes that empty a
 * group, in one commit per refresh carrying the record in its userMetadata and in the table
 * property, with Delta's transaction (view id, refresh number); a refresh number applies at
 * most once, and an overwrite of a committed number does nothing.
 */
class RewriteCommitSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("rewrite-commit")

  private def create(sql: String): Unit =
    ViewLifecycle.create(spark, IvmStatementParser.recognise(sql).get.asInstanceOf[CreateMaterializedView])

  private def withConf[T](kv: Seq[(String, String)])(body: => T): T = TestSpark.withConf(spark, kv: _*)(body)

  private def rows(sql: String): Set[Row] = spark.sql(sql).collect().toSet

  private val ways = Seq(
    "the whole small table, by the driver" -> Nil,
    "searched files, rows marked deleted, small files compacted" -> Seq("spark.ivm.heldTables.maxRows" -> "0",
      "spark.ivm.apply.rewriteWithoutSearchBytes" -> "0", "spark.ivm.apply.compactMinFiles" -> "2"),
    "distributed rows, by joins" -> Seq("spark.ivm.localMaxRows" -> "1", "spark.ivm.heldTables.maxRows" -> "0"))

  test("the view equals its query after each refresh, whichever way its rows are applied") {
    spark.sql("CREATE TABLE rwc_base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO rwc_base VALUES (1, 10), (2, 20), (3, 30), (4, 40)")
    val query = "SELECT k, sum(v) AS s, count(*) AS n FROM rwc_base GROUP BY k"
    val views = ways.indices.map(n => s"rwc_mv$n")
    views.foreach(v => create(s"CREATE MATERIALIZED VIEW $v REFRESH POLICY INCREMENTAL AS $query"))
    // Each refresh applies inserted, updated and emptied groups.
    val rounds = Seq(
      Seq("INSERT INTO rwc_base VALUES (1, 1), (5, 50)", "UPDATE rwc_base SET v = v + 1 WHERE k = 2",
        "DELETE FROM rwc_base WHERE k = 3"),
      Seq("INSERT INTO rwc_base VALUES (6, 60), (2, 2)", "DELETE FROM rwc_base WHERE k = 5"))
    rounds.zipWithIndex.foreach { case (round, i) =>
      round.foreach(spark.sql)
      val expected = rows(query)
      ways.zip(views).foreach { case ((way, conf), view) =>
        val meta = ViewCatalog.lookup(spark, Seq(view))
        val log = DeltaTables.log(spark, meta.backing)
        val before = log.update().version
        val report = withConf(conf)(RefreshPipeline.refresh(spark, Seq(view), full = false))
        assert(report.mode == "incremental" && report.refreshNumber == i + 1, report)
        assert(rows(s"SELECT * FROM $view") == expected, s"$way, after $round")
        // One commit, carrying the record twice and the view's transaction.
        val snapshot = log.update()
        assert(snapshot.version == before + 1 && report.backingVersion == snapshot.version, way)
        val record = snapshot.metadata.configuration(ViewCatalog.RecordProperty)
        val info = log.history.getHistory(snapshot.version, Some(snapshot.version)).head
        assert(info.userMetadata.contains(record), info)
        assert(ViewCatalog.recordedNumber(snapshot.metadata.configuration).contains(i + 1L))
        assert(snapshot.transactions.get(meta.id).contains(i + 1L), snapshot.transactions)
      }
    }
    // Compacted: the apply's small files do not pile up.
    val compacted = DeltaTables.log(spark, ViewCatalog.lookup(spark, Seq(views(1))).backing).update()
    assert(compacted.allFiles.count() <= 3, s"${compacted.allFiles.count()} files")
  }

  test("a refresh number applies at most once; an overwrite of a committed one does nothing") {
    spark.sql("CREATE TABLE rwc_once (k INT, v INT) USING delta")
    spark.sql("INSERT INTO rwc_once VALUES (1, 10)")
    create("CREATE MATERIALIZED VIEW rwc_once_mv REFRESH POLICY INCREMENTAL AS SELECT k, count(*) AS n FROM rwc_once GROUP BY k")
    spark.sql("INSERT INTO rwc_once VALUES (2, 20)")
    RefreshPipeline.refresh(spark, Seq("rwc_once_mv"), full = false)
    val meta = ViewCatalog.lookup(spark, Seq("rwc_once_mv"))
    val log = DeltaTables.log(spark, meta.backing)
    val version = log.update().version
    val (record, _) = ViewCatalog.lastRefresh(spark, meta)
    val maintenance = ViewAnalysis.reanalyze(spark, meta, incremental = true).maintenance
    val again = BackingTable.current(spark, meta)
    assert(RewriteCommit.apply(spark, meta, maintenance, again, record).isEmpty)
    assert(!RewriteCommit.overwrite(spark, meta, spark.table(meta.backing.quotedString), Map.empty, record))
    assert(log.update().version == version)
    assert(rows("SELECT * FROM rwc_once_mv") == Set(Row(1, 1L), Row(2, 1L)))
  }
}
