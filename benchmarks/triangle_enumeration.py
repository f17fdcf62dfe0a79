"""Enumerating a triangle listing view (issue 11): IVM^eps's view trees (Kara et al. 2020,
section 4) against one chain view tree and against reading the view.

    .venv/bin/python benchmarks/triangle_enumeration.py --sizes 3000,10000,30000,100000,300000 \\
        --spark-edges 10000,100000 --out triangle_enumeration

Two parts, side by side in one run:

- **Trees** (the Scala harness ``io.sparkivm.access.TriangleTreesBench``, test sources, in its
  own JVM): on Zipf graphs of ``--sizes`` edges (each edge a tuple of R, S and T), per eps and
  for one view tree over a chain order with indicator projections (Zhang 2022, chapter 4's
  general trees): the work of a single-edge change, typical and at the hubs, and the delay of
  enumerating the listing. It fits the exponent of each cost in the size and plots it against
  the paper's: update O(N^max(eps, 1-eps)), delay O(1); the chain tree's update at a hub O(N).
- **Spark** (``--spark-edges``): a triangle listing view over the power-law graph of
  ``benchmarks/triangles.py`` (a hub with |E|/10 out-edges), read by ``mv.rows()`` (the trees,
  held on the driver) and by a scan of the view's Delta table: time to the first row and per
  row over the first 100,000, and, after a refresh of 10 changed edges at the hub, the first
  ``rows()`` (which moves the trees forward) and the refresh itself. Both reads are checked to
  list the same rows.

Work counts (view entries written and tuples joined; values visited between two answers) do not
depend on the machine's noise; times are reported beside them. Results:
benchmarks/results/<out>.json, plot: docs/img/<out>.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from cqap_tradeoff import IMAGES, RESULTS, harness, rows_of, slope  # noqa: E402

LISTING = ("SELECT e1.src AS a, e1.dst AS b, e2.dst AS c FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
           "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")
FIRST = 100_000


def trees(sizes: str, eps: str, updates: int, raw: str) -> List[Dict[str, Any]]:
    return harness("io.sparkivm.access.TriangleTreesBench", raw, sizes, eps, str(updates), "1")


def expected_update(label: str) -> float:
    return 1.0 if label == "chain" else max(float(label), 1 - float(label))


def fits(rows: List[Dict[str, Any]], smallest: int) -> Dict[str, Dict[str, float]]:
    """Per eps (and the chain tree), the exponents of the costs in N over the sizes from `smallest`."""
    out = {}
    for label in dict.fromkeys(r["eps"] for r in rows):
        at = sorted((r["n"], r) for r in rows if r["eps"] == label and r["n"] >= smallest)
        out[label] = {"hub_update": slope([(n, r["hub_update_work"]) for n, r in at]),
                      "update": slope([(n, r["update_work"]) for n, r in at]),
                      "delay": slope([(n, max(r["delay_work"], 1)) for n, r in at]),
                      "paper_update": expected_update(label)}
    return out


def spark_part(sizes: List[int], work: str, memory: str) -> List[Dict[str, Any]]:
    from bench_session import session
    from lookups import timed
    from spark_ivm import MaterializedView
    from triangles import graph, hub_round, load

    out = []
    for edges in sizes:
        warehouse = os.path.join(work, f"warehouse-enum-{edges}")
        shutil.rmtree(warehouse, ignore_errors=True)
        spark = session(warehouse, memory, "spark-ivm triangle enumeration")
        rows = graph(edges, seed=11)
        load(spark, rows, os.path.join(work, "enum"))
        t0 = time.perf_counter()
        mv = MaterializedView.create(spark, "listing", LISTING)
        create_s = time.perf_counter() - t0
        count = spark.table("listing").count()
        t0 = time.perf_counter()
        structure = mv.lookup_structure()  # builds the trees
        build_s = time.perf_counter() - t0
        if "IVM^eps triangle view trees" not in structure:
            raise SystemExit(f"the listing has no IVM^eps trees: {structure}")
        result: Dict[str, Any] = {"edges": len(rows), "triangles": count, "create_s": create_s,
                                  "trees_build_s": build_s, "structure": structure}
        for rnd in range(2):
            if rnd:
                hub_round(spark, random.Random(rnd), 10, len(rows) // 5, [])
                t0 = time.perf_counter()
                report = mv.refresh()
                result["refresh_s"] = time.perf_counter() - t0
                result["refresh_jobs"] = report.spark_jobs
            t_first, t_last, t_rows = timed(mv.rows, FIRST)
            s_first, s_last, s_rows = timed(
                lambda spark=spark: spark.table("listing").toLocalIterator(), FIRST)
            if len(t_rows) < FIRST and Counter(t_rows) != Counter(s_rows):
                raise SystemExit(f"{edges} edges, round {rnd}: rows() and the view differ")
            key = "after_refresh_" if rnd else ""
            result.update({f"{key}rows_first_s": t_first, f"{key}rows_per_row_us": t_last / len(t_rows) * 1e6,
                           f"{key}scan_first_s": s_first, f"{key}scan_per_row_us": s_last / len(s_rows) * 1e6,
                           f"{key}rows_read": len(t_rows)})
        result["structure_after"] = mv.lookup_structure()
        r = result
        print(f"  {len(rows)} edges, {count} triangles: rows() first row {r['rows_first_s'] * 1000:.1f} ms, "
              f"{r['rows_per_row_us']:.1f} us/row; scan {r['scan_first_s'] * 1000:.0f} ms, "
              f"{r['scan_per_row_us']:.1f} us/row; after a refresh of 10 hub edges "
              f"({r['refresh_s']:.2f} s): rows() first row {r['after_refresh_rows_first_s'] * 1000:.0f} ms",
              flush=True)
        out.append(result)
        spark.stop()
    return out


def plot(rows: List[Dict[str, Any]], name: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in dict.fromkeys(r["eps"] for r in rows):
        at = sorted((r["n"], r) for r in rows if r["eps"] == label)
        style = "k--" if label == "chain" else "o-"
        name_ = "one chain tree" if label == "chain" else f"IVM^eps, eps = {float(label):g}"
        left.loglog([n for n, _ in at], [r["hub_update_work"] for _, r in at], style, label=name_)
        right.semilogx([n for n, _ in at], [r["per_answer_us"] for _, r in at], style, label=name_)
    left.set_xlabel("edges (N)")
    left.set_ylabel("work of one edge change at the hubs")
    left.set_title("Update at a hub: O(N^max(eps, 1-eps)) against O(N)", fontsize=10)
    left.legend(fontsize=8)
    right.set_xlabel("edges (N)")
    right.set_ylabel("microseconds per answer")
    right.set_title("Enumeration of the listing: O(1) delay", fontsize=10)
    right.set_ylim(bottom=0)
    fig.tight_layout()
    os.makedirs(IMAGES, exist_ok=True)
    path = os.path.join(IMAGES, f"{name}.png")
    fig.savefig(path, dpi=110)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="3000,10000,30000,100000,300000")
    parser.add_argument("--from-jsonl", help="the trees' rows measured before, instead of the harness")
    parser.add_argument("--eps", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--spark-edges", default="10000,100000",
                        help="sizes of the Spark part; empty for none")
    parser.add_argument("--fit-from", type=int, default=30000,
                        help="fit exponents over sizes from this one: below it, at eps = 1/2, the hubs' "
                             "degrees are close to the threshold and rebalancing dominates a hub edge's cost")
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="triangle_enumeration")
    args = parser.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    if args.from_jsonl:
        rows = rows_of(args.from_jsonl)
    else:
        rows = trees(args.sizes, args.eps, args.updates, os.path.join(RESULTS, f"{args.out}.jsonl"))
    for n in sorted({r["n"] for r in rows}):  # every eps and the chain tree list the same triangles
        answers = {r["answers"] for r in rows if r["n"] == n}
        assert len(answers) == 1, f"the trees disagree at n = {n}: {answers}"
    fitted = fits(rows, args.fit_from)
    print("trees      hub update exponent (paper)  typical update  delay")
    for label, f in fitted.items():
        print(f"{label:>6}  {f['hub_update']:8.2f} ({f['paper_update']:.2f})  {f['update']:13.2f}  "
              f"{f['delay']:6.2f}")
    spark = [int(s) for s in args.spark_edges.split(",") if s]
    result = {"trees": rows, "exponents": fitted,
              "spark": spark_part(spark, args.work, args.memory) if spark else []}
    with open(os.path.join(RESULTS, f"{args.out}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("plot:", plot(rows, args.out))


if __name__ == "__main__":
    main()
