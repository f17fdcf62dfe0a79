"""The state spark-ivm holds between refreshes (``SHOW MATERIALIZED VIEW STATE``), as records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class HeldState:
    """One arrangement spark-ivm holds between refreshes.

    ``kind`` says what it holds (``table rows``, ``keyed rows``, ``view rows``, ``key counts``,
    ``results``, ``file lists``, ``lookup trees``, ``eps state``, ``heavy keys``); ``of`` names
    the table or result it is of; ``place`` is ``driver`` or ``executors`` (each has its own
    budget: ``spark.ivm.state.driverMaxBytes``, ``spark.ivm.state.executorMaxBytes``); ``bytes``
    is its size there; ``view`` the view it serves, where it serves one view only; ``stamp`` the
    table versions it is of.
    """

    kind: str
    of: str
    place: str
    bytes: int
    view: Optional[str]
    stamp: str


def held_state(spark: SparkSession, view: Optional[str] = None) -> List[HeldState]:
    """What spark-ivm holds in this application, least recently used first; with ``view``, only
    what serves that view (its own state, its backing table's and its source tables')."""
    suffix = f" FOR {view}" if view else ""
    rows = spark.sql(f"SHOW MATERIALIZED VIEW STATE{suffix}").collect()
    return [HeldState(r["kind"], r["of"], r["place"], int(r["bytes"]), r["view"], r["stamp"]) for r in rows]
