"""Python source for the ``numba.cuda`` kernels of a plan (the planner is the CPU target's).

One fused group becomes one kernel, or a short sequence of kernels:

- **elementwise**: a grid-stride loop over the collapsed iteration space (``layout.Layout``);
- **row** (reductions fused with their producers and consumers, e.g. softmax, layernorm) in one
  of three shapes, chosen from the problem size and the device:

  * ``block``: one thread block per row (grid-stride over rows); threads stride over the row,
    then a shared-memory tree (warp shuffles for the last levels on a real GPU) gives every
    thread the row's value; a later pass re-reads its inputs (they are in L1/L2) and recomputes
    cheap elementwise values instead of spilling them;
  * ``thread``: one thread per row, sequential over the row, when the reduced axes are outer
    ones (coalesced: neighbouring threads read neighbouring columns) and there are many rows;
  * ``split``: a two-pass tree reduction for a whole-array reduction or a few long rows: pass
    kernels over ``(chunk, row)`` blocks write per-block partials, a combine kernel per row
    reduces them and computes the per-row values later passes read;

- **scan**: one block per row, a Hillis-Steele scan of each tile in shared memory plus a carry;
- **matmul** (a host step in the plan): a tiled shared-memory kernel; the elementwise kernel
  that consumes its result (bias, activation: ``np.maximum(a @ b + bias, 0)``) runs in it as an
  epilogue at the store when it covers the matmul's output shape (``CudaProgram`` decides);
- **views** that are not free (transpose, strided slices, broadcasts): a gather kernel;
  **index_update** with a basic index: a copy and a scatter kernel.

Scalar expressions come from :mod:`tracekit.backends.scalar` with the device's templates:
NumPy ufuncs are not reliably callable inside numba CUDA kernels, so every op that the CPU
emits as ``np.<ufunc>`` is written with ``libdevice`` functions or small device helpers here.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

import numpy as np

from ..ir import Node, Var, format_node
from . import helpers
from . import scalar as S
from .emit_cpu import KernelSource, _init, acc_dtype
from .planner import Step, accumulation, is_reduction

# ---------------------------------------------------------------------- device profile


@dataclass
class Profile:
    """What the code generator needs to know about the device."""

    simulator: bool
    name: str = "simulator"
    sm_count: int = 2
    max_threads: int = 32
    warp: int = 32
    shared_bytes: int = 48 * 1024
    max_grid_x: int = 2**31 - 1
    max_grid_yz: int = 65535
    cc: tuple = (0, 0)
    sim_row_threads: int = 8  # simulator: threads per row block (each sync costs a GIL round)
    force_shuffle: bool = False  # tests: warp shuffles on the simulator too (emulated there)

    @classmethod
    def current(cls) -> Profile:
        from numba import cuda

        from .runtime import simulator_active

        if simulator_active():
            # The simulator runs every thread as a Python thread and blocks one after the
            # other: small blocks and grids keep it usable; the code paths are the same.
            return cls(simulator=True)
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        return cls(
            simulator=False,
            name=name,
            sm_count=int(dev.MULTIPROCESSOR_COUNT),
            max_threads=int(dev.MAX_THREADS_PER_BLOCK),
            warp=int(dev.WARP_SIZE),
            shared_bytes=int(dev.MAX_SHARED_MEMORY_PER_BLOCK),
            max_grid_x=int(dev.MAX_GRID_DIM_X),
            max_grid_yz=int(dev.MAX_GRID_DIM_Y),
            cc=tuple(dev.compute_capability),
        )

    # -- launch shapes
    @property
    def shuffle(self) -> bool:
        """Warp shuffles (the simulator has none)."""
        return self.force_shuffle or (not self.simulator and self.warp == 32)

    @property
    def ew_threads(self) -> int:
        return 32 if self.simulator else 256

    def ew_blocks(self, total: int) -> int:
        need = -(-max(total, 1) // self.ew_threads)
        cap = 2 if self.simulator else self.sm_count * 32
        return max(1, min(need, cap))

    def row_threads(self, r: int) -> int:
        if self.simulator:
            return min(self.sim_row_threads, _pow2(max(r, 2)))
        return min(min(self.max_threads, 1024), max(32, _pow2(-(-r // 4))))

    def row_blocks(self, rows: int) -> int:
        cap = 2 if self.simulator else self.sm_count * 32
        return max(1, min(rows, cap, self.max_grid_x))

    @property
    def target_blocks(self) -> int:
        """Blocks that keep the whole device busy."""
        return 4 if self.simulator else self.sm_count * 8

    @property
    def mm_tile(self) -> int:
        return 4 if self.simulator else 16


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


# ---------------------------------------------------------------------- launches


@dataclass(frozen=True, eq=False)
class Arg:
    """One kernel argument: a Var's device array (reshaped), a Var's scalar, or scratch."""

    kind: str  # "operand" | "scratch"
    var: Var | None = None
    shape: tuple | None = None  # None: a weak (Python scalar) operand
    dtype: np.dtype | None = None
    key: str = ""


@dataclass
class Launch:
    kernel: str
    grid: tuple
    block: tuple
    args: list


class DeviceUnsupported(Exception):
    """An op/dtype the device emitter has no code for: the group runs on the host instead."""


def nb_type(dtype) -> str:
    """Source of the numba type of ``dtype``: ``nbt.float32``."""
    dtype = np.dtype(dtype)
    return "nbt.boolean" if dtype.kind == "b" else f"nbt.{dtype.name}"


def typed(src: str, dtype) -> str:
    """``src`` forced to ``dtype``: numba widens small ints and mixes, NumPy does not. Always
    a NumPy scalar, float64 too: on the simulator a Python float would divide by zero with a
    ZeroDivisionError instead of giving inf."""
    return f"{S.ctor(dtype)}({src})"


# ---------------------------------------------------------------------- scalar templates
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
        return f"_csign({a[0]})"
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
        return f"_ifloordiv({a[0]}, {a[1]})"
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
        return f"_creciprocal({a[0]})"
    return f"({S.literal(1, dt)} / {a[0]})"


def _divide(a, dt):
    return f"_cdiv({a[0]}, {a[1]})" if dt.kind == "c" else f"({a[0]} / {a[1]})"


def _conjugate(a, dt):
    return f"({a[0]}).conjugate()" if dt.kind == "c" else a[0]


def templates(math: str) -> dict:
    """The scalar templates of the device: the CPU's, with what differs on the device replaced."""
    t = dict(S.TEMPLATES)
    for op, base in LIBDEVICE_UNARY.items():
        t[op] = _unary(op, base, math)
    for op, base in LIBDEVICE_BINARY.items():
        t[op] = _binary(op, base, math)
    t["power"] = _power(math)
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


# ---------------------------------------------------------------------- device helpers
def _shared_helpers() -> str:
    """The device source of the helpers both targets share (``backends/helpers.py``)."""
    return "".join(
        "\n@cuda.jit(device=True)\n" + inspect.getsource(fn) + "\n" for fn in helpers.SHARED
    )


_FLOAT_HELPERS = """
@cuda.jit(device=True)
def _ffloordiv{b}(a, b):
    mod = libdevice.fmod{f}(a, b)
    if b == 0:
        return a / b
    div = (a - mod) / b
    if mod != 0:
        if (b < 0) != (mod < 0):
            div -= 1
    if div != 0:
        fl = libdevice.floor{f}(div)
        if div - fl > 0.5:
            fl += 1
        return fl
    return libdevice.copysign{f}(np.float{b}(0), a / b)


@cuda.jit(device=True)
def _fremainder{b}(a, b):
    mod = libdevice.fmod{f}(a, b)
    if b == 0:
        return mod
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod += b
        return mod
    return libdevice.copysign{f}(np.float{b}(0), b)


@cuda.jit(device=True)
def _logaddexp{b}(x, y):
    if x == y:
        return x + np.float{b}(0.6931471805599453)
    d = x - y
    if d > 0:
        return x + libdevice.log1p{f}(libdevice.exp{f}(-d))
    if d <= 0:
        return y + libdevice.log1p{f}(libdevice.exp{f}(d))
    return d
"""

HELPERS = (
    _shared_helpers()
    + """
@cuda.jit(device=True)
def _ifloordiv(a, b):
    if b == 0:
        return a - a
    if b == -1:
        return -a
    return a // b


@cuda.jit(device=True)
def _rshift(a, b):
    if 0 <= b < 64:
        return a >> b
    return a - a - 1 if a < 0 else a - a


@cuda.jit(device=True)
def _ipow(a, b):
    if b < 0:
        return a - a + (1 if a == 1 else (0 if a != -1 else (1 if b % 2 == 0 else -1)))
    r = a - a + 1
    while b:
        if b & 1:
            r = r * a
        a = a * a
        b >>= 1
    return r


# int64 arithmetic that wraps as NumPy's does (numba's signed ops carry LLVM's nsw flag): the
# CPU templates call these for int64
@cuda.jit(device=True)
def _fsign(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return x if x != x else 0.0  # NumPy: sign(-0.0) is 0.0


@cuda.jit(device=True)
def _cgt(a, b):
    if a.real == b.real:
        return a.imag > b.imag
    return a.real > b.real and a.imag == a.imag and b.imag == b.imag


@cuda.jit(device=True)
def _cge(a, b):
    if a.real == b.real:
        return a.imag >= b.imag
    return a.real > b.real and a.imag == a.imag and b.imag == b.imag


@cuda.jit(device=True)
def _clt(a, b):
    return _cgt(b, a)


@cuda.jit(device=True)
def _cle(a, b):
    return _cge(b, a)


@cuda.jit(device=True)
def _cmaximum(a, b):
    return a if (a.real != a.real or a.imag != a.imag or _cge(a, b)) else b


@cuda.jit(device=True)
def _cminimum(a, b):
    return a if (a.real != a.real or a.imag != a.imag or _cle(a, b)) else b


@cuda.jit(device=True)
def _cfmax(a, b):
    return a if (b.real != b.real or b.imag != b.imag or _cge(a, b)) else b


@cuda.jit(device=True)
def _cfmin(a, b):
    return a if (b.real != b.real or b.imag != b.imag or _cle(a, b)) else b


@cuda.jit(device=True)
def _cdiv(a, b):
    # NumPy's complex division (Smith's method), so infinities and NaNs come out as NumPy's
    br, bi = b.real, b.imag
    if abs(br) >= abs(bi):
        if br == 0 and bi == 0:
            return complex(a.real / abs(br), a.imag / abs(br))
        rat = bi / br
        scl = 1.0 / (br + bi * rat)
        return complex((a.real + a.imag * rat) * scl, (a.imag - a.real * rat) * scl)
    rat = br / bi
    scl = 1.0 / (bi + br * rat)
    return complex((a.real * rat + a.imag) * scl, (a.imag * rat - a.real) * scl)


@cuda.jit(device=True)
def _creciprocal(z):
    zr, zi = z.real, z.imag
    if abs(zi) <= abs(zr):
        r = zi / zr
        d = zr + zi * r
        return complex(1.0 / d, -r / d)
    r = zr / zi
    d = zr * r + zi
    return complex(r / d, -1.0 / d)


@cuda.jit(device=True)
def _csign(z):
    r = abs(z)
    if r == 0:
        return complex(0.0, 0.0)
    if r == np.inf:
        if abs(z.real) == np.inf:
            if abs(z.imag) == np.inf:
                return complex(np.nan, np.nan)
            return complex(1.0 if z.real > 0 else -1.0, 0.0)
        return complex(0.0, 1.0 if z.imag > 0 else -1.0)
    if r != r:
        return complex(np.nan, np.nan)
    return z / r


"""
    + _FLOAT_HELPERS.format(b="32", f="f")
    + _FLOAT_HELPERS.format(b="64", f="")
)


# ---------------------------------------------------------------------- kernel sources


ROW_MODES = ("block", "thread", "split")
FORCE_ROW_MODE = None  # tests set one of ROW_MODES to run every row group that way


class CudaKernelSource(KernelSource):
    """Source and launches of one fused group. ``text`` holds its kernel functions."""

    VECTORISE = False

    def __init__(self, step: Step, math: str, profile: Profile, mode: str | None = None):
        super().__init__(step, math)
        self.profile = profile
        self.funcs: list[str] = []
        self.launches: list[Launch] = []
        self.scratch: list[Arg] = []
        self.hoisted: dict = {}
        self.forced_mode = mode
        self.mode = None

    # -- operands
    def is_weak_scalar(self, v: Var) -> bool:
        return v.weak and self.layout.is_scalar(v) and v in self.inputs

    def operand_args(self) -> list[Arg]:
        out = []
        for v in self.inputs + self.outputs:
            if self.is_weak_scalar(v):
                out.append(Arg("operand", v, None, v.dtype))
            else:
                shape = self.layout.operand_shape(v) or (1,)
                out.append(Arg("operand", v, shape, v.dtype))
        return out

    def all_args(self) -> list[Arg]:
        return self.operand_args() + self.scratch

    def add_scratch(self, key: str, shape: tuple, dtype) -> str:
        name = f"{self.p}{key}"
        self.scratch.append(Arg("scratch", None, tuple(shape), np.dtype(dtype), name))
        return name

    def read(self, v: Var) -> str:
        if v in self.local:
            return self.local[v]
        if v in self.hoisted:
            return self.hoisted[v]
        if self.layout.is_scalar(v) and v in self.inputs:
            return self.arg(v) if v.weak else f"{self.arg(v)}[0]"
        return self.at(v)

    def at(self, v: Var) -> str:
        idx = self.layout.index(v)
        return f"{self.arg(v)}[{idx or '0'}]"

    def compute(self, node, depth: int):
        out = node.out
        name = f"{self.p}t_{out.ident}"
        if node.op == "reshape":  # a per-row alias
            self.emit(f"{name} = {self.read(node.inputs[0])}", depth)
        else:
            vals = [self.value(x) for x in node.inputs]
            src = device_expr(node, [v[0] for v in vals], [v[1] for v in vals], self.math)
            self.emit(f"{name} = {typed(src, out.dtype)}", depth)
        self.local[out] = name

    def store(self, v: Var, depth: int, guard: str | None = None):
        if v in self.outputs:
            if guard:
                self.emit(f"if {guard}:", depth)
                depth += 1
            self.emit(f"{self.at(v)} = {self.local[v]}", depth)

    # -- functions
    def begin(self, name: str, doc: str = ""):
        self.lines = []
        self.fname = name
        self._extra_params = []
        self.emit_header = doc

    def end(self, params: list[str]):
        g = self.group
        head = [
            "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
            f"def {self.fname}({', '.join(params)}):",
            f"    # kernel {g.name}: {g.kind} over {list(g.shape)}"
            + (f", axes {list(g.axes)}" if g.axes else "")
            + (f"; {self.emit_header}" if self.emit_header else ""),
        ]
        head += [f"    # {format_node(n)}" for n in g.nodes]
        self.funcs.append("\n".join(head + self.lines))

    def params(self) -> list[str]:
        return [self.arg(v) for v in self.inputs + self.outputs] + [a.key for a in self.scratch]

    def _hoist(self, depth: int):
        self.hoisted = {}
        for v in self.inputs:
            if self.layout.is_scalar(v) and not v.weak:
                name = f"{self.p}s_{v.ident}"
                self.emit(f"{name} = {self.arg(v)}[0]", depth)
                self.hoisted[v] = name

    def _unravel(self, flat: str, dims: list, depth: int):
        L = self.layout
        if not dims:
            return
        if len(dims) == 1:
            self.emit(f"{L.names[dims[0]]} = {flat}", depth)
            return
        r = f"{self.p}rem"
        self.emit(f"{r} = {flat}", depth)
        for c in reversed(dims[1:]):
            self.emit(f"{L.names[c]} = {r} % {L.sizes[c]}", depth)
            self.emit(f"{r} = {r} // {L.sizes[c]}", depth)
        self.emit(f"{L.names[dims[0]]} = {r}", depth)

    # -- the group
    def check(self):
        """Raise DeviceUnsupported unless every op of the group has device code."""
        g = self.group
        for n in g.nodes:
            if n.op not in ("reshape",) and not is_reduction(n) and g.kind != "scan":
                dts = [x.dtype if isinstance(x, Var) else self.value(x)[1] for x in n.inputs]
                device_expr(n, [f"_a{k}" for k in range(len(dts))], dts, self.math)
            if is_reduction(n) and accumulation(n).index and n.inputs[0].dtype.kind == "c":
                raise DeviceUnsupported("argmax/argmin of complex values")

    def source(self) -> str:
        g = self.group
        self.check()  # every op must have device code, else the group runs on the host
        if g.kind == "elementwise":
            self._elementwise()
        elif g.kind == "scan":
            self.mode = "thread" if self._scan_sequential() else "block"
            self._scan_thread() if self.mode == "thread" else self._scan()
        else:
            self.mode = self.forced_mode or FORCE_ROW_MODE or self._choose_mode()
            if self.mode == "thread":
                self._rows_thread()
            elif self.mode == "split":
                self._rows_split()
            else:
                self._rows_block()
        return "\n\n\n".join(self.funcs)

    def _choose_mode(self) -> str:
        L, P = self.layout, self.profile
        rows = int(np.prod([L.sizes[c] for c in L.kept], dtype=np.int64)) if L.kept else 1
        r = L.red_total
        inner_kept = bool(L.reduced) and not L.reduced[-1]
        if not L.kept:
            return "split"
        if inner_kept and rows >= (64 if P.simulator else P.sm_count * 256):
            return "thread"
        if rows < P.target_blocks // 2 and r >= 8 * P.row_threads(r):
            return "split"
        return "block"

    # -- elementwise
    def _elementwise(self):
        L, p = self.layout, self.p
        self.begin(self.group.name, "grid-stride loop")
        self._hoist(1)
        self.emit(f"{p}t = cuda.grid(1)", 1)
        self.emit(f"{p}step = cuda.gridsize(1)", 1)
        self.emit(f"while {p}t < {L.total}:", 1)
        self._unravel(f"{p}t", L.kept, 2)
        for n in self.group.nodes:
            self.compute(n, 2)
            for o in n.outputs:
                self.store(o, 2)
        self.emit(f"{p}t += {p}step", 2)
        self.end(self.params())
        P = self.profile
        self.launches.append(
            Launch(self.group.name, (P.ew_blocks(L.total),), (P.ew_threads,), self.all_args())
        )

    # -- scan
    def _scan(self):
        (node,) = self.group.nodes
        L, P, p = self.layout, self.profile, self.p
        x, out = node.inputs[0], node.out
        rows = self._rows_count()
        n = L.red_total
        bs = P.row_threads(n)
        init = _init(node, out.dtype)

        def comb(a, b):
            return typed(S.accumulate(accumulation(node), a, b, out.dtype), out.dtype)

        self.begin(self.group.name, f"one block of {bs} per row, tiled Hillis-Steele scan")
        self.emit(f"{p}sh = cuda.shared.array({bs}, {nb_type(out.dtype)})", 1)
        self.emit(f"{p}tid = cuda.threadIdx.x", 1)
        self.emit(f"{p}row = cuda.blockIdx.x", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        self._unravel(f"{p}row", L.kept, 2)
        self.emit(f"{p}carry = {init}", 2)
        self.emit(f"{p}base = 0", 2)
        self.emit(f"while {p}base < {n}:", 2)
        self.emit(f"{p}j = {p}base + {p}tid", 3)
        self.emit(f"{p}v = {init}", 3)
        self.emit(f"if {p}j < {n}:", 3)
        self._unravel(f"{p}j", L.red, 4)
        self.emit(f"{p}v = {typed(S.cast(self.read(x), x.dtype, out.dtype), out.dtype)}", 4)
        self.emit(f"{p}sh[{p}tid] = {p}v", 3)
        self.emit("cuda.syncthreads()", 3)
        self.emit(f"{p}off = 1", 3)
        # the first element is never combined with an identity (NumPy copies it: -0.0 stays
        # -0.0, and a complex inf is not multiplied by 1+0j)
        self.emit(f"while {p}off < {bs}:", 3)
        self.emit(f"{p}w = {p}sh[{p}tid]", 4)
        self.emit(f"if {p}tid >= {p}off:", 4)
        self.emit(f"{p}w = {comb(f'{p}sh[{p}tid - {p}off]', f'{p}w')}", 5)
        self.emit("cuda.syncthreads()", 4)
        self.emit(f"{p}sh[{p}tid] = {p}w", 4)
        self.emit("cuda.syncthreads()", 4)
        self.emit(f"{p}off *= 2", 4)
        first = f"{p}base == 0"
        self.emit(f"if {p}j < {n}:", 3)
        self._unravel(f"{p}j", L.red, 4)
        self.local[out] = f"({p}sh[{p}tid] if {first} else {comb(f'{p}carry', f'{p}sh[{p}tid]')})"
        self.store(out, 4)
        last = f"{p}sh[{bs - 1}]"
        self.emit(f"{p}carry = {last} if {first} else {comb(f'{p}carry', last)}", 3)
        self.emit("cuda.syncthreads()", 3)
        self.emit(f"{p}base += {bs}", 3)
        self.emit(f"{p}row += cuda.gridDim.x", 2)
        self.end(self.params())
        self.launches.append(Launch(self.group.name, (P.row_blocks(rows),), (bs,), self.all_args()))

    def _scan_sequential(self) -> bool:
        """One thread per row, in NumPy's order: for complex values and float products (a
        parallel scan reassociates: complex infinities, and products that overflow in another
        order, 0 * 3e38 * -3 -> inf * 0 -> nan), and for many rows scanned along an outer
        axis (coalesced). Float sums scan in parallel: they only round differently."""
        L, P = self.layout, self.profile
        if FORCE_ROW_MODE in ("thread", "block"):
            return FORCE_ROW_MODE == "thread"
        node = self.group.nodes[0]
        kind = node.out.dtype.kind
        if kind == "c" or (kind == "f" and accumulation(node).combine == "multiply"):
            return True
        inner_kept = bool(L.reduced) and not L.reduced[-1]
        return not P.simulator and inner_kept and self._rows_count() >= P.sm_count * 256

    def _scan_thread(self):
        (node,) = self.group.nodes
        L, P, p = self.layout, self.profile, self.p
        x, out = node.inputs[0], node.out
        rows = self._rows_count()
        self.begin(self.group.name, "one thread per row, in order")
        self.emit(f"{p}row = cuda.grid(1)", 1)
        self.emit(f"{p}step = cuda.gridsize(1)", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        self._unravel(f"{p}row", L.kept, 2)
        self.emit(f"{p}acc = {_init(node, out.dtype)}", 2)
        self.emit(f"for {p}j in range({L.red_total}):", 2)
        self._unravel(f"{p}j", L.red, 3)
        v = typed(S.cast(self.read(x), x.dtype, out.dtype), out.dtype)
        step = typed(S.accumulate(accumulation(node), f"{p}acc", v, out.dtype), out.dtype)
        self.emit(f"{p}acc = {v} if {p}j == 0 else {step}", 3)
        self.local[out] = f"{p}acc"
        self.store(out, 3)
        self.emit(f"{p}row += {p}step", 2)
        self.end(self.params())
        self.launches.append(
            Launch(self.group.name, (P.ew_blocks(rows),), (P.ew_threads,), self.all_args())
        )

    # -- row groups: shared pieces
    def _row_info(self):
        g = self.group
        phase = self._phases()
        full = [n for n in g.nodes if g.role[n.out] == "full"]
        passes = 1 + max(
            [phase[n.out] for n in full] + [phase.get(r.inputs[0], 0) for r in self.reduces]
        )
        return phase, passes

    def _reds(self, phase, p):
        return [r for r in self.reduces if phase.get(r.inputs[0], 0) == p]

    def _needed(self, phase, p, reds) -> list:
        """Full nodes to compute in pass ``p``: what its reductions read, its stored outputs,
        and (recomputed) everything of earlier passes those depend on."""
        g = self.group
        producer = {n.out: n for n in g.nodes if g.role[n.out] == "full"}
        want = [r.inputs[0] for r in reds if r.inputs[0] in producer]
        want += [v for v in producer if phase[v] == p and v in self.outputs]
        need, stack = set(), list(want)
        while stack:
            v = stack.pop()
            if v in need or v not in producer:
                continue
            need.add(v)
            stack.extend(x for x in producer[v].var_inputs if x in producer)
        return [n for n in g.nodes if n.out in need]

    def _pass_elements(self, phase, p, reds, depth, flat: str):
        """Body for one element of pass ``p``: compute, store outputs of phase p, accumulate."""
        g = self.group
        self.local = {k: v for k, v in self.local.items() if g.role.get(k) == "row"}
        for n in self._needed(phase, p, reds):
            self.compute(n, depth)
            if phase[n.out] == p:
                self.store(n.out, depth)
        for r in reds:
            x = r.inputs[0]
            v = self.read(x)
            if accumulation(r).index:
                self._arg_update(r, v, flat, depth)
            else:
                self._combine(r, v, depth)

    def _row_nodes_at(self, phase, p, depth, guard=None, rv=None):
        g = self.group
        for n in g.nodes:
            if g.role[n.out] == "row" and not is_reduction(n) and phase[n.out] == p:
                self.compute(n, depth)
                self.store(n.out, depth, guard)
                if rv is not None:
                    rv(n.out, depth)

    def _acc_names(self, r):
        a = f"{self.p}r_{r.out.ident}"
        return a, f"{a}_i"

    def _tree_types(self, r):
        if accumulation(r).index:
            return [np.dtype(r.inputs[0].dtype), np.dtype(np.int64)]
        return [acc_dtype(r, r.out.dtype)]

    def _use_shfl(self, reds, bs) -> bool:
        """Warp shuffles for the last levels of these reductions' tree (32/64-bit values)."""
        shufflable = {np.dtype(t) for t in ("int32", "int64", "float32", "float64")}
        return (
            self.profile.shuffle
            and bs >= 64
            and bs % 32 == 0
            and all(set(self._tree_types(r)) <= shufflable for r in reds)
        )

    def _shared_bytes(self, groups, bs) -> int:
        size = {True: 32, False: bs}
        return sum(
            t.itemsize * size[self._use_shfl(reds, bs)]
            for reds in groups
            for r in reds
            for t in self._tree_types(r)
        )

    def _fit(self, groups, bs) -> int:
        """The block size, halved while the reduction trees exceed static shared memory."""
        limit = min(self.profile.shared_bytes, 48 * 1024)
        while bs > 32 and self._shared_bytes(groups, bs) > limit:
            bs //= 2
        return bs

    def _declare_shared(self, groups, bs, depth):
        """Shared arrays of each group of reductions reduced together: one slot per thread for
        a shared-memory tree, one per warp when warp shuffles do the rest."""
        for reds in groups:
            size = 32 if self._use_shfl(reds, bs) else bs
            for r in reds:
                a, ai = self._acc_names(r)
                types = self._tree_types(r)
                self.emit(f"{a}_sh = cuda.shared.array({size}, {nb_type(types[0])})", depth)
                if len(types) > 1:
                    self.emit(f"{ai}_sh = cuda.shared.array({size}, nbt.int64)", depth)

    def _merge(self, r, a, ai, b, bi, depth):
        """Emit ``(a, ai) <- combine((a, ai), (b, bi))`` for the tree (order-independent)."""
        if accumulation(r).index:
            cmp = ">" if accumulation(r).combine == "max" else "<"
            nan = ""
            if r.inputs[0].dtype.kind == "f":
                nan = f" or ({b} != {b} and ({a} == {a} or {bi} < {ai}))"
            self.emit(
                f"if {b} {cmp} {a} or ({b} == {a} and {bi} < {ai}){nan}:",
                depth,
            )
            self.emit(f"{a} = {b}", depth + 1)
            self.emit(f"{ai} = {bi}", depth + 1)
            return
        acc = acc_dtype(r, r.out.dtype)
        self.emit(f"{a} = {typed(S.accumulate(accumulation(r), a, b, acc), acc)}", depth)

    def _block_reduce(self, reds, bs, depth):
        """Every thread's accumulators -> the block's, visible to all threads."""
        p, tid = self.p, f"{self.p}tid"
        if self._use_shfl(reds, bs):
            self._block_reduce_shfl(reds, bs, depth)
            return
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a}_sh[{tid}] = {a}", depth)
            if accumulation(r).index:
                self.emit(f"{ai}_sh[{tid}] = {ai}", depth)
        self.emit("cuda.syncthreads()", depth)
        self.emit(f"{p}half = {bs // 2}", depth)
        self.emit(f"while {p}half > 0:", depth)
        self.emit(f"if {tid} < {p}half:", depth + 1)
        for r in reds:
            a, ai = self._acc_names(r)
            arg = accumulation(r).index
            self.emit(f"{a}_x = {a}_sh[{tid}]", depth + 2)
            if arg:
                self.emit(f"{ai}_x = {ai}_sh[{tid}]", depth + 2)
            self._merge(
                r,
                f"{a}_x",
                f"{ai}_x",
                f"{a}_sh[{tid} + {p}half]",
                f"{ai}_sh[{tid} + {p}half]",
                depth + 2,
            )
            self.emit(f"{a}_sh[{tid}] = {a}_x", depth + 2)
            if arg:
                self.emit(f"{ai}_sh[{tid}] = {ai}_x", depth + 2)
        self.emit("cuda.syncthreads()", depth + 1)
        self.emit(f"{p}half //= 2", depth + 1)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a} = {a}_sh[0]", depth)
            if accumulation(r).index:
                self.emit(f"{ai} = {ai}_sh[0]", depth)
        self.emit("cuda.syncthreads()", depth)

    def _block_reduce_shfl(self, reds, bs, depth):
        p, tid = self.p, f"{self.p}tid"
        nw = bs // 32

        def warp_level(d, width):
            off = width // 2
            while off >= 1:
                for r in reds:
                    a, ai = self._acc_names(r)
                    arg = accumulation(r).index
                    self.emit(f"{a}_y = cuda.shfl_down_sync(0xFFFFFFFF, {a}, {off})", d)
                    if arg:
                        self.emit(f"{ai}_y = cuda.shfl_down_sync(0xFFFFFFFF, {ai}, {off})", d)
                    self._merge(r, a, ai, f"{a}_y", f"{ai}_y", d)
                off //= 2

        self.emit(f"{p}lane = {tid} % 32", depth)
        self.emit(f"{p}warp = {tid} // 32", depth)
        warp_level(depth, 32)
        self.emit(f"if {p}lane == 0:", depth)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a}_sh[{p}warp] = {a}", depth + 1)
            if accumulation(r).index:
                self.emit(f"{ai}_sh[{p}warp] = {ai}", depth + 1)
        self.emit("cuda.syncthreads()", depth)
        self.emit(f"if {p}warp == 0:", depth)
        for r in reds:
            a, ai = self._acc_names(r)
            x = r.inputs[0]
            init = (
                _init(r, x.dtype) if accumulation(r).index else _init(r, acc_dtype(r, r.out.dtype))
            )
            self.emit(f"{a} = {a}_sh[{p}lane] if {p}lane < {nw} else {init}", depth + 1)
            if accumulation(r).index:
                self.emit(f"{ai} = {ai}_sh[{p}lane] if {p}lane < {nw} else 0", depth + 1)
        warp_level(depth + 1, 32)
        self.emit(f"if {p}lane == 0:", depth + 1)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a}_sh[0] = {a}", depth + 2)
            if accumulation(r).index:
                self.emit(f"{ai}_sh[0] = {ai}", depth + 2)
        self.emit("cuda.syncthreads()", depth)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a} = {a}_sh[0]", depth)
            if accumulation(r).index:
                self.emit(f"{ai} = {ai}_sh[0]", depth)
        self.emit("cuda.syncthreads()", depth)

    def _finish_reds(self, reds, depth, guard=None, rv=None):
        for r in reds:
            a, ai = self._acc_names(r)
            src = ai if accumulation(r).index else S.cast(a, acc_dtype(r, r.out.dtype), r.out.dtype)
            name = f"{self.p}t_{r.out.ident}"
            self.emit(f"{name} = {typed(src, r.out.dtype)}", depth)
            self.local[r.out] = name
            self.store(r.out, depth, guard)
            if rv is not None:
                rv(r.out, depth)

    def _rows_count(self) -> int:
        L = self.layout
        return int(np.prod([L.sizes[c] for c in L.kept], dtype=np.int64)) if L.kept else 1

    # -- block mode
    def _rows_block(self):
        L, P, p = self.layout, self.profile, self.p
        phase, passes = self._row_info()
        rows, n = self._rows_count(), L.red_total
        groups = [self._reds(phase, q) for q in range(passes)]
        bs = self._fit(groups, P.row_threads(n))
        tid = f"{p}tid"
        self.begin(self.group.name, f"one block of {bs} threads per row, {passes} pass(es)")
        self._hoist(1)
        self.emit(f"{tid} = cuda.threadIdx.x", 1)
        self._declare_shared(groups, bs, 1)
        self.emit(f"{p}row = cuda.blockIdx.x", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        d = 2
        self._unravel(f"{p}row", L.kept, d)
        self.local = {}
        guard = f"{tid} == 0"
        self._row_nodes_at(phase, 0, d, guard)
        for q in range(passes):
            reds = self._reds(phase, q)
            for r in reds:
                self._acc_init(r, d)
            j = f"{p}j"
            self.emit(f"{j} = {tid}", d)
            self.emit(f"while {j} < {n}:", d)
            self._unravel(j, L.red, d + 1)
            self._pass_elements(phase, q, reds, d + 1, L.flat_red())
            self.emit(f"{j} += {bs}", d + 1)
            if reds:
                self._block_reduce(reds, bs, d)
                self._finish_reds(reds, d, guard)
            self._row_nodes_at(phase, q + 1, d, guard)
        self.emit(f"{p}row += cuda.gridDim.x", d)
        self.end(self.params())
        self.launches.append(Launch(self.group.name, (P.row_blocks(rows),), (bs,), self.all_args()))

    # -- thread mode
    def _rows_thread(self):
        L, P, p = self.layout, self.profile, self.p
        phase, passes = self._row_info()
        rows, n = self._rows_count(), L.red_total
        self.begin(self.group.name, f"one thread per row, {passes} sequential pass(es)")
        self._hoist(1)
        self.emit(f"{p}row = cuda.grid(1)", 1)
        self.emit(f"{p}step = cuda.gridsize(1)", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        d = 2
        self._unravel(f"{p}row", L.kept, d)
        self.local = {}
        self._row_nodes_at(phase, 0, d)
        for q in range(passes):
            reds = self._reds(phase, q)
            for r in reds:
                self._acc_init(r, d)
            j = f"{p}j"
            self.emit(f"for {j} in range({n}):", d)
            self._unravel(j, L.red, d + 1)
            self._pass_elements(phase, q, reds, d + 1, j)
            self._finish_reds(reds, d)
            self._row_nodes_at(phase, q + 1, d)
        self.emit(f"{p}row += {p}step", d)
        self.end(self.params())
        self.launches.append(
            Launch(self.group.name, (P.ew_blocks(rows),), (P.ew_threads,), self.all_args())
        )

    # -- split mode
    def _rows_split(self):
        g, L, P, p = self.group, self.layout, self.profile, self.p
        phase, passes = self._row_info()
        rows, n = self._rows_count(), L.red_total
        bs = min(self._fit([self._reds(phase, q)], P.row_threads(n)) for q in range(passes))
        chunks = max(1, min(-(-n // bs), max(1, P.target_blocks // max(rows, 1))))
        ch = -(-n // chunks)
        chunks = -(-n // ch)
        grid_rows = min(rows, P.max_grid_yz)
        tid = f"{p}tid"
        row_vars = [n_.out for n_ in g.nodes if g.role[n_.out] == "row"]
        rv_name = {v: self.add_scratch(f"rv_{v.ident}", (rows,), v.dtype) for v in row_vars}
        part = {}
        for r in self.reduces:
            types = self._tree_types(r)
            part[r] = [self.add_scratch(f"pt_{r.out.ident}", (rows * chunks,), types[0])]
            if len(types) > 1:
                part[r].append(self.add_scratch(f"pi_{r.out.ident}", (rows * chunks,), types[1]))
        computed_before = {q: [] for q in range(passes + 1)}  # row vars available at pass q
        for v in row_vars:
            computed_before[phase[v]].append(v)

        def load_rows(upto, d):
            self.local = {}
            for q in range(1, upto + 1):  # phase-0 row values are recomputed from scalars
                for v in computed_before[q]:
                    name = f"{p}t_{v.ident}"
                    self.emit(f"{name} = {rv_name[v]}[{p}row]", d)
                    self.local[v] = name
            self._row_nodes_at(phase, 0, d)

        for q in range(passes):
            reds = self._reds(phase, q)
            # pass kernel: (chunk, row) blocks
            self.begin(f"{g.name}_p{q}", f"pass {q}: blocks over (chunk, row), {chunks} chunk(s)")
            self._hoist(1)
            self.emit(f"{tid} = cuda.threadIdx.x", 1)
            self._declare_shared([reds], bs, 1)
            self.emit(f"{p}chunk = cuda.blockIdx.x", 1)
            self.emit(f"{p}row = cuda.blockIdx.y", 1)
            self.emit(f"while {p}row < {rows}:", 1)
            d = 2
            self._unravel(f"{p}row", L.kept, d)
            load_rows(q, d)
            for r in reds:
                self._acc_init(r, d)
            j = f"{p}j"
            self.emit(f"{j} = {p}chunk * {ch} + {tid}", d)
            self.emit(f"{p}end = min({n}, ({p}chunk + 1) * {ch})", d)
            self.emit(f"while {j} < {p}end:", d)
            self._unravel(j, L.red, d + 1)
            self._pass_elements(phase, q, reds, d + 1, j)
            self.emit(f"{j} += {bs}", d + 1)
            if reds:
                self._block_reduce(reds, bs, d)
                self.emit(f"if {tid} == 0:", d)
                for r in reds:
                    a, ai = self._acc_names(r)
                    self.emit(f"{part[r][0]}[{p}row * {chunks} + {p}chunk] = {a}", d + 1)
                    if len(part[r]) > 1:
                        self.emit(f"{part[r][1]}[{p}row * {chunks} + {p}chunk] = {ai}", d + 1)
            self.emit(f"{p}row += cuda.gridDim.y", d)
            self.end(self.params())
            self.launches.append(
                Launch(f"{g.name}_p{q}", (chunks, grid_rows), (bs,), self.all_args())
            )
            if not reds:
                continue
            # combine kernel: one block per row
            bs2 = self._fit([reds], P.row_threads(chunks))
            self.begin(f"{g.name}_r{q}", f"pass {q}: combine {chunks} partial(s) per row")
            self._hoist(1)
            self.emit(f"{tid} = cuda.threadIdx.x", 1)
            self._declare_shared([reds], bs2, 1)
            self.emit(f"{p}row = cuda.blockIdx.x", 1)
            self.emit(f"while {p}row < {rows}:", 1)
            self._unravel(f"{p}row", L.kept, d)
            load_rows(q, d)
            for r in reds:
                self._acc_init(r, d)
            c = f"{p}c"
            self.emit(f"{c} = {tid}", d)
            self.emit(f"while {c} < {chunks}:", d)
            for r in reds:
                a, ai = self._acc_names(r)
                b = f"{part[r][0]}[{p}row * {chunks} + {c}]"
                bi = f"{part[r][1]}[{p}row * {chunks} + {c}]" if len(part[r]) > 1 else ""
                self._merge(r, a, ai, b, bi, d + 1)
            self.emit(f"{c} += {bs2}", d + 1)
            self._block_reduce(reds, bs2, d)
            guard = f"{tid} == 0"

            def rv(v, dd, guard=guard):
                self.emit(f"if {guard}:", dd)
                self.emit(f"{rv_name[v]}[{p}row] = {self.local[v]}", dd + 1)

            self._finish_reds(reds, d, guard, rv)
            if q == 0:
                for v in computed_before[0]:
                    if v in self.outputs and v in self.local:
                        self.store(v, d, guard)
            self._row_nodes_at(phase, q + 1, d, guard, rv)
            self.emit(f"{p}row += cuda.gridDim.x", d)
            self.end(self.params())
            self.launches.append(
                Launch(f"{g.name}_r{q}", (P.row_blocks(rows),), (bs2,), self.all_args())
            )


# ---------------------------------------------------------------------- matmul
@dataclass
class MatmulPlan:
    """A device matmul: ``c[z] = a[z or 0] @ b[z or 0]`` over a flattened batch."""

    node: Node
    batch: int
    m: int
    k: int
    n: int
    a_shape: tuple
    b_shape: tuple
    c_shape: tuple


def matmul_plan(node: Node) -> MatmulPlan | None:
    """How ``node`` runs as a tiled kernel, or None (then it runs through NumPy on the host)."""
    if node.op not in ("matmul", "dot") or len(node.var_inputs) != 2:
        return None
    a, b = node.inputs
    if not (isinstance(a, Var) and isinstance(b, Var)):
        return None
    out = node.out
    if any(v.dtype.kind not in "fiu" or v.dtype == np.float16 for v in (a, b, out)):
        return None
    if a.ndim == 0 or b.ndim == 0 or out.size == 0:
        return None
    if node.op == "dot" and (a.ndim > 2 or b.ndim > 2):
        return None
    if node.attrs:
        return None
    m, k = (1, a.shape[0]) if a.ndim == 1 else a.shape[-2:]
    k2, n = (b.shape[0], 1) if b.ndim == 1 else b.shape[-2:]
    if k != k2 or k == 0:
        return None
    batch_shape = out.shape[: max(0, out.ndim - (a.ndim > 1) - (b.ndim > 1))]
    batch = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    ab = a.shape[:-2] if a.ndim > 2 else ()
    bb = b.shape[:-2] if b.ndim > 2 else ()
    for s in (ab, bb):
        sz = int(np.prod(s, dtype=np.int64)) if s else 1
        if sz not in (1, batch) or (sz == batch and tuple(s) != tuple(batch_shape)[-len(s) :]):
            return None
        if sz == batch and batch > 1 and len(s) != len(batch_shape):
            return None
    ba = int(np.prod(ab, dtype=np.int64)) if ab else 1
    bbn = int(np.prod(bb, dtype=np.int64)) if bb else 1
    return MatmulPlan(node, batch, m, k, n, (ba, m, k), (bbn, k, n), (batch, m, n))


def epilogue_fits(mp: MatmulPlan, step: Step) -> str | None:
    """Why the elementwise kernel ``step`` cannot run as the epilogue of matmul ``mp`` (None
    when it can): it must be a plain elementwise group over the matmul's output shape, reading
    the matmul result element for element (its other inputs broadcast to that shape)."""
    v = mp.node.out
    g = step.group
    if g is None or g.kind != "elementwise":
        return f"kernel {step.name} is not elementwise"
    if v.weak or v not in step.inputs:
        return f"kernel {step.name} does not read %{v.name}"
    if tuple(g.shape) != tuple(v.shape):
        return f"kernel {step.name} runs over {list(g.shape)}, the matmul gives {list(v.shape)}"
    return None


class MatmulSource:
    """A tiled shared-memory matmul kernel for one matmul step, optionally with the elementwise
    kernel that reads its result fused in as an epilogue (``epilogue``, a plan step accepted by
    :func:`epilogue_fits`): each thread computes the group's expression from its accumulator
    and stores the group's outputs; the matmul result itself is stored only when ``keep_c``
    (it is a result, or read by a later step)."""

    def __init__(
        self,
        mp: MatmulPlan,
        name: str,
        profile: Profile,
        epilogue: Step | None = None,
        math: str = "fast",
        keep_c: bool = True,
    ):
        self.mp, self.name, self.profile = mp, name, profile
        self.epilogue, self.keep_c = epilogue, keep_c or epilogue is None
        node = mp.node
        ep = None
        if epilogue is not None:
            ep = CudaKernelSource(epilogue, math, profile)
            ep.check()  # DeviceUnsupported: the caller keeps the two kernels apart
        nodes = [node] + (list(epilogue.nodes) if epilogue is not None else [])
        self.group = _PseudoGroup(name, "matmul", nodes)
        out = node.out
        acc = out.dtype if out.dtype.kind == "f" else np.dtype(np.int64)
        a, b = node.inputs
        t = profile.mm_tile
        kt = -(-mp.k // t)
        zero = S.literal(0, acc)
        params = ["a", "b"] + (["c"] if self.keep_c else [])
        if ep is not None:  # in the order of ep.operand_args(), as the launch passes them
            params += [ep.arg(x) for x in ep.inputs + ep.outputs if x is not out]
        head = (
            [
                "    # (on a GPU with CuPy or torch importable, float matmuls of one dtype run in",
                "    # cuBLAS instead, on the same stream; this kernel is the fallback)",
            ]
            if ep is None
            else [
                f"    # epilogue: kernel {epilogue.name} fused, computed from the accumulator"
                + ("" if self.keep_c else f" (%{out.name} is never stored)")
            ]
        )
        lines = [
            "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
            f"def {name}({', '.join(params)}):",
            f"    # matmul {list(a.shape)} @ {list(b.shape)} -> {list(out.shape)}: "
            f"{t}x{t} tiles in shared memory, accumulating in {acc.name}",
            *head,
            *[f"    # {format_node(n)}" for n in nodes],
            f"    sa = cuda.shared.array(({t}, {t}), {nb_type(acc)})",
            f"    sb = cuda.shared.array(({t}, {t}), {nb_type(acc)})",
            "    tx = cuda.threadIdx.x",
            "    ty = cuda.threadIdx.y",
            "    z = cuda.blockIdx.z",
            f"    while z < {mp.batch}:",
            f"        za = {'z' if mp.a_shape[0] > 1 else '0'}",
            f"        zb = {'z' if mp.b_shape[0] > 1 else '0'}",
            f"        row = cuda.blockIdx.y * {t} + ty",
            f"        col = cuda.blockIdx.x * {t} + tx",
            f"        acc = {zero}",
            f"        for kt in range({kt}):",
            f"            k = kt * {t} + tx",
            f"            if row < {mp.m} and k < {mp.k}:",
            f"                sa[ty, tx] = {typed(S.cast('a[za, row, k]', a.dtype, acc), acc)}",
            "            else:",
            f"                sa[ty, tx] = {zero}",
            f"            k = kt * {t} + ty",
            f"            if k < {mp.k} and col < {mp.n}:",
            f"                sb[ty, tx] = {typed(S.cast('b[zb, k, col]', b.dtype, acc), acc)}",
            "            else:",
            f"                sb[ty, tx] = {zero}",
            "            cuda.syncthreads()",
            f"            for kk in range({t}):",
            f"                acc = {typed('acc + sa[ty, kk] * sb[kk, tx]', acc)}",
            "            cuda.syncthreads()",
            f"        if row < {mp.m} and col < {mp.n}:",
        ]
        result = typed(S.cast("acc", acc, out.dtype), out.dtype)
        if ep is None:
            lines.append(f"            c[z, row, col] = {result}")
        else:
            hoisted = self._hoisted(ep)
            lines += self._epilogue(ep, result)
            at = lines.index("    tx = cuda.threadIdx.x")  # scalar operands: read once, first
            lines[at:at] = hoisted
        lines.append("        z += cuda.gridDim.z")
        self.text = "\n".join(lines)
        grid = (-(-mp.n // t), -(-mp.m // t), min(mp.batch, profile.max_grid_yz))
        self.launches = [
            Launch(
                name,
                grid,
                (t, t),
                [
                    Arg("operand", a, mp.a_shape, a.dtype),
                    Arg("operand", b, mp.b_shape, b.dtype),
                    *([Arg("operand", out, mp.c_shape, out.dtype)] if self.keep_c else []),
                    *([x for x in ep.operand_args() if x.var is not out] if ep is not None else []),
                ],
            )
        ]

    def _hoisted(self, ep: CudaKernelSource) -> list[str]:
        out = self.mp.node.out
        ep.lines, ep.hoisted = [], {}
        for v in ep.inputs:
            if v is not out and ep.layout.is_scalar(v) and not v.weak:
                name = f"{ep.p}s_{v.ident}"
                ep.emit(f"{name} = {ep.arg(v)}[0]", 1)
                ep.hoisted[v] = name
        return ep.lines

    def _epilogue(self, ep: CudaKernelSource, result: str) -> list[str]:
        """The store: the matmul element (``c[z, row, col]``, kept only when needed) and the
        epilogue group's expression at that element, indexed like its own kernel (the flat
        index of the element, unravelled over the group's collapsed loop dims)."""
        mp, out, L = self.mp, self.mp.node.out, ep.layout
        ep.lines, ep.local = [], {}
        d = 3
        ep.emit(f"mmc = {result}", d)
        if self.keep_c:
            ep.emit("c[z, row, col] = mmc", d)
        ep.local[out] = "mmc"
        if L.kept:
            ep.emit(f"{ep.p}flat = (z * {mp.m} + row) * {mp.n} + col", d)
            ep._unravel(f"{ep.p}flat", L.kept, d)
        for n in ep.group.nodes:
            ep.compute(n, d)
            for o in n.outputs:
                ep.store(o, d)
        return ep.lines


@dataclass
class _PseudoGroup:
    """A kernel that is not a fusion group (matmul, gathers): what ``Compiled.kernels`` lists."""

    name: str
    kind: str
    nodes: list = field(default_factory=list)


# ---------------------------------------------------------------------- views and scatters
def view_geometry(src_shape, dtype, fn):
    """``(shape, strides, offset)`` in elements of ``fn(a)`` for a C-ordered ``a`` of
    ``src_shape``, or None when ``fn`` is not a pure view. Only the addresses are computed:
    the stand-in array has one element of real memory and is never read."""
    dtype = np.dtype(dtype)
    base = np.zeros(1, dtype)
    c_strides, acc = [], dtype.itemsize
    for d in reversed(src_shape):
        c_strides.append(acc)
        acc *= max(d, 1)
    a = np.lib.stride_tricks.as_strided(base, src_shape, tuple(reversed(c_strides)))
    a.flags.writeable = False
    try:
        v = fn(a)
    except Exception:
        return None
    if not isinstance(v, np.ndarray) or not np.may_share_memory(v, a):
        return None
    off = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    isz = dtype.itemsize
    if off % isz or any(s % isz for s in v.strides):
        return None
    return tuple(v.shape), tuple(s // isz for s in v.strides), off // isz


def is_c_contiguous(shape, strides) -> bool:
    acc = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != acc:
            return False
        acc *= d
    return True


def _index_terms(names, strides, sizes, offset) -> str:
    terms = [str(offset)] if offset else []
    for nm, st, sz in zip(names, strides, sizes):
        if st and sz != 1:
            terms.append(nm if st == 1 else f"{nm} * {st}")
    return " + ".join(terms) or "0"


def _unravel_lines(flat, sizes, names, indent) -> list[str]:
    pad = "    " * indent
    if not sizes:
        return []
    if len(sizes) == 1:
        return [f"{pad}{names[0]} = {flat}"]
    lines = [f"{pad}rem = {flat}"]
    for k in range(len(sizes) - 1, 0, -1):
        lines.append(f"{pad}{names[k]} = rem % {sizes[k]}")
        lines.append(f"{pad}rem = rem // {sizes[k]}")
    lines.append(f"{pad}{names[0]} = rem")
    return lines


def gather_source(name: str, node: Node, shape, strides, offset, profile: Profile):
    """A kernel copying the view ``(shape, strides, offset)`` of flat ``src`` into flat ``out``."""
    size = int(np.prod(shape, dtype=np.int64))
    names = [f"i{k}" for k in range(len(shape))]
    lines = [
        "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
        f"def {name}(src, out):",
        f"    # view {node.op} as a gather: shape {list(shape)}, strides {list(strides)}, "
        f"offset {offset}",
        f"    # {format_node(node)}",
        "    t = cuda.grid(1)",
        "    step = cuda.gridsize(1)",
        f"    while t < {size}:",
        *_unravel_lines("t", shape, names, 2),
        f"        out[t] = src[{_index_terms(names, strides, shape, offset)}]",
        "        t += step",
    ]
    launch = (profile.ew_blocks(size), profile.ew_threads)
    return "\n".join(lines), launch


def scatter_source(name, node, region, value, profile: Profile):
    """A kernel writing ``value`` (broadcast) into the region ``(shape, strides, offset)`` of
    flat ``out`` (``index_update`` with a basic index, after ``out`` got a copy of ``x``).

    ``value`` is ``("var", Var, value strides)``, ``("weak", Var)`` or ``("literal", x)``."""
    shape, strides, offset = region
    x = node.inputs[0]
    size = int(np.prod(shape, dtype=np.int64))
    names = [f"i{k}" for k in range(len(shape))]
    if value[0] == "var":
        v, vstrides = value[1], value[2]
        src = S.cast(f"val[{_index_terms(names, vstrides, shape, 0)}]", v.dtype, x.dtype)
    elif value[0] == "weak":
        v = value[1]
        src = S.cast("val", v.dtype, x.dtype)
    else:
        lit = value[1]
        d = np.asarray(lit).dtype
        src = S.cast(S.literal(lit, d), d, x.dtype)
    lines = [
        "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
        f"def {name}(val, out):",
        f"    # in-place write as direct stores: region {list(shape)}, strides {list(strides)}, "
        f"offset {offset}",
        f"    # {format_node(node)}",
        "    t = cuda.grid(1)",
        "    step = cuda.gridsize(1)",
        f"    while t < {size}:",
        *_unravel_lines("t", shape, names, 2),
        f"        out[{_index_terms(names, strides, shape, offset)}] = {typed(src, x.dtype)}",
        "        t += step",
    ]
    return "\n".join(lines), (profile.ew_blocks(size), profile.ew_threads)


def kernel_source(step: Step, math: str, profile: Profile, mode=None) -> CudaKernelSource:
    ks = CudaKernelSource(step, math, profile, mode)
    ks.text = ks.source()
    return ks


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


__all__ = [
    "Profile",
    "Arg",
    "Launch",
    "DeviceUnsupported",
    "CudaKernelSource",
    "MatmulSource",
    "matmul_plan",
    "view_geometry",
    "gather_source",
    "scatter_source",
    "kernel_source",
    "HELPERS",
    "ULP_BOUNDS_F32",
    "ULP_BOUNDS_F64",
]
