"""Class-data sharing for the driver JVM that a Python process starts.

A new application's JVM loads, verifies and links some 17,000 classes (Spark's, Hive's, Delta's)
one by one as it first needs them: a second or more of every application that refreshes a view
once (a scheduled job, a job cluster per pipeline run), on the refresh's critical path. The JDK's
class-data sharing (dynamic archives, JEP 350) maps the classes an earlier run of the same class
path loaded from one archive instead, already parsed and verified.

The first application started with a given JVM and class path writes the archive when it exits
(``-XX:ArchiveClassesAtExit``, JDK 13 to 18; on JDK 19 and later the JVM makes and checks it
itself, ``-XX:+AutoCreateSharedArchive``); later ones map it. The archive is named for everything
that decides whether the JVM can use it (the JDK, Spark's jars, the driver's class path, options
and memory), so a changed installation writes a new one instead of trying a stale one. A dump
cut short (a JVM killed while it wrote it) never becomes the archive: the JDK writes the header
last, and a JDK 17 given a truncated archive dies at start. One that the JVM cannot map anyway is
dropped by the application that tried (``io.sparkivm.ClassData``) and written again by the next.
Archives live in spark-ivm's cache directory, about 200 MB each; the two newest are kept.

Only a JVM that this process launches takes these options: not one started by ``spark-submit``
(whose options are set before Python runs), nor a Spark Connect server elsewhere.
``spark.ivm.driver.classDataSharing=false`` in the builder, or the environment variable
``SPARK_IVM_CLASS_DATA_SHARING=false``, turns it off.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import struct
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

SETTING = "spark.ivm.driver.classDataSharing"
ENV = "SPARK_IVM_CLASS_DATA_SHARING"
# Tells the driver which archive is spark-ivm's, so that it can drop one the JVM could not map.
ARCHIVE_PROPERTY = "spark.ivm.classDataArchive"
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"
# The JVM's own messages about an archive it cannot map (a new one is written instead).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
# A dynamic archive's header starts with this magic number (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC).
DYNAMIC_MAGIC = 0xF00BABA8
KEEP = 2
# An unfinished dump this old is left over from a JVM that died while writing it.
STALE_DUMP_S = 3600.0
# A finished dump is one whose writer's Python process is gone and that has not grown for this long.
SETTLED_S = 10.0


def enabled(options: Dict[str, Any]) -> bool:
    """Whether the builder's options (else the environment) leave class-data sharing on."""
    value = options.get(SETTING, os.environ.get(ENV, "true"))
    return str(value).strip().lower() not in ("false", "0", "off", "no")


def java_home() -> Optional[str]:
    """The JDK that ``spark-submit`` starts: ``$JAVA_HOME``, else the ``java`` on the path."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.realpath(home)
    java = shutil.which("java")
    return os.path.dirname(os.path.dirname(os.path.realpath(java))) if java else None


def java_major(home: str) -> Optional[int]:
    """The JDK's feature version from its ``release`` file (``JAVA_VERSION="17.0.15"``)."""
    try:
        with open(os.path.join(home, "release"), encoding="utf-8") as f:
            m = re.search(r'^JAVA_VERSION="([0-9.]+)', f.read(), re.MULTILINE)
    except OSError:
        return None
    if m is None:
        return None
    parts = m.group(1).split(".")
    return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])


def spark_jars() -> List[str]:
    """The jars on the driver's class path that ``spark-submit`` builds: Spark's own."""
    home = os.environ.get("SPARK_HOME")
    if not home:
        import pyspark
        home = os.path.dirname(pyspark.__file__)
    return sorted(glob.glob(os.path.join(home, "jars", "*.jar")))


# JVM options that do not decide whether an archive maps: system properties and the JIT's tuning.
_IRRELEVANT = re.compile(r"^-D|^-XX:[+-]?(Tier|CICompilerCount|ReservedCodeCacheSize|\w*Threshold|\w*Inline)")


def _archive_relevant(java_options: str) -> List[str]:
    """The options that may decide whether an archive maps (the heap's layout, modules, agents)."""
    return [t for t in java_options.split() if not _IRRELEVANT.match(t)]


def _mib(memory: str) -> float:
    """Spark's memory string (``8g``, ``1024m``) in MiB; 1 GiB if it does not parse."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", memory.lower())
    if m is None:
        return 1024.0
    scale = {"k": 1 / 1024, "": 1 / (1024 * 1024), "m": 1, "g": 1024, "t": 1024 * 1024}[m.group(2)]
    return float(m.group(1)) * scale


def archive_key(home: str, options: Dict[str, Any]) -> str:
    """A digest of what decides whether an archive fits the JVM about to start."""
    h = hashlib.sha256()
    with open(os.path.join(home, "release"), "rb") as f:
        h.update(f.read())
    h.update(home.encode("utf-8"))
    for jar in spark_jars():
        st = os.stat(jar)
        h.update(f"{jar}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8"))
    relevant = " ".join(_archive_relevant(str(options.get(DRIVER_OPTIONS, ""))))
    large_heap = _mib(str(options.get("spark.driver.memory", "1g"))) >= 31 * 1024  # no compressed oops
    h.update(f"cp={options.get('spark.driver.extraClassPath', '')}\nopts={relevant}\nlarge={large_heap}\n"
             .encode("utf-8"))
    for var in ("SPARK_CONF_DIR", "SPARK_DIST_CLASSPATH", "HADOOP_CONF_DIR"):
        h.update(f"{var}={os.environ.get(var, '')}\n".encode("utf-8"))
    return h.hexdigest()[:20]


def _is_dynamic_archive(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("<I", head)[0] == DYNAMIC_MAGIC


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _promote(directory: str, key: str, final: str) -> None:
    """Moves a finished dump of ``key`` into place; drops dumps that cannot finish."""
    now = time.time()
    for dump in glob.glob(os.path.join(directory, f"{key}.*.dump")):
        try:
            st = os.stat(dump)
            pid = int(os.path.basename(dump).split(".")[1])
        except (OSError, ValueError, IndexError):
            continue
        if _pid_alive(pid) and now - st.st_mtime < STALE_DUMP_S:
            continue  # its application may still be running, or writing it
        if now - st.st_mtime < SETTLED_S:
            continue
        if os.path.exists(final) or not _is_dynamic_archive(dump):
            _remove(dump)
        else:
            os.replace(dump, final)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _prune(directory: str) -> None:
    """Keeps the newest archives; an installation that changed leaves its old one behind."""
    archives = sorted(glob.glob(os.path.join(directory, "*.jsa")), key=os.path.getmtime, reverse=True)
    for old in archives[KEEP:]:
        _remove(old)


def _archive(home: str, options: Dict[str, Any], cache_dir: str) -> Tuple[str, str, str]:
    """(directory, key, path) of the archive for a JVM of ``home`` started with ``options``."""
    directory = os.path.join(cache_dir, "class-data")
    key = archive_key(home, options)
    return directory, key, os.path.join(directory, f"{key}.jsa")


def java_options(options: Dict[str, Any], cache_dir: str) -> Optional[str]:
    """The driver JVM options that map (or write) the class-data archive for a JVM started with
    the builder's ``options``; None where they do not apply (see the module's doc)."""
    from pyspark import SparkContext

    if not enabled(options) or SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    own = str(options.get(DRIVER_OPTIONS, ""))
    if re.search(r"SharedArchiveFile|ArchiveClassesAtExit|-Xshare", own):
        return None  # the user's own class-data settings
    home = java_home()
    major = java_major(home) if home else None
    if home is None or major is None or major < 13:
        return None
    try:
        directory, key, final = _archive(home, options, cache_dir)
        os.makedirs(directory, exist_ok=True)
    except OSError:
        return None
    marker = _quoted(f"-D{ARCHIVE_PROPERTY}={final}")
    if major >= 19:
        return f"-XX:+AutoCreateSharedArchive {_quoted(f'-XX:SharedArchiveFile={final}')} {QUIET}"
    try:
        _promote(directory, key, final)
        if os.path.exists(final):
            os.utime(final)  # the newest in use is kept by _prune
            _prune(directory)
            return f"{_quoted(f'-XX:SharedArchiveFile={final}')} {QUIET} {marker}"
    except OSError:
        return None  # a cache this process may not change: no archive rather than a failed start
    dump = os.path.join(directory, f"{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.dump")
    return f"{_quoted(f'-XX:ArchiveClassesAtExit={dump}')} {QUIET}"


def _quoted(option: str) -> str:
    """An option as Spark's launcher splits ``extraJavaOptions``: quoted if it holds a space."""
    return f'"{option}"' if re.search(r"\s", option) else option


def with_java_options(options: Dict[str, Any], cache_dir: str) -> Optional[str]:
    """``spark.driver.extraJavaOptions`` with the class-data options after the user's own, or None
    if there are none to add."""
    ours = java_options(options, cache_dir)
    if ours is None:
        return None
    own = str(options.get(DRIVER_OPTIONS, "")).strip()
    return f"{own} {ours}" if own else ours


# What a refresh runs, for the archive that `build` writes: Delta tables, keys, DML, a view's
# CREATE, REFRESH (incremental and full), EXPLAIN and a read, over a Hive metastore as a
# scheduled job's session has.
_WORKLOAD = [
    "CREATE TABLE dim (k INT, name STRING) USING delta",
    "CREATE TABLE fact (id INT, k INT, v DOUBLE) USING delta",
    "INSERT INTO dim VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    "INSERT INTO fact VALUES (1, 1, 1.0), (2, 2, 2.0), (3, 3, 3.0), (4, 1, 4.0)",
    "ALTER TABLE dim ADD CONSTRAINT dim_pk PRIMARY KEY (k)",
    "ALTER TABLE fact ADD CONSTRAINT fact_dim FOREIGN KEY (k) REFERENCES dim (k)",
    "CREATE MATERIALIZED VIEW totals AS SELECT d.name, sum(f.v) AS total, count(*) AS n "
    "FROM fact f JOIN dim d ON f.k = d.k GROUP BY d.name",
    "INSERT INTO fact VALUES (5, 2, 5.0)",
    "DELETE FROM fact WHERE id = 1",
    "UPDATE fact SET v = v + 1 WHERE id = 2",
    "REFRESH MATERIALIZED VIEW totals",
    "MERGE INTO dim USING (SELECT 3 AS k, 'z' AS name) s ON dim.k = s.k "
    "WHEN MATCHED THEN UPDATE SET name = s.name",
    "EXPLAIN REFRESH MATERIALIZED VIEW totals",
    "REFRESH MATERIALIZED VIEW totals",
    "SELECT * FROM totals ORDER BY name",
    "DESCRIBE MATERIALIZED VIEW totals",
    "REFRESH MATERIALIZED VIEW totals FULL",
]


def _run_workload(warehouse: str) -> None:
    """One application that runs `_WORKLOAD` (the process of `build`)."""
    from pyspark.sql import SparkSession

    from spark_ivm.session import configure_spark_with_ivm

    builder = (SparkSession.builder.master("local[2]").appName("spark-ivm class data")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.warehouse.dir", warehouse)
               .config("javax.jdo.option.ConnectionURL",
                       f"jdbc:derby:;databaseName={os.path.join(warehouse, 'metastore_db')};create=true")
               .config(DRIVER_OPTIONS, f"-Dderby.system.home={warehouse}")
               .enableHiveSupport())
    spark = configure_spark_with_ivm(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for statement in _WORKLOAD:
        spark.sql(statement).collect()
    spark.stop()


def build(timeout_s: float = 300.0) -> Optional[str]:
    """Writes the class-data archive for this installation's sessions (``make install`` runs it),
    from an application that runs what a refresh runs, unless it is there already; returns its
    path, or None where class-data sharing does not apply or the archive was not written."""
    import subprocess
    import sys
    import tempfile

    from spark_ivm.session import cache_dir

    probe = java_options({}, cache_dir())
    home = java_home()
    if probe is None or home is None:
        return None
    directory, key, final = _archive(home, {}, cache_dir())
    if os.path.exists(final):
        return final
    with tempfile.TemporaryDirectory(prefix="spark-ivm-class-data-") as warehouse:
        code = f"from spark_ivm.class_data import _run_workload; _run_workload({warehouse!r})"
        subprocess.run([sys.executable, "-c", code], cwd=warehouse, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        # The JVM writes the archive as it exits, after the Python process it served.
        deadline = time.time() + timeout_s
        while time.time() < deadline and not os.path.exists(final):
            _promote(directory, key, final)
            time.sleep(1.0)
    return final if os.path.exists(final) else None
