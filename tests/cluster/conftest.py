"""A SparkSession on a local-cluster master (two executor JVMs), so that nothing relies on
state that only exists in the driver. Run as its own pytest run: one session per run."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import make_cluster_session  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = make_cluster_session(str(tmp_path_factory.mktemp("cluster-warehouse")))
    yield session
    session.stop()
