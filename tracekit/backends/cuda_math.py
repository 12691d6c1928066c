"""The device's scalar lowerings: ``libdevice`` functions and templates for the elementwise
ops whose CUDA code differs from the shared templates of :mod:`tracekit.backends.scalar`
(NumPy ufuncs are not reliably callable inside numba CUDA kernels, so every op that the CPU
emits as ``np.<ufunc>`` is written with ``libdevice`` functions or the device helpers of
:mod:`tracekit.backends.cuda_helpers`), with the documented ulp bounds of those functions."""

from __future__ import annotations

import re

import numpy as np

from ..ir import Node
from . import scalar as S
from .cuda_device import DeviceUnsupported

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

# op -> libdevice base name (the float32 function adds "f")
LIBDEVICE_UNARY = {
    "exp": "exp",
    "exp2": "exp2",
    "expm1": "expm1",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "log1p": "log1p",
    "sqrt": "sqrt",
    "cbrt": "cbrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
}
LIBDEVICE_BINARY = {"arctan2": "atan2", "hypot": "hypot", "copysign": "copysign", "power": "pow"}

# Maximum error in float32 ulps of the libdevice single-precision functions, from the CUDA C++
# Programming Guide ("Mathematical functions", single precision, full range, no -use_fast_math).
# math="fast" emits these functions; tests/backends/test_cuda.py checks every op against them.
ULP_BOUNDS_F32 = {
    "exp": 2,
    "exp2": 2,
    "expm1": 1,
    "log": 1,
    "log2": 1,
    "log10": 2,
    "log1p": 1,
    "cbrt": 1,
    "sin": 2,
    "cos": 2,
    "tan": 4,
    "arcsin": 2,
    "arccos": 2,
    "arctan": 2,
    "sinh": 3,
    "cosh": 2,
    "tanh": 2,
    "arcsinh": 3,
    "arccosh": 4,
    "arctanh": 3,
    "arctan2": 3,
    "hypot": 3,
    "power": 4,
}
# The double-precision functions (math="fast" and "libm" alike).
ULP_BOUNDS_F64 = {
    "exp": 1,
    "exp2": 1,
    "expm1": 1,
    "log": 1,
    "log2": 1,
    "log10": 1,
    "log1p": 1,
    "cbrt": 1,
    "sin": 2,
    "cos": 2,
    "tan": 2,
    "arcsin": 2,
    "arccos": 2,
    "arctan": 2,
    "sinh": 2,
    "cosh": 1,
    "tanh": 1,
    "arcsinh": 3,
    "arccosh": 3,
    "arctanh": 2,
    "arctan2": 2,
    "hypot": 2,
    "power": 2,
}


def cpu_fast_bounds() -> dict:
    """The CPU target's float32 fast-math bounds, ``op -> ulp`` from the correctly rounded
    result (as libdevice's are stated), read from the docstrings of ``fastmath.py`` ("max error
    vs correctly rounded: N ulp"); empty when that module is unavailable."""
    global _CPU_BOUNDS
    if _CPU_BOUNDS is None:
        out = {}
        try:
            from . import fastmath

            for (op, dt), fn in fastmath.FAST_MATH.items():
                doc = fn.__doc__ or getattr(getattr(fn, "py_func", None), "__doc__", "") or ""
                m = re.search(r"max error vs correctly rounded: (\d+) ulp", doc)
                if np.dtype(dt) == F32 and m:
                    out[op] = int(m.group(1))
        except Exception:  # no fast math on the CPU: every op uses the default bound
            out = {}
        _CPU_BOUNDS = out
    return _CPU_BOUNDS


_CPU_BOUNDS = None
# Ops the CPU has no fast version of may use a float32 libdevice function up to this bound.
DEFAULT_F32_BOUND = 2
EXACT = {"sqrt", "copysign", "floor", "ceil", "trunc", "rint", "fmod"}


def f32_native(op: str) -> bool:
    """Whether math="fast" uses libdevice's float32 function for ``op``: only where its
    documented bound meets the CPU's fast-math bound; otherwise the float64 function, rounded
    once (within NumPy's own error)."""
    if op in EXACT:
        return True
    return ULP_BOUNDS_F32[op] <= cpu_fast_bounds().get(op, DEFAULT_F32_BOUND)


def _libdevice_call(op: str, base: str, args: list, dt, math: str) -> str:
    dt = np.dtype(dt)
    if dt.kind != "f" or dt not in (F32, F64):
        raise DeviceUnsupported(f"{op} on {dt}")
    if dt == F64:
        return f"libdevice.{base}({', '.join(args)})"
    if op not in EXACT and (math == "libm" or not f32_native(op)):
        wide = ", ".join(f"np.float64({a})" for a in args)
        return f"np.float32(libdevice.{base}({wide}))"
    return f"libdevice.{base}f({', '.join(args)})"


def _unary(op: str, base: str, math: str):
    def t(a, dt):
        return _libdevice_call(op, base, a, dt, math)

    return t


def _binary(op: str, base: str, math: str):
    def t(a, dt):
        return _libdevice_call(op, base, a, dt, math)

    return t


def _power(math):
    def t(a, dt):
        if dt.kind in "iu":
            return f"_ipow({a[0]}, {a[1]})"
        if dt.kind == "b":
            raise DeviceUnsupported("power on bool")
        if dt.kind == "c":
            raise DeviceUnsupported(f"power on {dt}")
        return _libdevice_call("power", "pow", a, dt, math)

    return t


def _rounding(base):
    def t(a, dt):
        if dt.kind == "c":
            raise DeviceUnsupported(f"{base} on {dt}")
        if dt.kind != "f":
            return a[0]
        return _libdevice_call(base, base, a, dt, "fast")

    return t


def _float_suffix(dt) -> str:
    dt = np.dtype(dt)
    if dt not in (F32, F64):
        raise DeviceUnsupported(str(dt))
    return "32" if dt == F32 else "64"


def _complex_ordered(fn, helper):
    """NumPy orders complex numbers lexicographically (with its NaN rules): ``_c*`` helpers."""

    def t(a, dt):
        return f"{helper}({a[0]}, {a[1]})" if dt.kind == "c" else fn(a, dt)

    return t


def _sign(a, dt):
    if dt.kind == "c":
        return f"_csign({a[0]}, {S._one(dt)})"
    if dt.kind == "f":
        return f"_fsign({a[0]})"
    if dt.kind == "u":
        return f"(1 if {a[0]} > 0 else 0)"
    return f"(1 if {a[0]} > 0 else (-1 if {a[0]} < 0 else 0))"


def _isnan(a, dt):
    if dt.kind == "c":
        return f"((({a[0]}).real != ({a[0]}).real) | (({a[0]}).imag != ({a[0]}).imag))"
    return f"({a[0]} != {a[0]})" if dt.kind == "f" else "False"


def _isinf(a, dt):
    if dt.kind == "c":
        return f"((abs(({a[0]}).real) == np.inf) | (abs(({a[0]}).imag) == np.inf))"
    return f"(abs({a[0]}) == np.inf)" if dt.kind == "f" else "False"


def _isfinite(a, dt):
    if dt.kind == "c":
        return f"((abs(({a[0]}).real) < np.inf) & (abs(({a[0]}).imag) < np.inf))"
    return f"(abs({a[0]}) < np.inf)" if dt.kind == "f" else "True"


def _signbit(a, dt):
    if dt.kind != "f":
        raise DeviceUnsupported(f"signbit on {dt}")
    fn = "signbitf" if dt == F32 else "signbitd"
    return f"(libdevice.{fn}({a[0]}) != 0)"


def _floor_divide(a, dt):
    if dt.kind in "iu":
        return f"_ifloor_divide({a[0]}, {a[1]})"
    if dt.kind == "f":
        return f"_ffloordiv{_float_suffix(dt)}({a[0]}, {a[1]})"
    raise DeviceUnsupported(f"floor_divide on {dt}")


def _remainder(a, dt):
    if dt.kind in "iu":
        return f"_iremainder({a[0]}, {a[1]})"
    if dt.kind == "f":
        return f"_fremainder{_float_suffix(dt)}({a[0]}, {a[1]})"
    raise DeviceUnsupported(f"remainder on {dt}")


def _logaddexp(a, dt):
    if dt.kind != "f":
        raise DeviceUnsupported(f"logaddexp on {dt}")
    return f"_logaddexp{_float_suffix(dt)}({a[0]}, {a[1]})"


def _reciprocal(a, dt):
    if dt.kind in "iu":
        if dt.kind == "i" and dt.itemsize >= 4:  # NumPy: 1.0 / 0 -> inf -> the minimum
            return f"({S.literal(np.iinfo(dt).min, dt)} if {a[0]} == 0 else _ireciprocal({a[0]}))"
        return f"_ireciprocal({a[0]})"
    if dt.kind == "b":
        raise DeviceUnsupported("reciprocal on bool")
    if dt.kind == "c":
        return f"_creciprocal({a[0]}, {S._one(dt)})"
    return f"({S.literal(1, dt)} / {a[0]})"


def _divide(a, dt):
    return f"_cdiv({a[0]}, {a[1]}, {S._one(dt)})" if dt.kind == "c" else f"({a[0]} / {a[1]})"


def _conjugate(a, dt):
    return f"({a[0]}).conjugate()" if dt.kind == "c" else a[0]


def templates(math: str) -> dict:
    """The scalar templates of the device: the CPU's, with what differs on the device replaced."""
    t = dict(S.TEMPLATES)
    for op, base in LIBDEVICE_UNARY.items():
        t[op] = _unary(op, base, math)
    for op, base in LIBDEVICE_BINARY.items():
        t[op] = _binary(op, base, math)
    t["power"] = t["float_power"] = _power(math)
    for op in ("floor", "ceil", "trunc", "rint"):
        t[op] = _rounding(op)
    t.update(
        sign=_sign,
        isnan=_isnan,
        isinf=_isinf,
        isfinite=_isfinite,
        signbit=_signbit,
        floor_divide=_floor_divide,
        remainder=_remainder,
        logaddexp=_logaddexp,
        reciprocal=_reciprocal,
        divide=_divide,
        conjugate=_conjugate,
    )
    for op, helper in (
        ("maximum", "_cmaximum"),
        ("minimum", "_cminimum"),
        ("fmax", "_cfmax"),
        ("fmin", "_cfmin"),
        ("less", "_clt"),
        ("less_equal", "_cle"),
        ("greater", "_cgt"),
        ("greater_equal", "_cge"),
    ):
        t[op] = _complex_ordered(t[op], helper)
    return t


_TEMPLATES = {m: templates(m) for m in ("fast", "libm")}


def _device_angle(node, args, dtypes):
    z, dt = args[0], np.dtype(dtypes[0])
    deg = " * (180.0 / np.pi)" if node.attrs.get("deg") else ""
    if dt.kind == "c":
        src = f"(math.atan2(({z}).imag, ({z}).real){deg})"
    else:
        src = f"(math.atan2(0.0, np.float64({z})){deg})"
    return S.cast(src, np.float64, node.out.dtype)


# the shared node templates, with what differs on the device replaced (no python op: device
# code cannot call Python)
_NODE_TEMPLATES = {**S.NODE_TEMPLATES, "angle": _device_angle}


def device_expr(node: Node, args: list, dtypes: list, math: str) -> str:
    """Source of one output element of elementwise ``node`` in a CUDA kernel."""
    if node.op not in _TEMPLATES[math] and node.op not in _NODE_TEMPLATES:
        raise DeviceUnsupported(node.op)
    return S.expr(
        node, args, dtypes, "libm", templates=_TEMPLATES[math], node_templates=_NODE_TEMPLATES
    )


def ulps(got, ref, dtype) -> np.ndarray:
    """|got - ref| in units of the last place of ``dtype`` at ``ref`` (ref in higher precision)."""
    dtype = np.dtype(dtype)
    ref = np.asarray(ref, np.longdouble)
    got = np.asarray(got, np.longdouble)
    fin = np.isfinite(ref)
    r = np.where(fin, ref, 0).astype(dtype)
    spacing = np.abs(np.spacing(np.abs(r))).astype(np.longdouble)
    tiny = np.finfo(dtype).smallest_subnormal
    spacing = np.maximum(spacing, tiny)
    err = np.abs(got - np.where(fin, ref, 0)) / spacing
    same_nonfinite = (~fin) & ((got == ref) | (np.isnan(got) & np.isnan(ref)))
    return np.where(fin, err, np.where(same_nonfinite, 0, np.inf))
