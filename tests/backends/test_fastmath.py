"""Accuracy, special values and vectorisation of ``tracekit.backends.fastmath``.

Every (function, dtype) is evaluated the way generated kernels use it (inside an
njit loop) on 2**20 random bit patterns of the dtype, dense sweeps of its
interesting ranges and a list of special values, and checked for what the
module promises, which holds on every CPU:

* the distance in ulps (number of representable numbers between two results)
  from the correctly rounded result (float32 evaluated in float64, float64 in
  long double or, where there is none, or for ``erf``, with mpmath on a sample)
  must not exceed the docstring's "vs correctly rounded: M ulp", parsed here;
* classes must agree with NumPy's exactly: nan <-> nan, +-inf <-> the same inf,
  finite <-> finite, and where both results are zero their signs must agree;
* the evaluating loop must have been vectorised.

NumPy's own distance from the correctly rounded result depends on the CPU (its
AVX-512 and AVX2 loops and libm are different code), so a NumPy-relative bound
is never a constant: :func:`numpy_relative_bound` derives it on the running
machine as M plus NumPy's measured error there.

Run ``python tests/backends/test_fastmath.py [op ...]`` for a table of the
measured maxima next to the documented ones.
"""

from __future__ import annotations

import functools
import marshal
import math
import os
import re
import subprocess
import sys

import numba
import numpy as np
import pytest
from helpers.compare import ulp_distance

from tracekit.backends import fastmath as fm

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
DTYPES = (F32, F64)
N_RANDOM = 1 << 20

# ---------------------------------------------------------------------------
# evaluation (one compiled loop per function and dtype)
# ---------------------------------------------------------------------------

_EVAL_CACHE: dict = {}


def _evaluator(fn, nargs):
    key = (fn, nargs)
    if key not in _EVAL_CACHE:
        if nargs == 1:

            @numba.njit(fastmath=False)
            def ev(x, out):
                for i in range(x.shape[0]):
                    out[i] = fn(x[i])

        else:

            @numba.njit(fastmath=False)
            def ev(x, y, out):
                for i in range(x.shape[0]):
                    out[i] = fn(x[i], y[i])

        _EVAL_CACHE[key] = ev
    return _EVAL_CACHE[key]


def evaluate(op, dtype, *args):
    fn = fm.FAST_MATH[(op, np.dtype(dtype))]
    args = [np.ascontiguousarray(a, dtype=dtype) for a in args]
    out = np.empty_like(args[0])
    _evaluator(fn, len(args))(*args, out)
    return out


# ---------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------

_math_erf = np.frompyfunc(math.erf, 1, 1)


def reference(op, dtype, *args):
    """NumPy's answer in `dtype` (or a stated stand-in where NumPy has none)."""
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):
        if op == "erf":
            x = args[0].astype(np.float64)
            return _math_erf(x).astype(np.float64).astype(dtype)
        if op == "sigmoid":
            wide = np.float64 if dtype == F32 else np.longdouble
            x = args[0].astype(wide)
            return (wide(1) / (wide(1) + np.exp(-x))).astype(dtype)
        if op == "power":
            return np.power(*args)
        return getattr(np, op)(*args)


LONGDOUBLE_OK = np.finfo(np.longdouble).nmant >= 63  # x87 80-bit or quad precision
MP_SAMPLE = 20000  # points per function evaluated with mpmath


def reference_wide(op, dtype, *args):
    """The (nearly) correctly rounded answer: float32 evaluated in float64, float64 in
    long double (None where that is not wider, or for erf: see :func:`reference_mp`)."""
    dtype = np.dtype(dtype)
    if dtype == F32:
        wide = F64
    elif LONGDOUBLE_OK and op != "erf":
        wide = np.dtype(np.longdouble)
    else:
        return None
    with np.errstate(all="ignore"):
        return reference(op, wide, *[a.astype(wide) for a in args]).astype(dtype)


def _mp_functions():
    import mpmath as mp

    return mp, {
        "exp": mp.exp, "expm1": mp.expm1, "exp2": lambda x: mp.power(2, x), "log": mp.log,
        "log1p": mp.log1p, "log2": lambda x: mp.log(x, 2), "log10": mp.log10, "tanh": mp.tanh,
        "sigmoid": lambda x: 1 / (1 + mp.exp(-x)), "erf": mp.erf, "sin": mp.sin, "cos": mp.cos,
        "tan": mp.tan, "sinh": mp.sinh, "cosh": mp.cosh, "power": mp.power, "arctan": mp.atan,
        "arcsin": mp.asin, "arccos": mp.acos, "arctan2": mp.atan2, "arcsinh": mp.asinh,
        "arccosh": mp.acosh, "arctanh": mp.atanh, "cbrt": mp.cbrt, "hypot": mp.hypot,
        "logaddexp": lambda x, y: mp.log(mp.exp(x) + mp.exp(y)),
    }  # fmt: skip


def reference_mp(op, dtype, idx, *args):
    """The correctly rounded answer at the positions ``idx``, with mpmath (nan where the real
    function has no value or mpmath cannot say)."""
    mp, fns = _mp_functions()
    out = np.full(len(idx), np.nan, dtype)
    with mp.workprec(160):
        for k, i in enumerate(idx):
            xs = [float(a[i]) for a in args]
            if any(math.isnan(x) or math.isinf(x) for x in xs):
                continue
            try:
                y = fns[op](*[mp.mpf(x) for x in xs])
            except (ValueError, ZeroDivisionError, OverflowError):
                continue
            if isinstance(y, mp.mpf):
                out[k] = dtype.type(float(y)) if abs(y) < 2 * mp.mpf(np.finfo(dtype).max) else 0
    return out


# ---------------------------------------------------------------------------
# ulp distance and class checks
# ---------------------------------------------------------------------------


def class_mismatch(got, ref):
    """Boolean mask of results whose class (nan / inf / finite / signed zero) differs."""
    bad = np.isnan(got) != np.isnan(ref)
    inf = np.isinf(got) | np.isinf(ref)
    bad |= inf & ~(got == ref) & ~(np.isnan(got) | np.isnan(ref))
    zero = (got == 0) & (ref == 0)
    bad |= zero & (np.signbit(got) != np.signbit(ref))
    return bad


_CR_BOUND_RE = re.compile(r"vs correctly rounded:\s*([0-9.]+)\s*ulp")


def _doc(op, dtype):
    fn = fm.FAST_MATH[(op, np.dtype(dtype))]
    return fn.__doc__ or fn.py_func.__doc__ or ""


def documented_cr_bound(op, dtype):
    """The 'vs correctly rounded: N ulp' figure of the docstring (None if absent)."""
    m = _CR_BOUND_RE.search(_doc(op, dtype))
    return float(m.group(1)) if m else None


_SMALL_RESULTS_RE = re.compile(
    r"where the result is at least (\S+) in magnitude; below, absolute error at most 2\*\*(-\d+)"
)


def documented_small_results(op, dtype):
    """``(T, A)`` where the docstring promises its ulps only for results of magnitude T and
    more, and an absolute error of at most A below (None: ulps everywhere)."""
    m = _SMALL_RESULTS_RE.search(" ".join(_doc(op, dtype).split()))
    return (float(m.group(1)), 2.0 ** int(m.group(2))) if m else None


def ulp_promised(op, dtype, wide):
    """Where the documented ulp bound applies, given the correctly rounded results ``wide``."""
    small = documented_small_results(op, dtype)
    return ~(np.abs(wide) < small[0]) if small else np.ones(wide.shape, bool)


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------


def _specials(dtype):
    fi = np.finfo(dtype)
    tiny_sub = fi.smallest_subnormal
    max_sub = dtype.type(fi.smallest_normal - fi.smallest_subnormal)
    base = [
        0.0,
        np.inf,
        np.nan,
        tiny_sub,
        max_sub,
        fi.smallest_normal,
        fi.max,
        1.0,
        0.5,
        2.0,
        fi.eps,
        fi.epsneg,
        1e-3,
        0.1,
        3.0,
        10.0,
        100.0,
        1000.0,
        1e4,
        1e5,
        1e6,
        1e10,
        1e30,
    ]
    v = np.array(base, dtype=dtype)
    with np.errstate(all="ignore"):
        v = np.concatenate(
            [v, -v, np.nextafter(v, dtype.type(0)), np.nextafter(v, dtype.type(np.inf))]
        )
    return v[~np.isnan(v) | np.isnan(np.array(np.nan, dtype))]  # keep the nans we asked for


def _around(points, dtype, k=8):
    """Each point and its k neighbours on each side."""
    p = np.asarray(points, dtype=dtype)
    out = [p]
    lo = hi = p
    for _ in range(k):
        lo = np.nextafter(lo, dtype.type(-np.inf))
        hi = np.nextafter(hi, dtype.type(np.inf))
        out += [lo, hi]
    return np.concatenate(out)


def _thresholds(op, dtype):
    fi = np.finfo(dtype)
    lmax = float(np.log(np.float64(fi.max)))
    lsub = float(np.log(np.float64(fi.smallest_subnormal)))
    lnorm = float(np.log(np.float64(fi.smallest_normal)))
    t = {
        "exp": [lmax, lsub, lnorm, lsub - 0.7],
        "expm1": [lmax, -17.33, -37.43, 0.3465, -0.3465, 1.0397, -1.0397],
        "sigmoid": [-lmax, -lsub, -lnorm, 17.33, 36.7, -88.72, -745.13],
        "sinh": [lmax, lmax + 0.693, 22.0, 1.0],
        "cosh": [lmax, lmax + 0.693, 22.0, 0.3465],
        "exp2": [128.0, -126.0, -149.0, -150.0, 1024.0, -1022.0, -1074.0, -1075.0],
        "log1p": [-1.0, -0.5, -0.2929, 0.4142],
        "tanh": [0.5, 0.625, 9.01, 19.06, 22.0],
        "erf": [0.921875, 1.0, 3.92, 4.0, 5.92, 6.0],
        "log": [1.0, 0.7071067811865476, 1.4142135623730951],
        "log2": [1.0, 0.7071067811865476, 1.4142135623730951],
        "log10": [1.0, 0.7071067811865476, 1.4142135623730951],
        "sin": [np.pi / 2, np.pi, 2 * np.pi, 1048576.0, 3.0e6, 1.6e6],
        "cos": [np.pi / 2, np.pi, 2 * np.pi, 1048576.0, 3.0e6, 1.6e6],
        "tan": [np.pi / 2, np.pi, 2 * np.pi, 1048576.0, 3.0e6, 1.6e6],
        "arctan": [0.5, 1.0, 2.0],
        "arcsin": [0.5, 1.0],
        "arccos": [0.5, 1.0],
        "arcsinh": [2.0**-28, 0.5, 2.0, 2.0**28],
        "arccosh": [1.0, 2.0, 2.0**28],
        "arctanh": [2.0**-28, 0.5, 1.0],
        "cbrt": [1.0, 8.0, 27.0, 0.125, 2.0**-1022],
    }.get(op, [])
    t = [v for v in t if abs(v) < fi.max]
    return _around(t + [-v for v in t], dtype, 16) if t else np.zeros(0, dtype)


def _ranges(op, dtype, rng):
    d = dtype.type
    f32 = dtype == F32
    n = 1 << 16

    def u(lo, hi, k=n):
        return rng.uniform(lo, hi, k).astype(dtype)

    def lg(lo, hi, k=n):  # +- 10**[lo, hi]
        v = 10.0 ** rng.uniform(lo, hi, k)
        return (v * rng.choice([-1.0, 1.0], k)).astype(dtype)

    tiny = lg(-45 if f32 else -320, -3)
    if op in ("exp", "expm1", "sigmoid"):
        big = 110.0 if f32 else 750.0
        return [u(-big, big, 4 * n), u(-2, 2), u(-0.36, 0.36), tiny]
    if op in ("sinh", "cosh"):
        big = 92.0 if f32 else 712.0
        return [u(-big, big, 4 * n), u(-25, 25), u(-1.1, 1.1), tiny]
    if op == "exp2":
        big = 155.0 if f32 else 1080.0
        return [u(-big, big, 4 * n), u(-1, 1), tiny]
    if op in ("log", "log2", "log10"):
        return [u(0, 4, 4 * n), u(0.5, 2.0), d(1) + lg(-8 if f32 else -16, -1)]
    if op == "log1p":
        return [u(-1, 1, 4 * n), u(-1, 10), tiny, d(-1) + np.abs(lg(-7 if f32 else -16, 0))]
    if op in ("tanh", "erf"):
        big = 12.0 if f32 else 30.0
        return [u(-big, big, 4 * n), u(-1.2, 1.2), tiny]
    if op in ("sin", "cos", "tan"):
        # multiples of pi/2 rounded to the dtype are the hard cases of the reduction
        k = rng.integers(1, 1 << 22, n).astype(np.float64)
        near = _around((k * (np.pi / 2)), dtype, 2)
        out = [
            u(-10, 10, 4 * n),
            u(-1e4, 1e4),
            u(-1e5, 1e5),
            u(-3.5e6, 3.5e6),
            near,
            lg(5, 38 if f32 else 300, n),
            tiny,
        ]
        return out
    if op in ("arcsin", "arccos"):
        return [u(-1, 1, 4 * n), u(-0.55, 0.55), d(1) - np.abs(lg(-8 if f32 else -16, -1)), tiny]
    if op == "arctan":
        return [u(-4, 4, 4 * n), lg(-3, 38 if f32 else 300), u(0.4, 2.5), tiny]
    huge = lg(-3, 38 if f32 else 308)
    if op in ("arcsinh", "cbrt"):
        return [u(-4, 4, 4 * n), huge, u(-2.5, 2.5), tiny]
    if op == "arccosh":
        near_one = d(1) + np.abs(lg(-8 if f32 else -16, 0))
        return [u(1, 4, 4 * n), np.abs(huge), u(0.5, 2.5), near_one]
    if op == "arctanh":
        near_one = d(1) - np.abs(lg(-8 if f32 else -16, -1))
        return [u(-1, 1, 4 * n), u(-0.6, 0.6), near_one, -near_one, tiny]
    raise KeyError(op)


def inputs(op, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    itype = np.uint32 if dtype == F32 else np.uint64
    bits = rng.integers(0, np.iinfo(itype).max, N_RANDOM, dtype=itype, endpoint=True)
    parts = [bits.view(dtype), _specials(dtype), _thresholds(op, dtype)]
    parts += _ranges(op, dtype, rng)
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])


BINARY = ("power", "arctan2", "hypot", "logaddexp")


def two_inputs(op, dtype):
    inputs = {"power": power_inputs, "hypot": hypot_inputs, "logaddexp": logaddexp_inputs}
    return inputs.get(op, arctan2_inputs)(dtype)


def logaddexp_inputs(dtype, seed=0):
    """arctan2's pairs, ordinary pairs (results near zero among them), pairs far apart and
    pairs of equal values; float64: pairs close to the zero of e**x + e**y = 1 (float32
    promises its ulp only above 2**-26, which these reach)."""
    rng = np.random.default_rng(seed)
    m = 1 << 16
    ys, xs = arctan2_inputs(dtype, seed)
    near = rng.uniform(-5, 5, (2, m))
    far = rng.uniform(-100, 100, (2, m))
    same = rng.uniform(-50, 50, m)
    ys = [ys, near[0], far[0], same]
    xs = [xs, near[1], far[1], same]
    if dtype == F64:
        ys.append(rng.uniform(-3, -1e-3, m))
        xs.append(zero_partner(ys[-1]) * (1 + rng.uniform(-1e-9, 1e-9, m)))
    return (np.concatenate([np.asarray(a).astype(dtype) for a in ys]),
            np.concatenate([np.asarray(a).astype(dtype) for a in xs]))  # fmt: skip


def zero_partner(x):
    """y with e**x + e**y = 1 (x < 0)."""
    return np.log(-np.expm1(x))


def hypot_inputs(dtype, seed=0):
    """arctan2's pairs (every ratio and magnitude, specials) and pairs whose squares overflow
    or underflow, of equal or very different sizes."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    fi, m = np.finfo(dtype), 1 << 16
    lo, hi = np.log10(float(fi.smallest_subnormal)), np.log10(float(fi.max))
    mag = 10.0 ** rng.uniform(lo, hi, m)
    ratio = 10.0 ** rng.uniform(-20, 0, m) * rng.choice([-1.0, 1.0], m)
    ys, xs = arctan2_inputs(dtype, seed)
    similar = mag * rng.uniform(0.5, 1, m)
    with np.errstate(over="ignore", under="ignore"):
        ys = [ys, (mag * ratio).astype(dtype), mag.astype(dtype)]
        xs = [xs, mag.astype(dtype), similar.astype(dtype)]
    return np.concatenate(ys), np.concatenate(xs)


def arctan2_inputs(dtype, seed=0):
    """Random bit pairs, ordinary angles and magnitudes, ratios near 1/2 and 1, specials."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    itype = np.uint32 if dtype == F32 else np.uint64
    n, m = N_RANDOM // 2, 1 << 17
    bits = [rng.integers(0, np.iinfo(itype).max, n, dtype=itype, endpoint=True).view(dtype)
            for _ in range(2)]  # fmt: skip
    r = 10.0 ** rng.uniform(-5, 5, m)
    ang = rng.uniform(-np.pi, np.pi, m)
    near = rng.uniform(-1, 1, m) * 10.0 ** rng.uniform(-300 if dtype == F64 else -37, 0, m)
    edge = np.float64(np.finfo(dtype).max) * rng.uniform(0.4, 1.0, m)
    sp = _specials(dtype)
    sx, sy = np.meshgrid(sp, sp)
    ys = [bits[0], r * np.sin(ang), near * rng.uniform(0.4, 1.1, m), edge, sy.ravel()]
    xs = [bits[1], r * np.cos(ang), near, edge[::-1], sx.ravel()]
    with np.errstate(over="ignore"):
        return (np.concatenate([np.asarray(a).astype(dtype) for a in ys]),
                np.concatenate([np.asarray(a).astype(dtype) for a in xs]))  # fmt: skip


def power_inputs(dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    d = dtype.type
    itype = np.uint32 if dtype == F32 else np.uint64
    n = N_RANDOM // 2
    xs, ys = [], []
    bx = rng.integers(0, np.iinfo(itype).max, n, dtype=itype, endpoint=True).view(dtype)
    by = rng.integers(0, np.iinfo(itype).max, n, dtype=itype, endpoint=True).view(dtype)
    xs.append(bx)
    ys.append(by)
    m = 1 << 17
    # ordinary magnitudes
    xs.append(rng.uniform(0, 10, m).astype(dtype))
    ys.append(rng.uniform(-40, 40, m).astype(dtype))
    # near 1 with large exponents (stresses the log precision)
    xs.append((1 + rng.uniform(-1e-3, 1e-3, m)).astype(dtype))
    ys.append(rng.uniform(-1e5, 1e5, m).astype(dtype))
    # results near overflow / underflow
    x = rng.uniform(1.5, 3.0, m).astype(dtype)
    top = 128 if dtype == F32 else 1024
    bottom = -150 if dtype == F32 else -1075
    target = rng.uniform(bottom - 2, top + 1, m)
    xs.append(x)
    ys.append((target / np.log2(x.astype(np.float64))).astype(dtype))
    # negative bases with integer (odd and even) and non-integer exponents
    xs.append(-rng.uniform(0, 10, m).astype(dtype))
    ys.append(np.round(rng.uniform(-60, 60, m)).astype(dtype))
    xs.append(-rng.uniform(0, 10, m // 4).astype(dtype))
    ys.append(rng.uniform(-60, 60, m // 4).astype(dtype))
    # all pairs of special values
    fi = np.finfo(dtype)
    sp = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1.0,
            -1.0,
            0.5,
            -0.5,
            2.0,
            -2.0,
            3.0,
            -3.0,
            fi.smallest_subnormal,
            -fi.smallest_subnormal,
            fi.max,
            -fi.max,
            2.5,
            -2.5,
            2.0**24,
            2.0**53 if dtype == F64 else 2.0**25,
            1e-3,
            0.75,
            1.25,
            np.nextafter(d(1), d(2)),
            np.nextafter(d(1), d(0)),
        ],
        dtype=dtype,
    )
    gx, gy = np.meshgrid(sp, sp)
    xs.append(gx.ravel())
    ys.append(gy.ravel())
    ys_extra = np.concatenate([sp, -sp])
    xs.append(np.full_like(ys_extra, d(-2.0)))
    ys.append(ys_extra)
    return (
        np.concatenate([np.asarray(a, dtype) for a in xs]),
        np.concatenate([np.asarray(a, dtype) for a in ys]),
    )


# ---------------------------------------------------------------------------
# the checks
# ---------------------------------------------------------------------------


class Measurement:
    """Results of one (function, dtype) against NumPy and the correctly rounded reference."""

    def __init__(self, op, dtype):
        dtype = np.dtype(dtype)
        self.args = two_inputs(op, dtype) if op in BINARY else (inputs(op, dtype),)
        self.got = evaluate(op, dtype, *self.args)
        self.ref = reference(op, dtype, *self.args)
        self.bad = class_mismatch(self.got, self.ref)
        d = np.where(self.bad, 0.0, ulp_distance(self.got, self.ref))
        self.worst = int(np.argmax(d))
        self.maxulp = float(d[self.worst])  # vs NumPy: reported, not promised
        self.idx, self.wide = correctly_rounded(op, dtype, self.args, far=np.argsort(d))
        self.maxulp_wide, self.maxabs_wide = _max_errors(op, dtype, self.got[self.idx], self.wide)
        self.numpy_wide, self.numpy_abs = _max_errors(op, dtype, self.ref[self.idx], self.wide)

    def at(self, i):
        return tuple(repr(a[i]) for a in self.args), repr(self.got[i]), repr(self.ref[i])


def correctly_rounded(op, dtype, args, far=None):
    """(positions, correctly rounded results there): every position with a wider type,
    else (mpmath) a random sample plus the positions last in ``far``."""
    wide = reference_wide(op, dtype, *args)
    if wide is not None:
        return np.arange(len(args[0])), wide
    rng = np.random.default_rng(3)
    idx = rng.choice(len(args[0]), MP_SAMPLE)
    if far is not None:
        idx = np.concatenate([idx, far[-MP_SAMPLE // 10 :]])
    idx = np.unique(idx)
    return idx, reference_mp(op, dtype, idx, *args)


_NUMPY_ERROR: dict = {}


def numpy_errors(op, dtype) -> tuple:
    """NumPy's largest distance, on this machine, from the correctly rounded result over the
    inputs above (its loops differ per CPU: AVX-512, AVX2, libm): ``(ulps, absolute)``, the
    absolute error over the results a docstring promises no ulps for (0.0 where none)."""
    key = (op, np.dtype(dtype))
    if key not in _NUMPY_ERROR:
        args = two_inputs(op, key[1]) if op in BINARY else (inputs(op, key[1]),)
        ref = reference(op, key[1], *args)
        idx, wide = correctly_rounded(op, key[1], args)
        _NUMPY_ERROR[key] = _max_errors(op, key[1], ref[idx], wide)
    return _NUMPY_ERROR[key]


def numpy_relative_bound(op, dtype) -> float:
    """How far tracekit's fast ``op`` may be from NumPy's on this machine: its own bound from
    the correctly rounded result plus NumPy's measured distance from it (in ulps, where the
    docstring promises ulps: see :func:`numpy_relative_small_results`)."""
    return documented_cr_bound(op, dtype) + numpy_errors(op, dtype)[0]


def numpy_relative_small_results(op, dtype) -> tuple | None:
    """``(T, A)``: below T in magnitude, tracekit's fast ``op`` may be A from NumPy's on this
    machine (its documented absolute error plus NumPy's measured one); None where the docstring
    promises ulps everywhere."""
    small = documented_small_results(op, dtype)
    return (small[0], small[1] + numpy_errors(op, dtype)[1]) if small else None


def _max_errors(op, dtype, got, wide) -> tuple:
    """Largest ulp distance where the docstring promises ulps, largest absolute error
    elsewhere, where the reference has a value of the same class."""
    ok = ~class_mismatch(got, wide) & ~np.isnan(wide)
    ulps = ulp_promised(op, dtype, wide)
    with np.errstate(invalid="ignore"):
        absolute = np.abs(got.astype(np.float64) - wide)
    return (
        float(np.where(ok & ulps, ulp_distance(got, wide), 0.0).max(initial=0.0)),
        float(np.where(ok & ~ulps, absolute, 0.0).max(initial=0.0)),
    )


_MEASURED: dict = {}


def measure(op, dtype):
    key = (op, np.dtype(dtype))
    if key not in _MEASURED:
        _MEASURED.clear()  # keep memory flat: tests run one (op, dtype) at a time
        _MEASURED[key] = Measurement(op, dtype)
    return _MEASURED[key]


CASES = [(op, dt) for op in fm.OPS for dt in DTYPES if (op, dt) in fm.FAST_MATH]
IDS = [f"{o}-{d}" for o, d in CASES]


_VECTOR_FMA = re.compile(r"@llvm\.fma\.v(\d+)f(32|64)")


@pytest.mark.parametrize("op,dtype", CASES, ids=IDS)
def test_function(op, dtype):
    """One test per (function, dtype) so that the expensive measurement is done once
    (also under pytest-xdist):

    1. classes (nan / inf / signed zero) agree with NumPy everywhere;
    2. max ulp distance from the correctly rounded result (float32 evaluated in float64,
       float64 in long double or mpmath) <= the docstring's 'vs correctly rounded' (and the
       absolute error <= the documented one where it promises no ulps for small results);
    3. the evaluator loop was vectorised by LLVM: every function uses fma, so a vectorised
       loop contains a vector fma (``llvm.fma.v8f32`` ...); a libm call, or anything else
       LLVM cannot vectorise, in a function makes this fail.
    """
    m = measure(op, dtype)
    if m.bad.any():
        detail = [m.at(j) for j in np.flatnonzero(m.bad)[:10]]
        pytest.fail(f"{op}/{dtype}: {int(m.bad.sum())} class mismatches, e.g. {detail}")

    cr_bound = documented_cr_bound(op, dtype)
    assert cr_bound is not None, f"{op}/{dtype}: docstring lacks 'vs correctly rounded: N ulp'"
    assert m.maxulp_wide <= cr_bound, (
        f"{op}/{dtype}: {m.maxulp_wide} ulp from the correctly rounded result > documented "
        f"{cr_bound}"
    )
    small = documented_small_results(op, dtype)
    assert small is None or m.maxabs_wide <= small[1], (
        f"{op}/{dtype}: absolute error {m.maxabs_wide} below {small[0]} > documented {small[1]}"
    )

    fn = fm.FAST_MATH[(op, np.dtype(dtype))]
    ev = _evaluator(fn, 2 if op in BINARY else 1)
    llvm_ir = ev.inspect_llvm(ev.signatures[0])
    widths = [int(w) for w, _ in _VECTOR_FMA.findall(llvm_ir)]
    assert widths and max(widths) >= 2, f"{op}/{dtype}: loop not vectorised"
    assert not re.search(r"call [^@]*@(sin|cos|tan|exp|log|pow|tanh|erf)f?\b", llvm_ir)


# float32 functions computed in float32 throughout (twice the lanes of a float64 evaluation)
FLOAT32_NATIVE = ("exp", "expm1", "log", "log1p", "tanh", "sigmoid", "erf", "log2", "log10",
                  "sinh", "cosh", "arctan", "arcsin", "arccos")  # fmt: skip


@pytest.mark.parametrize("op", FLOAT32_NATIVE)
def test_float32_functions_stay_in_float32(op):
    """No widening to float64 anywhere in the vectorised loop of these float32 functions."""
    ev = _evaluator(fm.FAST_MATH[(op, F32)], 1)
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    ev(x, np.empty_like(x))
    llvm_ir = ev.inspect_llvm(ev.signatures[0])
    assert "fpext" not in llvm_ir and "x double>" not in llvm_ir, f"{op}: float64 in the loop"


def test_registry():
    assert set(fm.OPS) == {
        "exp",
        "expm1",
        "log",
        "log1p",
        "tanh",
        "sigmoid",
        "erf",
        "sin",
        "cos",
        "power",
        "exp2",
        "log2",
        "log10",
        "sinh",
        "cosh",
        "tan",
        "arctan",
        "arcsin",
        "arccos",
        "arctan2",
        "arcsinh",
        "arccosh",
        "arctanh",
        "cbrt",
        "hypot",
        "logaddexp",
    }
    ns = fm.namespace()
    for op in fm.OPS:
        for dt, sfx in ((F32, "f32"), (F64, "f64")):
            name = fm.name_for(op, dt)
            assert name == f"fm_{op}_{sfx}"
            assert ns[name] is fm.FAST_MATH[(op, dt)]
            assert fm.name_for(op, dt.type) == name
            assert documented_cr_bound(op, dt) is not None  # every function states its bound
    assert fm.name_for("exp", np.int32) is None
    assert len(ns) == len(fm.FAST_MATH) + len(fm.POWER_CONST) + len(fm.NEAR) + len(fm.FAR)
    for dt, sfx in ((F32, "f32"), (F64, "f64")):
        assert ns[fm.power_const_name(dt)] is fm.POWER_CONST[dt]
        assert fm.power_const_name(dt) == f"fm_power_const_{sfx}"


def test_namespace_in_generated_source():
    """The way the code generator uses it: names injected into generated source's globals."""
    exp, power = fm.name_for("exp", F32), fm.name_for("power", F32)
    src = (
        "def kernel(x, y, out):\n"
        "    for i in range(x.shape[0]):\n"
        f"        out[i] = {exp}(x[i]) + {power}(x[i], y[i])\n"
    )
    g = {"np": np, **fm.namespace()}
    exec(compile(src, "<generated>", "exec"), g)
    kernel = numba.njit(fastmath=False)(g["kernel"])
    x = np.linspace(0.5, 3, 101).astype(np.float32)
    y = np.full_like(x, 1.5)
    out = np.empty_like(x)
    kernel(x, y, out)
    np.testing.assert_allclose(out, np.exp(x) + np.power(x, y), rtol=1e-6)


def test_pow_special_cases_match_c99():
    nan, inf = np.nan, np.inf
    cases = [  # (x, y) pairs from C99 Annex F.9.4.4
        (nan, 0.0),
        (1.0, nan),
        (-1.0, inf),
        (-1.0, -inf),
        (0.0, -3.0),
        (-0.0, -3.0),
        (-0.0, 3.0),
        (-0.0, 2.0),
        (-0.0, -2.0),
        (-0.0, -inf),
        (0.5, -inf),
        (2.0, -inf),
        (-inf, -3.0),
        (-inf, -2.0),
        (-inf, 3.0),
        (-inf, 2.5),
        (inf, -1.0),
        (-8.0, 1.0 / 3),
        (-2.0, 1e300),
        (-2.0, 2.0**53 + 2),
        (-1.0, 2.0**53 + 1.0 * 2),
    ]
    x = np.array([c[0] for c in cases])
    y = np.array([c[1] for c in cases])
    for dt in DTYPES:
        with np.errstate(all="ignore"):
            xd, yd = x.astype(dt), y.astype(dt)
            ref = np.power(xd, yd)
        got = evaluate("power", dt, xd, yd)
        assert not class_mismatch(got, ref).any()
        np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("op", ["exp", "exp2", "sigmoid"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_exponentials_where_they_round_to_zero_and_just_before(op, dtype):
    """Arguments around where an exponential's result turns subnormal and rounds to zero (the
    functions give zero there without computing it, ``fastmath._exp64_impl``): NumPy's
    classes, and within the ulps tracekit's function may be from NumPy's (its documented
    bound plus NumPy's own measured error)."""
    edges = {"exp": (-746.0, -745.13, -708.4, -104.0, -103.97, -87.3),
             "exp2": (-1080.0, -1075.0, -1074.0, -1022.0, -151.0, -150.0, -149.0, -126.0),
             "sigmoid": (-746.0, -745.13, -708.4, -104.0, -103.97, -87.3)}[op]  # fmt: skip
    x = np.concatenate([np.linspace(e - 3.0, e + 3.0, 601) for e in edges])
    x = np.concatenate([x, [-np.inf, np.nan, -1e30, -2e4]]).astype(dtype)
    got, want = evaluate(op, dtype, x), reference(op, dtype, x)
    assert not class_mismatch(got, want).any()
    np.testing.assert_array_max_ulp(got, want, maxulp=numpy_relative_bound(op, dtype))


def test_logaddexp_f64_is_numpys_at_special_and_far_apart_pairs():
    """Infinities, nan, equal arguments (x + ln2) and arguments so far apart that the result
    is the larger one: the same bits as NumPy."""
    inf, nan = np.inf, np.nan
    specials = [inf, -inf, nan, 0.0, -0.0, 1e300, -1e300, 5e-324]
    x, y = (a.ravel() for a in np.meshgrid(specials, specials))
    rng = np.random.default_rng(5)
    big = rng.uniform(1, 1e6, 4096) * rng.choice([-1.0, 1.0], 4096)
    apart = big - rng.uniform(40, 1e4, 4096) * np.maximum(1, np.abs(big))
    equal = rng.uniform(-1e3, 1e3, 4096)
    x = np.concatenate([x, big, apart, equal])
    y = np.concatenate([y, apart, big, equal])
    with np.errstate(all="ignore"):
        want = np.logaddexp(x, y)
    np.testing.assert_array_equal(evaluate("logaddexp", F64, x, y), want)


def test_logaddexp_f64_near_its_zero_is_within_its_absolute_bound():
    """Pairs close to e**x + e**y = 1, where the result cancels: the error against mpmath is
    within the documented absolute bound, and the results are small enough that an error of
    ulps would be far smaller."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-2, -1e-3, 2000)
    y = zero_partner(x) * (1 + rng.uniform(-1e-12, 1e-12, x.size))
    idx = np.arange(x.size)
    exact = reference_mp("logaddexp", F64, idx, x, y)
    got = evaluate("logaddexp", F64, x, y)
    threshold, bound = documented_small_results("logaddexp", F64)
    assert np.abs(exact).max() < threshold and np.abs(exact).min() < 1e-12
    assert np.abs(got - exact).max() <= bound


# exponents the code generator hands to power_const (2 and -1 it computes as NumPy does, with
# x * x and 1 / x: they are here for the accuracy only; 0.5 is NumPy's sqrt, never sent here)
CONST_EXPONENTS = (3, 4, 5, 6, 7, 8, 11, 16, 31, -2, -3, -5, -8, -16, -31, 0, 1, 2, -1,
                   1.5, 2.5, -0.5, -1.5, -2.5, 7.5, -7.5, 15.5, -15.5, 0.25, 0.75, 1.25,
                   -0.25, -0.75, -1.25, 2.75, 7.25, -7.75, 15.75, -15.25)  # fmt: skip


def _results_near_range_edges(y, dtype, rng):
    """x (both signs) whose ``x ** y`` falls near the ends of ``dtype``'s range and
    of the band where ``power_const`` computes without scaling x: subnormal results, the
    smallest normal, overflow, and 2**(+-960) to 2**(+-1000)."""
    info = np.finfo(dtype)
    lo, hi = np.log2(float(info.smallest_subnormal)), np.log2(float(info.max))
    targets = np.concatenate([np.linspace(lo - 2, lo + 60, 9), np.linspace(-1022, -900, 5),
                              np.linspace(900, hi + 2, 7)])  # fmt: skip
    if y == 0:
        targets = np.zeros_like(targets)
    with np.errstate(over="ignore"):
        scale = np.exp2(np.clip(targets / (abs(y) or 1.0), -1074, 1023))
        x = (scale[:, None] * (1 + rng.uniform(-0.01, 0.01, (targets.size, 64)))).ravel()
        x = x.astype(dtype)  # beyond float32's range: inf, a class the test also wants
    return np.concatenate([x, -x])


@numba.njit(fastmath=False)
def _power_const_loop(fn, x, y, out):
    for i in range(x.shape[0]):
        out[i] = fn(x[i], y)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f64"])
def test_power_by_a_constant(dtype):
    """``power_const``: within its documented ulps of the correctly rounded power for every
    exponent it is for (random bit patterns, ordinary magnitudes, special values), NumPy's
    classes (nan, inf, signed zeros) everywhere, and a vectorised loop without pow or exp."""
    fn = fm.POWER_CONST[dtype]
    bound = float(_CR_BOUND_RE.search(fn.__doc__ or fn.py_func.__doc__).group(1))
    rng = np.random.default_rng(1)
    itype = np.uint32 if dtype == F32 else np.uint64
    bits = rng.integers(0, np.iinfo(itype).max, N_RANDOM // 4, dtype=itype, endpoint=True)
    ordinary = rng.uniform(-4, 4, 1 << 16).astype(dtype)
    base = np.concatenate([bits.view(dtype), _specials(dtype), ordinary])
    wide = F64 if dtype == F32 else (np.dtype(np.longdouble) if LONGDOUBLE_OK else None)
    for y in CONST_EXPONENTS:
        x = np.concatenate([base, _results_near_range_edges(y, dtype, rng)])
        got = np.empty_like(x)
        _power_const_loop(fn, x, dtype.type(y), got)
        with np.errstate(all="ignore"):
            bad = class_mismatch(got, np.power(x, dtype.type(y)))
            assert not bad.any(), (y, x[bad][:5], got[bad][:5])
            if wide is not None:
                want = np.power(x.astype(wide), wide.type(y)).astype(dtype)
                d = ulp_distance(got, want)
                assert d.max() <= bound, (y, x[np.argmax(d)], got[np.argmax(d)])

    @numba.njit(fastmath=False)
    def kernel(x, out):
        for i in range(x.shape[0]):
            out[i] = fn(x[i], dtype.type(2.5)) + fn(x[i], dtype.type(-3.0))

    out = np.empty_like(x[:1000])
    kernel(x[:1000], out)
    llvm_ir = kernel.inspect_llvm(kernel.signatures[0])
    widths = _vector_width_in_llvm(llvm_ir, "double") | _vector_width_in_llvm(llvm_ir, "float")
    assert widths and max(widths) >= 2, "loop calling power_const was not vectorised"
    assert not re.search(r"call [^@]*@(llvm\.)?(pow|exp|log)", llvm_ir)


def test_huge_trig_arguments_are_exact_enough():
    """Payne-Hanek path: the largest finite inputs against a 128-bit-accurate reference."""
    # sin(2**k) for large k: compare float64 to float32 results' consistency; the float32
    # inputs are exactly representable in float64, and sin_f64 is accurate to 1 ulp there,
    # so float32(sin_f64(x)) must be within 1 ulp of sin_f32(x).
    xs = np.ldexp(np.float64(1.0) + np.arange(64) / 64.0, np.arange(20, 128, 108 / 64).astype(int))
    x32 = xs.astype(np.float32)
    for op in ("sin", "cos"):
        a = evaluate(op, F32, x32)
        b = evaluate(op, F64, x32.astype(np.float64)).astype(np.float32)
        assert ulp_distance(a, b).max() <= 1
        np.testing.assert_allclose(a, reference(op, F32, x32), rtol=0, atol=2e-7)


def test_trig_of_the_hardest_double():
    # x = 6381956970095103 * 2**797 is the double closest to a multiple of pi/2
    # (Muller, "Elementary Functions"): x = (odd) * pi/2 - 4.687165924254627611e-19...
    x = np.array([np.ldexp(6381956970095103.0, 797)])
    np.testing.assert_array_equal(evaluate("sin", F64, x), [1.0])
    np.testing.assert_array_equal(evaluate("cos", F64, x), [-4.687165924254628e-19])
    np.testing.assert_array_equal(evaluate("tan", F64, x), [-2.133485385753704e18])


# ---------------------------------------------------------------------------
# vectorisation
# ---------------------------------------------------------------------------


def _vector_width_in_llvm(llvm_ir, elem):
    return {int(n) for n in re.findall(r"<(\d+) x " + elem + ">", llvm_ir)}


NEAR_LIMIT = {F32: 2.0**20, F64: 3.0e6}  # the Cody-Waite ranges the near versions cover


@pytest.mark.parametrize("op,dtype", [(o, d) for o in ("sin", "cos", "tan") for d in DTYPES])
def test_near_versions_are_the_full_ones_where_the_far_test_is_zero(op, dtype):
    """``<op>_near`` (no Payne-Hanek) gives the full function's bits wherever ``trig_far``
    says 0, which it says exactly for the finite arguments beyond the Cody-Waite range; and
    its loop vectorises without the large-argument path's table gathers."""
    near_name, far_name = fm.near_names(op, dtype)
    ns = fm.namespace()
    near, far = ns[near_name], ns[far_name]
    x = inputs(op, dtype)
    x = np.concatenate([x, np.array([NEAR_LIMIT[dtype]], dtype)])
    x = np.concatenate([x, np.nextafter(x[-1:], dtype.type(np.inf)), -x[-2:]])
    got_near, got_full = np.empty_like(x), evaluate(op, dtype, x)
    _evaluator(near, 1)(x, got_near)
    flags = np.empty(len(x), np.int64)
    _flags(far)(x, flags)
    beyond = np.isfinite(x) & (np.abs(x) > NEAR_LIMIT[dtype])
    np.testing.assert_array_equal(flags, beyond.astype(np.int64))
    assert 0 < beyond.sum() < len(x) - 1000  # both kinds, many of each
    np.testing.assert_array_equal(got_near[~beyond], got_full[~beyond])  # (nan == nan here)
    ev = _evaluator(near, 1)
    assert "gather" not in ev.inspect_llvm(ev.signatures[0])
    assert _VECTOR_FMA.search(ev.inspect_llvm(ev.signatures[0]))


@functools.cache
def _flags(far):
    @numba.njit(fastmath=False)
    def flags(x, out):
        for i in range(x.shape[0]):
            out[i] = far(x[i])

    return flags


def test_near_names():
    assert fm.near_names("sin", F64) == ("fm_sin_near_f64", "fm_trig_far_f64")
    assert fm.near_names("tan", np.float32) == ("fm_tan_near_f32", "fm_trig_far_f32")
    assert fm.near_names("exp", F64) is None


def _fitted_tables():
    """(table, its polynomial's variable on [lo, hi], the function it approximates there as
    f(v, p) -> (approximation, exact) with p the polynomial's value, the error its comment in
    ``fastmath.py`` states, log2 of the relative error) for the tables fitted for float32."""
    import mpmath as mp

    def log2_1p(z, p):  # log2(1 + f) = s P(s^2), z = s^2
        s = mp.sqrt(z)
        return s * p, 2 * mp.atanh(s) / mp.log(2)

    def sin(z, p):
        r = mp.sqrt(z)
        return r + r**3 * p, mp.sin(r)

    def atan(z, p):
        u = mp.sqrt(z)
        return u + u**3 * p, mp.atan(u)

    quarter = float((mp.pi / 4) ** 2)
    return [
        ("LOG2_POW32", 0.0, 17 - 12 * 2**0.5, log2_1p, -37.8),  # s <= (sqrt2 - 1) / (sqrt2 + 1)
        ("EXP2_POW32", -0.5, 0.5, lambda r, p: (p, mp.power(2, r)), -34.5),
        ("SIN_QUARTER_PI", 0.0, quarter, sin, -35.6),
        ("COS_QUARTER_PI", 0.0, quarter, lambda z, p: (1 + z * p, mp.cos(mp.sqrt(z))), -31.8),
        ("ATAN_32VIA64", 0.0, 0.25, atan, -36.1),
        ("RCBRT32", 1.0, 2.0, lambda m, p: (p, mp.power(m, mp.mpf(-1) / 3)), -11.7),
    ]


@pytest.mark.parametrize("table", [t[0] for t in _fitted_tables()])
def test_fitted_tables_meet_the_error_their_comments_state(table):
    """Each polynomial fitted for float32's needs, its coefficients as stored, approximates its
    function within the relative error its comment states (to 0.1 in the exponent; the float32
    functions' ulp bounds rest on these), on 2,000 points of its interval in mpmath."""
    import mpmath as mp

    name, lo, hi, approx, claimed = next(t for t in _fitted_tables() if t[0] == table)
    coeffs = [mp.mpf(float.fromhex(c)) for c in fm._COEFFS[name]]
    worst = mp.mpf(0)
    with mp.workdps(40):
        for v in np.linspace(lo, hi, 2000):
            v = mp.mpf(float(v))
            p = mp.mpf(0)
            for c in reversed(coeffs):  # (mpmath's polyval changed its coefficient order)
                p = p * v + c
            got, want = approx(v, p)
            if want != 0:
                worst = max(worst, abs((got - want) / want))
    measured = float(mp.log(worst, 2))
    assert measured <= claimed + 0.1, (name, measured, claimed)
    assert measured >= claimed - 1.0, (name, measured, "the comment understates the accuracy")


@pytest.mark.parametrize("name", ["EXP2_POW32", "LOG2_POW32", "EXPQ64", "SIN64"])
def test_estrins_scheme_evaluates_hornerss_polynomial(name):
    """``_poly(..., estrin=True)`` pairs the same coefficients differently: its values are
    Horner's within a few roundings, for every count of coefficients (odd and even counts,
    leftovers at each level). (float64 tables only: ``_poly`` binds its names in the module,
    and a float32 table made again as float64 would change the functions compiled after.)"""
    x = np.random.default_rng(5).uniform(-0.5, 0.5, 1000)
    for start in range(len(fm._COEFFS[name]) - 1):
        horner = numba.njit(fm._flatten(fm._poly(name, float, start)))
        estrin = numba.njit(fm._flatten(fm._poly(name, float, start, estrin=True)))
        want = np.array([horner(v) for v in x])
        got = np.array([estrin(v) for v in x])
        np.testing.assert_allclose(got, want, rtol=8 * np.finfo(F64).eps, atol=1e-300)
    assert "x1 = x * x" in fm._HELPERS[fm._poly(name, float, estrin=True)]


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_float32_trig_reduces_without_the_float64_table(op):
    """float32 trig reduces its argument in float32 (Payne-Hanek in integer arithmetic): a
    vectorised loop evaluates the large-argument path for every element, and the float64
    one's table gathers cost tan twice sin's time."""
    ev = _evaluator(fm.FAST_MATH[(op, F32)], 1)
    x = np.linspace(-1e30, 1e30, 64, dtype=F32)
    out = np.empty_like(x)
    ev(x, out)
    assert ulp_distance(out, getattr(np, op)(x.astype(F64)).astype(F32)).max() <= 1
    assert "gather" not in ev.inspect_llvm(ev.signatures[0])


@pytest.mark.parametrize("parallel", [False, True], ids=["range", "prange"])
def test_loop_calling_exp_f32_vectorises(parallel):
    exp = fm.exp_f32

    @numba.njit(parallel=parallel, fastmath=False)
    def kernel(x, out):
        for i in numba.prange(x.shape[0]):
            out[i] = exp(x[i])

    x = np.linspace(-5, 5, 1000).astype(np.float32)
    out = np.empty_like(x)
    kernel(x, out)
    np.testing.assert_allclose(out, np.exp(x), rtol=3e-7)
    sig = kernel.signatures[0]
    llvm_ir = kernel.inspect_llvm(sig)
    widths = _vector_width_in_llvm(llvm_ir, "float")
    assert widths and max(widths) >= 4, "loop calling exp_f32 was not vectorised"
    assert max(int(w) for w, _ in _VECTOR_FMA.findall(llvm_ir)) >= 4
    # packed single-precision fma on xmm/ymm/zmm registers in the machine code
    asm = kernel.inspect_asm(sig)
    assert re.search(r"vfmadd\w*ps\s+%[xyz]mm", asm), "no packed fma in the assembly"
    # a scalar libm call in the loop body would block vectorisation
    assert not re.search(r"call [^@]*@(expf|exp|llvm\.exp\.)", llvm_ir)


def test_gelu_kernel_with_three_functions_vectorises():
    tanh, exp, log1p = fm.tanh_f32, fm.exp_f32, fm.log1p_f32
    c = np.float32(0.7978846)

    @numba.njit(fastmath=False)
    def kernel(x, out):
        for i in range(x.shape[0]):
            v = x[i]
            out[i] = np.float32(0.5) * v * (np.float32(1) + tanh(c * v)) + log1p(exp(v))

    x = np.linspace(-5, 5, 999).astype(np.float32)
    out = np.empty_like(x)
    kernel(x, out)
    x64 = x.astype(np.float64)
    ref = 0.5 * x64 * (1 + np.tanh(0.7978846 * x64)) + np.log1p(np.exp(x64))
    np.testing.assert_allclose(out, ref, rtol=2e-6, atol=1e-6)
    llvm_ir = kernel.inspect_llvm(kernel.signatures[0])
    assert max(int(w) for w, _ in _VECTOR_FMA.findall(llvm_ir)) >= 4


# ---------------------------------------------------------------------------
# compilation: flat functions, made on first use, kept in a cache folder
# ---------------------------------------------------------------------------


def test_public_functions_compile_from_flat_source():
    """No helper is left for numba to compile or inline into a public function's code."""
    helpers = {fn.__name__ for fn in fm._HELPERS}
    for name in ("sin_f64", "power_f64", "erf_f32", "arctan2_f32"):
        called = set(getattr(fm, name).py_func.__code__.co_names)
        assert called, name
        assert not called & helpers, (name, called & helpers)


def test_functions_made_after_cache_in_load_from_its_folder(tmp_path, monkeypatch):
    """A function first used after ``cache_in`` (they are made on first use) keeps its machine
    code in the folder, and the same function made again (as in a new process) loads it."""
    name = "exp2_f32"
    monkeypatch.setattr(fm, "INSTALLED", str(tmp_path / "none installed"))
    monkeypatch.setattr(fm, "_cache_class", None)
    monkeypatch.delitem(fm.__dict__, name, raising=False)
    monkeypatch.setattr(fm, "_made", {})
    assert fm.cache_in(str(tmp_path))
    fm._dispatcher(name).compile((numba.float32,))
    assert list(tmp_path.glob("*.nbi")), "nothing saved in the cache folder"
    monkeypatch.setattr(fm, "_made", {})  # forget it: made again from its source
    again = fm._dispatcher(name)
    again.compile((numba.float32,))
    assert sum(again.stats.cache_hits.values()) == 1
    assert float(evaluate("exp2", F32, np.array([3.0]))[0]) == 8.0


def test_installed_functions_load_before_the_cache_folder(tmp_path, monkeypatch):
    """A function :func:`precompile` compiled at install is loaded from there: nothing is
    compiled or written in the cache folder, and the loaded function answers right."""
    installed, folder = tmp_path / "installed", tmp_path / "cache"
    assert fm.precompile(str(installed), ["log2_f64"]) == ["log2_f64"]
    _use_installed(monkeypatch, installed)
    monkeypatch.setattr(fm, "_flatten", _not_flattened)  # its flat code was kept too
    assert fm.cache_in(str(folder))
    loaded = fm._dispatcher("log2_f64")
    loaded.compile((numba.float64,))
    assert sum(loaded.stats.cache_hits.values()) == 1
    assert not list(folder.glob("*.nbi")), "compiled again instead of loaded"
    assert loaded(np.float64(1024.0)) == 10.0


def _use_installed(monkeypatch, folder):
    """``folder`` as the library's installed folder, and no function made yet."""
    monkeypatch.setattr(fm, "INSTALLED", str(folder))
    monkeypatch.setattr(
        fm, "_installed_flat_code", functools.cache(fm._installed_flat_code.__wrapped__)
    )
    monkeypatch.setattr(fm, "_cache_class", None)
    monkeypatch.delitem(fm.__dict__, "log2_f64", raising=False)
    monkeypatch.setattr(fm, "_made", {})


def _not_flattened(fn):
    raise AssertionError(f"{fn.__name__} flattened again")


def test_flat_code_kept_for_another_file_is_not_used(tmp_path, monkeypatch):
    """The flat functions kept at install are used only with the file they were made from."""
    fm.precompile(str(tmp_path), ["log2_f64"])
    path = tmp_path / f"flat.{sys.implementation.cache_tag}.marshal"
    kept = marshal.loads(path.read_bytes())
    path.write_bytes(marshal.dumps({**kept, "source": "an edited fastmath.py"}))
    _use_installed(monkeypatch, tmp_path)
    assert fm._installed_flat_code() == {}
    assert fm._dispatcher("log2_f64")(np.float64(8.0)) == 3.0


def test_precompile_replaces_what_the_folder_held(tmp_path):
    stale = tmp_path / "fastmath.gone_f64-1.py311.nbi"
    stale.write_bytes(b"from an older fastmath.py")
    fm.precompile(str(tmp_path), ["exp2_f32"])
    assert not stale.exists()
    assert [p.name.split("-")[0] for p in tmp_path.glob("*.nbi")] == ["fastmath.exp2_f32"]


_OTHER_CPU = """
import sys, numba, numpy as np
from tracekit.backends import fastmath as fm
fm.INSTALLED = sys.argv[1]
assert fm.cache_in(sys.argv[2])
f = fm._dispatcher("log2_f64")
f.compile((numba.float64,))
print(sum(f.stats.cache_hits.values()), f(np.float64(0.125)))
"""


def test_installed_functions_of_another_cpu_are_compiled_again(tmp_path):
    """numba keys each entry by the CPU's name and features: a process targeting another CPU
    finds no entry it can use among those installed here, and compiles."""
    installed = tmp_path / "installed"
    fm.precompile(str(installed), ["log2_f64"])
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="")
    args = [sys.executable, "-c", _OTHER_CPU, str(installed), str(tmp_path / "cache")]
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["0", "-3.0"]
    assert list((tmp_path / "cache").glob("*.nbi")), "the other CPU's function was not kept"


# ---------------------------------------------------------------------------
# report (python tests/backends/test_fastmath.py)
# ---------------------------------------------------------------------------


def _report(ops):
    print(
        f"{'op':8s} {'dtype':8s} {'doc':>4s} {'vs CR':>6s} {'numpy vs CR':>11s} {'vs numpy':>9s} "
        f"{'class':>6s}  worst input vs numpy"
    )
    for op in ops:
        for dt in DTYPES:
            m = measure(op, dt)
            print(
                f"{op:8s} {dt.name:8s} {documented_cr_bound(op, dt):4.0f} {m.maxulp_wide:6.0f} "
                f"{m.numpy_wide:11.0f} {m.maxulp:9.0f} {int(m.bad.sum()):6d}  {m.at(m.worst)}",
                flush=True,
            )
            for j in np.flatnonzero(m.bad)[:5]:
                print("      class mismatch:", m.at(j))


if __name__ == "__main__":
    _report(sys.argv[1:] or fm.OPS)
