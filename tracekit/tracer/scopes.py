"""``tk.scope``: a named group of ops, drawn as a cluster; the trace context keeps the scopes
entered in the user's frames (see ``TraceContext.push_scope``)."""

from __future__ import annotations

import contextlib
import functools

from .active import current


class scope(contextlib.ContextDecorator):
    """Name a group of ops; shown as a cluster when rendered. Context manager or decorator.

    >>> import numpy as np, tracekit as tk
    >>> def f(x):
    ...     with tk.scope("block"):
    ...         y = np.exp(x)
    ...     return y + 1
    >>> tk.trace(f, np.ones(2)).graph.nodes[0].scope[-1]
    'block'
    """

    def __init__(self, name: str):
        self.name = str(name)
        self._entries = []
        self._suppress = None

    def __call__(self, fn):
        inner = scope(self.name)
        inner._suppress = getattr(fn, "__code__", None)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with scope(self.name) as s:
                s._suppress_next(inner._suppress)
                return fn(*a, **k)

        return wrapper

    def _suppress_next(self, code):
        if self._entries and self._entries[-1] is not None:
            self._entries[-1].suppress = code

    def __enter__(self):
        ctx = current()
        self._entries.append(ctx.push_scope(self.name) if ctx is not None else None)
        return self

    def __exit__(self, *exc):
        entry = self._entries.pop()
        ctx = current()
        if entry is not None and ctx is not None and entry in ctx.scopes:
            ctx.scopes.remove(entry)
        return False
