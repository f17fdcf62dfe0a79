"""Views with an access pattern (ACCESS BY): declared in SQL and Python, shown by DESCRIBE, SHOW
and EXPLAIN REFRESH with the class of Zhang 2022, refused when they name a column the view does
not return, and looked up by their inputs with the same answers as the query filtered on them,
over random inserts, deletes and updates."""

from __future__ import annotations

import random
from collections import Counter
from typing import Optional

import pytest
from ivm_testing import condition, multiset, refused, session_confs
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView
from spark_ivm.errors import InvalidAccessPatternError, IvmError

# Per customer (the input): its orders with the customer's nation. CQAP0: the fracture is
# hierarchical, free- and input-dominant, so update time and delay are constant.
ORDERS_OF = ("SELECT c.c_custkey AS cust, o.o_orderkey AS ord, c.c_nation AS nation "
             "FROM customer c JOIN orders o ON o.o_custkey = c.c_custkey")
# Per customer, its orders with their line counts: the order dominates the customer, so it is
# CQAP1 (Q(B | A) over S(A, B), T(B) in the thesis).
LINES_OF = ("SELECT o.o_custkey AS cust, o.o_orderkey AS ord, count(*) AS lines FROM orders o "
            "JOIN lineitem l ON l.l_orderkey = o.o_orderkey GROUP BY o.o_custkey, o.o_orderkey")
# The 4-cycle Q(A, C | B, D) (thesis Example 3.9): cyclic, its fracture two hierarchical paths.
FOUR_CYCLE = ("SELECT r.a, s.c, r.b, t.d FROM r JOIN s ON r.b = s.b JOIN t ON s.c = t.c "
              "JOIN u ON u.a = r.a AND u.d = t.d")


def _tables(spark: SparkSession) -> None:
    spark.sql("CREATE TABLE customer (c_custkey INT, c_nation STRING) USING delta")
    spark.sql("CREATE TABLE orders (o_orderkey INT, o_custkey INT) USING delta")
    spark.sql("CREATE TABLE lineitem (l_orderkey INT, l_qty INT) USING delta")
    spark.sql("INSERT INTO customer VALUES (1, 'FR'), (2, 'DE'), (3, 'FR'), (4, NULL)")
    spark.sql("INSERT INTO orders VALUES (10, 1), (11, 1), (12, 2), (13, 3), (14, NULL)")
    spark.sql("INSERT INTO lineitem VALUES (10, 1), (10, 2), (11, 5), (12, 1), (12, 1), (14, 3)")


def _access(mv: MaterializedView) -> dict:  # type: ignore[type-arg]
    return mv.describe()["access"]  # type: ignore[no-any-return]


def test_access_patterns_are_declared_classified_and_shown(spark: SparkSession, db: str) -> None:
    _tables(spark)
    spark.sql(f"CREATE MATERIALIZED VIEW orders_of ACCESS BY (cust) AS {ORDERS_OF}")
    lines = MaterializedView.create(spark, "lines_of", LINES_OF, access_by=["cust"])
    orders = MaterializedView.for_name(spark, "orders_of")
    assert orders.access_by == ["cust"] and lines.access_by == ["cust"]
    assert _access(orders)["class"] == "CQAP0" and (_access(orders)["w"], _access(orders)["delta"]) == (1, 0)
    assert _access(orders)["inputs"] == ["cust"] and _access(orders)["outputs"] == ["nation", "ord"]
    assert _access(lines)["class"] == "CQAP1" and _access(lines)["delta"] == 1
    shown = {r.viewName: r.accessBy for r in spark.sql("SHOW MATERIALIZED VIEWS").collect()}
    assert shown == {"orders_of": "cust", "lines_of": "cust"}
    info = orders.describe()["info"]
    assert info["Access pattern"] == "ACCESS BY (cust)" and info["Access class"].startswith("CQAP0")

    plan = lines.explain_refresh()
    for expected in ("Access pattern: ACCESS BY (cust)", "class: CQAP1", "input-dominant no (almost)",
                     "access-top variable order:", "view tree:", "V_ord(cust, ord)", "heavy/light view trees",
                     "ord->H", "ord->L"):
        assert expected in plan, plan
    assert "lookups: enumerate the view's CQAP0 view trees" in orders.explain_refresh()

    # A policy change that rebuilds the view keeps its access pattern.
    lines.refresh_policy = "FULL"
    assert lines.access_by == ["cust"] and lines.describe()["refresh_mode"] == "full"

    spark.sql("CREATE TABLE r (a INT, b INT) USING delta")
    for t, cols in (("s", "b INT, c INT"), ("t", "c INT, d INT"), ("u", "a INT, d INT")):
        spark.sql(f"CREATE TABLE {t} ({cols}) USING delta")
    spark.sql(f"CREATE MATERIALIZED VIEW cycle ACCESS BY (b, d) AS {FOUR_CYCLE}")
    cycle = _access(MaterializedView.for_name(spark, "cycle"))
    assert (cycle["class"], cycle["components"], cycle["w"], cycle["delta"]) == ("CQAP1", 2, 2, 1)

    # Outside conjunctive queries the view is created and looked up, but not classified.
    spark.sql("CREATE MATERIALIZED VIEW outer_v ACCESS BY (cust) AS SELECT c.c_custkey AS cust, o.o_orderkey "
              "FROM customer c LEFT JOIN orders o ON o.o_custkey = c.c_custkey")
    outer = _access(MaterializedView.for_name(spark, "outer_v"))
    assert outer["class"] is None and "Join" in outer["reason"]


def test_invalid_access_patterns_are_refused(spark: SparkSession, db: str) -> None:
    _tables(spark)
    error = refused(lambda: spark.sql(f"CREATE MATERIALIZED VIEW v ACCESS BY (nope) AS {ORDERS_OF}"))
    assert condition(error) == "IVM_INVALID_ACCESS_PATTERN" and "no column nope" in str(error)
    error = refused(lambda: spark.sql(f"CREATE MATERIALIZED VIEW v ACCESS BY (cust, CUST) AS {ORDERS_OF}"))
    assert "named twice" in str(error)
    with pytest.raises(InvalidAccessPatternError):
        MaterializedView.create(spark, "v", ORDERS_OF, access_by=["nope"])
    error = refused(lambda: spark.sql(f"CREATE MATERIALIZED VIEW v ACCESS (cust) AS {ORDERS_OF}"))
    assert "expected 'BY'" in str(error) or "BY" in str(error), str(error)
    assert not [r for r in spark.sql("SHOW MATERIALIZED VIEWS").collect()]
    spark.sql(f"CREATE MATERIALIZED VIEW v AS {ORDERS_OF}")
    with pytest.raises(IvmError, match="no access pattern"):
        MaterializedView.for_name(spark, "v").lookup(cust=1)


def test_lookups_answer_like_the_filtered_query(spark: SparkSession, db: str) -> None:
    """Each lookup returns the query's rows for those inputs, multiplicities included, before
    and after refreshes of random inserts, deletes and updates; lookup_many the same, at once."""
    _tables(spark)
    views = {"orders_of": ORDERS_OF, "lines_of": LINES_OF}
    for name, query in views.items():
        spark.sql(f"CREATE MATERIALIZED VIEW {name} ACCESS BY (cust) AS {query}")
    rnd = random.Random(11)
    for step in range(3):
        if step:
            key = 20 + step * 10
            spark.sql(f"INSERT INTO orders VALUES ({key}, {rnd.randint(1, 4)}), ({key + 1}, NULL)")
            spark.sql(f"INSERT INTO lineitem VALUES ({key}, 1), ({key}, 2), ({rnd.choice([10, 11, 12])}, 9)")
            spark.sql(f"DELETE FROM lineitem WHERE l_orderkey = {rnd.choice([10, 11, 12, 13])}")
            moved = rnd.choice([10, 12])
            spark.sql(f"UPDATE orders SET o_custkey = {rnd.randint(1, 4)} WHERE o_orderkey = {moved}")
            spark.sql(f"UPDATE customer SET c_nation = 'N{step}' WHERE c_custkey = {rnd.randint(1, 4)}")
        for name, query in views.items():
            mv = MaterializedView.for_name(spark, name)
            if step:
                assert mv.refresh().mode == "incremental"
            expected_all = spark.sql(query).collect()
            for cust in (1, None):
                expected = Counter(tuple(v for k, v in r.asDict().items() if k != "cust")
                                   for r in expected_all if r.cust == cust)
                got = multiset(mv.lookup(cust=cust))
                assert got == multiset(expected.elements()), (name, step, cust, got, expected)
            requests = spark.createDataFrame([(2,), (3,), (4,), (5,), (None,)], "cust INT")
            many = multiset(mv.lookup_many(requests).collect())
            assert many == multiset(r for r in expected_all if r.cust in (2, 3, 4, 5, None)), (name, step)
    with pytest.raises(IvmError, match="binds exactly its inputs"):
        MaterializedView.for_name(spark, "orders_of").lookup(ord=10)


def _rows_read(spark: SparkSession, sql: str) -> int:
    """Rows a query reads from storage (spark-ivm's read metrics, as its reports count them)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.sql.ivm.ReadMetrics  # type: ignore[union-attr]
    return int(metrics.workOf(spark._jsparkSession, sql)[2])


@pytest.mark.measures_cost
def test_lookups_and_refreshes_read_only_the_files_that_may_match(spark: SparkSession, db: str) -> None:
    """The backing table lies in files of a bounded size ordered by the first input (of a view
    with ACCESS BY) or the first key (of any other view): a lookup, and the apply of a change to
    a few keys, read the few files whose statistics admit the value, not the whole view."""
    spark.conf.set("spark.ivm.layout.rowsPerFile", "100")
    try:
        spark.sql("CREATE TABLE ev (k INT, g INT, v INT) USING delta")
        spark.sql("INSERT INTO ev SELECT CAST(id * 7919 % 200 AS INT), CAST(id % 3000 AS INT), "
                  "CAST(id AS INT) FROM range(3000)")
        views = {
            "by_k": "CREATE MATERIALIZED VIEW by_k ACCESS BY (k) AS SELECT k, g, v FROM ev",
            "per_g": "CREATE MATERIALIZED VIEW per_g AS "
                     "SELECT g, count(*) AS n, sum(v) AS s FROM ev GROUP BY g",
        }
        for sql in views.values():
            spark.sql(sql)
        backing = {v: MaterializedView.for_name(spark, v).describe()["backing_table"] for v in views}
        files = {v: spark.sql(f"DESCRIBE DETAIL {t}").first().numFiles  # type: ignore[union-attr]
                 for v, t in backing.items()}
        assert files["by_k"] >= 30 and files["per_g"] >= 30, files
        # A lookup by the input reads the file or two holding it, not the 3,000 rows.
        read = _rows_read(spark, "SELECT * FROM by_k WHERE k = 17")
        assert 0 < read <= 300, read
        by_k = MaterializedView.for_name(spark, "by_k")
        assert Counter(tuple(r) for r in by_k.lookup(k=17)) == Counter(
            (r.g, r.v) for r in spark.sql("SELECT g, v FROM ev WHERE k = 17").collect())
        # A change to one key: each refresh reads the change, and of the view only the files
        # that may hold the key.
        spark.sql("INSERT INTO ev VALUES (17, 5, -1)")
        # (per_g's write tasks each sort their groups into files: g = 5 is in a file per task.)
        for name, total in (("by_k", 3000), ("per_g", 3000)):
            report = MaterializedView.for_name(spark, name).refresh()
            assert report.mode == "incremental"
            assert report.rows_read < total // 2, (name, report.rows_read)
            assert multiset(spark.table(name).collect()) == multiset(spark.sql(
                views[name].split(" AS ", 1)[1]).collect())
        # Files stay bounded and narrow after the apply: the lookup still reads a file or two.
        assert 0 < _rows_read(spark, "SELECT * FROM by_k WHERE k = 17") <= 300
    finally:
        spark.conf.unset("spark.ivm.layout.rowsPerFile")


# Zhang 2022, section 4.1's example with bound variables added: Q(B, E | A) = R(A, B, C), S(A, B, D),
# T(A, E), C and D summed out. CQAP0 with two fracture components, R-S and T, joined by the input.
TREE_EXAMPLE = ("SELECT r.a, r.b, t.e FROM r JOIN s ON r.a = s.a AND r.b = s.b JOIN t ON t.a = r.a "
                "WHERE s.d IS DISTINCT FROM 0")


# Per input, its rows counted: each count is the multiplicity the trees hold for the row's tuple.
TREE_COUNTS = ("SELECT r.a, t.e, count(*) AS n FROM r JOIN s ON r.a = s.a AND r.b = s.b JOIN t ON t.a = r.a "
               "GROUP BY r.a, t.e")


def _expected(spark: SparkSession, query: str, inputs: dict, rows: Optional[list] = None) -> Counter:  # type: ignore[type-arg]
    """The query's rows for these inputs, without the input columns (`rows`: the query's, if read already)."""
    rows = spark.sql(query).collect() if rows is None else rows
    return Counter(tuple(v for k, v in r.asDict().items() if k not in inputs)
                   for r in rows if all(r[k] == v for k, v in inputs.items()))


def test_cqap0_lookups_read_view_trees_moved_by_each_refresh(spark: SparkSession, db: str) -> None:
    """A CQAP0 view is looked up in its view trees (Zhang 2022, chapter 4), moved forward by the
    tables' changes after each refresh: every lookup equals the query filtered on the inputs, as
    multisets, over random inserts, deletes and updates (duplicates, NULLs, a key's last row
    leaving). Other classes read the view (Ex. 2.1/2.2's Q(C | A) is not CQAP0: 6, then 12)."""
    spark.sql("CREATE TABLE r (a INT, b INT, c INT) USING delta")
    spark.sql("CREATE TABLE s (a INT, b INT, d INT) USING delta")
    spark.sql("CREATE TABLE t (a INT, e STRING) USING delta")
    spark.sql("INSERT INTO r VALUES (1, 1, 1), (1, 1, 2), (1, 2, 1), (2, 1, 1), (NULL, 1, 1), (3, 3, 3)")
    spark.sql("INSERT INTO s VALUES (1, 1, 5), (1, 1, 6), (1, 2, 0), (2, 1, 1), (3, 3, NULL)")
    spark.sql("INSERT INTO t VALUES (1, 'x'), (1, 'y'), (1, 'y'), (2, NULL), (3, 'z')")
    mv = MaterializedView.create(spark, "tree_view", TREE_EXAMPLE, access_by=["a"])
    spark.sql("CREATE TABLE rr (a STRING, b STRING) USING delta")
    spark.sql("CREATE TABLE ss (b STRING, c STRING) USING delta")
    spark.sql("INSERT INTO rr VALUES ('a1', 'b1'), ('a1', 'b2'), ('a1', 'b2')")
    spark.sql("INSERT INTO ss VALUES ('b1', 'c1'), ('b1', 'c1'), ('b2', 'c1'), ('b2', 'c1')")
    paths = MaterializedView.create(spark, "paths", "SELECT rr.a, ss.c FROM rr JOIN ss ON rr.b = ss.b",
                                    access_by=["a"])
    assert "heavy/light view tree" in paths.lookup_structure(), paths.lookup_structure()
    assert multiset(paths.lookup(a="a1")) == multiset([("c1",)] * 6)
    spark.sql("INSERT INTO rr VALUES ('a1', 'b2'), ('a1', 'b2'), ('a1', 'b2')")
    paths.refresh()
    assert multiset(paths.lookup(a="a1")) == multiset([("c1",)] * 12)

    rnd = random.Random(7)
    for step in range(4):
        if step:
            a, b = rnd.randint(1, 4), rnd.randint(1, 3)
            spark.sql(f"INSERT INTO r VALUES ({a}, {b}, {rnd.randint(1, 3)}), ({a}, {b}, 1)")
            spark.sql(f"INSERT INTO s VALUES ({a}, {b}, {rnd.choice([0, 1, 7])})")
            spark.sql(f"INSERT INTO t VALUES ({rnd.randint(1, 4)}, '{rnd.choice('xyz')}')")
            spark.sql(f"DELETE FROM r WHERE a = {rnd.randint(1, 4)} AND c = {rnd.randint(1, 3)}")
            spark.sql(f"UPDATE s SET b = {rnd.randint(1, 3)} WHERE a = {rnd.randint(1, 4)} AND d = 1")
            spark.sql(f"DELETE FROM t WHERE e = '{rnd.choice('xyz')}'")
            report = mv.refresh()
            assert report.mode == "incremental"
        rows = spark.sql(TREE_EXAMPLE).collect()
        for a in (1, 2, 3, 4, None):
            got = multiset(mv.lookup(a=a))
            assert got == multiset(_expected(spark, TREE_EXAMPLE, {"a": a}, rows).elements()), (step, a, got)
        structure = mv.lookup_structure()
        assert structure.startswith("view trees held"), structure
        if step:  # moved by the changed rows only: each changes one tuple of each atom over its table
            moved = int(structure.split("changes moved ")[1].split()[0])
            assert 0 < moved <= report.source_rows_changed, (structure, report)
        if step == 2:  # a COUNT(*) over all other columns is a tuple's multiplicity in the trees
            counts = MaterializedView.create(spark, "tree_counts", TREE_COUNTS, access_by=["a"])
        if step >= 2:
            if step > 2:
                counts.refresh()
            assert counts.lookup_structure().startswith("view trees held"), counts.lookup_structure()
            rows = spark.sql(TREE_COUNTS).collect()
            for a in (1, 2, 3, 4):
                want = _expected(spark, TREE_COUNTS, {"a": a}, rows)
                assert multiset(counts.lookup(a=a)) == multiset(want.elements()), (step, a)


def test_hierarchical_lookups_read_heavy_light_trees(spark: SparkSession, db: str) -> None:
    """Outside CQAP0, lookups read the heavy/light view trees of Zhang 2022, chapter 5: the
    4-cycle Q(A, C | B, D) at two eps (the threshold in between, and all keys light),
    each lookup equal to the query filtered on its inputs, as multisets, after refreshes of
    skewed random inserts, deletes and updates that move keys across the threshold."""
    spark.sql("CREATE TABLE r (a INT, b INT) USING delta")
    for t, cols in (("s", "b INT, c INT"), ("t", "c INT, d INT"), ("u", "a INT, d INT")):
        spark.sql(f"CREATE TABLE {t} ({cols}) USING delta")
    rnd = random.Random(5)

    def skewed() -> int:  # value 1 in half the rows: its keys turn heavy, then light again
        return 1 if rnd.random() < 0.5 else rnd.randint(1, 8)

    def insert(n: int) -> None:
        for t in "rstu":
            rows = ", ".join(f"({skewed()}, {rnd.randint(1, 8)})" for _ in range(n))
            spark.sql(f"INSERT INTO {t} VALUES {rows}")

    insert(12)
    # Key a = 1 of r heavy at eps = 1/2 (30 rows against a threshold near 13), light again at step 2.
    spark.sql("INSERT INTO r SELECT 1, id FROM range(1, 31)")
    spark.sql("INSERT INTO r VALUES (NULL, 1), (2, NULL)")
    # eps = 0 (every key heavy) is covered by the Scala suites; here the middle and the eager end.
    views = {eps: MaterializedView.create(spark, f"cycle_{i}", FOUR_CYCLE, access_by=["b", "d"],
                                          properties={"ivm.epsilon": str(eps)})
             for i, eps in enumerate((0.5, 1.0))}
    assert "heavy/light view trees at eps = 0.5" in views[0.5].explain_refresh()
    assert views[1.0].epsilon == 1.0
    # The dial moves: the trees are built again at the new eps on the next lookup.
    views[1.0].epsilon = 0.25
    assert views[1.0].epsilon == 0.25 and "at eps = 0.25" in views[1.0].explain_refresh()
    views[1.0].epsilon = 1.0
    for step in range(3):
        if step:
            insert(4 if step == 1 else 1)
            spark.sql(f"DELETE FROM r WHERE a = 1 AND b {'<= 3' if step == 1 else '> 3'}")
            spark.sql(f"UPDATE t SET d = {rnd.randint(1, 8)} WHERE c = {rnd.randint(1, 8)}")
            spark.sql(f"DELETE FROM u WHERE d = {rnd.randint(1, 8)}")
            for mv in views.values():
                assert mv.refresh().mode == "incremental"
        rows = spark.sql(FOUR_CYCLE).collect()
        requests = [(b, d) for b in (1, 2, 5, 9) for d in (1, 3, 8)]
        for eps, mv in views.items():
            for b, d in requests:
                got = multiset(mv.lookup(b=b, d=d))
                want = _expected(spark, FOUR_CYCLE, {"b": b, "d": d}, rows)
                assert got == multiset(want.elements()), (eps, step, b, d, got, want)
            structure = mv.lookup_structure()
            assert structure.startswith("view trees held") and "heavy/light" in structure, structure
            if step == 0:
                assert (", 0 heavy key(s)" in structure) == (eps == 1.0), structure
            if step == 2 and eps == 0.5:  # a = 1 went light: its tuples moved between the trees
                moved = int(structure.split("rebalancing so far: ")[1].split()[0])
                assert moved > 0, structure


# Triangle CQAPs (Zhang 2022, chapter 6): the triangles through a node (C1), and whether an edge
# closes one (C2), over one edge table joined three times.
TRIANGLES_AT = ("SELECT e1.src AS a, e1.dst AS b, e2.dst AS c FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
                "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src")


def test_triangle_lookups_read_chain_view_trees(spark: SparkSession, db: str) -> None:
    """A cyclic join with inputs is looked up in view trees over a chain variable order (the
    general trees of chapter 4): the triangles through a node, Q(B, C | A); the edges that close
    one, Q(C | A, B), whose fracture is hierarchical, in heavy/light trees. Each lookup equals the
    query filtered on its inputs after refreshes of random inserts and deletes (the view itself
    maintained by IVM^eps)."""
    spark.sql("CREATE TABLE edges (src INT, dst INT) USING delta")
    rnd = random.Random(9)

    def edges(n: int) -> str:
        pairs = {(rnd.randint(1, 7), rnd.randint(1, 7)) for _ in range(n)}
        return ", ".join(f"({a}, {b}), ({b}, {a})" for a, b in pairs if a != b)

    spark.sql(f"INSERT INTO edges VALUES {edges(14)}, (1, 2), (1, 2)")  # a duplicate edge
    through = MaterializedView.create(spark, "through", TRIANGLES_AT, access_by=["a"])
    closing = MaterializedView.create(spark, "closing", TRIANGLES_AT, access_by=["a", "b"])
    assert "chain variable order" in through.explain_refresh()
    for step in range(2):
        if step:
            spark.sql(f"INSERT INTO edges VALUES {edges(4)}")
            spark.sql(f"DELETE FROM edges WHERE src = {rnd.randint(1, 7)} AND dst % 2 = {step % 2}")
            through.refresh()
            closing.refresh()
        rows = spark.sql(TRIANGLES_AT).collect()
        for a in range(1, 9):
            want = _expected(spark, TRIANGLES_AT, {"a": a}, rows)
            assert multiset(through.lookup(a=a)) == multiset(want.elements()), (step, a)
            for b in (1, 2, 5):
                want = _expected(spark, TRIANGLES_AT, {"a": a, "b": b}, rows)
                assert multiset(closing.lookup(a=a, b=b)) == multiset(want.elements()), (step, a, b)
        # Q(C | A, B) is not cyclic once fractured (R(A, B) alone; S, T joined on C): heavy/light trees.
        assert "view trees of chain orders" in through.lookup_structure(), through.lookup_structure()
        assert "heavy/light" in closing.lookup_structure(), closing.lookup_structure()


def test_triangle_listing_rows_are_enumerated_from_ivm_eps_trees(spark: SparkSession, db: str) -> None:
    """A view listing triangles, without ACCESS BY: ``rows()`` enumerates IVM^eps's five trees
    (Kara et al. 2020, section 4), moved forward by each refresh, and lists the query's rows
    with their multiplicities, as the hub node 1 turns heavy and light again; ``rows(a=...)``
    still reads the view's rows."""
    spark.sql("CREATE TABLE edges (src INT, dst INT) USING delta")
    rnd = random.Random(4)
    pairs = {(rnd.randint(2, 9), rnd.randint(2, 9)) for _ in range(16)}
    spark.sql("INSERT INTO edges VALUES " + ", ".join(f"({a}, {b}), ({b}, {a})" for a, b in pairs if a != b))
    mv = MaterializedView.create(spark, "listing", TRIANGLES_AT, properties={"ivm.epsilon": "0.25"})
    assert "Enumeration of rows(): IVM^eps triangle view trees at eps = 0.25" in mv.explain_refresh()
    for step in range(3):
        if step == 1:  # node 1 becomes a hub, with a duplicate edge
            hub = ", ".join(f"(1, {b}), ({b}, 1)" for b in range(2, 10))
            spark.sql(f"INSERT INTO edges VALUES {hub}, (1, 2)")
        if step == 2:
            spark.sql("DELETE FROM edges WHERE src = 1 AND dst > 4")
        mv.refresh()
        want = multiset(spark.sql(TRIANGLES_AT).collect())
        assert multiset(mv.rows()) == want, step
        structure = mv.lookup_structure()
        assert "5 IVM^eps triangle view trees at eps = 0.25" in structure, structure
        if step == 1:
            assert ", 0 heavy key(s)" not in structure, structure
        assert multiset(mv.rows(a=1)) == Counter({r: n for r, n in want.items() if r[0] == 1})
    assert "no view trees: the view has no ACCESS BY" in MaterializedView.create(
        spark, "paths", "SELECT e1.src AS a, e2.dst AS c FROM edges e1 JOIN edges e2 ON e1.dst = e2.src"
    ).lookup_structure()


def test_a_lookup_reads_one_refresh_while_another_commits(spark: SparkSession, db: str) -> None:
    """A lookup whose answers are still being read keeps the refresh it started from; a lookup
    started meanwhile answers from that refresh too, and the next one after both sees the new one."""
    _tables(spark)
    spark.sql("INSERT INTO orders SELECT 100 + id, 1 FROM range(200)")
    mv = MaterializedView.create(spark, "orders_of", ORDERS_OF, access_by=["cust"])
    before = _expected(spark, ORDERS_OF, {"cust": 1})
    reading = mv.lookup(cust=1)
    first = [next(reading)]  # the first batch is read, the rest is not
    spark.sql("DELETE FROM orders WHERE o_orderkey >= 150")
    spark.sql("UPDATE customer SET c_nation = 'IT' WHERE c_custkey = 1")
    mv.refresh()
    assert multiset(mv.lookup(cust=1)) == multiset(before.elements())  # still the refresh being read
    assert multiset(first + list(reading)) == multiset(before.elements())
    after = _expected(spark, ORDERS_OF, {"cust": 1})
    assert after != before and multiset(mv.lookup(cust=1)) == multiset(after.elements())


def test_trees_the_driver_budget_cannot_hold_are_not_built(spark: SparkSession, db: str) -> None:
    """View trees are state on the driver: a view whose atoms hold more tuples than half the
    driver's budget (spark.ivm.state.driverMaxBytes, about 100 bytes a tuple) has none, and its
    lookups read its rows with the same answers; under the default budget it has trees."""
    _tables(spark)
    with session_confs(spark, {"spark.ivm.state.driverMaxBytes": "1000"}):
        small = MaterializedView.create(spark, "orders_of_small", ORDERS_OF, access_by=["cust"])
        structure = small.lookup_structure()
        assert not structure.startswith("view trees held"), structure
        assert "spark.ivm.state.driverMaxBytes" in structure, structure
        rows = spark.sql(ORDERS_OF).collect()
        for cust in (1, 2, 4, None):
            want = _expected(spark, ORDERS_OF, {"cust": cust}, rows)
            assert multiset(small.lookup(cust=cust)) == multiset(want.elements()), cust
        spark.sql("INSERT INTO orders VALUES (15, 2)")
        small.refresh()
        assert multiset(small.lookup(cust=2)) == multiset([(12, "DE"), (15, "DE")])
        assert not small.lookup_structure().startswith("view trees held")
    # Refused under one budget, built once the budget changes.
    assert small.lookup_structure().startswith("view trees held"), small.lookup_structure()
    assert multiset(small.lookup(cust=2)) == multiset([(12, "DE"), (15, "DE")])
