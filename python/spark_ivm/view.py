"""``MaterializedView``: the Python handle on one materialized view."""

from __future__ import annotations

import json
import pickle
from decimal import Decimal
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from pyspark.errors import AnalysisException
from pyspark.serializers import CPickleSerializer
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from spark_ivm.errors import IvmError, raises_typed
from spark_ivm.history import Lag, RefreshEntry
from spark_ivm.report import RefreshReport
from spark_ivm.session import is_connect
from spark_ivm.state import HeldState, held_state

POLICIES = ("AUTO", "INCREMENTAL", "INCREMENTAL STRICT", "FULL")


def quote_name(name: str) -> str:
    """Back-quote each part of a dotted name unless the caller already quoted it."""
    if "`" in name:
        return name
    return ".".join(f"`{part}`" for part in name.split("."))


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quote_column(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _column_list(schema: Union[str, StructType]) -> str:
    """A CREATE column list from a DDL string (as given) or a StructType."""
    if isinstance(schema, str):
        return schema
    return ", ".join(
        _quote_column(f.name) + f" {f.dataType.simpleString()}" + ("" if f.nullable else " NOT NULL")
        + (f" COMMENT {_sql_string(f.metadata['comment'])}" if "comment" in f.metadata else "")
        for f in schema.fields)


def _policy(value: str) -> str:
    words = " ".join(value.replace("_", " ").split()).upper()
    if words not in POLICIES:
        raise IvmError(f"refresh policy {value!r} is not one of {', '.join(POLICIES)}")
    return words


def is_materialized_view(spark: SparkSession, name: str) -> bool:
    """True if ``name`` (``view``, ``db.view``) is a materialized view. A catalog lookup only."""
    if not is_connect(spark):
        # One call into the driver, not a statement to parse, analyze and run.
        jvm = spark._jvm
        assert jvm is not None
        catalog = jvm.io.sparkivm.catalog.ViewCatalog
        return bool(catalog.isMaterializedView(spark._jsparkSession, quote_name(name)))
    try:
        # Asked first, so that a missing name raises nothing (a Spark Connect client logs every
        # error it receives, caught or not).
        if not spark.catalog.tableExists(quote_name(name)):
            return False
        rows = spark.sql(f"SHOW TBLPROPERTIES {quote_name(name)} ('ivm.materialized')").collect()
    except AnalysisException:
        return False
    return bool(rows) and rows[0][1] == "true"


@raises_typed
def list_materialized_views(spark: SparkSession, database: Optional[str] = None) -> List[str]:
    """Qualified names (``db.view``) of the materialized views of a database (the current one
    by default), as SHOW MATERIALIZED VIEWS lists them."""
    where = f" IN {quote_name(database)}" if database else ""
    return [f"{r.namespace}.{r.viewName}" for r in spark.sql(f"SHOW MATERIALIZED VIEWS{where}").collect()]


class MaterializedView:
    """A materialized view maintained by spark-ivm.

    Every method runs the same SQL statements a ``spark-sql`` user would, so the two stay
    interchangeable: ``refresh`` is ``REFRESH MATERIALIZED VIEW``, ``describe`` is
    ``DESCRIBE MATERIALIZED VIEW`` and so on.
    """

    def __init__(self, spark: SparkSession, name: str) -> None:
        self.spark = spark
        self.name = name
        self._sql_name = quote_name(name)
        self._trees: Any = None

    @classmethod
    @raises_typed
    def for_name(cls, spark: SparkSession, name: str) -> "MaterializedView":
        """The view called ``name`` (``view`` or ``db.view``). A catalog lookup only: nothing is
        analyzed or read. If there is none, ``ViewNotFoundError`` (``IVM_VIEW_NOT_FOUND``), and if
        the name is a table or plain view, ``NotAMaterializedViewError``, as ``DESCRIBE
        MATERIALIZED VIEW`` raises them."""
        if not is_materialized_view(spark, name):
            # raises IVM_VIEW_NOT_FOUND or IVM_NOT_A_MATERIALIZED_VIEW
            spark.sql(f"DESCRIBE MATERIALIZED VIEW {quote_name(name)}")
            raise IvmError(f"{name} is not a materialized view (SHOW MATERIALIZED VIEWS lists them)")
        return cls(spark, name)

    @classmethod
    @raises_typed
    def create(
        cls,
        spark: SparkSession,
        name: str,
        query: str,
        *,
        refresh_policy: Optional[str] = None,
        schedule: Optional[str] = None,
        comment: Optional[str] = None,
        properties: Optional[Mapping[str, str]] = None,
        if_not_exists: bool = False,
        or_replace: bool = False,
        refresh: Optional[str] = None,
        access_by: Optional[Sequence[str]] = None,
        schema: Optional[Union[str, StructType]] = None,
        partition_cols: Optional[Sequence[str]] = None,
        cluster_by: Optional[Sequence[str]] = None,
        or_refresh: bool = False,
    ) -> "MaterializedView":
        """CREATE MATERIALIZED VIEW ``name`` AS ``query``, and return its handle.

        ``refresh_policy`` is ``AUTO`` (the default), ``INCREMENTAL``, ``INCREMENTAL STRICT`` or
        ``FULL``; ``schedule`` a clause such as ``"SCHEDULE EVERY 1 HOUR"``,
        ``"SCHEDULE CRON '0 0 * * * ?' AT TIME ZONE 'UTC'"`` or
        ``"TRIGGER ON UPDATE AT MOST EVERY INTERVAL 10 SECONDS"``, which a
        :class:`~spark_ivm.RefreshService` runs. ``refresh`` (``incremental`` or ``full``) is the
        older ``ivm.refresh`` property, kept working: it stands for INCREMENTAL or FULL.
        ``access_by`` names the view's input columns (``ACCESS BY (...)``): the columns a
        :meth:`lookup` binds.

        As Spark Declarative Pipelines' ``materialized_view`` takes them: ``schema`` is the
        column list, a DDL string (``"k INT NOT NULL COMMENT 'key', total DOUBLE"``) or a
        ``StructType`` (a field not nullable is NOT NULL); each declared type must be the query's.
        ``partition_cols`` and ``cluster_by`` lay the view's Delta table out (PARTITIONED BY,
        CLUSTER BY). ``or_refresh`` runs CREATE OR REFRESH: an existing view declared the same
        is refreshed, any other replaced.
        """
        props = dict(properties or {})
        if refresh is not None:
            props["ivm.refresh"] = refresh
        prop_sql = ", ".join(f"{_sql_string(k)} = {_sql_string(str(v))}" for k, v in props.items())
        head = "CREATE OR REPLACE" if or_replace else "CREATE OR REFRESH" if or_refresh else "CREATE"
        cond = " IF NOT EXISTS" if if_not_exists else ""
        columns = f" ({_column_list(schema)})" if schema is not None else ""
        clauses = f" COMMENT {_sql_string(comment)}" if comment is not None else ""
        if partition_cols:
            clauses += " PARTITIONED BY (" + ", ".join(_quote_column(c) for c in partition_cols) + ")"
        if cluster_by:
            clauses += " CLUSTER BY (" + ", ".join(_quote_column(c) for c in cluster_by) + ")"
        if props:
            clauses += f" TBLPROPERTIES ({prop_sql})"
        if refresh_policy is not None:
            clauses += f" REFRESH POLICY {_policy(refresh_policy)}"
        if schedule is not None:
            clauses += f" {schedule}"
        if access_by:
            clauses += " ACCESS BY (" + ", ".join(quote_name(c) for c in access_by) + ")"
        spark.sql(f"{head} MATERIALIZED VIEW{cond} {quote_name(name)}{columns}{clauses} AS {query}")
        return cls(spark, name)

    @raises_typed
    def refresh(self, full: bool = False, cascade: bool = False) -> RefreshReport:
        """Bring the view up to date; ``full=True`` recomputes it from scratch; ``cascade=True``
        first refreshes the materialized views it reads (where they are stale), as
        ``REFRESH MATERIALIZED VIEW ... CASCADE`` does. Returns this view's report."""
        options = (" FULL" if full else "") + (" CASCADE" if cascade else "")
        rows = self.spark.sql(f"REFRESH MATERIALIZED VIEW {self._sql_name}{options} WITH REPORT").collect()
        return RefreshReport.from_json(rows[-1]["report"])

    @property
    def refresh_policy(self) -> str:
        """``AUTO``, ``INCREMENTAL``, ``INCREMENTAL STRICT`` or ``FULL``. Setting it runs
        ``ALTER MATERIALIZED VIEW ... SET REFRESH POLICY`` (which rebuilds the view if the new
        policy needs another layout of its table)."""
        policy: str = self.describe()["refresh_policy"]
        return policy

    @refresh_policy.setter
    @raises_typed
    def refresh_policy(self, value: str) -> None:
        self.spark.sql(f"ALTER MATERIALIZED VIEW {self._sql_name} SET REFRESH POLICY {_policy(value)}")

    @property
    def schedule(self) -> Optional[str]:
        """The view's SCHEDULE or TRIGGER ON UPDATE clause, or None."""
        clause: Optional[str] = self.describe()["schedule"]
        return clause

    @raises_typed
    def set_schedule(self, clause: Optional[str]) -> None:
        """Set (add or replace) the view's schedule, e.g. ``"SCHEDULE EVERY 2 HOURS"`` or
        ``"TRIGGER ON UPDATE"``; None drops it."""
        current = self.schedule
        if clause is None:
            if current is not None:
                self.spark.sql(f"ALTER MATERIALIZED VIEW {self._sql_name} DROP SCHEDULE")
            return
        action = "ADD" if current is None else "ALTER"
        self.spark.sql(f"ALTER MATERIALIZED VIEW {self._sql_name} {action} {clause}")

    @raises_typed
    def history(self, limit: Optional[int] = None) -> List[RefreshEntry]:
        """Past refreshes, newest first, as ``SHOW REFRESHES FOR`` lists them."""
        suffix = f" LIMIT {int(limit)}" if limit is not None else ""
        rows = self.spark.sql(f"SHOW REFRESHES FOR {self._sql_name}{suffix}").collect()
        return [RefreshEntry.from_row(r) for r in rows]

    @raises_typed
    def state(self) -> List[HeldState]:
        """The state held for this view between refreshes (``SHOW MATERIALIZED VIEW STATE FOR``)."""
        return held_state(self.spark, self._sql_name)

    @raises_typed
    def lag(self) -> Lag:
        """Base-table commits the view has not applied, and the time since the oldest of them
        (read from the Delta logs: no Spark job)."""
        return Lag.from_describe(self.describe())

    @raises_typed
    def describe(self) -> Dict[str, Any]:
        """The view's metadata as structured fields, from ``DESCRIBE MATERIALIZED VIEW ... AS JSON``.

        Keys: ``catalog``, ``database``, ``name``, ``qualified_name``, ``backing_table``,
        ``query``, ``refresh_mode``, ``refresh_policy``, ``full_because`` (why a view whose
        policy allows incremental refreshes is recomputed, or None), ``schedule``,
        ``partitioned_by`` and ``clustered_by`` (the declared layout's columns),
        ``freshness`` (``pending_commits``, ``lag_ms``, ``sources``), ``comment``,
        ``columns`` (``[(name, type), ...]``),
        ``maintenance`` (``strategy``: ``counting``, ``ivm_eps`` or ``full``; ``shape``;
        ``epsilon``: the IVM^eps state or None), ``sources`` (``table``, ``consumed_version``,
        ``current_version``), ``last_refresh`` (``number``, ``mode``, ``reason``,
        ``timestamp``, ``backing_version``), ``properties``, ``warnings``, and ``info``: the rows of plain
        DESCRIBE as ``{key: value or [values]}``.
        """
        row = self.spark.sql(f"DESCRIBE MATERIALIZED VIEW {self._sql_name} AS JSON").collect()[0]
        fields: Dict[str, Any] = json.loads(row["json_metadata"])
        fields["columns"] = [(name, dtype) for name, dtype in fields["columns"]]
        return fields

    @property
    def epsilon(self) -> Optional[float]:
        """The eps dial of a triangle view (IVM^eps) or of a view with ACCESS BY (the
        heavy/light view trees its lookups read); None for other views.

        Setting it runs ``ALTER MATERIALIZED VIEW ... SET TBLPROPERTIES ('ivm.epsilon' = ...)``,
        which rebuilds a triangle view's heavy/light partitions and auxiliary views, and a view's
        lookup trees on its next lookup; a value outside [0, 1] is an error that changes nothing.
        """
        described = self.describe()
        state = described["maintenance"]["epsilon"]
        if state is not None:
            return float(state["eps"])
        access = described.get("access") or {}
        return float(access["epsilon"]) if "epsilon" in access else None

    @epsilon.setter
    @raises_typed
    def epsilon(self, value: float) -> None:
        self.spark.sql(
            f"ALTER MATERIALIZED VIEW {self._sql_name} SET TBLPROPERTIES "
            f"('ivm.epsilon' = {_sql_string(str(value))})"
        )

    @raises_typed
    def explain_refresh(self, extended: bool = False) -> str:
        """What the next refresh would run and why, in words (``EXPLAIN REFRESH``); with
        ``extended``, Spark's plan of the rows it would compute too (``EXPLAIN EXTENDED
        REFRESH``). Changes nothing."""
        explain = "EXPLAIN EXTENDED" if extended else "EXPLAIN"
        text: str = self.spark.sql(f"{explain} REFRESH MATERIALIZED VIEW {self._sql_name}").collect()[0][0]
        return text

    @property
    @raises_typed
    def access_by(self) -> List[str]:
        """The input columns of the view's access pattern (``ACCESS BY``); empty if none. Read
        from the catalog view's properties (a catalog lookup, no Spark job)."""
        props = {r.key: r.value for r in self.spark.sql(f"SHOW TBLPROPERTIES {self._sql_name}").collect()}
        return list(json.loads(props.get("ivm.accessBy", "[]")))

    def _inputs(self, names: Sequence[str]) -> List[str]:
        declared = self.access_by
        if not declared:
            raise IvmError(f"view {self.name} has no access pattern: create it with ACCESS BY (...) "
                           "(or read it with rows())")
        lower = {c.lower(): c for c in declared}
        given = {n.lower() for n in names}
        if given != set(lower):
            raise IvmError(f"a lookup of {self.name} binds exactly its inputs {declared}, "
                           f"not {sorted(names)}")
        return declared

    @raises_typed
    def lookup(self, **inputs: Any) -> Iterator[Row]:
        """The answer to one access request: the view's output columns (all but its ACCESS BY
        inputs) for the rows whose inputs have these values, one row per unit of multiplicity,
        lazily. ``None`` matches NULL. The answer is that of one committed refresh.

        A CQAP0 view (see EXPLAIN REFRESH) is answered from its view trees (Zhang 2022, chapter
        4), held in the driver's memory: built on the first lookup, moved forward by the base
        tables' changes on the first lookup after each refresh, and read only where they match
        the inputs, so the time to the first answer and between answers does not grow with the
        data. Other views, and inputs of types other than ``int``, ``float``, ``str``, ``bool``
        and ``Decimal``, are answered from the materialized result filtered by the inputs (the
        eager baseline), whose files are ordered by the first input so that the read skips the
        files that cannot hold it. :meth:`lookup_structure` says which.
        """
        cursor = self._open_trees(inputs)
        if cursor is not None:
            return _drain(cursor)
        declared = self._inputs(list(inputs))
        given = {k.lower(): v for k, v in inputs.items()}
        df = self.to_df()
        for column in declared:
            df = df.where(F.col(f"`{column}`").eqNullSafe(F.lit(given[column.lower()])))
        outputs = [c for c in df.columns if c.lower() not in given]
        return df.select(*[F.col(f"`{c}`") for c in outputs]).toLocalIterator()

    def _open_trees(self, inputs: Dict[str, Any]) -> Any:
        """A cursor over the view trees' answer, or None: no trees, other input types, or inputs
        that are not the view's (which the eager path then reports)."""
        if not all(v is None or isinstance(v, (bool, int, float, str, Decimal)) for v in inputs.values()):
            return None
        if is_connect(self.spark):
            return None
        # One round trip: names joined, values pickled (lists would cost one per element).
        return self._lookup_trees().open(self.spark._jsparkSession, self._sql_name, "\0".join(inputs),
                                         bytearray(pickle.dumps(list(inputs.values()), protocol=2)))

    def _lookup_trees(self) -> Any:
        """The JVM's LookupTrees, resolved once (each resolution is a round trip per package)."""
        if self._trees is None:
            jvm = self.spark._jvm
            assert jvm is not None
            self._trees = jvm.io.sparkivm.access.LookupTrees
        return self._trees

    @raises_typed
    def lookup_structure(self) -> str:
        """How :meth:`lookup` answers: ``view trees held: <n> tuples at <versions>``, or ``no view
        trees: <why>`` (then it reads the view's rows). Builds the trees if the view has them."""
        if is_connect(self.spark):
            return ("no view trees: a Spark Connect client reads the view's rows (the trees live in a "
                    "driver's memory, which a Connect client does not share)")
        text: str = self._lookup_trees().describe(self.spark._jsparkSession, self._sql_name)
        return text

    @raises_typed
    def lookup_many(self, requests: DataFrame) -> DataFrame:
        """The answers to many access requests at once: ``requests`` has the view's input
        columns; the result has them and the output columns, one row per answer row, computed
        by one distributed join (the same rows as :meth:`lookup` for each request)."""
        declared = self._inputs(requests.columns)
        view = self.to_df()
        req = requests.select(*[F.col(f"`{c}`").alias(f"__req_{i}") for i, c in enumerate(declared)])
        cond = [req[f"__req_{i}"].eqNullSafe(view[f"`{c}`"]) for i, c in enumerate(declared)]
        return req.join(view, cond, "inner").drop(*[f"__req_{i}" for i in range(len(declared))])

    def to_df(self) -> DataFrame:
        """The view as a DataFrame (the same as ``spark.table(name)``)."""
        return self.spark.table(self._sql_name)

    def rows(self, **equalities: Any) -> Iterator[Row]:
        """Lazily iterate over the view's rows, optionally only those with these column values.

        ``mv.rows(c_custkey=42)`` yields the rows whose ``c_custkey`` is 42 (``None`` matches
        NULL). Rows are fetched one partition at a time, never the whole view at once.

        A view that lists triangles (``SELECT a, b, c`` over ``R(a, b), S(b, c), T(c, a)``),
        read without equalities, is enumerated instead from IVM^eps's view trees (Kara et al.
        2020, section 4), held in the driver's memory like :meth:`lookup`'s: built on the first
        call, moved forward by the tables' changes on the first call after a refresh, with a
        delay between rows that does not grow with the data. :meth:`lookup_structure` says
        whether a view has them.
        """
        if not equalities:
            cursor = self._open_trees({})
            if cursor is not None:
                return _drain(cursor)
        df = self.to_df()
        for column, value in equalities.items():
            if column not in df.columns:
                raise IvmError(f"view {self.name} has no column {column!r}; it has {df.columns}")
            df = df.where(F.col(f"`{column}`").eqNullSafe(F.lit(value)))
        return df.toLocalIterator()

    @raises_typed
    def drop(self) -> None:
        """DROP MATERIALIZED VIEW, with the tables it owns."""
        self.spark.sql(f"DROP MATERIALIZED VIEW {self._sql_name}")

    def __repr__(self) -> str:
        return f"MaterializedView({self.name!r})"


def _drain(cursor: Any) -> Iterator[Row]:
    """The rows of a lookup cursor of the view trees, in growing batches (the first one small,
    for a quick first answer); the cursor is closed when it runs out, or here when the
    generator is dropped before."""
    serializer = CPickleSerializer()
    size = 64
    done = False
    try:
        while not done:
            batch = serializer.loads(bytes(cursor.next(size)))  # type: ignore[no-untyped-call]
            # A short batch is the last: the cursor closed itself (no round trip to ask again).
            done = len(batch) < size
            yield from batch
            size = min(size * 4, 4096)
    finally:
        if not done:
            cursor.close()
