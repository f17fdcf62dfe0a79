"""Refresh policies (AUTO, INCREMENTAL, INCREMENTAL STRICT, FULL), schedules, the refresh
service, cascading refreshes, history and lag: each checked against recomputation."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import pytest
from ivm_testing import assert_matches_query, condition, refused, session_confs, short_jvm_env
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, RefreshService, errors
from spark_ivm.errors import InvalidScheduleError, NotIncrementalizableError, ScheduleConflictError

AGG = "SELECT k % 5 AS g, count(*) AS n, sum(v) AS s FROM base GROUP BY k % 5"
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def auto_by_default(spark: SparkSession) -> Iterator[None]:
    """Views created without REFRESH POLICY get AUTO, as outside the tests."""
    with session_confs(spark, {"spark.ivm.refreshPolicy.default": "auto"}):
        yield


@pytest.fixture()
def base(spark: SparkSession, db: str) -> str:
    spark.sql("CREATE TABLE base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO base SELECT id, id * 2 FROM range(50)")
    return db


def versions(spark: SparkSession, table: str) -> int:
    return spark.sql(f"DESCRIBE HISTORY {table}").count()


def test_policies_at_create(spark: SparkSession, base: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW auto_v AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW inc_v REFRESH POLICY INCREMENTAL AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW strict_v REFRESH POLICY INCREMENTAL STRICT AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW full_v COMMENT 'c' REFRESH POLICY FULL AS {AGG}")
    policies = {r.viewName: (r.refreshPolicy, r.refreshMode)
                for r in spark.sql("SHOW MATERIALIZED VIEWS").collect()}
    assert policies == {"auto_v": ("AUTO", "incremental"), "inc_v": ("INCREMENTAL", "incremental"),
                        "strict_v": ("INCREMENTAL STRICT", "incremental"), "full_v": ("FULL", "full")}
    spark.sql("INSERT INTO base VALUES (100, 1), (101, 2)")
    spark.sql("DELETE FROM base WHERE k = 3")
    for name, mode in [("auto_v", "incremental"), ("inc_v", "incremental"), ("strict_v", "incremental"),
                       ("full_v", "full")]:
        mv = MaterializedView.for_name(spark, name)
        report = mv.refresh()
        assert (report.mode, report.policy) == (mode, policies[name][0]), (name, report)
        assert report.reason, report
        assert_matches_query(spark, name, AGG)
    # The older ivm.refresh property still works: it stands for INCREMENTAL or FULL.
    spark.sql(f"CREATE MATERIALIZED VIEW legacy TBLPROPERTIES ('ivm.refresh' = 'full') AS {AGG}")
    assert MaterializedView.for_name(spark, "legacy").refresh_policy == "FULL"
    e = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW both TBLPROPERTIES ('ivm.refresh' = 'full') REFRESH POLICY AUTO AS {AGG}"))
    assert condition(e) == "IVM_INVALID_PROPERTY"


@pytest.mark.parametrize("query, operator", [
    ("SELECT r, count(*) AS n FROM (SELECT rank() OVER (ORDER BY v) AS r FROM base) GROUP BY r",
     "window function"),
    ("SELECT k FROM base LIMIT 3", "LIMIT"),
])
def test_a_query_that_cannot_be_maintained(spark: SparkSession, base: str, query: str, operator: str) -> None:
    before = versions(spark, "base")
    with pytest.raises(NotIncrementalizableError) as e:
        MaterializedView.create(spark, "strict", query, refresh_policy="INCREMENTAL STRICT")
    assert condition(e.value) == "IVM_NOT_INCREMENTALIZABLE" and operator in str(e.value)
    assert "REFRESH POLICY AUTO" in str(e.value)
    assert not spark.catalog.tableExists("strict") and not spark.catalog.tableExists("__ivm_backing_strict")
    assert versions(spark, "base") == before  # nothing changed, not even the change feed setting
    # AUTO and INCREMENTAL recompute it, and say why
    for policy in ("AUTO", "INCREMENTAL"):
        name = f"v_{policy.lower()}"
        mv = MaterializedView.create(spark, name, query, refresh_policy=policy)
        d = mv.describe()
        assert d["refresh_mode"] == "full" and operator in d["full_because"], d
        spark.sql("INSERT INTO base VALUES (7, 700)")
        report = mv.refresh()
        assert report.mode == "full" and "cannot be maintained incrementally" in report.reason
        if "LIMIT" not in query:
            assert_matches_query(spark, name, query)
    # ALTER to STRICT is refused the same way, and changes nothing
    e2 = refused(lambda: spark.sql("ALTER MATERIALIZED VIEW v_auto SET REFRESH POLICY INCREMENTAL STRICT"))
    assert condition(e2) == "IVM_NOT_INCREMENTALIZABLE"
    assert MaterializedView.for_name(spark, "v_auto").refresh_policy == "AUTO"


def test_alter_refresh_policy_keeps_the_view_exact(spark: SparkSession, base: str) -> None:
    mv = MaterializedView.create(spark, "m", AGG)
    assert mv.refresh_policy == "AUTO"
    mv.refresh_policy = "FULL"  # another layout: rebuilt
    assert mv.describe()["refresh_mode"] == "full"
    spark.sql("INSERT INTO base VALUES (200, 1)")
    assert mv.refresh().mode == "full"
    assert_matches_query(spark, "m", AGG)
    spark.sql("ALTER MATERIALIZED VIEW m SET REFRESH POLICY INCREMENTAL")
    spark.sql("INSERT INTO base VALUES (201, 1)")
    assert mv.refresh().mode == "incremental"
    mv.refresh_policy = "incremental_strict"  # same layout: only the property changes
    assert mv.refresh_policy == "INCREMENTAL STRICT"
    spark.sql("DELETE FROM base WHERE k < 10")
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "m", AGG)
    modes = [e.mode for e in mv.history()]
    assert modes[-1] == "create" and "full" in modes, modes  # history outlives the rebuilds


def test_auto_chooses_by_the_size_of_the_change(spark: SparkSession, db: str,
                                                request: pytest.FixtureRequest) -> None:
    spark.sql("CREATE TABLE big (k BIGINT, v BIGINT, pad STRING) USING delta")
    spark.sql("INSERT INTO big SELECT id, id % 97, sha2(cast(id AS STRING), 256) FROM range(300000)")
    q = "SELECT v, count(*) AS n, sum(k) AS s FROM big GROUP BY v"
    # The table is small, for a test: AUTO may recompute it, with a smaller margin and any change.
    for key, value in (("autoMinGainMs", "100"), ("autoMinChangeBytes", "0")):
        spark.conf.set(f"spark.ivm.refreshPolicy.{key}", value)
        request.addfinalizer(lambda key=key: spark.conf.unset(f"spark.ivm.refreshPolicy.{key}"))
    mv = MaterializedView.create(spark, "autov", q)
    assert mv.refresh(full=True).mode == "full"  # a recomputation measured: AUTO need not try one
    spark.sql("INSERT INTO big VALUES (-1, 5, 'new')")
    small = mv.refresh()
    assert small.mode == "incremental" and small.reason.startswith("AUTO chose incremental"), small.reason
    assert {c.mode for c in small.candidates} == {"incremental", "full"}
    # every row rewritten: reading the change costs more than recomputing
    spark.sql("INSERT OVERWRITE big "
              "SELECT id, (id + 1) % 97, sha2(cast(id AS STRING), 224) FROM range(300000)")
    explained = mv.explain_refresh()
    assert "Next refresh: full, because AUTO chose full" in explained, explained
    large = mv.refresh()
    assert large.mode == "full" and large.reason.startswith("AUTO chose full"), large.reason
    est = {c.mode: c.estimated_ms for c in large.candidates}
    assert est["full"] < est["incremental"]
    assert_matches_query(spark, "autov", q)
    # the choice is in the history, with its reason
    assert [e.mode for e in mv.history(limit=3)] == ["full", "incremental", "full"]


def test_auto_stops_a_refresh_past_its_time_and_recomputes(spark: SparkSession, base: str) -> None:
    """AUTO gives an incremental refresh a multiple of the recomputation it estimates; past it,
    the attempt stops before it writes anything and the same refresh recomputes the view. The
    attempt's time is kept in the history, where the next choice weighs it."""
    q = ("SELECT b1.k % 5 AS g, count(*) AS n, sum(b2.v) AS s FROM base b1 JOIN base b2 ON b1.k = b2.v "
         "GROUP BY b1.k % 5")
    mv = MaterializedView.create(spark, "stopv", q)
    spark.sql("INSERT INTO base VALUES (7, 14), (100, 7)")
    # A time no incremental refresh keeps to, and a pause where the changes are read.
    with session_confs(spark, {"spark.ivm.refreshPolicy.autoStopFactor": "0.000001",
                               "spark.ivm.refreshPolicy.autoStopMinMs": "1",
                               "spark.ivm.testing.sqlAt":
                                   "after-changes:SELECT java_method('java.lang.Thread', 'sleep', 50L)"}):
        stopped = mv.refresh()
    assert stopped.mode == "full", stopped
    assert stopped.reason.startswith("AUTO stopped the incremental refresh after"), stopped.reason
    assert_matches_query(spark, "stopv", q)
    last = mv.history(limit=1)[0]
    assert last.mode == "full" and last.reason == stopped.reason
    # The next small change: AUTO's incremental estimate now rests on the stopped attempt.
    spark.sql("DELETE FROM base WHERE k = 100")
    after = mv.refresh()
    basis = {c.mode: c.basis for c in after.candidates}
    assert "fitted to 1 incremental refreshes" in basis["incremental"], basis
    assert_matches_query(spark, "stopv", q)


def test_auto_recomputes_where_the_changes_cannot_be_followed(spark: SparkSession, base: str) -> None:
    """Changes that cannot be read any more (VACUUM removed the change data files before the
    refresh), and a base table dropped and created again: AUTO recomputes the view in the same
    refresh and says why; INCREMENTAL and INCREMENTAL STRICT fail, naming the cause and leaving
    their views as they were. The next change is followed incrementally again."""
    views = {policy: MaterializedView.create(spark, f"follow_{policy.split()[-1].lower()}", AGG,
                                             refresh_policy=policy)
             for policy in ("AUTO", "INCREMENTAL", "INCREMENTAL STRICT")}
    held = {p: sorted(spark.table(mv.name).collect()) for p, mv in views.items()}
    spark.sql("DELETE FROM base WHERE k < 10")  # its change data is in files of their own
    with session_confs(spark, {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}):
        spark.sql("VACUUM base RETAIN 0 HOURS")
    recomputed = views["AUTO"].refresh()
    assert recomputed.mode == "full", recomputed
    assert "cannot be followed" in recomputed.reason and "IVM_CHANGES_UNAVAILABLE" in recomputed.reason, \
        recomputed.reason
    assert views["AUTO"].history(limit=1)[0].reason == recomputed.reason
    assert_matches_query(spark, views["AUTO"].name, AGG)
    for policy in ("INCREMENTAL", "INCREMENTAL STRICT"):
        e = refused(views[policy].refresh)
        assert condition(e) == "IVM_CHANGES_UNAVAILABLE" and "FULL" in str(e), str(e)[:600]
        assert sorted(spark.table(views[policy].name).collect()) == held[policy]
    spark.sql("INSERT INTO base VALUES (3, 1), (1000, 5)")
    assert views["AUTO"].refresh().mode == "incremental"
    assert_matches_query(spark, views["AUTO"].name, AGG)
    # Another table of the name: recomputed from the new table's rows.
    spark.sql("DROP TABLE base")
    spark.sql("CREATE TABLE base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO base VALUES (1, 2), (6, 3)")
    replaced = views["AUTO"].refresh()
    assert replaced.mode == "full" and "IVM_SOURCE_CHANGED" in replaced.reason, replaced.reason
    assert_matches_query(spark, views["AUTO"].name, AGG)
    assert condition(refused(views["INCREMENTAL"].refresh)) == "IVM_SOURCE_CHANGED"


def test_strict_refresh_that_must_recompute_fails_and_changes_nothing(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE e (a INT, b INT) USING delta")
    spark.sql("INSERT INTO e SELECT id % 7, (id * 3) % 7 FROM range(40)")
    q = ("SELECT count(*) AS n FROM e r JOIN e s ON r.b = s.a JOIN e t ON s.b = t.a AND t.b = r.a")
    mv = MaterializedView.create(spark, "tri", q, refresh_policy="INCREMENTAL STRICT")
    spark.conf.set("spark.ivm.testing.failAt", "refresh-start")
    try:
        with pytest.raises(Exception, match="refresh-start"):
            mv.epsilon = 0.3  # killed after the property, before the state's rebuild
    finally:
        spark.conf.unset("spark.ivm.testing.failAt")
    spark.sql("INSERT INTO e VALUES (1, 2)")
    before = versions(spark, "__ivm_backing_tri")
    e = refused(mv.refresh)
    assert condition(e) == "IVM_REFRESH_NOT_INCREMENTAL" and "REFRESH MATERIALIZED VIEW" in str(e)
    assert versions(spark, "__ivm_backing_tri") == before
    assert mv.refresh(full=True).mode == "full"
    assert_matches_query(spark, "tri", q)


def test_schedules_are_stored_shown_and_validated(spark: SparkSession, base: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW s1 SCHEDULE EVERY 2 HOURS AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW s2 SCHEDULE CRON '0 15 10 ? * MON-FRI' AT TIME ZONE 'Europe/Paris' "
              f"AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW s3 TRIGGER ON UPDATE AT MOST EVERY INTERVAL 10 SECONDS AS {AGG}")
    shown = {r.viewName: r.schedule for r in spark.sql("SHOW MATERIALIZED VIEWS").collect()}
    assert shown == {"s1": "SCHEDULE EVERY 2 HOURS",
                     "s2": "SCHEDULE CRON '0 15 10 ? * MON-FRI' AT TIME ZONE 'Europe/Paris'",
                     "s3": "TRIGGER ON UPDATE AT MOST EVERY INTERVAL 10 SECONDS"}
    assert MaterializedView.for_name(spark, "s1").describe()["info"]["Schedule"] == "SCHEDULE EVERY 2 HOURS"
    for bad, why in [("SCHEDULE EVERY 0 HOURS", "positive"), ("SCHEDULE CRON 'every day'", "cron"),
                     ("SCHEDULE CRON '0 0 * * * ?' AT TIME ZONE 'Mars/Olympus'", "time zone"),
                     ("TRIGGER ON UPDATE AT MOST EVERY INTERVAL 0 SECONDS", "positive")]:
        with pytest.raises(InvalidScheduleError, match=why), errors.translated():
            spark.sql(f"CREATE MATERIALIZED VIEW bad {bad} AS {AGG}")
        assert not spark.catalog.tableExists("bad")
        e = refused(lambda bad=bad: spark.sql(f"ALTER MATERIALIZED VIEW s1 ALTER {bad}"))
        assert condition(e) == "IVM_INVALID_SCHEDULE"
    e = refused(lambda: spark.sql(f"CREATE MATERIALIZED VIEW bad SCHEDULE EVERY 5 YEARS AS {AGG}"))
    assert condition(e) == "PARSE_SYNTAX_ERROR"
    assert MaterializedView.for_name(spark, "s1").schedule == "SCHEDULE EVERY 2 HOURS"
    with pytest.raises(ScheduleConflictError, match="ALTER SCHEDULE"), errors.translated():
        spark.sql("ALTER MATERIALIZED VIEW s1 ADD SCHEDULE EVERY 1 HOUR")
    spark.sql("ALTER MATERIALIZED VIEW s1 ALTER SCHEDULE EVERY 1 DAY")
    spark.sql("ALTER MATERIALIZED VIEW s3 DROP SCHEDULE")
    assert condition(refused(lambda: spark.sql("ALTER MATERIALIZED VIEW s3 DROP SCHEDULE"))) == \
        "IVM_SCHEDULE_CONFLICT"
    mv = MaterializedView.for_name(spark, "s3")
    mv.set_schedule("TRIGGER ON UPDATE")
    shown = {r.viewName: r.schedule for r in spark.sql("SHOW MATERIALIZED VIEWS").collect()}
    assert shown["s1"] == "SCHEDULE EVERY 1 DAY" and shown["s3"] == "TRIGGER ON UPDATE"


def test_service_runs_each_schedule_kind_on_a_controlled_clock(spark: SparkSession, base: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW hourly SCHEDULE EVERY 1 HOUR AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW cron SCHEDULE CRON '0 30 * * * ?' AT TIME ZONE 'UTC' AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW trig TRIGGER ON UPDATE AT MOST EVERY INTERVAL 30 SECONDS AS {AGG}")
    spark.sql(f"CREATE MATERIALIZED VIEW manual AS {AGG}")
    service = RefreshService(spark, [base])

    def refreshed(now: datetime) -> dict:
        return {r.view.split(".")[-1].strip("`"): r.report.mode for r in service.run_once(now)
                if r.action == "refreshed" and r.report is not None}

    # The first pass: the time-based views count from their creation (now, in real time), so
    # nothing is due at T0 (before it) but the trigger, which has nothing to apply.
    assert refreshed(T0) == {}
    spark.sql("INSERT INTO base VALUES (500, 1)")
    assert refreshed(T0 + timedelta(seconds=1)) == {"trig": "incremental"}
    spark.sql("INSERT INTO base VALUES (501, 1)")
    assert refreshed(T0 + timedelta(seconds=20)) == {}  # rate limit: 30 s since the last
    assert refreshed(T0 + timedelta(seconds=31)) == {"trig": "incremental"}
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup(None))
    assert refreshed(T0 + timedelta(seconds=90)) == {}  # no new commit: nothing to do
    assert set(tracker.getJobIdsForGroup(None)) == jobs  # and no Spark job to find that out
    # The time-based views count from their creation, a moment ago in real time: at t1, more
    # than an hour later and just past a :30, both are due; a minute later neither is.
    t1 = (datetime.now(timezone.utc) + timedelta(hours=2)).replace(minute=31, second=0, microsecond=0)
    due = refreshed(t1)
    assert due == {"hourly": "incremental", "cron": "incremental"}, due
    assert refreshed(t1 + timedelta(minutes=1)) == {}
    for name in ("hourly", "cron", "trig"):
        assert_matches_query(spark, name, AGG)
    kinds = {e.triggered_by for e in MaterializedView.for_name(spark, "trig").history()}
    assert kinds == {"create", "service"}


def test_a_failing_view_does_not_stop_the_others(spark: SparkSession, base: str) -> None:
    spark.sql("CREATE TABLE other (k INT) USING delta")
    spark.sql("INSERT INTO other VALUES (1)")
    spark.sql(f"CREATE MATERIALIZED VIEW good TRIGGER ON UPDATE AS {AGG}")
    spark.sql("CREATE MATERIALIZED VIEW doomed TRIGGER ON UPDATE AS "
              "SELECT k, count(*) AS n FROM other GROUP BY k")
    spark.sql("INSERT INTO other VALUES (2)")
    spark.sql("DROP TABLE other")
    spark.sql("INSERT INTO base VALUES (900, 9)")
    service = RefreshService(spark, [base])
    runs = {r.view.split(".")[-1].strip("`"): r for r in service.run_once(T0)}
    assert runs["good"].action == "refreshed" and runs["doomed"].action == "failed"
    assert "IVM_SOURCE_MISSING" in (runs["doomed"].error or "")
    status = service.status()
    doomed = next(v for k, v in status.items() if k.endswith("doomed"))
    assert doomed["failures"] == 1 and doomed["retry_at_ms"] > T0.timestamp() * 1000
    # backing off: not retried at once, retried after the wait, with a longer wait after
    retried = {r.view.split(".")[-1].strip("`") for r in service.run_once(T0 + timedelta(seconds=1))}
    assert "doomed" not in retried
    later = service.run_once(T0 + timedelta(minutes=5))
    assert [r.action for r in later if r.view.endswith("doomed")] == ["failed"]
    doomed = next(v for k, v in service.status().items() if k.endswith("doomed"))
    assert doomed["failures"] == 2
    failed = [e for e in MaterializedView(spark, "doomed").history() if e.mode == "failed"]
    assert failed and failed[0].error and failed[0].triggered_by == "service"
    assert_matches_query(spark, "good", AGG)


def test_views_on_views_cascade(spark: SparkSession, base: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW c1 TRIGGER ON UPDATE AS {AGG}")
    q2 = "SELECT g % 2 AS h, sum(n) AS n2, max(s) AS s FROM c1 GROUP BY g % 2"
    q3 = "SELECT sum(n2) AS total, count(*) AS groups FROM c2"
    spark.sql(f"CREATE MATERIALIZED VIEW c2 TRIGGER ON UPDATE AS {q2}")
    spark.sql(f"CREATE MATERIALIZED VIEW c3 AS {q3}")
    spark.sql("INSERT INTO base SELECT id, 1 FROM range(1000, 1010)")
    # REFRESH ... CASCADE refreshes what c3 reads first, in order; one row per view
    rows = spark.sql("REFRESH MATERIALIZED VIEW c3 CASCADE").collect()
    assert [r.view.split(".")[-1].strip("`") for r in rows] == ["c1", "c2", "c3"]
    assert [r.mode for r in rows] == ["incremental"] * 3
    for name, q in [("c1", AGG), ("c2", q2), ("c3", q3)]:
        assert_matches_query(spark, name, q)
    again = spark.sql("REFRESH MATERIALIZED VIEW c3 CASCADE").collect()
    assert [r.mode for r in again] == ["noop"] * 3
    # the service takes one commit through the chain of triggered views in one pass
    spark.sql("DELETE FROM base WHERE k < 20")
    service = RefreshService(spark, [base])
    order = [r.view.split(".")[-1].strip("`") for r in service.run_once(T0) if r.action == "refreshed"]
    assert order == ["c1", "c2"], order
    assert MaterializedView.for_name(spark, "c3").lag().pending_commits == 1
    assert MaterializedView.for_name(spark, "c2").lag().up_to_date
    # a dropped upstream view gives its dependants a clear error
    spark.sql("DROP MATERIALIZED VIEW c1")
    e = refused(lambda: spark.sql("REFRESH MATERIALIZED VIEW c2"))
    assert condition(e) == "IVM_SOURCE_MISSING", str(e)


def test_two_services_never_apply_a_change_twice(spark: SparkSession, base: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW raced TRIGGER ON UPDATE AS {AGG}")
    for round_ in range(2):
        spark.sql(f"INSERT INTO base VALUES ({700 + round_}, 3), ({710 + round_}, 4)")
        services = [RefreshService(spark.newSession(), [base]) for _ in range(2)]
        results: list = []
        at = T0 + timedelta(minutes=round_)
        threads = [threading.Thread(target=lambda s=s, results=results, at=at: results.extend(s.run_once(at)))
                   for s in services]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        modes = sorted(r.report.mode for r in results if r.report is not None)
        assert len(results) == 2 and all(r.action == "refreshed" for r in results), results
        # both refreshed; one applied the change, the other found it applied
        assert modes[0] == "incremental" and modes[1] in ("noop", "skipped"), modes
        assert_matches_query(spark, "raced", AGG)


def test_history_and_lag(spark: SparkSession, base: str) -> None:
    mv = MaterializedView.create(spark, "h", AGG)
    assert mv.lag().up_to_date and mv.lag().lag_seconds == 0
    spark.sql("INSERT INTO base VALUES (300, 1)")
    time.sleep(0.2)
    spark.sql("INSERT INTO base VALUES (301, 1)")
    lag = mv.lag()
    assert lag.pending_commits == 2 and lag.lag_seconds > 0, lag
    assert mv.describe()["freshness"]["pending_commits"] == 2
    mv.refresh()
    spark.sql("DELETE FROM base WHERE k = 301")
    mv.refresh()
    assert mv.lag().up_to_date
    entries = mv.history()
    assert [e.refresh_number for e in entries] == [2, 1, 0]
    assert [e.mode for e in entries] == ["incremental", "incremental", "create"]
    assert entries[1].source_rows_changed == 2 and entries[0].source_rows_changed == 1
    assert entries[2].source_rows_changed is None  # CREATE reads no changes: unknown, never -1
    assert all(e.duration_ms > 0 and e.error is None for e in entries)
    assert [e.refresh_number for e in mv.history(limit=1)] == [2]
    rows = spark.sql("SHOW REFRESHES FOR h LIMIT 2").collect()
    assert [r.refresh_number for r in rows] == [2, 1] and rows[0].reason.startswith("AUTO")
    # durable: the history is in the table's properties, which checkpoints keep
    spark.sql("ALTER TABLE __ivm_backing_h SET TBLPROPERTIES ('delta.checkpointInterval' = '1')")
    spark.sql("INSERT INTO base VALUES (302, 1)")
    mv.refresh()
    assert [e.refresh_number for e in MaterializedView.for_name(spark, "h").history()][:2] == [3, 2]


def test_service_thread_catches_up_by_itself(spark: SparkSession, base: str) -> None:
    mv = MaterializedView.create(spark, "live", AGG, schedule="TRIGGER ON UPDATE")
    spark.conf.set("spark.ivm.service.pollIntervalMs", "100")
    service = RefreshService(spark, [base]).start()
    try:
        assert service.running
        spark.sql("INSERT INTO base VALUES (800, 8)")
        deadline = time.time() + 60
        while not mv.lag().up_to_date and time.time() < deadline:
            time.sleep(0.2)
        assert mv.lag().up_to_date
    finally:
        assert service.stop(timeout=60)
        spark.conf.unset("spark.ivm.service.pollIntervalMs")
    assert not service.running
    assert_matches_query(spark, "live", AGG)


def refresh_command(directory: Path) -> dict:
    """A view with a trigger made by one process, refreshed by `spark-ivm-refresh --once` in
    another (both on a Hive metastore in `directory`)."""
    setup = directory / "setup.py"
    setup.write_text(
        "import sys, os\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "from ivm_testing import make_session\n"
        f"os.chdir({str(directory)!r})\n"
        f"spark = make_session(master='local[1]', warehouse={str(directory)!r}, hive=True)\n"
        "if sys.argv[1] == 'create':\n"
        "    spark.sql('CREATE TABLE ev (k INT) USING delta')\n"
        "    spark.sql('INSERT INTO ev VALUES (1), (2)')\n"
        "    spark.sql('CREATE MATERIALIZED VIEW evc TRIGGER ON UPDATE AS '\n"
        "              'SELECT k, count(*) AS n FROM ev GROUP BY k')\n"
        "    spark.sql('INSERT INTO ev VALUES (2), (3)')\n"
        "else:\n"
        "    print('ROWS', sorted(tuple(r) for r in spark.table('evc').collect()))\n"
        "    print('LAG', spark.sql('DESCRIBE MATERIALIZED VIEW evc AS JSON').first()[0])\n")
    run = [sys.executable, str(setup)]
    created = subprocess.run(run + ["create"], capture_output=True, text=True, timeout=600, cwd=directory,
                             env=short_jvm_env())
    command = [sys.executable, "-m", "spark_ivm.service", "--once", "--hive", "--master", "local[1]",
               "--warehouse", str(directory),
               "--conf", f"javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName={directory}/metastore_db",
               "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={directory}"]
    service = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=directory,
                             env=short_jvm_env())
    checked = subprocess.run(run + ["check"], capture_output=True, text=True, timeout=600, cwd=directory,
                             env=short_jvm_env())
    return {"created": created, "service": service, "checked": checked}


@pytest.mark.subprocesses(work=refresh_command)
def test_refresh_command_runs_the_triggers_of_another_process(started: dict) -> None:
    for step in ("created", "service", "checked"):
        assert started[step].returncode == 0, (step, started[step].stderr[-3000:])
    assert "evc: refreshed (incremental)" in started["service"].stdout, started["service"].stdout
    assert "ROWS [(1, 1), (2, 2), (3, 1)]" in started["checked"].stdout
    assert '"pending_commits":0' in started["checked"].stdout
