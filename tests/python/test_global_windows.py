"""Window functions without PARTITION BY at the top of a view's query (a global rank, a running
total, ntile, a rank filtered to a top k with its ties): the view keeps the rows under the
windows, maintained incrementally, and computes the windows when it is read; below the top, over
a subquery in FROM, the subquery is a helper view and the window is computed again over its rows
at each refresh. Each view equals its query after every refresh of a random stream of inserts,
deletes and updates, with ties and NULLs in the ordered column."""

from __future__ import annotations

import random
from typing import List

from ivm_testing import assert_matches_query, condition, follow_changes, refused
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

QUERIES = {
    # ranks over ties and NULLs (DESC puts NULLs last)
    "ranked": "SELECT id, amount, rank() OVER (ORDER BY amount DESC) AS rk, "
              "dense_rank() OVER (ORDER BY amount DESC) AS drk FROM sales",
    # the top 3 amounts with every row that ties with them: a top-k whose ties are all kept
    "top3": "SELECT id, region, amount FROM (SELECT id, region, amount, "
            "rank() OVER (ORDER BY amount DESC) AS rk FROM sales) WHERE rk <= 3",
    # a running total, ntile and lag over a total order, and a windowed expression
    "running": "SELECT id, sum(amount) OVER (ORDER BY id) AS total, ntile(3) OVER (ORDER BY id) AS third, "
               "coalesce(amount, 0) - lag(amount, 1, 0) OVER (ORDER BY id) AS diff FROM sales",
    # ranks of groups of an aggregate
    "regions": "SELECT region, sum(amount) AS s, rank() OVER (ORDER BY sum(amount) DESC) AS rk, "
               "percent_rank() OVER (ORDER BY count(*)) AS pr, cume_dist() OVER (ORDER BY region) AS cd "
               "FROM sales GROUP BY region",
    # a whole-table count beside a partitioned rank, over a filter that the view maintains
    "shares": "SELECT id, region, rank() OVER (PARTITION BY region ORDER BY id) AS rr, "
              "count(*) OVER () AS n FROM sales WHERE amount IS NOT NULL",
    # a top-k (LIMIT) over a row_number
    "first4": "SELECT id, amount, row_number() OVER (ORDER BY id) AS n FROM sales "
              "ORDER BY n, id, amount LIMIT 4",
}


def _changes(rng: random.Random, ids: List[int], steps: int) -> List[List[str]]:
    """Each step inserts, deletes and updates some rows (amounts from a small range: ties)."""
    def amount() -> str:
        return "NULL" if rng.random() < 0.15 else str(rng.randrange(5))

    out = []
    for _ in range(steps):
        new = [max(ids) + 1 + i for i in range(rng.randrange(1, 4))]
        ids.extend(new)
        rows = ", ".join(f"({i}, 'r{rng.randrange(3)}', {amount()})" for i in new)
        gone = rng.sample(ids, 2)
        for i in gone:
            ids.remove(i)
        moved = rng.choice(ids)
        region = f"r{rng.randrange(3)}"
        out.append([f"INSERT INTO sales VALUES {rows}",
                    f"DELETE FROM sales WHERE id IN ({gone[0]}, {gone[1]})",
                    f"UPDATE sales SET amount = {amount()}, region = '{region}' WHERE id = {moved}"])
    return out


def test_global_windows_follow_random_changes(spark: SparkSession, db: str) -> None:
    """Every view is incremental under INCREMENTAL STRICT, follows the changes, and says in
    DESCRIBE and EXPLAIN that it computes its windows when it is read."""
    rng = random.Random(20261129)
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
    ids = list(range(10))
    spark.sql("INSERT INTO sales VALUES " + ", ".join(
        f"({i}, 'r{i % 3}', {'NULL' if i == 4 else i % 4})" for i in ids))
    follow_changes(spark, QUERIES, _changes(rng, ids, 4), "REFRESH POLICY INCREMENTAL STRICT")
    described = MaterializedView.for_name(spark, "top3").describe()
    assert described["refresh_mode"] == "incremental", described
    assert "computed when the view is read" in described["info"]["Windows"], described
    spark.sql("INSERT INTO sales VALUES (100, 'r1', 3)")
    explain = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW ranked").collect())
    assert "Next refresh: incremental" in explain, explain
    assert "Windows: RANK() OVER (ORDER BY amount DESC" in explain, explain


# Windows below the top over a subquery in FROM: the subquery becomes a helper view.
HELPED = {
    # TPC-DS q44's shape: one aggregate ranked both ways (one helper), each kept to its top two, joined
    "best_worst": "SELECT b.rk, b.region AS best, w.region AS worst FROM "
                  "(SELECT * FROM (SELECT region, rank() OVER (ORDER BY s DESC) AS rk FROM "
                  "(SELECT region, sum(amount) AS s FROM sales GROUP BY region) v1) WHERE rk <= 2) b JOIN "
                  "(SELECT * FROM (SELECT region, rank() OVER (ORDER BY s ASC) AS rk FROM "
                  "(SELECT region, sum(amount) AS s FROM sales GROUP BY region) v2) WHERE rk <= 2) w "
                  "ON b.rk = w.rk",
    # an aggregate over a global rank of a CTE's rows, NULLs among them
    "rank_counts": "WITH kept AS (SELECT amount FROM sales WHERE id > 2) SELECT rk, count(*) AS n FROM "
                   "(SELECT rank() OVER (ORDER BY amount) AS rk FROM kept) GROUP BY rk",
    # TPC-DS q49's shape: per region its lowest ranks, as a UNION (two helpers)
    "lowest": "SELECT 'r0' AS k, id, rk FROM (SELECT id, rank() OVER (ORDER BY amount) AS rk FROM "
              "(SELECT id, amount FROM sales WHERE region = 'r0') x) WHERE rk <= 2 UNION "
              "SELECT 'r1', id, rk FROM (SELECT id, "
              "dense_rank() OVER (ORDER BY amount DESC NULLS LAST) AS rk "
              "FROM (SELECT id, amount FROM sales WHERE region = 'r1') y) WHERE rk <= 2",
    # a derived table with a column list naming an unnamed aggregate: the helper's columns
    "ranked_totals": "SELECT rk, count(*) AS n, min(r) AS r FROM "
                     "(SELECT r, rank() OVER (ORDER BY total DESC) AS rk FROM "
                     "(SELECT region, sum(amount) FROM sales GROUP BY region) AS t(r, total)) GROUP BY rk",
    # a derived table reading a CTE: the helper holds the WITH clause
    "cte_ranked": "WITH kept AS (SELECT region, amount FROM sales WHERE id > 1) "
                  "SELECT rk, count(*) AS n FROM "
                  "(SELECT rank() OVER (ORDER BY s DESC) AS rk FROM "
                  "(SELECT region, sum(amount) AS s FROM kept GROUP BY region) z) GROUP BY rk",
}


def _window_helpers(spark: SparkSession) -> List[str]:
    """The window helper views of the test's database."""
    tables = spark.sql("SHOW TABLES").collect()
    return sorted(r.tableName for r in tables if r.tableName.startswith("__ivm_win_"))


def test_windows_below_the_top_over_a_subquery_read_a_helper_view(spark: SparkSession, db: str) -> None:
    """A window without PARTITION BY below the top that reads a subquery in FROM or a CTE is
    incremental: the subquery is a helper view, maintained by its changes, and the window is computed again
    over its rows; each view equals its query after every refresh of a random stream, says so in
    DESCRIBE, and its helpers are not listed and go with it. So is such a window of a view over
    a view that computes it when it is read."""
    rng = random.Random(20261205)
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
    ids = list(range(12))
    spark.sql("INSERT INTO sales VALUES " + ", ".join(
        f"({i}, 'r{i % 3}', {'NULL' if i == 4 else i % 4})" for i in ids))
    views = follow_changes(spark, HELPED, _changes(rng, ids, 3), "REFRESH POLICY INCREMENTAL STRICT")
    assert len(_window_helpers(spark)) == 6, _window_helpers(spark)  # best_worst's two subqueries share one
    described = views["best_worst"].describe()
    assert described["refresh_mode"] == "incremental", described
    assert "window function without PARTITION BY" in described["info"]["Helper view"], described
    assert not [r for r in spark.sql("SHOW MATERIALIZED VIEWS").collect() if "__ivm_" in str(r)]
    spark.sql("INSERT INTO sales VALUES (500, 'r2', 3)")
    explain = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW best_worst").collect())
    assert "Next refresh: incremental, because base tables of its helper views changed" in explain, explain
    for name in HELPED:
        spark.sql(f"DROP MATERIALIZED VIEW {name}")
    assert _window_helpers(spark) == []
    # A view over a view that computes a global window when it is read: recomputed over its rows.
    ranked = MaterializedView.create(spark, "ranked", QUERIES["ranked"], refresh_policy="INCREMENTAL STRICT")
    counts_query = "SELECT rk, count(*) AS n, max(drk) AS drk FROM ranked GROUP BY rk"
    counts = MaterializedView.create(spark, "rank_counts_of_view", counts_query,
                                     refresh_policy="INCREMENTAL STRICT")
    for step in _changes(rng, ids, 2):
        for stmt in step:
            spark.sql(stmt)
        assert ranked.refresh().mode == "incremental" and counts.refresh().mode == "incremental"
        assert_matches_query(spark, "rank_counts_of_view", counts_query)


def test_windows_below_the_top_stay_refused(spark: SparkSession, db: str) -> None:
    """A window without PARTITION BY under an aggregate is refused under INCREMENTAL STRICT, and
    says where it may go instead."""
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
    query = ("SELECT rk, count(*) AS n FROM (SELECT rank() OVER (ORDER BY amount) AS rk FROM sales) "
             "GROUP BY rk")
    error = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS {query}"))
    assert condition(error) == "IVM_NOT_INCREMENTALIZABLE"
    assert "below the top of the query" in str(error), str(error)
    assert "move the window to the top" in str(error), str(error)


def test_top_k_with_ties_takes_the_tied_rows_by_the_other_columns(spark: SparkSession, db: str) -> None:
    """An ORDER BY ... LIMIT under which rows tie is maintained: the read takes the rows tied at
    the limit in the order of the view's other columns (one of the answers the query allows), so
    each view equals its query with those columns added to its ORDER BY, after every refresh."""
    rng = random.Random(7)
    groups = "SELECT region, count(*) AS n FROM sales GROUP BY region"
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
    ids = list(range(10))
    spark.sql("INSERT INTO sales VALUES " + ", ".join(f"({i}, 'r{i % 3}', {i % 3})" for i in ids))
    queries = {  # the view's query, and the same with the ties broken as the view breaks them
        "top_rows": ("SELECT id, amount FROM sales ORDER BY amount DESC LIMIT 3",
                     "SELECT id, amount FROM sales ORDER BY amount DESC, id LIMIT 3"),
        "top_groups": (f"{groups} ORDER BY n DESC LIMIT 1", f"{groups} ORDER BY n DESC, region LIMIT 1"),
    }
    views = {name: MaterializedView.create(spark, name, q, refresh_policy="INCREMENTAL STRICT")
             for name, (q, _) in queries.items()}
    for step in _changes(rng, ids, 3):
        for stmt in step:
            spark.sql(stmt)
        for name, mv in views.items():
            assert mv.refresh().mode == "incremental"
            assert_matches_query(spark, name, queries[name][1])
    top = views["top_rows"].describe()["info"]["Top rows"]
    assert top.startswith("ORDER BY amount DESC NULLS LAST LIMIT 3") and top.endswith("order of id"), top


def test_a_window_whose_sql_would_compute_otherwise_is_recomputed(spark: SparkSession, db: str) -> None:
    """approx_count_distinct's SQL leaves its accuracy out, so a read would compute another value:
    refused under INCREMENTAL STRICT with the reason, and recomputed under AUTO."""
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
    spark.sql("INSERT INTO sales VALUES (1, 'r0', 5), (2, 'r1', 7)")
    query = "SELECT id, approx_count_distinct(amount, 0.01) OVER () AS n FROM sales"
    error = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS {query}"))
    assert condition(error) == "IVM_NOT_INCREMENTALIZABLE"
    assert "computes something else" in str(error), str(error)
    mv = MaterializedView.create(spark, "approx", query, refresh_policy="AUTO")
    spark.sql("INSERT INTO sales VALUES (3, 'r2', 9)")
    assert mv.refresh().mode == "full"
    assert_matches_query(spark, "approx", query)
