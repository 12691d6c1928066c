"""THE op table: every op tracekit knows, declared once.

Each :class:`Op` carries its kind, its NumPy reference implementation (the interpreter runs it),
how it prints as Python source (``.code``), and the slots other stages register beside it: the
gradient rule (``vjp``, see :mod:`tracekit.autodiff`) and backend templates. An op that is not in
``OPS`` does not exist anywhere in tracekit.

>>> OPS["add"].kind, OPS["sum"].kind
('elementwise', 'reduce')
>>> import numpy as np
>>> OPS["sum"].impl(np.ones((2, 3)), axis=(1,), keepdims=False, dtype=None)
array([3., 3.])
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .ir import Var, fmt_slice

KINDS = ("elementwise", "reduce", "scan", "matmul", "movement", "index", "create", "opaque")


@dataclass
class Op:
    """One op. ``impl(*inputs, **attrs)`` is the NumPy reference; ``code(args, attrs)`` its source.

    ``ufunc`` is set for ops that are NumPy ufuncs (the numba backends emit them as scalar calls).
    ``vjp(g, out, *inputs, **attrs)`` returns one cotangent (or None) per input; it is written in
    NumPy and traced, so backward graphs are ordinary graphs. ``helper`` names a function in this
    module that ``.code`` must define before use.
    """

    name: str
    kind: str
    impl: Callable
    code: Callable
    ufunc: np.ufunc | None = None
    vjp: Callable | None = None
    helper: Callable | None = None
    doc: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None


OPS: dict[str, Op] = {}


def register(op: Op) -> Op:
    if op.kind not in KINDS:
        raise ValueError(f"unknown kind {op.kind!r}")
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} declared twice")
    OPS[op.name] = op
    return op


def defvjp(name: str):
    """Decorator registering the gradient rule of op ``name`` beside its declaration."""

    def deco(fn):
        OPS[name].vjp = fn
        return fn

    return deco


# ---------------------------------------------------------------------- source printing
def py_literal(x) -> str:
    """A Python expression that rebuilds ``x`` in generated code (``np`` is NumPy)."""
    if isinstance(x, Var):
        return x.ident
    if isinstance(x, float):
        if math.isnan(x):
            return "float('nan')"
        if math.isinf(x):
            return "float('inf')" if x > 0 else "float('-inf')"
        return repr(x)
    if isinstance(x, complex):
        return f"complex({py_literal(x.real)}, {py_literal(x.imag)})"
    if isinstance(x, np.dtype):
        return f"np.{x.name}"
    if isinstance(x, type) and issubclass(x, np.generic):
        return f"np.{np.dtype(x).name}"
    if isinstance(x, np.generic):
        return f"np.{x.dtype.name}({py_literal(x.item())})"
    if isinstance(x, np.ndarray):
        return f"np.array({x.tolist()!r}, dtype=np.{x.dtype.name})"
    if isinstance(x, tuple):
        return "(" + ", ".join(py_literal(e) for e in x) + ("," if len(x) == 1 else "") + ")"
    if isinstance(x, list):
        return "[" + ", ".join(py_literal(e) for e in x) + "]"
    if x is Ellipsis:
        return "..."
    return repr(x)


def call_code(fn_name: str):
    """``code`` for an op printed as ``fn_name(*args, **attrs)``."""

    def code(args, attrs):
        parts = list(args) + [f"{k}={py_literal(v)}" for k, v in attrs.items()]
        return f"{fn_name}({', '.join(parts)})"

    return code


def _np_fn(name: str):
    return getattr(np, name)


# ---------------------------------------------------------------------- elementwise: ufuncs
UNARY_UFUNCS = (
    "negative positive absolute sign exp exp2 expm1 log log2 log10 log1p sqrt cbrt square "
    "reciprocal sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh "
    "floor ceil trunc rint logical_not isnan isinf isfinite conjugate signbit invert"
).split()
BINARY_UFUNCS = (
    "add subtract multiply divide floor_divide remainder power maximum minimum fmax fmin "
    "arctan2 hypot copysign logaddexp equal not_equal less less_equal greater greater_equal "
    "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor left_shift right_shift"
).split()

for _name in UNARY_UFUNCS + BINARY_UFUNCS:
    _uf = _np_fn(_name)
    register(Op(_name, "elementwise", _uf, call_code(f"np.{_name}"), ufunc=_uf, doc=_uf.__doc__))


def _where(cond, a, b):
    return np.where(cond, a, b)


def _astype(x, dtype):
    return np.asarray(x).astype(dtype)


def _real(x):
    return np.real(x)


def _imag(x):
    return np.imag(x)


def _angle(x, deg=False):
    return np.angle(x, deg=deg)


register(Op("where", "elementwise", _where, call_code("np.where")))
register(Op("clip", "elementwise", np.clip, call_code("np.clip")))
register(
    Op("astype", "elementwise", _astype, lambda a, at: f"{a[0]}.astype({py_literal(at['dtype'])})")
)
register(Op("real", "elementwise", _real, call_code("np.real")))
register(Op("imag", "elementwise", _imag, call_code("np.imag")))
register(Op("angle", "elementwise", _angle, call_code("np.angle")))


# ---------------------------------------------------------------------- reductions and scans
def _reduce_impl(fn):
    def impl(x, axis=None, keepdims=False, dtype=None, **kw):
        if dtype is not None:
            kw["dtype"] = dtype
        return fn(x, axis=axis, keepdims=keepdims, **kw)

    return impl


def _reduce_code(name):
    def code(args, attrs):
        kw = {k: v for k, v in attrs.items() if v is not None and not (k == "ddof" and v == 0)}
        if not kw.get("keepdims"):
            kw.pop("keepdims", None)
        return call_code(f"np.{name}")(args, kw)

    return code


for _name in ("sum", "prod", "mean", "var", "std", "max", "min", "any", "all"):
    register(Op(_name, "reduce", _reduce_impl(_np_fn(_name)), _reduce_code(_name)))
for _name in ("argmax", "argmin"):
    register(Op(_name, "reduce", _np_fn(_name), _reduce_code(_name)))


def _scan_impl(fn):
    def impl(x, axis, dtype=None):
        return fn(x, axis=axis, dtype=dtype)

    return impl


for _name in ("cumsum", "cumprod"):
    register(Op(_name, "scan", _scan_impl(_np_fn(_name)), _reduce_code(_name)))


# ---------------------------------------------------------------------- linear algebra
register(Op("matmul", "matmul", np.matmul, lambda a, at: f"({a[0]} @ {a[1]})", ufunc=np.matmul))
register(Op("dot", "matmul", np.dot, call_code("np.dot")))
register(
    Op(
        "einsum",
        "matmul",
        lambda *xs, subscripts: np.einsum(subscripts, *xs),
        lambda a, at: f"np.einsum({at['subscripts']!r}, {', '.join(a)})",
    )
)
register(Op("tensordot", "matmul", np.tensordot, call_code("np.tensordot")))


# ---------------------------------------------------------------------- movement
def _concatenate(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _pad(x, pad_width, constant_value):
    return np.pad(x, pad_width, mode="constant", constant_values=constant_value)


register(Op("reshape", "movement", np.reshape, call_code("np.reshape")))
register(Op("transpose", "movement", np.transpose, call_code("np.transpose")))
register(Op("broadcast_to", "movement", np.broadcast_to, call_code("np.broadcast_to")))
register(
    Op(
        "concatenate",
        "movement",
        _concatenate,
        lambda a, at: f"np.concatenate([{', '.join(a)}], axis={at['axis']!r})",
    )
)
register(Op("tile", "movement", np.tile, call_code("np.tile")))
register(Op("repeat", "movement", np.repeat, call_code("np.repeat")))
register(Op("roll", "movement", np.roll, call_code("np.roll")))
register(
    Op(
        "pad",
        "movement",
        _pad,
        lambda a, at: (
            f"np.pad({a[0]}, {at['pad_width']!r}, constant_values={py_literal(at['constant_value'])})"
        ),
    )
)


# ---------------------------------------------------------------------- indexing
# An index is a tuple of: int, slice, None (new axis), Ellipsis, or "@k" for the k-th array
# input after the indexed array (integer-array or boolean indices).
def build_index(idx, arrays):
    """Replace ``"@k"`` placeholders of a stored index by the arrays."""
    return tuple(arrays[int(e[1:])] if isinstance(e, str) else e for e in idx)


def index(x, *arrays, idx):
    """``x[idx]``."""
    return x[build_index(idx, arrays)]


def index_update(x, value, *arrays, idx):
    """A copy of ``x`` with ``x[idx] = value`` (functional setitem)."""
    x = np.array(x, copy=True)
    x[build_index(idx, arrays)] = value
    return x


def update_real(x, value):
    """A copy of complex ``x`` with its real part replaced."""
    x = np.array(x, copy=True)
    x.real = value
    return x


def update_imag(x, value):
    """A copy of complex ``x`` with its imaginary part replaced."""
    x = np.array(x, copy=True)
    x.imag = value
    return x


def index_code(idx, arrays) -> str:
    parts = []
    for e in idx:
        if isinstance(e, slice):
            parts.append(fmt_slice(e))
        elif isinstance(e, str):
            parts.append(arrays[int(e[1:])])
        elif e is None:
            parts.append("None")
        else:
            parts.append(py_literal(e))
    return ", ".join(parts) if parts else "()"


def _index_code(a, at):
    return f"{a[0]}[{index_code(at['idx'], a[1:])}]"


def _index_update_code(a, at):
    return f"index_update({a[0]}, {a[1]}, {', '.join(a[2:]) + ', ' if a[2:] else ''}idx={_idx_literal(at['idx'])})"


def _idx_literal(idx):
    return py_literal(tuple(idx))


register(Op("index", "index", index, _index_code))
register(Op("index_update", "index", index_update, _index_update_code, helper=index_update))
register(Op("update_real", "index", update_real, call_code("update_real"), helper=update_real))
register(Op("update_imag", "index", update_imag, call_code("update_imag"), helper=update_imag))


# ---------------------------------------------------------------------- creation
def _full(shape, fill_value, dtype):
    return np.full(shape, fill_value, dtype=dtype)


def _arange(start, stop, step, dtype):
    return np.arange(start, stop, step, dtype=dtype)


def _linspace(start, stop, num, endpoint, dtype):
    return np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)


def _eye(N, M, k, dtype):
    return np.eye(N, M, k, dtype=dtype)


register(Op("full", "create", _full, call_code("np.full")))
register(Op("arange", "create", _arange, call_code("np.arange")))
register(Op("linspace", "create", _linspace, call_code("np.linspace")))
register(Op("eye", "create", _eye, call_code("np.eye")))


def helper_source(op: Op) -> str | None:
    """Source of the helper function ``.code`` needs for ``op`` (with its own helpers)."""
    if op.helper is None:
        return None
    src = inspect.getsource(op.helper)
    if "build_index" in src and op.helper is not build_index:
        src = inspect.getsource(build_index) + "\n\n" + src
    return src
