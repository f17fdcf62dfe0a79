"""FK-pruned delta plans (Svingos et al. 2023, section 3) and key probing.

Every scenario keeps two views of the same query: one refreshed with FK pruning and key
probing, one with the generic delta rule. After every refresh both must equal recomputation,
counts included; equal states after equal starts mean the pruned delta equals the generic one.
The scenarios are those of section 6 of Svingos et al. 2023, negative ones included.
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Dict, List, Sequence

import pytest
from ivm_testing import assert_matches_query, condition, refused
from ivm_testing import session_confs as confs
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, RefreshReport, add_foreign_key, constraints

PRUNING = "spark.ivm.fkPruning.enabled"
PROBING = "spark.ivm.keyProbing.enabled"
MIN_BYTES = "spark.ivm.keyProbing.minTableBytes"

STAR = [
    "CREATE TABLE region (rk INT, rname STRING) USING delta",
    "CREATE TABLE dim_a (ak INT, rk INT, name STRING) USING delta",
    "CREATE TABLE dim_b (bk1 INT, bk2 STRING, cat STRING) USING delta",
    "CREATE TABLE fact (id INT, ak INT, bk1 INT, bk2 STRING, v DOUBLE) USING delta",
    "INSERT INTO region VALUES (1, 'north'), (2, 'south'), (3, 'east')",
    "INSERT INTO dim_a VALUES (1, 1, 'a1'), (2, 1, 'a2'), (3, 2, 'a3'), (4, 3, 'a4'), (5, NULL, 'a5')",
    "INSERT INTO dim_b VALUES (1, 'x', 'c1'), (1, 'y', 'c2'), (2, 'x', 'c1'), (3, 'z', 'c3')",
    "INSERT INTO fact VALUES (1, 1, 1, 'x', 1.0), (2, 1, 1, 'y', 2.0), (3, 2, 2, 'x', 3.0), "
    "(4, 3, 3, 'z', 4.0), (5, NULL, 1, 'x', 5.0), (6, 4, NULL, NULL, 6.0), (7, 2, 1, 'x', 7.0)",
    "ALTER TABLE region ADD CONSTRAINT region_pk PRIMARY KEY (rk)",
    "ALTER TABLE dim_a ADD CONSTRAINT dim_a_pk PRIMARY KEY (ak)",
    "ALTER TABLE dim_a ADD CONSTRAINT dim_a_region FOREIGN KEY (rk) REFERENCES region (rk)",
    "ALTER TABLE dim_b ADD CONSTRAINT dim_b_pk PRIMARY KEY (bk1, bk2)",
    "ALTER TABLE fact ADD CONSTRAINT fact_a FOREIGN KEY (ak) REFERENCES dim_a (ak)",
    "ALTER TABLE fact ADD CONSTRAINT fact_b FOREIGN KEY (bk1, bk2) REFERENCES dim_b (bk1, bk2)",
]

# A snowflake with a composite key: fact -> dim_a -> region, fact -> dim_b.
SNOWFLAKE = (
    "SELECT r.rname, b.cat, count(*) AS n, sum(f.v) AS sv FROM fact f "
    "JOIN dim_a a ON f.ak = a.ak JOIN region r ON a.rk = r.rk "
    "JOIN dim_b b ON f.bk1 = b.bk1 AND f.bk2 = b.bk2 GROUP BY r.rname, b.cat"
)
STAR_ROWS = "SELECT f.id, a.name, f.v FROM fact f JOIN dim_a a ON f.ak = a.ak WHERE f.v > 1"


class Twins:
    """The same query as two views: FK-pruned (and probed), and generic (left out where other
    tests already compare the two, to keep the suite fast)."""

    def __init__(self, spark: SparkSession, query: str, name: str = "mv", probe_all: bool = False,
                 generic: bool = True) -> None:
        self.spark, self.query, self.probe_all = spark, query, probe_all
        self.fk = MaterializedView.create(spark, f"{name}_fk", query)
        self.generic = MaterializedView.create(spark, f"{name}_generic", query) if generic else None

    def refresh(self) -> RefreshReport:
        """Refreshes both and checks both; returns the FK-pruned refresh's report."""
        if self.generic is not None:
            with confs(self.spark, {PRUNING: "false", PROBING: "false"}):
                generic = self.generic.refresh()
            assert generic.mode in ("incremental", "noop"), generic
            assert_matches_query(self.spark, self.generic.name, self.query)
        # Probe every table, however small, so that the tests exercise probing (it costs jobs).
        with confs(self.spark, {PROBING: "true", MIN_BYTES: "0" if self.probe_all else str(1 << 40)}):
            report = self.fk.refresh()
        assert report.mode in ("incremental", "noop"), report
        assert_matches_query(self.spark, self.fk.name, self.query)
        return report


def run(spark: SparkSession, statements: Sequence[str]) -> None:
    for s in statements:
        spark.sql(s)


def notes(report: RefreshReport) -> str:
    return "\n".join(report.plan_notes)


@pytest.fixture()
def star(spark: SparkSession, db: str) -> str:
    run(spark, STAR)
    return db


def test_star_is_one_branch_and_fact_changes_need_no_guard(spark: SparkSession, star: str) -> None:
    views = [Twins(spark, SNOWFLAKE, "snow", probe_all=True), Twins(spark, STAR_ROWS, "rows", probe_all=True)]
    # Scenario 3 and 7: fact inserts, deletes, a measure update and an FK moved to another key.
    run(spark, ["INSERT INTO fact VALUES (8, 3, 2, 'x', 8.0), (9, 1, 3, 'z', 9.0)",
                "DELETE FROM fact WHERE id = 3",
                "UPDATE fact SET v = v + 10, ak = 4 WHERE id = 1"])
    for t in views:
        r = t.refresh()
        assert len(r.branches) == 1 and r.branches[0].startswith("D(f)"), r.branches
        assert "PreDel" in r.branches[0] and "FK-Guard fails" not in notes(r)
    run(spark, ["INSERT INTO fact VALUES (10, 2, 1, 'y', 1.0)"])
    with confs(spark, {PROBING: "true", MIN_BYTES: "0"}):
        plan = views[0].fk.explain_refresh()
    for expected in ["FK graph: f -> a (fact_a)", "a -> r (dim_a_region)", "f -> b (fact_b)",
                     "component rooted at f", "1. D(f) x PreDel(", "probe PreDel(a) on ak"]:
        assert expected in plan, plan


def test_new_and_deleted_dimension_keys(spark: SparkSession, star: str) -> None:
    t = Twins(spark, SNOWFLAKE, probe_all=True)
    # Scenario 4: a new dimension key and fact rows referencing it (Ins x Ins).
    run(spark, ["INSERT INTO region VALUES (4, 'west')", "INSERT INTO dim_a VALUES (6, 4, 'a6')",
                "INSERT INTO dim_b VALUES (4, 'w', 'c4')",
                "INSERT INTO fact VALUES (10, 6, 4, 'w', 10.0), (11, 6, 1, 'x', 11.0)"])
    r = t.refresh()
    assert len(r.branches) == 1 and "FK-Guard and integrity hold" in notes(r), notes(r)
    # Scenario 5: cascading delete of a dimension key and its fact rows (Del x Del).
    run(spark, ["DELETE FROM fact WHERE ak = 2", "DELETE FROM dim_a WHERE ak = 2"])
    r = t.refresh()
    assert len(r.branches) == 1, r.branches
    # Scenario 6: unreferenced dimension rows come and go: nothing changes in the view.
    run(spark, ["INSERT INTO dim_a VALUES (7, 1, 'a7')", "DELETE FROM region WHERE rk = 3 AND false",
                "INSERT INTO dim_b VALUES (9, 'q', 'c9')", "DELETE FROM dim_b WHERE bk1 = 9"])
    r = t.refresh()
    assert r.branches == [] and r.view_rows_changed == 0, r
    # Scenario 10: a dimension key renamed 4 -> 40 with its fact rows cascaded.
    run(spark, ["INSERT INTO dim_a SELECT 40, rk, name FROM dim_a WHERE ak = 4",
                "UPDATE fact SET ak = 40 WHERE ak = 4", "DELETE FROM dim_a WHERE ak = 4"])
    r = t.refresh()
    assert len(r.branches) == 1 and "FK-Guard fails" not in notes(r), notes(r)
    # Scenario 11: a fact row inserted then deleted in the interval, and its dimension row deleted.
    run(spark, ["INSERT INTO fact VALUES (12, 5, 2, 'x', 1.0)", "DELETE FROM fact WHERE id = 12",
                "DELETE FROM fact WHERE ak = 5", "DELETE FROM dim_a WHERE ak = 5"])
    t.refresh()


def test_guard_fails_on_dimension_updates(spark: SparkSession, star: str) -> None:
    t = Twins(spark, SNOWFLAKE)
    # Scenario 8: a non-key update of a dimension row whose fact rows do not change.
    run(spark, ["UPDATE dim_b SET cat = 'c9' WHERE bk1 = 1 AND bk2 = 'x'",
                "INSERT INTO fact VALUES (21, 1, 1, 'x', 1.0)"])
    r = t.refresh()
    assert "FK-Guard fails on b" in notes(r), notes(r)
    # Only that dimension loses its pruning (dynamic variant): region/dim_a stay pruned.
    assert r.branches == ["D(f) x PreDel(a) x PreDel(r) x Post(b)", "D(b) x Pre(f) x Pre(a) x Pre(r)"], \
        r.branches
    # Scenario 9: a key deleted, then inserted again by a later transaction of the interval. The
    # key is one column and region is read once: its update is applied as a step of its own,
    # after the other changes, and the rest stays pruned.
    run(spark, ["DELETE FROM region WHERE rk = 2", "INSERT INTO region VALUES (2, 'south2')",
                "INSERT INTO fact VALUES (22, 2, 2, 'x', 3.0)"])
    r = t.refresh()
    assert "1 updated keys of" in notes(r) and "FK-Guard fails" not in notes(r), notes(r)
    assert r.branches[0] == "D(f) x PreDel(a) x PreDel(b) x PreDel(r)", r.branches
    assert len(r.branches) == 2 and r.branches[1].startswith("D(r updates) x Post(") \
        and "Pre(" not in r.branches[1], r.branches
    # The next refresh, with fact changes only, is pruned again.
    run(spark, ["INSERT INTO fact VALUES (20, 3, 2, 'x', 2.0)"])
    r = t.refresh()
    assert len(r.branches) == 1 and "fails" not in notes(r), notes(r)


def test_integrity_violations_fall_back(spark: SparkSession, star: str) -> None:
    t = Twins(spark, SNOWFLAKE, probe_all=True)
    # Scenario 12a: a dimension row deleted while its fact rows stay.
    run(spark, ["DELETE FROM dim_a WHERE ak = 3"])
    r = t.refresh()
    assert "integrity fails on f -> a" in notes(r), notes(r)
    # Scenario 12b: orphan fact rows, then the missing dimension row arrives late.
    run(spark, ["INSERT INTO fact VALUES (30, 9, 1, 'x', 3.0), (31, 9, 2, 'x', 4.0)"])
    t.refresh()
    run(spark, ["INSERT INTO dim_a VALUES (9, 2, 'late')"])
    r = t.refresh()
    assert "integrity fails on f -> a" in notes(r), notes(r)
    # NULL foreign keys reference nothing, and moving one to NULL and back is a fact change.
    run(spark, ["UPDATE fact SET ak = NULL WHERE id = 1", "UPDATE fact SET ak = 1 WHERE id = 5"])
    r = t.refresh()
    assert len(r.branches) == 1, r.branches


def test_two_rooted_components_and_a_plain_join(spark: SparkSession, db: str) -> None:
    run(spark, STAR + [
        "CREATE TABLE returns (rid INT, fid INT, bk1 INT, bk2 STRING, amt DOUBLE) USING delta",
        "INSERT INTO returns VALUES (1, 1, 1, 'x', 0.5), (2, 3, 2, 'x', 1.5), (3, 3, 1, 'y', 2.5)",
        "ALTER TABLE returns ADD CONSTRAINT returns_b FOREIGN KEY (bk1, bk2) REFERENCES dim_b (bk1, bk2)",
    ])
    # fact -> dim_a and returns -> dim_b, joined by the plain predicate f.id = ret.fid
    # (Svingos et al. 2023 Fig. 3a): two components, two branches.
    q = ("SELECT a.name, b.cat, sum(ret.amt) AS amt, count(*) AS n FROM fact f "
         "JOIN dim_a a ON f.ak = a.ak JOIN returns ret ON f.id = ret.fid "
         "JOIN dim_b b ON ret.bk1 = b.bk1 AND ret.bk2 = b.bk2 GROUP BY a.name, b.cat")
    t = Twins(spark, q, generic=False)
    run(spark, ["INSERT INTO fact VALUES (8, 3, 2, 'x', 8.0)",
                "INSERT INTO returns VALUES (4, 8, 2, 'x', 3.0)",
                "DELETE FROM returns WHERE rid = 1"])
    r = t.refresh()
    assert "component rooted at f" in notes(r) and "component rooted at ret" in notes(r), notes(r)
    assert r.branches == ["D(f) x PreDel(a) x Post(ret) x Post(b)", "D(ret) x PreDel(b) x Pre(f) x Pre(a)"], \
        r.branches


def test_tpch_q5_and_q7_shapes(spark: SparkSession, db: str) -> None:
    run(spark, [
        "CREATE TABLE nation (n_nationkey INT, n_name STRING) USING delta",
        "CREATE TABLE customer (c_custkey INT, c_nationkey INT) USING delta",
        "CREATE TABLE supplier (s_suppkey INT, s_nationkey INT) USING delta",
        "CREATE TABLE orders (o_orderkey INT, o_custkey INT) USING delta",
        "CREATE TABLE lineitem (l_orderkey INT, l_suppkey INT, l_price DOUBLE) USING delta",
        "INSERT INTO nation VALUES (1, 'FR'), (2, 'DE'), (3, 'JP')",
        "INSERT INTO customer VALUES (1, 1), (2, 2), (3, 1), (4, 3)",
        "INSERT INTO supplier VALUES (1, 1), (2, 2), (3, 3)",
        "INSERT INTO orders VALUES (1, 1), (2, 2), (3, 3), (4, 4)",
        "INSERT INTO lineitem VALUES (1, 1, 10.0), (1, 2, 20.0), (2, 2, 30.0), (3, 1, 40.0), (4, 3, 50.0)",
        "ALTER TABLE nation ADD CONSTRAINT nation_pk PRIMARY KEY (n_nationkey)",
        "ALTER TABLE customer ADD CONSTRAINT customer_pk PRIMARY KEY (c_custkey)",
        "ALTER TABLE customer ADD CONSTRAINT customer_n FOREIGN KEY (c_nationkey) "
        "REFERENCES nation (n_nationkey)",
        "ALTER TABLE supplier ADD CONSTRAINT supplier_pk PRIMARY KEY (s_suppkey)",
        "ALTER TABLE supplier ADD CONSTRAINT supplier_n FOREIGN KEY (s_nationkey) "
        "REFERENCES nation (n_nationkey)",
        "ALTER TABLE orders ADD CONSTRAINT orders_pk PRIMARY KEY (o_orderkey)",
        "ALTER TABLE orders ADD CONSTRAINT orders_c FOREIGN KEY (o_custkey) "
        "REFERENCES customer (c_custkey)",
        "ALTER TABLE lineitem ADD CONSTRAINT lineitem_o FOREIGN KEY (l_orderkey) "
        "REFERENCES orders (o_orderkey)",
        "ALTER TABLE lineitem ADD CONSTRAINT lineitem_s FOREIGN KEY (l_suppkey) "
        "REFERENCES supplier (s_suppkey)",
    ])
    # Q5: nation is shared by customer and supplier (a DAG that is not a tree).
    q5 = ("SELECT n_name, sum(l_price) AS revenue FROM customer, orders, lineitem, supplier, nation "
          "WHERE c_custkey = o_custkey AND l_orderkey = o_orderkey AND l_suppkey = s_suppkey "
          "AND c_nationkey = s_nationkey AND s_nationkey = n_nationkey GROUP BY n_name")
    # Q7: two copies of nation.
    q7 = ("SELECT n1.n_name AS supp_nation, n2.n_name AS cust_nation, sum(l_price) AS revenue "
          "FROM supplier, lineitem, orders, customer, nation n1, nation n2 "
          "WHERE s_suppkey = l_suppkey AND o_orderkey = l_orderkey AND c_custkey = o_custkey "
          "AND s_nationkey = n1.n_nationkey AND c_nationkey = n2.n_nationkey "
          "AND n1.n_name IN ('FR', 'DE') GROUP BY n1.n_name, n2.n_name")
    views = [Twins(spark, q5, "q5"), Twins(spark, q7, "q7", generic=False)]
    steps: List[List[str]] = [
        ["INSERT INTO orders VALUES (5, 3)", "INSERT INTO lineitem VALUES (5, 1, 60.0), (5, 3, 70.0)"],
        ["DELETE FROM lineitem WHERE l_orderkey = 2", "DELETE FROM orders WHERE o_orderkey = 2"],
        ["INSERT INTO customer VALUES (5, 2)", "INSERT INTO orders VALUES (6, 5)",
         "INSERT INTO lineitem VALUES (6, 2, 80.0)",
         "UPDATE nation SET n_name = 'DE2' WHERE n_nationkey = 2"],
    ]
    for step in steps:
        run(spark, step)
        for t in views:
            r = t.refresh()
            if step is steps[0]:
                assert len(r.branches) == 1, (t.query, r.branches, notes(r))


def test_self_referencing_foreign_key(spark: SparkSession, db: str) -> None:
    run(spark, [
        "CREATE TABLE emp (id INT, boss INT, pay INT) USING delta",
        "INSERT INTO emp VALUES (1, NULL, 100), (2, 1, 50), (3, 1, 40), (4, 2, 10)",
        "ALTER TABLE emp ADD CONSTRAINT emp_pk PRIMARY KEY (id)",
        "ALTER TABLE emp ADD CONSTRAINT emp_boss FOREIGN KEY (boss) REFERENCES emp (id)",
    ])
    t = Twins(spark, "SELECT b.id, count(*) AS reports, sum(e.pay) AS pay FROM emp e "
                     "JOIN emp b ON e.boss = b.id GROUP BY b.id", generic=False)
    run(spark, ["INSERT INTO emp VALUES (5, 3, 20), (6, 5, 5)"])
    r = t.refresh()
    assert "component rooted at e" in notes(r), notes(r)
    run(spark, ["DELETE FROM emp WHERE id = 6", "UPDATE emp SET pay = pay + 1 WHERE id = 1"])
    t.refresh()


def test_integrity_from_counts_per_foreign_key(spark: SparkSession, star: str) -> None:
    """With the fact table counted per foreign key (no size threshold), the integrity check
    reads the counts of the changed dimension keys (Wang & Yi 2020's reference counts) instead
    of the fact table: from storage (written at CREATE) on the first check, from memory from the
    second on; and finds what the scan finds: scenario 12a (a deleted dimension row with fact
    rows left), 12b (a late-arriving dimension row), and integrity that holds."""
    # Counted by the refresh that asks (test_state covers counting between refreshes).
    settings = {"spark.ivm.keyCounts.minTableBytes": "0", "spark.ivm.state.buildInBackground": "false"}
    with confs(spark, settings):
        t = Twins(spark, SNOWFLAKE, generic=False)
        run(spark, ["DELETE FROM dim_a WHERE ak = 3"])
        r = t.refresh()
        assert "integrity fails on f -> a" in notes(r), notes(r)
        assert "integrity of fact_a from the counts of" in notes(r), notes(r)
        run(spark, ["INSERT INTO fact VALUES (30, 9, 1, 'x', 3.0), (31, 9, 2, 'x', 4.0)"])
        t.refresh()
        run(spark, ["INSERT INTO dim_a VALUES (9, 2, 'late')"])
        r = t.refresh()
        assert "integrity fails on f -> a" in notes(r), notes(r)
        assert "integrity of fact_a from the counts of" in notes(r), notes(r)
        assert ".fact rows per ak" in notes(r), notes(r)
        # A new dimension key with its first fact rows, and one deleted with its last: both hold.
        run(spark, ["INSERT INTO dim_a VALUES (10, 1, 'new')",
                    "INSERT INTO fact VALUES (32, 10, 1, 'x', 1.0)",
                    "DELETE FROM fact WHERE ak = 4", "DELETE FROM dim_a WHERE ak = 4"])
        r = t.refresh()
        assert len(r.branches) == 1 and "fails" not in notes(r), notes(r)
        assert "integrity of fact_a from the counts of" in notes(r), notes(r)
        assert ".fact rows per ak" in notes(r), notes(r)


def state_dir(spark: SparkSession, view: MaterializedView) -> str:
    """Where a view keeps state in storage: a hidden directory of its backing table's."""
    backing = spark.sql(f"DESCRIBE MATERIALIZED VIEW {view.name}").where("col_name = 'Backing table'").first()
    location = spark.sql(f"DESCRIBE DETAIL {backing[1]}").first()["location"]
    return location.replace("file:", "", 1) + "/_ivm_state"


def stored_counts(spark: SparkSession, view: MaterializedView) -> List[str]:
    """The files of the counts a view keeps in storage."""
    root = os.path.join(state_dir(spark, view), "keycounts")
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
                  if not f.startswith((".", "_")))


def test_integrity_from_stored_counts_in_new_applications(spark: SparkSession, star: str) -> None:
    """Each refresh as the first of a new application (the counts kept in memory dropped
    before it): the integrity checks read the counts of their changed keys from storage,
    written at CREATE and moved on by every refresh, through random changes that keep or break
    integrity; a refresh by recomputation, and counts removed from storage, leave the next
    refresh to scan, never to read counts of another version."""
    rng = random.Random(5)
    registry = spark._jvm.io.sparkivm.state.StateRegistry  # type: ignore[union-attr]
    with confs(spark, {"spark.ivm.keyCounts.minTableBytes": "0"}):
        t = Twins(spark, SNOWFLAKE, generic=False)
        assert any("/base-" in f for f in stored_counts(spark, t.fk)), stored_counts(spark, t.fk)
        counted = 0
        for i in range(6):
            k = 200 + i
            kind = ["cascade", "orphan", "late", "new", "cascade", "facts"][i]
            aks = [r[0] for r in spark.sql("SELECT ak FROM dim_a").collect()]
            if kind == "cascade":
                victim = rng.choice(aks)
                run(spark, [f"DELETE FROM fact WHERE ak = {victim}",
                            f"DELETE FROM dim_a WHERE ak = {victim}"])
            elif kind == "orphan":  # scenario 12a: fact rows left behind
                run(spark, [f"DELETE FROM dim_a WHERE ak = {rng.choice(aks)}"])
            elif kind == "late":  # scenario 12b: fact rows before their dimension row
                run(spark, [f"INSERT INTO fact VALUES ({k}, {k}, 1, 'x', 2.0)"])
                t.refresh()
                run(spark, [f"INSERT INTO dim_a VALUES ({k}, 1, 'late')"])
            elif kind == "new":
                run(spark, [f"INSERT INTO dim_a VALUES ({k}, 2, 'n')",
                            f"INSERT INTO fact VALUES ({k}, {k}, 2, 'x', 1.5)"])
            else:
                run(spark, [f"INSERT INTO fact VALUES ({k}, {rng.choice(aks)}, 3, 'z', 0.5)",
                            f"UPDATE fact SET v = v + 1 WHERE id % 3 = {i % 3}"])
            registry.clear()
            r = t.refresh()  # equal to its query, or the test fails
            counted += "integrity of fact_a from the counts of" in notes(r)
            if kind == "orphan":
                assert "integrity fails on f -> a" in notes(r), notes(r)
        assert counted >= 4, counted
        assert any("/change-" in f for f in stored_counts(spark, t.fk)), stored_counts(spark, t.fk)

        # A refresh by recomputation consumes versions without moving the counts on.
        run(spark, ["INSERT INTO dim_a VALUES (300, 1, 'x')",
                    "INSERT INTO fact VALUES (300, 300, 1, 'x', 1.0)"])
        spark.sql(f"REFRESH MATERIALIZED VIEW {t.fk.name} FULL")
        run(spark, ["DELETE FROM dim_a WHERE ak = 300"])
        registry.clear()
        r = t.refresh()
        assert "integrity fails on f -> a" in notes(r) and "from the counts of" not in notes(r), notes(r)

        # Counts removed from storage: the refresh scans.
        shutil.rmtree(state_dir(spark, t.fk))
        run(spark, ["DELETE FROM fact WHERE ak = 1", "DELETE FROM dim_a WHERE ak = 1"])
        registry.clear()
        r = t.refresh()
        assert "from the counts of" not in notes(r), notes(r)


@pytest.mark.parametrize("kept", [False, True])
def test_random_changes_with_and_without_integrity(spark: SparkSession, star: str, kept: bool) -> None:
    """Random inserts, deletes and updates at every level, integrity kept or broken at random.
    With `kept`, every dimension is read as a large one is (spark.ivm.sharedReads.minTableBytes
    at 0): its rows of the keys the change references come from the rows kept in memory by its
    primary key from the second refresh that reads it on, moved forward by each change."""
    rng = random.Random(7 if not kept else 11)
    t = Twins(spark, SNOWFLAKE)
    r2 = Twins(spark, STAR_ROWS, "rows", generic=False)
    next_id = [100]

    def keys(table: str, col: str) -> List[int]:
        return [row[0] for row in spark.sql(f"SELECT {col} FROM {table} WHERE {col} IS NOT NULL").collect()]

    def step() -> str:
        kind = rng.choice(["fact_ins", "fact_del", "fact_upd", "dim_ins", "dim_del_cascade",
                           "dim_upd", "dim_del_orphan", "region_ins", "fact_orphan"])
        next_id[0] += 1
        i = next_id[0]
        aks, bks = keys("dim_a", "ak"), [1, 2, 3]
        if kind == "fact_ins" and aks:
            return f"INSERT INTO fact VALUES ({i}, {rng.choice(aks)}, {rng.choice(bks)}, 'x', {i % 7}.5)"
        if kind == "fact_del":
            return f"DELETE FROM fact WHERE id % 5 = {rng.randrange(5)} AND v > {rng.randrange(8)}"
        if kind == "fact_upd" and aks:
            return f"UPDATE fact SET ak = {rng.choice(aks)}, v = v + 1 WHERE id % 4 = {rng.randrange(4)}"
        if kind == "dim_ins":
            return f"INSERT INTO dim_a VALUES ({i}, {rng.choice([1, 2, 3])}, 'n{i}')"
        if kind == "dim_del_cascade" and aks:
            k = rng.choice(aks)
            spark.sql(f"DELETE FROM fact WHERE ak = {k}")
            return f"DELETE FROM dim_a WHERE ak = {k}"
        if kind == "dim_upd" and aks:
            return f"UPDATE dim_a SET name = concat(name, '+') WHERE ak = {rng.choice(aks)}"
        if kind == "dim_del_orphan" and aks:
            return f"DELETE FROM dim_a WHERE ak = {rng.choice(aks)}"
        if kind == "region_ins":
            return f"INSERT INTO region VALUES ({i}, 'r{i}')"
        return f"INSERT INTO fact VALUES ({i}, {i + 1000}, 1, 'x', 1.0)"

    restricted = 0
    with confs(spark, {"spark.ivm.sharedReads.minTableBytes": "0" if kept else str(1 << 40)}):
        for _ in range(6 if kept else 3):
            for _ in range(rng.randint(1, 3)):
                spark.sql(step())
            report = t.refresh()
            r2.refresh()
            restricted += "kept in memory" in notes(report)
    assert (restricted > 0) == kept, restricted


def test_constraints_are_checked_when_declared(spark: SparkSession, db: str) -> None:
    run(spark, [
        "CREATE TABLE p (k INT, s STRING) USING delta",
        "CREATE TABLE c (id INT, k INT) USING delta",
        "INSERT INTO p VALUES (1, 'a'), (1, 'b'), (NULL, 'c'), (2, 'd')",
        "INSERT INTO c VALUES (1, 1), (2, 7), (3, 8), (4, NULL)",
    ])
    e = refused(lambda: spark.sql("ALTER TABLE p ADD CONSTRAINT p_pk PRIMARY KEY (k)"))
    assert condition(e) == "IVM_CONSTRAINT_VIOLATED" and "1 rows have a NULL key" in str(e), str(e)
    spark.sql("DELETE FROM p WHERE k IS NULL")
    e = refused(lambda: spark.sql("ALTER TABLE p ADD CONSTRAINT p_pk PRIMARY KEY (k)"))
    assert "1 keys appear more than once, for example (1, 2)" in str(e), str(e)
    e = refused(lambda: spark.sql("ALTER TABLE c ADD CONSTRAINT c_p FOREIGN KEY (k) REFERENCES p (k)"))
    assert condition(e) == "IVM_CONSTRAINT_INVALID" and "has no primary key" in str(e), str(e)
    spark.sql("DELETE FROM p WHERE s = 'b'")
    spark.sql("ALTER TABLE p ADD CONSTRAINT p_pk PRIMARY KEY (k)")
    e = refused(lambda: spark.sql("ALTER TABLE c ADD CONSTRAINT c_p FOREIGN KEY (k) REFERENCES p (k)"))
    assert condition(e) == "IVM_CONSTRAINT_VIOLATED" and "2 keys have no row in" in str(e), str(e)
    assert "c_p" not in props(spark, "c")
    spark.sql("DELETE FROM c WHERE k > 2")
    add_foreign_key(spark, "c", ["k"], "p", ["k"], name="c_p")  # the Python helper, same SQL
    declared = f"FOREIGN KEY (`k`) REFERENCES `spark_catalog`.`{db}`.`p` (`k`)"
    assert constraints(spark, "c") == {"c_p": declared}
    assert props(spark, "c")["ivm.constraint.c_p"].startswith("FOREIGN KEY (`k`) REFERENCES ")
    assert props(spark, "p")["ivm.constraint.p_pk"] == "PRIMARY KEY (`k`)"
    described = [r[1] for r in spark.sql("DESCRIBE TABLE EXTENDED c").collect()]
    assert any("ivm.constraint.c_p" in str(v) for v in described), described
    e = refused(lambda: spark.sql("ALTER TABLE c ADD CONSTRAINT c_p FOREIGN KEY (k) REFERENCES p (k)"))
    assert condition(e) == "IVM_CONSTRAINT_ALREADY_EXISTS"
    spark.sql("ALTER TABLE c DROP CONSTRAINT c_p")
    assert "ivm.constraint.c_p" not in props(spark, "c")
    # CHECK constraints still belong to Delta, DROP CONSTRAINT included.
    spark.sql("ALTER TABLE c ADD CONSTRAINT pos CHECK (id > 0)")
    spark.sql("ALTER TABLE c DROP CONSTRAINT pos")
    spark.sql("ALTER TABLE c DROP CONSTRAINT IF EXISTS nothing")


def test_constraints_in_create_table(spark: SparkSession, db: str) -> None:
    spark.sql("CREATE TABLE d (k1 INT, k2 STRING, v INT, CONSTRAINT d_pk PRIMARY KEY (k1, k2)) USING delta")
    spark.sql("CREATE TABLE f (id INT PRIMARY KEY, k1 INT, k2 STRING, "
              "CONSTRAINT f_d FOREIGN KEY (k1, k2) REFERENCES d (k1, k2)) USING delta")
    assert props(spark, "d")["ivm.constraint.d_pk"] == "PRIMARY KEY (`k1`, `k2`)"
    assert set(k for k in props(spark, "f") if k.startswith("ivm.constraint.")) == {
        "ivm.constraint.f_pk", "ivm.constraint.f_d"}
    # A CREATE TABLE whose key cannot be declared creates nothing.
    spark.sql("CREATE TABLE nokey (k INT) USING delta")
    e = refused(lambda: spark.sql("CREATE TABLE g (k INT, CONSTRAINT g_f FOREIGN KEY (k) "
                                  "REFERENCES nokey (k)) USING delta"))
    assert condition(e) == "IVM_CONSTRAINT_INVALID", str(e)
    assert not spark.catalog.tableExists("g")


def props(spark: SparkSession, table: str) -> Dict[str, str]:
    return {r[0]: r[1] for r in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()}


def test_dimension_updates_are_applied_last_and_exact(spark: SparkSession, star: str) -> None:
    """Updates of two dimensions (one a dimension of the other) in the same refresh as fact rows
    that reference, leave or move to the updated keys, and as a deleted and an inserted key."""
    views = [Twins(spark, SNOWFLAKE, "snow", probe_all=True), Twins(spark, STAR_ROWS, "rows")]
    steps = [
        ["UPDATE dim_a SET name = 'a1+', rk = 2 WHERE ak = 1",
         "UPDATE region SET rname = 'south+' WHERE rk = 2", "INSERT INTO fact VALUES (30, 1, 1, 'x', 5.0)",
         "UPDATE fact SET ak = 3 WHERE id = 2"],
        ["UPDATE dim_a SET name = concat(name, '*')", "DELETE FROM fact WHERE ak = 4",
         "DELETE FROM dim_a WHERE ak = 4", "INSERT INTO dim_a VALUES (6, 1, 'a6')",
         "INSERT INTO fact VALUES (31, 6, 2, 'x', 7.0)"],
        ["UPDATE region SET rname = upper(rname)", "UPDATE dim_b SET cat = 'c7' WHERE bk1 = 2"],
    ]
    for step in steps:
        run(spark, step)
        for t in views:
            r = t.refresh()
            # STAR_ROWS reads no table the last step changes.
            assert "updated keys of" in notes(r) or (r.mode == "noop" and step is steps[-1]), notes(r)
