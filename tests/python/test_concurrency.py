"""Concurrency beyond one view kind: each race ends with no wrong view and a clear outcome.

Every thread runs in a session of its own (``spark.newSession()``: same catalog, its own
settings), as two users or two services would.
"""

from __future__ import annotations

import threading
from typing import Callable, List, Sequence

from ivm_testing import assert_matches_query, condition
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, RefreshReport, add_foreign_key, add_primary_key

FK_VIEW = ("SELECT c.region, count(*) AS n, sum(o.amount) AS total "
           "FROM orders o JOIN customers c ON o.cust = c.id GROUP BY c.region")
TRIANGLES = ("SELECT count(*) AS n FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
             "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")


def in_parallel(actions: Sequence[Callable[[], object]]) -> List[object]:
    """Runs the actions in threads started together; their results or exceptions, in order."""
    results: List[object] = [None] * len(actions)
    start = threading.Barrier(len(actions))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = actions[i]()
        except BaseException as e:  # noqa: BLE001
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def refresh_in_new_session(spark: SparkSession, name: str) -> Callable[[], RefreshReport]:
    return lambda: MaterializedView(spark.newSession(), name).refresh()


def fk_tables(spark: SparkSession) -> None:
    spark.sql("CREATE TABLE customers (id INT, region STRING) USING delta")
    spark.sql("CREATE TABLE orders (id INT, cust INT, amount INT) USING delta")
    spark.sql("INSERT INTO customers SELECT id, concat('r', id % 3) FROM range(10)")
    spark.sql("INSERT INTO orders SELECT id, id % 10, id FROM range(50)")
    add_primary_key(spark, "customers", ["id"])
    add_foreign_key(spark, "orders", ["cust"], "customers", ["id"])


def test_concurrent_refreshes_of_fk_pruned_and_triangle_views(spark: SparkSession, db: str) -> None:
    fk_tables(spark)
    spark.sql("CREATE TABLE edges (src INT, dst INT) USING delta")
    spark.sql("INSERT INTO edges SELECT id % 7, (id * 3 + 1) % 7 FROM range(30)")
    spark.sql(f"CREATE MATERIALIZED VIEW fk AS {FK_VIEW}")
    spark.sql(f"CREATE MATERIALIZED VIEW tri AS {TRIANGLES}")
    for round_ in range(2):
        spark.sql(f"INSERT INTO orders VALUES ({100 + round_}, 3, 7), ({200 + round_}, 4, 8)")
        spark.sql(f"DELETE FROM orders WHERE id = {round_}")
        spark.sql(f"INSERT INTO edges VALUES ({round_}, 5), (5, 6), (6, {round_})")
        views = ("fk", "fk", "tri", "tri")
        results = in_parallel([refresh_in_new_session(spark, f"{db}.{v}") for v in views])
        assert not [r for r in results if isinstance(r, BaseException)], results
        for pair in (results[:2], results[2:]):
            modes = sorted(r.mode for r in pair)  # type: ignore[attr-defined]
            assert modes in (["incremental", "noop"], ["incremental", "skipped"]), modes
        assert_matches_query(spark, "fk", FK_VIEW)
        assert_matches_query(spark, "tri", TRIANGLES)


def test_refresh_racing_a_writer_that_deletes_what_it_reads(spark: SparkSession, db: str) -> None:
    """The refresh reads the versions it pinned: a DELETE committed meanwhile (of the rows the
    refresh joins with) is left to the next refresh, and both refreshes are exact."""
    fk_tables(spark)
    spark.sql(f"CREATE MATERIALIZED VIEW fk AS {FK_VIEW}")
    spark.sql("INSERT INTO orders VALUES (500, 2, 5), (501, 2, 6)")
    expected = sorted(tuple(r) for r in spark.sql(FK_VIEW).collect())
    deleted = spark.sql("SELECT count(*) FROM orders WHERE cust = 2").first()[0]
    racing = spark.newSession()
    racing.conf.set("spark.ivm.testing.sqlAt", f"after-changes:DELETE FROM {db}.orders WHERE cust = 2")
    first = MaterializedView(racing, f"{db}.fk").refresh()
    assert first.mode == "incremental"
    assert sorted(tuple(r) for r in spark.table("fk").collect()) == expected
    assert spark.sql("SELECT count(*) FROM orders WHERE cust = 2").first()[0] == 0
    second = MaterializedView.for_name(spark, "fk").refresh()
    assert second.mode == "incremental" and sum(c.changed_rows for c in second.sources) == deleted
    assert_matches_query(spark, "fk", FK_VIEW)


def test_create_racing_a_refresh_of_the_view_it_reads(spark: SparkSession, db: str) -> None:
    """CREATE of a view over a view turns on the read view's change feed (a metadata commit on
    its backing table) while that view refreshes: one of them retries, both end exact."""
    spark.sql("CREATE TABLE s (k INT, v INT) USING delta")
    spark.sql("INSERT INTO s SELECT id % 5, id FROM range(40)")
    inner = "SELECT k, count(*) AS n, sum(v) AS total FROM s GROUP BY k"
    outer = "SELECT n > 8 AS big, count(*) AS groups FROM inner_mv GROUP BY n > 8"
    spark.sql(f"CREATE MATERIALIZED VIEW inner_mv AS {inner}")
    spark.sql("INSERT INTO s SELECT id % 7, id FROM range(100, 130)")

    def create() -> None:
        session = spark.newSession()
        session.sql(f"USE {db}")
        session.sql(f"CREATE MATERIALIZED VIEW outer_mv AS {outer}")

    results = in_parallel([refresh_in_new_session(spark, f"{db}.inner_mv"), create])
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert_matches_query(spark, "inner_mv", inner)
    MaterializedView.for_name(spark, "outer_mv").refresh()
    assert_matches_query(spark, "outer_mv", outer)
    spark.sql("INSERT INTO s VALUES (1, 1)")
    MaterializedView.for_name(spark, "inner_mv").refresh()
    assert MaterializedView.for_name(spark, "outer_mv").refresh().mode in ("incremental", "noop")
    assert_matches_query(spark, "outer_mv", outer)


def test_two_sessions_dropping_and_creating_one_name(spark: SparkSession, db: str) -> None:
    """Each session drops the view and creates it with its own query: the name ends as one of
    the two views, exact, with one backing table; a loser gets a clear spark-ivm error."""
    spark.sql("CREATE TABLE s (k INT, v INT) USING delta")
    spark.sql("INSERT INTO s SELECT id % 4, id FROM range(20)")
    queries = ["SELECT k, count(*) AS n FROM s GROUP BY k", "SELECT k, sum(v) AS n FROM s GROUP BY k"]
    spark.sql(f"CREATE MATERIALIZED VIEW x AS {queries[0]}")

    def replace(query: str) -> Callable[[], None]:
        def run() -> None:
            session = spark.newSession()
            session.sql(f"USE {db}")
            session.sql("DROP MATERIALIZED VIEW IF EXISTS x")
            session.sql(f"CREATE MATERIALIZED VIEW x AS {query}")
        return run

    for _ in range(2):
        results = in_parallel([replace(q) for q in queries])
        for r in results:
            if isinstance(r, BaseException):
                assert isinstance(r, AnalysisException) and condition(r).startswith("IVM_"), str(r)[:3000]
        assert any(r is None for r in results), results
        defined = MaterializedView.for_name(spark, "x").describe()["query"]
        winner = [q for q in queries if q.split(" AS n")[0] in defined]
        assert len(winner) == 1
        assert_matches_query(spark, "x", winner[0])
        backing = [r.tableName for r in spark.sql("SHOW TABLES").collect()
                   if r.tableName.startswith("__ivm_backing_x")]
        assert len(backing) == 1, backing
        spark.sql("INSERT INTO s VALUES (9, 9)")
        assert MaterializedView.for_name(spark, "x").refresh().mode == "incremental"
        assert_matches_query(spark, "x", winner[0])
