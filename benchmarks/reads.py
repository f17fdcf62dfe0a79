"""Reads after a refresh: Delta's scan planning against the file lists the refresh left held.

    python benchmarks/reads.py --sf 0.01 --sf 0.1 --rounds 3

TPC-H at each --sf, loaded as by fk.py (keys declared with RELY), with the FK benchmark's views.
Each round applies the refresh functions (0.1% of the orders in and out), refreshes every view,
then reads each view and runs each view's query against its base tables, twice each: once
planned by Delta (spark.ivm.knownFiles.queryMaxBytes=0) and once from the file lists the
refresh left on the driver (the default), in an order that alternates between rounds. Both
reads of a pair must give the same result. Every read is the first of its table versions by
its way of planning: Delta rebuilds a version's state the first time it plans a scan of it,
which is what a user reading a view right after its refresh pays.
Results: benchmarks/results/<out>.json (--out, default reads).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from fk import TABLES, VIEWS, load, refresh_functions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from tpch_data import generate  # noqa: E402

KEY = "spark.ivm.knownFiles.queryMaxBytes"
WAYS = {"delta": "0", "held": str(256 << 20)}


def timed_read(spark: SparkSession, sql: str, way: str) -> tuple:
    """(seconds, result) of reading every column of `sql`'s rows, planned `way`."""
    spark.conf.set(KEY, WAYS[way])
    try:
        t0 = time.perf_counter()
        row = spark.sql(f"SELECT count(*) AS n, sum(hash(*)) AS h FROM ({sql})").first()
        return time.perf_counter() - t0, tuple(row)
    finally:
        spark.conf.unset(KEY)


def run(sf: float, rounds: int, views: List[str], work: str, memory: str) -> Dict[str, Any]:
    warehouse = os.path.join(work, f"warehouse-reads-sf{sf:g}")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory, "spark-ivm reads benchmark")
    load(spark, generate(sf, os.path.join(work, "tpch"), list(TABLES)), rely=True)
    for v in views:
        spark.sql(f"CREATE MATERIALIZED VIEW {v} AS {VIEWS[v]}")
    samples: Dict[str, Dict[str, List[float]]] = {}
    for r in range(rounds):
        refresh_functions(spark, 0.001, seed=r + 1)
        for v in views:
            MaterializedView.for_name(spark, v).refresh()
        order = list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]
        for v in views:
            for what, sql in ((f"{v}: the view", f"SELECT * FROM {v}"), (f"{v}: its query", VIEWS[v])):
                results = {}
                for way in order:
                    s, results[way] = timed_read(spark, sql, way)
                    samples.setdefault(what, {}).setdefault(way, []).append(s)
                if results["delta"] != results["held"]:
                    raise SystemExit(f"{what} differs between the two ways of planning: {results}")
        print(f"  SF {sf:g} round {r + 1}: " + ", ".join(
            f"{w} {samples[w]['delta'][-1]:.2f}/{samples[w]['held'][-1]:.2f} s" for w in samples), flush=True)
    spark.stop()
    return {"scale_factor": sf, "rounds": rounds, "reads": {
        w: {way: statistics.median(ts) for way, ts in ways.items()} for w, ways in samples.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, action="append")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--views", default="q10,q3,snowflake")
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="reads")
    args = parser.parse_args()
    runs = [run(sf, args.rounds, args.views.split(","), args.work, args.memory)
            for sf in (args.sf or [0.01, 0.1])]
    print("\n| scale factor | read | Delta's planning s | held files s | ratio |\n|---|---|---|---|---|")
    for r in runs:
        for what, t in r["reads"].items():
            print(f"| {r['scale_factor']:g} | {what} | {t['delta']:.2f} | {t['held']:.2f} | "
                  f"{t['delta'] / t['held']:.2f}x |")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.json"), "w") as f:
        json.dump({"machine": platform.platform(), "cpus": os.cpu_count(), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
