"""The exceptions and warnings tracekit raises to its users."""


class TracerWarning(UserWarning):
    """Tracing baked a value read from the data into the graph (a branch, a loop count, ...)."""


class TraceError(RuntimeError):
    """Tracing cannot represent what the code did (or ``strict=True`` refused a baked value)."""


class UnsupportedOperation(TraceError):
    """A NumPy function that is not in the op table; wrap it with ``tk.python_op``."""


class GuardError(TraceError):
    """A value baked in at trace time differs on this call: the graph would compute wrongly."""
