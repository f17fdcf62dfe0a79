"""IVM^eps for triangle views (Kara et al. 2020): every view is compared with its query
recomputed after every refresh, and the paper's invariants (parts partition each relation,
heavy degree >= N^eps / 2, light degree < 3/2 N^eps, floor(N/4) <= |D| < N, each auxiliary
view equal to its definition) are checked inside every refresh by the engine's test mode
(``spark.ivm.epsilon.checkInvariants``), which fails the refresh if one is violated.
"""

from __future__ import annotations

import random
from typing import Dict, Iterator, List, Tuple

import pytest
from ivm_testing import assert_matches_query, condition, refused
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

JOIN = (
    "FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
    "JOIN edges e3 ON e2.dst = e3.src AND e3.dst = e1.src"
)
SHAPES = {
    "nullary": f"SELECT count(*) AS n, sum(e1.w) AS total {JOIN}",
    "unary": f"SELECT e1.src AS a, count(*) AS n {JOIN} GROUP BY e1.src",
    "binary": f"SELECT e1.src AS a, e1.dst AS b, count(*) AS n, max(e3.w) AS m {JOIN} "
              "GROUP BY e1.src, e1.dst",
    "ternary": f"SELECT e1.src AS a, e2.src AS b, e3.src AS c {JOIN}",
}


@pytest.fixture(autouse=True)
def invariants(spark: SparkSession) -> Iterator[None]:
    spark.conf.set("spark.ivm.epsilon.checkInvariants", "true")
    yield
    spark.conf.unset("spark.ivm.epsilon.checkInvariants")


def skewed_edges(rng: random.Random, nodes: int, edges: int, hub_share: float) -> List[Tuple[int, int]]:
    """Undirected edges (both directions) where node 0 is a hub taking `hub_share` of them."""
    out: set = set()
    while len(out) < 2 * edges:
        a = 0 if rng.random() < hub_share else rng.randint(1, nodes)
        b = rng.randint(1, 3 * nodes if a == 0 else nodes)  # the hub reaches further
        if a != b:
            out.update({(a, b), (b, a)})
    return sorted(out)


def write(spark: SparkSession, table: str, rows: List[Tuple[int, int]], rng: random.Random) -> None:
    data = [(a, b, rng.randint(0, 9)) for a, b in rows]
    spark.createDataFrame(data, "src INT, dst INT, w INT").write.format("delta").mode("append") \
        .saveAsTable(table)


def edge_table(spark: SparkSession, rows: List[Tuple[int, int]], rng: random.Random) -> None:
    spark.sql("CREATE TABLE edges (src INT, dst INT, w INT) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    write(spark, "edges", rows, rng)


def random_round(spark: SparkSession, rng: random.Random, nodes: int) -> None:
    """Inserts at the hub and elsewhere, deletes (hub edges among them), payload updates."""
    new = [(0, rng.randint(1, nodes + 10)) for _ in range(4)]
    new += [(rng.randint(1, nodes), rng.randint(1, nodes)) for _ in range(4)]
    new = [(a, b) for a, b in new if a != b]
    write(spark, "edges", new + [(b, a) for a, b in new], rng)
    victim = rng.choice([0, rng.randint(1, nodes)])
    spark.sql(f"DELETE FROM edges WHERE src = {victim} AND dst % 3 = {rng.randint(0, 2)}")
    spark.sql(f"UPDATE edges SET w = w + 1 WHERE dst = {rng.randint(0, nodes)}")


def info(view: MaterializedView) -> Dict[str, object]:
    return view.describe()["info"]


# Every eps with two shapes each; with heavy keys present (eps 0.25 and 0.5 on these graphs)
# all four shapes are covered, and each shape runs at two or more eps.
SHAPES_AT = {"0": ("nullary", "ternary"), "0.25": ("unary", "binary"),
             "0.5": ("nullary", "ternary"), "0.75": ("unary", "binary"), "1": ("nullary", "binary")}


@pytest.mark.parametrize("eps", list(SHAPES_AT))
def test_all_shapes_match_recomputation(spark: SparkSession, db: str, eps: str) -> None:
    rng = random.Random(int(float(eps) * 100) + 7)
    edge_table(spark, skewed_edges(rng, nodes=14, edges=45, hub_share=0.7), rng)
    shapes = {k: SHAPES[k] for k in SHAPES_AT[eps]}
    views = {}
    for name, query in shapes.items():
        views[name] = MaterializedView.create(spark, f"tri_{name}", query,
                                              properties={"ivm.epsilon": eps})
        assert_matches_query(spark, f"tri_{name}", query)
    heavy = info(next(iter(views.values())))["Heavy keys"]
    if eps == "0":
        assert all("all (eps = 0)" in h for h in heavy)
    if eps == "1":
        assert all(h.endswith(": 0") for h in heavy)  # threshold N exceeds every degree
    if eps in ("0.25", "0.5"):
        assert any(not h.endswith(": 0") for h in heavy), heavy  # the heavy paths are exercised
    for _ in range(2 if eps == "0.25" else 1):
        random_round(spark, rng, nodes=14)
        for name, query in shapes.items():
            report = views[name].refresh()
            assert report.mode == "incremental"
            assert any("IVM^eps" in b for b in report.branches)
            assert_matches_query(spark, f"tri_{name}", query)


def test_three_tables_with_filters(spark: SparkSession, db: str) -> None:
    rng = random.Random(3)
    for t in ("r", "s", "t"):
        spark.sql(f"CREATE TABLE {t} (src INT, dst INT, w INT) USING delta "
                  "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
        write(spark, t, skewed_edges(rng, nodes=10, edges=30, hub_share=0.4), rng)
    query = ("SELECT r.src AS a, sum(t.w) AS total, count(*) AS n FROM r JOIN s ON r.dst = s.src "
             "JOIN t ON s.dst = t.src AND t.dst = r.src WHERE s.w < 8 AND r.dst <> 3 GROUP BY r.src")
    view = MaterializedView.create(spark, "tri3", query, properties={"ivm.epsilon": "0.3"})
    assert "IVM^eps" in info(view)["Strategy"]
    assert_matches_query(spark, "tri3", query)
    for _ in range(1):
        for t in ("r", "s", "t"):
            write(spark, t, [(0, rng.randint(1, 12)), (rng.randint(1, 10), 0)], rng)
            spark.sql(f"DELETE FROM {t} WHERE src = {rng.randint(0, 10)} AND dst < 4")
        view.refresh()
        assert_matches_query(spark, "tri3", query)


def test_hub_turns_light_and_back(spark: SparkSession, db: str) -> None:
    rng = random.Random(5)
    hub = [(0, b) for b in range(1, 51)]
    rim = [(a, a + 1) for a in range(1, 21)]
    chain = [(a, a + 1) for a in range(100, 200)]
    rows = [e for a, b in hub + rim + chain for e in ((a, b), (b, a))]
    edge_table(spark, rows, rng)  # |D| = 3 * 340, N = 2041, N^0.5 = 45.2
    query = SHAPES["nullary"]
    view = MaterializedView.create(spark, "tri", query)  # eps 0.5 by default
    assert view.epsilon == 0.5
    heavy = info(view)["Heavy keys"]
    assert all(h.endswith(": 1") for h in heavy), heavy  # only the hub: degree 50 >= 45.2

    # Down to degree 10 < N^0.5 / 2: minor rebalancing moves the hub to the light parts.
    spark.sql("DELETE FROM edges WHERE (src = 0 AND dst > 10) OR (dst = 0 AND src > 10)")
    report = view.refresh()
    assert any("0 keys turn heavy, 1 turn light" in n for n in report.plan_notes), report.plan_notes
    assert_matches_query(spark, "tri", query)
    assert all(h.endswith(": 0") for h in info(view)["Heavy keys"])

    # Up to degree 70 >= 3/2 N^0.5: back to the heavy parts.
    write(spark, "edges", [e for b in range(11, 71) for e in ((0, b), (b, 0))], rng)
    report = view.refresh()
    assert any("1 keys turn heavy, 0 turn light" in n for n in report.plan_notes), report.plan_notes
    assert_matches_query(spark, "tri", query)
    assert all(h.endswith(": 1") for h in info(view)["Heavy keys"])


def test_major_rebalancing_both_ways(spark: SparkSession, db: str) -> None:
    rng = random.Random(11)
    edge_table(spark, skewed_edges(rng, nodes=10, edges=20, hub_share=0.5), rng)
    query = SHAPES["binary"]
    view = MaterializedView.create(spark, "tri", query, properties={"ivm.epsilon": "0.5"})
    n0 = int(info(view)["Threshold base N"])
    # Double the data: |D| reaches N, N doubles and the state is rebuilt.
    write(spark, "edges", [(a, b) for a, b in skewed_edges(rng, nodes=30, edges=60, hub_share=0.3)
                           if a > 10 or b > 10], rng)
    report = view.refresh()
    assert any(n.startswith("major rebalancing") for n in report.plan_notes), report.plan_notes
    n1 = int(info(view)["Threshold base N"])
    assert n1 >= 2 * n0
    assert_matches_query(spark, "tri", query)
    # Quarter it: |D| falls below N/4, N halves (as often as needed) and the state is rebuilt.
    spark.sql("DELETE FROM edges WHERE src > 5 OR dst > 5")
    report = view.refresh()
    assert any(n.startswith("major rebalancing") for n in report.plan_notes), report.plan_notes
    assert int(info(view)["Threshold base N"]) < n1
    assert_matches_query(spark, "tri", query)


def test_epsilon_is_the_users_dial(spark: SparkSession, db: str) -> None:
    rng = random.Random(13)
    edge_table(spark, skewed_edges(rng, nodes=12, edges=40, hub_share=0.5), rng)
    query = SHAPES["unary"]
    view = MaterializedView.create(spark, "tri", query, properties={"ivm.epsilon": "0.25"})
    before = info(view)
    for bad in ("1.5", "-0.1", "half"):
        err = refused(lambda bad=bad: spark.sql(
            f"ALTER MATERIALIZED VIEW tri SET TBLPROPERTIES ('ivm.epsilon' = '{bad}')"))
        assert condition(err) == "IVM_INVALID_PROPERTY" and "[0, 1]" in str(err)
        assert info(view) == before  # nothing changed
    err = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW other TBLPROPERTIES ('ivm.epsilon' = '2') AS {query}"))
    assert condition(err) == "IVM_INVALID_PROPERTY"

    view.epsilon = 0.75  # ALTER ... SET TBLPROPERTIES: rebuilds the partitions
    assert view.epsilon == 0.75
    assert info(view)["Heavy threshold"] != before["Heavy threshold"]
    random_round(spark, rng, nodes=12)
    view.refresh()
    assert_matches_query(spark, "tri", query)
    assert "Strategy: IVM^eps triangle" in view.explain_refresh()

    # eps on a view that is not a triangle is refused, and EXPLAIN says why a cycle is generic.
    err = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW path TBLPROPERTIES ('ivm.epsilon' = '0.5') AS "
        "SELECT count(*) FROM edges e1 JOIN edges e2 ON e1.dst = e2.src"))
    assert condition(err) == "IVM_INVALID_PROPERTY" and "triangle" in str(err)
    square = MaterializedView.create(
        spark, "square",
        "SELECT count(*) AS n FROM edges e1 JOIN edges e2 ON e1.dst = e2.src "
        "JOIN edges e3 ON e2.dst = e3.src JOIN edges e4 ON e3.dst = e4.src AND e4.dst = e1.src")
    assert "cyclic join of 4 relations" in square.explain_refresh()


def test_failed_refresh_after_state_write_leaves_nothing_wrong(spark: SparkSession, db: str) -> None:
    rng = random.Random(17)
    edge_table(spark, skewed_edges(rng, nodes=12, edges=40, hub_share=0.5), rng)
    query = SHAPES["nullary"]
    view = MaterializedView.create(spark, "tri", query, properties={"ivm.epsilon": "0.25"})
    random_round(spark, rng, nodes=12)
    before = spark.table("tri").collect()
    spark.conf.set("spark.ivm.testing.failAt", "after-state")
    with pytest.raises(Exception, match="after-state"):
        view.refresh()
    # The state tables moved on, the view did not: the next refresh restores them first.
    assert spark.table("tri").collect() == before
    random_round(spark, rng, nodes=12)
    report = view.refresh()
    assert report.mode == "incremental"
    assert_matches_query(spark, "tri", query)


@pytest.mark.measures_cost
def test_resident_state_follows_refreshes(spark: SparkSession, db: str) -> None:
    """The IVM^eps state kept in the executors' memory between refreshes (relation occurrences
    and auxiliary views): a refresh that finds it reads no Delta table for its probes and runs
    fewer Spark jobs than one that reads them; refreshes with it, without it, after a failed
    refresh that moved it on (its retry finds it at the retry's versions) all agree with
    recomputation."""
    # The other tests check the invariants inside each refresh; here they would only add jobs
    # to both sides of the comparison.
    spark.conf.set("spark.ivm.epsilon.checkInvariants", "false")
    rng = random.Random(23)
    edge_table(spark, skewed_edges(rng, nodes=14, edges=45, hub_share=0.6), rng)
    query = SHAPES["unary"]
    view = MaterializedView.create(spark, "tri_kept", query, properties={"ivm.epsilon": "0.5"})
    jobs: Dict[bool, List[int]] = {True: [], False: []}
    key = "spark.ivm.epsilon.residentState"
    try:
        for step in range(5):
            random_round(spark, rng, nodes=14)
            resident = step != 3
            spark.conf.set(key, str(resident).lower())
            if step == 4:
                spark.conf.set("spark.ivm.testing.failAt", "after-state")
                with pytest.raises(Exception, match="after-state"):
                    view.refresh()
                spark.conf.unset("spark.ivm.testing.failAt")
            report = view.refresh()
            assert report.mode == "incremental"
            assert_matches_query(spark, "tri_kept", query)
            jobs[resident].append(report.spark_jobs)
    finally:
        spark.conf.unset(key)
        spark.conf.unset("spark.ivm.testing.failAt")
    # The first refresh reads the state into memory; the next two find it there.
    assert max(jobs[True][1:3]) < jobs[False][0], jobs
