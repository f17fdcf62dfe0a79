"""A pip user's install: the package's wheel into a fresh virtual environment outside the
repository, then a first session there, with nothing else done by hand."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ivm_testing import short_jvm_env

ROOT = Path(__file__).resolve().parents[2]

SESSION = """
import sys
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, configure_spark_with_ivm
spark = configure_spark_with_ivm(SparkSession.builder.master("local[2]")
                                 .config("spark.sql.warehouse.dir", sys.argv[1])).getOrCreate()
spark.sql("CREATE TABLE t (k INT, v INT) USING delta")
spark.sql("INSERT INTO t VALUES (1, 2), (1, 3)")
mv = MaterializedView.create(spark, "s", "SELECT k, sum(v) AS total FROM t GROUP BY k")
spark.sql("INSERT INTO t VALUES (2, 5)")
print("MODE", mv.refresh().mode, sorted(tuple(r) for r in mv.rows()), flush=True)
"""


def test_a_wheel_in_a_fresh_environment_starts_sessions_without_ivys_report(tmp_path: Path) -> None:
    # The package's files only (setuptools builds in the tree it is given; the jar `make install`
    # built is among them, so the build does not run sbt).
    src = tmp_path / "src"
    for part in ("python", "build_support"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, src / part)
    wheels = tmp_path / "wheels"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels),
                            str(src)], capture_output=True, text=True, timeout=900)
    assert build.returncode == 0, build.stderr[-3000:]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    # --no-compile: pyspark's thousands of modules are byte-compiled when imported, not all up front.
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile",
                              *map(str, wheels.glob("*.whl"))],
                             capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr[-3000:]
    # A cache of its own: nothing fetched before, as on a machine where only pip ran.
    env = {**short_jvm_env(), "SPARK_IVM_CACHE": str(tmp_path / "cache"), "PYSPARK_PYTHON": python}
    env.pop("SPARK_IVM_JAR", None)
    runs = [subprocess.run([python, "-c", SESSION, str(tmp_path / f"wh{i}")], capture_output=True, text=True,
                           timeout=900, env=env, cwd=tmp_path) for i in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
        assert "MODE incremental [(1, 5), (2, 5)]" in run.stdout
        assert ":: resolving dependencies" not in run.stdout + run.stderr
    assert "fetching the Maven packages it needs, once" in runs[0].stderr
    assert "fetching" not in runs[1].stderr
