"""TPC-H data as Delta tables, and TPC-H-style refresh functions, for the demo and benchmarks.

Data comes from ``tpchgen-cli`` (Parquet), is loaded once per scale factor into a cache folder,
and copied into Delta tables with the change data feed on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, Iterable

from pyspark.sql import SparkSession

TABLES = ["nation", "region", "customer", "orders", "lineitem", "supplier", "part", "partsupp"]


def generate(scale_factor: float, cache_dir: str, tables: Iterable[str] = TABLES) -> str:
    """Parquet files of the TPC-H tables at this scale factor (generated once, then reused)."""
    out = os.path.join(cache_dir, f"sf{scale_factor:g}")
    wanted = [t for t in tables if not os.path.exists(os.path.join(out, f"{t}.parquet"))]
    if wanted:
        os.makedirs(out, exist_ok=True)
        exe = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
        subprocess.run([exe, "parquet", "-s", f"{scale_factor:g}", f"--tables={','.join(wanted)}",
                        f"--output-dir={out}"], check=True)
    return out


def load(spark: SparkSession, parquet_dir: str, tables: Iterable[str] = TABLES) -> Dict[str, int]:
    """Create one Delta table per TPC-H table (change data feed on); returns row counts."""
    counts = {}
    for t in tables:
        df = spark.read.parquet(os.path.join(parquet_dir, f"{t}.parquet"))
        (df.write.format("delta").mode("overwrite")
         .option("delta.enableChangeDataFeed", "true").saveAsTable(t))
        spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
        counts[t] = spark.table(t).count()
    return counts


def refresh_functions(spark: SparkSession, fraction: float, seed: int) -> Dict[str, int]:
    """TPC-H's RF1 and RF2: insert and delete ``fraction`` of the orders with their lineitems.

    New orders copy existing ones under fresh keys (above the current maximum), so that
    referential integrity holds; deleted orders take their lineitems with them.
    """
    max_key = spark.sql("SELECT max(o_orderkey) FROM orders").collect()[0][0]
    n = max(1, int(spark.table("orders").count() * fraction))
    spark.sql(f"""CREATE OR REPLACE TEMPORARY VIEW rf_new AS
        SELECT o_orderkey AS old_key, {max_key} + row_number() OVER (ORDER BY o_orderkey) AS new_key
        FROM orders TABLESAMPLE ({fraction * 100 * 1.2:.6f} PERCENT) REPEATABLE ({seed}) LIMIT {n}""")
    spark.sql("CACHE TABLE rf_new")
    spark.sql("""INSERT INTO lineitem SELECT /*+ BROADCAST(rf_new) */ rf_new.new_key, l.l_partkey,
        l.l_suppkey, l.l_linenumber, l.l_quantity, l.l_extendedprice, l.l_discount, l.l_tax,
        l.l_returnflag, l.l_linestatus, l.l_shipdate, l.l_commitdate, l.l_receiptdate,
        l.l_shipinstruct, l.l_shipmode, l.l_comment
        FROM lineitem l JOIN rf_new ON l.l_orderkey = rf_new.old_key""")
    spark.sql("""INSERT INTO orders SELECT /*+ BROADCAST(rf_new) */ rf_new.new_key, o.o_custkey,
        o.o_orderstatus, o.o_totalprice, o.o_orderdate, o.o_orderpriority, o.o_clerk,
        o.o_shippriority, o.o_comment FROM orders o JOIN rf_new ON o.o_orderkey = rf_new.old_key""")
    inserted = spark.table("rf_new").count()
    spark.sql("UNCACHE TABLE rf_new")
    spark.sql(f"""CREATE OR REPLACE TEMPORARY VIEW rf_old AS
        SELECT o_orderkey FROM orders WHERE o_orderkey <= {max_key}
        ORDER BY hash(o_orderkey, {seed}) LIMIT {n}""")
    spark.sql("CACHE TABLE rf_old")
    deleted = spark.table("rf_old").count()
    # Delta's DELETE takes no subquery; MERGE ... DELETE is its way to delete by a key list.
    spark.sql("MERGE INTO lineitem USING rf_old ON l_orderkey = rf_old.o_orderkey "
              "WHEN MATCHED THEN DELETE")
    spark.sql("MERGE INTO orders USING rf_old ON orders.o_orderkey = rf_old.o_orderkey "
              "WHEN MATCHED THEN DELETE")
    spark.sql("UNCACHE TABLE rf_old")
    return {"orders_inserted": inserted, "orders_deleted": deleted}
