"""Session set-up: the spark-ivm jar, the Delta package and the extension confs."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import warnings
import zipfile
from importlib import metadata
from typing import Any, Dict, Iterable, List, Optional, Tuple
from urllib.parse import unquote, urlparse

from pyspark.sql import SparkSession

from spark_ivm import class_data

IVM_EXTENSION = "io.sparkivm.IvmSparkSessionExtensions"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def is_connect(spark: SparkSession) -> bool:
    """True for a Spark Connect session (whose client has no JVM to call)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def ivm_jar_path() -> str:
    """Path of the spark-ivm jar shipped inside this package, or of the jar named by the
    environment variable ``SPARK_IVM_JAR`` (a build of the extension under development)."""
    override = os.environ.get("SPARK_IVM_JAR")
    if override:
        if not os.path.isfile(override):
            raise FileNotFoundError(f"SPARK_IVM_JAR names no file: {override}")
        return override
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars")
    jars = sorted(glob.glob(os.path.join(here, "spark-ivm_2.13-*.jar")))
    if not jars:
        raise FileNotFoundError(
            f"no spark-ivm jar in {here}: build it with `make install` (or `make jar`)"
        )
    return jars[-1]


def delta_package() -> str:
    """Maven coordinates of the Delta jar matching the installed pyspark and delta-spark."""
    spark_minor = ".".join(metadata.version("pyspark").split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{metadata.version('delta-spark')}"


def jar_packages(jar: Optional[str] = None) -> Tuple[List[str], List[str]]:
    """(Maven packages, exclusions) the spark-ivm jar needs at run time besides Spark and Delta,
    as its build lists them in ``spark-ivm-packages.txt``."""
    with zipfile.ZipFile(jar or ivm_jar_path()) as z:
        try:
            lines = z.read("spark-ivm-packages.txt").decode("utf-8").splitlines()
        except KeyError:
            return [], []
    entries = [line.split(" ", 1) for line in lines if " " in line]
    return ([v for k, v in entries if k == "package"], [v for k, v in entries if k == "exclude"])


def _merged(existing: Optional[str], ours: Iterable[str]) -> str:
    """A comma-separated list conf: the user's entries first, then ours that are missing."""
    have = [e.strip() for e in (existing or "").split(",") if e.strip()]
    return ",".join(have + [e for e in ours if e not in have])


# Confs that change how Maven packages resolve: a session that sets any resolves them itself.
_RESOLUTION_CONFS = ("spark.jars.packages", "spark.jars.excludes", "spark.jars.repositories",
                     "spark.jars.ivy", "spark.jars.ivySettings")


def _packages() -> Tuple[str, List[str], List[str]]:
    """The spark-ivm jar, the Maven packages it needs at run time (Delta's first) and their
    exclusions."""
    jar = ivm_jar_path()
    packages, excludes = jar_packages(jar)
    return jar, [delta_package(), *packages], excludes


def cache_dir() -> str:
    """spark-ivm's cache directory: ``$SPARK_IVM_CACHE``, else ``$XDG_CACHE_HOME/spark-ivm``, else
    ``~/.cache/spark-ivm``."""
    return os.environ.get("SPARK_IVM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "spark-ivm")


def _resolved_list(packages: List[str], excludes: List[str]) -> str:
    """The file that lists the jars ``packages`` (less ``excludes``) resolved to, written by
    :func:`fetch_packages`, in :func:`cache_dir`; named for the exact coordinates, so that other
    versions never share it."""
    root = cache_dir()
    key = hashlib.sha256("\n".join([*packages, "--", *excludes]).encode("utf-8")).hexdigest()[:16]
    return os.path.join(root, f"resolved-jars-{key}.txt")


def _resolved_jars(packages: List[str], excludes: List[str]) -> Optional[List[str]]:
    """The local jars ``packages`` resolved to when :func:`fetch_packages` last ran, if every
    one is still there; None otherwise (the session then resolves them itself)."""
    try:
        with open(_resolved_list(packages, excludes), encoding="utf-8") as f:
            jars = [line.strip() for line in f if line.strip()]
    except OSError:
        return None
    return jars if jars and all(os.path.isfile(j) for j in jars) else None


def _session_confs(extra_packages: Iterable[str], options: Optional[Dict[str, Any]] = None,
                   resolve: bool = False) -> Dict[str, str]:
    """The confs spark-ivm needs: its jar, the Delta package and the jar's own packages, both
    extensions, Delta's catalog. List-valued confs the user set are extended, not replaced.

    The packages are given as the local jars they resolved to when :func:`fetch_packages` ran
    (``make install`` runs it), unless ``resolve`` or the user asks for packages or resolution
    settings of their own: Spark's resolution of Maven coordinates at each start takes about a
    second and prints some hundred lines of Ivy's report, which no setting silences.
    """
    options = options or {}
    extra = list(extra_packages)
    jar, wanted, excludes = _packages()
    local = None if resolve or extra or any(options.get(k) for k in _RESOLUTION_CONFS) \
        else _resolved_jars(wanted, excludes)
    confs = {
        "spark.jars": _merged(options.get("spark.jars"), [jar, *(local or [])]),
        # Appended to the user's own extensions, never replacing them.
        "spark.sql.extensions": _merged(options.get("spark.sql.extensions"),
                                        [DELTA_EXTENSION, IVM_EXTENSION]),
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    }
    if local is None:
        confs["spark.jars.packages"] = _merged(options.get("spark.jars.packages"), [*wanted, *extra])
        if excludes:
            confs["spark.jars.excludes"] = _merged(options.get("spark.jars.excludes"), excludes)
    return confs


def _local_cores(master: Optional[str]) -> Optional[int]:
    """Cores of a ``local[n]`` / ``local[*]`` / ``local`` master, None for other masters."""
    if master is None or not master.startswith("local"):
        return None
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\d+)?\])?", master)
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    if m.group(1) == "*":
        return os.cpu_count() or 1
    return int(m.group(1))


# Compiled classes Spark keeps (see session_defaults).
CODEGEN_CACHE_ENTRIES = 2000

# Hadoop's local FileContext without shell processes (see session_defaults).
LOCAL_FILE_CONTEXT = "spark.hadoop.fs.AbstractFileSystem.file.impl"
NIO_LOCAL_FS = "io.sparkivm.storage.NioLocalFs"


def session_defaults(master: Optional[str] = None) -> Dict[str, str]:
    """Settings that make refreshes cheap, applied where the user has not set them.

    - ``spark.databricks.delta.snapshotPartitions``: every Delta table version a session reads
      for the first time is rebuilt from its log by a job of this many tasks (Delta's default
      of 50 suits large clusters); on a local master, one task per core.
    - ``spark.sql.shuffle.partitions``: Spark's 200 cost a refresh's small shuffles dearly; on
      a local master, two per core (adaptive execution stays on and coalesces further).
    - ``spark.sql.adaptive.enabled``: on (Spark's default), so that small deltas get broadcast
      joins and coalesced shuffles.
    - ``spark.sql.codegen.cache.maxEntries``: Spark keeps the classes it compiles for
      expressions and operators in a cache of 100 by default. One refresh of a four-way join
      view compiles about 95, so refreshes (and the base-table writes between them) evicted
      each other's classes and every refresh compiled them again, about a second of CPU each;
      with 2,000 a view's later refreshes compile nothing. A static setting: it takes effect
      only in a session started with it.
    - ``spark.hadoop.fs.AbstractFileSystem.file.impl``: on a local master, Hadoop's local file
      system for ``FileContext`` (through which Delta commits) with its ``chmod`` and
      ``readlink`` done in the JVM (``io.sparkivm.storage.NioLocalFs``). Without Hadoop's
      native library, Hadoop's own starts a shell process for each, about a dozen per Delta
      commit on a local path: some 40 ms per commit, several commits per refresh.
    """
    confs = {"spark.sql.adaptive.enabled": "true",
             "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES)}
    cores = _local_cores(master)
    if cores is not None:
        confs["spark.databricks.delta.snapshotPartitions"] = str(max(1, min(cores, 8)))
        confs["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        confs[LOCAL_FILE_CONTEXT] = NIO_LOCAL_FS
    return confs


def configure_spark_with_ivm(
    builder: SparkSession.Builder, extra_packages: Optional[Iterable[str]] = None
) -> SparkSession.Builder:
    """Return ``builder`` configured for spark-ivm.

    Adds the spark-ivm jar, the Delta package (fetched from Maven Central on first use, as
    ``delta.configure_spark_with_delta_pip`` does; once :func:`fetch_packages` has run, the jars
    it resolved to, without resolving again), the Delta and spark-ivm session extensions
    (after any the builder already has) and the Delta catalog, then the settings of
    :func:`session_defaults` that the builder does not set, and the driver JVM's class-data
    archive when this process starts the JVM (:mod:`spark_ivm.class_data`; off with
    ``spark.ivm.driver.classDataSharing=false``). Works for ``local[*]`` and cluster
    masters alike: the jars are shipped to executors.

    A Spark Connect builder (``builder.remote(...)``) is configured only for a local server
    (``remote("local[2]")``), which this process starts; a server elsewhere (``sc://...``) takes
    no settings from its clients, so it must have been started with spark-ivm
    (``spark-ivm-server connect``) and the builder is returned unchanged.
    """
    options: Dict[str, Any] = dict(getattr(builder, "_options", {}))
    remote = options.get("spark.remote")
    if remote is not None and not str(remote).startswith("local"):
        return builder
    if remote is not None:
        _quiet_connect_static_confs()
    if not extra_packages:
        fetch_once(options)
    for key, value in _session_confs(extra_packages or [], options).items():
        builder = builder.config(key, value)
    for key, value in session_defaults(remote or options.get("spark.master")).items():
        if key not in options:
            builder = builder.config(key, value)
    if remote is None:
        java_options = class_data.with_java_options(options, cache_dir())
        if java_options is not None:
            builder = builder.config(class_data.DRIVER_OPTIONS, java_options)
    return builder


def _quiet_connect_static_confs() -> None:
    """A Spark Connect client started with ``remote("local...")`` gives its builder's settings to
    the server it starts, then sets them again on its session, where static ones cannot change,
    and warns about each. Ours took effect on the server: silence the warnings about them."""
    keys = "|".join(re.escape(k) for k in [*_session_confs([]), *session_defaults("local")])
    warnings.filterwarnings("ignore", message=rf"Failed to set ({keys}) to ", category=UserWarning)


def fetch_packages() -> None:
    """Resolve the Maven packages spark-ivm needs into Spark's Ivy cache (``make install`` runs
    this once), and record the jars they resolved to: later sessions, started side by side, use
    those jars instead of resolving (or racing each other to download) the packages again."""
    jar, wanted, excludes = _packages()
    builder = SparkSession.builder.master("local[1]").appName("spark-ivm-fetch") \
        .config("spark.ui.enabled", "false")
    for key, value in _session_confs([], resolve=True).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        # In client mode, spark-submit puts the jar and the resolved jars on the driver's class
        # path and lists them here.
        listed = session.sparkContext.getConf().get("spark.repl.local.jars", "") or ""
    finally:
        session.stop()
    paths = [unquote(urlparse(j).path) if j.startswith("file:") else j
             for j in (e.strip() for e in listed.split(",")) if j]
    jars = [j for j in paths if os.path.abspath(j) != os.path.abspath(jar)]
    # All or nothing: a list missing a jar would start sessions without it.
    if not jars or not all(os.path.isfile(j) for j in jars):
        return
    target = _resolved_list(wanted, excludes)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # Written whole, then renamed: a session starting meanwhile reads the old list or the new.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".resolved-")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(jars) + "\n")
    os.replace(tmp, target)


def fetch_once(options: Optional[Dict[str, Any]] = None) -> None:
    """Runs :func:`fetch_packages` in a process of its own, its output to a log file, unless
    its list is there already or ``options`` ask for resolution settings of their own: a user
    who installed the package with pip (not ``make install``) then starts sessions on the local
    jars from the second one on, without Ivy's report of some hundred lines at each start. If
    the fetch fails (offline, say), sessions resolve the packages themselves, as Spark does."""
    if any((options or {}).get(k) for k in _RESOLUTION_CONFS):
        return
    _, wanted, excludes = _packages()
    if _resolved_jars(wanted, excludes) is not None:
        return
    log = os.path.splitext(_resolved_list(wanted, excludes))[0] + ".log"
    os.makedirs(os.path.dirname(log), exist_ok=True)
    print(f"spark-ivm: fetching the Maven packages it needs, once (log: {log})",
          file=sys.stderr, flush=True)
    with open(log, "w", encoding="utf-8") as out:
        code = "from spark_ivm.session import fetch_packages; fetch_packages()"
        subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, check=False)


def spark_sql_args(extra_packages: Optional[Iterable[str]] = None,
                   master: Optional[str] = "local[*]") -> List[str]:
    """Command-line arguments that start ``spark-sql`` (or ``spark-submit``) with spark-ivm,
    with :func:`session_defaults` for ``master`` (a later ``--conf`` overrides them)."""
    confs = _session_confs(extra_packages or [])
    args = ["--jars", confs.pop("spark.jars")]
    if "spark.jars.packages" in confs:
        args += ["--packages", confs.pop("spark.jars.packages")]
    if "spark.jars.excludes" in confs:
        args += ["--exclude-packages", confs.pop("spark.jars.excludes")]
    for key, value in {**confs, **session_defaults(master)}.items():
        args += ["--conf", f"{key}={value}"]
    return args
