"""Which Spark jobs a piece of work ran, from Spark's event log: for profiling refreshes.

    from jobs import event_log_session, jobs_since
    spark = event_log_session(warehouse, log_dir)
    mark = jobs_since(log_dir)            # jobs so far
    ...refresh...
    for job in jobs_since(log_dir, mark): print(job)

Each job comes with its stages' names (Spark's call sites, e.g. "collect at DriverRows.scala:35")
and task counts, so a refresh's jobs can be attributed to the code that started them.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Optional

from bench_session import session
from pyspark.sql import SparkSession


def event_log_session(warehouse: str, log_dir: str, memory: str = "4g",
                      extra: Optional[Dict[str, str]] = None) -> SparkSession:
    os.makedirs(log_dir, exist_ok=True)
    return session(warehouse, memory, "spark-ivm profile",
                   {"spark.eventLog.enabled": "true", "spark.eventLog.dir": log_dir,
                    "spark.eventLog.rolling.enabled": "false", "spark.eventLog.compress": "false",
                    **(extra or {})})


def _events(log_dir: str) -> List[Dict[str, Any]]:
    files = sorted(glob.glob(os.path.join(log_dir, "*")), key=os.path.getmtime)
    if not files:
        return []
    with open(files[-1]) as f:
        return [json.loads(line) for line in f if line.strip()]


def jobs_since(log_dir: str, after: int = -1) -> List[Dict[str, Any]]:
    """Jobs with an id above ``after``: id, stage names and their task counts."""
    out = []
    for e in _events(log_dir):
        if e.get("Event") == "SparkListenerJobStart" and e["Job ID"] > after:
            stages = [(s["Stage Name"], s["Number of Tasks"]) for s in e.get("Stage Infos", [])]
            out.append({"id": e["Job ID"], "stages": stages})
    return out


def last_job(log_dir: str) -> int:
    jobs = jobs_since(log_dir)
    return jobs[-1]["id"] if jobs else -1
