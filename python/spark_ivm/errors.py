"""Typed exceptions for spark-ivm's errors.

The engine raises every error through Spark's error framework with an ``IVM_*`` condition (see
the errors table of docs/sql.md); PySpark surfaces it as ``pyspark.errors.AnalysisException``,
whose ``getCondition()``, ``getSqlState()`` and ``getMessageParameters()`` tell them apart. The
Python API raises the same error as the subclass below that names its condition, so callers can
write ``except ViewNotFoundError`` (or keep catching ``AnalysisException``)::

    from spark_ivm.errors import NotIncrementalizableError
    try:
        MaterializedView.create(spark, "v", "SELECT ... LIMIT 10",
                                refresh_policy="INCREMENTAL STRICT")
    except NotIncrementalizableError as e:
        print(e.getMessageParameters()["operator"])

Errors from ``spark.sql(...)`` called directly are plain ``AnalysisException``s;
``typed(error)`` converts one, and ``translated()`` is a context manager that does so.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type, TypeVar, cast

from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import AnalysisException as CapturedAnalysisException


class IvmError(Exception):
    """A misuse of the Python API itself, such as a column a view does not have."""


class IvmAnalysisException(CapturedAnalysisException):
    """An error raised by the spark-ivm engine (condition ``IVM_*``): a PySpark
    ``AnalysisException`` over the JVM error, with its condition, parameters and SQLSTATE."""

    condition: str = ""


_BY_CONDITION: Dict[str, Type[IvmAnalysisException]] = {}


def _register(cls: Type[IvmAnalysisException]) -> Type[IvmAnalysisException]:
    _BY_CONDITION[cls.condition] = cls
    return cls


@_register
class UnsupportedOperatorError(IvmAnalysisException):
    """The query has an operator spark-ivm cannot maintain incrementally."""

    condition = "IVM_UNSUPPORTED_OPERATOR"


@_register
class ViewNotFoundError(IvmAnalysisException):
    """No materialized view of that name."""

    condition = "IVM_VIEW_NOT_FOUND"


@_register
class ViewAlreadyExistsError(IvmAnalysisException):
    """A view or table of that name exists."""

    condition = "IVM_VIEW_ALREADY_EXISTS"


@_register
class ViewNotWritableError(IvmAnalysisException):
    """UPDATE, DELETE or MERGE on a materialized view."""

    condition = "IVM_VIEW_NOT_WRITABLE"


@_register
class NotAMaterializedViewError(IvmAnalysisException):
    """The name is a table or plain view."""

    condition = "IVM_NOT_A_MATERIALIZED_VIEW"


@_register
class RowLocationInQueryError(IvmAnalysisException):
    """The query reads where rows are stored (``_metadata``, ``input_file_name()``)."""

    condition = "IVM_ROW_LOCATION_IN_QUERY"


@_register
class UnsupportedColumnTypeError(IvmAnalysisException):
    """The view would keep a value of a type a Delta table cannot store (a collated string)."""

    condition = "IVM_UNSUPPORTED_COLUMN_TYPE"


@_register
class MaterializedViewObjectError(IvmAnalysisException):
    """Spark's own DDL or DML on a materialized view or its backing table."""

    condition = "IVM_MATERIALIZED_VIEW_OBJECT"


@_register
class VerifyMismatchError(IvmAnalysisException):
    """A verified refresh found rows that differ from the view's query."""

    condition = "IVM_VERIFY_MISMATCH"


@_register
class InvalidNameError(IvmAnalysisException):
    """Not a valid materialized view name."""

    condition = "IVM_INVALID_NAME"


@_register
class SourceMissingError(IvmAnalysisException):
    """A base table cannot be read."""

    condition = "IVM_SOURCE_MISSING"


@_register
class SourceChangedError(IvmAnalysisException):
    """A base table was recreated or a column it read changed."""

    condition = "IVM_SOURCE_CHANGED"


@_register
class SourceNotDeltaError(IvmAnalysisException):
    """A base table is not Delta."""

    condition = "IVM_SOURCE_NOT_DELTA"


@_register
class ChangeFeedDisabledError(IvmAnalysisException):
    """A base table's change data feed is off."""

    condition = "IVM_CHANGE_FEED_DISABLED"


@_register
class ChangesUnavailableError(IvmAnalysisException):
    """The change data feed no longer covers the changes since the last refresh: refresh FULL."""

    condition = "IVM_CHANGES_UNAVAILABLE"


@_register
class BackingTableAlteredError(IvmAnalysisException):
    """The table storing the view was changed outside spark-ivm."""

    condition = "IVM_BACKING_TABLE_ALTERED"


@_register
class InvalidPropertyError(IvmAnalysisException):
    """A bad ivm.* property."""

    condition = "IVM_INVALID_PROPERTY"


@_register
class InvalidConfError(IvmAnalysisException):
    """A bad spark.ivm.* setting."""

    condition = "IVM_INVALID_CONF"


@_register
class ColumnCountMismatchError(IvmAnalysisException):
    """The column list does not fit the query."""

    condition = "IVM_COLUMN_COUNT_MISMATCH"


@_register
class ColumnTypeMismatchError(IvmAnalysisException):
    """A column list declares a type the query does not return."""

    condition = "IVM_COLUMN_TYPE_MISMATCH"


@_register
class InvalidLayoutError(IvmAnalysisException):
    """PARTITIONED BY or CLUSTER BY names a column the view does not have."""

    condition = "IVM_INVALID_LAYOUT"


@_register
class DuplicateColumnError(IvmAnalysisException):
    """The query returns two columns of one name."""

    condition = "IVM_DUPLICATE_COLUMN"


@_register
class InvalidAccessPatternError(IvmAnalysisException):
    """ACCESS BY names a column the view does not return, or one twice."""

    condition = "IVM_INVALID_ACCESS_PATTERN"


@_register
class ConstraintInvalidError(IvmAnalysisException):
    """A key constraint that cannot be declared."""

    condition = "IVM_CONSTRAINT_INVALID"


@_register
class ConstraintAlreadyExistsError(IvmAnalysisException):
    """The constraint exists."""

    condition = "IVM_CONSTRAINT_ALREADY_EXISTS"


@_register
class ConstraintViolatedError(IvmAnalysisException):
    """The table's rows violate the constraint."""

    condition = "IVM_CONSTRAINT_VIOLATED"


@_register
class EpsilonInvariantError(IvmAnalysisException):
    """An IVM^eps invariant check failed."""

    condition = "IVM_EPSILON_INVARIANT"


@_register
class NotIncrementalizableError(UnsupportedOperatorError):
    """The query cannot be maintained incrementally and the view's policy is INCREMENTAL STRICT
    (a kind of ``UnsupportedOperatorError``, which code written before policies catches)."""

    condition = "IVM_NOT_INCREMENTALIZABLE"


@_register
class RefreshNotIncrementalError(IvmAnalysisException):
    """A refresh of an INCREMENTAL STRICT view would have to recompute it."""

    condition = "IVM_REFRESH_NOT_INCREMENTAL"


@_register
class InvalidScheduleError(IvmAnalysisException):
    """A SCHEDULE or TRIGGER ON UPDATE clause is invalid (zero interval, bad cron, unknown zone)."""

    condition = "IVM_INVALID_SCHEDULE"


@_register
class ScheduleConflictError(IvmAnalysisException):
    """ADD of a schedule where there is one, or ALTER / DROP where there is none."""

    condition = "IVM_SCHEDULE_CONFLICT"


@_register
class TemporarySourceError(IvmAnalysisException):
    """The query reads a temporary view."""

    condition = "IVM_TEMPORARY_SOURCE"


@_register
class LookupExpiredError(IvmAnalysisException):
    """A lookup's remaining answers are gone: it was left unread and the view refreshed since."""

    condition = "IVM_LOOKUP_EXPIRED"


def error_class(condition: Optional[str]) -> Optional[Type[IvmAnalysisException]]:
    """The typed exception class of an ``IVM_*`` condition, if it has one."""
    if condition is None:
        return None
    return _BY_CONDITION.get(condition.split(".")[0])


def typed(error: AnalysisException) -> AnalysisException:
    """``error`` as its typed subclass when it is a spark-ivm error, else unchanged. An error
    that came through Spark Connect becomes an instance of both the Connect exception and the
    typed class (see :func:`_connect_class`)."""
    if isinstance(error, IvmAnalysisException):
        return error
    cls = error_class(error.getCondition())
    if cls is None:
        return error
    origin = getattr(error, "_origin", None)
    if origin is not None:
        return cls(origin=origin)
    if not type(error).__module__.startswith("pyspark.errors.exceptions.connect"):
        return error
    klass = _connect_class(cls, type(error))
    converted = klass.__new__(klass)
    converted.__dict__.update(error.__dict__)
    converted.args = error.args
    return converted


_CONNECT_CLASSES: Dict[Tuple[type, type], Type[AnalysisException]] = {}


def _connect_class(cls: Type[IvmAnalysisException], connect: type) -> Type[AnalysisException]:
    """A class under both ``connect`` (a Spark Connect client's exception, which holds what the
    server sent: condition, parameters, SQLSTATE) and ``cls``, so that ``except
    NotIncrementalizableError`` catches it. The Connect class answers every accessor; the classic
    one would ask a JVM the client does not have."""
    if (cls, connect) not in _CONNECT_CLASSES:
        classic = {name for base in CapturedAnalysisException.__mro__
                   if base.__module__.startswith("pyspark.errors.exceptions.captured")
                   for name, value in vars(base).items() if callable(value) or isinstance(value, property)}
        answers = {name: getattr(connect, name) for name in classic if hasattr(connect, name)}
        _CONNECT_CLASSES[(cls, connect)] = type(cls.__name__, (connect, cls), {
            **answers, "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__})
    return _CONNECT_CLASSES[(cls, connect)]


@contextmanager
def translated() -> Iterator[None]:
    """Re-raises spark-ivm's AnalysisExceptions raised inside as their typed subclasses."""
    try:
        yield
    except AnalysisException as e:
        converted = typed(e)
        if converted is e:
            raise
        raise converted.with_traceback(e.__traceback__) from None


_F = TypeVar("_F", bound=Callable[..., Any])


def raises_typed(fn: _F) -> _F:
    """Decorates an API function so that spark-ivm's errors leave it as their typed subclasses."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with translated():
            return fn(*args, **kwargs)

    return cast(_F, wrapper)
