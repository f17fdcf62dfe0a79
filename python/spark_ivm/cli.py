"""``spark-ivm-sql``: Spark's own ``spark-sql`` shell with spark-ivm and Delta configured.

Every argument is passed on to ``spark-sql`` (``-e``, ``-f``, ``--conf``, ``--master`` ...).
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from spark_ivm import class_data
from spark_ivm.session import cache_dir, fetch_once, spark_sql_args

# Arguments that set what the driver's class-data archive is named for: left to the user.
_DRIVER_JVM_ARGS = ("--driver-java-options", "--driver-memory", "--driver-class-path", "--properties-file")


def spark_home() -> str:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))


def driver_java_options(argv: List[str]) -> List[str]:
    """``--driver-java-options`` with the driver's class-data archive (:mod:`spark_ivm.class_data`),
    which a ``spark-ivm-sql -e`` run by a scheduler starts from as a Python session does; none if
    the arguments set the driver's JVM themselves."""
    if any(a.split("=", 1)[0] in _DRIVER_JVM_ARGS or "spark.driver.extra" in a or "spark.driver.memory" in a
           or class_data.SETTING in a for a in argv):
        return []
    options = class_data.java_options({}, cache_dir())
    return ["--driver-java-options", options] if options else []


def spark_sql_command(argv: List[str]) -> List[str]:
    """The full ``spark-sql`` command line for these user arguments: Spark's console progress
    bar on (a long refresh then also says which view and phase it is at), unless they say
    otherwise."""
    fetch_once()
    master = argv[argv.index("--master") + 1] if "--master" in argv[:-1] else "local[*]"
    progress = ["--conf", "spark.ui.showConsoleProgress=true"]
    return [os.path.join(spark_home(), "bin", "spark-sql"), *spark_sql_args(master=master), *progress,
            *driver_java_options(argv), *argv]


def exec_spark(cmd: List[str]) -> None:
    """Replace this process with one of the Spark distribution's commands."""
    os.environ["SPARK_HOME"] = spark_home()
    # spark-submit's scripts run Python helpers; make them find this environment's Python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.execv(cmd[0], cmd)


def main(argv: Optional[List[str]] = None) -> None:
    """Replace this process with spark-sql."""
    exec_spark(spark_sql_command(list(sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    main()
