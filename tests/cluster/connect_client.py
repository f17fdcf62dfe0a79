"""A Spark Connect client of spark-ivm, run by test_servers.py in a process of its own (a
Connect session cannot share a process with a classic one). Prints one JSON object of what it
saw."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict

from pyspark.sql import SparkSession
from spark_ivm import IvmError, MaterializedView, RefreshService, configure_spark_with_ivm
from spark_ivm.errors import NotIncrementalizableError, ViewNotFoundError


def main(warehouse: str) -> None:
    seen: Dict[str, Any] = {}
    builder = SparkSession.builder.remote("local[2]").config("spark.sql.warehouse.dir", warehouse)
    spark = configure_spark_with_ivm(builder).getOrCreate()
    seen["session"] = type(spark).__module__
    spark.sql("CREATE TABLE t (k INT, v INT) USING delta")
    spark.sql("INSERT INTO t VALUES (1, 10), (2, 20), (1, 5)")
    mv = MaterializedView.create(spark, "s", "SELECT k, sum(v) AS total, count(*) AS n FROM t GROUP BY k")
    spark.sql("CREATE MATERIALIZED VIEW ap ACCESS BY (k) AS SELECT k, v FROM t")
    spark.sql("INSERT INTO t VALUES (3, 7), (1, 1)")
    spark.sql("DELETE FROM t WHERE k = 2")
    seen["mode"] = mv.refresh().mode
    seen["rows"] = sorted(list(r) for r in mv.rows())
    query = "SELECT k, sum(v), count(*) FROM t GROUP BY k"
    seen["query"] = sorted(list(r) for r in spark.sql(query).collect())
    seen["rows_k1"] = [list(r) for r in mv.rows(k=1)]
    ap = MaterializedView.for_name(spark, "ap")
    seen["lookup_before"] = sorted(r[0] for r in ap.lookup(k=1))
    ap.refresh()
    seen["lookup"] = sorted(r[0] for r in ap.lookup(k=1))
    seen["structure"] = ap.lookup_structure()
    seen["history"] = [e.mode for e in mv.history()]
    seen["describe"] = [mv.describe()["maintenance"]["strategy"], mv.lag().pending_commits]
    try:
        MaterializedView.for_name(spark, "missing").refresh()
    except ViewNotFoundError as e:
        seen["not_found"] = [e.getCondition(), e.getSqlState()]
    try:
        MaterializedView.create(spark, "top", "SELECT k FROM t LIMIT 1",
                                refresh_policy="INCREMENTAL STRICT")
    except NotIncrementalizableError as e:
        seen["not_incremental"] = e.getMessageParameters()["operator"]
    try:
        RefreshService(spark)
    except IvmError as e:
        seen["service"] = str(e)
    spark.stop()
    print("SEEN " + json.dumps(seen), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
