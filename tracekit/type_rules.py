"""Type rules: each op's output shapes and dtypes from its input types, without running it.

A rule is ``rule(input_types, attrs) -> [(shape, dtype), ...]`` (one pair per output), where
each input type is a :class:`ValueType` (``None`` for a literal ``None`` input, as ``clip``'s
missing bound). It follows NumPy 2's promotion (NEP 50): a *weak* input is a Python scalar
(a traced Python float argument, a literal ``2``), which takes the dtype of the array it meets.
Where NumPy raises for a combination of types, the rule raises ``ValueError`` or ``TypeError``
(NumPy's own exception where it has one: ``AxisError``, ``IndexError``, ``OverflowError`` for a
literal Python int out of its dtype's range). ``ir.check_types`` asks ``ops.OPS[name].type_rule``;
``tests/test_type_rules.py`` checks every rule against NumPy.

One rule serves a family: the elementwise ufuncs (broadcast shapes, the ufunc's own loop
resolution, ``np.ufunc.resolve_dtypes``), reductions and scans (axes, the accumulator's dtype),
matmul-like ops, movement (reshape, transpose, ... shape arithmetic), indexing, creation (from
attributes); ops that differ have their own. Python ops (``opaque``) have none: their recorded
types are taken at their word.

>>> import numpy as np
>>> f32 = ValueType((3, 1), np.dtype(np.float32))
>>> rule_by_name("add")([f32, weak(2.5)], {})
[((3, 1), dtype('float32'))]
>>> i8 = ValueType((2, 3), np.dtype(np.int8))
>>> rule_by_name("sum")([i8], {"axis": (1,), "keepdims": False, "dtype": None})
[((2,), dtype('int64'))]
>>> rule_by_name("matmul")([f32, i8], {})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: matmul: Input operand 1 has a mismatch ... (size 2 is different from 1)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .ir import OPS, Var, at_iteration

AxisError = np.exceptions.AxisError


class ValueType(NamedTuple):
    """An input's type: shape, dtype, whether it is a weak Python scalar, and its value when
    that is known (a literal, or a constant input of the graph), else None."""

    shape: tuple
    dtype: np.dtype
    weak: bool = False
    value: object = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


# the dtype a Python scalar has on its own (tracer._dtype_of), by dtype kind
_PY_DTYPE = {
    "b": np.dtype(bool),
    "i": np.dtype(np.int64),
    "u": np.dtype(np.int64),
    "f": np.dtype(np.float64),
    "c": np.dtype(np.complex128),
}


def weak(x) -> ValueType:
    """The type of the Python scalar ``x`` (a literal)."""
    return type_of(x)


def type_of(x, value=None) -> ValueType | None:
    """The type of a node input: a Var (``value``: its value, when the graph holds it as a
    constant) or a literal (Python or NumPy scalar, array, None)."""
    if isinstance(x, Var):
        if x.weak:
            return ValueType(x.shape, _PY_DTYPE.get(x.dtype.kind, x.dtype), True, value)
        return ValueType(x.shape, x.dtype, False, value)
    if x is None:
        return None
    if isinstance(x, bool | int | float | complex) and not isinstance(x, np.generic):
        return ValueType((), _PY_DTYPE[np.asarray(x).dtype.kind], True, x)
    if isinstance(x, np.generic | np.ndarray):
        return ValueType(np.shape(x), x.dtype, False, x)
    a = np.asarray(x)
    return ValueType(a.shape, a.dtype, False, x)


def _key(t: ValueType):
    """What ``ufunc.resolve_dtypes`` takes for an operand: a weak scalar's Python type."""
    if t.weak and t.dtype.kind != "b":
        return {"i": int, "u": int, "f": float, "c": complex}[t.dtype.kind]
    return t.dtype


def _operand(t: ValueType):
    """What ``np.result_type`` takes: a weak scalar as a Python value, else the dtype."""
    if t.weak and t.dtype.kind != "b":
        return {"i": 0, "u": 0, "f": 0.0, "c": 0j}[t.dtype.kind]
    return t.dtype


def _strong(t: ValueType) -> ValueType:
    """The type NumPy gives a Python scalar it converts on its own (``np.asarray(2.5)``)."""
    return t._replace(weak=False) if t.weak else t


def _real_dtype(dt: np.dtype) -> np.dtype:
    """complex64 -> float32: a complex dtype's parts."""
    return np.finfo(dt).dtype


# ---------------------------------------------------------------------- attribute checks
def _attrs(op, attrs, required=(), optional=None) -> dict:
    """``attrs`` with the defaults of ``optional`` filled in; ``TypeError`` for a missing or an
    unknown attribute, as calling the op would give."""
    optional = optional or {}
    unknown = [k for k in attrs if k not in required and k not in optional]
    if unknown:
        raise TypeError(f"{op.name}() got an unexpected keyword argument {unknown[0]!r}")
    missing = [k for k in required if k not in attrs]
    if missing:
        raise TypeError(f"{op.name}() missing required attribute {missing[0]!r}")
    return {**optional, **attrs}


def _n_inputs(op, ins, n, at_least=False):
    if len(ins) < n or (len(ins) != n and not at_least):
        raise TypeError(f"{op.name} takes {n} input(s), got {len(ins)}")
    if any(t is None for t in ins[:n]):
        raise TypeError(f"{op.name}: an input is None")


def _int(x, what) -> int:
    if isinstance(x, bool | np.bool_) or not isinstance(x, int | np.integer):
        raise TypeError(f"{what} must be an integer, got {x!r}")
    return int(x)


def _shape_attr(shape, what="shape") -> tuple:
    if isinstance(shape, int | np.integer) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple | list):
        raise TypeError(f"{what} must be a tuple of integers, got {shape!r}")
    return tuple(_int(d, what) for d in shape)


def _nonneg(shape):
    if any(d < 0 for d in shape):
        raise ValueError("negative dimensions are not allowed")
    return shape


def _axis(a, ndim) -> int:
    a = _int(a, "axis")
    if not -ndim <= a < ndim:
        raise AxisError(a, ndim)
    return a % ndim


def _dtype_attr(d):
    return None if d is None else np.dtype(d)


def _check_int_fits(t: ValueType | None, dtype: np.dtype):
    """A literal Python int converted to an integer ``dtype`` must fit (NumPy 2 raises)."""
    if t is None or not t.weak or t.value is None or type(t.value) is not int:
        return
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= t.value <= info.max:
            raise OverflowError(f"Python integer {t.value} out of bounds for {dtype}")


def _check_setitem(t: ValueType | None, dtype: np.dtype):
    """``x[i] = s`` of a Python scalar ``s`` into an array of ``dtype``: it must convert."""
    if t is None or not t.weak:
        return
    if t.dtype.kind == "c" and dtype.kind in "iuf":
        raise TypeError("float() argument must be a string or a real number, not 'complex'")
    _check_int_conversion(t, dtype)


def _check_int_conversion(t: ValueType | None, dtype: np.dtype):
    """A Python int or float converted to an integer ``dtype`` one by one: it must fit."""
    if t is None or not t.weak:
        return
    if type(t.value) is float and dtype.kind in "iu":  # converted by int(): truncated
        if math.isnan(t.value):
            raise ValueError("cannot convert float NaN to integer")
        if math.isinf(t.value):
            raise OverflowError("cannot convert float infinity to integer")
        t = t._replace(value=int(t.value))
    _check_int_fits(t, dtype)


# ---------------------------------------------------------------------- elementwise
def _resolve(ufunc, ins, compare=False):
    """``ufunc``'s loop for these inputs: its dtypes (inputs, then outputs). A ``compare``
    (``Op.compare``) accepts any Python int."""
    loop = ufunc.resolve_dtypes(tuple(_key(t) for t in ins) + (None,) * ufunc.nout)
    if not compare:
        for t, d in zip(ins, loop):
            _check_int_fits(t, d)
    if all(t.weak and t.value is not None for t in ins):  # Python ints only: int64 must hold
        for t in ins:
            _check_int_fits(t, np.dtype(np.int64))
    return loop


def _broadcast(*shapes):
    return tuple(np.broadcast_shapes(*shapes))


def ufunc_rule(op, ins, attrs):
    """An elementwise ufunc: broadcast shapes and the dtypes of the loop NumPy picks."""
    uf = op.ufunc
    _attrs(op, attrs)
    _n_inputs(op, ins, uf.nin)
    shape = _broadcast(*(t.shape for t in ins))
    loop = _resolve(uf, ins, op.compare is not None)
    if uf is np.power and loop[0].kind in "iu" and ins[1].value is not None:
        if (np.asarray(ins[1].value) < 0).any():
            raise ValueError("Integers to negative integer powers are not allowed.")
    return [(shape, d) for d in loop[uf.nin :]]


def where_rule(op, ins, attrs):
    _attrs(op, attrs)
    _n_inputs(op, ins, 3)
    c, a, b = ins
    return [(_broadcast(c.shape, a.shape, b.shape), np.result_type(_operand(a), _operand(b)))]


def clip_rule(op, ins, attrs):
    # np.clip: numpy/_core/_methods.py::_clip (x becomes an array: a Python scalar turns strong)
    _attrs(op, attrs)
    if len(ins) != 3 or ins[0] is None:
        raise TypeError(f"clip takes 3 inputs (x, lo, hi), got {len(ins)}")
    x, lo, hi = _strong(ins[0]), ins[1], ins[2]
    shape = _broadcast(*(t.shape for t in (x, lo, hi) if t is not None))
    if x.dtype.kind in "iu":  # a Python int bound beyond the dtype's range drops out
        info = np.iinfo(x.dtype)
        if lo is not None and type(lo.value) is int and lo.weak and lo.value <= info.min:
            lo = None
        if hi is not None and type(hi.value) is int and hi.weak and hi.value >= info.max:
            hi = None
    if lo is None and hi is None:
        loop = _resolve(np.positive, [x])
    elif lo is None:
        loop = _resolve(np.minimum, [x, hi])
    elif hi is None:
        loop = _resolve(np.maximum, [x, lo])
    else:
        loop = _resolve(np._core.umath.clip, [x, lo, hi])
    return [(shape, loop[-1])]


def astype_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("dtype",))
    _n_inputs(op, ins, 1)
    return [(ins[0].shape, np.dtype(a["dtype"]))]


def real_rule(op, ins, attrs):
    _attrs(op, attrs)
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if ins[0].weak and x.dtype.kind == "b":  # True.real is the int 1
        return [(x.shape, _PY_DTYPE["i"])]
    return [(x.shape, _real_dtype(x.dtype) if x.dtype.kind == "c" else x.dtype)]


def angle_rule(op, ins, attrs):
    # np.angle: arctan2(z.imag, z.real), or arctan2(0, z) for a real z; ``deg`` scales in place
    _attrs(op, attrs, (), {"deg": False})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if x.dtype.kind == "c":
        r = ValueType(x.shape, _real_dtype(x.dtype))
        loop = _resolve(np.arctan2, [r, r])
    else:
        loop = _resolve(np.arctan2, [ValueType((), _PY_DTYPE["i"], True), x])
    return [(x.shape, loop[-1])]


# ---------------------------------------------------------------------- reductions and scans
def _reduce_axes(shape, axis) -> tuple:
    ndim = len(shape)
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    out = tuple(_axis(a, ndim) for a in axes)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return out


def _reduced_shape(shape, axes, keepdims) -> tuple:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _sum_dtype(dt: np.dtype, dtype) -> np.dtype:
    """The dtype np.add.reduce / np.multiply.reduce (and their accumulate) give: small
    integers and bools accumulate in the platform integer."""
    if dtype is not None:
        return np.dtype(dtype)
    if dt.kind == "b" or (dt.kind == "i" and dt.itemsize < np.dtype(np.int_).itemsize):
        return np.dtype(np.int_)
    if dt.kind == "u" and dt.itemsize < np.dtype(np.uint).itemsize:
        return np.dtype(np.uint)
    return dt


def _mean_dtype(dt, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    return np.dtype(np.float64) if dt.kind in "biu" else dt


def _var_dtype(dt, dtype, scalar, std):
    # numpy/_core/_methods.py::_var and _std, dtype by dtype
    d = np.dtype(np.float64) if dtype is None and dt.kind in "biu" else _dtype_attr(dtype)
    mean = _sum_dtype(dt, d)
    x = _resolve(np.subtract, [ValueType((), dt), ValueType((), mean)])[-1]
    if dt.kind not in "iuf" and x.kind == "c":
        x = _real_dtype(x)
    ret = _sum_dtype(x, d)
    if std and not scalar:  # np.sqrt(ret, out=ret)
        out = np.sqrt.resolve_dtypes((ret, None))[-1]
        if not np.can_cast(out, ret, "same_kind"):
            raise TypeError(
                f"Cannot cast ufunc 'sqrt' output from {out!r} to {ret!r} with casting rule "
                "'same_kind'"
            )
    return ret


def _reduce_types(op, ins, attrs, opt):
    """A reduction's checked attributes, input, reduced axes, output shape and ``dtype``."""
    a = _attrs(op, attrs, (), {"axis": None, "keepdims": False, "dtype": None, **opt})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    axes = _reduce_axes(x.shape, a["axis"])
    shape = _reduced_shape(x.shape, axes, a["keepdims"])
    return a, x, axes, shape, _dtype_attr(a["dtype"])


def reduce_rule(op, ins, attrs):
    """sum, prod, max, min, any, all: by their :class:`~tracekit.ops.Reduction`."""
    a, x, axes, shape, dtype = _reduce_types(op, ins, attrs, {})
    combine = op.reduction.combine
    if combine not in ("add", "multiply") and dtype is not None:  # extrema, any, all
        raise TypeError(f"{op.name}() got an unexpected keyword argument 'dtype'")
    if combine in ("max", "min") and math.prod(x.shape[i] for i in axes) == 0:
        ufunc = f"{combine}imum"
        raise ValueError(f"zero-size array to reduction operation {ufunc} which has no identity")
    if combine in ("add", "multiply"):
        out = _sum_dtype(x.dtype, dtype)
    elif combine in ("or", "and"):
        out = np.dtype(bool)
    else:
        out = x.dtype
    return [(shape, out)]


def mean_rule(op, ins, attrs):
    a, x, axes, shape, dtype = _reduce_types(op, ins, attrs, {})
    return [(shape, _mean_dtype(x.dtype, dtype))]


def var_rule(op, ins, attrs, std=False):
    """var, and std (``std``)."""
    a, x, axes, shape, dtype = _reduce_types(op, ins, attrs, {"ddof": 0})
    _int(a["ddof"], "ddof")
    return [(shape, _var_dtype(x.dtype, dtype, shape == () and not a["keepdims"], std))]


def std_rule(op, ins, attrs):
    return var_rule(op, ins, attrs, std=True)


def argreduce_rule(op, ins, attrs):
    a = _attrs(op, attrs, (), {"axis": None, "keepdims": False})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if a["axis"] is None:
        if x.size == 0:
            raise ValueError(f"attempt to get {op.name} of an empty sequence")
        shape = (1,) * x.ndim if a["keepdims"] else ()
    else:
        ax = _axis(a["axis"], x.ndim)
        if x.shape[ax] == 0:
            raise ValueError(f"attempt to get {op.name} of an empty sequence")
        shape = _reduced_shape(x.shape, (ax,), a["keepdims"])
    return [(shape, np.dtype(np.intp))]


def scan_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("axis",), {"dtype": None})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if a["axis"] is None:
        shape = (x.size,)
    elif x.ndim == 0:  # NumPy takes axis 0 of a 0-d array as its one element
        if _int(a["axis"], "axis") not in (0, -1):
            raise AxisError(a["axis"], 1)
        shape = (1,)
    else:
        _axis(a["axis"], x.ndim)
        shape = x.shape
    return [(shape, _sum_dtype(x.dtype, _dtype_attr(a["dtype"])))]


# ---------------------------------------------------------------------- linear algebra
def _result_type(*ts):
    return np.result_type(*(t.dtype for t in ts))


def matmul_rule(op, ins, attrs):
    _attrs(op, attrs)
    _n_inputs(op, ins, 2)
    a, b = ins
    for i, t in enumerate(ins):
        if t.ndim == 0:
            raise ValueError(
                f"matmul: Input operand {i} does not have enough dimensions (has 0, gufunc core "
                "with signature (n?,k),(k,m?)->(n?,m?) requires 1)"
            )
    sa = (1,) + a.shape if a.ndim == 1 else a.shape
    sb = b.shape + (1,) if b.ndim == 1 else b.shape
    if sa[-1] != sb[-2]:
        raise ValueError(
            f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
            f"signature (n?,k),(k,m?)->(n?,m?) (size {sb[-2]} is different from {sa[-1]})"
        )
    batch = _broadcast(sa[:-2], sb[:-2])
    shape = batch + ((sa[-2],) if a.ndim > 1 else ()) + ((sb[-1],) if b.ndim > 1 else ())
    return [(shape, _resolve(np.matmul, [a, b])[-1])]


def dot_rule(op, ins, attrs):
    _attrs(op, attrs)
    _n_inputs(op, ins, 2)
    a, b = (_strong(t) for t in ins)
    dtype = _result_type(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return [(a.shape if b.ndim == 0 else b.shape, dtype)]
    k = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if a.shape[-1] != k:
        raise ValueError(f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} != {k}")
    shape = a.shape[:-1] + (() if b.ndim == 1 else b.shape[:-2] + b.shape[-1:])
    return [(shape, dtype)]


def tensordot_rule(op, ins, attrs):
    at = _attrs(op, attrs, (), {"axes": 2})
    _n_inputs(op, ins, 2)
    a, b = (_strong(t) for t in ins)
    axes = at["axes"]
    if isinstance(axes, int | np.integer):
        n = int(axes)
        if n < 0 or n > min(a.ndim, b.ndim):
            raise ValueError("shape-mismatch for sum")
        xa, xb = tuple(range(a.ndim - n, a.ndim)), tuple(range(n))
    else:
        xa, xb = axes
        xa = (xa,) if isinstance(xa, int | np.integer) else tuple(xa)
        xb = (xb,) if isinstance(xb, int | np.integer) else tuple(xb)
    if len(xa) != len(xb):
        raise ValueError("shape-mismatch for sum")
    for ax, t in ((xa, a), (xb, b)):
        for i in ax:
            if not -t.ndim <= _int(i, "axes") < t.ndim:
                raise IndexError(f"tuple index out of range (axis {i} of a {t.ndim}-d array)")
    xa = tuple(int(i) % a.ndim for i in xa)
    xb = tuple(int(i) % b.ndim for i in xb)
    if any(a.shape[i] != b.shape[j] for i, j in zip(xa, xb)):
        raise ValueError("shape-mismatch for sum")
    if len(set(xa)) != len(xa) or len(set(xb)) != len(xb):
        raise ValueError("tensordot: an axis is summed twice")
    free = tuple(d for i, d in enumerate(a.shape) if i not in xa)
    free += tuple(d for i, d in enumerate(b.shape) if i not in xb)
    return [(free, _result_type(a, b))]


def einsum_rule(op, ins, attrs):
    at = _attrs(op, attrs, ("subscripts",))
    _n_inputs(op, ins, 1, at_least=True)
    ins = [_strong(t) for t in ins]
    sub = at["subscripts"]
    if not isinstance(sub, str):
        raise TypeError("einsum subscripts must be a string")
    sub = sub.replace(" ", "")
    lhs, arrow, rhs = sub.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ins):
        raise ValueError("more operands provided to einstein sum function than specified")
    sizes: dict = {}
    ell_shapes = []
    for term, t in zip(terms, ins):
        if term.count("...") > 1 or "." in term.replace("...", ""):
            raise ValueError(f"invalid subscript '{term}' in einstein sum")
        letters = term.replace("...", "")
        if not all(c.isalpha() for c in letters):
            raise ValueError(f"invalid subscript in einstein sum: {term!r}")
        n_ell = t.ndim - len(letters)
        if n_ell < 0 or (n_ell > 0 and "..." not in term):
            raise ValueError(
                f"operand has more dimensions than subscripts given in einstein sum, but no "
                f"'...' ellipsis provided to broadcast the extra dimensions: {term!r}"
                if n_ell > 0
                else f"einstein sum subscripts string contains too many subscripts: {term!r}"
            )
        start = term.find("...")
        pos = start if start >= 0 else len(letters)
        before, after = letters[:pos], letters[pos:]
        dims = t.shape
        ell_shapes.append(dims[len(before) : len(before) + n_ell])
        for c, d in zip(before + after, dims[: len(before)] + dims[len(before) + n_ell :]):
            prev = sizes.get(c)
            if prev is None or prev == 1:
                sizes[c] = d
            elif d != 1 and d != prev:
                raise ValueError(
                    f"operands could not be broadcast together with remapped shapes: label "
                    f"{c!r} has sizes {prev} and {d}"
                )
    # a label repeated within one operand (a diagonal) must agree exactly
    for term, t in zip(terms, ins):
        letters = term.replace("...", "")
        n_ell = t.ndim - len(letters)
        start = term.find("...")
        pos = start if start >= 0 else len(letters)
        dims = t.shape[:pos] + t.shape[pos + n_ell :]
        seen: dict = {}
        for c, d in zip(letters, dims):
            if c in seen and seen[c] != d:
                raise ValueError(f"dimensions in operand for collapsing index {c!r} don't match")
            seen[c] = d
    ell = _broadcast(*ell_shapes) if ell_shapes else ()
    if arrow:
        if rhs.count("...") > 1 or "." in rhs.replace("...", ""):
            raise ValueError(f"invalid output subscript {rhs!r} in einstein sum")
        out = rhs.replace("...", "")
        if "..." not in rhs and ell:
            raise ValueError("output has more dimensions than subscripts given in einstein sum")
        if len(set(out)) != len(out) or any(c not in sizes for c in out):
            raise ValueError(f"invalid output subscripts {rhs!r} in einstein sum")
        k = rhs.find("...")
        pos = k if k >= 0 else len(out)
        shape = tuple(sizes[c] for c in out[:pos]) + ell + tuple(sizes[c] for c in out[pos:])
    else:
        letters = "".join(terms).replace(".", "")
        out = sorted(c for c in set(letters) if letters.count(c) == 1)
        shape = ell + tuple(sizes[c] for c in out)
    return [(shape, _result_type(*ins))]


# ---------------------------------------------------------------------- movement
def reshape_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("shape",))
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    shape = _shape_attr(a["shape"])
    unknown = [i for i, d in enumerate(shape) if d == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    if any(d < -1 for d in shape):
        raise ValueError("negative dimensions not allowed")
    known = math.prod(d for d in shape if d != -1)
    if unknown:
        if known == 0 or x.size % known:
            raise ValueError(f"cannot reshape array of size {x.size} into shape {shape}")
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape array of size {x.size} into shape {shape}")
    return [(shape, x.dtype)]


def transpose_rule(op, ins, attrs):
    a = _attrs(op, attrs, (), {"axes": None})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    axes = a["axes"]
    if axes is None:
        return [(x.shape[::-1], x.dtype)]
    axes = tuple(axes)
    if len(axes) != x.ndim:
        raise ValueError("axes don't match array")
    axes = tuple(_axis(i, x.ndim) for i in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis in transpose")
    return [(tuple(x.shape[i] for i in axes), x.dtype)]


def broadcast_to_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("shape",))
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    shape = _shape_attr(a["shape"])
    if any(d < 0 for d in shape):
        raise ValueError("all elements of broadcast shape must be non-negative")
    lead = len(shape) - x.ndim
    if lead < 0 or any(s not in (1, d) for s, d in zip(x.shape, shape[lead:])):
        raise ValueError(
            f"operands could not be broadcast together with remapped shapes "
            f"[original->remapped]: {x.shape} and requested shape {shape}"
        )
    return [(shape, x.dtype)]


def concatenate_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("axis",))
    _n_inputs(op, ins, 1, at_least=True)
    xs = [_strong(t) for t in ins]
    dtype = _result_type(*xs)
    if a["axis"] is None:
        return [((sum(t.size for t in xs),), dtype)]
    nd = xs[0].ndim
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    ax = _axis(a["axis"], nd)
    for i, t in enumerate(xs[1:], 1):
        if t.ndim != nd:
            raise ValueError(
                "all the input array dimensions except for the concatenation axis must match "
                f"exactly, but array 0 has {nd} dimension(s) and array {i} has {t.ndim}"
            )
        for j in range(nd):
            if j != ax and t.shape[j] != xs[0].shape[j]:
                raise ValueError(
                    "all the input array dimensions except for the concatenation axis must "
                    f"match exactly, but along dimension {j}, the array at index 0 has size "
                    f"{xs[0].shape[j]} and the array at index {i} has size {t.shape[j]}"
                )
    shape = list(xs[0].shape)
    shape[ax] = sum(t.shape[ax] for t in xs)
    return [(tuple(shape), dtype)]


def tile_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("reps",))
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    reps = _shape_attr(a["reps"], "reps")
    _nonneg(reps)
    d = max(x.ndim, len(reps))
    xs = (1,) * (d - x.ndim) + x.shape
    rs = (1,) * (d - len(reps)) + reps
    return [(tuple(s * r for s, r in zip(xs, rs)), x.dtype)]


def repeat_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("repeats",), {"axis": None})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if a["axis"] is None:
        shape, ax = (x.size,), 0
    else:
        shape, ax = x.shape, _axis(a["axis"], x.ndim)
    n = shape[ax]
    reps = a["repeats"]
    reps = (
        _shape_attr(reps, "repeats") if isinstance(reps, tuple | list) else (_int(reps, "repeats"),)
    )
    _nonneg(reps)
    if len(reps) == 1:
        total = n * reps[0]
    elif len(reps) == n:
        total = sum(reps)
    else:
        raise ValueError(
            f"operands could not be broadcast together with shape ({n},) ({len(reps)},)"
        )
    return [(shape[:ax] + (total,) + shape[ax + 1 :], x.dtype)]


def roll_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("shift",), {"axis": None})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    shift, axis = a["shift"], a["axis"]
    if axis is not None:
        axes = axis if isinstance(axis, tuple | list) else (axis,)
        for i in axes:
            _axis(i, x.ndim)
        shifts = shift if isinstance(shift, tuple | list) else (shift,)
        for s in shifts:
            _int(s, "shift")
        if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
            raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
    elif isinstance(shift, tuple | list):
        raise ValueError("'shift' and 'axis' should be scalars or 1D sequences")
    else:
        _int(shift, "shift")
    return [(x.shape, x.dtype)]


def pad_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("pad_width", "constant_value"))
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    pw = a["pad_width"]
    try:
        pw = np.broadcast_to(np.asarray(pw), (x.ndim, 2))
    except ValueError as e:
        raise ValueError(f"pad_width {a['pad_width']!r} does not fit a {x.ndim}-d array") from e
    if pw.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    if (pw < 0).any():
        raise ValueError("index can't contain negative values")
    if x.dtype.kind == "i":  # np.pad converts the value for signed integers, wraps it else
        _check_int_conversion(type_of(a["constant_value"]), x.dtype)
    return [(tuple(d + int(lo) + int(hi) for d, (lo, hi) in zip(x.shape, pw)), x.dtype)]


# ---------------------------------------------------------------------- indexing
_UNKNOWN = -1  # a dimension whose length depends on values (a boolean mask's count)


def index_shape(x: ValueType, idx, arrays) -> tuple:
    """The shape of ``x[idx]`` (``"@k"`` in ``idx`` is ``arrays[k]``, a ValueType): NumPy's
    basic and advanced indexing. A boolean mask of unknown values gives a ``-1`` dimension."""
    if not isinstance(idx, tuple):
        raise TypeError(f"an index is a tuple, got {idx!r}")
    entries = []
    for e in idx:
        if isinstance(e, str):
            try:
                entries.append(arrays[int(e[1:])])
            except (ValueError, IndexError) as err:
                raise IndexError(f"index placeholder {e!r} has no array input") from err
        elif e is None or e is Ellipsis or isinstance(e, slice):
            entries.append(e)
        elif isinstance(e, bool | np.bool_):
            raise IndexError("a Python bool index is not supported")
        elif isinstance(e, int | np.integer):
            entries.append(int(e))
        else:
            raise IndexError(
                "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                f"integer or boolean arrays are valid indices, not {e!r}"
            )
    if sum(e is Ellipsis for e in entries) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    for t in entries:
        if isinstance(t, ValueType) and t.dtype.kind not in "biu":
            raise IndexError("arrays used as indices must be of integer (or boolean) type")

    def consumed(e):
        if isinstance(e, ValueType):
            return t_ndim(e)
        return 0 if e is None or e is Ellipsis else 1

    def t_ndim(t):
        return t.ndim if t.dtype.kind == "b" else 1

    used = sum(consumed(e) for e in entries)
    if used > x.ndim:
        raise IndexError(
            f"too many indices for array: array is {x.ndim}-dimensional, but {used} were indexed"
        )
    advanced = any(isinstance(e, ValueType) for e in entries)
    # NumPy keeps the advanced axes in place only where the advanced entries stand side by side
    # in the index as written: a `None` or an `...` between them, even one standing for no
    # axis, moves them to the front.
    written = [i for i, e in enumerate(entries) if isinstance(e, ValueType | int)]
    adjacent = written == list(range(written[0], written[0] + len(written))) if advanced else True
    if Ellipsis in entries:
        k = entries.index(Ellipsis)
        entries = entries[:k] + [slice(None)] * (x.ndim - used) + entries[k + 1 :]
    else:
        entries = entries + [slice(None)] * (x.ndim - used)
    out, adv_shapes, adv_pos, dim = [], [], [], 0
    for e in entries:
        if e is None:
            out.append(1)
            continue
        if isinstance(e, slice):
            n = x.shape[dim]
            if e.step == 0:
                raise ValueError("slice step cannot be zero")
            for v in (e.start, e.stop, e.step):
                if v is not None and not isinstance(v, int | np.integer):
                    raise TypeError("slice indices must be integers or None")
            out.append(len(range(*e.indices(n))))
            dim += 1
            continue
        if isinstance(e, int):
            n = x.shape[dim]
            if not -n <= e < n:
                raise IndexError(f"index {e} is out of bounds for axis {dim} with size {n}")
            if advanced:
                adv_shapes.append(())
                adv_pos.append(len(out))
                out.append(None)
            dim += 1
            continue
        # an array index
        if e.dtype.kind == "b":
            want = x.shape[dim : dim + e.ndim]
            if e.shape != want:
                raise IndexError(
                    f"boolean index did not match indexed array along axis {dim}; size of axis "
                    f"is {want} but size of corresponding boolean axis is {e.shape}"
                )
            count = _UNKNOWN if e.value is None else int(np.count_nonzero(e.value))
            adv_shapes.append((count,))
            dim += e.ndim
        else:
            n = x.shape[dim]
            if e.value is not None:
                vals = np.asarray(e.value)
                if vals.size and not ((vals >= -n) & (vals < n)).all():
                    bad = int(vals[(vals < -n) | (vals >= n)].ravel()[0])
                    raise IndexError(f"index {bad} is out of bounds for axis {dim} with size {n}")
            elif n == 0 and e.size:
                raise IndexError(f"index is out of bounds for axis {dim} with size 0")
            adv_shapes.append(e.shape)
            dim += 1
        adv_pos.append(len(out))
        out.append(None)
    if not advanced:
        return tuple(out)
    known = [tuple(1 if d == _UNKNOWN else d for d in s) for s in adv_shapes]
    try:
        bshape = _broadcast(*known)
    except ValueError as err:
        raise IndexError(
            "shape mismatch: indexing arrays could not be broadcast together with shapes "
            + " ".join(str(s) for s in adv_shapes)
        ) from err
    if any(_UNKNOWN in s for s in adv_shapes):
        bshape = tuple(
            _UNKNOWN if any(len(s) >= len(bshape) - i and _UNKNOWN in s for s in adv_shapes) else d
            for i, d in enumerate(bshape)
        )
    rest = [d for d in out if d is not None]
    if adjacent:
        k = adv_pos[0]
        before = [d for d in out[:k] if d is not None]
        return tuple(before) + bshape + tuple(rest[len(before) :])
    return bshape + tuple(rest)


def _index_inputs(op, ins, attrs, n_lead):
    a = _attrs(op, attrs, ("idx",))
    _n_inputs(op, ins, n_lead, at_least=True)
    arrays = [_strong(t) for t in ins[n_lead:]]
    x = _strong(ins[0])
    return x, index_shape(x, a["idx"], arrays)


def index_rule(op, ins, attrs):
    x, shape = _index_inputs(op, ins, attrs, 1)
    if _UNKNOWN in shape:
        raise ValueError(
            "a boolean-mask index whose values the graph does not hold has a data-dependent shape"
        )
    return [(shape, x.dtype)]


def _assignable(value: ValueType, target: tuple, strict=False):
    """``value`` broadcasts to ``target`` as an assignment does (leading 1-dims may drop, but
    not when ``strict``: ``np.add.at``)."""
    vs = value.shape
    while len(vs) > len(target) and vs[0] == 1 and not strict:
        vs = vs[1:]
    lead = len(target) - len(vs)
    if lead < 0 or any(v not in (1, t) and t != _UNKNOWN for v, t in zip(vs, target[lead:])):
        shown = tuple("?" if d == _UNKNOWN else d for d in target)
        raise ValueError(
            f"could not broadcast input array from shape {value.shape} into shape {shown}"
        )


def index_update_rule(op, ins, attrs, add=False):
    """``x[idx] = value`` (index_update) and, ``add``, ``np.add.at(x, idx, value)``
    (index_add)."""
    x, shape = _index_inputs(op, ins, attrs, 2)
    value = ins[1]
    if value is None:
        raise TypeError(f"{op.name}: the value is None")
    if add:  # np.add.at casts its result back unsafely
        np.add.resolve_dtypes((x.dtype, _key(value), None))
    else:
        _check_setitem(value, x.dtype)
    _assignable(value, shape, strict=add)
    return [(x.shape, x.dtype)]


def index_add_rule(op, ins, attrs):
    return index_update_rule(op, ins, attrs, add=True)


def update_part_rule(op, ins, attrs, imag=False):
    """``x.real = value`` / ``x.imag = value`` (``imag``) on a copy of ``x``."""
    _attrs(op, attrs)
    _n_inputs(op, ins, 2)
    x, value = _strong(ins[0]), ins[1]
    if imag and x.dtype.kind != "c":
        raise TypeError("array does not have imaginary part to set")
    _assignable(value, x.shape)
    return [(x.shape, x.dtype)]


def update_imag_rule(op, ins, attrs):
    return update_part_rule(op, ins, attrs, imag=True)


# ---------------------------------------------------------------------- creation
def _no_inputs(op, ins):
    if ins:
        raise TypeError(f"{op.name} takes no inputs, got {len(ins)}")


def full_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("shape", "fill_value"), {"dtype": None})
    _no_inputs(op, ins)
    shape = _nonneg(_shape_attr(a["shape"]))
    fill = type_of(a["fill_value"])
    if fill is None:
        dtype = _dtype_attr(a["dtype"]) or np.dtype(object)
    else:
        if fill.ndim:
            _assignable(fill, shape)
        dtype = _dtype_attr(a["dtype"]) or _strong(fill).dtype
        _check_int_fits(fill, dtype)
    return [(shape, dtype)]


def arange_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("stop",), {"start": 0, "step": 1, "dtype": None})
    _no_inputs(op, ins)
    start, stop, step = a["start"], a["stop"], a["step"]
    for v in (start, stop, step):
        if not isinstance(v, int | float | np.integer | np.floating | np.bool_):
            raise TypeError(f"arange: unsupported bound {v!r}")
    if step == 0:
        raise ZeroDivisionError("division by zero")
    n = math.ceil((stop - start) / step) if (stop - start) / step > 0 else 0
    dtype = _dtype_attr(a["dtype"])
    if dtype is None:  # each bound converts on its own: a Python int is int64, not weak
        dtype = np.result_type(*(np.asarray(v).dtype for v in (start, stop, step)))
    if dtype.kind == "b" and n > 2:
        raise TypeError(
            "arange() is only supported for booleans when the result has at most length 2."
        )
    return [((n,), dtype)]


def linspace_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("start", "stop"), {"num": 50, "endpoint": True, "dtype": None})
    _no_inputs(op, ins)
    num = _int(a["num"], "num")
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    dtype = _dtype_attr(a["dtype"])
    if dtype is None:
        dtype = np.result_type(a["start"], a["stop"], float(num))
    return [((num,), dtype)]


def eye_rule(op, ins, attrs):
    a = _attrs(op, attrs, ("N",), {"M": None, "k": 0, "dtype": float})
    _no_inputs(op, ins)
    n = _int(a["N"], "N")
    m = n if a["M"] is None else _int(a["M"], "M")
    _int(a["k"], "k")
    return [(_nonneg((n, m)), np.dtype(a["dtype"]))]


# ---------------------------------------------------------------------- LAPACK (np.linalg)
_LinAlgError = np.linalg.LinAlgError


def _linalg_dtype(*ts) -> np.dtype:
    """numpy.linalg's ``_commonType``: single precision only when every input is, complex when
    one is; integers and bools computed in float64; float16 is refused."""
    single, cplx = True, False
    for t in ts:
        if t.dtype.kind in "fc":
            if t.dtype.itemsize not in ((4, 8) if t.dtype.kind == "f" else (8, 16)):
                raise TypeError(f"array type {t.dtype} is unsupported in linalg")
            cplx |= t.dtype.kind == "c"
            single &= t.dtype in (np.dtype(np.float32), np.dtype(np.complex64))
        else:
            single = False
    return np.dtype(("c8" if single else "c16") if cplx else ("f4" if single else "f8"))


def _square_stack(t: ValueType):
    if t.ndim < 2:
        raise _LinAlgError(
            f"{t.ndim}-dimensional array given. Array must be at least two-dimensional"
        )
    if t.shape[-1] != t.shape[-2]:
        raise _LinAlgError("Last 2 dimensions of the array must be square")


def inv_rule(op, ins, attrs):
    """inv and cholesky: a stack of square matrices, the same shape back."""
    _attrs(op, attrs, (), {"upper": False})
    _n_inputs(op, ins, 1)
    a = _strong(ins[0])
    _square_stack(a)
    return [(a.shape, _linalg_dtype(a))]


def det_rule(op, ins, attrs):
    _attrs(op, attrs)
    _n_inputs(op, ins, 1)
    a = _strong(ins[0])
    _square_stack(a)
    return [(a.shape[:-2], _linalg_dtype(a))]


def solve_rule(op, ins, attrs):
    """``solve(a, b)``: ``b`` is one vector per matrix only when it is 1-d (NumPy 2)."""
    _attrs(op, attrs)
    _n_inputs(op, ins, 2)
    a, b = (_strong(t) for t in ins)
    _square_stack(a)
    dtype = _linalg_dtype(a, b)
    m = a.shape[-1]
    if b.ndim == 0 or (b.ndim == 1 and b.shape[0] != m) or (b.ndim > 1 and b.shape[-2] != m):
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0 ({m})")
    if b.ndim == 1:
        return [(a.shape[:-1], dtype)]
    return [(_broadcast(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], dtype)]


# ---------------------------------------------------------------------- order, counting, signal
def _sort_shape(op, ins, attrs, zero_d_ok):
    a = _attrs(op, attrs, (), {"axis": -1, "kind": None})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if a["kind"] not in (None, "quicksort", "mergesort", "heapsort", "stable"):
        raise ValueError(f"sort kind must be one of 'quick', 'heap', or 'stable' (got {a['kind']})")
    if a["axis"] is None:
        return x, (x.size,)
    if x.ndim == 0 and zero_d_ok and _int(a["axis"], "axis") in (0, -1):
        return x, (1,)
    _axis(a["axis"], x.ndim)
    return x, x.shape


def sort_rule(op, ins, attrs):
    x, shape = _sort_shape(op, ins, attrs, zero_d_ok=False)
    return [(shape, x.dtype)]


def argsort_rule(op, ins, attrs):
    """Positions, in intp; NumPy argsorts a 0-d array as the 1-d array of its one element."""
    x, shape = _sort_shape(op, ins, attrs, zero_d_ok=True)
    return [(shape, np.dtype(np.intp))]


def _one_d(t: ValueType, what=""):
    if t.ndim > 1:
        raise ValueError(f"object too deep for desired array{what}")
    if t.ndim == 0:
        raise ValueError(f"object of too small depth for desired array{what}")


def searchsorted_rule(op, ins, attrs):
    a = _attrs(op, attrs, (), {"side": "left"})
    _n_inputs(op, ins, 2)
    if a["side"] not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {a['side']!r})")
    sorted_, v = _strong(ins[0]), ins[1]
    _one_d(sorted_)
    return [(v.shape, np.dtype(np.intp))]


def median_rule(op, ins, attrs):
    a = _attrs(op, attrs, (), {"axis": None, "keepdims": False})
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    axes = _reduce_axes(x.shape, a["axis"])
    return [(_reduced_shape(x.shape, axes, a["keepdims"]), _mean_dtype(x.dtype, None))]


# quantile methods that pick one of the sorted values (no interpolation: the input's dtype)
_PICKING = ("inverted_cdf", "closest_observation", "lower", "higher", "nearest")
_INTERPOLATING = (
    "averaged_inverted_cdf interpolated_inverted_cdf hazen weibull linear median_unbiased "
    "normal_unbiased midpoint"
).split()


def quantile_rule(op, ins, attrs):
    a = _attrs(
        op, attrs, ("q",), {"q_dtype": None, "axis": None, "method": "linear", "keepdims": False}
    )
    _n_inputs(op, ins, 1)
    x = _strong(ins[0])
    if x.dtype.kind == "c":
        raise TypeError("a must be an array of real numbers")
    q = np.asarray(a["q"], dtype=a["q_dtype"] or np.float64)
    if not (np.all(q >= 0) and np.all(q <= 1)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    if a["method"] not in _PICKING and a["method"] not in _INTERPOLATING:
        raise ValueError(f"{a['method']!r} is not a valid method.")
    axes = _reduce_axes(x.shape, a["axis"])
    if math.prod(x.shape[i] for i in axes) == 0:
        raise IndexError("index 0 is out of bounds for axis 0 with size 0")
    shape = q.shape + _reduced_shape(x.shape, axes, a["keepdims"])
    if a["method"] in _PICKING:
        return [(shape, x.dtype)]
    if x.dtype.kind == "b":
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported")
    return [(shape, np.result_type(x.dtype, q.dtype if a["q_dtype"] else 0.0))]


def histogram_rule(op, ins, attrs):
    """Two outputs: the counts (or sums of weights, or densities) and the bin edges."""
    at = _attrs(op, attrs, ("bins", "range", "density"))
    _n_inputs(op, ins, 1, at_least=True)
    x = _strong(ins[0])
    weights = _strong(ins[1]) if len(ins) > 1 else None
    if len(ins) > 2:
        raise TypeError(f"histogram takes 1 or 2 inputs, got {len(ins)}")
    if weights is not None and weights.shape != x.shape:
        raise ValueError("weights should have the same shape as a.")
    bins, rng = at["bins"], at["range"]
    data = np.dtype(np.uint8) if x.dtype.kind == "b" else x.dtype
    if isinstance(bins, int | np.integer):
        if bins < 1:
            raise ValueError("`bins` must be positive, when an integer")
        n = int(bins)
        if rng is None:
            edges = data
        else:
            lo, hi = rng
            if lo > hi:
                raise ValueError("max must be larger than min in range parameter.")
            edges = np.result_type(lo, hi, data)
        if edges.kind in "iub":
            edges = np.result_type(edges, float)
    else:
        e = np.asarray(bins)
        if e.ndim != 1:
            raise ValueError("`bins` must be 1d, when an array")
        n, edges = e.shape[0] - 1, e.dtype
    counts = np.dtype(np.intp) if weights is None else weights.dtype
    if weights is not None and not isinstance(bins, int | np.integer) and counts.kind == "b":
        raise TypeError("Cannot cast ufunc 'add' output from dtype('int64') to dtype('bool')")
    if at["density"]:  # counts / widths (in float64) / total
        counts = np.result_type(counts, np.float64)
    return [((n,), counts), ((n + 1,), edges)]


def interp_rule(op, ins, attrs):
    _attrs(op, attrs)
    _n_inputs(op, ins, 3, at_least=True)
    x, xp, fp = (_strong(t) for t in ins[:3])
    if x.dtype.kind == "c" or xp.dtype.kind == "c":
        raise TypeError("Cannot cast array data from dtype('complex128') to dtype('float64')")
    _one_d(xp)
    _one_d(fp)
    if xp.shape != fp.shape:
        raise ValueError("fp and xp are not of the same length.")
    if xp.shape[0] == 0:
        raise ValueError("array of sample points is empty")
    return [(x.shape, np.dtype(np.complex128 if fp.dtype.kind == "c" else np.float64))]


def convolve_rule(op, ins, attrs):
    at = _attrs(op, attrs, (), {"mode": "full"})
    _n_inputs(op, ins, 2)
    a, v = (_strong(t) for t in ins)
    for t, name in ((a, "a"), (v, "v")):
        if t.ndim > 1:
            raise ValueError("object too deep for desired array")
        if t.size == 0:
            raise ValueError(f"{name} cannot be empty")
    n, m = max(a.size, v.size), min(a.size, v.size)
    length = {"full": n + m - 1, "same": n, "valid": n - m + 1}.get(at["mode"])
    if length is None:
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {at['mode']!r})")
    return [((length,), _result_type(a, v))]


# ---------------------------------------------------------------------- the table
RULES = {  # ops whose rule is their own; the rest take their kind's
    "where": where_rule,
    "clip": clip_rule,
    "astype": astype_rule,
    "real": real_rule,
    "imag": real_rule,
    "angle": angle_rule,
    "mean": mean_rule,
    "var": var_rule,
    "std": std_rule,
    "argmax": argreduce_rule,
    "argmin": argreduce_rule,
    "matmul": matmul_rule,
    "dot": dot_rule,
    "tensordot": tensordot_rule,
    "einsum": einsum_rule,
    "reshape": reshape_rule,
    "transpose": transpose_rule,
    "broadcast_to": broadcast_to_rule,
    "concatenate": concatenate_rule,
    "tile": tile_rule,
    "repeat": repeat_rule,
    "roll": roll_rule,
    "pad": pad_rule,
    "index": index_rule,
    "index_update": index_update_rule,
    "index_add": index_add_rule,
    "update_real": update_part_rule,
    "update_imag": update_imag_rule,
    "full": full_rule,
    "arange": arange_rule,
    "linspace": linspace_rule,
    "eye": eye_rule,
    "inv": inv_rule,
    "cholesky": inv_rule,
    "det": det_rule,
    "solve": solve_rule,
    "sort": sort_rule,
    "argsort": argsort_rule,
    "searchsorted": searchsorted_rule,
    "median": median_rule,
    "quantile": quantile_rule,
    "histogram": histogram_rule,
    "interp": interp_rule,
    "convolve": convolve_rule,
}
KIND_RULES = {"reduce": reduce_rule, "scan": scan_rule}


class TypeRule:
    """``op``'s rule, bound to it: ``rule(input_types, attrs) -> [(shape, dtype), ...]``."""

    __slots__ = ("op", "fn")

    def __init__(self, op, fn):
        self.op, self.fn = op, fn

    def __call__(self, input_types, attrs):
        """``input_types``: a ValueType (or None) per input, or what :func:`type_of` takes (a
        Var, a literal, a constant's value)."""
        ins = [t if isinstance(t, ValueType) else type_of(t) for t in input_types]
        return [(tuple(s), np.dtype(d)) for s, d in self.fn(self.op, ins, attrs)]

    def __repr__(self):
        return f"<type rule {self.fn.__name__} of {self.op.name}>"


def rule_for(op) -> TypeRule | None:
    """The type rule of ``op`` (an ``ops.Op``): its own, its kind's, or a ufunc's; None for a
    Python op, whose recorded types are taken at their word."""
    if op.kind == "opaque":
        return None
    fn = RULES.get(op.name) or KIND_RULES.get(op.kind)
    if fn is None and op.ufunc is not None and op.kind == "elementwise":
        fn = ufunc_rule
    if fn is None:
        raise ValueError(f"op {op.name!r} ({op.kind}) has no type rule: declare one")
    return TypeRule(op, fn)


def rule_by_name(name: str) -> TypeRule:
    """The type rule of the op ``name`` in the op table."""
    return OPS[name].type_rule


def infer(node, constants=None) -> list:
    """The output types ``node``'s op gives on its inputs' types: [(shape, dtype), ...].
    ``constants`` maps the graph's constant inputs to their values."""
    constants = constants or {}
    ins = [type_of(x, constants.get(x)) if isinstance(x, Var) else type_of(x) for x in node.inputs]
    # an index moving with its loop has one shape in every iteration: the first one's
    return OPS[node.op].type_rule(ins, at_iteration(dict(node.attrs), 0))
