"""Which trace is recording: the active trace context of this thread, and the trace that some
values belong to."""

from __future__ import annotations

import threading

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
