"""Shared helpers for spark-ivm's Python tests: sessions, and the check every view test makes.

The check compares a maintained view with its query recomputed from the base tables, as
multisets of rows (counts included); floating-point values are compared to 9 significant
digits, since incremental sums add in another order than recomputation.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

import pyspark
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, configure_spark_with_ivm
from spark_ivm.session import _session_confs

# The tests' JVMs run a large code base briefly, where the JIT compiler's threads took a third of
# a JVM's CPU (measured per thread over the operator tests) on a machine whose cores the test
# suites share. A session's JVM compiles to C2 only methods several times hotter than by
# default (about a tenth less CPU over the operator tests, in the same time); a JVM a test starts
# for a few seconds of work compiles with C1 only (half the CPU of its start, and sooner done).
SESSION_JIT_OPTIONS = ("-XX:Tier4InvocationThreshold=40000 -XX:Tier4MinInvocationThreshold=6000 "
                       "-XX:Tier4CompileThreshold=45000 -XX:Tier4BackEdgeThreshold=120000")
SHORT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def resolved_jars() -> List[str]:
    """The jars of spark-ivm and of the packages it needs as `make install` resolved them, or []
    where nothing was resolved (a session would resolve them at its start)."""
    jars = _session_confs([])["spark.jars"].split(",")
    return jars if any("/io.delta_" in j for j in jars) else []


def make_cluster_session(warehouse: str, master: str = "local-cluster[2,1,1024]",
                         extra: Optional[dict] = None) -> SparkSession:
    """A session on a local-cluster master (executors in JVMs of their own), so that nothing
    relies on state that only exists in the driver."""
    # local-cluster starts its workers from SPARK_HOME; pyspark's wheel is a Spark home.
    os.environ.setdefault("SPARK_HOME", os.path.dirname(os.path.abspath(pyspark.__file__)))
    # Executors must load Delta and spark-ivm from their launch classpath: jars added at run
    # time live in a child classloader, where Scala collections fail to deserialize. The jars
    # are those `make install` resolved (a short local session resolves them where it has not).
    jars = resolved_jars()
    if not jars:
        probe = make_session(master="local[1]", warehouse=tempfile.mkdtemp(prefix="ivm-probe-"))
        jars = (probe.sparkContext.getConf().get("spark.repl.local.jars") or "").split(",")
        probe.stop()
    # Only Delta's and ours: the Hadoop and Parquet jars Delta's kernel pulls in would shadow
    # Spark's own versions.
    wanted = [j.replace("file://", "") for j in jars if "spark-ivm" in j or "/io.delta_" in j]
    return make_session(master=master, warehouse=warehouse,
                        extra={"spark.executor.extraClassPath": os.pathsep.join(wanted),
                               "spark.executor.extraJavaOptions": SESSION_JIT_OPTIONS, **(extra or {})})


def short_jvm_env() -> Dict[str, str]:
    """The environment for a process a test starts that runs a JVM briefly (``SPARK_SUBMIT_OPTS``
    reaches every driver JVM that ``spark-submit`` starts, PySpark's included)."""
    env = dict(os.environ)
    env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {SHORT_JVM_OPTIONS}".strip()
    return env


def make_session(master: str = "local[2]", warehouse: Optional[str] = None,
                 hive: bool = False, app: str = "spark-ivm-tests",
                 extra: Optional[dict] = None) -> SparkSession:
    """A small, quiet SparkSession with spark-ivm; one per test run."""
    warehouse = warehouse or tempfile.mkdtemp(prefix="ivm-warehouse-")
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.warehouse.dir", warehouse)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.adaptive.coalescePartitions.initialPartitionNum", "4")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        # Delta's VACUUM lists a table's directories by a job of this many tasks (10,000 by
        # default, about 25 s on two cores for a table of a few files).
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "4")
        .config("spark.ivm.testing.enabled", "true")
        # Views are maintained incrementally unless a test asks for AUTO, which on tables of a
        # few rows may rightly choose to recompute (its own tests set it).
        .config("spark.ivm.refreshPolicy.default", "incremental")
        # The tests' tables hold a few rows, where generating and compiling each query's code
        # costs more than running it; spark-ivm's refreshes run interpreted on such inputs
        # anyway (spark.ivm.refresh.interpretedMaxBytes), and so do the tests' own queries, DML
        # and checks (a sixth less CPU). One test turns code generation on (test_refresh_engine).
        # Interpreted, Spark cannot decode its own catalog.Table: list tables with table_names.
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        # One session runs every test: IVM^eps runs thousands of small queries, whose plans the
        # SQL status store keeps (1000 by default), so keep fewer and give the driver room.
        .config("spark.sql.ui.retainedExecutions", "50")
        .config("spark.driver.memory", "8g")
        # Broadcast hash relations built on the driver take a whole memory page (64 MB by
        # default here) however few rows they hold; the tests build thousands of small ones.
        .config("spark.buffer.pageSize", "2m")
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse} {SESSION_JIT_OPTIONS}")
    )
    # IVM_TEST_CONF="key=value;key=value" runs the tests with other settings (e.g. every apply
    # on the deletion-vector path: spark.ivm.apply.rewriteWithoutSearchBytes=0).
    env = dict(kv.split("=", 1) for kv in os.environ.get("IVM_TEST_CONF", "").split(";") if "=" in kv)
    for key, value in {**env, **(extra or {})}.items():
        builder = builder.config(key, value)
    if hive:
        builder = builder.enableHiveSupport().config(
            "javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={os.path.join(warehouse, 'metastore_db')};create=true",
        )
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def session_confs(spark: SparkSession, values: Dict[str, str]) -> Iterator[None]:
    """Session settings for the duration of a block; each key gets back the value it had before
    (the session builder's included), or is unset if it had none."""
    before = {k: spark.conf.get(k, None) for k in values}
    for k, v in values.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _norm(value: Any) -> Any:
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return float(f"{value:.9g}") + 0.0  # + 0.0 folds -0.0 into 0.0
    if isinstance(value, Decimal):
        return value.normalize()
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _norm(v)) for k, v in value.items()))
    return value


def multiset(rows: Iterable[Any]) -> Counter:
    """Rows as a multiset of normalized tuples."""
    return Counter(tuple(_norm(v) for v in row) for row in rows)


def diff(expected: Counter, actual: Counter) -> Tuple[List[Any], List[Any]]:
    """(rows missing from actual, rows actual has in excess), with repetitions."""
    return list((expected - actual).elements()), list((actual - expected).elements())


_checks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ivm-check")


def await_state_builds(spark: SparkSession, timeout_s: float = 120.0) -> bool:
    """Waits until spark-ivm has made the state refreshes asked for (it makes it between
    refreshes, on a thread of its own); true if nothing is left to make."""
    builds = spark._jvm.io.sparkivm.state.StateBuilds  # type: ignore[union-attr]
    return bool(builds.awaitIdle(int(timeout_s * 1000)))


def assert_matches_query(spark: SparkSession, view: str, query: str) -> int:
    """The view holds exactly what its query gives now, counts included; returns the row count."""
    # The two reads are small queries whose time is mostly planning on the driver: run side by
    # side (PySpark gives each thread its own JVM thread), they take about a fifth less time.
    recomputed = _checks.submit(lambda: multiset(spark.sql(query).collect()))
    actual = multiset(spark.table(view).collect())
    expected = recomputed.result()
    missing, extra = diff(expected, actual)
    assert not missing and not extra, (
        f"view {view} differs from its query\n  missing: {missing[:10]}\n  extra: {extra[:10]}"
        f"\n  ({len(missing)} missing, {len(extra)} extra, {sum(expected.values())} expected)"
    )
    return sum(expected.values())


def follow_changes(spark: SparkSession, queries: Dict[str, str], changes: List[List[str]],
                   clause: str = "", reports: Optional[Dict[str, List[Any]]] = None,
                   settle_state: bool = False) -> Dict[str, MaterializedView]:
    """Creates one view per query (with `clause` before AS), then, after each step of changes,
    refreshes every view and checks that it ran incrementally exactly when a table it reads
    changed (a no-op otherwise) and that it then equals its query; returns the views (and
    appends each view's refresh reports to `reports[name]` if given). With `settle_state`, each
    refresh starts once the state earlier ones asked for is made (a refresh cancels a build that
    is running, so which refresh finds it otherwise depends on the machine's speed)."""
    views = {}
    for name, query in sorted(queries.items()):
        spark.sql(f"CREATE MATERIALIZED VIEW {name} {clause} AS {query}")
        assert_matches_query(spark, name, query)
        views[name] = MaterializedView.for_name(spark, name)
    for step in changes:
        for stmt in step:
            spark.sql(stmt)
        touched = {m for stmt in step for m in re.findall(r"(?:INTO|FROM|UPDATE)\s+(\w+)", stmt)}
        for name, mv in views.items():
            if settle_state:
                assert await_state_builds(spark)
            report = mv.refresh()
            if reports is not None:
                reports.setdefault(name, []).append(report)
            read = {s.table.rsplit(".", 1)[-1] for s in report.sources}
            assert report.mode == ("incremental" if touched & read else "noop"), (name, report)
            if report.mode != "noop":  # a no-op left the view and everything it reads as checked
                assert_matches_query(spark, name, queries[name])
    return views


def drop_behind_spark_ivm(spark: SparkSession, database: str, name: str) -> None:
    """Drops a table or view from the session catalog without going through SQL, as an
    application without spark-ivm (or a metastore client) would: spark-ivm's guard never sees it."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    ident = jvm.org.apache.spark.sql.catalyst.TableIdentifier(name, jvm.scala.Some(database))
    spark._jsparkSession.sessionState().catalog().dropTable(ident, False, False)  # type: ignore[attr-defined]


def table_names(spark: SparkSession, database: Optional[str] = None) -> Set[str]:
    """The names of the tables and views in `database` (the current one by default): SHOW
    TABLES, as spark.catalog.listTables() fails with interpreted expressions (make_session)."""
    return {r.tableName for r in spark.sql(f"SHOW TABLES{f' IN {database}' if database else ''}").collect()
            if not r.isTemporary}


def condition(e: BaseException) -> str:
    """The error class of a Spark error (``IVM_*`` for spark-ivm's own)."""
    return e.getCondition()  # type: ignore[attr-defined,no-any-return]


def refused(action: Callable[[], object]) -> AnalysisException:
    """The AnalysisException that ``action`` raises (the test fails if it raises none)."""
    with pytest.raises(AnalysisException) as info:
        action()
    return info.value
