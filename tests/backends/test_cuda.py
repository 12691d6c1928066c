"""The CUDA target against the reference interpreter.

Without a GPU these run on numba's CUDA simulator (``tests/conftest.py`` sets
``NUMBA_ENABLE_CUDASIM=1`` when there is no ``nvidia-smi``): every kernel runs as Python threads,
so sizes are small and many ops are batched into one traced program per dtype. The simulator
checks the generated code's logic (indexing, phases, reductions, scans, data movement); it has no
warp shuffles (emulated here for one test) and its ``libdevice`` is NumPy, so the accuracy of
the device's math and the speed need a GPU: the tests marked ``gpu`` (skipped without one) run
the same programs at real sizes, with CuPy/torch arrays when importable.

``test_device_code_compiles_to_ptx`` compiles the kernels the emitter writes for a real GPU
(warp shuffles included) to PTX with libNVVM, when the CUDA toolkit is installed, even without a
GPU.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers.values import random_values, rng_for

import tracekit as tk
from tracekit.backends import cuda_math, emit_cuda
from tracekit.backends.lowering import lower
from tracekit.backends.planner import plan as make_plan
from tracekit.ops import OPS
from tracekit.passes import optimize

cuda = pytest.importorskip("numba.cuda")

from tracekit.backends.cuda import (  # noqa: E402
    CudaProgram,
    simulator_active,
)
from tracekit.backends.cuda_device import Profile  # noqa: E402

SIM = simulator_active()
HAS_GPU = (not SIM) and cuda.is_available()
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning"),
    pytest.mark.skipif(not (SIM or HAS_GPU), reason="no GPU and no CUDA simulator"),
]
gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a real CUDA GPU")

DTYPES = [
    np.dtype(d)
    for d in (
        "bool",
        "int8",
        "int32",
        "int64",
        "uint8",
        "uint64",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
]


# ---------------------------------------------------------------------- comparison
def _close(got, exp, where, ulps=64):
    g, e = np.asarray(got), np.asarray(exp)
    assert g.dtype == e.dtype, f"{where}: dtype {g.dtype}, expected {e.dtype}"
    assert g.shape == e.shape, f"{where}: shape {g.shape}, expected {e.shape}"
    if e.dtype.kind not in "fc":
        assert np.array_equal(g, e), f"{where}:\n got {g}\n expected {e}"
        return
    if e.dtype.kind == "c":
        _close(g.real, e.real, where + ".real", ulps)
        _close(g.imag, e.imag, where + ".imag", ulps)
        return
    assert np.array_equal(np.isnan(g), np.isnan(e)), f"{where}: NaNs differ\n{g}\n{e}"
    inf = np.isinf(e)
    assert np.array_equal(g[inf], e[inf]), f"{where}: infinities differ\n{g}\n{e}"
    fin = np.isfinite(e)
    eps = np.finfo(e.dtype).eps
    ok = np.isclose(g[fin], e[fin], rtol=ulps * eps, atol=ulps * eps)
    assert ok.all(), f"{where}: got {g[fin][~ok][:5]}, expected {e[fin][~ok][:5]}"


def assert_close(got, exp, where="result", ulps=64):
    """Same structure, dtypes, shapes, NaNs and infinities; integers exact; floats within
    ``ulps`` machine epsilons (relative, and absolute near zero)."""
    if isinstance(exp, dict):
        assert sorted(got) == sorted(exp), where
        for k in exp:
            assert_close(got[k], exp[k], f"{where}[{k!r}]", ulps)
    elif isinstance(exp, list | tuple):
        assert len(got) == len(exp), where
        for i, (g, e) in enumerate(zip(got, exp)):
            assert_close(g, e, f"{where}[{i}]", ulps)
    else:
        _close(got, exp, where, ulps)


def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def check(fn, args, *, new_args=None, math="fast", ulps=64, **compile_kw):
    """Trace on ``args``, compile for cuda, compare with the interpreter on ``new_args`` (and
    the arguments after the call, for writes into inputs). Returns the Compiled.

    Reductions sum in another order than NumPy's pairwise sums (threads, then a tree): their
    tests allow more rounding (``ulps``)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        t = tk.trace(fn, *_copy(args))
        c = tk.compile(t, target="cuda", math=math, progress=False, **compile_kw)
        new = new_args if new_args is not None else args
        a_ref, a_dev = _copy(new), _copy(new)
        exp = t(*a_ref)
        got = c(*a_dev)
    assert_close(got, exp, ulps=ulps)
    assert_close(a_dev, a_ref, "arguments after the call")
    return c


# ---------------------------------------------------------------------- the programs
UNARY = [o for o, op in OPS.items() if op.ufunc is not None and op.ufunc.nin == 1]
BINARY = [o for o, op in OPS.items() if op.ufunc is not None and op.ufunc.nin == 2]


def _ops_for(dtype) -> list[str]:
    x = random_values(np.random.default_rng(0), (5,), dtype, specials=False)
    y = random_values(np.random.default_rng(1), (5,), dtype, nonneg=True, specials=False)
    ok = []
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for o in UNARY + BINARY:
            try:
                OPS[o].ufunc(x) if o in UNARY else OPS[o].ufunc(x, y)
            except (TypeError, ValueError):
                continue
            ok.append(o)
    return ok


def ufunc_program(dtype):
    """Every ufunc valid for ``dtype``, plus where/clip/astype/real/imag/angle, in one trace."""
    dtype = np.dtype(dtype)
    ops = _ops_for(dtype)

    def fn(x, y, s):
        out = {o: OPS[o].ufunc(x) if o in UNARY else OPS[o].ufunc(x, y) for o in ops}
        out["where"] = np.where(x == y, x, y)
        out["astype_f32"] = x.astype(np.float32)
        out["astype_i16"] = x.real.astype(np.int16) if dtype.kind == "c" else x.astype(np.int16)
        out["astype_bool"] = x.astype(bool)
        out["real"], out["imag"] = np.real(x), np.imag(x)
        out["clip"] = np.clip(x, y, None)
        out["clip2"] = np.clip(x, 0, 3)
        if dtype.kind in "fc":
            out["angle"] = np.angle(x)
            out["weak"] = x * s + s
        return out

    def make(seed):
        r = rng_for("ufunc", dtype.name, seed)
        return [
            random_values(r, (4, 6), dtype),
            random_values(r, (6,), dtype, nonneg=dtype.kind in "iu"),
            1.5,
        ]

    return fn, make


def reduction_program(x):
    out = []
    for ax in (None, 1, (0, 2)):
        for f in (np.sum, np.prod, np.max, np.min, np.any, np.all, np.mean):
            if x.dtype.kind == "c" and f in (np.max, np.min):
                continue
            out.append(f(x, axis=ax))
        if x.dtype.kind in "fc":
            out += [np.var(x, axis=ax), np.std(x, axis=ax, ddof=1)]
    if x.dtype.kind != "c":
        out += [np.argmax(x, axis=2), np.argmin(x, axis=0), np.argmax(x)]
    out.append(x.sum(axis=2, keepdims=True) * 2)
    return tuple(out)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x, g, b):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def logsumexp(x):
    m = x.max(axis=1, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=1)) + m[:, 0]


def row_program(x, g, b):
    return (
        softmax(x),
        layernorm(x, g, b),
        logsumexp(x),
        x.argmax(axis=1),
        (x > 0).sum(axis=1),
        x.var(axis=0),
        softmax(x.T),
        x.sum(),
    )


def scan_program(x):
    return (np.cumsum(x, axis=0), np.cumsum(x, axis=2), np.cumprod(x, axis=1), np.cumsum(x))


def matmul_program(a, b, v, bias):
    return (
        a @ b,
        v @ b,
        a @ v[: a.shape[1]],
        np.dot(a, b),
        np.maximum(a @ b + bias, 0),
        np.dot(v, v),
    )


def batched_matmul(a, b, w):
    return a @ b, a @ w, np.tanh(a @ w) * 2


def movement_program(x, idx):
    return (
        x.T * 2,
        x[::2, ::-1] + 1,
        np.broadcast_to(x[0], (3, 6)) * 1,
        x.reshape(2, 9) + 0,
        x[1] * 3,
        x.T.reshape(-1) + 1,
        np.concatenate([x, x * 2]) + 1,
        np.tile(x, 2) - 1,
        np.repeat(x, 2, axis=0) * 1,
        np.roll(x, 1, axis=1) + 1,
        np.pad(x, 1) * 2,
        x[idx] + 1,
        np.arange(6.0) + x,
        np.linspace(0, 1, 6) * x,
        np.eye(3, 6) + x,
        np.zeros((3, 6)) + np.ones(6) * x,
    )


def write_program(x, v, z):
    y = x * 2
    y[1:3] = v
    y[:, ::2] += 1
    y[0, 0] = 7
    y[[0, 2], 1] = -1.0
    z.real = y[:2, :3]
    z.imag[0] = 5
    x += 1
    x[-1] = np.tanh(x[-1])
    return y, z * 1


def many_reductions(z):
    w = z * 2  # reductions of a value made in a kernel join that kernel
    return w.sum(1), w.prod(1), w.any(1), w.all(1), w.mean(1), (w * w).sum(1), w.var(1)


def ptx_program(x, w, i):
    y = x.T @ w
    return (
        softmax(x),
        x.argmax(axis=1),
        i.sum(axis=1),
        x.sum(),
        np.cumsum(x, axis=1),
        y,
        np.maximum(y * 2 + w[0], 0),  # matmuls with fused epilogues
        np.tanh(w.T @ x) + 1,
        (i[:8].T @ i[:8, :4]) // 3,
    )


def loop_program(u, w):
    """Rolled loops (tracekit.loops): in-place stencil steps, a carried matmul chain, and a
    while loop halving it."""
    for _ in range(40):
        u[1:-1] = u[1:-1] + 0.25 * (u[2:] - 2 * u[1:-1] + u[:-2])
    h = w
    for _ in range(40):
        h = np.tanh(h @ w) + 0.5 * h
    g = h + 1.0
    while np.abs(g).max() > 1e-3:  # a while loop: its test reads the device's values
        g = g * 0.5
    return u.sum(), h, g


PROGRAMS = {
    **{f"ufunc_{d.name}": ufunc_program(d) for d in DTYPES},
    "loops": (loop_program, None),
    "reductions": (reduction_program, None),
    "rows": (row_program, None),
    "scans": (scan_program, None),
    "matmul": (matmul_program, None),
    "batched_matmul": (batched_matmul, None),
    "movement": (movement_program, None),
    "writes": (write_program, None),
    "ptx": (ptx_program, None),
    "ptx_rows": (softmax, None),
    "ptx_many": (many_reductions, None),
}


def _args(name, seed=0, dtype=np.float64):
    r = rng_for(name, seed, np.dtype(dtype).name)
    if name.startswith("ufunc_"):
        return PROGRAMS[name][1](seed)
    if name == "reductions":  # complex inf/nan products depend on the order: none of those
        return [random_values(r, (3, 5, 12), dtype, specials=np.dtype(dtype).kind != "c")]
    if name == "rows":
        return [r.standard_normal((6, 37)).astype(dtype) for _ in range(1)] + [
            r.standard_normal(37).astype(dtype),
            r.standard_normal(37).astype(dtype),
        ]
    if name == "scans":
        return [random_values(r, (3, 4, 9), dtype, specials=np.dtype(dtype).kind == "c")]
    if name == "matmul":
        return [
            r.standard_normal((5, 7)).astype(dtype),
            r.standard_normal((7, 3)).astype(dtype),
            r.standard_normal(7).astype(dtype),
            r.standard_normal(3).astype(dtype),
        ]
    if name == "batched_matmul":
        return [r.standard_normal(s).astype(dtype) for s in ((2, 5, 7), (2, 7, 3), (7, 4))]
    if name == "movement":
        return [r.standard_normal((3, 6)).astype(dtype), np.array([2, 0, 2])]
    if name == "ptx":
        return [
            r.standard_normal((64, 1000)).astype(dtype),
            r.standard_normal((64, 8)).astype(dtype),
            r.integers(0, 9, (64, 1000)),
        ]
    if name == "ptx_many":  # many complex reductions in one row kernel: shared memory fits
        return [r.standard_normal((64, 4000)) + 1j]
    if name == "ptx_rows":
        return [r.standard_normal((64, 1000)).astype(dtype)]
    if name == "loops":
        return [r.standard_normal(40).astype(dtype), 0.3 * r.standard_normal((4, 4)).astype(dtype)]
    if name == "writes":
        return [
            r.standard_normal((4, 6)),
            r.standard_normal(6),
            (r.standard_normal((2, 3)) + 1j * r.standard_normal((2, 3))),
        ]
    raise KeyError(name)


# ---------------------------------------------------------------------- the matrix
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_elementwise_op_table(dtype):
    name = f"ufunc_{dtype.name}"
    c = check(PROGRAMS[name][0], _args(name, 0), new_args=_args(name, 1))
    # every op valid for the dtype runs in device code, except what NumPy must do on the host
    kernels = [k for k in c.kernels if k.kind == "elementwise"]
    assert kernels, c.program.notes
    host = " ".join(c.program.notes)
    assert "k0: runs on the host" not in host, host


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=str)
def test_rolled_loops(dtype):
    """Loops (tracekit.loops) on the device target agree with the interpreter, which runs the
    rolled graph, and stay loops in what the target compiles."""
    c = check(loop_program, _args("loops", 0, dtype), new_args=_args("loops", 1, dtype))
    assert [n.op for n in c.graph.nodes if OPS[n.op].kind == "control"] == [
        "loop",
        "loop",
        "while_loop",
    ], str(c.graph)
    # each body is a program of its own, launched from one host loop on device values
    loops = [it for it in c.program.items if it.kind == "loop"]
    assert len(loops) == 3 and all(it.body.items for it in loops), c.program.notes
    assert sum("launched from one host loop" in n for n in c.program.notes) == 3


@pytest.mark.parametrize(
    "xs,ys",
    [
        ((), ()),
        ((), (5,)),
        ((1,), (1,)),
        ((3, 1), (5,)),
        ((2, 1, 4), (3, 1)),
        ((0, 3), (3,)),
        ((7,), ()),
    ],
    ids=str,
)
def test_shapes(xs, ys):
    def fn(x, y):
        return np.tanh(x) * y + 1, np.maximum(x, y), (x > y).astype(np.int32), x - y.mean()

    r = rng_for("shapes", xs, ys)
    x, y = np.asarray(r.standard_normal(xs)), np.asarray(r.standard_normal(ys))
    check(fn, [x[()] if x.ndim == 0 else x, y])  # a NumPy scalar, or arrays


@pytest.mark.parametrize("layout", ["strided", "negative", "transposed"])
def test_non_contiguous_inputs(layout):
    r = rng_for("nc", layout)
    base = r.standard_normal((12, 10))
    a = {"strided": base[::2, 1::3], "negative": base[::-2, ::-1], "transposed": base.T}[layout]
    b = np.ascontiguousarray(a) * 0.5 + 1

    def fn(a, b):
        return np.sin(a) * b + 1, a.sum(axis=0), np.cumsum(a, axis=1)

    check(fn, [a, b])


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "int32", "uint8", "bool", "complex128"], ids=str
)
def test_reductions(dtype):
    check(
        reduction_program,
        _args("reductions", 0, dtype),
        new_args=_args("reductions", 1, dtype),
        ulps=4096,
    )


@pytest.mark.parametrize("mode", emit_cuda.ROW_MODES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_groups_in_every_shape(mode, dtype, monkeypatch):
    """softmax / layernorm / logsumexp / argmax / var as one block per row, one thread per row,
    and two-pass split reductions."""
    monkeypatch.setattr(emit_cuda, "FORCE_ROW_MODE", mode)
    c = check(row_program, _args("rows", 0, dtype), new_args=_args("rows", 1, dtype), ulps=1024)
    modes = {ks.mode for ks in c.program.kernel_sources.values() if getattr(ks, "mode", None)}
    assert modes == {mode}
    sm = [k for k in c.kernels if len(k.nodes) >= 5]
    assert sm and all(k.kind == "row" for k in sm)  # softmax, layernorm: one fused row kernel


def test_integer_and_bool_rows(monkeypatch):
    def fn(x, m):
        return x.sum(axis=1), x.max(axis=0), m.any(axis=1), m.sum(), x.argmin(axis=1), x.prod()

    r = rng_for("introws")
    x = r.integers(-50, 50, (9, 40)).astype(np.int32)
    for mode in emit_cuda.ROW_MODES:
        monkeypatch.setattr(emit_cuda, "FORCE_ROW_MODE", mode)
        check(fn, [x, x > 20])


@pytest.mark.parametrize("dtype", ["float64", "int32", "bool", "float32", "complex128"])
def test_scans(dtype):
    """Block scans; complex values and float products scan in order, one thread per row
    (a parallel scan would reassociate products: infinities and overflow depend on it)."""
    check(scan_program, _args("scans", 0, dtype), new_args=_args("scans", 1, dtype), ulps=1024)


def test_scans_one_thread_per_row(monkeypatch):
    monkeypatch.setattr(emit_cuda, "FORCE_ROW_MODE", "thread")
    c = check(scan_program, _args("scans", 0), new_args=_args("scans", 1), ulps=1024)
    assert {ks.mode for ks in c.program.kernel_sources.values()} == {"thread"}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_matmul(dtype):
    c = check(matmul_program, _args("matmul", 0, dtype), new_args=_args("matmul", 1, dtype))
    assert sum(k.kind == "matmul" for k in c.kernels) >= 4
    check(batched_matmul, _args("batched_matmul", 0, dtype))


def test_matmul_mixed_dtypes():
    r = rng_for("mixed")
    check(
        lambda a, b: a @ b,
        [r.standard_normal((4, 5)).astype(np.float32), r.standard_normal((5, 3))],
    )


def check_epilogue(fn, args, fused, monkeypatch, **kw):
    """``check`` with and without fused matmul epilogues: the same values, and ``fused``
    fewer kernels with them. Returns the fused Compiled."""
    c = check(fn, args, **kw)
    with monkeypatch.context() as m:
        m.setattr(CudaProgram, "_epilogues", lambda self, plan, math: {})
        apart = check(fn, args, **kw)
    assert len(apart.kernels) - len(c.kernels) == fused, (c.kernels, apart.kernels)
    assert sum("epilogue fused" in n for n in c.program.notes) == fused, c.program.notes
    return c


def test_matmul_epilogue_relu_bias(monkeypatch):
    r = rng_for("epi-relu")
    a, b, bias = r.standard_normal((5, 7)), r.standard_normal((7, 6)), r.standard_normal(6)
    c = check_epilogue(lambda a, b, bias: np.maximum(a @ b + bias, 0), [a, b, bias], 1, monkeypatch)
    (k,) = c.kernels
    assert k.kind == "matmul" and [n.op for n in k.nodes] == ["matmul", "add", "maximum"]
    assert "c[z, row, col]" not in k.source  # the matmul result never goes to memory
    assert any("is never stored" in n for n in c.program.notes)
    # two matmuls into one kernel: one of them takes it as its epilogue
    a2, b2 = r.standard_normal((5, 2)), r.standard_normal((2, 6))
    check_epilogue(
        lambda a, b, a2, b2: np.maximum(a @ b + a2 @ b2, 0), [a, b, a2, b2], 1, monkeypatch
    )


def test_matmul_epilogue_batched(monkeypatch):
    r = rng_for("epi-batched")
    a, w = r.standard_normal((2, 5, 7)), r.standard_normal((7, 4))
    a32, w32 = a.astype(np.float32), w.astype(np.float32)
    check_epilogue(lambda a, w: np.tanh(a @ w) * 2, [a, w], 1, monkeypatch)
    check_epilogue(lambda a, w: np.tanh(a @ w) * 2, [a32, w32], 1, monkeypatch)
    # operands broadcast over part of the batch, a 0-d array (hoisted) and a Python float
    bias, s = r.standard_normal((2, 1, 4)), np.asarray(0.5)
    check_epilogue(
        lambda a, w, bias, s: np.maximum(a @ w * s + bias, -0.25) + 1.5,
        [a, w, bias, s],
        1,
        monkeypatch,
    )
    # both operands batched, the epilogue with two outputs
    b = r.standard_normal((2, 7, 3))
    check_epilogue(lambda a, b: (np.exp(a @ b), (a @ b) * 2), [a, b], 1, monkeypatch)


def test_matmul_epilogue_result_also_returned(monkeypatch):
    def fn(a, b, bias):
        y = a @ b
        return y, np.tanh(y + bias)

    r = rng_for("epi-kept")
    args = [r.standard_normal((6, 5)), r.standard_normal((5, 3)), r.standard_normal(3)]
    c = check_epilogue(fn, args, 1, monkeypatch)
    assert any("is stored too" in n for n in c.program.notes)
    assert "c[z, row, col] = mmc" in c.kernels[0].source


def test_matmul_epilogue_integers(monkeypatch):
    r = rng_for("epi-int")
    a = r.integers(-9, 9, (4, 6)).astype(np.int32)
    b = r.integers(-9, 9, (6, 5)).astype(np.int32)
    bias = r.integers(-50, 50, 5).astype(np.int32)
    check_epilogue(
        lambda a, b, bias: (np.maximum(a @ b - bias, 0) // 3, (a @ b) % 7 == 0),
        [a, b, bias],
        1,
        monkeypatch,
    )
    i8 = r.integers(-9, 9, (3, 4, 6)).astype(np.int8)  # int8 @ int32: int32, wraps like NumPy
    check_epilogue(lambda x, b: (x @ b) * 3 + 1, [i8, b], 1, monkeypatch)


def test_matmul_epilogues_left_apart(monkeypatch):
    """Kernels that do not fit stay separate kernels, with the reason in the notes."""
    r = rng_for("epi-apart")
    a, b = r.standard_normal((5, 7)), r.standard_normal((7, 3))
    c = check_epilogue(softmax_of_matmul, [a, b], 0, monkeypatch)  # a row kernel
    assert any("not elementwise" in n for n in c.program.notes)
    big = r.standard_normal((2, 5, 3))  # the epilogue's shape is larger than the matmul's
    c = check_epilogue(lambda a, b, x: np.maximum(a @ b, x), [a, b, big], 0, monkeypatch)
    assert any("runs over [2, 5, 3]" in n for n in c.program.notes)
    # (tanh(a @ b) + x: the tanh has a kernel over the matmul's shape, and that one fuses)
    check_epilogue(lambda a, b, x: np.tanh(a @ b) + x, [a, b, big], 1, monkeypatch)

    def read_before(a, b, w):  # a step reads the matmul result before its epilogue runs
        y = a @ b
        h = y.T @ w
        return h, np.tanh(y) + 1

    c = check_epilogue(read_before, [a, b, r.standard_normal((5, 2))], 0, monkeypatch)
    assert any("before" in n for n in c.program.notes), c.program.notes


def softmax_of_matmul(a, b):
    return softmax(a @ b)


def test_movement_and_creation_ops():
    c = check(movement_program, _args("movement", 0))
    kinds = [k.kind for k in c.kernels]
    assert "gather" in kinds  # transposes and strided slices are device gathers
    # a contiguous reshape is free: no gather for x.reshape(2, 9)
    srcs = " ".join(k.source for k in c.kernels if k.kind == "gather")
    assert "reshape" not in srcs
    assert any("concatenate" in n for n in c.program.notes)  # host, and said so


def test_in_place_writes():
    c = check(write_program, _args("writes", 0), new_args=_args("writes", 1))
    assert sum(k.kind == "scatter" for k in c.kernels) >= 3  # basic-index writes: direct stores


# ---------------------------------------------------------------------- random programs
def test_random_programs():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    un = ["negative", "absolute", "exp", "tanh", "sin", "sqrt", "square", "floor", "log1p"]
    bi = ["add", "subtract", "multiply", "maximum", "minimum", "divide", "arctan2", "hypot"]
    red = [None, "sum", "max", "mean", "argmax", "cumsum", "var"]

    @hypothesis.settings(
        max_examples=8, deadline=None, derandomize=True, database=None, print_blob=True
    )
    @hypothesis.given(
        shape=st.sampled_from([(5,), (3, 4), (2, 3, 4), (4, 1, 3)]),
        dtype=st.sampled_from(["float32", "float64"]),
        steps=st.lists(
            st.tuples(st.sampled_from(un + bi), st.integers(0, 3), st.integers(0, 3)),
            min_size=1,
            max_size=6,
        ),
        last=st.sampled_from(red),
        bshape=st.sampled_from(["same", "row", "scalar"]),
        seed=st.integers(0, 2**16),
    )
    def run(shape, dtype, steps, last, bshape, seed):
        def fn(x, y):
            vals = [x, y]
            for op, i, j in steps:
                a, b = vals[i % len(vals)], vals[j % len(vals)]
                vals.append(OPS[op].ufunc(a) if op in un else OPS[op].ufunc(a, b))
            v = vals[-1]
            if np.ndim(v) == 0:
                pass
            elif last in ("sum", "max", "mean", "argmax", "var"):
                v = getattr(np, last)(v, axis=-1)
            elif last == "cumsum":
                v = np.cumsum(v, axis=0)
            return v, vals[2]

        r = np.random.default_rng(seed)
        ys = {"same": shape, "row": shape[-1:], "scalar": ()}[bshape]
        x = r.standard_normal(shape).astype(dtype)
        y = np.asarray(r.standard_normal(ys) + 2, dtype)
        check(fn, [x, y])

    run()


# ---------------------------------------------------------------------- data, pool, streams
def _dev(a):
    return cuda.to_device(np.ascontiguousarray(a))


def _host(d):
    return d.copy_to_host() if hasattr(d, "copy_to_host") else np.asarray(d)


def test_device_arrays_in_and_out():
    def fn(x, b):
        return np.tanh(x) * 2 + b, x.sum(axis=1)

    r = rng_for("dev")
    x, b = r.standard_normal((4, 9)).astype(np.float32), r.standard_normal(9).astype(np.float32)
    c = tk.compile(tk.trace(fn, x, b), target="cuda", progress=False)
    exp = fn(x, b)
    got = c(_dev(x), _dev(b))
    assert all(type(g).__name__ in ("DeviceNDArray", "FakeCUDAArray") for g in got)
    assert_close([_host(g) for g in got], list(exp))
    mixed = c(_dev(x), b)  # one device input is enough for device results
    assert type(mixed[0]) is type(got[0])
    assert_close(_host(mixed[0]), exp[0])
    strided = cuda.to_device(np.repeat(x, 2, axis=0))[::2]  # non-contiguous on the device
    assert_close(_host(c(strided, _dev(b))[0]), exp[0])
    host = c(x, b)
    assert isinstance(host[0], np.ndarray)


def test_out_buffers_device_and_host():
    def fn(x):
        return np.exp(x) - 1, x.max(axis=0)

    x = rng_for("out").standard_normal((5, 6))
    c = tk.compile(tk.trace(fn, x), target="cuda", progress=False)
    exp = fn(x)
    d0, d1 = cuda.device_array((5, 6)), cuda.device_array(6)
    res = c(_dev(x), out=(d0, d1))
    assert res[0] is d0 and res[1] is d1
    assert_close([_host(d0), _host(d1)], list(exp))
    h0, h1 = np.empty((5, 6)), np.empty(6)
    res = c(x, out=(h0, h1))
    assert res[0] is h0
    assert_close([h0, h1], list(exp))
    strided = np.empty((5, 12))[:, ::2]
    c(x, out=(strided, h1))
    assert_close(strided, exp[0])
    with pytest.raises(ValueError):
        c(x, out=(h0,))


def test_out_buffer_that_is_an_input():
    """A row kernel re-reads its input after writing its output: out= the input itself must not
    change the answer (tracekit computes into fresh buffers, then copies)."""
    x = rng_for("alias").standard_normal((4, 20))
    c = tk.compile(tk.trace(softmax, x), target="cuda", progress=False)
    d = _dev(x)
    assert c(d, out=d) is d
    assert_close(_host(d), softmax(x))


def test_pool_reused_across_calls():
    def fn(x):
        y = np.exp(x - x.max(axis=1, keepdims=True))
        return (y / y.sum(axis=1, keepdims=True)) @ x.T

    x = rng_for("pool").standard_normal((6, 10))
    c = tk.compile(tk.trace(fn, x), target="cuda", progress=False)
    c(x)
    pool = c._pool()
    before = {k: id(v) for k, v in pool.items()}
    assert before  # inputs, temporaries and (NumPy caller) outputs
    for _ in range(3):
        assert_close(c(x + 1), fn(x + 1))
    assert {k: id(v) for k, v in pool.items()} == before
    # device results are fresh buffers each call (the caller keeps them)
    d = _dev(x)
    r1, r2 = c(d), c(d)
    assert r1 is not r2 and all(r1 is not v for v in pool.values())
    assert_close(_host(r1), _host(r2))


def test_writes_into_device_and_numpy_inputs():
    def fn(a, b):
        a += b
        a[0] = -1
        return a.sum()

    r = rng_for("wb")
    a, b = r.standard_normal((3, 5)), r.standard_normal((3, 5))
    c = tk.compile(tk.trace(fn, a.copy(), b), target="cuda", progress=False)
    ref = a.copy()
    exp = fn(ref, b)
    da = _dev(a)
    got = c(da, _dev(b))
    assert_close(_host(da), ref)
    assert_close(float(_host(got)), exp)
    h = a.copy()
    assert_close(c(h, b), exp)
    assert_close(h, ref)


def test_stream_option_and_cpu_refuses_it():
    x = np.linspace(-1, 1, 12)
    t = tk.trace(lambda x: np.sin(x) * 2, x)
    s = cuda.stream()
    c = tk.compile(t, target="cuda", progress=False, stream=s)
    assert c.runner.stream is s
    assert_close(c(x), np.sin(x) * 2)
    c2 = tk.compile(t, target="cuda", progress=False)
    assert c2.runner.stream is not s  # one stream per Compiled by default
    with pytest.raises(ValueError, match="cuda"):
        tk.compile(t, target="cpu", progress=False, stream=s)


def test_jit_target_cuda():
    f = tk.jit(lambda x, y: np.maximum(x @ y, 0).sum(axis=1), target="cuda")
    r = rng_for("jit")
    a, b = r.standard_normal((4, 5)), r.standard_normal((5, 3))
    assert_close(f(a, b), np.maximum(a @ b, 0).sum(axis=1))
    assert f.explain().startswith("first call")
    f(a, b)
    assert f.explain().startswith("cache hit")
    assert f.compiled.target == "cuda"


def test_jit_on_device_arrays(monkeypatch):
    """Device arrays in, device arrays out; the signature comes from the array interface (no
    host copy per call), the trace from a host copy made once per signature."""

    def fn(x, b):
        return np.maximum(x @ b.T, 0) + 1, x.sum(axis=1)

    r = rng_for("jit-dev")
    x, b = (
        r.standard_normal((4, 6)).astype(np.float32),
        r.standard_normal((3, 6)).astype(np.float32),
    )
    f = tk.jit(fn, target="cuda", progress=False)
    got = f(_dev(x), _dev(b))
    assert f.explain().startswith("first call")
    assert all(type(g).__name__ in ("DeviceNDArray", "FakeCUDAArray") for g in got)
    assert_close([_host(g) for g in got], list(fn(x, b)), ulps=256)
    # a second call of the same signature: a cache hit, and nothing copied to the host for it
    from tracekit.backends import jit as jit_module

    asarray = np.asarray

    def no_copy(a, *args, **kw):
        if jit_module.is_device_array(a):
            raise AssertionError("a device array was copied to the host for a cache hit")
        return asarray(a, *args, **kw)

    with monkeypatch.context() as m:
        m.setattr(jit_module, "_to_host", no_copy)
        m.setattr(np, "asarray", no_copy)
        x2 = x + 1
        again = f(_dev(x2), _dev(b))
    assert f.explain().startswith("cache hit")
    assert_close([_host(g) for g in again], list(fn(x2, b)), ulps=256)
    # a new shape recompiles; a strided device view is an argument like any other
    x3 = r.standard_normal((10, 6)).astype(np.float32)
    got3 = f(_dev(x3)[::2], _dev(b))
    assert f.explain() == "recompiled: x: shape (4, 6) -> (5, 6)"
    assert_close([_host(g) for g in got3], list(fn(x3[::2], b)), ulps=256)
    # NumPy arrays of a signature seen with device arrays: the same compiled function
    host = f(x, b)
    assert f.explain().startswith("cache hit") and isinstance(host[0], np.ndarray)
    assert_close(list(host), list(fn(x, b)), ulps=256)
    with pytest.raises(TypeError, match="device array"):
        tk.jit(lambda v: v * 2)(_dev(x))  # the cpu target says what is wrong


def test_source_kernels_and_plan_are_visible():
    x = rng_for("src").standard_normal((4, 16)).astype(np.float32)
    c = tk.compile(tk.trace(softmax, x), target="cuda", progress=False)
    src = c.source
    assert "@cuda.jit" in src and "cuda.syncthreads()" in src
    assert "# %0: f32[4,1] = max(%x" in src  # the covered nodes, as comments
    assert re.search(r"libdevice\.\w+\(", src)
    assert [k.kind for k in c.kernels] == ["row"]
    assert "def k0(" in c.kernels[0].source
    assert "cuda" in repr(c)


def test_guards_are_checked():
    def fn(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    x = np.ones(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = tk.jit(fn, target="cuda")
        assert_close(f(x), x * 2)
        assert_close(f(-x), -x - 1)  # the guard fails, jit retraces
    assert f.explain().startswith("retraced")


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_no_gpu_and_no_simulator_is_a_clear_error():
    code = textwrap.dedent(
        """
        import numpy as np, tracekit as tk
        from tracekit.backends.cuda import CudaUnavailableError
        t = tk.trace(lambda x: x + 1, np.ones(3))
        try:
            tk.compile(t, target="cuda", progress=False)
        except CudaUnavailableError as e:
            print("MESSAGE:", e)
        else:
            print("NO ERROR")
        """
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    if "NO ERROR" in p.stdout:
        pytest.skip("numba found a usable GPU")
    assert "MESSAGE:" in p.stdout, p.stdout + p.stderr
    msg = p.stdout
    assert "NUMBA_ENABLE_CUDASIM=1" in msg and "GPU" in msg and "target='cpu'" in msg


# ---------------------------------------------------------------------- warp shuffles
_warps: dict = {}
_warps_lock = threading.Lock()


def _emulated_shfl_down_sync(self, mask, value, delta):
    """``cuda.shfl_down_sync`` for the simulator: the 32 lanes of a warp meet at a barrier."""
    th = threading.current_thread()
    lane, warp = th.thread_id % 32, th.thread_id // 32
    key = (id(th._manager), warp)
    with _warps_lock:
        state = _warps.setdefault(key, ([None] * 32, threading.Barrier(32)))
    vals, barrier = state
    vals[lane] = value
    barrier.wait()
    src = lane + delta
    out = vals[src] if src < 32 else value
    barrier.wait()
    return out


@pytest.mark.skipif(not SIM, reason="emulates warp shuffles in the simulator")
def test_warp_shuffle_reductions_on_the_simulator(monkeypatch):
    from numba.cuda.simulator import kernelapi

    monkeypatch.setattr(
        kernelapi.FakeCUDAModule, "shfl_down_sync", _emulated_shfl_down_sync, raising=False
    )

    def fn(x, i):
        return softmax(x), x.argmax(axis=1), x.sum(), i.max(axis=1), x.var(axis=1)

    r = rng_for("shfl")
    x = r.standard_normal((3, 150))
    x[1, 7] = x[1, 90] = 9.0  # a tie: the first index wins
    i = r.integers(-99, 99, (3, 150))
    t = tk.trace(fn, x, i)
    plan = make_plan(lower(optimize(t).graph).check())
    prof = Profile(simulator=True, sim_row_threads=64, force_shuffle=True)
    prog = CudaProgram(plan, "fast", profile=prof)
    assert prog.source.count("cuda.shfl_down_sync") >= 10
    runner = prog.runner()
    with np.errstate(all="ignore"):
        results, _ = runner.fn([x, i], None, {})
    assert_close(list(results), list(t(x, i)))


@pytest.mark.skipif(not SIM, reason="the simulator's shared memory")
def test_simulated_shared_memory_is_one_array_per_block():
    """Threads of a block asking for the same shared array at once all get the same one (the
    simulator's own lookup races; a lost race made matmul and reductions flaky)."""
    from numba.cuda.simulator import kernelapi

    from tracekit.backends.cuda import _simulator_session

    with _simulator_session():
        for _ in range(20):
            shared = kernelapi.FakeCUDAShared(0)
            barrier, got = threading.Barrier(16), []

            def thread(shared=shared, barrier=barrier, got=got):
                barrier.wait()
                got.append(shared.array((4, 4), np.float64))  # one line: one array

            threads = [threading.Thread(target=thread) for _ in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len({id(a) for a in got}) == 1


@pytest.mark.skipif(not SIM, reason="the simulator's session")
def test_simulator_session_for_any_profile():
    """A program emitted for a GPU's profile and run on the simulator gets the simulator's
    session too (its shared-memory lock above), not only a simulator profile."""
    import contextlib
    import types

    from tracekit.backends.cuda import CudaRunner

    for prof in (Profile(simulator=True), Profile(simulator=False, name="sm_90", cc=(9, 0))):
        session = CudaRunner._session(types.SimpleNamespace(profile=prof))
        assert not isinstance(session, contextlib.nullcontext), prof


# ---------------------------------------------------------------------- races
class _RaceCheck:
    """Every memory access of the simulated kernels, checked for races between threads.

    Each access of a shared array or of a kernel argument (global memory, by element address)
    is recorded with the thread and its barrier interval (how many ``syncthreads`` it has
    passed); after each launch, two threads touching one address where at least one writes are
    a race unless they are in the same block and in different barrier intervals (global memory
    has no barrier between blocks). A shared slot read before its block wrote it is reported
    too. This does not depend on how the simulator happened to schedule the threads: a missing
    barrier is found on every run, whatever values came out."""

    def __init__(self, monkeypatch):
        from numba.cuda.simulator import kernel, kernelapi
        from numba.cuda.simulator.cudadrv.devicearray import FakeWithinKernelCUDAArray as FA

        self.lock = threading.Lock()
        self.log = None  # the launch being recorded: {address: {thread: {(write?, interval)}}}
        self.unset = {}  # shared slots read before their block wrote them
        self.races: list[str] = []
        self.launches = 0
        check = self
        sync, call = kernel.BlockThread.syncthreads, kernel.FakeCUDAKernel.__call__
        get, put = FA.__getitem__, FA.__setitem__

        def syncthreads(th):
            sync(th)
            th.tk_epoch = getattr(th, "tk_epoch", 0) + 1

        def launch(k, *args):
            if k._device or kernel._kernel_context is not None:
                return call(k, *args)
            check.log, check.unset = {}, {}
            try:
                return call(k, *args)
            finally:
                check.launches += 1
                check.races += check.conflicts(k.fn.__name__)
                check.log = None

        def shared_array(sh, shape, dtype, alignment=None):
            if isinstance(dtype, kernelapi.types.Type):
                dtype = kernelapi.numpy_support.as_dtype(dtype)
            f = sys._getframe(1)
            where = (f.f_code.co_filename, f.f_lineno)
            with check.lock:
                res = sh._allocations.get(where)
                if res is None:
                    res = sh._allocations[where] = _Shared(check, np.empty(shape, dtype), where)
            return res

        def getitem(a, idx):
            check.touch(("g", check.address(a._item._ary, idx)), False)
            return get(a, idx)

        def setitem(a, idx, val):
            check.touch(("g", check.address(a._item._ary, idx)), True)
            put(a, idx, val)

        shared_array._tracekit_locked = True  # the simulator session keeps it
        monkeypatch.setattr(kernel.BlockThread, "syncthreads", syncthreads)
        monkeypatch.setattr(kernel.FakeCUDAKernel, "__call__", launch)
        monkeypatch.setattr(kernelapi.FakeCUDAShared, "array", shared_array)
        monkeypatch.setattr(FA, "__getitem__", getitem)
        monkeypatch.setattr(FA, "__setitem__", setitem)

    @staticmethod
    def address(ary, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != ary.ndim or not all(isinstance(i, int | np.integer) for i in idx):
            return ("whole", id(ary))  # not an element: kernels here never do this
        off = sum(int(i % n) * s for i, n, s in zip(idx, ary.shape, ary.strides))
        return ary.__array_interface__["data"][0] + off

    def touch(self, key, write):
        th = threading.current_thread()
        if self.log is None or not hasattr(th, "blockIdx"):
            return
        b, t = th.blockIdx, th.threadIdx
        who = ((b.x, b.y, b.z), (t.x, t.y, t.z))
        epoch = getattr(th, "tk_epoch", 0)
        with self.lock:
            self.log.setdefault(key, {}).setdefault(who, set()).add((write, epoch))
            if key[0] == "s" and not write and (key[:3], who[0]) not in self.unset:
                written = any(w for acc in self.log[key].values() for w, _ in acc)
                if not written:
                    self.unset[(key[:3], who[0])] = f"{key[1][1]}:{key[2]}"

    def conflicts(self, kernel_name) -> list[str]:
        out = [f"{kernel_name}: shared slot read before written ({w})" for w in self.unset.values()]
        for key, acc in self.log.items():
            if len(acc) < 2 or not any(w for a in acc.values() for w, _ in a):
                continue
            items = list(acc.items())
            for i, (t1, a1) in enumerate(items):
                for t2, a2 in items[i + 1 :]:
                    hit = [
                        (w1 and w2, e1)
                        for w1, e1 in a1
                        for w2, e2 in a2
                        if (w1 or w2) and (t1[0] != t2[0] or e1 == e2)
                    ]
                    if hit:
                        kind = "write/write" if hit[0][0] else "read/write"
                        where = f"shared line {key[1][1]}" if key[0] == "s" else "global memory"
                        out.append(
                            f"{kernel_name}: {kind} race on {where} between threads {t1} and "
                            f"{t2} (barrier interval {hit[0][1]})"
                        )
        return out


class _Shared:
    """A simulated shared array whose element accesses the race check records."""

    def __init__(self, check, ary, where):
        self.check, self.ary, self.where = check, ary, where

    def _key(self, idx):
        th = threading.current_thread()
        b = th.blockIdx
        idx = idx if isinstance(idx, tuple) else (idx,)
        return ("s", self.where, tuple(int(i) for i in idx), (b.x, b.y, b.z))

    def __getitem__(self, idx):
        self.check.touch(self._key(idx), False)
        return self.ary[idx]

    def __setitem__(self, idx, val):
        self.check.touch(self._key(idx), True)
        self.ary[idx] = val


def _exact_values(r, shape, dtype=np.float64):
    """Small integers: every sum, mean over a power of two, product and scan of them is exact
    in any order, so a compiled result must equal the interpreter's bit for bit."""
    return r.integers(-8, 9, shape).astype(dtype)


def race_program(x, i, a, b, bias, w):
    c = x - x.mean(axis=1, keepdims=True)  # 128 columns: exact means and variances
    return (
        c * (c * c).mean(axis=1, keepdims=True),  # three passes over each row
        x.sum(axis=1),
        x.max(axis=0),
        x.argmax(axis=1),  # ties: the first index wins
        x.sum(),
        i.min(axis=1),  # 150 columns: every block size leaves a tail
        i.sum(),
        np.cumsum(x, axis=1),
        np.cumsum(i, axis=1),
        np.cumsum(i, axis=0),
        np.maximum(a @ b + bias, 0),
        w @ b,
        x.T * 2,
    )


def _race_args(seed):
    r = np.random.default_rng(seed)
    return [
        _exact_values(r, (3, 128)),
        _exact_values(r, (3, 150), np.int64),
        _exact_values(r, (5, 7)),
        _exact_values(r, (7, 6)),
        _exact_values(r, (6,)),
        _exact_values(r, (2, 5, 7)),
    ]


def _shuffles(monkeypatch):
    from numba.cuda.simulator import kernelapi

    monkeypatch.setattr(
        kernelapi.FakeCUDAModule, "shfl_down_sync", _emulated_shfl_down_sync, raising=False
    )
    return Profile(simulator=True, sim_row_threads=64, force_shuffle=True)


@pytest.mark.skipif(not SIM, reason="records the simulator's memory accesses")
@pytest.mark.parametrize("threads", [8, 64])
@pytest.mark.parametrize("mode", [None, *emit_cuda.ROW_MODES])
def test_kernels_have_no_races(mode, threads, monkeypatch):
    """Every kernel of a program with multi-pass rows, index and whole-array reductions, scans
    longer than a block, tiled and batched matmuls (an epilogue too) and a gather, in every row
    shape, with 8-thread blocks (trees of 3 levels) and 64-thread ones (warp shuffles, two
    warps): no two threads touch one shared slot or global element, one of them writing,
    without a barrier between them, and no shared slot is read before it is written (see
    ``_RaceCheck``). Three rows: a block loops over rows. Two calls, each equal to the
    interpreter bit for bit (the values are exact in any order)."""
    prof = _shuffles(monkeypatch) if threads == 64 else Profile(simulator=True)
    monkeypatch.setattr(emit_cuda, "FORCE_ROW_MODE", mode)
    check = _RaceCheck(monkeypatch)
    args = _race_args(threads)
    args[0][:, 7] = args[0][:, 90] = 9.0  # argmax ties
    t = tk.trace(race_program, *args)
    prog = CudaProgram(make_plan(lower(optimize(t).graph).check()), "fast", profile=prof)
    assert not [it for it in prog.items if it.kind == "host"], prog.notes
    if threads == 64 and mode in (None, "block", "split"):
        assert "cuda.shfl_down_sync" in prog.source
    runner = prog.runner()
    expected = t(*args)
    for _ in range(2):
        got, _ = runner.fn(_copy(args), None, {})
        for k, (g, e) in enumerate(zip(got, expected)):
            g, e = np.asarray(g), np.asarray(e)
            assert g.dtype == e.dtype and np.array_equal(g, e), (k, g, e)
    assert check.launches >= 2 * len(prog.kernel_sources)
    assert not check.races, check.races[:10]


@pytest.mark.skipif(not SIM, reason="records the simulator's memory accesses")
def test_race_check_sees_global_memory_between_blocks(monkeypatch):
    """Two blocks writing one element race (no barrier orders blocks); a barrier orders a
    block's threads; threads writing elements of their own do not race."""
    check = _RaceCheck(monkeypatch)

    @cuda.jit
    def shared_slot(out):
        out[cuda.threadIdx.x] = cuda.blockIdx.x

    @cuda.jit
    def own_slot(out):
        i = cuda.grid(1)
        out[i] = i

    @cuda.jit
    def after_barrier(out):
        t = cuda.threadIdx.x
        if t == 0:
            out[0] = 7
        v = out[0] if t == 1 else 0  # before the barrier: races with thread 0's write
        cuda.syncthreads()
        out[1 + t] = out[0] + v  # after it: ordered

    shared_slot[2, 4](np.zeros(4))
    assert check.races and all("race on global memory" in r for r in check.races), check.races
    check.races = []
    own_slot[2, 4](np.zeros(8))
    assert not check.races, check.races
    after_barrier[1, 4](np.zeros(5))
    assert len(check.races) == 1 and "read/write" in check.races[0], check.races


_BARRIER = "cuda.syncthreads()"


@pytest.mark.skipif(not SIM, reason="records the simulator's memory accesses")
@pytest.mark.parametrize("what", ["tree reduction", "warp-shuffle reduction", "scan", "matmul"])
def test_race_check_finds_each_missing_barrier(what, monkeypatch):
    """The race check reports a race for each barrier of a block reduction (8 threads, a tree of
    three levels; 64 threads: warp shuffles), a scan (three tiles) and a matmul (two k tiles)
    taken out of the generated source, one at a time (as ``pass``), in a kernel that loops over
    more rows than blocks (the barrier guarding the next row's writes is needed too)."""
    r = np.random.default_rng(5)
    prof = Profile(simulator=True)
    if what == "tree reduction":
        fn, args = (lambda x: x.sum(axis=1)), [_exact_values(r, (3, 20))]
    elif what == "warp-shuffle reduction":
        prof = _shuffles(monkeypatch)
        fn, args = (lambda x: x.sum(axis=1)), [_exact_values(r, (3, 150))]
    elif what == "scan":
        fn, args = (lambda x: np.cumsum(x, axis=1)), [_exact_values(r, (3, 20))]
    else:
        fn, args = (lambda a, b: a @ b), [_exact_values(r, (5, 7)), _exact_values(r, (7, 6))]
    monkeypatch.setattr(emit_cuda, "FORCE_ROW_MODE", "block" if "reduction" in what else None)
    t = tk.trace(fn, *args)
    plan = make_plan(lower(optimize(t).graph).check())
    source = CudaProgram(plan, "fast", profile=prof).source
    lines = source.split("\n")
    barriers = [k for k, line in enumerate(lines) if line.strip() == _BARRIER]
    assert len(barriers) == {"scan": 4, "matmul": 2}.get(what, 3), source
    check = _RaceCheck(monkeypatch)
    for k in [None, *barriers]:
        prog = CudaProgram(plan, "fast", profile=prof)
        if k is not None:
            cut = lines.copy()
            cut[k] = cut[k].replace(_BARRIER, "pass")
            prog.source = "\n".join(cut)
        prog.load(disk=False)
        check.races = []
        got, _ = prog.runner().fn(_copy(args), None, {})
        if k is None:
            assert not check.races and np.array_equal(got[0], t(*args)), check.races
        else:
            assert check.races, f"no race found without the barrier at line {k}:\n{source}"


# ---------------------------------------------------------------------- fast math
def test_fast_math_choices_meet_the_cpu_bounds():
    """math="fast" uses a float32 libdevice function only where its documented bound is within
    the CPU target's fast-math bound for that op; elsewhere the float64 function, rounded once."""
    cpu = cuda_math.cpu_fast_bounds()
    pytest.importorskip("tracekit.backends.fastmath")
    assert {"exp", "log", "tanh", "sin"} <= set(cpu), cpu  # read from fastmath.py's docstrings
    for op, ulp in cuda_math.ULP_BOUNDS_F32.items():
        limit = cpu.get(op, cuda_math.DEFAULT_F32_BOUND)
        assert cuda_math.f32_native(op) == (ulp <= limit), op
    x = np.linspace(0.1, 0.9, 8).astype(np.float32)
    ops = [o for o in cuda_math.ULP_BOUNDS_F32 if OPS[o].ufunc.nin == 1]
    t = tk.trace(lambda x: tuple(OPS[o].ufunc(x) for o in ops), x)
    fast, libm = (
        "".join(k.source for k in tk.compile(t, target="cuda", math=m, progress=False).kernels)
        for m in ("fast", "libm")
    )
    for op in ops:
        base = cuda_math.LIBDEVICE_UNARY[op]
        native = f"libdevice.{base}f("
        assert (native in fast) == cuda_math.f32_native(op), op
        assert native not in libm and f"libdevice.{base}(np.float64(" in libm, op


_SWEEPS = {
    "exp": (-80, 80),
    "exp2": (-120, 120),
    "expm1": (-20, 20),
    "log": (1e-30, 1e30),
    "log2": (1e-30, 1e30),
    "log10": (1e-30, 1e30),
    "log1p": (-0.99, 1e6),
    "cbrt": (-1e6, 1e6),
    "sin": (-100, 100),
    "cos": (-100, 100),
    "tan": (-1.5, 1.5),
    "arcsin": (-1, 1),
    "arccos": (-1, 1),
    "arctan": (-1e4, 1e4),
    "sinh": (-80, 80),
    "cosh": (-80, 80),
    "tanh": (-20, 20),
    "arcsinh": (-1e6, 1e6),
    "arccosh": (1, 1e6),
    "arctanh": (-0.999, 0.999),
}


def _ulp_rows(dtype, n):
    """(op, inputs, device results, max ulps vs a long-double reference, bound) per op."""
    dtype = np.dtype(dtype)
    ops = list(_SWEEPS)
    xs = []
    for op in ops:
        lo, hi = _SWEEPS[op]
        v = np.geomspace(lo, hi, n) if lo > 0 else np.linspace(lo, hi, n)
        xs.append(v.astype(dtype))
    X = np.stack(xs)

    def fn(X):
        return tuple(OPS[op].ufunc(X[k]) for k, op in enumerate(ops))

    got = tk.compile(tk.trace(fn, X), target="cuda", progress=False)(X)
    rows = []
    for k, op in enumerate(ops):
        with np.errstate(all="ignore"):
            ref = OPS[op].ufunc(X[k].astype(np.longdouble))
        err = float(np.max(cuda_math.ulps(got[k], ref, dtype)))
        if dtype == np.float32:
            bound = cuda_math.ULP_BOUNDS_F32[op] if cuda_math.f32_native(op) else 1
        else:
            bound = cuda_math.ULP_BOUNDS_F64[op]
        rows.append((op, X[k], got[k], err, bound))
    return rows


@pytest.mark.skipif(not SIM, reason="simulator only")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fast_math_plumbing_on_the_simulator(dtype):
    """On the simulator ``libdevice`` is NumPy, so this checks which function runs in which
    precision (float32 ``expf`` or float64 ``exp`` rounded once), not the device's accuracy:
    ``test_gpu_fast_math_ulp_bounds`` measures that on a GPU."""
    dtype = np.dtype(dtype)
    for op, x, got, _, _ in _ulp_rows(dtype, 64):
        uf = OPS[op].ufunc
        with np.errstate(all="ignore"):
            if dtype == np.float32 and not cuda_math.f32_native(op):
                exp = uf(x.astype(np.float64)).astype(np.float32)
            else:
                exp = uf(x)
        np.testing.assert_array_equal(got, exp, err_msg=op)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_fast_math_ulp_bounds(dtype):
    """The device's functions, over sweeps of each domain, within the CUDA Programming Guide's
    bounds against a long-double reference (1 ulp where float32 goes through float64)."""
    rows = _ulp_rows(dtype, 1 << 16)
    print("\n".join(f"{op:8s} {err:6.2f} ulp (bound {bound})" for op, _, _, err, bound in rows))
    bad = [(op, err, bound) for op, _, _, err, bound in rows if err > bound]
    assert not bad, bad


# ---------------------------------------------------------------------- the device's code
def _libnvvm_available() -> str | None:
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]
    roots += sorted(str(p) for p in Path("/usr/local").glob("cuda-*"))
    for r in roots:
        if (
            r
            and list(Path(r).glob("nvvm/libdevice/libdevice*.bc"))
            and (
                list(Path(r).glob("lib*/libnvvm.so*"))
                or list(Path(r).glob("nvvm/lib64/libnvvm.so*"))
            )
        ):
            return r
    return None


_PTX_SCRIPT = r"""
import re, sys, warnings
warnings.simplefilter("ignore")
from pathlib import Path
root = sys.argv[1]
from numba.cuda.cudadrv import libs, nvrtc, nvvm
try:
    nvrtc.get_supported_ccs()
except Exception:  # no NVRTC: ask libNVVM directly for the architecture
    nvrtc.get_arch_option = lambda major, minor: f"compute_{major}{minor}"
    bc = str(sorted(Path(root).glob("nvvm/libdevice/libdevice*.bc"))[0])
    libs.get_libdevice = nvvm.get_libdevice = lambda: bc
import numba.cuda.dispatcher as disp
class _Dev:  # device functions compile for "the current device": say which, without a driver
    compute_capability = (9, 0)
disp.get_current_device = lambda: _Dev()
import numpy as np, tracekit as tk
from numba import cuda
from tracekit.backends import cache, cuda_device, emit_cuda
from tracekit.backends.cuda import CudaProgram, _signature
from tracekit.backends.lowering import lower
from tracekit.backends.planner import plan as make_plan
from tracekit.passes import optimize
sys.path[:0] = [sys.argv[2], str(Path(sys.argv[2]).parent)]
import test_cuda as T
prof = cuda_device.Profile(simulator=False, name="sm_90", sm_count=132, max_threads=1024, cc=(9, 0))
if sys.argv[3] == "full":
    jobs = [(None, n, m) for n in T.PROGRAMS for m in ("fast", "libm")]
    jobs += [(mode, "rows", "fast") for mode in ("thread", "split")]
else:
    jobs = [(None, "ptx", "fast"), ("thread", "ptx_rows", "fast"), ("split", "ptx_rows", "fast")]
    jobs += [(None, "ptx_many", "fast")]
n = shfl = 0
for mode, name, math in jobs:
    emit_cuda.FORCE_ROW_MODE = mode
    dtype = np.float32 if name in ("rows", "ptx", "ptx_rows") else np.float64
    t = tk.trace(T.PROGRAMS[name][0], *T._args(name, 0, dtype))
    prog = CudaProgram(make_plan(lower(optimize(t).graph).check()), math, profile=prof)
    mod = cache.load(prog.source, disk=False)
    seen = set()
    for item in prog.items:
        for la in getattr(item, "launches", None) or []:
            sig = _signature(la.args)
            if (la.kernel, sig) not in seen:
                seen.add((la.kernel, sig))
                ptx, _ = cuda.compile_ptx(getattr(mod, la.kernel).py_func, sig, cc=(9, 0))
                n += 1
                shfl += "shfl.sync" in ptx
                shared = sum(map(int, re.findall(r"\.shared\s.*\[(\d+)\]", ptx)))
                assert shared <= 48 * 1024, (name, la.kernel, shared)  # static shared memory
print("PTX", n, "SHFL", shfl)
"""


@pytest.mark.skipif(SIM and _libnvvm_available() is None, reason="no libNVVM (CUDA toolkit)")
@pytest.mark.parametrize(
    "which",
    [
        "quick",
        pytest.param(
            "full",
            marks=pytest.mark.skipif(
                os.environ.get("TRACEKIT_PTX_FULL") != "1",
                reason="about 3 minutes: set TRACEKIT_PTX_FULL=1",
            ),
        ),
    ],
)
def test_device_code_compiles_to_ptx(which, tmp_path):
    """What the emitter writes for a real GPU (sm_90, 1024-thread blocks, warp shuffles)
    compiles to PTX with libNVVM: a softmax/argmax/whole-sum/scan/matmul/gather program and
    every row shape ("quick", about 30 s: libNVVM links libdevice per kernel); every program
    above, both math modes ("full")."""
    root = _libnvvm_available() or ""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", CUDA_HOME=root)
    p = subprocess.run(
        [sys.executable, "-c", _PTX_SCRIPT, root, str(Path(__file__).parent), which],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    m = re.search(r"PTX (\d+) SHFL (\d+)", p.stdout)
    assert m, p.stdout[-2000:] + p.stderr[-4000:]
    assert int(m.group(1)) >= (8 if which == "quick" else 60), p.stdout
    assert int(m.group(2)) >= 3, p.stdout  # warp shuffles in the block reductions


# ---------------------------------------------------------------------- coverage
def _program_ops():
    seen = set()
    for name, (fn, _) in PROGRAMS.items():
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            t = tk.trace(fn, *_args(name, 0))
        seen |= {n.op for n in t.graph.nodes}
    return seen


def test_op_table_coverage():
    """Every op of the op table is exercised by the programs above (einsum, tensordot,
    index_add and python ops by the tests below; the NumPy functions that run on the host, as
    sort and np.linalg.inv, by test_ops.test_numpy_functions_compiled), and the elementwise,
    reduce and scan ops all run in device code for some dtype."""
    seen = _program_ops() | {"einsum", "tensordot", "index_add", "python_op"}
    seen |= _numpy_function_ops()
    missing = set(OPS) - seen - {"arange", "linspace", "eye", "full"}
    assert not missing, sorted(missing)
    device = set()
    prof = Profile(simulator=True)
    for name, (fn, _) in PROGRAMS.items():
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            t = tk.trace(fn, *_args(name, 0))
        prog = CudaProgram(make_plan(lower(optimize(t).graph).check()), profile=prof)
        for item in prog.items:
            if item.kind != "host":
                device |= {n.op for n in item.step.nodes}
    for op, o in OPS.items():
        if o.kind in ("elementwise", "scan") or op in ("sum", "prod", "max", "min", "argmax"):
            assert op in device, f"{op} never ran in a device kernel"
    assert {"matmul", "dot", "index", "transpose", "broadcast_to", "index_update"} <= device


def _numpy_function_ops() -> set:
    """The ops of the NumPy functions test_ops compiles for this target (on the host)."""
    import test_ops

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        t = tk.trace(test_ops._host_functions, *test_ops._function_args(0))
    return {n.op for n in t.graph.nodes}


def test_host_fallback_ops():
    """einsum, tensordot, index_add and a Python op run on the host between device kernels."""
    r = rng_for("host")
    a, b = r.standard_normal((3, 4)), r.standard_normal((4, 5))
    double = tk.python_op(lambda x: x * 2, name="double")

    def fn(a, b):
        e = np.einsum("ij,jk->ik", a, b)
        t = np.tensordot(a, b, axes=1)
        z = np.zeros(4)
        np.add.at(z, np.array([0, 1, 1]), 1.0)
        return np.tanh(e) + t, double(a) + 1, z * 2

    c = check(fn, [a, b])
    assert len(c.program.notes) >= 3


# ---------------------------------------------------------------------- real GPU
@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_matrix_at_real_sizes(dtype):
    r = rng_for("gpu", dtype)
    x = r.standard_normal((2048, 4096)).astype(dtype)
    g, b = r.standard_normal(4096).astype(dtype), r.standard_normal(4096).astype(dtype)
    check(row_program, [x, g, b], ulps=4096)
    for mode in emit_cuda.ROW_MODES:
        emit_cuda.FORCE_ROW_MODE = mode
        try:
            check(row_program, [x[:64], g, b], ulps=4096)
        finally:
            emit_cuda.FORCE_ROW_MODE = None
    big = r.standard_normal((64, 128, 130)).astype(dtype)
    check(reduction_program, [big], ulps=4096)
    check(scan_program, [big], ulps=4096)
    a, w = r.standard_normal((1000, 700)).astype(dtype), r.standard_normal((700, 300)).astype(dtype)
    check(lambda a, w, b: np.maximum(a @ w + b, 0), [a, w, r.standard_normal(300).astype(dtype)])
    name = f"ufunc_{dtype}"
    fn, _ = PROGRAMS[name]
    check(fn, [r.standard_normal((512, 1000)).astype(dtype), r.random(1000).astype(dtype), 1.5])


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_gpu_foreign_device_arrays(lib):
    mod = pytest.importorskip(lib)
    x = rng_for(lib).standard_normal((256, 300)).astype(np.float32)

    def fn(x):
        return softmax(x) * 2, x.sum(axis=0)

    c = tk.compile(tk.trace(fn, x), target="cuda", progress=False)
    if lib == "cupy":
        dx = mod.asarray(x)
        got = c(dx)
        assert all(isinstance(g, mod.ndarray) for g in got)
        host = [mod.asnumpy(g) for g in got]
    else:
        if not mod.cuda.is_available():
            pytest.skip("torch without CUDA")
        dx = mod.from_numpy(x).cuda()
        got = c(dx)
        assert all(isinstance(g, mod.Tensor) and g.is_cuda for g in got)
        host = [g.cpu().numpy() for g in got]
        out = mod.empty_like(dx)
        c(dx, out=(out, mod.empty(300, device="cuda")))
        assert_close(out.cpu().numpy(), fn(x)[0])
    assert_close(host, list(fn(x)))


@gpu
@pytest.mark.gpu
def test_gpu_pool_keeps_device_memory_flat():
    x = rng_for("mem").standard_normal((1024, 1024)).astype(np.float32)
    c = tk.compile(tk.trace(lambda x: softmax(x) @ x, x), target="cuda", progress=False)
    c(x)
    ctx = cuda.current_context()
    free0 = ctx.get_memory_info().free
    for _ in range(20):
        c(x)
    assert ctx.get_memory_info().free >= free0 - (16 << 20)


# ---------------------------------------------------------------------- the benchmark script
def test_benchmark_script_without_a_gpu_and_on_the_simulator():
    """``benchmarks/cuda.py`` says "no GPU" and exits 0 without one; ``--simulator`` runs its
    harness (setup, answer checks, timing, tables) on tiny sizes."""
    script = ROOT / "benchmarks" / "cuda.py"
    if not HAS_GPU:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
        p = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
        )
        assert p.returncode == 0 and p.stdout.startswith("no GPU"), p.stdout + p.stderr
    p = subprocess.run(
        [sys.executable, str(script), "--simulator", "--only", "softmax,mlp"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mean nothing" in p.stdout and "WRONG" not in p.stdout
    assert p.stdout.count("tracekit ") == 2, p.stdout


def test_layout_guard_of_a_reshape_then_write():
    """The cuda target checks the view-or-copy choice of a reshape followed by a write as the
    interpreter does (tests/test_tracer.py), on host arrays, before any kernel runs."""

    def fn(x):
        flat = x.reshape(-1)
        flat[0] = 100.0
        return x * 1.0

    def contiguous():
        return np.arange(12.0).reshape(3, 4)

    t = tk.trace(fn, contiguous())
    c = tk.compile(t, target="cuda", progress=False)
    x, fresh = contiguous(), contiguous()
    np.testing.assert_array_equal(c(x), fn(fresh))
    np.testing.assert_array_equal(x, fresh)
    strided = np.arange(24.0).reshape(3, 8)[:, :4]
    with pytest.raises(tk.GuardError, match="made a view of 'x' when traced but makes a copy"):
        c(strided)
    np.testing.assert_array_equal(strided, np.arange(24.0).reshape(3, 8)[:, :4])


def moving_indices(a, out):
    s = np.float64(0.0)
    for t in range(40):
        s = s + np.tanh(a[t, t])  # one element moving along the diagonal: an alias
        out[t, 1:] = a[t, ::2][:5] * s  # a strided row (a gather) into a moving region
        out[t + 1, 0] = out[t, 3]  # a scatter of one element, read from the row before
    return s, out


def test_a_loop_whose_indices_move_runs_its_body_on_the_device():
    """Indices that move with the iteration (``a[t, t]``, ``out[t, 1:] = ...``) are offsets
    given to the body's launches: the loop stays on the device."""
    r = np.random.default_rng(7)
    args = [r.standard_normal((41, 41)), np.zeros((41, 6))]
    c = check(moving_indices, args, new_args=[r.standard_normal((41, 41)), np.ones((41, 6))])
    (item,) = [it for it in c.program.items if it.kind == "loop"]
    assert any("launched from one host loop" in n for n in c.program.notes), c.program.notes
    kinds = [it.kind for it in item.body.items]
    assert "host" not in kinds and "alias" in kinds and "update" in kinds, kinds


def test_a_loop_with_a_stacked_history_keeps_its_rows_on_the_device():
    """np.stack(history) of a rolled loop: the rows are written into a device array, one per
    iteration, by the loop that launches the body's kernels."""

    def history(x):
        rows = []
        for _ in range(70):
            x = np.tanh(x) * 0.9 + 0.1
            rows.append(x)
        return np.stack(rows), x

    c = check(history, [np.linspace(-1, 1, 7)], new_args=[np.linspace(0, 2, 7)])
    (item,) = [it for it in c.program.items if it.kind == "loop"]
    assert item.node.attrs["stacked"] == 1
