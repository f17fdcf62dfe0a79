"""Exactly-once refresh: kills at every point of a refresh, races, commits during a refresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

from pyspark.sql import SparkSession

from ivm_testing import assert_matches_query
from spark_ivm import MaterializedView, RefreshReport

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crash_worker.py")
KILL_POINTS = ["create-after-backing", "after-changes", "before-commit", "after-commit"]


def run_worker(warehouse: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, WORKER, str(warehouse), *args],
                          capture_output=True, text=True, timeout=600)


def test_killed_refreshes_leave_readable_views_that_the_next_refresh_makes_exact(
        tmp_path: Path) -> None:
    # Step 0 creates the tables and views, changes the tables and dies refreshing at the first
    # point; step k checks what step k-1 left, changes the tables again and dies at point k.
    points = ["after-changes", "before-commit", "after-commit", "after-pin"]
    for step, point in enumerate(points + ["none"]):
        proc = run_worker(tmp_path, str(step), point)
        if point == "none":
            assert proc.returncode == 0, proc.stderr[-3000:]
        else:
            assert proc.returncode != 0, f"step {step} should have been killed at {point}"
            assert f"fault-injection point '{point}'" in proc.stderr, proc.stderr[-3000:]
        result = json.loads((tmp_path / f"result-{step}.json").read_text())
        for name, r in result.items():
            assert r["missing"] == "[]" and r["extra"] == "[]", (step, name, r)
            assert r["readable_rows"] > 0
            # A change is applied once: after a kill past its commit, the view killed (the
            # first, "agg") has nothing left to do; the other was never refreshed.
            killed_after_commit = points[step - 1] == "after-commit" and name == "agg"
            expected = "noop" if killed_after_commit else "incremental"
            assert r["mode"] == expected, (step, name, r)
    plain = run_worker(tmp_path, "plain")
    assert plain.returncode == 0, plain.stderr[-3000:]
    for name, r in json.loads((tmp_path / "result-plain.json").read_text()).items():
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

        def refresh() -> None:
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


def test_kill_during_create_leaves_no_half_view(tmp_path: Path) -> None:
    proc = run_worker(tmp_path, "0", "none")
    assert proc.returncode == 0, proc.stderr[-3000:]
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
                            timeout=600)
    assert killed.returncode != 0 and "create-after-backing" in killed.stderr
    again = subprocess.run([sys.executable, str(script), "ok"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "ROWS 3" in again.stdout
