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

import numpy as np
import pytest
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
    """(the interpreter tier's answer, the compiled tier's) of ``tk.jit(fn)`` on ``args``."""
    f = tk.jit(fn, wait=False, progress=False)
    with quiet():
        first = f(*[np.copy(a) for a in args])
    assert f.tier == "interpreter" and "served by the interpreter" in f.explain()
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
    assert tier == "interpreter" and float(err) < 1e-4, first.stdout
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
    assert g.tier == "interpreter"
    g.wait()


def test_a_retrace_in_the_interpreter_tier_is_explained(monkeypatch):
    monkeypatch.setenv("TRACEKIT_JIT_COMPILER", "thread")

    def fn(x):
        return x * 2 if x.sum() > 0 else x - 1

    f = tk.jit(fn, wait=False, progress=False)
    np.testing.assert_array_equal(f(np.ones(3)), np.full(3, 2.0))
    with pytest.warns(tk.TracerWarning, match="retracing"):
        np.testing.assert_array_equal(f(-np.ones(3)), np.full(3, -2.0))
    assert "retraced" in f.explain() and f.tier == "interpreter"
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
