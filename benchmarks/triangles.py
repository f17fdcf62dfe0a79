"""IVM^eps on triangle counting over skewed graphs (issue 4's benchmark).

    python benchmarks/triangles.py --edges 10000 --edges 100000 --edges 1000000 \
        --batch 100 --batch 1000 --rounds 2 --sweep 0.25,0.75

For each graph size: a directed power-law graph (Barabasi-Albert: networkx's generator up to
2 * 10^6 edges, the same process streamed above that; edges oriented at random) plus a hub
with out-degree |E|/10 (10^5 at 10^6 edges) and a few in-edges, stored in a Delta table
sorted by `src`. The triangle count is maintained by IVM^eps at
eps = 0.5 (and each eps of --sweep), by the generic first-order delta rules
(spark.ivm.epsilon.enabled = false), and recomputed from scratch. The adversarial stream
changes edges *into* the hub: a changed R(u, hub) meets the hub's 10^5 out-edges S(hub, .)
under first-order IVM, while IVM^eps looks the pair up in V_ST. Each round of a batch size k
inserts k/2 new edges u -> hub and deletes k/2 existing ones, then refreshes every view side
by side and checks each against the recomputation. Recorded per mode: refresh time and rows
that entered joins (JoinMetrics; for recomputation, of the query), per changed edge.
Results: benchmarks/results/<out>.json; plots: docs/img/<out>_*.png (--out, default triangles).
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
from typing import Any, Dict, Iterable, Iterator, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_session import session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402

QUERY = ("SELECT count(*) AS triangles FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
         "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")
HUB = 0
FIRST_ORDER = "spark.ivm.epsilon.enabled"


def barabasi_albert(n: int, m: int, rng: random.Random) -> Iterator[Tuple[int, int]]:
    """The edges of networkx's `barabasi_albert_graph(n, m)` process, streamed.

    The same process (a star on m + 1 nodes, then each new node attaches to m distinct nodes
    drawn in proportion to their degree), without building a networkx graph: that object
    takes minutes and gigabytes at 10^7 edges. Graphs up to NETWORKX_MAX_EDGES keep being
    drawn by networkx itself, so earlier runs' graphs stay the same.
    """
    repeated: List[int] = []
    for t in range(1, m + 1):
        yield 0, t
        repeated += [0, t]
    for source in range(m + 1, n):
        targets: set = set()
        while len(targets) < m:
            targets.add(rng.choice(repeated))
        for t in targets:
            yield source, t
        repeated.extend(targets)
        repeated.extend([source] * m)


NETWORKX_MAX_EDGES = 2_000_000


def graph(edges: int, seed: int) -> List[Tuple[int, int]]:
    """Barabasi-Albert edges oriented at random, plus the hub's out-edges and 20 in-edges."""
    m = 5
    hub_out = edges // 10
    n = max(m + 1, (edges - hub_out) // m)
    rng = random.Random(seed)
    if edges <= NETWORKX_MAX_EDGES:
        import networkx as nx

        ba: Iterable[Tuple[int, int]] = nx.barabasi_albert_graph(n, m, seed=seed).edges()
    else:
        ba = barabasi_albert(n, m, random.Random(seed))
    out = set()
    for a, b in ba:
        a, b = a + 1, b + 1  # node 0 is the hub
        out.add((a, b) if rng.random() < 0.5 else (b, a))
    targets = rng.sample(range(1, n + 1), min(hub_out, n))
    out.update((HUB, t) for t in targets)
    out.update((s, HUB) for s in rng.sample(range(1, n + 1), 20))
    return sorted(out)


def load(spark: SparkSession, rows: List[Tuple[int, int]], work: str) -> None:
    """The edges as a Delta table sorted by `src`, through a CSV file (Spark reads 10^7 rows
    from a file in seconds; from a Python list, through the Python-to-JVM gateway, in minutes)."""
    per_file = 100_000
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "edges.csv")
    with open(path, "w") as f:
        f.writelines(f"{a},{b}\n" for a, b in rows)
    df = spark.read.schema("src INT, dst INT").csv(path)
    (df.repartitionByRange(max(1, len(rows) // per_file), "src").sortWithinPartitions("src")
     .write.format("delta").option("delta.enableChangeDataFeed", "true").saveAsTable("edges"))
    os.remove(path)


def with_conf(spark: SparkSession, key: str, value: str, action: Any) -> Any:
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        return action()
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def recompute(spark: SparkSession) -> Tuple[int, float, int]:
    """The triangle count from scratch: (count, seconds, rows entering joins)."""
    jvm = spark.sparkContext._jvm
    start = time.time()
    joined = jvm.org.apache.spark.sql.ivm.JoinMetrics.rowsJoinedBy(spark._jsparkSession, QUERY)
    seconds = time.time() - start
    count = spark.sql(QUERY).first()[0]
    return count, seconds, int(joined)


def hub_round(spark: SparkSession, rng: random.Random, k: int, nodes: int,
              inserted: List[int]) -> None:
    """k/2 new edges u -> hub, and k/2 existing u -> hub edges deleted."""
    existing = [r[0] for r in spark.sql(f"SELECT src FROM edges WHERE dst = {HUB}").collect()]
    victims = rng.sample(existing, min(k // 2, len(existing)))
    have = set(existing)
    new: List[int] = []
    while len(new) < k // 2:
        u = rng.randint(1, nodes)
        if u not in have:
            have.add(u)
            new.append(u)
    spark.createDataFrame([(u, HUB) for u in new], "src INT, dst INT").write.format("delta") \
        .mode("append").saveAsTable("edges")
    if victims:
        spark.sql(f"DELETE FROM edges WHERE dst = {HUB} AND src IN ({', '.join(map(str, victims))})")
    inserted.extend(new)


def run_size(spark: SparkSession, edges: int, batches: List[int], rounds: int, sweep: List[float],
             seed: int, work: str) -> List[Dict[str, Any]]:
    """One graph size: load, create the views, then `rounds` rounds per batch size."""
    rows = graph(edges, seed)
    spark.sql("DROP TABLE IF EXISTS edges")
    load(spark, rows, work)
    nodes = max(max(a, b) for a, b in rows)
    epsilons = [0.5] + [e for e in sweep if e != 0.5]
    views: Dict[str, MaterializedView] = {}
    for eps in epsilons:
        name = f"tri_eps_{str(eps).replace('.', '_')}"
        spark.sql(f"DROP MATERIALIZED VIEW IF EXISTS {name}")
        start = time.time()
        views[f"eps={eps}"] = MaterializedView.create(spark, name, QUERY,
                                                      properties={"ivm.epsilon": str(eps)})
        print(f"  {len(rows)} edges: created {name} in {time.time() - start:.1f} s", flush=True)
    spark.sql("DROP MATERIALIZED VIEW IF EXISTS tri_first_order")
    views["first-order"] = with_conf(spark, FIRST_ORDER, "false", lambda: MaterializedView.create(
        spark, "tri_first_order", QUERY))
    info = views["eps=0.5"].describe()["info"]
    print(f"  state at eps=0.5: N={info['Threshold base N']}, heavy {info['Heavy keys']}, "
          f"aux {info['Auxiliary view']}", flush=True)
    rng = random.Random(seed + 1)
    # Warm-up (JIT, caches): one small round, not recorded.
    hub_round(spark, rng, 10, nodes, [])
    for mode, view in views.items():
        if mode == "first-order":
            with_conf(spark, FIRST_ORDER, "false", view.refresh)
        else:
            view.refresh()
    results = []
    for k in batches:
        for r in range(rounds):
            hub_round(spark, rng, k, nodes, [])
            entry: Dict[str, Any] = {"edges": len(rows), "batch": k, "round": r + 1, "modes": {}}
            for mode, view in views.items():
                def refresh(v: MaterializedView = view) -> Any:
                    return v.refresh()
                start = time.time()
                report = (with_conf(spark, FIRST_ORDER, "false", refresh) if mode == "first-order"
                          else refresh())
                entry["modes"][mode] = {"seconds": time.time() - start,
                                        "spark_jobs": report.spark_jobs,
                                        "phases_jobs": report.phases_jobs,
                                        "rows_joined": report.rows_joined,
                                        "rows_read": report.rows_read,
                                        "phases_ms": report.phases_ms,
                                        "notes": report.plan_notes}
            count, seconds, joined = recompute(spark)
            entry["modes"]["recompute"] = {"seconds": seconds, "rows_joined": joined}
            for mode, view in views.items():
                got = view.to_df().first()[0]
                assert got == count, f"{mode} has {got} triangles, recomputation {count}"
            entry["triangles"] = count
            for m in entry["modes"].values():
                m["rows_joined_per_edge"] = m["rows_joined"] / k
            print(f"  k={k} round {r + 1}: " + ", ".join(
                f"{mode} {m['seconds']:.1f} s ({m.get('spark_jobs', '-')} jobs) / "
                f"{m['rows_joined_per_edge']:.0f} rows per edge"
                for mode, m in entry["modes"].items()), flush=True)
            results.append(entry)
    return results


def summarize(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Median over rounds per (edges, batch, mode), with ratios against IVM^eps at 0.5."""
    table = []
    keys = sorted({(e["edges"], e["batch"]) for e in results})
    for edges, batch in keys:
        entries = [e for e in results if e["edges"] == edges and e["batch"] == batch]
        modes = entries[0]["modes"].keys()
        row: Dict[str, Any] = {"edges": edges, "batch": batch}
        for mode in modes:
            row[mode] = {
                "seconds": statistics.median(e["modes"][mode]["seconds"] for e in entries),
                "spark_jobs": statistics.median(e["modes"][mode].get("spark_jobs", 0) for e in entries),
                "rows_per_edge": statistics.median(e["modes"][mode]["rows_joined_per_edge"]
                                                   for e in entries)}
        base = row["eps=0.5"]["seconds"]
        row["speedup_vs_first_order"] = row["first-order"]["seconds"] / base
        row["speedup_vs_recompute"] = row["recompute"]["seconds"] / base
        table.append(row)
    return table


def slope(xs: List[float], ys: List[float]) -> float:
    import math
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def plot(table: List[Dict[str, Any]], out_dir: str, prefix: str) -> Dict[str, float]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slopes: Dict[str, float] = {}
    batches = sorted({r["batch"] for r in table})
    modes = sorted({m for r in table for m in r if isinstance(r[m], dict)})
    for metric, label, fname in (("rows_per_edge", "rows entering joins per changed edge", "rows"),
                                 ("seconds", "refresh time (s)", "time")):
        fig, axes = plt.subplots(1, len(batches), figsize=(6 * len(batches), 4.5), squeeze=False)
        for ax, k in zip(axes[0], batches, strict=False):
            rows = [r for r in table if r["batch"] == k]
            xs = [r["edges"] for r in rows]
            for mode in modes:
                have = [r for r in rows if mode in r]
                xs = [r["edges"] for r in have]
                ys = [r[mode][metric] for r in have]
                s = slope(xs, ys) if len(xs) > 1 else float("nan")
                if metric == "rows_per_edge":
                    slopes[f"{mode}, batch {k}"] = s
                ax.loglog(xs, ys, marker="o", label=f"{mode} (slope {s:.2f})")
            ax.set_title(f"batches of {k} changed edges at the hub")
            ax.set_xlabel("graph size (edges)")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"{prefix}_{fname}.png"), dpi=110)
    return slopes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--edges", type=int, action="append")
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sweep", default="0.25,0.75", help="other eps values, comma-separated")
    p.add_argument("--sweep-max-edges", type=int, default=10**9,
                   help="run the sweep only on graphs up to this size")
    p.add_argument("--memory", default="12g")
    p.add_argument("--out", default="triangles")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()
    sizes = args.edges or [10_000, 100_000, 1_000_000]
    batches = args.batch or [100, 1000]
    sweep = [float(e) for e in args.sweep.split(",") if e]
    work = os.path.join(ROOT, "work", "benchmarks", args.out)  # /work/ is ignored by git
    shutil.rmtree(work, ignore_errors=True)
    # Rows entering joins are this benchmark's work measure: measured for every refresh.
    spark = session(os.path.join(work, "warehouse"), args.memory, "spark-ivm triangles benchmark",
                    {"spark.ivm.metrics.rowsJoined": "true"})
    results = []
    for n in sizes:
        print(f"graph of ~{n} edges", flush=True)
        results += run_size(spark, n, batches, args.rounds,
                            sweep if n <= args.sweep_max_edges else [], args.seed, work)
    table = summarize(results)
    img = os.path.join(ROOT, "docs", "img")
    os.makedirs(img, exist_ok=True)
    slopes = plot(table, img, args.out)
    out = {"command": " ".join(sys.argv), "machine": platform.platform(), "cores": os.cpu_count(),
           "summary": table, "slopes_rows_per_edge": slopes, "rounds": results}
    path = os.path.join(ROOT, "benchmarks", "results", f"{args.out}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    for row in table:
        print(json.dumps({k: v for k, v in row.items()}))
    print("slopes of rows per changed edge vs graph size:", json.dumps(slopes))
    spark.stop()


if __name__ == "__main__":
    main()
