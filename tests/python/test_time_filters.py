"""Views whose filters read the time (`WHERE ts >= current_timestamp() - INTERVAL 2 DAYS`): each
refresh reads them at its own instant, set here by `spark.ivm.refresh.instant` (a clock the test
controls), and applies the rows that crossed their bounds since the last refresh, whether or not
a table changed; each view is compared with its query at that instant after every refresh."""

from __future__ import annotations

import random
import re
from datetime import datetime, timedelta
from typing import Dict

import pytest
from ivm_testing import assert_matches_query, refused, session_confs
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

START = datetime(2026, 11, 1)

BASE = [
    "CREATE TABLE ev (id INT, cust INT, ts TIMESTAMP, amount DECIMAL(10, 2)) USING delta",
    "CREATE TABLE cu (cust INT, region STRING, since DATE) USING delta",
    "INSERT INTO cu VALUES (0, 'north', DATE '2026-10-01'), (1, 'south', DATE '2026-11-03'), "
    "(2, 'north', DATE '2026-11-05'), (3, NULL, NULL)",
]

QUERIES = {
    # a sliding window, and a window that also has an upper bound (a future-dated row waits)
    "recent": "SELECT id, cust, amount FROM ev WHERE ts >= current_timestamp() - INTERVAL 2 DAYS "
              "AND ts <= now()",
    # grouped, over a join whose ON reads the time (an inner join: a filter over it)
    "by_region": "SELECT c.region, count(*) AS n, sum(e.amount) AS total FROM ev e JOIN cu c "
                 "ON e.cust = c.cust AND e.ts > current_timestamp() - INTERVAL 36 HOURS GROUP BY c.region",
    # by date, on both tables' columns, and a global aggregate
    "today_new": "SELECT count(*) AS n, max(e.amount) AS top FROM ev e JOIN cu c ON e.cust = c.cust "
                 "WHERE CAST(e.ts AS DATE) = current_date() AND c.since >= current_date() - 20",
    # time inside functions (datediff, date_sub), and unix_timestamp of a column (not of the time)
    "last_days": "SELECT id, unix_timestamp(ts) AS epoch FROM ev "
                 "WHERE datediff(current_date(), CAST(ts AS DATE)) < 3 AND ts >= date_sub(current_date(), 2)",
    # distinct rows of a left join whose right side is filtered by time
    "seen": "SELECT DISTINCT c.cust, e.id IS NOT NULL AS active FROM cu c LEFT JOIN ev e "
            "ON c.cust = e.cust AND e.ts >= now() - INTERVAL 1 DAY",
}


def at(query: str, now: datetime) -> str:
    """The query with its time functions as the literals they are at `now` (session time UTC)."""
    ts = f"TIMESTAMP '{now:%Y-%m-%d %H:%M:%S}'"
    query = re.sub(r"current_timestamp\(\)|now\(\)", ts, query)
    return query.replace("current_date()", f"DATE '{now:%Y-%m-%d}'")


def insert_events(spark: SparkSession, rng: random.Random, first_id: int, n: int, now: datetime) -> None:
    rows = []
    for i in range(n):
        # mostly near now (some ahead of it), some long ago, some without a time
        offset = timedelta(hours=rng.uniform(-80, 6))
        when = "NULL" if rng.random() < 0.05 else f"TIMESTAMP '{now + offset:%Y-%m-%d %H:%M:%S}'"
        rows.append(f"({first_id + i}, {rng.randrange(5)}, {when}, {rng.randrange(1, 500)}.25)")
    spark.sql(f"INSERT INTO ev VALUES {', '.join(rows)}")


def test_time_filters_follow_changes_and_the_clock(spark: SparkSession, db: str) -> None:
    """Random inserts, deletes and updates, and the clock moving forward by minutes to days
    (and once back), with and without changes: every view is refreshed incrementally and
    equals its query at the refresh's instant; a refresh with no commit but a later instant
    applies the rows that crossed the bounds (not a no-op)."""
    rng = random.Random(44)
    now = START + timedelta(days=5, hours=3)
    with session_confs(spark, {"spark.sql.session.timeZone": "UTC",
                               "spark.ivm.refresh.instant": f"{now:%Y-%m-%d %H:%M:%S}"}):
        for stmt in BASE:
            spark.sql(stmt)
        insert_events(spark, rng, 0, 40, now)
        views: Dict[str, MaterializedView] = {}
        for name, query in QUERIES.items():
            views[name] = MaterializedView.create(spark, name, query, refresh_policy="INCREMENTAL STRICT")
            assert_matches_query(spark, name, at(query, now))
        next_id = 40
        moved_without_change = 0
        for step in range(7):
            change = step % 3 != 2  # every third step only the clock moves
            if change:
                kind = rng.choice(["insert", "delete", "update", "customer"])
                if kind == "insert":
                    insert_events(spark, rng, next_id, rng.randrange(3, 12), now)
                    next_id += 12
                elif kind == "delete":
                    spark.sql(f"DELETE FROM ev WHERE id % 7 = {rng.randrange(7)}")
                elif kind == "update":
                    spark.sql(f"UPDATE ev SET ts = ts - INTERVAL {rng.randrange(1, 30)} HOURS "
                              f"WHERE id % 5 = {rng.randrange(5)}")
                else:
                    spark.sql(f"UPDATE cu SET since = DATE '{now:%Y-%m-%d}' - {rng.randrange(30)} "
                              f"WHERE cust = {rng.randrange(4)}")
            now += timedelta(hours=-9) if step == 4 else timedelta(minutes=rng.choice([20, 90, 400, 1500]))
            spark.conf.set("spark.ivm.refresh.instant", f"{now:%Y-%m-%d %H:%M:%S}")
            for name, mv in views.items():
                report = mv.refresh()
                # Where only the clock moved for a view, a refresh that finds no row crossing a bound
                # commits nothing.
                unchanged = all(s.from_version == s.to_version for s in report.sources)
                assert report.mode == "incremental" or (unchanged and report.mode == "noop"), (
                    name, step, report)
                if not change:
                    moved_without_change += report.view_rows_changed
                assert_matches_query(spark, name, at(QUERIES[name], now))
        assert moved_without_change > 0, "the clock alone moved no row of any view"
        # The same instant again with nothing new: a no-op.
        assert views["recent"].refresh().mode == "noop"
        # An hour later with nothing new: EXPLAIN shows the rows that leave the window as branches.
        spark.conf.set("spark.ivm.refresh.instant", f"{now + timedelta(hours=1):%Y-%m-%d %H:%M:%S}")
        plan = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW recent").collect())
        assert "Next refresh: incremental" in plan and "leaving the time filter" in plan, plan
        # The instant the view's rows are at: the last refresh that committed (one that found no
        # row crossing a bound leaves it), never later than now.
        described = views["by_region"].describe()
        read_at = described["freshness"]["time_filters_read_at"]
        assert described["info"]["Time filters"].startswith(f"read at {read_at}"), described["info"]
        assert START < datetime.fromisoformat(read_at) <= now


def test_time_functions_elsewhere_are_recomputed_and_say_why(spark: SparkSession, db: str) -> None:
    """Time in a view's columns, in HAVING or in an outer join's condition over both sides
    cannot be moved by the rows that crossed a bound: AUTO recomputes (DESCRIBE says why),
    INCREMENTAL STRICT refuses naming it; ACCESS BY over a time filter is refused."""
    for stmt in BASE:
        spark.sql(stmt)
    spark.sql("INSERT INTO ev VALUES (1, 0, TIMESTAMP '2026-11-02 00:00:00', 3.00)")
    cases = {
        "in_select": ("SELECT id, CAST(current_timestamp() AS LONG) - CAST(ts AS LONG) AS age_s FROM ev",
                      "time-dependent function"),
        "in_having": ("SELECT cust, max(ts) AS last FROM ev GROUP BY cust "
                      "HAVING max(ts) > now() - INTERVAL 1 DAY", "HAVING"),
        "outer_both": ("SELECT c.cust, e.id FROM cu c LEFT JOIN ev e ON c.cust = e.cust "
                       "AND e.ts > c.since + (current_date() - DATE '2026-01-01')",
                       "time-dependent function"),
    }
    for name, (query, names) in cases.items():
        strict = f"CREATE MATERIALIZED VIEW {name}_s REFRESH POLICY INCREMENTAL STRICT AS {query}"
        e = refused(lambda: spark.sql(strict))  # noqa: B023 (called at once)
        assert "IVM_NOT_INCREMENTALIZABLE" in str(e) and names in str(e), (name, str(e))
        described = MaterializedView.create(spark, name, query, refresh_policy="AUTO").describe()
        assert described["refresh_mode"] == "full" and names in described["full_because"], described
    e = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW lookups ACCESS BY (cust) AS SELECT cust, id "
                                  "FROM ev WHERE ts > now() - INTERVAL 1 DAY"))
    assert "time" in str(e), str(e)


@pytest.mark.parametrize("instant", ["yesterday", "2026-13-01"])
def test_a_bad_instant_setting_is_refused(spark: SparkSession, instant: str) -> None:
    with pytest.raises(Exception, match="spark.ivm.refresh.instant"):
        spark.conf.set("spark.ivm.refresh.instant", instant)
    assert spark.conf.get("spark.ivm.refresh.instant", "") == ""
