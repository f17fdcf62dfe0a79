package io.sparkivm.commands

import io.sparkivm.TestSpark
import io.sparkivm.parser.IvmStatementParser
import org.apache.spark.sql.execution.command.LeafRunnableCommand
import org.apache.spark.sql.{Row, SparkSession}
import org.json4s._
import org.json4s.jackson.JsonMethods.parse
import org.scalatest.funsuite.AnyFunSuite

/**
 * MaterializedViewCommands: every statement spark-ivm parses becomes the command that runs it,
 * and each command's rows have its declared output's width and types; the life cycle of a
 * view run through the commands leaves what the statements say (SHOW lists it, REFRESH reports
 * what changed and the view's rows equal the query's, SHOW REFRESHES lists refreshes newest
 * first, DROP removes it).
 */
class MaterializedViewCommandsSuite extends AnyFunSuite {
  private lazy val spark: SparkSession = TestSpark.session("view-commands")

  private def command(sql: String): LeafRunnableCommand =
    MaterializedViewCommands.plan(IvmStatementParser.recognise(sql).get)

  /** Runs a statement through its command; its rows, checked against the command's output. */
  private def run(sql: String): Seq[Row] = {
    val c = command(sql)
    val rows = c.run(spark)
    rows.foreach { r =>
      assert(r.length == c.output.size, s"$sql: $r against ${c.output}")
      c.output.zipWithIndex.foreach { case (a, i) =>
        assert(a.nullable || !r.isNullAt(i), s"$sql: ${a.name} is null in $r")
      }
    }
    rows
  }

  test("each statement becomes its own command") {
    val expected = Seq(
      "CREATE MATERIALIZED VIEW v AS SELECT 1 AS one" -> classOf[CreateMaterializedViewCommand],
      "REFRESH MATERIALIZED VIEW v FULL" -> classOf[RefreshMaterializedViewCommand],
      "DROP MATERIALIZED VIEW IF EXISTS v" -> classOf[DropMaterializedViewCommand],
      "SHOW MATERIALIZED VIEWS" -> classOf[ShowMaterializedViewsCommand],
      "DESCRIBE MATERIALIZED VIEW v AS JSON" -> classOf[DescribeMaterializedViewCommand],
      "EXPLAIN REFRESH MATERIALIZED VIEW v" -> classOf[ExplainRefreshCommand],
      "ALTER MATERIALIZED VIEW v SET TBLPROPERTIES ('a' = 'b')" -> classOf[AlterMaterializedViewCommand],
      "ALTER MATERIALIZED VIEW v SET REFRESH POLICY FULL" -> classOf[AlterRefreshPolicyCommand],
      "ALTER MATERIALIZED VIEW v ADD SCHEDULE EVERY 2 HOURS" -> classOf[AlterScheduleCommand],
      "SHOW REFRESHES FOR v LIMIT 3" -> classOf[ShowRefreshesCommand],
      "SHOW MATERIALIZED VIEW STATE" -> classOf[ShowStateCommand])
    expected.foreach { case (sql, cls) => assert(command(sql).getClass == cls, sql) }
    assert(command("REFRESH MATERIALIZED VIEW v WITH REPORT").output.map(_.name).last == "report")
    assert(command("REFRESH MATERIALIZED VIEW v").output.size == 7)
    assert(command("DESCRIBE MATERIALIZED VIEW v AS JSON").output.map(_.name) == Seq("json_metadata"))
  }

  test("a view's life cycle through the commands") {
    spark.sql("CREATE TABLE mvc_base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO mvc_base VALUES (1, 10), (2, 20)")
    val query = "SELECT k, sum(v) AS s, count(*) AS n FROM mvc_base GROUP BY k"
    assert(run(s"CREATE MATERIALIZED VIEW mvc_mv REFRESH POLICY INCREMENTAL AS $query").isEmpty)
    val shown = run("SHOW MATERIALIZED VIEWS").filter(_.getString(1) == "mvc_mv")
    assert(shown.map(r => (r.getString(0), r.getString(2))) == Seq(("default", "incremental")), shown)

    spark.sql("INSERT INTO mvc_base VALUES (1, 5), (3, 30)")
    val Seq(refreshed) = run("REFRESH MATERIALIZED VIEW mvc_mv WITH REPORT")
    assert(refreshed.getString(0) == "`spark_catalog`.`default`.`mvc_mv`", refreshed)
    assert(refreshed.getString(1) == "incremental" && refreshed.getLong(2) == 1L, refreshed)
    assert(refreshed.getLong(3) == 2L, refreshed) // two base rows inserted
    assert(refreshed.getLong(4) == 2L, refreshed) // group 1 updated, group 3 inserted
    assert((parse(refreshed.getString(7)) \ "refresh_number") == JInt(1), refreshed.getString(7))
    assert(spark.table("mvc_mv").collect().toSet == spark.sql(query).collect().toSet)

    val Seq(noop) = run("REFRESH MATERIALIZED VIEW mvc_mv")
    assert(noop.getString(1) == "noop" && noop.getLong(4) == 0L, noop)

    val described = run("DESCRIBE MATERIALIZED VIEW mvc_mv")
    assert(described.take(3).map(_.getString(0)) == Seq("k", "s", "n"))
    val Seq(json) = run("DESCRIBE MATERIALIZED VIEW mvc_mv AS JSON")
    assert((parse(json.getString(0)) \ "last_refresh" \ "number") == JInt(1))
    val Seq(plan) = run("EXPLAIN REFRESH MATERIALIZED VIEW mvc_mv")
    assert(plan.getString(0).contains("Next refresh: noop"), plan)

    assert(run("ALTER MATERIALIZED VIEW mvc_mv ADD SCHEDULE EVERY 2 HOURS").isEmpty)
    assert(run("SHOW MATERIALIZED VIEWS").find(_.getString(1) == "mvc_mv").get.getString(4).contains("2 HOURS"))
    assert(run("ALTER MATERIALIZED VIEW mvc_mv SET REFRESH POLICY FULL").isEmpty)
    assert(run("SHOW MATERIALIZED VIEWS").find(_.getString(1) == "mvc_mv").get.getString(3) == "FULL")

    val history = run("SHOW REFRESHES FOR mvc_mv")
    // Newest first: the rebuild of SET REFRESH POLICY (#0 again), the refresh #1, the CREATE.
    val starts = history.map(_.getTimestamp(2).getTime)
    assert(starts == starts.sorted.reverse, history)
    assert(history.map(r => (r.get(1), r.getString(4))) == Seq((0L, "create"), (1L, "incremental"), (0L, "create")),
      history)
    assert(run("SHOW REFRESHES FOR mvc_mv LIMIT 1").size == 1)
    run("SHOW MATERIALIZED VIEW STATE FOR mvc_mv").foreach(r => assert(r.getLong(3) >= 0L, r))

    assert(run("DROP MATERIALIZED VIEW mvc_mv").isEmpty)
    assert(!run("SHOW MATERIALIZED VIEWS").exists(_.getString(1) == "mvc_mv"))
    assert(run("DROP MATERIALIZED VIEW IF EXISTS mvc_mv").isEmpty)
  }
}
