"""Refreshes as scheduled jobs see them: each round's refresh the first of a new application.

    python benchmarks/cold.py --sf 1 --rounds 4 [--rely] [--master local[2]] [--view q10]

TPC-H tables as tpchgen-cli writes them, loaded into Delta with their primary and foreign keys
declared (RELY with --rely; by default not, as keys are declared by most users), and one
materialized view (REFRESH POLICY INCREMENTAL) beside a Delta table holding its recomputation.
Each round applies the refresh functions (--orders orders in and out with their lineitems, new
customers placing some of them, customers without orders removed) in an application of its
own, then refreshes the view in a new application and recomputes the query (INSERT OVERWRITE)
in another, which goes first alternating by round, each with spark-ivm's default settings; then
checks the view against the recomputation. A worker times only its statement (its session's
start is reported beside it). With --same-app the refreshes and recomputations of every round
run in one application instead, alternating which goes first: the second and later refreshes
then find the state earlier ones asked for (made between refreshes).
A view whose query ends in LIMIT (a top-k view, which sorts its kept rows when read) is also
read once right after its refresh, and the recomputed table after its recomputation
(`read_s`): `speedup_with_read` is (recompute + read) / (refresh + read).

Results: benchmarks/results/<out>.json; plot: docs/img/<out>_rounds.png (--out, default cold).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

from fk import TABLES, VIEWS, declare_keys, refresh_functions  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView, configure_spark_with_ivm, ivm_jar_path  # noqa: E402
from tpch_data import generate  # noqa: E402


def session(warehouse: str, master: str, memory: str, app: str) -> SparkSession:
    """A session over the benchmark's warehouse, its catalog kept in a Derby metastore there so
    that every application sees the same tables; spark-ivm's defaults otherwise."""
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.memory", memory)
               .config("spark.sql.warehouse.dir", warehouse)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
               .config("javax.jdo.option.ConnectionURL",
                       f"jdbc:derby:;databaseName={os.path.join(warehouse, 'metastore_db')};create=true")
               .enableHiveSupport())
    if master.startswith("local-cluster"):
        builder = builder.config("spark.executor.memory", "3g")
    # SPARK_IVM_BENCH_CONF="key=value;key=value": other settings for every application (both sides).
    for kv in os.environ.get("SPARK_IVM_BENCH_CONF", "").split(";"):
        if "=" in kv:
            builder = builder.config(*kv.split("=", 1))
    log_dir = os.environ.get("SPARK_IVM_BENCH_EVENT_LOG")
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        builder = (builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", log_dir)
                   .config("spark.eventLog.compress", "false"))
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load(spark: SparkSession, parquet_dir: str, rely: bool) -> Dict[str, int]:
    """Delta tables as tpchgen-cli wrote the files, keys declared."""
    counts = {}
    for t in TABLES:
        spark.read.parquet(os.path.join(parquet_dir, f"{t}.parquet")).write.format("delta").saveAsTable(t)
        counts[t] = spark.table(t).count()
    declare_keys(spark, rely)
    return counts


def bag(spark: SparkSession, t: str) -> Counter:
    return Counter(tuple(round(float(v), 2) if hasattr(v, "as_tuple") or isinstance(v, float) else v
                         for v in r) for r in spark.table(t).collect())


def timed_refresh(spark: SparkSession, view: str) -> Dict[str, Any]:
    t0 = time.perf_counter()
    report = MaterializedView.for_name(spark, view).refresh()
    return {"refresh_s": time.perf_counter() - t0, "mode": report.mode, "spark_jobs": report.spark_jobs,
            "rows_read": report.rows_read, "phases_ms": report.phases_ms, "phases_jobs": report.phases_jobs}


def reads_timed(view: str) -> bool:
    """A view whose query ends in LIMIT does work when read: its refresh is timed with a read."""
    return re.search(r"\bLIMIT\s+\d+\s*$", VIEWS[view], re.IGNORECASE) is not None


def timed_read(spark: SparkSession, table: str) -> Dict[str, Any]:
    t0 = time.perf_counter()
    n = len(spark.table(table).collect())
    return {"read_s": time.perf_counter() - t0, "read_rows": n}


def timed_side(spark: SparkSession, view: str, side: str) -> Dict[str, Any]:
    """The refresh of the view, or the recomputation of its table, then one read of it if timed."""
    out = timed_refresh(spark, f"{view}_mv") if side == "refresh" else timed_recompute(spark, view)
    if reads_timed(view):
        out.update(timed_read(spark, f"{view}_mv" if side == "refresh" else f"{view}_full"))
    return out


def ratios(got: Dict[str, Any]) -> Dict[str, Any]:
    """Recompute / refresh, and with a read on each side when one was timed."""
    ref, rec = got["refresh"], got["recompute"]
    out = {"speedup": rec["recompute_s"] / ref["refresh_s"]}
    if "read_s" in ref:
        out["speedup_with_read"] = (rec["recompute_s"] + rec["read_s"]) / (ref["refresh_s"] + ref["read_s"])
    return out


def describe(row: Dict[str, Any]) -> str:
    ref, rec = row["refresh"], row["recompute"]
    text = (f"refresh {ref['refresh_s']:.2f} s ({ref['spark_jobs']} jobs, {ref['phases_ms']}), recompute "
            f"{rec['recompute_s']:.2f} s: {row['speedup']:.1f}x")
    if "speedup_with_read" in row:
        text += (f"; reads {ref['read_s']:.2f} s (view) / {rec['read_s']:.2f} s (table): "
                 f"{row['speedup_with_read']:.1f}x with the read")
    return text


def timed_recompute(spark: SparkSession, view: str) -> Dict[str, Any]:
    metrics = spark.sparkContext._jvm.org.apache.spark.sql.ivm.ReadMetrics  # type: ignore[union-attr]
    t0 = time.perf_counter()
    jobs, _tasks, read = metrics.workOf(spark._jsparkSession, f"INSERT OVERWRITE {view}_full {VIEWS[view]}")
    return {"recompute_s": time.perf_counter() - t0, "spark_jobs": int(jobs), "rows_read": int(read)}


def worker(args: argparse.Namespace) -> None:
    """One application: set up, change the tables, refresh, recompute or check; prints its JSON."""
    t0 = time.perf_counter()
    spark = session(args.warehouse, args.master, args.memory, f"spark-ivm cold {args.worker}")
    out: Dict[str, Any] = {"session_s": time.perf_counter() - t0}
    if args.worker == "setup":
        out["rows"] = load(spark, generate(args.sf, os.path.join(args.work, "tpch"), list(TABLES)), args.rely)
        spark.sql(f"CREATE TABLE {args.view}_full USING delta AS {VIEWS[args.view]}")
        spark.sql(f"CREATE MATERIALIZED VIEW {args.view}_mv REFRESH POLICY INCREMENTAL AS {VIEWS[args.view]}")
    elif args.worker == "change":
        out.update(refresh_functions(spark, 0.0, seed=args.round, orders=args.orders))
    elif args.worker in ("refresh", "recompute"):
        out.update(timed_side(spark, args.view, args.worker))
    elif args.worker == "check":
        out["same"] = bag(spark, f"{args.view}_mv") == bag(spark, f"{args.view}_full")
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


def run_worker(args: argparse.Namespace, kind: str, round_: int = 0, python: str = sys.executable
               ) -> Dict[str, Any]:
    """One application of `--worker kind`, run by the interpreter `python` (its package and jar);
    its RESULT, with the application's time."""
    cmd = [python, os.path.abspath(__file__), "--worker", kind, "--warehouse", args.warehouse,
           "--work", args.work, "--sf", f"{args.sf:g}", "--view", args.view, "--master", args.master,
           "--memory", args.memory, "--round", str(round_), "--orders", str(args.orders)] + (
        ["--rely"] if args.rely else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]), application_s=time.perf_counter() - t0)


def cold_rounds(args: argparse.Namespace) -> List[Dict[str, Any]]:
    rounds = []
    for r in range(1, args.rounds + 1):
        run_worker(args, "change", r)
        sides = ["refresh", "recompute"] if r % 2 else ["recompute", "refresh"]
        got = {side: run_worker(args, side, r) for side in sides}
        if not run_worker(args, "check", r)["same"]:
            raise SystemExit(f"round {r}: the view differs from its recomputation")
        row = {"round": r, "first": sides[0], "refresh": got["refresh"], "recompute": got["recompute"],
               **ratios(got), "load1": os.getloadavg()[0]}
        print(f"  cold round {r}: {describe(row)}", flush=True)
        rounds.append(row)
    return rounds


def same_app_rounds(args: argparse.Namespace) -> List[Dict[str, Any]]:
    spark = session(args.warehouse, args.master, args.memory, "spark-ivm same-app rounds")
    rounds = []
    for r in range(1, args.rounds + 1):
        refresh_functions(spark, 0.0, seed=100 + r, orders=args.orders)
        # What the last refresh asked for is made between refreshes: a scheduled job's idle time.
        spark._jvm.io.sparkivm.state.StateBuilds.awaitIdle(600000)  # type: ignore[union-attr]
        got: Dict[str, Any] = {}
        for side in (["refresh", "recompute"] if r % 2 else ["recompute", "refresh"]):
            got[side] = timed_side(spark, args.view, side)
        if bag(spark, f"{args.view}_mv") != bag(spark, f"{args.view}_full"):
            raise SystemExit(f"same-app round {r}: the view differs from its recomputation")
        row = {"round": r, **got, **ratios(got), "load1": os.getloadavg()[0]}
        print(f"  same-app round {r}: {describe(row)}", flush=True)
        rounds.append(row)
    spark.stop()
    return rounds


def plot(result: Dict[str, Any], path: str) -> None:
    plot_rounds(result, path, f"{result['view']} at SF {result['sf']:g}, {result['orders']} orders in and "
                f"out, {'RELY' if result['rely'] else 'not RELY'}, {result['master']}")


def plot_rounds(result: Dict[str, Any], path: str, title: str, xlabel: str = "round") -> None:
    """Refresh and recomputation time per round, in new applications and in one (`cold`, `same_app`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for key, label, marker in (("cold", "each refresh a new application", "o"),
                               ("same_app", "one application", "s")):
        rows = result.get(key) or []
        if rows:
            xs = [r["round"] for r in rows]
            line = ax.plot(xs, [r["refresh"]["refresh_s"] for r in rows], marker=marker,
                           label=f"refresh, {label}")
            ax.plot(xs, [r["recompute"]["recompute_s"] for r in rows], marker=marker, linestyle="--",
                    color=line[0].get_color(), label=f"recompute, {label}")
            if all("read_s" in r["refresh"] for r in rows):
                ax.plot(xs, [r["refresh"]["refresh_s"] + r["refresh"]["read_s"] for r in rows],
                        marker=marker, linestyle=":", color=line[0].get_color(),
                        label=f"refresh + read of the view, {label}")
    ax.set_xticks(sorted({r["round"] for key in ("cold", "same_app") for r in result.get(key) or []}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--orders", type=int, default=1500)
    parser.add_argument("--view", default="q10", choices=sorted(VIEWS))
    parser.add_argument("--rely", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--same-app", action="store_true", help="also run the rounds in one application")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="cold")
    parser.add_argument("--worker", choices=["setup", "change", "refresh", "recompute", "check"])
    parser.add_argument("--warehouse")
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    args.warehouse = os.path.join(args.work, f"warehouse-cold-sf{args.sf:g}")
    shutil.rmtree(args.warehouse, ignore_errors=True)
    os.makedirs(args.warehouse)
    setup = run_worker(args, "setup")
    print(f"set up in {setup['application_s']:.0f} s: {setup['rows']}", flush=True)
    result: Dict[str, Any] = {"sf": args.sf, "view": args.view, "orders": args.orders, "rely": args.rely,
                              "master": args.master, "machine": platform.platform(), "rows": setup["rows"],
                              "jar_md5": hashlib.md5(open(ivm_jar_path(), "rb").read()).hexdigest(),
                              "cold": cold_rounds(args)}
    if args.same_app:
        result["same_app"] = same_app_rounds(args)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(ROOT, "docs", "img", f"{args.out}_rounds.png"))


if __name__ == "__main__":
    main()
