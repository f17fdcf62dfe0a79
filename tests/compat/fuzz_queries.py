"""Random queries over random changes: a differential fuzzer of spark-ivm (not part of `make test`).

Each round makes three small Delta tables with NULLs and duplicate keys (measures of a type drawn
per round), draws queries from a grammar wider than the unit tests' (outer, semi, anti and theta
joins, NOT IN over NULLs, correlated and uncorrelated scalar subqueries, DISTINCT aggregates,
nested aggregates, GROUPING SETS, set operations, windows with and without PARTITION BY, top-k,
recursive CTEs over cyclic edges, aggregates that are not invertible, views over earlier views),
creates each as a view under REFRESH POLICY INCREMENTAL, then applies random inserts, deletes,
updates, MERGEs and loader writes (REPLACE WHERE, INSERT OVERWRITE, OPTIMIZE, REORG), refreshing
each view after most steps (one time in four it is left behind, so that its next refresh takes
several commits) and comparing it with its query, counts included. Each table is laid out as
loaders write them, drawn per table and round (partitioned, deletion vectors, column mapping,
liquid clustering) unless --layout fixes one; so is each view (PARTITIONED BY or CLUSTER BY one
of its columns, or neither) unless --view-layout fixes it:

    .venv/bin/python tests/compat/fuzz_queries.py [--schema plain|star|star-rely] [--rounds N]
        [--queries Q] [--steps S] [--seed K] [--layout NAME] [--view-layout NAME]
        [--cold | --master 'local-cluster[2,1,1024]']

With --schema star the tables are a fact table and three dimensions with declared primary and
foreign keys (the FK-pruned delta rules), which the changes break now and then; star-rely
declares them RELY and keeps them valid.

A failure prints the round's seed, the query, the statements so far and the difference, and the
run goes on; the exit status is the number of failures (capped at 100). A view that a refresh
recomputes is counted, not failed: the summary lists the reasons.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from typing import Any, Dict, List, Optional, Set, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import assert_matches_query, make_cluster_session, make_session  # noqa: E402
from pyspark import SparkContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_ivm import MaterializedView  # noqa: E402

KEY = [None, 0, 1, 2, 3]
VAL = [None, -1, 0, 1, 2, 5, 7]


def lit(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def row(rng: random.Random, table: str) -> str:
    if table == "r":
        return f"({lit(rng.choice(KEY))}, {lit(rng.choice(KEY))}, {lit(rng.choice(VAL))})"
    if table == "s":
        return f"({lit(rng.choice(KEY))}, {lit(rng.choice(KEY))}, {lit(rng.choice(VAL))})"
    return f"({lit(rng.choice(KEY))}, {lit(rng.choice([None, 'p', 'q', 'rr']))})"


def insert(rng: random.Random, table: str, n: int) -> str:
    return f"INSERT INTO {table} VALUES " + ", ".join(row(rng, table) for _ in range(n))


# Table layouts as loaders write them, drawn per table and round: the partition or clustering
# column is one that changes move rows across (NULL partitions included).
LAYOUTS = {
    "plain": "",
    "partitioned": " PARTITIONED BY ({p})",
    "deletion-vectors": " TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
    "column-mapping": " TBLPROPERTIES ('delta.columnMapping.mode' = 'name')",
    "clustered": " CLUSTER BY ({p})",
}
LAYOUT_COLUMN = {"r": "b", "s": "c", "t": "d"}


def change(rng: random.Random) -> str:
    table = rng.choice(["r", "r", "s", "s", "t"])
    kind = rng.choice(["insert", "insert", "delete", "update", "merge", "loader"])
    col = {"r": "a", "s": "b", "t": "c"}[table]
    key = lit(rng.choice(KEY))
    if kind == "insert":
        return insert(rng, table, rng.randint(1, 4))
    if kind == "loader":
        # what loaders and table maintenance write besides plain DML: a replaced slice, a whole
        # table rewritten with most of its rows, files compacted (no data change), deletion
        # vectors purged
        part = LAYOUT_COLUMN[table]
        slice_key = lit(rng.choice([None, "p", "q"])) if table == "t" else key
        values = ", ".join(row(rng, table) for _ in range(rng.randint(0, 3)))
        return rng.choice([
            # the second column of each table is its layout column
            f"INSERT INTO {table} REPLACE WHERE {part} <=> {slice_key} " +
            (f"SELECT * FROM VALUES {values} AS v WHERE v.col2 <=> {slice_key}" if values
             else f"SELECT * FROM {table} WHERE FALSE"),
            f"INSERT OVERWRITE {table} SELECT * FROM {table} WHERE NOT ({col} <=> {key})",
            f"OPTIMIZE {table}",
            f"REORG TABLE {table} APPLY (PURGE)",
            f"DELETE FROM {table}" if rng.random() < 0.2 else insert(rng, table, 2),
        ])
    if kind == "delete":
        return f"DELETE FROM {table} WHERE {col} <=> {key}" + rng.choice(["", f" AND {col} IS NOT NULL", ""])
    if kind == "update":
        if table == "r":
            return rng.choice([f"UPDATE r SET x = coalesce(x, 0) + 1 WHERE a <=> {key}",
                               f"UPDATE r SET b = {lit(rng.choice(KEY))} WHERE a <=> {key}",
                               f"UPDATE r SET a = b, b = a WHERE x <=> {lit(rng.choice(VAL))}"])
        if table == "s":
            return rng.choice([f"UPDATE s SET y = y * 2 WHERE b <=> {key}",
                               f"UPDATE s SET c = {lit(rng.choice(KEY))} WHERE b <=> {key}"])
        return f"UPDATE t SET d = {lit(rng.choice([None, 'p', 'q']))} WHERE c <=> {key}"
    if table == "r":
        src = " UNION ALL ".join(f"SELECT {lit(rng.choice(KEY))} AS a, {lit(rng.choice(KEY))} AS b, "
                                 f"{lit(rng.choice(VAL))} AS x" for _ in range(rng.randint(1, 3)))
        return (f"MERGE INTO r USING (SELECT a, max(b) AS b, max(x) AS x FROM ({src}) GROUP BY a) m "
                "ON r.a = m.a WHEN MATCHED AND m.x > 0 THEN UPDATE SET b = m.b, x = m.x "
                "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (a, b, x) VALUES (m.a, m.b, m.x)")
    return insert(rng, table, rng.randint(1, 3))


# Sources: (FROM text, the columns a query may select or group by, the measure)
SOURCES: List[Tuple[str, List[str], str]] = [
    ("r", ["r.a", "r.b"], "r.x"),
    ("r JOIN s ON r.b = s.b", ["r.a", "s.c", "r.b"], "r.x"),
    ("r LEFT JOIN s ON r.b = s.b", ["r.a", "s.c", "r.b"], "s.y"),
    ("r RIGHT JOIN s ON r.b = s.b", ["r.a", "s.c", "s.b"], "r.x"),
    ("r FULL JOIN s ON r.b = s.b", ["r.a", "s.c", "coalesce(r.b, s.b)"], "r.x"),
    ("r JOIN s ON r.b = s.b LEFT JOIN t ON s.c = t.c", ["r.a", "t.d", "s.c"], "r.x"),
    ("r LEFT JOIN s ON r.b = s.b LEFT JOIN t ON s.c = t.c", ["r.a", "t.d"], "s.y"),
    ("r JOIN s ON r.b = s.b AND r.x < s.y", ["r.a", "s.c"], "s.y"),
    ("r JOIN s ON r.x < s.y", ["r.a", "s.b"], "r.x"),
    ("r, s WHERE r.a = s.c AND", ["r.b", "s.b"], "s.y"),
    ("r LEFT JOIN s ON r.b = s.b AND s.y > 0", ["r.a", "s.c"], "r.x"),
    ("(SELECT b, sum(x) AS sx, count(*) AS n FROM r GROUP BY b) g JOIN s ON g.b = s.b",
     ["g.b", "s.c", "g.n"], "g.sx"),
    ("(SELECT DISTINCT a, b FROM r) g LEFT JOIN t ON g.b = t.c", ["g.a", "t.d"], "g.b"),
    ("r JOIN r r2 ON r.a = r2.b", ["r.a", "r2.a"], "r2.x"),
    ("(SELECT a AS k, x FROM r UNION ALL SELECT b AS k, y AS x FROM s) u", ["u.k"], "u.x"),
    ("r JOIN s ON r.b <=> s.b", ["r.a", "s.c"], "r.x"),
    ("r LEFT ANTI JOIN s ON r.b = s.b", ["r.a", "r.b"], "r.x"),
    ("r LEFT SEMI JOIN t ON r.a = t.c", ["r.a", "r.b"], "r.x"),
    ("r JOIN s ON r.b + 1 = s.c", ["r.a", "s.b"], "s.y"),
    ("r FULL JOIN (SELECT c, count(*) AS n FROM t GROUP BY c) g ON r.b = g.c", ["r.a", "g.c"], "g.n"),
    ("(SELECT a, b, x FROM r WHERE x IS NOT NULL EXCEPT ALL SELECT b, c, y FROM s) e", ["e.a", "e.b"], "e.x"),
]

WHERES = [
    "", "", "r.x > 0", "r.a IS NULL OR r.a > 1", "r.b IN (1, 2)",
    "EXISTS (SELECT 1 FROM t WHERE t.c = r.b)",
    "NOT EXISTS (SELECT 1 FROM t WHERE t.c = r.b AND t.d IS NOT NULL)",
    "r.b IN (SELECT c FROM t)",
    "r.b NOT IN (SELECT c FROM t)",
    "r.b NOT IN (SELECT c FROM t WHERE c IS NOT NULL)",
    "r.x > (SELECT avg(y) FROM s)",
    "r.x >= (SELECT min(y) FROM s WHERE s.b = r.b)",
    "r.a = (SELECT max(c) FROM t WHERE t.d = 'p')",
    "(r.x > 1 OR EXISTS (SELECT 1 FROM s WHERE s.b = r.a))",
    "coalesce(r.x, 0) <> 1",
    "r.a NOT IN (SELECT b FROM s WHERE s.y > 0)",
    "NOT EXISTS (SELECT 1 FROM s WHERE s.b = r.b AND s.y >= r.x)",
    "r.b IN (SELECT c FROM t WHERE t.d = 'p') OR r.x IS NULL",
    "r.x = (SELECT count(*) FROM t WHERE t.c = r.a)",
]

AGGS = ["count(*)", "count({m})", "sum({m})", "avg({m})", "min({m})", "max({m})",
        "count(DISTINCT {m})", "sum(DISTINCT {m})", "stddev_samp({m})", "bool_or({m} > 0)",
        "count_if({m} > 1)", "max_by({g}, struct({m}, {g}))", "sum({m}) FILTER (WHERE {m} > 0)",
        "sum(CASE WHEN {m} > 1 THEN 1 ELSE 0 END)", "approx_count_distinct({m})",
        # not invertible, or of another result type: arrays, percentiles, bitwise, two-argument
        "sort_array(collect_set({m}))", "array_sort(collect_list({m}))", "median({m})",
        "percentile({m}, 0.25)", "percentile_approx({m}, 0.5)", "var_pop({m})", "covar_samp({m}, {m} * 2)",
        "bit_xor(CAST({m} AS INT))", "bit_or(CAST({m} AS INT))", "every({m} IS NOT NULL)", "kurtosis({m})",
        "listagg(DISTINCT CAST({m} AS STRING), ',') WITHIN GROUP (ORDER BY CAST({m} AS STRING))"]


def where_for(rng: random.Random, src: str) -> str:
    if not (src == "r" or src.startswith("r ") or src.startswith("r,")):
        return ""
    w = rng.choice(WHERES)
    if src.startswith("r,"):
        return w or "TRUE"
    return f" WHERE {w}" if w else ""


def from_where(rng: random.Random, src: str) -> str:
    w = where_for(rng, src)
    if src.endswith(" AND"):
        return f"{src} {w or 'TRUE'}"
    return f"{src}{w}"


def select_list(cols: List[str]) -> str:
    return ", ".join(f"{c} AS c{i}" for i, c in enumerate(cols))


def query(rng: random.Random) -> str:
    src, cols, m = rng.choice(SOURCES)
    body = from_where(rng, src)
    kind = rng.choice(["agg", "agg", "agg", "rows", "distinct", "setop", "window", "global_window",
                       "topk", "nested", "scalar_select", "grouping_sets", "having_sub", "recursive"])
    if kind == "recursive":
        # s's rows as edges b -> c, cycles and NULLs included; Spark's recursive CTEs take UNION ALL
        # only, so paths of at most 3 hops end the recursion over cycles
        reach = ("WITH RECURSIVE reach(src, dst, hops) AS (SELECT b, c, 1 FROM s WHERE b IS NOT NULL "
                 "AND c IS NOT NULL UNION ALL SELECT reach.src, s.c, reach.hops + 1 FROM reach "
                 "JOIN s ON reach.dst = s.b WHERE s.c IS NOT NULL AND reach.hops < 3) ")
        return reach + rng.choice(["SELECT src, count(*) AS n FROM reach GROUP BY src",
                                   "SELECT DISTINCT src, dst FROM reach",
                                   "SELECT src, dst, min(hops) AS h FROM reach GROUP BY src, dst",
                                   "SELECT reach.src, r.a FROM reach JOIN r ON reach.dst = r.b",
                                   "SELECT count(*) AS n FROM reach WHERE src = dst"])
    if kind == "grouping_sets" and len(cols) >= 2:
        a, b = cols[:2]
        sets = rng.choice([f"GROUPING SETS (({a}), ({b}), ())", f"ROLLUP ({a}, {b})", f"CUBE ({a}, {b})"])
        return (f"SELECT {a} AS g0, {b} AS g1, grouping_id() AS gid, count(*) AS n, sum({m}) AS s "
                f"FROM {body} GROUP BY {sets}")
    if kind in ("grouping_sets", "having_sub"):
        g = cols[0]
        return (f"SELECT {g} AS g, count(*) AS n FROM {body} GROUP BY {g} "
                f"HAVING count(*) >= (SELECT count(*) FROM t) / 3")
    if kind == "agg":
        groups = rng.sample(cols, rng.randint(0, min(2, len(cols))))
        g = groups[0] if groups else cols[0]
        aggs = [a.format(m=m, g=g) for a in rng.sample(AGGS, rng.randint(1, 3))]
        items = [f"{c} AS g{i}" for i, c in enumerate(groups)] + [f"{a} AS m{i}" for i, a in enumerate(aggs)]
        q = f"SELECT {', '.join(items)} FROM {body}"
        if groups:
            q += f" GROUP BY {', '.join(groups)}"
            if rng.random() < 0.3:
                q += rng.choice([" HAVING count(*) > 1", f" HAVING sum({m}) IS NOT NULL"])
        return q
    if kind == "rows":
        chosen = rng.sample(cols, rng.randint(1, len(cols))) + [m]
        exprs = chosen + rng.sample([f"CASE WHEN {m} > 1 THEN 'hi' ELSE 'lo' END", f"coalesce({m}, -9)",
                                     f"{m} * 2 + 1"], 1)
        return f"SELECT {select_list(exprs)} FROM {body}"
    if kind == "distinct":
        return f"SELECT DISTINCT {select_list(rng.sample(cols, rng.randint(1, len(cols))))} FROM {body}"
    if kind == "setop":
        op = rng.choice(["UNION", "UNION ALL", "INTERSECT", "EXCEPT", "INTERSECT ALL", "EXCEPT ALL"])
        other = rng.choice(["SELECT a, b FROM r WHERE x > 0", "SELECT b, c FROM s", "SELECT c, c + 0 FROM t",
                            "SELECT a, a * 1 FROM r"])
        return f"SELECT r.a, r.b FROM {from_where(rng, 'r')} {op} {other}"
    if kind == "window":
        part = rng.choice(cols)
        fn = rng.choice(["rank() OVER (PARTITION BY {p} ORDER BY {m} NULLS FIRST)",
                         "dense_rank() OVER (PARTITION BY {p} ORDER BY {m} DESC)",
                         "sum({m}) OVER (PARTITION BY {p})",
                         "count(*) OVER (PARTITION BY {p} ORDER BY {m} RANGE BETWEEN UNBOUNDED PRECEDING "
                         "AND CURRENT ROW)",
                         # a ROWS frame over ties is not deterministic: only RANGE frames
                         "max({m}) OVER (PARTITION BY {p})"]).format(p=part, m=m)
        return f"SELECT {part} AS p, {m} AS v, {fn} AS w FROM {body}"
    if kind == "global_window":
        fn = rng.choice(["rank() OVER (ORDER BY {m} NULLS LAST)", "dense_rank() OVER (ORDER BY {m})",
                         "sum({m}) OVER ()", "count(*) OVER (ORDER BY {m})"]).format(m=m)
        q = f"SELECT {cols[0]} AS p, {m} AS v, {fn} AS w FROM {body}"
        if rng.random() < 0.3:
            q = f"SELECT * FROM ({q}) WHERE w <= 3"
        return q
    if kind == "topk":
        g = cols[0]
        if rng.random() < 0.5:
            return (f"SELECT {g} AS g, sum({m}) AS s, count(*) AS n FROM {body} GROUP BY {g} "
                    f"ORDER BY s DESC NULLS LAST, g NULLS FIRST LIMIT 2")
        return (f"SELECT {g} AS g, {m} AS v FROM {body} ORDER BY v NULLS FIRST, g NULLS LAST "
                f"LIMIT {rng.randint(1, 4)}{rng.choice(['', ' OFFSET 1'])}")
    if kind == "nested":
        g = cols[0]
        inner = f"SELECT {g} AS g, count(*) AS n, sum({m}) AS s FROM {body} GROUP BY {g}"
        return rng.choice([f"SELECT n, count(*) AS k, sum(s) AS ss FROM ({inner}) GROUP BY n",
                           f"SELECT max(n) AS mn, min(s) AS ms FROM ({inner})",
                           f"SELECT g, n FROM ({inner}) WHERE n > 1"])
    # a scalar subquery in SELECT
    sub = rng.choice(["(SELECT count(*) FROM t WHERE t.c = r.b)", "(SELECT max(y) FROM s WHERE s.b = r.a)",
                      "(SELECT sum(y) FROM s)", "(SELECT d FROM t WHERE t.c = r.a AND t.d = 'q' LIMIT 1)"])
    if "LIMIT" in sub:
        sub = "(SELECT min(d) FROM t WHERE t.c = r.a)"
    return f"SELECT r.a, r.x, {sub} AS sq FROM {from_where(rng, 'r')}"


def over_view(rng: random.Random, spark: SparkSession, view: str) -> str:
    """A query over an earlier view: a view over a view, refreshed after it (or left behind)."""
    atomic = [f.name for f in spark.table(view).schema.fields
              if f.dataType.typeName() not in ("map", "array", "struct")]
    c = f"`{rng.choice(atomic)}`" if atomic else "1"
    return rng.choice([f"SELECT {c} AS g, count(*) AS n FROM {view} GROUP BY {c}",
                       f"SELECT DISTINCT {c} AS g FROM {view}",
                       f"SELECT * FROM {view} WHERE {c} IS NOT NULL",
                       f"SELECT count(*) AS n, count(DISTINCT {c}) AS d FROM {view}"])


# --schema star: a fact table and dimensions with declared primary and foreign keys (RELY or
# not). Without RELY the changes also break the keys now and then (a fact row whose dimension
# row is missing, a referenced dimension row deleted, a dimension key updated), which a refresh
# must find and still be exact; under RELY they keep every reference valid, as RELY promises.
STAR_TABLES = [  # with the column each is partitioned or clustered by in those layouts
    ("CREATE TABLE d3 (g INT NOT NULL, name STRING) USING delta", "g"),
    ("CREATE TABLE d1 (k1 INT NOT NULL, a STRING, g INT) USING delta", "k1"),
    ("CREATE TABLE d2 (k2 INT NOT NULL, b INT) USING delta", "b"),
    ("CREATE TABLE f (id INT, k1 INT, k2 INT, v INT) USING delta", "k2"),
]
STAR_KEYS = [
    "ALTER TABLE d3 ADD CONSTRAINT d3_pk PRIMARY KEY (g)",
    "ALTER TABLE d1 ADD CONSTRAINT d1_pk PRIMARY KEY (k1)",
    "ALTER TABLE d2 ADD CONSTRAINT d2_pk PRIMARY KEY (k2)",
    "ALTER TABLE d1 ADD CONSTRAINT d1_d3 FOREIGN KEY (g) REFERENCES d3 (g){rely}",
    "ALTER TABLE f ADD CONSTRAINT f_d1 FOREIGN KEY (k1) REFERENCES d1 (k1){rely}",
    "ALTER TABLE f ADD CONSTRAINT f_d2 FOREIGN KEY (k2) REFERENCES d2 (k2){rely}",
]
STAR_FROM = [
    ("f JOIN d1 ON f.k1 = d1.k1", ["d1.a", "f.k2"], "f.v"),
    ("f JOIN d1 ON f.k1 = d1.k1 JOIN d2 ON f.k2 = d2.k2", ["d1.a", "d2.b"], "f.v"),
    ("f JOIN d1 ON f.k1 = d1.k1 JOIN d3 ON d1.g = d3.g", ["d3.name", "d1.a"], "f.v"),
    ("f JOIN d1 ON f.k1 = d1.k1 JOIN d2 ON f.k2 = d2.k2 JOIN d3 ON d1.g = d3.g", ["d3.name", "d2.b"], "f.v"),
    ("f JOIN d2 ON f.k2 = d2.k2", ["d2.b", "f.k1"], "f.v"),
    ("f LEFT JOIN d1 ON f.k1 = d1.k1", ["d1.a", "f.k1"], "f.v"),
    ("d1 JOIN d3 ON d1.g = d3.g", ["d3.name", "d1.a"], "d1.k1"),
]
STAR_WHERES = ["", "", " WHERE d1.a <> 'p'", " WHERE f.v > 1", " WHERE d1.g IS NOT NULL AND f.v IS NOT NULL",
               " WHERE f.k2 IN (SELECT k2 FROM d2 WHERE b > 0)"]


def star_query(rng: random.Random) -> str:
    src, cols, m = rng.choice(STAR_FROM)
    where = rng.choice(STAR_WHERES)
    if ("f." in where and not src.startswith("f")) or ("d1." in where and "d1" not in src):
        where = ""
    body = src + where
    kind = rng.choice(["agg", "agg", "agg", "rows", "distinct", "global", "topk"])
    if kind == "agg":
        groups = rng.sample(cols, rng.randint(1, len(cols)))
        aggs = rng.sample([f"sum({m})", "count(*)", f"avg({m})", f"min({m})", f"max({m})",
                           f"count(DISTINCT {m})"], rng.randint(1, 3))
        items = [f"{g} AS g{i}" for i, g in enumerate(groups)] + [f"{a} AS m{i}" for i, a in enumerate(aggs)]
        return f"SELECT {', '.join(items)} FROM {body} GROUP BY {', '.join(groups)}"
    if kind == "rows":
        return f"SELECT {select_list(rng.sample(cols, rng.randint(1, len(cols))) + [m])} FROM {body}"
    if kind == "distinct":
        return f"SELECT DISTINCT {select_list(rng.sample(cols, rng.randint(1, len(cols))))} FROM {body}"
    if kind == "global":
        return f"SELECT count(*) AS n, sum({m}) AS s FROM {body}"
    return (f"SELECT {cols[0]} AS g, sum({m}) AS s FROM {body} GROUP BY {cols[0]} "
            "ORDER BY s DESC NULLS LAST, g NULLS FIRST LIMIT 2")


class Star:
    """The star schema's rows as the changes leave them, so that changes can keep (or break) the keys."""

    def __init__(self, rng: random.Random, rely: bool) -> None:
        self.rng, self.rely = rng, rely
        self.d3 = {g: rng.choice(["n1", "n2", None]) for g in range(3)}
        self.d1 = {k: (rng.choice(["p", "q", None]), rng.choice([*self.d3, None])) for k in range(6)}
        self.d2 = {k: rng.choice([None, 0, 1, 2]) for k in range(4)}
        self.next_id, self.next_key = 0, 100
        self.f: Dict[int, Tuple[Optional[int], Optional[int], Optional[int]]] = {}
        self.valid = True  # the first rows keep the keys, which are declared over them
        for _ in range(12):
            self.add_fact()
        self.valid = rely

    def add_fact(self) -> str:
        rng = self.rng
        k1 = rng.choice([*self.d1, None]) if self.valid or rng.random() > 0.1 else 999
        k2 = rng.choice([*self.d2, None]) if self.valid or rng.random() > 0.1 else 998
        self.next_id += 1
        self.f[self.next_id] = (k1, k2, rng.choice(VAL))
        return f"({self.next_id}, {lit(k1)}, {lit(k2)}, {lit(self.f[self.next_id][2])})"

    def initial(self) -> List[str]:
        def values(rows: Dict[int, Any]) -> str:
            flat = [(k, *(r if isinstance(r, tuple) else (r,))) for k, r in rows.items()]
            return ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in flat)
        return [f"INSERT INTO {t} VALUES {values(getattr(self, t))}" for t in ("d3", "d1", "d2", "f")]

    def referenced(self, table: str) -> Set[Optional[int]]:
        if table == "d1":
            return {k1 for k1, _, _ in self.f.values()}
        if table == "d2":
            return {k2 for _, k2, _ in self.f.values()}
        return {g for _, g in self.d1.values()}

    def change(self) -> str:
        rng = self.rng
        kind = rng.choice(["facts", "facts", "delete_facts", "move_fact", "dim_attr", "dim_attr", "new_dim",
                           "delete_dim", "dim_key", "rewrite"])
        if kind == "rewrite":  # the same rows in new files
            table = rng.choice(["f", "d1", "d2", "d3"])
            return rng.choice([f"OPTIMIZE {table}", f"REORG TABLE {table} APPLY (PURGE)",
                               f"INSERT OVERWRITE {table} SELECT * FROM {table}"])
        if kind == "facts":
            return "INSERT INTO f VALUES " + ", ".join(self.add_fact() for _ in range(rng.randint(1, 4)))
        if kind == "delete_facts" and self.f:
            k1 = rng.choice([k for k, _, _ in self.f.values()])
            self.f = {i: r for i, r in self.f.items() if r[0] != k1}
            return f"DELETE FROM f WHERE k1 <=> {lit(k1)}"
        if kind == "move_fact" and self.f:
            i = rng.choice(list(self.f))
            k1 = rng.choice([*self.d1, None]) if self.rely or rng.random() > 0.2 else 997
            self.f[i] = (k1, *self.f[i][1:])
            return f"UPDATE f SET k1 = {lit(k1)}, v = coalesce(v, 0) + 1 WHERE id = {i}"
        table = rng.choice(["d1", "d2", "d3"])
        rows = getattr(self, table)
        if kind == "dim_attr" and rows:
            k = rng.choice(list(rows))
            if table == "d1":
                a = rng.choice(["p", "q", "z", None])
                rows[k] = (a, rows[k][1])
                return f"UPDATE d1 SET a = {lit(a)} WHERE k1 = {k}"
            if table == "d2":
                rows[k] = rng.choice([None, 0, 1, 2, 3])
                return f"UPDATE d2 SET b = {lit(rows[k])} WHERE k2 = {k}"
            rows[k] = rng.choice(["n1", "n3", None])
            return f"UPDATE d3 SET name = {lit(rows[k])} WHERE g = {k}"
        if kind == "delete_dim" and rows:
            free = [k for k in rows if k not in self.referenced(table)]
            if not free and self.rely:
                return self.change()
            k = rng.choice(free) if free and (self.rely or rng.random() > 0.3) else rng.choice(list(rows))
            del rows[k]
            col = {"d1": "k1", "d2": "k2", "d3": "g"}[table]
            return f"DELETE FROM {table} WHERE {col} = {k}"
        if kind == "dim_key" and rows and not self.rely:
            k = rng.choice(list(rows))
            self.next_key += 1
            rows[self.next_key] = rows.pop(k)
            col = {"d1": "k1", "d2": "k2", "d3": "g"}[table]
            return f"UPDATE {table} SET {col} = {self.next_key} WHERE {col} = {k}"
        self.next_key += 1
        k = self.next_key
        if table == "d1":
            rows[k] = (rng.choice(["p", "q"]), rng.choice([*self.d3, None]))
            return f"INSERT INTO d1 VALUES ({k}, {lit(rows[k][0])}, {lit(rows[k][1])})"
        if table == "d2":
            rows[k] = rng.choice([0, 1])
            return f"INSERT INTO d2 VALUES ({k}, {rows[k]})"
        rows[k] = "n4"
        return f"INSERT INTO d3 VALUES ({k}, 'n4')"


class Sessions:
    """The run's session; with `cold`, every step's refreshes run in a new application (a new
    JVM, its catalog in a Derby metastore in the warehouse), as scheduled jobs run them: what a
    refresh reads from storage and what an application builds in memory are both exercised."""

    def __init__(self, cold: bool, master: str) -> None:
        self.cold, self.master = cold, master
        self.warehouse = tempfile.mkdtemp(prefix="ivm-fuzz-")
        self.spark = self._start()

    def _start(self) -> SparkSession:
        quiet = {"spark.ui.showConsoleProgress": "false"}
        cluster = self.master.startswith("local-cluster")
        session: SparkSession = (
            make_cluster_session(self.warehouse, self.master, quiet) if cluster
            else make_session(master=self.master, warehouse=self.warehouse, hive=self.cold, extra=quiet))
        return session

    def restart(self, db: str) -> None:
        """A new application, in a new JVM, using database `db`."""
        self.stop()
        self.spark = self._start()
        self.spark.sql(f"USE {db}")

    def stop(self) -> None:
        self.spark.stop()
        if self.cold:  # the JVM exits once its standard input closes
            gateway = SparkContext._gateway
            proc = gateway.proc  # type: ignore[union-attr]
            gateway.shutdown()  # type: ignore[union-attr]
            if proc.stdin:
                proc.stdin.close()
            proc.wait(120)
            SparkContext._gateway = None
            SparkContext._jvm = None


# A view's own layout, drawn per view: a column of a type Delta partitions and clusters by.
VIEW_LAYOUTS = {"none": "", "partitioned": " PARTITIONED BY ({c})", "clustered": " CLUSTER BY ({c})"}
LAYOUT_TYPES = ("int", "bigint", "smallint", "tinyint", "string", "date", "timestamp", "decimal")


def view_layout(rng: random.Random, spark: SparkSession, q: str, kind: str) -> str:
    """The view layout clause of `kind` on a column of the query drawn by `rng` ("" for none, or
    if the query has no column to lay it out by)."""
    if kind == "none":
        return ""
    fields = spark.sql(q).schema.fields
    columns = [f.name for f in fields if f.dataType.simpleString().startswith(LAYOUT_TYPES)]
    if not columns:
        return ""
    return VIEW_LAYOUTS[kind].format(c="`" + rng.choice(columns).replace("`", "``") + "`")


def run_round(sessions: Sessions, schema: str, layout_arg: Optional[str], seed: int, n_queries: int,
              n_steps: int, stats: "Counter[str]", reasons: "Counter[str]", failures: List[str],
              view_layout_arg: Optional[str] = None) -> None:
    rng = random.Random(seed)
    spark = sessions.spark
    star = Star(rng, rely=schema == "star-rely") if schema.startswith("star") else None
    db = f"fuzz{seed}"
    spark.sql(f"CREATE DATABASE {db}")
    spark.sql(f"USE {db}")
    history: List[str] = []

    def run(stmt: str) -> None:
        history.append(stmt)
        spark.sql(stmt)

    def fail(name: str, q: str, when: str, detail: str) -> None:
        failures.append(f"seed {seed} {when}, view {name}: {q}\nstatements:\n  " + "\n  ".join(history) +
                        f"\n{detail}")
        print(failures[-1], flush=True)
        views.pop(name, None)

    def check(name: str, q: str, when: str) -> None:
        try:
            assert_matches_query(spark, name, q)
        except AssertionError as e:
            fail(name, q, when, str(e))
        except Exception:  # noqa: BLE001 (the query or the view's read failed: which one?)
            try:
                spark.sql(q).collect()
            except Exception as e:  # noqa: BLE001 (Spark's own failure on the query: not spark-ivm's)
                reasons[f"the query fails in Spark: {str(e).splitlines()[0][:120]}"] += 1
                views.pop(name, None)
                return
            fail(name, q, when, traceback.format_exc(limit=3)[-1500:])

    views: Dict[str, Tuple[str, MaterializedView]] = {}
    try:
        if star:
            for stmt, column in STAR_TABLES:
                layout = layout_arg or rng.choice(list(LAYOUTS))
                stats[f"table {layout}"] += 1
                run(stmt + LAYOUTS[layout].format(p=column))
            for stmt in star.initial():
                run(stmt)
            for stmt in STAR_KEYS:
                run(stmt.format(rely=" RELY" if star.rely else ""))
        else:
            # the measures' type, per round: sums of DOUBLE and DECIMAL add in another order
            measure = rng.choice(["INT", "BIGINT", "DOUBLE", "DECIMAL(8,2)"])
            for table, columns in (("r", f"a INT, b INT, x {measure}"), ("s", f"b INT, c INT, y {measure}"),
                                   ("t", "c INT, d STRING")):
                layout = layout_arg or rng.choice(list(LAYOUTS))
                stats[f"table {layout}"] += 1
                run(f"CREATE TABLE {table} ({columns}) USING delta" +
                    LAYOUTS[layout].format(p=LAYOUT_COLUMN[table]))
            for table in ("r", "s", "t"):
                run(insert(rng, table, rng.randint(3, 8)))
        for i in range(n_queries):
            q = star_query(rng) if star else query(rng)
            if views and rng.random() < 0.15:
                q = over_view(rng, spark, rng.choice(sorted(views)))
            name = f"v{i}"
            kind = view_layout_arg or rng.choice(list(VIEW_LAYOUTS))
            try:
                laid_out = view_layout(rng, spark, q, kind)
            except Exception:  # noqa: BLE001 (Spark cannot analyze the query: CREATE says why below)
                laid_out = ""
            try:
                try:
                    spark.sql(f"CREATE MATERIALIZED VIEW {name}{laid_out} REFRESH POLICY INCREMENTAL AS {q}")
                    stats[f"view {kind if laid_out else 'none'}"] += 1
                except Exception as e:  # noqa: BLE001 (a column a read computes: the view without the layout)
                    if "IVM_INVALID_LAYOUT" not in str(e):
                        raise
                    spark.sql(f"CREATE MATERIALIZED VIEW {name} REFRESH POLICY INCREMENTAL AS {q}")
                    stats["view none"] += 1
            except Exception as e:  # a refusal is coverage, an internal error a failure
                text = next((line for line in str(e).splitlines() if line.strip()), "")[:200]
                stats["create refused"] += 1
                reasons[f"CREATE: {text}"] += 1
                if "INTERNAL" in text or "NullPointer" in text or "scala." in text:
                    failures.append(f"seed {seed} CREATE {q}\n{text}")
                    print(failures[-1], flush=True)
                continue
            views[name] = (q, MaterializedView.for_name(spark, name))
            stats["views"] += 1
            check(name, q, "after CREATE")
        for step in range(n_steps):
            for _ in range(rng.randint(1, 3)):
                run(star.change() if star else change(rng))
            if sessions.cold:
                sessions.restart(db)
                spark = sessions.spark
            for name, (q, _) in list(views.items()):
                if rng.random() < 0.25:  # left behind: its next refresh takes several commits
                    continue
                try:
                    report = MaterializedView.for_name(spark, name).refresh()
                except Exception:  # noqa: BLE001 (every failure is reported and the run goes on)
                    fail(name, q, f"step {step}, REFRESH", traceback.format_exc(limit=3)[-1500:])
                    continue
                stats[f"refresh {report.mode}"] += 1
                if report.mode == "full":
                    reasons[f"full: {(report.reason or '')[:160]}"] += 1
                check(name, q, f"step {step}")
    finally:
        sessions.spark.sql("USE default")
        sessions.spark.sql(f"DROP DATABASE {db} CASCADE")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--schema", choices=["plain", "star", "star-rely"], default="plain",
                        help="plain: three tables without keys; star: a fact table and dimensions with "
                             "declared keys the changes break now and then; star-rely: RELY keys kept valid")
    parser.add_argument("--master", default="local[2]",
                        help="local[N], or local-cluster[N,C,M] (executors in JVMs of their own)")
    parser.add_argument("--layout", choices=list(LAYOUTS),
                        help="every plain table laid out so (default: drawn per table and round)")
    parser.add_argument("--view-layout", choices=list(VIEW_LAYOUTS),
                        help="every view laid out so (default: drawn per view)")
    parser.add_argument("--cold", action="store_true",
                        help="refresh each step in a new application (a new JVM), as scheduled jobs do")
    args = parser.parse_args(argv)
    if args.cold and args.master.startswith("local-cluster"):
        parser.error("--cold runs on local masters only")
    sessions = Sessions(args.cold, args.master)
    stats: "Counter[str]" = Counter()
    reasons: "Counter[str]" = Counter()
    failures: List[str] = []
    t0 = time.time()
    for i in range(args.rounds):
        seed = args.seed + i
        run_round(sessions, args.schema, args.layout, seed, args.queries, args.steps, stats, reasons,
                  failures, args.view_layout)
        print(f"round {i + 1}/{args.rounds} (seed {seed}) done at {time.time() - t0:.0f} s: "
              f"{dict(stats)}, {len(failures)} failures", flush=True)
    print("\nwhy views were recomputed or refused:")
    for why, n in reasons.most_common():
        print(f"  {n:4d}  {why}")
    print(f"\n{len(failures)} failures")
    for f in failures:
        print("-" * 80 + "\n" + f)
    sessions.stop()
    return min(len(failures), 100)


if __name__ == "__main__":
    sys.exit(main())
