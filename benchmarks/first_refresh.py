"""The first refreshes of an application: small refreshes with no generated code, and with it.

    python benchmarks/first_refresh.py --rounds 3 --runs 2

A scheduled job refreshes its views once per application, where Spark has compiled nothing
yet. A refresh whose inputs are at most `spark.ivm.refresh.interpretedMaxBytes` (32 MiB by
default) runs without generated code: operators one by one, expressions interpreted. This runs
the quickstart's two join views (TPC-H SF 0.01) in new applications, one process per run, the
settings alternating: the default against 0 (Spark's whole-stage and expression code generated
as usual), both under REFRESH POLICY INCREMENTAL. Each run loads the tables, creates the views,
then applies the quickstart's changes and refreshes both views --rounds times; round 1 is the
application's first refresh.
Results: benchmarks/results/first_refresh.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from compile_cache import VIEWS, child_runs, one_run, write_results  # noqa: E402

# Both incremental (AUTO could choose otherwise from one round to the next).
INCREMENTAL = {"spark.ivm.refreshPolicy.default": "incremental"}
SETTINGS = {"interpreted": INCREMENTAL,
            "generated": {**INCREMENTAL, "spark.ivm.refresh.interpretedMaxBytes": "0"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=2, help="runs per setting, alternating")
    parser.add_argument("--one", choices=sorted(SETTINGS), help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    if args.one is not None:
        print("RESULT " + json.dumps(one_run(2000, args.rounds, SETTINGS[args.one])), flush=True)
        return
    runs = child_runs(__file__, list(SETTINGS), args.runs, args.rounds)
    summary: Dict[str, Any] = {}
    for setting, rows in runs.items():
        for name in VIEWS:
            for round_ in range(args.rounds):
                these = [r for r in rows if r["view"] == name and r["round"] == round_]
                s = summary[f"{name}@{setting}@round{round_ + 1}"] = {
                    "median_s": statistics.median(r["s"] for r in these),
                    "modes": sorted({r["mode"] for r in these}),
                    "median_compiled": statistics.median(r["compiled"] for r in these)}
                print(f"  {name}, {setting}, round {round_ + 1}: {s['median_s']:.2f} s (median, "
                      f"{'/'.join(s['modes'])}), {s['median_compiled']:g} classes compiled", flush=True)
    write_results("first_refresh", summary, runs)


if __name__ == "__main__":
    main()
