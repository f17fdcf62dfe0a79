"""What a refresh did, as returned by ``MaterializedView.refresh``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass(frozen=True)
class SourceChange:
    """One base table in a refresh: versions consumed and rows in its net change."""

    table: str
    from_version: int
    to_version: int
    changed_rows: int


@dataclass(frozen=True)
class Candidate:
    """A way the AUTO refresh policy weighed to refresh a view, with its estimated time."""

    mode: str
    estimated_ms: int
    basis: str


@dataclass(frozen=True)
class Verification:
    """The check of a refresh against its query (``spark.ivm.verify``)."""

    level: str
    """``sample``, ``changed`` or ``all``."""
    keys_checked: int
    """Keys (groups, or rows of a view without GROUP BY) checked; -1 for the whole view."""
    rows_checked: int
    differences: int
    """Rows that differed from the query; a view that differed was recomputed at once."""
    sample: List[str]
    ms: int
    repaired_by: Optional[int] = None
    """The number of the full refresh that repaired the view, if it differed."""


@dataclass(frozen=True)
class RefreshReport:
    """What one refresh did.

    ``mode`` is ``incremental``, ``full``, ``noop`` (no base table changed) or ``skipped``
    (a concurrent refresh committed the same changes first; nothing was applied twice).
    """

    view: str
    mode: str
    refresh_number: int
    sources: List[SourceChange]
    branches: List[str]
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    phases_ms: Dict[str, int] = field(default_factory=dict)
    backing_version: int = -1
    message: str = ""
    plan_notes: List[str] = field(default_factory=list)
    """FK graph, components, FK-Guard and integrity outcomes, and key probes of the delta plan."""
    rows_read: int = 0
    """Rows the refresh's Spark jobs read from storage (after file skipping and Parquet filtering)."""
    rows_joined: int = 0
    """Rows that entered joins in the queries the refresh ran (measured only with
    ``spark.ivm.metrics.rowsJoined=true``; Delta's MERGE internals excluded)."""
    spark_jobs: int = 0
    """Spark jobs the refresh ran, Delta's own included (a refresh with nothing to do runs none)."""
    spark_tasks: int = 0
    """Spark tasks of those jobs."""
    phases_jobs: Dict[str, int] = field(default_factory=dict)
    """Spark jobs started in each phase (the phases of ``phases_ms``)."""
    policy: str = ""
    """The view's refresh policy: ``AUTO``, ``INCREMENTAL``, ``INCREMENTAL STRICT`` or ``FULL``."""
    reason: str = ""
    """Why the refresh ran in its mode (AUTO: the estimates it compared)."""
    candidates: List[Candidate] = field(default_factory=list)
    """The modes AUTO weighed, with their estimated times (empty when the mode was fixed)."""
    verify: Optional[Verification] = None
    """The check of this refresh against its query, when ``spark.ivm.verify`` is on."""

    @property
    def source_rows_changed(self) -> int:
        """Rows in the net changes of all base tables."""
        return sum(s.changed_rows for s in self.sources)

    @property
    def view_rows_changed(self) -> int:
        """Rows of the backing table inserted, updated or deleted."""
        return self.rows_inserted + self.rows_updated + self.rows_deleted

    @property
    def total_ms(self) -> int:
        """Wall time of the refresh in milliseconds."""
        return sum(self.phases_ms.values())

    @classmethod
    def from_json(cls, text: str) -> "RefreshReport":
        """Parse the JSON that REFRESH MATERIALIZED VIEW ... WITH REPORT returns in its ``report``
        column."""
        d = json.loads(text)
        return cls(
            view=d["view"],
            mode=d["mode"],
            refresh_number=int(d["refresh_number"]),
            sources=[SourceChange(**s) for s in d["sources"]],
            branches=list(d["branches"]),
            rows_inserted=int(d["rows_inserted"]),
            rows_updated=int(d["rows_updated"]),
            rows_deleted=int(d["rows_deleted"]),
            phases_ms={k: int(v) for k, v in d["phases_ms"].items()},
            backing_version=int(d["backing_version"]),
            message=d["message"],
            plan_notes=list(d.get("plan_notes", [])),
            rows_read=int(d.get("rows_read", 0)),
            rows_joined=int(d.get("rows_joined", 0)),
            spark_jobs=int(d.get("spark_jobs", 0)),
            spark_tasks=int(d.get("spark_tasks", 0)),
            phases_jobs={k: int(v) for k, v in d.get("phases_jobs", {}).items()},
            policy=d.get("policy", ""),
            reason=d.get("reason", ""),
            candidates=[Candidate(c["mode"], int(c["estimated_ms"]), c["basis"])
                        for c in d.get("candidates", [])],
            verify=Verification(**d["verify"]) if d.get("verify") else None,
        )

    def __str__(self) -> str:
        srcs = ", ".join(
            f"{s.table} v{s.from_version}->v{s.to_version} ({s.changed_rows} rows)"
            for s in self.sources
        )
        phases = ", ".join(f"{k} {v} ms" for k, v in self.phases_ms.items())
        return (
            f"{self.view}: {self.mode} refresh #{self.refresh_number}; sources: {srcs}; "
            f"view rows +{self.rows_inserted} ~{self.rows_updated} -{self.rows_deleted}; "
            f"{self.spark_jobs} Spark jobs; {phases}"
            + (f"; {self.reason}" if self.reason else "")
        )
