"""The package's PEP 517 build backend: setuptools', after building spark-ivm's jar from the
Scala sources when the tree has none, so that ``pip install <clone>`` gives a package that
works (``make install`` builds the jar first, and this then finds it)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Dict, Optional

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 (the rest of the backend's hooks)

ROOT = Path(__file__).resolve().parent.parent


def _ensure_jar() -> None:
    if any((ROOT / "python" / "spark_ivm" / "jars").glob("spark-ivm_2.13-*.jar")):
        return
    if not (ROOT / "build.sbt").is_file():
        raise RuntimeError("spark-ivm: no jar in python/spark_ivm/jars and no Scala sources to build "
                           "it from; install from a clone of the repository or from a wheel")
    # Needs Java 17+ and make; sbt itself is fetched by build/sbt.
    subprocess.run(["make", "-C", str(ROOT), "jar"], check=True)


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    _ensure_jar()
    return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    _ensure_jar()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
