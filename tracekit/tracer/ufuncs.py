"""NumPy's ufuncs on traced arrays (``__array_ufunc__``): a call is the op the op table declares
with that ufunc; ``reduce`` and ``accumulate`` are the reduction and scan whose combine it is;
``np.add.at`` is a scatter-add. ``out=`` and ``dtype=`` follow NumPy's casting."""

from __future__ import annotations

import types

import numpy as np

from .. import ops as _ops
from ..ops import OPS
from .active import ctx_of
from .array import TracedArray
from .indexing import add_at, conform
from .movement import astype
from .reductions import reduce, scan
from .source import unsupported

# ufuncs of other libraries the tracer knows: (is_theirs(ufunc), call(ufunc, inputs, kwargs)),
# registered by their modules (tracekit.numba_interop: numba's @vectorize ufuncs)
FOREIGN_UFUNCS: list = []


def array_ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__":
        return call_ufunc(ufunc, inputs, kwargs)
    op = _ops.ufunc_method_op(ufunc.__name__, method)
    if op is not None:  # np.add.reduce is sum, np.multiply.accumulate is cumprod, ...
        axis = kwargs.pop("axis", 0)
        return (reduce if method == "reduce" else scan)(op, inputs[0], axis, **kwargs)
    if method == "at" and ufunc is np.add and len(inputs) == 3 and not kwargs:
        return add_at(*inputs)
    raise unsupported(
        types.SimpleNamespace(__name__=f"{ufunc.__name__}.{method}", __module__="numpy")
    )


def call_ufunc(ufunc, inputs, kwargs, weak=False):
    # the common call: no out=, no dtype=, a traced array first or last (``2.0 * x``)
    traced = inputs[0] if type(inputs[0]) is TracedArray else inputs[-1]
    if not kwargs and type(traced) is TracedArray:
        op = _op_of(ufunc)
        if op is not None:
            return traced._ctx.emit(op, inputs, weak=weak)  # emit lifts the others
    for is_theirs, call in FOREIGN_UFUNCS:
        if is_theirs(ufunc):
            return call(ufunc, inputs, kwargs)
    name = ufunc.__name__
    out = kwargs.pop("out", None)
    dtype = kwargs.pop("dtype", None)
    where = kwargs.pop("where", True)
    if kwargs.get("casting") == "same_kind":
        kwargs.pop("casting")
    if kwargs or where is not True:
        bad = ", ".join(kwargs) or "where"
        raise unsupported(types.SimpleNamespace(__name__=f"{name}({bad}=...)", __module__="numpy"))
    if name not in OPS or OPS[name].ufunc is not ufunc or ufunc.nout != 1:
        raise unsupported(ufunc)
    ctx = ctx_of(inputs, out)
    inputs = tuple(ctx.lift(x) for x in inputs)
    if dtype is not None:
        inputs = _cast_to_loop(ufunc, inputs, np.dtype(dtype))
    res = ctx.emit(name, inputs, weak=weak)
    if out is None:
        return res
    target = ctx.lift(out[0] if isinstance(out, tuple) else out)
    vals = [x._value if isinstance(x, TracedArray) else x for x in inputs]
    ctx.settle()  # values not computed yet may read target's
    ufunc(*vals, out=target._value)  # NumPy's own casting rules and errors, on the real values
    target._write(conform(res, target))
    return target


_OP_OF_UFUNC: dict = {}  # a NumPy ufunc -> the op declaring it (one output), or None


def _op_of(ufunc) -> str | None:
    """The op whose ufunc ``ufunc`` is (the op table names it so), or None."""
    try:
        return _OP_OF_UFUNC[ufunc]
    except KeyError:
        pass
    except TypeError:  # an unhashable ufunc-like object
        return None
    name = getattr(ufunc, "__name__", None)
    spec = OPS.get(name) if isinstance(name, str) else None
    ok = spec is not None and spec.ufunc is ufunc and getattr(ufunc, "nout", 0) == 1
    _OP_OF_UFUNC[ufunc] = op = name if ok else None
    return op


def _cast_to_loop(ufunc, inputs, dtype):
    """Inputs cast to the loop NumPy picks for ``ufunc(*inputs, dtype=dtype)``."""
    ufunc(*(x._value if isinstance(x, TracedArray) else x for x in inputs), dtype=dtype)

    def kind(x):
        if isinstance(x, TracedArray):
            return type(x._value) if x.weak else x.dtype
        weak = isinstance(x, int | float | complex) and not isinstance(x, np.generic)
        return type(x) if weak else np.asarray(x).dtype

    loop = ufunc.resolve_dtypes(
        tuple(kind(x) for x in inputs) + (None,) * ufunc.nout,
        signature=(None,) * ufunc.nin + (dtype,) * ufunc.nout,
    )
    return tuple(
        astype(x, d, False) if isinstance(x, TracedArray) and (x.dtype != d or x.weak) else x
        for x, d in zip(inputs, loop)
    )
