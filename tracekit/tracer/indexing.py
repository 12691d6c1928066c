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
            start, stop, step = k.start, k.stop, k.step
            if (
                (start is None or type(start) is int)
                and (stop is None or type(stop) is int)
                and (step is None or type(step) is int)
            ):
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
        idx, arrays = _static_masks(x, idx, arrays)
    if arrays:
        return ctx.emit("index", [x, *arrays], {"idx": idx})
    if idx == (Ellipsis,):
        return alias(x)
    return ctx.emit("index", [x], {"idx": idx}, view=True)


def _static_masks(x, idx, arrays):
    """Boolean masks whose values are known while tracing (from literals and constants, or
    captured arrays: a guard then checks them at every call) replaced by the positions of their
    True elements, as NumPy itself reads them (``a[m]`` is ``a[m.nonzero()]``); a mask computed
    from the function's arguments has a data-dependent shape and is refused."""
    ctx = x._ctx
    new_idx, new_arrays = [], []
    for e in idx:
        mask = arrays[int(e[1:])] if isinstance(e, str) else None
        if mask is None or mask.dtype != bool:
            if mask is not None:
                e = f"@{len(new_arrays)}"
                new_arrays.append(mask)
            new_idx.append(e)
            continue
        kinds = ctx.origins(mask.ir_var) if mask.ndim else None
        if kinds is None or "arg" in kinds:
            raise _data_dependent_mask(x, mask)
        if "capture" in kinds:
            ctx.guard_known(mask, "a boolean mask computed from a captured array")
        for positions in np.nonzero(mask._value):
            new_idx.append(f"@{len(new_arrays)}")
            new_arrays.append(ctx.lift(positions))
    return tuple(new_idx), new_arrays


def _data_dependent_mask(x, mask) -> TraceError:
    """The refusal of a mask computed from the arguments, with the rewrite that avoids it."""
    src = user_source(4)
    where = f" at {src} `{src.text}`" if src else ""
    if mask.ndim == x.ndim:
        m, axis, average = "mask", "", ""
    else:
        m = f"mask[{', '.join([':'] * mask.ndim + ['None'] * (x.ndim - mask.ndim))}]"
        axis = "0" if mask.ndim == 1 else str(tuple(range(mask.ndim)))
        average = ", or np.average(a, axis=0, weights=mask)" if mask.ndim == 1 else ""
    return TraceError(
        f"boolean-mask indexing a[mask]{where} has a data-dependent shape (the number of True "
        "values) and cannot be traced. Compute without selecting: np.where(mask, a, 0) keeps "
        f"a's shape, and a masked reduction weights the elements instead: a[mask].sum({axis}) "
        f"is np.where({m}, a, 0).sum({axis}), a[mask].mean({axis}) is "
        f"np.where({m}, a, 0).sum({axis}) / mask.sum(){average}."
    )


def setitem(x, key, value):
    ctx = x._ctx
    idx, arrays = _split_index(x, key)
    value = ctx.lift(value)
    vv = value._value if isinstance(value, TracedArray) else value
    real_key = _ops.build_index(idx, [a._value for a in arrays])
    ctx.settle()  # values not computed yet may read x's
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
        target._ctx.settle()  # values not computed yet may read target's
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
    ctx.settle()  # values not computed yet may read target's
    np.add.at(target._value, _ops.build_index(idx, [x._value for x in arrays]), vv)
    ins = [target.ir_var, value.ir_var if isinstance(value, TracedArray) else value]
    target._write(
        ctx.emit_var("index_add", ins + [x.ir_var for x in arrays], {"idx": idx}, target._value)
    )
