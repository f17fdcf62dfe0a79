"""Spark's cache of compiled classes: the quickstart's views refreshed with 100 entries and 2,000.

    python benchmarks/compile_cache.py --rounds 6 --runs 2

`spark.sql.codegen.cache.maxEntries` is a static setting, so each setting runs in a session of
its own: one process per run, the settings alternating (100, 2000, 100, 2000, ...). Each run
loads the quickstart's TPC-H SF 0.01 tables, creates its two join views, then applies the
quickstart's changes and refreshes both views --rounds times, counting the classes Spark
compiled during each refresh (`CodegenMetrics`). The first refresh of a session compiles the
view's classes with either setting; the table reports the later ones.
Results: benchmarks/results/compile_cache.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))

VIEWS = ("revenue_by_customer", "busy_priorities")


def one_run(entries: int, rounds: int, conf: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    """One session with the cache at `entries` (and `conf`): every refresh's time, jobs and
    classes compiled."""
    import quickstart as q
    from pyspark.sql import SparkSession
    from spark_ivm import MaterializedView, configure_spark_with_ivm

    shutil.rmtree(q.WAREHOUSE, ignore_errors=True)
    builder = (SparkSession.builder.master("local[*]").appName("spark-ivm compile cache")
               .config("spark.sql.warehouse.dir", q.WAREHOUSE).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.codegen.cache.maxEntries", str(entries)))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tables = ["nation", "customer", "orders", "lineitem"]
    q.load(spark, q.generate(q.SCALE_FACTOR, os.path.join(q.ROOT, "tpch"), tables), tables)
    for ddl in q.KEYS:
        spark.sql(ddl)
    queries = {"revenue_by_customer": q.REVENUE, "busy_priorities": q.PRIORITIES}
    for name in VIEWS:
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {queries[name]}")
    compiled = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    out = []
    for round_ in range(rounds):
        q.change_round(spark, round_ + 1)
        for name in VIEWS:
            before = compiled.METRIC_COMPILATION_TIME().getCount()
            t0 = time.perf_counter()
            report = MaterializedView.for_name(spark, name).refresh()
            out.append({"view": name, "round": round_, "s": time.perf_counter() - t0,
                        "jobs": report.spark_jobs, "mode": report.mode,
                        "compiled": compiled.METRIC_COMPILATION_TIME().getCount() - before})
    spark.stop()
    return out


def child_runs(script: str, settings: List[str], runs: int, rounds: int) -> Dict[str, List[Dict[str, Any]]]:
    """Runs `script --one <setting> --rounds <rounds>` in a process of its own per run and
    setting, the settings alternating; each run's entries, by setting."""
    out: Dict[str, List[Dict[str, Any]]] = {s: [] for s in settings}
    for _ in range(runs):
        for setting in settings:
            child = subprocess.run([sys.executable, script, "--one", setting, "--rounds", str(rounds)],
                                   capture_output=True, text=True, check=True)
            line = next(x for x in child.stdout.splitlines() if x.startswith("RESULT "))
            out[setting] += json.loads(line[len("RESULT "):])
    return out


def write_results(name: str, summary: Dict[str, Any], runs: Dict[str, List[Dict[str, Any]]]) -> None:
    """benchmarks/results/<name>.json: the command, the machine, the summary and every run."""
    path = os.path.join(HERE, "results", f"{name}.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join(sys.argv), "machine": {"cpus": os.cpu_count(),
                   "python": platform.python_version()}, "summary": summary, "runs": runs}, f, indent=2)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--runs", type=int, default=2, help="runs per setting, alternating")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child run: its entries
    args = parser.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one_run(args.one, args.rounds)), flush=True)
        return
    runs = child_runs(__file__, ["100", "2000"], args.runs, args.rounds)
    summary: Dict[str, Any] = {}
    for entries, rows in runs.items():
        for name in VIEWS:
            later = [r for r in rows if r["view"] == name and r["round"] > 0]
            s = summary[f"{name}@{entries}"] = {
                "median_s": statistics.median(r["s"] for r in later),
                "median_compiled": statistics.median(r["compiled"] for r in later),
                "first_compiled": statistics.median(r["compiled"] for r in rows
                                                    if r["view"] == name and r["round"] == 0)}
            print(f"  {name}, cache {entries}: later refreshes {s['median_s']:.2f} s (median), "
                  f"{s['median_compiled']:g} classes compiled each", flush=True)
    write_results("compile_cache", summary, runs)


if __name__ == "__main__":
    main()
