"""Outer, semi, anti and existence joins, subquery expressions, windows with PARTITION BY,
common table expressions, set operations, grouping sets, generators and nested types,
maintained incrementally and compared with recomputation after every refresh.

The changes are chosen for the hard cases: a key's first match arriving and its last leaving
in one refresh, NULL join keys on both sides, duplicate rows, updates of join keys, a NOT IN
subquery gaining and losing a NULL, a table emptied and refilled.
"""

from __future__ import annotations

from typing import Dict, List

import pytest
from ivm_testing import assert_matches_query, condition, follow_changes, refused, session_confs
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, RefreshReport

BASE = [
    "CREATE TABLE r (a INT, b INT, x DOUBLE, s STRING) USING delta",
    "CREATE TABLE t (b INT, c INT) USING delta",
    "INSERT INTO r VALUES (1, 1, 1.5, 'p'), (2, 1, 2.5, 'q'), (3, 2, NULL, 'p'), (4, NULL, 4.0, NULL), "
    "(1, 1, 1.5, 'p'), (5, 5, 0.5, 'q')",
    "INSERT INTO t VALUES (1, 10), (1, 11), (2, 20), (3, 30), (NULL, 40)",
]

CHANGES: List[List[str]] = [
    # key 5 gets its first match, key 2 loses its last: in one refresh
    ["INSERT INTO t VALUES (5, 50)", "DELETE FROM t WHERE b = 2"],
    # a new key on both sides at once; a duplicate row; a NULL key on the left
    ["INSERT INTO r VALUES (6, 6, 6.0, 'p'), (1, 1, 1.5, 'p'), (7, NULL, 7.0, 'q')",
     "INSERT INTO t VALUES (6, 60), (NULL, 41)"],
    # an update of a join key on each side
    ["UPDATE r SET b = 3 WHERE a = 2", "UPDATE t SET b = 2 WHERE c = 11"],
    # t's NULL keys leave (NOT IN then matches again), a match of key 1 leaves; r emptied
    ["DELETE FROM t WHERE b IS NULL OR c = 10", "DELETE FROM r"],
    # r refilled
    ["INSERT INTO r VALUES (8, 1, 2.0, 'p'), (9, 2, 3.0, 'q'), (9, 2, 3.0, 'q'), (10, NULL, NULL, 'p')",
     "INSERT INTO t VALUES (NULL, 42)"],
]

QUERIES: Dict[str, str] = {
    "left_join": "SELECT r.a, r.b, t.c FROM r LEFT JOIN t ON r.b = t.b",
    "right_join": "SELECT r.a, t.b, t.c FROM r RIGHT JOIN t ON r.b = t.b",
    "full_join": "SELECT r.a, r.b AS rb, t.b AS tb, t.c FROM r FULL OUTER JOIN t ON r.b = t.b",
    "left_join_twice": "SELECT r.a, t1.c AS c1, t2.c AS c2 FROM r LEFT JOIN t t1 ON r.b = t1.b "
                       "LEFT JOIN t t2 ON t1.c + 1 = t2.c",
    # TPC-H Q13's shape: a left join under an aggregate under an aggregate
    "q13_shape": "SELECT n, count(*) AS customers FROM (SELECT r.a, count(t.c) AS n FROM r "
                 "LEFT JOIN t ON r.b = t.b AND t.c > 10 GROUP BY r.a) GROUP BY n",
    "outer_join_no_equi_key": "SELECT r.a, t.c FROM r LEFT JOIN t ON r.b < t.b",
    "exists": "SELECT a, b FROM r WHERE EXISTS (SELECT 1 FROM t WHERE t.b = r.b AND t.c > 10)",
    "not_exists": "SELECT a, s FROM r WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.b = r.b)",
    "in": "SELECT a, s FROM r WHERE b IN (SELECT b FROM t WHERE c < 40)",
    "not_in_with_nulls": "SELECT a, s FROM r WHERE b NOT IN (SELECT b FROM t)",
    "exists_or": "SELECT a FROM r WHERE EXISTS (SELECT 1 FROM t WHERE t.b = r.b) OR a > 3",
    "semi_join_agg": "SELECT s, count(*) AS n, sum(x) AS sx FROM r "
                     "WHERE b IN (SELECT b FROM t) GROUP BY s",
    "scalar_uncorrelated": "SELECT a, x FROM r WHERE x > (SELECT avg(x) FROM r)",
    # TPC-H Q22's shape: an uncorrelated scalar subquery on the same table, under a NOT EXISTS
    "scalar_not_exists": "SELECT s, count(*) AS n, sum(x) AS sx FROM r WHERE x > (SELECT avg(x) FROM r "
                         "WHERE x > 1) AND NOT EXISTS (SELECT 1 FROM t WHERE t.b = r.b) GROUP BY s",
    # the value itself among the view's columns: every row changes when it moves
    "scalar_value_in_select": "SELECT a, x - (SELECT avg(x) FROM r) AS dev, (SELECT max(c) FROM t) AS mc "
                              "FROM r",
    "scalar_max": "SELECT s, sum(x) AS sx FROM r GROUP BY s HAVING sum(x) >= (SELECT max(c) / 10 FROM t)",
    # TPC-H Q17's shape: a correlated scalar subquery on the same table
    "scalar_correlated": "SELECT a, x FROM r WHERE x > (SELECT 0.5 * avg(r2.x) FROM r r2 WHERE r2.b = r.b)",
    "scalar_in_select": "SELECT a, (SELECT max(c) FROM t WHERE t.b = r.b) AS mc FROM r",
    "scalar_count": "SELECT a, (SELECT count(*) FROM t WHERE t.b = r.b) AS matches FROM r",
    # LATERAL subqueries, as Spark decorrelates them: a join, and an aggregate joined back
    "lateral": "SELECT r.a, l.c FROM r JOIN LATERAL (SELECT c FROM t WHERE t.b = r.b AND t.c > r.a * 5) l",
    "lateral_agg": "SELECT r.a, l.sc FROM r, LATERAL (SELECT sum(c) AS sc FROM t WHERE t.b = r.b) l",
    "row_number": "SELECT b, a, x, row_number() OVER (PARTITION BY b ORDER BY a, x, s) AS rn FROM r",
    "top_k": "SELECT b, a, rk FROM (SELECT b, a, rank() OVER (PARTITION BY b ORDER BY x DESC) AS rk "
             "FROM r) WHERE rk <= 1",
    "running_sum": "SELECT b, a, sum(x) OVER (PARTITION BY b ORDER BY a) AS run FROM r",
    "window_over_join": "SELECT t.c, r.a, count(*) OVER (PARTITION BY t.c) AS n FROM r JOIN t ON r.b = t.b",
    "cte": "WITH g AS (SELECT b, count(*) AS n FROM r GROUP BY b) "
                 "SELECT g1.b, g2.n FROM g g1 JOIN g g2 ON g1.b = g2.b",
    "explode": "SELECT a, e FROM r LATERAL VIEW explode(array(a, b, b)) v AS e",
    # set operations, as Spark plans them: semi and anti joins under DISTINCT, signed counts
    "intersect": "SELECT b FROM r INTERSECT SELECT b FROM t",
    "intersect_all": "SELECT b FROM r INTERSECT ALL SELECT b FROM t",
    "except": "SELECT b FROM r EXCEPT SELECT b FROM t",
    "except_all": "SELECT b FROM r EXCEPT ALL SELECT b FROM t",
    "in_except": "SELECT a, s FROM r WHERE b IN (SELECT b FROM t EXCEPT SELECT c - 9 FROM t)",
    # grouping sets: every row once per set
    "rollup": "SELECT b, s, count(*) AS n, sum(x) AS sx FROM r GROUP BY ROLLUP(b, s)",
    "cube": "SELECT b, s, grouping_id() AS g, max(a) AS ma FROM r GROUP BY CUBE(b, s)",
    "nested_type_rows": "SELECT array(a, b) AS arr, named_struct('x', x, 's', s) AS st FROM r",
}


def test_every_operator_follows_changes(spark: SparkSession, db: str) -> None:
    """Each view is created incremental (INCREMENTAL STRICT would refuse otherwise) and equals
    its query, counts included, after every refresh; every refresh runs incrementally. Tables
    read for changed keys are read as large ones are, whatever their size: once per refresh, and
    kept in memory by key from the second refresh that reads them on (spark.ivm.sharedReads,
    spark.ivm.residentRows)."""
    for stmt in BASE:
        spark.sql(stmt)
    with session_confs(spark, {"spark.ivm.sharedReads.minTableBytes": "0"}):
        follow_changes(spark, QUERIES, CHANGES, "REFRESH POLICY INCREMENTAL STRICT")


# Steps that change only r, the left side of the joins of LEFT_LINEAR: NULL keys, duplicate rows,
# keys that match no row of t and keys that match two, a join key updated, rows deleted.
LEFT_ONLY_CHANGES: List[List[str]] = [
    ["INSERT INTO r VALUES (6, 3, 6.0, 'p'), (6, 3, 6.0, 'p'), (7, NULL, 7.0, 'q'), (8, 9, 8.0, 'q')"],
    ["UPDATE r SET b = 1 WHERE a = 3", "DELETE FROM r WHERE a = 1"],
    ["DELETE FROM r WHERE b IS NULL OR b = 9", "INSERT INTO r VALUES (1, 1, 1.5, 'p'), (2, 2, NULL, 'q')"],
]
LEFT_LINEAR = ["left_join", "left_join_twice", "q13_shape", "outer_join_no_equi_key", "not_exists",
               "not_in_with_nulls", "semi_join_agg"]


def test_joins_linear_in_their_left_side_follow_its_changes(spark: SparkSession, db: str) -> None:
    """Where only the left side of a left outer, semi, anti or existence join changed, its
    changed rows meet the right side as it is (D(r) x Post(t)), where recomputing the changed
    keys would read every left row of those keys at Pre and at Post; each view equals its query
    after every refresh, through an aggregate above the join (recomputed by the same keys) and
    a NOT IN whose subquery holds a NULL."""
    for stmt in BASE:
        spark.sql(stmt)
    reports: Dict[str, List[RefreshReport]] = {}
    follow_changes(spark, {q: QUERIES[q] for q in LEFT_LINEAR}, LEFT_ONLY_CHANGES,
                   "REFRESH POLICY INCREMENTAL STRICT", reports)
    for name in ("left_join", "outer_join_no_equi_key", "not_in_with_nulls"):
        branches = [b for r in reports[name] for b in r.branches]
        assert branches and all(b.startswith("D(") and " x Post(" in b for b in branches), (name, branches)


# Semi, anti and existence joins on one equi-join key over one table under filters: their right
# side's counts per key are kept, so a refresh reads those (True) instead of the table's rows.
# The others keep reading rows: NOT IN has no equi-join key (its NULL semantics reach across
# keys), EXCEPT (and INTERSECT) join null-safely, and an EXCEPT under IN is not one table.
COUNTED = {"exists": True, "not_exists": True, "in": True, "scalar_not_exists": True,
           "not_in_with_nulls": False, "except": False, "in_except": False, "exists_between": True,
           "in_list_one": True, "in_list_two": True, "exists_dotted_key": True}
COUNTED_QUERIES = {
    **{q: QUERIES[q] for q in COUNTED if q in QUERIES},
    # a filter the driver evaluates only once BETWEEN is replaced, as Spark's optimizer does
    "exists_between": "SELECT a, b FROM r WHERE EXISTS (SELECT 1 FROM t WHERE t.b = r.b "
                      "AND t.c BETWEEN 10 AND 45)",
    # two filters whose text differs only in quotes: their counts must not be shared
    "in_list_one": "SELECT a FROM r WHERE b IN (SELECT r2.b FROM r r2 WHERE r2.s IN ('p,q'))",
    "in_list_two": "SELECT a FROM r WHERE b IN (SELECT r2.b FROM r r2 WHERE r2.s IN ('p', 'q'))",
    # a key column whose name holds a dot
    "exists_dotted_key": "SELECT a FROM r WHERE EXISTS (SELECT 1 FROM d WHERE d.`k.x` = r.b)",
}


def test_semi_and_anti_joins_read_match_counts(spark: SparkSession, db: str) -> None:
    """With every table counted (no size threshold), the joins of COUNTED follow the same hard
    changes (a key's first match arriving and its last leaving in one refresh, NULL keys, join
    keys updated, a table emptied) from the counts per key (made the second time they are asked
    for, then kept between refreshes and shared by the views that count `t` alike: the first
    view's refresh moves them to the new version, the next ones find them there), and equal
    their queries after every refresh."""
    for stmt in BASE + ["CREATE TABLE d (`k.x` INT, v INT) USING delta",
                        "INSERT INTO d VALUES (1, 1), (2, 2), (NULL, 3), (6, 4)"]:
        spark.sql(stmt)
    reports: Dict[str, List[RefreshReport]] = {}
    with session_confs(spark, {"spark.ivm.keyCounts.minTableBytes": "0"}):
        follow_changes(spark, COUNTED_QUERIES, CHANGES, "REFRESH POLICY INCREMENTAL STRICT", reports)
    for name, counted in COUNTED.items():
        from_counts = [b for r in reports[name] for b in r.branches if "right side from the rows of" in b]
        assert bool(from_counts) == counted, (name, [r.branches for r in reports[name]])


@pytest.mark.parametrize("measure", ["DOUBLE", "DECIMAL(12, 2)"])
def test_a_scalar_subquery_reads_only_the_rows_its_change_decides(spark: SparkSession, db: str,
                                                                   measure: str) -> None:
    """When the value of an uncorrelated scalar subquery moves, only the rows for which the old
    and the new value decide differently are read as Pre x D(subquery); when it does not move,
    that term is not there at all. Over a decimal the average is kept as a running sum and count
    from one refresh to the next, moved by each change; over a double it is recomputed."""
    query = "SELECT g, count(*) AS n, sum(x) AS sx FROM sc WHERE x > (SELECT avg(x) FROM sc) GROUP BY g"
    spark.sql(f"CREATE TABLE sc (g STRING, x {measure}) USING delta")
    spark.sql(f"INSERT INTO sc SELECT CAST(id % 3 AS STRING), CAST(id AS {measure}) FROM range(1, 11)")
    mv = MaterializedView.create(spark, "above_avg", query)
    steps = [("INSERT INTO sc VALUES ('0', 5.5)", False),  # the average stays 5.5
             ("INSERT INTO sc VALUES ('1', 60.5), (NULL, 2.0)", True),  # it moves to 10
             ("DELETE FROM sc WHERE x > 60", True),  # and back below the rows it passed
             ("UPDATE sc SET x = 11.0 WHERE x = 5.5", True),
             ("DELETE FROM sc", True),  # no rows: the average is NULL
             ("INSERT INTO sc VALUES ('2', 3.25), ('0', 1.0), ('0', NULL)", True)]
    for statement, moves in steps:
        spark.sql(statement)
        report = mv.refresh()
        decided = [b for b in report.branches if "decide differently" in b]
        assert report.mode == "incremental" and len(decided) == (1 if moves else 0), (
            statement, report.branches)
        assert_matches_query(spark, "above_avg", query)


# DBToaster's employee queries 38 and 64 (65 and 66 are 64 with UNION ALL and INTERSECT): scalar
# subqueries that are not aggregates, which return the value of their one row, NULL when they
# have none, and an error when they have more.
EMPLOYEES = [
    "CREATE TABLE emp (id INT, job INT, dept INT, salary DOUBLE) USING delta",
    "CREATE TABLE dept (id INT, name STRING) USING delta",
    "CREATE TABLE job (id INT, fn STRING) USING delta",
    "INSERT INTO emp VALUES (1, 1, 10, 100.0), (2, 2, 10, 200.0), (3, 1, 20, 150.0), (4, 3, NULL, 90.0), "
    "(5, 2, 30, 120.0), (6, 3, 20, NULL)",
    "INSERT INTO dept VALUES (20, 'RESEARCH'), (30, 'ACCOUNTING')",
    "INSERT INTO job VALUES (1, 'clerk'), (2, 'analyst'), (3, 'manager')",
]
ONE_ROW_QUERIES = {
    "q38": "SELECT * FROM emp e WHERE e.dept = (SELECT d.id FROM dept d WHERE d.name = 'SALES' "
           "GROUP BY d.id)",
    "q64": "SELECT fn FROM job WHERE id IN (SELECT job FROM emp WHERE dept = (SELECT id FROM dept "
           "WHERE name = 'SALES')) UNION SELECT fn FROM job WHERE id IN (SELECT job FROM emp "
           "WHERE dept = (SELECT id FROM dept WHERE name = 'ACCOUNTING'))",
    # in SELECT, of a string, over the table the view reads (a NULL value is a row too)
    "in_select": "SELECT id, salary, (SELECT name FROM dept WHERE id = 10) AS d10, "
                 "(SELECT salary FROM emp WHERE job = 3 AND dept = 20) AS top FROM emp",
    # correlated, not aggregated: Spark's single join, which fails on a second match
    "correlated": "SELECT e.id, (SELECT d.name FROM dept d WHERE d.id = e.dept) AS dname FROM emp e",
}
ONE_ROW_CHANGES: List[List[str]] = [
    # SALES appears: its subqueries go from no row (NULL) to one
    ["INSERT INTO dept VALUES (10, 'SALES')"],
    # SALES changes its id (its one row deleted and inserted) and its employees follow; the
    # self-read subquery's row gets a value
    ["UPDATE dept SET id = 11 WHERE name = 'SALES'", "UPDATE emp SET dept = 11 WHERE dept = 10",
     "UPDATE emp SET salary = 500.0 WHERE id = 6"],
    # RESEARCH gains a job
    ["INSERT INTO emp VALUES (7, 2, 20, 80.0)"],
    # SALES leaves: no row again; ACCOUNTING's employees leave
    ["DELETE FROM dept WHERE name = 'SALES'", "DELETE FROM emp WHERE dept = 30"],
]


def test_scalar_subqueries_of_at_most_one_row_follow_changes(spark: SparkSession, db: str) -> None:
    """A scalar subquery that is not an aggregate is maintained as the one-row aggregate that
    gives its value (NULL over no rows); one that comes to return two rows fails the refresh as
    the query fails, leaves the view as it was, and is maintained again once it has one."""
    for stmt in EMPLOYEES:
        spark.sql(stmt)
    views = follow_changes(spark, ONE_ROW_QUERIES, ONE_ROW_CHANGES, "REFRESH POLICY INCREMENTAL STRICT")
    before = sorted(spark.table("q38").collect())
    spark.sql("INSERT INTO dept VALUES (12, 'SALES'), (13, 'SALES')")
    spark.sql("INSERT INTO emp VALUES (8, 1, 12, 10.0)")
    for query in (ONE_ROW_QUERIES["q38"], "REFRESH MATERIALIZED VIEW q38"):
        with pytest.raises(Exception, match="SCALAR_SUBQUERY_TOO_MANY_ROWS"):
            spark.sql(query).collect()
    assert sorted(spark.table("q38").collect()) == before
    spark.sql("DELETE FROM dept WHERE id = 13")
    # the correlated one fails only for a row that has two matches
    spark.sql("INSERT INTO dept VALUES (20, 'LAB')")
    with pytest.raises(Exception, match="SCALAR_SUBQUERY_TOO_MANY_ROWS"):
        views["correlated"].refresh()
    spark.sql("DELETE FROM dept WHERE name = 'LAB'")
    for name, mv in views.items():
        assert mv.refresh().mode == "incremental"
        assert_matches_query(spark, name, ONE_ROW_QUERIES[name])
    assert [r.id for r in spark.table("q38").collect()] == [8]


# ORDER BY ... LIMIT / OFFSET at the top, ordering rows completely (under ties the view and its
# query may pick different rows, both right: test_global_windows checks how the view picks).
TOP_K_QUERIES = {
    "top_groups": "SELECT b, sum(x) AS sx, count(*) AS n FROM r GROUP BY b "
                  "ORDER BY sx DESC NULLS LAST, b NULLS FIRST LIMIT 2",
    "top_rows_offset": "SELECT a, b, x FROM r ORDER BY x DESC NULLS FIRST, a, b NULLS LAST LIMIT 3 OFFSET 1",
    "top_join": "SELECT t.c, r.a FROM r JOIN t ON r.b = t.b ORDER BY c DESC, a LIMIT 2",
    "offset_only": "SELECT s, count(*) AS n FROM r GROUP BY s ORDER BY n, s OFFSET 1",
    # Ordered by what the view's columns give: an expression of them, a column under its old
    # name, an expression the SELECT computes.
    "top_by_expression": "SELECT b, sum(x) AS sx, count(*) AS n FROM r GROUP BY b "
                         "ORDER BY sx / n DESC NULLS LAST, b NULLS FIRST LIMIT 2",
    "top_by_old_name": "SELECT a AS id, b, x FROM r ORDER BY a DESC, b, x LIMIT 3",
    "top_by_computed": "SELECT upper(s) AS us, count(*) AS n FROM r GROUP BY upper(s) "
                       "ORDER BY upper(s) DESC NULLS LAST LIMIT 2",
    # A LIMIT no smaller than the one row of a global aggregate changes nothing.
    "one_row_limit": "SELECT sum(x) AS total, count(*) AS n FROM r LIMIT 5",
}


def test_top_k_views_follow_changes(spark: SparkSession, db: str) -> None:
    """A top-k view keeps the rows under its ORDER BY ... LIMIT and applies them when read, so
    changes inside and outside the top k, deletes of the top rows and a table emptied and
    refilled are all refreshed incrementally; EXPLAIN and DESCRIBE say so."""
    for stmt in BASE:
        spark.sql(stmt)
    follow_changes(spark, TOP_K_QUERIES, CHANGES, "REFRESH POLICY INCREMENTAL STRICT")
    plan = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW top_groups").collect())
    assert ("Top rows: ORDER BY sx DESC NULLS LAST, b ASC NULLS FIRST LIMIT 2, applied when the view "
            "is read") in plan
    described = MaterializedView.for_name(spark, "top_by_expression").describe()["info"]
    assert described["Top rows"].startswith(
        "ORDER BY (sx / CAST(n AS DOUBLE)) DESC NULLS LAST, b ASC NULLS FIRST LIMIT 2"), described
    assert "Top rows" not in MaterializedView.for_name(spark, "one_row_limit").describe()["info"]
    described = MaterializedView.for_name(spark, "top_rows_offset").describe()["info"]
    assert described["Top rows"].startswith(
        "ORDER BY x DESC NULLS FIRST, a ASC NULLS FIRST, b ASC NULLS LAST LIMIT 3 OFFSET 1"), described
    # Lookups by an access pattern answer from the top rows, never from the rows kept under them.
    spark.sql("CREATE MATERIALIZED VIEW top_of ACCESS BY (b) AS SELECT r.b, t.c FROM r JOIN t "
              "ON r.b = t.b ORDER BY c DESC, b LIMIT 2")
    top_of = MaterializedView.for_name(spark, "top_of")
    assert top_of.lookup_structure().startswith("no view trees"), top_of.lookup_structure()
    top = spark.table("top_of").collect()
    assert len(top) == 2 and [r.c for r in top_of.lookup(b=top[0].b)] == [r.c for r in top if r.b == top[0].b]
    # A view over a top-k view reads its top rows (it is recomputed: LIMIT is below its top).
    over = "SELECT sum(sx) AS total, count(*) AS n FROM top_groups"
    spark.sql(f"CREATE MATERIALIZED VIEW over_top AS {over}")
    spark.sql("INSERT INTO r VALUES (11, 9, 100.0, 'p'), (12, 8, 50.0, 'q')")
    spark.sql("REFRESH MATERIALIZED VIEW over_top CASCADE")  # top_groups first
    assert_matches_query(spark, "top_groups", TOP_K_QUERIES["top_groups"])
    assert_matches_query(spark, "over_top", over)
    assert spark.table("over_top").first().n == 2


def test_explain_shows_how_each_operator_is_maintained(spark: SparkSession, db: str) -> None:
    for stmt in BASE:
        spark.sql(stmt)
    spark.sql(f"CREATE MATERIALIZED VIEW lj AS {QUERIES['left_join']}")
    spark.sql(f"CREATE MATERIALIZED VIEW w AS {QUERIES['row_number']}")
    spark.sql("INSERT INTO t VALUES (5, 50)")
    spark.sql("INSERT INTO r VALUES (5, 5, 1.0, 'z')")
    plan = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW lj").collect())
    assert "-Pre(Join over" in plan and "on changed keys" in plan, plan
    plan = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW w").collect())
    assert "-Pre(Window over" in plan and "on changed partitions" in plan, plan


def test_views_over_views_of_every_shape(spark: SparkSession, db: str) -> None:
    """A view reads another view's rows (with their multiplicities), whatever its shape."""
    for stmt in BASE:
        spark.sql(stmt)
    spark.sql("CREATE MATERIALIZED VIEW rows_v AS SELECT r.a, t.c FROM r JOIN t ON r.b = t.b")
    spark.sql("CREATE MATERIALIZED VIEW agg_v AS SELECT b, count(*) AS n FROM r GROUP BY b")
    spark.sql("CREATE MATERIALIZED VIEW left_v AS SELECT r.a, t.c FROM r LEFT JOIN t ON r.b = t.b")
    upper = {
        "over_rows": "SELECT c, count(*) AS n FROM rows_v GROUP BY c",
        "over_rows_rows": "SELECT a FROM rows_v WHERE c > 10",
        "over_left": "SELECT a, count(c) AS matched FROM left_v GROUP BY a",
        "over_two": "SELECT v.a, g.n FROM rows_v v JOIN agg_v g ON v.a = g.b",
    }
    for name, query in upper.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} REFRESH POLICY INCREMENTAL STRICT AS {query}")
    for step in CHANGES:
        for stmt in step:
            spark.sql(stmt)
        for name, query in upper.items():
            spark.sql(f"REFRESH MATERIALIZED VIEW {name} CASCADE")
            assert_matches_query(spark, name, query)


def test_refused_shapes_say_why(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE m (k INT, tags MAP<STRING, INT>) USING delta")
    spark.sql("INSERT INTO m VALUES (1, map('a', 1))")
    error = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW mv REFRESH POLICY INCREMENTAL STRICT AS SELECT k, tags FROM m"))
    assert condition(error) == "IVM_NOT_INCREMENTALIZABLE"
    assert "MAP column tags" in str(error) and "map_entries(tags)" in str(error)
    # The suggested rewrite is maintained; a MAP computed in an aggregate's output is too.
    q = "SELECT k, map_entries(tags) AS e FROM m"
    spark.sql(f"CREATE MATERIALIZED VIEW me REFRESH POLICY INCREMENTAL STRICT AS {q}")
    q2 = "SELECT k, map('n', count(*)) AS stats FROM m GROUP BY k"
    spark.sql(f"CREATE MATERIALIZED VIEW ms REFRESH POLICY INCREMENTAL STRICT AS {q2}")
    spark.sql("INSERT INTO m VALUES (2, map('b', 2)), (1, map('c', 3))")
    spark.sql("DELETE FROM m WHERE k = 1 AND tags['a'] = 1")
    for name, query in (("me", q), ("ms", q2)):
        assert MaterializedView.for_name(spark, name).refresh().mode == "incremental"
        assert_matches_query(spark, name, query)
    # A view led by a MAP column is recomputed, and its files are not ordered by the MAP (Spark
    # cannot order one).
    spark.sql("CREATE MATERIALIZED VIEW mf AS SELECT tags, k FROM m")
    spark.sql("INSERT INTO m VALUES (3, map('d', 4))")
    assert MaterializedView.for_name(spark, "mf").refresh().mode == "full"
    assert sorted(r.k for r in spark.table("mf").collect()) == sorted(r.k for r in spark.table("m").collect())


@pytest.mark.parametrize("query, operator", [
    ("SELECT a, count(*) AS n FROM (SELECT a, sum(x) OVER (ORDER BY a) AS run FROM r) GROUP BY a",
     "window function without PARTITION BY"),
    ("SELECT a FROM r WHERE size((SELECT map(b, c) FROM t WHERE c > 30)) > 0", "not a global aggregate"),
    ("SELECT b, sum(x) / (SELECT sum(x) FROM r) AS share FROM r GROUP BY b", "subquery expression"),
    ("SELECT b FROM r GROUP BY b ORDER BY sum(x) DESC LIMIT 2", "a value the view does not select"),
    ("SELECT a, b FROM r LIMIT 2", "Without ORDER BY any rows of the query would do"),
])
def test_operators_that_stay_refused(spark: SparkSession, db: str, query: str, operator: str) -> None:
    for stmt in BASE:
        spark.sql(stmt)
    error = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS {query}"))
    assert condition(error) == "IVM_NOT_INCREMENTALIZABLE"
    assert operator in str(error), str(error)
