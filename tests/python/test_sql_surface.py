"""The SQL statements: syntax, names, errors with positions, and Spark's own statements."""

from __future__ import annotations

import json
import random

import pytest
from ivm_testing import (
    assert_matches_query,
    condition,
    follow_changes,
    multiset,
    refused,
    session_confs,
    table_names,
)
from pyspark.errors import ParseException
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView


@pytest.fixture()
def sales(spark: SparkSession, db: str) -> str:
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount DOUBLE) USING delta")
    spark.sql("INSERT INTO sales VALUES (1, 'eu', 10.0), (2, 'eu', 5.0), (3, 'us', 7.0)")
    return db


def test_keywords_case_names_quotes_and_comments(spark: SparkSession, sales: str) -> None:
    spark.sql(f"""
        -- a line comment
        create /* a block /* nested */ comment */ Materialized VIEW if NOT exists `{sales}`.`By_Region`
        COMMENT 'totals per region'
        TBLPROPERTIES ('team' = 'finance', ivm.refresh = 'incremental')
        AS SELECT region, sum(amount) AS total FROM sales GROUP BY region;
    """)
    assert sorted(tuple(r) for r in spark.table("`By_Region`").collect()) == [("eu", 15.0), ("us", 7.0)]
    # IF NOT EXISTS on an existing view is a no-op
    spark.sql("CREATE MATERIALIZED VIEW IF NOT EXISTS `By_Region` AS SELECT 1 AS one")
    assert spark.table("`By_Region`").columns == ["region", "total"]
    shown = spark.sql(f"SHOW MATERIALIZED VIEWS IN {sales}").collect()
    assert [(r.viewName, r.refreshMode) for r in shown] == [("by_region", "incremental")]
    spark.sql(f"refresh materialized view {sales}.`By_Region` full")
    info = MaterializedView.for_name(spark, "`By_Region`").describe()["info"]
    assert info["Comment"] == "totals per region"
    assert info["Table property"] == "team=finance"
    spark.sql("DROP MATERIALIZED VIEW `By_Region`")
    spark.sql("DROP MATERIALIZED VIEW IF EXISTS `By_Region`")
    assert spark.sql("SHOW MATERIALIZED VIEWS").count() == 0
    assert not [t for t in table_names(spark, sales) if t.startswith("__ivm")]


def test_column_list_and_or_replace(spark: SparkSession, sales: str) -> None:
    spark.sql("CREATE MATERIALIZED VIEW v (r, n) AS SELECT region, count(*) FROM sales GROUP BY region")
    assert spark.table("v").columns == ["r", "n"]
    spark.sql("CREATE OR REPLACE MATERIALIZED VIEW v AS SELECT DISTINCT region FROM sales")
    assert sorted(r[0] for r in spark.table("v").collect()) == ["eu", "us"]


@pytest.mark.parametrize(
    "sql, line, pos, fragment",
    [
        ("CREATE MATERIALIZED VIEW v SELECT 1", 1, 27, "expected COMMENT, TBLPROPERTIES or AS"),
        ("CREATE MATERIALIZED VIEW v AS", 1, 29, "expected the view's query after AS"),
        ("REFRESH MATERIALIZED VIEW v PARTIAL", 1, 28, "expected end of statement"),
        ("DROP MATERIALIZED VIEW IF v", 1, 26, "expected EXISTS"),
        ("SHOW MATERIALIZED VIEWS IN", 1, 26, "expected a name"),
        ("CREATE MATERIALIZED VIEW v\n  TBLPROPERTIES ('a' = )\nAS SELECT 1", 2, 23,
         "expected a value for property 'a'"),
        ("ALTER MATERIALIZED VIEW v RENAME TO w", 1, 26, "expected SET TBLPROPERTIES"),
        ("CREATE MATERIALIZED VIEW v COMMENT 'x' COMMENT 'y' AS SELECT 1", 1, 39, "COMMENT is given twice"),
        ("CREATE MATERIALIZED VIEW `v AS SELECT 1", 1, 25, "unclosed back-quoted identifier"),
        # Spark's pipeline clauses a materialized view does not take say what to write instead.
        ("CREATE MATERIALIZED VIEW v LOCATION '/x' AS SELECT 1 AS a", 1, 27, "database whose LOCATION"),
        ("CREATE MATERIALIZED VIEW v OPTIONS ('a' = 'b') AS SELECT 1 AS a", 1, 27, "as TBLPROPERTIES"),
        ("CREATE MATERIALIZED VIEW v (a, CONSTRAINT pk PRIMARY KEY (a)) AS SELECT 1 AS a", 1, 31,
         "takes no constraints"),
        ("CREATE MATERIALIZED VIEW v (a INT GENERATED ALWAYS AS (1)) AS SELECT 1 AS a", 1, 34,
         "computed by its query"),
        ("CREATE MATERIALIZED VIEW v (a INTEGR) AS SELECT 1 AS a", 1, 30, "expected a data type"),
        ("CREATE MATERIALIZED VIEW v USING parquet AS SELECT 1 AS a", 1, 33, "expected DELTA"),
        ("CREATE MATERIALIZED VIEW v PARTITIONED BY (years(ts)) AS SELECT 1 AS a", 1, 48,
         "compute a value in the query"),
        ("CREATE MATERIALIZED VIEW v\nPARTITIONED BY (a)\nCLUSTER BY (a) AS SELECT 1 AS a", 3, 0,
         "partitioned or clustered, not both"),
        ("CREATE MATERIALIZED VIEW v CLUSTER BY AUTO AS SELECT 1 AS a", 1, 38, "CLUSTER BY (col, ...)"),
    ],
)
def test_parse_errors_have_line_and_position(spark: SparkSession, sql: str, line: int, pos: int,
                                             fragment: str) -> None:
    with pytest.raises(ParseException) as info:
        spark.sql(sql)
    message = str(info.value)
    assert fragment in message
    assert f"line {line}, pos {pos}" in message
    assert condition(info.value) == "PARSE_SYNTAX_ERROR"


def test_parse_error_in_the_query_points_into_the_statement(spark: SparkSession, sales: str) -> None:
    with pytest.raises(ParseException) as info:
        spark.sql("CREATE MATERIALIZED VIEW v AS\nSELECT region FROM sales WHERE )")
    assert "line 2" in str(info.value)


def test_spark_statements_keep_working(spark: SparkSession, sales: str) -> None:
    spark.sql("CREATE VIEW plain AS SELECT * FROM sales")
    assert spark.table("plain").count() == 3
    spark.sql("REFRESH TABLE sales")  # Spark's own REFRESH
    assert spark.sql("SELECT count(*) FROM sales").collect()[0][0] == 3
    # Spark's pipeline-only forms still go to Spark, which refuses them outside a pipeline.
    with pytest.raises(Exception) as info:
        spark.sql("CREATE STREAMING TABLE st AS SELECT * FROM STREAM sales")
    assert "IVM" not in str(info.value)
    spark.sql("DROP VIEW plain")


def test_unknown_view_and_not_a_view(spark: SparkSession, sales: str) -> None:
    for stmt in ("REFRESH MATERIALIZED VIEW nope", "DESCRIBE MATERIALIZED VIEW nope",
                 "EXPLAIN REFRESH MATERIALIZED VIEW nope", "DROP MATERIALIZED VIEW nope"):
        assert condition(refused(lambda stmt=stmt: spark.sql(stmt))) == "IVM_VIEW_NOT_FOUND", stmt
    error = refused(lambda: spark.sql("DROP MATERIALIZED VIEW sales"))
    assert condition(error) == "IVM_NOT_A_MATERIALIZED_VIEW"
    error = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW sales AS SELECT 1 AS one"))
    assert condition(error) == "IVM_VIEW_ALREADY_EXISTS"


def test_describe_and_explain(spark: SparkSession, sales: str) -> None:
    spark.sql("CREATE MATERIALIZED VIEW agg AS SELECT region, avg(amount) AS a, max(id) AS m "
              "FROM sales GROUP BY region")
    d = MaterializedView.for_name(spark, "agg").describe()
    assert d["columns"] == [("region", "string"), ("a", "double"), ("m", "int")]
    info = d["info"]
    assert info["Refresh mode"] == "incremental"
    assert "grouped aggregate" in info["Maintenance"]
    assert info["Source"].endswith("consumed version 2, current version 2")
    assert info["Last refresh"].startswith("#0 (create)")
    spark.sql("INSERT INTO sales VALUES (4, 'us', 1.0)")
    text = MaterializedView.for_name(spark, "agg").explain_refresh()
    assert f"1. D(spark_catalog.{sales}.sales)\n" in text  # one table, one branch
    assert "2. " not in text
    assert "Apply: the changed rows" in text and "one Delta commit" in text
    assert "Estimated Spark jobs:" in text and "== Spark plan" not in text
    # Spark's plan only on request: EXPLAIN EXTENDED
    extended = spark.sql("EXPLAIN EXTENDED REFRESH MATERIALIZED VIEW agg").collect()[0][0]
    on_request = "(EXPLAIN EXTENDED REFRESH MATERIALIZED VIEW adds Spark's plan)\n"
    assert on_request in text and extended.startswith(text.replace(on_request, ""))
    assert "== Spark plan of the rows to merge ==" in extended and "Aggregate" in extended
    # EXPLAIN changed nothing: the refresh still sees the change
    assert MaterializedView.for_name(spark, "agg").refresh().source_rows_changed == 1


def test_alter_properties_and_refresh_mode(spark: SparkSession, sales: str) -> None:
    q = "SELECT region, count(*) AS n FROM sales GROUP BY region"
    spark.sql(f"CREATE MATERIALIZED VIEW m AS {q}")
    spark.sql("ALTER MATERIALIZED VIEW m SET TBLPROPERTIES ('team' = 'me')")
    mv = MaterializedView.for_name(spark, "m")
    assert mv.describe()["info"]["Table property"] == "team=me"
    spark.sql("ALTER MATERIALIZED VIEW m SET TBLPROPERTIES ('ivm.refresh' = 'full')")
    assert mv.describe()["info"]["Refresh mode"] == "full"
    spark.sql("INSERT INTO sales VALUES (5, 'apac', 2.0)")
    assert mv.refresh().mode == "full"
    spark.sql("ALTER MATERIALIZED VIEW m SET TBLPROPERTIES ('ivm.refresh' = 'incremental')")
    spark.sql("INSERT INTO sales VALUES (6, 'apac', 2.0)")
    assert mv.refresh().mode == "incremental"
    assert sorted(tuple(r) for r in spark.table("m").collect()) == sorted(
        tuple(r) for r in spark.sql(q).collect())
    error = refused(lambda: spark.sql(
        "ALTER MATERIALIZED VIEW m SET TBLPROPERTIES ('ivm.refresh' = 'sometimes')"))
    assert condition(error) == "IVM_INVALID_PROPERTY"
    error = refused(lambda: spark.sql(
        "ALTER MATERIALIZED VIEW m SET TBLPROPERTIES ('ivm.query' = 'SELECT 1')"))
    assert condition(error) == "IVM_INVALID_PROPERTY"
    spark.sql("ALTER MATERIALIZED VIEW m UNSET TBLPROPERTIES ('team')")
    assert "Table property" not in mv.describe()["info"]


NAMES = ["1st", "select", "MiXed_Case"]


def test_names_that_need_quoting_work_everywhere(spark: SparkSession, db: str) -> None:
    """Leading digits, reserved words and mixed case, for views, base tables and columns, through
    SQL and the Python API (key constraints, FK pruning, describe, explain, listing)."""
    from spark_ivm import add_foreign_key, add_primary_key, is_materialized_view, list_materialized_views

    spark.sql("CREATE TABLE `group` (`order` INT, `2nd` STRING) USING delta")
    spark.sql("CREATE TABLE `Table` (`Key` INT, `order` INT, `select` DOUBLE) USING delta")
    spark.sql("INSERT INTO `group` VALUES (1, 'a'), (2, 'b')")
    spark.sql("INSERT INTO `Table` VALUES (1, 1, 1.5), (2, 1, 2.5), (3, 2, 4.0)")
    add_primary_key(spark, "group", ["order"])
    add_foreign_key(spark, "Table", ["order"], "group", ["order"], rely=True)
    query = ("SELECT g.`2nd`, count(*) AS `count`, sum(t.`select`) AS `sum` "
             "FROM `Table` t JOIN `group` g ON t.`order` = g.`order` GROUP BY g.`2nd`")
    views = {name: MaterializedView.create(spark, name, query) for name in NAMES}
    spark.sql("INSERT INTO `group` VALUES (3, 'c')")
    spark.sql("INSERT INTO `Table` VALUES (4, 3, 1.0), (5, 1, 1.0)")
    spark.sql("DELETE FROM `Table` WHERE `Key` = 3")
    for name, mv in views.items():
        assert mv.refresh().mode == "incremental"
        assert_matches_query(spark, f"`{name}`", query)
        assert is_materialized_view(spark, name)
        # The session catalog is case-insensitive and keeps names in lower case, as for tables.
        assert MaterializedView.for_name(spark, name).describe()["name"] == name.lower()
        assert "Branches" in mv.explain_refresh()
    assert sorted(n.split(".")[1] for n in list_materialized_views(spark)) == sorted(n.lower() for n in NAMES)
    spark.sql("INSERT INTO `Table` VALUES (6, 2, 3.0)")
    spark.sql("REFRESH MATERIALIZED VIEW `1st`")
    assert_matches_query(spark, "`1st`", query)
    for mv in views.values():
        mv.drop()
    assert list_materialized_views(spark) == []


def test_refresh_returns_a_compact_row_and_the_report_on_request(spark: SparkSession, sales: str) -> None:
    """REFRESH's row fits a terminal (the reason in one sentence); WITH REPORT adds the whole
    report as JSON, which is what Python's refresh() parses."""
    spark.sql("CREATE MATERIALIZED VIEW compact AS SELECT region, count(*) AS n FROM sales GROUP BY region")
    spark.sql("INSERT INTO sales VALUES (9, 'eu', 1.0)")
    rows = spark.sql("REFRESH MATERIALIZED VIEW compact").collect()
    assert rows[0].__fields__ == ["view", "mode", "refresh_number", "source_rows_changed",
                                  "view_rows_changed", "duration_ms", "reason"]
    assert rows[0].mode == "incremental" and rows[0].source_rows_changed == 1
    assert rows[0].reason and "\n" not in rows[0].reason and len(rows[0].reason) < 300
    spark.sql("DELETE FROM sales WHERE id = 9")
    full = spark.sql("REFRESH MATERIALIZED VIEW compact FULL WITH REPORT").collect()[0]
    assert full.__fields__[-1] == "report" and full.mode == "full"
    assert json.loads(full.report)["reason"] == full.reason


def test_statements_inside_sql_scripts(spark: SparkSession, db: str) -> None:
    """spark-ivm's statements inside a SQL script (BEGIN ... END): Spark's grammar, which parses a
    script whole, read REFRESH MATERIALIZED VIEW as a REFRESH of a resource path and CREATE
    MATERIALIZED VIEW as a pipeline's dataset it refuses to run. They now run where they stand,
    under IF, ELSE and WHILE too, with the script's own statements between them."""
    spark.sql("CREATE TABLE t (i INT, g STRING, x INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20)")
    query = "SELECT g, sum(x) AS s, count(*) AS n FROM t GROUP BY g"
    spark.sql(f"""BEGIN
        -- the view is created, then its base table changes and it follows
        CREATE MATERIALIZED VIEW by_g AS {query};
        INSERT INTO t VALUES (3, 'a', 5);
        REFRESH MATERIALIZED VIEW by_g;
        END""")
    assert_matches_query(spark, "by_g", query)
    assert MaterializedView.for_name(spark, "by_g").history()[0].mode == "incremental"
    spark.sql("""BEGIN
        DECLARE k INT DEFAULT 0;
        WHILE k < 2 DO
          SET k = k + 1;
          INSERT INTO t VALUES (10 + k, 'c', k);
          REFRESH MATERIALIZED VIEW by_g;
        END WHILE;
        IF (SELECT count(*) FROM by_g WHERE g = 'c') = 1 THEN
          CREATE MATERIALIZED VIEW only_c AS SELECT i, 'it''s' AS note FROM t WHERE g = 'c';
        ELSE
          DROP MATERIALIZED VIEW by_g;
        END IF;
        END""")
    assert_matches_query(spark, "by_g", query)
    assert sorted(spark.table("only_c").collect()) == [(11, "it's"), (12, "it's")]
    # A malformed statement of spark-ivm's in a script is still a parse error with its position.
    e = refused(lambda: spark.sql("BEGIN\n  REFRESH MATERIALIZED VIEW by_g FULLY;\nEND"))
    assert "FULLY" in str(e), str(e)[:400]


def test_pipe_syntax_and_sql_functions_are_maintained(spark: SparkSession, db: str) -> None:
    """SQL pipe syntax (`FROM t |> WHERE ... |> AGGREGATE ...`) and SQL table functions (CREATE
    FUNCTION ... RETURNS TABLE): their analyzed plans keep nodes that compute nothing (Spark's
    optimizer drops them), which the validator refused as an unknown operator, so such views were
    recomputed. They are now maintained like the same query written with SELECT, subqueries and
    top-k included, and equal to it after every change."""
    spark.sql("CREATE TABLE t (i INT, g STRING, x INT) USING delta")
    spark.sql("CREATE TABLE d (g STRING, label STRING) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20), (3, 'a', 1)")
    spark.sql("INSERT INTO d VALUES ('a', 'A'), ('b', 'B')")
    queries = {
        "grouped": "FROM t |> WHERE x > 1 |> AGGREGATE sum(x) AS s, count(*) AS n GROUP BY g",
        "joined": "FROM t |> EXTEND x * 2 AS y |> JOIN d USING (g) |> AGGREGATE sum(y) AS s GROUP BY label",
        "top": "FROM t |> AGGREGATE sum(x) AS s GROUP BY g |> ORDER BY s DESC |> LIMIT 2",
        "nested": "FROM t |> WHERE i IN (FROM d |> JOIN t USING (g) |> WHERE x < 15 |> SELECT i)",
        "function": "SELECT g, sum(doubled(x)) AS s FROM small_rows(15) GROUP BY g",
    }
    spark.sql("CREATE FUNCTION doubled(v INT) RETURNS INT RETURN v * 2")
    spark.sql("CREATE FUNCTION small_rows(lim INT) RETURNS TABLE (i INT, g STRING, x INT) "
              "RETURN SELECT i, g, x FROM t WHERE x < lim")
    steps = [["INSERT INTO t VALUES (4, 'b', 7), (5, 'c', 3)"], ["DELETE FROM t WHERE i = 1"],
             ["UPDATE t SET x = x + 30 WHERE i = 3", "INSERT INTO d VALUES ('c', 'C')"]]
    follow_changes(spark, queries, steps, clause="REFRESH POLICY INCREMENTAL STRICT")


def test_show_create_table_gives_the_materialized_view_statement(spark: SparkSession, db: str) -> None:
    """SHOW CREATE TABLE of a materialized view gave the plain view over its backing table, which
    run again makes a view no refresh maintains. It now gives the CREATE MATERIALIZED VIEW
    statement, every clause included, and that statement makes the same view again."""
    spark.sql("CREATE TABLE t (i INT, g STRING, x INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 'a', 10), (2, 'b', 20)")
    spark.sql("""CREATE MATERIALIZED VIEW totals (grp, total) COMMENT 'totals by group'
                 REFRESH POLICY INCREMENTAL STRICT SCHEDULE EVERY 2 HOURS TBLPROPERTIES ('team' = 'finance')
                 AS SELECT g, sum(x) FROM t GROUP BY g""")
    spark.sql("CREATE MATERIALIZED VIEW by_g ACCESS BY (g) TBLPROPERTIES ('ivm.epsilon' = '0.25') "
              "AS SELECT g, i FROM t")
    statements = {v: spark.sql(f"SHOW CREATE TABLE {v}").collect()[0][0] for v in ("totals", "by_g")}
    assert statements["totals"].splitlines() == [
        f"CREATE MATERIALIZED VIEW `{db}`.`totals` (`grp`, `total`)", "COMMENT 'totals by group'",
        "REFRESH POLICY INCREMENTAL STRICT", "SCHEDULE EVERY 2 HOURS", "TBLPROPERTIES ('team' = 'finance')",
        "AS SELECT g, sum(x) FROM t GROUP BY g"], statements["totals"]
    assert "ACCESS BY (`g`)" in statements["by_g"] and "'ivm.epsilon' = '0.25'" in statements["by_g"]
    # AS SERDE stays Spark's own: the catalog view over the backing table.
    assert spark.sql("SHOW CREATE TABLE by_g AS SERDE").collect()[0][0].startswith("CREATE VIEW")
    described = {v: MaterializedView.for_name(spark, v).describe() for v in statements}
    for view, statement in statements.items():
        spark.sql(f"DROP MATERIALIZED VIEW {view}")
        spark.sql(statement)
        again = MaterializedView.for_name(spark, view).describe()
        for key in ("query", "refresh_policy", "schedule", "comment", "columns", "properties"):
            assert again[key] == described[view][key], (view, key)
        assert MaterializedView.for_name(spark, view).access_by == (["g"] if view == "by_g" else [])
        assert spark.sql(f"SHOW CREATE TABLE {view}").collect()[0][0] == statement
    assert_matches_query(spark, "totals", "SELECT g AS grp, sum(x) AS total FROM t GROUP BY g")


def test_pipeline_clauses_lay_out_the_view_and_it_follows_changes(spark: SparkSession, db: str) -> None:
    """Spark's pipeline grammar declares a materialized view's columns (types, NOT NULL,
    comments) and its layout (PARTITIONED BY, CLUSTER BY, USING DELTA). The backing table takes
    them, every apply path keeps them, a declared type is a contract and NOT NULL is enforced."""
    spark.sql("CREATE TABLE t (k INT, d DATE, v DOUBLE) USING delta")
    spark.sql("CREATE TABLE dim (k INT, name STRING) USING delta")
    spark.sql("INSERT INTO dim VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    spark.sql("INSERT INTO t VALUES (1, DATE'2024-01-01', 1.0), (2, DATE'2024-01-02', 2.0), "
              "(2, DATE'2024-01-01', 3.0), (3, DATE'2024-01-03', 4.0)")
    queries = {
        "agg": "SELECT k, d, sum(v) AS s, count(*) AS n FROM t GROUP BY k, d",
        "joined": "SELECT t.k, name, d, v FROM t JOIN dim ON t.k = dim.k",
        "by_key": "SELECT k, d, v FROM t WHERE v > 1",
    }
    heads = {
        "agg": "(k INT NOT NULL COMMENT 'the key', d DATE, s, n BIGINT) USING DELTA PARTITIONED BY (D)",
        "joined": "CLUSTER BY (name, k)",
        "by_key": "PARTITIONED BY (d) ACCESS BY (k)",
    }
    for name, head in heads.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} {head} AS {queries[name]}")
    rng = random.Random(7)

    def step() -> list:
        k, day = rng.randint(1, 5), f"DATE'2024-01-0{rng.randint(1, 4)}'"
        return [rng.choice([f"INSERT INTO t VALUES ({k}, {day}, {rng.randint(1, 9)}.0)",
                            f"DELETE FROM t WHERE k = {k} AND d = {day}",
                            f"UPDATE t SET v = v + 1, d = {day} WHERE k = {k}",
                            f"UPDATE dim SET name = name || 'x' WHERE k = {k}"])]

    def detail(view: str) -> tuple:  # Delta's DESCRIBE DETAIL of a view is its backing table's
        row = spark.sql(f"DESCRIBE DETAIL {view}").collect()[0]
        return tuple(row.partitionColumns), tuple(row.clusteringColumns)

    expected = {"agg": (("d",), ()), "joined": ((), ("name", "k")), "by_key": (("d",), ())}
    steps = [step() for _ in range(4)]
    for name, query in queries.items():  # the views as created, then each step's refresh
        assert_matches_query(spark, name, query)
    for i, changes in enumerate(steps):
        # Half the steps apply by marking rows deleted (deletion vectors), half by rewriting files.
        with session_confs(spark, {"spark.ivm.apply.rewriteWithoutSearchBytes": "0" if i % 2 else "1048576"}):
            for stmt in changes:
                spark.sql(stmt)
            for name, query in queries.items():
                assert MaterializedView.for_name(spark, name).refresh().mode in ("incremental", "noop")
                assert_matches_query(spark, name, query)
    spark.sql("REFRESH MATERIALIZED VIEW agg FULL")
    assert_matches_query(spark, "agg", queries["agg"])
    assert {v: detail(v) for v in queries} == expected
    # Delta's OPTIMIZE (which clusters a CLUSTER BY view), VACUUM and DESCRIBE HISTORY of a view
    # run on its backing table, and the next refreshes go on as before.
    spark.sql("OPTIMIZE joined")
    spark.sql("VACUUM agg")
    assert spark.sql("DESCRIBE HISTORY joined LIMIT 1").collect()[0].operation == "OPTIMIZE"
    spark.sql("INSERT INTO t VALUES (1, DATE'2024-01-02', 6.0)")
    for name, query in queries.items():
        assert MaterializedView.for_name(spark, name).refresh().mode == "incremental"
        assert_matches_query(spark, name, query)
    assert [(r.col_name, r.comment) for r in spark.sql("DESCRIBE agg").collect()][0] == ("k", "the key")
    described = {r.col_name: r.data_type for r in spark.sql("DESCRIBE MATERIALIZED VIEW agg").collect()}
    assert described["Layout"] == "PARTITIONED BY (d)"
    # NOT NULL holds through incremental and full refreshes: one that would break it fails and
    # leaves the view as it was.
    before = multiset(spark.table("agg").collect())
    spark.sql("INSERT INTO t VALUES (NULL, DATE'2024-01-01', 1.0)")
    for full in ("", " FULL"):
        with pytest.raises(Exception, match="NOT_NULL_CONSTRAINT_VIOLATED"):
            spark.sql(f"REFRESH MATERIALIZED VIEW agg{full}")
        assert multiset(spark.table("agg").collect()) == before
    spark.sql("DELETE FROM t WHERE k IS NULL")
    assert MaterializedView.for_name(spark, "agg").refresh().mode == "incremental"
    assert_matches_query(spark, "agg", queries["agg"])
    # SHOW CREATE TABLE gives every clause, and its statement makes the same view again.
    statement = spark.sql("SHOW CREATE TABLE agg").collect()[0][0]
    assert statement.splitlines()[:2] == [
        f"CREATE MATERIALIZED VIEW `{db}`.`agg` "
        "(`k` INT NOT NULL COMMENT 'the key', `d` DATE, `s`, `n` BIGINT)",
        "PARTITIONED BY (`d`)"], statement
    spark.sql("DROP MATERIALIZED VIEW agg")
    spark.sql(statement)
    assert detail("agg") == expected["agg"]
    assert spark.sql("SHOW CREATE TABLE agg").collect()[0][0] == statement
    # A declared type is a contract; a layout names columns the view keeps.
    e = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW typed (k BIGINT, n) AS "
                                  "SELECT k, count(*) FROM t GROUP BY k"))
    assert condition(e) == "IVM_COLUMN_TYPE_MISMATCH"
    assert "declares k as BIGINT but its query returns INT" in str(e)
    e = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW laid PARTITIONED BY (day) AS SELECT k, d FROM t"))
    assert condition(e) == "IVM_INVALID_LAYOUT" and "'day' is not a column of the view" in str(e)
    e = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW ranked PARTITIONED BY (r) AS "
                                  "SELECT k, rank() OVER (ORDER BY v DESC) AS r FROM t"))
    assert condition(e) == "IVM_INVALID_LAYOUT" and "computes 'r' when it is read" in str(e)
    # Delta checks NOT NULL on every row kept, and a top-k view keeps rows below its top.
    e = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW topped (k NOT NULL, n) AS "
                                  "SELECT k, count(*) AS n FROM t GROUP BY k ORDER BY n DESC LIMIT 2"))
    assert condition(e) == "IVM_INVALID_LAYOUT" and "below its top rows" in str(e)
    assert not {"typed", "laid", "ranked", "topped"} & table_names(spark)


def test_create_or_refresh_refreshes_the_same_view_and_replaces_another(spark: SparkSession, db: str) -> None:
    """CREATE OR REFRESH, the statement a scheduled job runs every time: it creates the view,
    refreshes it (incrementally) while the statement declares it as it is, and replaces it
    once the statement declares anything else."""
    spark.sql("CREATE TABLE t (k INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    query = "SELECT k, sum(v) AS s FROM t GROUP BY k"
    statement = f"CREATE OR REFRESH MATERIALIZED VIEW totals COMMENT 'sums' AS {query}"
    spark.sql(statement)
    mv = MaterializedView.for_name(spark, "totals")
    backing = mv.describe()["backing_table"]
    for n in range(1, 3):
        spark.sql(f"INSERT INTO t VALUES ({n}, 1)")
        spark.sql(statement)
        last = spark.sql("SHOW REFRESHES FOR totals LIMIT 1").collect()[0]
        assert (last.refresh_number, last.mode) == (n, "incremental")
        assert mv.describe()["backing_table"] == backing
        assert_matches_query(spark, "totals", query)
    # Another query, or another clause, replaces the view (a new backing table, recomputed).
    for changed, now in [(statement.replace("sum(v)", "max(v)"), query.replace("sum(v)", "max(v)")),
                         (statement.replace("COMMENT 'sums'", "COMMENT 'maxima'").replace("sum(v)", "max(v)"),
                          query.replace("sum(v)", "max(v)"))]:
        spark.sql(changed)
        assert mv.describe()["backing_table"] != backing
        backing = mv.describe()["backing_table"]
        assert_matches_query(spark, "totals", now)
    assert mv.describe()["comment"] == "maxima"
    # Over something that is not a materialized view it fails as CREATE does.
    spark.sql("CREATE TABLE plain (k INT) USING delta")
    assert condition(refused(lambda: spark.sql(f"CREATE OR REFRESH MATERIALIZED VIEW plain AS {query}"))) == \
        "IVM_VIEW_ALREADY_EXISTS"
