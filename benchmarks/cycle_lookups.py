"""The 4-cycle CQAP Q(A, C | B, D) over a skewed graph, looked up through SQL (issue 11's
benchmark, its second query).

    .venv/bin/python benchmarks/cycle_lookups.py --edges 1000 --edges 10000 --edges 100000

The view ``SELECT a, c, b, d`` over ``R(a, b), S(b, c), T(c, d), U(d, a)`` (one edge table
joined four times) with ``ACCESS BY (b, d)``: "the nodes a and c that close a 4-cycle through
b and d". Its fracture is two hierarchical paths, so its lookups read the heavy/light view trees
of Zhang 2022, chapter 5 at the view's eps (``--eps``, default 0.5). The graph is
``benchmarks/triangles.py``'s: a Barabasi-Albert power-law graph, edges oriented at random,
plus a hub with |E|/10 out-edges and 20 in-edges, at sizes spanning 100x. Side by side in one
session, per size:

- **lookup**: ``mv.lookup(b=..., d=...)``, the view trees held on the driver;
- **eager** (Zhang 2022's eager baseline): the view's materialized result filtered by (b, d);
- **lazy**: the query evaluated at request time with b and d bound.

Requests: ``--requests`` (b, d) pairs of existing 4-cycles (answers) and as many random pairs
(mostly none). Recorded: time to the first answer and to the last; all three must give the same
rows. Then single-edge changes at the hub (an edge into it inserted, then deleted again), each
refreshed: the refresh (time, Spark jobs, rows read: the eager side's update cost), and the
first lookup after it, which moves the trees by the changed atom tuples (their work: view
entries written and tuples joined, the trees' rows touched). The lazy side has no update cost.
Results: benchmarks/results/<out>.json, plot: docs/img/<out>.png.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import time
from collections import Counter
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from lookups import timed  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from triangles import HUB, graph, load  # noqa: E402

JOIN = ("FROM edges r JOIN edges s ON r.dst = s.src JOIN edges t ON s.dst = t.src "
        "JOIN edges u ON t.dst = u.src AND u.dst = r.src")
QUERY = f"SELECT r.src AS a, s.dst AS c, r.dst AS b, t.dst AS d {JOIN}"
LAZY = f"SELECT r.src AS a, s.dst AS c {JOIN} WHERE r.dst = {{b}} AND t.dst = {{d}}"


def run(edges: int, requests: int, updates: int, eps: float, work: str, memory: str,
        seed: int) -> Dict[str, Any]:
    warehouse = os.path.join(work, f"warehouse-cycles-{edges}")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory, "spark-ivm 4-cycle lookups")
    rows = graph(edges, seed)
    load(spark, rows, os.path.join(work, "cycles"))
    t0 = time.perf_counter()
    spark.sql(f"CREATE MATERIALIZED VIEW cycles TBLPROPERTIES ('ivm.epsilon' = '{eps}') ACCESS BY (b, d) "
              f"AS {QUERY}")
    create_s = time.perf_counter() - t0
    mv = MaterializedView.for_name(spark, "cycles")
    view_rows = spark.table("cycles").count()
    t0 = time.perf_counter()
    structure = mv.lookup_structure()  # builds the trees
    build_s = time.perf_counter() - t0
    rng = random.Random(seed)
    pairs = [(r[0], r[1]) for r in spark.sql("SELECT DISTINCT b, d FROM cycles").collect()]
    nodes = max(max(e) for e in rows)
    asked = rng.sample(pairs, min(requests, len(pairs))) + [
        (rng.randint(0, nodes), rng.randint(0, nodes)) for _ in range(requests)]

    def eager(b: int, d: int) -> Any:
        return spark.table("cycles").where(f"b = {b} AND d = {d}").select("a", "c").toLocalIterator()

    b0, d0 = asked[0]  # one warm-up request per side: the first query of a kind plans and compiles more
    list(mv.lookup(b=b0, d=d0))
    list(eager(b0, d0))
    spark.sql(LAZY.format(b=b0, d=d0)).collect()
    lookups = []
    for b, d in asked:
        t_first, t_total, t_rows = timed(lambda b=b, d=d: mv.lookup(b=b, d=d))
        e_first, e_total, e_rows = timed(lambda b=b, d=d: eager(b, d))
        l_first, l_total, l_rows = timed(lambda b=b, d=d: spark.sql(LAZY.format(b=b, d=d)).toLocalIterator())
        if not Counter(t_rows) == Counter(e_rows) == Counter(l_rows):
            raise SystemExit(f"{edges} edges, request ({b}, {d}): the lookup, the view and the query differ: "
                             f"{sorted(t_rows)[:20]} / {sorted(e_rows)[:20]} / {sorted(l_rows)[:20]}")
        lookups.append({"b": b, "d": d, "answers": len(e_rows), "lookup_first_s": t_first,
                        "lookup_total_s": t_total, "eager_first_s": e_first, "eager_total_s": e_total,
                        "lazy_first_s": l_first, "lazy_total_s": l_total})
    refreshes = []
    sources = [r[0] for r in spark.sql(f"SELECT src FROM edges WHERE dst = {HUB}").collect()]
    for i in range(updates):
        if i % 2 == 0:  # a new edge into the hub, from a node that has none
            u = next(x for x in (rng.randint(1, nodes) for _ in range(1000)) if x not in sources)
            spark.sql(f"INSERT INTO edges VALUES ({u}, {HUB})")
        else:  # and out again
            spark.sql(f"DELETE FROM edges WHERE src = {u} AND dst = {HUB}")
        t0 = time.perf_counter()
        report = mv.refresh()
        refresh_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        list(mv.lookup(b=b0, d=d0))  # moves the view trees forward
        after_s = time.perf_counter() - t0
        moved = re.search(r"moved (\d+) of them \(work (\d+)", mv.lookup_structure())
        refreshes.append({"step": i, "refresh_s": refresh_s, "spark_jobs": report.spark_jobs,
                          "rows_read": report.rows_read, "mode": report.mode, "first_lookup_after_s": after_s,
                          "tree_tuples_moved": int(moved.group(1)) if moved else 0,
                          "tree_work": int(moved.group(2)) if moved else 0})
    if Counter(tuple(r) for r in spark.table("cycles").collect()) != Counter(
            tuple(r) for r in spark.sql(QUERY).collect()):
        raise SystemExit(f"{edges} edges: the view differs from its query after the updates")
    med = lambda rs, k: statistics.median(r[k] for r in rs)  # noqa: E731
    with_answers = [x for x in lookups if x["answers"]]
    result = {"edges": len(rows), "view_rows": view_rows, "eps": eps, "create_s": create_s,
              "trees_build_s": build_s, "structure": structure, "structure_after": mv.lookup_structure(),
              "lookups": lookups, "refreshes": refreshes,
              "median": {k: med(with_answers, k)
                         for k in ("lookup_first_s", "lookup_total_s", "eager_first_s", "eager_total_s",
                                   "lazy_first_s", "lazy_total_s", "answers")},
              "median_no_answer": {k: med([x for x in lookups if not x["answers"]] or lookups, k)
                                   for k in ("lookup_total_s", "eager_total_s", "lazy_total_s")}}
    if refreshes:
        result["median"].update({k: med(refreshes, k) for k in ("refresh_s", "spark_jobs", "rows_read",
                                                                "first_lookup_after_s", "tree_tuples_moved",
                                                                "tree_work")})
    m = result["median"]
    print(f"  {len(rows)} edges, {view_rows} 4-cycles: first answer lookup "
          f"{m['lookup_first_s'] * 1000:.1f} ms, "
          f"eager {m['eager_first_s'] * 1000:.0f} ms, lazy {m['lazy_first_s'] * 1000:.0f} ms "
          f"({m['answers']:g} answers); single-edge change: refresh {m.get('refresh_s', 0):.2f} s, "
          f"{m.get('rows_read', 0):g} rows read; trees moved {m.get('tree_tuples_moved', 0):g} tuples, work "
          f"{m.get('tree_work', 0):g}, first lookup after {m.get('first_lookup_after_s', 0) * 1000:.0f} ms",
          flush=True)
    spark.stop()
    return result


def plot(runs: List[Dict[str, Any]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sizes = [r["edges"] for r in runs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for key, side in (("lookup_first_s", "lookup (view trees)"), ("eager_first_s", "eager (view filtered)"),
                      ("lazy_first_s", "lazy (query with inputs bound)")):
        a.plot(sizes, [r["median"][key] * 1000 for r in runs], marker="o", label=side)
    b.plot(sizes, [r["median"].get("tree_work", 0) for r in runs], marker="o",
           label="view trees: work of the move (entries written, tuples joined)")
    b.plot(sizes, [r["median"].get("rows_read", 0) for r in runs], marker="s",
           label="eager: rows the view's refresh read")
    a.set_ylabel("time to first answer, ms (median)")
    b.set_ylabel("per single-edge change at the hub")
    for ax in (a, b):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("edges")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, action="append", help="graph size (repeatable)")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--eps", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="cycle_lookups")
    args = parser.parse_args()
    runs = [run(e, args.requests, args.updates, args.eps, args.work, args.memory, args.seed)
            for e in (args.edges or [1000, 10000, 100000])]
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.json"), "w") as f:
        json.dump({"machine": platform.platform(), "cpus": os.cpu_count(), "runs": runs}, f, indent=1)
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    plot(runs, os.path.join(ROOT, "docs", "img", f"{args.out}.png"))


if __name__ == "__main__":
    main()
