"""Reductions and scans of traced arrays: ``sum``, ``max``, ``argmax``, ``cumsum``, ... (and
their ``np.<ufunc>.reduce`` / ``accumulate`` spellings), with NumPy's axis rules."""

from __future__ import annotations

import types

import numpy as np

from ..ops import OPS
from .active import ctx_of
from .indexing import maybe_out
from .movement import norm_axis, ravel
from .source import unsupported


def reduce(op, x, axis=None, keepdims=False, dtype=None, ddof=np._NoValue, out=None, **kw):
    """Record the reduction ``op``; ``ddof`` is given for the ops that take one (var, std)."""
    initial, where = kw.pop("initial", np._NoValue), kw.pop("where", True)
    if initial is not np._NoValue or where is not True:
        raise unsupported(
            types.SimpleNamespace(__name__=f"{op}(initial=/where=)", __module__="numpy")
        )
    if kw:
        raise TypeError(f"{op}() got unexpected arguments {sorted(kw)}")
    ctx = ctx_of(x)
    x = ctx.lift(x)
    if x.ndim == 0 and OPS[op].reduction is not None and _is_int(axis) and axis in (0, -1):
        axis = None  # NumPy's ufunc reductions accept an int axis 0 or -1 on a 0-d array
    attrs = {
        "axis": norm_axis(axis, x.ndim),
        "keepdims": bool(keepdims),
        "dtype": _opt_dtype(dtype),
    }
    if ddof is not np._NoValue:
        attrs["ddof"] = ddof or 0
    res = ctx.emit(op, [x], attrs)
    return maybe_out(res, out)


def argreduce(op, x, axis=None, keepdims=False, out=None):
    ctx = ctx_of(x)
    x = ctx.lift(x)
    if axis is not None:
        axis = norm_axis(axis, x.ndim)[0]
    res = ctx.emit(op, [x], {"axis": axis, "keepdims": bool(keepdims)})
    return maybe_out(res, out)


def scan(op, x, axis=None, dtype=None, out=None):
    ctx = ctx_of(x)
    x = ctx.lift(x)
    if axis is None:
        x, axis = ravel(x), 0
    axis = norm_axis(axis, x.ndim)[0]
    res = ctx.emit(op, [x], {"axis": axis, "dtype": _opt_dtype(dtype)})
    return maybe_out(res, out)


def _is_int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _opt_dtype(dtype):
    return None if dtype is None else np.dtype(dtype)
