"""The README's SQL and Python examples, run as written in a fresh warehouse, in a process of
their own (the Python example starts its own session)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import List

from ivm_testing import short_jvm_env

README = Path(__file__).resolve().parents[2] / "README.md"

# The foreign-key example names TPC-H's tables; a few rows that satisfy its keys.
TPCH_TABLES = [
    "CREATE TABLE customer (c_custkey BIGINT, c_name STRING) USING delta",
    "INSERT INTO customer VALUES (1, 'a'), (2, 'b')",
    "CREATE TABLE orders (o_orderkey BIGINT, o_custkey BIGINT) USING delta",
    "INSERT INTO orders VALUES (10, 1), (11, 2)",
    "CREATE TABLE lineitem (l_orderkey BIGINT, l_quantity INT) USING delta",
    "INSERT INTO lineitem VALUES (10, 1), (10, 2), (11, 3)",
]


def blocks(language: str) -> List[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), re.M | re.S)


def statements(sql: str) -> List[str]:
    """The statements of a SQL block, its `--` comments dropped (the README quotes no `--`)."""
    text = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [s.strip() for s in text.split(";") if s.strip()]


def test_the_readme_examples_run_as_written(tmp_path: Path) -> None:
    sql_blocks, python_blocks = blocks("sql"), blocks("python")
    assert len(sql_blocks) == 2 and len(python_blocks) == 1
    session_line = next(line for line in python_blocks[0].splitlines() if line.startswith("spark = "))
    script = "\n".join([
        "from pyspark.sql import SparkSession",
        "from spark_ivm import configure_spark_with_ivm",
        session_line,
        f"for stmt in {statements(sql_blocks[0])!r}:",
        "    spark.sql(stmt).collect()",
        "print('SQL DONE', flush=True)",
        f"for stmt in {TPCH_TABLES + statements(sql_blocks[1])!r}:",
        "    spark.sql(stmt).collect()",
        python_blocks[0],
    ])
    env = {**short_jvm_env(), "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "SQL DONE" in proc.stdout
    # The service's pass refreshed the view the trigger watches.
    assert re.search(r"by_region refreshed incremental", proc.stdout), proc.stdout[-3000:]
