"""``tk.jit``'s tiers: the interpreter answers a new signature's first call while its kernels
compile off the caller's path (in the compile server, or a thread); both tiers agree; a compile
that fails leaves the interpreter serving with one warning; a process that exits mid-compile
leaves the disk cache usable; ``wait=True`` compiles before answering, as before."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numba
import numpy as np
import pytest
from helpers.compare import assert_same, bits_equal
from helpers.run import quiet
from hypothesis import HealthCheck, given, settings
from test_cpu import DTYPES, assert_matches, elementwise_cases, elementwise_inputs, program
from test_cpu_programs import execute, programs

import tracekit as tk
from tracekit.backends import scalar
from tracekit.backends.tiers import TierWarning

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning"),
    pytest.mark.filterwarnings("ignore::tracekit.TracerWarning"),
]


def _both_tiers(fn, *args):
    """(the first answer: the trace's values or the interpreter's, the compiled tier's) of
    ``tk.jit(fn)`` on ``args``."""
    f = tk.jit(fn, wait=False, progress=False)
    with quiet():
        first = f(*[np.copy(a) for a in args])
    said = {"trace": "served by the values the trace computed", "interpreter": "interpreter"}
    assert f.tier in said and said[f.tier] in f.explain(), f.explain()
    assert f.wait(), f.explain()
    with quiet():
        later = f(*[np.copy(a) for a in args])
    assert f.tier == "compiled" and "served by compiled kernels" in f.explain()
    return first, later


# ---------------------------------------------------------------------- the tiers agree
@pytest.mark.parametrize("dt", [DTYPES[2], "float32", "float64"], ids=str)
def test_the_tiers_agree_on_every_elementwise_op(dt, monkeypatch):
    # the compile server in one case, a thread in the others: both are what users get
    monkeypatch.setenv("TRACEKIT_JIT_COMPILER", "process" if dt == "float64" else "thread")
    dt = np.dtype(dt)
    cases = elementwise_cases(dt)[:40]
    first, later = _both_tiers(program(cases), *elementwise_inputs(dt))
    assert_matches(later, first, [n for n, _ in cases], "fast", f"{dt}")


@settings(
    max_examples=4,  # each example compiles a graph
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(programs(reductions=True))
def test_the_tiers_agree_on_random_programs(p):
    shapes, dtypes, prog = p
    rng = np.random.default_rng(5)
    args = [np.asarray(rng.integers(-3, 4, s)).astype(d) for s, d in zip(shapes, dtypes)]
    try:
        with quiet():
            want = execute(prog, *[np.copy(a) for a in args])
    except Exception:
        return  # not a valid NumPy program: nothing to compile
    first, later = _both_tiers(lambda *a: execute(prog, *a), *args)
    assert_matches(first, want, None, "fast", f"interpreter tier {prog}")
    assert_matches(later, first, None, "fast", f"compiled tier {prog}")


def test_the_compile_server_fills_the_cache_the_caller_loads(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEKIT_JIT_COMPILER", "process")
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    f = tk.jit(lambda x, y: np.sqrt(x * x + y) - np.sin(y), wait=False, progress=False)
    x, y = np.linspace(0, 1, 50), np.linspace(1, 2, 50)
    f(x, y)
    assert f.wait()
    c = f.compiled
    assert "compile server" in c.tiered.how, c.tiered.how
    stats = [getattr(c.program.module, name).stats for name, *_ in c.program.segments]
    assert all(s.cache_hits and not s.cache_misses for s in stats), stats
    np.testing.assert_allclose(f(x, y), np.sqrt(x * x + y) - np.sin(y), rtol=1e-12)


# ---------------------------------------------------------------------- failures
def test_a_failed_background_compile_leaves_the_interpreter_serving(monkeypatch):
    monkeypatch.setenv("TRACEKIT_JIT_COMPILER", "thread")  # the broken template is this process's
    monkeypatch.setitem(scalar.CPU_TEMPLATES, "negative", lambda a, dt: f"no_such_helper({a[0]})")

    def fn(x):
        y = np.tanh(x) + 1
        z = -y  # the node numba will reject
        return z * 2

    f = tk.jit(fn, wait=False, progress=False)
    x = np.linspace(-1, 1, 7)
    want = -(np.tanh(x) + 1) * 2
    np.testing.assert_allclose(f(x), want, rtol=1e-12)
    assert not f.wait()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            np.testing.assert_allclose(f(x), want, rtol=1e-12)
            assert f.tier == "interpreter"
    tier_warnings = [w for w in caught if issubclass(w.category, TierWarning)]
    assert len(tier_warnings) == 1, [str(w.message) for w in caught]
    message = str(tier_warnings[0].message)
    assert "negative" in message and "z = -y" in message and "test_tiers.py" in message, message
    assert tier_warnings[0].filename == __file__  # the warning points at the caller's line
    assert "compiling the kernels failed" in f.explain()


_EXITS_MID_COMPILE = """
import os, sys, time, numpy as np, tracekit as tk
sys.path.insert(0, {bench!r})
from cpu import make_chain
f = tk.jit(make_chain(30), wait={wait})
x = np.linspace(-3, 3, 1000, dtype=np.float32)
y = np.linspace(0.5, 1, 1000, dtype=np.float32)
r = f(x, y)
print(f.tier, float(np.abs(r - make_chain(30)(x, y)).max()), flush=True)
time.sleep({delay})
{exit}
"""


def _child(tmp_path, compiler, delay, exit_how, wait=False):
    code = _EXITS_MID_COMPILE.format(
        bench=os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"),
        wait=wait,
        delay=delay,
        exit=exit_how,
    )
    env = dict(os.environ, TRACEKIT_CACHE_DIR=str(tmp_path), TRACEKIT_JIT_COMPILER=compiler)
    env.pop("TRACEKIT_JIT_WAIT", None)
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return p


@pytest.mark.parametrize(
    "compiler,delay,exit_how",
    [("thread", 0.3, "sys.exit(0)"), ("process", 1.5, "os._exit(0)")],
)
def test_a_process_that_exits_mid_compile_leaves_no_broken_cache_entry(
    tmp_path, compiler, delay, exit_how
):
    first = _child(tmp_path, compiler, delay, exit_how)
    tier, err = first.stdout.split()
    assert tier == "trace" and float(err) < 1e-4, first.stdout
    # a new process compiles, or loads what the first one wrote, without a word about the cache
    after = _child(tmp_path, "thread", 0, "", wait=True)
    tier, err = after.stdout.split()
    assert tier == "compiled" and float(err) < 1e-4, after.stdout
    assert "cache" not in after.stderr and "corrupt" not in after.stderr, after.stderr


# ---------------------------------------------------------------------- blocking mode
def test_wait_true_compiles_before_the_first_answer_as_before(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACEKIT_JIT_WAIT", raising=False)
    # (kernels are cached by their own source: one no other test compiles, in a cache of its own)
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    f = tk.jit(lambda x: np.tanh(x) * 2.03125, wait=True, progress=False)
    assert f(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]
    assert f.tier == "compiled" and f.explain() == "first call: traced and compiled"
    assert f.compiled is not None and not hasattr(f.compiled, "tiered")
    f(np.ones(3))
    assert f.explain() == "cache hit: no retrace, no recompile"


def test_the_environment_makes_every_jit_wait(monkeypatch, tmp_path):
    monkeypatch.setenv("TRACEKIT_JIT_WAIT", "1")
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))  # (as above)
    f = tk.jit(lambda x: x + 1.03125, progress=False)
    f(np.zeros(2))
    assert f.tier == "compiled" and f.explain() == "first call: traced and compiled"
    monkeypatch.setenv("TRACEKIT_JIT_WAIT", "0")
    g = tk.jit(lambda x: x + 2, progress=False)
    g(np.zeros(2))
    assert g.tier == "trace"
    g(np.zeros(2))
    assert g.tier in ("interpreter", "compiled")
    g.wait()


def test_a_retrace_in_the_interpreter_tier_is_explained(monkeypatch):
    monkeypatch.setenv("TRACEKIT_JIT_COMPILER", "thread")

    def fn(x):
        return x * 2 if x.sum() > 0 else x - 1

    f = tk.jit(fn, wait=False, progress=False)
    np.testing.assert_array_equal(f(np.ones(3)), np.full(3, 2.0))
    with pytest.warns(tk.TracerWarning, match="retracing"):
        np.testing.assert_array_equal(f(-np.ones(3)), np.full(3, -2.0))
    assert "retraced" in f.explain() and f.tier == "trace"  # (the retrace's own values)
    assert f.wait()
    np.testing.assert_array_equal(f(-np.ones(3)), np.full(3, -2.0))
    assert f.tier == "compiled"


# ---------------------------------------------------------------------- the notebook's notice
def test_the_notebook_says_once_when_compiled_kernels_took_over(monkeypatch):
    import IPython.display

    import tracekit.backends as backends
    from tracekit.backends import tiers

    shown = []

    class Handle:
        def update(self, html):
            shown.append(html.data)

    def display(html, display_id=False):
        assert html.data == "" and display_id  # nothing to read until there is news
        return Handle()

    monkeypatch.setattr(backends, "_in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display", display)
    monkeypatch.setenv("TRACEKIT_JIT_COMPILER", "thread")
    f = tk.jit(lambda x: np.cos(x) * 3, wait=False)
    f(np.zeros(3))
    (entry,) = f._cache.values()
    assert isinstance(entry, tiers.Tiered) and f.wait()
    said = f"compiled kernels took over after {entry.seconds:.1f} s"
    assert shown == ([f"<small>&lt;lambda&gt;: {said}</small>"] if entry.seconds >= 1 else [])
    shown.clear()
    entry.seconds = 2.5  # as after a slow compile (a quick one says nothing)
    entry._notice(entry)
    assert len(shown) == 1 and "compiled kernels took over after 2.5 s" in shown[0], shown
    g = tk.jit(lambda x: np.cos(x) * 4, wait=False, progress=False)  # progress=False: silent
    g(np.zeros(3))
    assert g.wait() and len(shown) == 1


# ---------------------------------------------------------------------- the first answer
_W = np.linspace(-1.0, 1.0, 6).reshape(2, 3)  # a captured array


def _returns_input(x):
    return x


def _twice(x):
    y = x * 2.0
    return y, y, y[:, 1:]


def _nested(x, y):
    return {"s": x + y, "t": [x * y, (x - y, 3, "label", None)], "v": x.T}


def _written(x):
    y = x.copy()
    y[0, 1] = 5.0
    z = np.zeros_like(x)
    z[...] = y.T.T
    return y, z


def _made_inside(x):
    k = np.random.default_rng(3).random((2, 3))  # a constant of the graph
    return k, k[0], x + k


def _looped(x):
    y = x
    for _ in range(12):  # rolled into one loop node
        y = np.sin(y) + x
    return y


def _weak(x, a):
    return x * a, a, 2.5


_X = np.array([[0.5, -1.5, 2.0], [np.nan, 0.0, -0.0]])
_I = np.array([[1, -2, 3], [4, 0, -7]], np.int32)
_ANSWERED_BY_THE_TRACE = {
    "elementwise": (lambda x: np.tanh(x) * 2 - np.exp(-x), (_X,)),
    "returns its input": (_returns_input, (_X,)),
    "views of its input": (lambda x: (x[1:], x.T, x.reshape(-1)), (_X,)),
    "one value three times": (_twice, (_X,)),
    "nested structure and statics": (_nested, (_X, _X[::-1])),
    "writes into its own arrays": (_written, (_X,)),
    "a graph constant": (_made_inside, (_X,)),
    "a captured array": (lambda x: (x * _W, _W, _W[1]), (_X,)),
    "a rolled loop": (_looped, (_X,)),
    "weak scalars": (_weak, (_X, 1.5)),
    "integers and booleans": (lambda i: (i * 3, i > 0, i // 2), (_I,)),
    "complex": (lambda x: np.exp(1j * x) * (1 + 2j), (_X,)),
    "reductions kept 2-d": (lambda x: np.max(x, axis=1, keepdims=True) - x.sum(0), (_X,)),
    "matmul": (lambda a, b: np.tanh(a @ b), (_X.T.copy(), _X[:, :2].copy())),
    "a 0-d result of an op on arrays": (lambda x: (x * 2, x.sum(), np.max(x[0])), (_X,)),
    "a 0-d argument returned": (lambda x, s: (x * s, s), (_X, np.array(1.5))),
    "a NumPy scalar argument returned": (lambda x, s: (x * s, s), (_X, np.float32(1.5))),
    "a Fortran-ordered argument": (lambda x: np.sqrt(np.abs(x)) + x, (np.asfortranarray(_X),)),
    "a strided argument": (lambda x: x.reshape(-1) * 2, (np.ones((4, 6))[:, ::2],)),
}


def _assert_identical(got, want, where="result"):
    """Same Python types all the way down (tuple, list, dict, ndarray, NumPy scalar, float),
    same dtypes, shapes and bits."""
    assert type(got) is type(want), f"{where}: {type(got).__name__}, want {type(want).__name__}"
    if isinstance(want, list | tuple):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_identical(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for k in want:
            _assert_identical(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, np.ndarray | np.generic | float | complex):
        assert bits_equal(got, want) and np.asarray(got).dtype == np.asarray(want).dtype, where
    else:
        assert got == want, where


def _arrays_in(x) -> list:
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, list | tuple):
        return [a for e in x for a in _arrays_in(e)]
    return [x] if isinstance(x, np.ndarray) else []


@pytest.fixture
def no_compiles(monkeypatch):
    """Kernels never compile (the interpreter answers every later call): the first answer
    alone is under test."""
    from tracekit.backends import tiers

    monkeypatch.delenv("TRACEKIT_JIT_WAIT", raising=False)
    monkeypatch.setattr(tiers.Tiered, "start", lambda self: self)


@pytest.mark.parametrize("case", list(_ANSWERED_BY_THE_TRACE))
def test_the_first_answer_is_the_traces_and_the_interpreters(case, no_compiles):
    fn, args = _ANSWERED_BY_THE_TRACE[case]
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    with quiet():
        want = tk.trace(fn, *args)(*args)  # the interpreter's answer
        f = tk.jit(fn, wait=False, progress=False)
        first = f(*args)
    assert f.tier == "trace", f.explain()
    assert "served by the values the trace computed" in f.explain(), f.explain()
    _assert_identical(first, want)
    for a, b in zip(args, before):  # the arguments are untouched
        _assert_identical(a, b, "argument")
    (entry,) = f._cache.values()
    constants = {v: np.array(c, copy=True) for v, c in entry.traced.graph.constants.items()}
    held = [a for a in args if isinstance(a, np.ndarray)] + [_W]
    held += list(entry.traced.graph.constants.values())
    results = _arrays_in(first)
    for i, r in enumerate(results):  # nothing the caller gets shares memory with anything else
        assert not any(np.shares_memory(r, h) for h in held + results[:i]), (case, i)
    for r in results:
        r[...] = 7
    assert not entry._answer  # the trace's values are released
    with quiet():
        again = f(*args)
    assert f.tier == "interpreter"
    _assert_identical(again, want, "the next call")
    for v, c in constants.items():
        _assert_identical(entry.traced.graph.constants[v], c, "a graph constant")


class _Model:
    def __init__(self):
        self.w = np.linspace(0.0, 1.0, 5)

    def step(self, g):
        self.w = self.w - 0.5 * g  # rebinding recorded as a write into the captured array
        return self.w * 2


def _zero_d_written(x):
    y = np.zeros(())
    y[...] = x.sum()  # the result's value: the sum's (a NumPy scalar, interpreted); traced: 0-d
    return y


def _zero_d_written_copy(x):
    return _zero_d_written(x).copy()


def _accumulate(x, acc):
    acc += x  # a write into an argument
    return x * 2


@numba.njit
def _numba_square(a):
    return a * a


def _python_op(x):
    return _numba_square(x) + 1.0  # a numba function: a python op, run again by the interpreter


_ANSWERED_BY_THE_INTERPRETER = {
    "writes into an argument": (_accumulate, 2),
    "rebinds a captured array": ("model", 1),
    "a 0-d result of 0-d values": (lambda x: x.sum() * 2.0, 1),
    "a 0-d result beside others": (lambda x: (x * 2, np.where(x.max() > 0, x.min(), 1.0)), 1),
    "a 0-d array written into": ("zero_d_written", 1),
    "a copy of a 0-d array written into": ("zero_d_written_copy", 1),
    "a python op": (_python_op, 1),
}


@pytest.mark.parametrize("case", list(_ANSWERED_BY_THE_INTERPRETER))
def test_the_interpreter_gives_the_first_answer_where_the_trace_may_differ(case, no_compiles):
    fn, n_args = _ANSWERED_BY_THE_INTERPRETER[case]
    model = _Model() if fn == "model" else None
    fn = {"zero_d_written": _zero_d_written, "zero_d_written_copy": _zero_d_written_copy}.get(
        fn, fn
    )
    fn = model.step if model else fn
    x = np.linspace(0.5, 2.5, 5)
    args = (x, np.ones(5))[:n_args]
    w0 = model.w.copy() if model else None
    acc_want = args[1] + x if n_args == 2 else None
    with quiet():
        want = fn(*[a.copy() for a in args])  # NumPy's own answer (writes into the copies)
        if model:
            model.w = w0.copy()
        f = tk.jit(fn, wait=False, progress=False)
        first = f(*args)
    assert f.tier == "interpreter", (case, f.explain())
    assert "served by the interpreter" in f.explain()
    assert_same(first, want)  # (a 0-d array written into: the interpreter gives a NumPy scalar)
    if n_args == 2:  # the write reached the caller's array, once
        np.testing.assert_array_equal(args[1], acc_want)
    if model:  # the captured array was rebound once
        np.testing.assert_allclose(model.w, w0 - 0.5 * x, rtol=1e-15)


def test_the_first_answer_is_for_the_arguments_traced_only():
    from tracekit.traced import trace_answering

    x = np.linspace(0, 1, 4)
    t, answer = trace_answering(lambda x: np.cos(x) * 3, x)
    assert t.answer(answer, (x.copy(),)) is None  # equal values, other objects
    np.testing.assert_array_equal(t.answer(answer, (x,)), np.cos(x) * 3)


def test_a_strided_argument_copied_compactly_gets_the_interpreters_answer(monkeypatch, no_compiles):
    from tracekit.tracer import context

    monkeypatch.setattr(context, "LAYOUT_COPY_LIMIT", 0)  # every strided copy made compact
    x = np.arange(256.0).reshape(4, 64)[:, ::32]
    f = tk.jit(lambda x: x.reshape(-1) * 2, wait=False, progress=False)
    np.testing.assert_array_equal(f(x), x.reshape(-1) * 2)
    assert f.tier == "interpreter"
