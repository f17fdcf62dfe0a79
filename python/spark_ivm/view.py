"""``MaterializedView``: the Python handle on one materialized view."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Mapping, Optional

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from spark_ivm.errors import IvmError, raises_typed
from spark_ivm.report import RefreshReport


def quote_name(name: str) -> str:
    """Back-quote each part of a dotted name unless the caller already quoted it."""
    if "`" in name:
        return name
    return ".".join(f"`{part}`" for part in name.split("."))


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def is_materialized_view(spark: SparkSession, name: str) -> bool:
    """True if ``name`` (``view``, ``db.view``) is a materialized view. A catalog lookup only."""
    try:
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

    @classmethod
    @raises_typed
    def for_name(cls, spark: SparkSession, name: str) -> "MaterializedView":
        """The view called ``name`` (``view`` or ``db.view``). A catalog lookup only: nothing is
        analyzed or read. If there is none, ``ViewNotFoundError`` (``IVM_VIEW_NOT_FOUND``), as
        ``DESCRIBE MATERIALIZED VIEW`` raises it."""
        if not is_materialized_view(spark, name):
            spark.sql(f"DESCRIBE MATERIALIZED VIEW {quote_name(name)}")  # raises IVM_VIEW_NOT_FOUND
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
        refresh: str = "incremental",
        comment: Optional[str] = None,
        properties: Optional[Mapping[str, str]] = None,
        if_not_exists: bool = False,
        or_replace: bool = False,
    ) -> "MaterializedView":
        """CREATE MATERIALIZED VIEW ``name`` AS ``query``, and return its handle."""
        props = {"ivm.refresh": refresh, **(properties or {})}
        prop_sql = ", ".join(f"{_sql_string(k)} = {_sql_string(str(v))}" for k, v in props.items())
        head = "CREATE OR REPLACE" if or_replace else "CREATE"
        cond = " IF NOT EXISTS" if if_not_exists else ""
        comment_sql = f" COMMENT {_sql_string(comment)}" if comment is not None else ""
        spark.sql(
            f"{head} MATERIALIZED VIEW{cond} {quote_name(name)}{comment_sql} "
            f"TBLPROPERTIES ({prop_sql}) AS {query}"
        )
        return cls(spark, name)

    @raises_typed
    def refresh(self, full: bool = False) -> RefreshReport:
        """Bring the view up to date; ``full=True`` recomputes it from scratch."""
        row = self.spark.sql(
            f"REFRESH MATERIALIZED VIEW {self._sql_name}{' FULL' if full else ''}"
        ).collect()[0]
        return RefreshReport.from_json(row["report"])

    @raises_typed
    def describe(self) -> Dict[str, Any]:
        """The view's metadata as structured fields, from ``DESCRIBE MATERIALIZED VIEW ... AS JSON``.

        Keys: ``catalog``, ``database``, ``name``, ``qualified_name``, ``backing_table``,
        ``query``, ``refresh_mode``, ``comment``, ``columns`` (``[(name, type), ...]``),
        ``maintenance`` (``strategy``: ``counting``, ``ivm_eps`` or ``full``; ``shape``;
        ``epsilon``: the IVM^eps state or None), ``sources`` (``table``, ``consumed_version``,
        ``current_version``), ``last_refresh`` (``number``, ``mode``, ``timestamp``,
        ``backing_version``), ``properties``, ``warnings``, and ``info``: the rows of plain
        DESCRIBE as ``{key: value or [values]}``.
        """
        row = self.spark.sql(f"DESCRIBE MATERIALIZED VIEW {self._sql_name} AS JSON").collect()[0]
        fields: Dict[str, Any] = json.loads(row["json_metadata"])
        fields["columns"] = [(name, dtype) for name, dtype in fields["columns"]]
        return fields

    @property
    def epsilon(self) -> Optional[float]:
        """The IVM^eps dial of a triangle view (None for other views).

        Setting it runs ``ALTER MATERIALIZED VIEW ... SET TBLPROPERTIES ('ivm.epsilon' = ...)``,
        which rebuilds the heavy/light partitions and auxiliary views; a value outside [0, 1]
        is an error that changes nothing.
        """
        state = self.describe()["maintenance"]["epsilon"]
        return None if state is None else float(state["eps"])

    @epsilon.setter
    @raises_typed
    def epsilon(self, value: float) -> None:
        self.spark.sql(
            f"ALTER MATERIALIZED VIEW {self._sql_name} SET TBLPROPERTIES "
            f"('ivm.epsilon' = {_sql_string(str(value))})"
        )

    @raises_typed
    def explain_refresh(self) -> str:
        """What the next refresh would run, in words and as Spark's plan. Changes nothing."""
        text: str = self.spark.sql(f"EXPLAIN REFRESH MATERIALIZED VIEW {self._sql_name}").collect()[0][0]
        return text

    def to_df(self) -> DataFrame:
        """The view as a DataFrame (the same as ``spark.table(name)``)."""
        return self.spark.table(self._sql_name)

    def rows(self, **equalities: Any) -> Iterator[Row]:
        """Lazily iterate over the view's rows, optionally only those with these column values.

        ``mv.rows(c_custkey=42)`` yields the rows whose ``c_custkey`` is 42 (``None`` matches
        NULL). Rows are fetched one partition at a time, never the whole view at once.
        """
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
