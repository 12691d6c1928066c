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
import operator
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .ir import OPS as _IR_OPS
from .ir import Var, fmt_slice
from .type_rules import rule_for

KINDS = (
    "elementwise",
    "reduce",
    "scan",
    "matmul",
    "movement",
    "index",
    "create",
    "opaque",
    "control",
)


@dataclass(frozen=True)
class Reduction:
    """How a reduction (or a scan) combines elements: what every backend asks instead of the
    op's name.

    ``combine`` is the step, one of ``COMBINES``; ``index``: the result is the position of the
    first extreme (argmax, argmin), not its value; ``wide``: floats and complex values
    accumulate in float64 / complex128 (NumPy's sum of float32 rounds once per pairwise block,
    and tracekit's in a wider type; a product stays in its dtype, so that it overflows where
    NumPy's does); ``complex``: compiled loops may compute it for
    complex values (NumPy orders complex numbers lexicographically for extrema, and starts a
    complex product from its first element: those stay NumPy calls).

    >>> OPS["argmin"].reduction.identity(np.dtype(np.float32))
    inf
    """

    combine: str
    index: bool = False
    wide: bool = False
    complex: bool = True
    zero: float = -0.0  # where a float ``add`` starts: -0.0 + x is x for every x

    def __post_init__(self):
        if self.combine not in COMBINES:
            raise ValueError(f"unknown combine {self.combine!r}")

    @property
    def extremum(self) -> bool:
        """Whether the step keeps the larger or the smaller value (max, min, argmax, argmin)."""
        return self.combine in ("max", "min")

    def identity(self, dtype):
        """The value an accumulator of ``dtype`` starts from (a Python scalar). A float ``add``
        starts from ``zero``: a cumsum from -0.0 (NumPy's starts from x[0]), a sum from the
        zero NumPy's own sum of negative zeros gives (NumPy 2.4: +0.0, its identity)."""
        dtype = np.dtype(dtype)
        if self.combine == "add":
            return {"f": self.zero, "c": complex(self.zero, self.zero)}.get(dtype.kind, 0)
        if self.combine == "multiply":
            return 1
        if self.combine in ("or", "and"):
            return self.combine == "and"
        big = self.combine == "min"  # a min starts from the largest value
        if dtype.kind == "f":
            return math.inf if big else -math.inf
        if dtype.kind == "b":
            return big
        info = np.iinfo(dtype)
        return int(info.max if big else info.min)


# each combine, and the NumPy ufunc whose ``reduce``/``accumulate`` it is
COMBINES = {
    "add": "add",
    "multiply": "multiply",
    "or": "logical_or",
    "and": "logical_and",
    "max": "maximum",
    "min": "minimum",
}


def ufunc_method_op(ufunc_name: str, method: str) -> str | None:
    """The op ``np.<ufunc_name>.<method>`` is (``reduce``: a reduction, ``accumulate``: a
    scan), or None: ``ufunc_method_op("add", "reduce") == "sum"``."""
    slot = {"reduce": "reduction", "accumulate": "scan"}.get(method)
    for name, op in OPS.items() if slot else ():
        red = getattr(op, slot)
        if red is not None and not red.index and COMBINES[red.combine] == ufunc_name:
            return name
    return None


@dataclass
class Op:
    """One op. ``impl(*inputs, **attrs)`` is the NumPy reference; ``code(args, attrs)`` its source.

    ``ufunc`` is set for ops that are NumPy ufuncs (the numba backends emit them as scalar calls).
    ``vjp(g, out, *inputs, **attrs)`` returns one cotangent (or None) per input; it is written in
    NumPy and traced, so backward graphs are ordinary graphs. ``helper`` names a function in this
    module that ``.code`` must define before use.

    Capabilities, asked by every stage instead of the op's name: ``reduction`` / ``scan`` (a
    :class:`Reduction`: how it accumulates), ``view`` (NumPy computes it as a view of its one
    input, without copying: a backend can leave it to NumPy), ``may_view`` (its NumPy result
    may share memory with its first input: a write into that input can reach it), ``update``
    (a functionalised in-place write: its result is its first input with some elements
    replaced), ``unview`` (for a view: how a write into it reaches its input;
    ``unview(base, new, attrs)`` is the ``(op, inputs, attrs)`` of the node giving the input's
    new contents: ``x.T[...] = v`` writes ``transpose(v)`` into ``x``), ``may_copy`` (a view
    that NumPy makes only where its input's strides allow, else a copy: reshape),
    ``keeps_order`` (a view of its input's elements in the same order under another shape:
    reshape; a per-row value stays one when only unit dims change), ``store`` (an update that
    stores ``value`` at ``x[idx]``: index_update; a runner may write it into ``x``'s buffer when
    nothing reads ``x`` after it), ``uniform`` (every element of its result is one value of its
    attributes: full, which compiled loops compute like an elementwise op), ``compare`` (a
    comparison: the Python operator it is, ``operator.lt`` for less; NumPy 2 compares Python
    ints exactly, whatever the array's dtype), ``arithmetic`` (+, -, *, / or negation: computed
    in its operands' type, so float32 operands give float32 in compiled code too), ``complex``
    (compiled loops may compute it for complex values; False where NumPy's complex special
    values, inf and nan, differ from the compiled math libraries': those stay NumPy calls),
    ``lapack`` (a LAPACK routine NumPy calls, as ``np.linalg.inv``: no backend tiles it as a
    matrix product; it runs through NumPy on the host), ``whole_array`` (its NumPy function needs
    its inputs whole: sorting, order statistics, LAPACK; a target of chunked arrays, dask, runs
    it as one task), ``pads`` (its result is its one input with constant ``constant_value``
    rows around it, ``pad_width`` of them per dim: np.pad's constant mode; a kernel may read
    it through its input, at shifted indices, the constant outside them).
    ``type_rule(input_types, attrs)`` gives its output shapes and dtypes without
    running it (:mod:`tracekit.type_rules`; ``register`` fills in the op's family rule).
    ``check(node)`` raises ``ValueError`` where a node of the op is malformed in ways
    ``Graph.check`` cannot see (a loop: its body, and how the node's values match it).
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
    reduction: Reduction | None = None
    scan: Reduction | None = None
    view: bool = False
    may_view: bool = False
    update: bool = False
    check: Callable | None = None
    unview: Callable | None = None
    may_copy: bool = False
    keeps_order: bool = False
    store: bool = False
    uniform: bool = False
    compare: Callable | None = None
    arithmetic: bool = False
    complex: bool = True
    lapack: bool = False
    whole_array: bool = False
    pads: bool = False
    type_rule: Callable | None = None  # (input types, attrs) -> [(shape, dtype)]: type_rules.py

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None


OPS: dict[str, Op] = _IR_OPS  # the registry ir.py keeps for Graph.check; filled here


def register(op: Op) -> Op:
    if op.kind not in KINDS:
        raise ValueError(f"unknown kind {op.kind!r}")
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} declared twice")
    if op.type_rule is None:
        op.type_rule = rule_for(op)
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
        if x.dtype.kind in "fc" and not np.isfinite(x).all():  # nan/inf have no literal
            flat = ", ".join(py_literal(e) for e in x.ravel().tolist())
            return f"np.array([{flat}], dtype=np.{x.dtype.name}).reshape({x.shape!r})"
        if x.size == 0:
            return f"np.zeros({x.shape!r}, dtype=np.{x.dtype.name})"
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
    "arctan2 hypot copysign logaddexp heaviside float_power equal not_equal less less_equal "
    "greater greater_equal "
    "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor left_shift right_shift"
).split()

_COMPARE = {
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
}
_ARITHMETIC = ("add", "subtract", "multiply", "divide", "negative")
# complex functions whose special values (inf, nan) numba and libdevice compute differently
_COMPLEX_ON_HOST = (
    "exp exp2 expm1 log log2 log10 log1p sqrt cbrt sin cos tan arcsin arccos arctan sinh cosh "
    "tanh arcsinh arccosh arctanh power float_power rint"
).split()
for _name in UNARY_UFUNCS + BINARY_UFUNCS:
    _uf = _np_fn(_name)
    _caps = {
        "compare": _COMPARE.get(_name),
        "arithmetic": _name in _ARITHMETIC,
        "complex": _name not in _COMPLEX_ON_HOST,
    }
    _code = call_code(f"np.{_name}")
    register(Op(_name, "elementwise", _uf, _code, ufunc=_uf, doc=_uf.__doc__, **_caps))


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


def _unview_into(update: str):
    """``unview`` of a view written back by the update op ``update(base, new, **attrs)``."""
    return lambda base, new, attrs: (update, [base, new], dict(attrs))


register(Op("where", "elementwise", _where, call_code("np.where")))
register(Op("clip", "elementwise", np.clip, call_code("np.clip")))
register(
    Op(  # np.asarray: the input may be a Python scalar
        "astype",
        "elementwise",
        _astype,
        lambda a, at: f"np.asarray({a[0]}).astype({py_literal(at['dtype'])})",
    )
)
_REAL, _IMAG = _unview_into("update_real"), _unview_into("update_imag")
register(Op("real", "elementwise", _real, call_code("np.real"), may_view=True, unview=_REAL))
register(Op("imag", "elementwise", _imag, call_code("np.imag"), may_view=True, unview=_IMAG))
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


# mean, var and std have no Reduction: backends compute them from sums (backends/lowering.py)
_REDUCTIONS = {
    "sum": Reduction("add", wide=True, zero=float(np.add.reduce(np.array([-0.0, -0.0])))),
    "prod": Reduction("multiply", complex=False),
    "mean": None,
    "var": None,
    "std": None,
    "max": Reduction("max", complex=False),
    "min": Reduction("min", complex=False),
    "any": Reduction("or"),
    "all": Reduction("and"),
}
for _name, _red in _REDUCTIONS.items():
    register(Op(_name, "reduce", _reduce_impl(_np_fn(_name)), _reduce_code(_name), reduction=_red))
for _name, _combine in (("argmax", "max"), ("argmin", "min")):
    _red = Reduction(_combine, index=True, complex=False)
    register(Op(_name, "reduce", _np_fn(_name), _reduce_code(_name), reduction=_red))


def _scan_impl(fn):
    def impl(x, axis, dtype=None):
        return fn(x, axis=axis, dtype=dtype)

    return impl


_SCANS = {"cumsum": Reduction("add"), "cumprod": Reduction("multiply", complex=False)}
for _name, _red in _SCANS.items():
    register(Op(_name, "scan", _scan_impl(_np_fn(_name)), _reduce_code(_name), scan=_red))


# ---------------------------------------------------------------------- linear algebra
register(Op("matmul", "matmul", np.matmul, lambda a, at: f"({a[0]} @ {a[1]})", ufunc=np.matmul))
register(Op("dot", "matmul", np.dot, call_code("np.dot")))
register(
    Op(
        "einsum",
        "matmul",
        lambda *xs, subscripts: np.einsum(subscripts, *xs),
        lambda a, at: f"np.einsum({at['subscripts']!r}, {', '.join(a)})",
        may_view=True,  # one operand: 'ij->ji' is a view
    )
)
register(Op("tensordot", "matmul", np.tensordot, call_code("np.tensordot")))


def _cholesky(a, upper=False):
    return np.linalg.cholesky(a, upper=upper)


# LAPACK through NumPy, batched over leading dimensions (``solve``: ``b`` is a vector only when
# it is 1-d, as in NumPy 2)
_LAPACK = {"lapack": True, "whole_array": True}
register(Op("inv", "matmul", np.linalg.inv, call_code("np.linalg.inv"), **_LAPACK))
register(Op("solve", "matmul", np.linalg.solve, call_code("np.linalg.solve"), **_LAPACK))
register(Op("det", "matmul", np.linalg.det, call_code("np.linalg.det"), **_LAPACK))
register(Op("cholesky", "matmul", _cholesky, call_code("np.linalg.cholesky"), **_LAPACK))


# ---------------------------------------------------------------------- movement
def _concatenate(*xs, axis):
    return np.concatenate(xs, axis=axis)


def _pad(x, pad_width, constant_value):
    return np.pad(x, pad_width, mode="constant", constant_values=constant_value)


def _reshape_back(base, new, attrs):
    return "reshape", [new], {"shape": base.shape}


def _transpose_back(base, new, attrs):
    return "transpose", [new], {"axes": tuple(int(i) for i in np.argsort(attrs["axes"]))}


def strides_only(shape, dtype) -> np.ndarray:
    """A read-only C-ordered array of ``shape`` and ``dtype`` over one element of memory: a
    view op's ``impl`` applied to it computes the view's strides and offset, and nothing
    reads its elements (what a view of a value would be, without the value).

    >>> strides_only((2, 3), np.float64).T.strides
    (8, 24)
    """
    dtype = np.dtype(dtype)
    strides, step = [], dtype.itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    a = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, tuple(reversed(strides)))
    a.flags.writeable = False
    return a


_VIEW = {"view": True, "may_view": True}
_RESHAPE = {"unview": _reshape_back, "may_copy": True, "keeps_order": True}
register(Op("reshape", "movement", np.reshape, call_code("np.reshape"), **_VIEW, **_RESHAPE))
register(
    Op(
        "transpose",
        "movement",
        np.transpose,
        call_code("np.transpose"),
        **_VIEW,
        unview=_transpose_back,
    )
)
register(Op("broadcast_to", "movement", np.broadcast_to, call_code("np.broadcast_to"), **_VIEW))
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
            f"np.pad({a[0]}, {at['pad_width']!r}, "
            f"constant_values={py_literal(at['constant_value'])})"
        ),
        pads=True,
    )
)


# ---------------------------------------------------------------------- indexing
# An index is a tuple of: int, slice, None (new axis), Ellipsis, or "@k" for the k-th array
# input after the indexed array (integer-array or boolean indices).
def build_index(idx, arrays):
    """Replace ``"@k"`` placeholders of a stored index by the arrays."""
    if not arrays and type(idx) is tuple:  # no placeholder (each names one of the arrays)
        return idx
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
    rest = ", ".join(a[2:]) + ", " if a[2:] else ""
    return f"index_update({a[0]}, {a[1]}, {rest}idx={_idx_literal(at['idx'])})"


def _idx_literal(idx):
    return py_literal(tuple(idx))


_INDEX = {"view": True, "may_view": True, "unview": _unview_into("index_update")}
register(Op("index", "index", index, _index_code, **_INDEX))
for _name, _impl, _code in (
    ("index_update", index_update, _index_update_code),
    ("update_real", update_real, call_code("update_real")),
    ("update_imag", update_imag, call_code("update_imag")),
):
    _store = _name == "index_update"
    register(Op(_name, "index", _impl, _code, helper=_impl, update=True, store=_store))


# ---------------------------------------------------------------------- creation
def _full(shape, fill_value, dtype):
    return np.full(shape, fill_value, dtype=dtype)


def _arange(start, stop, step, dtype):
    return np.arange(start, stop, step, dtype=dtype)


def _linspace(start, stop, num, endpoint, dtype):
    return np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)


def _eye(N, M, k, dtype):
    return np.eye(N, M, k, dtype=dtype)


register(Op("full", "create", _full, call_code("np.full"), uniform=True))
register(Op("arange", "create", _arange, call_code("np.arange")))
register(Op("linspace", "create", _linspace, call_code("np.linspace")))
register(Op("eye", "create", _eye, call_code("np.eye")))


# ---------------------------------------------------------------------- order, counting, signal
# Their NumPy functions run as they are (one call between kernels on every target); the plan
# says so. ``q`` of a quantile is a Python float or nested tuples of them; ``q_dtype``: the dtype
# NumPy sees it in (None: a Python float, weak under NEP 50), which decides the result's dtype.
def _quantile(x, q, q_dtype=None, axis=None, method="linear", keepdims=False):
    q = q if q_dtype is None else np.asarray(q, dtype=q_dtype)
    return np.quantile(x, q, axis=axis, method=method, keepdims=keepdims)


def _quantile_code(a, at):
    q = (
        py_literal(at["q"])
        if at["q_dtype"] is None
        else f"np.asarray({at['q']!r}, {at['q_dtype']!r})"
    )
    kw = {k: v for k, v in at.items() if k not in ("q", "q_dtype")}
    return call_code("np.quantile")([a[0], q], kw)


def _histogram(a, *weights, bins, range, density):
    w = weights[0] if weights else None
    bins = bins if isinstance(bins, int) else np.asarray(bins)
    return np.histogram(a, bins, range, density=density, weights=w)


def _histogram_code(a, at):
    bins = at["bins"] if isinstance(at["bins"], int) else f"np.array({list(at['bins'])!r})"
    w = f", weights={a[1]}" if len(a) > 1 else ""
    return (
        f"np.histogram({a[0]}, {bins}, {py_literal(at['range'])}, "
        f"density={py_literal(at['density'])}{w})"
    )


def _interp(x, xp, fp, left=None, right=None):
    return np.interp(x, xp, fp, left, right)


_WHOLE = {"whole_array": True}
register(Op("sort", "movement", np.sort, call_code("np.sort"), **_WHOLE))
register(Op("argsort", "index", np.argsort, call_code("np.argsort"), **_WHOLE))
register(Op("searchsorted", "index", np.searchsorted, call_code("np.searchsorted"), **_WHOLE))
register(Op("median", "reduce", np.median, call_code("np.median"), **_WHOLE))
register(Op("quantile", "reduce", _quantile, _quantile_code, **_WHOLE))
register(Op("histogram", "reduce", _histogram, _histogram_code, **_WHOLE))
register(Op("interp", "index", _interp, call_code("np.interp"), **_WHOLE))
register(Op("convolve", "matmul", np.convolve, call_code("np.convolve"), **_WHOLE))


def helper_source(op: Op) -> str | None:
    """Source of the helper function ``.code`` needs for ``op`` (with its own helpers)."""
    if op.helper is None:
        return None
    src = inspect.getsource(op.helper)
    if "build_index" in src and op.helper is not build_index:
        src = inspect.getsource(build_index) + "\n\n" + src
    return src


# ---------------------------------------------------------------- ops for autodiff and python ops
def index_add(x, value, *arrays, idx):
    """A copy of ``x`` with ``value`` added at ``x[idx]``, repeated indices accumulating
    (``np.add.at``): the scatter-add that the gradient of a gather is."""
    x = np.array(x, copy=True)
    np.add.at(x, build_index(idx, arrays), value)
    return x


def _index_add_code(a, at):
    rest = ", ".join(a[2:]) + ", " if a[2:] else ""
    return f"index_add({a[0]}, {a[1]}, {rest}idx={_idx_literal(at['idx'])})"


register(Op("index_add", "index", index_add, _index_add_code, helper=index_add))
# ``python_op`` (an opaque user function) is declared beside its PyOp, in tracekit/pyop.py


# ---------------------------------------------------------------------- gradient rules
# ``vjp(g, out, *inputs, **attrs)`` returns one cotangent (or None: no gradient) per input.
# Rules are NumPy code run while tracing the backward graph (tracekit.autodiff): ``g``, ``out``
# and the Var inputs are TracedArrays, literal inputs are plain scalars; for an op with several
# outputs ``g`` and ``out`` are tuples (a missing cotangent is None). The engine sums each
# cotangent back over broadcast axes and casts it to its input's dtype (complex to real takes the
# real part), so elementwise rules may return cotangents of the output's broadcast shape.
#
# Conventions (documented behaviour):
# - Complex numbers follow JAX: the cotangent of a holomorphic op is ``g * f'(z)`` (no conjugate);
#   for a real-valued f of complex z, tk.grad gives df/dx - i df/dy.
# - maximum/minimum/fmax/fmin: at ties the gradient is split evenly between the two inputs; a NaN
#   that maximum/minimum propagates gets the gradient (fmax/fmin: the non-NaN input gets it).
# - max/min reductions: split evenly among all elements equal to the result (NaN: among the NaNs).
# - clip(x, lo, hi) = minimum(maximum(x, lo), hi): x gets the gradient inside the closed interval
#   [lo, hi] (boundaries included), lo below it, hi above it.
# - abs at 0, sqrt at 0, ...: what the formula gives (abs: 0; sqrt: inf), as in JAX.
# - prod: exact with zeros (products of the other elements, no division). cumprod: exact with
#   zeros along axes up to NONDIV_CUMPROD_LIMIT elements of work, else g * reverse-cumsum / x.
# - index_update (x[idx] = v) with repeated indices: every repeated position of v receives the
#   gradient of the element it was written to (NumPy keeps only one of the writes).
# - NON_DIFFERENTIABLE ops (comparisons, logical and bitwise ops, rounding, sign, argmax, any/all,
#   creation ops...) have zero gradient almost everywhere; the engine propagates nothing through
#   them. Integer and bool values never carry cotangents.
NON_DIFFERENTIABLE = frozenset(
    (
        "sign floor ceil trunc rint logical_not isnan isinf isfinite signbit invert floor_divide "
        "heaviside "
        "equal not_equal less less_equal greater greater_equal logical_and logical_or logical_xor "
        "bitwise_and bitwise_or bitwise_xor left_shift right_shift any all argmax argmin "
        "argsort searchsorted full arange linspace eye"
    ).split()
)
NONDIV_CUMPROD_LIMIT = 1 << 22


class Tracer:
    """A value being traced, as gradient rules see it: they are NumPy code run on such values
    (``tracer.TracedArray`` is one), and record what NumPy has no spelling of with ``bind``."""

    __slots__ = ()

    def bind(self, op: str, inputs, attrs):
        """Record ``op(*inputs, **attrs)`` in this value's trace; its result."""
        raise NotImplementedError


def _traced(x) -> bool:
    return isinstance(x, Tracer)


def _diff(x) -> bool:
    """Can ``x`` carry a cotangent (a traced float or complex value)?"""
    return _traced(x) and x.dtype.kind in "fc"


def _emit(op, inputs, like, **attrs):
    """Record ``op`` (for what NumPy has no spelling of) in the trace ``like`` belongs to."""
    if not isinstance(like, Tracer):
        raise TypeError(f"{op}: gradient rules record ops next to a traced value, got {like!r}")
    return like.bind(op, inputs, attrs)


def _zeros(like, shape, dtype):
    dtype = np.dtype(dtype)
    z = np.zeros((), dtype)[()]
    return _emit("full", [], like, shape=tuple(shape), fill_value=z, dtype=dtype)


def _iota(like, n):
    return _emit("arange", [], like, start=0, stop=int(n), step=1, dtype=np.dtype(np.int64))


def _conj(x):
    return np.conjugate(x) if np.iscomplexobj(x) else x


def _axes(axis, ndim):
    return tuple(range(ndim)) if axis is None else tuple(axis)


def _keep(g, ndim, axis, keepdims):
    """A reduction's result (or cotangent) reshaped to broadcast against its input: reduced
    axes kept as size 1 (leading ones need not be)."""
    axes = sorted(_axes(axis, ndim))
    if keepdims or axes == list(range(len(axes))):
        return g
    shape = list(np.shape(g))
    for a in axes:
        shape.insert(a, 1)
    return np.reshape(g, tuple(shape))


def sum_to(c, shape):
    """Sum ``c`` over the axes that broadcasting added or stretched, to ``shape``."""
    shape = tuple(shape)
    cs = np.shape(c)
    if cs == shape:
        return c
    lead = len(cs) - len(shape)
    if lead < 0 or any(s not in (1, d) for s, d in zip(shape, cs[lead:])):
        return np.broadcast_to(c, shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and cs[lead + i] != 1
    )
    if axes:
        c = np.sum(c, axis=axes, keepdims=True)
    return np.reshape(c, shape)


# -- elementwise: unary. f(g, y, x) -> cotangent of x (y is the output)
_LN2, _LN10 = math.log(2.0), math.log(10.0)


def _abs_vjp(g, y, x):
    if np.iscomplexobj(x):
        return np.where(y == 0, 0, g * np.conjugate(x) / np.where(y == 0, 1, y))
    return g * np.sign(x)


_UNARY_VJPS = {
    "negative": lambda g, y, x: -g,
    "positive": lambda g, y, x: g,
    "absolute": _abs_vjp,
    "exp": lambda g, y, x: g * y,
    "exp2": lambda g, y, x: g * y * _LN2,
    "expm1": lambda g, y, x: g * (y + 1),
    "log": lambda g, y, x: g / x,
    "log2": lambda g, y, x: g / (x * _LN2),
    "log10": lambda g, y, x: g / (x * _LN10),
    "log1p": lambda g, y, x: g / (x + 1),
    "sqrt": lambda g, y, x: g / (y * 2),
    "cbrt": lambda g, y, x: g / (y * y * 3),
    "square": lambda g, y, x: g * (x * 2),
    "reciprocal": lambda g, y, x: -g * (y * y),
    "sin": lambda g, y, x: g * np.cos(x),
    "cos": lambda g, y, x: -g * np.sin(x),
    "tan": lambda g, y, x: g * (y * y + 1),
    "arcsin": lambda g, y, x: g / np.sqrt(1 - x * x),
    "arccos": lambda g, y, x: -g / np.sqrt(1 - x * x),
    "arctan": lambda g, y, x: g / (x * x + 1),
    "sinh": lambda g, y, x: g * np.cosh(x),
    "cosh": lambda g, y, x: g * np.sinh(x),
    "tanh": lambda g, y, x: g * (1 - y * y),
    "arcsinh": lambda g, y, x: g / np.sqrt(x * x + 1),
    "arccosh": lambda g, y, x: g / (np.sqrt(x - 1) * np.sqrt(x + 1)),
    "arctanh": lambda g, y, x: g / (1 - x * x),
    "conjugate": lambda g, y, x: _conj(g),
}


def _unary_rule(f):
    def vjp(g, out, x):
        return (f(g, out, x),)

    vjp.__name__ = f"{getattr(f, '__name__', 'unary')}_vjp"
    return vjp


for _name, _f in _UNARY_VJPS.items():
    defvjp(_name)(_unary_rule(_f))


# -- elementwise: binary. rule(g, y, a, b) -> (cotangent of a, cotangent of b)
@defvjp("add")
def _add_vjp(g, y, a, b):
    return g, g


@defvjp("subtract")
def _subtract_vjp(g, y, a, b):
    return g, (-g if _diff(b) else None)


@defvjp("multiply")
def _multiply_vjp(g, y, a, b):
    return (g * b if _diff(a) else None), (g * a if _diff(b) else None)


@defvjp("divide")
def _divide_vjp(g, y, a, b):
    ga = g / b
    return ga, (-ga * y if _diff(b) else None)


@defvjp("remainder")
def _remainder_vjp(g, y, a, b):
    return g, (-g * np.floor_divide(a, b) if _diff(b) else None)


@defvjp("float_power")
@defvjp("power")
def _power_vjp(g, y, x, p):
    gx = gp = None
    if _diff(x):
        if not _traced(p):
            if p == 0:
                gx = None
            elif p == 1:
                gx = g
            elif p == 2:
                gx = g * (x * 2)
            else:
                gx = g * (x ** (p - 1) * p)
        else:
            gx = g * np.where(p == 0, 0, p * x ** (p - 1))
    if _diff(p):
        gp = g * y * np.log(np.where(x == 0, 1, x))
    return gx, gp


def _tie_split(g, win_a, win_b, tie):
    half = g * 0.5
    ga = np.where(win_a, g, np.where(tie, half, 0))
    gb = np.where(win_b, g, np.where(tie, half, 0))
    return ga, gb


def _isnan(x):
    if _traced(x):
        return np.isnan(x) if x.dtype.kind in "fc" else False
    return np.isnan(x) if isinstance(x, float | complex | np.inexact) else False


@defvjp("maximum")
def _maximum_vjp(g, y, a, b):
    return _tie_split(g, (a > b) | _isnan(a), (b > a) | _isnan(b), a == b)


@defvjp("minimum")
def _minimum_vjp(g, y, a, b):
    return _tie_split(g, (a < b) | _isnan(a), (b < a) | _isnan(b), a == b)


@defvjp("fmax")
def _fmax_vjp(g, y, a, b):
    na, nb = _isnan(a), _isnan(b)
    return _tie_split(g, (a > b) | (nb & ~na), (b > a) | (na & ~nb), a == b)


@defvjp("fmin")
def _fmin_vjp(g, y, a, b):
    na, nb = _isnan(a), _isnan(b)
    return _tie_split(g, (a < b) | (nb & ~na), (b < a) | (na & ~nb), a == b)


@defvjp("arctan2")
def _arctan2_vjp(g, y, a, b):
    d = g / (a * a + b * b)
    return d * b, -d * a


@defvjp("hypot")
def _hypot_vjp(g, y, a, b):
    return g * a / y, g * b / y


@defvjp("copysign")
def _copysign_vjp(g, y, a, b):
    return g * (np.copysign(1.0, a) * np.copysign(1.0, b)), None


@defvjp("logaddexp")
def _logaddexp_vjp(g, y, a, b):
    return g * np.exp(a - y), g * np.exp(b - y)


# -- elementwise: the rest
@defvjp("where")
def _where_vjp(g, y, cond, a, b):
    return None, np.where(cond, g, 0), np.where(cond, 0, g)


@defvjp("clip")
def _clip_vjp(g, y, x, lo, hi):
    m = x if lo is None else np.maximum(x, lo)
    g_m, g_lo, g_hi = g, None, None
    if hi is not None:
        over = m > hi
        g_m, g_hi = np.where(over, 0, g), np.where(over, g, 0)
    g_x = g_m
    if lo is not None:
        inside = x >= lo
        g_x, g_lo = np.where(inside, g_m, 0), np.where(inside, 0, g_m)
    return g_x, g_lo, g_hi


@defvjp("astype")
def _astype_vjp(g, y, x, dtype):
    return (g,)


@defvjp("real")
def _real_vjp(g, y, x):
    return (g,)


@defvjp("imag")
def _imag_vjp(g, y, x):
    return (g * -1j,)


@defvjp("angle")
def _angle_vjp(g, y, x, deg=False):
    if not np.iscomplexobj(x):
        return (None,)
    scale = 180.0 / math.pi if deg else 1.0
    r2 = np.real(x * np.conjugate(x))
    return (g * (-1j * scale) * np.conjugate(x) / r2,)


# -- reductions and scans
def _count(shape, axes):
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


@defvjp("sum")
def _sum_vjp(g, y, x, axis=None, keepdims=False, dtype=None):
    return (np.broadcast_to(_keep(g, x.ndim, axis, keepdims), x.shape),)


@defvjp("mean")
def _mean_vjp(g, y, x, axis=None, keepdims=False, dtype=None):
    n = _count(x.shape, _axes(axis, x.ndim))
    return (np.broadcast_to(_keep(g, x.ndim, axis, keepdims) / max(n, 1), x.shape),)


@defvjp("prod")
def _prod_vjp(g, y, x, axis=None, keepdims=False, dtype=None):
    axes = _axes(axis, x.ndim)
    if not axes:
        return (g,)
    if x.size == 0:
        return (_zeros(g, x.shape, g.dtype),)
    rest = [i for i in range(x.ndim) if i not in axes]
    perm = rest + list(axes)
    rest_shape = tuple(x.shape[i] for i in rest)
    flat = np.reshape(np.transpose(x, tuple(perm)), rest_shape + (_count(x.shape, axes),))
    others = _exclusive_cumprod(flat) * _exclusive_cumprod(flat[..., ::-1])[..., ::-1]
    gk = np.reshape(g, rest_shape + (1,))
    d = np.reshape(gk * others, tuple(x.shape[i] for i in perm))
    return (np.transpose(d, tuple(int(i) for i in np.argsort(perm))),)


def _exclusive_cumprod(x):
    """[1, x0, x0*x1, ...] along the last axis (no division: exact with zeros)."""
    ones = np.ones_like(x[..., :1])
    return np.cumprod(np.concatenate([ones, x[..., :-1]], axis=-1), axis=-1)


def _var_common(g, x, axis, keepdims, ddof):
    axes = _axes(axis, x.ndim)
    n = _count(x.shape, axes) - ddof
    u = _conj(x - np.mean(x, axis=axes, keepdims=True))
    return _keep(g, x.ndim, axis, keepdims), u, (1.0 / n if n > 0 else math.inf)


# With no more elements than ddof, var and std are NaN or inf whatever x is: a constant, whose
# gradient is zero (so a zero cotangent, the value overwritten, gives zero, not 0 * inf = NaN).
@defvjp("var")
def _var_vjp(g, y, x, axis=None, keepdims=False, dtype=None, ddof=0):
    gk, u, inv_n = _var_common(g, x, axis, keepdims, ddof)
    if math.isinf(inv_n):
        return (np.zeros_like(x),)
    return (gk * (2.0 * inv_n) * u,)


@defvjp("std")
def _std_vjp(g, y, x, axis=None, keepdims=False, dtype=None, ddof=0):
    gk, u, inv_n = _var_common(g, x, axis, keepdims, ddof)
    if math.isinf(inv_n):
        return (np.zeros_like(x),)
    return (gk * inv_n / _keep(y, x.ndim, axis, keepdims) * u,)


def _minmax_vjp(g, y, x, axis=None, keepdims=False, dtype=None):
    yk = _keep(y, x.ndim, axis, keepdims)
    hit = x == yk
    if x.dtype.kind in "fc":
        hit = hit | (np.isnan(x) & np.isnan(yk))
    count = np.sum(hit.astype(g.dtype), axis=_axes(axis, x.ndim), keepdims=True)
    return (np.where(hit, _keep(g, x.ndim, axis, keepdims) / count, 0),)


defvjp("max")(_minmax_vjp)
defvjp("min")(_minmax_vjp)


def _flip_axis(x, axis):
    return x[(slice(None),) * axis + (slice(None, None, -1),)]


@defvjp("cumsum")
def _cumsum_vjp(g, y, x, axis, dtype=None):
    return (_flip_axis(np.cumsum(_flip_axis(g, axis), axis=axis), axis),)


@defvjp("cumprod")
def _cumprod_vjp(g, y, x, axis, dtype=None):
    n = x.shape[axis]
    if x.size == 0:
        return (_zeros(g, x.shape, g.dtype),)
    xm, gm = np.moveaxis(x, axis, -1), np.moveaxis(g, axis, -1)
    if x.size * n <= NONDIV_CUMPROD_LIMIT:
        # d out_i / d x_k = prod_{j<k} x_j * prod_{k<j<=i} x_j  (i >= k), without division
        k = np.reshape(_iota(g, n), (n, 1))
        j = np.reshape(_iota(g, n), (1, n))
        between = np.cumprod(np.where(j > k, xm[..., None, :], 1), axis=-1)  # [..., k, i]
        s = np.sum(np.where(j >= k, between, 0) * gm[..., None, :], axis=-1)
        d = _exclusive_cumprod(xm) * s
    else:
        ym = np.moveaxis(y, axis, -1)
        d = _flip_axis(np.cumsum(_flip_axis(gm * ym, xm.ndim - 1), axis=-1), xm.ndim - 1) / xm
    return (np.moveaxis(d, -1, axis),)


# -- linear algebra
@defvjp("matmul")
def _matmul_vjp(g, y, a, b):
    a2 = np.reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = np.reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    gshape = np.shape(g)
    if a.ndim == 1:
        gshape = gshape[:-1] + (1,) + gshape[-1:] if b.ndim > 1 else gshape + (1,)
    if b.ndim == 1:
        gshape = gshape + (1,)
    g2 = np.reshape(g, gshape)
    ga = gb = None
    if _diff(a):
        ga = np.reshape(sum_to(g2 @ np.swapaxes(b2, -1, -2), a2.shape), a.shape)
    if _diff(b):
        gb = np.reshape(sum_to(np.swapaxes(a2, -1, -2) @ g2, b2.shape), b.shape)
    return ga, gb


@defvjp("tensordot")
def _tensordot_vjp(g, y, a, b, axes):
    ax_a, ax_b = (tuple(int(i) for i in ax) for ax in axes)
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    na, nb = len(free_a), len(free_b)
    ga = gb = None
    if _diff(a):
        t = np.tensordot(g, b, axes=(tuple(range(na, na + nb)), tuple(free_b)))
        order = free_a + [ax_a[ax_b.index(i)] for i in sorted(ax_b)]
        ga = np.transpose(t, tuple(int(i) for i in np.argsort(order)))
    if _diff(b):
        t = np.tensordot(a, g, axes=(tuple(free_a), tuple(range(na))))
        order = [ax_b[ax_a.index(i)] for i in sorted(ax_a)] + free_b
        gb = np.transpose(t, tuple(int(i) for i in np.argsort(order)))
    return ga, gb


@defvjp("dot")
def _dot_vjp(g, y, a, b):
    if a.ndim == 0 or b.ndim == 0:  # a product with a scalar
        return OPS["multiply"].vjp(g, y, a, b)
    axes = ((a.ndim - 1,), (0,)) if b.ndim == 1 else ((a.ndim - 1,), (b.ndim - 2,))
    return _tensordot_vjp(g, y, a, b, axes=axes)


def _einsum_terms(subscripts, shapes):
    """Explicit per-operand and output subscripts (ellipses spelled out), and spare letters."""
    import string

    lhs, arrow, rhs = subscripts.partition("->")
    terms = lhs.split(",")
    pool = [c for c in string.ascii_letters if c not in subscripts]
    n_ell = max(
        [len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes) if "..." in t] or [0]
    )
    ell, pool = pool[:n_ell], pool[n_ell:]

    def expand(t, nd):
        if "..." not in t:
            return t
        k = nd - len(t.replace("...", ""))
        return t.replace("...", "".join(ell[n_ell - k :]))

    terms = [expand(t, len(s)) for t, s in zip(terms, shapes)]
    if arrow:
        out = rhs.replace("...", "".join(ell))
    else:
        letters = "".join(terms)
        out = "".join(ell) + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell)
        )
    return terms, out, pool


@defvjp("einsum")
def _einsum_vjp(g, y, *xs, subscripts):
    terms, out, pool = _einsum_terms(subscripts, [np.shape(x) for x in xs])
    sizes = {}
    for t, x in zip(terms, xs):
        for c, d in zip(t, np.shape(x)):
            sizes[c] = max(sizes.get(c, 1), d)
    cots = []
    for k, (t, x) in enumerate(zip(terms, xs)):
        if not _diff(x):
            cots.append(None)
            continue
        others = [terms[j] for j in range(len(xs)) if j != k] + [out]
        arrays = [xs[j] for j in range(len(xs)) if j != k] + [g]
        seen, res, spare = set("".join(others)), "", list(pool)
        for c, d in zip(t, np.shape(x)):
            if c in res:  # a repeated index (a diagonal): put the gradient on the diagonal
                f = spare.pop()
                res += f
                others.append(c + f)
                arrays.append(_emit("eye", [], g, N=d, M=None, k=0, dtype=g.dtype))
            else:
                res += c
            if c not in seen:  # summed over in this operand only: broadcast the gradient
                seen.add(c)
                others.append(c)
                arrays.append(np.ones_like(g, shape=(d,)))
        cots.append(np.einsum(",".join(others) + "->" + res, *arrays))
    return tuple(cots)


# -- movement
@defvjp("reshape")
def _reshape_vjp(g, y, x, shape):
    return (np.reshape(g, x.shape),)


@defvjp("transpose")
def _transpose_vjp(g, y, x, axes):
    return (np.transpose(g, tuple(int(i) for i in np.argsort(axes))),)


@defvjp("broadcast_to")
def _broadcast_to_vjp(g, y, x, shape):
    return (sum_to(g, x.shape),)


@defvjp("concatenate")
def _concatenate_vjp(g, y, *xs, axis):
    cots, start = [], 0
    for x in xs:
        n = np.shape(x)[axis]
        cots.append(g[(slice(None),) * axis + (slice(start, start + n),)])
        start += n
    return tuple(cots)


@defvjp("tile")
def _tile_vjp(g, y, x, reps):
    reps = (reps,) if isinstance(reps, int | np.integer) else tuple(reps)
    d = max(x.ndim, len(reps))
    xs = (1,) * (d - x.ndim) + tuple(x.shape)
    rs = (1,) * (d - len(reps)) + reps
    inter = tuple(v for r, s in zip(rs, xs) for v in (r, s))
    summed = np.sum(np.reshape(g, inter), axis=tuple(range(0, 2 * d, 2)))
    return (np.reshape(summed, x.shape),)


@defvjp("repeat")
def _repeat_vjp(g, y, x, repeats, axis=None):
    shape = (x.size,) if axis is None else tuple(x.shape)
    ax = 0 if axis is None else axis
    n = shape[ax]
    reps = repeats if isinstance(repeats, int | np.integer) else tuple(repeats)
    if not isinstance(reps, tuple) or len(reps) == 1:
        r = int(reps if not isinstance(reps, tuple) else reps[0])
        split = shape[:ax] + (n, r) + shape[ax + 1 :]
        d = np.sum(np.reshape(g, split), axis=ax + 1)
    else:
        src = _emit("repeat", [_iota(g, n)], g, repeats=reps, axis=None)
        z = _zeros(g, shape, g.dtype)
        d = _emit("index_add", [z, g, src], g, idx=(slice(None),) * ax + ("@0",))
    return (np.reshape(d, x.shape),)


@defvjp("roll")
def _roll_vjp(g, y, x, shift, axis=None):
    back = -shift if isinstance(shift, int | np.integer) else tuple(-s for s in shift)
    return (np.roll(g, back, axis),)


@defvjp("pad")
def _pad_vjp(g, y, x, pad_width, constant_value):
    return (g[tuple(slice(lo, lo + n) for (lo, _), n in zip(pad_width, x.shape))],)


# -- indexing
@dataclass(frozen=True)
class Scattered:
    """A cotangent of shape ``shape`` that is zero but at ``[idx]`` (with index ``arrays``),
    where it is ``value``: what the gradient of an index gives. The engine adds it into a
    cotangent it already has at ``[idx]`` alone (:meth:`added_to`: work of the slice, not of
    the whole array, in each iteration of a loop reading ``a[t]``) and makes the whole array
    (:meth:`dense`) only where it is the first cotangent of its value and is read."""

    value: Tracer
    arrays: tuple
    idx: tuple
    shape: tuple

    @property
    def dtype(self):
        return self.value.dtype

    def dense(self):
        """The cotangent as an array: zeros, ``value`` written at ``[idx]``."""
        z = _zeros(self.value, self.shape, self.value.dtype)
        return self.added_to(z, zero_there=True)

    def added_to(self, total, zero_there: bool = False):
        """``total`` with ``value`` added at ``[idx]``: a read of the slice, a sum and a
        store into it (a runner stores in place where ``total`` is not read again); a
        scatter-add where index arrays may repeat a position. ``zero_there``: ``total`` is
        zero at ``[idx]``, the store alone does."""
        g = self.value
        if self.arrays:
            return _emit("index_add", [total, g, *self.arrays], g, idx=self.idx)
        if not zero_there:
            g = _emit("index", [total], g, idx=self.idx) + g
        return _emit("index_update", [total, g], g, idx=self.idx)

    def cast(self, fit):
        """This cotangent with ``fit`` (a cast, a real part) applied to its value."""
        return Scattered(fit(self.value), self.arrays, self.idx, self.shape)


@defvjp("index")
def _index_vjp(g, y, x, *arrays, idx):
    return (Scattered(g, tuple(arrays), tuple(idx), tuple(x.shape)),) + (None,) * len(arrays)


@defvjp("index_update")
def _index_update_vjp(g, y, x, value, *arrays, idx):
    # the read of g[idx] first: a runner then clears g[idx] in place, not in a copy of g
    gv = _emit("index", [g, *arrays], g, idx=idx) if _diff(value) else None
    gx = _emit("index_update", [g, 0, *arrays], g, idx=idx)
    return (gx, gv) + (None,) * len(arrays)


@defvjp("index_add")
def _index_add_vjp(g, y, x, value, *arrays, idx):
    gv = _emit("index", [g, *arrays], g, idx=idx) if _diff(value) else None
    return (g, gv) + (None,) * len(arrays)


@defvjp("update_real")
def _update_real_vjp(g, y, x, value):
    return np.imag(g) * 1j, np.real(g)


@defvjp("update_imag")
def _update_imag_vjp(g, y, x, value):
    return np.real(g), -np.imag(g)


# -- linear algebra: LAPACK. Complex values follow the convention above (transposes, no
# conjugates): the cotangent of a holomorphic function.
def _mT(x):
    return np.swapaxes(x, -1, -2)


@defvjp("inv")
def _inv_vjp(g, y, a):
    yt = _mT(y)
    return (-(yt @ g @ yt),)


@defvjp("solve")
def _solve_vjp(g, y, a, b):
    vector = np.ndim(b) == 1
    g2, y2 = (g[..., None], y[..., None]) if vector else (g, y)
    gb2 = np.linalg.solve(_mT(a), g2)
    ga = sum_to(-(gb2 @ _mT(y2)), np.shape(a)) if _diff(a) else None
    gb = sum_to(gb2[..., 0] if vector else gb2, np.shape(b)) if _diff(b) else None
    return ga, gb


@defvjp("det")
def _det_vjp(g, y, a):
    return ((g * y)[..., None, None] * _mT(np.linalg.inv(a)),)


@defvjp("cholesky")
def _cholesky_vjp(g, y, a, upper=False):
    """NumPy reads one triangle of ``a`` (the lower one; the upper one for ``upper``): the other
    triangle gets no gradient. With ``L`` the factor and ``S = L^-T Phi(L^T g) L^-1`` (``Phi``: the
    lower triangle, its diagonal halved), an element below the diagonal gets ``S + S^T``."""
    if a.dtype.kind == "c":
        raise NotImplementedError("the gradient of np.linalg.cholesky of complex matrices")
    low, gl = (_mT(y), _mT(g)) if upper else (y, g)
    n = a.shape[-1]
    below, diag = np.tri(n, k=-1, dtype=bool), np.eye(n, dtype=bool)
    m = _mT(low) @ gl
    phi = np.where(below, m, np.where(diag, m * 0.5, 0))
    x = np.linalg.solve(_mT(low), phi)  # L^-T Phi
    s = _mT(np.linalg.solve(_mT(low), _mT(x)))  # L^-T Phi L^-1
    ga = np.where(below, s + _mT(s), np.where(diag, s, 0))
    return (_mT(ga) if upper else ga,)


# -- order statistics
def _take_along(x, idx, axis):
    """``np.take_along_axis(x, idx, axis)`` as an index (``idx`` of ``x``'s shape there)."""
    grid = []
    for i, n in enumerate(np.shape(idx)):
        if i == axis % len(np.shape(idx)):
            grid.append(idx)
        else:
            shape = [1] * len(np.shape(idx))
            shape[i] = n
            grid.append(np.arange(n).reshape(shape))
    return x[tuple(grid)]


@defvjp("sort")
def _sort_vjp(g, y, x, axis=-1, kind=None):
    order = np.argsort(x, axis=axis, kind="stable")
    return (_take_along(g, np.argsort(order, axis=axis, kind="stable"), axis),)


def _quantile_weights(n, qs, method):
    """Weights on the sorted values giving each quantile (a static (len(qs), n) array)."""
    w = np.zeros((len(qs), n))
    for i, q in enumerate(qs):
        v = n * q - q  # NumPy's virtual index of the linear method
        lo, hi = min(int(math.floor(v)), n - 1), min(int(math.ceil(v)), n - 1)
        if method == "linear":
            w[i, lo] += 1 - (v - lo)
            w[i, min(lo + 1, n - 1)] += v - lo
        elif method in ("lower", "higher", "nearest"):
            k = {"lower": lo, "higher": hi, "nearest": min(int(np.around(v)), n - 1)}[method]
            w[i, k] = 1.0
        elif method == "midpoint":
            w[i, lo] += 0.5
            w[i, hi] += 0.5
        else:
            raise NotImplementedError(f"the gradient of np.quantile(method={method!r})")
    return w


def _order_stat_vjp(g, x, qs, axis, keepdims, method):
    axes = tuple(sorted(_axes(axis, x.ndim)))
    rest = [i for i in range(x.ndim) if i not in axes]
    n = _count(x.shape, axes)
    if n == 0 or x.size == 0:
        return (_zeros(g, x.shape, g.dtype),)
    lead = tuple(x.shape[i] for i in rest)
    perm = tuple(rest) + axes
    xt = np.reshape(np.transpose(x, perm), lead + (n,))
    order = np.argsort(xt, axis=-1, kind="stable")
    w = _quantile_weights(n, qs, method)
    gq = np.reshape(g, (len(qs),) + lead)
    gs = sum(gq[i][..., None] * w[i] for i in range(len(qs)))
    gxt = _take_along(gs, np.argsort(order, axis=-1, kind="stable"), -1)
    gx = np.reshape(gxt, tuple(x.shape[i] for i in perm))
    return (np.transpose(gx, tuple(int(i) for i in np.argsort(perm))),)


@defvjp("median")
def _median_vjp(g, y, x, axis=None, keepdims=False):
    return _order_stat_vjp(g, x, [0.5], axis, keepdims, "linear")


@defvjp("quantile")
def _quantile_vjp(g, y, x, q, q_dtype=None, axis=None, method="linear", keepdims=False):
    qs = np.ravel(np.asarray(q, dtype=q_dtype or np.float64)).tolist()
    return _order_stat_vjp(g, x, qs, axis, keepdims, method)


# -- counting, interpolation, signal
@defvjp("histogram")
def _histogram_vjp(g, out, a, *weights, bins, range, density):
    """The counts are constant almost everywhere in ``a``; the weights get the cotangent of
    their bin; edges taken from ``a``'s minimum and maximum (no ``range``) pass theirs to the
    elements that are those (and so do density's bin widths)."""
    g_hist, g_edges = g
    hist, edges = out
    nb = hist.shape[0]
    d_first = d_last = 0
    if density and g_hist is not None:
        width_cot = -np.sum(g_hist * hist) / (edges[1] - edges[0]) / nb  # d/d(last - first)
        d_first, d_last = -width_cot, width_cot
    if g_edges is not None:
        k = np.arange(nb + 1) / nb
        d_first = d_first + np.sum(g_edges * (1 - k))
        d_last = d_last + np.sum(g_edges * k)
    ga = None
    if isinstance(bins, int) and range is None and _diff(a) and _traced(d_first + d_last):
        ga = _minmax_vjp(d_first, np.min(a), a)[0] + _minmax_vjp(d_last, np.max(a), a)[0]
    if not weights:
        return (ga,)
    w = weights[0]
    if g_hist is None or not _diff(w):
        return ga, None
    b = np.searchsorted(edges, a, side="right") - 1
    b = np.where(a == edges[-1], nb - 1, b)  # the last bin is closed
    inside = (b >= 0) & (b < nb)
    gc = g_hist
    if density:
        total = np.sum(np.where(inside, w, 0))
        gc = (g_hist / np.diff(edges) - np.sum(g_hist * hist)) / total
    return ga, np.where(inside, gc[np.clip(b, 0, nb - 1)], 0)


@defvjp("interp")
def _interp_vjp(g, y, x, xp, fp, left=None, right=None):
    n = xp.shape[0]
    below, above = x < xp[0], x > xp[-1]
    gx = gxp = None
    gfp = _zeros(g, (n,), g.dtype)
    if _diff(fp) and left is None:  # left and right default to fp's ends
        gfp = _emit("index_add", [gfp, np.sum(np.where(below, g, 0))], g, idx=(0,))
    if _diff(fp):  # and x == xp[-1] gives fp[-1]
        on_last = (above if right is None else False) | (x == xp[-1])
        gfp = _emit("index_add", [gfp, np.sum(np.where(on_last, g, 0))], g, idx=(n - 1,))
    if n >= 2:
        j = np.searchsorted(xp, x, side="right") - 1
        inside = (j >= 0) & (j < n - 1)
        jc = np.clip(j, 0, n - 2)
        x0, x1, f0, f1 = xp[jc], xp[jc + 1], fp[jc], fp[jc + 1]
        slope = (f1 - f0) / (x1 - x0)
        t = np.where(inside, (x - x0) / (x1 - x0), 0)
        gin = np.where(inside, g, 0)
        gx = gin * slope if _diff(x) else None
        lo, hi = np.ravel(jc), np.ravel(jc + 1)
        if _diff(fp):
            gfp = _emit("index_add", [gfp, np.ravel(gin * (1 - t)), lo], g, idx=("@0",))
            gfp = _emit("index_add", [gfp, np.ravel(gin * t), hi], g, idx=("@0",))
        if _diff(xp):
            gxp = _zeros(g, (n,), g.dtype)
            gs = np.where(inside, gin * slope, 0)
            gxp = _emit("index_add", [gxp, np.ravel(gs * (t - 1)), lo], g, idx=("@0",))
            gxp = _emit("index_add", [gxp, np.ravel(-gs * t), hi], g, idx=("@0",))
    gl = np.sum(np.where(below, g, 0)) if _diff(left) else None
    gr = np.sum(np.where(above, g, 0)) if _diff(right) else None
    return gx, gxp, (gfp if _diff(fp) else None), gl, gr


@defvjp("convolve")
def _convolve_vjp(g, y, a, v, mode="full"):
    n, m = a.shape[0], v.shape[0]
    full = n + m - 1
    start = {"full": 0, "same": (min(n, m) - 1) // 2, "valid": min(n, m) - 1}[mode]
    if g.shape[0] != full:
        z = _zeros(g, (full,), g.dtype)
        g = _emit("index_update", [z, g], g, idx=(slice(start, start + g.shape[0]),))
    ga = np.convolve(g, v[::-1], "valid") if _diff(a) else None
    gv = np.convolve(g, a[::-1], "valid") if _diff(v) else None
    return ga, gv
