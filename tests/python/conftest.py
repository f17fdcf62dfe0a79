"""One SparkSession for the whole test run; a fresh database per test."""

from __future__ import annotations

import itertools
import os
import sys
from typing import Iterator

import pytest
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ivm_testing import make_session  # noqa: E402

_counter = itertools.count()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = make_session(warehouse=str(tmp_path_factory.mktemp("warehouse")))
    yield session
    session.stop()


@pytest.fixture()
def db(spark: SparkSession) -> Iterator[str]:
    """A fresh database, made current for the test."""
    name = f"t{next(_counter)}_{os.getpid()}"
    spark.sql(f"CREATE DATABASE {name}")
    spark.sql(f"USE {name}")
    yield name
    spark.sql("USE default")
