"""The exceptions and warnings tracekit raises to its users."""


class TracerWarning(UserWarning):
    """Tracing baked a value read from the data into the graph (a branch, a loop count, ...).

    >>> import warnings, numpy as np, tracekit as tk
    >>> def f(x):
    ...     return x if x.sum() > 0 else -x
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     t = tk.trace(f, np.ones(2))
    >>> [w.category.__name__ for w in seen]
    ['TracerWarning']
    >>> print(seen[0].message)  # doctest: +ELLIPSIS
    <doctest ...>:2 ...: bool() read a traced value (True) and baked it into the trace: ...
    """


class TraceError(RuntimeError):
    """Tracing cannot represent what the code did (or ``strict=True`` refused a baked value).

    >>> import numpy as np, tracekit as tk
    >>> def f(x):
    ...     return x if x.sum() > 0 else -x
    >>> tk.trace(f, np.ones(2), strict=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tracekit.errors.TraceError: ...: bool() read a traced value (True) ... (strict=True)
    """


class UnsupportedOperation(TraceError):
    """A NumPy function that is not in the op table; wrap it with ``tk.python_op``.

    >>> import numpy as np, tracekit as tk
    >>> tk.trace(lambda x: np.linalg.pinv(x), np.eye(2))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tracekit.errors.UnsupportedOperation: np.linalg.pinv is not supported by tracekit's tracer...
    >>> pinv = tk.python_op(np.linalg.pinv)
    >>> tk.trace(lambda x: pinv(x) * 2, np.eye(2))(np.eye(2))
    array([[2., 0.],
           [0., 2.]])
    """


class GuardError(TraceError):
    """A value baked in at trace time differs on this call: the graph would compute wrongly.

    >>> import warnings, numpy as np, tracekit as tk
    >>> def f(x):
    ...     return x if x.sum() > 0 else -x
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     t = tk.trace(f, np.ones(2))
    >>> t(np.full(2, 3.0))
    array([3., 3.])
    >>> t(-np.ones(2))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tracekit.errors.GuardError: bool() gave False on this call but True when traced at ...
    """
