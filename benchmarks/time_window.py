"""A 30-day window over a growing event table, as time advances one hour per refresh.

    python benchmarks/time_window.py --events 10000000 --rounds 6 [--cold] [--master local[2]]

An event table of --events rows over --days days (one file a day, as daily loads leave it; its
change data feed on), and one materialized view of the last --window days per customer:

    SELECT cust, count(*) AS n, sum(amount) AS total FROM events
    WHERE ts >= current_timestamp() - INTERVAL 30 DAYS GROUP BY cust

Each round the clock moves one hour: that hour's events are appended (one commit), the view is
refreshed at the new instant (`spark.ivm.refresh.instant`), and the query is recomputed at the
same instant into a Delta table (INSERT OVERWRITE), alternating which goes first; then the two
are compared. The refresh applies the hour's new events and the hour of events that left the
window 30 days back, read by Delta's data skipping on `ts`. With --cold, every refresh and every
recomputation runs in an application of its own (a scheduled job), else all in one.

Results: benchmarks/results/<out>.json; plot: docs/img/<out>_rounds.png (--out, default time_window).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from cold import plot_rounds, session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402

START = datetime(2025, 11, 1)
QUERY = ("SELECT cust, count(*) AS n, sum(amount) AS total FROM events "
         "WHERE ts >= current_timestamp() - INTERVAL {window} DAYS GROUP BY cust")


def query(args: argparse.Namespace, at: datetime | None = None) -> str:
    q = QUERY.format(window=args.window)
    return q if at is None else q.replace("current_timestamp()", f"TIMESTAMP '{at:%Y-%m-%d %H:%M:%S}'")


def clock_file(args: argparse.Namespace) -> str:
    return os.path.join(args.warehouse, "clock.txt")


def now(args: argparse.Namespace) -> datetime:
    with open(clock_file(args)) as f:
        return datetime.fromisoformat(f.read().strip())


def events_sql(first: int, count: int, start: datetime, seconds: float, customers: int) -> str:
    """`count` events from id `first`, evenly over `seconds` from `start`."""
    return (f"SELECT id, CAST(hash(id) % {customers} + {customers} AS INT) % {customers} AS cust, "
            f"TIMESTAMP '{start:%Y-%m-%d %H:%M:%S}' + make_interval(0, 0, 0, 0, 0, 0, "
            f"CAST((id - {first}) * {seconds / max(count, 1)!r} AS DECIMAL(18, 6))) AS ts, "
            f"CAST(id % 1000 AS DECIMAL(10, 2)) AS amount FROM range({first}, {first + count})")


def setup(spark: SparkSession, args: argparse.Namespace) -> Dict[str, Any]:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.sql("CREATE TABLE events (id BIGINT, cust INT, ts TIMESTAMP, amount DECIMAL(10, 2)) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    per_day = args.events // args.days
    for day in range(0, args.days, 30):  # a month per statement, a file per day
        days = min(30, args.days - day)
        df = spark.sql(events_sql(day * per_day, days * per_day, START + timedelta(days=day), days * 86400.0,
                                  args.customers))
        df.repartitionByRange(days, "ts").write.format("delta").mode("append").saveAsTable("events")
    instant = START + timedelta(days=args.days)
    with open(clock_file(args), "w") as f:
        f.write(instant.isoformat())
    spark.conf.set("spark.ivm.refresh.instant", f"{instant:%Y-%m-%d %H:%M:%S}")
    spark.sql(f"CREATE TABLE recomputed USING delta AS {query(args, instant)}")
    spark.sql(f"CREATE MATERIALIZED VIEW recent REFRESH POLICY INCREMENTAL AS {query(args)}")
    files = spark.sql("DESCRIBE DETAIL events").collect()[0]["numFiles"]
    return {"events": spark.table("events").count(), "files": files}


def advance(spark: SparkSession, args: argparse.Namespace, round_: int) -> Dict[str, Any]:
    """The next hour's events appended, and the clock one hour on."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    before = now(args)
    per_hour = max(1, args.events // (args.days * 24))
    first = args.events + (round_ - 1) * per_hour
    spark.sql(f"INSERT INTO events {events_sql(first, per_hour, before, 3600.0, args.customers)}")
    with open(clock_file(args), "w") as f:
        f.write((before + timedelta(hours=1)).isoformat())
    return {"appended": per_hour}


def timed_refresh(spark: SparkSession, args: argparse.Namespace) -> Dict[str, Any]:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.ivm.refresh.instant", f"{now(args):%Y-%m-%d %H:%M:%S}")
    t0 = time.perf_counter()
    report = MaterializedView.for_name(spark, "recent").refresh()
    return {"refresh_s": time.perf_counter() - t0, "mode": report.mode, "spark_jobs": report.spark_jobs,
            "rows_read": report.rows_read, "phases_ms": report.phases_ms,
            "view_rows_changed": report.view_rows_changed}


def timed_recompute(spark: SparkSession, args: argparse.Namespace) -> Dict[str, Any]:
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    metrics = spark.sparkContext._jvm.org.apache.spark.sql.ivm.ReadMetrics  # type: ignore[union-attr]
    t0 = time.perf_counter()
    statement = f"INSERT OVERWRITE recomputed {query(args, now(args))}"
    jobs, _tasks, read = metrics.workOf(spark._jsparkSession, statement)
    return {"recompute_s": time.perf_counter() - t0, "spark_jobs": int(jobs), "rows_read": int(read)}


def same(spark: SparkSession) -> bool:
    def bag(t: str) -> Counter:
        return Counter((r.cust, r.n, float(r.total)) for r in spark.table(t).collect())
    return bag("recent") == bag("recomputed")


def worker(args: argparse.Namespace) -> None:
    """One application doing one thing; prints its JSON."""
    t0 = time.perf_counter()
    spark = session(args.warehouse, args.master, args.memory, f"spark-ivm time window {args.worker}")
    out: Dict[str, Any] = {"session_s": time.perf_counter() - t0}
    if args.worker == "setup":
        out.update(setup(spark, args))
    elif args.worker == "advance":
        out.update(advance(spark, args, args.round))
    elif args.worker == "refresh":
        out.update(timed_refresh(spark, args))
    elif args.worker == "recompute":
        out.update(timed_recompute(spark, args))
    elif args.worker == "check":
        out["same"] = same(spark)
    spark.stop()
    print("RESULT " + json.dumps(out), flush=True)


def run_worker(args: argparse.Namespace, kind: str, round_: int = 0) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--warehouse", args.warehouse,
           "--events", str(args.events), "--days", str(args.days), "--window", str(args.window),
           "--customers", str(args.customers), "--master", args.master, "--memory", args.memory,
           "--round", str(round_)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]), application_s=time.perf_counter() - t0)


def rounds(args: argparse.Namespace) -> List[Dict[str, Any]]:
    spark = None if args.cold else session(args.warehouse, args.master, args.memory, "spark-ivm time window")
    out = []
    for r in range(1, args.rounds + 1):
        sides = ["refresh", "recompute"] if r % 2 else ["recompute", "refresh"]
        if spark is None:
            run_worker(args, "advance", r)
            got = {side: run_worker(args, side, r) for side in sides}
            ok = run_worker(args, "check", r)["same"]
        else:
            advance(spark, args, r)
            got = {side: timed_refresh(spark, args) if side == "refresh" else timed_recompute(spark, args)
                   for side in sides}
            ok = same(spark)
        if not ok:
            raise SystemExit(f"round {r}: the view differs from its recomputation")
        row = {"round": r, "first": sides[0], **got,
               "speedup": got["recompute"]["recompute_s"] / got["refresh"]["refresh_s"]}
        done = row["refresh"]
        print(f"  round {r}: refresh {done['refresh_s']:.2f} s ({done['spark_jobs']} jobs, "
              f"{done['rows_read']} rows read, {done['phases_ms']}), recompute "
              f"{row['recompute']['recompute_s']:.2f} s ({row['recompute']['rows_read']} rows read): "
              f"{row['speedup']:.1f}x", flush=True)
        out.append(row)
    if spark is not None:
        spark.stop()
    return out


def plot(result: Dict[str, Any], path: str) -> None:
    plot_rounds(result, path, f"{result['window']}-day window over {result['setup']['events']:,} events, "
                f"{result['setup']['files']} files, {result['master']}",
                "round (the clock one hour on, that hour's events appended)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--window", type=int, default=30)
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cold", action="store_true",
                        help="each refresh and recomputation a new application")
    parser.add_argument("--same-app", action="store_true", help="also the rounds in one application")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="time_window")
    parser.add_argument("--worker", choices=["setup", "advance", "refresh", "recompute", "check"])
    parser.add_argument("--warehouse")
    parser.add_argument("--round", type=int, default=0)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    args.warehouse = os.path.join(args.work, f"warehouse-time-window-{args.events}")
    shutil.rmtree(args.warehouse, ignore_errors=True)
    os.makedirs(args.warehouse)
    made = run_worker(args, "setup")
    print(f"set up in {made['application_s']:.0f} s: {made['events']} events in {made['files']} files",
          flush=True)
    result: Dict[str, Any] = {"window": args.window, "master": args.master, "machine": platform.platform(),
                              "setup": {"events": made["events"], "files": made["files"]}}
    modes = (["cold"] if args.cold else []) + (["same_app"] if args.same_app or not args.cold else [])
    for mode in modes:
        args.cold = mode == "cold"
        print(f"{mode}:", flush=True)
        result[mode] = rounds(args)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(ROOT, "docs", "img", f"{args.out}_rounds.png"))


if __name__ == "__main__":
    main()
