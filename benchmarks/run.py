"""spark-ivm benchmark runner.

    python benchmarks/run.py q10 --sf 1 --rounds 3

For each scale factor: TPC-H data (tpchgen-cli) in fresh Delta tables, a materialized view
shaped like TPC-H Q10 (lineitem, orders, customer, nation, grouped by customer), then rounds of
TPC-H refresh functions (insert and delete --fraction of the orders with their lineitems).
Each round times, side by side in the same session, the incremental REFRESH and a full
recomputation of the same query (INSERT OVERWRITE into a Delta table), alternating which runs
first, and checks that both give the same rows. Results go to benchmarks/results/<name>.json
and a plot to docs/img/<name>.png.
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
from collections import Counter
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from tpch_data import generate, load, refresh_functions  # noqa: E402

Q10 = """
SELECT c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment,
       sum(l_extendedprice * (1 - l_discount)) AS revenue
FROM customer JOIN orders ON c_custkey = o_custkey
              JOIN lineitem ON l_orderkey = o_orderkey
              JOIN nation ON c_nationkey = n_nationkey
WHERE o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01'
  AND l_returnflag = 'R'
GROUP BY c_custkey, c_name, c_acctbal, c_phone, n_name, c_address, c_comment"""

TABLES = ["nation", "customer", "orders", "lineitem"]


def same_rows(spark: SparkSession, a: str, b: str) -> bool:
    def bag(t: str) -> Counter:
        return Counter(tuple(round(float(v), 4) if hasattr(v, "as_tuple") or isinstance(v, float)
                             else v for v in r) for r in spark.table(t).collect())
    return bag(a) == bag(b)


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_q10(sf: float, rounds: int, fraction: float, work: str, memory: str) -> Dict[str, Any]:
    warehouse = os.path.join(work, f"warehouse-q10-sf{sf:g}")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory)
    t0 = time.perf_counter()
    counts = load(spark, generate(sf, os.path.join(work, "tpch"), TABLES), TABLES)
    load_s = time.perf_counter() - t0
    create_s = timed(lambda: spark.sql(f"CREATE MATERIALIZED VIEW q10 AS {Q10}"))
    spark.sql(f"CREATE TABLE q10_full USING delta AS {Q10}")
    mv = MaterializedView.for_name(spark, "q10")
    results: List[Dict[str, Any]] = []
    for i in range(rounds):
        rf = refresh_functions(spark, fraction, seed=i + 1)
        report_holder: Dict[str, Any] = {}

        def incremental(report_holder: Dict[str, Any] = report_holder) -> None:
            report_holder["r"] = mv.refresh()

        def full() -> None:
            spark.sql(f"INSERT OVERWRITE q10_full {Q10}")

        order = [("incremental", incremental), ("full", full)]
        if i % 2:
            order.reverse()
        times = {name: timed(fn) for name, fn in order}
        report = report_holder["r"]
        ok = same_rows(spark, "q10", "q10_full")
        results.append({"round": i + 1, **rf, "incremental_s": times["incremental"],
                        "full_s": times["full"], "ratio": times["full"] / times["incremental"],
                        "phases_ms": report.phases_ms, "source_rows_changed": report.source_rows_changed,
                        "view_rows_changed": report.view_rows_changed, "branches": report.branches,
                        "same_rows": ok})
        print(f"  sf {sf:g} round {i + 1}: incremental {times['incremental']:.2f} s, "
              f"full {times['full']:.2f} s, ratio {times['full'] / times['incremental']:.2f}, "
              f"same rows: {ok}, phases {report.phases_ms}", flush=True)
        if not ok:
            raise SystemExit("the refreshed view differs from recomputation")
    spark.stop()
    return {"scale_factor": sf, "rows": counts, "load_s": load_s, "create_s": create_s,
            "fraction": fraction, "rounds": results,
            "median_incremental_s": statistics.median(r["incremental_s"] for r in results),
            "median_full_s": statistics.median(r["full_s"] for r in results),
            "median_ratio": statistics.median(r["ratio"] for r in results)}


def plot(name: str, runs: List[Dict[str, Any]], out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    labels = [f"SF {r['scale_factor']:g}" for r in runs]
    xs = range(len(runs))
    ax1.bar([x - 0.2 for x in xs], [r["median_full_s"] for r in runs], 0.4, label="full recomputation")
    ax1.bar([x + 0.2 for x in xs], [r["median_incremental_s"] for r in runs], 0.4,
            label="incremental refresh")
    ax1.set_xticks(list(xs), labels)
    ax1.set_ylabel("seconds (median of rounds)")
    ax1.set_title(f"{name}: time per refresh")
    ax1.legend()
    phases = sorted({p for r in runs for rd in r["rounds"] for p in rd["phases_ms"]})
    bottom = [0.0] * len(runs)
    for p in phases:
        vals = [statistics.median(rd["phases_ms"].get(p, 0) for rd in r["rounds"]) / 1000 for r in runs]
        ax2.bar(list(xs), vals, 0.5, bottom=bottom, label=p)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax2.set_xticks(list(xs), labels)
    ax2.set_ylabel("seconds")
    ax2.set_title("incremental refresh by phase")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", choices=["q10"])
    parser.add_argument("--sf", type=float, action="append", help="scale factor (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fraction", type=float, default=0.001, help="orders inserted and deleted per round")
    parser.add_argument("--memory", default="8g", help="driver memory")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"), help="data and warehouse folder")
    args = parser.parse_args()
    runs = []
    for sf in args.sf or [1.0]:
        print(f"== {args.benchmark} at scale factor {sf:g} ==", flush=True)
        runs.append(run_q10(sf, args.rounds, args.fraction, args.work, args.memory))
    out = {"benchmark": args.benchmark, "command": " ".join(sys.argv),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
           "runs": runs}
    path = os.path.join(HERE, "results", f"{args.benchmark}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    plot(args.benchmark, runs, os.path.join(ROOT, "docs", "img", f"{args.benchmark}.png"))
    print(f"wrote {path} and docs/img/{args.benchmark}.png")


if __name__ == "__main__":
    main()
