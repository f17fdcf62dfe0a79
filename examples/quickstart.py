"""spark-ivm quickstart: TPC-H on embedded Spark and Delta, two materialized views kept up
to date incrementally, each refresh checked against recomputation.

Run with `make demo`. Everything lives under ./work/quickstart and is recreated each run.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from collections import Counter
from typing import Dict

from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_ivm import MaterializedView, RefreshService, configure_spark_with_ivm  # noqa: E402
from tpch_data import generate, load, refresh_functions  # noqa: E402

ROOT = os.path.join(os.getcwd(), "work")
WAREHOUSE = os.path.join(ROOT, "quickstart")
SCALE_FACTOR = float(os.environ.get("IVM_DEMO_SF", "0.01"))

REVENUE = """
SELECT c_custkey, c_name, n_name,
       sum(l_extendedprice * (1 - l_discount)) AS revenue,
       count(*) AS lines, max(o_orderdate) AS last_order
FROM lineitem JOIN orders ON l_orderkey = o_orderkey
              JOIN customer ON o_custkey = c_custkey
              JOIN nation ON c_nationkey = n_nationkey
WHERE l_returnflag = 'R'
GROUP BY c_custkey, c_name, n_name"""

PRIORITIES = """
SELECT DISTINCT n_name, o_orderpriority
FROM orders JOIN customer ON o_custkey = c_custkey JOIN nation ON c_nationkey = n_nationkey
WHERE o_totalprice > 300000"""


KEYS = [
    "ALTER TABLE nation ADD CONSTRAINT nation_pk PRIMARY KEY (n_nationkey)",
    "ALTER TABLE customer ADD CONSTRAINT customer_pk PRIMARY KEY (c_custkey)",
    "ALTER TABLE orders ADD CONSTRAINT orders_pk PRIMARY KEY (o_orderkey)",
    # RELY: the loads below keep every reference valid, so refreshes may trust the keys instead
    # of re-checking the referencing tables (each is still checked once, here).
    "ALTER TABLE customer ADD CONSTRAINT customer_nation FOREIGN KEY (c_nationkey) "
    "REFERENCES nation (n_nationkey) RELY",
    "ALTER TABLE orders ADD CONSTRAINT orders_customer FOREIGN KEY (o_custkey) "
    "REFERENCES customer (c_custkey) RELY",
    "ALTER TABLE lineitem ADD CONSTRAINT lineitem_order FOREIGN KEY (l_orderkey) "
    "REFERENCES orders (o_orderkey) RELY",
]


def matches(spark: SparkSession, view: str, query: str) -> str:
    def bag(rows: list) -> Counter:
        return Counter(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows)
    expected, actual = bag(spark.sql(query).collect()), bag(spark.table(view).collect())
    return f"{'yes' if expected == actual else 'NO'} ({sum(actual.values())} rows)"


TRIANGLES = ("SELECT count(*) AS triangles FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
             "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")


def triangles(spark: SparkSession) -> None:
    """A triangle count over a graph with a hub, maintained by IVM^eps."""
    print("\n== IVM^eps: triangle count over a graph with a hub ==")
    rng = random.Random(7)
    edges = {(0, b) for b in range(1, 400)} | {(b, 0) for b in range(1, 30)}
    edges |= {(rng.randint(1, 400), rng.randint(1, 400)) for _ in range(3000)}
    spark.createDataFrame(sorted((a, b) for a, b in edges if a != b), "src INT, dst INT") \
        .write.format("delta").option("delta.enableChangeDataFeed", "true").saveAsTable("edges")
    mv = MaterializedView.create(spark, "triangles", TRIANGLES, properties={"ivm.epsilon": "0.5"})
    info = mv.describe()["info"]
    print(f"   {spark.table('triangles').first()[0]} triangles; eps {info['Epsilon']}, "
          f"N {info['Threshold base N']}, threshold {info['Heavy threshold']}")
    print(f"   heavy keys: {info['Heavy keys']}")
    print(f"   auxiliary views: {info['Auxiliary view']}")
    # The first refresh in a session reads the IVM^eps state into the executors' memory; later
    # ones find it there and read no Delta table for their lookups.
    for round_, (lo, hi) in enumerate([(30, 80), (80, 130)]):
        spark.createDataFrame([(u, 0) for u in range(lo, hi)], "src INT, dst INT").write \
            .format("delta").mode("append").saveAsTable("edges")
        spark.sql(f"DELETE FROM edges WHERE dst = 0 AND src < {10 * (round_ + 1)}")
        r = mv.refresh()
        print(f"   round {round_ + 1}: 50 new edges into the hub, 9-10 removed: "
              f"{spark.table('triangles').first()[0]} triangles; refresh in {r.total_ms} ms, "
              f"{r.spark_jobs} Spark jobs")
        for note in r.plan_notes:
            print(f"      {note}")
        print(f"      matches recomputation: {matches(spark, 'triangles', TRIANGLES)}")


BY_PRIORITY = """
SELECT o_orderpriority, count(*) AS orders, sum(o_totalprice) AS total
FROM orders GROUP BY o_orderpriority"""


def triggered(spark: SparkSession) -> None:
    """A view under TRIGGER ON UPDATE, kept fresh by the refresh service."""
    print("\n== TRIGGER ON UPDATE: the refresh service keeps a view fresh by itself ==")
    spark.sql(f"CREATE MATERIALIZED VIEW orders_by_priority TRIGGER ON UPDATE AS {BY_PRIORITY}")
    mv = MaterializedView.for_name(spark, "orders_by_priority")
    spark.conf.set("spark.ivm.service.pollIntervalMs", "200")
    with RefreshService(spark):
        rf = refresh_functions(spark, fraction=0.005, seed=7)
        lag = mv.lag()
        print(f"   inserted {rf['orders_inserted']} orders, deleted {rf['orders_deleted']}: "
              f"{lag.pending_commits} commits not applied yet")
        deadline = time.time() + 120
        while not lag.up_to_date and time.time() < deadline:
            time.sleep(0.2)
            lag = mv.lag()
        last = mv.history(limit=1)[0]
        exact = matches(spark, "orders_by_priority", BY_PRIORITY)
        print(f"   caught up: refresh #{last.refresh_number} ({last.mode}, by the {last.triggered_by}) "
              f"in {last.duration_ms} ms; matches recomputation: {exact}")


def change_round(spark: SparkSession, round_: int) -> Dict[str, int]:
    """One round of changes to the base tables: 1% of the orders in and out (with their
    lineitems), some discounts raised, some customers renamed. Returns the refresh functions'
    counts."""
    rf = refresh_functions(spark, fraction=0.01, seed=round_)
    spark.sql("UPDATE lineitem SET l_discount = l_discount + 0.01 WHERE l_orderkey % 97 = 3")
    spark.sql("UPDATE customer SET c_name = concat(c_name, '*') WHERE c_custkey % 50 = 7")
    return rf


def main() -> None:
    shutil.rmtree(WAREHOUSE, ignore_errors=True)
    builder = (SparkSession.builder.master("local[*]").appName("spark-ivm quickstart")
               .config("spark.sql.warehouse.dir", WAREHOUSE)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    print(f"== Loading TPC-H at scale factor {SCALE_FACTOR:g} into Delta tables ==")
    counts = load(spark, generate(SCALE_FACTOR, os.path.join(ROOT, "tpch"),
                                  ["nation", "customer", "orders", "lineitem"]),
                  ["nation", "customer", "orders", "lineitem"])
    print("   " + ", ".join(f"{t}: {n} rows" for t, n in counts.items()))

    print("\n== Primary and foreign keys (Spark's syntax; checked on the data when declared) ==")
    for ddl in KEYS:
        spark.sql(ddl)
        print(f"   {ddl}")

    print("\n== CREATE MATERIALIZED VIEW (computed once, in full) ==")
    for name, query in (("revenue_by_customer", REVENUE), ("busy_priorities", PRIORITIES)):
        t0 = time.time()
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {query}")
        print(f"   {name}: {spark.table(name).count()} rows in {time.time() - t0:.1f} s")

    views = {"revenue_by_customer": REVENUE, "busy_priorities": PRIORITIES}
    for round_ in (1, 2):
        print(f"\n== Round {round_}: change the base tables ==")
        rf = change_round(spark, round_)
        print(f"   inserted {rf['orders_inserted']} orders and deleted {rf['orders_deleted']} "
              "(with their lineitems), raised some discounts, renamed some customers")
        print("== REFRESH MATERIALIZED VIEW ==")
        for name, query in views.items():
            r = MaterializedView.for_name(spark, name).refresh()
            print(f"   {name}: {r.mode} refresh #{r.refresh_number} in {r.total_ms} ms, "
                  f"{r.spark_jobs} Spark jobs ("
                  + ", ".join(f"{k} {v} ms/{r.phases_jobs.get(k, 0)} jobs" for k, v in r.phases_ms.items())
                  + ")")
            for s in r.sources:
                if s.changed_rows:
                    print(f"      read {s.changed_rows} changed rows of {s.table} "
                          f"(versions {s.from_version + 1}..{s.to_version})")
            print(f"      delta branches: {'; '.join(r.branches)}")
            for note in r.plan_notes:
                if not note.startswith("FK graph"):
                    print(f"      {note}")
            print(f"      view rows inserted {r.rows_inserted}, updated {r.rows_updated}, "
                  f"deleted {r.rows_deleted}")
            print(f"      policy {r.policy}: {r.reason}")
            print(f"      matches recomputation: {matches(spark, name, query)}")

    mv = MaterializedView.for_name(spark, "revenue_by_customer")
    r = mv.refresh()
    print(f"\n== REFRESH with nothing new: {r.mode} in {r.total_ms} ms, {r.spark_jobs} Spark jobs ==")
    top = spark.table("revenue_by_customer").orderBy("revenue", ascending=False).first()
    print(f"\n== mv.rows(c_custkey={top.c_custkey}) ==")
    for row in mv.rows(c_custkey=top.c_custkey):
        print(f"   {row.asDict()}")
    print("\n== EXPLAIN REFRESH MATERIALIZED VIEW revenue_by_customer (after one more change) ==")
    spark.sql("DELETE FROM lineitem WHERE l_orderkey % 501 = 0")
    print("\n".join(mv.explain_refresh().splitlines()[:20]))
    triangles(spark)
    triggered(spark)
    print("\n== SHOW MATERIALIZED VIEWS ==")
    for r in spark.sql("SHOW MATERIALIZED VIEWS").collect():
        print(f"   {r.namespace}.{r.viewName}: policy {r.refreshPolicy}, {r.schedule or 'refreshed by hand'}")
    spark.stop()


if __name__ == "__main__":
    main()
