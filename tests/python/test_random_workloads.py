"""Property-based differential testing: random schemas, queries from the supported class and
random interleavings of INSERT, DELETE, UPDATE and MERGE, with refreshes at random points.
After every refresh the view must equal its query recomputed, as a multiset.

IVM_EXAMPLES sets the number of examples (default 5, kept small for `make test`; the
nightly-style run is `IVM_EXAMPLES=200 pytest tests/python/test_random_workloads.py`).
"""

from __future__ import annotations

import itertools
import os
from typing import List, Tuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ivm_testing import assert_matches_query
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

EXAMPLES = int(os.environ.get("IVM_EXAMPLES", "5"))
_ids = itertools.count()

MEASURE_TYPES = ["INT", "BIGINT", "DOUBLE", "DECIMAL(8,2)"]
keys = st.one_of(st.none(), st.integers(0, 3))


def literal(v: object) -> str:
    return "NULL" if v is None else str(v)


@st.composite
def queries(draw: st.DrawFn) -> str:
    join = draw(st.sampled_from(["none", "t", "self"]))
    src = {"none": "r", "t": "r JOIN t ON r.b = t.b", "self": "r JOIN r r2 ON r.b = r2.a"}[join]
    where = draw(st.sampled_from(["", " WHERE r.x > 1", " WHERE r.a IS NOT NULL", " WHERE r.b <> 2"]))
    group_cols = {"none": ["r.a", "r.b"], "t": ["r.a", "t.c"], "self": ["r.a", "r2.b"]}[join]
    measure = "r.x"
    kind = draw(st.sampled_from(["aggregate", "aggregate", "distinct", "rows", "union"]))
    if kind == "aggregate":
        groups = draw(st.lists(st.sampled_from(group_cols), unique=True, max_size=2))
        aggs = draw(st.lists(st.sampled_from([
            "count(*)", f"count({measure})", f"sum({measure})", f"avg({measure})",
            f"min({measure})", f"max({measure})", f"sum({measure}) FILTER (WHERE r.a > 1)"]),
            min_size=1, max_size=4, unique=True))
        cols = [f"{g} AS g{i}" for i, g in enumerate(groups)] + [f"{a} AS m{i}" for i, a in enumerate(aggs)]
        having = draw(st.sampled_from(["", " HAVING count(*) > 1"])) if groups else ""
        group_by = f" GROUP BY {', '.join(groups)}" if groups else ""
        return f"SELECT {', '.join(cols)} FROM {src}{where}{group_by}{having}"
    cols = draw(st.lists(st.sampled_from(group_cols + [measure]), min_size=1, max_size=3, unique=True))
    select = ", ".join(f"{c} AS c{i}" for i, c in enumerate(cols))
    if kind == "distinct":
        return f"SELECT DISTINCT {select} FROM {src}{where}"
    if kind == "union":
        return f"SELECT {select} FROM {src}{where} UNION ALL SELECT {select} FROM {src} WHERE r.a = 1"
    return f"SELECT {select} FROM {src}{where}"


rows_r = st.lists(st.tuples(keys, keys, st.one_of(st.none(), st.integers(-2, 5))), min_size=1, max_size=4)
rows_t = st.lists(st.tuples(keys, st.integers(0, 9)), min_size=1, max_size=3)

operations = st.lists(st.one_of(
    st.tuples(st.just("insert_r"), rows_r),
    st.tuples(st.just("insert_t"), rows_t),
    st.tuples(st.just("delete_r"), keys),
    st.tuples(st.just("delete_t"), keys),
    st.tuples(st.just("update_r"), keys),
    st.tuples(st.just("merge_r"), rows_r),
    st.tuples(st.just("refresh"), st.none()),
), min_size=3, max_size=8)


def statement(op: str, arg: object) -> str:
    if op == "insert_r":
        return "INSERT INTO r VALUES " + ", ".join(f"({literal(a)}, {literal(b)}, {literal(x)})"
                                                   for a, b, x in arg)  # type: ignore[union-attr]
    if op == "insert_t":
        return "INSERT INTO t VALUES " + ", ".join(f"({literal(b)}, {c})" for b, c in arg)  # type: ignore[union-attr]
    if op == "delete_r":
        return f"DELETE FROM r WHERE a <=> {literal(arg)}"
    if op == "delete_t":
        return f"DELETE FROM t WHERE b <=> {literal(arg)}"
    if op == "update_r":
        return f"UPDATE r SET x = coalesce(x, 0) + 1, b = a WHERE b <=> {literal(arg)}"
    if op == "merge_r":
        values = " UNION ALL ".join(f"SELECT {literal(a)} AS a, {literal(b)} AS b, {literal(x)} AS x"
                                    for a, b, x in arg)  # type: ignore[union-attr]
        return (f"MERGE INTO r USING (SELECT a, max(b) AS b, max(x) AS x FROM ({values}) GROUP BY a) s "
                "ON r.a = s.a WHEN MATCHED THEN UPDATE SET b = s.b, x = s.x "
                "WHEN NOT MATCHED THEN INSERT (a, b, x) VALUES (s.a, s.b, s.x)")
    raise ValueError(op)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(measure_type=st.sampled_from(MEASURE_TYPES), query=queries(),
       initial_r=rows_r, initial_t=rows_t, ops=operations)
def test_random_workload_matches_recomputation(
        spark: SparkSession, measure_type: str, query: str,
        initial_r: List[Tuple[object, object, object]], initial_t: List[Tuple[object, int]],
        ops: List[Tuple[str, object]]) -> None:
    db = f"hyp{next(_ids)}_{os.getpid()}"
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"USE {db}")
    try:
        spark.sql(f"CREATE TABLE r (a INT, b INT, x {measure_type}) USING delta")
        spark.sql("CREATE TABLE t (b INT, c INT) USING delta")
        spark.sql(statement("insert_r", initial_r))
        spark.sql(statement("insert_t", initial_t))
        spark.sql(f"CREATE MATERIALIZED VIEW v AS {query}")
        assert_matches_query(spark, "v", query)
        mv = MaterializedView.for_name(spark, "v")
        for op, arg in [*ops, ("refresh", None)]:
            if op == "refresh":
                mv.refresh()
                assert_matches_query(spark, "v", query)
            else:
                spark.sql(statement(op, arg))
    finally:
        spark.sql("USE default")
        spark.sql(f"DROP DATABASE {db} CASCADE")
