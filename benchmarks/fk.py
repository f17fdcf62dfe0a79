"""FK-pruned delta plans and key probing on TPC-H (issue 3's benchmark).

    python benchmarks/fk.py --sf 1 --sf 5 --rounds 1

For each scale factor: TPC-H tables from tpchgen-cli loaded into Delta, each sorted by its
primary key into files of about 100k-200k rows (the layout a warehouse keeps), with primary and
foreign keys declared. Every view exists three times, maintained by the generic delta rule
(spark.ivm.fkPruning.enabled=false, spark.ivm.keyProbing.enabled=false), by FK-pruned plans
without probing, and by FK-pruned plans with key probing (--modes; fk_codegen is fk with Spark's
code generation on whatever the inputs' size); a Delta table holds its full
recomputation (INSERT OVERWRITE). Each round applies RI-consistent refresh functions (insert
and delete --fraction of the orders with their lineitems, new customers who place some of the
new orders, and removal of customers without orders), then refreshes every copy side by side in
one session and checks that each equals the recomputation. Per view and mode it records the
whole refresh time, the delta-computation time (phases delta-plan + delta), and rows read from
storage (Spark's input metrics; byte counts stay near zero for local files).
Results: benchmarks/results/<out>.json, plots: docs/img/<out>_*.png (--out, default fk).
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
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402
from tpch_data import generate  # noqa: E402
from tpch_queries import QUERIES  # noqa: E402

TABLES = {  # table: (primary key, rows per file)
    "region": ("r_regionkey", 100_000), "nation": ("n_nationkey", 100_000),
    "customer": ("c_custkey", 100_000), "supplier": ("s_suppkey", 100_000),
    "part": ("p_partkey", 100_000), "orders": ("o_orderkey", 150_000),
    "lineitem": ("l_orderkey", 200_000),
}
FKS = [
    ("nation", "n_regionkey", "region", "r_regionkey"),
    ("customer", "c_nationkey", "nation", "n_nationkey"),
    ("supplier", "s_nationkey", "nation", "n_nationkey"),
    ("orders", "o_custkey", "customer", "c_custkey"),
    ("lineitem", "l_orderkey", "orders", "o_orderkey"),
    ("lineitem", "l_suppkey", "supplier", "s_suppkey"),
    ("lineitem", "l_partkey", "part", "p_partkey"),
]

VIEWS = {
    "q3": """SELECT l_orderkey, o_orderdate, o_shippriority,
                    sum(l_extendedprice * (1 - l_discount)) AS revenue, count(*) AS n
             FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey
             WHERE c_mktsegment = 'BUILDING' AND o_orderdate < DATE '1995-03-15'
               AND l_shipdate > DATE '1995-03-15'
             GROUP BY l_orderkey, o_orderdate, o_shippriority""",
    "q5": """SELECT n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue, count(*) AS n
             FROM customer, orders, lineitem, supplier, nation, region
             WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey
               AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey
               AND n_regionkey = r_regionkey AND r_name = 'ASIA'
               AND o_orderdate >= DATE '1994-01-01' AND o_orderdate < DATE '1995-01-01'
             GROUP BY n_name""",
    "q10": """SELECT c_custkey, c_name, c_acctbal, n_name, sum(l_extendedprice * (1 - l_discount)) AS revenue
              FROM customer JOIN orders ON c_custkey = o_custkey JOIN lineitem ON l_orderkey = o_orderkey
                            JOIN nation ON c_nationkey = n_nationkey
              WHERE o_orderdate >= DATE '1993-10-01' AND o_orderdate < DATE '1994-01-01'
                AND l_returnflag = 'R'
              GROUP BY c_custkey, c_name, c_acctbal, n_name""",
    "star1": """SELECT o_orderpriority, count(*) AS n, sum(l_quantity) AS q
                FROM lineitem JOIN orders ON l_orderkey = o_orderkey GROUP BY o_orderpriority""",
    "star2": """SELECT o_orderpriority, s_nationkey, count(*) AS n, sum(l_quantity) AS q
                FROM lineitem JOIN orders ON l_orderkey = o_orderkey JOIN supplier ON l_suppkey = s_suppkey
                GROUP BY o_orderpriority, s_nationkey""",
    "star3": """SELECT o_orderpriority, s_nationkey, p_brand, count(*) AS n, sum(l_quantity) AS q
                FROM lineitem JOIN orders ON l_orderkey = o_orderkey JOIN supplier ON l_suppkey = s_suppkey
                JOIN part ON l_partkey = p_partkey GROUP BY o_orderpriority, s_nationkey, p_brand""",
    "snowflake": """SELECT r_name, p_brand, count(*) AS n, sum(l_extendedprice) AS price
                    FROM lineitem JOIN orders ON l_orderkey = o_orderkey
                    JOIN customer ON o_custkey = c_custkey JOIN nation ON c_nationkey = n_nationkey
                    JOIN region ON n_regionkey = r_regionkey JOIN part ON l_partkey = p_partkey
                    GROUP BY r_name, p_brand""",
}
# The TPC-H queries of operator coverage (issue 12): a left join under two aggregates, an IN
# subquery over an aggregate, EXISTS and NOT EXISTS, an uncorrelated scalar subquery.
VIEWS.update({q: QUERIES[q] for q in ("q13", "q18", "q21", "q22")})
# A top-k view (issue 44): the 100 orders of highest revenue. Its backing table keeps every
# order's revenue and a read applies ORDER BY ... LIMIT, so it is timed with a read (cold.py)
# and left out of this script's default views.
VIEWS["top100"] = """SELECT o_orderkey, o_orderdate, sum(l_extendedprice * (1 - l_discount)) AS revenue
                     FROM orders JOIN lineitem ON l_orderkey = o_orderkey GROUP BY o_orderkey, o_orderdate
                     ORDER BY revenue DESC, o_orderkey, o_orderdate LIMIT 100"""
TOPK_VIEWS = {"top100"}
MODES = {  # mode: confs set for its refresh
    "generic": {"spark.ivm.fkPruning.enabled": "false", "spark.ivm.keyProbing.enabled": "false"},
    "fk": {"spark.ivm.fkPruning.enabled": "true", "spark.ivm.keyProbing.enabled": "false"},
    "fk_probe": {"spark.ivm.fkPruning.enabled": "true", "spark.ivm.keyProbing.enabled": "true"},
    # fk with Spark's code generation whatever the inputs' size (the other modes run interpreted
    # up to spark.ivm.refresh.interpretedMaxBytes): --modes fk,fk_codegen measures that threshold.
    "fk_codegen": {"spark.ivm.fkPruning.enabled": "true", "spark.ivm.keyProbing.enabled": "false",
                   "spark.ivm.refresh.interpretedMaxBytes": "0"},
}
# fk without the counts per key kept resident (spark.ivm.keyCounts): semi and anti joins and
# integrity checks then read their tables for the changed keys.
MODES["fk_nocounts"] = dict(MODES["fk"], **{"spark.ivm.keyCounts.enabled": "false"})
DEFAULT_MODES = "generic,fk,fk_probe"


def load(spark: SparkSession, parquet_dir: str, rely: bool = False) -> Dict[str, int]:
    """Delta tables sorted by primary key, a file per `rows per file` rows, keys declared
    (foreign keys with RELY when ``rely``: refreshes then trust them instead of re-checking)."""
    counts = {}
    for t, (pk, per_file) in TABLES.items():
        df = spark.read.parquet(os.path.join(parquet_dir, f"{t}.parquet"))
        n = df.count()
        (df.repartitionByRange(max(1, n // per_file), pk).sortWithinPartitions(pk)
         .write.format("delta").option("delta.enableChangeDataFeed", "true").saveAsTable(t))
        counts[t] = n
    declare_keys(spark, rely)
    return counts


def declare_keys(spark: SparkSession, rely: bool) -> None:
    """The TPC-H tables' primary keys and foreign keys (RELY when ``rely``)."""
    for t, (pk, _) in TABLES.items():
        if t != "lineitem":
            spark.sql(f"ALTER TABLE {t} ADD CONSTRAINT {t}_pk PRIMARY KEY ({pk})")
    for child, col, parent, pcol in FKS:
        spark.sql(f"ALTER TABLE {child} ADD CONSTRAINT {child}_{col}_fk FOREIGN KEY ({col}) "
                  f"REFERENCES {parent} ({pcol}){' RELY' if rely else ''}")


def refresh_functions(spark: SparkSession, fraction: float, seed: int,
                      orders: Optional[int] = None) -> Dict[str, int]:
    """RF1/RF2 with customers: new orders (half of them by new customers) with their lineitems,
    deleted orders with their lineitems, and customers without orders removed. Every reference
    stays valid (the keys are declared RELY): the new customers are numbered 1..nc past the
    largest key, and the new orders use exactly those. ``orders`` fixes
    the number of orders in and out (and customers at a tenth of it) whatever the scale."""
    max_o = spark.sql("SELECT max(o_orderkey) FROM orders").first()[0]
    max_c = spark.sql("SELECT max(c_custkey) FROM customer").first()[0]
    n_orders = spark.table("orders").count()
    n = orders if orders else max(1, int(n_orders * fraction))
    nc = max(1, n // 10) if orders else max(1, int(spark.table("customer").count() * fraction))
    fraction = n / n_orders
    spark.sql(f"""CREATE OR REPLACE TEMPORARY VIEW rf_new AS
        SELECT o_orderkey AS old_key, {max_o} + row_number() OVER (ORDER BY o_orderkey) AS new_key,
               row_number() OVER (ORDER BY o_orderkey) AS i
        FROM orders TABLESAMPLE ({fraction * 100 * 1.5:.6f} PERCENT) REPEATABLE ({seed}) LIMIT {n}""")
    spark.sql("CACHE TABLE rf_new")
    spark.sql(f"""INSERT INTO customer SELECT {max_c} + row_number() OVER (ORDER BY c_custkey), c_name,
        c_address, c_nationkey, c_phone, c_acctbal, c_mktsegment, c_comment
        FROM (SELECT * FROM customer ORDER BY hash(c_custkey, {seed}) LIMIT {nc})""")
    spark.sql("""INSERT INTO lineitem SELECT /*+ BROADCAST(rf_new) */ rf_new.new_key, l.l_partkey,
        l.l_suppkey, l.l_linenumber, l.l_quantity, l.l_extendedprice, l.l_discount, l.l_tax,
        l.l_returnflag, l.l_linestatus, l.l_shipdate, l.l_commitdate, l.l_receiptdate,
        l.l_shipinstruct, l.l_shipmode, l.l_comment
        FROM lineitem l JOIN rf_new ON l.l_orderkey = rf_new.old_key""")
    # Every other new order is placed by one of the new customers (Ins x Ins at customer).
    spark.sql(f"""INSERT INTO orders SELECT /*+ BROADCAST(rf_new) */ rf_new.new_key,
        CASE WHEN rf_new.i % 2 = 0 THEN {max_c} + 1 + (rf_new.i % {nc}) ELSE o.o_custkey END,
        o.o_orderstatus, o.o_totalprice, o.o_orderdate, o.o_orderpriority, o.o_clerk,
        o.o_shippriority, o.o_comment FROM orders o JOIN rf_new ON o.o_orderkey = rf_new.old_key""")
    spark.sql("UNCACHE TABLE rf_new")
    spark.sql(f"""CREATE OR REPLACE TEMPORARY VIEW rf_old AS
        SELECT o_orderkey FROM orders WHERE o_orderkey <= {max_o}
        ORDER BY hash(o_orderkey, {seed}) LIMIT {n}""")
    spark.sql("CACHE TABLE rf_old")
    spark.sql("MERGE INTO lineitem USING rf_old ON l_orderkey = rf_old.o_orderkey WHEN MATCHED THEN DELETE")
    spark.sql("MERGE INTO orders USING rf_old ON orders.o_orderkey = rf_old.o_orderkey "
              "WHEN MATCHED THEN DELETE")
    spark.sql("UNCACHE TABLE rf_old")
    spark.sql(f"""CREATE OR REPLACE TEMPORARY VIEW rf_gone AS
        SELECT c_custkey FROM customer LEFT ANTI JOIN orders ON c_custkey = o_custkey
        WHERE c_custkey <= {max_c} ORDER BY hash(c_custkey, {seed}) LIMIT {nc}""")
    spark.sql("CACHE TABLE rf_gone")
    spark.sql("MERGE INTO customer USING rf_gone ON customer.c_custkey = rf_gone.c_custkey "
              "WHEN MATCHED THEN DELETE")
    spark.sql("UNCACHE TABLE rf_gone")
    return {"orders_inserted": n, "orders_deleted": n, "customers_inserted": nc, "customers_deleted": nc}


def full_recompute(spark: SparkSession, sql: str) -> tuple:
    """Seconds, rows read and Spark jobs of a statement (spark-ivm's metrics, as in its reports)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.sql.ivm.ReadMetrics  # type: ignore[union-attr]
    t0 = time.perf_counter()
    jobs, _tasks, read = metrics.workOf(spark._jsparkSession, sql)
    return time.perf_counter() - t0, int(read), int(jobs)


def bag(spark: SparkSession, t: str) -> Counter:
    return Counter(tuple(round(float(v), 2) if hasattr(v, "as_tuple") or isinstance(v, float) else v
                         for v in r) for r in spark.table(t).collect())


def run(sf: float, rounds: int, fraction: float, views: List[str], work: str, memory: str,
        orders: Optional[int] = None, rely: bool = False) -> Dict[str, Any]:
    warehouse = os.path.join(work, f"warehouse-fk-sf{sf:g}")
    shutil.rmtree(warehouse, ignore_errors=True)
    spark = session(warehouse, memory, "spark-ivm fk benchmark")
    t0 = time.perf_counter()
    counts = load(spark, generate(sf, os.path.join(work, "tpch"), list(TABLES)), rely)
    print(f"  loaded in {time.perf_counter() - t0:.0f} s: {counts}", flush=True)
    for v in views:
        spark.sql(f"CREATE TABLE {v}_full USING delta AS {VIEWS[v]}")
        for mode in MODES:
            # INCREMENTAL: what is measured is the incremental refresh, never AUTO's choice.
            spark.sql(f"CREATE MATERIALIZED VIEW {v}_{mode} REFRESH POLICY INCREMENTAL AS {VIEWS[v]}")
    results: List[Dict[str, Any]] = []
    for i in range(rounds):
        rf = refresh_functions(spark, fraction, seed=i + 1, orders=orders)
        for v in views:
            row: Dict[str, Any] = {"round": i + 1, "view": v, **rf}
            row["full_s"], row["full_rows_read"], row["full_jobs"] = full_recompute(
                spark, f"INSERT OVERWRITE {v}_full {VIEWS[v]}")
            expected = bag(spark, f"{v}_full")
            for mode, confs in MODES.items():
                for k, val in confs.items():
                    spark.conf.set(k, val)
                mv = MaterializedView.for_name(spark, f"{v}_{mode}")
                t0 = time.perf_counter()
                report = mv.refresh()
                secs, read = time.perf_counter() - t0, report.rows_read
                same = bag(spark, f"{v}_{mode}") == expected
                if not same:
                    raise SystemExit(f"{v}_{mode} differs from recomputation")
                row[mode] = {"refresh_s": secs, "rows_read": read, "phases_ms": report.phases_ms,
                             "spark_jobs": report.spark_jobs, "phases_jobs": report.phases_jobs,
                             "delta_s": (report.phases_ms.get("delta-plan", 0)
                                         + report.phases_ms.get("delta", 0)) / 1000,
                             "branches": report.branches, "plan_notes": report.plan_notes}
            for k in {k for confs in MODES.values() for k in confs}:
                spark.conf.unset(k)
            print(f"  sf {sf:g} round {i + 1} {v}: full {row['full_s']:.1f} s; " + "; ".join(
                f"{m} {row[m]['refresh_s']:.1f} s ({row[m]['spark_jobs']} jobs, "
                f"delta {row[m]['delta_s']:.1f} s, "
                f"{row[m]['rows_read'] / 1e6:.2f} M rows read, {len(row[m]['branches'])} branches)"
                for m in MODES),
                flush=True)
            results.append(row)
    spark.stop()
    return {"scale_factor": sf, "rows": counts, "fraction": fraction, "orders": orders, "rely": rely,
            "rounds": results}


def summary(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for r in runs:
        for v in sorted({x["view"] for x in r["rounds"]}):
            rows = [x for x in r["rounds"] if x["view"] == v]
            keys = ("refresh_s", "delta_s", "rows_read", "spark_jobs")
            med = {m: {k: statistics.median(x[m][k] for x in rows) for k in keys}
                   for m in MODES}
            full = statistics.median(x["full_s"] for x in rows)
            out.append({"sf": r["scale_factor"], "view": v, "full_s": full,
                        "full_rows_read": statistics.median(x["full_rows_read"] for x in rows),
                        "full_jobs": statistics.median(x["full_jobs"] for x in rows), **med,
                        "delta_speedup_fk": (med["generic"]["delta_s"] / max(med["fk"]["delta_s"], 1e-3)
                                             if "generic" in med else None),
                        "refresh_speedup_fk": (med["generic"]["refresh_s"] / med["fk"]["refresh_s"]
                                               if "generic" in med else None),
                        "fk_vs_full": full / med["fk"]["refresh_s"] if "fk" in med else None,
                        "probe_vs_full": full / med["fk_probe"]["refresh_s"] if "fk_probe" in med else None})
    return out


def plot(table: List[Dict[str, Any]], out_dir: str, prefix: str, change: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    views = sorted({t["view"] for t in table}, key=list(VIEWS).index)
    sfs = sorted({t["sf"] for t in table})
    series = [("recompute", lambda t: t["full_s"])] + [(m, lambda t, m=m: t[m]["refresh_s"]) for m in MODES]
    fig, axes = plt.subplots(1, len(sfs), figsize=(6 * len(sfs), 4), squeeze=False)
    for ax, sf in zip(axes[0], sfs, strict=False):
        rows = {t["view"]: t for t in table if t["sf"] == sf}
        xs = list(range(len(views)))
        width = 0.8 / len(series)
        for j, (label, get) in enumerate(series):
            ax.bar([x + (j - (len(series) - 1) / 2) * width for x in xs],
                   [get(rows[v]) if v in rows else 0 for v in views], width, label=label)
        ax.set_xticks(xs, views)
        ax.set_yscale("log")
        ax.set_ylabel("seconds per refresh (log)")
        ax.set_title(f"TPC-H SF {sf:g}, {change}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"{prefix}_views.png"), dpi=110)

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4))
    for v in views:
        rows = sorted((t for t in table if t["view"] == v), key=lambda t: t["sf"])
        xs = [t["sf"] for t in rows]
        line = ax.plot(xs, [t["full_s"] for t in rows], marker="o", linestyle="--", label=f"{v} recompute")
        for m in MODES:
            ax.plot(xs, [t[m]["refresh_s"] for t in rows], marker="s", color=line[0].get_color(),
                    label=f"{v} {m}")
            bx.plot(xs, [t[m]["spark_jobs"] for t in rows], marker="s", color=line[0].get_color(),
                    label=f"{v} {m}")
        bx.plot(xs, [t["full_jobs"] for t in rows], marker="o", linestyle="--", color=line[0].get_color(),
                label=f"{v} recompute")
    for axis, title, ylabel in ((ax, "time against data size", "seconds (log)"),
                                (bx, "Spark jobs per refresh", "jobs")):
        axis.set_xscale("log")
        axis.set_xlabel("scale factor (log)")
        axis.set_ylabel(ylabel)
        axis.set_title(f"{title}; {change}")
        axis.legend(fontsize=7)
    ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"{prefix}_scale.png"), dpi=110)


def plot_rounds(runs: List[Dict[str, Any]], out_dir: str, prefix: str) -> None:
    """Refresh and recomputation time in each round, per scale factor and view: the first
    rounds make what later refreshes keep in memory, so a median hides the steady state."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4), squeeze=False)
    for ax, r in zip(axes[0], runs, strict=False):
        for v in sorted({x["view"] for x in r["rounds"]}, key=list(VIEWS).index):
            rounds = [x for x in r["rounds"] if x["view"] == v]
            xs = [x["round"] for x in rounds]
            line = ax.plot(xs, [x["full_s"] for x in rounds], marker="o", linestyle="--",
                           label=f"{v} recompute")
            for m, marker in zip(MODES, "s^vD", strict=False):
                if all(m in x for x in rounds):
                    ax.plot(xs, [x[m]["refresh_s"] for x in rounds], marker=marker,
                            color=line[0].get_color(), label=f"{v} {m}")
        ax.set_yscale("log")
        ax.set_xticks(sorted({x["round"] for x in r["rounds"]}))
        ax.set_xlabel("round")
        ax.set_ylabel("seconds (log)")
        ax.set_title(f"TPC-H SF {r['scale_factor']:g}, time per round")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, f"{prefix}_rounds.png"), dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, action="append", help="scale factor (repeatable)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--fraction", type=float, default=0.001)
    parser.add_argument("--orders", type=int, default=None,
                        help="a fixed number of orders in and out per round (instead of --fraction)")
    parser.add_argument("--rely", action="store_true",
                        help="declare the foreign keys with RELY (refreshes trust them)")
    parser.add_argument("--views", default=",".join(v for v in VIEWS if v not in TOPK_VIEWS))
    parser.add_argument("--modes", default=DEFAULT_MODES, help="subset of " + ",".join(MODES))
    parser.add_argument("--memory", default="12g")
    parser.add_argument("--work", default=os.path.join(ROOT, "work"))
    parser.add_argument("--out", default="fk")
    parser.add_argument("--replot", metavar="NAME",
                        help="only draw the plots of results/NAME.json again (no run)")
    args = parser.parse_args()
    views = args.views.split(",")
    for m in set(MODES) - set(args.modes.split(",")):
        del MODES[m]
    if args.replot:
        with open(os.path.join(HERE, "results", f"{args.replot}.json")) as f:
            saved = json.load(f)
        plot_rounds(saved["runs"], os.path.join(ROOT, "docs", "img"), args.replot)
        return
    runs = []
    for sf in args.sf or [1.0]:
        print(f"== fk benchmark at scale factor {sf:g}: {', '.join(views)} ==", flush=True)
        runs.append(run(sf, args.rounds, args.fraction, views, args.work, args.memory, args.orders,
                        args.rely))
    table = summary(runs)
    path = os.path.join(HERE, "results", f"{args.out}.json")
    with open(path, "w") as f:
        json.dump({"command": " ".join(sys.argv), "machine": {"cpus": os.cpu_count(),
                   "python": platform.python_version()}, "summary": table, "runs": runs}, f, indent=2)
    change = (f"{args.orders} orders in and out" if args.orders
              else f"{args.fraction * 100:g}% of orders in and out")
    plot(table, os.path.join(ROOT, "docs", "img"), args.out, change)
    plot_rounds(runs, os.path.join(ROOT, "docs", "img"), args.out)
    for t in table:
        print(f"SF {t['sf']:g} {t['view']}: recompute {t['full_s']:.2f} s ({t['full_jobs']:.0f} jobs); " +
              "; ".join(f"{m} {t[m]['refresh_s']:.2f} s ({t[m]['spark_jobs']:.0f} jobs, "
                        f"{t['full_s'] / t[m]['refresh_s']:.1f}x)" for m in MODES))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
