"""Differential fuzzing of tracekit: random NumPy programs, every way tracekit can run them.

A *program* is JSON: input descriptions and a list of steps over numbered registers (the inputs
are registers 0..n-1; most steps append one register, in-place steps mutate one). ``execute``
runs it with plain NumPy calls, so the same function is

- run directly on NumPy arrays (the reference),
- traced with ``tk.trace`` and run by the interpreter (must be bit-identical to NumPy),
- compiled for ``cpu`` and ``cuda`` (the simulator) and run (exact where the computation is
  exact; within a tolerance where it went through transcendental functions or reassociated
  sums, which the generator tracks per register),
- differentiated with ``tk.vjp`` and compared with central finite differences (float64).

Failures are shrunk (steps removed while the same check still fails) and written to
``tests/fuzz/regressions/<check>-<seed>.json``, which ``test_fuzz.py`` replays.

Command line (``make fuzz``): ``python tests/fuzz/fuzzgen.py --seconds 600 [--seed N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import operator
import os
import re
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: the helpers the test suite shares
from helpers.compare import bits_equal  # noqa: E402
from helpers.run import quiet  # noqa: E402
from helpers.values import layout_of, random_values, with_layout  # noqa: E402

REGRESSIONS = os.path.join(HERE, "regressions")

DTYPES = (
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128"
).split()
DTYPE_WEIGHTS = (2, 1, 1, 2, 3, 1, 1, 1, 1, 4, 6, 1, 2)

UNARY = (
    "negative positive absolute sign exp exp2 expm1 log log2 log10 log1p sqrt cbrt square "
    "reciprocal sin cos tan arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh "
    "floor ceil trunc rint logical_not isnan isinf isfinite conjugate signbit invert"
).split()
BINARY = (
    "add subtract multiply divide floor_divide remainder power maximum minimum fmax fmin "
    "arctan2 hypot copysign logaddexp heaviside float_power equal not_equal less less_equal "
    "greater greater_equal "
    "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor left_shift right_shift"
).split()
OPERATORS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "<": operator.lt,
    "==": operator.eq,
    ">=": operator.ge,
}
INPLACE = {
    "+": operator.iadd,
    "-": operator.isub,
    "*": operator.imul,
    "/": operator.itruediv,
    "//": operator.ifloordiv,
    "%": operator.imod,
    "**": operator.ipow,
    "&": operator.iand,
    "|": operator.ior,
}
REDUCE = "sum prod mean var std max min any all".split()

# Ops whose float results differ by rounding between NumPy, tracekit's fast math and numba
# (transcendentals, complex products and quotients, sums in another order). Results derived
# from them are compared within a tolerance, and never fed to a discontinuous op.
APPROX_UNARY = set(
    "exp exp2 expm1 log log2 log10 log1p cbrt sin cos tan arcsin arccos arctan sinh cosh tanh "
    "arcsinh arccosh arctanh".split()
)
APPROX_BINARY = {"power", "float_power", "arctan2", "hypot", "logaddexp"}
# exponents of ``x ** c`` the CPU backend computes without exp and log (``power_const``):
# integers up to 31, halves of odd integers, quarters, both signs
CONSTANT_EXPONENTS = (4.0, 5.0, 7.0, 16.0, 31.0, -2.0, -4.0, -9.0, -31.0, 1.5, 2.5, 9.5, -0.5,
                      -2.5, 15.5, 0.25, -1.75)  # fmt: skip
# Constant divisors as code has them (thirds, tenths, grid spacings, 255), beside the operand
# scalars' powers of 2
CONSTANT_DIVISORS = (3.0, 7.0, 0.1, -0.3, 6.0, 255.0, 1e-3, 12.345, 1e6, 3e-6, 1e7, 3e-7, 0.75)
# The plain ops of a coefficient read broadcast (_Gen._coef), each of a constant
COEF_OPS = {
    "mul": np.multiply,
    "add": np.add,
    "rsub": lambda c, v: v - c,
    "max": np.maximum,
    "twice": lambda c, v: c + c,
}
COEF_RATE = 0.08  # the share of steps that try a coefficient first
APPROX_COMPLEX = {"multiply", "divide", "absolute", "sqrt", "square", "reciprocal", "sign"}
APPROX_COMPLEX |= {"*", "/", "**"}
# Ops that are discontinuous in a float argument: never applied to approximate values.
DISCONTINUOUS = set(
    "sign floor ceil trunc rint logical_not isnan isinf isfinite signbit equal not_equal less "
    "less_equal greater greater_equal logical_and logical_or logical_xor floor_divide remainder "
    "copysign // % < == >=".split()
)
# NumPy functions that run as NumPy calls between kernels (sorting, quantiles, linear algebra):
# the ``numpy`` step. Those whose answer jumps with a float argument take exact values only.
HOST_FUNCTIONS = (
    "sort argsort searchsorted median quantile histogram interp convolve inv solve det "
    "cholesky".split()
)
HOST_DISCONTINUOUS = {"argsort", "searchsorted", "histogram", "inv", "solve", "det", "cholesky"}


def _square(x, m):
    """An m x m matrix from the first m*m elements of ``x``, made diagonally dominant (so
    solvable) by a multiple of the identity larger than its elements' scale."""
    v = np.reshape(np.ravel(x)[: m * m], (m, m))
    return v + (m + 8.0) * np.eye(m)


def run_numpy(regs, st):
    """The ``numpy`` step: one of HOST_FUNCTIONS on registers."""
    fn, a = st["fn"], regs[st["a"]]
    if fn in ("sort", "argsort", "median"):
        return getattr(np, fn)(a, axis=st["axis"])
    if fn == "quantile":
        return np.quantile(a, st["q"], axis=st["axis"])
    if fn == "searchsorted":
        return np.searchsorted(np.sort(np.ravel(a)), regs[st["b"]])
    if fn == "histogram":
        return np.histogram(a, bins=st["bins"])[st["part"]]
    if fn == "interp":
        xp = np.linspace(-2.0, 2.0, np.shape(regs[st["b"]])[0])
        return np.interp(a, xp, regs[st["b"]])
    if fn == "convolve":
        return np.convolve(a, regs[st["b"]], mode=st["mode"])
    m = _square(a, st["m"])
    if fn == "solve":
        return np.linalg.solve(m, np.ravel(regs[st["b"]])[: st["m"]])
    if fn == "cholesky":
        return np.linalg.cholesky(m @ m.T)
    return getattr(np.linalg, fn)(m)


# Steps that write into a register instead of making one (``out`` names it, else ``a``).
IN_PLACE_STEPS = {"iop", "setitem", "addat", "setpart", "uout", "stencil_into"}
# Ops that read the sign of a NaN, which NumPy does not define (its SIMD loops and its scalar
# code give x % 0.0 NaNs of either sign; seed 8200031): never applied to a NaN.
NAN_SIGN = {"signbit", "copysign"}


def _has_nan(x) -> bool:
    a = np.asarray(x)
    return a.dtype.kind in "fc" and bool(np.isnan(a).any())


# Periodic functions are as ill-conditioned as a discontinuity at large arguments (one ulp of
# 6.5e37 is 8e21: cos of a std that rounded differently is any value in [-1, 1], seed 7201019):
# not applied to approximate values either (the grad profile's inputs are small and smooth).
PERIODIC = {"sin", "cos", "tan"}
SMOOTH_UNARY = "negative sin cos tanh arctan exp square".split()
SMOOTH_BINARY = "add subtract multiply maximum minimum".split()

PYOPS = {}


def _pyop(name):
    """The python ops programs may call (made once, here, so programs can name them)."""
    if not PYOPS:
        import tracekit as tk

        PYOPS["sort"] = tk.python_op(lambda x: np.sort(x, axis=-1), name="sort_last")
        PYOPS["cumsum_flip"] = tk.python_op(
            lambda x: np.cumsum(x[..., ::-1], axis=-1), name="cumsum_flip"
        )
    return PYOPS[name]


# ---------------------------------------------------------------------- executing a program
_MOVING = ("int", "float", "float32", "float64", "int8")  # the numbers that may move with a loop


def _scalar(s):
    t, v = s["t"], s["v"]
    if "step" in s:  # a number moving with the loop: v + step * iteration (or a curve of it)
        v = v + s["step"] * _CURVES[s.get("curve", "line")](_ITERATION[-1])
    if t == "int":
        return int(v)
    if t == "float":
        return float(v)
    if t == "bool":
        return bool(v)
    if t == "complex":
        return complex(*v)
    return np.dtype(t).type(v)  # a NumPy scalar of that dtype


def _operand(regs, x):
    return _scalar(x) if isinstance(x, dict) else regs[x]


_ITERATION = [0]  # the iteration of the innermost loop running (run_loop)
# how a moving number follows the iteration: a line rolls into a + b * k of the loop's counter,
# the others into a table of the iteration's numbers
_CURVES = {"line": lambda t: t, "square": lambda t: t * t, "sin": math.sin}
_BRANCHES: list = []  # the way each ``branch`` step went, in the order they ran (decisions)
BRANCH_ARMS = "negative absolute square positive sin cos tanh".split()  # shape, dtype kept


_PYTHON_NUMBERS = (bool, int, float, complex)


def _pythons_way(result):
    """What Python decided by the values of an operator on Python numbers (guarded by the
    trace: a power's type, an int's size; a zero divisor raises on NumPy's side too)."""
    return type(result).__name__, type(result) is int and abs(result) >= 2**62


def _index(regs, idx):
    out = []
    for e in idx:
        k = e[0]
        if k == "i":
            out.append(e[1])
        elif k == "s":
            out.append(slice(e[1], e[2], e[3]))
        elif k == "it":  # an integer moving with the loop: e[1] + iteration
            out.append(e[1] + _ITERATION[-1])
        elif k == "st":  # a slice moving with the loop
            out.append(slice(e[1] + _ITERATION[-1], e[2] + _ITERATION[-1]))
        elif k == "n":
            out.append(None)
        elif k == "e":
            out.append(Ellipsis)
        elif k == "a":
            out.append(np.asarray(e[1], dtype=np.int64))
        elif k == "r":  # an integer register used as an index array
            out.append(regs[e[1]])
    return tuple(out)


def run_step(regs, st):
    """Run one step on ``regs`` (appending or mutating)."""
    k = st["k"]
    a = regs[st["a"]] if "a" in st else None
    if k == "unary":
        regs.append(getattr(np, st["fn"])(a))
    elif k == "binary":
        b = _operand(regs, st["b"])
        x, y = (b, a) if st.get("swap") else (a, b)
        regs.append(getattr(np, st["fn"])(x, y))
    elif k == "op":
        b = _operand(regs, st["b"])
        x, y = (b, a) if st.get("swap") else (a, b)
        regs.append(OPERATORS[st["fn"]](x, y))
        if type(x) in _PYTHON_NUMBERS and type(y) in _PYTHON_NUMBERS:
            _BRANCHES.append(_pythons_way(regs[-1]))
    elif k == "iop":
        regs[st["a"]] = INPLACE[st["fn"]](a, _operand(regs, st["b"]))
    elif k == "uout":
        getattr(np, st["fn"])(a, _operand(regs, st["b"]), out=regs[st["out"]])
    elif k == "where":
        b = _operand(regs, st["b"])
        regs.append(np.where(regs[st["c"]], *((b, a) if st.get("swap") else (a, b))))
    elif k == "clip":
        regs.append(np.clip(a, st["lo"], st["hi"]))
    elif k == "astype":
        regs.append(a.astype(st["dtype"]))
    elif k == "safecast":  # finite, in range, then cast: float -> int casts of NaN are undefined
        x = np.where(np.isfinite(a), a, 0)
        lo = 0 if np.dtype(st["dtype"]).kind in "bu" else -100  # negative -> unsigned: undefined
        x = np.clip(x.real if np.iscomplexobj(x) else x, lo, 100)
        regs.append(x.astype(st["dtype"]))
    elif k == "real":
        regs.append(np.real(a))
    elif k == "imag":
        regs.append(np.imag(a))
    elif k == "angle":
        regs.append(np.angle(a))
    elif k == "reduce":
        kw = {"axis": _axis(st["axis"]), "keepdims": st["keepdims"]}
        if "ddof" in st:
            kw["ddof"] = st["ddof"]
        regs.append(getattr(np, st["fn"])(a, **kw))
    elif k == "method":  # the ndarray method spelling of a reduction
        regs.append(getattr(a, st["fn"])(axis=_axis(st["axis"])))
    elif k == "arg":
        regs.append(getattr(np, st["fn"])(a, axis=st["axis"]))
    elif k == "scan":
        regs.append(getattr(np, st["fn"])(a, axis=st["axis"]))
    elif k == "matmul":
        regs.append(a @ regs[st["b"]])
    elif k == "dot":
        regs.append(np.dot(a, regs[st["b"]]))
    elif k == "einsum":
        regs.append(np.einsum(st["sub"], *(regs[i] for i in st["args"])))
    elif k == "tensordot":
        regs.append(np.tensordot(a, regs[st["b"]], axes=st["axes"]))
    elif k == "reshape":
        regs.append(a.reshape(tuple(st["shape"])))
    elif k == "transpose":
        regs.append(np.transpose(a, st["axes"]))
    elif k == "T":
        regs.append(a.T)
    elif k == "broadcast_to":
        regs.append(np.broadcast_to(a, tuple(st["shape"])))
    elif k == "flat":  # a broadcast (np.repeat's idiom) or a transpose, reshaped: a copy
        v = np.broadcast_to(a[..., None], a.shape + (st["n"],)) if st["n"] else a.T
        v = v.reshape(tuple(st["shape"]))
        regs.append(v * st["c"] if "c" in st else v)  # (an elementwise op it sinks below)
    elif k == "concatenate":
        regs.append(np.concatenate([regs[i] for i in st["args"]], axis=st["axis"]))
    elif k == "stack":
        regs.append(np.stack([regs[i] for i in st["args"]], axis=st["axis"]))
    elif k == "tile":
        regs.append(np.tile(a, tuple(st["reps"])))
    elif k == "repeat":
        regs.append(np.repeat(a, st["repeats"], axis=st["axis"]))
    elif k == "roll":
        regs.append(np.roll(a, st["shift"], axis=st["axis"]))
    elif k == "flip":
        regs.append(np.flip(a, axis=st["axis"]))
    elif k == "pad":
        regs.append(np.pad(a, [tuple(p) for p in st["pw"]], constant_values=st["value"]))
    elif k in ("stencil", "stencil_into"):
        v = getattr(np, st["fn"])(a[_index(regs, st["i1"])], a[_index(regs, st["i2"])])
        if "then" in st:  # a second stage, of the first's value at two offsets
            w = st["then"]
            v = getattr(np, w["fn"])(v[_index(regs, w["i1"])], v[_index(regs, w["i2"])])
        if k == "stencil":
            regs.append(v)
        else:
            regs[st["out"]][_index(regs, st["at"])] = v
    elif k == "coef":  # a coefficient of a few plain ops on a, read broadcast by b only
        c = a[(0,) * (a.ndim - 1) + (slice(0, st["take"]),)]  # a row of a: a view
        c = 0.5 * (c[1:] + c[:-1]) if st.get("faces") else c
        for op, v in st["ops"]:
            c = COEF_OPS[op](c, v)
        regs.append(OPERATORS[st["fn"]](regs[st["b"]], c))
    elif k == "getitem":
        regs.append(a[_index(regs, st["idx"])])
    elif k == "setitem":
        a[_index(regs, st["idx"])] = _operand(regs, st["v"])
    elif k == "addat":
        if isinstance(a, np.ndarray) and not a.flags.writeable:
            # NumPy's ufunc.at writes into read-only arrays (np.imag of a real array), where
            # assignment, put and clip refuse: tracekit refuses too (seed 25700359)
            raise ValueError("np.add.at: the destination is read-only")
        np.add.at(a, _index(regs, st["idx"]), _operand(regs, st["v"]))
    elif k == "setpart":
        setattr(a, st["part"], _operand(regs, st["v"]))
    elif k == "full":
        regs.append(np.full(tuple(st["shape"]), _scalar(st["v"]), dtype=st["dtype"]))
    elif k == "zeros_like":
        regs.append(getattr(np, st["fn"])(a))
    elif k == "arange":
        regs.append(np.arange(st["n"], dtype=st["dtype"]))
    elif k == "linspace":
        regs.append(np.linspace(st["lo"], st["hi"], st["n"]))
    elif k == "eye":
        regs.append(np.eye(st["n"], st["m"], st["kk"], dtype=st["dtype"]))
    elif k == "copy":
        regs.append(a.copy())
    elif k == "pyop":
        regs.append(_pyop(st["fn"])(a))
    elif k == "numpy":
        regs.append(run_numpy(regs, st))
    elif k == "loop":
        run_loop(regs, st)
    elif k == "branch":  # Python control flow on a traced value: a guard
        taken = bool(np.sum(a) > st["at"])
        _BRANCHES.append(taken)
        regs.append(getattr(np, st["then"] if taken else st["else"])(regs[st["b"]]))
    else:
        raise ValueError(f"unknown step kind {k!r}")


def run_loop(regs, st):
    """A Python loop: ``trips`` times, the body's steps on the registers before the loop and
    the carried value (register ``base``); the body's last register is carried on. Tracing
    records every iteration and rolls them back into a loop node. With ``while``, a while
    statement on a traced counter (a 0-d array that tracing sees compared in every
    iteration): it rolls into a while_loop that tests the counter when it runs. With
    ``stop``, ``if np.sum(carry) > stop: break`` ends each iteration: it rolls into a
    while_loop that tests it when it runs, bounded by the range. With ``next``, the body's
    register carried on is that one (the carried register itself where the body writes into
    it: ``u[1:-1] = ...``); with ``stack``, that body register of every iteration is kept in a
    list, stacked after the loop into a second register (``np.stack(history)``)."""
    carry, history = regs[st["carry"]], [] if "stack" in st else None
    if st.get("while"):
        count, t = np.zeros((), np.float64) + 0 * np.sum(np.abs(carry) > -1), 0
        while count < st["trips"]:
            carry = _iteration(regs, st, carry, t, history)
            count, t = count + 1, t + 1
    else:
        trips, stops = st["trips"], "stop" in st
        for t in range(trips):
            carry = _iteration(regs, st, carry, t, history)
            if stops and _past_stop(carry, st["stop"]):
                break
    regs.append(carry)
    if history is not None:
        regs.append(np.stack(history))


def _past_stop(carry, stop):
    """``np.sum(carry) > stop`` (traced: the ``if`` that reads it is the guard); with NumPy,
    recorded among the decisions."""
    with np.errstate(all="ignore"):
        past = np.sum(carry) > stop
    if isinstance(past, np.generic | np.ndarray):  # not traced
        _BRANCHES.append(bool(past))
    return past


def break_stop(sums, margin=lambda s: 0.1 * abs(s) + 0.5):
    """A ``stop`` for ``if np.sum(carry) > stop: break`` given the carried sums of each
    iteration: the loop breaks at the latest iteration it can after the first, well clear of
    the sums before it (backends sum in other orders), else never (above them all); None
    where the sums are not finite."""
    if not sums or not all(np.isfinite(sums)):
        return None
    for e in range(len(sums) - 1, 0, -1):
        before = max(sums[:e])
        if sums[e] - margin(sums[e]) > before + margin(before):
            return 0.5 * (before + margin(before) + sums[e] - margin(sums[e]))
    top = max(sums)
    return top + margin(top)


def _iteration(regs, st, carry, t, history=None):
    """Loop step ``st``'s iteration ``t``: its body on the registers before it and ``carry``;
    the next carried value (its stacked value appended to ``history``)."""
    local = regs[: st["base"]] + [carry]
    _ITERATION.append(t)
    try:
        for body_step in st["body"]:
            run_step(local, body_step)
    finally:
        _ITERATION.pop()
    if history is not None:
        history.append(local[st["stack"]])
    return local[st.get("next", -1)]


def _axis(a):
    return tuple(a) if isinstance(a, list) else a


def execute(prog, *inputs):
    """Run ``prog`` on ``inputs`` with NumPy (or traced) arrays; returns the output registers."""
    regs = list(inputs)
    for st in prog["steps"]:
        run_step(regs, st)
    return tuple(regs[i] for i in prog["outputs"])


def decisions(prog, *inputs) -> list:
    """The way each ``branch`` step of ``prog`` goes with NumPy on ``inputs``."""
    del _BRANCHES[:]
    with quiet():
        execute(prog, *copy_inputs(inputs))
    return list(_BRANCHES)


def program_function(prog):
    """``execute`` bound to ``prog`` as a function of the inputs (what gets traced)."""
    return Harness(prog).bind(None)


# Parameter and captured-attribute names that generated code must keep apart: like its value
# names (a parameter ``v1`` and the value ``%1`` once shared the identifier ``v1``), like the
# kernels' and runners' own names, modules, helpers and builtins, and pairs that fold to one
# identifier (``self.w_1`` captured beside a parameter ``self_w_1``).
ADVERSARIAL_NAMES = [f"v{i}" for i in range(100)] + (
    "v vv1 vv0 v_1 v1_1 v_v1 vZu vZZ vx1 vx x x_1 x_b x_i s s_i s_p s_sh a a_b self_w "
    "self_w_1 w_1 t_v0 r_v1 rb_v1 s_v2 b_v3 ri_v0 acc ch f i0 j0 k0 k0_acc k0_t_v1 k0_v1 rem row "
    "tid lane sh np math numba prange cuda range len min max abs slice float int sum vars ars "
    "_wadd _maximum _cdiv fm_tanh_f32 _fm _fast_math _empty _ndarray _out _temp _scalar "
    "_recycled _dt_v1 _const_v1 _wide_vectors inputs outs pool args run fast segment0 c1 traced "
    "fuzz_program self k0_slot k0_float64_work k0_float32_work k0_s_v1_t _dt_w0 numba_threads "
    "_fit_threads _whole quick _NO_LOOP_FUSION _static_1 s_1 x_r0 v1_r1 _r2"
).split()


def _pick_names(prog):
    """Names for the inputs and which array inputs are captured (``self.<name>``), from a
    stream of the seed's own (the program's steps are drawn as before)."""
    rng = np.random.default_rng([prog["seed"], 5])
    pool = list(ADVERSARIAL_NAMES)
    names = []
    for i in range(len(prog["inputs"])):
        if rng.random() < 0.7:
            names.append(pool.pop(int(rng.integers(len(pool)))))
        else:
            names.append(f"x{i}")
    captured = [
        i
        for i, d in enumerate(prog["inputs"])
        if prog["profile"] != "grad" and d["dtype"] != "pyfloat" and rng.random() < 0.2
    ]
    return names, captured


class Harness:
    """``prog`` as a Python function with named parameters, some inputs captured.

    Programs with ``names`` (generated since the adversarial names) run as
    ``Module.__call__(self, <names of the other inputs>)`` reading their captured inputs as
    ``self.<name>``; older ones as ``fuzz_program(*inputs)``. ``bind(target)`` is a function
    of all the inputs, in order, that stores the captured ones on the module and calls
    ``target`` (the traced or compiled function; None: the Python function) on the others.
    """

    def __init__(self, prog):
        self.prog = prog
        self.names = prog.get("names")
        self.captured = set(prog.get("captured", ()))
        if self.names is None:

            def fuzz_program(*inputs):
                return execute(prog, *inputs)

            self.fn = fuzz_program
            return
        params = [n for i, n in enumerate(self.names) if i not in self.captured]
        reads = [f"_fuzz_self.{n}" if i in self.captured else n for i, n in enumerate(self.names)]
        src = (
            f"def __call__(_fuzz_self, {', '.join(params)}):\n"
            f"    return _fuzz_execute(_fuzz_prog, {', '.join(reads)})\n"
        )
        ns = {"_fuzz_execute": execute, "_fuzz_prog": prog}
        exec(compile(src, "<fuzz program>", "exec"), ns)
        self.fn = type("Module", (), {"__call__": ns["__call__"]})()

    def bind(self, target):
        target = self.fn if target is None else target

        def call(*inputs):
            args = []
            for i, x in enumerate(inputs):
                if i in self.captured:
                    setattr(self.fn, self.names[i], x)
                else:
                    args.append(x)
            return target(*args)

        return call


# ---------------------------------------------------------------------- inputs
# The fuzzer's mix of values (helpers.values.random_values): integers from -5, 8% extremes;
# 10% special floats, subnormal and near-overflow ones among them.
FUZZ_VALUES = dict(
    int_low=-5,
    int_rate=0.08,
    float_rate=0.1,
    float_specials=(np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, 3e38),
)


def fuzz_values(rng, shape, dtype, kind="normal"):
    """Values of an input of ``kind``: "normal" (with specials), "smooth" (for finite
    differences), or anything else (no specials)."""
    return random_values(
        rng, shape, dtype, specials=kind == "normal", smooth=kind == "smooth", **FUZZ_VALUES
    )


def make_inputs(prog, which=0):
    """Input arrays of ``prog`` (``which`` picks another draw of values, same shapes)."""
    rng = np.random.default_rng([prog["seed"], which, 7])
    out = []
    for d in prog["inputs"]:
        if d["dtype"] == "pyfloat":
            out.append(float(rng.standard_normal()))
            continue
        a = fuzz_values(rng, tuple(d["shape"]), d["dtype"], d.get("kind", "normal"))
        out.append(with_layout(a, d.get("layout", "c")))
    return out


def copy_inputs(xs):
    return [
        with_layout(np.array(x, copy=True), layout_of(x)) if isinstance(x, np.ndarray) else x
        for x in xs
    ]


def _beyond_exact(r) -> bool:
    """A float register holding finite values whose ulp is above 1."""
    a = np.asarray(r)
    if a.dtype.kind not in "fc" or a.size == 0:
        return False
    parts = [a.real, a.imag] if a.dtype.kind == "c" else [a]
    big = 2.0 ** (np.finfo(a.dtype).nmant + 1)
    return any(bool(np.any(np.isfinite(p) & (np.abs(p) >= big))) for p in parts)


def _beyond_f64(r) -> bool:
    a = np.asarray(r)
    return a.size > 0 and bool(np.any(np.abs(a.astype(np.float64)) >= 2.0**53))


# ---------------------------------------------------------------------- generating programs
class _Gen:
    """Builds a valid program step by step, running each step on real values as it goes."""

    def __init__(self, seed, profile):
        self.rng = np.random.default_rng([seed, 1])
        # draws of their own for numbers moving with a loop: a seed's other draws stay as they were
        self.moving_rng = np.random.default_rng([seed, 2])
        # and for Python scalars chosen as an operator's operand (Python's types, not NumPy's)
        self.python_rng = np.random.default_rng([seed, 3])
        # and for a power's constant exponent (fast math's own forms: integers to 31, halves)
        self.power_rng = np.random.default_rng([seed, 4])
        # and for coefficients read broadcast (_coef)
        self.coef_rng = np.random.default_rng([seed, 6])
        # and for a division's constant divisor
        self.divisor_rng = np.random.default_rng([seed, 7])
        self.seed, self.profile = seed, profile
        self.prog = {"seed": seed, "profile": profile, "inputs": [], "steps": [], "outputs": []}
        self.approx: list[bool] = []
        self.depth = 0  # loops the step being made is in
        self.trips = 0  # the trip count of the innermost loop being made
        self.loop_bases: list = []  # per enclosing loop, the registers from before it
        self.enclosing = self.regs  # the registers of the body (or program) being made
        self.chain = False  # a stencil chain (_Chain) is being made

    # -- registers
    def regs(self):
        xs = make_inputs(self.prog)
        with quiet():
            for st in self.prog["steps"]:
                run_step(xs, st)
        return xs

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def pick(self, regs, pred=lambda r: True, exact=False):
        ids = [
            i
            for i, r in enumerate(regs)
            if pred(r) and not (exact and self.approx[i] and _kind(r) in "fc")
        ]
        return self.choice(ids) if ids else None

    def scalar(self, like=None):
        r = self.rng.random()
        kinds = ["int", "float", "bool", "complex", "float32", "int8", "float64", "uint8"]
        t = self.choice(kinds) if r < 0.5 else ("float" if r < 0.8 else "int")
        if t in ("int", "int8", "uint8"):
            v = int(self.rng.integers(0 if t == "uint8" else -3, 4))
        elif t == "bool":
            v = bool(self.rng.random() < 0.5)
        elif t == "complex":
            v = [float(self.rng.integers(-2, 3)) / 2, 0.5]
        else:
            v = float(self.choice([0.5, -1.5, 2.0, 3.0, 0.0, -0.0, 1e-3, 7.25]))
        spec = {"t": t, "v": v}
        if self.depth >= 1 and t in _MOVING and self.moving_rng.random() < 0.35:
            steps = [1, -1, 2] if "int" in t else [0.5, -0.25, 1.0, 1e-3]
            spec["step"] = steps[int(self.moving_rng.integers(len(steps)))]
            if self.moving_rng.random() < 0.3:  # not a constant step: a table of the numbers
                curves = ["square"] if "int" in t else ["square", "sin"]
                spec["curve"] = curves[int(self.moving_rng.integers(len(curves)))]
        return spec

    def operand(self, regs, a, exact=False):
        """A second operand broadcastable with register ``a``: a register or a scalar."""
        if self.rng.random() < 0.3:
            return self.scalar()
        sa = np.shape(regs[a])
        ids = [
            i
            for i, r in enumerate(regs)
            if _broadcastable(np.shape(r), sa)
            and not (exact and self.approx[i] and _kind(r) in "fc")
        ]
        return self.choice(ids) if ids else self.scalar()

    # -- steps
    def try_step(self, st, approx):
        regs = self.regs()
        n = len(regs)
        before = [_snapshot(r) for r in regs]
        try:
            with quiet():
                run_step(regs, st)
        except Exception:
            return False
        if self.profile == "grad":
            for r, b in zip(regs[: len(self.prog["inputs"])], before):
                if not _same_snapshot(r, b):
                    return False  # writes into inputs are not differentiated
            if len(regs) > n and _kind(regs[-1]) not in ("fb" if self.chain else "f"):
                return False  # (a chain's conditions are no results: see _Chain)
            if len(regs) > n and np.size(regs[-1]) > 400:
                return False
        if len(regs) > n and np.size(regs[-1]) > self.max_size:
            return False
        if len(regs) > n and type(regs[-1]) is int and abs(regs[-1]) >= 2**62:
            return False  # (a trace computes ints as int64: tests/test_tracer.py)
        self.prog["steps"].append(st)
        made = approx if isinstance(approx, list) else [approx] * (len(regs) - n)
        self.approx += made
        approx = any(made) if isinstance(approx, list) else approx
        # a write marks the buffer written and every alias of it: the buffers whose values
        # changed, and the one an in-place step names even where its values on these inputs
        # did not (x **= 0.001 leaves 0 and 1 as they are; on other inputs it rounds: 8500016)
        written = {i for i, (r, b) in enumerate(zip(regs[:n], before)) if not _same_snapshot(r, b)}
        target = st.get("out", st.get("a")) if st["k"] in IN_PLACE_STEPS else None
        if isinstance(target, int) and target < n:
            written.add(target)
        for i in written if approx else ():
            for j, q in enumerate(regs[:n]):
                if j == i or _shares(q, regs[i]):
                    self.approx[j] = True
        return True

    def step(self):
        regs = self.regs()
        if self.coef_rng.random() < COEF_RATE:  # (its own stream: other draws stay as they were)
            made = self._coef(regs)
            if made is not None and self.try_step(*made):
                return True
        rng = self.rng
        kinds, weights = zip(*self.kinds.items())
        k = kinds[int(rng.choice(len(kinds), p=np.array(weights) / sum(weights)))]
        make = getattr(self, f"_{k}")
        res = make(regs)
        if res is None:
            return False
        st, approx = res
        return self.try_step(st, approx)

    def _coef(self, regs):
        """A coefficient of a row of a register, mostly an input's (a grid's face widths
        ``0.5 * (d[1:] + d[:-1])`` now and then), by one to five plain ops, read broadcast
        along the last axis of a register of two or more axes and nowhere else: the kernel
        reading it may compute it (backends/broadcasts.py)."""
        rng = self.coef_rng
        floats = [i for i, r in enumerate(regs) if isinstance(r, np.ndarray) and _kind(r) == "f"]
        big = [i for i in floats if regs[i].ndim >= 2 and regs[i].size > 1]
        if not big:
            return None
        b = big[int(rng.integers(len(big)))]
        faces = bool(rng.random() < 0.4)
        take = regs[b].shape[-1] + faces
        rows = [i for i in floats if regs[i].ndim >= 1 and regs[i].shape[-1] >= take > 0]
        inputs = [i for i in rows if i < len(self.prog["inputs"])]
        pool = inputs if inputs and rng.random() < 0.8 else rows
        if not pool:
            return None
        a = pool[int(rng.integers(len(pool)))]
        names = list(COEF_OPS)
        ops = [
            [names[int(rng.integers(len(names)))], float(rng.choice([0.5, -1.5, 2.0, 3.0]))]
            for _ in range(int(rng.integers(1, 6)))
        ]
        fn = ["*", "+", "-"][int(rng.integers(3))]
        st = {"k": "coef", "a": a, "b": b, "take": take, "ops": ops, "fn": fn, "faces": faces}
        return st, self.approx[a] or self.approx[b]

    def _unary(self, regs):
        names = SMOOTH_UNARY if self.profile == "grad" else UNARY
        fn = self.choice(names)
        a = self.pick(regs, exact=fn in DISCONTINUOUS or (fn in PERIODIC and names is UNARY))
        if a is None:
            return None
        if self.profile == "grad" and fn == "exp":
            return {"k": "unary", "fn": "tanh", "a": a}, self.approx[a] or True
        if fn in NAN_SIGN and _has_nan(regs[a]):
            return None
        cplx = _kind(regs[a]) == "c"
        approx = self.approx[a] or fn in APPROX_UNARY or (cplx and fn in APPROX_COMPLEX)
        return {"k": "unary", "fn": fn, "a": a}, approx

    def _binary(self, regs):
        grad = self.profile == "grad"
        if grad:
            fn = self.choice(SMOOTH_BINARY)
        elif self.rng.random() < 0.35:
            fn = self.choice(list(OPERATORS))
        else:
            fn = self.choice(BINARY)
        exact = fn in DISCONTINUOUS or fn in ("bitwise_and", "left_shift", "right_shift")
        a = self.pick(regs, exact=exact)
        if a is None:
            return None
        python = self._python_scalar(regs, exact) if fn in OPERATORS else None
        a = a if python is None else python
        b = self.operand(regs, a, exact=exact)
        if grad and isinstance(b, dict):
            b = {"t": "float", "v": self.choice([0.5, 1.5, -2.0])}
        elif fn in ("**", "power") and isinstance(b, dict) and self.power_rng.random() < 0.5:
            b = {"t": b["t"] if b["t"] in ("float", "float32", "float64") else "float",
                 "v": float(self.power_rng.choice(CONSTANT_EXPONENTS))}  # fmt: skip
        elif fn in ("/", "divide") and isinstance(b, dict) and self.divisor_rng.random() < 0.5:
            b = {"t": b["t"] if b["t"] in ("float", "float32", "float64") else "float",
                 "v": float(self.divisor_rng.choice(CONSTANT_DIVISORS))}  # fmt: skip
        cplx = any(_kind(x) == "c" for x in (regs[a], _operand(regs, b)))
        approx = (
            self.approx[a]
            or (not isinstance(b, dict) and self.approx[b])
            or fn in APPROX_BINARY
            or (cplx and fn in APPROX_COMPLEX)
            or (fn in ("**", "power") and "f" in _kind(regs[a]) + _kind(_operand(regs, b)))
        )
        st = {"k": "op" if fn in OPERATORS else "binary", "fn": fn, "a": a, "b": b}
        if self.rng.random() < 0.25:
            st["swap"] = True
        sign_from = regs[a] if st.get("swap") else _operand(regs, b)
        if fn in NAN_SIGN and _has_nan(sign_from):
            return None
        return st, approx

    def _python_scalar(self, regs, exact):
        """Now and then, a register holding a Python scalar (a Python float input, the bool
        Python compares it to, an int from those): its operators compute as Python's do."""
        python = [
            i
            for i, r in enumerate(regs)
            if type(r) in (bool, int, float) and not (exact and self.approx[i])
        ]
        if python and self.python_rng.random() < 0.6:
            return python[int(self.python_rng.integers(len(python)))]
        return None

    def _inplace(self, regs):
        fn = self.choice(list(INPLACE))
        if self.profile == "grad":
            fn = self.choice(["+", "-", "*"])
        exact = fn in DISCONTINUOUS
        a = self.pick(regs, lambda r: isinstance(r, np.ndarray) and r.ndim > 0, exact=exact)
        if a is None:
            return None
        b = self.operand(regs, a, exact=exact)
        cplx = _kind(regs[a]) == "c"
        approx = (not isinstance(b, dict) and self.approx[b]) or (cplx and fn in APPROX_COMPLEX)
        approx = approx or (fn == "**" and _kind(regs[a]) in "fc")
        return {"k": "iop", "fn": fn, "a": a, "b": b}, approx or self.approx[a]

    def _uout(self, regs):
        fn = self.choice(["add", "multiply", "maximum", "subtract", "fmin"])
        o = self.pick(regs, lambda r: isinstance(r, np.ndarray) and r.ndim > 0)
        if o is None:
            return None
        a = self.pick(regs, lambda r: _broadcastable(np.shape(r), np.shape(regs[o]), strict=True))
        if a is None:
            return None
        b = self.operand(regs, a)
        approx = self.approx[a] or (not isinstance(b, dict) and self.approx[b])
        cplx = _kind(regs[a]) == "c"
        return {"k": "uout", "fn": fn, "a": a, "b": b, "out": o}, approx or (
            cplx and fn == "multiply"
        )

    def _where(self, regs):
        c = self.pick(regs, lambda r: _kind(r) == "b")
        if c is None:
            return None
        a = self.pick(regs, lambda r: _broadcastable(np.shape(r), np.shape(regs[c])))
        b = self.operand(regs, a)
        if self.profile == "grad" and isinstance(b, dict):
            b = {"t": "float", "v": 0.5}
        approx = self.approx[a] or (not isinstance(b, dict) and self.approx[b])
        return {"k": "where", "c": c, "a": a, "b": b}, approx

    def _branch(self, regs):
        """``if np.sum(a) > at:`` one unary function of ``b``, else another. ``at`` keeps
        these inputs well to one side (backends sum in other orders) and other inputs take
        either side: a call the trace's branch does not fit must fail its guard."""
        # in a loop body, a test of a value from before the loop: the same in every iteration
        # (a carried one could come near ``at`` in some iteration)
        tested = regs[: self.loop_bases[0]] if self.depth else regs
        a = self.pick(tested, lambda r: _kind(r) in "fiub")
        real = "f" if self.profile == "grad" else "fiu"
        b = self.pick(regs, lambda r: isinstance(r, np.ndarray) and _kind(r) in real)
        if a is None or b is None:
            return None
        with np.errstate(all="ignore"):
            total = float(np.sum(regs[a]))
        if not np.isfinite(total):
            return None
        margin = 0.1 * abs(total) + 0.5
        at = total - margin if self.rng.random() < 0.5 else total + margin
        arms = BRANCH_ARMS if _kind(regs[b]) == "f" else BRANCH_ARMS[:4]
        if self.profile == "grad":
            arms = [f for f in arms if f in SMOOTH_UNARY]
        then, other = (str(f) for f in self.rng.choice(arms, 2, replace=False))
        approx = self.approx[b] or then in APPROX_UNARY or other in APPROX_UNARY
        return {"k": "branch", "a": a, "b": b, "at": at, "then": then, "else": other}, approx

    def _compare(self, regs):  # a bool register (grad programs need conditions)
        a = self.pick(regs, exact=True)
        if a is None:
            return None
        return {"k": "binary", "fn": "greater", "a": a, "b": {"t": "float", "v": 0.1}}, False

    def _clip(self, regs):
        a = self.pick(regs, lambda r: _kind(r) in "iuf")
        if a is None:
            return None
        lo = self.choice([None, -1.0, 0.0, -0.5])
        hi = self.choice([2.0, 1.0, None]) if lo is not None else self.choice([1.0, 0.5])
        return {"k": "clip", "a": a, "lo": lo, "hi": hi}, self.approx[a]

    def _astype(self, regs):
        a = self.pick(regs)
        if a is None:
            return None
        dt = self.choice(DTYPES)
        src = _kind(regs[a])
        if src in "fc" and np.dtype(dt).kind in "biu":
            if self.approx[a]:
                return None
            return {"k": "safecast", "a": a, "dtype": dt}, False
        if src == "c" and np.dtype(dt).kind != "c":
            return None  # discards the imaginary part, with a warning: np.real says it
        return {"k": "astype", "a": a, "dtype": dt}, self.approx[a]

    def _complexpart(self, regs):
        a = self.pick(regs)
        if a is None:
            return None
        k = self.choice(["real", "imag", "angle"])
        cplx = _kind(regs[a]) == "c"
        return {"k": k, "a": a}, self.approx[a] or (k == "angle" and cplx)

    def _setpart(self, regs):
        a = self.pick(regs, lambda r: _kind(r) == "c" and np.ndim(r) > 0)
        if a is None:
            return None
        v = self.operand(regs, a)
        if not isinstance(v, dict) and _kind(regs[v]) == "c":
            return None
        approx = self.approx[a] or (not isinstance(v, dict) and self.approx[v])
        return {"k": "setpart", "a": a, "part": self.choice(["real", "imag"]), "v": v}, approx

    def _reduce(self, regs):
        fns = ["sum", "mean", "max", "min", "prod", "var"]
        fn = self.choice(fns if self.profile == "grad" else REDUCE)
        exact = fn in ("any", "all")
        a = self.pick(regs, lambda r: np.ndim(r) >= 0, exact=exact)
        if a is None:
            return None
        nd = np.ndim(regs[a])
        axis = self._axes(nd)
        if fn in ("mean", "var", "std") and _kind(regs[a]) in "iu" and _beyond_f64(regs[a]):
            # integers past 2**53 in a float sum cancel by the order of summation (the tolerance
            # follows the result, not the inputs): NumPy's pairwise order is not the only right one
            fn = "max"
        if fn in ("sum", "mean", "var", "std") and _beyond_exact(regs[a]):
            # floats past 2**(mantissa + 1) absorb small ones: the sum depends on the order and
            # the precision it adds in (tracekit adds float32 in float64; seed 9200986)
            fn = "max"
        st = {
            "k": "reduce",
            "fn": fn,
            "a": a,
            "axis": axis,
            "keepdims": bool(self.rng.random() < 0.3),
        }
        if fn in ("var", "std") and self.rng.random() < 0.3:
            st["ddof"] = 1
        if self.rng.random() < 0.15 and fn in ("sum", "max", "mean") and nd > 0:
            st = {"k": "method", "fn": fn, "a": a, "axis": axis}
        k = _kind(regs[a])
        approx = self.approx[a] or (
            fn in ("sum", "prod", "mean", "var", "std") and (k in "fc" or fn != "sum")
        )
        approx = approx and not (fn in ("sum", "prod") and k in "biu")
        return st, approx

    def _axes(self, nd):
        if nd == 0 or self.rng.random() < 0.2:
            return None
        if self.rng.random() < 0.5:
            return int(self.rng.integers(-nd, nd))
        axes = sorted(
            {int(x) for x in self.rng.integers(0, nd, size=int(self.rng.integers(1, nd + 1)))}
        )
        return axes

    def _arg(self, regs):
        a = self.pick(regs, lambda r: np.ndim(r) > 0, exact=True)
        if a is None:
            return None
        nd = np.ndim(regs[a])
        axis = None if self.rng.random() < 0.3 else int(self.rng.integers(-nd, nd))
        return {"k": "arg", "fn": self.choice(["argmax", "argmin"]), "a": a, "axis": axis}, False

    def _numpy(self, regs):
        fn = self.choice(list(HOST_FUNCTIONS))
        exact = fn in HOST_DISCONTINUOUS
        real = lambda r: _kind(r) in "biuf"  # noqa: E731
        a = self.pick(regs, lambda r: np.ndim(r) >= 1 and real(r), exact=exact)
        if a is None:
            return None
        nd, size = np.ndim(regs[a]), np.size(regs[a])
        st = {"k": "numpy", "fn": fn, "a": a}
        if fn in ("sort", "argsort", "median", "quantile"):
            st["axis"] = int(self.rng.integers(-nd, nd))
            if fn == "median" and self.rng.random() < 0.3:
                st["axis"] = None
        if fn == "quantile":
            st["q"] = float(self.choice([0.0, 0.25, 0.5, 0.9, 1.0]))
        elif fn == "histogram":
            st["bins"], st["part"] = int(self.rng.integers(1, 6)), int(self.rng.integers(2))
        elif fn in ("searchsorted", "interp", "convolve", "solve"):
            one_d = fn in ("interp", "convolve")
            b = self.pick(
                regs,
                lambda r: real(r) and np.ndim(r) >= 1 and (np.ndim(r) == 1 or not one_d),
                exact=exact,
            )
            if b is None or (one_d and nd != 1):
                return None
            st["b"] = b
            if fn == "convolve":
                st["mode"] = self.choice(["full", "same", "valid"])
        if fn in ("inv", "solve", "det", "cholesky"):
            st["m"] = int(self.rng.integers(1, 4))
            if size < st["m"] ** 2 or (fn == "solve" and np.size(regs[st["b"]]) < st["m"]):
                return None
        approx = any(self.approx[i] for i in (a, st.get("b", a))) or fn in (
            "convolve",
            "inv",
            "solve",
            "det",
            "cholesky",
            "interp",
            "quantile",
            "median",
        )
        return st, approx

    def _scan(self, regs):
        a = self.pick(regs, lambda r: np.ndim(r) > 0)
        if a is None:
            return None
        nd = np.ndim(regs[a])
        axis = None if self.rng.random() < 0.2 else int(self.rng.integers(-nd, nd))
        fn = self.choice(["cumsum", "cumprod"])
        approx = self.approx[a] or _kind(regs[a]) in "fc"
        return {"k": "scan", "fn": fn, "a": a, "axis": axis}, approx

    def _matmul(self, regs):
        a = self.pick(regs, lambda r: np.ndim(r) >= 1)
        if a is None:
            return None
        sa = np.shape(regs[a])
        k = self.choice(["matmul", "dot", "einsum", "tensordot"])
        if k in ("matmul", "dot"):
            b = self.pick(
                regs,
                lambda r: np.ndim(r) >= 1 and np.shape(r)[0 if np.ndim(r) == 1 else -2] == sa[-1],
            )
            if b is None:
                return None
            st = {"k": k, "a": a, "b": b}
            args = [a, b]
        elif k == "einsum":
            letters = "ijkl"[: len(sa)]
            b = self.pick(regs, lambda r: 1 <= np.ndim(r) <= 3 and np.shape(r)[0] == sa[-1])
            if b is None:
                sub = letters + "->" + letters[-1] + letters[0]
                if len(sa) < 2:
                    sub = letters + "->"
                st = {"k": "einsum", "sub": sub, "args": [a]}
                args = [a]
            else:
                lb = letters[-1] + "mnp"[: np.ndim(regs[b]) - 1]
                out = letters[:-1] + lb[1:]
                st = {"k": "einsum", "sub": f"{letters},{lb}->{out}", "args": [a, b]}
                args = [a, b]
        else:
            b = self.pick(regs, lambda r: np.ndim(r) >= 1 and np.shape(r)[0] == sa[-1])
            if b is None:
                return None
            st = {"k": "tensordot", "a": a, "b": b, "axes": [[len(sa) - 1], [0]]}
            args = [a, b]
        approx = any(self.approx[i] for i in args) or any(_kind(regs[i]) in "fc" for i in args)
        return st, approx

    def _reshape(self, regs):
        a = self.pick(regs, lambda r: isinstance(r, np.ndarray))
        if a is None:
            return None
        x = regs[a]
        rng = self.rng
        r = rng.random()
        if r < 0.35:
            return {
                "k": "reshape",
                "a": a,
                "shape": _random_factorisation(rng, x.size),
            }, self.approx[a]
        if r < 0.65 and x.ndim > 0:
            axes = [int(i) for i in rng.permutation(x.ndim)]
            return {"k": "transpose", "a": a, "axes": axes}, self.approx[a]
        if r < 0.75:
            return {"k": "T", "a": a}, self.approx[a]
        if r < 0.85 and x.ndim > 0:
            return {"k": "flip", "a": a, "axis": int(rng.integers(0, x.ndim))}, self.approx[a]
        if r < 0.92 and x.ndim > 0:  # reshapes NumPy copies, then sunk below elementwise ops
            n = int(rng.integers(2, 4)) if x.ndim == 1 or rng.random() < 0.5 else 0
            size = x.size * max(n, 1)
            shape = [size] if rng.random() < 0.6 else _random_factorisation(rng, size)
            st = {"k": "flat", "a": a, "n": n, "shape": shape}
            if rng.random() < 0.6:
                st["c"] = float(rng.choice([2.0, -0.5, 1.5, 3.0]))
            return st, self.approx[a]
        shape = [int(rng.integers(1, 3))] + list(x.shape)
        shape = [d if d != 1 or rng.random() < 0.5 else int(rng.integers(1, 4)) for d in shape]
        return {"k": "broadcast_to", "a": a, "shape": shape}, self.approx[a]

    def _join(self, regs):
        a = self.pick(regs, lambda r: np.ndim(r) >= 1)
        if a is None:
            return None
        x = regs[a]
        rng = self.rng
        r = rng.random()
        nd = x.ndim
        if r < 0.3:
            axis = int(rng.integers(-nd, nd))
            others = [
                i
                for i, q in enumerate(regs)
                if np.ndim(q) == nd
                and all(
                    d == e for j, (d, e) in enumerate(zip(np.shape(q), x.shape)) if j != axis % nd
                )
            ]
            args = [a] + [self.choice(others) for _ in range(int(rng.integers(1, 3)))]
            appr = any(self.approx[i] for i in args)
            return {"k": "concatenate", "args": args, "axis": axis}, appr
        if r < 0.4:
            others = [i for i, q in enumerate(regs) if np.shape(q) == x.shape]
            args = [a, self.choice(others)]
            appr = any(self.approx[i] for i in args)
            return {"k": "stack", "args": args, "axis": int(rng.integers(0, nd + 1))}, appr
        if r < 0.55:
            reps = [int(rng.integers(1, 3)) for _ in range(int(rng.integers(1, nd + 2)))]
            return {"k": "tile", "a": a, "reps": reps}, self.approx[a]
        if r < 0.7:
            axis = None if rng.random() < 0.3 else int(rng.integers(0, nd))
            n = x.size if axis is None else x.shape[axis]
            reps = (
                int(rng.integers(1, 3))
                if rng.random() < 0.6
                else [int(v) for v in rng.integers(0, 3, n)]
            )
            return {"k": "repeat", "a": a, "repeats": reps, "axis": axis}, self.approx[a]
        if r < 0.85:
            axis = None if rng.random() < 0.3 else int(rng.integers(0, nd))
            return {
                "k": "roll",
                "a": a,
                "shift": int(rng.integers(-3, 4)),
                "axis": axis,
            }, self.approx[a]
        pw = [[int(rng.integers(0, 2)), int(rng.integers(0, 3))] for _ in range(nd)]
        return {"k": "pad", "a": a, "pw": pw, "value": self.choice([0, 1, -2])}, self.approx[a]

    def _random_index(self, x, basic_only=False):
        rng = self.rng
        idx, d = [], 0
        shape = np.shape(x)
        while d < len(shape) and rng.random() < 0.8:
            n = shape[d]
            r = rng.random()
            if r < 0.2 and n > 0:
                idx.append(["i", int(rng.integers(-n, n))])
            elif r < 0.65 or basic_only:
                start = self.choice([None, 0, 1, -1, -2, n])
                stop = self.choice([None, n, -1, 0, 2])
                step = self.choice([None, 1, 2, -1, -2, 3])
                idx.append(["s", start, stop, step])
            elif r < 0.8 and n > 0:
                m = int(rng.integers(1, 5))
                if self.profile == "grad":  # repeated indices: see README, "still wrong"
                    idx.append(["a", [int(v) for v in rng.permutation(n)[: min(m, n)]]])
                else:
                    idx.append(["a", [int(v) for v in rng.integers(-n, n, m)]])
            else:
                idx.append(["s", None, None, None])
            d += 1
            if rng.random() < 0.1:
                idx.append(["n"])
        if rng.random() < 0.15:
            idx.insert(int(rng.integers(0, len(idx) + 1)), ["e"])
        if len([e for e in idx if e[0] == "a"]) > 1:  # keep advanced indices simple
            idx = [e if e[0] != "a" else ["s", None, None, None] for e in idx]
            idx[0] = ["a", [0]] if shape and shape[0] > 0 else idx[0]
        return idx

    def _moving(self, idx, n):
        """Inside a loop's body, now and then ``idx`` with its first entry (on axis 0, of
        length ``n``) moved by one per iteration, in bounds in every iteration."""
        if not self.depth or not idx or self.rng.random() < 0.3:
            return idx
        e, last = idx[0], self.trips - 1
        if e[0] == "i":
            v = min(e[1] + n if e[1] < 0 else e[1], n - 1 - last)
            moved = ["it", v] if v >= 0 else None
        elif e[0] == "s" and e[3] in (None, 1):
            start = 0 if e[1] is None else (e[1] + n if e[1] < 0 else e[1])
            stop = min(n if e[2] is None else (e[2] + n if e[2] < 0 else e[2]), n - last)
            moved = ["st", start, stop] if 0 <= start <= stop else None
        else:
            moved = None
        return idx if moved is None else [moved, *idx[1:]]

    def _getitem(self, regs):
        a = self.pick(regs, lambda r: np.ndim(r) >= 1)
        if a is None:
            return None
        idx = self._moving(self._random_index(regs[a]), np.shape(regs[a])[0])
        if self.rng.random() < 0.1:
            ints = self.pick(regs, lambda r: _kind(r) in "iu" and 1 <= np.ndim(r) <= 2)
            n = np.shape(regs[a])[0]
            if ints is not None and n > 0:
                # an index register, made safe by modulo its axis length
                return None if n == 0 else self._getitem_by_register(regs, a, ints, n)
        return {"k": "getitem", "a": a, "idx": idx}, self.approx[a]

    def _stencil(self, regs):
        """``fn`` of two slices of one register at different constant offsets (``a[1:, :-1] -
        a[:-1, 1:]``), in half of them a second stage of that value at two offsets (no register
        of its own: it may be fused across offsets, or computed in tiles): a new register, or
        written into a region of the same shape of a register shaped like it (``b[1:-1] =
        ...``; ``b`` may be ``a``), as stencils are."""
        a = self.pick(
            regs, lambda r: isinstance(r, np.ndarray) and r.ndim >= 1 and min(r.shape) >= 2
        )
        if a is None:
            return None
        x, rng = regs[a], self.rng
        # the second stage's draws of their own: a seed's programs without one stay as they were
        staged = np.random.default_rng([self.seed, 3, len(self.prog["steps"]), self.depth])
        chain = staged.random() < 0.5  # a second stage reading the first's value at two offsets
        i1, i2, j1, j2, at = [], [], [], [], []

        def offset(idx, halo, draw):
            o = int(draw.integers(0, halo + 1))
            idx.append(["s", o, o - halo if o < halo else None, None])

        for n in x.shape:
            d = int(rng.integers(0, 3 if n > 2 else 2))  # the halo: the slices are n - d long
            for idx in (i1, i2, at):
                offset(idx, d, rng)
            if chain:
                d2 = int(staged.integers(0, min(3, n - d)))
                offset(j1, d2, staged)
                offset(j2, d2, staged)
                at.pop()
                offset(at, d + d2, staged)
        fns = ["add", "subtract", "multiply"] + ([] if self.profile == "grad" else ["maximum"])
        st = {"k": "stencil", "a": a, "fn": self.choice(fns), "i1": i1, "i2": i2}
        if chain:
            st["then"] = {"fn": fns[int(staged.integers(0, len(fns)))], "i1": j1, "i2": j2}
        used = {st["fn"], st.get("then", st)["fn"]}
        approx = self.approx[a] or (_kind(x) == "c" and bool(used & set(APPROX_COMPLEX)))
        if rng.random() < 0.5:
            into = [
                i
                for i, r in enumerate(regs)
                if isinstance(r, np.ndarray)
                and r.shape == x.shape
                and r.dtype == x.dtype
                and r.flags.writeable
            ]
            if into:
                out = self.choice(into)
                st.update(k="stencil_into", at=at, out=out)
                return st, approx or self.approx[out]
        return st, approx

    def _getitem_by_register(self, regs, a, ints, n):
        if self.depth:  # it adds a step of its own to the program: not inside a loop's body
            return None
        st = {"k": "binary", "fn": "remainder", "a": ints, "b": {"t": "int", "v": n}}
        if not self.try_step(st, False):
            return None
        r = len(self.approx) - 1
        return {"k": "getitem", "a": a, "idx": [["r", r]]}, self.approx[a]

    def _setitem(self, regs):
        writable = [i for i, r in enumerate(regs) if isinstance(r, np.ndarray) and r.ndim >= 1]
        if not writable:
            return None
        a = self.choice(writable)
        idx = self._moving(self._random_index(regs[a]), np.shape(regs[a])[0])
        try:
            with quiet():
                target = regs[a][_index(regs, idx)]
        except Exception:
            return None
        ts = np.shape(target)
        if self.rng.random() < 0.35:
            v = self.scalar()
            if self.profile == "grad":
                v = {"t": "float", "v": 0.25}
        else:
            ids = [i for i, r in enumerate(regs) if _broadcastable(np.shape(r), ts, strict=True)]
            v = self.choice(ids) if ids else self.scalar()
        approx = self.approx[a] or (not isinstance(v, dict) and self.approx[v])
        if _kind(regs[a]) in "biu" and _kind(_operand(regs, v)) in "fc":
            return None  # an implicit float -> int cast: undefined out of range (see safecast)
        if self.rng.random() < 0.2 and self.profile != "grad":
            n = np.shape(regs[a])[0]
            if n > 0:
                if not regs[a].flags.writeable:
                    return None  # NumPy's add.at writes into read-only arrays (NumPy bug)
                m = int(self.rng.integers(1, 6))
                idx2 = [["a", [int(i) for i in self.rng.integers(-n, n, m)]]]
                return {"k": "addat", "a": a, "idx": idx2, "v": self.scalar()}, self.approx[a]
        return {"k": "setitem", "a": a, "idx": idx, "v": v}, approx

    def _create(self, regs):
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            shape = [int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3)))]
            dt = "float64" if self.profile == "grad" else self.choice(DTYPES)
            return {"k": "full", "shape": shape, "v": self.scalar(), "dtype": dt}, False
        if r < 0.5:
            a = self.pick(regs, lambda q: isinstance(q, np.ndarray))
            if a is None:
                return None
            fn = self.choice(["zeros_like", "ones_like", "empty_like"])
            fn = "zeros_like" if fn == "empty_like" else fn
            return {"k": "zeros_like", "fn": fn, "a": a}, False
        if self.profile == "grad":
            return None
        if r < 0.7:
            dt = self.choice(["int64", "float32", "int8", "float64", "uint16"])
            return {"k": "arange", "n": int(rng.integers(1, 6)), "dtype": dt}, dt.startswith("f")
        if r < 0.85:
            n = int(rng.integers(1, 6))
            return {"k": "linspace", "lo": -1.0, "hi": float(rng.integers(1, 4)), "n": n}, True
        n, m = int(rng.integers(1, 5)), self.choice([None, 2, 4])
        kk = int(rng.integers(-1, 2))
        return {"k": "eye", "n": n, "m": m, "kk": kk, "dtype": self.choice(DTYPES)}, False

    def _copy(self, regs):
        a = self.pick(regs, lambda q: isinstance(q, np.ndarray))
        return None if a is None else ({"k": "copy", "a": a}, self.approx[a])

    def _pyop(self, regs):
        a = self.pick(regs, lambda q: np.ndim(q) >= 1 and _kind(q) in "if", exact=True)
        if a is None:
            return None
        return {"k": "pyop", "fn": self.choice(["sort", "cumsum_flip"]), "a": a}, (
            self.approx[a] or _kind(regs[a]) == "f"
        )

    def _loop(self, regs):
        """A loop carrying one array register through one to three steps, two to four
        times; a loop in its body too, now and then (two deep at most)."""
        if self.depth >= 2 or (self.depth == 1 and self.rng.random() < 0.5):
            return None
        # an array, or a NumPy scalar (a sum carried from iteration to iteration)
        c = self.pick(regs, lambda r: isinstance(r, np.ndarray | np.generic))
        if c is None:
            return None
        base, trips, outer_approx = len(regs), int(self.rng.integers(2, 5)), self.approx
        outer = (self.trips, self.enclosing)
        enclosing = self.enclosing
        body, approx = [], outer_approx[c]
        self.trips, self.enclosing = trips, lambda: self._body_regs(c, body, enclosing)
        self.loop_bases.append(base)
        boosted = ("getitem", "setitem", "branch")  # indices that move; tests in every iteration
        self.body_kinds = {k: 4 * self.kinds[k] for k in boosted if k in self.kinds}
        self.approx = list(outer_approx[:base]) + [outer_approx[c]]
        self.depth += 1
        try:
            for _ in range(int(self.rng.integers(1, 4))):
                local = self._body_regs(c, body, enclosing)
                # indexing is drawn more often in a body: its indices may move with the loop
                kinds, weights = zip(*{**self.kinds, **self.body_kinds}.items())
                k = kinds[int(self.rng.choice(len(kinds), p=np.array(weights) / sum(weights)))]
                res = getattr(self, f"_{k}")(local)
                if res is None:
                    continue
                st, ap = res
                try:
                    with quiet():
                        run_step(local, st)
                except Exception:
                    continue
                body.append(st)
                approx = approx or ap
                self.approx += [ap] * (len(local) - len(self.approx))
        finally:
            self.approx, self.depth = outer_approx, self.depth - 1
            (self.trips, self.enclosing), _ = outer, self.loop_bases.pop()
        if not body:
            return None
        last = self._body_regs(c, body, enclosing)[-1]
        if not isinstance(last, np.ndarray | np.generic) or np.shape(last) != np.shape(regs[c]):
            return None
        if last.dtype != regs[c].dtype:
            return None
        kinds = {b["k"] for b in body}
        if "branch" in kinds and kinds & IN_PLACE_STEPS:  # the value tested might change
            return None
        st = {"k": "loop", "carry": c, "base": base, "trips": trips, "body": body}
        if trips == 3:  # a third of the loops (no draw: the programs of a seed stay as they were)
            st["while"] = True
        elif trips == 4 and not self.depth and _kind(regs[c]) in "fiu" and "branch" not in kinds:
            try:
                stop = break_stop(self._carried_sums(st, enclosing))
            except Exception:  # a later iteration fails (-1 into a uint8): not a valid loop
                return None
            if stop is not None:  # a loop of the program (not in a body) left by a break
                st["stop"] = stop
        return st, approx

    def _carried_sums(self, st, enclosing) -> list:
        """The sum of the carried value after each iteration of loop ``st``."""
        regs, sums = enclosing(), []
        carry = regs[st["carry"]]
        with quiet(), np.errstate(all="ignore"):
            for t in range(st["trips"]):
                carry = _iteration(regs, st, carry, t)
                sums.append(float(np.sum(carry)))
        return sums

    def _body_regs(self, c, body, enclosing):
        """The registers of a loop body after ``body``'s steps: those of ``enclosing()`` (the
        program's, or the enclosing body's) and the carried one, register ``c``."""
        regs = enclosing()
        local = regs + [regs[c]]
        with quiet():
            for st in body:
                run_step(local, st)
        return local

    # -- the whole program
    def build(self, n_steps):
        rng, prof = self.rng, self.profile
        base_rank = int(rng.integers(1, 4))
        top = 3 if prof == "cuda" else 5
        base = [int(d) for d in rng.integers(1, top + 1, base_rank)]
        if rng.random() < 0.05:
            base[int(rng.integers(0, base_rank))] = 0  # an empty array
        n_in = int(rng.integers(1, 4))
        for _ in range(n_in):
            rank = int(rng.integers(0, base_rank + 1))
            shape = [d if rng.random() > 0.25 else 1 for d in base[base_rank - rank :]]
            if prof == "grad":
                d = {"shape": shape, "dtype": "float64", "kind": "smooth"}
            else:
                dt = DTYPES[
                    int(rng.choice(len(DTYPES), p=np.array(DTYPE_WEIGHTS) / sum(DTYPE_WEIGHTS)))
                ]
                d = {"shape": shape, "dtype": dt}
                if rng.random() < 0.04:
                    d = {"shape": [], "dtype": "pyfloat"}
            d["layout"] = self.choice(["c", "c", "nc", "neg"])
            self.prog["inputs"].append(d)
            self.approx.append(False)
        if prof != "grad" and self.python_rng.random() < 0.2:  # Python's scalar arithmetic
            self.prog["inputs"].append({"shape": [], "dtype": "pyfloat", "layout": "c"})
            self.approx.append(False)
        self.max_size = 400 if prof == "cuda" else 2000
        if prof == "grad":
            self.kinds = {
                "unary": 4, "binary": 5, "inplace": 1, "where": 1, "compare": 1, "clip": 1,
                "reduce": 3, "scan": 1, "matmul": 2, "reshape": 3, "join": 2, "getitem": 3,
                "setitem": 2, "create": 1, "copy": 1, "loop": 2, "stencil": 1, "branch": 0.5,
            }  # fmt: skip
        else:
            self.kinds = {
                "unary": 6, "binary": 8, "inplace": 3, "uout": 1, "where": 1, "clip": 1,
                "astype": 2, "complexpart": 1.5, "setpart": 1, "reduce": 4, "arg": 1, "scan": 1,
                "matmul": 2, "reshape": 4, "join": 3, "getitem": 4, "setitem": 4, "create": 1,
                "copy": 1, "pyop": 0.3, "loop": 3, "stencil": 2, "branch": 1, "numpy": 1,
            }  # fmt: skip
        tries = 0
        while len(self.prog["steps"]) < n_steps and tries < n_steps * 8:
            tries += 1
            self.step()
        regs = self.regs()
        n_in = len(self.prog["inputs"])
        outs = [i for i in range(len(regs)) if not isinstance(regs[i], float) or i >= n_in]
        if prof == "grad":
            outs = [i for i in outs if i >= n_in and _kind(regs[i]) == "f"] or [0]
        self.prog["outputs"] = outs
        self.prog["approx"] = [bool(self.approx[i]) for i in outs]
        return self.prog


# ---------------------------------------------------------------------- stencil chains
CHAIN_RATE = 0.15  # the share of the fuzz loop's programs that are stencil chains


def chain_chosen(seed) -> bool:
    """Whether the fuzz loop makes seed ``seed``'s program a stencil chain, from a stream of
    the seed's own: ``generate(seed, profile)`` stays the program it was."""
    return bool(np.random.default_rng([seed, 4]).random() < CHAIN_RATE)


def shifted_reads(prog) -> int:
    """How many slices of ``prog`` (not of whole axes) read a value the program computed."""
    n_in = len(prog["inputs"])
    part = lambda e: e[0] == "s" and (e[1] not in (None, 0) or e[2] is not None)  # noqa: E731
    return sum(
        st["k"] == "getitem" and st["a"] >= n_in and any(part(e) for e in st["idx"])
        for st in _all_steps(prog["steps"])
    )


class _ChainFailed(Exception):
    """A step of a stage did not run: the stage is dropped."""


class _Chain:
    """A multi-stage stencil chain (issue 22), drawn from a stream of its own: stages compute
    values from earlier ones read through slices at constant offsets (a Laplacian, fluxes as
    differences of it, limiters ``np.where(f * d > 0, 0, f)``, clamps by neighbours' minimum
    and maximum, quotients, ``exp``), and a final update is returned or written into a region
    of an array (``out[1:-1, 1:-1] = ...``). Grids are 1-D to 3-D with odd sizes, axes of 1 and
    2 (empty results too); inputs float32 or float64 in any layout, a broadcast coefficient
    beside them. Only the final values (now and then one intermediate) are results, so the
    backends may fuse the stages across their offsets.

    A *field* is a register holding a value over a window of the grid: on axis ``k`` the grid
    points ``lo[k]`` to ``n[k] - hi[k]``; an axis of 1 where the grid's is longer broadcasts."""

    SIZES = (3, 4, 5, 6, 7, 8, 9, 11, 13, 17, 24, 33)
    CAP = {"full": 600, "cuda": 160, "grad": 120}  # grid points (finite differences: per input)

    def __init__(self, gen):
        self.gen, self.grad = gen, gen.profile == "grad"
        self.rng = np.random.default_rng([gen.seed, 4, 1])
        gen.chain, gen.max_size = True, self.CAP[gen.profile] * 4
        self.fields: list = []  # the inputs on the grid, then each stage's value
        self.coefs: list = []  # broadcast coefficients (fields too)

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p) -> bool:
        return bool(self.rng.random() < p)

    # -- the grid and the inputs
    def build(self):
        self.n = self._grid()
        self.dtype = "float64" if self.grad else self.choice(["float32", "float64"])
        for _ in range(int(self.rng.integers(1, 3))):
            self.fields.append(self._input(self.n))
        if self.chance(0.4):
            self.coefs.append(self._input(self._coef_shape()))
        elif not self.grad and self.chance(0.15):
            self.coefs.append(self._input(None))
        for i in range(int(self.rng.integers(2, 5))):
            kinds = ["star", "diff", "mix"] if i == 0 else list(self.STAGES)
            self._stage(self.choice(kinds))
        outs = self._final()
        made = [f["r"] for f in self.fields if f["r"] >= len(self.gen.prog["inputs"])]
        if made and self.chance(0.25):  # an intermediate value is a result too
            outs = sorted({*outs, self.choice(made)})
        prog = self.gen.prog
        prog["chain"], prog["outputs"] = True, outs
        prog["approx"] = [bool(self.gen.approx[i]) for i in outs]
        return prog

    def _grid(self):
        d = int(self.rng.choice([1, 2, 3], p=[0.25, 0.4, 0.35]))
        n = []
        for _ in range(d):
            r = self.rng.random()
            n.append(1 if r < 0.07 else 2 if r < 0.15 else int(self.choice(self.SIZES)))
        while int(np.prod(n)) > self.CAP[self.gen.profile]:
            k = int(np.argmax(n))
            n[k] = max(3, n[k] * 2 // 3)
        return n

    def _coef_shape(self):
        if self.chance(0.4):  # fewer dims: the last axis
            return [self.n[-1]]
        return [m if self.chance(0.4) else 1 for m in self.n]

    def _input(self, shape):
        """An input (``shape`` None: a Python float) as a field over the whole grid."""
        g = self.gen
        if shape is None:
            d = {"shape": [], "dtype": "pyfloat"}
        else:
            dt = (
                self.dtype if self.grad or self.chance(0.8) else self.choice(["float32", "float64"])
            )
            kind = "smooth" if self.grad else self.choice(["normal", "clean"])
            d = {"shape": shape, "dtype": dt, "kind": kind}
            d["layout"] = self.choice(["c", "nc", "neg", "t"])
        g.prog["inputs"].append(d)
        g.approx.append(False)
        return self._field(len(g.approx) - 1, [0] * len(self.n), [0] * len(self.n), shape or [])

    @staticmethod
    def _field(r, lo, hi, shape):
        return {"r": r, "lo": list(lo), "hi": list(hi), "shape": list(shape)}

    # -- reading fields at offsets
    def _broadcasts(self, f, k):
        lead = len(self.n) - len(f["shape"])
        return k < lead or (f["shape"][k - lead] == 1 and self.n[k] != 1)

    def _window(self, reads):
        """The window of the grid where every (field, offset) of ``reads`` is defined: (lo,
        hi); the stage is dropped where it would be shorter than empty."""
        lo, hi = [], []
        for k, m in enumerate(self.n):
            on = [(f, o[k]) for f, o in reads if not self._broadcasts(f, k)]
            lo.append(max([0] + [f["lo"][k] - o for f, o in on]))
            hi.append(max([0] + [f["hi"][k] + o for f, o in on]))
            if m - lo[k] - hi[k] < 0:
                raise _ChainFailed
        return lo, hi

    def _index(self, f, off, lo, hi):
        """Slices of field ``f`` at offset ``off`` over the window (lo, hi), spelled in the
        ways NumPy code spells them (``a[1:-1]``, ``a[1:J+1]``, ``a[:-2]``, ``a[-3:]``)."""
        idx, lead = [], len(self.n) - len(f["shape"])
        for j, m in enumerate(f["shape"]):
            k = j + lead
            if self._broadcasts(f, k):
                idx.append(["s", None, None, None])
                continue
            start = lo[k] + off[k] - f["lo"][k]
            stop = start + self.n[k] - lo[k] - hi[k]
            if start == 0:
                start = None if self.chance(0.6) else 0
            elif start < m and self.chance(0.15):
                start -= m
            if stop == m:
                stop = None if self.chance(0.6) else m
            elif self.chance(0.7):
                stop -= m
            idx.append(["s", start, stop, 1 if self.chance(0.1) else None])
        return idx

    def _read(self, f, off, win):
        if not f["shape"]:
            return f["r"]  # a Python float
        idx = self._index(f, off, *win)
        if all(e[1:] == [None, None, None] for e in idx):
            return f["r"]
        return self._emit({"k": "getitem", "a": f["r"], "idx": idx}, self.gen.approx[f["r"]])

    def _zero(self):
        return [0] * len(self.n)

    def _along(self, k, o):
        off = self._zero()
        off[k] = o
        return off

    def _axes_with_room(self, f, width):
        """Grid axes where ``f`` keeps room for a stencil ``width`` points wide (rarely: one
        where it becomes empty)."""
        left = [m - f["lo"][k] - f["hi"][k] for k, m in enumerate(self.n)]
        axes = [k for k, m in enumerate(left) if m > width]
        if not axes or self.chance(0.05):
            axes = [k for k, m in enumerate(left) if m >= width] or axes
        return axes

    # -- steps
    def _emit(self, st, approx):
        if not self.gen.try_step(st, approx):
            raise _ChainFailed
        return len(self.gen.approx) - 1

    def _approx(self, *regs):
        return any(self.gen.approx[r] for r in regs if not isinstance(r, dict))

    def _op(self, fn, a, b, swap=False):
        st = {"k": "op" if fn in OPERATORS else "binary", "fn": fn, "a": a, "b": b}
        if swap:
            st["swap"] = True
        return self._emit(st, self._approx(a, b))

    def _unary(self, fn, a):
        return self._emit({"k": "unary", "fn": fn, "a": a}, self._approx(a) or fn == "exp")

    def _number(self, v):
        if self.grad or self.chance(0.7):
            return {"t": "float", "v": float(v)}
        if float(v).is_integer() and self.chance(0.5):
            return {"t": "int", "v": int(v)}
        return {"t": self.choice(["float32", "float64"]), "v": float(v)}

    def _coef(self, win):
        """A coefficient over the window: a number or a broadcast input."""
        if self.coefs and self.chance(0.6):
            return self._read(self.choice(self.coefs), self._zero(), win)
        return self._number(self.choice(self.COEFS))

    COEFS = (0.5, 0.25, 0.1, 2.0, -1.5)

    # -- stages
    STAGES = ("star", "diff", "limit", "clamp", "ratio", "expo", "mix")

    def _stage(self, kind):
        """Append a field made by stage ``kind`` from the latest field (now and then an
        earlier one); nothing where it cannot be made."""
        f = self.fields[-1] if self.chance(0.7) else self.choice(self.fields)
        try:
            made = getattr(self, f"_{kind}")(f)
        except _ChainFailed:
            return
        if made is not None:
            self.fields.append(self._field(made[0], *made[1], self._shape_of(made[1])))

    def _shape_of(self, win):
        lo, hi = win
        return [m - a - b for m, a, b in zip(self.n, lo, hi)]

    def _star(self, f):
        """A Laplacian: ``c * f - (f[+1] + f[-1])`` summed over some axes (radius 1 or 2)."""
        r = 1 if self.chance(0.8) else 2
        axes = self._axes_with_room(f, 2 * r)
        if not axes:
            return None
        axes = sorted({self.choice(axes) for _ in range(len(axes))})
        nbrs = [self._along(k, s * r) for k in axes for s in (1, -1)]
        win = self._window([(f, o) for o in [self._zero(), *nbrs]])
        c = self._read(f, self._zero(), win)
        if self.chance(0.6):
            v = self._op("*", c, self._number(2 * len(axes)), swap=self.chance(0.5))
            for o in nbrs:
                v = self._op("-", v, self._read(f, o, win))
        else:
            v = self._read(f, nbrs[0], win)
            for o in nbrs[1:]:
                v = self._op("+", v, self._read(f, o, win))
            v = self._op("-", v, self._op("*", c, self._number(2 * len(axes))))
        return v, win

    def _shifted_pair(self, f):
        """Two offsets of ``f`` differing along an axis with room (others mixed now and then)."""
        axes = self._axes_with_room(f, 2)
        if not axes:
            return None
        k = self.choice(axes)
        o1, o2 = self.choice([(1, 0), (0, -1), (1, -1), (0, 1), (-1, 0), (2, 0), (-2, 1)])
        a, b = self._along(k, o1), self._along(k, o2)
        for j in self._axes_with_room(f, 1):
            if j != k and self.chance(0.25):  # a diagonal: f[1:, :-1] - f[:-1, 1:]
                a[j] = self.choice([1, -1])
        return a, b

    def _diff(self, f):
        """A flux: the difference of ``f`` at two offsets, times a coefficient now and then."""
        pair = self._shifted_pair(f)
        if pair is None:
            return None
        win = self._window([(f, o) for o in pair])
        v = self._op("-", self._read(f, pair[0], win), self._read(f, pair[1], win))
        if self.chance(0.4):
            v = self._op("*", v, self._coef(win), swap=self.chance(0.3))
        return v, win

    def _limit(self, f):
        """A limiter: ``np.where(f * (g[+1] - g[0]) > 0, 0, f)`` with ``g`` a field of exact
        values (the comparison must not see rounding)."""
        exact = [g for g in self.fields if not self.gen.approx[g["r"]]]
        if self.gen.approx[f["r"]] or not exact:
            return None
        g = self.choice(exact)
        pair = self._shifted_pair(g)
        if pair is None:
            return None
        win = self._window([(f, self._zero()), (g, pair[0]), (g, pair[1])])
        ft = self._read(f, self._zero(), win)
        dg = self._op("-", self._read(g, pair[0], win), self._read(g, pair[1], win))
        prod = self._op("*", ft, dg)
        zero = {"t": "float", "v": 0.0}
        if self.chance(0.5):
            cond = self._op("greater", prod, zero)
            st = {"k": "where", "c": cond, "a": ft, "b": zero, "swap": True}
        else:
            cond = self._op("less_equal", prod, zero)
            st = {"k": "where", "c": cond, "a": ft, "b": zero}
        return self._emit(st, False), win

    def _clamp(self, f):
        """``f`` kept between its neighbours' minimum and maximum along an axis."""
        axes = self._axes_with_room(f, 2)
        if not axes:
            return None
        k = self.choice(axes)
        offs = [self._along(k, -1), self._along(k, 1), self._zero()]
        win = self._window([(f, o) for o in offs])
        a, b, c = (self._read(f, o, win) for o in offs)
        low, high = self._op("minimum", a, b), self._op("maximum", a, b)
        return self._op("minimum", self._op("maximum", c, low), high), win

    def _ratio(self, f):
        """``f / (g * g + c)`` with ``g`` a field at a small offset (``f / g`` now and then)."""
        g = self.choice(self.fields)
        off = [
            self.choice([-1, 0, 1]) if k in self._axes_with_room(g, 1) else 0
            for k in range(len(self.n))
        ]
        win = self._window([(f, self._zero()), (g, off)])
        ft, gt = self._read(f, self._zero(), win), self._read(g, off, win)
        if self.grad or self.chance(0.6):
            den = self._op("+", self._op("*", gt, gt), self._number(self.choice([1.0, 0.5])))
        else:
            den = gt
        return self._op("/", ft, den), win

    def _expo(self, f):
        """A weight ``exp(-f[o]**2)`` (times ``f`` now and then): rounding from here on."""
        pair = self._shifted_pair(f)
        off = pair[0] if pair and self.chance(0.6) else self._zero()
        win = self._window([(f, off), (f, self._zero())])
        w = self._unary(
            "exp", self._unary("negative", self._unary("square", self._read(f, off, win)))
        )
        if self.chance(0.5):
            w = self._op("*", self._read(f, self._zero(), win), w)
        return w, win

    def _mix(self, f):
        """``f`` and another field at different offsets, added, multiplied, or compared."""
        g = self.choice(self.fields)
        pair = self._shifted_pair(f) or (self._zero(), self._zero())
        win = self._window([(f, pair[0]), (g, pair[1])])
        fn = self.choice(["+", "-", "*", "add", "maximum", "minimum"])
        return self._op(fn, self._read(f, pair[0], win), self._read(g, pair[1], win)), win

    # -- the update
    def _final(self):
        """``x[w] - c * v[w]`` for the last field ``v`` and an input ``x``: returned, or written
        into the window of a copy of ``x``, of zeros, or of ``x`` itself; the results."""
        x, v = self.choice(self.fields[: self._n_grid_inputs()]), self.fields[-1]
        if v is x:
            return [x["r"]]
        win = self._window([(x, self._zero()), (v, self._zero())])
        try:
            upd = self._scaled(v, win)
            new = self._op(self.choice(["-", "+"]), self._read(x, self._zero(), win), upd)
            mode = self.choice(["return", "copy", "zeros", "into"])
            if mode == "return" or (mode == "into" and self.grad):
                return [new]
            out = (
                x["r"]
                if mode == "into"
                else self._emit(
                    {"k": "copy", "a": x["r"]}
                    if mode == "copy"
                    else {"k": "zeros_like", "fn": "zeros_like", "a": x["r"]},
                    self.gen.approx[x["r"]],
                )
            )
            idx = self._index(x, self._zero(), *win)
            self._emit({"k": "setitem", "a": out, "idx": idx, "v": new}, self.gen.approx[new])
            return [out]
        except _ChainFailed:
            return [v["r"]]

    def _scaled(self, v, win):
        """``v[w] * c``, the change of the update ``x[w] - c * v[w]``."""
        return self._op("*", self._read(v, self._zero(), win), self._coef(win))

    def _n_grid_inputs(self):
        return sum(f["r"] < len(self.gen.prog["inputs"]) for f in self.fields)


# ---------------------------------------------------------------------- time-stepped chains
LOOP_CHAIN_RATE = 0.12  # the share of the fuzz loop's other programs that are time-stepped chains


def loop_chain_chosen(seed) -> bool:
    """Whether the fuzz loop makes seed ``seed``'s program a time-stepped stencil chain
    (``_LoopChain``), from a stream of the seed's own; never a seed ``chain_chosen`` picks."""
    rate = np.random.default_rng([seed, 8]).random()
    return not chain_chosen(seed) and bool(rate < LOOP_CHAIN_RATE)


class _LoopChain(_Chain):
    """A time-stepped stencil chain (issues 15 and 22): a ``_Chain``'s stages and update as the
    body of a ``loop`` step, ``for t in range(trips)``, over the grid's state ``u`` (the input
    itself, its argument written into, or a copy of it). The update is written into ``u``
    (``u[1:-1, 1:-1] = u[1:-1, 1:-1] + c * lap``), into ``u`` from a snapshot the stages read
    (``un = u.copy(); u[1:] = un[1:] - c * (un[1:] - un[:-1])``), into a new array carried on
    (a copy of ``u`` or zeros), or added to ``u`` padded (``u = u - np.pad(c * v, ...)``). Now
    and then a second state ``v`` is written in the same steps by a stage's value (``U`` and
    ``V`` of Gray-Scott). The other inputs (fields, broadcast coefficients) are
    loop-invariant; numbers move with the iteration now and then (``t * dt``, ``0.5 + 0.125 *
    t``); a stage's value (or its sum) of every iteration is stacked after the loop now and
    then. Drawn from a stream of its own."""

    UPDATES = ("into", "snapshot", "fresh", "pad")
    COEFS = (0.1, 0.25, 0.05, 0.5, -0.2)  # time steps: small

    def __init__(self, gen, attempt=0):
        super().__init__(gen)
        self.rng = np.random.default_rng([gen.seed, 8, 1, attempt])
        self.body = None  # the loop body's steps while they are made
        self.rough = False  # exp stages: the state is approximate (from the second iteration)
        self.second = None  # the register of a second state the loop writes, if any

    def build(self):
        g = self.gen
        self.n = self._grid()
        self.dtype = "float64" if self.grad else self.choice(["float32", "float64"])
        x, y = self._inputs()
        into_argument = not self.grad and self.chance(0.3)
        c = self._state(x, into_argument)
        self.second = None if y is None else self._state(y, into_argument)
        self.rough = self.chance(0.3)
        self.trips = int(self.rng.integers(2, 5 if self.grad else 6))
        st = self._add_loop(*self._loop(c, self.trips))
        outs = list(range(len(g.approx) - 1 - ("stack" in st), len(g.approx)))
        if self.second is not None:
            outs.insert(0, self.second)
        prog = g.prog
        prog["loop_chain"], prog["outputs"] = True, outs
        prog["approx"] = [bool(g.approx[i]) for i in outs]
        return prog

    def _inputs(self):
        """The state's input, the loop-invariant ones, and a second state's (or None)."""
        x = self._input(self.n)
        if self.chance(0.4):  # a field every iteration reads unchanged (a diffusivity)
            self.fields.append(self._input(self.n))
        if self.chance(0.5):
            self.coefs.append(self._input(self._coef_shape()))
        elif not self.grad and self.chance(0.15):
            self.coefs.append(self._input(None))
        return x, self._input(self.n) if self.chance(0.3) else None

    def _add_loop(self, st, approx):
        """Loop step ``st`` added to the program (without its stack where that is too large
        for finite differences)."""
        if self.gen.try_step(st, approx):
            return st
        if "stack" not in st:
            raise _ChainFailed
        del st["stack"]
        if not self.gen.try_step(st, approx[:1]):
            raise _ChainFailed
        return st

    def _state(self, x, into_argument):
        """The register a state starts from: input ``x`` itself, or a copy of it."""
        return x["r"] if into_argument else self._emit({"k": "copy", "a": x["r"]}, False)

    def _loop(self, c, trips):
        """The ``loop`` step carrying register ``c`` and the approx of its registers."""
        g = self.gen
        outer, base = g.approx, len(g.approx)
        g.approx = [*outer, self.rough]
        self.body, self.carry = [], c
        try:
            mode = self.choice(self.UPDATES)
            state = self._field(base, *self._flat())
            if mode == "snapshot":
                state["r"] = self._emit({"k": "copy", "a": base}, self.rough)
            other = None if self.second is None else self._field(self.second, *self._flat())
            if other is not None:
                g.approx[self.second] = self.rough
                self.fields.append(other)
            self.fields.append(state)
            made = self._stages(state)
            nxt, nxt_approx = self._step(mode, state, base)
            if nxt_approx and not self.rough:
                raise _ChainFailed  # a stage the state's exactness was assumed in is wrong
            if other is not None:
                self._update_second(other, made)
            if mode in ("fresh", "pad"):  # (its value is no buffer written later)
                made.append(nxt)
            stack = self._stacked(made)
            st = {"k": "loop", "carry": c, "base": base, "trips": trips, "body": self.body}
            if nxt != len(g.approx) - 1:
                st["next"] = nxt
            approx = [self.rough]
            if stack is not None:
                st["stack"] = stack
                approx.append(g.approx[stack])
            return st, approx
        finally:
            g.approx, self.body = outer, None

    def _stages(self, state) -> list:
        """One to three stages from the state (at least one): their registers."""
        kinds = [k for k in self.STAGES if self.rough or k != "expo"]
        n = len(self.fields)
        for i in range(int(self.rng.integers(1, 4))):
            self._stage(self.choice(["star", "diff", "mix"] if i == 0 else kinds))
        if len(self.fields) == n:
            r, win = self._mix(state)
            self.fields.append(self._field(r, *win, self._shape_of(win)))
        return [f["r"] for f in self.fields[n:]]

    def _flat(self):
        """The window, shape of a field over the whole grid."""
        return self._zero(), self._zero(), self.n

    def _update_second(self, other, made):
        """The second state's update ``v[w] = v[w] - c * f[w]`` by a stage's value ``f``
        (none where its window is empty or it would round)."""
        g, r = self.gen, self.choice(made)
        f = next(f for f in self.fields if f["r"] == r)
        try:
            win = self._window([(other, self._zero()), (f, self._zero())])
            upd = self._scaled(f, win)
            new = self._op(self.choice(["-", "+"]), self._read(other, self._zero(), win), upd)
            if g.approx[new] and not self.rough:
                return
            idx = self._index(other, self._zero(), *win)
            self._emit({"k": "setitem", "a": other["r"], "idx": idx, "v": new}, g.approx[new])
        except _ChainFailed:
            return

    def _step(self, mode, state, base):
        """The update of the state by the last stage's value: the body register carried on
        and whether it is approximate."""
        g, v = self.gen, self.fields[-1]
        win = self._window([(state, self._zero()), (v, self._zero())])
        upd = self._scaled(v, win)
        sign = self.choice(["-", "+"])
        if mode == "pad":  # u = u - np.pad(c * v, ...): the state rebound, of its own shape
            pw = [[lo, hi] for lo, hi in zip(*win)]
            p = self._emit({"k": "pad", "a": upd, "pw": pw, "value": 0.0}, g.approx[upd])
            nxt = self._op(sign, base, p)
        else:
            new = self._op(sign, self._read(state, self._zero(), win), upd)
            nxt = base
            if mode == "fresh":
                zeros = {"k": "zeros_like", "fn": "zeros_like", "a": base}
                fresh = {"k": "copy", "a": base} if self.chance(0.5) else zeros
                nxt = self._emit(fresh, self.rough)
            idx = self._index(state, self._zero(), *win)
            self._emit({"k": "setitem", "a": nxt, "idx": idx, "v": new}, g.approx[new])
            g.approx[nxt] = g.approx[nxt] or g.approx[new]
        local = g._body_regs(self.carry, self.body, g.regs)
        if np.shape(local[nxt]) != np.shape(local[base]) or local[nxt].dtype != local[base].dtype:
            raise _ChainFailed  # (a float64 coefficient promoted a float32 state)
        return nxt, g.approx[nxt]

    def _stacked(self, made):
        """Now and then a register of ``made`` (or its sum) kept from every iteration."""
        if not made or not self.chance(0.35):
            return None
        r = self.choice(made)
        if self.chance(0.3):
            r = self._emit(
                {"k": "reduce", "fn": "sum", "a": r, "axis": None, "keepdims": False}, True
            )
        return r

    def _emit(self, st, approx):
        if self.body is None:
            return super()._emit(st, approx)
        g = self.gen
        local = g._body_regs(self.carry, self.body, g.regs)
        n = len(local)
        try:
            with quiet():
                run_step(local, st)
        except Exception:
            raise _ChainFailed from None
        if len(local) > n and np.size(local[-1]) > g.max_size:
            raise _ChainFailed
        if self.grad and len(local) > n and _kind(local[-1]) not in "fb":
            raise _ChainFailed
        self.body.append(st)
        g.approx += [approx] * (len(local) - n)
        return len(g.approx) - 1

    def _number(self, v):
        """A number; in the loop body, now and then one moving with the iteration (``t *
        dt``, ``v + dt * t``, ``0.1 + 0.05 * t`` whose values are a progression only up to
        rounding, ``v + dt * t * t``, ``v + dt * math.sin(t)``): every one of them rolls."""
        spec = super()._number(v)
        if self.body is None or not self.chance(0.3):
            return spec
        if spec["t"] == "int":
            return {**spec, "step": self.choice([1, -1])}
        moving = {**spec, "step": self.choice([0.05, -0.02, 0.1, 0.125])}
        if self.chance(0.5):
            moving["v"] = 0.0  # t * dt
        if self.chance(0.3):
            moving["curve"] = self.choice(["square", "sin"])
        return moving


def _loop_chain(seed, profile):
    """Seed ``seed``'s time-stepped chain (``_LoopChain``): the first of a few draws that
    makes one, else a stencil chain."""
    for attempt in range(8):
        try:
            return _LoopChain(_Gen(seed, profile), attempt).build()
        except _ChainFailed:
            continue
    return _Chain(_Gen(seed, profile)).build()


def generate(seed, profile="full", n_steps=None, chain=False, loop_chain=False):
    """A random program (JSON-able dict). ``profile``: "full", "cuda" (small), "grad" (float64,
    smooth ops, for finite differences). ``chain``: a multi-stage stencil chain of that profile
    instead (``_Chain``; ``n_steps`` does not apply); ``loop_chain``: a time-stepped one
    (``_LoopChain``)."""
    rng = np.random.default_rng([seed, 0])
    if n_steps is None:
        n_steps = int(rng.integers(8, 40 if profile == "full" else 20))
    if loop_chain:
        prog = _loop_chain(seed, profile)
    elif chain:
        prog = _Chain(_Gen(seed, profile)).build()
    else:
        prog = _Gen(seed, profile).build(n_steps)
    prog["names"], prog["captured"] = _pick_names(prog)
    return prog


def _random_factorisation(rng, n):
    if n == 0:
        return [0, int(rng.integers(1, 3))]
    dims = []
    for p in (2, 3, 5, 7, 2, 3):
        while n % p == 0 and rng.random() < 0.6:
            dims.append(p)
            n //= p
    dims.append(n)
    rng.shuffle(dims)
    if rng.random() < 0.3:
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
    if rng.random() < 0.2 and len(dims) > 1:
        dims[int(rng.integers(0, len(dims)))] = -1
    return [int(d) for d in dims]


def _kind(x):
    return np.asarray(x).dtype.kind


def _broadcastable(s, t, strict=False):
    """``s`` broadcasts with ``t`` (``strict``: broadcasts *to* ``t``)."""
    if strict and len(s) > len(t):
        return False
    for a, b in zip(reversed(s), reversed(t)):
        if strict and a not in (1, b):
            return False
        if a != b and 1 not in (a, b):
            return False
    return True


def _shares(a, b):
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.shares_memory(a, b)


def _snapshot(r):
    return (np.array(r, copy=True), np.shape(r)) if isinstance(r, np.ndarray) else (r, None)


def _same_snapshot(r, snap):
    if isinstance(r, np.ndarray):
        return isinstance(snap[0], np.ndarray) and bits_equal(r, snap[0])
    return r is snap[0] or bits_equal(np.asarray(r), np.asarray(snap[0]))


# ---------------------------------------------------------------------- comparing results
def _close(a, b, rtol) -> bool:
    """Equal NaN/inf positions, finite values within ``rtol`` of the array's scale."""
    if a.dtype.kind == "c":
        # which non-finite value a complex product is (inf+infj, nan+infj, nan+nanj) depends
        # on the algorithm, and NumPy's BLAS and its own loops differ there (seed 7101451: a
        # dot of a reversed array and of its contiguous copy): only the positions must agree
        bad_a, bad_b = ~np.isfinite(a), ~np.isfinite(b)
        if not np.array_equal(bad_a, bad_b):
            return False
        a, b = a[~bad_a], b[~bad_b]
        return _close(a.real, b.real, rtol) and _close(a.imag, b.imag, rtol)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    fa, fb = np.isfinite(a), np.isfinite(b)
    big = ~(fa & fb) & ~np.isnan(a)
    if not np.array_equal(a[big & ~fa & ~fb], b[big & ~fa & ~fb]):
        return False
    # a finite value on one side and inf on the other: only near overflow
    one = (fa ^ fb) & ~np.isnan(a)
    finfo = np.finfo(a.dtype)
    if np.any(one):
        edge = np.where(fa, np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))[one]
        if np.any(edge < float(finfo.max) * 0.01):
            return False
    both = fa & fb
    x, y = a[both].astype(np.float64), b[both].astype(np.float64)
    if x.size == 0:
        return True
    scale = max(1.0, float(np.max(np.abs(x))))
    return bool(np.all(np.abs(x - y) <= rtol * (np.abs(x) + np.abs(y)) + rtol * scale))


def same_value(got, want, approx, any_zero=False, loose=False) -> str | None:
    """None if ``got`` matches ``want``; else what differs (``any_zero``: -0.0 may be 0.0;
    ``loose``: float32 rounding may have reached a float64 value). Approximate float16 values
    may differ by two of their ulps (a sum over dask chunks rounds in another order)."""
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype != w.dtype:
        return f"dtype {g.dtype}, expected {w.dtype}"
    if g.shape != w.shape:
        return f"shape {g.shape}, expected {w.shape}"
    if bits_equal(g, w):
        return None
    if approx and w.dtype.kind in "fc":
        rtol = 2e-3 if loose or w.dtype in (np.float16, np.float32, np.complex64) else 1e-7
        if _close(g, w, rtol):
            return None
    if w.dtype.kind in "fc" and not approx:
        # exact computations: allow only the sign of a zero to differ
        if np.array_equal(g, w, equal_nan=True):
            return None if any_zero else "signed zero differs"
    diff = np.argwhere(np.atleast_1d(~_elementwise_equal(g, w)))
    at = tuple(int(d) for d in diff[0]) if len(diff) and g.ndim else ()
    return f"values differ (first at {at}: got {g[at]!r}, expected {w[at]!r})"


def _elementwise_equal(g, w):
    if w.dtype.kind in "fc":
        return (g == w) | (np.isnan(g) & np.isnan(w))
    return g == w


class Failure(Exception):
    """A check failed: ``check`` names it (interp, numpy, cpu, cuda, grad, crash)."""

    def __init__(self, check, detail):
        super().__init__(f"[{check}] {detail}")
        self.check, self.detail = check, detail


def _compare_all(what, got, want, approx, inputs_got=None, inputs_want=None, tol=(False, False)):
    if len(got) != len(want):
        raise Failure(what, f"{len(got)} results, expected {len(want)}")
    any_zero, loose = tol
    for i, (g, w, ap) in enumerate(zip(got, want, approx)):
        d = same_value(g, w, ap, any_zero, loose)
        if d is not None:
            raise Failure(what, f"output {i}: {d}")
    if inputs_got is not None:
        for i, (g, w) in enumerate(zip(inputs_got, inputs_want)):
            d = same_value(g, w, True)
            if d is not None:
                raise Failure(what, f"input {i} after the call (write-back): {d}")


# ---------------------------------------------------------------------- checking a program
CHECKS = ("interp", "cpu", "cuda", "grad", "dask")


def _narrow_floats_inside(graph) -> bool:
    """Whether a value of ``graph`` (loop bodies included) is float16, float32 or complex64."""
    narrow = (np.float16, np.float32, np.complex64)
    return any(o.dtype in narrow for n in _graph_nodes(graph) for o in n.outputs)


def _graph_nodes(graph):
    """The nodes of ``graph`` and of the loop bodies in it."""
    for n in graph.nodes:
        yield n
        for body in n.attrs.values():
            if hasattr(body, "nodes"):
                yield from _graph_nodes(body)


def check(prog, checks=CHECKS, compiled_cache=None):
    """Run every check on ``prog``; raises :class:`Failure` on the first that fails.

    Returns a dict of what ran (counts of graph nodes, ops seen) for the statistics.
    """
    import tracekit as tk

    harness = Harness(prog)
    approx = prog.get("approx") or [True] * len(prog["outputs"])
    # NumPy's fmax/fmin return either zero on a -0.0/0.0 tie (its SIMD body and its libm tail
    # disagree within one array): any zero is right there
    steps = list(_all_steps(prog["steps"]))
    any_zero = any(st.get("fn") in ("fmax", "fmin") for st in steps)
    # nor which zero a min/max reduction over 0.0 and -0.0 gives: IEEE 754 leaves it open, and
    # NumPy's follows the order its (SIMD) loop visits the elements in (seed 7000070)
    any_zero |= any(st["k"] == "reduce" and st.get("fn") in ("min", "max") for st in steps)
    # nor which zero a product of vectors is: np.dot gives -0.0 for 0 * -3 with one element,
    # BLAS's sums from +0.0 otherwise, ``@`` +0.0 with one element too (seed 9501054)
    any_zero |= any(st["k"] in ("dot", "matmul", "einsum", "tensordot") for st in steps)
    text = json.dumps(prog)  # float32 rounding can reach float64 results (x - arctan(x) in f32)
    narrow = "float32" in text or "complex64" in text
    stats = {"ops": set(), "checks": []}
    draws = []
    traced_way = None
    for which in (0, 1):
        xs = make_inputs(prog, which)
        ys = copy_inputs(xs)
        try:
            way = decisions(prog, *xs)
            with quiet():
                want = execute(prog, *ys)
        except Exception as e:
            if which == 0:
                raise Failure("numpy", "the program does not run on its inputs") from e
            continue
        traced_way = way if which == 0 else traced_way  # the trace runs on draw 0's inputs
        draws.append((xs, list(want), ys, way != traced_way))
    example = make_inputs(prog, 0)
    try:
        with quiet():
            t = harness.bind(lambda *args: tk.trace(harness.fn, *args))(*copy_inputs(example))
    except Exception as e:
        raise Failure("trace", f"tk.trace raised {type(e).__name__}: {e}") from e
    # ... as can float32 values NumPy makes of integers (cos of uint16 arrays, seed 14000347)
    tol = (any_zero, narrow or _narrow_floats_inside(t.graph))
    nodes = list(_graph_nodes(t.graph))  # (a rolled loop's body counts)
    stats["ops"] |= {n.op for n in nodes}
    stats["nodes"] = len(nodes)
    if prog.get("chain"):  # (counted with the checks: how many chains ran)
        stats["checks"].append("stencil-chain")
    if prog.get("loop_chain"):  # and how many time-stepped ones
        stats["checks"].append("loop-chain")
    if "interp" in checks:
        # NumPy's own float results depend on memory layout (SIMD loops, BLAS or not,
        # pairwise sums), and the trace's intermediates are laid out differently: ``approx``
        _check_calls("interp", harness.bind(t), "Traced call", draws, approx, tol)
        stats["checks"].append("interp")
        if _check_trace_answer(harness, draws[0], approx, tol):
            stats["checks"].append("trace-answer")
    for target in ("cpu", "cuda"):
        if target not in checks:
            continue
        try:
            with quiet(), _loops_kept(prog["seed"] % 2), _small_tiles(prog["seed"] % 4 == 0):
                c = tk.compile(t, target=target, progress=False)
        except Exception as e:
            raise Failure(target, f"tk.compile raised {type(e).__name__}: {e}") from e
        _check_calls(target, harness.bind(c), "call", draws, approx, tol)
        stats["checks"].append(target)
        if target == "cpu" and prog["seed"] % 4 == 1 and _runs_read_only(harness, draws, t):
            # read-only arguments (the kernels are compiled again for them: numba's types)
            on = "call on read-only inputs"
            _check_calls("cpu-read-only", harness.bind(c), on, draws, approx, tol, _read_only)
            stats["checks"].append("cpu-read-only")
        if target == "cpu" and any(st.tiles for st in c.plan.steps):
            stats["checks"].append("cpu-tiles")  # (see _small_tiles)
        if c.plan.broadcasts:  # values computed in each kernel reading them (broadcasts.py)
            stats["checks"].append(f"{target}-broadcasts")
    if "grad" in checks and prog.get("profile") == "grad":
        check_grad(prog, t, [(xs, flipped) for xs, _, _, flipped in draws], "cpu" in checks)
        stats["checks"].append("grad")
    if "cpu" in checks and prog["seed"] % 2 and any("body" in n.attrs for n in t.graph.nodes):
        _check_one_result(prog, draws, approx, tol)
        stats["checks"].append("cpu-one-result")

    if "dask" in checks and prog["seed"] % DASK_EVERY == DASK_EVERY - 1:
        if _check_dask(prog, t, harness, draws, approx, tol):
            stats["checks"].append("dask")
    if prog.get("loop_chain"):
        _check_rolled(t)
        stats["checks"].append("loop-chain-rolled")
    return stats


def _check_rolled(t):
    """A time-stepped chain's iterations rolled into a loop node (its numbers move by exact
    steps: nothing in it needs the loop unrolled)."""
    if not any("body" in n.attrs for n in t.graph.nodes):
        why = "; ".join(_unrolled_why(note) for note in t.notes) or "no note"
        raise Failure("roll", f"the time steps did not roll into a loop ({why}): {t.notes}")


def _unrolled_why(note) -> str:
    """Why a note says a loop did not roll, without where (what the failure's signature keeps:
    shrinking must not trade it for another reason)."""
    return re.sub(r" at \S+:\d+", "", note.split("not rolled: ", 1)[-1])


DASK_EVERY = 4  # one program in four also runs on dask arrays (its chunk kernels compile)


def _check_dask(prog, t, harness, draws, approx, tol) -> bool:
    """The trace compiled for dask, called with its array arguments as dask arrays of random
    chunkings (uneven last chunks, chunks of one element), computed on the synchronous
    scheduler. Not run (False) for a trace with guards (they cannot be checked without
    computing) or with writes into its arguments (dask arrays are immutable: tested alone)."""
    import dask
    import dask.array as da

    import tracekit as tk

    if t.graph.writebacks:
        return False
    try:
        with quiet():
            c = tk.compile(t, target="dask", progress=False)
    except Exception as e:
        raise Failure("dask", f"tk.compile raised {type(e).__name__}: {e}") from e
    if c.program.guarded:  # loop bodies' guards too
        return False
    rng = np.random.default_rng([prog["seed"], 11])

    def lazy(x):
        if not isinstance(x, np.ndarray) or x.ndim == 0:
            return x
        return da.from_array(x, chunks=tuple(int(rng.integers(1, max(d, 1) + 1)) for d in x.shape))

    def call(*inputs):
        args = [x if i in harness.captured else lazy(x) for i, x in enumerate(inputs)]
        return dask.compute(*_as_tuple(harness.bind(c)(*args)), scheduler="sync")

    for xs, want, _, flipped in draws:
        if flipped:
            continue
        try:
            with quiet():
                got = call(*copy_inputs(xs))
        except Exception as e:
            raise Failure("dask", f"the dask call raised {type(e).__name__}: {e}") from e
        _compare_all("dask", _as_tuple(got), want, approx, None, None, tol)
    return True


def _check_one_result(prog, draws, approx, tol):
    """The program's last result alone, of its inputs as plain arguments, compiled with its
    loops kept: the call a small graph with loops runs as one numba function
    (``whole_graph``, where the fast path applies)."""
    import tracekit as tk

    def last(*inputs):
        return execute(prog, *inputs)[-1]

    try:
        with quiet(), _loops_kept(True):
            c = tk.compile(tk.trace(last, *make_inputs(prog, 0)), target="cpu", progress=False)
    except Exception as e:
        raise Failure("cpu", f"tk.compile of the last result raised {type(e).__name__}: {e}") from e
    one = [(xs, want[-1:], ys, flipped) for xs, want, ys, flipped in draws]
    _check_calls("cpu", c, "call of the last result", one, approx[-1:], tol)


SMALL_TILE_BYTES = 32  # (4 float64 values: tiles of one or a few rows)


@contextlib.contextmanager
def _small_tiles(small: bool):
    """On every fourth seed (even ones: loops unrolled), tiles of ``SMALL_TILE_BYTES``
    whatever their halo costs, and a budget of 1 operation for values computed again at
    offsets: the fuzzer's arrays (2000 elements at most) would otherwise stay within the
    cache, and the first stage of its two-stage stencils be computed again at each offset: no
    producer would go to tiles (``backends/tiles.py``)."""
    from tracekit.backends import offsets, tiles

    saved = offsets.MAX_RECOMPUTE, tiles.TILE_BYTES, tiles.OPS_PER_BYTE
    if small:
        offsets.MAX_RECOMPUTE, tiles.TILE_BYTES, tiles.OPS_PER_BYTE = 1, SMALL_TILE_BYTES, 1e9
    try:
        yield
    finally:
        offsets.MAX_RECOMPUTE, tiles.TILE_BYTES, tiles.OPS_PER_BYTE = saved


@contextlib.contextmanager
def _loops_kept(keep: bool):
    """On odd seeds every loop compiles as a loop (its body compiled once, or the whole loop
    one numba function), not unrolled as the small loops of these programs otherwise are."""
    from tracekit.backends import control

    saved = control.UNROLL_AT_MOST
    control.UNROLL_AT_MOST = 0 if keep else saved
    try:
        yield
    finally:
        control.UNROLL_AT_MOST = saved


def _all_steps(steps):
    """The steps and the steps of loop bodies in them."""
    for st in steps:
        yield st
        if st["k"] == "loop":
            yield from _all_steps(st["body"])


def _check_calls(check, fn, what, draws, approx, tol, prepare=None):
    """Call ``fn`` on a copy of each draw's inputs (``prepare(copy)``, where given) and compare
    with NumPy's results. A draw whose branches go otherwise than the trace's must fail a
    guard (or, by chance, compute NumPy's results); any other must not."""
    import tracekit as tk

    for xs, want, ys, flipped in draws:
        zs = copy_inputs(xs) if prepare is None else prepare(copy_inputs(xs))
        try:
            with quiet():
                got = fn(*zs)
        except tk.GuardError as e:
            if flipped:
                continue
            raise Failure(check, f"{what} raised GuardError on the traced branches: {e}") from e
        except Exception as e:
            raise Failure(check, f"{what} raised {type(e).__name__}: {e}") from e
        _compare_all(check, _as_tuple(got), want, approx, zs, ys, tol)
        _check_fresh(check, _as_tuple(got), zs)


def _read_only(xs):
    for x in xs:
        if isinstance(x, np.ndarray):
            x.flags.writeable = False
    return xs


def _runs_read_only(harness, draws, t) -> bool:
    """Whether NumPy runs the program on read-only inputs, writing into none of them (its
    ``ufunc.at`` writes into read-only arrays: seed 22700337; and where it adds zeros, the
    values stay and only the trace ``t`` says it writes: seed 24100521)."""
    if t.graph.writebacks:
        return False
    for xs, _, _, _ in draws:
        frozen = _read_only(copy_inputs(xs))
        try:
            with quiet():
                harness.bind(None)(*frozen)
        except Exception:
            return False
        for x, y in zip(xs, frozen):
            if isinstance(x, np.ndarray) and not np.array_equal(
                x, y, equal_nan=x.dtype.kind in "fc"
            ):
                return False
    return True


def _check_trace_answer(harness, draw, approx, tol) -> bool:
    """``tk.jit``'s first call answers with the values its trace computed (tier "trace"):
    they must be NumPy's results, fresh. False where the trace keeps no answer."""
    from tracekit.traced import trace_answering

    xs, want, ys, _ = draw
    zs = copy_inputs(xs)

    def first_call(*args):
        t, answer = trace_answering(harness.fn, *args)
        return None if answer is None else t.answer(answer, args)

    try:
        with quiet():
            got = harness.bind(first_call)(*zs)
    except Exception as e:
        raise Failure("trace-answer", f"raised {type(e).__name__}: {e}") from e
    if got is None:
        return False
    _compare_all("trace-answer", _as_tuple(got), want, approx, zs, ys, tol)
    _check_fresh("trace-answer", _as_tuple(got), zs)
    return True


def _check_fresh(what, results, inputs):
    """Results must not share memory with the arguments or with each other."""
    held = [x for x in inputs if isinstance(x, np.ndarray)]
    for i, r in enumerate(results):
        if isinstance(r, np.ndarray):
            if any(np.shares_memory(r, x) for x in held):
                raise Failure(what, f"output {i} shares memory with an input or another output")
            held.append(r)


def _as_tuple(x):
    return tuple(x) if isinstance(x, tuple | list) else (x,)


def check_grad(prog, t, draws=None, compiled=False):
    """tk.vjp's backward graph against central finite differences of the NumPy program, on
    the traced inputs, and on those of ``draws`` ((inputs, whether their branches go otherwise
    than the trace's)) whose branches go otherwise: there the backward call must fail a guard
    or be right by chance. ``compiled``: the backward graph compiled for the CPU too, against
    the interpreter's gradients (its slices' gradients are pads: ``backends/pads.py``)."""
    import tracekit as tk

    try:
        with quiet():
            b = tk.vjp(t)
    except Exception as e:
        raise Failure("grad", f"tk.vjp raised {type(e).__name__}: {e}") from e
    cb = None
    if compiled:
        try:
            with quiet(), _small_tiles(prog["seed"] % 4 == 0):
                cb = tk.compile(b, target="cpu", progress=False)
        except Exception as e:
            raise Failure(
                "grad", f"tk.compile of the backward raised {type(e).__name__}: {e}"
            ) from e
    for k, (xs, flipped) in enumerate(draws or [(make_inputs(prog, 0), False)]):
        if k == 0 or flipped:  # (finite differences on every draw would double the time)
            _check_grad_at(prog, b, xs, flipped, cb)
    _check_grad_answer(prog, (draws or [(make_inputs(prog, 0), False)])[0][0])


def _check_grad_answer(prog, xs):
    """A gradient traced inside another trace (``tk.jit(tk.value_and_grad(loss))``'s first
    answer) is computed from the values its trace deferred (``TraceContext.deferring``): they
    must be the interpreter's on the backward graph, as an eager call gives them."""
    import tracekit as tk
    from tracekit.traced import trace_answering

    wrt = tuple(i for i, x in enumerate(xs) if np.asarray(x).dtype.kind == "f")
    with quiet():
        outs = execute(prog, *copy_inputs(xs))
    rng = np.random.default_rng([prog["seed"], 98])
    ws = [rng.standard_normal(np.shape(o)) for o in outs]
    if not wrt or not any(np.asarray(o).dtype.kind == "f" for o in outs):
        return

    def loss(*ins):
        terms = [np.sum(w * o) for o, w in zip(execute(prog, *ins), ws) if o.dtype.kind == "f"]
        return sum(terms[1:], terms[0])

    vag = tk.value_and_grad(loss, argnums=wrt)
    try:
        with quiet():
            want = vag(*copy_inputs(xs))
            zs = copy_inputs(xs)
            t, answer = trace_answering(lambda *a: vag(*a), *zs)
            got = None if answer is None else t.answer(answer, zs)
    except tk.GuardError:
        return  # (a branch of the loss that the gradient's own trace took otherwise)
    except Exception as e:
        raise Failure("grad-answer", f"raised {type(e).__name__}: {e}") from e
    if got is None:
        return
    flat_want = [want[0], *want[1]]
    flat_got = [got[0], *got[1]]
    for i, (g, h) in enumerate(zip(flat_want, flat_got)):
        g, h = np.asarray(g), np.asarray(h)
        scale = float(np.abs(g[np.isfinite(g)]).max(initial=1.0))
        if h.shape != g.shape or h.dtype != g.dtype:
            raise Failure("grad-answer", f"result {i}: {h.dtype}{h.shape}, not {g.dtype}{g.shape}")
        if not np.allclose(h, g, rtol=1e-9, atol=1e-12 * scale, equal_nan=True):
            far = np.nanmax(np.abs(h - g))
            raise Failure("grad-answer", f"result {i} differs from the eager gradient's by {far}")


def _compiled_grads_agree(cb, args, grads):
    """The compiled backward ``cb``'s gradients on ``args`` against the interpreter's."""
    try:
        with quiet():
            got = cb(*copy_inputs(args))
    except Exception as e:
        raise Failure("grad", f"the compiled backward raised {type(e).__name__}: {e}") from e
    for i, (g, h) in enumerate(zip(grads, got)):
        if g is None:
            continue
        g, h = np.asarray(g), np.asarray(h)
        finite = np.abs(g[np.isfinite(g)])  # (an inf would make every difference pass)
        scale = float(finite.max(initial=1.0))
        if h.shape != g.shape or not np.allclose(
            h, g, rtol=1e-6, atol=1e-9 * scale, equal_nan=True
        ):
            far = np.nanmax(np.abs(h - g)) if h.shape == g.shape else f"shape {h.shape}"
            raise Failure("grad", f"the compiled backward's gradient of input {i} differs: {far}")


def _check_grad_at(prog, b, xs, flipped, cb=None):
    import tracekit as tk

    rng = np.random.default_rng([prog["seed"], 99])
    with quiet():
        outs = execute(prog, *copy_inputs(xs))
    ws = [rng.standard_normal(np.shape(o)) for o in outs]

    def loss(*ins):  # the outputs themselves: _fd weighs their differences
        with quiet():
            return [np.asarray(o, dtype=np.float64) for o in execute(prog, *copy_inputs(ins))]

    args = [*copy_inputs(xs), *[np.asarray(w) if np.ndim(w) else np.float64(w) for w in ws]]
    try:
        with quiet():
            grads = b(*copy_inputs(args))
    except tk.GuardError as e:
        if flipped:
            return
        raise Failure(
            "grad", f"the backward call raised GuardError on the traced branches: {e}"
        ) from e
    except Exception as e:
        raise Failure("grad", f"the backward call raised {type(e).__name__}: {e}") from e
    if cb is not None:
        _compiled_grads_agree(cb, args, grads)
    for i, (x, g) in enumerate(zip(xs, grads)):
        x = np.asarray(x, dtype=np.float64)
        g = np.zeros(x.shape) if g is None else np.asarray(g)
        if g.shape != x.shape:
            raise Failure("grad", f"gradient of input {i} has shape {g.shape}, expected {x.shape}")
        for j in np.ndindex(x.shape):
            fd = _fd(loss, ws, xs, i, j)
            if fd is None:
                continue
            if not abs(g[j] - fd) <= 1e-4 * (abs(fd) + abs(g[j])) + 1e-5 * max(1.0, abs(fd)):
                raise Failure(
                    "grad", f"d/d input {i}{list(j)}: backward gives {g[j]!r}, finite diff {fd!r}"
                )


def _fd(outputs, ws, xs, i, j):
    """Central difference of ``sum(w * output)``, or None where it is not stable (a kink or a
    tie nearby). The outputs are subtracted element by element before they are weighed and
    summed: a sum holding a huge term (a cumprod's) would round the others' changes away
    (seed 9501323: a difference of 0.0 where the gradient is 0.26)."""

    def at(h):  # the inputs keep their layouts: a reshape may be a view of one and not another
        ins = copy_inputs(xs)
        ins[i][j] += h
        up = outputs(*ins)
        ins[i][j] -= 2 * h
        down = outputs(*ins)
        with np.errstate(all="ignore"):
            return sum(float(np.sum((u - d) * w)) for u, d, w in zip(up, down, ws)) / (2 * h)

    d1, d2 = at(1e-6), at(5e-7)
    if not (np.isfinite(d1) and np.isfinite(d2)):
        return None
    if abs(d1 - d2) > 1e-5 * max(1.0, abs(d1)):
        return None
    return d2


# ---------------------------------------------------------------------- shrinking
def _dependents(prog, i):
    """Step indices that (transitively) read the register made, or written, by step ``i``."""
    n_in = len(prog["inputs"])
    made = {}
    reg = n_in
    for k, st in enumerate(prog["steps"]):
        made[k] = set(range(reg, reg + _made(st)))
        reg += _made(st)
    dead_regs = set(made[i])
    dead_steps = {i}
    for k in range(i + 1, len(prog["steps"])):
        st = prog["steps"][k]
        if _reads(st) & dead_regs:
            dead_steps.add(k)
            dead_regs |= made[k]
    return dead_steps, dead_regs, made


def _made(st) -> int:
    """How many registers step ``st`` appends (a loop stacking a value: two)."""
    if st["k"] in IN_PLACE_STEPS:
        return 0
    return 2 if st["k"] == "loop" and "stack" in st else 1


def _reads(st):
    out = set()
    for key in ("a", "c", "out"):
        if key in st:
            out.add(st[key])
    for key in ("b", "v"):
        if key in st and not isinstance(st[key], dict):
            out.add(st[key])
    for key in ("args",):
        out |= set(st.get(key, []))
    for e in st.get("idx", []):
        if e[0] == "r":
            out.add(e[1])
    if st["k"] == "loop":  # the carried register, and those before the loop its body reads
        out = {st["carry"]}
        for body_step in st["body"]:
            out |= {r for r in _reads(body_step) if r < st["base"]}
    return out


def remove_steps(prog, dead):
    """``prog`` without the steps in ``dead`` (and their registers), registers renumbered."""
    n_in = len(prog["inputs"])
    new_num, reg, nreg = {i: i for i in range(n_in)}, n_in, n_in
    keep = []
    for k, st in enumerate(prog["steps"]):
        for _ in range(_made(st)):
            if k not in dead:
                new_num[reg] = nreg
                nreg += 1
            reg += 1
        if k not in dead:
            keep.append(st)

    def ren(x):
        return new_num[x]

    steps = [_renumbered(copy.deepcopy(st), ren) for st in keep]
    outs, appr = [], []
    for o, a in zip(prog["outputs"], prog.get("approx", [True] * len(prog["outputs"]))):
        if o in new_num:
            outs.append(new_num[o])
            appr.append(a)
    out = dict(prog, steps=steps, outputs=outs, approx=appr)
    return out


def _survives(ren, r) -> bool:
    try:
        ren(r)
    except KeyError:  # a register of a removed step
        return False
    return True


def _renumbered(st, ren):
    """Step ``st`` with the registers it reads renamed by ``ren`` (in place)."""
    for key in ("a", "c", "out"):
        if key in st:
            st[key] = ren(st[key])
    for key in ("b", "v"):
        if key in st and not isinstance(st[key], dict):
            st[key] = ren(st[key])
    if "args" in st:
        st["args"] = [ren(x) for x in st["args"]]
    for e in st.get("idx", []):
        if e[0] == "r":
            e[1] = ren(e[1])
    if st["k"] == "loop":  # the body's registers: before the loop, the carried one, its own
        old_base = st["base"]
        new_base = sum(1 for r in range(old_base) if _survives(ren, r))
        st["carry"], st["base"] = ren(st["carry"]), new_base

        def inner(r):
            return ren(r) if r < old_base else r - old_base + new_base

        st["body"] = [_renumbered(b, inner) for b in st["body"]]
        for key in ("next", "stack"):
            if key in st:
                st[key] = inner(st[key])
    return st


def shrink(prog, fails, budget_s=300):
    """A smaller program for which ``fails(prog)`` still holds (greedy step and output removal)."""
    t0 = time.time()
    best = prog
    # 1. keep only one output
    for o in range(len(best["outputs"])):
        cand = dict(best, outputs=[best["outputs"][o]], approx=[best["approx"][o]])
        if fails(cand):
            best = cand
            break
    # 2. remove steps (with their dependents), last first
    changed = True
    while changed and time.time() - t0 < budget_s:
        changed = False
        for i in reversed(range(len(best["steps"]))):
            if i >= len(best["steps"]):
                continue
            dead, _, _ = _dependents(best, i)
            cand = remove_steps(best, dead)
            if not cand["outputs"]:
                continue
            if _still_fails(cand, fails):
                best, changed = cand, True
            if time.time() - t0 > budget_s:
                break
    # 3. remove steps of loop bodies (with the body's steps reading them), last first
    for k in range(len(best["steps"])):
        for i in reversed(range(len(best["steps"][k].get("body", ())))):
            if time.time() - t0 > budget_s:
                break
            cand = _without_body_step(best, k, i)
            if cand is not None and _still_fails(cand, fails):
                best = cand
    # 4. drop unused inputs is not done (inputs keep their draw of values)
    return best


def _still_fails(cand, fails) -> bool:
    try:
        return _valid(cand) and fails(cand)
    except Exception:
        return False


def _without_body_step(prog, k, i):
    """``prog`` without step ``i`` of loop step ``k``'s body and the body's steps reading
    it, its registers renumbered; None where the loop would lose what it carries on or
    stacks, or its whole body. (The body is a program whose inputs are the registers before
    the loop and the carried one.)"""
    loop = prog["steps"][k]
    kept = [key for key in ("next", "stack") if key in loop]
    body = {
        "inputs": [None] * (loop["base"] + 1),
        "steps": loop["body"],
        "outputs": [loop[key] for key in kept],
    }
    dead, dead_regs, _ = _dependents(body, i)
    if dead_regs & set(body["outputs"]) or len(dead) == len(loop["body"]):
        return None
    small = remove_steps(body, dead)
    loop = dict(loop, body=small["steps"], **dict(zip(kept, small["outputs"])))
    return dict(prog, steps=[*prog["steps"][:k], loop, *prog["steps"][k + 1 :]])


def _valid(prog):
    try:
        with quiet():
            execute(prog, *make_inputs(prog, 0))
        return True
    except Exception:
        return False


def failing_check(prog, checks):
    """The Failure ``check`` raises on ``prog`` (None if it passes)."""
    try:
        check(prog, checks)
    except Failure as f:
        return f
    except Exception as e:  # a crash of the harness itself counts as a failure too
        return Failure("crash", f"{type(e).__name__}: {e}")
    return None


def save_regression(prog, failure, note=""):
    os.makedirs(REGRESSIONS, exist_ok=True)
    chain = "loopchain-" if prog.get("loop_chain") else "chain-" if prog.get("chain") else ""
    name = f"{failure.check}-{prog['profile']}-{chain}{prog['seed']}.json"
    path = os.path.join(REGRESSIONS, name)
    rec = {"program": prog, "failure": str(failure), "note": note}
    with open(path, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
    return path


def checks_for(profile):
    if profile == "grad":
        return ("interp", "grad", "cpu")
    if profile == "cuda":
        return ("interp", "cuda")
    return ("interp", "cpu", "dask")


# ---------------------------------------------------------------------- the command line
def force_streams():
    """Interleave 3 streams of 2 elements in every CPU elementwise kernel whose inner loop has
    6 or more (the fuzzer's arrays are small: the default needs 32k elements and two
    transcendental calls)."""
    from tracekit.backends import emit_cpu

    emit_cpu.STREAMS, emit_cpu.LANES, emit_cpu.STREAM_BUDGET = 3, 2, 10**6
    emit_cpu.STREAM_MIN_WORK = emit_cpu.STREAM_MIN_FAST_MATH = 0


def force_threaded_matmul():
    """Every product of two float matrices of a narrow ``b`` or a short ``a`` on numba's
    threads, in blocks of one row or of one or two columns, those of ``b`` wider than 4 columns in
    blocks of columns (the fuzzer's matrices are small: the default needs 262,144
    multiply-adds, 4 rows a block, and 512 columns for blocks of columns)."""
    from tracekit.backends import matmul_threads

    matmul_threads.MIN_PRODUCT, matmul_threads.MIN_ROWS, matmul_threads.MAX_COLUMNS = 0, 1, 4
    matmul_threads.MIN_COLUMNS, matmul_threads.WIDE_BLOCK = 1, 2


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=None, help="first seed (default: from the clock)")
    p.add_argument("--profiles", default="full,full,full,grad,cuda")
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--one", type=int, default=None, help="run just this seed and print it")
    p.add_argument("--chains", action="store_true", help="every program a stencil chain (_Chain)")
    p.add_argument(
        "--python-numbers",
        action="store_true",
        help="check only the programs with operators on Python numbers (about one in thirty)",
    )
    p.add_argument(
        "--loop-chains",
        action="store_true",
        help="every program a time-stepped stencil chain (_LoopChain)",
    )
    p.add_argument(
        "--force-streams",
        action="store_true",
        help="every CPU elementwise kernel in interleaved streams, however small (with --no-save:"
        " a saved regression replays with the default settings)",
    )
    p.add_argument(
        "--force-threaded-matmul",
        action="store_true",
        help="every product of a narrow b on numba's threads, however small (with --no-save: a"
        " saved regression replays with the default settings)",
    )
    args = p.parse_args(argv)
    if args.force_streams:
        force_streams()
    if args.force_threaded_matmul:
        force_threaded_matmul()
    profiles = args.profiles.split(",")
    if args.one is not None:
        prof = profiles[args.one % len(profiles)]
        prog = _fuzz_program(args, args.one, prof)
        print(json.dumps(prog, indent=1))
        f = failing_check(prog, checks_for(prof))
        print("ok" if f is None else f)
        return 0 if f is None else 1
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000 * 1000
    print(f"fuzzing from seed {seed} for {args.seconds:.0f} s (repeat: FUZZ_SEED={seed})")
    t0 = time.time()
    n, fails, ops, nodes, shrunk = 0, [], set(), 0, set()
    by_check: dict = {}
    while time.time() - t0 < args.seconds:
        prof = profiles[seed % len(profiles)]
        prog = _fuzz_program(args, seed, prof)
        if args.python_numbers and not has_python_number_operators(prog):
            seed += 1
            continue
        try:
            stats = check(prog, checks_for(prof))
            ops |= stats["ops"]
            nodes += stats["nodes"]
            for c in stats["checks"]:
                by_check[c] = by_check.get(c, 0) + 1
        except Failure as f:
            fails.append((seed, prof, f))
            print(f"seed {seed} ({prof}): {f}", flush=True)
            sig, checks = signature(f), checks_for(prof)
            if not args.no_save and sig not in shrunk:  # one shrink per kind of failure
                shrunk.add(sig)
                small = shrink(prog, lambda q, s=sig, c=checks: _same_check(q, s, c))
                path = save_regression(small, failing_check(small, checks) or f)
                print(f"  shrunk to {len(small['steps'])} steps: {path}", flush=True)
        except Exception:
            traceback.print_exc()
            fails.append((seed, prof, "harness"))
        n += 1
        seed += 1
        if n % 25 == 0:
            print(f"  {n} programs, {time.time() - t0:.0f} s, {len(fails)} failures", flush=True)
    dt = time.time() - t0
    print(
        f"fuzzed {n} programs in {dt:.0f} s ({nodes} graph nodes; checks passed: {by_check}); "
        f"{len(ops)} distinct ops; {len(fails)} failures",
        flush=True,
    )
    from tracekit.ops import OPS

    print("ops never generated:", sorted(set(OPS) - ops))
    return 1 if fails else 0


def has_python_number_operators(prog) -> bool:
    """Whether an operator of ``prog`` computes on two Python numbers (on its first inputs)."""
    try:
        ways = decisions(prog, *make_inputs(prog, 0))
    except Exception:
        return False
    return any(isinstance(w, tuple) for w in ways)  # (see _pythons_way)


def _fuzz_program(args, seed, profile):
    """The fuzz loop's program of ``seed``: a stencil chain, a time-stepped one, or neither."""
    if args.loop_chains or (not args.chains and loop_chain_chosen(seed)):
        return generate(seed, profile, loop_chain=True)
    return generate(seed, profile, chain=args.chains or chain_chosen(seed))


def signature(failure) -> str:
    """What kind of failure this is (the check and the start of the message, digits dropped):
    shrinking keeps it."""
    head = failure.detail.split(":")[0]
    if "raised" in failure.detail:
        head = failure.detail.split(":")[0]
    elif "output" in head:
        head = "values" if "values differ" in failure.detail else failure.detail.split(":")[1]
    return failure.check + ":" + "".join(c for c in head if not c.isdigit()).strip()


def _same_check(prog, sig, checks):
    f = failing_check(prog, checks)
    return f is not None and signature(f) == sig


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
    if not os.environ.get("NUMBA_ENABLE_CUDASIM"):
        import shutil

        os.environ["NUMBA_ENABLE_CUDASIM"] = "0" if shutil.which("nvidia-smi") else "1"
    import tempfile

    # every program is new: keep its kernels out of the user's cache
    with tempfile.TemporaryDirectory(prefix="tracekit-fuzz-") as d:
        os.environ.setdefault("TRACEKIT_CACHE_DIR", d)
        sys.exit(main())
