"""CPU backend at run time: ``out=`` buffers, reused temporaries and threads, the disk cache
(second process, corrupt entries, unusable directories), ``tk.jit`` (retraces, explanations,
static arguments, guards, captured arrays, methods), compile errors, and the op coverage of the
backend tests."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import pytest
from helpers.run import both, compiled, in_threads, quiet
from test_cpu import assert_matches

import tracekit as tk
from tracekit.backends import scalar
from tracekit.backends.cpu import CompileError
from tracekit.ops import OPS

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning")]
ROOT = Path(__file__).resolve().parents[2]


def _softmax_and_more(x, b):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    return s * b, np.tanh(x + b).sum(axis=0)


def _close(got, want):
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _close(g, w)
        return
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


# ---------------------------------------------------------------------- out=
def test_out_buffers_contiguous_and_strided():
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal((16, 24)), rng.standard_normal(24)
    c, t = compiled(_softmax_and_more, x, b)
    want = t(x, b)
    o1, o2 = np.empty((16, 24)), np.empty(24)
    res = c(x, b, out=(o1, o2))
    assert res[0] is o1 and res[1] is o2
    _close((o1, o2), want)
    big = np.full((16, 48), -7.0)
    s1, s2 = big[:, ::2], np.empty(48)[::-2]  # non-contiguous destinations
    c(x, b, out=[s1, s2])
    _close((s1, s2), want)
    assert np.all(big[:, 1::2] == -7.0)  # nothing written between the strided elements
    with pytest.raises(ValueError):
        c(x, b, out=(o1,))


def test_out_buffer_that_is_also_an_input():
    """``out=`` aliasing an argument that the kernel reads in another order (as np.add with
    overlapping out= does, the result is as if the inputs were read first)."""
    x = np.arange(12.0)
    c, t = compiled(lambda x: x[::-1] * 2 + x, x.copy())
    want = t(x.copy())
    y = x.copy()
    assert c(y, out=y) is y
    assert_matches(y, want, "add")
    m = np.arange(16.0).reshape(4, 4)
    c, t = compiled(lambda a: (a.T - a, a.sum(axis=0)), m.copy())
    want = t(m.copy())
    y, s = m.copy(), np.empty(4)
    c(y, out=(y, s))
    assert_matches((y, s), want, ("subtract", "sum"))


def test_single_output_out_and_results_held_by_the_caller_are_not_reused():
    x = np.linspace(-3, 3, 50)
    c, t = compiled(lambda x: np.sin(x) * 2 + 1, x)
    o = np.empty(50)
    assert c(x, out=o) is o
    _close(o, t(x))
    r1 = c(x)
    r2 = c(x * 2)  # a pooled result buffer must not be reused while r1 is alive
    _close(r1, t(x))
    _close(r2, t(x * 2))
    v = r2[::2]  # a view keeps its base alive as well
    del r2
    c(x * 3)
    _close(v, t(x * 2)[::2])


def test_temporaries_are_reused_across_calls_and_threads_do_not_share_them():
    rng = np.random.default_rng(1)
    x0, b0 = rng.standard_normal((64, 96)), rng.standard_normal(96)

    def fn(x, b):
        h = np.tanh(x) * b  # temporaries between the kernels
        m = h @ h.T
        return (m - m.max(axis=1, keepdims=True)).sum(axis=1) + h.sum(axis=1)

    c, t = compiled(fn, x0, b0)
    assert len(c.kernels) >= 2
    inputs = [(rng.standard_normal((64, 96)), rng.standard_normal(96)) for _ in range(8)]
    want = [t(x, b) for x, b in inputs]
    results = {}

    def work(k):
        for _ in range(15):
            results[k] = c(*inputs[k])
            np.testing.assert_allclose(results[k], want[k], rtol=1e-12, atol=1e-12)

    in_threads(work, 8)
    assert len(results) == 8
    for _ in range(3):  # and again on one thread: the pooled temporaries are reused
        np.testing.assert_allclose(c(*inputs[0]), want[0], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------- the disk cache
SCRIPT = textwrap.dedent(
    """
    import json, time, warnings
    import numpy as np
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tracekit as tk

        def f(x, y):
            return np.tanh(x) * y + (x - x.max(axis=-1, keepdims=True)).sum(axis=-1)[:, None]

        x, y = np.linspace(-1, 1, 12).reshape(3, 4), np.full((3, 4), 2.0)
        t = tk.trace(f, x, y)
        t0 = time.perf_counter()
        c = tk.compile(t, progress=False)
        seconds = time.perf_counter() - t0
        mod = c.program.module
        names = [s[0] for s in c.program.segments]
        hits = sum(sum(getattr(mod, n).stats.cache_hits.values()) for n in names)
        misses = sum(sum(getattr(mod, n).stats.cache_misses.values()) for n in names)
        ok = bool(np.allclose(c(x, y), t(x, y), rtol=1e-15))
    runtime = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    print(json.dumps(dict(seconds=seconds, hits=hits, misses=misses, ok=ok, warnings=runtime)))
    """
)


def _run(cache_dir) -> dict:
    env = dict(os.environ, TRACEKIT_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    env.pop("TRACEKIT_DISABLE_DISK_CACHE", None)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_machine_code_from_the_disk_cache(tmp_path):
    first = _run(tmp_path)
    assert first["ok"] and first["misses"] >= 1 and first["hits"] == 0, first
    assert list(tmp_path.glob("tk_*.py")) and list(tmp_path.glob("__pycache__/*.nbi"))
    index = {p: p.stat().st_mtime_ns for p in tmp_path.glob("__pycache__/*.nb*")}
    second = _run(tmp_path)
    assert second["ok"] and second["hits"] >= 1 and second["misses"] == 0, second
    assert not second["warnings"]
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("__pycache__/*.nb*")} == index


def test_a_corrupt_cache_entry_is_recompiled_with_one_warning(tmp_path):
    _run(tmp_path)
    for p in list(tmp_path.glob("tk_*.py")) + list(tmp_path.glob("__pycache__/*.nb*")):
        p.write_bytes(p.read_bytes()[:40])  # truncated source, index and machine code
    after = _run(tmp_path)
    assert after["ok"], after
    assert len(after["warnings"]) <= 1, after
    again = _run(tmp_path)  # and the entry was repaired
    assert again["ok"] and again["hits"] >= 1 and not again["warnings"], again


def test_an_unusable_cache_dir_compiles_in_memory_with_one_warning(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res = _run(blocker / "cache")  # a path under a regular file can never be created
    assert res["ok"], res
    assert len(res["warnings"]) == 1 and "cache" in res["warnings"][0], res


def test_a_read_only_cache_dir_compiles_with_at_most_one_warning(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as root: a read-only mode does not stop writes")
        res = _run(ro)
        assert res["ok"], res
        assert len(res["warnings"]) == 1, res
    finally:
        ro.chmod(0o700)


def _kmeans_step(points, centers):  # five kernels around a matmul
    d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    onehot = (d.argmin(axis=1)[:, None] == np.arange(centers.shape[0])).astype(np.float64)
    return (onehot.T @ points + centers) / (onehot.sum(axis=0)[:, None] + 1.0)


def _kmeans_step_edited(points, centers):  # one node changed: 2.0 for 1.0
    d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    onehot = (d.argmin(axis=1)[:, None] == np.arange(centers.shape[0])).astype(np.float64)
    return (onehot.T @ points + centers) / (onehot.sum(axis=0)[:, None] + 2.0)


def _compiled_kernels(c) -> int:
    return sum(
        len(srcs) for (*_, srcs), o in zip(c.program.segments, c.program.origins) if o == "compiled"
    )


@pytest.mark.parametrize("disk", [True, False], ids=["disk", "memory"])
def test_an_edit_of_one_node_recompiles_only_its_kernel(monkeypatch, tmp_path, disk):
    """Kernels are cached by their own source and types, not the graph's: the edited graph
    reuses the four kernels the edit left alone, whatever lines they came from."""
    from tracekit.backends import cache

    monkeypatch.setattr(cache, "_modules", type(cache._modules)())  # nothing from other tests
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(3)
    points, centers = rng.standard_normal((50, 2)), rng.standard_normal((4, 2))
    with quiet():
        first = tk.compile(tk.trace(_kmeans_step, points, centers), progress=False, cache=disk)
        edited = tk.compile(
            tk.trace(_kmeans_step_edited, points, centers), progress=False, cache=disk
        )
    assert len(first.program.segments) == 5 and _compiled_kernels(first) == 5
    assert _compiled_kernels(edited) == 1, edited.program.origins
    assert edited.program.origins.count("memory") == 4
    np.testing.assert_allclose(first(points, centers), _kmeans_step(points, centers), rtol=1e-12)
    np.testing.assert_allclose(
        edited(points, centers), _kmeans_step_edited(points, centers), rtol=1e-12
    )


# ---------------------------------------------------------------------- tk.jit
def test_jit_retraces_on_new_shapes_and_dtypes_and_explains_why():
    calls = []

    @tk.jit
    def f(x):
        calls.append(x.shape)
        return np.exp(x) * 2 - x.sum()

    x = np.linspace(0, 1, 6)
    with quiet():
        np.testing.assert_allclose(f(x), np.exp(x) * 2 - x.sum(), rtol=1e-12)
        assert "first call" in f.explain()
        f(x + 1)
        assert "cache hit" in f.explain() and len(calls) == 1
        f(np.ones((2, 3)))
        assert "shape" in f.explain() and len(calls) == 2
        f(np.ones((2, 3), np.float32))
        assert "dtype" in f.explain() and len(calls) == 3
        f(x)
        assert "cache hit" in f.explain() and len(calls) == 3


def test_jit_calls_alternating_between_signatures_are_each_right():
    """A call goes first to the compiled fast path of the call before it, which checks the
    arguments it was traced for (shapes, dtypes, static values): any other call takes the
    signature's own entry."""
    f = tk.jit(lambda x, k: np.tanh(x) * k, wait=True)
    a32, a64 = np.linspace(0, 1, 6, dtype=np.float32), np.linspace(0, 1, 6)
    calls = [(a32, 2), (a32, 2), (a64, 2), (a64, 2), (a32, 3), (a32, 3), (a32, 2), (a64[:3], 2)]
    calls += [(a64[::2], 2), (a64[::2], 2.5), (a64[::2], 2)]
    for x, k in calls:
        got, want = f(x, k), np.tanh(x) * k
        assert got.dtype == want.dtype and got.shape == want.shape, (x.dtype, x.shape, k)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert f.explain().startswith("cache hit")
    assert f._last_quick is not None  # (the path under test was taken)


def test_jit_static_arguments():
    @tk.jit
    def f(x, n, mode="add"):
        return x + n if mode == "add" else x * n

    x = np.arange(4.0)
    np.testing.assert_array_equal(f(x, 2), x + 2)
    np.testing.assert_array_equal(f(x, 3), x + 3)
    assert "static" in f.explain()
    np.testing.assert_array_equal(f(x, 3, "mul"), x * 3)
    np.testing.assert_array_equal(f(x, 3), x + 3)
    assert "cache hit" in f.explain()


def test_jit_keyword_arguments():
    @tk.jit
    def f(x, n=2, *, mode="add"):
        return x + n if mode == "add" else x * n

    x = np.arange(4.0)
    np.testing.assert_array_equal(f(x, n=3), x + 3)
    np.testing.assert_array_equal(f(x, 3), x + 3)
    assert "cache hit" in f.explain()  # n=3 and 3 are the same call
    np.testing.assert_array_equal(f(x, n=3, mode="mul"), x * 3)
    assert "static" in f.explain()
    np.testing.assert_array_equal(f(x=x), x + 2)
    with pytest.raises(TypeError, match="keyword-only"):
        f(x, mode=np.ones(4))


def test_jit_explanations_name_the_argument_and_compare_with_the_nearest_signature():
    @tk.jit
    def f(x, n, *, mode="add"):
        return x + n if mode == "add" else x * n

    x = np.arange(4.0)
    f(x, 3)
    f(x, 4)
    assert f.explain() == "recompiled: static argument n: 3 -> 4"
    f(x, n=3)  # a keyword call of a cached signature
    assert f.explain().startswith("cache hit")
    f(x.astype(np.float32), n=4)  # nearest: (x, 4), not the previous call (x, 3)
    assert f.explain() == "recompiled: x: dtype float64 -> float32"
    f(x[:3], 4, mode="mul")
    assert (
        f.explain() == "recompiled: x: shape (4,) -> (3,); static argument mode: not given -> 'mul'"
    )
    f(2.0, 4)
    assert f.explain() == "recompiled: x: an array float64[4] -> a Python float"

    @tk.jit
    def g(params, xs):
        return params["w"] * xs[0]

    g({"w": x}, [x, x])
    g({"w": x, "b": x}, [x])
    assert g.explain() == (
        "recompiled: params: a dict with keys ['w'] -> a dict with keys ['b', 'w']; "
        "xs: a list of 2 items -> a list of 1 item"
    )


def test_argument_mismatches_name_the_parameter_and_say_expected_and_got():
    t = tk.trace(lambda x, w: x @ w, np.ones((4, 3)), np.ones((3, 2)))
    for args, said in [
        (
            (np.ones((4, 3)).tolist(), np.ones((3, 2))),
            "x: traced with an array or float, got a list of 4",
        ),
        ((np.ones((4, 3)),), "traced with 2 arguments, got 1"),
        (
            (np.ones((4, 3)), {"a": np.ones(2)}),
            "w: traced with an array or float, got a dict with keys",
        ),
    ]:
        for run in (t, tk.compile(t, progress=False)):
            with pytest.raises(TypeError) as e:
                run(*args)
            assert said in str(e.value) and "<class" not in str(e.value)


def test_a_new_process_says_where_the_machine_code_came_from(tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np, tracekit as tk
        f = tk.jit(lambda x: np.exp(x) * 3 + 1, progress=False)
        f(np.ones(7))
        print(f.explain())
        """
    )
    env = dict(os.environ, TRACEKIT_CACHE_DIR=str(tmp_path), PYTHONPATH=os.getcwd())
    said = [
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
        ).stdout.strip()
        for _ in range(2)
    ]
    assert said[0] == "first call: traced and compiled"
    assert said[1] == f"first call: traced; machine code loaded from the disk cache ({tmp_path})"


def test_jit_guard_failure_retraces_with_a_warning_and_the_right_answer():
    @tk.jit
    def f(x):
        if x.sum() > 0:  # control flow on data: baked into the trace, guarded
            return x * 2
        return x - 1

    pos, neg = np.ones(3), -np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.TracerWarning)
        np.testing.assert_array_equal(f(pos), pos * 2)
    with pytest.warns(tk.TracerWarning, match="retrac"):
        got = f(neg)
    np.testing.assert_array_equal(got, neg - 1)
    assert "retraced" in f.explain()


def test_jit_sees_captured_arrays_updated_in_place_and_rebound():
    state = {"w": np.ones(4)}

    class Layer:
        def __init__(self):
            self.w = np.full(4, 2.0)

        @tk.jit
        def forward(self, x):
            return np.tanh(x) * self.w

    w = np.ones(4)

    @tk.jit
    def g(x):
        return x * w + state["w"].sum()

    x = np.linspace(-1, 1, 4)
    np.testing.assert_allclose(g(x), x * w + 4)
    w *= 3  # in place
    np.testing.assert_allclose(g(x), x * 3 + 4)
    a, b = Layer(), Layer()
    b.w = np.full(4, -1.0)  # rebound before the first call
    np.testing.assert_allclose(a.forward(x), np.tanh(x) * 2.0)
    np.testing.assert_allclose(b.forward(x), -np.tanh(x))
    a.w -= 0.5  # a training step in place
    np.testing.assert_allclose(a.forward(x), np.tanh(x) * 1.5)
    a.w = np.full(4, 7.0)  # rebound
    np.testing.assert_allclose(a.forward(x), np.tanh(x) * 7.0)
    a.w = np.full(5, 1.0)  # another shape: recompiled, not a stale or failing call
    with pytest.raises(ValueError):
        a.forward(x)  # tanh(x[4]) * w[5] does not broadcast, as in NumPy


def test_jit_methods_compile_per_instance_and_let_instances_go():
    class Scaled:
        def __init__(self, k):
            self.k = np.full(3, float(k))

        @tk.jit
        def apply(self, x):
            return x * self.k

    class Slotted:
        __slots__ = ("k", "__weakref__")

        def __init__(self, k):
            self.k = np.full(3, float(k))

        @tk.jit
        def apply(self, x):
            return x + self.k

    x = np.arange(3.0)
    for cls, op in ((Scaled, np.multiply), (Slotted, np.add)):
        a, b = cls(2), cls(5)
        np.testing.assert_array_equal(a.apply(x), op(x, 2.0))
        np.testing.assert_array_equal(b.apply(x), op(x, 5.0))
        np.testing.assert_array_equal(a.apply(x), op(x, 2.0))
        assert "cache hit" in a.apply.explain()
        if cls is Scaled:  # the instance holds its compiled method, which does not hold it
            ref = weakref.ref(a)
            del a
            gc.collect()
            assert ref() is None


def test_single_output_out_variants():
    """The quick ``out=`` path takes a fresh contiguous buffer of the result's dtype; the rest
    (another dtype, strided, read-only, aliasing an input) gets the general path's checks."""
    x = np.linspace(-1, 1, 40)
    c, t = compiled(lambda x: np.exp(x) - x, x)
    want = t(x)
    o = np.empty(40)
    assert c(x, out=o) is o
    _close(o, want)
    o32 = np.empty(40, np.float32)
    assert c(x, out=o32) is o32
    np.testing.assert_allclose(o32, want.astype(np.float32), rtol=1e-6)
    strided = np.zeros(80)[::2]
    c(x, out=strided)
    _close(strided, want)
    y = x.copy()
    assert c(y, out=y) is y
    _close(y, want)
    with pytest.raises(TypeError):
        c(x, out=np.empty(40, np.int64))  # float64 does not cast to int64 safely
    ro = np.empty(40)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writeable"):
        c(x, out=ro)
    with pytest.raises(ValueError):
        c(x, out=np.empty(41))


# ---------------------------------------------------------------------- errors
def test_a_numba_failure_names_the_node_and_the_users_line(monkeypatch):
    monkeypatch.setitem(scalar.CPU_TEMPLATES, "negative", lambda a, dt: f"no_such_helper({a[0]})")

    def fn(x):
        y = np.tanh(x) + 1
        z = -y  # the node numba will reject
        return z * 2

    t = tk.trace(fn, np.ones(5))
    with pytest.raises(CompileError) as err:
        tk.compile(t, progress=False, cache=False)
    msg = str(err.value).splitlines()
    assert "negative" in msg[0] and "z = -y" in msg[0], msg
    assert "test_cpu_runtime.py" in msg[0]
    assert "no_such_helper" in str(err.value)


def test_a_numba_typing_failure_names_the_node(monkeypatch):
    monkeypatch.setitem(scalar.CPU_TEMPLATES, "square", lambda a, dt: f"({a[0]}).no_attr")

    def fn(x):
        return np.sqrt(np.square(x) + 2.0)

    with pytest.raises(CompileError, match=r"square -> %\w+: f64\[3\] at .*np.square"):
        tk.compile(tk.trace(fn, np.ones(3)), progress=False, cache=False)


def test_integer_power_with_a_negative_exponent_raises_as_numpy():
    x, p = np.array([2, 3]), np.array([1, -1])
    c, t = compiled(lambda x, p: x**p, x, np.array([1, 2]))
    with pytest.raises(ValueError, match="negative"):
        t(x, p)
    with pytest.raises(ValueError, match="negative"):
        c(x, p)


def test_integer_division_by_zero_and_overflow_does_not_crash():
    i64 = np.iinfo(np.int64)
    x = np.array([i64.min, i64.min, 7, -7, 0], np.int64)
    y = np.array([-1, 0, 0, -1, 0], np.int64)
    c, t = compiled(lambda x, y: (x // y, x % y, -x // y), x, y)
    got, want, _, _ = both(c, t, x, y)
    assert_matches(got, want)


# ---------------------------------------------------------------------- coverage of the op table
def _recorded_ops() -> set:
    """The ops the backend test programs record (traced, not compiled)."""
    import test_cpu
    import test_cpu_programs as progs
    import test_loops
    import test_ops

    seen = set()
    with quiet():
        for dt in test_cpu.DTYPES:
            args = test_cpu.elementwise_inputs(dt)
            t = tk.trace(test_cpu.program(test_cpu.elementwise_cases(dt)), *args)
            seen |= {n.op for n in t.graph.nodes}
        x = np.ones(test_cpu.R_SHAPE)
        for fn in (
            lambda x: test_cpu._reductions(np.maximum(x, x), 1, True),
            lambda x: (np.cumsum(x, axis=0), np.cumprod(x, axis=-1)),
        ):
            seen |= {n.op for n in tk.trace(fn, x).graph.nodes}
        t = tk.trace(progs.movement_program, *progs.movement_inputs("complex128"))
        seen |= {n.op for n in t.graph.nodes}
        for fn, make in test_loops.PROGRAMS.values():  # compiled in test_loops
            seen |= {n.op for n in tk.trace(fn, *make(0)).graph.nodes}
        t = tk.trace(test_ops._host_functions, *test_ops._function_args(0))  # compiled there
        seen |= {n.op for n in t.graph.nodes}
    return seen


def test_every_op_has_a_backend_case():
    """A new op in OPS fails here until a backend test program compiles it."""
    wanted = {name for name, op in OPS.items() if op.kind != "opaque"}
    assert sorted(wanted - _recorded_ops()) == []


# ---------------------------------------------------------------------- shared numba helpers
def test_generated_modules_share_the_helpers():
    """The numba helpers (``cpu_helpers.py``) are defined once per process, not in each module:
    numba's dispatchers are never freed, so a copy per compiled graph would stay for good."""
    from tracekit.backends import cpu_helpers

    x = np.array([1.0, np.nan, -2.0, 3.0])
    with quiet():
        c1 = tk.compile(tk.trace(lambda a: np.maximum(a, 0.5) * 3.0, x), progress=False)
        c2 = tk.compile(tk.trace(lambda a: np.maximum(a - 1.0, a * 0.25), x), progress=False)
    m1, m2 = c1.program.module, c2.program.module
    assert m1 is not m2
    assert m1._maximum is m2._maximum is cpu_helpers._maximum
    # only the helpers a module calls are imported; the source says where they come from
    assert "\nfrom tracekit.backends.cpu_helpers import _maximum\n" in c1.source
    assert not hasattr(m1, "_cdiv") and "def _maximum" not in c1.source
    np.testing.assert_array_equal(c1(x), np.maximum(x, 0.5) * 3.0)
    np.testing.assert_array_equal(c2(x), np.maximum(x - 1.0, x * 0.25))


def test_the_cache_key_follows_the_code_kernels_call_into(monkeypatch):
    """The key covers the backends modules a generated module imports (and theirs), read off
    its import lines: an edit to a helper changes it, an edit elsewhere does not."""
    from tracekit.backends import cache

    x = np.random.default_rng(0).random(64).astype(np.float32)
    with quiet():
        c = tk.compile(tk.trace(lambda x: np.tanh(x) + np.maximum(x, 0.5), x))
    called = cache.called_code(c.source)
    assert {"tracekit.backends.cpu_helpers", "tracekit.backends.fastmath"} <= set(called)
    assert "tracekit.render" not in called and "tracekit.backends" not in called
    before = cache.module_key(c.source)
    real = cache.module_source

    def edit(module):
        return lambda name: real(name) + (b"# an edit\n" if name == module else b"")

    try:
        for module, changes in (
            ("tracekit.backends.cpu_helpers", True),
            ("tracekit.render", False),
        ):
            cache._code_digest.cache_clear()
            monkeypatch.setattr(cache, "module_source", edit(module))
            assert (cache.module_key(c.source) != before) is changes, module
    finally:
        monkeypatch.undo()
        cache._code_digest.cache_clear()
    assert cache.module_key(c.source) == before


# ---------------------------------------------------------------------- threads on a busy machine
def test_kernels_leave_the_cores_other_processes_keep_busy(monkeypatch):
    import numba

    from tracekit.backends import runtime

    base = numba.config.NUMBA_NUM_THREADS
    numba.set_num_threads(base)
    monkeypatch.setattr(runtime, "_per_thread", threading.local())  # as in a new thread
    n = 1 << 16  # (a kernel large enough to be parallel)
    c, _ = compiled(lambda x: np.tanh(x) + 1, np.ones(n))
    assert c.runner.threads
    try:
        for others, want in ((base + 3, 1), (0, base), (1, max(1, base - 1))):
            monkeypatch.setattr(runtime, "other_load", lambda o=others: o)
            monkeypatch.setattr(runtime, "_gate", [0.0, None])  # look again at this call
            np.testing.assert_allclose(c(np.zeros(n)), np.ones(n))
            assert numba.get_num_threads() == want, (others, want)
        numba.set_num_threads(1)  # the user's own setting is the most it uses
        monkeypatch.setattr(runtime, "_gate", [0.0, None])
        c(np.zeros(n))
        assert numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(base)


def test_a_kernels_second_compile_keeps_numbas_loop_fusion_off():
    """A read-only argument compiles a kernel again: with the options numba emptied at the
    first compile (a dict it pops), its loop fusion would be on and could merge kernels of a
    segment that must run one after the other."""
    from numba.core.cpu_options import ParallelOptions

    x = np.random.default_rng(0).random(1 << 16)
    c, _ = compiled(lambda x: np.exp(x) * 2 + x, x, cache=False)
    read_only = x.copy()
    read_only.flags.writeable = False
    np.testing.assert_allclose(c(x), np.exp(x) * 2 + x)
    np.testing.assert_allclose(c(read_only), np.exp(x) * 2 + x)
    segment = c.runner.ns["segment0"]
    assert len(segment.signatures) == 2
    assert ParallelOptions(segment.targetoptions["parallel"]).fusion is False


def test_a_serial_program_leaves_the_thread_count_alone(monkeypatch):
    """A call whose kernels are all serial does not look at the machine's load: nothing it
    runs would use the threads."""
    import tracekit.backends as backends

    c, _ = compiled(lambda x: np.tanh(x) + 1, np.ones(4))
    assert not c.runner.threads
    monkeypatch.setattr(backends, "fit_threads", lambda: pytest.fail("fitted the threads"))
    np.testing.assert_allclose(c(np.zeros(4)), np.ones(4))
    np.testing.assert_allclose(c(np.zeros(4), out=np.empty(4)), np.ones(4))


def _small_loop_beside(x, steps):
    y = np.tanh(x) * 2.0  # (a parallel kernel from 2**15 elements)
    s = y[:64]
    for t in range(steps):
        s = np.sin(s) * 0.5 + t
    return y + s.sum()


@pytest.mark.parametrize("size, parallel", [(64, False), (40_000, True)])
def test_a_call_fits_the_threads_only_where_a_kernel_may_run_in_parallel(
    monkeypatch, size, parallel
):
    """A call of the whole graph as one numba function sets the thread count first only where
    one of its functions has a parallel loop: elsewhere the look at the load is time lost."""
    import tracekit.backends as backends
    from tracekit.backends import cpu

    x = np.linspace(0, 1, size)
    c, _ = compiled(_small_loop_beside, x, 50)  # (a loop too large to unroll)
    assert c.runner.quick_whole
    fits = []
    monkeypatch.setitem(c.runner.ns, "_fit_threads", lambda: fits.append(1))
    monkeypatch.setattr(backends, "fit_threads", lambda: fits.append(1))
    np.testing.assert_allclose(c(x, 50), _small_loop_beside(x, 50))
    assert cpu.runs_parallel(c.runner.whole) is parallel
    assert len(fits) == parallel


def test_a_task_that_runs_for_one_look_takes_no_core(monkeypatch):
    """The load sample is the fewer of two looks ``SAMPLE_S`` apart: a task seen once (another
    process's for a moment, or a thread of this one going idle between the two reads of a
    look) takes no core from the kernels; one seen twice does."""
    from tracekit.backends import runtime

    looks = iter([1, 0, 1, 1, 2, 2, 0])
    monkeypatch.setattr(runtime, "_others_running", lambda: next(looks))
    monkeypatch.setattr(runtime, "_load", [-runtime.SAMPLE_S, 0, 0])
    seen = []
    for _ in range(7):
        runtime._load[0] = -runtime.SAMPLE_S  # each call a new look
        seen.append(runtime.other_load())
    assert seen == [0, 0, 0, 1, 1, 2, 0]


def test_a_busy_process_beside_this_one_is_seen():
    from tracekit.backends import runtime

    if not os.path.exists("/proc/loadavg"):
        pytest.skip("the runnable count comes from Linux's /proc")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        looks = []
        for _ in range(3):
            time.sleep(runtime.SAMPLE_S)
            looks.append(runtime.other_load())
        assert max(looks) >= 1, looks
    finally:
        spin.kill()
        spin.wait()


def test_the_load_sample_counts_other_processes_only():
    from tracekit.backends import runtime

    assert runtime._own_running() >= 1  # this thread, running now
    assert runtime.other_load() >= 0


# ------------------------------------------------------------------ BLAS threads on a busy machine
def _blas_count_set_to(n: int):
    """The loaded OpenBLAS libraries set to ``n`` threads (skips where none is loaded)."""
    from tracekit.backends import runtime

    controls = runtime.openblas_controls()
    if not controls:
        pytest.skip("NumPy's BLAS is not an OpenBLAS this process can set")
    before = [get() for get, _ in controls]
    for _, put in controls:
        put(n)
    return controls, before


def _restore(controls, before):
    for (_, put), n in zip(controls, before):
        put(n)


_PRODUCTS = [  # (a, b): shapes of both operands, dtype, operand views
    ((8, 1024), (1024, 199), np.float64, None),
    ((18, 128), (128, 2048), np.float32, None),
    ((65, 96), (96, 70), np.complex128, None),
    ((40, 60), (60, 30), np.complex64, None),  # one thread whatever the setting
    ((3, 80, 64), (3, 64, 90), np.float64, None),  # a batch
    ((120, 80), (80, 90), np.float64, "strided"),  # a[:, ::2] @ b[::2, :]
    ((80, 120), (160, 80), np.float32, "transposed"),  # a.T @ b.T
    ((300,), (300, 40), np.float64, None),  # a vector
]


def _operands(shape_a, shape_b, dtype, view, rng):
    def make(shape):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)

    a, b = make(shape_a), make(shape_b)
    if view == "strided":
        return a, b, lambda a, b: a[:, ::2] @ b[::2, :]
    if view == "transposed":
        return a, b, lambda a, b: a.T @ b.T
    return a, b, lambda a, b: (a @ b) * 2.0


@pytest.mark.parametrize("lowered", [False, True], ids=["quiet", "busy"])
@pytest.mark.parametrize("case", _PRODUCTS, ids=lambda c: f"{c[0]}@{c[1]}-{np.dtype(c[2])}-{c[3]}")
def test_products_on_fitted_blas_threads_equal_numpys(case, lowered, monkeypatch):
    from tracekit.backends import runtime

    a, b, fn = _operands(*case, np.random.default_rng(0))
    controls, before = _blas_count_set_to(2)
    try:
        want = fn(a, b)  # NumPy's, on the library's two threads
        monkeypatch.setattr(runtime, "other_load", lambda: 7 if lowered else 0)
        c, _ = compiled(fn, a, b)
        got = c(a, b)
        assert got.dtype == want.dtype and got.shape == want.shape
        tol = 1e-5 if np.dtype(case[2]) in (np.float32, np.complex64) else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        assert [get() for get, _ in controls] == [2] * len(controls)
    finally:
        _restore(controls, before)


def test_blas_calls_run_on_the_cores_others_leave_and_restore_the_count_even_when_they_raise(
    monkeypatch,
):
    from tracekit.backends import runtime

    a, b = np.ones((96, 64)), np.full((64, 640), 0.01)  # b wide: on BLAS's own threads
    c, _ = compiled(lambda a, b: np.tanh(a @ b), a, b)
    controls, before = _blas_count_set_to(2)
    seen, matmul = [], np.matmul

    def spy(*args, **kwargs):
        seen.append([get() for get, _ in controls])
        if kwargs.pop("fail", False) or len(seen) == 3:
            raise FloatingPointError("from BLAS")
        return matmul(*args, **kwargs)

    try:
        monkeypatch.setattr(np, "matmul", spy)
        for others, during in ((5, 1), (0, 2), (1, 1)):
            monkeypatch.setattr(runtime, "other_load", lambda o=others: o)
            if len(seen) == 2:
                with pytest.raises(FloatingPointError):
                    c(a, b)
            else:
                np.testing.assert_allclose(c(a, b), np.tanh(np.full((96, 640), 0.64)))
            assert seen[-1] == [during] * len(controls), others
            assert [get() for get, _ in controls] == [2] * len(controls)  # restored
        monkeypatch.setattr(runtime, "other_load", lambda: 5)
        with runtime.blas_threads_as_set():  # the library's own count, as for NumPy's calls
            c(a, b)
        assert seen[-1] == [2] * len(controls)
        with pytest.raises(FloatingPointError):  # the helper itself
            runtime.fitted_blas(spy, a, b, fail=True)
        assert [get() for get, _ in controls] == [2] * len(controls)
    finally:
        _restore(controls, before)


def test_products_openblas_runs_on_one_thread_anyway_are_called_as_numpy_does():
    from tracekit.backends import runtime

    may = runtime.blas_may_thread
    assert not may((64, 64), (64, 64)) and may((65, 64), (64, 64))
    assert not may((96,), (96, 96)) and may((97,), (97, 96)) and may((5, 97, 96), (96,))
    assert not may((), (3,)) and not may((3,), (3,))
    small, _ = compiled(lambda a, b: a @ b, np.ones((8, 8)), np.ones((8, 8)))
    large, _ = compiled(lambda a, b: a @ b, np.ones((80, 64)), np.ones((64, 640)))
    assert "_blas(np.matmul" not in small.runner.source
    assert "_blas(np.matmul" in large.runner.source


@pytest.mark.parametrize(
    "shapes, dtype",
    [
        (((8, 1024), (1024, 199)), np.float64),
        (((1552, 128), (128, 64)), np.float32),
        (((65, 96), (96, 70)), np.complex128),
        (((567, 128), (128, 512)), np.complex64),
        (((7, 300), (300, 400)), np.float64),
        (((18, 128), (128, 2048)), np.float32),  # a short a, a wide b: blocks of columns
        (((3, 256), (256, 1000)), np.complex128),
    ],  # fmt: skip
)
def test_products_of_a_narrow_b_or_a_short_a_run_in_blocks_on_numbas_threads(shapes, dtype):
    """A product whose ``b`` has at most MAX_COLUMNS columns runs on numba's threads, one block of
    rows each (one of columns where ``b`` is wider and ``a`` short), BLAS on one thread (its
    libraries set so for the call, then restored), and the kernel after it is parallel: no thread of
    BLAS's own spins beside it."""
    from tracekit.backends import matmul_threads, runtime

    if not matmul_threads.numba_has_blas():
        pytest.skip("numba's BLAS needs SciPy")
    a, b, _ = _operands(*shapes, dtype, None, np.random.default_rng(1))
    fn = lambda a, b: np.exp(np.sin(a @ b * 0.03 + 1.0) * 0.5)  # noqa: E731
    controls, before = _blas_count_set_to(2)
    seen = []
    try:
        c, _ = compiled(fn, a, b)
        assert "_matmul_threads(" in c.runner.source and "_blas(" not in c.runner.source
        alone, _ = compiled(lambda v: np.exp(np.sin(v * 0.03 + 1.0) * 0.5), a @ b)
        assert ("prange(" in c.program.source) == ("prange(" in alone.program.source)
        np.testing.assert_allclose(c(a, b), fn(a, b), rtol=1e-4, atol=1e-4)
        spy = lambda *args: seen.append([get() for get, _ in controls])  # noqa: E731
        runtime.on_one_blas_thread(spy)
        assert seen == [[1] * len(controls)]
        assert [get() for get, _ in controls] == [2] * len(controls)
        with pytest.raises(ZeroDivisionError):
            runtime.on_one_blas_thread(lambda: 1 / 0)
        assert [get() for get, _ in controls] == [2] * len(controls)
    finally:
        _restore(controls, before)


def test_a_product_on_numbas_threads_into_a_strided_or_read_only_operand_equals_numpys():
    from tracekit.backends import matmul_threads

    if not matmul_threads.numba_has_blas():
        pytest.skip("numba's BLAS needs SciPy")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((90, 40)), rng.standard_normal((30, 40))
    out = np.zeros((90, 60))
    matmul_threads.matmul(a, b.T, out[:, ::2], disk=False)  # b a view, out not C-contiguous
    np.testing.assert_allclose(out[:, ::2], a @ b.T, rtol=1e-12)
    assert not out[:, 1::2].any()
    a.setflags(write=False)
    got = np.empty((90, 30))
    matmul_threads.matmul(a, b.T, got, disk=False)
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-12)
    a32 = a.astype(np.float32)  # operands of mixed dtypes: NumPy's product, cast into out
    matmul_threads.matmul(a32, b.T, got, disk=False)
    np.testing.assert_allclose(got, a32 @ b.T, rtol=1e-6)


def test_a_product_on_one_blas_thread_beside_a_fitted_call_restores_every_count(monkeypatch):
    from tracekit.backends import runtime

    controls, before = _blas_count_set_to(2)
    counts = lambda: [get() for get, _ in controls]  # noqa: E731
    monkeypatch.setattr(runtime, "other_load", lambda: 0)
    try:
        inside = runtime.fitted_blas(lambda: (counts(), runtime.on_one_blas_thread(counts)))
        assert inside == ([2] * len(controls), [1] * len(controls))
        assert counts() == [2] * len(controls)
        inside = runtime.on_one_blas_thread(lambda: (counts(), runtime.fitted_blas(counts)))
        assert inside == ([1] * len(controls), [1] * len(controls))
        assert counts() == [2] * len(controls)
    finally:
        _restore(controls, before)


def test_overlapping_blas_calls_restore_the_count_when_the_last_one_ends(monkeypatch):
    from tracekit.backends import runtime

    controls, before = _blas_count_set_to(2)
    counts = lambda: [get() for get, _ in controls]  # noqa: E731
    monkeypatch.setattr(runtime, "other_load", lambda: 3)
    inner, started, go = [], threading.Event(), threading.Event()

    def outer_call():
        started.set()
        go.wait(10)
        return counts()

    try:
        t = threading.Thread(target=lambda: inner.append(runtime.fitted_blas(outer_call)))
        t.start()
        started.wait(10)
        assert counts() == [1] * len(controls)  # lowered by the other thread's call
        assert runtime.fitted_blas(counts) == [1] * len(controls)
        assert counts() == [1] * len(controls)  # still running there
        go.set()
        t.join(10)
        assert inner == [[1] * len(controls)] and counts() == [2] * len(controls)
    finally:
        go.set()
        _restore(controls, before)


def test_compile_progress_counts_the_plans_kernels_and_writes_lines_to_logs(monkeypatch, capsys):
    import tracekit.backends as backends

    reports = []
    monkeypatch.setattr(
        backends, "_progress_reporter", lambda p, what: lambda *r: reports.append(r)
    )
    x = np.linspace(0, 1, 64).reshape(8, 8)
    c = tk.compile(tk.trace(lambda x: np.exp(x).sum(0) + x.sum(1), x), cache=False)
    assert len(c.kernels) == 3 and len(c.program.segments) == 3  # one numba function each
    assert reports[-1][:2] == (3, 3)
    monkeypatch.undo()
    report = backends._progress_reporter(None, "f (cpu)")
    report(1, 2, 1.5)
    report(2, 2, 2.5)
    err = capsys.readouterr().err  # (pytest's capture is not a terminal)
    assert "\r" not in err
    assert err.splitlines() == [
        "compiling f (cpu): 1/2 kernels, 1.5 s",
        "compiling f (cpu): 2/2 kernels, 2.5 s",
    ]


def test_primitives_that_lowering_repeats_are_computed_once():
    def layernorm(x):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)

    x = np.random.default_rng(5).standard_normal((16, 32)).astype(np.float32)
    t = tk.trace(layernorm, x)
    c = tk.compile(t, progress=False)
    sums_of_x = [n for n in c.graph.nodes if n.op == "sum" and n.inputs[0] in t.graph.inputs]
    assert len(sums_of_x) == 1 and len(c.kernels) == 1
    np.testing.assert_allclose(c(x), t(x), rtol=2e-6, atol=2e-6)
    both = tk.compile(tk.trace(lambda x: (np.argmin(x, 1), np.min(x, 1)), x), progress=False)
    assert len(both.kernels) == 1
    assert [a.tolist() for a in both(x)] == [np.argmin(x, 1).tolist(), np.min(x, 1).tolist()]
