package io.sparkivm.service

import io.sparkivm.TestSpark
import io.sparkivm.commands.{CreateMaterializedView, ViewLifecycle}
import io.sparkivm.parser.IvmStatementParser
import org.apache.spark.sql.SparkSession
import org.json4s._
import org.json4s.jackson.JsonMethods.parse
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * RefreshService, driven pass by pass at times the test gives ([[RefreshService.runOnce]]), no
 * sleeps: a view with TRIGGER ON UPDATE is refreshed once per base-table commit and not when
 * nothing changed; a chain of views is refreshed in dependency order in one pass; a view on a
 * schedule is refreshed when its next time has come; a failing view is retried only after a wait
 * that doubles with each failure, while the others go on; start and stop run and end its thread.
 */
class RefreshServiceSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val spark: SparkSession = TestSpark.session("refresh-service")
  private val db = "rsvc_db"

  private def create(sql: String): Unit =
    ViewLifecycle.create(spark, IvmStatementParser.recognise(sql).get.asInstanceOf[CreateMaterializedView])
  private def service = new RefreshService(spark, Seq(db), () => 0L)
  private def name(v: String) = s"spark_catalog.$db.$v"

  override def beforeAll(): Unit = {
    spark.sql(s"CREATE DATABASE IF NOT EXISTS $db")
    spark.sql(s"CREATE TABLE $db.base (k INT, v INT) USING delta")
    spark.sql(s"INSERT INTO $db.base VALUES (1, 10), (2, 20)")
    create(s"CREATE MATERIALIZED VIEW $db.sums REFRESH POLICY INCREMENTAL TRIGGER ON UPDATE AS " +
      s"SELECT k, sum(v) AS s FROM $db.base GROUP BY k")
    create(s"CREATE MATERIALIZED VIEW $db.big REFRESH POLICY INCREMENTAL TRIGGER ON UPDATE AS SELECT k FROM $db.sums WHERE s > 15")
  }

  test("a triggered view is refreshed once per commit, and a chain in dependency order in one pass") {
    val s = service
    assert(s.runOnce(1000L).isEmpty) // nothing committed since the views were created
    spark.sql(s"INSERT INTO $db.base VALUES (1, 10), (3, 5)")
    val runs = s.runOnce(2000L)
    assert(runs.map(r => (r.view, r.action)) == Seq(name("sums") -> "refreshed", name("big") -> "refreshed"), runs)
    assert(runs.forall(r => r.atMs == 2000L && r.report.exists(_.mode == "incremental")), runs)
    assert(spark.table(s"$db.big").collect().map(_.getInt(0)).toSet == Set(1, 2))
    assert(s.runOnce(3000L).isEmpty)
    assert(s.status(name("sums")).lastMs == 2000L && s.status(name("sums")).failures == 0)
    val json = parse(s.runOnceJson(4000L))
    assert(json == JArray(Nil))
    assert((parse(s.statusJson) \ name("big") \ "last_ms") == JInt(2000))
  }

  test("a triggered view kept through a helper view is refreshed when its recursion's table changes") {
    spark.sql(s"CREATE TABLE $db.edges (src INT, dst INT) USING delta")
    spark.sql(s"INSERT INTO $db.edges VALUES (1, 2)")
    val query = s"WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM $db.edges UNION ALL " +
      s"SELECT r.src, e.dst FROM r JOIN $db.edges e ON r.dst = e.src) " +
      s"SELECT r.src, r.dst, b.v FROM r JOIN $db.base b ON b.k = r.dst"
    create(s"CREATE MATERIALIZED VIEW $db.reach REFRESH POLICY INCREMENTAL STRICT TRIGGER ON UPDATE AS $query")
    try {
      val s = new RefreshService(spark, Seq(db), () => 0L)
      assert(s.runOnce(1000L).isEmpty)
      // only the recursion's table changes: the helper's rows move, then the view's
      spark.sql(s"INSERT INTO $db.edges VALUES (0, 1), (3, 1)")
      val runs = s.runOnce(2000L)
      assert(runs.map(r => (r.view, r.report.map(_.mode))) == Seq(name("reach") -> Some("incremental")), runs)
      assert(spark.table(s"$db.reach").collect().map(_.toString).sorted.toSeq ==
        spark.sql(query).collect().map(_.toString).sorted.toSeq)
      assert(s.runOnce(3000L).isEmpty)
    } finally ViewLifecycle.drop(spark, Seq(db, "reach"), ifExists = true)
  }

  test("a scheduled view is refreshed when its next time has come; a failing one waits, doubling") {
    spark.sql(s"CREATE TABLE $db.gone (k INT) USING delta")
    spark.sql(s"INSERT INTO $db.gone VALUES (1)")
    create(s"CREATE MATERIALIZED VIEW $db.every SCHEDULE EVERY 1 MINUTE AS SELECT k FROM $db.base WHERE v > 0")
    create(s"CREATE MATERIALIZED VIEW $db.broken SCHEDULE EVERY 1 MINUTE AS SELECT k FROM $db.gone")
    val s = new RefreshService(spark, Seq(db), () => 0L)
    val created = System.currentTimeMillis()
    assert(s.runOnce(created - 1).isEmpty) // not due a minute before it was created
    spark.sql(s"DROP TABLE $db.gone")
    val t0 = created + 3600000L
    val first = s.runOnce(t0).filter(_.view != name("sums")).filter(_.view != name("big"))
    assert(first.map(r => (r.view, r.action)).toSet == Set(name("every") -> "refreshed", name("broken") -> "failed"),
      first)
    assert(first.find(_.action == "failed").get.error.exists(_.nonEmpty))
    val broken = s.status(name("broken"))
    assert(broken.failures == 1 && broken.retryAtMs == t0 + RefreshService.FirstBackoffMs, broken)
    // Before the wait is over: not tried; after it, tried again and the wait doubles.
    assert(!s.runOnce(t0 + RefreshService.FirstBackoffMs - 1).exists(_.view == name("broken")))
    val t1 = t0 + RefreshService.FirstBackoffMs
    assert(s.runOnce(t1).filter(_.view == name("broken")).map(_.action) == Seq("failed"))
    assert(s.status(name("broken")).retryAtMs == t1 + 2 * RefreshService.FirstBackoffMs)
    // The scheduled view is due again a minute after its last refresh, not before.
    assert(!s.runOnce(t0 + 59999L).exists(_.view == name("every")))
    assert(s.runOnce(t0 + 60000L).exists(r => r.view == name("every") && r.action == "refreshed"))
    ViewLifecycle.drop(spark, Seq(db, "broken"), ifExists = true)
  }

  test("start runs the service's thread and stop ends it") {
    spark.conf.set("spark.ivm.service.pollIntervalMs", "50")
    try {
      val s = new RefreshService(spark, Seq(db), () => 0L).start()
      assert(s.isRunning)
      assert(s.start() eq s)
      assert(s.stop(30000L))
      assert(!s.isRunning)
    } finally spark.conf.unset("spark.ivm.service.pollIntervalMs")
  }
}
