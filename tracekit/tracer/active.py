"""Which trace is recording: the active trace context of this thread, and the trace that some
values belong to."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from ..errors import TraceError
from .array import TracedArray, iter_deep

_state = threading.local()


def current():
    """The active trace context, or None outside tracing."""
    return getattr(_state, "ctx", None)


def ctx_of(*xs):
    for x in iter_deep(xs):
        if isinstance(x, TracedArray):
            return x._ctx
    ctx = current()
    if ctx is None:
        raise TraceError("no trace is active")
    return ctx


CREATION_NAMES: list = []  # the NumPy functions tracing replaces (traced.creation_functions_traced)


@contextlib.contextmanager
def numpy_as_is():
    """NumPy's own creation functions (``np.zeros`` & co.) back in place for the duration: user
    code that compiles while tracing (a numba function inside a python op) must see NumPy's
    functions, not the tracer's stand-ins."""
    replaced = {}
    for name in CREATION_NAMES:
        f = getattr(np, name)
        if getattr(f, "tracekit_creation", False):
            replaced[name] = f
            setattr(np, name, f.__wrapped__)
    try:
        yield
    finally:
        for name, f in replaced.items():
            setattr(np, name, f)
