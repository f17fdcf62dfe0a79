"""Lag under a rate-limited trigger (issue 10's benchmark).

    python benchmarks/lag.py --minutes 10

A Delta table of --rows events and a view over it with
`TRIGGER ON UPDATE AT MOST EVERY INTERVAL 10 SECONDS`, kept fresh by a RefreshService in the
same session, while a writer thread commits --batch new events every second (and deletes a
few old ones every tenth commit). Every second the view's lag (the time since the oldest
commit it has not applied, read as `mv.lag()` reads it: from the Delta logs) is sampled. At the
end the writer stops, the view catches up, and it must equal its recomputation. The bound to
meet: lag below the interval plus one refresh time, throughout.
Results: benchmarks/results/<out>.json, plot: docs/img/<out>.png (--out, default lag).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import threading
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from spark_ivm import MaterializedView, RefreshService  # noqa: E402

QUERY = "SELECT k, count(*) AS n, sum(v) AS s FROM events GROUP BY k"
INTERVAL_S = 10


def writer(spark: Any, stop: threading.Event, batch: int, commits: List[float]) -> None:
    i = 0
    while not stop.is_set():
        t0 = time.time()
        spark.sql(f"INSERT INTO events SELECT {10**9} + {i * batch} + id, id % 1000, rand() "
                  f"FROM range({batch})")
        if i % 10 == 9:
            spark.sql(f"DELETE FROM events WHERE id % 100000 = {i}")
        commits.append(time.time())
        i += 1
        stop.wait(max(0.0, 1.0 - (time.time() - t0)))


def run(rows: int, minutes: float, batch: int, work: str, memory: str) -> Dict[str, Any]:
    warehouse = os.path.join(work, "warehouse-lag")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory, "spark-ivm lag benchmark",
                    {"spark.ivm.service.pollIntervalMs": "250"})
    spark.sql("CREATE TABLE events (id BIGINT, k INT, v DOUBLE) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql(f"INSERT INTO events SELECT id, id % 1000, rand() FROM range({rows})")
    trigger = f"TRIGGER ON UPDATE AT MOST EVERY INTERVAL {INTERVAL_S} SECONDS"
    mv = MaterializedView.create(spark, "per_key", QUERY, schedule=trigger)
    service = RefreshService(spark).start()
    stop = threading.Event()
    commits: List[float] = []
    w = threading.Thread(target=writer, args=(spark, stop, batch, commits), daemon=True)
    w.start()
    samples = []
    t_start = time.time()
    while time.time() - t_start < minutes * 60:
        samples.append((time.time() - t_start, mv.lag().lag_seconds))
        time.sleep(1.0)
    stop.set()
    w.join()
    deadline = time.time() + 120
    while not mv.lag().up_to_date and time.time() < deadline:
        time.sleep(0.5)
    service.stop()
    history = [e for e in mv.history() if e.triggered_by == "service"]
    durations = [e.duration_ms / 1000 for e in history]
    expected = {r.k: (r.n, r.s) for r in spark.sql(QUERY).collect()}
    actual = {r.k: (r.n, r.s) for r in spark.table("per_key").collect()}
    same = expected.keys() == actual.keys() and all(
        actual[k][0] == n and math.isclose(actual[k][1], s, rel_tol=1e-9) for k, (n, s) in expected.items())
    spark.stop()
    lags = [lag for _, lag in samples]
    return {"rows": rows, "minutes": minutes, "batch": batch, "commits": len(commits),
            "refreshes": len(history),
            "refresh_s_median": statistics.median(durations) if durations else None,
            "refresh_s_max": max(durations) if durations else None,
            "lag_s_max": max(lags), "lag_s_median": statistics.median(lags),
            "bound_s": INTERVAL_S + (max(durations) if durations else 0.0),
            "matches_recomputation": same, "samples": samples}


def plot(result: Dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [t for t, _ in result["samples"]]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(xs, [lag for _, lag in result["samples"]], lw=1,
            label="lag (time since the oldest commit not applied)")
    ax.axhline(result["bound_s"], color="red", ls="--", label="bound: interval + longest refresh")
    ax.set_xlabel("seconds")
    ax.set_ylabel("lag, seconds")
    ax.set_title(f"TRIGGER ON UPDATE AT MOST EVERY INTERVAL {INTERVAL_S} SECONDS, a commit every second")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--memory", default="8g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="lag")
    args = parser.parse_args()
    result = run(args.rows, args.minutes, args.batch, args.work, args.memory)
    path = os.path.join(HERE, "results", f"{args.out}.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join(sys.argv), "machine": {"cpus": os.cpu_count(),
                   "python": platform.python_version()}, **result}, f, indent=2)
    plot(result, os.path.join(ROOT, "docs", "img", f"{args.out}.png"))
    print(f"{result['commits']} commits, {result['refreshes']} refreshes (median "
          f"{result['refresh_s_median']:.2f} s, max {result['refresh_s_max']:.2f} s); lag max "
          f"{result['lag_s_max']:.1f} s, median {result['lag_s_median']:.1f} s, "
          f"bound {result['bound_s']:.1f} s; matches recomputation: {result['matches_recomputation']}; "
          f"wrote {path}")


if __name__ == "__main__":
    main()
