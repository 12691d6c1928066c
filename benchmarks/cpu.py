#!/usr/bin/env python
"""tracekit's CPU backend against NumPy, numexpr, jax.jit and torch.compile, side by side.

Run from the repository root::

    .venv/bin/python benchmarks/cpu.py                 # everything (about 5-10 minutes on 2 cores)
    .venv/bin/python benchmarks/cpu.py --quick         # small sizes, few repeats (smoke test)
    .venv/bin/python benchmarks/cpu.py --only gelu,softmax
    .venv/bin/python benchmarks/cpu.py --list

Every peer's answer is compared with NumPy's before it is timed; a wrong answer is reported as
WRONG, is not timed, and makes the script exit with status 3. A peer that is not installed, or
that fails (tracekit while its backend is unfinished), gets its error in its table row and the
run goes on. Per-call times are medians over rounds in which all peers run interleaved. Ratios
are ``time(best of jax.jit, torch.compile) / time(peer)``: above 1.0 the peer is faster than
the faster of the two. GB/s counts the bytes of the inputs plus the outputs once, and "%copy"
relates that to the bandwidth of ``np.copyto`` measured at the start of the same run.

Results go to ``benchmarks/results/cpu-<date>.json`` (``--json`` to change).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))  # tracekit from this checkout when not installed

from common import (  # noqa: E402
    Timeout,
    as_tuple,
    check,
    copy_bandwidth,
    fmt_time,
    git_revision,
    interleaved,
    load_average,
    machine_info,
    summarize,
    table,
    time_limit,
)

# =============================================================================================
# Workloads, written once against an array namespace ``xp`` (numpy, jax.numpy or torch) so
# that every peer computes exactly the same formula. tracekit traces the ``xp=np`` version.

SQRT_2_OVER_PI = 0.7978845608028654


def _red(xp, op: str, x):
    """Reduction over the last axis, keeping it (torch spells the arguments differently)."""
    if getattr(xp, "__name__", "") == "torch":
        return getattr(xp, {"max": "amax"}.get(op, op))(x, dim=-1, keepdim=True)
    return getattr(xp, op)(x, axis=-1, keepdims=True)


def gelu(x, xp=np):
    return 0.5 * x * (1.0 + xp.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def softmax(x, xp=np):
    e = xp.exp(x - _red(xp, "max", x))
    return e / _red(xp, "sum", e)


def layernorm(x, gamma, beta, xp=np):
    mu = _red(xp, "mean", x)
    d = x - mu
    var = _red(xp, "mean", d * d)
    return d / xp.sqrt(var + 1e-5) * gamma + beta


# Black-Scholes as in the classic numba / numexpr examples. The normal CDF is the
# Abramowitz-Stegun 26.2.17 polynomial (|error| < 7.5e-8) in every peer, because numexpr has no
# erf; the polynomial is the same arithmetic everywhere, so results agree to float64 rounding.
RISKFREE = 0.02
VOLATILITY = 0.30
_A = (0.31938153, -0.356563782, 1.781477937, -1.821255978, 1.330274429)
RSQRT2PI = 0.39894228040143267793994605993438


def cnd(d, xp=np):
    a1, a2, a3, a4, a5 = _A
    k = 1.0 / (1.0 + 0.2316419 * xp.abs(d))
    w = RSQRT2PI * xp.exp(-0.5 * d * d) * (k * (a1 + k * (a2 + k * (a3 + k * (a4 + k * a5)))))
    return xp.where(d > 0, 1.0 - w, w)


def bs_d(S, X, T, xp=np):
    sqrt_t = xp.sqrt(T)
    d1 = (xp.log(S / X) + (RISKFREE + 0.5 * VOLATILITY * VOLATILITY) * T) / (VOLATILITY * sqrt_t)
    return d1, d1 - VOLATILITY * sqrt_t


def bs_prices(S, X, T, c1, c2, xp=np):
    x_exp = X * xp.exp(-RISKFREE * T)
    return S * c1 - x_exp * c2, x_exp * (1.0 - c2) - S * (1.0 - c1)


def black_scholes(S, X, T, xp=np):
    d1, d2 = bs_d(S, X, T, xp)
    return bs_prices(S, X, T, cnd(d1, xp), cnd(d2, xp), xp)


def mlp(x, w, b, xp=np):
    return gelu(x @ w + b, xp)


def rosen(x, xp=np):
    return xp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def axpy1(x, y, xp=np):
    return x * y + 1.0


def chain_op(i: int) -> tuple[str, float | None]:
    """The i-th op of the elementwise chain: (kind, constant). Contractive, so float32 rounding
    differences between peers stay small after hundreds of ops."""
    k = i % 4
    if k == 0:
        return "mul_c", 0.9 + 0.02 * (i % 7)
    return ("add_y", "tanh", "mul_y")[k - 1], None


def chain_step(x, y, i: int, xp=np):
    kind, c = chain_op(i)
    if kind == "mul_c":
        return x * c
    if kind == "add_y":
        return x + y
    if kind == "tanh":
        return xp.tanh(x)
    return x * y


def make_chain(n_ops: int):
    def chain(x, y, xp=np):
        for i in range(n_ops):
            x = chain_step(x, y, i, xp)
        return x

    chain.__name__ = f"chain{n_ops}"
    chain.__qualname__ = chain.__name__
    return chain


def chain_numba_source(n_ops: int, name: str) -> str:
    """The same chain as one hand-written serial numba loop (the warm-start baseline)."""
    body = []
    for i in range(n_ops):
        kind, c = chain_op(i)
        body.append(
            {
                "mul_c": f"v = v * np.float32({c!r})",
                "add_y": "v = v + y[i]",
                "tanh": "v = np.tanh(v)",
                "mul_y": "v = v * y[i]",
            }[kind]
        )
    lines = "\n".join("        " + b for b in body)
    return (
        f"def {name}(x, y, out):\n    for i in range(x.shape[0]):\n        v = x[i]\n"
        f"{lines}\n        out[i] = v\n"
    )


# ---------------------------------------------------------------------------------------------
# numexpr: the same formulas, turned into numexpr strings by running them on symbols. Float
# constants become named variables of the arrays' dtype: numexpr would upcast float32 arrays to
# float64 when it meets a float literal.


class _NeSym:
    def __init__(self, text: str, env: _NeEnv):
        self.text, self.env = text, env

    def _o(self, other) -> str:
        return other.text if isinstance(other, _NeSym) else self.env.const(other)

    def _bin(self, op, other, reflected=False):
        a, b = self.text, self._o(other)
        return _NeSym(f"({b} {op} {a})" if reflected else f"({a} {op} {b})", self.env)

    def __add__(self, o):
        return self._bin("+", o)

    def __radd__(self, o):
        return self._bin("+", o, True)

    def __sub__(self, o):
        return self._bin("-", o)

    def __rsub__(self, o):
        return self._bin("-", o, True)

    def __mul__(self, o):
        return self._bin("*", o)

    def __rmul__(self, o):
        return self._bin("*", o, True)

    def __truediv__(self, o):
        return self._bin("/", o)

    def __rtruediv__(self, o):
        return self._bin("/", o, True)

    def __gt__(self, o):
        return self._bin(">", o)

    def __lt__(self, o):
        return self._bin("<", o)

    def __neg__(self):
        return _NeSym(f"(-{self.text})", self.env)

    def __pow__(self, p):
        if isinstance(p, int):  # an int literal keeps the dtype
            return _NeSym(f"({self.text}**{p})", self.env)
        return self._bin("**", p)


class _NeEnv:
    """Variables and constants of one numexpr expression family."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.values: dict[str, object] = {}
        self._consts: dict[float, str] = {}

    def var(self, name: str, value=None) -> _NeSym:
        self.values[name] = value
        return _NeSym(name, self)

    def const(self, c) -> str:
        c = float(c)
        if c not in self._consts:
            name = f"k{len(self._consts)}"
            self._consts[c] = name
            self.values[name] = self.dtype.type(c)
        return self._consts[c]

    def call(self, fname: str, *args) -> _NeSym:
        return _NeSym(f"{fname}({', '.join(a.text for a in args)})", self)


class _NeXp:
    """The few ``xp`` functions the workloads use, for numexpr symbols."""

    __name__ = "numexpr-symbols"

    @staticmethod
    def tanh(a):
        return a.env.call("tanh", a)

    @staticmethod
    def exp(a):
        return a.env.call("exp", a)

    @staticmethod
    def log(a):
        return a.env.call("log", a)

    @staticmethod
    def sqrt(a):
        return a.env.call("sqrt", a)

    @staticmethod
    def abs(a):
        return a.env.call("abs", a)

    @staticmethod
    def where(c, a, b):
        env = c.env
        a = a if isinstance(a, _NeSym) else _NeSym(env.const(a), env)
        b = b if isinstance(b, _NeSym) else _NeSym(env.const(b), env)
        return env.call("where", c, a, b)


NEXP = _NeXp()


def _ne_expr(fn, dtype, **named):
    """(text, constants) of ``fn`` applied to numexpr symbols named like the keywords."""
    env = _NeEnv(dtype)
    out = fn(*(env.var(k) for k in named))
    consts = {k: v for k, v in env.values.items() if v is not None}
    return out.text, consts


def ne_gelu(args):
    import numexpr as ne

    (x,) = args
    text, k = _ne_expr(lambda x: gelu(x, NEXP), x.dtype, x=x)
    return lambda: ne.evaluate(text, local_dict={"x": x, **k})


def ne_softmax(args):
    import numexpr as ne

    (x,) = args
    k = {"k0": x.dtype.type(0)}

    def run():
        m = np.max(x, axis=-1, keepdims=True)
        e = ne.evaluate("exp(x - m)", local_dict={"x": x, "m": m, **k})
        s = np.sum(e, axis=-1, keepdims=True)
        return ne.evaluate("e / s", local_dict={"e": e, "s": s})

    return run


def ne_layernorm(args):
    import numexpr as ne

    x, g, b = args
    eps = x.dtype.type(1e-5)

    def run():
        mu = np.mean(x, axis=-1, keepdims=True)
        d = ne.evaluate("x - mu", local_dict={"x": x, "mu": mu})
        var = np.mean(ne.evaluate("d * d", local_dict={"d": d}), axis=-1, keepdims=True)
        return ne.evaluate(
            "d / sqrt(var + eps) * g + b",
            local_dict={"d": d, "var": var, "eps": eps, "g": g, "b": b},
        )

    return run


def ne_black_scholes(args):
    import numexpr as ne

    S, X, T = args
    env = _NeEnv(S.dtype)
    d1s, d2s = bs_d(env.var("S"), env.var("X"), env.var("T"), NEXP)
    cnd_text = cnd(env.var("d"), NEXP).text
    prices = bs_prices(env.var("S"), env.var("X"), env.var("T"), env.var("c1"), env.var("c2"), NEXP)
    k = {n: v for n, v in env.values.items() if v is not None}

    def run():
        v = {"S": S, "X": X, "T": T, **k}
        d1 = ne.evaluate(d1s.text, local_dict=v)
        d2 = ne.evaluate(d2s.text, local_dict=v)
        v["c1"] = ne.evaluate(cnd_text, local_dict={**k, "d": d1})
        v["c2"] = ne.evaluate(cnd_text, local_dict={**k, "d": d2})
        return ne.evaluate(prices[0].text, local_dict=v), ne.evaluate(prices[1].text, local_dict=v)

    return run


def ne_mlp(args):
    import numexpr as ne

    x, w, b = args
    text, k = _ne_expr(lambda h, b: gelu(h + b, NEXP), x.dtype, h=None, b=None)

    def run():
        h = x @ w
        return ne.evaluate(text, local_dict={"h": h, "b": b, **k})

    return run


def ne_rosen(args):
    import numexpr as ne

    (x,) = args
    text, k = _ne_expr(
        lambda a, b: 100.0 * (a - b**2) ** 2 + (1.0 - b) ** 2, x.dtype, a=None, b=None
    )
    text = f"sum({text})"
    return lambda: ne.evaluate(text, local_dict={"a": x[1:], "b": x[:-1], **k})


def ne_axpy1(args):
    import numexpr as ne

    x, y = args
    text, k = _ne_expr(lambda x, y: axpy1(x, y), x.dtype, x=None, y=None)
    return lambda: ne.evaluate(text, local_dict={"x": x, "y": y, **k})


def ne_chain(n_ops: int, segment: int = 40):
    """numexpr strings nest parentheses; Python's parser stops near 200 levels, so the chain is
    evaluated in segments of ``segment`` ops."""

    def setup(args):
        import numexpr as ne

        x, y = args
        segs = []
        for s in range(0, n_ops, segment):
            env = _NeEnv(x.dtype)
            v = env.var("x")
            yy = env.var("y")
            for i in range(s, min(n_ops, s + segment)):
                v = chain_step(v, yy, i, NEXP)
            segs.append((v.text, {n: c for n, c in env.values.items() if c is not None}))

        def run():
            v = x
            for text, k in segs:
                v = ne.evaluate(text, local_dict={"x": v, "y": y, **k})
            return v

        return run

    return setup


# ---------------------------------------------------------------------------------------------
# Bare numba kernels: the per-call overhead baseline for the 1,000-element call.


def numba_axpy1_peers():
    def setup_alloc(args):
        import numba

        @numba.njit
        def kernel(x, y):
            out = np.empty_like(x)
            for i in range(x.shape[0]):
                out[i] = x[i] * y[i] + np.float32(1.0)
            return out

        return lambda: kernel(*args), None

    def setup_out(args):
        import numba

        @numba.njit
        def kernel(x, y, out):
            for i in range(x.shape[0]):
                out[i] = x[i] * y[i] + np.float32(1.0)

        out = np.full(args[0].shape, np.nan, args[0].dtype)

        def run():
            kernel(*args, out)
            return out

        return run, None

    return {"numba njit": setup_alloc, "numba njit out=": setup_out}


# ---------------------------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    title: str
    fn: Callable  # fn(*args, xp=np)
    make: Callable  # make(quick: bool, rng) -> tuple of arrays
    numexpr: Callable | None = None  # numexpr(args) -> thunk
    numexpr_note: str = ""
    rtol: float = 1e-4
    atol: float = 1e-6  # relative to max |reference|
    flops: Callable | None = None  # flops(args) -> float, where GFLOP/s says more than GB/s
    extra: Callable | None = None  # () -> {peer name: setup(args) -> (thunk, note)}
    note: str = ""


def _f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


def _mk_gelu(quick, rng):
    return (_f32(rng.standard_normal(100_000 if quick else 10_000_000) * 3),)


def _mk_rows(quick, rng):
    n, m = (128, 256) if quick else (2048, 2048)
    return (_f32(rng.standard_normal((n, m)) * 2),)


def _mk_layernorm(quick, rng):
    (x,) = _mk_rows(quick, rng)
    m = x.shape[1]
    return x, _f32(1.0 + 0.1 * rng.standard_normal(m)), _f32(0.1 * rng.standard_normal(m))


def _mk_bs(quick, rng):
    n = 100_000 if quick else 4_000_000
    return rng.uniform(5.0, 30.0, n), rng.uniform(1.0, 100.0, n), rng.uniform(0.25, 10.0, n)


def _mk_mlp(quick, rng):
    n = 128 if quick else 1024
    return (
        _f32(rng.standard_normal((n, n))),
        _f32(rng.standard_normal((n, n)) / math.sqrt(n)),
        _f32(0.1 * rng.standard_normal(n)),
    )


def _mk_rosen(quick, rng):
    return (rng.uniform(-1.0, 2.0, 100_000 if quick else 10_000_000),)


def _mk_call1k(quick, rng):
    return _f32(rng.standard_normal(1000)), _f32(rng.standard_normal(1000))


def _mk_chain(full_n):
    def make(quick, rng):
        n = 10_000 if quick else full_n
        return _f32(rng.standard_normal(n)), _f32(rng.uniform(0.5, 1.0, n))

    return make


WORKLOADS = [
    Workload(
        "gelu",
        "GELU, tanh form, float32",
        gelu,
        _mk_gelu,
        ne_gelu,
        note="x**3 as users write it",
    ),
    Workload(
        "softmax",
        "softmax over the last axis, float32",
        softmax,
        _mk_rows,
        ne_softmax,
        numexpr_note="numexpr elementwise + NumPy reductions",
    ),
    Workload(
        "layernorm",
        "layernorm over the last axis with gamma/beta, float32",
        layernorm,
        _mk_layernorm,
        ne_layernorm,
        numexpr_note="numexpr elementwise + NumPy reductions",
    ),
    Workload(
        "blackscholes",
        "Black-Scholes call+put, A&S polynomial CND, float64",
        black_scholes,
        _mk_bs,
        ne_black_scholes,
        rtol=1e-9,
        atol=1e-12,
        numexpr_note="6 evaluate calls",
    ),
    Workload(
        "mlp",
        "MLP layer gelu(x @ w + b), float32",
        mlp,
        _mk_mlp,
        ne_mlp,
        atol=1e-4,
        flops=lambda a: 2.0 * a[0].shape[0] * a[0].shape[1] * a[1].shape[1],
        numexpr_note="NumPy matmul + numexpr epilogue",
    ),
    Workload(
        "rosen",
        "Rosenbrock sum, float64",
        rosen,
        _mk_rosen,
        ne_rosen,
        rtol=1e-9,
        atol=1e-12,
    ),
    Workload(
        "call1k",
        "x * y + 1 on 1,000 float32 (per-call overhead)",
        axpy1,
        _mk_call1k,
        ne_axpy1,
        extra=numba_axpy1_peers,
    ),
    Workload(
        "chain20",
        "20-op elementwise chain, float32 (cold compile of a 20-op graph)",
        make_chain(20),
        _mk_chain(100_000),
        ne_chain(20),
    ),
    Workload(
        "chain200",
        "200-op elementwise chain, float32 (compile time)",
        make_chain(200),
        _mk_chain(1_000_000),
        ne_chain(200),
        numexpr_note="5 evaluate calls of 40 ops",
    ),
]
EXTRA_SECTIONS = ("warmstart",)

# =============================================================================================
# Peers

PEER_GROUPS = ("numpy", "numexpr", "jax", "torch", "numba", "tracekit")
# not run unless asked for: tracekit's kernels compiled with TRACEKIT_CPU_THREADS=pool
OPTIONAL_PEERS = ("tracekit-pool",)
_mods: dict[str, object] = {}


def _numexpr():
    if "numexpr" not in _mods:
        import numexpr

        numexpr.set_num_threads(os.cpu_count() or 1)
        _mods["numexpr"] = numexpr
    return _mods["numexpr"]


def _jax():
    if "jax" not in _mods:
        import jax

        jax.config.update("jax_enable_x64", True)  # float64 workloads stay float64
        import jax.numpy as jnp

        _mods["jax"] = (jax, jnp)
    return _mods["jax"]


def _torch():
    if "torch" not in _mods:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        _mods["torch"] = torch
    return _mods["torch"]


def _tk():
    if "tk" not in _mods:
        import tracekit

        _mods["tk"] = tracekit
    return _mods["tk"]


class Skip(Exception):
    """A peer that does not apply (not installed, not expressible)."""


@dataclass
class Result:
    peer: str
    status: str = "ok"  # ok | WRONG | ERROR | skipped
    message: str = ""
    first_call_s: float | None = None
    cold_s: float | None = None  # trace/compile + first call, for the compiling peers
    breakdown: dict = field(default_factory=dict)
    thunk: Callable | None = None
    worst: float | None = None
    stats: dict = field(default_factory=dict)
    ratio: float | None = None
    gbps: float | None = None
    note: str = ""

    def as_json(self) -> dict:
        d = {
            k: getattr(self, k)
            for k in ("peer", "status", "message", "first_call_s", "cold_s", "worst", "note")
        }
        d["worst_error_over_tolerance"] = d.pop("worst")
        d.update(self.stats)
        d["ratio_vs_best_jax_torch"] = self.ratio
        d["GBps"] = self.gbps
        if self.breakdown:
            d["breakdown_s"] = self.breakdown
        return d


def _timed_first(thunk):
    t0 = time.perf_counter()
    r = thunk()
    return r, time.perf_counter() - t0


def setup_numpy(w, args):
    thunk = lambda: w.fn(*args)  # noqa: E731
    r, t = _timed_first(thunk)
    return thunk, r, {"first_call_s": t}


def setup_numexpr(w, args):
    if w.numexpr is None:
        raise Skip("not expressible")
    _numexpr()
    thunk = w.numexpr(args)
    r, t = _timed_first(thunk)
    return thunk, r, {"first_call_s": t, "note": w.numexpr_note}


def setup_jax(w, args):
    jax, jnp = _jax()
    jargs = [jax.device_put(a) for a in args]
    jax.block_until_ready(jargs)
    f = jax.jit(lambda *a: w.fn(*a, xp=jnp))
    thunk = lambda: jax.block_until_ready(f(*jargs))  # noqa: E731
    r, t = _timed_first(thunk)
    return thunk, tuple(np.asarray(o) for o in as_tuple(r)), {"first_call_s": t, "cold_s": t}


def setup_torch(w, args):
    torch = _torch()
    torch._dynamo.reset()  # a fresh start per workload: no guard chains, no recompile limit
    targs = [torch.from_numpy(a) for a in args]

    def g(*a):
        return w.fn(*a, xp=torch)

    f = torch.compile(g)
    thunk = lambda: f(*targs)  # noqa: E731
    r, t = _timed_first(thunk)
    return thunk, tuple(o.numpy() for o in as_tuple(r)), {"first_call_s": t, "cold_s": t}


def setup_tracekit(w, args, state, timeout, threads=None):
    """``threads``: the TRACEKIT_CPU_THREADS the kernels compile with (None: as it is set)."""
    tk = _tk()
    with time_limit(timeout):
        t0 = time.perf_counter()
        traced = tk.trace(w.fn, *args)
        t1 = time.perf_counter()
        with _env("TRACEKIT_CPU_THREADS", threads):
            c = tk.compile(traced, target="cpu")
        t2 = time.perf_counter()
        r = c(*args)
        t3 = time.perf_counter()
    state["compiled"] = c
    bd = {"trace": t1 - t0, "compile": t2 - t1, "first_call": t3 - t2}
    thunk = lambda: c(*args)  # noqa: E731
    return thunk, r, {"first_call_s": t3 - t2, "cold_s": t3 - t0, "breakdown": bd}


@contextlib.contextmanager
def _env(name, value):
    """The environment variable ``name`` set to ``value`` (None: left as it is) in the block."""
    before = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None and before is None:
            os.environ.pop(name, None)
        elif value is not None:
            os.environ[name] = before


def setup_tracekit_out(w, args, state, ref):
    c = state.get("compiled")
    if c is None:
        raise Skip("needs the compiled function from the row above")
    ref_t = as_tuple(ref)
    bufs = tuple(np.full(np.shape(r), np.nan, np.asarray(r).dtype) for r in ref_t)
    forms = [bufs[0], bufs] if len(bufs) == 1 else [bufs]
    err = None
    for out in forms:
        try:
            t0 = time.perf_counter()
            ret = c(*args, out=out)
            t = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001
            err = err or e
            continue
        note = "out=array" if out is bufs[0] and len(forms) == 2 else "out=tuple"
        if ret is not None:
            ok, msg, _ = check(ret, ref_t, w.rtol, w.atol * _scale(ref_t))
            if not ok:
                raise _Wrong(f"returned value: {msg}")
        state["out_first_ok"] = True
        thunk = lambda out=out: c(*args, out=out)  # noqa: E731
        # what is checked is the caller's buffers, not the return value
        return thunk, bufs, {"first_call_s": t, "note": note, "check_buffers": bufs}
    raise err


def setup_tracekit_jit(w, args):
    tk = _tk()
    t0 = time.perf_counter()
    f = tk.jit(w.fn, wait=True)  # compiled code is what this peer times
    r = f(*args)
    t = time.perf_counter() - t0
    thunk = lambda: f(*args)  # noqa: E731
    return thunk, r, {"first_call_s": t, "cold_s": t}


class _Wrong(Exception):
    pass


def _scale(ref_t) -> float:
    m = 0.0
    for r in ref_t:
        a = np.abs(np.asarray(r, dtype=np.float64))
        a = a[np.isfinite(a)]
        if a.size:
            m = max(m, float(a.max()))
    return m or 1.0


def _short(e: BaseException, limit: int = 300) -> str:
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    s = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return s if len(s) <= limit else s[: limit - 3] + "..."


# =============================================================================================
# Running one workload


def peer_names(w: Workload, groups: set[str]) -> list[str]:
    names = []
    if "numpy" in groups:
        names.append("numpy")
    if "numexpr" in groups:
        names.append("numexpr")
    if "jax" in groups:
        names.append("jax.jit")
    if "torch" in groups:
        names.append("torch.compile")
    if "numba" in groups and w.extra:
        names.extend(w.extra())
    if "tracekit" in groups:
        names.extend(["tracekit", "tracekit out="])
        if w.name == "call1k":
            names.append("tracekit jit")
    if "tracekit-pool" in groups:
        names.append("tracekit pool")
    return names


def run_workload(w: Workload, opts, bandwidth: float, log) -> dict:
    rng = np.random.default_rng(20240607)
    args = w.make(opts.quick, rng)
    ref = w.fn(*args)  # the NumPy answer every peer is checked against
    ref_t = tuple(np.asarray(r) for r in as_tuple(ref))
    atol = w.atol * _scale(ref_t)
    nbytes = sum(a.nbytes for a in args) + sum(r.nbytes for r in ref_t)
    extras = w.extra() if w.extra else {}
    state: dict = {}
    results: list[Result] = []

    for name in peer_names(w, opts.peer_groups):
        res = Result(name)
        results.append(res)
        try:
            if name == "numpy":
                thunk, got, info = setup_numpy(w, args)
            elif name == "numexpr":
                thunk, got, info = setup_numexpr(w, args)
            elif name == "jax.jit":
                thunk, got, info = setup_jax(w, args)
            elif name == "torch.compile":
                thunk, got, info = setup_torch(w, args)
            elif name in extras:
                thunk, note = extras[name](args)
                got, t = _timed_first(thunk)
                info = {"first_call_s": t, "cold_s": t, "note": note or ""}
            elif name == "tracekit":
                thunk, got, info = setup_tracekit(w, args, state, opts.compile_timeout)
            elif name == "tracekit pool":
                thunk, got, info = setup_tracekit(w, args, {}, opts.compile_timeout, "pool")
            elif name == "tracekit out=":
                thunk, got, info = setup_tracekit_out(w, args, state, ref_t)
            elif name == "tracekit jit":
                thunk, got, info = setup_tracekit_jit(w, args)
            else:  # pragma: no cover
                raise Skip("unknown peer")
        except ImportError as e:
            res.status, res.message = "skipped", f"not importable ({_short(e, 120)})"
            if name.startswith("tracekit"):
                res.status, res.message = "ERROR", _short(e)
            continue
        except Skip as e:
            res.status, res.message = "skipped", str(e)
            continue
        except _Wrong as e:
            res.status, res.message = "WRONG", str(e)
            log(f"!!! {w.name} / {name}: WRONG ANSWER: {e}")
            continue
        except (Exception, Timeout) as e:  # noqa: BLE001  a failing peer must not stop the run
            res.status, res.message = "ERROR", _short(e)
            if opts.verbose:
                log(traceback.format_exc())
            continue

        res.first_call_s = info.get("first_call_s")
        res.cold_s = info.get("cold_s")
        res.breakdown = info.get("breakdown", {})
        res.note = info.get("note", "")
        # Check the first answer and a second one (a stale or reused buffer shows up there).
        try:
            ok, msg, worst = check(got, ref_t, w.rtol, atol)
            if ok:
                if "check_buffers" in info:
                    for b in info["check_buffers"]:
                        b.fill(np.nan)
                    thunk()
                    got2 = info["check_buffers"]
                else:
                    got2 = thunk()
                    if name == "jax.jit":
                        got2 = tuple(np.asarray(o) for o in as_tuple(got2))
                    elif name == "torch.compile":
                        got2 = tuple(o.numpy() for o in as_tuple(got2))
                ok, msg2, worst2 = check(got2, ref_t, w.rtol, atol)
                msg = msg2 if not ok else msg
                worst = max(worst, worst2)
        except Exception as e:  # noqa: BLE001
            ok, msg, worst = False, f"second call failed: {_short(e)}", math.inf
        res.worst = worst if math.isfinite(worst) else None
        if not ok:
            res.status, res.message = "WRONG", msg
            log(f"!!! {w.name} / {name}: WRONG ANSWER: {msg}")
            continue
        if msg:  # e.g. a dtype that differs from NumPy's
            if name.startswith("tracekit"):
                res.status, res.message = "WRONG", msg
                log(f"!!! {w.name} / {name}: WRONG ANSWER: {msg}")
                continue
            res.note = "; ".join(x for x in (res.note, msg) if x)
        res.thunk = thunk

    timed = {r.peer: r.thunk for r in results if r.thunk is not None}
    samples = interleaved(
        timed,
        budget_s=opts.budget,
        min_rounds=opts.min_rounds,
        max_rounds=opts.max_rounds,
    )
    for r in results:
        if r.peer in samples:
            r.stats = summarize(samples[r.peer])

    # tracekit once more after timing: reused buffers / state must not drift
    for r in results:
        if r.peer in ("tracekit", "tracekit jit", "tracekit pool") and r.thunk is not None:
            try:
                ok, msg, _ = check(r.thunk(), ref_t, w.rtol, atol)
            except Exception as e:  # noqa: BLE001
                ok, msg = False, f"call after timing failed: {_short(e)}"
            if not ok:
                r.status, r.message = "WRONG", f"after timing: {msg}"
                log(f"!!! {w.name} / {r.peer}: WRONG ANSWER after timing: {msg}")

    med = {r.peer: r.stats["median_s"] for r in results if r.stats and r.status == "ok"}
    peers_best = [med[p] for p in ("jax.jit", "torch.compile") if p in med]
    best = min(peers_best) if peers_best else None
    for r in results:
        if r.peer in med:
            r.gbps = nbytes / med[r.peer] / 1e9
            if best is not None:
                r.ratio = best / med[r.peer]
    if w.name == "call1k":  # per-call overhead against the bare numba kernel
        pairs = {
            "tracekit": "numba njit",
            "tracekit jit": "numba njit",
            "tracekit out=": "numba njit out=",
        }
        for r in results:
            base = pairs.get(r.peer)
            if r.peer in med and base in med:
                note = f"{med[r.peer] / med[base]:.2f}x the time of {base} (target <= 2x)"
                r.note = "; ".join(x for x in (r.note, note) if x)

    shapes = [f"{a.dtype}{list(a.shape)}" for a in args]
    return {
        "name": w.name,
        "title": w.title,
        "inputs": shapes,
        "bytes_moved": nbytes,
        "flops": w.flops(args) if w.flops else None,
        "rtol": w.rtol,
        "atol": atol,
        "best_jax_torch_s": best,
        "copy_GBps": bandwidth / 1e9,
        "note": w.note,
        "results": results,
    }


def print_workload(wr: dict, out) -> None:
    head = f"{wr['name']}: {wr['title']} -- inputs {', '.join(wr['inputs'])}"
    head += f", {wr['bytes_moved'] / 1e6:.1f} MB moved"
    if wr["note"]:
        head += f" ({wr['note']})"
    rows = []
    for r in wr["results"]:
        if r.status == "ok" and r.stats:
            st = r.stats
            spread = (st["q3_s"] - st["q1_s"]) / st["median_s"] * 100 if st["median_s"] else 0
            gb = f"{r.gbps:.2f}" if r.gbps is not None else "-"
            pct = f"{r.gbps / wr['copy_GBps'] * 100:.0f}%" if r.gbps else "-"
            note = r.note
            if wr["flops"]:
                note = "; ".join(
                    x for x in (f"{wr['flops'] / st['median_s'] / 1e9:.1f} GFLOP/s", note) if x
                )
            rows.append(
                [
                    r.peer,
                    fmt_time(r.cold_s),
                    fmt_time(st["median_s"]),
                    f"{spread:.0f}%",
                    str(st["rounds"]),
                    gb,
                    pct,
                    f"{r.ratio:.2f}x" if r.ratio is not None else "-",
                    note,
                ]
            )
        else:
            label = r.status if r.status != "ok" else "not timed"
            msg = f"{label}: {r.message}" if r.message else label
            if r.status == "WRONG":
                msg = "!!! " + msg
            rows.append([r.peer, fmt_time(r.cold_s), "-", "", "", "", "", "", msg])
    headers = ["peer", "cold", "warm median", "IQR", "n", "GB/s", "%copy", "vs best", "notes"]
    print(head, file=out)
    print(table(headers, rows, right={1, 2, 3, 4, 5, 6, 7}), file=out)
    best = wr["best_jax_torch_s"]
    print(
        f"  (vs best = {fmt_time(best)} [best of jax.jit, torch.compile] / peer; >1 is faster)"
        if best
        else "  (no jax.jit/torch.compile time: no ratios)",
        file=out,
    )
    print(file=out)
    out.flush()


# =============================================================================================
# Warm start: a new process imports tracekit and calls a jitted function whose machine code is
# in the disk cache. The function is the 20-op chain, so the first (empty-cache) process also
# gives the cold compile time of a 20-op graph in a fresh process.

_CHILD_TK = """
import json, sys, time
sys.path.insert(0, {bench!r})
sys.path.insert(1, {root!r})
import numpy as np
from cpu import make_chain
chain = make_chain(20)
x = np.linspace(-3, 3, 1000, dtype=np.float32)
y = np.linspace(0.5, 1.0, 1000, dtype=np.float32)
t0 = time.perf_counter()
import tracekit as tk
t1 = time.perf_counter()
f = tk.jit(chain)
r = f(x, y)
t2 = time.perf_counter()
tier = f.tier
f.wait()
r2 = f(x, y)
t3 = time.perf_counter()
ref = chain(x, y)
ok = all(np.asarray(a).dtype == ref.dtype and np.asarray(a).shape == ref.shape
         and bool(np.allclose(a, ref, rtol=1e-4, atol=1e-5)) for a in (r, r2))
print("RESULT " + json.dumps({{"import_s": t1 - t0, "first_call_s": t2 - t1,
                              "compiled_s": t3 - t1, "tier": tier, "ok": ok}}))
"""

_CHILD_NUMBA = """
import json, sys, time
import numpy as np
x = np.linspace(-3, 3, 1000, dtype=np.float32)
y = np.linspace(0.5, 1.0, 1000, dtype=np.float32)
t0 = time.perf_counter()
import numba
t1 = time.perf_counter()
{source}
kernel = numba.njit(cache=True)(chain20)
out = np.empty_like(x)
kernel(x, y, out)
t2 = time.perf_counter()
sys.path.insert(0, {bench!r})
from cpu import make_chain
ok = bool(np.allclose(out, make_chain(20)(x, y), rtol=1e-4, atol=1e-5))
print("RESULT " + json.dumps({{"import_s": t1 - t0, "first_call_s": t2 - t1,
                              "compiled_s": t2 - t1, "tier": "compiled", "ok": ok}}))
"""


def _run_child(path: Path, env: dict, timeout: float) -> dict:
    # bytecode as an installed package has it: written by the cold run (away from the
    # checkout), read by the warm ones
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONPYCACHEPREFIX", str(path.parent / "pycache"))
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    wall = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            d = json.loads(line[7:])
            d["process_wall_s"] = wall
            d["total_s"] = d["import_s"] + d["first_call_s"]
            return d
    tail = [ln for ln in (p.stderr or p.stdout).strip().splitlines() if ln.strip()]
    return {"error": f"exit {p.returncode}: {tail[-1] if tail else 'no output'}"[:300]}


def warm_start(opts, log) -> dict:
    n_warm = 2 if opts.quick else 5
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="tk-bench-warmstart-") as tmp:
        tmp = Path(tmp)
        specs = []
        if "tracekit" in opts.peer_groups:
            p = tmp / "child_tracekit.py"
            p.write_text(_CHILD_TK.format(bench=str(HERE), root=str(HERE.parent)))
            for label, wait in (("tracekit jit", "0"), ("tracekit jit wait=True", "1")):
                env = dict(
                    os.environ,
                    TRACEKIT_CACHE_DIR=str(tmp / f"tk-cache-{wait}"),
                    TRACEKIT_JIT_WAIT=wait,
                )
                specs.append((f"{label} (chain20)", p, env))
        if "numba" in opts.peer_groups:
            p = tmp / "child_numba.py"
            p.write_text(
                _CHILD_NUMBA.format(source=chain_numba_source(20, "chain20"), bench=str(HERE))
            )
            env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "numba-cache"))
            specs.append(("numba njit(cache=True) (chain20)", p, env))
        for name, path, env in specs:
            cold = _run_child(path, env, opts.compile_timeout + 60)
            warm = [] if "error" in cold else [_run_child(path, env, 120) for _ in range(n_warm)]
            errs = [d["error"] for d in [cold, *warm] if "error" in d]
            wrong = [d for d in [cold, *warm] if d.get("ok") is False]
            entry: dict = {"cold": cold, "warm_runs": warm}
            if errs:
                entry["status"], entry["message"] = "ERROR", errs[0]
            elif wrong:
                entry["status"], entry["message"] = "WRONG", "result differs from NumPy"
                log(f"!!! warmstart / {name}: WRONG ANSWER in the new process")
            else:
                entry["status"] = "ok"
                for k in ("import_s", "first_call_s", "total_s", "compiled_s", "process_wall_s"):
                    entry[f"warm_{k}"] = statistics.median(d[k] for d in warm)
            out[name] = entry
    return out


def print_warm_start(ws: dict, out) -> None:
    print(
        "warmstart: a new process imports the library and calls the 20-op chain on 1,000 "
        "float32; 'cold' has an empty disk cache, 'warm' finds the machine code there",
        file=out,
    )
    rows = []
    for name, e in ws.items():
        cold = e["cold"]
        if e["status"] == "ok":
            rows.append(
                [
                    name,
                    fmt_time(cold["total_s"]),
                    fmt_time(e["warm_import_s"]),
                    fmt_time(e["warm_first_call_s"]),
                    fmt_time(e["warm_total_s"]),
                    fmt_time(e["warm_compiled_s"]),
                    e["warm_runs"][0]["tier"],
                    fmt_time(e["warm_process_wall_s"]),
                    str(len(e["warm_runs"])),
                ]
            )
        else:
            msg = f"{e['status']}: {e['message']}"
            rows.append([name, fmt_time(cold.get("total_s")), "", "", "", "", "", "", msg])
    headers = [
        "",
        "cold import+call",
        "warm import",
        "warm first call",
        "warm import+call",
        "warm kernels ready",
        "first tier",
        "process wall",
        "n",
    ]
    print(table(headers, rows, right={1, 2, 3, 4, 5, 6}), file=out)
    print("  (targets for tracekit: cold compile of a 20-op graph <= 2 s;", file=out)
    print(
        "   warm import+call <= 0.35 s + NumPy's time; 'kernels ready': from the call to compiled",
        file=out,
    )
    print("   kernels answering; 'process wall' adds Python and NumPy start-up)", file=out)
    print(file=out)
    out.flush()


# =============================================================================================


def print_summary(workloads: list[dict], out) -> None:
    cols = ["numpy", "numexpr", "jax.jit", "torch.compile", "tracekit", "tracekit out="]
    cols.append("tracekit pool")
    present = [c for c in cols if any(c in {r.peer for r in w["results"]} for w in workloads)]
    rows = []
    for w in workloads:
        by = {r.peer: r for r in w["results"]}
        row = [w["name"]]
        for c in present:
            r = by.get(c)
            if r is None:
                row.append("")
            elif r.status == "ok" and r.stats:
                row.append(fmt_time(r.stats["median_s"]))
            else:
                row.append(r.status if r.status != "ok" else "-")
        for c in ("tracekit", "tracekit out="):
            if c in present:
                r = by.get(c)
                row.append(f"{r.ratio:.2f}x" if r is not None and r.ratio is not None else "-")
        rows.append(row)
    headers = ["workload", *present]
    headers += [f"{c} vs best" for c in ("tracekit", "tracekit out=") if c in present]
    print("summary: warm medians; 'vs best' = best(jax.jit, torch.compile) / tracekit", file=out)
    print(table(headers, rows, right=set(range(1, len(headers)))), file=out)
    print(file=out)


def parse_args(argv=None):
    names = [w.name for w in WORKLOADS] + list(EXTRA_SECTIONS)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (smoke test)")
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help=f"run only these workloads: {', '.join(names)}",
    )
    ap.add_argument(
        "--peers",
        default=",".join(PEER_GROUPS),
        help=f"comma-separated peers to run (default: all of {','.join(PEER_GROUPS)}; "
        f"also {','.join(OPTIONAL_PEERS)})",
    )
    ap.add_argument("--budget", type=float, help="seconds of timing per workload")
    ap.add_argument("--min-rounds", type=int, help="fewest interleaved rounds per workload")
    ap.add_argument("--max-rounds", type=int, default=200, help="most rounds per workload")
    ap.add_argument(
        "--compile-timeout",
        type=float,
        default=300.0,
        help="best-effort limit on one tracekit trace+compile+first call (seconds)",
    )
    ap.add_argument("--json", type=Path, help="where to write the JSON results")
    ap.add_argument("--no-json", action="store_true", help="do not write JSON")
    ap.add_argument("--keep-caches", action="store_true", help="reuse disk caches (not cold)")
    ap.add_argument("--list", action="store_true", help="list the workloads and exit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of errors")
    opts = ap.parse_args(argv)
    only = [n.strip() for item in opts.only for n in item.split(",") if n.strip()]
    unknown = sorted(set(only) - set(names))
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    opts.only = only
    groups = {p.strip() for p in opts.peers.split(",") if p.strip()}
    known = PEER_GROUPS + OPTIONAL_PEERS
    if groups - set(known):
        ap.error(f"unknown peer(s) {sorted(groups - set(known))}; choose from {known}")
    opts.peer_groups = groups
    if opts.budget is None:
        opts.budget = 0.5 if opts.quick else 8.0
    if opts.min_rounds is None:
        opts.min_rounds = 3 if opts.quick else 7
    return opts


def _versions() -> dict:
    v = {}
    for mod in ("numba", "numexpr", "jax", "jaxlib", "torch"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            v[mod] = None
    return v


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.list:
        for w in WORKLOADS:
            print(f"{w.name:14s} {w.title}")
        print(f"{'warmstart':14s} new-process start from tracekit's disk cache (subprocesses)")
        return 0

    # Cold means cold: fresh disk caches for tracekit and torch inductor unless asked not to.
    tmp_caches = None
    if not opts.keep_caches:
        tmp_caches = tempfile.TemporaryDirectory(prefix="tk-bench-caches-")
        os.environ["TRACEKIT_CACHE_DIR"] = os.path.join(tmp_caches.name, "tracekit")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp_caches.name, "inductor")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    out = sys.stdout
    selected = [w for w in WORKLOADS if not opts.only or w.name in opts.only]
    do_warm = not opts.only or "warmstart" in opts.only
    started = time.perf_counter()
    info = machine_info()
    print(
        f"tracekit CPU benchmarks -- {datetime.datetime.now():%Y-%m-%d %H:%M} -- {info['cpu']}, "
        f"{info['affinity'] or info['cores']} cores"
        + (" -- QUICK (sizes and repeats too small to quote)" if opts.quick else ""),
        file=out,
    )
    loads = [load_average()]
    cores = info["affinity"] or info["cores"] or 1
    if loads[0] is not None and loads[0] >= cores / 2:
        print(
            f"WARNING: the machine is busy (load average {loads[0]:.1f} on {cores} cores) -- "
            "times are inflated, multi-threaded peers most; quote only a run on a quiet machine",
            file=out,
        )
    bw = copy_bandwidth(32 * 2**20 if opts.quick else 256 * 2**20)
    print(f"copy bandwidth (np.copyto, read+write): {bw / 1e9:.2f} GB/s", file=out)
    print(
        f"timing: median of >= {opts.min_rounds} interleaved rounds, ~{opts.budget:g} s "
        "per workload; cold = first call (trace+compile+run); IQR = spread of the rounds\n",
        file=out,
    )
    out.flush()

    workloads = []
    warm = None
    doc = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "quick": opts.quick,
        "machine": info,
        "versions": _versions() | {"tracekit_git": git_revision()},
        "copy_GBps": bw / 1e9,
        "settings": {
            "budget_s": opts.budget,
            "min_rounds": opts.min_rounds,
            "max_rounds": opts.max_rounds,
            "peers": sorted(opts.peer_groups),
            "fresh_caches": not opts.keep_caches,
        },
    }
    json_path = None
    if not opts.no_json:
        suffix = "-quick" if opts.quick else ""
        json_path = opts.json or HERE / "results" / f"cpu-{datetime.date.today()}{suffix}.json"

    def dump():
        if json_path is None:
            return
        doc["workloads"] = [
            {**{k: v for k, v in w.items() if k != "results"}}
            | {"results": {r.peer: r.as_json() for r in w["results"]}}
            for w in workloads
        ]
        doc["warm_start"] = warm
        doc["wrong"] = wrong
        doc["harness_errors"] = harness_errors
        doc["elapsed_s"] = time.perf_counter() - started
        doc["load_average"] = loads
        json_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = json_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        tmp.replace(json_path)

    wrong: list[str] = []
    harness_errors: list[str] = []
    for w in selected:
        log(f"[{time.perf_counter() - started:6.0f}s] {w.name} ...")
        try:
            wr = run_workload(w, opts, bw, log)
        except Exception as e:  # noqa: BLE001  a harness bug in one workload: report, go on
            log(f"!!! {w.name}: the harness failed: {_short(e)}")
            log(traceback.format_exc())
            harness_errors.append(f"{w.name}: {_short(e)}")
            continue
        wr["load_average_after"] = load_average()
        loads.append(wr["load_average_after"])
        workloads.append(wr)
        wrong += [f"{w.name} / {r.peer}: {r.message}" for r in wr["results"] if r.status == "WRONG"]
        print_workload(wr, out)
        for r in wr["results"]:
            r.thunk = None
        gc.collect()
        dump()

    if do_warm:
        log(f"[{time.perf_counter() - started:6.0f}s] warmstart ...")
        warm = warm_start(opts, log)
        loads.append(load_average())
        wrong += [
            f"warmstart / {k}: {v['message']}" for k, v in warm.items() if v["status"] == "WRONG"
        ]
        print_warm_start(warm, out)

    if workloads:
        print_summary(workloads, out)
    dump()
    if json_path is not None:
        print(f"JSON: {json_path}", file=out)
    seen = [x for x in loads if x is not None]
    load_note = f"; 1-min load average {min(seen):.1f}..{max(seen):.1f} on {cores} cores"
    print(f"elapsed: {time.perf_counter() - started:.0f} s" + (load_note if seen else ""), file=out)
    if wrong:
        bar = "!" * 78
        print(f"\n{bar}\nWRONG ANSWERS (not timed):", file=out)
        for line in wrong:
            print(f"  {line}", file=out)
        print(bar, file=out)
        return 3
    if harness_errors:
        print(f"\nHARNESS ERRORS: {'; '.join(harness_errors)}", file=out)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
