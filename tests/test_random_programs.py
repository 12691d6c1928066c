"""hypothesis: random compositions of ops on random broadcastable shapes; trace + run == NumPy.

A program is a list of instructions over a pool of values (the inputs first). The same Python
interpreter of that list runs on plain arrays (NumPy) and on traced arrays (tracekit), so the
traced graph, run on *new* inputs, must give NumPy's results bit for bit (and the same writes
into its inputs, and the same exception type where NumPy raises).

``TK_HYPOTHESIS_EXAMPLES=2000`` explores more; the default keeps the suite fast and derandomized.
"""

from __future__ import annotations

import functools

import numpy as np
from helpers.compare import assert_same
from helpers.run import check_trace, hypothesis_settings, quiet
from helpers.values import random_values, seed_of
from hypothesis import given
from hypothesis import strategies as st

import tracekit as tk

SETTINGS = hypothesis_settings(120)

DTYPES = [
    "bool",
    "int8",
    "int32",
    "int64",
    "uint8",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
UNARY = [
    "negative",
    "absolute",
    "exp",
    "log1p",
    "sqrt",
    "sin",
    "tanh",
    "floor",
    "square",
    "sign",
    "isnan",
    "logical_not",
    "conjugate",
    "invert",
    "cbrt",
    "rint",
]
BINARY = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "fmax",
    "power",
    "floor_divide",
    "remainder",
    "greater",
    "equal",
    "logical_and",
    "bitwise_xor",
    "arctan2",
    "hypot",
]
OPERATORS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "**": lambda a, b: a**b,
    "<": lambda a, b: a < b,
    "&": lambda a, b: a & b,
}
REDUCTIONS = ["sum", "prod", "mean", "max", "min", "any", "all", "var", "std", "argmax"]
SCALARS = [2, -1, 0.5, 2.0, 1.5, -0.0, True, 1 + 1j]


# ---------------------------------------------------------------------- the interpreter
def execute(program, n_results, *inputs):
    pool = list(inputs)
    for ins in program:
        kind = ins[0]
        if kind == "unary":
            _, name, i = ins
            pool.append(getattr(np, name)(pool[i]))
        elif kind == "binary":
            _, name, i, j = ins
            pool.append(getattr(np, name)(pool[i], pool[j]))
        elif kind == "operator":
            _, sym, i, j = ins
            pool.append(OPERATORS[sym](pool[i], pool[j]))
        elif kind == "scalar":
            _, sym, i, c, left = ins
            pool.append(OPERATORS[sym](c, pool[i]) if left else OPERATORS[sym](pool[i], c))
        elif kind == "reduce":
            _, name, i, axis, keepdims = ins
            x = pool[i]
            ax = None if axis is None or np.ndim(x) == 0 else axis % np.ndim(x)
            if name == "argmax":
                pool.append(np.argmax(x, axis=ax, keepdims=keepdims))
            else:
                pool.append(getattr(np, name)(x, axis=ax, keepdims=keepdims))
        elif kind == "cumsum":
            _, i, axis = ins
            pool.append(
                np.cumsum(pool[i], axis=None if np.ndim(pool[i]) == 0 else axis % np.ndim(pool[i]))
            )
        elif kind == "astype":
            _, i, dt = ins
            pool.append(
                pool[i].astype(dt) if hasattr(pool[i], "astype") else np.asarray(pool[i]).astype(dt)
            )
        elif kind == "where":
            _, c, i, j = ins
            pool.append(np.where(pool[c] > 0, pool[i], pool[j]))
        elif kind == "clip":
            _, i = ins
            pool.append(np.clip(pool[i], -1, 2))
        elif kind == "flip":
            _, i = ins
            x = pool[i]
            pool.append(x[::-1] if np.ndim(x) else x)
        elif kind == "transpose":
            _, i = ins
            pool.append(np.transpose(pool[i]))
        elif kind == "reshape":
            _, i = ins
            pool.append(np.reshape(pool[i], (-1,)))
        elif kind == "matmul":
            _, i, j = ins
            pool.append(np.matmul(pool[i], pool[j]))
        elif kind == "inplace":  # y = copy; y op= other (NumPy's casting rules apply)
            _, sym, i, j = ins
            y = np.copy(pool[i])
            if sym == "+":
                y += pool[j]
            elif sym == "*":
                y *= pool[j]
            else:
                y -= pool[j]
            pool.append(y)
        elif kind == "setitem":
            _, i, j = ins
            y = np.copy(pool[i])
            if np.ndim(y):
                y[::2] = pool[j] if np.ndim(pool[j]) == 0 else pool[j][..., :1]
            pool.append(y)
        elif kind == "view_write":  # write through a view of a fresh array
            _, i = ins
            y = np.copy(pool[i])
            if np.ndim(y):
                v = y[1:]
                v *= 2
            pool.append(y)
        elif kind == "input_write":  # writes into an input argument
            _, i = ins
            x = pool[0]
            if np.ndim(x):
                x[0] = pool[i] if np.ndim(pool[i]) == 0 else pool[i].ravel()[:1].sum()
        else:
            raise AssertionError(kind)
    return tuple(pool[len(inputs) :]) or inputs[0] * 1  # everything computed is live


# ---------------------------------------------------------------------- strategies
@st.composite
def programs(draw):
    base = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    n_inputs = draw(st.integers(1, 3))
    shapes = []
    for _ in range(n_inputs):
        keep = draw(st.integers(0, len(base)))  # drop leading dims (broadcasting)
        shape = list(base[len(base) - keep :])
        for d in range(len(shape)):
            if draw(st.booleans()) and draw(st.booleans()):
                shape[d] = 1
        shapes.append(tuple(shape))
    dtypes = [draw(st.sampled_from(DTYPES)) for _ in shapes]
    n = draw(st.integers(1, 6))
    prog = []
    size = n_inputs
    for _ in range(n):
        pick = functools.partial(_pick, draw, size)
        kind = draw(
            st.sampled_from(
                ["unary", "binary", "operator", "scalar", "reduce", "cumsum", "astype", "where"]
                + ["clip", "flip", "transpose", "reshape", "matmul", "inplace", "setitem"]
                + ["view_write", "input_write"]
            )
        )
        if kind == "unary":
            ins = (kind, draw(st.sampled_from(UNARY)), pick())
        elif kind == "binary":
            ins = (kind, draw(st.sampled_from(BINARY)), pick(), pick())
        elif kind == "operator":
            ins = (kind, draw(st.sampled_from(sorted(OPERATORS))), pick(), pick())
        elif kind == "scalar":
            sym = draw(st.sampled_from(sorted(OPERATORS)))
            ins = (kind, sym, pick(), draw(st.sampled_from(SCALARS)), draw(st.booleans()))
        elif kind == "reduce":
            axis = draw(st.one_of(st.none(), st.integers(-3, 2)))
            ins = (kind, draw(st.sampled_from(REDUCTIONS)), pick(), axis, draw(st.booleans()))
        elif kind == "cumsum":
            ins = (kind, pick(), draw(st.integers(-2, 2)))
        elif kind == "astype":
            ins = (kind, pick(), draw(st.sampled_from(DTYPES)))
        elif kind == "where":
            ins = (kind, pick(), pick(), pick())
        elif kind in ("matmul", "setitem"):
            ins = (kind, pick(), pick())
        elif kind == "inplace":
            ins = (kind, draw(st.sampled_from("+*-")), pick(), pick())
        else:
            ins = (kind, pick())
        prog.append(ins)
        if kind != "input_write":
            size += 1
    n_results = draw(st.integers(1, min(3, size)))
    return shapes, dtypes, prog, n_results


def _pick(draw, size):
    return draw(st.integers(0, size - 1))


def _make(shapes, dtypes, tag):
    def make(seed):
        rng = np.random.default_rng(seed_of(tag, seed))
        return tuple(random_values(rng, s, d) for s, d in zip(shapes, dtypes))

    return make


@SETTINGS
@given(programs())
def test_random_programs_trace_like_numpy(prog):
    shapes, dtypes, program, n_results = prog

    def fn(*xs):
        return execute(program, n_results, *xs)

    check_trace(fn, _make(shapes, dtypes, repr(prog)), rtol=_rtol(program))


def _rtol(program):
    """NumPy's own in-place complex multiply of one element differs from ``x * y`` by an ulp
    (a different inner loop), and a graph is pure: it cannot choose NumPy's in-place loop."""
    return 1e-6 if any(ins[:2] == ("inplace", "*") for ins in program) else 0.0


@SETTINGS
@given(programs())
def test_random_programs_optimize_like_numpy(prog):
    """The optimised graph and its ``.code`` agree with the unoptimised graph."""
    shapes, dtypes, program, n_results = prog
    if any(
        ins[0] == "binary" and ins[1] == "power" or ins[:2] == ("operator", "**") for ins in program
    ):
        return  # x**3 -> x*x*x is within an ulp, not bitwise
    make = _make(shapes, dtypes, repr(prog))

    def fn(*xs):
        return execute(program, n_results, *xs)

    t = check_trace(fn, make, rtol=_rtol(program))
    if t is None:
        return
    new = make(1)
    with quiet():
        try:
            ref = t(*[a.copy() for a in new])
        except Exception:
            return
        got = tk.optimize(t)(*[a.copy() for a in new])
        ns: dict = {}
        exec(t.code, ns)
        code_out = ns["fn"](*[a.copy() for a in new])
    assert_same(got, ref)
    code_out = code_out if isinstance(code_out, tuple) else (code_out,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    assert_same(list(code_out), list(ref))
