"""State kept between refreshes: made between refreshes, never during one; visible; bounded by
its budget, with every view still equal to its query when the budget holds less than all."""

from __future__ import annotations

import re
from typing import List

from ivm_testing import assert_matches_query, await_state_builds, session_confs
from pyspark.sql import SparkSession
from spark_ivm import HeldState, MaterializedView, held_state

# Small tables are held on the driver whole; off, views and tables are kept on the executors.
NOT_ON_DRIVER = {"spark.ivm.heldTables.maxRows": "0", "spark.ivm.apply.rewriteWithoutSearchBytes": "0"}
KEPT = "looked up in the view's rows kept in memory"


def change(spark: SparkSession, table: str, round_: int) -> None:
    spark.sql(f"INSERT INTO {table} SELECT 100000 * {round_} + id, (id * 37 + {round_}) % 320, id % 7, id "
              "FROM range(25)")
    spark.sql(f"DELETE FROM {table} WHERE id % 700 = {round_}")
    spark.sql(f"UPDATE {table} SET v = v + 1 WHERE id % 900 = {round_ + 20}")


def evicted(spark: SparkSession) -> int:
    """State evicted for the budget since the application started, as DESCRIBE says."""
    held = [r[1] for r in spark.sql("DESCRIBE MATERIALIZED VIEW b0").collect() if r[0] == "State held"][0]
    match = re.search(r"(\d+) evicted since", held)
    assert match, held
    return int(match.group(1))


def view_rows(state: List[HeldState]) -> List[HeldState]:
    return [s for s in state if s.kind == "view rows"]


def test_state_is_made_between_refreshes_and_shown(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE src (id BIGINT, a BIGINT, b BIGINT, v BIGINT) USING delta")
    spark.sql("INSERT INTO src SELECT id, id % 300, id % 7, id FROM range(6000)")
    q = "SELECT a, b, count(*) AS n, sum(v) AS s FROM src GROUP BY a, b"
    with session_confs(spark, NOT_ON_DRIVER):
        mv = MaterializedView.create(spark, "made", q)
        notes = []
        for round_ in range(1, 5):
            change(spark, "src", round_)
            report = mv.refresh()
            assert report.mode == "incremental"
            assert_matches_query(spark, "made", q)
            notes.append([n for n in report.plan_notes if KEPT in n])
            if round_ == 2:
                # Asked for the second time: queued, and made once the refresh is over, at the
                # version it committed.
                assert await_state_builds(spark)
                held = view_rows(mv.state())
                assert len(held) == 1 and held[0].place == "executors" and held[0].bytes > 0, held
                assert held[0].view is not None and held[0].view.endswith("made")
                version = spark.sql("DESCRIBE HISTORY __ivm_backing_made LIMIT 1").first().version
                assert held[0].stamp.endswith(f"@{version}"), (held, version)
        # Rounds 1 and 2 read the old rows from the table; 3 and 4 look them up, made by no refresh.
        assert [len(n) for n in notes] == [0, 0, 1, 1], notes
        assert all("read from the table now" not in n for ns in notes for n in ns), notes
        info = mv.describe()["info"]
        assert "view rows" in str(info["State"]) and "executors" in info["State held"], info
        assert any(s.kind == "view rows" for s in held_state(spark))
        mv.drop()
        assert not [s for s in held_state(spark) if s.view and s.view.endswith(".made")]


def test_a_budget_smaller_than_all_state_evicts_and_every_view_stays_exact(spark: SparkSession,
                                                                          db: str) -> None:
    spark.sql("CREATE TABLE src (id BIGINT, a BIGINT, b BIGINT, v BIGINT) USING delta")
    spark.sql("INSERT INTO src SELECT id, id % 300, id % 7, id FROM range(6000)")
    queries = {f"b{i}": f"SELECT a, b, count(*) AS n, sum(v) + {i} AS s FROM src GROUP BY a, b"
               for i in range(4)}
    views = [MaterializedView.create(spark, name, q) for name, q in queries.items()]
    with session_confs(spark, NOT_ON_DRIVER):
        for round_ in (10, 11):
            change(spark, "src", round_)
            views[0].refresh()
        assert await_state_builds(spark)
        one = sum(s.bytes for s in view_rows(views[0].state()))
        assert one > 0
        # Room for about two views' rows (an arrangement may take at most half the budget).
        budget = int(one * 2.5)
        evicted_before = evicted(spark)
        with session_confs(spark, {"spark.ivm.state.executorMaxBytes": str(budget)}):
            for round_ in range(1, 5):
                change(spark, "src", round_)
                for mv, (name, q) in zip(views, queries.items(), strict=True):
                    assert mv.refresh().mode == "incremental"
                    assert_matches_query(spark, name, q)
                    assert await_state_builds(spark)
                    held = [s for s in held_state(spark) if s.place == "executors"]
                    assert sum(s.bytes for s in held) <= budget, held
            kept = {s.view for s in view_rows(held_state(spark))}
            assert 1 <= len(kept) < len(views), kept
            assert evicted(spark) > evicted_before
    for mv in views:
        mv.drop()


def test_state_off_reads_from_storage_with_the_same_rows(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE src (id BIGINT, a BIGINT, b BIGINT, v BIGINT) USING delta")
    spark.sql("INSERT INTO src SELECT id, id % 300, id % 7, id FROM range(6000)")
    q = "SELECT a, b, count(*) AS n, sum(v) AS s FROM src GROUP BY a, b"
    with session_confs(spark, {**NOT_ON_DRIVER, "spark.ivm.state.executorMaxBytes": "0"}):
        mv = MaterializedView.create(spark, "nostate", q)
        for round_ in range(1, 4):
            change(spark, "src", round_)
            report = mv.refresh()
            assert await_state_builds(spark)
            assert not [n for n in report.plan_notes if KEPT in n]
            assert_matches_query(spark, "nostate", q)
        assert not view_rows(mv.state())
