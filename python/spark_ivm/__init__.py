"""spark-ivm: incremental materialized views for Apache Spark on Delta Lake.

``configure_spark_with_ivm`` sets up a SparkSession builder; ``MaterializedView`` is the
handle on one view (refresh, describe, explain, enumerate its rows, its policy, schedule,
history and lag); ``RefreshService`` runs the views' schedules and triggers.
"""

from spark_ivm.constraints import add_foreign_key, add_primary_key, constraints, drop_constraint
from spark_ivm.errors import IvmError
from spark_ivm.history import Lag, RefreshEntry, SourceLag
from spark_ivm.report import Candidate, RefreshReport, SourceChange, Verification
from spark_ivm.service import RefreshService, ServiceRun
from spark_ivm.session import (
    IVM_EXTENSION,
    configure_spark_with_ivm,
    delta_package,
    ivm_jar_path,
    session_defaults,
    spark_sql_args,
)
from spark_ivm.state import HeldState, held_state
from spark_ivm.view import MaterializedView, is_materialized_view, list_materialized_views

__all__ = [
    "IVM_EXTENSION",
    "Candidate",
    "HeldState",
    "IvmError",
    "Lag",
    "MaterializedView",
    "RefreshEntry",
    "RefreshReport",
    "RefreshService",
    "ServiceRun",
    "SourceChange",
    "SourceLag",
    "Verification",
    "add_foreign_key",
    "add_primary_key",
    "constraints",
    "configure_spark_with_ivm",
    "delta_package",
    "drop_constraint",
    "held_state",
    "is_materialized_view",
    "ivm_jar_path",
    "list_materialized_views",
    "session_defaults",
    "spark_sql_args",
]
__version__ = "0.1.0"
