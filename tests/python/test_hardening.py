"""Nothing is lost: DDL that fails at any point leaves the old view readable and refreshable;
refused queries leave no trace. Each case is compared with recomputation after the fault."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from ivm_testing import assert_matches_query, condition, drop_behind_spark_ivm, refused, table_names
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

Q = "SELECT k, count(*) AS n, sum(v) AS s FROM base GROUP BY k"


@pytest.fixture()
def view(spark: SparkSession, db: str) -> MaterializedView:
    spark.sql("CREATE TABLE base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO base VALUES (1, 10), (1, 20), (2, 5)")
    return MaterializedView.create(spark, "mv", Q)


def still_works(spark: SparkSession, mv: MaterializedView, query: str = Q) -> None:
    """The view is readable, exact, and its next refresh is incremental and exact."""
    assert_matches_query(spark, "mv", query)
    spark.sql("INSERT INTO base VALUES (3, 1)")
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "mv", query)


def test_create_or_replace_with_a_bad_query_keeps_the_view(spark: SparkSession,
                                                            view: MaterializedView) -> None:
    e = refused(lambda: spark.sql(
        "CREATE OR REPLACE MATERIALIZED VIEW mv AS SELECT k, cnt(*) FROM base GROUP BY k"))
    assert "cnt" in str(e)
    e = refused(lambda: spark.sql("CREATE OR REPLACE MATERIALIZED VIEW mv REFRESH POLICY INCREMENTAL STRICT "
                                  "AS SELECT k FROM base LIMIT 1"))
    assert condition(e) == "IVM_NOT_INCREMENTALIZABLE"
    still_works(spark, view)


def test_create_or_replace_failing_midway_keeps_the_view(spark: SparkSession, view: MaterializedView) -> None:
    spark.conf.set("spark.ivm.testing.failAt", "create-after-backing")
    with pytest.raises(Exception, match="create-after-backing"):
        spark.sql("CREATE OR REPLACE MATERIALIZED VIEW mv AS SELECT k, max(v) AS m FROM base GROUP BY k")
    still_works(spark, view)
    tables = table_names(spark)
    assert {t for t in tables if t.startswith("__ivm_backing_mv")} == {"__ivm_backing_mv"}, tables
    # and a replace that succeeds switches to the new query, dropping the old backing table
    spark.sql("CREATE OR REPLACE MATERIALIZED VIEW mv AS SELECT k, max(v) AS m FROM base GROUP BY k")
    still_works(spark, view, "SELECT k, max(v) AS m FROM base GROUP BY k")
    tables = table_names(spark)
    assert len([t for t in tables if t.startswith("__ivm_backing_mv")]) == 1, tables


def test_alter_refresh_mode_failing_midway_keeps_the_view(spark: SparkSession,
                                                          view: MaterializedView) -> None:
    spark.conf.set("spark.ivm.testing.failAt", "create-after-backing")
    with pytest.raises(Exception, match="create-after-backing"):
        spark.sql("ALTER MATERIALIZED VIEW mv SET TBLPROPERTIES ('ivm.refresh' = 'full')")
    assert MaterializedView.for_name(spark, "mv").describe()["info"]["Refresh mode"] == "incremental"
    still_works(spark, view)
    spark.sql("ALTER MATERIALIZED VIEW mv SET TBLPROPERTIES ('ivm.refresh' = 'full', 'team' = 'x')")
    info = view.describe()["info"]
    assert info["Refresh mode"] == "full" and "team=x" in str(info.get("Table property"))
    spark.sql("INSERT INTO base VALUES (4, 4)")
    assert view.refresh().mode == "full"
    assert_matches_query(spark, "mv", Q)


@pytest.mark.parametrize("query", [
    "SELECT k, _metadata.file_path AS f FROM base",
    "SELECT k, v FROM base WHERE _metadata.file_name IS NOT NULL",
])
def test_metadata_columns_are_refused_before_any_side_effect(spark: SparkSession, db: str,
                                                            query: str) -> None:
    spark.sql("CREATE TABLE base (k INT, v INT) USING delta")  # no change data feed yet
    spark.sql("INSERT INTO base VALUES (1, 10)")
    before = spark.sql("DESCRIBE HISTORY base").count()
    e = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS {query}"))
    assert condition(e) == "IVM_ROW_LOCATION_IN_QUERY" and "_metadata" in str(e)
    assert spark.sql("DESCRIBE HISTORY base").count() == before
    assert not spark.catalog.tableExists("bad") and not spark.catalog.tableExists("__ivm_backing_bad")


@pytest.mark.parametrize("fn", ["first(v)", "last(v)", "first_value(v)", "any_value(v)"])
def test_order_dependent_aggregates_are_refused(spark: SparkSession, view: MaterializedView,
                                                fn: str) -> None:
    e = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT "
        f"AS SELECT k, {fn} AS x FROM base GROUP BY k"))
    assert condition(e) == "IVM_NOT_INCREMENTALIZABLE" and "non-deterministic" in str(e), str(e)


def test_create_or_replace_mends_a_broken_view(spark: SparkSession, view: MaterializedView) -> None:
    # The view is broken: its backing table is gone (dropped where spark-ivm's guard does not see).
    drop_behind_spark_ivm(spark, spark.catalog.currentDatabase(), "__ivm_backing_mv")
    assert condition(refused(view.refresh)) == "IVM_BACKING_TABLE_ALTERED"
    spark.sql(f"CREATE OR REPLACE MATERIALIZED VIEW mv AS {Q}")
    still_works(spark, view)


def test_create_after_a_create_killed_before_its_commit(spark: SparkSession, db: str) -> None:
    """A CREATE killed while writing its backing table leaves files, but no table, where the
    backing table would be: the next CREATE of the view works, and leaves those files alone."""
    spark.sql("CREATE TABLE base (k INT, v INT) USING delta")
    spark.sql("INSERT INTO base VALUES (1, 10), (1, 20), (2, 5)")
    location = spark.sql(f"DESCRIBE DATABASE {db}").collect()
    root = [r[1] for r in location if r[0] == "Location"][0].replace("file:", "")
    stray = os.path.join(root, "__ivm_backing_mv", "part-00000-killed.snappy.parquet")
    os.makedirs(os.path.dirname(stray))
    with open(stray, "wb") as f:
        f.write(b"not yet committed")
    mv = MaterializedView.create(spark, "mv", Q)
    assert mv.describe()["backing_table"].split(".")[-1].strip("`").startswith("__ivm_backing_mv_")
    assert os.path.exists(stray)
    still_works(spark, mv)


def _log_dir(spark: SparkSession, table: str) -> str:
    location = spark.sql(f"DESCRIBE DETAIL {table}").collect()[0]["location"]
    return os.path.join(location.replace("file:", ""), "_delta_log")


def _age_log(path: str, days: int) -> None:
    """Makes every file of a Delta log look `days` old, as log cleanup judges age."""
    then = time.time() - days * 86400
    for name in os.listdir(path):
        os.utime(os.path.join(path, name), (then, then))


def test_refresh_record_survives_log_cleanup(spark: SparkSession, view: MaterializedView) -> None:
    """A view not refreshed for longer than its log's retention, with OPTIMIZE and checkpoints
    on its backing table meanwhile, still refreshes incrementally and exactly."""
    spark.sql("INSERT INTO base VALUES (2, 7)")
    assert view.refresh().mode == "incremental"
    backing = "__ivm_backing_mv"
    spark.sql(f"ALTER TABLE {backing} SET TBLPROPERTIES (delta.checkpointInterval = 1, "
              "delta.logRetentionDuration = 'interval 7 days')")
    log = _log_dir(spark, backing)
    _age_log(log, days=40)
    spark.sql(f"OPTIMIZE {backing}")  # a commit, a checkpoint, and the cleanup of expired files
    spark.sql(f"ALTER TABLE {backing} SET TBLPROPERTIES ('spark.ivm.test.touch' = '1')")
    commits = sorted(f for f in os.listdir(log) if f.endswith(".json"))
    # The refresh's commit file is gone: only the maintenance commits after it remain.
    assert len(commits) <= 2, commits
    still_works(spark, view)
    # A refresh that finds nothing new is still a no-op, from the same record.
    assert view.refresh().mode == "noop"


def test_base_table_vacuumed_past_the_changes_asks_for_full_refresh(spark: SparkSession,
                                                                    view: MaterializedView) -> None:
    spark.sql("INSERT INTO base VALUES (4, 40)")
    spark.sql("DELETE FROM base WHERE k = 4")
    spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = false")
    try:
        spark.sql("VACUUM base RETAIN 0 HOURS")
    finally:
        spark.sql("SET spark.databricks.delta.retentionDurationCheck.enabled = true")
    before = sorted(spark.table("mv").collect())
    e = refused(view.refresh)
    assert condition(e) == "IVM_CHANGES_UNAVAILABLE", str(e)[:800]
    assert "FULL" in str(e)
    assert sorted(spark.table("mv").collect()) == before
    assert view.refresh(full=True).mode == "full"
    still_works(spark, view)


def test_code_cites_only_documents_in_the_repository() -> None:
    """Comments, errors and EXPLAIN text (all written in these sources) cite papers by author,
    year and section, and name no document that is not in this repository."""
    root = Path(__file__).resolve().parents[2]
    sources = [*(root / "scala" / "src" / "main").rglob("*.scala"),
               *(root / "python" / "spark_ivm").rglob("*.py")]
    assert len(sources) > 50
    for path in sources:
        text = path.read_text()
        assert "../shared" not in text and "papers/" not in text, path
        for ref in re.findall(r"[\w./-]+\.md\b", text):
            assert (root / ref).exists() or (root / "docs" / Path(ref).name).exists(), (path, ref)

