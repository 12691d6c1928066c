"""Shapes, axes and dtypes of traced arrays: astype, reshape, transpose and the functions made
of them, copies, ``.real``/``.imag``, broadcasting, and arrays built from lists.

A movement that NumPy computes as a view is recorded as a view step of the same buffer (see
:mod:`.array`); one that changes nothing is an alias (a step without an op).
"""

from __future__ import annotations

import operator
import types

import numpy as np

from .active import ctx_of
from .array import ARRAY_FUNCTIONS, Buffer, TracedArray, ViewStep
from .source import unsupported


def norm_axis(axis, ndim):
    if axis is None:
        return None
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim if ndim else 0)
    return tuple(sorted(out))


def axis_index(a, ndim) -> int:
    """``a`` as an axis in ``range(ndim)``; AxisError (as NumPy) when out of bounds."""
    a = operator.index(a)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(a, ndim)
    return a % ndim


def astype(x, dtype, copy_=True):
    ctx = ctx_of(x)
    x = ctx.lift(x)
    dtype = np.dtype(dtype)
    if dtype == x.dtype and not x.weak:  # a weak Python scalar becomes a strong NumPy value
        return copy(x) if copy_ else x
    return ctx.emit("astype", [x], {"dtype": dtype})


def reshape(x, shape, order="C"):
    if order != "C":
        raise unsupported(
            types.SimpleNamespace(__name__=f"reshape(order={order!r})", __module__="numpy")
        )
    ctx = ctx_of(x)
    x = ctx.lift(x)
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(int(s) for s in shape)
    shape = np.empty(x.shape, dtype=[]).reshape(shape).shape  # resolve -1, check size
    if shape == x.shape:
        return alias(x)
    return ctx.emit("reshape", [x], {"shape": shape}, view=True)


def alias(x):
    return TracedArray(x._ctx, x._buf, x._chain + (ViewStep(None, {}, x._value),), x._value)


def transpose(x, axes=None):
    ctx = ctx_of(x)
    x = ctx.lift(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    else:
        if len(axes) != x.ndim:
            raise ValueError("axes don't match array")
        axes = tuple(axis_index(a, x.ndim) for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError("repeated axis in transpose")
    if axes == tuple(range(x.ndim)):
        return alias(x)
    return ctx.emit("transpose", [x], {"axes": axes}, view=True)


def swapaxes(x, a, b):
    perm = list(range(np.ndim(x._value if isinstance(x, TracedArray) else x)))
    a, b = axis_index(a, len(perm)), axis_index(b, len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, tuple(perm))


def moveaxis(x, source, destination):
    n = x.ndim
    src = [axis_index(s, n) for s in (source if isinstance(source, tuple | list) else [source])]
    dst = [
        axis_index(d, n)
        for d in (destination if isinstance(destination, tuple | list) else [destination])
    ]
    if len(src) != len(dst):
        raise ValueError(
            "`source` and `destination` arguments must have the same number of elements"
        )
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("repeated axis in `source` or `destination` argument")
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def ravel(x, order="C"):
    return reshape(x, (x.size,), order)


def squeeze(x, axis=None):
    shape = x.shape
    axes = (
        [i for i, d in enumerate(shape) if d == 1]
        if axis is None
        else list(norm_axis(axis, x.ndim))
    )
    for a in axes:
        if shape[a] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))


def expand_dims(x, axis):
    ctx = ctx_of(x)
    x = ctx.lift(x)
    n = x.ndim + (len(axis) if isinstance(axis, tuple | list) else 1)
    axes = norm_axis(axis, n)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def copy(x):
    """A new buffer holding the same Var (the IR is pure: copying costs no node)."""
    ctx = ctx_of(x)
    x = ctx.lift(x)
    v = x._value
    value = v if x.weak else np.array(v, copy=True) if isinstance(v, np.ndarray) else v.copy()
    return TracedArray(ctx, Buffer(x.ir_var), (), value)


def real(x):
    x = ctx_of(x).lift(x)
    if type(x._value) is bool:  # True.real is the int 1 (a traced Python bool)
        return python_int(x)
    if x.dtype.kind != "c":
        return alias(x)
    if x.weak:  # np.real of a Python complex is a Python float
        return x._ctx.emit("real", [x], weak=True)
    return x._ctx.emit("real", [x], view=True)


def imag(x):
    x = ctx_of(x).lift(x)
    if x.dtype.kind != "c":  # NumPy gives read-only zeros (of a Python number: a Python zero)
        python = type(x._value) in (bool, int, float)  # True.imag is the int 0
        dtype = np.dtype(np.int64) if type(x._value) is bool else x.dtype
        attrs = {"shape": x.shape, "fill_value": np.zeros((), dtype)[()], "dtype": dtype}
        res = x._ctx.emit("full", [], attrs, weak=python)
        if not python:
            res._buf.readonly = True
            if isinstance(res._value, np.ndarray):
                res._value.flags.writeable = False
        return res
    if x.weak:
        return x._ctx.emit("imag", [x], weak=True)
    return x._ctx.emit("imag", [x], view=True)


def python_int(x):
    """The Python bool ``x`` as the int Python makes of it."""
    return x._ctx.emit("astype", [x], {"dtype": np.dtype(np.int64)}, weak=True)


def broadcast_to(x, shape):
    ctx = ctx_of(x)
    x = ctx.lift(x)
    shape = tuple(int(s) for s in (shape if isinstance(shape, tuple | list) else (shape,)))
    if shape == x.shape:
        return alias(x)
    return ctx.emit("broadcast_to", [x], {"shape": shape}, view=True)


def array_from(seq, dtype=None):
    """``np.array([...])`` of traced values: a stack."""
    ctx = ctx_of(seq)
    if isinstance(seq, TracedArray):
        return astype(seq, dtype) if dtype is not None else copy(seq)
    items = [array_from(e) if isinstance(e, list | tuple) else ctx.lift(e) for e in seq]
    items = [e if isinstance(e, TracedArray) else ctx.lift(np.asarray(e)) for e in items]
    res = ARRAY_FUNCTIONS[np.stack]([i for i in items], axis=0)
    return astype(res, dtype, False) if dtype is not None else res
