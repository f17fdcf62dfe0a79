"""The refresh engine's shape: what a refresh costs in Spark jobs, the paths it takes for small
and large changes, the settings registry, and the session set-up. Every refresh here is also
compared with recomputation."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from ivm_testing import assert_matches_query, condition, follow_changes, multiset, refused, short_jvm_env
from ivm_testing import session_confs as confs
from pyspark.sql import DataFrame, Row, SparkSession
from spark_ivm import MaterializedView, configure_spark_with_ivm
from spark_ivm.session import CODEGEN_CACHE_ENTRIES, LOCAL_FILE_CONTEXT, NIO_LOCAL_FS, session_defaults

# What a refresh costs is measured here: its refreshes are not verified (spark.ivm.verify).
pytestmark = pytest.mark.measures_cost

AGG = "SELECT g, count(*) AS n, sum(v) AS s, max(v) AS hi FROM f GROUP BY g"
JOIN = "SELECT d.name, count(*) AS n, sum(f.v) AS s FROM f JOIN d ON f.g = d.g GROUP BY d.name"


@pytest.fixture()
def tables(spark: SparkSession, db: str) -> str:
    spark.sql("CREATE TABLE f (id INT, g INT, v DOUBLE) USING delta")
    spark.sql("CREATE TABLE d (g INT, name STRING) USING delta")
    spark.sql("INSERT INTO f SELECT id, id % 7, id * 0.5 FROM range(200)")
    spark.sql("INSERT INTO d SELECT id, concat('n', id % 3) FROM range(7)")
    return db


def change(spark: SparkSession, round_: int) -> None:
    spark.sql(f"INSERT INTO f VALUES ({1000 + round_}, {round_ % 7}, 1.5), ({2000 + round_}, 9, 2.5)")
    spark.sql(f"DELETE FROM f WHERE id = {round_ * 3}")
    spark.sql(f"UPDATE f SET v = v + 100 WHERE id = {round_ * 5 + 1}")


def test_noop_refresh_runs_no_spark_job(spark: SparkSession, tables: str) -> None:
    mv = MaterializedView.create(spark, "agg", AGG)
    report = mv.refresh()
    assert report.mode == "noop" and report.spark_jobs == 0, report


def test_refresh_runs_few_jobs_and_reports_them_per_phase(spark: SparkSession, tables: str) -> None:
    views = {"agg": AGG, "joined": JOIN}
    for name, q in views.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    for round_ in range(1, 4):
        change(spark, round_)
        for name, q in views.items():
            report = MaterializedView.for_name(spark, name).refresh()
            assert report.mode == "incremental"
            # changes 1; the changed rows 1, with a broadcast of the backing table and the
            # rebuild of its new Delta snapshot 3; the MAX's folded delta and groups to
            # recompute 4 more; apply and commit 2. The first refresh reads the small tables it
            # then holds on the driver (from their files, or a job each); later ones may run none.
            assert report.spark_jobs <= (16 if name == "agg" else 10), report
            assert report.rows_read > 0 or round_ > 1, report
            assert sum(report.phases_jobs.values()) == report.spark_jobs, report
            assert report.phases_jobs.get("changes", 0) <= 1, report
            assert_matches_query(spark, name, q)


CODEGEN = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


def test_small_refreshes_run_without_generated_code_and_larger_ones_with_it(spark: SparkSession,
                                                                           tables: str) -> None:
    """Up to spark.ivm.refresh.interpretedMaxBytes of inputs a refresh runs its queries without
    whole-stage code generation and with its expressions interpreted (generating and compiling
    code costs more than it saves there); above it, and with 0, Spark generates code as usual.
    The refresh's settings never reach the user's session."""
    views = {"agg": AGG, "joined": JOIN}
    for name, q in views.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    # The test session runs without whole-stage code (ivm_testing.make_session); generate it here.
    with confs(spark, CODEGEN):
        for round_, limit in enumerate([1 << 30, 0, 1], start=1):
            change(spark, round_)
            with confs(spark, {"spark.ivm.refresh.interpretedMaxBytes": str(limit)}):
                for name, q in views.items():
                    full = round_ == 3 and name == "agg"
                    report = MaterializedView.for_name(spark, name).refresh(full=full)
                    assert report.mode == ("full" if full else "incremental")
                    no_code = any(n.startswith("queries without generated code") for n in report.plan_notes)
                    assert no_code == (limit > 1), report
                    assert_matches_query(spark, name, q)
            assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"
            assert spark.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
        change(spark, 4)
        report = MaterializedView.for_name(spark, "agg").refresh(full=True)
        assert any(n.startswith("queries without generated code") for n in report.plan_notes), report
        assert_matches_query(spark, "agg", AGG)


def planned(spark: SparkSession, df: DataFrame, group: str) -> Tuple[List[Row], str, int]:
    """The rows of `df`, its executed plan, and the number of Spark jobs collecting it ran."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        rows = df.collect()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    plan = df._jdf.queryExecution().executedPlan().toString()
    return rows, plan, len(sc.statusTracker().getJobIdsForGroup(group))


def test_reads_after_a_refresh_plan_from_the_files_it_left_held(spark: SparkSession, tables: str) -> None:
    """A refresh leaves the file lists of the versions it read and wrote on the driver; reading the
    view, or its base tables a few commits later, plans from them (no Delta state rebuild or
    listing job, only the query's own), a DataFrame executed again reads the newer version, and
    spark.ivm.knownFiles.queryMaxBytes=0 gives Delta's planning back, with the same rows."""
    mv = MaterializedView.create(spark, "joined", JOIN)
    before = spark.table("joined")
    change(spark, 1)
    mv.refresh()
    rows, plan, jobs = planned(spark, spark.table("joined"), "held-view")
    assert "SkippingFileIndex" in plan and jobs == 1, (jobs, plan)
    assert multiset(rows) == multiset(spark.sql(JOIN).collect())
    assert multiset(before.collect()) == multiset(rows)  # planned again: the refreshed version
    change(spark, 2)  # three commits past the version the refresh read
    rows, plan, _ = planned(spark, spark.table("f").where("g = 3"), "held-base")
    assert "SkippingFileIndex" in plan, plan
    with confs(spark, {"spark.ivm.knownFiles.queryMaxBytes": "0"}):
        delta_rows, delta_plan, _ = planned(spark, spark.table("f").where("g = 3"), "delta-base")
    assert "SkippingFileIndex" not in delta_plan, delta_plan
    assert multiset(rows) == multiset(delta_rows) and len(rows) > 0
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "joined", JOIN)


def test_small_broadcasts_are_built_on_the_driver(spark: SparkSession, tables: str) -> None:
    """Without adaptive execution (as in a refresh), the broadcast side of a join that scans a
    small Delta table is read and built on the driver: the same rows, deletion vectors and
    filters applied, without the broadcast's job; above spark.ivm.broadcast.driverReadMaxBytes
    (or at 0) it is Spark's own broadcast exchange. In a refresh, rows read that way still count."""
    spark.sql("CREATE TABLE dv (g INT, name STRING) USING delta "
              "TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.sql("INSERT INTO dv SELECT id, concat('n', id) FROM range(12)")
    spark.sql("DELETE FROM dv WHERE g IN (2, 5)")  # marks rows deleted in place
    query = ("SELECT /*+ BROADCAST(d), BROADCAST(e) */ f.g, d.name, e.name AS other, sum(f.v) AS s "
             "FROM f JOIN d ON f.g = d.g JOIN dv e ON f.g = e.g AND e.name <> 'n3' "
             "GROUP BY f.g, d.name, e.name")
    results = {}
    # The first run also pays for Delta's first reads of the tables' versions (jobs of their own).
    for run, max_bytes in enumerate(("0", "1048576", "1", "0")):
        with confs(spark, {"spark.sql.adaptive.enabled": "false",
                           "spark.ivm.broadcast.driverReadMaxBytes": max_bytes}):
            results[max_bytes] = planned(spark, spark.sql(query), f"driver-broadcast-{run}")
    on, small, off = results["1048576"], results["1"], results["0"]
    assert "DriverBroadcast" in on[1] and "BroadcastExchange" not in on[1], on[1]
    assert "DriverBroadcast" not in small[1] and "DriverBroadcast" not in off[1], off[1]
    assert multiset(on[0]) == multiset(off[0]) == multiset(small[0]) == multiset(spark.sql(query).collect())
    assert {r.g for r in on[0]} == {0, 1, 4, 6}  # g 2 and 5 deleted, 3 filtered, d only has 0-6
    assert on[2] + 2 == off[2], (on[2], off[2])  # two broadcasts without a job each
    mv = MaterializedView.create(spark, "joined", JOIN)
    change(spark, 1)
    report = mv.refresh()
    assert report.rows_read > 0 and report.spark_jobs <= 10, report
    assert_matches_query(spark, "joined", JOIN)


SELF_EXISTS = """SELECT l1.sk, count(*) AS n, sum(l1.qty) AS q FROM li l1 WHERE l1.late
    AND EXISTS (SELECT * FROM li l2 WHERE l2.ok = l1.ok AND l2.sk <> l1.sk)
    AND NOT EXISTS (SELECT * FROM li l3 WHERE l3.ok = l1.ok AND l3.sk <> l1.sk AND l3.late)
    GROUP BY l1.sk"""
SELF_OUTER = """SELECT n, count(*) AS keys FROM (SELECT l1.ok, count(l2.sk) AS n FROM li l1
    LEFT JOIN li l2 ON l1.ok = l2.ok AND l2.sk > l1.sk AND l2.note <> 'x' GROUP BY l1.ok) GROUP BY n"""
SHARED_MIN_BYTES = "spark.ivm.sharedReads.minTableBytes"
HELD_MAX_ROWS = "spark.ivm.heldTables.maxRows"
# Off, state is made by the refresh that asks for it (the second), where tests of the state expect it.
INLINE_STATE = "spark.ivm.state.buildInBackground"


def test_restricted_reads_of_a_large_table_are_shared(spark: SparkSession, db: str) -> None:
    """TPC-H Q21's shape: semi and anti joins of a table with itself, recomputed by key. Each
    occurrence is read at Pre and at Post restricted to the changed keys; from
    spark.ivm.sharedReads.minTableBytes up, the table is read once per refresh (Pre derived from
    Post and the change held on the driver) instead of six times, with the same rows. A left
    join under two aggregates (TPC-H Q13's shape) is checked the same way."""
    spark.sql("CREATE TABLE li (ok INT, sk INT, late BOOLEAN, qty DECIMAL(10, 2), note STRING) USING delta")
    spark.sql("INSERT INTO li SELECT id DIV 4, id % 5, id % 3 = 0, id % 50, repeat('x', id % 4) "
              "FROM range(4000)")
    table_rows = 4000
    shared = MaterializedView.create(spark, "li_shared", SELF_EXISTS)
    apart = MaterializedView.create(spark, "li_apart", SELF_EXISTS)
    outer = MaterializedView.create(spark, "li_outer", SELF_OUTER)
    changes = [
        ["DELETE FROM li WHERE ok IN (3, 500, 999)",
         "INSERT INTO li VALUES (3, 1, true, 1.00, 'n'), (3, 1, true, 1.00, 'n'), (7, 9, true, 2.00, NULL)"],
        ["UPDATE li SET late = NOT late WHERE ok IN (7, 8, 640) AND sk = 2",
         "UPDATE li SET ok = ok + 1 WHERE ok = 20",  # a row moves from one key to another
         "INSERT INTO li VALUES (NULL, 1, true, 3.00, 'z'), (NULL, 2, false, 3.00, 'z')"],
        ["DELETE FROM li WHERE ok IS NULL OR ok = 7", "INSERT INTO li VALUES (5000, 1, true, 4.00, 'w')"],
    ]
    for statements in changes:
        for statement in statements:
            spark.sql(statement)
        # The table is small enough to be held on the driver (spark.ivm.heldTables.maxRows):
        # read by scans here, as a large one is.
        with confs(spark, {SHARED_MIN_BYTES: "0", HELD_MAX_ROWS: "0"}):
            on = shared.refresh()
            outer.refresh()
        with confs(spark, {SHARED_MIN_BYTES: str(1 << 40), HELD_MAX_ROWS: "0"}):
            off = apart.refresh()
        assert on.mode == off.mode == "incremental", (on, off)
        assert_matches_query(spark, "li_shared", SELF_EXISTS)
        assert_matches_query(spark, "li_apart", SELF_EXISTS)
        assert_matches_query(spark, "li_outer", SELF_OUTER)
        assert on.rows_read < 1.5 * table_rows < 3 * table_rows < off.rows_read, (on.rows_read, off.rows_read)


KEPT_ROWS_QUERY = """SELECT k % 7 AS g, count(*) AS n, sum(w) AS sw FROM big
    WHERE w > (SELECT avg(w) FROM big) AND NOT EXISTS (SELECT 1 FROM few WHERE few.k = big.k)
    GROUP BY k % 7"""


def test_rows_read_by_key_are_kept_in_memory_between_refreshes(spark: SparkSession, db: str) -> None:
    """TPC-H Q22's shape. A NOT EXISTS recomputed for its changed keys reads the left table's
    rows of those keys. The second refresh that reads them keeps the table's rows (the columns
    the view reads) in memory, indexed by key, and moves them forward by each change, so later
    refreshes read no row of the table from storage: neither the changed keys' rows nor, when
    the average moves, the rows for which the old and the new average decide differently (found
    among the kept rows). They equal the query after every refresh, through inserts, deletes,
    duplicates, NULL keys and updates of keys and values. With
    spark.ivm.state.executorMaxBytes at 0 the table is scanned again."""
    table_rows = 3000
    spark.sql("CREATE TABLE big (k INT, w DECIMAL(10, 2), note STRING) USING delta")
    spark.sql(f"INSERT INTO big SELECT id, id % 13, repeat('n', id % 3) FROM range({table_rows})")
    spark.sql("CREATE TABLE few (k INT) USING delta")
    spark.sql("INSERT INTO few VALUES (1), (2), (3), (NULL)")
    changes = [
        ["INSERT INTO few VALUES (10), (11)", "DELETE FROM few WHERE k = 2"],
        ["UPDATE big SET w = w + 1 WHERE k IN (10, 12)", "INSERT INTO few VALUES (12), (12)"],
        ["INSERT INTO big VALUES (12, 5.00, 'x'), (12, 5.00, 'x'), (NULL, 1.00, NULL)",
         "DELETE FROM few WHERE k = 11"],
        ["UPDATE big SET k = 11 WHERE k = 13", "DELETE FROM big WHERE k = 1", "INSERT INTO few VALUES (1)"],
        ["DELETE FROM few WHERE k = 12", "UPDATE big SET w = 0 WHERE k = 12"],
    ]
    # `big` stands for a table too large to hold on the driver (spark.ivm.heldTables.maxRows).
    # Made in the refresh that asks, as a test of the state itself (test_state: made between refreshes).
    settings = {SHARED_MIN_BYTES: "0", "spark.ivm.keyCounts.minTableBytes": "0", HELD_MAX_ROWS: "0",
                INLINE_STATE: "false"}
    with confs(spark, settings):
        mv = MaterializedView.create(spark, "kept_rows", KEPT_ROWS_QUERY)
        reads = []
        for statements in changes:
            for statement in statements:
                spark.sql(statement)
            report = mv.refresh()
            assert report.mode == "incremental", report
            assert_matches_query(spark, "kept_rows", KEPT_ROWS_QUERY)
            reads.append(report.rows_read)
        # The first refresh scans `big` for its keys, the second keeps it; then only changes are read.
        assert reads[0] >= table_rows and max(reads[2:]) < table_rows / 10, reads
        spark.sql("INSERT INTO few VALUES (20)")
        with confs(spark, {"spark.ivm.state.executorMaxBytes": "0"}):
            off = mv.refresh()
        assert_matches_query(spark, "kept_rows", KEPT_ROWS_QUERY)
        assert off.rows_read >= table_rows, off.rows_read


def test_large_changes_take_the_distributed_paths(spark: SparkSession, tables: str) -> None:
    """Changes too big for the driver (by the settings) are netted and applied distributed."""
    views = {"agg": AGG, "joined": JOIN}
    for name, q in views.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    settings = [{"spark.ivm.changes.localMaxBytes": "0"}, {"spark.ivm.localMaxRows": "1"},
                {"spark.ivm.changes.localMaxBytes": "0", "spark.ivm.localMaxRows": "1"}]
    for round_, values in enumerate(settings, start=1):
        change(spark, round_)
        with confs(spark, values):
            for name, q in views.items():
                report = MaterializedView.for_name(spark, name).refresh()
                assert report.mode == "incremental" and report.source_rows_changed > 0, (values, report)
                assert_matches_query(spark, name, q)


def deletion_vectors(spark: SparkSession, table: str) -> int:
    """Files of the table's current version that carry a deletion vector (Delta's own list)."""
    location = spark.sql(f"DESCRIBE DETAIL {table}").first().location  # also updates the snapshot
    log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    return int(log.unsafeVolatileSnapshot().allFiles().where("deletionVector IS NOT NULL").count())


def test_large_applies_mark_rows_deleted_instead_of_rewriting(spark: SparkSession, tables: str) -> None:
    # Every apply searches its candidate files (as large tables do): the changed keys' rows are
    # marked deleted by deletion vectors, files mostly deleted are rewritten, the rest is appended.
    # Each such apply appends a small file; once there are 3 (compactMinFiles), the next apply
    # rewrites them into the one file it writes.
    def files(mv: MaterializedView) -> int:
        return int(spark.sql(f"DESCRIBE DETAIL __ivm_backing_{mv.name}").first()["numFiles"])

    counts: Dict[str, List[int]] = {"agg": [], "joined": []}
    marked = False
    with confs(spark, {"spark.ivm.apply.rewriteWithoutSearchBytes": "0",
                       "spark.ivm.apply.compactMinFiles": "3"}):
        agg = MaterializedView.create(spark, "agg", AGG)
        join = MaterializedView.create(spark, "joined", JOIN)
        spark.sql("INSERT INTO f SELECT id, id % 50, id * 0.25 FROM range(1000, 3000)")
        for mv, q in ((agg, AGG), (join, JOIN)):
            mv.refresh()
            assert_matches_query(spark, mv.name, q)
        for round_ in range(1, 7):
            change(spark, round_)
            for mv, q in ((agg, AGG), (join, JOIN)):
                report = mv.refresh()
                assert report.mode == "incremental", report
                assert_matches_query(spark, mv.name, q)
                counts[mv.name].append(files(mv))
                marked = marked or (mv is agg and deletion_vectors(spark, "__ivm_backing_agg") > 0)
        assert marked
    # At most 2 small files before an apply, plus the one it writes; agg's applies mark rows and
    # append (joined's rewrite its one file, most of whose rows each change deletes).
    assert all(max(seen) <= 3 for seen in counts.values()), counts
    assert any(b < a for a, b in zip(counts["agg"], counts["agg"][1:], strict=False)), counts
    # The other path (rewriting the candidate files) takes over from the marked files.
    change(spark, 7)
    agg.refresh()
    assert_matches_query(spark, "agg", AGG)


def test_applies_mark_the_old_rows_where_the_delta_read_found_them(spark: SparkSession, db: str) -> None:
    # A backing table too large to hold on the driver (over 20,000 rows) is read by the delta for
    # the changed keys' old rows; that read also gives each row's file and row index, so the
    # apply marks them deleted with no job of its own, whatever the keys' spread over files.
    spark.sql("CREATE TABLE big (id BIGINT, k BIGINT, v BIGINT) USING delta")
    spark.sql("INSERT INTO big SELECT id, id % 24000, id FROM range(48000)")
    q = "SELECT k, count(*) AS n, sum(v) AS s FROM big GROUP BY k"
    with confs(spark, {"spark.ivm.apply.rewriteWithoutSearchBytes": "0",
                       "spark.ivm.layout.rowsPerFile": "4000"}):
        mv = MaterializedView.create(spark, "wide", q)
        for round_ in range(1, 4):
            spark.sql(f"INSERT INTO big SELECT 100000 + id, (id * 997 + {round_}) % 26000, id "
                      "FROM range(40)")  # old keys across the files, and new keys
            spark.sql(f"DELETE FROM big WHERE id % 3000 = {round_}")
            spark.sql(f"UPDATE big SET v = v + 1 WHERE id % 5000 = {round_ + 10}")
            spark.sql(f"DELETE FROM big WHERE k = {round_}")  # a group empties
            report = mv.refresh()
            assert report.mode == "incremental", report
            assert_matches_query(spark, "wide", q)
            assert report.phases_jobs.get("apply", 0) == 0, report
        assert deletion_vectors(spark, "__ivm_backing_wide") > 0


RESIDENT_VIEW_BYTES = "spark.ivm.state.executorMaxBytes"


def test_large_views_are_kept_in_memory_by_key_and_moved_by_each_apply(spark: SparkSession, db: str) -> None:
    # A backing table not held on the driver is kept in the executors' memory by its first key
    # from the second refresh on, with each row's place: the delta looks its changed groups' old
    # rows up (no job) and the apply marks them deleted where they lie (no job). Each apply moves
    # the kept rows forward; a full refresh (another writer's commit) drops them; compaction
    # (from round 7) rewrites places, and the apply finds the moved rows by its search. Groups
    # share their first key (7 per value of a), so a lookup must keep only the changed groups'.
    spark.sql("CREATE TABLE wide_src (id BIGINT, a BIGINT, b BIGINT, v BIGINT) USING delta")
    spark.sql("INSERT INTO wide_src SELECT id, id % 300, id % 7, id FROM range(6000)")
    q = "SELECT a, b, count(*) AS n, sum(v) AS s FROM wide_src GROUP BY a, b"
    # A MAX recomputes the groups that lost their maximum from the source (a job of its own).
    q_max = "SELECT a, b, max(v) AS hi, count(v) AS n FROM wide_src GROUP BY a, b"
    settings = {HELD_MAX_ROWS: "0", "spark.ivm.apply.rewriteWithoutSearchBytes": "0", INLINE_STATE: "false"}
    with confs(spark, settings):
        mv = MaterializedView.create(spark, "arranged", q)
        mv_max = MaterializedView.create(spark, "arranged_max", q_max)
        for round_ in range(1, 9):
            if round_ == 4:
                mv.refresh(full=True)
            spark.sql(f"INSERT INTO wide_src SELECT 100000 * {round_} + id, (id * 37 + {round_}) % 320, "
                      f"id % 7, id FROM range(25)")  # old groups, and new groups of old and new a
            spark.sql(f"DELETE FROM wide_src WHERE id % 700 = {round_}")
            spark.sql(f"UPDATE wide_src SET b = (b + 1) % 7, v = v + 1 WHERE id % 900 = {round_ + 20}")
            spark.sql(f"DELETE FROM wide_src WHERE a = {round_} AND b = {round_ % 7}")  # a group empties
            # A group changed in every round: its old row is the one the last apply wrote, at the
            # place it wrote it.
            spark.sql("UPDATE wide_src SET v = v + 1 WHERE a = 7 AND b = 0")
            if round_ == 5:
                spark.sql("INSERT INTO wide_src VALUES (99, 2, 2, 5)")  # and one comes back
            if round_ in (1, 3):
                explained = spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW arranged").collect()[0][0]
                assert ("Old rows of the changed groups: looked up in the view's rows kept in memory"
                        in explained) == (round_ == 3), explained
            with confs(spark, {"spark.ivm.apply.compactMinFiles": "2" if round_ >= 7 else "16"}):
                assert mv_max.refresh().mode == "incremental"
                assert_matches_query(spark, "arranged_max", q_max)
                report = mv.refresh()
            assert report.mode == "incremental", report
            assert_matches_query(spark, "arranged", q)
            # Made in round 2 (asked the second time), and again in round 4 after the full
            # refresh; looked up, with no job, in the others.
            notes = [n for n in report.plan_notes if "looked up in the view's rows kept in memory" in n]
            made = [n for n in notes if "read from the table now" in n]
            expected = (0, 0) if round_ == 1 else (1, 1) if round_ in (2, 4) else (1, 0)
            assert (len(notes), len(made)) == expected, (round_, report.plan_notes)
            if notes and not made:
                assert report.phases_jobs.get("delta", 0) == 0, (round_, report.phases_jobs)
                if round_ < 7:
                    assert report.phases_jobs.get("apply", 0) == 0, (round_, report.phases_jobs)
        assert deletion_vectors(spark, "__ivm_backing_arranged") > 0
        # Off, the old rows are read from the table again, with the same result.
        spark.sql("DELETE FROM wide_src WHERE id % 1000 = 9")
        with confs(spark, {RESIDENT_VIEW_BYTES: "0"}):
            report = mv.refresh()
        assert_matches_query(spark, "arranged", q)
        assert report.phases_jobs.get("delta", 0) > 0, report.phases_jobs


def test_views_kept_in_memory_by_key_follow_random_changes(spark: SparkSession, db: str) -> None:
    # Views kept in memory by key (the driver's holding off, so small tables are kept too),
    # keyed by strings, dates and decimals with NULLs in every key column, an aggregate view and
    # a view of rows with duplicates, through random inserts, deletes and updates of keys and
    # values: after each refresh each view equals its query, and from the third refresh on the
    # old rows are looked up in memory.
    rng = random.Random(3)
    spark.sql("CREATE TABLE kt (id BIGINT, s STRING, d DATE, x DECIMAL(10, 2), v BIGINT) USING delta")
    spark.sql("INSERT INTO kt SELECT id, CASE WHEN id % 11 = 0 THEN NULL ELSE concat('k', id % 40) END, "
              "date_add(DATE'2020-01-01', CAST(id % 3 AS INT)), "
              "CASE WHEN id % 13 = 0 THEN NULL ELSE (id % 4) * 1.25 END, id % 17 FROM range(3000)")
    queries = {"by_key": "SELECT s, d, x, count(*) AS n, sum(v) AS total FROM kt GROUP BY s, d, x",
               "key_rows": "SELECT s, x, v FROM kt WHERE v < 9"}

    def step(i: int) -> List[str]:
        base = 10000 * (i + 1)
        k, rows, mult = rng.randrange(45), rng.randrange(5, 60), rng.randrange(1, 50)
        every, at = rng.randrange(300, 600), rng.randrange(50)
        return [
            f"INSERT INTO kt SELECT {base} + id, CASE WHEN id % 7 = 0 THEN NULL ELSE concat('k', "
            f"(id * {mult}) % 45) END, date_add(DATE'2020-01-01', CAST(id % 4 AS INT)), "
            f"CASE WHEN id % 5 = 0 THEN NULL ELSE (id % 5) * 1.25 END, id % 17 FROM range({rows})",
            f"DELETE FROM kt WHERE id % {rng.randrange(200, 400)} = {rng.randrange(50)}",
            f"UPDATE kt SET s = concat('k', {k}), v = v + 1 WHERE id % {every} = {at}",
            f"UPDATE kt SET x = NULL WHERE id % {rng.randrange(500, 900)} = {rng.randrange(50)}",
            f"DELETE FROM kt WHERE s = 'k{rng.randrange(45)}' AND d = DATE'2020-01-02'",
        ]

    reports: Dict[str, List[Any]] = {}
    with confs(spark, {HELD_MAX_ROWS: "0", "spark.ivm.apply.rewriteWithoutSearchBytes": "0"}):
        follow_changes(spark, queries, [step(i) for i in range(6)], reports=reports, settle_state=True)
    for name, rs in reports.items():
        looked_up = ["looked up in the view's rows kept in memory" in " ".join(r.plan_notes) for r in rs]
        assert looked_up[2:] == [True] * (len(rs) - 2), (name, [r.plan_notes for r in rs])


def test_small_base_tables_are_held_on_the_driver_and_moved_by_their_changes(
        spark: SparkSession, tables: str) -> None:
    # Small base tables (spark.ivm.heldTables.maxRows) are held on the driver by version: Post's
    # rows are the rows held at Pre plus the change (Post = Pre + D), Pre's the rows at Post minus
    # it, so after the first refresh neither f nor d is read from storage and the delta runs no
    # Spark job, through inserts, deletes, updates of a join key and of a dimension's row.
    spark.sql("CREATE MATERIALIZED VIEW held_join AS " + JOIN)
    mv = MaterializedView.for_name(spark, "held_join")
    for round_ in range(1, 5):
        change(spark, round_)
        spark.sql(f"UPDATE d SET name = concat(name, '{round_}') WHERE g = {round_ % 7}")
        spark.sql(f"INSERT INTO d VALUES ({10 + round_}, 'new')")
        spark.sql(f"UPDATE f SET g = {10 + round_} WHERE id = {round_ * 7 + 2}")
        report = mv.refresh()
        assert report.mode == "incremental", report
        assert_matches_query(spark, "held_join", JOIN)
        planning = report.phases_jobs.get("delta-plan", 0) + report.phases_jobs.get("delta", 0)
        # Read once, on the driver from their few files (no job), then held.
        assert planning == 0, (round_, report.phases_jobs)
        assert (report.rows_read > 0) == (round_ == 1), (round_, report)
    # Off, the tables are read by scans again, with the same result.
    change(spark, 5)
    with confs(spark, {HELD_MAX_ROWS: "0"}):
        report = mv.refresh()
    assert_matches_query(spark, "held_join", JOIN)
    assert report.phases_jobs.get("delta", 0) > 0, report.phases_jobs


@pytest.mark.parametrize("search_bytes", ["1048576", "0"])
def test_small_views_fold_their_delta_into_backing_rows_held_on_the_driver(
        spark: SparkSession, tables: str, search_bytes: str) -> None:
    # A small backing table's rows are held on the driver after each apply (the rows it kept
    # plus those it wrote, whether files were rewritten or rows marked deleted): a refresh then
    # folds its delta into them without reading the table, so its delta phase runs no job.
    queries = {"grouped": "SELECT g, count(*) AS n, sum(v) AS s FROM f GROUP BY g",
               "total": "SELECT count(*) AS n, sum(v) AS s FROM f"}
    with confs(spark, {"spark.ivm.apply.rewriteWithoutSearchBytes": search_bytes}):
        views = {name: MaterializedView.create(spark, name, q) for name, q in queries.items()}
        for round_ in range(1, 6):
            if round_ == 4:
                views["grouped"].refresh(full=True)  # writes rows the driver does not hold
            change(spark, round_)
            if round_ == 2:
                spark.sql("DELETE FROM f WHERE g = 3")  # a group empties
            if round_ == 4:
                spark.sql("INSERT INTO f VALUES (5000, 3, 1.0)")  # and comes back
            for name, q in queries.items():
                report = views[name].refresh()
                assert report.mode == "incremental", report
                assert_matches_query(spark, name, q)
                # The first refresh after CREATE reads the rows once, on the driver from the
                # table's few files (and holds them); a full refresh reads its rows for its
                # report, which holds them too.
                assert report.phases_jobs.get("delta", 0) == 0, (round_, report)


def test_small_views_are_written_whole_by_the_driver_unless_a_view_reads_their_changes(
        spark: SparkSession, tables: str) -> None:
    # A small backing table held on the driver is applied by writing all its rows from the
    # driver (no job); once a view reads its change feed, the apply rewrites only the files
    # holding the changed keys, so that the feed shows the changed groups, not the whole table.
    q = "SELECT id % 100 AS k, count(*) AS n, sum(v) AS s FROM f GROUP BY id % 100"
    upper = "SELECT k, s FROM by_k WHERE n > 1"
    with confs(spark, {"spark.ivm.layout.rowsPerFile": "20"}):
        by_k = MaterializedView.create(spark, "by_k", q)
        for round_ in range(1, 5):
            if round_ == 3:
                spark.sql(f"CREATE MATERIALIZED VIEW upper AS {upper}")
            change(spark, round_)
            spark.sql(f"INSERT INTO f VALUES ({3000 + round_}, 1, 2.0)")  # a new group
            report = by_k.refresh()
            assert report.mode == "incremental", report
            assert_matches_query(spark, "by_k", q)
            if round_ == 2:
                assert report.phases_jobs.get("apply", 0) == 0, report.phases_jobs
            if round_ >= 3:
                assert MaterializedView.for_name(spark, "upper").refresh().mode == "incremental"
                assert_matches_query(spark, "upper", upper)
                v = report.backing_version
                feed = f"table_changes('__ivm_backing_by_k', {v}, {v})"
                fed = spark.sql(f"SELECT count(*) FROM {feed}").first()[0]
                total = spark.table("by_k").count()
                assert 0 < fed < 2 * total, (fed, total)


def test_backing_table_has_no_change_feed_until_a_view_reads_it(spark: SparkSession, tables: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW agg AS {AGG}")

    def cdf() -> str:
        props = {r[0]: r[1] for r in spark.sql("SHOW TBLPROPERTIES __ivm_backing_agg").collect()}
        return props.get("delta.enableChangeDataFeed", "false")

    assert cdf() == "false"
    with confs(spark, {"spark.ivm.autoEnableChangeDataFeed": "false"}):
        spark.sql("CREATE MATERIALIZED VIEW over AS "
                  "SELECT n > 25 AS big, count(*) AS c FROM agg GROUP BY n > 25")
    assert cdf() == "true"
    change(spark, 1)
    MaterializedView.for_name(spark, "agg").refresh()
    MaterializedView.for_name(spark, "over").refresh()
    assert_matches_query(spark, "over", "SELECT n > 25 AS big, count(*) AS c FROM agg GROUP BY n > 25")


def test_settings_are_checked_when_set(spark: SparkSession, db: str) -> None:
    for key, bad in [("spark.ivm.localMaxRows", "many"), ("spark.ivm.epsilon.enabled", "often"),
                     ("spark.ivm.fkPruning.enabled", "maybe")]:
        with pytest.raises(Exception) as info:
            spark.conf.set(key, bad)
        assert key in str(info.value) and "spark-ivm" in str(info.value)
    with pytest.raises(Exception) as info:
        spark.sql("SET spark.ivm.testing.enabled=false")
    assert "static" in str(info.value).lower()
    docs = {r[0]: r[2] for r in spark.sql("SET -v").collect() if r[0].startswith("spark.ivm.")}
    assert "spark.ivm.localMaxRows" in docs and docs["spark.ivm.localMaxRows"]


def test_writes_to_a_materialized_view_name_it(spark: SparkSession, tables: str) -> None:
    spark.sql(f"CREATE MATERIALIZED VIEW agg AS {AGG}")
    for stmt in ["UPDATE agg SET n = 0", "DELETE FROM agg WHERE g = 1",
                 "MERGE INTO agg USING d ON agg.g = d.g WHEN MATCHED THEN DELETE"]:
        e = refused(lambda stmt=stmt: spark.sql(stmt))
        assert condition(e) == "IVM_VIEW_NOT_WRITABLE" and "REFRESH MATERIALIZED VIEW" in str(e), stmt
    assert_matches_query(spark, "agg", AGG)


def test_foreign_key_with_rely_skips_the_integrity_scan(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE dim (k INT, label STRING) USING delta")
    spark.sql("CREATE TABLE fact (id INT, k INT, v INT) USING delta")
    spark.sql("INSERT INTO dim VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql("INSERT INTO fact VALUES (1, 1, 10), (2, 2, 20), (3, 2, 30)")
    spark.sql("ALTER TABLE dim ADD CONSTRAINT dim_pk PRIMARY KEY (k)")
    spark.sql("ALTER TABLE fact ADD CONSTRAINT fact_dim FOREIGN KEY (k) REFERENCES dim (k) RELY")
    q = "SELECT label, count(*) AS n, sum(v) AS s FROM fact JOIN dim ON fact.k = dim.k GROUP BY label"
    mv = MaterializedView.create(spark, "rel", q)
    spark.sql("INSERT INTO dim VALUES (4, 'd')")
    spark.sql("INSERT INTO fact VALUES (4, 4, 40)")
    spark.sql("DELETE FROM fact WHERE k = 3")
    spark.sql("DELETE FROM dim WHERE k = 3")
    report = mv.refresh()
    assert any("relied on" in n for n in report.plan_notes), report.plan_notes
    assert len(report.branches) == 1, report.branches
    assert_matches_query(spark, "rel", q)


def test_later_refreshes_of_a_view_reuse_the_classes_spark_compiled(spark: SparkSession, tables: str) -> None:
    """A view's refreshes run the same expressions each time: with the session defaults'
    cache of compiled classes (2,000, not Spark's 100) the later ones compile (almost) nothing,
    although the writes between them compile classes of their own."""
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == str(CODEGEN_CACHE_ENTRIES)
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    # expressions no other test uses, so that the first refresh compiles whatever ran before
    views = {"agg3": "SELECT g, count(*) AS n, sum(v * 3) AS s3, min(id + 7) AS lo FROM f GROUP BY g",
             "joined3": "SELECT d.name, f.g * 11 AS g11, count(*) AS n FROM f JOIN d ON f.g = d.g "
                        "GROUP BY d.name, f.g * 11"}
    for name, q in views.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    compiled = []
    for round_ in range(1, 4):
        change(spark, round_)
        before = metrics.METRIC_COMPILATION_TIME().getCount()
        for name in views:
            assert MaterializedView.for_name(spark, name).refresh().mode == "incremental"
        compiled.append(metrics.METRIC_COMPILATION_TIME().getCount() - before)
    assert compiled[0] > 0 and compiled[2] <= compiled[0] // 4, compiled
    for name, q in views.items():
        assert_matches_query(spark, name, q)


def test_session_set_up_keeps_the_users_settings() -> None:
    builder = (SparkSession.builder.master("local[3]").config("spark.sql.extensions", "com.example.Ext")
               .config("spark.sql.shuffle.partitions", "11"))
    options = configure_spark_with_ivm(builder)._options  # type: ignore[attr-defined]
    assert options["spark.sql.extensions"].split(",") == [
        "com.example.Ext", "io.delta.sql.DeltaSparkSessionExtension", "io.sparkivm.IvmSparkSessionExtensions"]
    assert options["spark.sql.shuffle.partitions"] == "11"
    assert options["spark.databricks.delta.snapshotPartitions"] == "3"
    assert "spark.databricks.delta.snapshotPartitions" not in session_defaults("yarn")
    assert session_defaults("yarn")["spark.sql.codegen.cache.maxEntries"] == str(CODEGEN_CACHE_ENTRIES)
    assert options[LOCAL_FILE_CONTEXT] == NIO_LOCAL_FS and LOCAL_FILE_CONTEXT not in session_defaults("yarn")


def test_delta_commits_on_local_paths_go_through_the_file_context_without_processes(
        spark: SparkSession, db: str) -> None:
    """On a local master, the FileContext Delta's log store commits through is
    io.sparkivm.storage.NioLocalFs (loadable from the session's class path), and commits land."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark._jsparkSession.sessionState().newHadoopConf()  # type: ignore[attr-defined]
    uri = jvm.java.net.URI.create("file:///")
    fs = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf).getDefaultFileSystem()
    assert fs.getClass().getName() == NIO_LOCAL_FS
    spark.sql("CREATE TABLE nio (k INT) USING delta")
    for k in range(3):
        spark.sql(f"INSERT INTO nio VALUES ({k})")
    assert spark.sql("DESCRIBE HISTORY nio").count() == 4 and spark.table("nio").count() == 3


def test_fault_injection_needs_test_mode(tmp_path: Path) -> None:
    """SET alone cannot make a session halt its driver or run statements inside a refresh."""
    script = tmp_path / "no_test_mode.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})\n"
        "from ivm_testing import make_session\n"
        f"spark = make_session(master='local[1]', warehouse={str(tmp_path)!r}, "
        "extra={'spark.ivm.testing.enabled': 'false'})\n"
        "spark.sql('CREATE TABLE s (k INT) USING delta')\n"
        "spark.sql('CREATE MATERIALIZED VIEW v AS SELECT k, count(*) AS n FROM s GROUP BY k')\n"
        "spark.sql('INSERT INTO s VALUES (1)')\n"
        "spark.conf.set('spark.ivm.testing.killAt', 'refresh-start')\n"
        "spark.conf.set('spark.ivm.testing.sqlAt', 'after-pin:DROP TABLE s')\n"
        "spark.sql('REFRESH MATERIALIZED VIEW v')\n"
        "print('ROWS', spark.table('v').count(), spark.catalog.tableExists('s'))\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=short_jvm_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ROWS 1 True" in proc.stdout

