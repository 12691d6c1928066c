"""Random NumPy programs: tracekit's CPU backend against jax.jit and torch.compile, side by side.

Seeded, repeatable generation of the kinds of code people write: elementwise chains over every
float op family (arithmetic, integer and fractional powers, exp/log, trig and inverse trig,
hyperbolic, comparisons through where/maximum/clip, rounding) with realistic constants, float32
and float64, broadcasting against rows and columns, row reductions with elementwise producers
and consumers (softmax, logsumexp, layer/RMS/L2 norms, generic ones), whole-array reductions and
a matmul with an epilogue, at sizes from 1k to 16M elements. Each program is compiled by every
peer, checked against NumPy with the fuzzer's tolerances (``tests/fuzz/fuzzgen.same_value``) and
timed in interleaved rounds (``common.interleaved``). The report gives the distribution of the
speed-up ``best peer time / tracekit time`` (> 1: tracekit is faster) and the worst programs
with their listings: they are the work list.

    .venv/bin/python benchmarks/random_programs.py --count 200 --seed 1   # ~20-30 min, quiet
    .venv/bin/python benchmarks/random_programs.py --quick                # 12 small programs
    .venv/bin/python benchmarks/random_programs.py --show 17              # one program's listing
    .venv/bin/python benchmarks/random_programs.py --only 17,42 --peers jax

Program ``i`` of seed ``s`` depends on ``(s, i)`` only: ``--count`` and ``--only`` do not
change it, and the same seed gives the same programs, inputs and sizes on every machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))  # tracekit from this checkout when not installed
sys.path.insert(2, str(HERE.parent / "tests" / "fuzz"))

from common import (  # noqa: E402
    Timeout,
    as_tuple,
    fmt_time,
    git_revision,
    interleaved,
    load_average,
    machine_info,
    summarize,
    table,
    time_limit,
)
from fuzzgen import same_value  # noqa: E402  the fuzzer's tolerances, one definition

PEERS = ("tracekit", "jax", "torch", "numpy")
PEER_LABEL = {"tracekit": "tracekit", "jax": "jax.jit", "torch": "torch.compile", "numpy": "numpy"}
MIN_SIZE = 1 << 10
MAX_SIZE = 1 << 24
FLOP_CAP = 4e9  # most multiply-adds x2 of one generated matmul (keeps a 200-program run short)

# =============================================================================================
# Generation: a program is built step by step on small sample inputs, each step evaluated as it
# is added, so that no step overflows, takes a log of a negative number or loses the accuracy
# its dtype has (a float32 step is also evaluated in float64 and dropped where they differ).

CONSTANTS = (0.5, 2.0, 3.0, 0.1, 0.25, 1e-3, 0.044715, 0.7978845608, 1.702, 1.4142135,
             0.31938153, 2.5066282746, 6.283185307, 0.01, 1.5, 10.0, 0.3183099, 4.0, 0.2316419,
             1.0)  # fmt: skip
INT_POWERS = (2, 2, 3, 3, 4, 5, 6, -1, -1, -2, -3)
FRACTIONAL_POWERS = (0.5, 0.5, 1.5, -0.5, -1.5, 2.5, 1 / 3, 0.75, 1.25, 0.2, 2.2)
SAMPLE_ROWS, SAMPLE_COLS = 8, 128


def _const(rng) -> float:
    if rng.random() < 0.6:
        return float(rng.choice(CONSTANTS))
    digits = int(rng.integers(1, 4))
    return float(round(rng.uniform(0.05, 4.0), digits)) or 0.5


def _fmt(c: float) -> str:
    return repr(float(c)) if abs(c) >= 1e-3 or c == 0 else f"{c:.0e}"


@dataclass
class Reg:
    """A value of the program: its name and its values on the sample inputs (in the program's
    dtype and in float64), whether it went through a function computed approximately (such
    values never reach a discontinuous op), and whether it is a row statistic."""

    name: str
    val: np.ndarray
    val64: np.ndarray
    approx: bool
    row: bool = False


@dataclass
class Program:
    index: int
    seed: int
    kind: str
    dtype: str
    inputs: list  # (name, role, distribution)
    lines: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    size: int = 0  # elements of the main input at benchmark size
    shapes: dict = field(default_factory=dict)  # input name -> shape at benchmark size

    @property
    def source(self) -> str:
        args = ", ".join(n for n, _, _ in self.inputs)
        body = [f"    {ln}" for ln in self.lines]
        return "\n".join([f"def program_{self.index}({args}):", *body,
                          f"    return {', '.join(self.outputs)}"])  # fmt: skip

    def function(self, xp):
        """The program as a Python function over the array namespace ``xp``."""
        env = {"np": xp}
        exec(compile(self.source, f"<program {self.index}>", "exec"), env)  # noqa: S102
        return env[f"program_{self.index}"]


DISTRIBUTIONS = {  # name -> values of an input from rng
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "uniform": lambda rng, shape: rng.uniform(-1.0, 1.0, shape),
    "positive": lambda rng, shape: rng.uniform(0.1, 4.0, shape),
    "angle": lambda rng, shape: rng.uniform(-np.pi, np.pi, shape),
    "wide": lambda rng, shape: rng.standard_normal(shape) * 8.0,
}
# the extremes of 16M draws, which the samples include (a step must hold at every size)
EXTREMES = {"normal": (-5.8, 5.8), "uniform": (-1.0, 1.0), "positive": (0.1, 4.0),
            "angle": (-np.pi, np.pi), "wide": (-46.0, 46.0)}  # fmt: skip


class Rejected(Exception):
    """A step a program's pattern needs did not evaluate soundly on the sample."""


class Builder:
    """Appends lines to a program, keeping the values of every register on the sample."""

    def __init__(self, prog: Program, rng, sample_shapes: dict):
        self.p, self.rng = prog, rng
        self.dt = np.dtype(prog.dtype)
        self.regs: list[Reg] = []
        self.env: dict = {}
        self.env64: dict = {}
        vals = np.random.default_rng([prog.seed, prog.index, 7])
        for k, (name, role, dist) in enumerate(prog.inputs):
            v = DISTRIBUTIONS[dist](vals, sample_shapes[role])
            lo, hi = EXTREMES[dist]
            v.flat[:4] = (lo, hi, lo, hi) if k % 2 else (lo, hi, hi, lo)
            self._bind(name, v.astype(self.dt), v.astype(np.float64))
            if role in ("x", "y", "a"):
                self.regs.append(Reg(name, self.env[name], self.env64[name], False))
        self.count = 0
        self.read: set = set()  # names some line reads

    def _bind(self, name, v, v64):
        self.env[name], self.env64[name] = v, v64

    def input(self, name) -> Reg:
        return Reg(name, self.env[name], self.env64[name], False)

    def try_line(self, expr: str, approx: bool, row: bool = False, check=True) -> Reg | None:
        """Evaluate ``expr`` on the sample; append it as a new register if it is sound."""
        with np.errstate(all="ignore"):
            try:
                v = eval(expr, {"np": np}, dict(self.env))  # noqa: S307
                v64 = eval(expr, {"np": np}, dict(self.env64))  # noqa: S307
            except (ValueError, TypeError, ZeroDivisionError):
                return None
        v, v64 = np.asarray(v), np.asarray(v64)
        if v.dtype != self.dt or not np.all(np.isfinite(v)):
            return None
        big = 1e5 if self.dt == np.float32 else 1e12
        if np.max(np.abs(v)) > big or (v.size > 4 and np.ptp(v) == 0):
            return None
        low = v.astype(np.float64) if self.dt == np.float32 else self.eval32(expr)
        if check and self.conditioning_lost(v64, low):
            return None  # ill-conditioned: no compiler can keep NumPy's value
        name = f"v{self.count}"
        self.count += 1
        self.read.update(re.findall(r"\b[a-z]\w*", expr))
        self.p.lines.append(f"{name} = {expr}")
        self._bind(name, v, v64)
        reg = Reg(name, v, v64, approx, row)
        if not row:
            self.regs.append(reg)
        return reg

    def eval32(self, expr):
        with np.errstate(all="ignore"):
            env = {k: np.asarray(v, np.float32) for k, v in self.env64.items()}
            return np.asarray(eval(expr, {"np": np}, env), np.float64)  # noqa: S307

    def conditioning_lost(self, v64, v32) -> bool:
        """Whether float32 evaluation strays from float64 by more than a well-conditioned
        program's: float32 programs (the whole program so far in float32) 10x inside the
        fuzzer's 2e-3; float64 ones (this step on float32 operands) within 1e-2, a condition
        number below about 1e5, far inside the fuzzer's 1e-7 at float64."""
        tol = 2e-4 if self.dt == np.float32 else 1e-2
        scale = max(1.0, float(np.max(np.abs(v64))))
        return bool(np.any(~(np.abs(v32 - v64) <= tol * (np.abs(v64) + scale))))

    def need(self, expr: str, approx: bool, row: bool = False, check=True) -> Reg:
        reg = self.try_line(expr, approx, row, check)
        if reg is None:
            raise Rejected(expr)
        return reg

    def pick(self, recent: int = 4) -> Reg:
        """A recent value, most often one nothing reads yet (programs use what they compute)."""
        full = [r for r in self.regs if not r.row][-recent:]
        unread = [r for r in full if r.name not in self.read]
        pool = unread if unread and self.rng.random() < 0.75 else full
        r = pool[-1 - int(self.rng.integers(0, len(pool)))]
        return r

    # -- ways to make a value fit a function's domain
    def positive(self, r: Reg) -> str:
        if np.min(r.val64) > 0.05:
            return r.name
        c = _fmt(_const(self.rng))
        return self.rng.choice([f"(np.abs({r.name}) + {c})", f"({r.name} * {r.name} + {c})",
                                f"np.exp(-np.abs({r.name}))"])  # fmt: skip

    def unit(self, r: Reg) -> str:
        if np.max(np.abs(r.val64)) < 0.999:
            return r.name
        return self.rng.choice([f"np.tanh({r.name})", f"np.clip({r.name}, -0.99, 0.99)",
                                f"({r.name} / (1.0 + np.abs({r.name})))"])  # fmt: skip

    def small(self, r: Reg, bound: float) -> str:
        if np.max(np.abs(r.val64)) < bound:
            return r.name
        return f"({r.name} * {float(f'{bound / (2 * float(np.max(np.abs(r.val64)))):.2g}')!r})"

    # -- one elementwise step of a random family
    def step(self) -> bool:
        fam = self.rng.choice(list(FAMILIES), p=FAMILY_WEIGHTS)
        expr, approx = FAMILIES[fam](self)
        if expr is None:
            return False
        return self.try_line(expr, approx) is not None

    def chain(self, n: int):
        done, tries = 0, 0
        while done < n and tries < 6 * n:
            tries += 1
            done += self.step()

    def finish(self) -> str:
        """The result: the last value, with up to two values nothing read folded in."""
        last = self.regs[-1]
        inputs = {n for n, _, _ in self.p.inputs}
        unread = [r for r in self.regs[:-1] if r.name not in self.read | inputs and not r.row]
        for r in unread[-2:]:
            op = self.rng.choice(["+", "-", "*"])
            c = _fmt(_const(self.rng))
            last = self.try_line(f"{last.name} {op} {c} * {r.name}", True, check=False) or last
        return last.name


def _arith(b: Builder):
    r = b.pick()
    op = b.rng.choice(["+", "-", "*", "*", "/", "/c"])
    full = [x for x in b.regs if not x.row and x.name != r.name]
    if op == "/c":
        return (
            f"{r.name} / {_fmt(b.rng.choice([2.0, 3.0, 4.0, 6.0, 10.0, 0.5, 1.7, 8.0]))}",
            r.approx,
        )
    if full and b.rng.random() < 0.6:
        o = full[int(b.rng.integers(0, len(full)))]
        if op == "/":
            return f"{r.name} / {b.positive(o)}", r.approx or o.approx
        return f"{r.name} {op} {o.name}", r.approx or o.approx
    c = _fmt(_const(b.rng))
    if op == "/":
        return f"{c} / {b.positive(r)}", r.approx
    return (f"{r.name} {op} {c}" if b.rng.random() < 0.7 else f"{c} {op} {r.name}"), r.approx


def _power(b: Builder):
    r = b.pick()
    if b.rng.random() < 0.55:
        n = int(b.rng.choice(INT_POWERS))
        base = b.positive(r) if n < 0 else r.name
        return f"{base} ** {n}", True
    p = float(b.rng.choice(FRACTIONAL_POWERS))
    ps = "(1 / 3)" if abs(p - 1 / 3) < 1e-12 else _fmt(p)
    form = b.rng.random()
    base = f"np.abs({r.name})" if form < 0.4 else b.positive(r)
    if form > 0.85:
        return f"np.sqrt({b.positive(r)})", True
    return f"{base} ** {ps}", True


def _explog(b: Builder):
    r = b.pick()
    fn = b.rng.choice(["exp", "exp", "expm1", "exp2", "log", "log", "log1p", "log2", "log10"])
    if fn.startswith("exp"):
        return f"np.{fn}({b.small(r, 8.0)})", True
    if fn == "log1p":
        return f"np.log1p(np.abs({r.name}))", True
    return f"np.{fn}({b.positive(r)})", True


def _trig(b: Builder):
    r = b.pick()
    fn = b.rng.choice(["sin", "cos", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2"])
    if fn == "tan":
        return f"np.tan({b.small(r, 1.2)})", True
    if fn in ("arcsin", "arccos"):
        return f"np.{fn}({b.unit(r)})", True
    if fn == "arctan2":
        o = b.pick(8)
        return f"np.arctan2({r.name}, {b.positive(o)})", True
    return f"np.{fn}({r.name})", True


def _hyperbolic(b: Builder):
    r = b.pick()
    fn = b.rng.choice(["tanh", "tanh", "sigmoid", "sinh", "cosh", "arcsinh", "silu", "gelu"])
    if fn == "sigmoid":
        return f"1.0 / (1.0 + np.exp(-{b.small(r, 30.0)}))", True
    if fn == "silu":
        return f"{r.name} / (1.0 + np.exp(-{b.small(r, 30.0)}))", True
    if fn == "gelu":
        x = b.small(r, 20.0)
        return f"0.5 * {x} * (1.0 + np.tanh(0.7978845608 * ({x} + 0.044715 * {x} ** 3)))", True
    if fn in ("sinh", "cosh"):
        return f"np.{fn}({b.small(r, 6.0)})", True
    return f"np.{fn}({r.name})", True


def _select(b: Builder):
    r = b.pick()
    c = _fmt(_const(b.rng))
    form = b.rng.integers(0, 6)
    if form == 0:
        return f"np.maximum({r.name}, 0.0)", r.approx
    if form == 1:
        slope = _fmt(b.rng.choice([0.01, 0.1, 0.2]))
        return f"np.where({r.name} > 0.0, {r.name}, {slope} * {r.name})", r.approx
    if form == 2:
        return f"np.clip({r.name}, -{c}, {c})", r.approx
    if form == 3:
        o = b.pick(8)
        fn = b.rng.choice(["maximum", "minimum"])
        return f"np.{fn}({r.name}, {o.name})", r.approx or o.approx
    if form == 4:
        return f"np.minimum({r.name}, {c})", r.approx
    o = b.pick(8)
    return f"np.hypot({r.name}, {o.name})", True


def _misc(b: Builder):
    r = b.pick()
    form = b.rng.integers(0, 5)
    if form == 0:
        return f"np.abs({r.name})", r.approx
    if form == 1:
        return f"-{r.name}", r.approx
    if form == 2:
        return f"np.square({r.name})", r.approx
    if form == 3 and not r.approx:
        k = _fmt(float(b.rng.choice([2.0, 4.0, 10.0, 8.0])))
        fn = b.rng.choice(["floor", "rint", "ceil"])
        return f"np.{fn}({r.name} * {k}) / {k}", False
    o = b.pick(8)
    return f"np.logaddexp({b.small(r, 50.0)}, {b.small(o, 50.0)})", True


FAMILIES = {
    "arith": _arith,
    "power": _power,
    "explog": _explog,
    "trig": _trig,
    "hyperbolic": _hyperbolic,
    "select": _select,
    "misc": _misc,
}
FAMILY_WEIGHTS = np.array([6, 3, 3, 2, 2, 2, 1], float) / 19


# -- program kinds ----------------------------------------------------------------------------
def _elementwise(b: Builder, p: Program):
    b.chain(int(b.rng.integers(3, 22)))
    p.outputs.append(b.finish())


def _rows(b: Builder, p: Program):
    """A producer chain, one row pattern over the last axis (or the first), a consumer chain."""
    rng = b.rng
    b.chain(int(rng.integers(0, 5)))
    axis = -1 if rng.random() < 0.85 else 0
    ax = f"axis={axis}, keepdims=True"
    x = b.regs[-1].name
    pattern = rng.choice(["softmax", "logsumexp", "layernorm", "rmsnorm", "l2norm", "generic",
                          "generic"])  # fmt: skip
    eps = _fmt(float(rng.choice([1e-5, 1e-6, 1e-12, 1e-3])))
    if pattern == "softmax":
        m = b.need(f"np.max({x}, {ax})", False, row=True)
        e = b.need(f"np.exp({x} - {m.name})", True)
        s = b.need(f"np.sum({e.name}, {ax})", True, row=True)
        b.need(f"{e.name} / {s.name}", True)
    elif pattern == "logsumexp":
        m = b.need(f"np.max({x}, {ax})", False, row=True)
        s = b.need(f"np.sum(np.exp({x} - {m.name}), {ax})", True, row=True)
        b.need(f"{x} - ({m.name} + np.log({s.name}))", True, check=False)
    elif pattern == "layernorm":
        mu = b.need(f"np.mean({x}, {ax})", True, row=True)
        d = b.need(f"{x} - {mu.name}", True, check=False)
        var = b.need(f"np.mean({d.name} * {d.name}, {ax})", True, row=True, check=False)
        y = b.need(f"{d.name} / np.sqrt({var.name} + {eps})", True, check=False)
        g = "g" if axis == -1 else "gc"
        b.need(f"{y.name} * {g} + {'b' if axis == -1 else 'bc'}", True, check=False)
    elif pattern == "rmsnorm":
        ms = b.need(f"np.mean({x} * {x}, {ax})", True, row=True)
        g = "g" if axis == -1 else "gc"
        y = b.need(f"{x} * (1.0 / np.sqrt({ms.name} + {eps})) * {g}", True, check=False)
        if rng.random() < 0.5:
            b.need(f"{y.name} / (1.0 + np.exp(-{b.small(b.input('y'), 30.0)}))", True,
                       check=False)  # fmt: skip
    elif pattern == "l2norm":
        ss = b.need(f"np.sum({x} * {x}, {ax})", True, row=True)
        b.need(f"{x} / np.sqrt({ss.name} + {eps})", True, check=False)
    else:
        fn = rng.choice(["sum", "max", "min", "mean"])
        r = b.need(f"np.{fn}({x}, {ax})", fn in ("sum", "mean"), row=True, check=False)
        c = _fmt(_const(rng))
        form = rng.choice([f"{x} - {r.name}", f"{x} / (np.abs({r.name}) + {c})",
                           f"{x} * {r.name}", f"np.exp(-np.abs({x} - {r.name}))"])  # fmt: skip
        b.need(form, True, check=False)
    b.chain(int(rng.integers(0, 5)))
    p.outputs.append(b.finish())


def _reduce_all(b: Builder, p: Program):
    b.chain(int(b.rng.integers(2, 10)))
    fn = b.rng.choice(["sum", "sum", "mean", "max"])
    r = b.need(f"np.{fn}({b.finish()})", True, row=True, check=False)
    p.outputs.append(r.name)


def _matmul(b: Builder, p: Program):
    r = b.try_line("a @ w + bias", True)
    b.chain(int(b.rng.integers(1, 6)))
    p.outputs.append(b.finish() if r is not None else "a")


KINDS = {"elementwise": 5, "broadcast": 3, "rows": 5, "reduce_all": 1, "matmul": 1}


def generate(seed: int, index: int, max_size: int) -> Program:
    """Program ``index`` of ``seed`` (another draw where a pattern's step was unsound)."""
    for attempt in range(100):
        try:
            return _generate(np.random.default_rng([seed, index, attempt]), seed, index, max_size)
        except Rejected:
            continue
    raise RuntimeError(f"no sound program for seed {seed}, index {index}")  # pragma: no cover


def _generate(rng, seed: int, index: int, max_size: int) -> Program:
    kind = str(
        rng.choice(list(KINDS), p=np.array(list(KINDS.values()), float) / sum(KINDS.values()))
    )
    dtype = "float32" if rng.random() < 0.5 else "float64"
    size = int(round(2 ** rng.uniform(math.log2(MIN_SIZE), math.log2(max(max_size, MIN_SIZE)))))
    cols = int(2 ** rng.integers(6, 14))  # 64 .. 8192
    cols = max(16, min(cols, size // 8))
    rows = max(1, size // cols)
    dists = list(DISTRIBUTIONS)
    d = lambda: str(rng.choice(dists))  # noqa: E731
    S, C = SAMPLE_ROWS, SAMPLE_COLS
    if kind == "elementwise":
        n_in = int(rng.integers(1, 4))
        inputs = [("x", "x", d())] + [("y" if k == 1 else f"y{k}", "y", d()) for k in
                                      range(1, n_in)]  # fmt: skip
        shapes = {n: (size,) for n, _, _ in inputs}
        sample = {"x": (S * C,), "y": (S * C,)}
    elif kind in ("broadcast", "rows", "reduce_all"):
        inputs = [("x", "x", d())]
        if kind != "reduce_all" or rng.random() < 0.5:
            inputs += [("y", "y", d())]
        inputs += [("r", "rowvec", d()), ("c", "colvec", d())]
        if kind == "rows":
            inputs += [("g", "rowvec", "positive"), ("b", "rowvec", "normal"),
                       ("gc", "colvec", "positive"), ("bc", "colvec", "normal")]  # fmt: skip
        shapes = {}
        for n, role, _ in inputs:
            shapes[n] = {"rowvec": (cols,), "colvec": (rows, 1)}.get(role, (rows, cols))
        sample = {"x": (S, C), "y": (S, C), "rowvec": (C,), "colvec": (S, 1)}
    else:  # matmul
        n = max(1, size // cols)
        k = int(2 ** rng.integers(5, 11))
        k = max(16, min(k, int(FLOP_CAP / (2 * n * cols))))
        inputs = [("a", "a0", "uniform"), ("w", "w", "uniform"), ("bias", "rowvec", "normal")]
        shapes = {"a": (n, k), "w": (k, cols), "bias": (cols,)}
        sample = {"a0": (S, 32), "w": (32, C), "rowvec": (C,)}
    prog = Program(index, seed, kind, dtype, inputs, size=rows * cols, shapes=shapes)
    b = Builder(prog, rng, sample)
    if kind == "matmul":
        b.env["w"] = b.env["w"] / 8  # weights of a usual scale: outputs of order 1
        b.env64["w"] = b.env64["w"] / 8
    if kind == "broadcast":
        for name in ("r", "c"):  # mix the row and column vectors in early
            x = b.pick(2)
            op = b.rng.choice(["+", "*", "-"])
            b.try_line(f"{x.name} {op} {name}", False)
    {"elementwise": _elementwise, "broadcast": _elementwise, "rows": _rows,
     "reduce_all": _reduce_all, "matmul": _matmul}[kind](b, prog)  # fmt: skip
    used = set(re.findall(r"\w+", " ".join(prog.lines + prog.outputs)))
    prog.inputs = [i for i in prog.inputs if i[0] in used or i[0] in ("x", "a")]
    return prog


def make_inputs(prog: Program) -> list:
    rng = np.random.default_rng([prog.seed, prog.index, 11])
    out = []
    for name, _, dist in prog.inputs:
        v = DISTRIBUTIONS[dist](rng, prog.shapes[name])
        if name == "w":
            v = v / 8
        out.append(np.ascontiguousarray(v, dtype=prog.dtype))
    return out


# =============================================================================================
# Peers


class TorchNumPy:
    """The NumPy names the generated programs call, on torch tensors."""

    def __init__(self, torch):
        self.t = torch
        for np_name, t_name in (("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"),
                                ("arctan2", "atan2"), ("arcsinh", "asinh"), ("abs", "abs"),
                                ("rint", "round")):  # fmt: skip
            setattr(self, np_name, getattr(torch, t_name))
        for name in ("exp expm1 exp2 log log1p log2 log10 sqrt sin cos tan sinh cosh tanh "
                     "square floor ceil hypot logaddexp where").split():  # fmt: skip
            setattr(self, name, getattr(torch, name))

    def maximum(self, a, b):
        return self.t.clamp(a, min=b) if isinstance(b, float | int) else self.t.maximum(a, b)

    def minimum(self, a, b):
        return self.t.clamp(a, max=b) if isinstance(b, float | int) else self.t.minimum(a, b)

    def clip(self, a, lo, hi):
        return self.t.clamp(a, lo, hi)

    def _red(self, fn, a, axis, keepdims):
        return fn(a) if axis is None else fn(a, dim=axis, keepdim=keepdims)

    def sum(self, a, axis=None, keepdims=False):
        return self._red(self.t.sum, a, axis, keepdims)

    def mean(self, a, axis=None, keepdims=False):
        return self._red(self.t.mean, a, axis, keepdims)

    def max(self, a, axis=None, keepdims=False):
        return self._red(self.t.amax, a, axis, keepdims)

    def min(self, a, axis=None, keepdims=False):
        return self._red(self.t.amin, a, axis, keepdims)


class Skip(Exception):
    """A peer that is not there."""


_mods: dict = {}


def _module(peer):
    if peer not in _mods:
        if peer == "jax":
            import jax

            jax.config.update("jax_enable_x64", True)  # float64 programs stay float64
            import jax.numpy as jnp

            _mods[peer] = (jax, jnp)
        elif peer == "torch":
            import torch

            torch.set_num_threads(os.cpu_count() or 1)
            _mods[peer] = (torch, TorchNumPy(torch))
        elif peer == "tracekit":
            import tracekit

            _mods[peer] = tracekit
    return _mods[peer]


def setup(peer: str, prog: Program, args: list, timeout: float):
    """(thunk timing one call, the first result as NumPy arrays, compile seconds)."""
    t0 = time.perf_counter()
    if peer == "numpy":
        fn = prog.function(np)
        thunk = lambda: fn(*args)  # noqa: E731
        as_np = lambda r: r  # noqa: E731
    elif peer == "tracekit":
        tk = _module("tracekit")
        with time_limit(timeout):
            c = tk.compile(tk.trace(prog.function(np), *args), target="cpu")
        thunk = lambda: c(*args)  # noqa: E731
        as_np = lambda r: r  # noqa: E731
    elif peer == "jax":
        jax, jnp = _module("jax")
        jargs = [jax.device_put(a) for a in args]
        f = jax.jit(prog.function(jnp))
        thunk = lambda: jax.block_until_ready(f(*jargs))  # noqa: E731
        as_np = lambda r: tuple(np.asarray(o) for o in as_tuple(r))  # noqa: E731
    elif peer == "torch":
        torch, tnp = _module("torch")
        torch._dynamo.reset()  # a fresh start per program: no guard chains, no recompile limit
        targs = [torch.from_numpy(a) for a in args]
        f = torch.compile(prog.function(tnp))
        thunk = lambda: f(*targs)  # noqa: E731
        as_np = lambda r: tuple(o.numpy() for o in as_tuple(r))  # noqa: E731
    with time_limit(timeout):
        got = as_np(thunk())
    return thunk, got, time.perf_counter() - t0, as_np


def differs(got, want) -> str | None:
    """What differs from NumPy's answer beyond the fuzzer's tolerance for approximate values."""
    got, want = as_tuple(got), as_tuple(want)
    if len(got) != len(want):
        return f"{len(got)} results, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        bad = same_value(np.asarray(g), np.asarray(w), approx=True, any_zero=True)
        if bad:
            return f"result {k}: {bad}"
    return None


def _short(e: BaseException, limit: int = 200) -> str:
    s = f"{type(e).__name__}: {e}".replace("\n", " ")
    return s if len(s) <= limit else s[: limit - 3] + "..."


def run_program(prog: Program, opts, log) -> dict:
    args = make_inputs(prog)
    with np.errstate(all="ignore"):
        want = as_tuple(prog.function(np)(*args))
    rec = {"index": prog.index, "kind": prog.kind, "dtype": prog.dtype, "size": prog.size,
           "inputs": [f"{a.dtype}{list(a.shape)}" for a in args], "lines": len(prog.lines),
           "source": prog.source, "peers": {}}  # fmt: skip
    thunks = {}
    for peer in opts.peers:
        r = rec["peers"][peer] = {"status": "ok"}
        try:
            thunk, got, compile_s, as_np = setup(peer, prog, args, opts.compile_timeout)
            r["compile_s"] = compile_s
            bad = differs(got, want) or differs(as_np(thunk()), want)
            if bad:
                r["status"], r["message"] = "WRONG", bad
                level = "!!!" if peer == "tracekit" else "   "
                log(f"{level} program {prog.index} / {PEER_LABEL[peer]}: differs from NumPy: {bad}")
                continue
            thunks[peer] = thunk
        except ImportError as e:
            r["status"], r["message"] = "skipped", _short(e)
        except (Exception, Timeout) as e:  # noqa: BLE001  one failing peer must not stop the run
            r["status"], r["message"] = "ERROR", _short(e)
            log(f"    program {prog.index} / {PEER_LABEL[peer]}: {_short(e)}")
            if opts.verbose:
                log(traceback.format_exc())
    samples = interleaved(thunks, budget_s=opts.budget, min_rounds=opts.min_rounds,
                          max_rounds=opts.max_rounds)  # fmt: skip
    for peer, s in samples.items():
        rec["peers"][peer].update(summarize(s))
    med = {p: rec["peers"][p]["median_s"] for p in samples}
    best = [med[p] for p in ("jax", "torch") if p in med]
    rec["best_peer_s"] = min(best) if best else None
    rec["speedup"] = min(best) / med["tracekit"] if best and "tracekit" in med else None
    return rec


# =============================================================================================
# Report


def distribution(speedups: list) -> dict:
    s = sorted(speedups)
    if not s:
        return {}
    return {
        "programs": len(s),
        "min": s[0],
        "p10": float(np.percentile(s, 10)),
        "median": statistics.median(s),
        "geomean": math.exp(statistics.fmean(math.log(x) for x in s)),
        "at_least_1x": sum(x >= 1.0 for x in s) / len(s),
        "below_0.7x": sum(x < 0.7 for x in s),
    }


def format_distribution(d: dict) -> str:
    if not d:
        return "no program timed against a peer"
    return (f"{d['programs']} programs: min {d['min']:.2f}x  p10 {d['p10']:.2f}x  median "
            f"{d['median']:.2f}x  geomean {d['geomean']:.2f}x  >=1.0x on "
            f"{d['at_least_1x'] * 100:.0f}%  below 0.7x: {d['below_0.7x']}")  # fmt: skip


def row(rec: dict, peers) -> list:
    cells = [
        str(rec["index"]),
        rec["kind"],
        rec["dtype"][5:],
        f"{rec['size']:,}",
        str(rec["lines"]),
    ]
    for p in peers:
        r = rec["peers"][p]
        cells.append(fmt_time(r["median_s"]) if "median_s" in r else r["status"])
    cells.append(f"{rec['speedup']:.2f}x" if rec["speedup"] else "-")
    return cells


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, help="programs (default 200; 12 with --quick)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the programs (default 1)")
    ap.add_argument("--only", default="", metavar="I[,I]", help="run only these program indices")
    ap.add_argument("--show", type=int, metavar="I", help="print program I's listing and exit")
    ap.add_argument(
        "--kind",
        default="",
        metavar="K[,K]",
        help=f"run only the programs of these kinds ({', '.join(KINDS)}) among those chosen",
    )
    ap.add_argument(
        "--max-size",
        type=float,
        default=MAX_SIZE,
        help=f"most elements of a program's main input (default {MAX_SIZE:,})",
    )
    ap.add_argument(
        "--peers",
        default="jax,torch",
        help="peers beside tracekit: jax, torch, numpy (default jax,torch)",
    )
    ap.add_argument("--quick", action="store_true", help="12 programs of at most 64k elements")
    ap.add_argument("--budget", type=float, help="seconds of timing per program (default 0.6)")
    ap.add_argument("--min-rounds", type=int, default=3)
    ap.add_argument("--max-rounds", type=int, default=25)
    ap.add_argument("--worst", type=int, default=10, help="listings of the N worst programs")
    ap.add_argument("--compile-timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="where to write the JSON results")
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="tracebacks of errors")
    opts = ap.parse_args(argv)
    opts.count = opts.count or (12 if opts.quick else 200)
    if opts.quick:
        opts.max_size = min(opts.max_size, 1 << 16)
        opts.budget = opts.budget or 0.1
    opts.budget = opts.budget or 0.6
    peers = [p.strip() for p in opts.peers.split(",") if p.strip()]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"unknown peer(s) {sorted(unknown)}; choose from {', '.join(PEERS[1:])}")
    opts.peers = ["tracekit"] + [p for p in PEERS[1:] if p in peers]
    opts.indices = ([int(i) for i in opts.only.split(",") if i.strip()] if opts.only
                    else list(range(opts.count)))  # fmt: skip
    opts.kinds = [k.strip() for k in opts.kind.split(",") if k.strip()]
    unknown = set(opts.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown kind(s) {sorted(unknown)}; choose from {', '.join(KINDS)}")
    return opts


def chosen_programs(opts):
    """The programs ``opts`` selects: its indices, of its kinds only where it names some."""
    for i in opts.indices:
        prog = generate(opts.seed, i, int(opts.max_size))
        if not opts.kinds or prog.kind in opts.kinds:
            yield prog


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.show is not None:
        prog = generate(opts.seed, opts.show, int(opts.max_size))
        print(f"# {prog.kind}, {prog.dtype}, inputs "
              f"{', '.join(f'{n}{list(prog.shapes[n])}' for n, _, _ in prog.inputs)}")  # fmt: skip
        print(prog.source)
        return 0
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    info = machine_info()
    chosen = f"{len(opts.indices)} programs"
    if opts.kinds:
        chosen = f"the {'/'.join(opts.kinds)} programs among {chosen}"
    print(f"random programs, seed {opts.seed}, {chosen}, sizes "
          f"{MIN_SIZE:,}-{int(opts.max_size):,} elements -- {info['cpu']}, "
          f"{info['affinity'] or info['cores']} cores, load average {load_average()}"
          + (" -- QUICK" if opts.quick else ""))  # fmt: skip
    print("speed-up = best(jax.jit, torch.compile) median / tracekit median; > 1: tracekit faster")
    headers = ["#", "kind", "dtype", "elements", "lines"] + [PEER_LABEL[p] for p in opts.peers]
    headers.append("speed-up")
    print(table(headers, []).split("\n")[0], flush=True)
    started = time.perf_counter()
    records = []
    for prog in chosen_programs(opts):
        rec = run_program(prog, opts, log)
        records.append(rec)
        print("  ".join(row(rec, opts.peers)), flush=True)
    elapsed = time.perf_counter() - started

    timed = [r for r in records if r["speedup"]]
    dist = distribution([r["speedup"] for r in timed])
    right = {3, 4, *range(5, len(headers))}
    print(f"\n{table(headers, [row(r, opts.peers) for r in records], right=right)}")
    print(f"\nspeed-up distribution: {format_distribution(dist)}")
    for kind in KINDS:
        d = distribution([r["speedup"] for r in timed if r["kind"] == kind])
        if d:
            print(f"  {kind:12s} {format_distribution(d)}")
    for dt in ("float32", "float64"):
        d = distribution([r["speedup"] for r in timed if r["dtype"] == dt])
        if d:
            print(f"  {dt:12s} {format_distribution(d)}")
    wrong = [r for r in records if r["peers"]["tracekit"]["status"] != "ok"]
    for r in wrong:
        t = r["peers"]["tracekit"]
        print(f"\n!!! program {r['index']}: tracekit {t['status']}: {t.get('message', '')}")
        print(r["source"])
    print(f"\nworst {min(opts.worst, len(timed))} programs (the work list):")
    for r in sorted(timed, key=lambda r: r["speedup"])[: opts.worst]:
        shapes = ", ".join(r["inputs"])
        print(f"\n# program {r['index']}: {r['speedup']:.2f}x  ({r['kind']}; {shapes})")
        print(r["source"])
    print(f"\n{elapsed / 60:.1f} min, load average now {load_average()}")

    if not opts.no_json:
        path = opts.json or HERE / "results" / f"random_programs-{datetime.date.today()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "seed": opts.seed,
               "command": " ".join(sys.argv), "machine": info, "tracekit_git": git_revision(),
               "distribution": dist, "programs": records}  # fmt: skip
        path.write_text(json.dumps(doc, indent=1, default=float))
        print(f"JSON: {path}")
    return 3 if any(r["peers"]["tracekit"]["status"] == "WRONG" for r in wrong) else 0


if __name__ == "__main__":
    sys.exit(main())
