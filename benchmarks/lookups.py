"""Access-pattern lookups on TPC-H (issue 11's benchmark, its baselines).

    python benchmarks/lookups.py --sf 0.1 --sf 0.3 --sf 1 --requests 20

Two views over TPC-H with the customer key as their input (``ACCESS BY (c_custkey)``), at
several scale factors: the issue's example, "per customer: its orders and their line counts"
(``orders_lines``, in CQAP1 by Zhang 2022's classification: the output order key dominates the
input), and "a customer's orders" (``orders_of``, in CQAP0). Per view, side by side in one
session:

- **lookup**: ``mv.lookup``, which reads a CQAP0 view's view trees (Zhang 2022, chapter 4),
  held on the driver, and any other view's materialized result filtered by the key;
- **eager** (the eager baseline of Zhang 2022): the view's materialized result, filtered by the
  request's customer key;
- **lazy**: the view's query evaluated at request time with the customer key bound
  (``WHERE c_custkey = k`` on the base tables).

For ``--requests`` random customers (those with orders) it records the time to the first answer
row and to the last, and checks that all three give the same rows. It then applies single-row
updates (a lineitem and an order inserted, then deleted again) and records what the view's
refresh costs (time, Spark jobs and rows read) and what the first lookup after it costs (for a
view with trees, that lookup moves them forward by the tables' changes). The lazy baseline has
no update cost.
Results: benchmarks/results/<out>.json, plot: docs/img/<out>.png (--out, default lookups).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from fk import TABLES, load  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from tpch_data import generate  # noqa: E402

VIEWS = {  # name: (query, the lazy baseline's query for one customer key)
    # The example, "per customer: its orders and their line counts". Not in CQAP0: like
    # Zhang's Q(B | A) = S(A, B), T(B), the output o_orderkey dominates the input c_custkey.
    "orders_lines": (
        """SELECT c_custkey, o_orderkey, o_orderdate, count(*) AS lines
           FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey
           GROUP BY c_custkey, o_orderkey, o_orderdate""",
        """SELECT o_orderkey, o_orderdate, count(*) AS lines
           FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey
           WHERE c_custkey = {key} GROUP BY c_custkey, o_orderkey, o_orderdate"""),
    # In CQAP0: the input dominates the outputs ("a customer's orders").
    "orders_of": (
        """SELECT c_custkey, o_orderkey, o_orderdate, o_totalprice
           FROM customer JOIN orders ON c_custkey = o_custkey""",
        """SELECT o_orderkey, o_orderdate, o_totalprice
           FROM customer JOIN orders ON c_custkey = o_custkey WHERE c_custkey = {key}"""),
}


def timed(request: Callable[[], Any], limit: Optional[int] = None) -> tuple:
    """Seconds to the first row and to the last (or the `limit`-th) of the lazy iterator
    `request` returns (the call included: opening a lookup or planning a query is part of its
    answer's time), and those rows."""
    t0 = time.perf_counter()
    first = None
    out = []
    for r in request():
        if first is None:
            first = time.perf_counter() - t0
        out.append(tuple(r))
        if len(out) == limit:
            break
    total = time.perf_counter() - t0
    return (first if first is not None else total), total, out


def run(sf: float, requests: int, updates: int, work: str, memory: str, seed: int,
        conf: Dict[str, str]) -> Dict[str, Any]:
    warehouse = os.path.join(work, f"warehouse-lookups-sf{sf:g}")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory, "spark-ivm lookup benchmark", conf)
    t0 = time.perf_counter()
    counts = load(spark, generate(sf, os.path.join(work, "tpch"), list(TABLES)))
    print(f"  sf {sf:g} loaded in {time.perf_counter() - t0:.0f} s: {counts}", flush=True)
    keys = [r[0] for r in spark.sql("SELECT DISTINCT o_custkey FROM orders").collect()]
    order_keys = [r[0] for r in spark.sql("SELECT o_orderkey FROM orders LIMIT 10000").collect()]
    out: Dict[str, Any] = {"scale_factor": sf, "rows": counts, "views": {}}
    for name, (query, lazy) in VIEWS.items():
        out["views"][name] = measure(spark, name, query, lazy, random.Random(seed), keys, order_keys,
                                     requests, updates)
        m = out["views"][name]["median"]
        print(f"  sf {sf:g} {name}: class {out['views'][name]['access_class']}, "
              f"{out['views'][name]['view_rows']} view rows; first answer lookup "
              f"{m['lookup_first_s'] * 1000:.1f} ms, eager {m['eager_first_s'] * 1000:.0f} ms, lazy "
              f"{m['lazy_first_s'] * 1000:.0f} ms ({out['views'][name]['structure']}, built in "
              f"{out['views'][name]['trees_build_s']:.1f} s); single-row update: refresh "
              f"{m.get('refresh_s', 0):.2f} s, {m.get('spark_jobs', 0):g} jobs, "
              f"{m.get('rows_read', 0):g} rows read, first lookup after "
              f"{m.get('first_lookup_after_s', 0) * 1000:.0f} ms", flush=True)
    spark.stop()
    return out


def measure(spark: Any, name: str, query: str, lazy: str, rng: random.Random, keys: List[int],
            order_keys: List[int], requests: int, updates: int) -> Dict[str, Any]:
    t0 = time.perf_counter()
    spark.sql(f"CREATE MATERIALIZED VIEW {name} REFRESH POLICY INCREMENTAL ACCESS BY (c_custkey) AS {query}")
    create_s = time.perf_counter() - t0
    mv = MaterializedView.for_name(spark, name)
    described = json.loads(spark.sql(f"DESCRIBE MATERIALIZED VIEW {name} AS JSON").first()[0])
    asked = rng.sample(keys, min(requests, len(keys)))
    t0 = time.perf_counter()
    structure = mv.lookup_structure()  # builds the view trees, if the view has them
    build_s = time.perf_counter() - t0
    outputs = [c for c in mv.to_df().columns if c != "c_custkey"]

    def eager(key: int) -> Any:
        return mv.to_df().where(f"c_custkey = {key}").select(*outputs).toLocalIterator()
    # One warm-up request per side: the first query of a kind plans and compiles more.
    list(mv.lookup(c_custkey=asked[0]))
    list(eager(asked[0]))
    spark.sql(lazy.format(key=asked[0])).collect()
    lookups: List[Dict[str, Any]] = []
    for key in asked:
        t_first, t_total, t_rows = timed(lambda key=key: mv.lookup(c_custkey=key))
        e_first, e_total, e_rows = timed(lambda key=key: eager(key))
        l_first, l_total, l_rows = timed(lambda key=key: spark.sql(lazy.format(key=key)).toLocalIterator())
        if not Counter(t_rows) == Counter(e_rows) == Counter(l_rows):
            raise SystemExit(f"{name}, customer {key}: the view's lookup and the query differ")
        lookups.append({"key": key, "answers": len(e_rows), "lookup_first_s": t_first,
                        "lookup_total_s": t_total, "eager_first_s": e_first,
                        "eager_total_s": e_total, "lazy_first_s": l_first, "lazy_total_s": l_total})
    refreshes: List[Dict[str, Any]] = []
    for i in range(updates):
        if i % 2 == 0:  # one row in: a copy of an order's line, or of an order under a new key
            order = rng.choice(order_keys)
            spark.sql(f"""INSERT INTO lineitem SELECT l_orderkey, l_partkey, l_suppkey, 100 + {i},
                l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, l_linestatus, l_shipdate,
                l_commitdate, l_receiptdate, l_shipinstruct, l_shipmode, l_comment
                FROM lineitem WHERE l_orderkey = {order} LIMIT 1""")
            spark.sql(f"""INSERT INTO orders SELECT -{order}, o_custkey, o_orderstatus, o_totalprice,
                o_orderdate, o_orderpriority, o_clerk, o_shippriority, o_comment
                FROM orders WHERE o_orderkey = {order}""")
        else:  # and out again
            spark.sql(f"DELETE FROM lineitem WHERE l_orderkey = {order} AND l_linenumber = {100 + i - 1}")
            spark.sql(f"DELETE FROM orders WHERE o_orderkey = -{order}")
        t0 = time.perf_counter()
        report = mv.refresh()
        refresh_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        list(mv.lookup(c_custkey=asked[0]))  # moves the view trees forward
        after_s = time.perf_counter() - t0
        moved = mv.lookup_structure().partition("changes moved ")[2].split(" ")[0]
        refreshes.append({"step": i, "refresh_s": refresh_s, "spark_jobs": report.spark_jobs,
                          "rows_read": report.rows_read, "mode": report.mode,
                          "first_lookup_after_s": after_s, "tree_tuples_moved": int(moved or 0)})
    expected = Counter(tuple(r) for r in spark.sql(query).collect())
    if Counter(tuple(r) for r in spark.table(name).collect()) != expected:
        raise SystemExit(f"{name} differs from its query after the updates")
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    result = {"create_s": create_s, "view_rows": sum(expected.values()),
              "access_class": described.get("access", {}).get("class"), "lookups": lookups,
              "refreshes": refreshes, "structure": mv.lookup_structure(), "trees_build_s": build_s,
              "median": {k: med(lookups, k) for k in ("lookup_first_s", "lookup_total_s", "eager_first_s",
                                                      "eager_total_s", "lazy_first_s", "lazy_total_s",
                                                      "answers")}}
    result["structure_before"] = structure
    if refreshes:
        result["median"].update({k: med(refreshes, k) for k in ("refresh_s", "spark_jobs", "rows_read",
                                                                "first_lookup_after_s", "tree_tuples_moved")})
    spark.sql(f"DROP MATERIALIZED VIEW {name}")
    return result


def plot(runs: List[Dict[str, Any]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sfs = [r["scale_factor"] for r in runs]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for name in VIEWS:
        for key, side in (("lookup_first_s", "lookup"), ("eager_first_s", "eager"), ("lazy_first_s", "lazy")):
            a.plot(sfs, [r["views"][name]["median"][key] * 1000 for r in runs], marker="o",
                   label=f"{name}: {side}")
        b.plot(sfs, [r["views"][name]["median"].get("refresh_s", 0) for r in runs], marker="o",
               label=f"{name}: refresh")
        b.plot(sfs, [r["views"][name]["median"].get("first_lookup_after_s", 0) for r in runs], marker="x",
               label=f"{name}: first lookup after it")
    a.set_yscale("log")
    for ax, ylabel in ((a, "time to first answer, ms (median)"),
                       (b, "single-row update: refresh s (median)")):
        ax.set_xscale("log")
        ax.set_xlabel("TPC-H scale factor")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, action="append", help="scale factor (repeatable)")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--memory", default="12g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="lookups")
    parser.add_argument("--conf", action="append", default=[],
                        help="key=value set on the session, e.g. spark.ivm.layout.rowsPerFile=0 (repeatable)")
    args = parser.parse_args()
    conf = dict(kv.split("=", 1) for kv in args.conf)
    runs = [run(sf, args.requests, args.updates, args.work, args.memory, args.seed, conf)
            for sf in (args.sf or [0.1, 0.3, 1])]
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"{args.out}.json"), "w") as f:
        json.dump({"machine": platform.platform(), "cpus": os.cpu_count(), "conf": conf, "runs": runs}, f,
                  indent=1)
    os.makedirs(os.path.join(ROOT, "docs", "img"), exist_ok=True)
    plot(runs, os.path.join(ROOT, "docs", "img", f"{args.out}.png"))


if __name__ == "__main__":
    main()
