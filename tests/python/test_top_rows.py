"""Top-k views (ORDER BY ... LIMIT k OFFSET o) keep bounded state: the backing table marks its
first k + o rows and a buffer below them, and the view's read reads the marked rows alone. With
a buffer of one row, a random stream of inserts, deletes and updates drains the buffer (a refill
scans the view's rows), overfills it (a trim), and crosses the boundary with ties and NULLs;
every view equals its query after every refresh, and the marks stay within their bounds."""

from __future__ import annotations

import random
from typing import Dict, List, Tuple

from ivm_testing import assert_matches_query
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView

# name: (query, LIMIT + OFFSET, whether a row of the backing table stands for `__ivm_count` rows)
QUERIES: Dict[str, Tuple[str, int, bool]] = {
    "top_rows": ("SELECT id, amount FROM sales ORDER BY amount DESC NULLS LAST, id LIMIT 3", 3, False),
    "top_offset": ("SELECT id, amount FROM sales ORDER BY amount NULLS FIRST, id LIMIT 2 OFFSET 2", 4, False),
    "top_groups": ("SELECT region, count(*) AS n, sum(amount) AS s FROM sales GROUP BY region "
                   "ORDER BY s DESC NULLS LAST, region LIMIT 2", 2, False),
    "top_having": ("SELECT region, count(*) AS n FROM sales GROUP BY region HAVING count(*) > 3 "
                   "ORDER BY n DESC, region LIMIT 1", 1, False),
    "top_repeated": ("SELECT amount FROM sales ORDER BY amount DESC LIMIT 4", 4, True),
    "top_distinct": ("SELECT DISTINCT amount FROM sales ORDER BY amount LIMIT 2", 2, False),
}
BUFFER = 1


def _steps(rng: random.Random, ids: List[int], steps: int) -> List[List[str]]:
    """Inserts, deletes (sometimes of the top rows, draining the buffer) and updates, over a
    small range of amounts (ties) with NULLs."""
    def amount() -> str:
        return "NULL" if rng.random() < 0.15 else str(rng.randrange(8))

    out = []
    for _ in range(steps):
        stmts = []
        new = [max(ids) + 1 + i for i in range(rng.randrange(0, 5))]
        ids.extend(new)
        if new:
            stmts.append("INSERT INTO sales VALUES " + ", ".join(
                f"({i}, 'r{rng.randrange(5)}', {amount()})" for i in new))
        if rng.random() < 0.4:
            stmts.append("DELETE FROM sales WHERE amount >= 6")  # the top rows of a DESC order
        elif len(ids) > 6:
            gone = rng.sample(ids, 3)
            for i in gone:
                ids.remove(i)
            stmts.append(f"DELETE FROM sales WHERE id IN ({', '.join(map(str, gone))})")
        moved = rng.choice(ids)
        region = f"r{rng.randrange(5)}"
        stmts.append(f"UPDATE sales SET amount = {amount()}, region = '{region}' WHERE id = {moved}")
        out.append(stmts)
    return out


def _marks(spark: SparkSession, view: str, counted: bool) -> Tuple[int, int]:
    """(rows the view's read may show, of them those marked), counted as the view shows them."""
    backing = MaterializedView.for_name(spark, view).describe()["backing_table"]
    weight = "__ivm_count" if counted else "1"
    having = " AND __ivm_having" if view == "top_having" else ""
    marked = f"CASE WHEN __ivm_top = 1 THEN {weight} END"
    row = spark.sql(f"SELECT coalesce(sum({weight}), 0), coalesce(sum({marked}), 0) "
                    f"FROM {backing} WHERE __ivm_count > 0{having}").head()
    return int(row[0]), int(row[1])


def test_top_k_views_keep_bounded_marks_over_random_changes(spark: SparkSession, db: str) -> None:
    rng = random.Random(20261201)
    spark.conf.set("spark.ivm.topRows.buffer", str(BUFFER))
    try:
        spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
        ids = list(range(24))
        spark.sql("INSERT INTO sales VALUES " + ", ".join(
            f"({i}, 'r{i % 5}', {'NULL' if i % 7 == 3 else i % 8})" for i in ids))
        views = {name: MaterializedView.create(spark, name, q, refresh_policy="INCREMENTAL STRICT")
                 for name, (q, _, _) in QUERIES.items()}
        notes: List[str] = []
        for step in _steps(rng, ids, 14):
            for stmt in step:
                spark.sql(stmt)
            for name, mv in views.items():
                query, reach, counted = QUERIES[name]
                report = mv.refresh()
                assert report.mode == "incremental", (name, report)
                notes.extend(report.plan_notes)
                assert_matches_query(spark, name, query)
                shown, marked = _marks(spark, name, counted)
                # Enough marked rows for the read (all of them where the view has fewer), and a bound.
                assert marked >= min(reach, shown), (name, shown, marked)
                most = (reach + 2 * BUFFER) * (8 if counted else 1)
                assert marked <= most, (name, shown, marked)
        assert any(n.startswith("top rows refilled") for n in notes), notes
        assert any(n.startswith("top rows trimmed") for n in notes), notes
        top = views["top_rows"].describe()["info"]["Top rows"]
        assert "marks the first 3 and a buffer of the next" in top, top
    finally:
        spark.conf.unset("spark.ivm.topRows.buffer")


def test_a_top_k_read_reads_only_the_marked_rows_files(spark: SparkSession, db: str) -> None:
    """Over a view of many files, a read reads the files that hold marked rows alone, after a
    refresh too."""
    spark.conf.set("spark.ivm.layout.rowsPerFile", "500")
    try:
        spark.sql("CREATE TABLE events (id BIGINT, score BIGINT) USING delta")
        spark.sql("INSERT INTO events SELECT id, (id * 7919) % 100003 FROM range(20000)")
        query = "SELECT id, score FROM events ORDER BY score DESC, id LIMIT 10"
        mv = MaterializedView.create(spark, "top_events", query, refresh_policy="INCREMENTAL STRICT")
        backing = mv.describe()["backing_table"]
        files = spark.sql(f"DESCRIBE DETAIL {backing}").head()["numFiles"]
        assert files >= 20, files
        spark.sql("INSERT INTO events VALUES (20000, 100002), (20001, 5)")
        spark.sql("DELETE FROM events WHERE id = 3")
        assert mv.refresh().mode == "incremental"
        assert_matches_query(spark, "top_events", query)
        read = spark.table("top_events")
        read.collect()
        scans = [n for n in _leaves(read._jdf.queryExecution().executedPlan()) if "Scan" in n.nodeName()]
        assert scans, "the read scans the backing table"
        numbers = [int(s.metrics().apply("numFiles").value()) for s in scans]
        holding = spark.sql(f"SELECT DISTINCT _metadata.file_path FROM {backing} WHERE __ivm_top = 1").count()
        files = spark.sql(f"DESCRIBE DETAIL {backing}").head()["numFiles"]
        # The files that hold marked rows (1,010 rows, 500 to a file, and the refresh's new file).
        assert sum(numbers) == holding <= 5 < files, (numbers, holding, files)
    finally:
        spark.conf.unset("spark.ivm.layout.rowsPerFile")


def test_an_order_by_repeating_a_selected_rollup_level_follows_changes(spark: SparkSession, db: str) -> None:
    """TPC-DS q70's and q86's shape: a rollup ranked within each level, ordered by an expression
    that repeats the selected level (``grouping(a) + grouping(b)``) instead of naming it; the
    last keys order the rows completely, so that the query's rows at the limit are certain."""
    spark.sql("CREATE TABLE sales (id INT, region STRING, amount INT) USING delta")
    ids = list(range(24))
    spark.sql("INSERT INTO sales VALUES " + ", ".join(
        f"({i}, 'r{i % 5}', {'NULL' if i % 7 == 3 else i % 8})" for i in ids))
    query = ("SELECT region, amount, sum(id) AS total, grouping(region) + grouping(amount) AS level, "
             "rank() OVER (PARTITION BY grouping(region) + grouping(amount), "
             "CASE WHEN grouping(amount) = 0 THEN region END ORDER BY sum(id) DESC) AS ranked "
             "FROM sales GROUP BY rollup(region, amount) "
             "ORDER BY level DESC, CASE WHEN grouping(region) + grouping(amount) = 0 THEN region END, "
             "ranked, region, amount LIMIT 7")
    mv = MaterializedView.create(spark, "top_levels", query, refresh_policy="INCREMENTAL STRICT")
    assert "CASE WHEN" in mv.describe()["info"]["Top rows"]
    for step in _steps(random.Random(20261205), ids, 5):
        for stmt in step:
            spark.sql(stmt)
        assert mv.refresh().mode == "incremental"
        assert_matches_query(spark, "top_levels", query)


def _leaves(plan):  # type: ignore[no-untyped-def]
    """The nodes of a Java SparkPlan, through adaptive plans."""
    out = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if node.nodeName() == "AdaptiveSparkPlan":
            node = node.executedPlan()
        out.append(node)
        children = node.children()
        for i in range(children.size()):
            stack.append(children.apply(i))
    return out
