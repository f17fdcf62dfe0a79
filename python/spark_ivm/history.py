"""Past refreshes (``SHOW REFRESHES``) and freshness (``DESCRIBE``), as typed records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, List, Optional


@dataclass(frozen=True)
class RefreshEntry:
    """One past refresh of a view, as ``SHOW REFRESHES`` lists it.

    ``mode`` is ``create``, ``incremental``, ``full`` or ``failed``; ``reason`` says why the
    refresh ran in that mode; ``triggered_by`` is ``sql``, ``service``, ``cascade``, ``create`` or
    ``alter``. Committed refreshes come from the view's durable history; failed ones
    (``refresh_number`` None, with ``error``) from the memory of the process that saw them.
    What is not known is None: the number of a failed refresh, the duration of one whose
    process ended before measuring it, the source rows changed of a recomputation (which reads
    none of the changes).
    """

    view: str
    refresh_number: Optional[int]
    start_time: datetime
    duration_ms: Optional[int]
    mode: str
    reason: str
    triggered_by: str
    source_rows_changed: Optional[int]
    source_versions: str
    error: Optional[str]

    @classmethod
    def from_row(cls, row: Any) -> "RefreshEntry":
        """From a row of ``SHOW REFRESHES``."""
        return cls(**row.asDict())


@dataclass(frozen=True)
class SourceLag:
    """A base table's commits that a view has not applied yet."""

    table: str
    consumed_version: int
    current_version: int
    pending_commits: int
    oldest_pending: Optional[str]


@dataclass(frozen=True)
class Lag:
    """How fresh a view is: base-table commits not applied, and the time since the oldest."""

    pending_commits: int
    lag_seconds: float
    sources: List[SourceLag]

    @property
    def up_to_date(self) -> bool:
        """True if every base-table commit is applied."""
        return self.pending_commits == 0

    @classmethod
    def from_describe(cls, fields: Dict[str, Any]) -> "Lag":
        """From the ``freshness`` field of ``DESCRIBE MATERIALIZED VIEW ... AS JSON``."""
        f = fields["freshness"]
        return cls(int(f["pending_commits"]), int(f["lag_ms"]) / 1000.0,
                   [SourceLag(**s) for s in f["sources"]])
