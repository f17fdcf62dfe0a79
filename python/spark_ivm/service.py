"""``RefreshService``: runs the schedules and triggers of materialized views, and the
``spark-ivm-refresh`` command that runs it in a process of its own."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, Iterable, List, Optional

from pyspark.sql import SparkSession

from spark_ivm.errors import IvmError, raises_typed
from spark_ivm.report import RefreshReport
from spark_ivm.session import is_connect


@dataclass(frozen=True)
class ServiceRun:
    """What the service did for one view in one pass: ``refreshed`` (with the report; its mode
    may be ``noop`` or ``skipped`` when there was nothing left to apply) or ``failed``."""

    view: str
    action: str
    at: datetime
    report: Optional[RefreshReport]
    error: Optional[str]


class RefreshService:
    """Refreshes the materialized views that have a ``SCHEDULE`` or ``TRIGGER ON UPDATE``, in
    the session that starts it (the engine's ``io.sparkivm.service.RefreshService``).

    ``start()`` runs a pass every ``spark.ivm.service.pollIntervalMs`` on a daemon thread of the
    driver's JVM; ``stop()`` ends it after the refresh it may be running; ``run_once(now)``
    runs one pass at a given time (tests use it as a controllable clock). A pass refreshes the
    views that are due, each after the views it reads; a view whose refresh fails is retried
    after a growing wait while the others go on. Several services on one catalog never apply a
    change twice: each refresh commits exactly once.

    ``databases``: the databases watched; all of the session catalog's by default.
    """

    def __init__(self, spark: SparkSession, databases: Optional[Iterable[str]] = None) -> None:
        if is_connect(spark):
            raise IvmError("RefreshService runs in the driver of the session that starts it, which a "
                           "Spark Connect client does not have: run `spark-ivm-refresh` beside the "
                           "server, on the same catalog (or call refresh() from the client)")
        self.spark = spark
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self._j = jvm.io.sparkivm.service.RefreshService(spark._jsparkSession, list(databases or []))

    def start(self) -> "RefreshService":
        """Start the service's thread (nothing happens if it runs already)."""
        self._j.start()
        return self

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop after the refresh in progress, if any; False if that took longer than ``timeout``
        seconds."""
        return bool(self._j.stop(int(timeout * 1000)))

    @property
    def running(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return bool(self._j.isRunning())

    @raises_typed
    def run_once(self, now: Optional[datetime] = None) -> List[ServiceRun]:
        """One pass at time ``now`` (the current time by default): the views refreshed or failed."""
        at_ms = int((now.timestamp() if now is not None else time.time()) * 1000)
        runs = json.loads(self._j.runOnceJson(at_ms))
        return [ServiceRun(r["view"], r["action"], datetime.fromtimestamp(r["at_ms"] / 1000),
                           RefreshReport.from_json(json.dumps(r["report"])) if "report" in r else None,
                           r.get("error")) for r in runs]

    def status(self) -> Dict[str, Dict[str, Any]]:
        """Per view (qualified name): ``last_ms`` (last refresh or attempt), ``failures`` in a
        row, ``retry_at_ms`` and ``last_error``."""
        result: Dict[str, Dict[str, Any]] = json.loads(self._j.statusJson())
        return result

    def __enter__(self) -> "RefreshService":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: Optional[List[str]] = None) -> None:
    """``spark-ivm-refresh``: run the refresh service until interrupted (SIGINT or SIGTERM)."""
    from spark_ivm.session import configure_spark_with_ivm

    parser = argparse.ArgumentParser(prog="spark-ivm-refresh", description=(
        "Refresh materialized views by their SCHEDULE and TRIGGER ON UPDATE clauses. The catalog "
        "must be shared with the sessions that create the views (a Hive metastore: --hive)."))
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--warehouse", help="spark.sql.warehouse.dir")
    parser.add_argument("--hive", action="store_true", help="use the Hive metastore as the catalog")
    parser.add_argument("--database", action="append", default=[],
                        help="a database to watch (repeatable; all by default)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--once", action="store_true", help="run one pass and exit")
    args = parser.parse_args(argv)

    builder = SparkSession.builder.master(args.master).appName("spark-ivm-refresh")
    if args.warehouse:
        builder = builder.config("spark.sql.warehouse.dir", args.warehouse)
    if args.hive:
        builder = builder.enableHiveSupport()
    for kv in args.conf:
        key, _, value = kv.partition("=")
        builder = builder.config(key, value)
    spark = configure_spark_with_ivm(builder).getOrCreate()
    service = RefreshService(spark, args.database)
    if args.once:
        for run in service.run_once():
            print(f"{run.view}: {run.action}" + (f" ({run.report.mode})" if run.report else "")
                  + (f": {run.error}" if run.error else ""), flush=True)
        spark.stop()
        return
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    service.start()
    print("spark-ivm-refresh: running; stop with Ctrl-C", flush=True)
    stopped.wait()
    service.stop()
    spark.stop()


if __name__ == "__main__":
    main()
