"""Refreshes of chosen TPC-DS queries' views, phase by phase, beside their queries: for profiling.

Each query becomes a view (REFRESH POLICY INCREMENTAL, or each refresh FULL with ``--full``) over
DuckDB's ``dsdgen`` data as plain Delta tables (``tests/compat/tpcds_queries.py`` generates and
loads them; ``make compat-tpcds`` installs what that needs). Then three steps of changes (fact
tables twice, dimensions once), after each a refresh of every view, printed with its Spark jobs
and time per phase, and the query run once as is::

    .venv/bin/python benchmarks/tpcds_refresh.py [--sf 0.01] [--full] [--event-log DIR] 4 18 72

With ``--event-log``, Spark's event log goes to DIR, for ``benchmarks/jobs.py``-style reading of
each job's call site. With ``--rules N``, each refresh is followed by the N analyzer and optimizer
rules that took it longest (Spark's ``RuleExecutor`` metrics), to find planning time that
does nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "compat"))

from ivm_testing import make_session  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from tpcds_queries import DIMENSION_CHANGES, fact_changes, generate, load, queries  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.01)
    parser.add_argument("--full", action="store_true", help="refresh each view FULL (recompute it)")
    parser.add_argument("--event-log", help="a directory for Spark's event log")
    parser.add_argument("--rules", type=int, default=0, help="print the N slowest rules of each refresh")
    parser.add_argument("numbers", nargs="+", type=int)
    args = parser.parse_args()
    extra = {"spark.ui.showConsoleProgress": "false", "spark.ivm.refreshPolicy.default": "incremental"}
    if args.event_log:
        os.makedirs(args.event_log, exist_ok=True)
        extra.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": args.event_log})
    spark = make_session(extra=extra)
    load(spark, generate(args.sf))
    texts = queries()
    for n in args.numbers:
        began = time.time()
        spark.sql(f"CREATE MATERIALIZED VIEW q{n} AS {texts[n]}")
        print(f"q{n} created in {time.time() - began:.1f} s", flush=True)
    for step in range(3):
        for stmt in fact_changes(spark, step) if step < 2 else DIMENSION_CHANGES:
            spark.sql(stmt)
        for n in args.numbers:
            rules = spark._jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor  # type: ignore[union-attr]
            rules.resetMetrics()
            began = time.time()
            report = MaterializedView.for_name(spark, f"q{n}").refresh(full=args.full)
            took = time.time() - began
            spent = rules.dumpTimeSpent().splitlines()
            began = time.time()
            spark.sql(texts[n]).collect()
            print(f"q{n} step {step}: {report.mode} in {took:.1f} s, {report.spark_jobs} jobs; "
                  f"query {time.time() - began:.1f} s", flush=True)
            print(f"    ms per phase {report.phases_ms}; jobs per phase {report.phases_jobs}", flush=True)
            if args.rules:
                print("\n".join(f"    {line}" for line in slowest_rules(spent, args.rules)), flush=True)
    spark.stop()


def slowest_rules(dump: list[str], n: int) -> list[str]:
    """The n rules of a ``RuleExecutor.dumpTimeSpent()`` dump that took longest: name, ms in all
    runs, ms in runs that changed the plan, runs."""
    rows = []
    for line in dump:
        parts = line.split()
        # rule, effective ns / total ns, effective runs / total runs
        if len(parts) == 7 and parts[2] == "/" and parts[5] == "/" and parts[1].isdigit():
            rows.append((int(parts[3]), int(parts[1]), parts[0].rsplit(".", 1)[-1], parts[6]))
    rows.sort(reverse=True)
    return [f"{name}: {total / 1e6:.0f} ms ({effective / 1e6:.0f} ms effective), {runs} runs"
            for total, effective, name, runs in rows[:n]]


if __name__ == "__main__":
    main()
