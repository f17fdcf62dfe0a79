"""Applications in JVMs of their own, as a scheduled job's: the first writes the driver's class-data
archive as it exits, the next maps it, and an archive the JVM cannot map is dropped and written
again (spark_ivm.class_data, io.sparkivm.ClassData)."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import List

from ivm_testing import short_jvm_env
from spark_ivm import class_data

APPLICATION = """
import sys
from pyspark.sql import SparkSession
from spark_ivm import MaterializedView, configure_spark_with_ivm
spark = configure_spark_with_ivm(SparkSession.builder.master("local[1]")
                                 .config("spark.ui.enabled", "false")
                                 .config("spark.sql.warehouse.dir", sys.argv[1])).getOrCreate()
jvm = spark._jvm
bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBeans(
    jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")).get(0)
print("SHARING", bean.getVMOption("UseSharedSpaces").getValue(),
      bean.getVMOption("SharedArchiveFile").getValue(), flush=True)
spark.sql("CREATE TABLE t (k INT, v INT) USING delta")
spark.sql("INSERT INTO t VALUES (1, 2), (1, 3)")
mv = MaterializedView.create(spark, "s", "SELECT k, sum(v) AS total FROM t GROUP BY k")
spark.sql("INSERT INTO t VALUES (2, 5)")
print("MODE", mv.refresh().mode, sorted(tuple(r) for r in mv.rows()), flush=True)
"""


def run(tmp_path: Path, env: dict, i: int) -> List[str]:
    done = subprocess.run([sys.executable, "-c", APPLICATION, str(tmp_path / f"wh{i}")], capture_output=True,
                          text=True, timeout=900, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "MODE incremental [(1, 5), (2, 5)]" in done.stdout, done.stdout
    return next(line for line in done.stdout.splitlines() if line.startswith("SHARING")).split()[1:]


def settled_dump(directory: Path, timeout_s: float = 180.0) -> Path:
    """The dump the last application's JVM wrote as it exited (after its Python process), once it
    is whole and old enough to be taken."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        whole = [d for d in directory.glob("*.dump") if class_data._is_dynamic_archive(str(d))]
        if whole and time.time() - whole[0].stat().st_mtime > class_data.SETTLED_S:
            return whole[0]
        time.sleep(1)
    raise AssertionError(f"no whole dump in {directory}: {list(directory.iterdir())}")


def test_the_first_application_writes_the_archive_the_next_maps(tmp_path: Path) -> None:
    env = {**short_jvm_env(), "SPARK_IVM_CACHE": str(tmp_path / "cache")}
    directory = tmp_path / "cache" / "class-data"
    run(tmp_path, env, 0)  # writes the archive as its JVM exits
    settled_dump(directory)
    sharing, archive = run(tmp_path, env, 1)
    assert sharing == "true" and archive.endswith(".jsa") and Path(archive).parent == directory, archive
    assert [p.name for p in directory.iterdir()] == [Path(archive).name]

    # An archive the JVM cannot map: the application runs without it and drops it; the next
    # writes it again.
    Path(archive).chmod(0o644)
    Path(archive).write_bytes(struct.pack("<I", class_data.DYNAMIC_MAGIC) + b"\0" * 100_000)
    sharing, _ = run(tmp_path, env, 2)
    assert sharing == "false"
    assert not Path(archive).exists()
