"""Errors raised by the Python layer itself (the engine's errors are AnalysisExceptions)."""


class IvmError(Exception):
    """A misuse of the Python API, such as a view name that does not exist."""
