"""Each supported query shape, maintained through inserts, deletes, updates and MERGE, and
compared with recomputation after every refresh."""

from __future__ import annotations

from typing import Any, Dict, List

from ivm_testing import assert_matches_query, follow_changes
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

BASE = [
    "CREATE TABLE r (a INT, b INT, x DOUBLE, s STRING) USING delta",
    "CREATE TABLE t (b INT, c INT, d DECIMAL(10,2)) USING delta",
    "INSERT INTO r VALUES (1, 1, 1.5, 'p'), (2, 1, 2.5, 'q'), (3, 2, NULL, 'p'), "
    "(4, NULL, 4.0, NULL), (1, 1, 1.5, 'p')",
    "INSERT INTO t VALUES (1, 10, 1.25), (1, 11, NULL), (2, 20, 3.50), (3, 30, 0.10), (NULL, 40, 1.00)",
]

CHANGES: List[List[str]] = [
    ["INSERT INTO r VALUES (5, 2, 7.0, 'q'), (6, 3, -1.0, 'p'), (1, 1, 1.5, 'p')"],
    ["DELETE FROM r WHERE a = 2", "INSERT INTO t VALUES (2, 21, 9.99)"],
    ["UPDATE r SET x = x * 2, b = 3 WHERE a = 1", "DELETE FROM t WHERE c = 10"],
    ["MERGE INTO t USING (SELECT 3 AS b, 31 AS c, 5.55 AS d UNION ALL SELECT 7, 70, 1.0) s "
     "ON t.b = s.b WHEN MATCHED THEN UPDATE SET c = s.c, d = s.d WHEN NOT MATCHED THEN INSERT *"],
    ["DELETE FROM r", "DELETE FROM t WHERE b IS NULL"],  # a group empties, a global aggregate on nothing
    ["INSERT INTO r VALUES (9, 1, NULL, NULL), (9, 1, NULL, NULL)", "INSERT INTO t VALUES (1, 12, NULL)"],
]

QUERIES = {
    "join_agg": "SELECT r.s, t.c, sum(r.x) AS sx, count(*) AS n, avg(t.d) AS ad, min(r.a) AS mn, "
                "max(t.d) AS mx, count(r.x) AS cx FROM r JOIN t ON r.b = t.b GROUP BY r.s, t.c",
    "join_rows": "SELECT r.a, r.s, t.c FROM r JOIN t ON r.b = t.b WHERE t.c > 10",
    "self_join": "SELECT r1.a AS a1, r2.a AS a2 FROM r r1 JOIN r r2 ON r1.b = r2.b",
    "filter_project": "SELECT a + 1 AS a1, upper(s) AS us, x * 2 AS x2 FROM r WHERE x IS NULL OR x > 2",
    "global_agg": "SELECT count(*) AS n, sum(x) AS sx, avg(x) AS ax, min(s) AS ms, max(x) AS mx, "
                  "sum(a) AS sa FROM r",
    "global_agg_join": "SELECT count(*) AS n, sum(d) AS sd FROM r JOIN t ON r.b = t.b",
    "distinct": "SELECT DISTINCT b, s FROM r",
    "union_all": "SELECT b FROM r UNION ALL SELECT b FROM t",
    "subquery": "SELECT q.b, count(*) AS n FROM (SELECT b, x FROM r WHERE a > 1) q GROUP BY q.b",
    "nested_agg": "SELECT g.n, count(*) AS groups FROM (SELECT b, count(*) AS n FROM r GROUP BY b) g "
                  "GROUP BY g.n",
    "having": "SELECT b, sum(x) AS sx FROM r GROUP BY b HAVING count(*) > 1",
    "group_expr": "SELECT b % 2 AS parity, count(*) AS n, sum(a) + 1 AS s1 FROM r GROUP BY b % 2",
    "filter_clause": "SELECT s, count(*) FILTER (WHERE x > 2) AS big, sum(a) FILTER (WHERE b = 1) AS s1 "
                     "FROM r GROUP BY s",
    "recomputed": "SELECT b, count(DISTINCT s) AS ds, stddev_pop(a) AS sd FROM r GROUP BY b",
    "three_way": "SELECT r1.s, count(*) AS n FROM r r1 JOIN t ON r1.b = t.b JOIN r r2 ON t.b = r2.b "
                 "GROUP BY r1.s",
    "distinct_agg_rows": "SELECT DISTINCT s, count(*) AS n FROM r GROUP BY s, b",
    "values_join": "SELECT r.a, v.label FROM r JOIN (VALUES (1, 'one'), (2, 'two')) v(k, label) ON r.b = v.k",
}

# Aggregates joined on their key, one of them twice (TPC-DS's year_total of queries 4, 11, 74).
JOINED_AGGREGATES = (
    "WITH totals AS (SELECT b, s, sum(x) AS sx, count(*) AS n FROM r GROUP BY b, s) "
    "SELECT t1.b, t1.sx, t2.sx AS sx2, t.c FROM totals t1 JOIN totals t2 ON t1.b = t2.b "
    "JOIN t ON t.b = t1.b WHERE t1.s = 'p' AND t2.s = 'q'")


def test_every_shape_follows_changes(spark: SparkSession, db: str) -> None:
    """All shapes over the same base tables, refreshed after each step of changes."""
    for stmt in BASE:
        spark.sql(stmt)
    views = follow_changes(spark, QUERIES, CHANGES)
    for name, mv in views.items():
        assert mv.refresh().mode == "noop", name


def test_joined_aggregates_meet_the_other_units_once_per_change(spark: SparkSession, db: str) -> None:
    """An aggregate's delta (-Pre and +Post of its changed groups) joins the other units as one
    branch, not one per sign: half the intermediate results a refresh computes."""
    for stmt in BASE:
        spark.sql(stmt)
    reports: Dict[str, List[Any]] = {}
    follow_changes(spark, {"joined_aggregates": JOINED_AGGREGATES}, CHANGES, reports=reports)
    branches = [b for r in reports["joined_aggregates"] for b in r.branches]
    on_groups = [b for b in branches if "on changed groups" in b]
    assert on_groups, branches
    assert all("-Pre(" in b and "+Post(" in b for b in on_groups), on_groups


# Written with r1 and r2 first, which share no condition: t joins both.
COMMA_JOINS = {
    "comma_rows": "SELECT r1.s, r2.a, t.c FROM r r1, r r2, t WHERE r1.b = t.b AND r2.b = t.b AND t.c > 10",
    "comma_agg": "SELECT r1.s, count(*) AS n, sum(r2.x) AS sx FROM r r1, r r2, t "
                 "WHERE r1.b = t.b AND t.b = r2.b GROUP BY r1.s",
}


def test_comma_joins_meet_each_table_by_a_condition(spark: SparkSession, db: str) -> None:
    """A FROM list whose first tables share no condition: each change is joined along the
    conditions (r1, then t, then r2), never with all of a table it shares nothing with."""
    for stmt in BASE:
        spark.sql(stmt)
    reports: Dict[str, List[Any]] = {}
    follow_changes(spark, COMMA_JOINS, CHANGES, reports=reports)
    for name, rs in reports.items():
        branches = [b for r in rs for b in r.branches]
        assert branches, name
        for b in branches:
            terms = b.split(" x ")
            assert len(terms) == 3 and terms[1].endswith(".t)"), (name, b)


def test_min_recomputes_only_groups_whose_extreme_was_deleted(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE m (g INT, v INT) USING delta")
    spark.sql("INSERT INTO m VALUES (1, 1), (1, 5), (2, 2), (2, 9), (3, 3)")
    q = "SELECT g, min(v) AS lo, max(v) AS hi FROM m GROUP BY g"
    spark.sql(f"CREATE MATERIALIZED VIEW mm AS {q}")
    spark.sql("DELETE FROM m WHERE v IN (1, 9)")  # the minimum of 1, the maximum of 2
    spark.sql("INSERT INTO m VALUES (3, 0), (3, 10)")
    MaterializedView.for_name(spark, "mm").refresh()
    assert_matches_query(spark, "mm", q)
    assert {r.g: (r.lo, r.hi) for r in spark.table("mm").collect()} == {1: (5, 5), 2: (2, 2), 3: (0, 10)}


def test_sum_of_nulls_and_empty_groups(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE n (g INT, v BIGINT) USING delta")
    spark.sql("INSERT INTO n VALUES (1, NULL), (1, NULL), (2, 5)")
    q = "SELECT g, sum(v) AS s, avg(v) AS a, count(v) AS c, count(*) AS k FROM n GROUP BY g"
    spark.sql(f"CREATE MATERIALIZED VIEW nv AS {q}")
    spark.sql("DELETE FROM n WHERE g = 2")
    spark.sql("INSERT INTO n VALUES (1, 3)")
    MaterializedView.for_name(spark, "nv").refresh()
    assert [tuple(r) for r in spark.table("nv").collect()] == [(1, 3, 3.0, 1, 3)]
    spark.sql("DELETE FROM n WHERE v = 3")
    MaterializedView.for_name(spark, "nv").refresh()
    assert [tuple(r) for r in spark.table("nv").collect()] == [(1, None, None, 0, 2)]
    assert_matches_query(spark, "nv", q)


def test_global_aggregate_over_empty_table(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE e (v INT) USING delta")
    q = "SELECT count(*) AS n, sum(v) AS s, avg(v) AS a, max(v) AS m FROM e"
    spark.sql(f"CREATE MATERIALIZED VIEW ev AS {q}")
    assert [tuple(r) for r in spark.table("ev").collect()] == [(0, None, None, None)]
    spark.sql("INSERT INTO e VALUES (4), (6)")
    MaterializedView.for_name(spark, "ev").refresh()
    assert [tuple(r) for r in spark.table("ev").collect()] == [(2, 10, 5.0, 6)]
    spark.sql("DELETE FROM e")
    MaterializedView.for_name(spark, "ev").refresh()
    assert [tuple(r) for r in spark.table("ev").collect()] == [(0, None, None, None)]


def test_insert_then_delete_in_one_interval_cancels(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE c (k INT) USING delta")
    spark.sql("INSERT INTO c VALUES (1)")
    spark.sql("CREATE MATERIALIZED VIEW cv AS SELECT k, count(*) AS n FROM c GROUP BY k")
    spark.sql("INSERT INTO c VALUES (2)")
    spark.sql("DELETE FROM c WHERE k = 2")
    report = MaterializedView.for_name(spark, "cv").refresh()
    assert report.source_rows_changed == 0
    assert report.view_rows_changed == 0
    assert_matches_query(spark, "cv", "SELECT k, count(*) AS n FROM c GROUP BY k")


def test_view_over_view_and_mv_over_mv(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO base VALUES (1, 1), (1, 2), (2, 3)")
    spark.sql("CREATE VIEW plain AS SELECT k, v * 10 AS w FROM base")
    spark.sql("CREATE MATERIALIZED VIEW agg1 AS SELECT k, sum(w) AS sw FROM plain GROUP BY k")
    spark.sql("CREATE MATERIALIZED VIEW agg2 AS "
              "SELECT sw > 20 AS big, count(*) AS n FROM agg1 GROUP BY sw > 20")
    spark.sql("INSERT INTO base VALUES (2, 5), (3, 1)")
    MaterializedView.for_name(spark, "agg1").refresh()
    MaterializedView.for_name(spark, "agg2").refresh()
    assert_matches_query(spark, "agg1", "SELECT k, sum(w) AS sw FROM plain GROUP BY k")
    assert_matches_query(spark, "agg2", "SELECT sw > 20 AS big, count(*) AS n FROM agg1 GROUP BY sw > 20")


def test_extreme_inserted_and_deleted_in_one_batch(spark: SparkSession, db: str) -> None:
    """Pre(r) x D(t) inserts r's a=0 into the new group while D(r) x Post(t) deletes it: the
    folded minimum 0 was deleted in the same batch and must not survive (found by the kill
    tests)."""
    spark.sql("CREATE TABLE r (a INT, b INT) USING delta")
    spark.sql("CREATE TABLE t (b INT, c INT) USING delta")
    spark.sql("INSERT INTO r VALUES (0, 0), (3, 0), (6, 0), (1, 1)")
    spark.sql("INSERT INTO t VALUES (0, 0), (1, 10)")
    q = ("SELECT t.c, min(r.a) AS lo, max(r.a) AS hi, count(*) AS n "
         "FROM r JOIN t ON r.b = t.b GROUP BY t.c")
    spark.sql(f"CREATE MATERIALIZED VIEW x AS {q}")
    spark.sql("DELETE FROM r WHERE a IN (0, 6)")
    spark.sql("UPDATE t SET c = 1 WHERE b = 0")
    MaterializedView.for_name(spark, "x").refresh()
    assert sorted(tuple(r) for r in spark.table("x").collect()) == [(1, 3, 3, 1), (10, 1, 1, 1)]
    assert_matches_query(spark, "x", q)
