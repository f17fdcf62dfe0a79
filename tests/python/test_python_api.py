"""The Python API: MaterializedView, RefreshReport, session set-up and the spark-sql command."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from ivm_testing import assert_matches_query, short_jvm_env
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.types import DecimalType, IntegerType, StructField, StructType
from spark_ivm import (
    IVM_EXTENSION,
    IvmError,
    MaterializedView,
    RefreshReport,
    configure_spark_with_ivm,
    delta_package,
    is_materialized_view,
    list_materialized_views,
    spark_sql_args,
)


@pytest.fixture()
def orders(spark: SparkSession, db: str) -> str:
    spark.sql("CREATE TABLE orders (id INT, cust INT, amount DECIMAL(10,2)) USING delta")
    spark.sql("INSERT INTO orders SELECT id, id % 5, id * 1.25 FROM range(40)")
    return db


def test_create_refresh_report_and_drop(spark: SparkSession, orders: str) -> None:
    mv = MaterializedView.create(
        spark, "per_cust", "SELECT cust, sum(amount) AS total, count(*) AS n FROM orders GROUP BY cust",
        comment="per customer")
    spark.sql("INSERT INTO orders VALUES (100, 1, 1.00), (101, 7, 2.00)")
    spark.sql("DELETE FROM orders WHERE id = 3")
    report = mv.refresh()
    assert isinstance(report, RefreshReport)
    assert report.mode == "incremental" and report.refresh_number == 1
    src = report.sources[0]
    assert src.table.endswith(".orders") and src.to_version > src.from_version
    assert report.source_rows_changed == 3
    assert (report.rows_inserted, report.rows_updated, report.rows_deleted) == (1, 2, 0)
    assert report.view_rows_changed == 3
    assert set(report.phases_ms) >= {"pin", "changes", "delta", "apply", "commit"}
    assert report.spark_jobs == sum(report.phases_jobs.values())
    assert set(report.phases_jobs) == set(report.phases_ms)
    assert report.branches == [f"D(spark_catalog.{orders}.orders)"]
    assert "incremental refresh #1" in str(report)
    full = mv.refresh(full=True)
    assert full.mode == "full" and full.refresh_number == 2
    mv.drop()
    with pytest.raises(AnalysisException):
        MaterializedView.for_name(spark, "per_cust")


def test_create_takes_a_schema_a_layout_and_or_refresh(spark: SparkSession, orders: str) -> None:
    """The arguments of Spark Declarative Pipelines' materialized_view: the column list as a
    StructType or DDL, partition_cols and cluster_by; or_refresh refreshes a view declared the same."""
    schema = StructType([StructField("cust", IntegerType(), False, {"comment": "the customer"}),
                         StructField("total", DecimalType(20, 2))])
    query = "SELECT cust, sum(amount) AS total FROM orders GROUP BY cust"
    mv = MaterializedView.create(spark, "by_cust", query, schema=schema, partition_cols=["cust"])
    detail = spark.sql("DESCRIBE DETAIL __ivm_backing_by_cust").collect()[0]
    assert detail.partitionColumns == ["cust"]
    assert [(r.col_name, r.comment) for r in spark.sql("DESCRIBE by_cust").collect()][0] == \
        ("cust", "the customer")
    spark.sql("INSERT INTO orders VALUES (200, 2, 3.00)")
    again = MaterializedView.create(spark, "by_cust", query, schema=schema, partition_cols=["cust"],
                                    or_refresh=True)
    assert again.history(1)[0].mode == "incremental"
    assert_matches_query(spark, "by_cust", query)
    clustered = MaterializedView.create(spark, "by_cust", query, schema="cust INT, total DECIMAL(20,2)",
                                        cluster_by=["total"], or_refresh=True)
    backing = clustered.describe()["backing_table"]
    assert spark.sql(f"DESCRIBE DETAIL {backing}").collect()[0].clusteringColumns == ["total"]
    assert clustered.describe()["refresh_policy"] == mv.describe()["refresh_policy"]
    assert (clustered.describe()["partitioned_by"], clustered.describe()["clustered_by"]) == ([], ["total"])
    assert_matches_query(spark, "by_cust", query)


def test_rows_is_a_lazy_filtered_iterator(spark: SparkSession, orders: str) -> None:
    mv = MaterializedView.create(spark, f"{orders}.o", "SELECT id, cust, amount FROM orders")
    it = mv.rows(cust=2)
    assert isinstance(it, types.GeneratorType) or hasattr(it, "__next__")
    got = sorted(r.id for r in it)
    assert got == [i for i in range(40) if i % 5 == 2]
    assert sum(1 for _ in mv.rows()) == 40
    assert list(mv.rows(cust=2, id=7)) == [r for r in mv.rows(id=7)]
    spark.sql("INSERT INTO orders VALUES (500, NULL, 1.00)")
    mv.refresh()
    assert [r.id for r in mv.rows(cust=None)] == [500]
    with pytest.raises(IvmError):
        list(mv.rows(nope=1))


def test_describe_and_explain_from_python(spark: SparkSession, orders: str) -> None:
    mv = MaterializedView.create(spark, "d", "SELECT DISTINCT cust FROM orders")
    desc = mv.describe()
    assert desc["columns"] == [("cust", "int")]
    assert desc["info"]["Maintenance"] == "counting IVM, distinct rows"
    assert "Branches: none" in mv.explain_refresh()


def test_session_configuration(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert IVM_EXTENSION in conf.get("spark.sql.extensions")
    jars = conf.get("spark.jars").split(",")
    assert jars[0].endswith(".jar") and all(os.path.exists(j) for j in jars)
    # The Delta jar: as the jars `make install` resolved, or as the package to resolve.
    artifact = delta_package().split(":")[1]
    assert any(artifact in os.path.basename(j) for j in jars[1:]) \
        or delta_package() in conf.get("spark.jars.packages", "")
    builder = configure_spark_with_ivm(SparkSession.builder, extra_packages=["g:a:1"])
    assert builder is not None
    args = spark_sql_args()
    assert "--jars" in args
    assert f"spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension,{IVM_EXTENSION}" in args


def test_sessions_use_the_jars_resolved_at_install_unless_asked_to_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fetch_packages records the jars the packages resolved to; sessions use them, and fall
    back to resolving when the list is missing, names a jar that is gone, or the user brings
    packages or resolution settings of their own."""
    from spark_ivm import session
    monkeypatch.setenv("SPARK_IVM_CACHE", str(tmp_path))
    packages, excludes = session.jar_packages()
    wanted = [delta_package(), *packages]
    assert "spark.jars.packages" in session._session_confs([])  # nothing recorded yet
    kept = tmp_path / "delta.jar"
    kept.write_bytes(b"")
    listed = Path(session._resolved_list(wanted, excludes))
    listed.write_text(f"{kept}\n")
    confs = session._session_confs([])
    assert "spark.jars.packages" not in confs and "spark.jars.excludes" not in confs
    assert confs["spark.jars"].split(",")[1:] == [str(kept)]
    args = spark_sql_args()
    assert "--packages" not in args and args[args.index("--jars") + 1].endswith(str(kept))
    assert delta_package() in session._session_confs(["g:a:1"])["spark.jars.packages"]
    assert "spark.jars.packages" in session._session_confs([], {"spark.jars.repositories": "https://r"})
    assert "spark.jars.packages" in session._session_confs([], resolve=True)
    # Other coordinates never read this list.
    assert session._resolved_list([*wanted, "g:a:1"], excludes) != str(listed)
    kept.unlink()
    assert "spark.jars.packages" in session._session_confs([])


def test_fetch_packages_records_every_jar_the_packages_resolved_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pip user's first session set-up (no `make install`, nothing fetched): it fetches the
    packages once, in a process of its own whose Ivy report goes to a log, and the builder gets
    the local jars instead of packages to resolve at every start."""
    from spark_ivm import session
    env = {**short_jvm_env(), "SPARK_IVM_CACHE": str(tmp_path)}
    code = ("from pyspark.sql import SparkSession; from spark_ivm import configure_spark_with_ivm; "
            "b = configure_spark_with_ivm(SparkSession.builder); print('PACKAGES', b._options.get("
            "'spark.jars.packages')); print('JARS', b._options['spark.jars'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PACKAGES None" in proc.stdout and "io.delta_delta-spark" in proc.stdout
    assert "spark-ivm: fetching the Maven packages it needs, once" in proc.stderr
    assert ":: resolving dependencies" not in proc.stdout + proc.stderr
    monkeypatch.setenv("SPARK_IVM_CACHE", str(tmp_path))
    packages, excludes = session.jar_packages()
    log = os.path.splitext(session._resolved_list([delta_package(), *packages], excludes))[0] + ".log"
    assert ":: resolving dependencies" in Path(log).read_text()
    jars = session._resolved_jars([delta_package(), *packages], excludes)
    assert jars is not None and all(os.path.isabs(j) for j in jars)
    assert any(delta_package().split(":")[1] in os.path.basename(j) for j in jars)
    assert session.ivm_jar_path() not in jars


def test_spark_sql_command_runs_a_script(tmp_path: Path) -> None:
    """The README's command: a SQL script piped through spark-ivm-sql."""
    script = """
CREATE TABLE sales (id INT, region STRING, amount DOUBLE) USING delta;
INSERT INTO sales VALUES (1, 'eu', 10.0), (2, 'eu', 5.0), (3, 'us', 7.0);
CREATE MATERIALIZED VIEW by_region AS SELECT region, sum(amount) AS total FROM sales GROUP BY region;
INSERT INTO sales VALUES (4, 'us', 1.0);
DELETE FROM sales WHERE id = 1;
SELECT mode, source_rows_changed FROM (REFRESH MATERIALIZED VIEW by_region);
SELECT concat('ROW ', region, ' ', total) FROM by_region ORDER BY region;
"""
    exe = os.path.join(os.path.dirname(sys.executable), "spark-ivm-sql")
    proc = subprocess.run(
        [exe, "--conf", f"spark.sql.warehouse.dir={tmp_path}", "--conf", "spark.ui.enabled=false",
         # a refresh says which view and phase it is at once it has run this long
         "--conf", "spark.ivm.refresh.progressIntervalMs=10",
         "--driver-java-options", f"-Dderby.system.home={tmp_path}"],
        input=script.replace("SELECT mode, source_rows_changed FROM (REFRESH MATERIALIZED VIEW by_region);",
                             "REFRESH MATERIALIZED VIEW by_region;"),
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=short_jvm_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
    assert lines == ["ROW eu 5.0", "ROW us 8.0"], proc.stdout[-2000:]
    assert "incremental" in proc.stdout
    progress = "spark-ivm: REFRESH MATERIALIZED VIEW spark_catalog.default.by_region: "
    assert progress in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("name", ["MixedCase", "2fast", "select"])
def test_names_that_need_quoting(spark: SparkSession, orders: str, name: str) -> None:
    mv = MaterializedView.create(spark, name, "SELECT cust, count(*) AS n FROM orders GROUP BY cust")
    assert is_materialized_view(spark, name) and is_materialized_view(spark, f"{orders}.{name}")
    assert f"{orders}.{name.lower()}" in [v.lower() for v in list_materialized_views(spark)]
    spark.sql("INSERT INTO orders VALUES (900, 1, 2.00)")
    assert MaterializedView.for_name(spark, name).refresh().mode == "incremental"
    assert_matches_query(spark, f"`{name}`", "SELECT cust, count(*) AS n FROM orders GROUP BY cust")
    mv.drop()
    assert not is_materialized_view(spark, name)
    with pytest.raises(AnalysisException, match="IVM_NOT_A_MATERIALIZED_VIEW"):
        MaterializedView.for_name(spark, "orders")  # a table, not a materialized view


def test_names_that_cannot_be_a_materialized_view(spark: SparkSession, orders: str) -> None:
    spark.sql("CREATE VIEW plain AS SELECT id FROM orders")
    for name in ["orders", "plain", "nope", "no_such_db.v", "a.b.c.d", "`unclosed", "a b"]:
        assert not is_materialized_view(spark, name), name


def test_describe_returns_structured_fields(spark: SparkSession, orders: str) -> None:
    mv = MaterializedView.create(spark, "s", "SELECT cust, count(*) AS n FROM orders GROUP BY cust",
                                 comment="per customer", properties={"team": "me"})
    d = mv.describe()
    assert (d["name"], d["database"], d["refresh_mode"]) == ("s", orders, "incremental")
    assert d["columns"] == [("cust", "int"), ("n", "bigint")]
    assert d["maintenance"]["strategy"] == "counting" and d["maintenance"]["epsilon"] is None
    assert d["comment"] == "per customer" and d["properties"] == {"team": "me"}
    [source] = d["sources"]
    assert source["table"].endswith("orders") and source["consumed_version"] == source["current_version"]
    assert d["last_refresh"]["number"] == 0 and d["last_refresh"]["mode"] == "create"
    spark.sql("INSERT INTO orders VALUES (99, 7, 1.0)")
    assert mv.describe()["sources"][0]["current_version"] == source["current_version"] + 1
    mv.refresh()
    after = mv.describe()
    assert after["last_refresh"]["number"] == 1 and after["last_refresh"]["mode"] == "incremental"
    assert after["sources"][0]["consumed_version"] == source["current_version"] + 1
    assert after["warnings"] == []


def test_jar_under_development_can_be_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_ivm.session import ivm_jar_path

    monkeypatch.delenv("SPARK_IVM_JAR", raising=False)
    shipped = ivm_jar_path()
    jar = tmp_path / "spark-ivm-dev.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv("SPARK_IVM_JAR", str(jar))
    assert ivm_jar_path() == str(jar)
    monkeypatch.setenv("SPARK_IVM_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(FileNotFoundError, match="SPARK_IVM_JAR"):
        ivm_jar_path()
    monkeypatch.delenv("SPARK_IVM_JAR")
    assert ivm_jar_path() == shipped
