"""The AUTO refresh policy against its two choices, as the change grows (issue 10's benchmark).

    python benchmarks/auto.py --sf 1

TPC-H at --sf, loaded as by fk.py (tables sorted by key, keys declared with RELY). The Q10 view
exists three times over the same tables: REFRESH POLICY INCREMENTAL, FULL and AUTO. Each step
applies the refresh functions with a growing fraction of the orders in and out (0.01% to 50%),
then refreshes the three views side by side, in an order that rotates from round to round, and
checks that all three hold the same rows; each step has --rounds such rounds (3), each with new
changes of its size, and reports the median round of each view. AUTO should stay within 1.2x
of the cheaper of the other two at every step. Before the first step, one 0.01% round gives
every view one refresh of history (as a view refreshed on a schedule has).
Results: benchmarks/results/<out>.json, plot: docs/img/<out>.png (--out, default auto).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from fk import TABLES, VIEWS, bag, load, refresh_functions  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from tpch_data import generate  # noqa: E402

POLICIES = {"incremental": "INCREMENTAL", "full": "FULL", "auto": "AUTO"}
FRACTIONS = [0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5]


def run(sf: float, fractions: List[float], rounds: int, work: str, memory: str) -> Dict[str, Any]:
    warehouse = os.path.join(work, f"warehouse-auto-sf{sf:g}")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory, "spark-ivm AUTO benchmark")
    counts = load(spark, generate(sf, os.path.join(work, "tpch"), list(TABLES)), rely=True)
    print(f"  loaded: {counts}", flush=True)
    for name, policy in POLICIES.items():
        spark.sql(f"CREATE MATERIALIZED VIEW q10_{name} REFRESH POLICY {policy} AS {VIEWS['q10']}")
    refresh_functions(spark, 0.0001, seed=99)
    for name in POLICIES:
        MaterializedView.for_name(spark, f"q10_{name}").refresh()
    steps = []
    for i, fraction in enumerate(fractions):
        runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in POLICIES}
        rfs = []
        for r in range(rounds):
            rfs.append(refresh_functions(spark, fraction, seed=100 * i + r + 1))
            k = i + r
            for name in list(POLICIES)[k % 3:] + list(POLICIES)[:k % 3]:
                t0 = time.perf_counter()
                report = MaterializedView.for_name(spark, f"q10_{name}").refresh()
                runs[name].append({"s": time.perf_counter() - t0, "mode": report.mode,
                                   "jobs": report.spark_jobs, "reason": report.reason,
                                   "estimates": {c.mode: c.estimated_ms for c in report.candidates}})
            expected = bag(spark, "q10_full")
            for name in ("incremental", "auto"):
                if bag(spark, f"q10_{name}") != expected:
                    raise SystemExit(f"q10_{name} differs from q10_full at fraction {fraction}")
        step: Dict[str, Any] = {"fraction": fraction, **rfs[0]}
        for name in POLICIES:
            # the median round, with every round's time and (for AUTO) its choice beside it
            mid = sorted(runs[name], key=lambda run: run["s"])[len(runs[name]) // 2]
            step[name] = {**mid, "rounds": [run["s"] for run in runs[name]],
                          "modes": [run["mode"] for run in runs[name]]}
        best = min(step["incremental"]["s"], step["full"]["s"])
        step["auto_vs_best"] = step["auto"]["s"] / best
        modes = "/".join(step["auto"]["modes"])
        print(f"  {fraction * 100:g}%: incremental {step['incremental']['s']:.1f} s, full "
              f"{step['full']['s']:.1f} s, auto {step['auto']['s']:.1f} s ({modes}; "
              f"{step['auto_vs_best']:.2f}x the better) -- {step['auto']['reason']}", flush=True)
        steps.append(step)
    spark.stop()
    return {"scale_factor": sf, "rows": counts, "steps": steps}


def plot(result: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result["steps"]
    xs = [s["fraction"] * 100 for s in steps]
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, style in (("incremental", "s-"), ("full", "o--"), ("auto", "^-")):
        ax.plot(xs, [s[name]["s"] for s in steps], style, label=f"REFRESH POLICY {POLICIES[name]}")
    for x, s in zip(xs, steps, strict=True):
        ax.annotate(s["auto"]["mode"][0].upper(), (x, s["auto"]["s"]), textcoords="offset points",
                    xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("orders in and out, % of the table (log)")
    ax.set_ylabel("seconds per refresh (log)")
    ax.set_title(f"TPC-H Q10 at SF {result['scale_factor']:g}: AUTO (I/F: its choice) against both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--fractions", default=",".join(f"{f:g}" for f in FRACTIONS))
    parser.add_argument("--rounds", type=int, default=3, help="rounds per step; medians are reported")
    parser.add_argument("--memory", default="12g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="auto")
    args = parser.parse_args()
    result = run(args.sf, [float(f) for f in args.fractions.split(",")], args.rounds, args.work, args.memory)
    path = os.path.join(HERE, "results", f"{args.out}.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join(sys.argv), "machine": {"cpus": os.cpu_count(),
                   "python": platform.python_version()}, **result}, f, indent=2)
    plot(result, os.path.join(ROOT, "docs", "img", f"{args.out}.png"))
    worst = max(s["auto_vs_best"] for s in result["steps"])
    print(f"AUTO within {worst:.2f}x of the better choice at every step; wrote {path}")


if __name__ == "__main__":
    main()
