"""pg_ivm's regression queries, restated in Spark SQL, as differential checks of spark-ivm.

Each query becomes a materialized view over Delta tables; a sequence of inserts, updates and
deletes follows, and after each step the view is refreshed (as its refresh policy, AUTO,
decides) and compared with its query, counts included. The queries are those of pg_ivm's
`pg_ivm.sql` (the ones it maintains and the ones it refuses, with what Spark adds) and its
three-way outer joins of `outer_join.sql`. Not part of `make test` (about 30 minutes):

    .venv/bin/python tests/compat/pg_ivm_queries.py [name ...]

Views over `rand()` or TABLESAMPLE differ from any other run of their query: for them, what is
checked is that every refresh recomputes them in full.
"""

# ruff: noqa: E501 (one SQL statement per line reads better than wrapped)
from __future__ import annotations

import os
import sys
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import assert_matches_query, make_session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402

QUERIES: Dict[str, str] = {
    "join_using": "SELECT i,j,k FROM a INNER JOIN b USING(i)",
    "dup": "SELECT j FROM a",
    "dist": "SELECT DISTINCT j FROM a",
    "agg": "SELECT i, SUM(j), COUNT(i), AVG(j) FROM a GROUP BY i",
    "aggstar": "SELECT i, SUM(j), COUNT(*) FROM a GROUP BY i",
    "global": "SELECT SUM(j), COUNT(j), AVG(j) FROM a",
    "minmax": "SELECT i, MIN(j), MAX(j) FROM a GROUP BY i",
    "gminmax": "SELECT MIN(j), MAX(j) FROM a",
    "self": "SELECT t1.v AS v1, t2.v AS v2 FROM base_t AS t1 JOIN base_t AS t2 ON t1.i = t2.i",
    "exists": "SELECT x.i, x.j FROM a x WHERE EXISTS(SELECT 1 FROM b y WHERE x.i = y.i)",
    "exists2": "SELECT x.i, x.j FROM a x WHERE EXISTS(SELECT 1 FROM b y WHERE x.i = y.i) AND x.i > 2",
    "exists_or": "SELECT x.i, x.j FROM a x WHERE EXISTS(SELECT 1 FROM b y WHERE x.i = y.i) OR x.i > 2",
    "nested_exists": "SELECT x.j FROM a x WHERE EXISTS(SELECT 1 FROM a a2 WHERE EXISTS(SELECT 1 FROM b y WHERE a2.i = y.i))",
    "from_sub": "SELECT x.i, x.j FROM a x, (SELECT * FROM b) y WHERE x.i = y.i",
    "agg_sub": "SELECT x.i, x.j FROM a x, (SELECT i, COUNT(*) AS c FROM b GROUP BY i) y WHERE x.i = y.i",
    "dist_sub": "SELECT x.i, x.j FROM a x, (SELECT DISTINCT i FROM b) y WHERE x.i = y.i",
    "in_sub": "SELECT i, j FROM a WHERE i IN (SELECT i FROM b WHERE k < 103)",
    "notin_sub": "SELECT i, j FROM a WHERE i NOT IN (SELECT i FROM b WHERE k < 103)",
    "scalar_agg": "SELECT i, j, (SELECT max(k) FROM b) AS mk FROM a",
    "scalar_corr": "SELECT i, j, (SELECT max(k) FROM b WHERE b.i = a.i) AS mk FROM a",
    "cte": "WITH y AS (SELECT * FROM b) SELECT x.i, x.j FROM a x, y WHERE x.i = y.i",
    "cte2": "WITH x AS (SELECT * FROM a), y AS (SELECT * FROM b) SELECT x.i, x.j FROM x, y WHERE x.i = y.i",
    "cte_nested": "WITH y AS (SELECT * FROM b) SELECT v.i, v.j FROM (WITH x AS (SELECT * FROM a) SELECT x.i, x.j FROM x, y WHERE x.i = y.i) v",
    "cte_multi": "WITH t AS (SELECT * FROM base_t) SELECT t1.v AS v1, t2.v AS v2 FROM t AS t1 JOIN t AS t2 ON t1.i = t2.i",
    "cte_agg": "WITH y AS (SELECT i, COUNT(*) AS c FROM b GROUP BY i) SELECT x.i, x.j FROM a x, y WHERE x.i = y.i",
    "cte_unref": "WITH y AS (SELECT * FROM b) SELECT * FROM a",
    "null_star": "SELECT * FROM base_t",
    "null_sum": "SELECT i, sum(v) FROM base_t GROUP BY i",
    "null_minmax": "SELECT i, min(v), max(v) FROM base_t GROUP BY i",
    "left": "SELECT a.i, a.j, b.k FROM a LEFT JOIN b ON a.i = b.i",
    "right": "SELECT a.i, a.j, b.k FROM a RIGHT JOIN b ON a.i = b.i",
    "full": "SELECT a.i, a.j, b.k FROM a FULL JOIN b ON a.i = b.i",
    "left_agg": "SELECT a.i, count(b.k) AS n, sum(b.k) AS s FROM a LEFT JOIN b ON a.i = b.i GROUP BY a.i",
    "full_nonequi": "SELECT a.i, b.k FROM a FULL JOIN b ON a.i = b.i AND a.j > 15",
    "having": "SELECT i, count(*) AS c FROM a GROUP BY i HAVING count(*) > 1",
    "case": "SELECT CASE WHEN j > 20 THEN 'hi' ELSE 'lo' END AS c, count(*) AS n FROM a GROUP BY 1",
    "countd": "SELECT i, count(DISTINCT j) AS d FROM a GROUP BY i",
    "union": "SELECT i FROM a UNION SELECT i FROM b",
    "unionall": "SELECT i FROM a UNION ALL SELECT i FROM b",
    "intersect": "SELECT i FROM a INTERSECT SELECT i FROM b",
    "except": "SELECT i FROM a EXCEPT SELECT i FROM b",
    "rownum": "SELECT i, j, row_number() OVER (PARTITION BY i ORDER BY j) AS rn FROM a",
    "topk": "SELECT * FROM (SELECT i, j, row_number() OVER (PARTITION BY i ORDER BY j DESC) AS rn FROM a) WHERE rn <= 1",
    "const": "SELECT 1 AS one",
    "const_join": "SELECT a.i, c.x FROM a JOIN (VALUES (1, 'x'), (2, 'y')) AS c(i, x) ON a.i = c.i",
    "limitless_order": "SELECT i, j FROM a ORDER BY j",
    "stddev": "SELECT i, stddev(j) AS sd FROM a GROUP BY i",
    "collect": "SELECT i, sort_array(collect_list(j)) AS js FROM a GROUP BY i",
    "explode": "SELECT i, x FROM a LATERAL VIEW explode(array(j, j + 1)) t AS x",
    "rollup": "SELECT i, j, count(*) AS c FROM a GROUP BY ROLLUP(i, j)",
    "ivm_col": "SELECT i AS __ivm_count, j AS __ivm_m FROM a",
    "ivm_col_agg": "SELECT i AS __ivm_g0, count(*) AS __ivm_count FROM a GROUP BY i",
    "group_not_out": "SELECT COUNT(i) AS c FROM a GROUP BY i",
    "agg_expr": "SELECT sum(i) * 0.5 AS h FROM a",
    "agg_ratio": "SELECT sum(i) / sum(j) AS r FROM a",
    "agg_ratio_g": "SELECT i, sum(j) / count(*) AS r, max(j) - min(j) AS spread FROM a GROUP BY i",
    "values": "VALUES (1)",
    "values_sub": "SELECT * FROM (VALUES (1)) AS tmp(x)",
    "filter_agg": "SELECT COUNT(*) FILTER (WHERE i < 3) AS c FROM a",
    "filter_agg_g": "SELECT j, COUNT(*) FILTER (WHERE i < 3) AS c, sum(i) FILTER (WHERE j > 10) AS s FROM a GROUP BY j",
    "countd_global": "SELECT COUNT(DISTINCT i) AS d FROM a",
    "gsets": "SELECT i, SUM(j) AS s FROM a GROUP BY GROUPING SETS ((i), ())",
    "limit": "SELECT i, j FROM a LIMIT 10 OFFSET 5",
    "order_limit": "SELECT i, j FROM a ORDER BY j DESC LIMIT 3",
    "tablesample": "SELECT i, j FROM a TABLESAMPLE (50 PERCENT)",
    "cume_dist": "SELECT *, cume_dist() OVER (ORDER BY i) AS rank FROM a",
    "dist_nested": "SELECT * FROM (SELECT DISTINCT i, j FROM a) AS tmp",
    "union_all_cols": "SELECT i, j FROM a UNION ALL SELECT i, k FROM b",
    "plain_view": "SELECT x.i, x.j FROM a x, b_view y WHERE x.i = y.i",
    "rand": "SELECT i, j FROM a WHERE i = CAST(rand() * 5 AS INT)",
    "now": "SELECT i, current_date() AS d FROM a",
    "cross": "SELECT x.i AS ai, y.i AS bi FROM a x, b y",
    "group_by_all": "SELECT i, j FROM a GROUP BY i, j",
    "min_str": "SELECT i, min(CAST(j AS STRING)) AS m, max(CAST(j AS STRING)) AS x FROM a GROUP BY i",
    "avg_dec": "SELECT i, avg(CAST(j AS DECIMAL(10, 2))) AS a2, sum(CAST(j AS DECIMAL(10,2))) AS s2 FROM a GROUP BY i",
    "bool_and": "SELECT i, bool_and(j > 10) AS b, any_value(i) AS av FROM a GROUP BY i",
    "first_last": "SELECT i, count_if(j > 10) AS c, percentile_approx(j, 0.5) AS p FROM a GROUP BY i",
    "mode": "SELECT i, mode(j) AS m FROM a GROUP BY i",
    "star_except": "SELECT * EXCEPT (j) FROM a",
    "pivot": "SELECT * FROM (SELECT i, j FROM a) PIVOT (sum(j) FOR i IN (1, 2, 3))",
    "unpivot": "SELECT * FROM a UNPIVOT (v FOR c IN (j))",
    "qualify": "SELECT i, j FROM a QUALIFY row_number() OVER (PARTITION BY i ORDER BY j) = 1",
    "lateral_sub": "SELECT x.i, l.k FROM a x, LATERAL (SELECT k FROM b WHERE b.i = x.i) l",
    "in_list_join": "SELECT x.i FROM a x JOIN b y ON x.i = y.i AND y.k IN (101, 102, 103)",
    "nested_agg_join": "SELECT g.i, g.n, y.k FROM (SELECT i, count(*) AS n FROM a GROUP BY i) g JOIN b y ON g.i = y.i",
    "having_only": "SELECT count(*) AS n FROM a HAVING count(*) > 3",
    "semi_syntax": "SELECT * FROM a LEFT SEMI JOIN b ON a.i = b.i",
    "anti_syntax": "SELECT * FROM a LEFT ANTI JOIN b ON a.i = b.i",
    "natural": "SELECT * FROM a NATURAL JOIN b",
    "struct_agg": "SELECT i, max(struct(j, i)) AS m FROM a GROUP BY i",
    "map_col": "SELECT i, map('j', j) AS m FROM a",
}

STEPS: List[List[str]] = [
 ["INSERT INTO b VALUES (5,105)", "UPDATE a SET j = 0 WHERE i = 1", "DELETE FROM b WHERE i = 5 AND k = 105"],
 ["INSERT INTO a VALUES (6,20),(2,100),(1,0),(1,0),(2,30),(2,30),(NULL,7)"],
 ["DELETE FROM a WHERE i = 2 AND j = 20", "UPDATE a SET j = 200 WHERE i = 2 AND j = 100"],
 ["INSERT INTO b VALUES (1,101),(1,111),(2,102),(6,106),(NULL, 1)"],
 ["UPDATE a SET i = 1 WHERE j = 60", "UPDATE b SET i = 10 WHERE k = 101", "UPDATE b SET k = 1002 WHERE k = 102"],
 ["INSERT INTO base_t VALUES (4,40)", "DELETE FROM base_t WHERE i = 1", "UPDATE base_t SET v = v * 10 WHERE i = 2"],
 ["UPDATE base_t SET v = v + 100", "DELETE FROM base_t WHERE i IN (4, 5)", "INSERT INTO base_t VALUES (7,70),(7,77)"],
 ["DELETE FROM b WHERE i = 2", "DELETE FROM a WHERE i = 1 AND j = 0"],
 ["DELETE FROM a"],
 ["INSERT INTO a VALUES (0,0),(6,60),(7,70)"],
 ["DELETE FROM b", "DELETE FROM base_t"],
 ["INSERT INTO b VALUES (7, 1), (0, 2)", "INSERT INTO base_t VALUES (NULL, NULL)"],
]

OUTER_STEPS: List[List[str]] = [["INSERT INTO base_r VALUES (1),(2),(3)"], ["INSERT INTO base_r VALUES (4),(5)"],
 ["INSERT INTO base_s VALUES (1,3)"], ["INSERT INTO base_s VALUES (2,3)"],
 ["INSERT INTO base_t VALUES (1),(2)"], ["INSERT INTO base_t VALUES (3),(4)"],
 ["DELETE FROM base_r WHERE i=1"], ["DELETE FROM base_r WHERE i=2"], ["DELETE FROM base_s WHERE i=2"],
 ["DELETE FROM base_t WHERE j=2"], ["DELETE FROM base_s WHERE i=3", "DELETE FROM base_t WHERE j=3"],
 ["DELETE FROM base_r"], ["INSERT INTO base_r VALUES (2), (NULL)", "INSERT INTO base_s VALUES (NULL, 1), (2, NULL)"],
 ["UPDATE base_s SET j = j + 1"], ["DELETE FROM base_s", "DELETE FROM base_t"]]

JOINS = ["FULL", "LEFT", "RIGHT", "INNER"]
OUTER: Dict[str, str] = {
    f"{a}_{b}_{'distinct' if d else 'all'}".lower():
        f"SELECT {d}r.i AS r, s.i AS si, s.j AS sj, t.j AS t FROM base_r AS r {a} JOIN base_s AS s "
        f"ON r.i = s.i {b} JOIN base_t AS t ON s.j = t.j"
    for a in JOINS for b in JOINS for d in ("", "DISTINCT ")
}
CDF = "USING delta TBLPROPERTIES (delta.enableChangeDataFeed = true)"
TABLES = [
    f"CREATE TABLE a (i INT, j INT) {CDF}", "INSERT INTO a VALUES (1,10),(2,20),(3,30),(4,40),(5,50)",
    f"CREATE TABLE b (i INT, k INT) {CDF}", "INSERT INTO b VALUES (1,101),(2,102),(3,103),(4,104)",
    f"CREATE TABLE base_t (i INT, v INT) {CDF}",
    "INSERT INTO base_t VALUES (1,10),(2,20),(3,30),(NULL,1),(NULL,2)",
    "CREATE OR REPLACE VIEW b_view AS SELECT i, k FROM b",
]
OUTER_TABLES = [
    "CREATE TABLE base_r (i INT) USING delta", "CREATE TABLE base_s (i INT, j INT) USING delta",
    "CREATE TABLE base_t (j INT) USING delta", "INSERT INTO base_r VALUES (1), (2), (3), (3)",
    "INSERT INTO base_s VALUES (2,1), (2,2), (3,1), (4,1), (4,2)", "INSERT INTO base_t VALUES (2), (3), (3)",
]


# No two runs of these queries agree: each refresh must be a full one.
NONDETERMINISTIC = {"rand", "tablesample"}


def check(spark: SparkSession, query: str, tables: List[str], steps: List[List[str]],
          deterministic: bool = True) -> str:
    """Creates the view over fresh tables, follows the steps; returns each refresh's mode's
    initial (i incremental, f full, n noop), or raises where the view differs from its query."""
    for t in ("a", "b", "base_t", "base_r", "base_s"):
        spark.sql(f"DROP TABLE IF EXISTS {t}")
    for stmt in tables:
        spark.sql(stmt)
    spark.sql("DROP MATERIALIZED VIEW IF EXISTS mv")
    spark.sql(f"CREATE MATERIALIZED VIEW mv AS {query}")
    if deterministic:
        assert_matches_query(spark, "mv", query)
    modes = ""
    for step in steps:
        for stmt in step:
            spark.sql(stmt)
        modes += MaterializedView.for_name(spark, "mv").refresh().mode[0]
        if deterministic:
            assert_matches_query(spark, "mv", query)
    assert deterministic or set(modes) <= {"f", "n"}, f"refreshed incrementally: {modes}"
    spark.sql("DROP MATERIALIZED VIEW mv")
    return modes


def main() -> None:
    only = set(sys.argv[1:])
    spark = make_session()
    failed = []
    cases = [(n, q, TABLES, STEPS) for n, q in QUERIES.items()] + \
        [(n, q, OUTER_TABLES, OUTER_STEPS) for n, q in OUTER.items()]
    cases = [c for c in cases if not only or c[0] in only]
    for name, query, tables, steps in cases:
        try:
            print(f"ok    {name:24} {check(spark, query, tables, steps, name not in NONDETERMINISTIC)}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case, then fail
            print(f"FAIL  {name:24} {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
            failed.append(name)
    print(f"{len(failed)} of {len(cases)} failed: {failed}" if failed
          else f"all {len(cases)} passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
