"""The driver's class-data archive (spark_ivm.class_data): which JVM options a session gets, how a
dump becomes the archive, and which dumps never do. A JVM that maps the archive is
tests/cluster/test_class_data.py's."""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path
from typing import Dict

import pytest
from pyspark import SparkContext
from spark_ivm import class_data

DUMP_HEADER = struct.pack("<I", class_data.DYNAMIC_MAGIC) + b"\0" * 60


@pytest.fixture()
def jdk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A JDK 17 as its release file says, and a Python process that has started no JVM."""
    home = tmp_path / "jdk"
    home.mkdir()
    (home / "release").write_text('IMPLEMENTOR="test"\nJAVA_VERSION="17.0.15"\n')
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.delenv(class_data.ENV, raising=False)
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr(SparkContext, "_gateway", None)
    return home


def options_for(cache: Path, options: Dict[str, str]) -> str:
    got = class_data.java_options(options, str(cache))
    assert got is not None
    return got


def test_a_session_writes_the_archive_then_maps_it(jdk: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = options_for(cache, {})
    assert first.startswith("-XX:ArchiveClassesAtExit=") and class_data.QUIET in first
    dump = Path(first.split()[0].split("=", 1)[1])
    assert dump.parent == cache / "class-data" and dump.name.endswith(".dump")
    # This process wrote it (its JVM, as it exits): while it runs, a dump is not taken.
    dump.write_bytes(DUMP_HEADER)
    old = time.time() - 2 * class_data.SETTLED_S
    os.utime(dump, (old, old))
    assert options_for(cache, {}).startswith("-XX:ArchiveClassesAtExit=")
    # Written by a process that is gone: it becomes the archive, which the next JVMs map.
    gone = dump.with_name(dump.name.replace(f".{os.getpid()}.", ".999999999."))
    dump.rename(gone)
    mapped = options_for(cache, {})
    archive = cache / "class-data" / (gone.name.split(".")[0] + ".jsa")
    assert mapped.split()[0] == f"-XX:SharedArchiveFile={archive}", mapped
    assert f"-D{class_data.ARCHIVE_PROPERTY}={archive}" in mapped
    assert archive.exists() and not gone.exists()


def test_a_dump_cut_short_never_becomes_the_archive(jdk: Path, tmp_path: Path) -> None:
    """The JVM writes an archive's header last: a dump killed midway has none, and a JVM that
    mapped it would crash (SIGBUS) at every start."""
    cache = tmp_path / "cache"
    first = options_for(cache, {})
    dump = Path(first.split()[0].split("=", 1)[1])
    cut = dump.with_name(dump.name.replace(f".{os.getpid()}.", ".999999999."))
    cut.write_bytes(b"\0" * 4096)
    old = time.time() - 2 * class_data.SETTLED_S
    os.utime(cut, (old, old))
    again = options_for(cache, {})
    assert again.startswith("-XX:ArchiveClassesAtExit="), again
    assert not cut.exists() and not list((cache / "class-data").glob("*.jsa"))


def test_the_archive_is_named_for_what_decides_whether_it_maps(jdk: Path) -> None:
    key = class_data.archive_key
    home = str(jdk)
    base = key(home, {})
    # System properties and the JIT's tuning do not decide it: the test sessions share one.
    assert key(home, {class_data.DRIVER_OPTIONS: "-Dderby.system.home=/x -XX:Tier4CompileThreshold=45000 "
                                                "-XX:TieredStopAtLevel=1"}) == base
    assert key(home, {"spark.driver.memory": "8g"}) == base
    # The collector, the class path, a heap without compressed pointers and the JDK do.
    assert key(home, {class_data.DRIVER_OPTIONS: "-XX:+UseParallelGC"}) != base
    assert key(home, {"spark.driver.extraClassPath": "/opt/extra.jar"}) != base
    assert key(home, {"spark.driver.memory": "64g"}) != base
    (jdk / "release").write_text('JAVA_VERSION="17.0.16"\n')
    assert key(home, {}) != base


def test_where_it_does_not_apply(jdk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = str(tmp_path / "cache")
    assert class_data.java_options({class_data.SETTING: "false"}, cache) is None
    assert class_data.java_options({class_data.DRIVER_OPTIONS: "-Xshare:off"}, cache) is None
    assert class_data.java_options({class_data.DRIVER_OPTIONS: "-XX:SharedArchiveFile=/a.jsa"}, cache) is None
    monkeypatch.setenv(class_data.ENV, "false")
    assert class_data.java_options({}, cache) is None
    monkeypatch.setenv(class_data.ENV, "true")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "4040")  # started by spark-submit: its JVM runs
    assert class_data.java_options({}, cache) is None
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")
    (jdk / "release").write_text('JAVA_VERSION="11.0.2"\n')  # no dynamic archives before JDK 13
    assert class_data.java_options({}, cache) is None
    (jdk / "release").write_text('JAVA_VERSION="21.0.5"\n')  # the JVM keeps the archive itself
    got = options_for(Path(cache), {})
    assert got.startswith("-XX:+AutoCreateSharedArchive -XX:SharedArchiveFile="), got


def test_user_options_come_first_and_paths_with_spaces_are_quoted(jdk: Path, tmp_path: Path) -> None:
    cache = tmp_path / "a cache"
    got = class_data.with_java_options({class_data.DRIVER_OPTIONS: "-Dmine=1"}, str(cache))
    assert got is not None and got.startswith("-Dmine=1 \"-XX:ArchiveClassesAtExit="), got


def test_old_archives_are_pruned(jdk: Path, tmp_path: Path) -> None:
    directory = tmp_path / "cache" / "class-data"
    directory.mkdir(parents=True)
    for i, name in enumerate(["a.jsa", "b.jsa", "c.jsa"]):
        (directory / name).write_bytes(DUMP_HEADER)
        t = time.time() - 1000 * (i + 1)
        os.utime(directory / name, (t, t))
    class_data._prune(str(directory))
    assert sorted(p.name for p in directory.iterdir()) == ["a.jsa", "b.jsa"]


def test_spark_ivm_sql_starts_its_driver_from_the_archive(jdk: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduled ``spark-ivm-sql -e 'REFRESH ...'`` is an application of its own too; arguments
    that set the driver's JVM are left as the user gave them."""
    from spark_ivm import cli

    monkeypatch.setenv("SPARK_IVM_CACHE", str(tmp_path / "cache"))
    command = cli.spark_sql_command(["-e", "REFRESH MATERIALIZED VIEW v"])
    at = command.index("--driver-java-options")
    assert command[at + 1].startswith("-XX:ArchiveClassesAtExit="), command
    assert command[-2:] == ["-e", "REFRESH MATERIALIZED VIEW v"]
    for own in (["--driver-java-options", "-Dx=1"], ["--driver-memory", "64g"],
                ["--conf", "spark.driver.extraJavaOptions=-Dx=1"]):
        command = cli.spark_sql_command([*own, "-e", "SELECT 1"])
        assert command.count("--driver-java-options") == own.count("--driver-java-options"), command
