"""The CPU backend against the reference interpreter.

Every op of the op table is compiled for every dtype NumPy accepts and compared with the
interpreter (``Traced.__call__``): bit for bit (NaN payloads and the sign of a NaN aside) for
integer and bool results and for exact ops (arithmetic, comparisons, casts, rounding, min/max up
to the sign of a zero tie), within the stated ulp bound of :mod:`tracekit.backends.fastmath`
for transcendental functions under ``math="fast"``, and within a few ulp under ``math="libm"``.

numba compiles each distinct graph once (about a second on a small machine), so the table
batches many ops into one traced program per dtype (a function returning a tuple) and calls the
same compiled program on contiguous, strided and reversed inputs. ``test_every_op_has_a_backend_
case`` fails when an op is added to ``OPS`` without a case here.
"""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest
from helpers.compare import ulp_distance
from helpers.run import both, compiled, quiet
from helpers.values import DTYPES, random_values, seed_of, with_layout

import tracekit as tk
from tracekit.backends import cache, emit_cpu
from tracekit.ops import BINARY_UFUNCS, UNARY_UFUNCS

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning"),
    pytest.mark.filterwarnings("ignore::tracekit.TracerWarning"),
]

LAYOUTS = ("c", "nc", "neg")


def parallel(c) -> bool:
    """Whether compiled ``c`` runs a kernel on several threads: numba's parallel loop, or a
    chunk kernel's driver (``drivers.py``)."""
    return "prange(" in c.source or bool(c.program.drivers)


@pytest.fixture
def prange_loops(monkeypatch):
    """numba's parallel loops in every parallel kernel (``TRACEKIT_CPU_THREADS=prange``), for
    tests that read their chunks in the source."""
    monkeypatch.setenv("TRACEKIT_CPU_THREADS", "prange")


BIG = emit_cpu.PARALLEL_MIN_WORK + 37  # above the threshold: the prange paths run

# Ops whose results are not exact (transcendental functions and what is built on them).
INEXACT_OPS = set(
    "exp exp2 expm1 log log2 log10 log1p cbrt sin cos tan arcsin arccos arctan sinh cosh tanh "
    "arcsinh arccosh arctanh arctan2 hypot logaddexp power float_power angle".split()
)
# Ops whose result at a tie of +0.0 and -0.0 NumPy itself picks by code path (SIMD or not).
ZERO_TIE_OPS = {"maximum", "minimum", "fmax", "fmin", "clip", "max", "min"}
LIBM_ULP = {np.dtype(np.float32): 4, np.dtype(np.float64): 4}


# ---------------------------------------------------------------------- comparison
def fastmath_bound(op, dtype):
    """How far the fast ``op`` may be from NumPy at ``dtype`` on this machine (fastmath's bound
    from the correctly rounded result plus NumPy's measured error here), or None."""
    from tracekit.backends import fastmath

    if (op, np.dtype(dtype)) not in fastmath.FAST_MATH:
        return None
    from test_fastmath import numpy_relative_bound

    return numpy_relative_bound(op, dtype)


def fastmath_small_results(op, dtype):
    """``(T, A)``: below T in magnitude, the fast ``op`` may be A from NumPy at ``dtype`` on
    this machine (where fastmath promises an absolute error there instead of ulps), or None."""
    from tracekit.backends import fastmath

    if (op, np.dtype(dtype)) not in fastmath.FAST_MATH:
        return None
    from test_fastmath import numpy_relative_small_results

    return numpy_relative_small_results(op, dtype)


def assert_matches(got, want, op=None, math="fast", where="result"):
    """``got`` (compiled) equals ``want`` (interpreter): dtype, shape, then values."""
    if isinstance(want, tuple | list):
        assert isinstance(got, tuple | list) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            o = op[i] if isinstance(op, tuple | list) else op
            assert_matches(g, w, o, math, f"{where}[{i}] ({o})")
        return
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, f"{where}: dtype {g.dtype}, expected {w.dtype}"
    assert g.shape == w.shape, f"{where}: shape {g.shape}, expected {w.shape}"
    if w.dtype.kind == "c":
        assert_matches(g.real, w.real, op, math, f"{where}.real")
        assert_matches(g.imag, w.imag, op, math, f"{where}.imag")
        return
    if w.dtype.kind != "f":
        bad = g != w
    elif op in INEXACT_OPS:
        bound = (fastmath_bound(op, w.dtype) if math == "fast" else None) or LIBM_ULP.get(
            w.dtype, 4
        )
        bad = ulp_distance(g, w) > bound
        small = fastmath_small_results(op, w.dtype) if math == "fast" else None
        if small is not None:  # an absolute error below the magnitude ulps are promised from
            bad &= ~((np.abs(w) < small[0]) & (np.abs(g - w) <= small[1]))
    else:
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        if op not in ZERO_TIE_OPS:
            same &= (np.signbit(g) == np.signbit(w)) | np.isnan(w)
        bad = ~same
    if np.any(bad):
        idx = np.argwhere(np.atleast_1d(bad))[:4]
        gg, ww = np.atleast_1d(g), np.atleast_1d(w)
        pairs = [(tuple(int(k) for k in i), gg[tuple(i)], ww[tuple(i)]) for i in idx]
        raise AssertionError(
            f"{where}: {int(np.sum(bad))} of {w.size} differ (index, got, expected): {pairs}"
        )


# ---------------------------------------------------------------------- inputs
def values(rng, shape, dt, kind=""):
    dt = np.dtype(dt)
    if kind == "nonneg":
        a = random_values(rng, shape, dt, nonneg=True)
        if dt.kind in "iu":
            a = np.abs(a) % 9
        return a.astype(dt)
    if kind == "small" and dt.kind in "iu":
        return rng.integers(0 if dt.kind == "u" else -3, 6, size=shape).astype(dt)
    a = random_values(rng, shape, dt)
    return a


def planted(x, y):
    """Put the hard pairs in the first elements: extremes / -1 / 0, infinities, NaN, -0.0."""
    dt = x.dtype
    if dt.kind in "iu":
        info = np.iinfo(dt)
        px = [info.min, info.min, info.max, 0, info.max, -1 if dt.kind == "i" else 1]
        py = [-1 if dt.kind == "i" else 1, 0, -1 if dt.kind == "i" else 2, 0, 64, 70]
    elif dt.kind in "fc":
        px = [np.inf, -np.inf, np.nan, -0.0, 0.0, 5.0, -7.5, np.inf]
        py = [2.5, -np.inf, 1.0, 0.0, -0.0, np.inf, -2.0, 0.0]
    else:
        return
    n = min(len(px), x.shape[-1], y.shape[-1])
    with quiet():
        x.reshape(-1)[:n] = np.array(px[:n]).astype(dt)
        y.reshape(-1)[:n] = np.array(py[:n]).astype(dt)


# ---------------------------------------------------------------------- the elementwise table
X_SHAPE, Y_SHAPE = (4, 1, 9), (1, 9)  # a size-1 dim, and a broadcast second operand
FORMS = ("lit_int", "lit_float", "rlit_int", "weak")


def _accepts(fn, *args) -> bool:
    try:
        with quiet():
            fn(*args)
        return True
    except (TypeError, ValueError, OverflowError):
        return False


def _binary_call(name, form):
    uf = getattr(np, name)
    return {
        "array": lambda x, y, s: uf(x, y),
        "lit_int": lambda x, y, s: uf(x, 3),
        "lit_float": lambda x, y, s: uf(x, 2.5),
        "rlit_int": lambda x, y, s: uf(2, y),
        "weak": lambda x, y, s: uf(x, s),
    }[form]


# ops per compiled program: numba's compile time grows faster than the op count (24 ops: less
# compile time in all than 40 or 10)
CHUNK = 24


def elementwise_inputs(dt):
    dt = np.dtype(dt)
    rng = np.random.default_rng(seed_of("ew", dt.name))
    x, y = values(rng, X_SHAPE, dt), values(rng, Y_SHAPE, dt)
    planted(x, y)
    return x, y, 1.75


def _cast_to(to):
    return lambda x, y, s: x.astype(to)


def elementwise_cases(dt) -> list:
    """(op, fn(x, y, s)) for every elementwise op NumPy accepts for ``dt``: unary ufuncs, binary
    ufuncs on arrays and with one literal form each (a Python int, a Python float, a reversed
    literal, a weak Python float argument, rotated over dtypes), where, clip, casts to every
    dtype, real/imag/angle, out-of-range integer literals in comparisons."""
    dt = np.dtype(dt)
    args = elementwise_inputs(dt)
    cases = []

    def add(name, fn):
        if _accepts(fn, *args):
            cases.append((name, fn))

    for n in UNARY_UFUNCS:
        add(n, (lambda uf: lambda x, y, s: uf(x))(getattr(np, n)))
    k = DTYPES.index(dt)
    for i, n in enumerate(BINARY_UFUNCS):
        if n == "power":  # NumPy raises for negative integer exponents
            add(n, lambda x, y, s: np.power(x, np.abs(y) if y.dtype.kind in "iu" else y))
            add(n, lambda x, y, s: x**2.5 if x.dtype.kind in "fc" else x**3)
            continue
        add(n, _binary_call(n, "array"))
        add(n, _binary_call(n, FORMS[(i + k) % len(FORMS)]))
    if dt.kind in "iu":
        for fn in (
            lambda x, y, s: x < -1,
            lambda x, y, s: x != 256,
            lambda x, y, s: -129 <= x,
            lambda x, y, s: x == 2**63,
            lambda x, y, s: x > -(2**63) - 1,
        ):
            add("less", fn)
    add("where", lambda x, y, s: np.where(x > 1, x, y))
    add("where", lambda x, y, s: np.where(y, x, 0.5))
    add("clip", lambda x, y, s: np.clip(x, y, 2))
    add("clip", lambda x, y, s: np.clip(x, -1, None))
    for to in DTYPES:
        add("astype", _cast_to(to))
    for n in ("real", "imag", "angle"):
        add(n, (lambda f: lambda x, y, s: f(x))(getattr(np, n)))
    add("full", lambda x, y, s: np.zeros_like(x) + x)
    return cases


def program(cases):
    fns = [f for _, f in cases]

    def fn(x, y, s):
        return tuple(f(x, y, s) for f in fns)

    return fn


def _chunks():
    out = []
    for dt in DTYPES:
        n = len(elementwise_cases(dt))
        for i in range(0, n, CHUNK):
            out.append(pytest.param(dt, i, id=f"{dt}-{i // CHUNK}"))
    return out


@pytest.mark.parametrize("dt,start", _chunks())
def test_elementwise_ops(dt, start):
    cases = elementwise_cases(dt)[start : start + CHUNK]
    names = [n for n, _ in cases]
    args = elementwise_inputs(dt)
    c, t = compiled(program(cases), *args)
    ops = {n.op for n in c.graph.nodes}
    assert ops >= set(names) - {"full", "astype", "real", "imag"}, set(names) - ops
    for layout in LAYOUTS:
        x, y = (with_layout(a, layout) for a in args[:2])
        got, want, _, _ = both(c, t, x, y, args[2])
        _mask_undefined_casts(got, want, names, x)
        assert_matches(got, want, names, "fast", f"{dt} {layout}")


def _mask_undefined_casts(got, want, names, x):
    """Float -> int casts of NaN/inf/out-of-range are undefined (C); compare where defined."""
    if x.dtype.kind not in "fc":
        return
    xr = x.real if x.dtype.kind == "c" else x
    for i, n in enumerate(names):
        if n == "astype" and want[i].dtype.kind in "iu":
            info = np.iinfo(want[i].dtype)
            with quiet():
                bad = ~np.isfinite(xr) | (xr < info.min) | (xr > info.max)
            got[i][bad] = want[i][bad]  # got and want are fresh results: safe to edit


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_transcendental_ops_under_libm(dt):
    """``math="libm"``: numba's libm calls, within a few ulp of NumPy."""
    cases = [(n, f) for n, f in elementwise_cases(dt) if n in INEXACT_OPS]
    args = elementwise_inputs(dt)
    c, t = compiled(program(cases), *args, math="libm")
    assert "fm_" not in c.source
    got, want, _, _ = both(c, t, *args)
    assert_matches(got, want, [n for n, _ in cases], "libm", dt)


# ---------------------------------------------------------------------- shapes and layouts
SMALL_OPS = {
    "b": ("bitwise_xor", "logical_not", "add"),
    "i": ("subtract", "floor_divide", "maximum"),
    "f": ("exp", "maximum", "remainder"),
    "c": ("multiply", "absolute", "equal"),
}


def _small_ops(x):
    """A few ops per dtype kind (exact ones, one transcendental for floats): SMALL_OPS."""
    k = x.dtype.kind
    if k == "b":
        return [x ^ np.logical_not(x), np.logical_not(x), x.astype(np.int16) + 1]
    if k in "iu":
        return [x * x - 3, x // 3, np.maximum(x, 2).astype(np.float32)]
    if k == "f":
        return [np.exp(x) * 2, np.maximum(x, 0.5), np.floor(x) % 3]
    return [x * (1 - 2j), np.abs(x), x.conj() == x]


SHAPES = {
    "0d": (),
    "ones": (1, 1, 1),
    "empty": (0, 3),
    "big": (BIG,),
    "big-2d": (5, BIG // 5),
}


BIG_DTYPES = ("bool", "int8", "uint64", "float32", "float64", "complex128")


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_shapes_for_every_dtype(shape):
    """0-d, size-1, empty arrays of every dtype, large (prange) ones of a few, in one program."""
    rng = np.random.default_rng(seed_of("shapes", shape))
    big = np.prod(shape) >= emit_cpu.PARALLEL_MIN_WORK
    xs = [values(rng, shape, dt) for dt in DTYPES if not big or dt.name in BIG_DTYPES]

    def fn(*xs):
        return tuple(r for x in xs for r in _small_ops(x))

    names = [n for x in xs for n in SMALL_OPS[x.dtype.kind.replace("u", "i")]]
    c, t = compiled(fn, *xs)
    if shape and min(shape) == 0:
        assert not c.kernels  # nothing to compute: NumPy makes the empty results
    elif big:
        assert parallel(c)
    for layout in ("c", "neg") if shape else ("c",):
        got, want, _, _ = both(c, t, *(with_layout(x, layout) for x in xs))
        assert_matches(got, want, names, "fast", f"{shape} {layout}")


def test_broadcast_row_and_column_in_a_large_kernel():
    rng = np.random.default_rng(1)
    a = values(rng, (6, BIG // 6), np.float32)
    row = values(rng, (1, BIG // 6), np.float32)
    col = values(rng, (6, 1), np.float64)

    def fn(a, row, col, s):
        return np.where(a > row, a * col, row - s), (a + row).astype(np.int32)

    c, t = compiled(fn, a, row, col, 0.5)
    assert len(c.kernels) <= 2 and parallel(c)  # row - s: once per row
    for layout in LAYOUTS:
        got, want, _, _ = both(c, t, *(with_layout(v, layout) for v in (a, row, col)), 0.5)
        _mask_undefined_casts(got, want, ["where", "astype"], a + row)
        assert_matches(got, want, None, "fast", layout)


# ---------------------------------------------------------------------- interleaved streams
@pytest.fixture
def every_kernel_interleaved(monkeypatch):
    """Every elementwise kernel in interleaved streams, however small and cheap: 2 streams of 2
    elements, so a row of 9 is two blocks of 4 and a tail of 1."""
    for name, value in (
        ("STREAMS", 2),
        ("LANES", 2),
        ("STREAM_MIN_WORK", 0),
        ("STREAM_MIN_FAST_MATH", 0),
        ("STREAM_BUDGET", 10**6),
    ):
        monkeypatch.setattr(emit_cpu, name, value)


STREAM_DTYPES = ("bool", "int8", "uint32", "float32", "float64", "complex64")  # each template


@pytest.mark.parametrize("dt,start", [p for p in _chunks() if p.values[0].name in STREAM_DTYPES])
def test_elementwise_ops_in_interleaved_streams(dt, start, every_kernel_interleaved):
    cases = elementwise_cases(dt)[start : start + CHUNK]
    names = [n for n, _ in cases]
    args = elementwise_inputs(dt)
    c, t = compiled(program(cases), *args)
    assert re.search(r"_i\d+_1 = ", c.source), "no kernel was interleaved"
    for layout in LAYOUTS:
        x, y = (with_layout(a, layout) for a in args[:2])
        got, want, _, _ = both(c, t, x, y, args[2])
        _mask_undefined_casts(got, want, names, x)
        assert_matches(got, want, names, "fast", f"{dt} {layout}")


def _tanh_chain(x, y, b):
    """Chained transcendental functions (interleaved by default) with a broadcast operand."""
    h = np.tanh(x * 0.9 + y) * y
    return np.exp(-np.abs(np.tanh(h + b))) - np.log1p(h * h)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_long_interleaved_loops_leave_their_tail_to_the_scalar_loop(dt, monkeypatch):
    """An interleaved elementwise loop of SCALAR_TAIL_TRIPS or more has no vector tail loop (in
    its cache key; other machine code than with one), and gives the interpreter's results,
    bit for bit the plain kernel's, over a length no vector iteration divides."""
    n = emit_cpu.SCALAR_TAIL_TRIPS + 45
    rng = np.random.default_rng(seed_of("scalar tail", dt))
    x, y = values(rng, (n,), dt), values(rng, (n,), dt)
    c, t = compiled(_tanh_chain, x, y, 0.25, cache=False)
    (kernel,) = c.program.kernel_modules.values()
    assert kernel.interleave > 1 and not kernel.vector_tail
    assert "_TRACEKIT_VECTOR_TAIL = False" in kernel.source
    with monkeypatch.context() as m:
        m.setattr(emit_cpu, "SCALAR_TAIL_TRIPS", 2 * n)
        tail, _ = compiled(_tanh_chain, x, y, 0.25, cache=False)
        m.setattr(emit_cpu, "INTERLEAVE", 0)
        plain, _ = compiled(_tanh_chain, x, y, 0.25, cache=False)
    (kernel,) = tail.program.kernel_modules.values()
    assert kernel.vector_tail and "_TRACEKIT_VECTOR_TAIL" not in kernel.source
    assert _segment_asm(c) != _segment_asm(tail)
    got, want, _, _ = both(c, t, x, y, 0.25)
    tol = 1e-5 if dt == "float32" else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(got, plain(x, y, 0.25))
    np.testing.assert_array_equal(got, tail(x, y, 0.25))


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("columns", [40, 600])
def test_short_inner_loops_interleave_fewer_vector_iterations(dt, columns):
    """An interleaved kernel whose inner loop is short (rows of 40 read through slices: 38
    trips) takes fewer vector iterations at once, so that two of them fit in the loop
    (float64: 8 lanes of AVX-512, by 2; float32: 16 lanes, by 1); a long one keeps INTERLEAVE
    (or streams). The values are the interpreter's, and the plain kernel's bit for bit."""

    def sliced(x, y, b):
        return _tanh_chain(x[:, 1:-1], y[:, 1:-1], b)

    rng = np.random.default_rng(seed_of("short loops", dt, columns))
    x, y = values(rng, (300, columns), dt), values(rng, (300, columns), dt)
    c, t = compiled(sliced, x, y, 0.25, cache=False)
    (kernel,) = c.program.kernel_modules.values()
    (source,) = c.program.kernel_sources.values()
    assert source.layout.sizes[source.layout.kept[-1]] == columns - 2
    lanes = emit_cpu.VECTOR_BYTES // np.dtype(dt).itemsize
    long = 0 if source.streamed else emit_cpu.INTERLEAVE
    assert kernel.interleave == (long if columns == 600 else {8: 2, 16: 1}[lanes])
    got, expected, _, _ = both(c, t, x, y, 0.25)
    tol = 1e-5 if dt == "float32" else 1e-13
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(emit_cpu, "INTERLEAVE", 0)
        plain, _ = compiled(sliced, x, y, 0.25, cache=False)
    np.testing.assert_array_equal(got, plain(x, y, 0.25))


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(BIG,), (3, BIG // 3 + 1), (5 * 64,) * 2], ids=str)
def test_chained_transcendentals_interleave_at_default_settings(dt, shape, monkeypatch):
    """Large kernels of chained fast-math calls interleave streams: the same results as the
    interpreter, and bit for bit those of the kernel without streams, with a tail of elements
    after the last whole block (or none), for every layout of the inputs."""
    rng = np.random.default_rng(seed_of("streams", dt, shape))
    x, y = values(rng, shape, dt), values(rng, shape[-1:], dt)
    c, t = compiled(_tanh_chain, x, y, 0.25)
    assert re.search(r"_i\d+_3 = ", c.source), c.source
    monkeypatch.setattr(emit_cpu, "STREAMS", 1)
    plain, _ = compiled(_tanh_chain, x, y, 0.25)
    assert "_i0_1 = " not in plain.source
    for layout in LAYOUTS:
        got, want, _, _ = both(c, t, with_layout(x, layout), with_layout(y, layout), 0.25)
        tol = 1e-5 if dt == "float32" else 1e-13  # a few ulp per function, five in a row
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=layout)
        np.testing.assert_array_equal(got, plain(with_layout(x, layout), y, 0.25))


def _segment_asm(c) -> list:
    """The instructions of ``c``'s kernel, their operands' symbols and labels left out."""
    asm = "".join(c.runner.ns["segment0"].inspect_asm().values())  # (the one c calls)
    code = [ln for ln in asm.splitlines() if ln.startswith("\t") and not ln.startswith("\t.")]
    return [re.sub(r"\b_ZN\w+|\.L[\w.]+", "", ln) for ln in code]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_chained_transcendentals_without_streams_interleave_vector_iterations(dt, monkeypatch):
    """A kernel of chained fast-math calls that writes no streams (here: too few elements) has
    LLVM interleave its vector iterations: the option is in its cache key and set while it
    compiles, and only then (its machine code differs from the plain kernel's, and the plain
    kernel compiled again after it is what it was); results are the interpreter's and bit for
    bit the plain kernel's, with a tail after the last whole vector iteration."""
    rng = np.random.default_rng(seed_of("interleave", dt))
    x, y = values(rng, (3, 345), dt), values(rng, (345,), dt)
    with monkeypatch.context() as m:
        m.setattr(emit_cpu, "INTERLEAVE", 0)
        plain, _ = compiled(_tanh_chain, x, y, 0.25, cache=False)
    (kernel,) = plain.program.kernel_modules.values()
    assert kernel.interleave == 0 and "_TRACEKIT_INTERLEAVE" not in kernel.source
    c, t = compiled(_tanh_chain, x, y, 0.25, cache=False)
    (kernel,) = c.program.kernel_modules.values()
    assert kernel.interleave == emit_cpu.INTERLEAVE > 1 and "_i0_1 = " not in c.source
    assert f"_TRACEKIT_INTERLEAVE = {emit_cpu.INTERLEAVE}" in kernel.source
    monkeypatch.setattr(emit_cpu, "INTERLEAVE", 0)
    monkeypatch.setattr(cache, "_modules", type(cache._modules)())  # compile it again
    again, _ = compiled(_tanh_chain, x, y, 0.25, cache=False)
    assert _segment_asm(c) != _segment_asm(plain) == _segment_asm(again)
    for layout in LAYOUTS:
        got, want, _, _ = both(c, t, with_layout(x, layout), with_layout(y, layout), 0.25)
        tol = 1e-5 if dt == "float32" else 1e-13
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=layout)
        np.testing.assert_array_equal(got, plain(with_layout(x, layout), y, 0.25))


def _trig_chain(x, y):
    return np.sin(x * 3.0) + np.cos(x) * np.tan(x - y)


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("interleaved", [False, True], ids=["plain", "streams"])
def test_trig_kernels_compute_again_where_an_argument_is_huge(dt, interleaved, monkeypatch):
    """sin, cos and tan in a kernel are their versions without the huge-argument reduction
    (which a vectorised loop would evaluate for every element); where any argument is beyond
    them the kernel computes every element again through libm: NumPy's results either way,
    in every layout, in streams or not."""
    if interleaved:
        for name, value in (("STREAMS", 2), ("LANES", 2), ("STREAM_MIN_WORK", 0)):
            monkeypatch.setattr(emit_cpu, name, value)
        monkeypatch.setattr(emit_cpu, "STREAM_MIN_FAST_MATH", 0)
    else:
        monkeypatch.setattr(emit_cpu, "STREAMS", 1)
    rng = np.random.default_rng(seed_of("near trig", dt))
    x = rng.uniform(-20, 20, (3, BIG // 3 + 1)).astype(dt)
    y = rng.uniform(-2, 2, x.shape[-1:]).astype(dt)
    c, t = compiled(_trig_chain, x, y)
    assert re.search(r"fm_sin_near_f\d\d\(", c.source) and "np.tan(" in c.source
    assert not re.search(r"fm_(sin|cos|tan)_f\d\d\(", c.source)  # no full versions inlined
    assert bool(re.search(r"_i\d+_1 = ", c.source)) == interleaved
    huge = x.copy()
    huge[1, 5] = 1e22 if dt == "float64" else 3e7  # one far argument: everything again
    tol = 1e-5 if dt == "float32" else 1e-12
    for case in (x, huge):
        for layout in LAYOUTS:
            got, want, _, _ = both(c, t, with_layout(case, layout), y)
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=layout)
            with np.errstate(all="ignore"):
                np.testing.assert_allclose(got, _trig_chain(case, y), rtol=tol, atol=tol)


@pytest.mark.parametrize("threads", ["prange", "numba"])
def test_the_libm_pass_is_compiled_only_where_an_argument_is_huge(threads, monkeypatch):
    """A one-kernel segment's pass through libm is a function of its own (``segment0_far``),
    which the runner calls where the kernel counted a huge argument: not compiled with the
    kernel, compiled at the first huge argument, NumPy's results either way. A chunk kernel
    through a driver (this float64 kernel calls fast-math functions enough for one:
    ``drivers.worth_driving``) keeps its pass inside."""
    monkeypatch.setenv("TRACEKIT_CPU_THREADS", threads)
    x = np.random.default_rng(seed_of("far apart")).uniform(-20, 20, BIG)
    y = np.linspace(-2, 2, BIG)
    c, t = compiled(_trig_chain, x, y)
    if threads == "numba":
        assert list(c.program.drivers) == ["segment0"] and "segment0_far" not in c.source
        for case in (x, np.where(np.arange(BIG) == 7, 1e22, x)):
            got, want, _, _ = both(c, t, case, y)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        return
    assert "def segment0_far(" in c.source and "return k0_far" in c.source
    far = c.runner.ns["segment0_far"]
    assert far.__closure__ is not None  # the lazy loader: nothing compiled yet
    loaded = [cell.cell_contents for cell in far.__closure__ if type(cell.cell_contents) is list]
    got, want, _, _ = both(c, t, x, y)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert loaded == [[]]  # ordinary arguments: the libm pass never loaded
    huge = x.copy()
    huge[7] = 1e22
    got, want, _, _ = both(c, t, huge, y)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert len(loaded[0]) == 1 and loaded[0][0].signatures  # loaded and compiled now


def _trig_rows(x):
    m = np.max(x, axis=-1, keepdims=True)
    return np.sin(x - m) * np.cos(m) + np.sum(np.tan(x * 0.05), axis=-1, keepdims=True)


def _trig_columns(x):
    return np.sum(np.cos(x), axis=0) + np.sin(np.max(x, axis=0))


def _trig_whole(x):
    s = np.sum(np.sin(x))
    return np.cos(s) + np.mean(np.tan(x * 0.05) * s)


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("fn", [_trig_rows, _trig_columns, _trig_whole])
@pytest.mark.parametrize("shape", [(4, 40), (300, 300)], ids=["serial", "parallel"])
def test_reduction_kernels_compute_again_where_a_trig_argument_is_huge(dt, fn, shape):
    """Row, column and whole-array reduction kernels (parallel or not) call sin, cos and tan
    without the huge-argument reduction, in their passes and on their row values alike; where
    any argument is beyond it, the kernel computes everything again through libm."""
    rng = np.random.default_rng(seed_of("near trig rows", dt, fn.__name__, shape))
    x = rng.uniform(-20, 20, shape).astype(dt)
    c, t = compiled(fn, x)
    assert re.search(r"fm_(sin|cos|tan)_near_f\d\d\(", c.source) and "np.sin(" in c.source
    assert not re.search(r"fm_(sin|cos|tan)_f\d\d\(", c.source)  # no full versions inlined
    assert parallel(c) == (x.size >= BIG)
    huge = x.copy()
    huge[1, 5] = 1e22 if dt == "float64" else 3e7  # one far argument: everything again
    tol = 1e-4 if dt == "float32" else 1e-10
    for case in (x, huge):
        got, want, _, _ = both(c, t, case)
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def test_interleaved_kernel_writing_into_its_own_input():
    """``x`` updated in place and an ``out=`` buffer that is the input: each element is read
    before it is written, stream by stream."""

    def update(x):
        x += np.tanh(np.tanh(x) * 2.0)
        return x

    x = np.random.default_rng(3).standard_normal(BIG).astype(np.float32)
    c, t = compiled(update, x.copy())
    assert "_i0_3 = " in c.source
    got, want, a1, a2 = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(a1[0], got)
    inplace = x.copy()
    c2, _ = compiled(lambda x: np.tanh(np.tanh(x) * 2.0), x)
    with quiet():
        fresh = c2(x)
        c2(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, fresh)


def test_float32_chains_round_every_step_in_float32():
    """float32 arithmetic statements carry no float32() wrapper (``scalar.typed_expr``): numba
    must still round each step to float32, as NumPy does, never keep a float64 intermediate."""

    def fn(x, y):
        return ((x + y) - x) * 3.0 + (-(x * y) / x + y), np.tanh(x + y) - np.tanh(x)

    x = np.full(BIG, 1.0, np.float32)
    y = np.full(BIG, 1e-9, np.float32)  # below half an ulp of 1.0: x + y rounds to x
    c, t = compiled(fn, x, y)
    assert "np.float32((k0_x" not in c.source
    got, want, _, _ = both(c, t, x, y)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_array_equal(g, w)
    assert not np.any(got[1])  # tanh(1 + 1e-9) is tanh(1) in float32


@pytest.mark.parametrize("dt", ["float16", "float32", "int8"])
def test_a_python_number_a_host_step_computes_stays_weak(dt):
    """A complex power of a Python float runs as a host step (NumPy's power); the array it
    multiplies keeps its own precision, as with the Python complex NumPy gives (fuzz seed
    18312221: a float16 array came out complex128, not complex64)."""

    def fn(a, x):
        return a * (x ** (1 + 0.5j))

    a = np.full((2, 3), 3, dt)
    c, t = compiled(fn, a, 2.0)
    for x in (2.0, 0.5):
        got, want, _, _ = both(c, t, a, x)
        assert got.dtype == want.dtype == fn(a, x).dtype
        np.testing.assert_allclose(got, fn(a, x), rtol=1e-3)


@pytest.mark.parametrize("dt", ["int8", "int32", "int64", "uint16"])
def test_integer_powers_feed_other_ops_as_their_own_type(dt):
    """Integer powers are computed in uint64 (wrapping as NumPy's); a float conversion, a
    comparison or a clip of the result sees the signed value, not its uint64 bits."""

    def fn(x, e):
        p = x**e
        return np.clip(p, -0.5, 2.0), p < 0, p.astype(np.float64) / 2

    rng = np.random.default_rng(seed_of("ipow", dt))
    x = values(rng, (40,), dt)
    c, t = compiled(fn, x, np.ones(40, dt) + (np.arange(40) % 3).astype(dt))
    got, want, _, _ = both(c, t, x, np.ones(40, dt) + (np.arange(40) % 3).astype(dt))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_constant_powers_are_multiplications(dt):
    """``x ** c`` for a constant multiple of 1/4 ``c`` compiles to a multiplication chain and
    square roots (``fastmath.power_const``, within its ulp bound of NumPy), never to exp and
    log; 2, 0.5 and -1 to NumPy's own ``x * x``, ``sqrt(x)`` and ``1 / x``, bit for bit."""
    exps = (3, 5, -2, -7, 1.5, 2.5, -0.5, -1.5, 11.5, 0.75, -1.25, 0.25, 0, 1, 2, 0.5, -1)

    def fn(x):
        return tuple(x**c for c in exps) + (np.abs(x) ** 1.5 + x**2.5,)

    rng = np.random.default_rng(seed_of("constpow", dt))
    x = values(rng, (300,), dt)
    with quiet():
        c, t = compiled(fn, x)
    body = [ln for ln in c.source.splitlines() if "fm_" in ln and "=" in ln]
    assert body and not any(re.search(r"fm_(power|exp|log)_f", ln) for ln in body)
    got, want, _, _ = both(c, t, x)
    bound = fastmath_bound("power", dt)
    for e, g, w in zip(exps, got, want):
        if e in (2, 0.5, -1, 0, 1):
            np.testing.assert_array_equal(g, w, err_msg=str(e))
        else:
            assert_matches(g, w, "power", where=f"x ** {e}")
            assert ulp_distance(g, w).max() <= bound


# ---------------------------------------------------------------------- promotion
@pytest.mark.parametrize("half", [0, 1])
def test_mixed_dtype_promotion(half):
    """Binary ops between pairs of dtypes (NEP 50 promotion): a sample of the 169 pairs in which
    every dtype is on both sides, in two programs."""
    rng = np.random.default_rng(2)
    xs = [values(rng, (3, 4), dt) for dt in DTYPES]
    n = len(DTYPES)
    pairs = [(a, b) for a in range(n) for b in range(n) if (a * 7 + b) % 4 == 0 and a != b]
    pairs = pairs[half::2]

    def fn(*xs):
        out = []
        for a, b in pairs:
            x, y = xs[a], xs[b]
            out.append(x + y if (a + b) % 2 else np.maximum(x, y))
            out.append(x <= y)
        return tuple(out)

    c, t = compiled(fn, *xs)
    got, want, _, _ = both(c, t, *xs)
    ops = [n for a, b in pairs for n in (("add" if (a + b) % 2 else "maximum"), "less_equal")]
    assert_matches(got, want, ops)


# ---------------------------------------------------------------------- reductions and scans
R_SHAPE = (3, 4, 40)  # the last axis is long enough for the 16-lane row reductions
FULL_AXES = ("bool", "int8", "int64", "uint64", "float32", "float64", "complex128")


def _reductions(p, axis, keepdims):
    out = [
        np.sum(p, axis=axis, keepdims=keepdims),
        np.prod(p, axis=axis, keepdims=keepdims),
        np.any(p, axis=axis, keepdims=keepdims),
        np.all(p, axis=axis, keepdims=keepdims),
        np.mean(p, axis=axis, keepdims=keepdims),
        np.var(p, axis=axis, keepdims=keepdims, ddof=2),
        np.std(p, axis=axis, keepdims=keepdims, ddof=1),
    ]
    out += [np.max(p, axis=axis, keepdims=keepdims), np.min(p, axis=axis, keepdims=keepdims)]
    if not isinstance(axis, tuple):
        out += [np.argmax(p, axis=axis, keepdims=keepdims), np.argmin(p, axis=axis)]
    return out


RED_NAMES = ["sum", "prod", "any", "all", "mean", "var", "std", "max", "min", "argmax", "argmin"]
AXES = {"all": (None, False), "mid": (1, False), "outer-inner": ((0, 2), True), "last": (-1, True)}


def _reduction_params():
    out = []
    for dt in DTYPES:
        for name, (axis, kd) in AXES.items():
            if dt.name in FULL_AXES or name == "last":
                out.append(pytest.param(dt, axis, kd, id=f"{dt}-{name}"))
    return out


@pytest.mark.parametrize("dt,axis,keepdims", _reduction_params())
def test_reductions(dt, axis, keepdims):
    """Every reduction over one axis set, fused in one row kernel behind an elementwise
    producer (as softmax does), then compared: exact for integers, bools, max/min/arg*, any,
    all; within rounding for float sums (the kernel adds in another order than NumPy)."""
    rng = np.random.default_rng(seed_of("red", dt.name, axis))
    x = values(rng, R_SHAPE, dt, "small")
    if dt.kind in "fc":
        x.reshape(-1)[[7, 100, 333]] = [np.nan, np.inf, -np.inf]
        x[1] = values(rng, R_SHAPE[1:], dt)  # a row without NaN
        x[2, :, 0:39:3] = x[2, :, 1:40:3]  # ties for argmax/argmin

    def fn(x):
        return tuple(_reductions(np.maximum(x, x), axis, keepdims))

    c, t = compiled(fn, x)
    rows = [k for k in c.kernels if k.kind == "row"]
    assert len(rows) == 1, c.plan  # one fused row kernel holds them all
    for layout in ("c", "nc"):
        got, want, _, _ = both(c, t, with_layout(x, layout))
        _assert_reductions(got, want, x, RED_NAMES)


def _assert_reductions(got, want, x, names):
    for name, g, w in zip(names, got, want):
        w = np.asarray(w)
        if w.dtype.kind in "fc" and name in ("sum", "prod", "mean", "var", "std"):
            g = np.asarray(g)
            assert g.dtype == w.dtype and g.shape == w.shape, name
            if w.dtype.kind == "c":
                _assert_reductions([g.real, g.imag], [w.real, w.imag], x, [name, name])
                continue
            fin = np.isfinite(w)
            assert np.array_equal(np.isnan(g), np.isnan(w)), name
            assert np.array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)]), name
            eps = np.finfo(w.dtype).eps
            scale = np.max(np.abs(x[np.isfinite(x)]), initial=1.0) ** (1 if name != "prod" else 1)
            np.testing.assert_allclose(
                g[fin], w[fin], rtol=200 * eps, atol=200 * eps * scale**2, err_msg=name
            )
        else:
            assert_matches(g, w, name, where=name)


def _column_kernel(c) -> bool:
    return re.search(r"\w+_cb in (p)?range", c.source) is not None


@pytest.mark.parametrize("axis", [(0,), (0, 1)], ids=["first", "first-two"])
@pytest.mark.parametrize("dt", ["bool", "int64", "float32", "complex128"])
def test_reductions_over_leading_axes(dt, axis):
    """Reductions over the leading axes of a C-order array (column sums) run over blocks of
    contiguous columns, one accumulator each (``KernelSource._columns``): every reduction
    except the arg ones, compared as ``test_reductions``."""
    dt = np.dtype(dt)
    rng = np.random.default_rng(seed_of("columns", dt.name, axis))
    x = values(rng, (5, 3, 40), dt, "small")
    if dt.kind in "fc":
        x.reshape(-1)[[7, 100, 333]] = [np.nan, np.inf, -np.inf]

    def fn(x):
        return tuple(_reductions(np.maximum(x, x), axis, True))

    c, t = compiled(fn, x)
    assert _column_kernel(c)
    got, want, _, _ = both(c, t, x)
    _assert_reductions(got, want, x, RED_NAMES[:-2])


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_products_overflow_where_numpys_do(dt, axis):
    """A product accumulates in its own dtype, as NumPy's does: where NumPy's overflows to inf
    before it meets a 0 the answer is NaN, and an overflow that a later factor would bring back
    into range stays inf (fuzz seed 14100032: a float32 product in float64 gave 0.0)."""
    big = float(np.finfo(dt).max) / 2
    rows = [[-1, -4, big, -3, 0, -1, -4, big, -3, 0], [big, 4, 1 / big, 2, 1, 1, 1, 1, 1, 1]]
    x = np.array(rows, dt)

    def fn(x):
        return np.prod(x, axis=axis)

    c, t = compiled(fn, x)
    got, want, _, _ = both(c, t, x)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cols", [20, BIG // 40], ids=["serial", "parallel"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_softmax_and_norm_over_the_first_axis(dt, cols):
    """Multi-pass kernels over columns: a softmax and a layer norm over axis 0, their row
    values (max, sum, mean, variance) kept per column between passes, a column count that is
    no multiple of the block's."""
    rng = np.random.default_rng(seed_of("colsoftmax", dt, cols))
    x = values(rng, (40, cols), dt, "small")

    def fn(x):
        e = np.exp(x - x.max(axis=0, keepdims=True))
        soft = e / e.sum(axis=0, keepdims=True)
        mu = x.mean(axis=0, keepdims=True)
        norm = (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=0, keepdims=True) + 1e-5)
        return soft, np.tanh(norm) * 2.0 + 0.5

    c, t = compiled(fn, x)
    assert _column_kernel(c)
    assert parallel(c) == (cols > 20)
    got, want, _, _ = both(c, t, x)
    tol = 1e-5 if dt == "float32" else 1e-12
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_a_real_square_root_weighs_as_an_instruction_not_a_call():
    """numba lowers a real ``sqrt`` and ``copysign`` to one vector instruction: they weigh in a
    kernel's work (which sets its threads) as a fast-math function does, not as a libm call; a
    complex ``sqrt`` is a call. A float64 column norm of 2.6k elements then runs serially."""
    from tracekit.backends import scalar

    def costs(fn, *args):
        return {n.op: scalar.element_cost(n) for n in tk.trace(fn, *args).graph.nodes}

    x = np.ones((8, 331))
    assert costs(np.sqrt, x)["sqrt"] == 2
    assert costs(np.sqrt, x.astype(np.float32))["sqrt"] == 1
    assert costs(np.copysign, x, x)["copysign"] == 2
    assert costs(np.sqrt, x.astype(np.complex128))["sqrt"] == scalar.LIBM_COST

    def norm(x):
        return np.sin(x / np.sqrt(np.mean(x * x, axis=0, keepdims=True) + 1e-12))

    x = np.random.default_rng(seed_of("sqrt cost")).uniform(-2, 2, x.shape)
    c, t = compiled(norm, x)
    assert _column_kernel(c) and not parallel(c)
    got, want, _, _ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _shares(bounds, threads) -> list:
    """Elements of each thread's equal run of chunks, as numba hands them out."""
    return [sum(b - a for a, b in run) for run in np.array_split(np.array(bounds), threads)]


@pytest.mark.parametrize("cols", [129, 331, 1000])
def test_column_blocks_hold_even_shares_of_columns(prange_loops, cols):
    """A parallel column kernel's blocks cover every column once, at most a block's width each
    (COLUMN_BYTES of float64, or COLUMNS), and number a multiple of 4 where they can keep a
    quarter of it, so the equal runs of blocks numba hands two or four threads hold equal
    shares (331 columns: 82 or 83 a block, not 128, 128 and 75)."""
    rng = np.random.default_rng(seed_of("even column blocks", cols))
    x = rng.uniform(-2, 2, (emit_cpu.PARALLEL_MIN_WORK // cols + 1, cols))
    c, t = compiled(lambda x: np.exp(x) / np.sqrt(np.sum(x * x, axis=0, keepdims=True)), x)
    b, nb = re.search(r"for (\w+) in prange\((\d+)\):", c.source).groups()
    lo = re.search(r"\w+_c0 = (.+)", c.source).group(1)
    hi = re.search(r"\w+_cn = (.+) - \w+_c0", c.source).group(1)
    bounds = [
        (int(eval(lo, {"np": np, b: k})), int(eval(hi, {"np": np, b: k}))) for k in range(int(nb))
    ]
    assert [j for a, z in bounds for j in range(a, z)] == list(range(cols))
    assert max(z - a for a, z in bounds) <= max(emit_cpu.COLUMNS, emit_cpu.COLUMN_BYTES // 8)
    for threads in (2, 4):
        shares = _shares(bounds, threads)
        assert max(shares) - min(shares) <= len(bounds) // threads, shares
    got, want, _, _ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_column_blocks_read_a_page_of_each_row(prange_loops, dt):
    """Where there are columns enough for every thread, a block of a column kernel reads
    COLUMN_BYTES of each row (a page the prefetchers stream), not COLUMNS: the row's part is
    the block's width in elements of its dtype."""
    import numba

    itemsize = np.dtype(dt).itemsize
    width = emit_cpu.COLUMN_BYTES // itemsize
    cols = 2 * width * numba.config.NUMBA_NUM_THREADS
    rng = np.random.default_rng(seed_of("page-wide column blocks", dt))
    x = rng.uniform(-2, 2, (8, cols)).astype(dt)
    c, t = compiled(lambda x: np.exp(x) / np.sum(np.exp(x), axis=0, keepdims=True), x)
    nb = int(re.search(r"for \w+ in prange\((\d+)\):", c.source).group(1))
    assert width > emit_cpu.COLUMNS and cols // nb == width
    got, want, _, _ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=2e-6 if dt == "float32" else 1e-12)


@pytest.mark.parametrize("cols", [20, BIG // 40], ids=["serial", "parallel"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_column_norm_computes_cheap_values_again_in_its_last_pass(dt, cols):
    """A column kernel computes a few arithmetic ops of its inputs again in the pass that reads
    them (``x ** 3``, ``x * y + 1``) rather than storing them in the first pass and loading them
    (here it would store them in its result); a value of its inputs alone that only the last
    pass reads (``y ** 4``) is computed there, however few its rows; a function call (``exp``)
    is stored, not computed twice. The interpreter's results either way."""
    rng = np.random.default_rng(seed_of("recompute", dt, cols))
    x, y = rng.uniform(-2, 2, (2, 40, cols)).astype(dt)

    def fn(x, y):
        c, e = x**3, np.exp(y)
        s = np.sum(c * c + e, axis=0, keepdims=True)
        return c / np.sqrt(s + 1e-5) + 4.0 * y**4 + e * (x * y + 1.0)

    c, t = compiled(fn, x, y)
    assert _column_kernel(c)
    _, first, last = re.split(r"_j0 in range\(", c.source)  # the kernel's two passes
    assert "fm_exp" in first and "fm_exp" not in last
    assert "fm_power_const" not in first and "fm_power_const" in last
    assert len(re.findall(r"_b_\w+ = ", last)) == 1  # exp(y) loaded, x ** 3 computed again
    got, want, _, _ = both(c, t, x, y)
    tol = 1e-5 if dt == "float32" else 1e-12  # (terms of either sign: relative to the largest)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.max(np.abs(want)))


@pytest.mark.parametrize("dt", ["float64", "int64", "bool", "float32"])
def test_large_reductions_run_in_parallel_chunks(dt):
    rng = np.random.default_rng(3)
    x = values(rng, (8, BIG // 4), dt, "small")
    if x.dtype.kind == "f":
        x[3, 17] = np.nan

    def fn(x):
        p = np.maximum(x, x)
        return (
            p.sum(),
            p.max(),
            p.argmin(),
            p.any(),
            p.sum(axis=1),
            p.argmax(axis=1),
            x.min(axis=0),
        )

    c, t = compiled(fn, x)
    assert c.source.count("prange(") + len(c.program.drivers) >= 2  # kernels on threads
    got, want, _, _ = both(c, t, x)
    _assert_reductions(got, want, x, ["sum", "max", "argmin", "any", "sum", "argmax", "min"])


def _row_patterns(x, y):
    """Softmax, layer norm, logsumexp and plain reductions over rows, behind and before chains
    of fast-math functions; a value of the input alone (``np.sin(y)``) read only in the
    last pass."""
    e = np.exp(np.tanh(x) - np.max(np.tanh(x), axis=-1, keepdims=True))
    soft = e / np.sum(e, axis=-1, keepdims=True)
    mu = np.mean(x, axis=-1, keepdims=True)
    d = x - mu
    norm = np.exp(np.cos(d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + 1e-5)))
    lse = np.log(np.sum(np.exp(x - np.max(x, axis=-1, keepdims=True)), axis=-1, keepdims=True))
    plain = [f(np.exp(np.sin(x)), axis=-1) for f in (np.sum, np.prod, np.min, np.max)]
    return (soft, norm + np.sin(y), lse, *plain)


def _assert_row_patterns(c, t, x, y, tol):
    for layout in ("c", "nc"):
        got, want, _, _ = both(c, t, with_layout(x, layout), with_layout(y, layout))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=layout)


@pytest.mark.parametrize("cols", [9, 40, 600])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_row_passes_in_interleaved_streams(dt, cols, every_kernel_interleaved):
    """Every pass of a row kernel that adds to no accumulator in interleaved streams (2 of 2
    elements, then a tail): the interpreter's results, with NaN and infinities propagated."""
    rng = np.random.default_rng(seed_of("row streams", dt, cols))
    x, y = values(rng, (5, cols), dt, "small"), values(rng, (5, cols), dt, "small")
    x[1, cols // 2], x[2, 0] = np.nan, np.inf
    c, t = compiled(_row_patterns, x, y)
    assert [k.kind for k in c.kernels] == ["row"]
    assert "_j0_1 = " in c.source, c.source
    _assert_row_patterns(c, t, x, y, 2e-5 if dt == "float32" else 1e-12)


@pytest.mark.parametrize("cols", [64, 1000])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_heavy_row_passes_interleave_at_default_settings(dt, cols):
    """The consumer passes of a large row kernel with chained fast-math calls interleave 4
    streams (a row of 1000: 15 blocks of 64 and a tail of 40); the interpreter's results."""
    rng = np.random.default_rng(seed_of("row streams default", dt, cols))
    shape = (emit_cpu.STREAM_MIN_WORK // cols + 3, cols)
    x, y = values(rng, shape, dt, "small"), values(rng, shape, dt, "small")
    c, t = compiled(_row_patterns, x, y)
    assert "_j0_3 = " in c.source, c.source
    _assert_row_patterns(c, t, x, y, 2e-5 if dt == "float32" else 1e-12)


@pytest.mark.parametrize("rows", [65, 86, 515])
def test_row_chunks_hold_even_shares_of_rows(prange_loops, rows):
    """A parallel row kernel's chunks cover every row once, each ``rows // chunks`` rows or one
    more, so the equal runs of chunks numba hands its threads hold equal shares (86 rows in 64
    chunks on two threads: 43 and 43, not 64 and 22 with chunks of 2 and the last ones empty)."""
    rng = np.random.default_rng(seed_of("even row chunks", rows))
    x = rng.uniform(-2, 2, (rows, 600))
    c, t = compiled(lambda x: x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True)), x)
    ch, nch, lo, hi = re.search(
        r"for (\w+) in prange\((\d+)\):\n(?:.*\n)*?\s+for \w+ in range\(([^,]+), (.+)\):", c.source
    ).groups()
    bounds = [(eval(lo, {ch: k}), eval(hi, {ch: k})) for k in range(int(nch))]
    assert [r for a, b in bounds for r in range(a, b)] == list(range(rows))
    assert {b - a for a, b in bounds} <= {rows // int(nch), rows // int(nch) + 1}
    for threads in (2, 4):
        shares = _shares(bounds, threads)
        assert max(shares) - min(shares) <= 1, shares
    got, want, _, _ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def test_a_value_read_only_in_a_later_pass_is_computed_there():
    """``np.sin(x)`` (of the input alone), added to a layer norm's result, is computed in the
    pass that adds it, not in the first pass and kept in a scratch row until then."""

    def fn(x, g):
        s = np.sin(x) * 1.5
        mu = np.mean(x, axis=-1, keepdims=True)
        d = x - mu
        return d / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + 1e-3) * g + s

    rng = np.random.default_rng(seed_of("sink"))
    x, g = rng.standard_normal((6, 100)), rng.uniform(0.5, 2.0, 100)
    c, t = compiled(fn, x, g)
    assert [k.kind for k in c.kernels] == ["row"]
    assert not re.findall(r"(\w+_s_\w+) = np\.empty", c.source)  # (``d`` is in the output)
    fast = c.source[: c.source.index("def segment0_far(")]  # (the libm pass, apart)
    assert fast.index("fm_sin_near_f64(") > fast.rindex("_acc_add("), c.source
    got, want, _, _ = both(c, t, x, g)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def _segment_llvm(c) -> str:
    module = c.program.module
    (segment,) = [getattr(module, n) for n in dir(module) if n.startswith("segment")]
    return "\n".join(segment.inspect_llvm().values())


@pytest.mark.parametrize("cols", [16, 64])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_max_over_short_rows_is_vectorised(dt, cols):
    """A softmax over rows of at most 64 elements: LLVM unrolls a loop of a known short trip
    count before it vectorises, and an unrolled chain of NaN-propagating maxima stays scalar
    (4 ns an element, 20x a vector loop's); the row's loops end at a bound it cannot see."""
    x = np.random.default_rng(cols).standard_normal((50, cols)).astype(dt)
    x[3, 5] = np.nan
    with quiet():
        t = tk.trace(_softmax_rows, x)
    c = tk.compile(t, target="cpu", cache=False, progress=False)  # machine code made now
    got, want, _, _ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    ty = {"float32": "f32", "float64": "f64"}[dt]
    llvm_ir = _segment_llvm(c)
    assert re.search(rf"@llvm\.(vector\.reduce\.fmaximum|maximum)\.v\d+{ty}", llvm_ir), (
        "the row maximum was left scalar"
    )


def _softmax_rows(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def test_argmax_argmin_ties_and_nans():
    x = np.array(
        [
            [1.0, 3.0, 3.0, 2.0],
            [np.nan, 1.0, np.nan, 5.0],
            [-np.inf, -np.inf, -np.inf, -np.inf],
            [2.0, np.nan, 7.0, 7.0],
            [np.inf, np.inf, 0.0, -0.0],
        ]
    )

    def fn(x):
        return (
            np.argmax(x, axis=1),
            np.argmin(x, axis=1),
            np.argmax(x),
            np.argmin(x[::2]),
            (np.argmax(x.T, axis=0)),
        )

    c, t = compiled(fn, x)
    got, want, _, _ = both(c, t, x)
    assert_matches(got, want)
    assert list(want[0]) == [1, 0, 0, 1, 0]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_scans(dt):
    rng = np.random.default_rng(seed_of("scan", dt.name))
    x = values(rng, (3, 5, 7), dt, "small")

    def fn(x):
        return np.cumsum(x, axis=0), np.cumprod(x, axis=-1), np.cumsum(x[:, ::-2], axis=1)

    c, t = compiled(fn, x)
    assert sum(k.kind == "scan" for k in c.kernels) == (2 if dt.kind == "c" else 3)
    for layout in ("c", "neg"):
        got, want, _, _ = both(c, t, with_layout(x, layout))
        assert_matches(got, want, ["cumsum", "cumprod", "cumsum"])


def test_scan_dtype_and_whole_array():
    x = np.arange(24, dtype=np.int8).reshape(2, 3, 4)

    def fn(x):
        return np.cumsum(x), np.cumprod(x, axis=2, dtype=np.float64), np.cumsum(x > 3, axis=1)

    c, t = compiled(fn, x)
    got, want, _, _ = both(c, t, x)
    assert_matches(got, want)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_a_sum_of_negative_zeros_has_numpys_sign(target, dtype):
    """1 / sum(-0.0, ...) is NumPy's infinity (NumPy 2.4's sum gives +0.0; fuzz seed 9001417);
    a cumsum keeps -0.0 as NumPy's does."""
    x = np.full((3, 4), -0.0, dtype)

    def f(x):
        return 1 / np.real(x.sum(axis=1)), 1 / np.real(np.cumsum(x, axis=1)), 1 / np.real(x.sum())

    c = tk.compile(tk.trace(f, x), target=target, progress=False)
    with np.errstate(divide="ignore"):
        for got, want in zip(c(x), f(x), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_clip_ties_of_zeros_go_numpys_way_for_every_kind_of_bound(target):
    """np.clip keeps x on a tie (-0.0 against a bound 0.0) where both bounds are scalars,
    numbers or 0-d arrays, and gives the bound where they are arrays (a 0-d bound was taken
    for an array one: fuzz seed 9900161, where a loop made the bounds 0-d values)."""
    x = np.array([-0.0, 0.0, -0.0, 1.0, -3.0])

    def f(x, lo, hi, lo_full, hi_full):
        return (
            np.clip(x, 0.0, 2.0),
            np.clip(x, lo, hi),
            np.clip(x, lo, 2.0),
            np.clip(x, lo_full, hi_full),
            np.clip(-x, -1.0, hi * -0.0),
        )

    args = (x, np.array(0.0), np.array(2.0), np.zeros(5), np.full(5, 2.0))
    c = tk.compile(tk.trace(f, *args), target=target, progress=False)
    for got, want in zip(c(*args), f(*args), strict=True):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_float16_mean_adds_in_float32_as_numpys(target):
    """np.mean of float16 accumulates in float32 and rounds once: the compiled mean gives
    NumPy's float16 exactly (a float16 sum first rounded 1.163 to 1.162: fuzz seed 9101226)."""
    x = np.cosh(np.array([True] * 3 + [False] * 7)).reshape(10, 1)
    rng = np.random.default_rng(4)
    y = (rng.standard_normal((7, 9)) * 3).astype(np.float16)
    for a in (x, y):
        for axis in (None, 0):
            c = tk.compile(tk.trace(lambda v, ax=axis: v.mean(axis=ax), a), target=target)
            np.testing.assert_array_equal(c(a), a.mean(axis=axis))


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_python_numbers_computed_from_python_numbers_stay_python_numbers(target):
    """``tol * 2.0 + 1.0`` of a Python-float argument is a Python number (NEP 50: it takes
    the array's float32): a kernel computes it, and the kernels and NumPy calls reading it get
    a number, not a 0-d float64 array (numba refused the cast: fuzz seed 9101997)."""
    x = np.linspace(0.5, 2.0, 5, dtype=np.float32)

    def f(x, tol):
        s = tol * 2.0 + 1.0
        return np.hypot(x, s), x * s, np.maximum(x, s) - s

    c = tk.compile(tk.trace(f, x, 0.5), target=target)
    for got, want in zip(c(x, 0.25), f(x, 0.25), strict=True):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
def test_kernel_over_many_arrays_is_vectorised():
    """One kernel reading 12 arrays and writing 12: LLVM must check at run time that they do
    not overlap before it vectorises, and by its default it gives up past 8 such checks,
    leaving the loop scalar (isoneutral's fused kernel: 38 arrays, 3.8x slower)."""

    def many(*xs):
        return tuple(np.tanh(a * b + 1.0) for a, b in zip(xs, xs[1:] + xs[:1]))

    xs = [np.random.default_rng(k).standard_normal(999) for k in range(12)]
    with quiet():
        t = tk.trace(many, *xs)
    c = tk.compile(t, target="cpu", cache=False, progress=False)  # machine code made now
    assert len(c.plan.kernels) == 1
    got, want, *_ = both(c, t, *xs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-15)
    module = c.program.module
    (segment,) = [getattr(module, n) for n in dir(module) if n.startswith("segment")]
    asm = "\n".join(segment.inspect_asm().values())
    packed = re.findall(r"\bv?(?:mul|add|fmadd\w*)pd\s+%[yz]mm", asm)
    assert packed, "the kernel's loop was left scalar"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86 assembly")
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_sum_of_shifted_slices_loads_without_gathers(dt):
    """A whole-array sum over shifted slices (rosen) in parallel chunks: the chunk's loop
    starts at a bound LLVM cannot tell is not negative, and numba wraps a negative index
    around lane by lane, so the loop read its elements by gathers at a third of the speed.
    The loop counts from a bound known to be at least 0 (``KernelSource._range``)."""

    def rosen(x):
        return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    x = np.random.default_rng(5).random(1_000_003).astype(dt)
    with quiet():
        t = tk.trace(rosen, x)
    c = tk.compile(t, target="cpu", cache=False, progress=False)  # machine code made now
    got, want, *_ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dt == "float32" else 1e-12)
    assert "prange" in c.source
    asm = "\n".join(c.runner.ns["segment0"].inspect_asm().values())
    assert re.search(r"\bv?(?:mul|add|sub)p[sd]\s+%[xyz]mm", asm), "the loop was left scalar"
    assert "gather" not in asm
