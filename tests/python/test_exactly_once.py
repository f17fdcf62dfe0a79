"""Exactly-once refresh: kills at every point of a refresh, races, commits during a refresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest
from ivm_testing import assert_matches_query, short_jvm_env
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, RefreshReport

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_worker.py")


def run_worker(warehouse: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, WORKER, str(warehouse), *args],
                          capture_output=True, text=True, timeout=600, env=short_jvm_env())


def kill_chain(warehouse: Path) -> List[dict]:
    """Step 0 creates the tables and views, changes the tables and dies refreshing at the first
    point; step k checks what step k-1 left, changes the tables again and dies at point k; then
    a session without spark-ivm reads the views."""
    def run(step: str, *args: str) -> dict:
        proc = run_worker(warehouse, step, *args)
        result = warehouse / f"result-{step}.json"
        return {"step": step, "returncode": proc.returncode, "stderr": proc.stderr,
                "result": json.loads(result.read_text()) if result.exists() else None}
    steps = [dict(run(str(step), point), step=step, point=point)
             for step, point in enumerate(KILL_CHAIN + ["none"])]
    return steps + [run("plain")]


KILL_CHAIN = ["after-changes", "before-commit", "after-commit", "after-pin"]


@pytest.mark.subprocesses(work=kill_chain)
def test_killed_refreshes_leave_readable_views_that_the_next_refresh_makes_exact(started: List[dict]) -> None:
    for run in started[:-1]:
        step, point = run["step"], run["point"]
        if point == "none":
            assert run["returncode"] == 0, run["stderr"][-3000:]
        else:
            assert run["returncode"] != 0, f"step {step} should have been killed at {point}"
            assert f"fault-injection point '{point}'" in run["stderr"], run["stderr"][-3000:]
        assert run["result"] is not None, run["stderr"][-3000:]
        for name, r in run["result"].items():
            assert r["missing"] == "[]" and r["extra"] == "[]", (step, name, r)
            assert r["readable_rows"] > 0
            # A change is applied once: after a kill past its commit, the view killed (the
            # first, "agg") has nothing left to do; the other was never refreshed.
            killed_after_commit = KILL_CHAIN[step - 1] == "after-commit" and name == "agg"
            expected = "noop" if killed_after_commit else "incremental"
            assert r["mode"] == expected, (step, name, r)
    plain = started[-1]
    assert plain["returncode"] == 0, plain["stderr"][-3000:]
    for name, r in plain["result"].items():
        assert r["missing"] == "[]" and r["extra"] == "[]" and r["rows"] > 0, (name, r)


def test_second_refresh_without_commits_changes_nothing(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE s (k INT) USING delta")
    spark.sql("INSERT INTO s VALUES (1), (1), (2)")
    spark.sql("CREATE MATERIALIZED VIEW sv AS SELECT k, count(*) AS n FROM s GROUP BY k")
    spark.sql("INSERT INTO s VALUES (3)")
    mv = MaterializedView.for_name(spark, "sv")
    first = mv.refresh()
    version = spark.sql("DESCRIBE HISTORY __ivm_backing_sv LIMIT 1").collect()[0].version
    second = mv.refresh()
    assert (first.mode, second.mode) == ("incremental", "noop")
    assert second.refresh_number == first.refresh_number
    assert spark.sql("DESCRIBE HISTORY __ivm_backing_sv LIMIT 1").collect()[0].version == version


def test_commit_during_refresh_goes_to_the_next_refresh(spark: SparkSession, db: str) -> None:
    q = "SELECT k, count(*) AS n FROM s2 GROUP BY k"
    spark.sql("CREATE TABLE s2 (k INT) USING delta")
    spark.sql("INSERT INTO s2 VALUES (1)")
    spark.sql(f"CREATE MATERIALIZED VIEW sv2 AS {q}")
    spark.sql("INSERT INTO s2 VALUES (2)")
    spark.conf.set("spark.ivm.testing.sqlAt", "after-pin:INSERT INTO s2 VALUES (3)")
    mv = MaterializedView.for_name(spark, "sv2")
    first = mv.refresh()
    assert sorted(r.k for r in spark.table("sv2").collect()) == [1, 2]  # not 3: pinned before it
    assert first.sources[0].changed_rows == 1
    second = mv.refresh()
    assert second.mode == "incremental" and second.sources[0].changed_rows == 1
    assert_matches_query(spark, "sv2", q)


def test_concurrent_refreshes_never_apply_a_change_twice(spark: SparkSession, db: str) -> None:
    q = "SELECT k % 3 AS g, count(*) AS n, sum(k) AS s FROM c GROUP BY k % 3"
    spark.sql("CREATE TABLE c (k INT) USING delta")
    spark.sql("INSERT INTO c SELECT id FROM range(20)")
    spark.sql(f"CREATE MATERIALIZED VIEW cv AS {q}")
    for round_ in range(2):
        spark.sql(f"INSERT INTO c SELECT id FROM range({100 * (round_ + 1)}, {100 * (round_ + 1) + 7})")
        reports: List[RefreshReport] = []
        errors: List[BaseException] = []

        def refresh(reports: List[RefreshReport] = reports, errors: List[BaseException] = errors) -> None:
            try:
                # each thread its own session: same catalog, separate confs
                reports.append(MaterializedView(spark.newSession(), f"{db}.cv").refresh())
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=refresh) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        modes = sorted(r.mode for r in reports)
        assert modes in (["incremental", "noop"], ["incremental", "skipped"]), modes
        assert_matches_query(spark, "cv", q)


def kill_create(tmp_path: Path) -> dict:
    """A CREATE killed after its backing table is written, then the same CREATE again."""
    first = run_worker(tmp_path, "0", "none")
    script = tmp_path / "create_kill.py"
    script.write_text(
        "import sys, os\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(WORKER))!r})\n"
        "from ivm_testing import make_session\n"
        f"os.chdir({str(tmp_path)!r})\n"
        f"spark = make_session(master='local[1]', warehouse={str(tmp_path)!r}, hive=True)\n"
        "if sys.argv[1] == 'kill':\n"
        "    spark.conf.set('spark.ivm.testing.killAt', 'create-after-backing')\n"
        "spark.sql('CREATE MATERIALIZED VIEW k AS SELECT b, count(*) AS n FROM r GROUP BY b')\n"
        "print('ROWS', spark.table('k').count())\n"
    )
    killed = subprocess.run([sys.executable, str(script), "kill"], capture_output=True, text=True,
                            timeout=600, env=short_jvm_env())
    again = subprocess.run([sys.executable, str(script), "ok"], capture_output=True, text=True, timeout=600,
                           env=short_jvm_env())
    return {"first": first, "killed": killed, "again": again}


@pytest.mark.subprocesses(work=kill_create)
def test_kill_during_create_leaves_no_half_view(started: dict) -> None:
    assert started["first"].returncode == 0, started["first"].stderr[-3000:]
    killed, again = started["killed"], started["again"]
    assert killed.returncode != 0 and "create-after-backing" in killed.stderr
    assert again.returncode == 0, again.stderr[-3000:]
    assert "ROWS 3" in again.stdout
