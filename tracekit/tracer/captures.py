"""Captured arrays: arrays the traced function reaches without receiving them (a closure, a
global, an attribute of ``self``). Each becomes an input that shows where it was found
(``self.w1``, ``closure:scale``) and is read again at every call.

:func:`scan_captures` finds them before the trace, :func:`install_captures` puts traced
stand-ins in their places for its duration and :func:`restore_captures` puts the arrays back
(a rebinding becomes a write into the captured array); :func:`find_capture` looks for a plain
array that reaches the trace in the user frames on the stack.
"""

from __future__ import annotations

import functools
import sys
import types

import numpy as np

from ..errors import TraceError
from .active import current
from .array import TracedArray
from .indexing import conform
from .source import is_user_frame

RANDOM_GENERATORS = np.random.Generator | np.random.RandomState | np.random.BitGenerator


def scan_captures(fn, depth=4, slots=None, generators=None) -> dict:
    """id(array) -> (label, getter) for arrays reachable from ``fn`` without being passed in.

    ``slots`` (a list) receives ``(label, getter, setter, array)`` for each place holding one;
    ``generators`` (a list) receives ``(label, generator)`` for NumPy's random generators.
    """
    found, seen = {}, set()

    def visit(obj, label, getter, d, setter=None):
        if isinstance(obj, RANDOM_GENERATORS):
            if generators is not None and all(g is not obj for _, g in generators):
                generators.append((label, obj))
            return
        if isinstance(obj, np.ndarray | TracedArray):
            # (an enclosing trace's array, where its trace put it: captured by its value)
            value = obj._value if isinstance(obj, TracedArray) else obj
            found.setdefault(id(value), (label, getter))
            if slots is not None and setter is not None:
                slots.append((label, getter, setter, obj))
            return
        if d <= 0 or id(obj) in seen or _opaque(obj):
            return
        seen.add(id(obj))
        if isinstance(obj, list | tuple):
            mutable = isinstance(obj, list)
            for i, e in enumerate(obj[:256]):
                put = _item_setter(getter, i) if mutable else None
                visit(e, f"{label}[{i}]", _item_getter(getter, i), d - 1, put)
        elif isinstance(obj, dict):
            for k, e in list(obj.items())[:256]:
                if isinstance(k, str | int):
                    get, put = _item_getter(getter, k), _item_setter(getter, k)
                    visit(e, f"{label}[{k!r}]", get, d - 1, put)
        elif isinstance(obj, types.FunctionType):  # a helper's closure cells
            for i, (k, cell) in enumerate(zip(obj.__code__.co_freevars, obj.__closure__ or ())):
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                get, put = _closure_getter(getter, i), _closure_setter(getter, i)
                visit(value, f"{label}.{k}", get, d - 1, put)
        elif hasattr(obj, "__dict__"):
            for k, e in list(vars(obj).items())[:256]:
                visit(e, f"{label}.{k}", _attr_getter(getter, k), d - 1, _attr_setter(getter, k))

    target = fn
    if isinstance(fn, functools.partial):
        target = fn.func
    owner = getattr(target, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        visit(owner, "self", lambda o=owner: o, depth)
        target = target.__func__
    elif not isinstance(target, types.FunctionType) and callable(target):
        visit(target, "self", lambda o=target: o, depth)
        target = getattr(type(target).__call__, "__func__", type(target).__call__)
    code = getattr(target, "__code__", None)
    if code is not None:
        _scan_code(target, code, visit)
    return found


def _scan_code(fn, code, visit):
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        put = functools.partial(setattr, cell, "cell_contents")
        visit(value, f"closure:{name}", lambda c=cell: c.cell_contents, 3, put)
    g = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in g:
            put = functools.partial(g.__setitem__, name)
            visit(g[name], f"global:{name}", lambda g=g, n=name: g[n], 3, put)


def _opaque(obj) -> bool:
    return (
        isinstance(
            obj,
            types.ModuleType
            | type
            | types.BuiltinFunctionType
            | str
            | bytes
            | int
            | float
            | complex
            | np.generic
            | types.MethodType
            | functools.partial,
        )
        or obj is None
    )


def _closure_getter(getter, i):
    return lambda: getter().__closure__[i].cell_contents


def _closure_setter(getter, i):
    return lambda v: setattr(getter().__closure__[i], "cell_contents", v)


def _item_setter(getter, key):
    return lambda v: getter().__setitem__(key, v)


def _attr_setter(getter, key):
    return lambda v: setattr(getter(), key, v)


def install_captures(ctx, slots):
    """Put a traced stand-in where each captured array lives, for the duration of the trace.

    Then everything the code does with ``self.w`` is recorded, including operations that never
    meet a traced argument (``self.w.T``, ``self.w.sum()``), and reads the current weights
    on every call. :func:`restore_captures` puts the arrays back.
    """
    for _label, _getter, setter, arr in slots:
        if isinstance(arr, TracedArray) and arr._ctx is not ctx:  # an enclosing trace's
            setter(ctx.lift(arr._value))
        elif type(arr) is np.ndarray and arr.dtype.kind in "biufc":
            setter(ctx.lift(arr))


def restore_captures(ctx, slots, record=True):
    """Put captured arrays back where the traced code rebound them to traced values.

    ``self.w -= g`` (and ``self.w = self.w - g``) inside traced code leaves a TracedArray in
    ``self.w``; the user's object gets its array back, and with ``record`` a rebinding to a new
    value becomes a write into the captured array, which the Traced repeats on every call.
    """
    for label, getter, setter, original in slots:
        try:
            current = getter()
        except Exception:
            continue
        if not isinstance(current, TracedArray) or current._ctx is not ctx:
            continue
        setter(original)
        if not record:
            continue
        target = ctx.lift(original._value if isinstance(original, TracedArray) else original)
        if current._buf is target._buf and not current._chain:
            continue  # written in place: already recorded
        if current.shape != target.shape or current.dtype != target.dtype:
            raise TraceError(
                f"the traced code rebinds the captured array {label} ({target.ir_var.type}) to "
                f"a {current.ir_var.type} value; tracekit can only write values of the same "
                "shape and dtype back into it. Pass the array as an argument and return it."
            )
        target._write(conform(current, target))


def _item_getter(getter, key):
    return lambda: getter()[key]


def _attr_getter(getter, key):
    return lambda: getattr(getter(), key)


def find_capture(arr):
    """Look for ``arr`` in the objects, closures and globals of the user frames on the stack."""
    f = sys._getframe(1)
    ctx = current()
    while f is not None and (ctx is None or f.f_code is not ctx.stop_code):
        if is_user_frame(f):
            found, seen = None, set()
            for name, value in f.f_locals.items():
                if value is arr or isinstance(value, np.ndarray | TracedArray):
                    continue
                if name in f.f_code.co_freevars or _opaque(value) or id(value) in seen:
                    continue
                seen.add(id(value))
                hits = scan_captures(_Holder(value), 3)
                if id(arr) in hits:
                    label, getter = hits[id(arr)]
                    found = (label.replace("self", name, 1), getter)
                    break
            if found is None:
                cells = tuple(types.CellType() for _ in f.f_code.co_freevars)
                hits = scan_captures(types.FunctionType(f.f_code, f.f_globals, closure=cells), 1)
                found = hits.get(id(arr))
            if found is not None:
                return found
        f = f.f_back
    return None


class _Holder:
    """Lets :func:`scan_captures` scan one object as if it were ``self``."""

    __func__ = None

    def __init__(self, obj):
        self.__self__ = obj
