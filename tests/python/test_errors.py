"""Bad input gets a clear error and changes nothing."""

from __future__ import annotations

import pytest
from ivm_testing import assert_matches_query, condition, refused, session_confs
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, add_primary_key, errors


@pytest.fixture()
def tables(spark: SparkSession, db: str) -> str:
    spark.sql("CREATE TABLE a (k INT, v INT) USING delta")
    spark.sql("CREATE TABLE b (k INT, w INT) USING delta")
    spark.sql("INSERT INTO a VALUES (1, 10), (2, 20), (3, 30)")
    spark.sql("INSERT INTO b VALUES (1, 100), (4, 400)")
    return db


UNSUPPORTED = [
    ("SELECT r, count(*) AS n FROM (SELECT rank() OVER (ORDER BY v) AS r FROM a) GROUP BY r",
     "window function without PARTITION BY below the top"),
    ("SELECT k FROM a LIMIT 2", "LIMIT"),
    ("SELECT k, rand() AS r FROM a", "non-deterministic function rand"),
    ("SELECT k, current_timestamp() AS t FROM a", "time-dependent function current_timestamp"),
    ("SELECT k FROM a WHERE size((SELECT map(w, k) FROM b WHERE w > 100)) > 0",
     "scalar subquery of type map<int,int> that is not a global aggregate"),
    ("SELECT k, map(k, v) AS kv FROM a", "MAP column kv"),
    ("SELECT k FROM a TABLESAMPLE (50 PERCENT)", "TABLESAMPLE"),
]


@pytest.mark.parametrize("query, operator", UNSUPPORTED)
def test_unsupported_operator_is_named_and_nothing_is_created(spark: SparkSession, tables: str,
                                                             query: str, operator: str) -> None:
    error = refused(lambda: spark.sql(
        f"CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS {query}"))
    assert condition(error) == "IVM_NOT_INCREMENTALIZABLE"
    assert operator.lower() in str(error).lower()
    assert "REFRESH POLICY AUTO or FULL" in str(error)
    assert not spark.catalog.tableExists("bad")
    assert not spark.catalog.tableExists("__ivm_backing_bad")
    # Under the default policy (AUTO) the same view is created, refreshed by recomputation.
    with session_confs(spark, {"spark.ivm.refreshPolicy.default": "auto"}):
        spark.sql(f"CREATE MATERIALIZED VIEW fallback AS {query}")
    d = MaterializedView.for_name(spark, "fallback").describe()
    assert d["refresh_policy"] == "AUTO" and d["refresh_mode"] == "full"
    assert operator.lower() in d["full_because"].lower()


# Delta tables keep no collated strings: the view column or grouping key that needs one is named,
# with the cast to use instead, under any policy that would keep it.
UNSTORABLE = [
    ("SELECT k, CAST(w AS STRING) COLLATE UTF8_LCASE AS c FROM b", "column `c`", True),
    ("SELECT k, collect_list(CAST(v AS STRING) COLLATE UTF8_LCASE) AS l FROM a GROUP BY k", "column `l`",
     True),
    # Recomputation keeps the output alone; incremental maintenance keeps the key too.
    ("SELECT count(*) AS n FROM a GROUP BY CAST(v AS STRING) COLLATE UTF8_LCASE", "the grouping key", False),
]


@pytest.mark.parametrize("query, what, unstorable_in_full", UNSTORABLE)
def test_a_type_delta_cannot_store_is_named_and_nothing_is_created(
        spark: SparkSession, tables: str, query: str, what: str, unstorable_in_full: bool) -> None:
    for policy in ("INCREMENTAL", "FULL"):
        create = f"CREATE MATERIALIZED VIEW bad REFRESH POLICY {policy} AS {query}"
        if policy == "FULL" and not unstorable_in_full:
            spark.sql(create)
            assert_matches_query(spark, "bad", query)
            spark.sql("DROP MATERIALIZED VIEW bad")
            continue
        error = refused(lambda: spark.sql(create))  # noqa: B023 (called at once)
        assert condition(error) == "IVM_UNSUPPORTED_COLUMN_TYPE", str(error)
        message = str(error)
        assert what in message and "COLLATE UTF8_LCASE" in message, message
        assert "CAST(... AS STRING)" in message, message
        assert "__ivm" not in message, message
        assert not spark.catalog.tableExists("bad")
        assert not spark.catalog.tableExists("__ivm_backing_bad")
    # What the error suggests is maintained.
    spark.sql("CREATE MATERIALIZED VIEW good AS SELECT lower(CAST(v AS STRING)) AS s, count(*) AS n FROM a "
              "GROUP BY lower(CAST(v AS STRING))")
    assert MaterializedView.for_name(spark, "good").describe()["refresh_mode"] == "incremental"


def test_full_refresh_views_accept_any_query(spark: SparkSession, tables: str) -> None:
    q = "SELECT a.k, b.w, rank() OVER (ORDER BY a.v) AS r FROM a LEFT JOIN b ON a.k = b.k"
    spark.sql(f"CREATE MATERIALIZED VIEW f TBLPROPERTIES ('ivm.refresh' = 'full') AS {q}")
    assert_matches_query(spark, "f", q)
    spark.sql("INSERT INTO b VALUES (2, 200)")
    mv = MaterializedView.for_name(spark, "f")
    assert mv.describe()["info"]["Refresh mode"] == "full"
    assert mv.refresh().mode == "full"
    assert_matches_query(spark, "f", q)


def test_non_delta_source_is_refused(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE TABLE pq (k INT) USING parquet")
    error = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW p REFRESH POLICY INCREMENTAL STRICT AS SELECT k FROM pq"))
    assert condition(error) == "IVM_SOURCE_NOT_DELTA"
    assert "CONVERT TO DELTA" in str(error)
    spark.sql("CREATE MATERIALIZED VIEW p AS SELECT k FROM pq")  # AUTO: recomputed
    assert MaterializedView.for_name(spark, "p").describe()["refresh_mode"] == "full"


def test_temp_view_source_is_refused(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE TEMPORARY VIEW tv AS SELECT * FROM a")
    for policy in ("AUTO", "FULL"):  # whatever the policy: the view must outlive the session
        error = refused(lambda policy=policy: spark.sql(
            f"CREATE MATERIALIZED VIEW p REFRESH POLICY {policy} AS SELECT k FROM tv"))
        assert condition(error) == "IVM_TEMPORARY_SOURCE"
        assert "temporary view" in str(error) and "tv" in str(error)


def test_temporary_functions_and_session_variables_are_refused(spark: SparkSession, tables: str) -> None:
    """What lives only as long as the session is refused under every policy, nothing created: a
    Python function registered with spark.udf, a temporary SQL function (also in a CTE and a
    subquery), a session variable. A permanent SQL function is kept, and maintained."""
    spark.udf.register("py_plus1", lambda v: None if v is None else v + 1, "int")
    spark.sql("CREATE TEMPORARY FUNCTION tmp_sq(v INT) RETURNS INT RETURN v * v")
    spark.sql("CREATE FUNCTION perm_sq(v INT) RETURNS INT RETURN v * v")
    spark.sql("DECLARE OR REPLACE VARIABLE ivm_limit INT DEFAULT 1")
    try:
        refused_queries = {
            "SELECT k, py_plus1(v) AS p FROM a": "the temporary function py_plus1",
            "WITH c AS (SELECT k, tmp_sq(v) AS p FROM a) SELECT * FROM c": "the temporary function tmp_sq",
            "SELECT k FROM a WHERE v > (SELECT max(tmp_sq(v)) FROM a)": "the temporary function tmp_sq",
            "SELECT k, v FROM a WHERE v > ivm_limit": "the session variable ivm_limit",
        }
        for query, named in refused_queries.items():
            for policy in ("AUTO", "FULL"):
                error = refused(lambda policy=policy, query=query: spark.sql(
                    f"CREATE MATERIALIZED VIEW p REFRESH POLICY {policy} AS {query}"))
                assert condition(error) == "IVM_TEMPORARY_SOURCE" and named in str(error), str(error)[:400]
                assert not spark.catalog.tableExists("p")
        query = "SELECT k, perm_sq(v) AS p FROM a"
        mv = MaterializedView.create(spark, "p", query, refresh_policy="INCREMENTAL STRICT")
        spark.sql("INSERT INTO a VALUES (100, 3)")
        assert mv.refresh().mode == "incremental"
        assert_matches_query(spark, "p", query)
    finally:
        spark.sql("DROP TEMPORARY VARIABLE IF EXISTS ivm_limit")
        spark.sql("DROP TEMPORARY FUNCTION IF EXISTS tmp_sq")
        spark.sql("DROP FUNCTION IF EXISTS perm_sq")


def test_change_data_feed_is_enabled_or_refused(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE TABLE nocdf (k INT) USING delta")
    spark.conf.set("spark.ivm.autoEnableChangeDataFeed", "false")
    try:
        error = refused(lambda: spark.sql("CREATE MATERIALIZED VIEW c AS SELECT k FROM nocdf"))
        assert condition(error) == "IVM_CHANGE_FEED_DISABLED"
        assert "delta.enableChangeDataFeed" in str(error)
    finally:
        spark.conf.unset("spark.ivm.autoEnableChangeDataFeed")
    spark.sql("CREATE MATERIALIZED VIEW c AS SELECT k FROM nocdf")
    props = {r.key: r.value for r in spark.sql("SHOW TBLPROPERTIES nocdf").collect()}
    assert props.get("delta.enableChangeDataFeed") == "true"


def test_invalid_property_changes_nothing(spark: SparkSession, tables: str) -> None:
    error = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW x TBLPROPERTIES ('ivm.refresh' = 'lazy') AS SELECT k FROM a"))
    assert condition(error) == "IVM_INVALID_PROPERTY"
    assert not spark.catalog.tableExists("x")


def _snapshot(spark: SparkSession, view: str) -> list:
    return sorted(tuple(r) for r in spark.table(view).collect())


def test_dropped_base_table(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE MATERIALIZED VIEW j AS SELECT a.k, b.w FROM a JOIN b ON a.k = b.k")
    before = _snapshot(spark, "j")
    spark.sql("DROP TABLE b")
    for full in (False, True):
        error = refused(lambda full=full: MaterializedView.for_name(spark, "j").refresh(full=full))
        assert condition(error) == "IVM_SOURCE_MISSING"
        assert "b" in str(error)
    assert _snapshot(spark, "j") == before


def test_recreated_or_retyped_base_table(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE MATERIALIZED VIEW s AS SELECT k, sum(v) AS sv FROM a GROUP BY k")
    before = _snapshot(spark, "s")
    spark.sql("DROP TABLE a")
    spark.sql("CREATE TABLE a (k INT, v BIGINT) USING delta "
              "TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql("INSERT INTO a VALUES (7, 70)")
    error = refused(lambda: MaterializedView.for_name(spark, "s").refresh())
    assert condition(error) == "IVM_SOURCE_CHANGED"
    assert "REFRESH MATERIALIZED VIEW" in str(error) and "FULL" in str(error)
    assert _snapshot(spark, "s") == before
    # REFRESH ... FULL rebuilds from the new table, after which refreshes are incremental again
    assert MaterializedView.for_name(spark, "s").refresh(full=True).mode == "full"
    spark.sql("INSERT INTO a VALUES (7, 1)")
    assert MaterializedView.for_name(spark, "s").refresh().mode == "incremental"
    assert_matches_query(spark, "s", "SELECT k, sum(v) AS sv FROM a GROUP BY k")


def test_column_retyped_or_dropped_in_place(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE MATERIALIZED VIEW s2 AS SELECT k, v FROM a")
    before = _snapshot(spark, "s2")
    spark.sql("ALTER TABLE a SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql("ALTER TABLE a CHANGE COLUMN v TYPE BIGINT")
    error = refused(lambda: MaterializedView.for_name(spark, "s2").refresh())
    assert condition(error) == "IVM_SOURCE_CHANGED"
    assert "column v changed type from int to bigint" in str(error)
    assert _snapshot(spark, "s2") == before

    spark.sql("CREATE MATERIALIZED VIEW s3 AS SELECT k FROM b")
    spark.sql("ALTER TABLE b SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
              "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    spark.sql("ALTER TABLE b DROP COLUMN w")
    spark.sql("INSERT INTO b VALUES (5)")
    error = refused(lambda: MaterializedView.for_name(spark, "s3").refresh())
    assert condition(error) == "IVM_SOURCE_CHANGED"
    assert "column w was dropped" in str(error)


def test_backing_table_altered_by_hand(spark: SparkSession, tables: str) -> None:
    q = "SELECT k, count(*) AS n FROM a GROUP BY k"
    spark.sql(f"CREATE MATERIALIZED VIEW h AS {q}")
    # Spark's DML on the backing table is refused; Delta's API (as another tool would use it) is not.
    from delta.tables import DeltaTable
    DeltaTable.forName(spark, "__ivm_backing_h").delete("__ivm_g0 = 1")
    spark.sql("INSERT INTO a VALUES (9, 90)")
    error = refused(lambda: MaterializedView.for_name(spark, "h").refresh())
    assert condition(error) == "IVM_BACKING_TABLE_ALTERED"
    assert "DELETE" in str(error)
    assert MaterializedView.for_name(spark, "h").refresh(full=True).mode == "full"
    assert_matches_query(spark, "h", q)
    spark.sql("INSERT INTO a VALUES (9, 91)")
    assert MaterializedView.for_name(spark, "h").refresh().mode == "incremental"
    assert_matches_query(spark, "h", q)


def test_change_feed_gap_asks_for_full_refresh(spark: SparkSession, tables: str) -> None:
    spark.sql("CREATE MATERIALIZED VIEW g AS SELECT k FROM a")
    before = _snapshot(spark, "g")
    spark.sql("ALTER TABLE a SET TBLPROPERTIES (delta.enableChangeDataFeed = false)")
    spark.sql("INSERT INTO a VALUES (5, 50)")
    spark.sql("ALTER TABLE a SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    error = refused(lambda: MaterializedView.for_name(spark, "g").refresh())
    assert condition(error) == "IVM_CHANGES_UNAVAILABLE", str(error)[:600]
    assert _snapshot(spark, "g") == before
    MaterializedView.for_name(spark, "g").refresh(full=True)
    assert_matches_query(spark, "g", "SELECT k FROM a")


def test_duplicate_output_names_are_refused(spark: SparkSession, tables: str) -> None:
    error = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW d AS SELECT a.k, b.k FROM a JOIN b ON a.k = b.k"))
    assert condition(error) == "IVM_DUPLICATE_COLUMN"


def test_errors_carry_condition_sqlstate_and_parameters(spark: SparkSession, tables: str) -> None:
    """Through Spark's error framework: the same fields as Spark's own errors, from SQL too."""
    error = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS SELECT k FROM a LIMIT 2"))
    assert error.getCondition() == "IVM_NOT_INCREMENTALIZABLE"
    assert error.getSqlState() == "0A000"
    assert error.getMessageParameters()["operator"] == "LIMIT / OFFSET"
    assert "SQLSTATE: 0A000" in str(error)
    # The LIMIT of a top-k materialized view the query reads: named as that view's.
    spark.sql("CREATE MATERIALIZED VIEW top2 AS SELECT k, v FROM a ORDER BY v DESC LIMIT 2")
    error = refused(lambda: spark.sql(
        "CREATE MATERIALIZED VIEW bad REFRESH POLICY INCREMENTAL STRICT AS SELECT count(*) AS n FROM top2"))
    assert error.getMessageParameters()["operator"] == "LIMIT / OFFSET"
    assert "of a materialized view this query reads" in str(error), str(error)
    error = refused(lambda: spark.sql("REFRESH MATERIALIZED VIEW nope"))
    assert (error.getCondition(), error.getSqlState()) == ("IVM_VIEW_NOT_FOUND", "42P01")


def test_python_api_raises_typed_errors(spark: SparkSession, tables: str) -> None:
    with pytest.raises(errors.UnsupportedOperatorError) as info:
        MaterializedView.create(spark, "bad", "SELECT k FROM a LIMIT 2", refresh_policy="INCREMENTAL STRICT")
    assert isinstance(info.value, errors.NotIncrementalizableError)
    assert isinstance(info.value, AnalysisException)
    assert info.value.getMessageParameters()["operator"] == "LIMIT / OFFSET"
    with pytest.raises(errors.ViewNotFoundError):
        MaterializedView.for_name(spark, "nope")
    mv = MaterializedView.create(spark, "ok", "SELECT k, count(*) AS n FROM a GROUP BY k")
    with pytest.raises(errors.ViewAlreadyExistsError):
        MaterializedView.create(spark, "ok", "SELECT k FROM a")
    with pytest.raises(errors.InvalidPropertyError):
        mv.epsilon = 0.5
    with pytest.raises(errors.ConstraintInvalidError):
        add_primary_key(spark, "a", ["nope"])
    # Errors that are not spark-ivm's stay as PySpark raised them.
    with pytest.raises(AnalysisException) as other:
        MaterializedView.create(spark, "bad", "SELECT nope FROM a")
    assert not isinstance(other.value, errors.IvmAnalysisException)
    # spark.sql() itself raises PySpark's class; typed() converts.
    raw = refused(lambda: spark.sql("REFRESH MATERIALIZED VIEW nope"))
    assert isinstance(errors.typed(raw), errors.ViewNotFoundError)
    with pytest.raises(errors.ViewNotFoundError), errors.translated():
        spark.sql("DROP MATERIALIZED VIEW nope")


def test_every_engine_condition_has_a_python_class() -> None:
    import json
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2]
    declared = json.loads((root / "scala/resources/error/ivm-error-conditions.json").read_text())
    def classes(c: type) -> list:
        return [c, *[d for s in c.__subclasses__() for d in classes(s)]]
    assert set(declared) == {c.condition for c in classes(errors.IvmAnalysisException)[1:]}
