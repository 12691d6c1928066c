"""How NumPy's functions reach the op table while tracing (``__array_function__`` handlers).

Each handler normalises NumPy's many spellings (``np.amax``, ``np.vstack``, ``np.flip``, ...) into
the op table's few primitives. A function without a handler raises ``UnsupportedOperation``.
"""

from __future__ import annotations

import operator
import types

import numpy as np

from .errors import TraceError
from .tracer.active import ctx_of
from .tracer.array import TracedArray, implements
from .tracer.indexing import add_at, maybe_out
from .tracer.movement import (
    array_from,
    astype,
    axis_index,
    broadcast_to,
    copy,
    expand_dims,
    imag,
    moveaxis,
    norm_axis,
    ravel,
    real,
    reshape,
    squeeze,
    swapaxes,
    transpose,
)
from .tracer.reductions import argreduce, reduce, scan
from .tracer.source import public_name, unsupported, user_source
from .tracer.ufuncs import call_ufunc


def _lift(x):
    return ctx_of(x).lift(x)


def _traced(x, like=None):
    """Lift ``x`` and make plain values traced arrays (as constants)."""
    ctx = ctx_of(x, like)
    x = ctx.lift(x)
    if not isinstance(x, TracedArray):
        x = ctx.lift(np.asarray(x))
    return x


# ---------------------------------------------------------------------- reductions
def _reduction(op, takes_dtype):
    """The handler of NumPy's functions for ``op``; ``takes_dtype``: they have a ``dtype``
    parameter (``np.max``, ``np.any``, ... have none)."""

    def handler(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
        if not takes_dtype and dtype is not None:
            raise TypeError(f"{op}() got an unexpected keyword argument 'dtype'")
        return reduce(op, _traced(a), axis, keepdims, dtype, out=out, **kw)

    return handler


for _name, _fns in {"sum": (np.sum,), "prod": (np.prod,), "mean": (np.mean,)}.items():
    implements(*_fns)(_reduction(_name, takes_dtype=True))
for _name, _fns in {
    "max": (np.max, np.amax),
    "min": (np.min, np.amin),
    "any": (np.any,),
    "all": (np.all,),
}.items():
    implements(*_fns)(_reduction(_name, takes_dtype=False))


@implements(np.var)
def _var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    return reduce("var", _traced(a), axis, keepdims, dtype, ddof=ddof, out=out, **kw)


@implements(np.std)
def _std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
    return reduce("std", _traced(a), axis, keepdims, dtype, ddof=ddof, out=out, **kw)


@implements(np.average)
def _average(a, axis=None, weights=None, returned=False, keepdims=False):
    if weights is None:
        avg = reduce("mean", _traced(a), axis, keepdims)
        if returned:
            raise unsupported(
                types.SimpleNamespace(__name__="average(returned=True)", __module__="numpy")
            )
        return avg
    if returned:
        raise unsupported(
            types.SimpleNamespace(__name__="average(returned=True)", __module__="numpy")
        )
    # as numpy/lib/_function_base_impl.py, so the result is NumPy's to the bit
    a, w = _traced(a), _traced(weights, a)
    if a.dtype.kind in "biu":
        result_dtype = np.result_type(a.dtype, w.dtype, "f8")
    else:
        result_dtype = np.result_type(a.dtype, w.dtype)
    if w.shape != a.shape:
        if axis is None:
            raise TypeError("Axis must be specified when shapes of a and weights differ.")
        axes = tuple(axis_index(ax, a.ndim) for ax in np.atleast_1d(axis).tolist())
        if w.shape != tuple(a.shape[ax] for ax in axes):
            raise ValueError(
                "Shape of weights must be consistent with shape of a along specified axis."
            )
        w = transpose(w, tuple(int(i) for i in np.argsort(axes)))
        w = reshape(w, tuple(s if ax in axes else 1 for ax, s in enumerate(a.shape)))
        axis = axes
    # NumPy raises ZeroDivisionError when the weights sum to zero (a data-dependent check that
    # a graph cannot make); the traced graph gives NumPy's inf/nan there instead.
    scl = reduce("sum", w, axis, keepdims, result_dtype)
    return reduce("sum", np.multiply(a, w, dtype=result_dtype), axis, keepdims) / scl


@implements(np.argmax)
def _argmax(a, axis=None, out=None, keepdims=False):
    return argreduce("argmax", _traced(a), axis, keepdims, out)


@implements(np.argmin)
def _argmin(a, axis=None, out=None, keepdims=False):
    return argreduce("argmin", _traced(a), axis, keepdims, out)


@implements(np.cumsum)
def _cumsum(a, axis=None, dtype=None, out=None):
    return scan("cumsum", _traced(a), axis, dtype, out)


@implements(np.cumprod)
def _cumprod(a, axis=None, dtype=None, out=None):
    return scan("cumprod", _traced(a), axis, dtype, out)


@implements(np.count_nonzero)
def _count_nonzero(a, axis=None, keepdims=False):
    return reduce("sum", _traced(a) != 0, axis, keepdims, np.intp)


# ---------------------------------------------------------------------- linear algebra
@implements(np.dot)
def _dot(a, b, out=None):
    ctx = ctx_of(a, b)
    a, b = _traced(a, b), _traced(b, a)
    # with a 0-d operand too: NumPy computes that product with BLAS's axpy, not as a * b (-0.0
    # becomes 0.0, 0 * inf is 0, and a complex product rounds in the order of its CPU's kernel)
    return maybe_out(ctx.emit("dot", [a, b]), out)


@implements(np.vdot)
def _vdot(a, b):
    a, b = _traced(a, b), _traced(b, a)
    return _dot(ravel(np.conjugate(a) if a.dtype.kind == "c" else a), ravel(b))


@implements(np.inner)
def _inner(a, b):
    a, b = _traced(a, b), _traced(b, a)
    if a.ndim == 0 or b.ndim == 0:  # NumPy's inner is its dot here (BLAS, as in ``_dot``)
        return _dot(a, b)
    return _tensordot(a, b, axes=((a.ndim - 1,), (b.ndim - 1,)))


@implements(np.outer)
def _outer(a, b, out=None):
    a, b = _traced(a, b), _traced(b, a)
    res = reshape(ravel(a), (a.size, 1)) * reshape(ravel(b), (1, b.size))
    return maybe_out(res, out)


@implements(np.einsum)
def _einsum(subscripts, *operands, out=None, optimize=False, **kw):
    if not isinstance(subscripts, str):
        raise unsupported(
            types.SimpleNamespace(__name__="einsum (interleaved operands)", __module__="numpy")
        )
    if kw:
        raise unsupported(
            types.SimpleNamespace(__name__=f"einsum({', '.join(kw)}=)", __module__="numpy")
        )
    ops_ = [_traced(o, operands) for o in operands]
    ctx = ops_[0]._ctx
    subscripts = subscripts.replace(" ", "")
    lhs, _, rhs = subscripts.partition("->")
    if len(ops_) == 1 and "." not in lhs and sorted(lhs) == sorted(rhs) == sorted(set(lhs)):
        # NumPy returns a view for a pure permutation: a transpose, which writes go through
        res = transpose(ops_[0], tuple(lhs.index(c) for c in rhs))
    else:  # other one-operand einsums (a diagonal) may be read-only views too
        res = ctx.emit("einsum", ops_, {"subscripts": subscripts}, view=len(ops_) == 1)
    return maybe_out(res, out)


@implements(np.tensordot)
def _tensordot(a, b, axes=2):
    a, b = _traced(a, b), _traced(b, a)
    if isinstance(axes, int | np.integer):
        n = int(axes)
        axes = (tuple(range(a.ndim - n, a.ndim)), tuple(range(n)))
    else:
        xa, xb = axes
        xa = (xa,) if isinstance(xa, int | np.integer) else tuple(xa)
        xb = (xb,) if isinstance(xb, int | np.integer) else tuple(xb)
        axes = (tuple(int(i) % a.ndim for i in xa), tuple(int(i) % b.ndim for i in xb))
    return a._ctx.emit("tensordot", [a, b], {"axes": axes})


@implements(np.matmul)
def _matmul(a, b, out=None, **kw):
    return call_ufunc(np.matmul, (a, b), dict(kw, out=out) if out is not None else kw)


@implements(np.linalg.norm)
def _norm(x, ord=None, axis=None, keepdims=False):
    """As numpy.linalg.norm, expression by expression; the matrix 2-norm, -2-norm and nuclear
    norm (singular values) are not traced."""
    x = _traced(x)
    if x.dtype.kind not in "fc":
        x = astype(x, np.float64, False)
    if axis is None and (
        ord is None or (ord in ("f", "fro") and x.ndim == 2) or (ord == 2 and x.ndim == 1)
    ):
        v = ravel(x)  # NumPy ravels in memory order: for reversed strides the sum order differs
        if v.dtype.kind == "c":
            sq = _dot(real(v), real(v)) + _dot(imag(v), imag(v))
        else:
            sq = _dot(v, v)
        ret = np.sqrt(sq)
        return reshape(ret, (1,) * x.ndim) if keepdims else ret
    axes = (
        tuple(range(x.ndim))
        if axis is None
        else tuple(
            axis_index(a, x.ndim) for a in (axis if isinstance(axis, tuple | list) else (axis,))
        )
    )
    if len(axes) == 1:
        return _vector_norm(x, ord, axes, keepdims)
    if len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError("Duplicate axes given.")
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError("Improper number of dimensions to norm.")


def _vector_norm(x, ord, axes, keepdims):
    if ord == np.inf:
        return reduce("max", abs(x), axes, keepdims)
    if ord == -np.inf:
        return reduce("min", abs(x), axes, keepdims)
    if ord == 0:
        return reduce("sum", astype(x != 0, real(x).dtype, False), axes, keepdims)
    if ord == 1:
        return reduce("sum", abs(x), axes, keepdims)
    if ord is None or ord == 2:
        return np.sqrt(reduce("sum", real(x.conj() * x), axes, keepdims))
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    total = reduce("sum", abs(x) ** ord, axes, keepdims)
    return total ** np.reciprocal(ord, dtype=total.dtype)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord in (1, -1, np.inf, -np.inf):
        if ord in (np.inf, -np.inf):
            row, col = col, row
        inner = reduce("sum", abs(x), (row,), False)
        col = col - 1 if col > row else col
        ret = reduce("max" if ord > 0 else "min", inner, (col,), False)
    elif ord in (None, "fro", "f"):
        ret = np.sqrt(reduce("sum", real(x.conj() * x), axes, False))
    elif ord in (2, -2, "nuc"):
        raise _unsupported_form(f"linalg.norm(ord={ord!r}) of matrices (singular values)")
    else:
        raise ValueError("Invalid norm order for matrices.")
    if keepdims:
        ret = reshape(ret, tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return ret


# ---------------------------------------------------------------------- movement
@implements(np.reshape)
def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    return reshape(_traced(a), shape if shape is not None else newshape, order)


@implements(np.transpose)
def _transpose(a, axes=None):
    return transpose(_traced(a), axes)


@implements(np.swapaxes)
def _swapaxes(a, axis1, axis2):
    return swapaxes(_traced(a), axis1, axis2)


@implements(np.moveaxis)
def _moveaxis(a, source, destination):
    return moveaxis(_traced(a), source, destination)


@implements(np.matrix_transpose)
def _matrix_transpose(x):
    return swapaxes(_traced(x), -1, -2)


@implements(np.expand_dims)
def _expand_dims(a, axis):
    return expand_dims(_traced(a), axis)


@implements(np.squeeze)
def _squeeze(a, axis=None):
    return squeeze(_traced(a), axis)


@implements(np.ravel)
def _ravel(a, order="C"):
    return ravel(_traced(a), order)


@implements(np.broadcast_to)
def _broadcast_to(array, shape, subok=False):
    return broadcast_to(_traced(array), shape)


@implements(np.broadcast_arrays)
def _broadcast_arrays(*args, subok=False):
    xs = [_traced(a, args) for a in args]
    shape = np.broadcast_shapes(*(x.shape for x in xs))
    return tuple(broadcast_to(x, shape) for x in xs)


def _atleast_nd(n):
    def handler(*arys):
        res = []
        for a in arys:
            a = _traced(a, arys)
            if a.ndim >= n:
                res.append(a)
            elif n == 3 and a.ndim == 2:
                res.append(reshape(a, a.shape + (1,)))
            elif n == 3 and a.ndim == 1:
                res.append(reshape(a, (1,) + a.shape + (1,)))
            else:
                res.append(reshape(a, (1,) * (n - a.ndim) + a.shape))
        return res[0] if len(res) == 1 else tuple(res)

    return handler


implements(np.atleast_1d)(_atleast_nd(1))
implements(np.atleast_2d)(_atleast_nd(2))
implements(np.atleast_3d)(_atleast_nd(3))


@implements(np.concatenate)
def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    xs = [_traced(a, arrays) for a in arrays]
    if axis is None:
        xs, axis = [ravel(x) for x in xs], 0
    if not xs:
        raise ValueError("need at least one array to concatenate")
    axis = norm_axis(axis, xs[0].ndim)[0]
    if dtype is not None:
        xs = [astype(x, dtype, False) for x in xs]
    res = xs[0]._ctx.emit("concatenate", xs, {"axis": axis})
    return maybe_out(res, out)


@implements(np.stack)
def _stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    xs = [_traced(a, arrays) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    if len({x.shape for x in xs}) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = norm_axis(axis, xs[0].ndim + 1)[0]
    return _concatenate([expand_dims(x, axis) for x in xs], axis, out, dtype)


@implements(np.hstack)
def _hstack(tup, dtype=None, casting="same_kind"):
    xs = [_traced(a, tup) for a in tup]
    xs = [reshape(x, (1,)) if x.ndim == 0 else x for x in xs]
    return _concatenate(xs, 0 if xs[0].ndim == 1 else 1, dtype=dtype)


@implements(np.vstack)
def _vstack(tup, dtype=None, casting="same_kind"):
    xs = [_atleast_nd(2)(_traced(a, tup)) for a in tup]
    return _concatenate(xs, 0, dtype=dtype)


@implements(np.column_stack)
def _column_stack(tup):
    xs = [_traced(a, tup) for a in tup]
    xs = [reshape(x, (x.size, 1)) if x.ndim < 2 else x for x in xs]
    return _concatenate(xs, 1)


@implements(np.split)
def _split_equal(ary, indices_or_sections, axis=0):
    if isinstance(indices_or_sections, int | np.integer):
        x = _traced(ary)
        if x.shape[norm_axis(axis, x.ndim)[0]] % int(indices_or_sections):
            raise ValueError("array split does not result in an equal division")
    return _split(ary, indices_or_sections, axis)


@implements(np.array_split)
def _split(ary, indices_or_sections, axis=0):
    x = _traced(ary)
    axis = norm_axis(axis, x.ndim)[0]
    n = x.shape[axis]
    if isinstance(indices_or_sections, int | np.integer):
        k = int(indices_or_sections)
        base, extra = divmod(n, k)
        sizes = [base + 1] * extra + [base] * (k - extra)
        bounds = np.cumsum([0] + sizes).tolist()
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]
    pre = (slice(None),) * axis
    return [x[pre + (slice(a, b),)] for a, b in zip(bounds[:-1], bounds[1:])]


@implements(np.tile)
def _tile(A, reps):
    x = _traced(A)
    reps = (reps,) if isinstance(reps, int | np.integer) else tuple(int(r) for r in reps)
    return x._ctx.emit("tile", [x], {"reps": reps})


@implements(np.repeat)
def _repeat(a, repeats, axis=None):
    x = _traced(a)
    if isinstance(repeats, TracedArray):
        if not _known(repeats):
            raise data_dependent("np.repeat with traced repeat counts")
        repeats = repeats._value
    repeats = int(repeats) if np.ndim(repeats) == 0 else tuple(int(r) for r in np.ravel(repeats))
    if axis is not None:
        axis = norm_axis(axis, x.ndim)[0]
    return x._ctx.emit("repeat", [x], {"repeats": repeats, "axis": axis})


@implements(np.roll)
def _roll(a, shift, axis=None):
    x = _traced(a)
    shift = int(shift) if np.ndim(shift) == 0 else tuple(int(s) for s in shift)
    if axis is not None:
        axis = int(axis) % x.ndim if np.ndim(axis) == 0 else tuple(int(i) % x.ndim for i in axis)
    return x._ctx.emit("roll", [x], {"shift": shift, "axis": axis})


@implements(np.flip)
def _flip(m, axis=None):
    x = _traced(m)
    axes = range(x.ndim) if axis is None else norm_axis(axis, x.ndim)
    idx = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))
    return x[idx]


@implements(np.fliplr)
def _fliplr(m):
    return _traced(m)[:, ::-1]


@implements(np.flipud)
def _flipud(m):
    return _traced(m)[::-1]


@implements(np.pad)
def _pad(array, pad_width, mode="constant", **kw):
    x = _traced(array)
    if mode != "constant" or set(kw) - {"constant_values"}:
        raise unsupported(types.SimpleNamespace(__name__=f"pad(mode={mode!r})", __module__="numpy"))
    cv = kw.get("constant_values", 0)
    if np.ndim(cv) != 0 or isinstance(cv, TracedArray):
        raise unsupported(
            types.SimpleNamespace(__name__="pad(per-axis constant_values)", __module__="numpy")
        )
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2))
    pw = tuple((int(a), int(b)) for a, b in pw)
    cv = cv.item() if isinstance(cv, np.generic) else cv
    return x._ctx.emit("pad", [x], {"pad_width": pw, "constant_value": cv})


@implements(np.diff)
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    x = _traced(a)
    axis = norm_axis(axis, x.ndim)[0]
    parts = [x]
    if prepend is not np._NoValue:
        parts.insert(0, _edge(prepend, x, axis))
    if append is not np._NoValue:
        parts.append(_edge(append, x, axis))
    if len(parts) > 1:
        x = _concatenate(parts, axis)
    pre = (slice(None),) * axis
    for _ in range(n):
        hi, lo = x[pre + (slice(1, None),)], x[pre + (slice(None, -1),)]
        x = (hi != lo) if x.dtype == bool else hi - lo
    return x


def _edge(v, x, axis):
    v = _traced(v, x)
    if v.ndim == 0:
        shape = list(x.shape)
        shape[axis] = 1
        v = broadcast_to(v, tuple(shape))
    return v


@implements(np.copy)
def _copy(a, order="K", subok=False):
    return copy(_traced(a))


@implements(np.shape)
def _shape(a):
    return a.shape


@implements(np.ndim)
def _ndim(a):
    return a.ndim


@implements(np.size)
def _size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


# ---------------------------------------------------------------------- indexing
@implements(np.take)
def _take(a, indices, axis=None, out=None, mode="raise"):
    x = _traced(a)
    if mode != "raise":
        raise unsupported(
            types.SimpleNamespace(__name__=f"take(mode={mode!r})", __module__="numpy")
        )
    if axis is None:
        x, axis = ravel(x), 0
    axis = norm_axis(axis, x.ndim)[0]
    return maybe_out(x[(slice(None),) * axis + (indices,)], out)


def _known(*values) -> bool:
    """Whether the traced arrays among ``values`` are known while tracing: computed from
    literals, constants and captured arrays only (a captured one is then guarded)."""
    traced = [v for v in values if isinstance(v, TracedArray)]
    kinds = [v._ctx.origins(v.ir_var) for v in traced]
    if any(k is None or "arg" in k for k in kinds):
        return False
    for v, k in zip(traced, kinds):
        if "capture" in k:
            v._ctx.guard_known(v, "an array computed from a captured array")
    return True


def _value(x):
    return x._value if isinstance(x, TracedArray) else x


def data_dependent(name: str, depth: int = 3) -> TraceError:
    """The refusal of NumPy function ``name`` whose output shape depends on traced data."""
    src = user_source(depth)
    where = f" at {src} `{src.text}`" if src else ""
    return TraceError(
        f"{name}{where}: its output shape depends on the data, so it cannot be traced. Use "
        "np.where(mask, a, b) to select elementwise, or a masked reduction such as "
        "np.where(mask, a, 0).sum() (mean: divided by mask.sum())."
    )


def _shape_from_data(func):
    """The handler of ``func``, whose output shape depends on its input's values: computed on
    the values when they are known while tracing (constants), refused otherwise."""
    name = public_name(func)

    def handler(*args, **kw):
        if not _known(*args, *kw.values()):
            raise data_dependent(name)
        ctx = ctx_of(*args, *kw.values())
        result = func(*[_value(a) for a in args], **{k: _value(v) for k, v in kw.items()})
        if isinstance(result, tuple):
            return tuple(ctx.lift(np.asarray(r)) for r in result)
        return ctx.lift(np.asarray(result))

    return handler


for _func in (np.nonzero, np.argwhere, np.flatnonzero, np.unique):
    implements(_func)(_shape_from_data(_func))


@implements(np.compress)
def _compress(condition, a, axis=None, out=None):
    if not _known(condition):
        raise data_dependent("np.compress")
    x = _traced(a)
    if axis is None:
        x, axis = ravel(x), 0
    positions = np.nonzero(np.ravel(_value(condition)))[0]
    return _take(x, positions, axis=axis, out=out)


@implements(np.extract)
def _extract(condition, arr):
    if not _known(condition):
        raise data_dependent("np.extract")
    positions = np.nonzero(np.ravel(_value(condition)))[0]
    return _take(ravel(_traced(arr)), positions)


# ---------------------------------------------------------------------- elementwise functions
@implements(np.where)
def _where(condition, x=None, y=None):
    if x is None and y is None:
        if not _known(condition):
            raise data_dependent("np.where(condition) with one argument (np.nonzero)")
        return _shape_from_data(np.nonzero)(condition)
    ctx = ctx_of(condition, x, y)
    return ctx.emit("where", [condition, x, y])


@implements(np.clip)
def _clip(
    a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue, **kw
):
    lo = a_min if a_min is not np._NoValue else (None if min is np._NoValue else min)
    hi = a_max if a_max is not np._NoValue else (None if max is np._NoValue else max)
    if kw:
        raise unsupported(
            types.SimpleNamespace(__name__=f"clip({', '.join(kw)}=)", __module__="numpy")
        )
    ctx = ctx_of(a, lo, hi)
    return maybe_out(ctx.emit("clip", [a, lo, hi]), out)


@implements(np.real)
def _real(val):
    return real(_traced(val))


@implements(np.imag)
def _imag(val):
    return imag(_traced(val))


@implements(np.angle)
def _angle(z, deg=False):
    x = _traced(z)
    return x._ctx.emit("angle", [x], {"deg": bool(deg)})


@implements(np.round, np.around)
def _round(a, decimals=0, out=None):
    x = _traced(a)
    decimals = operator.index(decimals)
    np.round(x._value, decimals)  # NumPy's own errors (bool with decimals > 0)
    if x.dtype.kind == "c":  # real and imaginary parts rounded apart
        res = copy(x)
        res.real = _round_real(real(x), decimals)
        res.imag = _round_real(imag(x), decimals)
    else:
        res = _round_real(x, decimals)
    return maybe_out(res, out)


def _round_real(x, decimals):
    """As NumPy's PyArray_Round: rint, or multiply (divide), rint, divide (multiply)."""
    if decimals >= 0 and x.dtype.kind in "iu":
        return x
    if decimals == 0:
        return np.rint(x)
    op1, op2 = (np.multiply, np.true_divide) if decimals > 0 else (np.true_divide, np.multiply)
    f = _power_of_ten(abs(decimals))
    res = op2(np.rint(op1(x, f)), f)
    return astype(res, x.dtype, False) if x.dtype.kind in "iu" else res


def _power_of_ten(n: int) -> float:
    if n < 9:
        return float(10**n)
    ret = 1e9
    for _ in range(n - 9):
        ret *= 10.0
    return ret


@implements(np.isclose)
def _isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """As numpy/_core/numeric.py: ``b`` made inexact first, then one boolean expression."""
    x = a if _is_scalar(a) else _traced(a, b)
    y = b if _is_scalar(b) else _traced(b, a)
    if isinstance(y, TracedArray) and not y.weak:
        y = astype(y, np.result_type(y.dtype, 1.0), False)
    elif isinstance(y, int):
        y = float(y)
    result = np.less_equal(abs(x - y), atol + rtol * abs(y)) & np.isfinite(y) | (x == y)
    if equal_nan:
        result = result | (np.isnan(x) & np.isnan(y))
    return result[()] if isinstance(result, TracedArray) and result.ndim == 0 else result


def _is_scalar(v) -> bool:
    return isinstance(v, int | float | complex) and not isinstance(v, np.generic)


@implements(np.allclose)
def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(reduce("all", _isclose(a, b, rtol, atol, equal_nan)))


@implements(np.array_equal)
def _array_equal(a1, a2, equal_nan=False):
    a, b = _traced(a1, a2), _traced(a2, a1)
    if a.shape != b.shape:
        return False
    return bool(reduce("all", a == b))


# ---------------------------------------------------------------------- creation
def _full_like(a, fill, dtype=None, shape=None):
    x = _traced(a)
    dtype = np.dtype(dtype) if dtype is not None else x.dtype
    shape = x.shape if shape is None else ((shape,) if isinstance(shape, int) else tuple(shape))
    if isinstance(fill, TracedArray):
        return (
            astype(broadcast_to(fill, shape), dtype) if fill.shape != shape else astype(fill, dtype)
        )
    fill = np.asarray(fill).astype(dtype)[()]
    return x._ctx.emit("full", [], {"shape": shape, "fill_value": fill, "dtype": dtype})


@implements(np.zeros_like, np.empty_like)
def _zeros_like(a, dtype=None, order="K", subok=True, shape=None, **kw):
    return _full_like(a, 0, dtype, shape)


@implements(np.ones_like)
def _ones_like(a, dtype=None, order="K", subok=True, shape=None, **kw):
    return _full_like(a, 1, dtype, shape)


@implements(np.full_like)
def _full_like_np(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kw):
    return _full_like(a, fill_value, dtype, shape)


@implements(np.array, np.asarray, np.asanyarray, np.ascontiguousarray)
def _array(obj, dtype=None, *a, copy=True, **kw):
    return array_from(obj, dtype)


@implements(np.result_type)
def _result_type(*args):
    return np.result_type(*(a.dtype if isinstance(a, TracedArray) else a for a in args))


@implements(np.iscomplexobj)
def _iscomplexobj(x):
    return x.dtype.kind == "c"


@implements(np.isrealobj)
def _isrealobj(x):
    return x.dtype.kind != "c"


_copy = copy  # np.nan_to_num has a parameter of that name


def _unsupported_form(what: str):
    """UnsupportedOperation for one form of a NumPy function (``np.quantile(method='x')``)."""
    return unsupported(types.SimpleNamespace(__name__=what, __module__="numpy"))


def _static(value, what: str):
    """A value the graph's shapes depend on: it must be known while tracing."""
    if isinstance(value, TracedArray) or any(isinstance(e, TracedArray) for e in _deep(value)):
        raise TraceError(
            f"{what} must be known while tracing (a Python value or a constant), not a traced "
            f"array (at {user_source(3)})"
        )
    return value


def _deep(x):
    if isinstance(x, list | tuple):
        for e in x:
            yield from _deep(e)
    else:
        yield x


def _iota(ctx, n):
    attrs = {"start": 0, "stop": int(n), "step": 1, "dtype": np.dtype(np.intp)}
    return ctx.emit("arange", [], attrs)


# ---------------------------------------------------------------------- NaN-ignoring reductions
# As numpy/lib/_nanfunctions_impl.py: NaNs replaced by the reduction's identity, then the
# reduction (nanmean: sums over counts), so results are NumPy's to the bit; integer and bool
# arrays have no NaN and take the plain reduction.
def _without_nan(x, fill):
    return np.where(np.isnan(x), fill, x) if x.dtype.kind in "fc" else x


@implements(np.nansum)
def _nansum(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return reduce("sum", _without_nan(_traced(a), 0), axis, keepdims, dtype, out=out, **kw)


@implements(np.nanprod)
def _nanprod(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    return reduce("prod", _without_nan(_traced(a), 1), axis, keepdims, dtype, out=out, **kw)


@implements(np.nanmean)
def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, **kw):
    x = _traced(a)
    if x.dtype.kind not in "fc":
        return reduce("mean", x, axis, keepdims, dtype, out=out, **kw)
    nan = np.isnan(x)
    total = reduce("sum", np.where(nan, 0, x), axis, keepdims, dtype, **kw)
    count = reduce("sum", ~nan, axis, keepdims, np.intp)
    # NumPy divides into the total (true_divide(total, count, out=total, casting="unsafe"))
    return maybe_out(astype(total / count, total.dtype, False), out)


def _nan_extreme(op, inf):
    """nanmax / nanmin: NumPy's ``fmax.reduce`` / ``fmin.reduce``: the extreme of the numbers
    (NaNs replaced by ``inf``, where ``op`` never picks them), NaN where a slice holds only NaNs
    (a complex one: its first element, which fmax keeps)."""

    def handler(a, axis=None, out=None, keepdims=False, **kw):
        x = _traced(a)
        if x.dtype.kind not in "fc":
            return reduce(op, x, axis, keepdims, out=out, **kw)
        nan = np.isnan(x)
        fill = complex(inf, inf) if x.dtype.kind == "c" else inf
        res = reduce(op, np.where(nan, fill, x), axis, keepdims, **kw)
        all_nan = reduce("all", nan, axis, keepdims)
        if x.dtype.kind == "c":
            nan_value = _first_of_slices(x, axis, keepdims)
        else:
            nan_value = np.nan
        return maybe_out(np.where(all_nan, nan_value, res), out)

    return handler


def _first_of_slices(x, axis, keepdims):
    """The first element (in C order) of each slice that a reduction over ``axis`` reduces."""
    axes = tuple(range(x.ndim)) if axis is None else norm_axis(axis, x.ndim)
    rest = [i for i in range(x.ndim) if i not in axes]
    moved = transpose(x, tuple(rest) + axes)
    first = moved[(slice(None),) * len(rest) + (0,) * len(axes)]
    if keepdims:
        first = reshape(first, tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return first


implements(np.nanmax)(_nan_extreme("max", -np.inf))
implements(np.nanmin)(_nan_extreme("min", np.inf))


@implements(np.nan_to_num)
def _nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = _traced(x)
    if x.dtype.kind not in "fc":
        return _copy(x) if copy else x
    if x.dtype.kind == "c":  # the real and imaginary parts apart, into a copy
        res = _copy(x)
        res.real = _finite(real(x), nan, posinf, neginf)
        res.imag = _finite(imag(x), nan, posinf, neginf)
        return res
    return _finite(x, nan, posinf, neginf)


def _finite(x, nan, posinf, neginf):
    info = np.finfo(x.dtype)
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    fix = [(np.isnan(x), nan), (x == np.inf, big), (x == -np.inf, small)]
    for mask, value in fix:
        value = (
            np.asarray(value).astype(x.dtype)[()] if not isinstance(value, TracedArray) else value
        )
        x = np.where(mask, value, x)
    return astype(x, x.dtype, False)


# ---------------------------------------------------------------------- selection
@implements(np.select)
def _select(condlist, choicelist, default=0):
    """As NumPy: the default, then each choice written where its condition holds, last first."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    ctx = ctx_of(condlist, choicelist, default)
    conds = [_traced(c, condlist) for c in condlist]
    choices = [ctx.lift(c) for c in list(choicelist) + [default]]
    dtype = np.result_type(*(_dtype_operand(c) for c in choices))
    for i, c in enumerate(conds):
        if c.dtype != bool:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    shape = np.broadcast_shapes(*(np.shape(c) for c in conds + choices))
    *cases, fallback = choices
    res = _full_like(conds[0], fallback, dtype, shape)
    for cond, choice in zip(conds[::-1], cases[::-1]):
        res = np.where(cond, _cast(choice, dtype), res)
    return res


def _dtype_operand(x):
    """What np.result_type sees for ``np.asarray(x)`` (a Python scalar stays weak in NumPy 2)."""
    if isinstance(x, TracedArray):
        return {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}[x.dtype.kind] if x.weak else x.dtype
    return x if isinstance(x, bool | int | float | complex) else np.asarray(x).dtype


def _cast(x, dtype):
    if isinstance(x, TracedArray):
        return astype(x, dtype, False)
    return np.asarray(x).astype(dtype)


# ---------------------------------------------------------------------- triangles, diagonals
def _tri_mask(ctx, shape, k):
    """NumPy's ``tri(N, M, k)`` (ones on and below the k-th diagonal) of a matrix's shape."""
    n, m = shape
    rows = reshape(_iota(ctx, n), (n, 1))
    cols = reshape(_iota(ctx, m), (1, m))
    return cols - rows <= int(k)


def _matrix_shape(x):
    if x.ndim == 0:
        raise TypeError("tri() missing 1 required positional argument: 'N'")
    return x.shape[-2:] if x.ndim >= 2 else (x.shape[-1], x.shape[-1])


@implements(np.triu)
def _triu(m, k=0):
    x = _traced(m)
    zero = np.zeros((), x.dtype)[()]
    return np.where(_tri_mask(x._ctx, _matrix_shape(x), k - 1), zero, x)


@implements(np.tril)
def _tril(m, k=0):
    x = _traced(m)
    zero = np.zeros((), x.dtype)[()]
    return np.where(_tri_mask(x._ctx, _matrix_shape(x), k), x, zero)


@implements(np.diagonal)
def _diagonal(a, offset=0, axis1=0, axis2=1):
    """The diagonal as a strided slice of the matrices flattened (a copy: NumPy's is a
    read-only view, so nothing can write through it)."""
    x = _traced(a)
    if x.ndim < 2:
        raise ValueError("diag requires an array of at least two dimensions")
    ax1, ax2 = axis_index(axis1, x.ndim), axis_index(axis2, x.ndim)
    if ax1 == ax2:
        raise ValueError("axis1 and axis2 cannot be the same")
    x = moveaxis(x, (ax1, ax2), (-2, -1))
    n, m = x.shape[-2:]
    k = operator.index(offset)
    start, length = (k, min(n, m - k)) if k >= 0 else (-k * m, min(n + k, m))
    length = max(length, 0)
    flat = reshape(x, x.shape[:-2] + (n * m,))
    stop = start + (length - 1) * (m + 1) + 1 if length else start
    return copy(flat[..., start : stop : m + 1] if length else flat[..., 0:0])


@implements(np.trace)
def _trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    return reduce("sum", _diagonal(a, offset, axis1, axis2), -1, False, dtype, out=out)


@implements(np.diag)
def _diag(v, k=0):
    x = _traced(v)
    k = operator.index(k)
    if x.ndim == 2:
        return _diagonal(x, k)
    if x.ndim != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = x.shape[0] + abs(k)
    res = _full_like(x, 0, x.dtype, (n * n,))
    start = k if k >= 0 else -k * n
    res[start : start + x.shape[0] * (n + 1) : n + 1] = x
    return reshape(res, (n, n))


# ---------------------------------------------------------------------- products
@implements(np.cross)
def _cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """As numpy/_core/numeric.py, product by product (so integer results wrap as NumPy's)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    x, y = _traced(a, b), _traced(b, a)
    if x.ndim < 1 or y.ndim < 1:
        raise ValueError("At least one array has zero dimension")
    x = moveaxis(x, axis_index(axisa, x.ndim), -1)
    y = moveaxis(y, axis_index(axisb, y.ndim), -1)
    na, nb = x.shape[-1], y.shape[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    if na == 2 or nb == 2:
        import warnings

        warnings.warn(
            "Arrays of 2-dimensional vectors are deprecated. Use arrays of 3-dimensional "
            "vectors instead. (deprecated in NumPy 2.0)",
            DeprecationWarning,
            stacklevel=3,
        )
    dtype = np.promote_types(x.dtype, y.dtype)
    x, y = astype(x, dtype, False), astype(y, dtype, False)
    a0, a1, b0, b1 = x[..., 0], x[..., 1], y[..., 0], y[..., 1]
    a2 = x[..., 2] if na == 3 else None
    b2 = y[..., 2] if nb == 3 else None
    if na == 2 and nb == 2:
        return a0 * b1 - a1 * b0
    if na == 2:
        parts = [a1 * b2, -(a0 * b2), a0 * b1 - a1 * b0]
    elif nb == 3:
        parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    else:
        parts = [-(a2 * b1), a2 * b0, a0 * b1 - a1 * b0]
    shape = np.broadcast_shapes(a0.shape, b0.shape)
    res = _stack([broadcast_to(p, shape) for p in parts], axis=-1)
    return moveaxis(res, -1, axis_index(axisc, res.ndim))


# ---------------------------------------------------------------------- sorting, order statistics
@implements(np.sort)
def _sort(a, axis=-1, kind=None, order=None, *, stable=None):
    x = _traced(a)
    if order is not None:
        raise _unsupported_form("sort(order=...)")
    if axis is None:
        x, axis = ravel(x), -1
    kind = "stable" if stable else kind
    return x._ctx.emit("sort", [x], {"axis": axis_index(axis, x.ndim), "kind": kind})


@implements(np.argsort)
def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    x = _traced(a)
    if order is not None:
        raise _unsupported_form("argsort(order=...)")
    if axis is None or x.ndim == 0:  # NumPy argsorts a 0-d array as a 1-d one
        x, axis = ravel(x), -1 if axis is None else axis
    kind = "stable" if stable else kind
    return x._ctx.emit("argsort", [x], {"axis": axis_index(axis, x.ndim), "kind": kind})


@implements(np.searchsorted)
def _searchsorted(a, v, side="left", sorter=None):
    ctx = ctx_of(a, v, sorter)
    x = _traced(a, v)
    if sorter is not None:
        x = _take(x, sorter)
    v = ctx.lift(v)
    if not isinstance(v, TracedArray):
        v = ctx.lift(np.asarray(v))
    return ctx.emit("searchsorted", [x, v], {"side": side})


def _quantile_axis(x, axis):
    return None if axis is None else norm_axis(axis, x.ndim)


@implements(np.median)
def _median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    x = _traced(a)
    attrs = {"axis": _quantile_axis(x, axis), "keepdims": bool(keepdims)}
    return maybe_out(x._ctx.emit("median", [x], attrs), out)


def _quantile_of(x, q, weak, axis, method, keepdims, out, weights, interpolation):
    """The quantile op; ``weak``: q was a Python number (NumPy 2 then promotes it weakly)."""
    if weights is not None or interpolation is not None:
        raise _unsupported_form("quantile(weights=/interpolation=)")
    qv = np.asarray(q)
    attrs = {
        "q": float(q) if weak else _tuples(qv.tolist()),
        "q_dtype": None if weak else qv.dtype.name,
        "axis": _quantile_axis(x, axis),
        "method": method,
        "keepdims": bool(keepdims),
    }
    return maybe_out(x._ctx.emit("quantile", [x], attrs), out)


def _tuples(x):
    return tuple(_tuples(e) for e in x) if isinstance(x, list) else x


def _quantile_function(percent: bool):
    """The handler of np.quantile, or of np.percentile (``percent``: q / 100, divided as NumPy
    divides it). A Python number q is weak under NEP 50 (NumPy 2.4 keeps that apart)."""

    def handler(
        a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
        weights=None, interpolation=None,
    ):  # fmt: skip
        x = _traced(a)
        if x.dtype.kind == "c":
            raise TypeError("a must be an array of real numbers")
        q = _static(q, "the percentiles q" if percent else "the quantiles q")
        weak = type(q) in (int, float)
        if percent:
            q = np.true_divide(q, 100)
            if np.any(q < 0) or np.any(q > 1):
                raise ValueError("Percentiles must be in the range [0, 100]")
        return _quantile_of(x, q, weak, axis, method, keepdims, out, weights, interpolation)

    return handler


implements(np.quantile)(_quantile_function(percent=False))
implements(np.percentile)(_quantile_function(percent=True))


# ---------------------------------------------------------------------- counting
@implements(np.histogram)
def _histogram(a, bins=10, range=None, density=None, weights=None):
    x = _traced(a)
    if isinstance(bins, str):
        raise TraceError(
            f"np.histogram(bins={bins!r}) chooses its number of bins from the data, so its "
            f"shape depends on the data (at {user_source(2)}): give the number of bins"
        )
    bins = _static(bins, "np.histogram's bins")
    bins = int(bins) if np.ndim(bins) == 0 else tuple(np.asarray(bins).tolist())
    if range is not None:
        range = tuple(_static(range, "np.histogram's range"))
    ins = [x] if weights is None else [x, _traced(weights, a)]
    attrs = {"bins": bins, "range": range, "density": density}
    return tuple(x._ctx.emit("histogram", ins, attrs, n_out=2))


@implements(np.bincount)
def _bincount(x, weights=None, minlength=0):
    """Counts into a static length: ``minlength``. The values must stay below it: the trace
    keeps that as a guard unless their dtype bounds them (bool, uint8 with minlength >= 256)."""
    v = _traced(x, weights)
    if v.ndim != 1:
        raise ValueError(
            "object too deep for desired array"
            if v.ndim
            else "object of too small depth for desired array"
        )
    if v.dtype.kind not in "biu" or v.dtype == np.uint64:
        raise TypeError(
            f"Cannot cast array data from {v.dtype!r} to dtype('int64') according to the rule "
            "'safe'"
        )
    length = operator.index(_static(minlength, "np.bincount's minlength"))
    if length < 0:
        raise ValueError("'minlength' must not be negative")
    top = 1 if v.dtype.kind == "b" else np.iinfo(v.dtype).max
    lowest = 0 if v.dtype.kind in "bu" else np.iinfo(v.dtype).min
    if top >= length or lowest < 0:
        fits = bool(np.all((v >= 0) & (v < length))) if v.size else True
        if not fits:
            if v.size and bool(np.any(v < 0)):
                raise ValueError("'list' argument must have no negative elements")
            raise TraceError(
                f"np.bincount's length depends on the data here: the largest value is "
                f"{int(v._value.max())} and minlength={length} (at {user_source(2)}). Give a "
                "minlength above every value the data can hold: the result then has that length "
                "and the trace checks the bound on every call."
            )
    index = astype(v, np.intp, False)
    if weights is None:
        total = _full_like(v, 0, np.intp, (length,))
        add_at(total, index, 1)
    else:
        w = _traced(weights, x)
        if w.dtype.kind == "c":
            raise TypeError("Cannot cast array data from dtype('complex128') to dtype('float64')")
        total = _full_like(v, 0, np.float64, (length,))
        add_at(total, index, astype(w, np.float64, False))
    return total


# ---------------------------------------------------------------------- interpolation, signal
@implements(np.interp)
def _interp(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        raise _unsupported_form("interp(period=...)")
    ctx = ctx_of(x, xp, fp, left, right)
    ins = [_traced(v, (x, xp, fp)) for v in (x, xp, fp)]
    bounds = [ctx.lift(v) for v in (left, right)]
    res = ctx.emit("interp", ins + bounds)
    return res


@implements(np.convolve)
def _convolve(a, v, mode="full"):
    x, y = _traced(a, v), _traced(v, a)
    x = reshape(x, (1,)) if x.ndim == 0 else x
    y = reshape(y, (1,)) if y.ndim == 0 else y
    return x._ctx.emit("convolve", [x, y], {"mode": mode})


# ---------------------------------------------------------------------- linear algebra (LAPACK)
@implements(np.linalg.inv)
def _inv(a):
    x = _traced(a)
    return x._ctx.emit("inv", [x])


@implements(np.linalg.det)
def _det(a):
    x = _traced(a)
    return x._ctx.emit("det", [x])


@implements(np.linalg.solve)
def _solve(a, b):
    x, y = _traced(a, b), _traced(b, a)
    return x._ctx.emit("solve", [x, y])


@implements(np.linalg.cholesky)
def _cholesky(a, /, *, upper=False):
    x = _traced(a)
    return x._ctx.emit("cholesky", [x], {"upper": bool(upper)})
