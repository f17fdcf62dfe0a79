"""A separate process for the kill tests (run by test_exactly_once.py, not by pytest).

    python crash_worker.py WAREHOUSE STEP KILL_POINT|none
    python crash_worker.py WAREHOUSE plain

Each step first checks that the views are readable and that a refresh makes them exact after
whatever the previous step was killed in, then changes the base tables and refreshes with the
JVM set to die at KILL_POINT. `plain` reads the views from a session without spark-ivm.
Results go to WAREHOUSE/result-STEP.json.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import diff, multiset, resolved_jars  # noqa: E402

VIEWS = {
    "agg": "SELECT t.c, count(*) AS n, sum(r.x) AS sx, min(r.a) AS mn "
           "FROM r JOIN t ON r.b = t.b GROUP BY t.c",
    "rows": "SELECT r.a, t.c FROM r JOIN t ON r.b = t.b",
}


def changes(step: int) -> list[str]:
    return [
        f"INSERT INTO r VALUES ({100 + step}, {step % 3}, {step}.5), ({100 + step}, {step % 3}, {step}.5)",
        f"DELETE FROM r WHERE a = {step}",
        f"UPDATE t SET c = c + 1 WHERE b = {step % 3}",
    ]


def main() -> None:
    warehouse, step = sys.argv[1], sys.argv[2]
    os.chdir(warehouse)
    if step == "plain":
        from delta import configure_spark_with_delta_pip
        from pyspark.sql import SparkSession
        from spark_ivm.session import ivm_jar_path

        # The jars `make install` resolved (no Maven resolution at start), without spark-ivm's.
        jars = [j for j in resolved_jars() if j != ivm_jar_path()]
        builder = (SparkSession.builder.master("local[1]").enableHiveSupport()
                   .config("spark.sql.warehouse.dir", warehouse)
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
                   .config("spark.sql.catalog.spark_catalog",
                           "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
        spark = (builder.config("spark.jars", ",".join(jars)) if jars
                 else configure_spark_with_delta_pip(builder)).getOrCreate()
        result = {}
        for name, query in VIEWS.items():
            missing, extra = diff(multiset(spark.sql(query).collect()), multiset(spark.table(name).collect()))
            result[name] = {"missing": repr(missing), "extra": repr(extra), "rows": spark.table(name).count()}
        write(warehouse, step, result)
        return

    from ivm_testing import make_session
    from spark_ivm import MaterializedView

    spark = make_session(master="local[1]", warehouse=warehouse, hive=True)
    n = int(step)
    result: dict = {}
    if n == 0:
        spark.sql("CREATE TABLE r (a INT, b INT, x DOUBLE) USING delta")
        spark.sql("CREATE TABLE t (b INT, c INT) USING delta")
        spark.sql("INSERT INTO r SELECT id, id % 3, id * 1.5 FROM range(30)")
        spark.sql("INSERT INTO t VALUES (0, 0), (1, 10), (2, 20), (2, 21)")
        for name, query in VIEWS.items():
            spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {query}")
    else:
        for name, query in VIEWS.items():
            readable = spark.table(name).count()  # the killed refresh left a readable view
            report = MaterializedView.for_name(spark, name).refresh()
            missing, extra = diff(multiset(spark.sql(query).collect()), multiset(spark.table(name).collect()))
            result[name] = {"readable_rows": readable, "mode": report.mode,
                            "missing": repr(missing), "extra": repr(extra)}
    write(warehouse, step, result)
    kill = sys.argv[3]
    if kill != "none":
        for stmt in changes(n):
            spark.sql(stmt)
        spark.conf.set("spark.ivm.testing.killAt", kill)
        for name in VIEWS:
            spark.sql(f"REFRESH MATERIALIZED VIEW {name}")
    spark.stop()


def write(warehouse: str, step: str, result: dict) -> None:
    with open(os.path.join(warehouse, f"result-{step}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
