"""Views over recursive CTEs (`WITH RECURSIVE ... UNION ALL`): a transitive closure, a bill of
materials (a row per path) and a manager chain over cycles, each maintained by a
recursion of its own over the change, and equal to its query, counts included, after every
refresh of a random stream of inserts, deletes and updates."""

from __future__ import annotations

import glob
import json
import random
from typing import Dict, List, Optional, Tuple

import pytest
from ivm_testing import assert_matches_query, condition, follow_changes, refused, session_confs
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

NODES = 9

REACH = ("WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM ed UNION ALL "
         "SELECT r.src, ed.dst FROM r JOIN ed ON r.dst = ed.src) ")

QUERIES = {
    # the transitive closure as a set, its columns in another order
    "closure": REACH + "SELECT DISTINCT dst, src FROM r",
    # quantities multiplied along a bill of materials: a row per path (its count the number of
    # its derivations), the paths' product in its column
    "bom": "WITH RECURSIVE b(part, sub, qty) AS (SELECT src, dst, w FROM ed UNION ALL "
           "SELECT b.part, ed.dst, b.qty * ed.w FROM b JOIN ed ON b.sub = ed.src) "
           "SELECT part, sub, qty FROM b",
    # a manager chain whose data has cycles (bounded by its depth), anchored by a filter
    "chain": "WITH RECURSIVE c(top, id, depth) AS (SELECT id, id, 0 FROM em WHERE boss IS NULL UNION ALL "
             "SELECT c.top, em.id, c.depth + 1 FROM c JOIN em ON em.boss = c.id WHERE c.depth < 4) "
             "SELECT top, id, depth FROM c",
    # aggregates, a filter and a projection over the recursion: computed when the view is read,
    # over the recursive rows the view keeps
    "reach_counts": REACH + "SELECT src, count(*) AS paths, count(DISTINCT dst) AS reached "
                            "FROM r GROUP BY src",
    "paths_total": REACH + "SELECT count(*) AS paths, max(dst) AS farthest FROM r",
    "bom_totals": "WITH RECURSIVE b(part, sub, qty) AS (SELECT src, dst, w FROM ed UNION ALL "
                  "SELECT b.part, ed.dst, b.qty * ed.w FROM b JOIN ed ON b.sub = ed.src) "
                  "SELECT part, sum(qty) AS total FROM b GROUP BY part HAVING count(*) > 1",
    "deep": "WITH RECURSIVE c(top, id, depth) AS (SELECT id, id, 0 FROM em WHERE boss IS NULL UNION ALL "
            "SELECT c.top, em.id, c.depth + 1 FROM c JOIN em ON em.boss = c.id WHERE c.depth < 4) "
            "SELECT id, depth * 10 AS d FROM c WHERE depth > 0",
    # joins above the recursion, kept through a helper view of each recursive CTE: the recursion
    # with itself, and two recursions under an outer join (a join with a table that changes too is
    # test_a_join_above_the_recursion_is_kept_by_a_helper_view's)
    "reach_pairs": REACH + "SELECT a.src, b.dst, count(*) AS n FROM r a JOIN r b ON a.dst = b.src "
                           "GROUP BY a.src, b.dst",
    "chain_reach": "WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM ed UNION ALL "
                   "SELECT r.src, ed.dst FROM r JOIN ed ON r.dst = ed.src), "
                   "c(top, id, depth) AS (SELECT id, id, 0 FROM em WHERE boss IS NULL UNION ALL "
                   "SELECT c.top, em.id, c.depth + 1 FROM c JOIN em ON em.boss = c.id WHERE c.depth < 4) "
                   "SELECT c.top, c.id, count(r.dst) AS reached FROM c LEFT JOIN r ON r.src = c.id "
                   "GROUP BY c.top, c.id",
}


class _Graph:
    """The tables' rows as the test changed them, so that each statement changes some row (a
    statement that matches none commits nothing, and the views would rightly not refresh)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.edges: List[Tuple[int, int]] = []
        self.bosses: Dict[int, Optional[int]] = {0: None, 1: 0, 2: 1, 3: 4, 4: 5, 5: 3}

    def new_edges(self, n: int) -> str:
        """Edges from a lower to a higher node: the graph stays acyclic, so paths are finite."""
        out = []
        for _ in range(n):
            a = self.rng.randrange(NODES - 1)
            b = self.rng.randrange(a + 1, NODES)
            self.edges.append((a, b))
            out.append(f"({a}, {b}, {self.rng.randrange(1, 4)})")
        return f"INSERT INTO ed VALUES {', '.join(out)}"

    def changes(self, steps: int) -> List[List[str]]:
        out: List[List[str]] = []
        for i in range(steps):
            rng = self.rng
            if i % 3 == 0:
                emp = rng.choice(sorted(self.bosses))
                self.bosses[emp] = rng.randrange(6)
                out.append([self.new_edges(3), f"UPDATE em SET boss = {self.bosses[emp]} WHERE id = {emp}"])
            elif i % 3 == 1:
                # one edge of a pair that other paths may still connect: one derivation less
                a, b = rng.choice(self.edges)
                self.edges = [e for e in self.edges if e != (a, b)]
                emp = rng.choice(sorted(self.bosses))
                del self.bosses[emp]
                out.append([f"DELETE FROM ed WHERE src = {a} AND dst = {b}",
                            f"DELETE FROM em WHERE id = {emp}"])
            else:
                a, b = rng.choice(self.edges)
                c = rng.randrange(a + 1, NODES)
                self.edges = [(x, c if (x, y) == (a, b) else y) for x, y in self.edges]
                emp = max(self.bosses) + 1
                self.bosses[emp] = rng.choice([None, 1, 2])
                boss = "NULL" if self.bosses[emp] is None else str(self.bosses[emp])
                out.append([f"UPDATE ed SET dst = {c}, w = w + 1 WHERE src = {a} AND dst = {b}",
                            f"INSERT INTO em VALUES ({emp}, {boss})"])
        return out


def test_recursive_views_follow_random_changes(spark: SparkSession, db: str) -> None:
    """Each view is created incremental under INCREMENTAL STRICT and follows the changes; EXPLAIN
    shows the delta's recursion and DESCRIBE says the view is incremental."""
    graph = _Graph(random.Random(20261129))
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql(graph.new_edges(10))
    spark.sql("CREATE TABLE em (id INT, boss INT) USING delta")
    # 3 -> 4 -> 5 -> 3 is a cycle that no chain from a top reaches until an update links it
    spark.sql("INSERT INTO em VALUES (0, NULL), (1, 0), (2, 1), (3, 4), (4, 5), (5, 3)")
    follow_changes(spark, QUERIES, graph.changes(4), "REFRESH POLICY INCREMENTAL STRICT")
    spark.sql(graph.new_edges(2))
    explain = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW bom").collect())
    assert "Next refresh: incremental" in explain and "recursion seeded by" in explain, explain
    assert MaterializedView.for_name(spark, "closure").describe()["refresh_mode"] == "incremental"


def test_a_refresh_past_the_recursion_limit_fails_and_keeps_the_view(spark: SparkSession, db: str) -> None:
    """Spark's own limit on a recursion's depth, as the view was created under it, bounds the
    refresh's recursion too: a change that makes a longer chain than it allows fails the refresh
    with Spark's error and the view keeps its rows; once the chain is short again, the next
    refresh brings the view up to date."""
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql("INSERT INTO ed VALUES (0, 1, 1), (1, 2, 1)")
    query = REACH + "SELECT src, dst FROM r"
    with session_confs(spark, {"spark.sql.cteRecursionLevelLimit": "3"}):
        mv = MaterializedView.create(spark, "paths", query, refresh_policy="INCREMENTAL STRICT")
    before = sorted(spark.table("paths").collect())
    spark.sql("INSERT INTO ed VALUES (2, 3, 1), (3, 4, 1), (4, 5, 1), (5, 6, 1)")
    with pytest.raises(Exception, match="RECURSION_LEVEL_LIMIT_EXCEEDED"):
        mv.refresh()
    assert sorted(spark.table("paths").collect()) == before
    spark.sql("DELETE FROM ed WHERE src >= 3")
    assert mv.refresh().mode == "incremental"
    with session_confs(spark, {"spark.sql.cteRecursionLevelLimit": "3"}):
        assert_matches_query(spark, "paths", query)


def test_aggregates_over_recursion_are_computed_at_read(spark: SparkSession, db: str) -> None:
    """An aggregate over a recursive CTE is incremental: the view keeps the recursion's rows and
    computes the aggregate when it is read, and says so."""
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql("INSERT INTO ed VALUES (0, 1, 1), (1, 2, 1), (0, 2, 1)")
    query = REACH + "SELECT src, count(*) AS n FROM r GROUP BY src"
    mv = MaterializedView.create(spark, "agg", query, refresh_policy="INCREMENTAL STRICT")
    spark.sql("INSERT INTO ed VALUES (2, 3, 1)")
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "agg", query)
    described = mv.describe()
    assert described["refresh_mode"] == "incremental", described
    assert "count(1), computed when the view is read" in described["info"]["Computed at read"], described


def _helpers(spark: SparkSession) -> List[str]:
    """The helper views of the test's database."""
    tables = spark.sql("SHOW TABLES").collect()
    return sorted(r.tableName for r in tables if r.tableName.startswith("__ivm_rec_"))


def test_a_join_above_the_recursion_is_kept_by_a_helper_view(spark: SparkSession, db: str) -> None:
    """A view that joins a recursive CTE is incremental: a helper view keeps the CTE's rows, is
    refreshed before the view and dropped with it, and is not listed nor dropped on its own; a
    view whose helper was refreshed without it (a refresh killed between the two) catches up; a
    recursion the helper cannot keep leaves no helper and the view says why it recomputes."""
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql("CREATE TABLE names (id INT, name STRING) USING delta")
    spark.sql("INSERT INTO ed VALUES (0, 1, 1), (1, 2, 1), (0, 2, 1)")
    spark.sql("INSERT INTO names VALUES (0, 'a'), (1, 'b'), (2, 'c'), (3, 'd')")
    joined = REACH + "SELECT n.name, count(*) AS k FROM r JOIN names n ON n.id = r.dst GROUP BY n.name"
    mv = MaterializedView.create(spark, "joined", joined, refresh_policy="INCREMENTAL STRICT")
    assert_matches_query(spark, "joined", joined)
    (helper,) = _helpers(spark)
    assert mv.describe()["helpers"] == [f"spark_catalog.{db}.{helper}"]
    assert [r.viewName for r in spark.sql("SHOW MATERIALIZED VIEWS").collect()] == ["joined"]
    error = refused(lambda: spark.sql(f"DROP MATERIALIZED VIEW {helper}"))
    assert condition(error) == "IVM_NOT_A_MATERIALIZED_VIEW" and "joined" in str(error), str(error)

    spark.sql("INSERT INTO ed VALUES (2, 3, 1)")
    spark.sql("UPDATE names SET name = 'z' WHERE id = 2")
    # the commit to `ed` counts, though the view reads it through its helper
    assert mv.describe()["freshness"]["pending_commits"] == 2, mv.describe()["freshness"]
    report = mv.refresh()
    assert report.mode == "incremental", report
    assert {s.table.rsplit(".", 1)[-1] for s in report.sources} == {"ed", "names"}, report.sources
    assert any(n.startswith(f"helper view `spark_catalog`.`{db}`.`{helper}` refreshed first: incremental")
               for n in report.plan_notes), report.plan_notes
    assert_matches_query(spark, "joined", joined)
    # the helper's commit carries its change as change files, which the view reads
    location = spark.sql(f"DESCRIBE DETAIL __ivm_backing_{helper}").collect()[0].location
    last = sorted(glob.glob(location.replace("file:", "") + "/_delta_log/*.json"))[-1]
    with open(last) as commit:
        assert any("cdc" in json.loads(line) for line in commit), last
    explain = "\n".join(r[0] for r in spark.sql("EXPLAIN REFRESH MATERIALIZED VIEW joined").collect())
    assert f"Helper view `spark_catalog`.`{db}`.`{helper}`, refreshed first" in explain, explain

    # the helper refreshed alone, as a refresh killed after it leaves it; the view catches up
    spark.sql("DELETE FROM ed WHERE src = 0 AND dst = 2")
    spark.sql(f"REFRESH MATERIALIZED VIEW {helper}")
    spark.sql("INSERT INTO ed VALUES (3, 0, 1)")
    spark.sql("DELETE FROM ed WHERE src = 3")
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "joined", joined)
    assert mv.refresh().mode == "noop"

    # a new definition makes new helpers and drops the old; one that fails keeps the old view and
    # its helper, and leaves none of its own
    spark.conf.set("spark.ivm.testing.failAt", "create-after-helpers")
    with pytest.raises(Exception, match="create-after-helpers"):
        spark.sql(f"CREATE OR REPLACE MATERIALIZED VIEW joined AS {joined.replace('count(*)', 'sum(r.src)')}")
    assert _helpers(spark) == [helper]
    assert_matches_query(spark, "joined", joined)
    spark.sql(f"CREATE OR REPLACE MATERIALIZED VIEW joined AS {joined.replace('count(*)', 'sum(r.src)')}")
    (replaced,) = _helpers(spark)
    assert replaced != helper
    spark.sql("DROP MATERIALIZED VIEW joined")
    assert _helpers(spark) == []

    # a recursive part with an outer join is not linear in its rows: no helper keeps it
    nonlinear = ("WITH RECURSIVE r(src, dst, d) AS (SELECT src, dst, 0 FROM ed UNION ALL "
                 "SELECT r.src, ed.dst, r.d + 1 FROM r LEFT JOIN ed ON r.dst = ed.src WHERE r.d < 3) "
                 "SELECT n.name, count(*) AS k FROM r JOIN names n ON n.id = r.dst GROUP BY n.name")
    error = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW joined_s REFRESH POLICY INCREMENTAL STRICT AS {nonlinear}"))
    assert condition(error) == "IVM_NOT_INCREMENTALIZABLE", condition(error)
    assert "reads it other than once" in str(error), str(error)
    assert _helpers(spark) == []
    auto = MaterializedView.create(spark, "joined_a", nonlinear, refresh_policy="AUTO")
    assert "reads it other than once" in auto.describe()["full_because"]
    assert _helpers(spark) == []
    spark.sql("INSERT INTO ed VALUES (1, 3, 1)")
    assert auto.refresh().mode == "full"
    assert_matches_query(spark, "joined_a", nonlinear)


def test_helper_views_under_cascade_and_over_tables_not_delta(spark: SparkSession, db: str) -> None:
    """REFRESH ... CASCADE refreshes a view's helper once, with the view, not as a view of its own;
    a recursion over a table that is not Delta makes no helper: AUTO recomputes the view and
    says why, INCREMENTAL STRICT refuses it with Delta's remedy."""
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql("CREATE TABLE names (id INT, name STRING) USING delta")
    spark.sql("INSERT INTO ed VALUES (0, 1, 1), (1, 2, 1)")
    spark.sql("INSERT INTO names VALUES (0, 'a'), (1, 'b'), (2, 'c'), (3, 'd')")
    joined = REACH + "SELECT n.name, count(*) AS k FROM r JOIN names n ON n.id = r.dst GROUP BY n.name"
    MaterializedView.create(spark, "joined", joined, refresh_policy="INCREMENTAL STRICT")
    (helper,) = _helpers(spark)
    history = spark.sql(f"SHOW REFRESHES FOR {helper}").count()
    spark.sql("INSERT INTO ed VALUES (2, 3, 1)")
    rows = spark.sql("REFRESH MATERIALIZED VIEW joined CASCADE").collect()
    assert len(rows) == 1, rows
    assert spark.sql(f"SHOW REFRESHES FOR {helper}").count() == history + 1
    assert_matches_query(spark, "joined", joined)

    spark.sql("CREATE TABLE pe (src INT, dst INT) USING parquet")
    spark.sql("INSERT INTO pe VALUES (0, 1), (1, 2)")
    over_parquet = ("WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM pe UNION ALL "
                    "SELECT r.src, pe.dst FROM r JOIN pe ON r.dst = pe.src) ")
    for name, query in (("rows_pq", over_parquet + "SELECT src, dst FROM r"),
                        ("joined_pq", over_parquet + "SELECT n.name, count(*) AS k FROM r "
                                                     "JOIN names n ON n.id = r.dst GROUP BY n.name")):
        error = refused(lambda name=name, query=query: spark.sql(
            f"CREATE MATERIALIZED VIEW {name}_s REFRESH POLICY INCREMENTAL STRICT AS {query}"))
        assert condition(error) == "IVM_SOURCE_NOT_DELTA" and "CONVERT TO DELTA" in str(error), str(error)
        mv = MaterializedView.create(spark, name, query, refresh_policy="AUTO")
        described = mv.describe()
        assert described["refresh_mode"] == "full" and "Delta" in described["full_because"], described
        assert_matches_query(spark, name, query)
    assert _helpers(spark) == [helper]


def test_helper_views_read_one_instant_and_outlive_a_concurrent_replace(spark: SparkSession, db: str) -> None:
    """A view that reads a table both through its helper and directly reads it at the version the
    helper read, though a commit lands between the two refreshes; a CREATE OR REPLACE that runs
    while another is making its helpers leaves the other's helpers alone; a helper's failure is
    the view's; helpers are left out of SHOW REFRESHES, and a query with characters outside the
    BMP before its recursive CTE splits where its text says."""
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql("INSERT INTO ed VALUES (0, 1, 1), (1, 2, 1), (0, 2, 1)")
    # paths one edge longer than the recursion's: `ed` read by the helper and by the view
    longer = ("WITH RECURSIVE r(src, dst) AS (SELECT src, dst FROM ed WHERE '\U0001F600' <> 'x' "
              "UNION ALL SELECT r.src, ed.dst FROM r JOIN ed ON r.dst = ed.src) "
              "SELECT r.src, e.dst, count(*) AS k FROM r JOIN ed e ON e.src = r.dst GROUP BY r.src, e.dst")
    mv = MaterializedView.create(spark, "longer", longer, refresh_policy="INCREMENTAL STRICT")
    assert len(_helpers(spark)) == 1
    assert_matches_query(spark, "longer", longer)

    spark.sql("INSERT INTO ed VALUES (2, 3, 1)")
    before = spark.sql("DESCRIBE HISTORY ed").first().version
    with session_confs(spark, {"spark.ivm.testing.sqlAt": "after-helpers:INSERT INTO ed VALUES (3, 4, 1)"}):
        report = mv.refresh()
    assert report.mode == "incremental", report
    (ed,) = [s for s in report.sources if s.table.rsplit(".", 1)[-1] == "ed"]
    assert ed.to_version == before, report.sources
    assert_matches_query(spark, "longer", longer.replace("FROM ed", f"FROM ed VERSION AS OF {before}")
                         .replace("JOIN ed", f"JOIN ed VERSION AS OF {before}"))
    assert mv.describe()["freshness"]["pending_commits"] == 1, mv.describe()["freshness"]
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "longer", longer)
    assert "`longer`" in {r.view.rsplit(".", 1)[-1] for r in spark.sql("SHOW REFRESHES").collect()}
    assert not [r.view for r in spark.sql("SHOW REFRESHES").collect() if "__ivm_rec_" in r.view]

    # a second CREATE OR REPLACE runs (and ends) while the first has made its helpers
    other = longer.replace("count(*)", "sum(r.src)")
    inner = f"CREATE OR REPLACE MATERIALIZED VIEW longer AS {other}"
    with session_confs(spark, {"spark.ivm.testing.sqlAt": f"create-after-helpers:{inner}"}):
        spark.sql(f"CREATE OR REPLACE MATERIALIZED VIEW longer AS {longer}")
    (mine,) = [h.split(".")[-1] for h in mv.describe()["helpers"]]
    assert mine in _helpers(spark), _helpers(spark)
    spark.sql("INSERT INTO ed VALUES (1, 4, 1)")
    assert mv.refresh().mode == "incremental"
    assert_matches_query(spark, "longer", longer)
    # a helper's failure is the view's: named as the view, whose FULL refresh repairs it, in its
    # history
    spark.sql("DROP TABLE ed")
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    error = refused(lambda: mv.refresh())
    assert condition(error) == "IVM_SOURCE_CHANGED", str(error)
    assert f"`{db}`.`longer` FULL" in str(error) and "__ivm_rec_" not in str(error), str(error)
    (failed,) = [r for r in spark.sql("SHOW REFRESHES FOR longer").collect() if r.mode == "failed"]
    assert "IVM_SOURCE_CHANGED" in failed.error, failed
    assert mv.refresh(full=True).mode == "full"
    assert_matches_query(spark, "longer", longer)
    # the replaced CREATE's helper was left by it; DROP takes every helper of the name
    spark.sql("DROP MATERIALIZED VIEW longer")
    assert _helpers(spark) == []


@pytest.mark.measures_cost
def test_a_small_change_is_stepped_on_the_driver(spark: SparkSession, db: str) -> None:
    """The recursion of a small change runs on the driver: the table its recursive part joins is
    read once (one job), and no step runs a Spark job, where Spark's own recursion runs a job or
    two per step and reads the table again in each; past the driver's bound on a step, Spark steps
    on from the last one. The view equals its query every way (Spark's limits on a recursion, as
    the driver applies them, are DriverRecursionSuite's)."""
    spark.sql("CREATE TABLE ed (src INT, dst INT, w INT) USING delta")
    spark.sql("INSERT INTO ed VALUES " + ", ".join(f"({i}, {i + 1}, 1)" for i in range(12)))
    query = REACH + "SELECT src, dst FROM r"
    # `ed` read from its files as a large table would be, not held on the driver as a small one
    confs = {"spark.ivm.heldTables.maxRows": "0"}
    with session_confs(spark, confs):
        mv = MaterializedView.create(spark, "paths", query, refresh_policy="INCREMENTAL STRICT")
        jobs = {}
        for k, stepped in enumerate(["0", "2000000"]):
            # a new start above the chain: the change's recursion is the chain's depth, 13 steps
            spark.sql(f"INSERT INTO ed VALUES ({100 + k}, 0, 1)")
            with session_confs(spark, {"spark.ivm.recursion.driverMaxRows": stepped}):
                report = mv.refresh()
            assert report.mode == "incremental"
            on_driver = any("stepped on the driver: 13 steps" in n for n in report.plan_notes)
            assert on_driver == (stepped != "0"), report.plan_notes
            jobs[stepped] = report.spark_jobs
            assert_matches_query(spark, "paths", query)
        assert jobs["2000000"] + 10 <= jobs["0"], jobs
        # the rest of a recursion too deep for the driver's bound is left to Spark
        spark.sql("INSERT INTO ed VALUES (102, 0, 1), (103, 0, 1)")
        with session_confs(spark, {"spark.ivm.localMaxRows": "2"}):
            report = mv.refresh()
        assert any("then by Spark" in n for n in report.plan_notes), report.plan_notes
        assert_matches_query(spark, "paths", query)
