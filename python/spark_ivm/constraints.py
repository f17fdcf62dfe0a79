"""PRIMARY KEY and FOREIGN KEY constraints from Python.

Each helper runs the SQL statement a ``spark-sql`` user would (``ALTER TABLE ... ADD
CONSTRAINT``), so the data is checked the same way and errors are the same
errors, raised as the typed ``ConstraintViolatedError``, ``ConstraintInvalidError`` and so on
(subclasses of ``AnalysisException``, see ``spark_ivm.errors``).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

from pyspark.sql import SparkSession

from spark_ivm.errors import raises_typed
from spark_ivm.view import quote_name

PROPERTY_PREFIX = "ivm.constraint."


def _columns(cols: Sequence[str]) -> str:
    return ", ".join("`" + c.replace("`", "``") + "`" for c in cols)


def _named(name: Optional[str]) -> str:
    return f"CONSTRAINT `{name}` " if name else ""


@raises_typed
def add_primary_key(spark: SparkSession, table: str, columns: Sequence[str],
                    name: Optional[str] = None) -> None:
    """Declare ``columns`` the primary key of ``table`` after checking they are unique and not null."""
    spark.sql(f"ALTER TABLE {quote_name(table)} ADD {_named(name)}PRIMARY KEY ({_columns(columns)})")


@raises_typed
def add_foreign_key(spark: SparkSession, table: str, columns: Sequence[str], parent: str,
                    parent_columns: Sequence[str], name: Optional[str] = None, rely: bool = False) -> None:
    """Declare a foreign key of ``table`` to the primary key of ``parent``, after checking that
    every key without a NULL column has its parent row. With ``rely=True`` (SQL's ``RELY``) the
    key is checked now and trusted afterwards: refreshes skip the integrity check, and the writers
    of ``table`` are responsible for keeping it."""
    spark.sql(f"ALTER TABLE {quote_name(table)} ADD {_named(name)}FOREIGN KEY ({_columns(columns)}) "
              f"REFERENCES {quote_name(parent)} ({_columns(parent_columns)}){' RELY' if rely else ''}")


@raises_typed
def drop_constraint(spark: SparkSession, table: str, name: str, if_exists: bool = False) -> None:
    """Drop a constraint of ``table`` (a key kept by spark-ivm, or a Delta CHECK constraint)."""
    spark.sql(f"ALTER TABLE {quote_name(table)} DROP CONSTRAINT {'IF EXISTS ' if if_exists else ''}`{name}`")


@raises_typed
def constraints(spark: SparkSession, table: str) -> Dict[str, str]:
    """The key constraints declared on ``table``: name -> SQL (``PRIMARY KEY (`a`)`` ...)."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {quote_name(table)}").collect()
    return {r[0][len(PROPERTY_PREFIX):]: r[1] for r in rows if r[0].startswith(PROPERTY_PREFIX)}
