"""spark-ivm where Spark users run Spark besides a session of their own: a Spark Connect client,
JDBC through the Thrift server that ``spark-ivm-server thrift`` starts, and `spark-sql` given
only the jar and Delta's package. Each runs in processes of its own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
from ivm_testing import short_jvm_env

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))


def _env() -> dict:
    """The processes' environment: their JVMs compile with C1 only (they run briefly)."""
    return {**short_jvm_env(), "SPARK_HOME": SPARK_HOME, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def test_a_spark_connect_client_uses_every_part_of_the_api(tmp_path: Path) -> None:
    """SQL, refreshes, rows with and without equalities, lookups (from the view's rows: the view
    trees live in the server's driver), typed errors, and a clear error for the refresh service;
    no warnings about spark-ivm's own settings and no logged errors from lookups of names."""
    proc = subprocess.run([sys.executable, str(HERE / "connect_client.py"), str(tmp_path / "wh")],
                          capture_output=True, text=True, timeout=900, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(next(line[5:] for line in proc.stdout.splitlines() if line.startswith("SEEN ")))
    assert seen["session"].startswith("pyspark.sql.connect")
    assert seen["mode"] == "incremental"
    assert seen["rows"] == seen["query"] == [[1, 16, 3], [3, 7, 1]]
    assert seen["rows_k1"] == [[1, 16, 3]]
    assert seen["lookup_before"] == [5, 10] and seen["lookup"] == [1, 5, 10]
    assert seen["structure"].startswith("no view trees: a Spark Connect client")
    assert seen["history"][0] == "incremental"
    assert seen["describe"] == ["counting", 0]
    assert seen["not_found"] == ["IVM_VIEW_NOT_FOUND", "42P01"]
    assert seen["not_incremental"] == "LIMIT / OFFSET"
    assert "spark-ivm-refresh" in seen["service"]
    assert "Failed to set spark.sql.extensions" not in proc.stderr
    assert "TABLE_OR_VIEW_NOT_FOUND" not in proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return int(s.getsockname()[1])


def test_jdbc_clients_create_and_refresh_views_through_the_thrift_server(tmp_path: Path) -> None:
    """`spark-ivm-server thrift` serves beeline: a view with a cron schedule (a class the jar
    bundles) is created, refreshed after a change, and read, over JDBC."""
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [str(BIN / "spark-ivm-server"), "thrift", "--master", "local[2]",
         "--conf", "spark.ui.enabled=false", "--conf", f"spark.sql.warehouse.dir={tmp_path / 'wh'}",
         "--hiveconf", f"hive.server2.thrift.port={port}",
         "--driver-java-options", f"-Dderby.system.home={tmp_path}"],
        stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=tmp_path)
    try:
        deadline = time.time() + 600
        while "HiveThriftServer2 started" not in (tmp_path / "server.log").read_text():
            log_text = (tmp_path / "server.log").read_text()
            assert server.poll() is None and time.time() < deadline, log_text[-4000:]
            time.sleep(1)
        script = ("CREATE TABLE t (i INT, g STRING) USING delta;"
                  "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'a');"
                  "CREATE MATERIALIZED VIEW v SCHEDULE CRON '0 0 * * * ?' AS "
                  "SELECT g, count(*) AS n FROM t GROUP BY g;"
                  "INSERT INTO t VALUES (4, 'b');"
                  "DELETE FROM t WHERE i = 1;"
                  "REFRESH MATERIALIZED VIEW v;"
                  "SELECT concat('ROW ', g, ' ', n) FROM v ORDER BY g;"
                  "SHOW MATERIALIZED VIEWS;"
                  "DESCRIBE MATERIALIZED VIEW v;"
                  "SHOW REFRESHES FOR v;")
        beeline = os.path.join(SPARK_HOME, "bin", "beeline")
        proc = subprocess.run([beeline, "--silent=true", "--outputformat=tsv2",
                               "-u", f"jdbc:hive2://localhost:{port}", "-e", script],
                              capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        rows = [line for line in proc.stdout.splitlines() if line.startswith("ROW ")]
        assert rows == ["ROW a 1", "ROW b 2"], proc.stdout[-2000:]
        assert "SCHEDULE CRON '0 0 * * * ?'" in proc.stdout
        assert "Maintenance\tcounting IVM, grouped aggregate" in proc.stdout, proc.stdout[-3000:]
        # SHOW REFRESHES: view, refresh_number, start_time, duration_ms, mode, ...
        refreshes = [(c[1], c[4]) for c in (line.split("\t") for line in proc.stdout.splitlines())
                     if len(c) > 5 and c[0].endswith("`v`") and c[1] in ("0", "1")]
        assert refreshes == [("1", "incremental"), ("0", "create")], proc.stdout[-3000:]
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def test_the_jar_with_deltas_package_alone_runs_a_cron_scheduled_view(tmp_path: Path) -> None:
    """The README's own-session set-up, nothing more: `--jars` the spark-ivm jar and
    `--packages` Delta. The cron parser a SCHEDULE CRON needs comes inside the jar."""
    from spark_ivm import IVM_EXTENSION, delta_package, ivm_jar_path
    script = ("CREATE TABLE t (i INT) USING delta; INSERT INTO t VALUES (1), (2);"
              "CREATE MATERIALIZED VIEW v SCHEDULE CRON '0 0 * * * ?' AS SELECT count(*) AS n FROM t;"
              "INSERT INTO t VALUES (3); REFRESH MATERIALIZED VIEW v;"
              "SELECT concat('ROW ', n) FROM v;")
    proc = subprocess.run(
        [os.path.join(SPARK_HOME, "bin", "spark-sql"),
         "--jars", ivm_jar_path(), "--packages", delta_package(),
         "--conf", f"spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension,{IVM_EXTENSION}",
         "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
         "--conf", "spark.ui.enabled=false", "--conf", f"spark.sql.warehouse.dir={tmp_path / 'wh'}",
         "--driver-java-options", f"-Dderby.system.home={tmp_path}", "-e", script],
        capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [line for line in proc.stdout.splitlines() if line.startswith("ROW ")] == ["ROW 3"]
    assert "NoClassDefFoundError" not in proc.stderr
