package io.sparkivm.parser

import io.sparkivm.catalog.{RefreshPolicy, Schedule, ViewStorage}
import io.sparkivm.commands._
import io.sparkivm.errors.IvmException
import org.apache.spark.sql.catalyst.parser.ParseException
import org.scalatest.funsuite.AnyFunSuite

class IvmStatementParserSuite extends AnyFunSuite {
  private def parse(sql: String): IvmStatement = IvmStatementParser.recognise(sql).getOrElse(
    fail(s"not recognised: $sql"))

  private def error(sql: String): ParseException =
    intercept[ParseException](IvmStatementParser.recognise(sql))

  test("other statements go to Spark") {
    Seq("SELECT 1", "CREATE VIEW v AS SELECT 1", "REFRESH TABLE t", "DROP VIEW v",
      "CREATE STREAMING TABLE s AS SELECT 1", "CREATE FLOW f AS INSERT INTO t SELECT 1",
      "SHOW VIEWS", "EXPLAIN SELECT 1", "EXPLAIN EXTENDED SELECT 1", "-- comment only", "").foreach { sql =>
      assert(IvmStatementParser.recognise(sql).isEmpty, sql)
    }
  }

  test("CREATE with every clause, any case, comments and quoted names") {
    val sql =
      """/* head */ create OR replace Materialized VIEW `my db`.`a``b` (x COMMENT 'c', y)
        |  TBLPROPERTIES ('ivm.refresh' = 'full', owner.team = "data", n = 3)
        |  COMMENT 'it''s' -- trailing
        |  AS SELECT a, b FROM t;  """.stripMargin
    val c = parse(sql).asInstanceOf[CreateMaterializedView]
    assert(c.name == Seq("my db", "a`b"))
    assert(c.orReplace && !c.ifNotExists)
    assert(c.columnNames == Seq("x", "y"))
    assert(c.properties == Map("ivm.refresh" -> "full", "owner.team" -> "data", "n" -> "3"))
    assert(c.queryText == "SELECT a, b FROM t")
    assert(c.comment.contains("its"))
    // The query keeps its place: line 4 of the statement, after blanks.
    assert(c.queryTextInPlace.linesIterator.toSeq(3).trim == "AS SELECT a, b FROM t".drop(3))
    assert(c.queryTextInPlace.length == sql.trim.length - 1 ||
      c.queryTextInPlace.trim.endsWith("FROM t"))
  }

  test("ACCESS BY names the input columns, quoted or not, among the other clauses") {
    val c = parse("CREATE MATERIALIZED VIEW v REFRESH POLICY INCREMENTAL ACCESS BY (cust, `o key`) COMMENT 'x' " +
      "AS SELECT 1").asInstanceOf[CreateMaterializedView]
    assert(c.accessBy == Seq("cust", "o key") && c.comment.contains("x") && c.queryText == "SELECT 1")
    assert(parse("CREATE MATERIALIZED VIEW v AS SELECT 1").asInstanceOf[CreateMaterializedView].accessBy.isEmpty)
    val twice = error("CREATE MATERIALIZED VIEW v ACCESS BY (a) ACCESS BY (b) AS SELECT 1")
    assert(twice.getMessage.contains("ACCESS BY is given twice") && twice.startPosition.contains(41))
    val noBy = error("CREATE MATERIALIZED VIEW v ACCESS (a) AS SELECT 1")
    assert(noBy.getMessage.contains("BY") && noBy.startPosition.contains(34))
    assert(error("CREATE MATERIALIZED VIEW v ACCESS BY () AS SELECT 1").startPosition.contains(38))
  }

  test("Spark's pipeline clauses: typed columns, NOT NULL, layout, USING DELTA, OR REFRESH") {
    val c = parse(
      """CREATE OR REFRESH MATERIALIZED VIEW v (
        |  a ARRAY<STRUCT<x: INT, y: DECIMAL(10, 2)>> NOT NULL COMMENT 'c',
        |  `b c` STRING COLLATE UTF8_LCASE COMMENT 'd' NOT NULL, e)
        |USING delta CLUSTER BY (e, a) AS SELECT 1""".stripMargin).asInstanceOf[CreateMaterializedView]
    assert(c.orRefresh && !c.orReplace)
    assert(c.columns.map(x => (x.name, x.dataType.map(_.sql), x.notNull, x.comment)) == Seq(
      ("a", Some("ARRAY<STRUCT<x: INT, y: DECIMAL(10,2)>>"), true, Some("c")),
      ("b c", Some("STRING COLLATE UTF8_LCASE"), true, Some("d")), ("e", None, false, None)))
    assert(c.storage == ViewStorage(Nil, Seq("e", "a")))
    assert(parse("CREATE MATERIALIZED VIEW v PARTITIONED BY (d, `e f`) AS SELECT 1")
      .asInstanceOf[CreateMaterializedView].storage == ViewStorage(Seq("d", "e f"), Nil))
    // A column named like a constraint keyword is a column.
    assert(parse("CREATE MATERIALIZED VIEW v (constraint, check) AS SELECT 1, 2")
      .asInstanceOf[CreateMaterializedView].columnNames == Seq("constraint", "check"))
    val both = error("CREATE MATERIALIZED VIEW v CLUSTER BY (a) PARTITIONED BY (b) AS SELECT 1")
    assert(both.getMessage.contains("not both") && both.startPosition.contains(42))
    val twice = error("CREATE MATERIALIZED VIEW v PARTITIONED BY (a) PARTITIONED BY (b) AS SELECT 1")
    assert(twice.getMessage.contains("PARTITIONED BY is given twice"))
    assert(error("CREATE MATERIALIZED VIEW v (a INT NOT NULL NOT NULL) AS SELECT 1").startPosition.contains(43))
    assert(error("CREATE MATERIALIZED VIEW v (a INT MASK f) AS SELECT 1").getMessage.contains("mask in its query"))
    val expect = error("CREATE MATERIALIZED VIEW v (a, CONSTRAINT ok EXPECT (a > 0) ON VIOLATION DROP ROW) AS SELECT 1")
    assert(expect.getMessage.contains("no expectations") && expect.startPosition.contains(31))
    assert(parse("REFRESH MATERIALIZED VIEW v FULL SYNC") == RefreshMaterializedView(Seq("v"), full = true))
    assert(error("REFRESH MATERIALIZED VIEW v ASYNC").getMessage.contains("SCHEDULE or TRIGGER ON UPDATE"))
  }

  test("the other statements") {
    assert(parse("REFRESH MATERIALIZED VIEW db.v FULL") == RefreshMaterializedView(Seq("db", "v"), full = true))
    assert(parse("refresh materialized view v") == RefreshMaterializedView(Seq("v"), full = false))
    assert(parse("DROP MATERIALIZED VIEW IF EXISTS v;") == DropMaterializedView(Seq("v"), ifExists = true))
    assert(parse("SHOW MATERIALIZED VIEWS FROM db") == ShowMaterializedViews(Some(Seq("db"))))
    assert(parse("SHOW MATERIALIZED VIEWS") == ShowMaterializedViews(None))
    assert(parse("DESC MATERIALIZED VIEW v") == DescribeMaterializedView(Seq("v")))
    assert(parse("DESCRIBE MATERIALIZED VIEW db.v AS JSON") == DescribeMaterializedView(Seq("db", "v"), asJson = true))
    assert(parse("EXPLAIN REFRESH MATERIALIZED VIEW v") == ExplainRefresh(Seq("v")))
    assert(parse("explain extended refresh materialized view db.v") == ExplainRefresh(Seq("db", "v"), extended = true))
    assert(parse("ALTER MATERIALIZED VIEW v SET TBLPROPERTIES ('ivm.refresh' = 'full')") ==
      AlterMaterializedViewProperties(Seq("v"), Map("ivm.refresh" -> "full"), Nil))
    assert(parse("ALTER MATERIALIZED VIEW v UNSET TBLPROPERTIES ('a', b.c)") ==
      AlterMaterializedViewProperties(Seq("v"), Map.empty, Seq("a", "b.c")))
  }

  test("errors carry line, position and what was expected") {
    val e1 = error("CREATE MATERIALIZED VIEW v SELECT 1")
    assert(e1.getMessage.contains("'SELECT'") && e1.getMessage.contains("expected COMMENT, TBLPROPERTIES or AS"))
    assert(e1.line.contains(1) && e1.startPosition.contains(27))
    val e2 = error("REFRESH MATERIALIZED VIEW v\n  FULL NOW")
    assert(e2.line.contains(2) && e2.startPosition.contains(7))
    assert(e2.getCondition == "PARSE_SYNTAX_ERROR")
    val e3 = error("CREATE MATERIALIZED VIEW v AS   ")
    assert(e3.getMessage.contains("end of input"))
    val e4 = error("CREATE MATERIALIZED VIEW v COMMENT 'unclosed AS SELECT 1")
    assert(e4.getMessage.contains("unclosed string literal"))
    val e5 = error("CREATE OR REPLACE MATERIALIZED VIEW IF NOT EXISTS v AS SELECT 1")
    assert(e5.getMessage.contains("cannot be used together"))
  }

  test("refresh policies, schedules, cascade and SHOW REFRESHES") {
    val c = parse("CREATE MATERIALIZED VIEW v REFRESH POLICY INCREMENTAL STRICT " +
      "SCHEDULE REFRESH EVERY 1 hour COMMENT 'x' AS SELECT 1").asInstanceOf[CreateMaterializedView]
    assert(c.policy.contains(RefreshPolicy.IncrementalStrict) && c.comment.contains("x"))
    assert(c.schedule.contains(Schedule.Every(1, "HOUR")))
    val cron = parse("CREATE MATERIALIZED VIEW v SCHEDULE CRON '0 0/15 * * * ?' AT TIME ZONE 'UTC' AS SELECT 1")
      .asInstanceOf[CreateMaterializedView]
    assert(cron.schedule.contains(Schedule.Cron("0 0/15 * * * ?", Some("UTC"))))
    val trig = parse("CREATE MATERIALIZED VIEW v TRIGGER ON UPDATE AT MOST EVERY INTERVAL 10 SECONDS AS SELECT 1")
      .asInstanceOf[CreateMaterializedView]
    assert(trig.schedule.contains(Schedule.OnUpdate(Some(10L -> "SECOND"))))
    assert(trig.schedule.get.sql == "TRIGGER ON UPDATE AT MOST EVERY INTERVAL 10 SECONDS")
    assert(parse("REFRESH MATERIALIZED VIEW v CASCADE") == RefreshMaterializedView(Seq("v"), full = false,
      cascade = true))
    assert(parse("REFRESH MATERIALIZED VIEW v FULL CASCADE") == RefreshMaterializedView(Seq("v"), full = true,
      cascade = true))
    assert(parse("refresh materialized view v full cascade with report") ==
      RefreshMaterializedView(Seq("v"), full = true, cascade = true, withReport = true))
    assert(error("REFRESH MATERIALIZED VIEW v WITH").getMessage.contains("REPORT"))
    assert(error("REFRESH MATERIALIZED VIEW v WITH REPORT FULL").getMessage.contains("end of statement"))
    assert(parse("ALTER MATERIALIZED VIEW v SET REFRESH POLICY auto") == AlterRefreshPolicy(Seq("v"), RefreshPolicy.Auto))
    assert(parse("ALTER MATERIALIZED VIEW v ADD SCHEDULE EVERY 2 DAYS") ==
      AlterSchedule(Seq("v"), "ADD", Some(Schedule.Every(2, "DAY"))))
    assert(parse("ALTER MATERIALIZED VIEW v ALTER TRIGGER ON UPDATE") ==
      AlterSchedule(Seq("v"), "ALTER", Some(Schedule.OnUpdate(None))))
    assert(parse("ALTER MATERIALIZED VIEW v DROP SCHEDULE") == AlterSchedule(Seq("v"), "DROP", None))
    assert(parse("SHOW REFRESHES FOR db.v LIMIT 5") == ShowRefreshes(Some(Seq("db", "v")), Some(5)))
    assert(parse("show refreshes") == ShowRefreshes(None, None))
    assert(error("CREATE MATERIALIZED VIEW v REFRESH POLICY SOMETIMES AS SELECT 1").getMessage
        .contains("expected AUTO, INCREMENTAL, INCREMENTAL STRICT or FULL"))
    assert(error("CREATE MATERIALIZED VIEW v SCHEDULE EVERY 5 YEARS AS SELECT 1").getMessage.contains("HOURS"))
    val zero = intercept[IvmException](parse("CREATE MATERIALIZED VIEW v SCHEDULE EVERY 0 HOURS AS SELECT 1"))
    assert(zero.getCondition == "IVM_INVALID_SCHEDULE")
    val badCron = intercept[IvmException](parse("CREATE MATERIALIZED VIEW v SCHEDULE CRON '* * *' AS SELECT 1"))
    assert(badCron.getMessage.contains("Quartz cron"))
    val zone = intercept[IvmException](parse(
        "CREATE MATERIALIZED VIEW v SCHEDULE CRON '0 0 * * * ?' AT TIME ZONE 'Nowhere/Here' AS SELECT 1"))
    assert(zone.getMessage.contains("time zone"))
  }

  test("IDENTIFIER('name') names a view wherever a name goes") {
    assert(parse("REFRESH MATERIALIZED VIEW IDENTIFIER('db.`my view`')") ==
      RefreshMaterializedView(Seq("db", "my view"), full = false))
    parse("CREATE MATERIALIZED VIEW identifier('v') AS SELECT 1") match {
      case c: CreateMaterializedView => assert(c.name == Seq("v") && c.queryText == "SELECT 1")
      case other => fail(other.toString)
    }
    assert(error("DROP MATERIALIZED VIEW IDENTIFIER('a b c')").getMessage.contains("IDENTIFIER"))
  }
}
