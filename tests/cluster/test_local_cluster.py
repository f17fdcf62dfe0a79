"""Views maintained on a local-cluster master: executors in other JVMs do the work."""

from __future__ import annotations

import re
import time

from ivm_testing import assert_matches_query
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

QUERIES = {
    "agg": "SELECT t.c, count(*) AS n, sum(r.x) AS sx, avg(r.x) AS ax, min(r.a) AS mn, max(r.a) AS mx "
           "FROM r JOIN t ON r.b = t.b GROUP BY t.c",
    "distinct": "SELECT DISTINCT r.b, t.c FROM r JOIN t ON r.b = t.b",
    "self": "SELECT r1.a, r2.a AS a2 FROM r r1 JOIN r r2 ON r1.b = r2.b WHERE r1.a < 20",
    # IVM^eps: its state is kept in the executors' memory, indexed by key, and probed there.
    "triangles": "SELECT count(*) AS n FROM t t1 JOIN t t2 ON t1.c = t2.b "
                 "JOIN t t3 ON t2.c = t3.b AND t3.c = t1.b",
}


def test_views_on_a_cluster(spark: SparkSession) -> None:
    assert spark.sparkContext.master.startswith("local-cluster")
    deadline = time.time() + 120
    # the driver and two executor JVMs
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:  # type: ignore[union-attr]
        assert time.time() < deadline, "executors did not register"
        time.sleep(1)
    spark.sql("CREATE TABLE r (a INT, b INT, x DOUBLE) USING delta")
    spark.sql("CREATE TABLE t (b INT, c INT) USING delta")
    spark.sql("INSERT INTO r SELECT id, id % 7, id / 3.0 FROM range(200)")
    spark.sql("INSERT INTO t SELECT id, id % 3 FROM range(7)")
    for name, q in QUERIES.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} AS {q}")
    assert MaterializedView.for_name(spark, "triangles").epsilon is not None
    steps = [
        ["INSERT INTO r SELECT id, id % 9, 1.0 FROM range(200, 230)", "DELETE FROM t WHERE b = 1"],
        ["UPDATE r SET x = x + 1 WHERE a % 4 = 0", "INSERT INTO t VALUES (8, 5), (1, 1)"],
        ["DELETE FROM r WHERE a < 10"],
    ]
    for step in steps:
        for stmt in step:
            spark.sql(stmt)
        # A step that changes only r leaves the triangles (over t) with nothing to do.
        changes_t = any(re.search(r"\b(FROM|INTO|UPDATE) t\b", stmt) for stmt in step)
        for name, q in QUERIES.items():
            expected = "noop" if name == "triangles" and not changes_t else "incremental"
            assert MaterializedView.for_name(spark, name).refresh().mode == expected
            assert_matches_query(spark, name, q)
