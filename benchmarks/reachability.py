"""Reachability over a hierarchy of --edges edges, as 100 edges go out and 100 come in per round.

    python benchmarks/reachability.py --edges 1000000 --rounds 4 [--cold] [--same-app] [--view named]

A tree of --edges + 1 nodes (node i's parent is (i - 1) // --fanout, so its depth is about
log_fanout(edges)), and one materialized view of every (ancestor, node) pair, one row per path:

    WITH RECURSIVE r(anc, node) AS (SELECT src, dst FROM edges UNION ALL
      SELECT r.anc, e.dst FROM r JOIN edges e ON r.node = e.src) SELECT anc, node FROM r

With --view named, the view joins the recursion with a table of the nodes' labels and counts each
ancestor's descendants (kept through a helper view of the recursion, refreshed first):

    ... SELECT r.anc, n.label, count(*) AS below FROM r JOIN nodes n ON n.id = r.anc
        GROUP BY r.anc, n.label

Each round --changes random edges are deleted and as many added (a node moved under another
parent), in one commit; the view is refreshed and the query recomputed into a Delta table
(INSERT OVERWRITE), alternating which goes first, then the two are compared. With --cold, every
refresh and every recomputation runs in an application of its own; --same-app runs the rounds in
one application (the default without --cold).

Spark stops a recursion past spark.sql.cteRecursionRowLimit rows (1,000,000 by default), the query
and the view's refreshes alike: past 10^5 edges, run with
SPARK_IVM_BENCH_CONF="spark.sql.cteRecursionRowLimit=-1" (both sides, and the view, which keeps the
settings it was created under).

Results: benchmarks/results/<out>.json; plot: docs/img/<out>_rounds.png (--out, default reachability).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from cold import plot_rounds, session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402

REACH = ("WITH RECURSIVE r(anc, node) AS (SELECT src, dst FROM edges UNION ALL "
         "SELECT r.anc, e.dst FROM r JOIN edges e ON r.node = e.src) ")
QUERIES = {"paths": REACH + "SELECT anc, node FROM r",
           "named": REACH + "SELECT r.anc, n.label, count(*) AS below FROM r JOIN nodes n ON n.id = r.anc "
                            "GROUP BY r.anc, n.label"}


def setup(spark: SparkSession, args: argparse.Namespace) -> Dict[str, Any]:
    spark.sql("CREATE TABLE edges (src BIGINT, dst BIGINT) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql(f"INSERT INTO edges SELECT (id - 1) DIV {args.fanout}, id FROM range(1, {args.edges + 1})")
    spark.sql(f"CREATE TABLE nodes USING delta AS SELECT id, concat('node ', id) AS label "
              f"FROM range(0, {args.edges + 1})")
    query = QUERIES[args.view]
    spark.sql(f"CREATE TABLE recomputed USING delta AS {query}")
    spark.sql(f"CREATE MATERIALIZED VIEW reach REFRESH POLICY INCREMENTAL AS {query}")
    rows = spark.table("recomputed").count()
    paths = rows if args.view == "paths" else spark.sql(REACH + "SELECT * FROM r").count()
    return {"edges": spark.table("edges").count(), "paths": paths, "view_rows": rows}


def advance(spark: SparkSession, args: argparse.Namespace, round_: int) -> Dict[str, Any]:
    """--changes nodes moved under other parents: their edges out, the new ones in, one commit.
    A node moves under one with a smaller id, so the graph stays a tree (no cycle)."""
    rng = random.Random(round_)
    moved = sorted(rng.sample(range(args.fanout + 1, args.edges + 1), args.changes))
    parents = [rng.randrange(1, node) for node in moved]
    values = ", ".join(f"({n}, {p})" for n, p in zip(moved, parents, strict=True))
    spark.sql(f"MERGE INTO edges t USING (SELECT * FROM VALUES {values} AS m(node, parent)) m "
              "ON t.dst = m.node WHEN MATCHED THEN UPDATE SET src = m.parent")
    return {"moved": len(moved)}


def timed_refresh(spark: SparkSession) -> Dict[str, Any]:
    t0 = time.perf_counter()
    report = MaterializedView.for_name(spark, "reach").refresh()
    return {"refresh_s": time.perf_counter() - t0, "mode": report.mode, "spark_jobs": report.spark_jobs,
            "rows_read": report.rows_read, "phases_ms": report.phases_ms,
            "view_rows_changed": report.view_rows_changed}


def timed_recompute(spark: SparkSession, args: argparse.Namespace) -> Dict[str, Any]:
    metrics = spark.sparkContext._jvm.org.apache.spark.sql.ivm.ReadMetrics  # type: ignore[union-attr]
    statement = f"INSERT OVERWRITE recomputed {QUERIES[args.view]}"
    t0 = time.perf_counter()
    jobs, _tasks, read = metrics.workOf(spark._jsparkSession, statement)
    return {"recompute_s": time.perf_counter() - t0, "spark_jobs": int(jobs), "rows_read": int(read)}


def same(spark: SparkSession) -> bool:
    return spark.sql("(SELECT * FROM reach EXCEPT ALL SELECT * FROM recomputed) UNION ALL "
                     "(SELECT * FROM recomputed EXCEPT ALL SELECT * FROM reach)").isEmpty()


def worker(args: argparse.Namespace) -> None:
    """One application doing one thing; prints its JSON."""
    spark = session(args.warehouse, args.master, args.memory, f"spark-ivm reachability {args.worker}")
    steps = {"setup": lambda: setup(spark, args), "advance": lambda: advance(spark, args, args.round),
             "refresh": lambda: timed_refresh(spark), "recompute": lambda: timed_recompute(spark, args),
             "check": lambda: {"same": same(spark)}}
    out = steps[args.worker]()
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


def run_worker(args: argparse.Namespace, kind: str, round_: int = 0) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--warehouse", args.warehouse,
           "--edges", str(args.edges), "--fanout", str(args.fanout), "--changes", str(args.changes),
           "--master", args.master, "--memory", args.memory, "--round", str(round_), "--view", args.view]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]), application_s=time.perf_counter() - t0)


def rounds(args: argparse.Namespace, first: int) -> List[Dict[str, Any]]:
    spark = None if args.cold else session(args.warehouse, args.master, args.memory, "spark-ivm reachability")
    out = []
    for r in range(first, first + args.rounds):
        sides = ["refresh", "recompute"] if r % 2 else ["recompute", "refresh"]
        if spark is None:
            run_worker(args, "advance", r)
            got = {side: run_worker(args, side, r) for side in sides}
            ok = run_worker(args, "check", r)["same"]
        else:
            advance(spark, args, r)
            got = {side: timed_refresh(spark) if side == "refresh" else timed_recompute(spark, args)
                   for side in sides}
            ok = same(spark)
        if not ok:
            raise SystemExit(f"round {r}: the view differs from its recomputation")
        row = {"round": r - first + 1, "first": sides[0], **got,
               "speedup": got["recompute"]["recompute_s"] / got["refresh"]["refresh_s"]}
        done = row["refresh"]
        print(f"  round {r}: refresh {done['refresh_s']:.2f} s ({done['spark_jobs']} jobs, "
              f"{done['view_rows_changed']} view rows changed, {done['phases_ms']}), recompute "
              f"{row['recompute']['recompute_s']:.2f} s: {row['speedup']:.1f}x", flush=True)
        out.append(row)
    if spark is not None:
        spark.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--fanout", type=int, default=4)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--view", choices=sorted(QUERIES), default="paths")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--cold", action="store_true",
                        help="each refresh and recomputation a new application")
    parser.add_argument("--same-app", action="store_true", help="also the rounds in one application")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="reachability")
    parser.add_argument("--worker", choices=["setup", "advance", "refresh", "recompute", "check"])
    parser.add_argument("--warehouse")
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    args.warehouse = os.path.join(args.work, f"warehouse-reachability-{args.view}-{args.edges}")
    shutil.rmtree(args.warehouse, ignore_errors=True)
    os.makedirs(args.warehouse)
    made = run_worker(args, "setup")
    print(f"set up in {made['application_s']:.0f} s: {made['edges']} edges, {made['paths']} paths, "
          f"{made['view_rows']} view rows", flush=True)
    result: Dict[str, Any] = {"master": args.master, "machine": platform.platform(),
                              "setup": {"edges": made["edges"], "paths": made["paths"], "fanout": args.fanout,
                                        "changes": args.changes, "view": args.view,
                                        "view_rows": made["view_rows"]}}
    modes = (["cold"] if args.cold else []) + (["same_app"] if args.same_app or not args.cold else [])
    first = 1
    for mode in modes:
        args.cold = mode == "cold"
        print(f"{mode}:", flush=True)
        result[mode] = rounds(args, first)
        first += args.rounds
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot_rounds(result, os.path.join(ROOT, "docs", "img", f"{args.out}_rounds.png"),
                f"reachability ({args.view}) over {made['edges']:,} edges ({made['paths']:,} paths), "
                f"{args.changes} edges out and in per round, {args.master}",
                "round (edges moved, one commit)")


if __name__ == "__main__":
    main()
