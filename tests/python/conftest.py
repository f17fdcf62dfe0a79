"""One SparkSession for the whole test run; a fresh database per test."""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import make_session  # noqa: E402

_counter = itertools.count()

# Tests marked `subprocesses(work=...)` check what `work(directory)` returns, work that runs in
# processes of its own (the kill tests: each step a JVM that dies mid-refresh) and uses no
# SparkSession of this process. The work starts with the session, one at a time on a thread
# beside the other tests, and the tests that check it run last. Its processes run at a lower CPU
# priority (Linux keeps a nice value per thread, and a child process inherits its thread's), so
# they take the cores the other tests leave idle instead of slowing them down.
_started: Dict[str, "Future[Any]"] = {}


def _lower_priority() -> None:
    if hasattr(os, "setpriority") and hasattr(threading, "get_native_id"):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ivm-subprocesses", initializer=_lower_priority)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "subprocesses(work): work(directory) runs in processes of its "
                                       "own from the start of the session; the test checks its result")
    config.addinivalue_line("markers", "measures_cost: the test counts a refresh's jobs or rows read, "
                                       "so its refreshes are not verified")


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    marked = [i for i in items if i.get_closest_marker("subprocesses")]
    items[:] = [i for i in items if not i.get_closest_marker("subprocesses")] + marked
    if config.option.collectonly:
        return
    for item in marked:
        work = item.get_closest_marker("subprocesses").kwargs["work"]  # type: ignore[union-attr]
        directory = Path(tempfile.mkdtemp(prefix="ivm-subprocesses-"))
        _started[item.nodeid] = _pool.submit(work, directory)


@pytest.fixture()
def started(request: pytest.FixtureRequest) -> Any:
    """What the work of this test's `subprocesses` marker returned (waits for it)."""
    return _started[request.node.nodeid].result(timeout=1800)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = make_session(warehouse=str(tmp_path_factory.mktemp("warehouse")))
    yield session
    session.stop()


# Modules whose refreshes are not verified, which keeps `make test` within its time (a check
# costs a small recomputation, a Spark job per refresh): those whose subject is not how a view
# follows changes (lookups, races, kills, the API, errors, policies and the service), and the
# longest differential ones, whose views are compared with recomputation after every step anyway.
# IVM_TEST_VERIFY=changed IVM_TEST_VERIFY_ALL=1 verifies every module.
UNVERIFIED = {"test_access_patterns", "test_concurrency", "test_exactly_once", "test_python_api",
              "test_sql_surface", "test_refresh_policies", "test_errors", "test_hardening",
              # the three longest differential modules (a third of the suite's time)
              "test_operators", "test_maintenance", "test_tpch_views",
              # compared with the query at the refresh's instant after every refresh
              "test_time_filters",
              # compared with the query after every refresh (a check recomputes the recursion)
              "test_recursive"}


@pytest.fixture(autouse=True)
def verified(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[None]:
    """Every incremental refresh of the differential tests is checked against its query for the
    keys it changed (``spark.ivm.verify = changed``: a wrong one fails the test, as its report
    says so, and is repaired), except in tests that measure what a refresh costs.
    ``IVM_TEST_VERIFY`` sets another level."""
    unverified = request.node.get_closest_marker("measures_cost") or (
        request.module.__name__ in UNVERIFIED and not os.environ.get("IVM_TEST_VERIFY_ALL"))
    level = "off" if unverified else os.environ.get("IVM_TEST_VERIFY", "changed")
    spark.conf.set("spark.ivm.verify", level)
    yield
    spark.conf.set("spark.ivm.verify", "off")


@pytest.fixture()
def db(spark: SparkSession) -> Iterator[str]:
    """A fresh database, made current for the test."""
    name = f"t{next(_counter)}_{os.getpid()}"
    spark.sql(f"CREATE DATABASE {name}")
    spark.sql(f"USE {name}")
    yield name
    spark.sql("USE default")
