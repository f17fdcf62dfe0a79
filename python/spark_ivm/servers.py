"""``spark-ivm-server``: Spark's Thrift (JDBC/ODBC) server or Spark Connect server with spark-ivm.

The pip-installed pyspark has neither ``start-thriftserver.sh`` nor ``start-connect-server.sh``;
this command runs the same server classes through the package's ``spark-submit``, in the
foreground, with spark-ivm and Delta set up as ``spark-ivm-sql`` sets them up. Arguments after
the server's name go to ``spark-submit`` (``--master``, ``--conf``, ``--hiveconf`` ...).

Both servers create their sessions on threads whose class loader does not see jars added by
``--jars``, and Hive's session start looks the session catalog's class up by name; so spark-ivm's
jar and Delta's own two jars go on the driver's class path. Only those: the other jars Delta's
package brings (an older Jackson among them) would shadow Spark's own there.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional

from spark_ivm.cli import exec_spark, spark_home
from spark_ivm.session import _session_confs, fetch_once, ivm_jar_path, spark_sql_args

SERVER_CLASSES: Dict[str, str] = {
    "thrift": "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2",
    "connect": "org.apache.spark.sql.connect.service.SparkConnectServer",
}

# Delta's jars that must sit beside spark-ivm's on the driver's class path (see the module doc).
DRIVER_JARS = ("io.delta_delta-spark_", "io.delta_delta-storage-")


def driver_class_path() -> str:
    """spark-ivm's jar and Delta's own jars, as resolved when the packages were fetched."""
    fetch_once()
    jars = [j for j in _session_confs([])["spark.jars"].split(",") if j]
    delta = [j for j in jars if os.path.basename(j).startswith(DRIVER_JARS)]
    if len(delta) < len(DRIVER_JARS):
        raise SystemExit("spark-ivm-server: Delta's jars could not be fetched from Maven Central "
                         "(see the log named above)")
    return os.pathsep.join([ivm_jar_path(), *delta])


def server_command(server: str, argv: List[str]) -> List[str]:
    """The ``spark-submit`` command line that runs ``server`` with these user arguments."""
    if server not in SERVER_CLASSES:
        raise SystemExit(f"spark-ivm-server: unknown server {server!r}; one of {', '.join(SERVER_CLASSES)}")
    master = argv[argv.index("--master") + 1] if "--master" in argv[:-1] else "local[*]"
    return [os.path.join(spark_home(), "bin", "spark-submit"), "--class", SERVER_CLASSES[server],
            "--name", f"spark-ivm {server} server", "--driver-class-path", driver_class_path(),
            *spark_sql_args(master=master), *argv, "spark-internal"]


def main(argv: Optional[List[str]] = None) -> None:
    """Replace this process with the server."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        print("usage: spark-ivm-server {thrift|connect} [spark-submit options]")
        raise SystemExit(0 if args else 2)
    exec_spark(server_command(args[0], args[1:]))


if __name__ == "__main__":
    main()
