"""Indexing and writes into traced arrays, functionalised.

``x[key]`` with a basic index is a view step of ``x``'s buffer, with integer or boolean arrays
an ``index`` node. A write (``x[key] = v``, ``x[...] = v``, an ``out=`` argument,
``np.add.at``) is done on the real values (NumPy's own checks, casting and broadcasting) and
recorded as the node that gives the buffer its new contents (``index_update``, ``where``,
``index_add``), written back through the views between the array and its buffer.
"""

from __future__ import annotations

import types

import numpy as np

from .. import ops as _ops
from ..errors import TraceError
from ..ir import Var
from .active import ctx_of
from .array import TracedArray, stand_in
from .movement import alias, astype
from .source import unsupported, user_source


# ---------------------------------------------------------------------- keys
def _split_index(x, key):
    """Normalise ``key``: (idx with "@k" placeholders, arrays, is_basic)."""
    if not isinstance(key, tuple):
        key = (key,)
    ctx = x._ctx
    idx, arrays = [], []
    for k in key:
        if type(k) is slice:  # the common case first: a slice of Python ints
            ends = (k.start, k.stop, k.step)
            if all(v is None or type(v) is int for v in ends):
                idx.append(k)
                continue
        if isinstance(k, TracedArray) or isinstance(k, np.ndarray) or isinstance(k, list):
            arr = ctx.lift(np.asarray(k) if isinstance(k, list) else k)
            if isinstance(arr, TracedArray) and arr.ndim == 0 and arr.dtype.kind in "iu":
                idx.append(int(arr.__index__()))
                continue
            if not isinstance(arr, TracedArray):
                arr = ctx.lift(np.asarray(arr))
            if arr.dtype.kind not in "iub":
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            idx.append(f"@{len(arrays)}")
            arrays.append(arr)
        elif isinstance(k, slice):
            idx.append(
                slice(*(None if v is None else _static_int(v) for v in (k.start, k.stop, k.step)))
            )
        elif k is None or k is Ellipsis:
            idx.append(k)
        elif isinstance(k, bool | np.bool_):
            raise unsupported(
                types.SimpleNamespace(__name__="indexing with a Python bool", __module__="numpy")
            )
        else:
            idx.append(_static_int(k))
    return tuple(idx), arrays


def _static_int(v):
    if isinstance(v, TracedArray):
        return v.__index__()
    return int(v) if isinstance(v, np.integer) else v.__index__()


# ---------------------------------------------------------------------- x[key], x[key] = v
def getitem(x, key):
    ctx = x._ctx
    idx, arrays = _split_index(x, key)
    if any(a.dtype == bool for a in arrays):
        raise TraceError(
            f"boolean-mask indexing at {user_source(3)} has a data-dependent shape and cannot be "
            "traced. Use np.where(mask, a, b) to select, or (mask * a).sum() to reduce."
        )
    if arrays:
        return ctx.emit("index", [x, *arrays], {"idx": idx})
    if idx == (Ellipsis,):
        return alias(x)
    return ctx.emit("index", [x], {"idx": idx}, view=True)


def setitem(x, key, value):
    ctx = x._ctx
    idx, arrays = _split_index(x, key)
    value = ctx.lift(value)
    vv = value._value if isinstance(value, TracedArray) else value
    real_key = _ops.build_index(idx, [a._value for a in arrays])
    x._value[real_key] = vv  # NumPy's own checks, casting and broadcasting, on the real values
    if idx in ((Ellipsis,), ()) or (idx == (slice(None),) and x.ndim >= 1):
        x._write(conform(value, x))
        return
    if (
        len(arrays) == 1
        and idx == ("@0",)
        and arrays[0].dtype == bool
        and arrays[0].shape == x.shape
        and np.ndim(vv) == 0
    ):
        v = value if isinstance(value, TracedArray) else vv
        if isinstance(v, TracedArray) and v.dtype != x.dtype:
            v = astype(v, x.dtype, False)
        elif not isinstance(v, TracedArray):
            v = np.asarray(vv).astype(x.dtype)[()]
        new = ctx.emit_var(
            "where",
            [arrays[0].ir_var, v.ir_var if isinstance(v, TracedArray) else v, x.ir_var],
            {},
            x._value,
        )
        x._write(new)
        return
    ins = [x.ir_var, value.ir_var if isinstance(value, TracedArray) else value] + [
        a.ir_var for a in arrays
    ]
    new = ctx.emit_var("index_update", ins, {"idx": idx}, x._value)
    x._write(new)


# ---------------------------------------------------------------------- whole-array writes
def store(target: TracedArray, value, casting="unsafe"):
    """``target[...] = value``: NumPy's broadcasting and casting, recorded as a write."""
    value = target._ctx.lift(value)
    vv = value._value if isinstance(value, TracedArray) else value
    if target._ctx.lazy:  # dask values: NumPy's checks without computing anything
        np.broadcast_shapes(np.shape(vv), target.shape)
        src = value.dtype if isinstance(value, TracedArray) else np.asarray(vv).dtype
        if not np.can_cast(src, target.dtype, casting):
            raise TypeError(f"Cannot cast {src} to {target.dtype} with casting rule {casting!r}")
    else:
        np.copyto(target._value, vv, casting=casting)
    target._write(conform(value, target))


def conform(value, target: TracedArray) -> Var:
    """A Var holding ``value`` broadcast and cast to ``target``'s shape and dtype."""
    ctx = target._ctx
    if not isinstance(value, TracedArray):
        fill = np.asarray(value).astype(target.dtype)[()]
        attrs = {"shape": target.shape, "fill_value": fill, "dtype": target.dtype}
        return ctx.emit_var("full", [], attrs, target._value)
    v = value.ir_var
    if v.ndim > target.ndim:  # NumPy accepted it, so the extra leading axes have length 1
        v = ctx.emit_var(
            "reshape",
            [v],
            {"shape": v.shape[v.ndim - target.ndim :]},
            stand_in(v)[(0,) * (v.ndim - target.ndim)],
        )
    if v.dtype != target.dtype:
        v = ctx.emit_var("astype", [v], {"dtype": target.dtype}, stand_in(v, target.dtype))
    if v.shape != target.shape:
        v = ctx.emit_var("broadcast_to", [v], {"shape": target.shape}, target._value)
    return v


def maybe_out(res, out):
    if out is None:
        return res
    target = out[0] if isinstance(out, tuple) else out
    store(res._ctx.lift(target), res, casting="same_kind")
    return target


def add_at(a, indices, b):
    """``np.add.at(a, indices, b)``: an unbuffered scatter-add into ``a`` (an ``index_add``)."""
    ctx = ctx_of(a, indices, b)
    target = ctx.lift(a)
    if not isinstance(target, TracedArray):
        raise TypeError("np.add.at needs an array to add into")
    if isinstance(target._value, np.ndarray) and not target._value.flags.writeable:
        src = user_source(2)  # NumPy's own add.at writes into read-only views
        raise ValueError(f"np.add.at: the destination is read-only (at {src} `{src.text}`)")
    idx, arrays = _split_index(target, indices)
    value = ctx.lift(b)
    vv = value._value if isinstance(value, TracedArray) else value
    np.add.at(target._value, _ops.build_index(idx, [x._value for x in arrays]), vv)
    ins = [target.ir_var, value.ir_var if isinstance(value, TracedArray) else value]
    target._write(
        ctx.emit_var("index_add", ins + [x.ir_var for x in arrays], {"idx": idx}, target._value)
    )
