"""Every op in the op table x the dtypes NumPy accepts x shapes/layouts: trace == NumPy, bitwise.

Each case is a small NumPy program. It is traced on one set of random inputs and the Traced is
run on *new* inputs of the same shapes and dtypes; the result must equal NumPy's bit for bit
(NaN == NaN, but -0.0 != 0.0), with the same dtype and shape. Where NumPy raises for a dtype,
tracing must raise the same exception type. ``test_every_op_is_covered`` fails when an op of
``tracekit.ops.OPS`` has no case here (or when its cases never produce it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from helpers.run import check_trace, quiet
from helpers.values import DTYPES, random_values, seed_of, with_layout

import tracekit as tk
from tracekit.ops import BINARY_UFUNCS, OPS, UNARY_UFUNCS


# ---------------------------------------------------------------------- argument specs
@dataclass(frozen=True)
class A:
    """An array argument: ``dtype`` None means the case's dtype."""

    shape: tuple
    dtype: object = None
    gen: str = ""  # "", "nonneg", "mask", "index<n>" (integers in [-n, n))


@dataclass(frozen=True)
class W:
    """A Python scalar argument (weak under NEP 50): traced, a new value on the second call."""

    kind: str = "float"


@dataclass
class Case:
    op: str | None  # the op this case is about (None: a composite of other ops)
    name: str
    fn: object  # fn(*args), or fn(dt) -> program when ``factory``
    args: tuple
    dtypes: tuple = DTYPES
    layouts: bool | tuple = False  # True: contiguous, strided and reversed inputs
    factory: bool = False
    values: bool = True  # False: np.empty & co., compare shape/dtype only
    extra: dict = field(default_factory=dict)

    def program(self, dt):
        return self.fn(dt) if self.factory else self.fn


def make_arg(spec, dt, layout, rng, seed):
    if isinstance(spec, A):
        dtype = np.dtype(spec.dtype if spec.dtype is not None else dt)
        if spec.gen.startswith("index"):
            n = int(spec.gen[5:])
            a = rng.integers(-n, n, size=spec.shape).astype(dtype)
        elif spec.gen == "mask":
            a = rng.random(spec.shape) < 0.5
        else:
            a = random_values(rng, spec.shape, dtype, nonneg=spec.gen == "nonneg")
        return with_layout(a, layout)
    if isinstance(spec, W):
        vals = {"float": (2.5, -1.25), "complex": (1.5 + 2j, -0.5 + 1j), "zero": (0.0, -0.0)}
        return vals[spec.kind][seed]
    return spec


def args_factory(case, dt, layout):
    def make(seed):
        rng = np.random.default_rng(seed_of(case.name, str(dt), layout, seed))
        return tuple(make_arg(s, dt, layout, rng, seed) for s in case.args)

    return make


CASES: list[Case] = []


def case(op, name, fn, *args, **kw):
    CASES.append(Case(op, name, fn, tuple(args), **kw))


M = (3, 4)
R3 = (2, 3, 4)

# ---------------------------------------------------------------------- elementwise ufuncs
_OPERATOR_FORMS = {
    "negative": lambda x: -x,
    "positive": lambda x: +x,
    "absolute": lambda x: abs(x),
    "invert": lambda x: ~x,
    "conjugate": lambda x: x.conj(),
}
for _name in UNARY_UFUNCS:
    _uf = getattr(np, _name)
    _f = (lambda uf: lambda x: uf(x))(_uf)
    case(_name, f"{_name}", _f, A(M), layouts=True)
    case(_name, f"{_name}-0d", _f, A(()))
    case(_name, f"{_name}-empty", _f, A((0, 3)))
    if _name in _OPERATOR_FORMS:
        case(_name, f"{_name}-operator", _OPERATOR_FORMS[_name], A(M))

_BINARY_OPERATORS = {
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
    "divide": lambda x, y: x / y,
    "floor_divide": lambda x, y: x // y,
    "remainder": lambda x, y: x % y,
    "power": lambda x, y: x**y,
    "bitwise_and": lambda x, y: x & y,
    "bitwise_or": lambda x, y: x | y,
    "bitwise_xor": lambda x, y: x ^ y,
    "left_shift": lambda x, y: x << y,
    "right_shift": lambda x, y: x >> y,
    "equal": lambda x, y: x == y,
    "not_equal": lambda x, y: x != y,
    "less": lambda x, y: x < y,
    "less_equal": lambda x, y: x <= y,
    "greater": lambda x, y: x > y,
    "greater_equal": lambda x, y: x >= y,
}
for _name in BINARY_UFUNCS:
    _uf = getattr(np, _name)
    _g = "nonneg" if _name == "power" else ""
    _f = (lambda uf: lambda x, y: uf(x, y))(_uf)
    case(_name, f"{_name}", _f, A(M), A(M, gen=_g), layouts=True)
    case(_name, f"{_name}-bcast", _f, A((3, 1)), A((4,), gen=_g))
    case(_name, f"{_name}-0d-1d", _f, A(()), A((3,), gen=_g))
    case(_name, f"{_name}-0d-0d", _f, A(()), A((), gen=_g))
    case(_name, f"{_name}-empty", _f, A((0, 3)), A((3,), gen=_g))
    case(_name, f"{_name}-lit-int", (lambda uf: lambda x: uf(x, 3))(_uf), A(M))
    case(_name, f"{_name}-lit-float", (lambda uf: lambda x: uf(x, 2.5))(_uf), A(M))
    case(_name, f"{_name}-rlit", (lambda uf: lambda y: uf(2, y))(_uf), A(M, gen=_g))
    case(_name, f"{_name}-weak-arg", _f, A(M), W())
    if _name in _BINARY_OPERATORS:
        _op = _BINARY_OPERATORS[_name]
        case(_name, f"{_name}-operator", _op, A(M), A((4,), gen=_g), layouts=True)
        case(_name, f"{_name}-operator-lit", (lambda o: lambda x: o(x, 2))(_op), A(M))
        case(_name, f"{_name}-operator-rlit", (lambda o: lambda x: o(3.5, x))(_op), A(M, gen=_g))

# NumPy functions built from the ufuncs above
case("rint", "round", lambda x: np.round(x), A(M), layouts=True)
case("rint", "round-2", lambda x: np.round(x, 2), A(M))
case("rint", "round-neg", lambda x: np.round(x, -1), A(M))
case("rint", "around-method", lambda x: x.round(1), A(M))
_w = {"gen": "nonneg"}  # weights that do not sum to zero (NumPy raises ZeroDivisionError)
case("multiply", "average-weights", lambda x, w: np.average(x, weights=w), A(M), A(M, **_w))
case("multiply", "average-w-axis", lambda x, w: np.average(x, 1, w), A(M), A((4,), **_w))
case("multiply", "average-w-axes", lambda x, w: np.average(x, (1, 0), w), A(R3), A((4, 3), **_w))
case("sqrt", "norm", lambda x: np.linalg.norm(x), A(M), layouts=("c", "nc"))
case("sqrt", "norm-keepdims", lambda x: np.linalg.norm(x, keepdims=True), A(M))
case("sqrt", "norm-fro-axes", lambda x: np.linalg.norm(x, axis=(0, 1)), A(M))
case("sqrt", "norm-axis", lambda x: np.linalg.norm(x, axis=1), A(M))
case("less_equal", "isclose", lambda x, y: np.isclose(x, y), A(M), A(M))
case("less_equal", "isclose-nan", lambda x: np.isclose(x, x, equal_nan=True), A(M))
case("floor_divide", "divmod", lambda x, y: divmod(x, y), A(M), A(M))
case("floor_divide", "divmod-lit", lambda x: divmod(x, 3), A(M))

# where, clip, astype, real/imag/angle
case("where", "where", lambda c, x, y: np.where(c, x, y), A(M, bool), A(M), A(M), layouts=True)
case("where", "where-bcast", lambda c, x, y: np.where(c, x, y), A((3, 1), bool), A((4,)), A(()))
case("where", "where-lit", lambda c, x: np.where(c, x, 0.5), A(M, bool), A(M))
case("where", "where-lit-both", lambda c: np.where(c, 1, 2), A(M, bool), dtypes=(np.dtype(bool),))
case("where", "where-cond-dtype", lambda c, x: np.where(c, x, -x), A(M), A(M, np.float32))
case("where", "where-0d", lambda c, x, y: np.where(c, x, y), A((), bool), A(()), A(()))
case("where", "where-empty", lambda c, x, y: np.where(c, x, y), A((0,), bool), A((0, 1)), A(()))
case("clip", "clip", lambda x, lo, hi: np.clip(x, lo, hi), A(M), A(M), A((4,)), layouts=True)
case("clip", "clip-lit", lambda x: np.clip(x, 1, 3), A(M))
case("clip", "clip-min-kw", lambda x: np.clip(x, min=0.5), A(M))
case("clip", "clip-method", lambda x: x.clip(max=2), A(M))
case("clip", "clip-0d", lambda x: np.clip(x, 0, 1), A(()))
case("clip", "clip-empty", lambda x: np.clip(x, 0, 1), A((0, 2)))
for _to in DTYPES:
    case("astype", f"astype-{_to}", (lambda to: lambda x: x.astype(to))(_to), A(M))
case("astype", "astype-nc", lambda x: x.astype(np.float64), A(M), layouts=True)
case("astype", "astype-0d", lambda x: x.astype(np.complex64), A(()))
case("astype", "astype-empty", lambda x: x.astype(np.int16), A((0, 3)))
case("astype", "asarray-dtype", lambda x: np.asarray(x, dtype=np.float32), A(M))
case("astype", "ufunc-dtype", lambda x: np.add(x, x, dtype=np.float64), A(M))
case("astype", "ufunc-dtype-lit", lambda x: np.multiply(x, 1.5, dtype=np.float32), A(M))
case("astype", "ufunc-dtype-sqrt", lambda x: np.sqrt(x, dtype=np.float32), A(M))
case("equal", "ufunc-dtype-bool", lambda x, y: np.equal(x, y, dtype=bool), A(M), A(M))
case("astype", "weak-to-array", lambda x, s: x + np.asarray(s, np.float32), A(M), W())
case("astype", "weak-asarray", lambda x, s: x + np.asarray(s), A(M), W())
case("real", "real", lambda x: np.real(x), A(M), layouts=True)
case("real", "real-attr", lambda x: x.real * 1, A(M))
case("real", "real-0d", lambda x: x.real, A(()))
case("imag", "imag", lambda x: np.imag(x), A(M), layouts=True)
case("imag", "imag-attr", lambda x: x.imag + 0, A(M))
case("imag", "imag-0d", lambda x: x.imag, A(()))
case("angle", "angle", lambda x: np.angle(x), A(M), layouts=True)
case("angle", "angle-deg", lambda x: np.angle(x, deg=True), A(M))
case("angle", "angle-0d", lambda x: np.angle(x), A(()))

# ---------------------------------------------------------------------- reductions
for _name in ("sum", "prod", "mean", "var", "std", "max", "min", "any", "all"):
    _fn = getattr(np, _name)
    for _label, _kw in {
        "": {},
        "-axis0": {"axis": 0},
        "-axis-1": {"axis": -1},
        "-axis02": {"axis": (0, 2)},
        "-axis1-keepdims": {"axis": 1, "keepdims": True},
        "-keepdims": {"keepdims": True},
    }.items():
        _f = (lambda fn, kw: lambda x: fn(x, **kw))(_fn, _kw)
        case(_name, f"{_name}{_label}", _f, A(R3), layouts=_label in ("", "-axis1-keepdims"))
    _m = (lambda n: lambda x: getattr(x, n)(axis=1))(_name)
    case(_name, f"{_name}-method", _m, A(R3))
    case(_name, f"{_name}-0d", (lambda fn: lambda x: fn(x))(_fn), A(()))
    case(_name, f"{_name}-0d-axis0", (lambda fn: lambda x: fn(x, axis=0))(_fn), A(()))
    case(_name, f"{_name}-empty", (lambda fn: lambda x: fn(x))(_fn), A((0, 3)))
    case(_name, f"{_name}-empty-axis1", (lambda fn: lambda x: fn(x, axis=1))(_fn), A((0, 3)))
    case(_name, f"{_name}-empty-axis0", (lambda fn: lambda x: fn(x, axis=0))(_fn), A((0, 3)))
    case(_name, f"{_name}-bad-axis", (lambda fn: lambda x: fn(x, axis=3))(_fn), A(R3))
    if _name in ("sum", "prod", "mean", "var", "std"):
        for _dt in ("float64", "float32", "int64", "complex128"):
            _f = (lambda fn, d: lambda x: fn(x, axis=1, dtype=d))(_fn, np.dtype(_dt))
            case(_name, f"{_name}-dtype-{_dt}", _f, A(R3))
    else:
        case(_name, f"{_name}-dtype", (lambda fn: lambda x: fn(x, dtype=np.float64))(_fn), A(R3))
    if _name in ("var", "std"):
        case(_name, f"{_name}-ddof", (lambda fn: lambda x: fn(x, axis=0, ddof=1))(_fn), A(R3))
        case(
            _name, f"{_name}-ddof-method", (lambda n: lambda x: getattr(x, n)(ddof=2))(_name), A(R3)
        )
case("max", "amax", lambda x: np.amax(x, axis=1), A(R3))
case("min", "amin", lambda x: np.amin(x, axis=(0, 1)), A(R3))
case("max", "maximum-reduce", lambda x: np.maximum.reduce(x, axis=1), A(R3))
case("sum", "add-reduce", lambda x: np.add.reduce(x), A(R3))
case("prod", "multiply-reduce", lambda x: np.multiply.reduce(x, axis=-1), A(R3))
case("all", "logical_and-reduce", lambda x: np.logical_and.reduce(x, axis=2), A(R3))
case("mean", "average", lambda x: np.average(x, axis=1), A(R3))
case("sum", "count_nonzero", lambda x: np.count_nonzero(x, axis=0), A(R3))
for _name in ("argmax", "argmin"):
    _fn = getattr(np, _name)
    case(_name, _name, (lambda fn: lambda x: fn(x))(_fn), A(R3), layouts=True)
    case(_name, f"{_name}-axis1", (lambda fn: lambda x: fn(x, axis=1))(_fn), A(R3))
    case(_name, f"{_name}-keepdims", (lambda fn: lambda x: fn(x, -1, keepdims=True))(_fn), A(R3))
    case(_name, f"{_name}-method", (lambda n: lambda x: getattr(x, n)(axis=0))(_name), A(R3))
    case(_name, f"{_name}-0d", (lambda fn: lambda x: fn(x))(_fn), A(()))
    case(_name, f"{_name}-empty", (lambda fn: lambda x: fn(x))(_fn), A((0, 3)))
    case(_name, f"{_name}-empty-axis1", (lambda fn: lambda x: fn(x, axis=1))(_fn), A((2, 0)))
for _name in ("cumsum", "cumprod"):
    _fn = getattr(np, _name)
    case(_name, _name, (lambda fn: lambda x: fn(x))(_fn), A(R3), layouts=True)
    case(_name, f"{_name}-axis0", (lambda fn: lambda x: fn(x, axis=0))(_fn), A(R3))
    case(_name, f"{_name}-axis-1", (lambda fn: lambda x: fn(x, axis=-1))(_fn), A(R3))
    case(_name, f"{_name}-dtype", (lambda fn: lambda x: fn(x, 1, dtype=np.float64))(_fn), A(R3))
    case(_name, f"{_name}-method", (lambda n: lambda x: getattr(x, n)(1))(_name), A(R3))
    case(_name, f"{_name}-0d", (lambda fn: lambda x: fn(x))(_fn), A(()))
    case(_name, f"{_name}-empty", (lambda fn: lambda x: fn(x, axis=0))(_fn), A((0, 3)))
case("cumsum", "add-accumulate", lambda x: np.add.accumulate(x, axis=1), A(R3))
case("cumprod", "multiply-accumulate", lambda x: np.multiply.accumulate(x), A(R3))

# ---------------------------------------------------------------------- linear algebra
_mm = lambda a, b: a @ b  # noqa: E731
case("matmul", "matmul", _mm, A((3, 4)), A((4, 5)), layouts=True)
case("matmul", "matmul-batched", _mm, A((2, 3, 4)), A((4, 5)))
case("matmul", "matmul-bcast", _mm, A((2, 1, 3, 4)), A((5, 4, 2)))
case("matmul", "matmul-vec-mat", _mm, A((4,)), A((4, 5)))
case("matmul", "matmul-mat-vec", lambda a, b: np.matmul(a, b), A((3, 4)), A((4,)))
case("matmul", "matmul-vec-vec", _mm, A((4,)), A((4,)))
case("matmul", "matmul-0d", _mm, A(()), A((4,)))
case("matmul", "matmul-empty", _mm, A((0, 4)), A((4, 5)))
case("matmul", "matmul-plain-rhs", lambda a: a @ np.eye(4, 2, dtype=a.dtype), A((3, 4)))
case("dot", "dot", lambda a, b: np.dot(a, b), A((3, 4)), A((4, 5)), layouts=True)
case("dot", "dot-vec", lambda a, b: np.dot(a, b), A((4,)), A((4,)))
case("dot", "dot-nd-1d", lambda a, b: np.dot(a, b), A((2, 3, 4)), A((4,)))
case("dot", "dot-nd-md", lambda a, b: np.dot(a, b), A((2, 3, 4)), A((2, 4, 5)))
case("dot", "dot-method", lambda a, b: a.dot(b), A((3, 4)), A((4,)))
case("dot", "dot-scalar", lambda a, b: np.dot(a, b), A(()), A((3,)))
case("dot", "vdot", lambda a, b: np.vdot(a, b), A((3, 2)), A((6,)))
for _sub, _shapes in {
    "ij,jk->ik": ((3, 4), (4, 5)),
    "bij,bjk->bik": ((2, 3, 4), (2, 4, 5)),
    "ij->ji": ((3, 4),),
    "i,i->": ((4,), (4,)),
    "ij->": ((3, 4),),
    "ii->i": ((3, 3),),
    "i,j->ij": ((3,), (4,)),
    "...ij,...jk": ((2, 3, 4), (4, 5)),
}.items():
    _f = (lambda sub: lambda *xs: np.einsum(sub, *xs))(_sub)
    case("einsum", f"einsum-{_sub}", _f, *(A(s) for s in _shapes), layouts=_sub == "ij,jk->ik")
case("tensordot", "tensordot", lambda a, b: np.tensordot(a, b), A((2, 3, 4)), A((3, 4, 5)))
case("tensordot", "tensordot-1", lambda a, b: np.tensordot(a, b, 1), A((3, 4)), A((4, 5)))
case("tensordot", "tensordot-0", lambda a, b: np.tensordot(a, b, 0), A((3,)), A((2,)))
case(
    "tensordot",
    "tensordot-axes",
    lambda a, b: np.tensordot(a, b, axes=([1, 0], [0, 1])),
    A((3, 4, 2)),
    A((4, 3)),
    layouts=True,
)
case("tensordot", "inner", lambda a, b: np.inner(a, b), A((3, 4)), A((2, 4)))
case("tensordot", "inner-1d", lambda a, b: np.inner(a, b), A((4,)), A((4,)))
case("multiply", "outer", lambda a, b: np.outer(a, b), A((3,)), A((2, 2)))
case("multiply", "inner-0d", lambda a, b: np.inner(a, b), A(()), A((3,)))

# ---------------------------------------------------------------------- linear algebra: LAPACK
_sq = A((2, 3, 3))  # a stack of square matrices
case("inv", "inv", lambda a: np.linalg.inv(a), A((3, 3)), layouts=True)
case("inv", "inv-batched", lambda a: np.linalg.inv(a), _sq)
case("inv", "inv-empty", lambda a: np.linalg.inv(a), A((0, 0)))
case("inv", "inv-not-square", lambda a: np.linalg.inv(a), A((2, 3)))
case("inv", "inv-1d", lambda a: np.linalg.inv(a), A((3,)))
case("solve", "solve", lambda a, b: np.linalg.solve(a, b), A((3, 3)), A((3,)), layouts=True)
case("solve", "solve-matrix", lambda a, b: np.linalg.solve(a, b), A((3, 3)), A((3, 2)))
case("solve", "solve-batched", lambda a, b: np.linalg.solve(a, b), _sq, A((3, 2)))
case("solve", "solve-batched-vec", lambda a, b: np.linalg.solve(a, b), _sq, A((3,)))
case("solve", "solve-mixed", lambda a, b: np.linalg.solve(a, b), A((3, 3)), A((3,), np.float32))
case("solve", "solve-bad", lambda a, b: np.linalg.solve(a, b), A((3, 3)), A((4,)))
case("det", "det", lambda a: np.linalg.det(a), A((3, 3)), layouts=True)
case("det", "det-batched", lambda a: np.linalg.det(a), _sq)
case("det", "det-empty", lambda a: np.linalg.det(a), A((2, 0, 0)))
_spd = lambda a: a @ a.mT + 3 * np.eye(a.shape[-1], dtype=a.dtype)  # noqa: E731
case("cholesky", "cholesky", lambda a: np.linalg.cholesky(_spd(a)), A((3, 3)))
case("cholesky", "cholesky-batched", lambda a: np.linalg.cholesky(_spd(a)), _sq)
case("cholesky", "cholesky-upper", lambda a: np.linalg.cholesky(_spd(a), upper=True), A((3, 3)))
case("cholesky", "cholesky-any", lambda a: np.linalg.cholesky(a), A((3, 3)))
case("absolute", "norm-1", lambda x: np.linalg.norm(x, 1, axis=0), A(M))
case("absolute", "norm-inf-vector", lambda x: np.linalg.norm(x, np.inf, axis=1), A(M))
case("absolute", "norm-neg-inf", lambda x: np.linalg.norm(x, -np.inf, axis=-1), A(M))
case("absolute", "norm-0", lambda x: np.linalg.norm(x, 0, axis=1, keepdims=True), A(M))
case("absolute", "norm-3", lambda x: np.linalg.norm(x, 3, axis=1), A(M))
case("absolute", "norm-matrix-1", lambda x: np.linalg.norm(x, 1), A(M))
case("absolute", "norm-matrix-inf", lambda x: np.linalg.norm(x, np.inf, keepdims=True), A(M))
case("absolute", "norm-matrix-neg1", lambda x: np.linalg.norm(x, -1, axis=(2, 0)), A(R3))
case("absolute", "norm-bad-ord", lambda x: np.linalg.norm(x, "fro", axis=1), A(M))

# ---------------------------------------------------------------------- order statistics
case("sort", "sort", lambda x: np.sort(x), A(M), layouts=True)
case("sort", "sort-axis0", lambda x: np.sort(x, axis=0), A(R3))
case("sort", "sort-none", lambda x: np.sort(x, axis=None, kind="stable"), A(M))
case("sort", "sort-method", lambda x: x.sort(axis=0) or x * 1, A(M))
case("sort", "sort-0d", lambda x: np.sort(x), A(()))
case("sort", "sort-empty", lambda x: np.sort(x, axis=0), A((0, 3)))
case("argsort", "argsort", lambda x: np.argsort(x, kind="stable"), A(M), layouts=True)
case("argsort", "argsort-axis0", lambda x: np.argsort(x, axis=0), A(R3))
case("argsort", "argsort-method", lambda x: x.argsort(axis=None, stable=True), A(M))
case("argsort", "argsort-empty", lambda x: np.argsort(x), A((2, 0)))
_ss = (A((6,)), A(M))
case("searchsorted", "searchsorted", lambda a, v: np.searchsorted(np.sort(a), v), *_ss)
case("searchsorted", "searchsorted-right", lambda a, v: np.sort(a).searchsorted(v, "right"), *_ss)
case(
    "searchsorted",
    "searchsorted-sorter",
    lambda a, v: np.searchsorted(a, v, sorter=a.argsort()),
    *_ss,
)
case("searchsorted", "searchsorted-scalar", lambda a: np.searchsorted(np.sort(a), 2), A((6,)))
case("searchsorted", "searchsorted-2d", lambda a, v: np.searchsorted(a, v), A(M), A((3,)))
case("median", "median", lambda x: np.median(x), A(R3), layouts=True)
case("median", "median-axis", lambda x: np.median(x, axis=1), A(R3))
case("median", "median-axes-keepdims", lambda x: np.median(x, (0, 2), keepdims=True), A(R3))
case("median", "median-0d", lambda x: np.median(x), A(()))
case("median", "median-empty", lambda x: np.median(x, axis=0), A((0, 3)))
case("quantile", "quantile", lambda x: np.quantile(x, 0.3), A(R3), layouts=True)
case("quantile", "quantile-list-axis", lambda x: np.quantile(x, [0.25, 1.0], axis=1), A(R3))
case("quantile", "quantile-f32-q", lambda x: np.quantile(x, np.float32(0.7), axis=-1), A(R3))
case("quantile", "quantile-lower", lambda x: np.quantile(x, 0.4, 0, method="lower"), A(R3))
case("quantile", "quantile-midpoint", lambda x: np.quantile(x, 0.5, method="midpoint"), A(M))
case("quantile", "quantile-keepdims", lambda x: np.quantile(x, 0.9, (0, 1), keepdims=True), A(R3))
case("quantile", "quantile-bad-q", lambda x: np.quantile(x, 1.5), A(M))
case("quantile", "percentile", lambda x: np.percentile(x, 40), A(R3), layouts=True)
case("quantile", "percentile-list", lambda x: np.percentile(x, [10, 50, 90], axis=0), A(R3))
case("quantile", "percentile-nearest", lambda x: np.percentile(x, 35, 1, method="nearest"), A(M))

# ---------------------------------------------------------------------- counting, interpolation
case("histogram", "histogram", lambda x: np.histogram(x, 4, (-2, 2)), A((20,)), layouts=True)
case("histogram", "histogram-auto-range", lambda x: np.histogram(x, 3), A(M))
case(
    "histogram",
    "histogram-weights",
    lambda x, w: np.histogram(x, 5, (-3, 3), weights=w),
    A(M),
    A(M),
)
case(
    "histogram", "histogram-density", lambda x: np.histogram(x, 4, (-2.0, 2.0), density=True), A(M)
)
case("histogram", "histogram-edges", lambda x: np.histogram(x, [-2, -0.5, 0, 3]), A(M))
case("histogram", "histogram-empty", lambda x: np.histogram(x, 2), A((0,)))
case("index_add", "bincount", lambda i: np.bincount(i, minlength=8), A((9,), np.int64, "index4"))
case("index_add", "bincount-bool", lambda b: np.bincount(b, minlength=2), A((7,), bool))
case(
    "index_add",
    "bincount-weights",
    lambda i, w: np.bincount(i + 4, w, minlength=8),
    A((9,), np.int8, "index4"),
    A((9,)),
)
case(
    "index_add",
    "bincount-too-short",
    lambda i: np.bincount(i, minlength=2),
    A((9,), np.int64, "index4"),
)
_xp = (A((5,), np.float64, "nonneg"),)
case(
    "interp",
    "interp",
    lambda x, f: np.interp(x, [-1.0, 0.0, 0.5, 2.0, 2.5], f),
    A(M),
    A((5,)),
    layouts=True,
)
case(
    "interp", "interp-traced-xp", lambda x, xp, f: np.interp(x, np.sort(xp), f), A(M), *_xp, A((5,))
)
case("interp", "interp-left-right", lambda x: np.interp(x, [0, 1], [2, 3], -1.0, 9.0), A(M))
case("interp", "interp-scalar-x", lambda f: np.interp(0.3, [0.0, 1.0], f), A((2,)))
case("interp", "interp-bad", lambda x, f: np.interp(x, [0.0, 1.0], f), A(M), A((3,)))
case("convolve", "convolve", lambda a, v: np.convolve(a, v), A((6,)), A((3,)), layouts=True)
case("convolve", "convolve-same", lambda a, v: np.convolve(a, v, "same"), A((6,)), A((4,)))
case("convolve", "convolve-valid", lambda a, v: np.convolve(a, v, mode="valid"), A((3,)), A((5,)))
case("convolve", "convolve-0d", lambda a, v: np.convolve(a, v), A(()), A((2,)))
case("convolve", "convolve-empty", lambda a, v: np.convolve(a, v), A((0,)), A((2,)))

# ---------------------------------------------------------------------- composed of other ops
case("where", "nansum", lambda x: np.nansum(x), A(R3), layouts=True)
case("where", "nansum-axis-keepdims", lambda x: np.nansum(x, axis=1, keepdims=True), A(R3))
case("where", "nanprod", lambda x: np.nanprod(x, axis=0), A(R3))
case("where", "nanmean", lambda x: np.nanmean(x, axis=(0, 2)), A(R3), layouts=True)
case("where", "nanmean-all", lambda x: np.nanmean(x), A(M))
case("where", "nanmean-dtype", lambda x: np.nanmean(x, 1, dtype=np.float64), A(M))
case("where", "nanmax", lambda x: np.nanmax(x, axis=1), A(R3), layouts=True)
case("where", "nanmin", lambda x: np.nanmin(x), A(R3))
case("where", "nanmax-keepdims", lambda x: np.nanmax(x, axis=(0, 2), keepdims=True), A(R3))
case("where", "nanmin-empty", lambda x: np.nanmin(x, axis=0), A((0, 3)))
case("where", "nan_to_num", lambda x: np.nan_to_num(x), A(M), layouts=True)
case("where", "nan_to_num-values", lambda x: np.nan_to_num(x, nan=-1, posinf=5, neginf=-5), A(M))
case("where", "nan_to_num-0d", lambda x: np.nan_to_num(x), A(()))
case(
    "where",
    "select",
    lambda x, y: np.select([x > 0, y < 1], [x, y * 2]),
    A(M),
    A((4,)),
    layouts=True,
)
case("where", "select-default", lambda x, y: np.select([x > 0], [y], default=-1.5), A(M), A(()))
case("where", "select-weak", lambda x, s: np.select([x > 0, x < 0], [s, x], s), A(M), W())
case("where", "select-not-bool", lambda x: np.select([x], [x]), A(M))
case("where", "triu", lambda x: np.triu(x), A(M), layouts=True)
case("where", "triu-k", lambda x: np.triu(x, -1), A(R3))
case("where", "tril-k", lambda x: np.tril(x, 2), A(M))
case("where", "tril-1d", lambda x: np.tril(x), A((3,)))
case("where", "tril-empty", lambda x: np.tril(x), A((0, 3)))
case("index", "diagonal", lambda x: np.diagonal(x), A(M), layouts=True)
case("index", "diagonal-offset-axes", lambda x: np.diagonal(x, -1, 2, 0), A(R3))
case("index", "diagonal-method", lambda x: x.diagonal(3), A(M))
case("index", "diagonal-far", lambda x: x.diagonal(5), A(M))
case("index", "diagonal-1d", lambda x: np.diagonal(x), A((3,)))
case("sum", "trace", lambda x: np.trace(x), A(M), layouts=True)
case("sum", "trace-offset", lambda x: np.trace(x, 1, 1, 2), A(R3))
case("sum", "trace-method-dtype", lambda x: x.trace(dtype=np.float64), A(M))
case("index", "diag-2d", lambda x: np.diag(x, -1), A(M))
case("index_update", "diag-1d", lambda x: np.diag(x), A((3,)), layouts=True)
case("index_update", "diag-1d-k", lambda x: np.diag(x, 2), A((3,)))
case("index_update", "diag-1d-neg-k", lambda x: np.diag(x, -1), A((2,)))
case("multiply", "cross", lambda a, b: np.cross(a, b), A(M[:1] + (3,)), A((3,)), layouts=True)
case("multiply", "cross-axes", lambda a, b: np.cross(a, b, axisa=0, axisc=0), A((3, 2)), A((2, 3)))
case("multiply", "cross-2d", lambda a, b: np.cross(a, b), A((4, 2)), A((4, 2)))
case("multiply", "cross-2-3", lambda a, b: np.cross(a, b), A((2,)), A((4, 3)))
case("multiply", "cross-3-2", lambda a, b: np.cross(a, b), A((4, 3)), A((2,)))
case("multiply", "cross-bad", lambda a, b: np.cross(a, b), A((4,)), A((4,)))

# ---------------------------------------------------------------------- movement
case("reshape", "reshape-1", lambda x: x.reshape(-1), A(R3), layouts=True)
case("reshape", "reshape-args", lambda x: x.reshape(4, -1) + 0, A(R3))
case("reshape", "np-reshape", lambda x: np.reshape(x, (3, 2, 4)), A(R3), layouts=True)
case("reshape", "reshape-0d", lambda x: x.reshape(1, 1), A(()))
case("reshape", "reshape-empty", lambda x: x.reshape(3, 0), A((0, 3)))
case("reshape", "reshape-bad", lambda x: x.reshape(5, -1), A(R3))
case("reshape", "ravel", lambda x: np.ravel(x), A(R3), layouts=True)
case("reshape", "ravel-method", lambda x: x.ravel(), A(R3))
case("reshape", "flatten", lambda x: x.flatten(), A(R3), layouts=True)
case("reshape", "expand_dims", lambda x: np.expand_dims(x, 1), A(M))
case("reshape", "expand_dims-tuple", lambda x: np.expand_dims(x, (0, -1)), A(M))
case("reshape", "squeeze", lambda x: np.squeeze(x), A((1, 3, 1)))
case("reshape", "squeeze-axis", lambda x: x.squeeze(axis=2), A((1, 3, 1)))
case("reshape", "squeeze-bad", lambda x: x.squeeze(axis=1), A((1, 3, 1)))
case("reshape", "atleast_2d", lambda x: np.atleast_2d(x), A((3,)))
case("reshape", "atleast_3d", lambda x: np.atleast_3d(x), A(M))
case("reshape", "newaxis-index", lambda x: x[None, :, None], A((3,)))
case("transpose", "T", lambda x: x.T, A(R3), layouts=True)
case("transpose", "np-transpose-axes", lambda x: np.transpose(x, (1, 0, 2)), A(R3))
case("transpose", "transpose-neg-axes", lambda x: x.transpose(-1, 0, 1), A(R3))
case("transpose", "transpose-bad-axes", lambda x: np.transpose(x, (0, 1, 5)), A(R3))
case("transpose", "transpose-dup-axes", lambda x: np.transpose(x, (0, 1, 1)), A(R3))
case("transpose", "moveaxis", lambda x: np.moveaxis(x, 0, -1), A(R3), layouts=True)
case("transpose", "moveaxis-multi", lambda x: np.moveaxis(x, (0, 1), (2, 0)), A(R3))
case("transpose", "moveaxis-bad", lambda x: np.moveaxis(x, 0, 3), A(R3))
case("transpose", "swapaxes", lambda x: np.swapaxes(x, 0, 2), A(R3))
case("transpose", "swapaxes-method", lambda x: x.swapaxes(-1, 1), A(R3))
case("transpose", "swapaxes-bad", lambda x: x.swapaxes(0, 3), A(R3))
case("transpose", "matrix_transpose", lambda x: np.matrix_transpose(x), A(R3))
case("transpose", "mT", lambda x: x.mT, A(R3))
case("transpose", "T-0d", lambda x: x.T, A(()))
case("broadcast_to", "broadcast_to", lambda x: np.broadcast_to(x, (2, 3, 4)), A(M), layouts=True)
case("broadcast_to", "broadcast_to-0d", lambda x: np.broadcast_to(x, (3,)), A(()))
case("broadcast_to", "broadcast_to-bad", lambda x: np.broadcast_to(x, (3, 5)), A(M))
case("broadcast_to", "broadcast_arrays", lambda x, y: np.broadcast_arrays(x, y), A((3, 1)), A((4,)))
_c2 = (A(M), A((2, 4)))
case("concatenate", "concatenate", lambda x, y: np.concatenate([x, y]), *_c2, layouts=True)
case("concatenate", "concatenate-axis1", lambda x, y: np.concatenate((x, y.T), 1), A(M), A((4, 2)))
case("concatenate", "concatenate-none", lambda x, y: np.concatenate([x, y], axis=None), *_c2)
case("concatenate", "concatenate-mixed", lambda x, y: np.concatenate([x, y]), A(M), A(M, "float32"))
case("concatenate", "concatenate-plain", lambda x: np.concatenate([x, np.ones((1, 4))]), A(M))
case("concatenate", "concatenate-bad", lambda x, y: np.concatenate([x, y], axis=1), *_c2)
case("concatenate", "concatenate-empty", lambda x, y: np.concatenate([x, y]), A((0, 4)), A((2, 4)))
case("concatenate", "stack", lambda x, y: np.stack([x, y]), A(M), A(M), layouts=True)
case("concatenate", "stack-axis-1", lambda x, y: np.stack((x, y), axis=-1), A(M), A(M))
case("concatenate", "stack-bad", lambda x, y: np.stack((x, y)), *_c2)
case("concatenate", "hstack", lambda x, y: np.hstack([x, y]), A((3,)), A((2,)))
case("concatenate", "hstack-2d", lambda x, y: np.hstack([x, y]), A((2, 3)), A((2, 1)))
case("concatenate", "vstack", lambda x, y: np.vstack([x, y]), A((3,)), A((2, 3)))
case("concatenate", "column_stack", lambda x, y: np.column_stack([x, y]), A((3,)), A((3, 2)))
case("concatenate", "array-of-traced", lambda x, y: np.array([x, y]), A((3,)), A((3,)))
case("index", "split", lambda x: np.split(x, 2, axis=1), A(M), layouts=True)
case("index", "split-indices", lambda x: np.split(x, [1, 2]), A(M))
case("index", "array_split", lambda x: np.array_split(x, 3, axis=1), A(M))
case("index", "split-bad", lambda x: np.split(x, 3, axis=1), A(M))
case("tile", "tile", lambda x: np.tile(x, 2), A(M), layouts=True)
case("tile", "tile-tuple", lambda x: np.tile(x, (2, 1, 3)), A(M))
case("tile", "tile-0d", lambda x: np.tile(x, 3), A(()))
case("repeat", "repeat", lambda x: np.repeat(x, 2), A(M), layouts=True)
case("repeat", "repeat-axis", lambda x: np.repeat(x, 3, axis=1), A(M))
case("repeat", "repeat-counts", lambda x: np.repeat(x, [1, 0, 2], axis=0), A(M))
case("repeat", "repeat-method", lambda x: x.repeat(2, axis=-1), A(M))
case("roll", "roll", lambda x: np.roll(x, 1), A(M), layouts=True)
case("roll", "roll-axis", lambda x: np.roll(x, -2, axis=1), A(M))
case("roll", "roll-multi", lambda x: np.roll(x, (1, 2), axis=(0, 1)), A(M))
case("roll", "roll-0d", lambda x: np.roll(x, 1), A(()))
case("pad", "pad", lambda x: np.pad(x, 1), A(M), layouts=True)
case("pad", "pad-widths", lambda x: np.pad(x, ((1, 0), (0, 2))), A(M))
case("pad", "pad-value", lambda x: np.pad(x, (2, 1), constant_values=3), A(M))
case("pad", "pad-empty", lambda x: np.pad(x, 1), A((0, 2)))
case("index", "flip", lambda x: np.flip(x), A(M), layouts=True)
case("index", "flip-axis", lambda x: np.flip(x, axis=1), A(M))
case("index", "fliplr", lambda x: np.fliplr(x), A(M))
case("index", "flipud", lambda x: np.flipud(x), A(M))
case("index", "diff", lambda x: np.diff(x), A(M), layouts=True)
case("index", "diff-n2-axis0", lambda x: np.diff(x, n=2, axis=0), A(M))
case("index", "diff-prepend", lambda x: np.diff(x, prepend=0), A(M))
case("index", "diff-append", lambda x, y: np.diff(x, axis=0, append=y), A(M), A((1, 4)))

# ---------------------------------------------------------------------- indexing
for _label, _fn in {
    "int": lambda x: x[1],
    "neg-int": lambda x: x[-1, -2],
    "slice": lambda x: x[1:3],
    "step": lambda x: x[::2],
    "neg-step": lambda x: x[::-1],
    "mixed-steps": lambda x: x[2:0:-1, ::-3, 1::2],
    "none": lambda x: x[None, 1],
    "ellipsis": lambda x: x[..., 0],
    "ellipsis-none": lambda x: x[:, ..., None],
    "empty-slice": lambda x: x[2:2],
    "out-of-range-slice": lambda x: x[5:9],
    "bad-int": lambda x: x[7],
    "list": lambda x: x[[0, 2, 2]],
    "two-lists": lambda x: x[[0, 1], [1, 3]],
    "list-slice": lambda x: x[:, [2, 0]],
    "np-array": lambda x: x[np.array([2, -1])],
    "take": lambda x: np.take(x, [0, 2], axis=1),
    "take-flat": lambda x: np.take(x, [5, 1]),
    "bool-list-rejected": None,
}.items():
    if _fn is not None:
        case("index", f"index-{_label}", _fn, A((3, 4, 5)), layouts=_label in ("int", "step"))
case("index", "index-traced-ints", lambda x, i: x[i], A((3, 4)), A((5,), np.int64, "index3"))
case("index", "index-traced-2d", lambda x, i: x[:, i], A((3, 4)), A((2, 2), np.int32, "index4"))
case(
    "index",
    "take-traced",
    lambda x, i: np.take(x, i, axis=0),
    A((3, 4)),
    A((2,), "int16", "index3"),
)
case("index", "index-0d", lambda x: x[()], A(()))
case("index", "index-0d-ellipsis", lambda x: x[...] + 0, A(()))
case("index", "iterate", lambda x: [r * 2 for r in x], A(M))

# ---------------------------------------------------------------------- functional updates


def _set_slice(x, v):
    y = x.copy()
    y[1:3] = v
    return y


def _set_int_scalar(x):
    y = x.copy()
    y[0, 1] = 5
    return y


def _set_row(x, v):
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i, :] = v * i
    return out


def _set_traced_idx(x, i, v):
    y = x.copy()
    y[i] = v
    return y


def _set_list_idx(x, v):
    y = x.copy()
    y[[0, 2], 1:] = v
    return y


def _set_mask_scalar(x, m, v):
    y = x.copy()
    y[m] = v
    y[~m] = 1
    return y


def _set_mask_bcast(x, m, v):
    y = x.copy()
    y[m] = v[:1]
    return y


def _add_at(x, i, v):
    y = x.copy()
    np.add.at(y, i, v)
    return y


def _set_step(x, v):
    y = x.copy()
    y[::-2, 1] = v
    return y


def _iadd_slice(x):
    y = x.copy()
    y[1:, ::2] += 1
    return y


def _set_leading_one(x, v):
    y = x.copy()
    y[:] = v[None]
    return y


case("index_update", "setitem-slice", _set_slice, A(M), A((2, 4)), layouts=True)
case("index_update", "setitem-bcast", _set_slice, A(M), A((4,)))
case("index_update", "setitem-cast", _set_slice, A(M), A((2, 4), np.float64))
case("index_update", "setitem-weak", _set_slice, A(M), W())
case("index_update", "setitem-int-scalar", _set_int_scalar, A(M))
case("index_update", "setitem-row-loop", _set_row, A(M), A((4,)))
case(
    "index_update", "setitem-traced-idx", _set_traced_idx, A(M), A((2,), np.int64, "index3"), A(())
)
case("index_update", "setitem-list-idx", _set_list_idx, A(M), A((2, 3)))
case("where", "setitem-mask-scalar", _set_mask_scalar, A(M), A(M, bool), A(()))
case("index_update", "setitem-mask-bcast", _set_mask_bcast, A(M), A(M, bool), A((4,)))
case("index_add", "add-at", _add_at, A(M), A((5,), np.intp, "index3"), A((5, 4)), layouts=True)
case("index_add", "add-at-bcast", _add_at, A(M), A((2,), np.int8, "index3"), A(()))
case("index_add", "add-at-cols", lambda x, v: _add_at(x.T, [0, 1, 1], v), A(M), A((3, 3)))
case("index_update", "setitem-neg-step", _set_step, A(M), A((2,)), layouts=True)
case("index_update", "setitem-iadd", _iadd_slice, A(M), layouts=True)
case("index_update", "setitem-leading-one", _set_leading_one, A((4,)), A((4,)))
case("index_update", "setitem-0d", lambda x, v: x.__setitem__((), v) or x * 1, A(()), A(()))


def _set_real(z, v):
    y = z.copy()
    y.real[...] = v
    return y


def _set_imag(z, v):
    y = z.copy()
    y.imag[1:] = v
    return y


def _iadd_real(z):
    y = z.copy()
    y.real += 1
    return y


def _imul_imag(z):
    y = z.copy()
    y.imag *= 2
    return y


_C = tuple(d for d in DTYPES if d.kind == "c")
case("update_real", "set-real", _set_real, A(M), A((4,), np.float32), layouts=True)
case("update_real", "iadd-real", _iadd_real, A(M))
case("update_imag", "set-imag", _set_imag, A(M), A((2, 4)), layouts=True)
case("update_imag", "imul-imag", _imul_imag, A(M))

# ---------------------------------------------------------------------- creation
_fac = {"factory": True}
case("full", "zeros", lambda dt: lambda x: np.zeros((2, 3), dt), A(()), **_fac)
case("full", "ones-int-shape", lambda dt: lambda x: np.ones(4, dtype=dt) * x, A(()), **_fac)
case("full", "full", lambda dt: lambda x: np.full((2, 3), 7, dtype=dt), A(()), **_fac)
case("full", "full-nan", lambda dt: lambda x: np.full(3, np.nan, dtype=dt), A(()), **_fac)
case("full", "full-neg-zero", lambda dt: lambda x: np.full(3, -0.0, dtype=dt) + x, A(()), **_fac)
case("full", "full-traced-fill", lambda dt: lambda x: np.full((2, 3), x, dtype=dt), A(()), **_fac)
case("full", "full-default-dtype", lambda x: np.full((2, 2), 1.5) + x, A(M[1:]))
case("full", "zeros-default", lambda x: np.zeros((4,)) + x, A((4,)))
case("full", "zeros_like", lambda x: np.zeros_like(x), A(M), layouts=True)
case("full", "ones_like-dtype", lambda dt: lambda x: np.ones_like(x, dtype=dt), A(M), **_fac)
case("full", "full_like", lambda x: np.full_like(x, 3), A(M))
case("full", "full_like-shape", lambda x: np.full_like(x, 2, shape=(2,)), A(M))
case("full", "empty", lambda dt: lambda x: np.empty((2, 3), dt), A(()), values=False, **_fac)
case("full", "empty_like", lambda x: np.empty_like(x), A(M), values=False)
case("arange", "arange", lambda dt: lambda x: np.arange(5, dtype=dt), A(()), **_fac)
case("arange", "arange-start-stop-step", lambda x: np.arange(1, 8, 3) * x, A(()))
case("arange", "arange-float", lambda x: np.arange(0.0, 1.0, 0.1) + x, A(()))
case("arange", "arange-neg-step", lambda dt: lambda x: np.arange(6, 0, -2, dt), A(()), **_fac)
case("linspace", "linspace", lambda dt: lambda x: np.linspace(0, 10, 7, dtype=dt), A(()), **_fac)
case("linspace", "linspace-no-endpoint", lambda x: np.linspace(-1, 1, 4, endpoint=False), A(()))
case("linspace", "linspace-plus", lambda x: x + np.linspace(0.5, 2.5, 3), A((3,)))
case("eye", "eye", lambda dt: lambda x: np.eye(3, dtype=dt), A(()), **_fac)
case("eye", "eye-rect-k", lambda dt: lambda x: np.eye(3, 4, k=1, dtype=dt), A(()), **_fac)
case("eye", "identity", lambda x: np.identity(3) @ x, A((3,)))


# ---------------------------------------------------------------------- loops (tracekit.loops)
def _loop_carried(x, y):
    for _ in range(4):
        x = np.maximum(x, y) - (x != y)
    return x


def _loop_in_place(a, b):
    for _ in range(3):
        a[1:] = a[:-1] + b[1:]
        b[0] = a[-1]
    return a.sum()


def _loop_nested(x):
    for _ in range(3):
        for _ in range(2):
            x = x[::-1] * 2 - x
        x = x + 1
    return x


def _loop_last_value(x):
    for _ in range(3):
        y = x * x
        x = y + x
    return y, x


def _while_halving(x):
    while np.abs(x).max() > 0.01:  # a traced test in every iteration: a while_loop
        x = np.tanh(x) * 0.5  # converges from any value (NaN ends the loop at once)
    return x


case("while_loop", "while-halving", _while_halving, A(M), dtypes=("float64", "float32"))
case("loop", "loop-carried", _loop_carried, A(M), A(M[1:]))
case("loop", "loop-in-place", _loop_in_place, A((5,)), A((5,)), layouts=True)
case("loop", "loop-nested", _loop_nested, A((4,)))
case("loop", "loop-last-value", _loop_last_value, A((2, 3)))


# ---------------------------------------------------------------------- the tests
def _run_case(c, dt, failures):
    layouts = ("c", "nc", "neg") if c.layouts is True else c.layouts or ("c",)
    for layout in layouts:
        try:
            check_trace(c.program(dt), args_factory(c, dt, layout), values=c.values)
        except (Exception, pytest.fail.Exception) as e:  # collect every failing case
            failures.append(f"{c.name} [{layout}]: {type(e).__name__}: {e}")


OP_GROUPS: dict = {}
for _c in CASES:
    OP_GROUPS.setdefault(_c.op, []).append(_c)


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("op", sorted(OP_GROUPS))
def test_op(op, dt):
    """All cases of one op for one dtype (shapes and layouts inside); failures listed together."""
    failures: list = []
    for c in OP_GROUPS[op]:
        if dt in c.dtypes:
            _run_case(c, dt, failures)
    assert not failures, "\n\n".join(failures)


def test_every_op_is_covered():
    """Each op in OPS (but opaque ones) has cases, and some case really records that op."""
    wanted = {name for name, op in OPS.items() if op.kind != "opaque"}
    by_op: dict = {}
    for c in CASES:
        by_op.setdefault(c.op, []).append(c)
    missing = sorted(wanted - set(by_op))
    assert not missing, f"ops without test cases: {missing}"
    never = []
    for name in sorted(wanted):
        for c in by_op[name]:
            if _records(c, name):
                break
        else:
            never.append(name)
    assert not never, f"ops whose cases never record them: {never}"


def _records(c, name) -> bool:
    for dt in c.dtypes:
        try:
            with quiet():
                t = tk.trace(c.program(dt), *args_factory(c, dt, "c")(0))
        except Exception:
            continue
        if name in {n.op for n in t.graph.nodes}:
            return True
    return False


# ---------------------------------------------------------------------- NEP 50 promotion
PAIRS = [(a, b) for a in DTYPES for b in DTYPES]


@pytest.mark.parametrize("a,b", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_binary_promotion_all_pairs(a, b):
    def make(seed):
        rng = np.random.default_rng(seed_of("promo", str(a), str(b), seed))
        return random_values(rng, (3, 1), a), random_values(rng, (4,), b)

    check_trace(lambda x, y: x + y * y, make)
    check_trace(lambda x, y: np.maximum(x, y), make)


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("scalar", [True, 3, -1, 300, 2.5, 1e300, 1 + 2j], ids=repr)
def test_python_scalar_literals_follow_nep50(dt, scalar):
    def make(seed):
        return (random_values(np.random.default_rng(seed_of("lit", str(dt), seed)), (3,), dt),)

    check_trace(lambda x: x * scalar, make)
    check_trace(lambda x: scalar - x, make)


@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["float", "complex"])
def test_python_scalar_arguments_are_weak(dt, kind):
    """A Python float *argument* is weak: float32 array * float arg stays float32."""

    def make(seed):
        rng = np.random.default_rng(seed_of("weak", str(dt), seed))
        return random_values(rng, (3,), dt), make_arg(W(kind), dt, "c", rng, seed)

    t = check_trace(lambda x, s: x * s + s * 2, make)
    if t is not None:
        assert t.graph.inputs[1].weak


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, y: x * np.float64(2.0),  # a NumPy scalar is strong
        lambda x, y: x * y.sum(),  # so is a reduction's result
        lambda x, y: x * (y.sum() * 2.0),
        lambda x, y: x * -y.max(),
        lambda x, y: x + np.float32(1) * y[0],
        lambda x, y: x * float(2),
    ],
)
def test_numpy_scalars_are_strong(fn):
    def make(seed):
        rng = np.random.default_rng(seed)
        return random_values(rng, (3,), np.float32), random_values(rng, (2,), np.float64)

    check_trace(fn, make)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.complex64, np.int32], ids=str)
def test_numpy_scalar_arguments_are_strong(dt):
    def make(seed):
        rng = np.random.default_rng(seed)
        return random_values(rng, (3,), np.float32), dt(1.5 + seed)

    t = check_trace(lambda x, s: x * s, make)
    assert not t.graph.inputs[1].weak


# ---------------------------------------------------------------------- NumPy functions, compiled
def _fused_functions(x, y):
    """The functions composed of elementwise ops and reductions: they compile into kernels."""
    return (
        np.float_power(np.abs(x), y[0]) + np.heaviside(x, 0.5),
        np.nan_to_num(x, posinf=9.0) * 2,
        np.nansum(x, axis=1),
        np.nanmean(x, axis=0),
        np.nanmax(x, axis=1),
        np.nanmin(x),
        np.select([x > 0, x < -1], [x, -x], 7.0),
        np.triu(x, 1) + np.tril(x, -1),
        np.trace(x),
        np.diag(x[:, 0], 1),
        np.cross(x[:, :3], x[:, 1:4]),
        np.linalg.norm(x, 1, axis=0),
        np.linalg.norm(x, np.inf),
    )


def _host_functions(x, a, i):
    """The functions that are ops of their own: NumPy calls between the kernels."""
    s = np.sort(x, axis=0)
    return (
        s + 1,
        np.argsort(x),
        np.median(x, axis=1),
        np.percentile(x, [10, 90], axis=0),
        np.histogram(np.nan_to_num(x), bins=4, range=(-2, 2)),
        np.searchsorted(s[:, 0], x[0]),
        np.interp(x, [-1.0, 0.0, 2.0], x[0, :3]),
        np.convolve(x[0], x[1, :3]),
        np.bincount(i, minlength=5),
        np.linalg.inv(a),
        np.linalg.solve(a, x[:3, :2]),
        np.linalg.det(a),
        np.linalg.cholesky(a @ a.T),
    )


def _function_args(seed):
    rng = np.random.default_rng(seed_of("numpy-functions", seed))
    x = random_values(rng, (4, 5), np.float64)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    return x, a, rng.integers(0, 5, 7)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_numpy_functions_compiled(target):
    """The new functions compiled for each target against the interpreter (and so NumPy): the
    composed ones fuse into kernels, the others run as NumPy calls the plan names."""
    from helpers.compare import assert_same

    if target == "cuda":
        from tracekit.backends.cuda import simulator_active

        cuda = pytest.importorskip("numba.cuda")
        if not (simulator_active() or cuda.is_available()):
            pytest.skip("no GPU and no CUDA simulator")
    x, a, i = _function_args(0)
    x2, a2, i2 = _function_args(1)
    for fn, args, new in (
        (_fused_functions, (x, np.array([1.5])), (x2, np.array([0.5]))),
        (_host_functions, (x, a, i), (x2, a2, i2)),
    ):
        with quiet():
            t = tk.trace(fn, *args)
            c = tk.compile(t, target=target, progress=False)
            assert_same(c(*new), t(*new), rtol=1e-12)
        if target == "cpu" and fn is _fused_functions:
            fused = {n.op for k in c.kernels for n in getattr(k, "nodes", [])}
            assert {"float_power", "heaviside", "isnan", "where"} <= fused, c.plan
        if target == "cpu" and fn is _host_functions:
            for op in ("sort", "median", "quantile", "histogram", "interp", "convolve", "inv"):
                assert f"({op} runs as a NumPy call)" in str(c.plan) or op in ("convolve", "inv")
            assert "(LAPACK through NumPy)" in str(c.plan)


# ---------------------------------------------------------------------- NumPy functions, gradients
def _grad_programs(xp):
    """Scalar losses using the new functions, written against a NumPy namespace ``xp``."""
    la = xp.linalg
    return {
        "sort": lambda x, m: xp.sum(xp.sort(x, axis=1) * xp.arange(5.0)),
        "median-percentile": lambda x, m: xp.median(x, axis=0).sum() + xp.percentile(x, 30),
        "quantile": lambda x, m: xp.sum(xp.quantile(x, xp.array([0.2, 0.7]), axis=1) ** 2),
        "trace-diag": lambda x, m: (
            xp.trace(m) + xp.sum(xp.diag(x[:3, 1]) @ m) + xp.diagonal(x).sum()
        ),
        "triu-tril": lambda x, m: xp.sum(xp.triu(x, 1) ** 2) - xp.sum(xp.tril(x) * 3),
        "cross": lambda x, m: xp.sum(xp.cross(x[:, :3], x[:, 2:5]) ** 2),
        "float_power": lambda x, m: xp.sum(xp.float_power(xp.abs(x) + 0.5, 1.7)),
        "nan": lambda x, m: (
            xp.nansum(x * x) + xp.nanmean(x, axis=1).sum() + xp.nanmax(x) - xp.nanmin(x)
        ),
        "nan_to_num-select": lambda x, m: xp.sum(
            xp.select([x > 0.5, x < -0.5], [x * x, -x], 0.1) * xp.nan_to_num(x)
        ),
        "inv-det": lambda x, m: xp.sum(la.inv(m) ** 2) + la.det(m),
        "solve": lambda x, m: xp.sum(la.solve(m, x[:3, :2]) ** 2) + xp.sum(la.solve(m, x[0, :3])),
        "cholesky": lambda x, m: xp.sum(la.cholesky(m @ m.T) ** 2),
        "norms": lambda x, m: la.norm(x, 1) + la.norm(x[0], 3) + la.norm(x, np.inf, axis=1).sum(),
        "interp": lambda x, m: xp.sum(
            xp.interp(x, xp.array([-1.0, 0.0, 0.5, 2.0]), xp.concatenate([m[0], m[1, :1]]))
        ),
        "convolve": lambda x, m: xp.sum(xp.convolve(x[0], m[0], "same") ** 2),
    }


@pytest.mark.parametrize("name", sorted(_grad_programs(np)))
def test_numpy_function_gradients_against_jax(name):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(seed_of("grad", name))
    x = rng.uniform(-1.5, 1.5, (4, 5))
    m = rng.uniform(-1, 1, (3, 3)) + 3 * np.eye(3)
    f_np, f_jax = _grad_programs(np)[name], _grad_programs(jax.numpy)[name]
    with quiet():
        got = tk.grad(f_np, argnums=(0, 1))(x, m)
    want = jax.grad(f_jax, argnums=(0, 1))(x, m)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9, atol=1e-12)


def test_bincount_length_is_minlength_and_guarded():
    """np.bincount's length is static only as ``minlength``: the values' bound is a guard (or
    their dtype's), and a trace whose values do not fit says so."""
    from tracekit.errors import GuardError

    f = lambda i: np.bincount(i, minlength=4) * 2  # noqa: E731
    with quiet():
        t = tk.trace(f, np.array([0, 3, 3, 1]))
    np.testing.assert_array_equal(t(np.array([2, 2, 0, 1])), f(np.array([2, 2, 0, 1])))
    with pytest.raises(GuardError):
        t(np.array([2, -1, 0, 1]))  # NumPy raises ValueError
    with pytest.raises(GuardError) as failed:  # NumPy's result would have length 6: the
        t(np.array([2, 5, 0, 1]))  # guard on the values' bound fails before the count runs
    assert failed.value.__cause__ is None
    with pytest.raises(GuardError) as failed:  # compiled, the count fails first (its error
        tk.compile(t, progress=False)(np.array([2, 5, 0, 1]))  # the cause), then the guard
    assert isinstance(failed.value.__cause__, IndexError)
    with pytest.raises(tk.TraceError, match="minlength=2"):
        tk.trace(f := lambda i: np.bincount(i, minlength=2), np.array([0, 3]))
    with quiet():  # uint8 values are below 256: no guard
        t = tk.trace(lambda i: np.bincount(i, minlength=256), np.array([1, 2], np.uint8))
    assert not t.graph.guards
    big = np.array([255, 255], np.uint8)
    np.testing.assert_array_equal(t(big), np.bincount(big, minlength=256))
