"""TPC-DS's 99 queries as materialized views, as differential checks of spark-ivm.

The data and the query texts come from DuckDB's TPC-DS extension (``dsdgen`` and
``tpcds_queries()``, installed by ``pip install '.[compat]'``); each table is written as a Delta
table without the change data feed, as a loader writes it. Each query becomes a materialized
view under the default refresh policy (AUTO) and is compared with its query, counts included,
after it is created and after each step of changes: rows of every fact table inserted under new
keys, deleted and updated, then dimension rows updated and deleted. Not part of `make test`
(about 20 minutes at the default scale; `make compat-tpcds` installs what it needs and runs it):

    .venv/bin/python tests/compat/tpcds_queries.py [--sf 0.01] [--strict] [--master M] [N ...]

With ``--strict`` every view is created ``REFRESH POLICY INCREMENTAL STRICT``, so that a query
spark-ivm cannot maintain is listed with the error that names why. Each line gives a query's
refresh modes per step (i incremental, f full, n noop) or its failure.
"""

# ruff: noqa: E501 (one SQL statement per line reads better than wrapped)
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import assert_matches_query, make_cluster_session, make_session  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402

# Each fact table: its key columns (a row's identity) and a measure an update moves.
FACTS: Dict[str, Tuple[List[str], str]] = {
    "store_sales": (["ss_item_sk", "ss_ticket_number"], "ss_quantity"),
    "store_returns": (["sr_item_sk", "sr_ticket_number"], "sr_return_quantity"),
    "catalog_sales": (["cs_item_sk", "cs_order_number"], "cs_quantity"),
    "catalog_returns": (["cr_item_sk", "cr_order_number"], "cr_return_quantity"),
    "web_sales": (["ws_item_sk", "ws_order_number"], "ws_quantity"),
    "web_returns": (["wr_item_sk", "wr_order_number"], "wr_return_quantity"),
    "inventory": (["inv_date_sk", "inv_item_sk", "inv_warehouse_sk"], "inv_quantity_on_hand"),
}
# The new rows' copy of a key column is moved past every existing key.
NEW_KEY = {"store_sales": "ss_ticket_number", "store_returns": "sr_ticket_number",
           "catalog_sales": "cs_order_number", "catalog_returns": "cr_order_number",
           "web_sales": "ws_order_number", "web_returns": "wr_order_number",
           "inventory": "inv_warehouse_sk"}


def fact_changes(spark: SparkSession, step: int) -> List[str]:
    """About 2% of each fact table's rows inserted (copies under new keys), 2% deleted, 2% updated."""
    statements = []
    for table, (keys, measure) in FACTS.items():
        h = f"pmod(hash({', '.join(keys)}, {step}), 50)"
        cols = [f.name for f in spark.table(table).schema.fields]
        shift = spark.sql(f"SELECT coalesce(max({NEW_KEY[table]}), 0) FROM {table}").collect()[0][0]
        select = ", ".join(f"{c} + {shift}" if c == NEW_KEY[table] else c for c in cols)
        statements += [f"INSERT INTO {table} SELECT {select} FROM {table} WHERE {h} = 0",
                       f"DELETE FROM {table} WHERE {h} = 1",
                       f"UPDATE {table} SET {measure} = {measure} + 1 WHERE {h} = 2"]
    return statements


DIMENSION_CHANGES = [
    "UPDATE item SET i_current_price = i_current_price * 1.5, i_category = 'Music' WHERE i_item_sk % 7 = 0",
    "UPDATE customer SET c_birth_country = 'UNITED STATES', c_preferred_cust_flag = 'Y' WHERE c_customer_sk % 5 = 0",
    "UPDATE customer_address SET ca_state = 'TX', ca_gmt_offset = -6 WHERE ca_address_sk % 4 = 0",
    "UPDATE customer_demographics SET cd_marital_status = 'M', cd_education_status = 'College' WHERE cd_demo_sk % 9 = 0",
    "UPDATE household_demographics SET hd_dep_count = hd_dep_count + 1 WHERE hd_demo_sk % 6 = 0",
    "UPDATE promotion SET p_channel_email = 'N', p_channel_event = 'N' WHERE p_promo_sk % 2 = 0",
    "DELETE FROM item WHERE i_item_sk % 23 = 0",
]


def tpcds() -> Any:
    """A DuckDB connection with the TPC-DS extension loaded (from the `compat` extra's wheel)."""
    import duckdb
    import duckdb_extensions

    duckdb_extensions.import_extension("tpcds")
    con = duckdb.connect()
    con.sql("LOAD tpcds")
    return con


def queries() -> Dict[int, str]:
    """TPC-DS's queries as DuckDB's extension gives them, in Spark's dialect: without their final
    semicolon, and double-quoted names (``AS "30 days"``) quoted with backticks."""
    return {n: re.sub(r'"([^"]*)"', r"`\1`", q.strip().rstrip(";")) for n, q in tpcds().sql("SELECT query_nr, query FROM tpcds_queries()").fetchall()}


def generate(sf: float) -> str:
    """Parquet files of the TPC-DS tables at this scale factor, written once into a cache folder."""
    out = os.path.join(tempfile.gettempdir(), "spark-ivm-tpcds", f"sf{sf:g}")
    if not os.path.exists(os.path.join(out, "done")):
        os.makedirs(out, exist_ok=True)
        con = tpcds()
        con.sql(f"CALL dsdgen(sf={sf})")
        for (t,) in con.sql("SHOW TABLES").fetchall():
            con.sql(f"COPY {t} TO '{os.path.join(out, t)}.parquet' (FORMAT parquet)")
        open(os.path.join(out, "done"), "w").close()
    return out


def load(spark: SparkSession, folder: str) -> None:
    for name in sorted(os.listdir(folder)):
        if name.endswith(".parquet"):
            spark.read.parquet(os.path.join(folder, name)).write.format("delta").saveAsTable(name[:-8])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=0.01)
    parser.add_argument("--strict", action="store_true")
    parser.add_argument("--master", default="local[2]",
                        help="e.g. 'local-cluster[2,1,2048]': executors in JVMs of their own")
    parser.add_argument("only", nargs="*", type=int)
    args = parser.parse_args()
    texts = queries()
    chosen = {n: q for n, q in texts.items() if not args.only or n in args.only}
    settings = {"spark.ui.showConsoleProgress": "false",
                "spark.ivm.refreshPolicy.default": "incremental_strict" if args.strict else "auto"}
    spark = (make_cluster_session(tempfile.mkdtemp(prefix="ivm-warehouse-"), args.master, settings)
             if args.master.startswith("local-cluster") else make_session(master=args.master, extra=settings))
    load(spark, generate(args.sf))
    failed: Dict[int, str] = {}
    views: Dict[int, MaterializedView] = {}
    modes: Dict[int, str] = {}
    started = time.time()
    for n, q in list(chosen.items()):
        try:
            spark.sql(q).collect()
        except Exception as e:  # noqa: BLE001 - DuckDB's text that Spark does not run
            print(f"skip  q{n:<3} Spark cannot run it: {type(e).__name__}: {str(e).strip()[:300]}", flush=True)
            del chosen[n]
            continue
        try:
            spark.sql(f"CREATE MATERIALIZED VIEW q{n} AS {q}")
            assert_matches_query(spark, f"q{n}", q)
            views[n] = MaterializedView.for_name(spark, f"q{n}")
            modes[n] = ""
        except Exception as e:  # noqa: BLE001 - report every query, then fail
            failed[n] = f"create: {type(e).__name__}: {str(e).splitlines()[0][:400]}"
    print(f"created {len(views)} of {len(chosen)} in {time.time() - started:.0f} s", flush=True)
    for step in range(3):
        statements = fact_changes(spark, step) if step < 2 else DIMENSION_CHANGES
        for stmt in statements:
            spark.sql(stmt)
        started = time.time()
        for n, mv in list(views.items()):
            try:
                began = time.time()
                report = mv.refresh()
                took = time.time() - began
                modes[n] += report.mode[0]
                began = time.time()
                assert_matches_query(spark, f"q{n}", chosen[n])
                print(f"      q{n:<3} step {step}: {report.mode} in {took:.1f} s ({report.spark_jobs} jobs); "
                      f"its query read back in {time.time() - began:.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001
                failed[n] = f"step {step}: {type(e).__name__}: {str(e).splitlines()[0][:400]}"
                del views[n]
        print(f"step {step}: refreshed and checked {len(views)} in {time.time() - started:.0f} s", flush=True)
    for n in sorted(chosen):
        print(f"{'ok  ' if n not in failed else 'FAIL'}  q{n:<3} {failed.get(n, modes.get(n, ''))}")
    incremental = sorted(n for n, m in modes.items() if n not in failed and m and set(m) <= {"i", "n"})
    print(f"incremental every step: {len(incremental)} of {len(chosen)}: {incremental}")
    print(f"{len(failed)} of {len(chosen)} failed: {sorted(failed)}" if failed else f"all {len(chosen)} passed")
    spark.stop()  # before the exit: a local-cluster's workers would relaunch executors as the JVM stops
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
