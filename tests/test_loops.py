"""Loops that stay loops (tracekit.loops): each program rolled vs unrolled vs NumPy, on the
interpreter, in ``t.code``, on the CPU target, and through grad; programs that must not roll
roll nothing and say why."""

from __future__ import annotations

import html
import json
import math

import numpy as np
import pytest
from helpers.compare import assert_same
from helpers.run import quiet

import tracekit as tk
from tracekit import interpret
from tracekit.ir import Graph
from tracekit.loops import unroll
from tracekit.ops import OPS


# ---------------------------------------------------------------------- programs that roll
def jacobi(A, B, steps=30):
    for _ in range(steps):
        B[1:-1, 1:-1] = 0.2 * (
            A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]
        )
        A[1:-1, 1:-1] = 0.2 * (
            B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]
        )
    return A.sum()


def heat(u, steps=40):
    for _ in range(steps):
        u[1:-1, 1:-1] += 0.1 * (
            u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
        )
    return u


def ping_pong(a, b, steps=30):
    for _ in range(steps):
        b = 0.5 * (a + np.roll(a, 1))
        a, b = b, a
    return a, b


def recurrent(x, w, steps=25):
    for _ in range(steps):
        x = np.tanh(x @ w) + 0.1 * x
    return (x * x).sum()


def sum_from_zero(a, steps=30):
    s = 0.0  # the first iteration adds to a Python float: it stays outside the loop
    for _ in range(steps):
        s = s + np.tanh(a).sum() * 0.01
        a = a * 0.99
    return s


def nested(x, outer=6, inner=5):
    for _ in range(outer):
        for _ in range(inner):
            x = 0.5 * x + np.sin(x)
        x = x - x.mean()
    return x


def last_values(x, steps=30):
    for _ in range(steps):
        y = np.exp(-x * x)
        x = x + 0.1 * y
    return x, y


def kmeans(points, centers, steps=12):
    for _ in range(steps):
        d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
        nearest = d.argmin(axis=1)
        onehot = (nearest[:, None] == np.arange(centers.shape[0])[None, :]).astype(points.dtype)
        counts = onehot.sum(axis=0)[:, None]
        centers = (onehot.T @ points + centers) / (counts + 1)
    return centers


def with_invariant_work(x, w, steps=30):
    for _ in range(steps):
        x = x + np.cos(w) * 0.1  # np.cos(w) is the same every iteration
    return x


def diagonal(a, steps=30):
    s = 0.0
    for i in range(steps):
        s = s + np.tanh(a[i, i])  # an index that moves with the loop: a[k, k] in the body
    return s


def rows_written(x, out, steps=12):
    for t in range(steps):
        out[t] = np.sin(x) * 0.5  # a write into row t of a carried buffer
        out[t + 1 : t + 3, ::2] += x[::2] * 0.1  # a moving slice, written through
        x = x * 0.9 + out[t]
    return out, x


def stacked(x, steps=6):
    history = []
    for _ in range(steps):
        x = np.tanh(x) * 0.9 + 0.1
        history.append(x)
    return np.stack(history), history[2]  # every iteration's value, and one of them


def folded_input(x, steps=70):  # 140 nodes unrolled: it stays a loop when compiled
    c = np.ones((4, 4)) * 2  # a constant the passes fold: the loop starts from a literal
    for _ in range(steps):
        c = c * 0.5 + x
    return c


def _heat_step(u):
    u[1:-1] = u[1:-1] + 0.1 * (u[2:] - 2 * u[1:-1] + u[:-2])  # views taken in a callee


def heat_calls_a_function(u, steps=20):
    for _ in range(steps):
        _heat_step(u)
    return u


def forced(x, steps=25):
    dt = 0.05
    for t in range(steps):  # t * dt and 0.01 * t move with the loop: a + b * k of a counter k
        x = x + dt * np.cos(x + t * dt) + 0.01 * t
    return x


def forced_f32(x, steps=20):
    for t in range(steps):
        x = x * np.float32(0.9) + np.float32(0.25) * t  # a float32 number moving with the loop
    return x


def newton_sqrt(x, a):
    err = 1.0  # a Python float: the first test is not traced
    while err > 1e-10:  # a traced test in every iteration: a while loop
        y = 0.5 * (x + a / x)
        err = np.abs(y - x).max()
        x = y
    return x


def jacobi_solve(A, b, x):
    d = A[0, 0] + 0.0 * b  # the diagonal, the same in every row of these matrices
    while np.abs(A @ x - b).max() > 1e-9:  # tested before the first iteration: it stays outside
        x = (b - A @ x + d * x) / d
    return x


def halving_while_positive(x, steps=8):
    for _ in range(steps):
        if x.sum() > 0:  # the same way in every iteration: checked in each
            x = x * 0.5 - 0.05
    return x


def repeats_in_its_body(u, v, steps=30):
    for _ in range(steps):
        u = 0.5 * u * v * v + 0.1  # one line, the same op twice: not iterations of the loop
    return u


def _solvable(seed, n=6):
    rng = np.random.default_rng(seed)
    A = rng.random((n, n)) * 0.5
    np.fill_diagonal(A, n)
    return A, rng.random(n), np.zeros(n)


def _r(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


PROGRAMS = {
    "jacobi": (jacobi, lambda s: (_r(s, 12, 12), _r(s + 1, 12, 12))),
    "heat": (heat, lambda s: (_r(s, 10, 10),)),
    "ping_pong": (ping_pong, lambda s: (_r(s, 16), _r(s + 1, 16))),
    "recurrent": (recurrent, lambda s: (_r(s, 3, 4), 0.3 * _r(s + 1, 4, 4))),
    "sum_from_zero": (sum_from_zero, lambda s: (_r(s, 8),)),
    "nested": (nested, lambda s: (_r(s, 7),)),
    "last_values": (last_values, lambda s: (_r(s, 5),)),
    "kmeans": (kmeans, lambda s: (_r(s, 40, 2), _r(s + 1, 3, 2))),
    "with_invariant_work": (with_invariant_work, lambda s: (_r(s, 6), _r(s + 1, 6))),
    "diagonal": (diagonal, lambda s: (_r(s, 32, 32),)),
    "heat_calls_a_function": (heat_calls_a_function, lambda s: (_r(s, 16),)),
    "stacked": (stacked, lambda s: (_r(s, 5),)),
    "folded_input": (folded_input, lambda s: (_r(s, 4, 4),)),
    "rows_written": (rows_written, lambda s: (_r(s, 6), _r(s + 1, 16, 6))),
    "forced": (forced, lambda s: (_r(s, 6),)),
    "forced_f32": (forced_f32, lambda s: (_r(s, 5).astype(np.float32),)),
    "newton_sqrt": (newton_sqrt, lambda s: (np.full(5, 1.0 + s), 1.0 + np.abs(_r(s, 5)) * (s + 1))),
    "jacobi_solve": (jacobi_solve, _solvable),
    "repeats_in_its_body": (repeats_in_its_body, lambda s: (_r(s, 9), 0.5 + 0.1 * _r(s + 1, 9))),
    "halving_while_positive": (halving_while_positive, lambda s: (30.0 + np.abs(_r(s, 4)),)),
}
WHILE = ["newton_sqrt", "jacobi_solve"]  # new data needs another number of iterations
DIFFERENTIABLE = [
    "jacobi", "heat", "recurrent", "sum_from_zero", "nested", "with_invariant_work", "diagonal",
    "rows_written", "stacked", "newton_sqrt", "halving_while_positive", "forced",
]  # fmt: skip


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _trace(name, **kw):
    fn, make = PROGRAMS[name]
    with quiet():
        return tk.trace(fn, *make(0), **kw)


def _parts(x) -> list:
    return list(x) if isinstance(x, tuple | list) else [x]


def _loops(graph) -> list:
    return [n for n in graph.nodes if n.op in ("loop", "while_loop")]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rolled_unrolled_and_numpy_agree(name):
    fn, make = PROGRAMS[name]
    rolled, flat = _trace(name), _trace(name, loops="unroll")
    assert _loops(rolled.graph), str(rolled.graph)
    assert not _loops(flat.graph)
    assert len(rolled.graph.nodes) < len(flat.graph.nodes)
    args = make(1)
    want_args, rolled_args, flat_args = _copies(args), _copies(args), _copies(args)
    with quiet():
        want = fn(*want_args)
        assert_same(rolled(*rolled_args), want)
        assert_same(flat(*flat_args), want)
    assert_same(rolled_args, want_args, "arguments after the call (writes into inputs)")
    assert_same(flat_args, want_args, "arguments after the call (writes into inputs)")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_unrolling_the_rolled_graph_gives_the_flat_one_back(name):
    rolled, flat = _trace(name), _trace(name, loops="unroll")
    back = unroll(rolled.graph).check()
    ops = [n.op for n in back.nodes]
    if name == "stacked":  # history[2] is a row of the stacked output, read after the loop
        assert ops.pop() == "index"
    assert ops == [n.op for n in flat.graph.nodes]
    args = PROGRAMS[name][1](7)
    assert_same(interpret.run(back, _copies(args)), interpret.run(flat.graph, _copies(args)))


@pytest.mark.parametrize("name", ["jacobi", "heat", "recurrent", "nested", "kmeans", "diagonal"])
def test_the_rolled_graph_does_not_grow_with_the_trip_count(name):
    fn, make = PROGRAMS[name]
    sizes = set()
    for steps in (10, 30) if name == "diagonal" else (10, 100):  # a diagonal of 32
        kw = {"outer": steps} if name == "nested" else {"steps": steps}
        with quiet():
            t = tk.trace(lambda *a, _kw=kw: fn(*a, **_kw), *make(0))
        sizes.add(len(t.graph.nodes))
        (loop,) = _loops(t.graph)
        peeled = name in ("diagonal",)  # its first iteration adds to a Python float
        assert loop.attrs["trips"] == steps - peeled
    assert len(sizes) == 1, sizes


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_code_is_a_for_loop_computing_the_same(name):
    fn, make = PROGRAMS[name]
    t = _trace(name)
    assert "for k in range(" in t.code
    ns: dict = {}
    exec(compile(t.code, "<code>", "exec"), ns)
    args = make(2)
    want_args, got_args = _copies(args), _copies(args)
    with quiet():
        want = fn(*want_args)
        got = ns[t.graph.name](*got_args)
    assert_same(got, want)
    assert_same(got_args, want_args)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cpu_target_agrees_with_the_interpreter(name):
    fn, make = PROGRAMS[name]
    t = _trace(name)
    with quiet():
        c = tk.compile(t, target="cpu", progress=False)
        args = make(3)
        want_args, got_args = _copies(args), _copies(args)
        want = t(*want_args)
        got = c(*got_args)
        again = c(*_copies(args))  # the second call reuses the loop's buffers
    for g, w in zip(_parts(got), _parts(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9)
    assert_same(again, got)
    for a, b in zip(got_args, want_args):
        np.testing.assert_allclose(a, b, rtol=1e-9)


@pytest.mark.parametrize(
    "name,steps,driver",
    [("jacobi", 30, True), ("heat", 40, True), ("diagonal", 60, True), ("stacked", 50, True),
     ("repeats_in_its_body", 50, True), ("recurrent", 40, True), ("kmeans", 12, False)],
)  # fmt: skip
def test_a_loop_runs_as_one_numba_function_where_its_body_allows(name, steps, driver):
    """Slices, fused kernels, writes and products of two matrices (numba's BLAS, through
    SciPy) have numba forms: the whole loop is one compiled function; a new axis (k-means'
    ``[:, None]``) keeps the loop in Python. (Loops of at most 128 unrolled nodes are compiled
    unrolled: the steps make these larger.)"""
    if name == "recurrent":
        pytest.importorskip("scipy")  # numba's np.dot needs it; without, the body runs alone
    fn, make = PROGRAMS[name]
    args = (_r(0, 64, 64),) if name == "diagonal" else make(0)
    with quiet():
        t = tk.trace(lambda *a: fn(*a, steps=steps), *args)
        want = fn(*_copies(args), steps=steps)
    with quiet():
        c = tk.compile(t, target="cpu", progress=False)
        got = c(*_copies(args))
    hows = [run.how for run in c.program.loops.values()]
    assert hows and all((h == "one numba function") == driver for h in hows), hows
    for g, w in zip(_parts(got), _parts(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9)


def scalar_state(a, steps=300):
    s = np.float64(0.0)
    for i in range(steps):
        s = s * 0.99 + np.tanh(a[i, i])  # 0-d state, carried
    return s


def test_scalar_state_stays_in_registers_and_comes_back_as_numpys_type():
    """A loop's 0-d state is a numba scalar in the driver (each kernel making it returns it),
    and the caller gets what NumPy gives: an np.float64."""
    a = _r(3, 300, 300)
    with quiet():
        c = tk.compile(tk.trace(scalar_state, a), target="cpu", progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function"
    driver = run.source.split("def loop_driver")[1]
    assert "= segment0(" in driver and "b_v" not in driver  # no 0-d buffers for the state
    got, want = c(a), scalar_state(a)
    assert type(got) is type(want) is np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


def stacks_one_element(x, steps=140):
    rows = []
    for _ in range(steps):
        x = x * 0.5 + 1.0
        rows.append(x[1])  # a view of one element, stacked: the driver must keep it
    return np.stack(rows), x


def test_a_stacked_element_of_the_state_runs_in_the_driver():
    """Bug 53 (the fuzzer): the driver dropped the views no line of the body read, and a
    view the loop stacks is read only after the body's lines."""
    x = np.arange(4.0)
    with quiet():
        c = tk.compile(tk.trace(stacks_one_element, x), target="cpu", progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function"
    for g, w in zip(c(x), stacks_one_element(x)):
        np.testing.assert_allclose(g, w, rtol=1e-13)


def stacks_matrices_and_sums(x, steps):
    rows, sums = [], []
    for _ in range(steps):
        x = np.tanh(x) * 0.9 + 0.05
        rows.append(x)  # a 2-d row of the stacked output
        sums.append(x.sum())  # a 0-d one
    return np.stack(rows), np.stack(sums)


def test_stacked_rows_of_any_rank_are_stored_by_the_driver():
    x = _r(6, 5, 3)
    with quiet():
        c = tk.compile(tk.trace(stacks_matrices_and_sums, x, 60), target="cpu", progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function"
    for g, w in zip(c(x, 60), stacks_matrices_and_sums(x, 60)):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def damped(x, steps):
    for _ in range(steps):
        x = np.tanh(x) * 0.9 + 0.1
    return x


def test_one_loop_driver_serves_every_trip_count():
    """The driver takes its trip count as an argument: the same loop traced for another
    number of iterations compiles to the same source (and reuses its machine code)."""
    x = np.linspace(-1.0, 1.0, 64)
    sources = []
    for steps in (50, 70, 300):
        with quiet():
            c = tk.compile(tk.trace(damped, x, steps), target="cpu", progress=False)
        (run,) = c.program.loops.values()
        assert run.how == "one numba function"
        sources.append(run.source)
        np.testing.assert_allclose(c(x, steps), damped(x, steps), rtol=1e-12)
    assert sources[0] == sources[1] == sources[2]


def hands_back_an_invariant(x, w, steps=40):
    for _ in range(steps):
        x, y = x * 0.5 + w, w  # y is the invariant w in every iteration
    return x, y


def test_a_loop_result_that_is_an_input_is_a_copy():
    x, w = _r(4, 6), _r(5, 6)
    with quiet():
        c = tk.compile(tk.trace(hands_back_an_invariant, x, w), target="cpu", progress=False)
    got_x, got_y = c(x, w)
    want_x, want_y = hands_back_an_invariant(x, w)
    np.testing.assert_allclose(got_x, want_x, rtol=1e-12)
    assert np.array_equal(got_y, want_y) and not np.shares_memory(got_y, w)


def fills_rows(x, steps):
    out = np.zeros((steps, x.shape[0]))
    for t in range(steps):
        out[t] = x * t
    return out


def reads_its_start_after_the_loop(x, steps):
    start = np.zeros((steps, x.shape[0])) + x
    y = start
    for _ in range(steps):
        y = y * 0.5 + y.sum(axis=1, keepdims=True) * 1e-3 + x  # rebinds y: start stays
    return y + start


@pytest.mark.parametrize("program", [fills_rows, reads_its_start_after_the_loop])
def test_a_loop_takes_over_a_dead_buffer_of_its_state_and_results_stay_the_callers(program):
    """A carried buffer made by this run and read by nothing after the loop is handed to the
    loop (not copied); a result the caller holds is never reused by a later call."""
    x = _r(7, 64)
    with quiet():
        c = tk.compile(tk.trace(program, x, 50), target="cpu", progress=False)
    assert any(n.op == "loop" for n in c.graph.nodes)
    from tracekit.backends.planner import handed_over

    handed = [ks for i, ks in handed_over(c.plan).items() if c.plan.steps[i].nodes[0].op == "loop"]
    assert handed == ([(0,)] if program is fills_rows else [()])
    assert (".copy()" in c.runner.source) == (program is not fills_rows)
    first = c(x, 50)
    np.testing.assert_allclose(first, program(x, 50), rtol=1e-15)
    held = first.copy()
    second = c(2 * x, 50)
    np.testing.assert_allclose(second, program(2 * x, 50), rtol=1e-15)
    assert np.array_equal(first, held) and not np.shares_memory(first, second)
    del first, second
    np.testing.assert_allclose(c(3 * x, 50), program(3 * x, 50), rtol=1e-15)


def nested_tanh(x, w, outer=30, inner=20):
    for _ in range(outer):
        y = x * 0.5
        for _ in range(inner):
            y = np.tanh(y * 1.01 + w)
        x = x + y * 0.1
    return x


def test_nested_loops_run_as_one_numba_function():
    """An inner loop whose body has a numba form is called by the outer loop's driver (its
    own driver, bound at load): the whole nest is one numba function."""
    x, w = _r(8, 64), _r(9, 64)
    with quiet():
        c = tk.compile(tk.trace(nested_tanh, x, w), target="cpu", progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function" and "= inner_0(" in run.source, run.how
    np.testing.assert_allclose(c(x, w), nested_tanh(x, w), rtol=1e-12)
    strided = _r(10, 128)[::2]  # the invariant arrives strided: copied for the driver
    np.testing.assert_allclose(c(strided, w), nested_tanh(strided, w), rtol=1e-12)


def _nested_counts(x, w):
    for _ in range(12):
        y = x * 0.25
        for _ in range(9):
            y = np.tanh(y * 1.0137 + w)  # a constant of this test's: a fresh compile
        x = x + y
    return x


def test_nested_loop_drivers_compile_once_each(tmp_path, monkeypatch):
    """A driver calls a nested loop's driver (and the graph's function the outer one's) with
    its count typed as the driver was compiled for: numba compiles no second version of a
    driver for a literal count (no argument of any compiled signature is a literal type)."""
    import numba
    from numba.core import event

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    x, w = _r(11, 24), _r(12, 24)
    with quiet(), event.install_recorder("numba:compile") as recorded:
        c = tk.compile(tk.trace(_nested_counts, x, w), target="cpu", progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function" and "= inner_0(" in run.source, run.how
    compiled = [e.data for _, e in recorded.buffer if e.is_end]
    drivers = [d["args"] for d in compiled if d["dispatcher"].py_func.__name__ == "loop_driver"]
    assert len(drivers) == 2, drivers  # the inner loop's, the outer loop's
    literal = [
        d["args"] for d in compiled if any(isinstance(a, numba.types.Literal) for a in d["args"])
    ]
    assert not literal, literal
    np.testing.assert_allclose(c(x, w), _nested_counts(x, w), rtol=1e-12)


def test_a_small_graph_with_loops_runs_as_one_numba_function():
    """Where a graph with loops does little work, its steps (kernels, the loops' drivers)
    are one numba function, which a call with plain arrays runs; other calls take the
    runner; a large graph keeps the runner (its buffers are reused from call to call)."""
    x = _r(7, 64)
    with quiet():
        small = tk.compile(tk.trace(fills_rows, x, 50), target="cpu", progress=False)
        large = tk.compile(tk.trace(fills_rows, _r(7, 4096), 50), target="cpu", progress=False)
    assert small.runner.whole is not None and "def whole_graph(" in small.source
    assert large.runner.whole is None and "whole_graph" not in large.source
    first = small(x, 50)
    np.testing.assert_allclose(first, fills_rows(x, 50), rtol=1e-15)
    held = first.copy()
    np.testing.assert_allclose(small(2 * x, 50), fills_rows(2 * x, 50), rtol=1e-15)
    assert np.array_equal(first, held)
    strided = _r(8, 128)[::2]  # not C-contiguous: the runner
    np.testing.assert_allclose(small(strided, 50), fills_rows(strided, 50), rtol=1e-15)
    with pytest.raises(TypeError, match="static value was 50, got 51"):
        small(x, 51)


def test_static_arguments_take_the_fast_path_and_are_checked(monkeypatch):
    a = _r(6, 50, 50)
    with quiet():
        c = tk.compile(tk.trace(scalar_state, a, 40), target="cpu", progress=False)
    want = scalar_state(a, 40)

    def slow(*_):
        raise AssertionError("the general path checked the arguments")

    with monkeypatch.context() as m:
        m.setattr(c.traced, "flatten_args", slow)
        np.testing.assert_allclose(c(a, 40), want, rtol=1e-12)
    with pytest.raises(TypeError, match="static value was 40, got 41"):
        c(a, 41)
    with pytest.raises(TypeError, match=r"steps: traced with 40, got an array or float"):
        c(a, 40.0)  # a float is not the int it was traced with


def test_large_loops_stay_loops_on_the_cpu_target():
    t = _trace("jacobi")
    c = tk.compile(t, target="cpu", progress=False)
    assert len(_loops(c.graph)) == 1
    assert len(c.kernels) <= 2  # the sum; the body's kernels are compiled once, apart


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_gradients_through_loops_match_finite_differences(name):
    """Directional derivatives of the gradient of each loop program (in every argument) equal
    central differences of NumPy's own program."""
    fn, make = PROGRAMS[name]

    def scalar(*a):
        return sum(np.sum(y**2) for y in _parts(fn(*[np.copy(x) for x in a])))

    args = make(4)
    with quiet():
        grads = tk.grad(scalar, argnums=tuple(range(len(args))))(*args)
    rng, eps = np.random.default_rng(7), 1e-6
    for _ in range(3):
        ds = [rng.standard_normal(np.shape(a)) for a in args]
        plus = scalar(*[a + eps * d for a, d in zip(args, ds)])
        minus = scalar(*[a - eps * d for a, d in zip(args, ds)])
        numeric = (plus - minus) / (2 * eps)
        exact = sum(np.sum(g * d) for g, d in zip(grads, ds))
        np.testing.assert_allclose(exact, numeric, rtol=1e-5, atol=1e-7)


def test_gradient_through_a_loop_matches_finite_differences():
    x, w = PROGRAMS["recurrent"][1](5)
    g = tk.grad(recurrent, argnums=1)(x, w)
    eps, num = 1e-6, np.zeros_like(w)
    for i in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[i] = eps
        num[i] = (recurrent(x, w + d) - recurrent(x, w - d)) / (2 * eps)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-8)


# ---------------------------------------------------------------------- the graph of a loop
def test_listing_shows_the_body_under_the_loop_header():
    text = str(_trace("recurrent").graph)
    assert "loop(" in text and "trips=25" in text
    assert "for _ in range(steps):" in text
    assert "next %" in text


def test_json_round_trip_of_nested_loops():
    t = _trace("nested")
    (outer,) = _loops(t.graph)
    (inner,) = _loops(outer.attrs["body"])
    assert inner.attrs["trips"] == 5
    text = t.graph.to_json()
    json.loads(text)
    back = Graph.from_json(text)
    assert back.key() == t.graph.key()
    assert str(back) == str(t.graph)
    x = PROGRAMS["nested"][1](6)[0]
    assert_same(tk.trace(nested, x).with_graph(back)(x), nested(x))


def test_graph_check_rejects_a_loop_that_does_not_match_its_body():
    t = _trace("recurrent")
    (loop,) = _loops(t.graph)
    bad = loop.replace(attrs={**loop.attrs, "carried": 2})
    with pytest.raises(ValueError, match="loop"):
        t.graph.replace(nodes=[bad if n is loop else n for n in t.graph.nodes]).check()


def test_key_ignores_names_and_sees_the_body():
    a, b = _trace("recurrent"), _trace("recurrent")
    assert a.graph.key() == b.graph.key()
    x, w = PROGRAMS["recurrent"][1](0)
    with quiet():
        other = tk.trace(lambda x, w: recurrent(x, w, steps=26), x, w)
    assert other.graph.key() != a.graph.key()


# ---------------------------------------------------------------------- what must not roll
def grows(x, steps=5):
    for _ in range(steps):
        x = np.concatenate([x, x[-1:] + 1])  # a new shape every iteration
    return x


def alternates(x, steps=6):
    for i in range(steps):
        x = np.sin(x) if i % 2 else np.cos(x)  # another op every other iteration
    return x


def chaotic(x, steps=8):
    for _ in range(steps):
        x = 3.9 * x * (1 - x)
        if x.sum() > 2:  # true in the first four iterations, then false, true, false, true
            pass
    return x


def not_a_loop(x):
    return np.tanh(np.tanh(np.tanh(x)))  # repeats, but no Python loop


@pytest.mark.parametrize(
    "fn,why",
    [
        (grows, "iterations differ"),
        (alternates, None),
        (chaotic, "control flow goes another way"),
        (not_a_loop, None),
    ],
    ids=["shape", "op", "guard", "no-loop"],
)
def test_iterations_that_differ_do_not_roll(fn, why):
    x = np.linspace(0.1, 0.4, 4) if fn is chaotic else np.linspace(0.5, 1.5, 4)
    with quiet():
        t = tk.trace(fn, x)
    loops = _loops(t.graph)
    if fn is chaotic:  # the first four iterations go one way: they roll, the others do not
        assert [n.attrs["trips"] for n in loops] == [4], str(t.graph)
    else:
        assert not loops or fn is alternates, str(t.graph)  # sin, cos: pairs of iterations repeat
    if why is not None:
        assert any(why in note for note in t.notes), t.notes
    new = x if fn is chaotic else x + 0.25  # the guarded branches hold for x itself
    with quiet():
        assert_same(t(new), fn(new))


def changes_late(x, steps=400):
    for i in range(steps):
        c = 0.5 + 0 * i if i != steps - 7 else -0.5  # equal floats, but new objects; one differs
        x = np.tanh(x * c + 0.1)
    return x


def test_a_literal_that_differs_late_in_a_long_loop_is_read_from_a_table():
    """Iterations whose literals are equal floats (new objects each time) roll; the literal
    that differs, seven from the end, makes the numbers of that position a table (a constant
    with each iteration's number), read in every iteration: all 400 iterations are one loop."""
    x = np.linspace(-1.0, 1.0, 5)
    with quiet():
        t = tk.trace(changes_late, x)
    (loop,) = _loops(t.graph)
    assert loop.attrs["trips"] == 400 and len(t.graph.nodes) == 1, str(t.graph)
    (table,) = [v for v, s in zip(t.graph.inputs, t.graph.specs) if s.kind == "const"]
    want = np.full(400, 0.5)
    want[-7] = -0.5
    assert_same(t.graph.constants[table], want)
    new = x[::-1] * 0.5
    with quiet():
        assert_same(t(new), changes_late(new))


def scatter_adds(x):
    for idx, v in (([1, 2, -2, 1, -3], -3), ([2, 1, 0, 1, 2], 2)):
        np.add.at(x, idx, v)  # the index lists a table, the numbers -3 + 5 * k
    return x


def test_a_loop_reading_a_table_and_moving_numbers_counts_its_iterations():
    """Iterations reading rows of a table and a number that moves with the iteration roll
    with an iteration counter (the table's rows alone once left the number without one)."""
    x = np.arange(3.0)
    with quiet():
        t = tk.trace(scatter_adds, x.copy())
    (loop,) = _loops(t.graph)
    assert loop.attrs["trips"] == 2
    assert [n.op for n in loop.attrs["body"].nodes].count("multiply") == 1  # 5 * k
    assert_same(t(x.copy()), scatter_adds(x.copy()))


def test_a_body_that_repeats_an_op_on_one_line_is_one_iteration():
    """Two multiplies of one line inside an iteration are not a loop nested in it."""
    t = _trace("repeats_in_its_body")
    (loop,) = _loops(t.graph)
    assert loop.attrs["trips"] == 30
    assert [n.op for n in loop.attrs["body"].nodes] == ["multiply"] * 3 + ["add"]


def test_unknown_loops_option_is_refused():
    with pytest.raises(ValueError, match="loops must be"):
        tk.trace(heat, np.ones((4, 4)), loops="fold")


def test_an_index_that_moves_with_the_loop_is_an_expression_of_the_iteration():
    t = _trace("diagonal")
    (loop,) = _loops(t.graph)
    (index,) = [n for n in loop.attrs["body"].nodes if n.op == "index"]
    assert repr(index.attrs["idx"]) == "(1+k, 1+k)"  # the first iteration is peeled
    assert "a[1 + k, 1 + k]" in t.code
    back = Graph.from_json(t.graph.to_json())
    assert back.key() == t.graph.key()


def test_a_list_stacked_after_the_loop_is_the_loops_stacked_output():
    t = _trace("stacked")
    (loop,) = _loops(t.graph)
    assert loop.attrs["stacked"] == 1 and len(t.graph.nodes) == 2  # the loop, history[2]
    stacked_out = loop.outputs[-1]
    assert stacked_out.shape == (6, 5) and stacked_out is t.graph.outputs[0]
    assert "np.empty((6, 5), np.float64)" in t.code


# ---------------------------------------------------------------------- while loops
def _iterations_of_newton(x, a):
    count, err = 0, 1.0
    while err > 1e-10:
        y = 0.5 * (x + a / x)
        err, x, count = np.abs(y - x).max(), y, count + 1
    return count


@pytest.mark.parametrize("name", WHILE)
@pytest.mark.parametrize("target", ["interpreter", "cpu", "cuda"])
def test_a_while_loop_follows_data_that_needs_more_or_fewer_iterations(name, target):
    fn, make = PROGRAMS[name]
    with quiet():
        t = tk.trace(fn, *make(0))
        run = t if target == "interpreter" else tk.compile(t, target=target, progress=False)
    (loop,) = [n for n in t.graph.nodes if n.op == "while_loop"]
    for seed in (0, 1, 3):
        args = make(seed)
        with quiet():
            got = run(*_copies(args))
        np.testing.assert_allclose(np.asarray(got), fn(*_copies(args)), rtol=1e-12, atol=1e-14)
    if name == "newton_sqrt":  # the three inputs need other numbers of iterations than traced
        counts = {_iterations_of_newton(*make(s)) for s in (0, 1, 3)}
        assert len(counts) > 1 and loop.attrs["trips"] == _iterations_of_newton(*make(0))


def test_a_while_loop_says_it_became_data_dependent():
    fn, make = PROGRAMS["newton_sqrt"]
    with pytest.warns(tk.TracerWarning, match="became a while loop whose condition is tested"):
        t = tk.trace(fn, *make(0))
    assert "while_loop(" in str(t.graph) and "while err > 1e-10:" in str(t.graph)
    assert not t.graph.guards  # the loop tests its condition: no guard on an iteration count


@pytest.mark.parametrize("target", ["interpreter", "cpu", "code"])
def test_a_while_loop_that_runs_past_max_iterations_raises(target):
    fn, make = PROGRAMS["newton_sqrt"]
    x, a = make(0)
    with quiet():
        t = tk.trace(fn, x, a, max_iterations=8)
    far = (np.full(5, 1e6), a)  # from that far, Newton needs about 25 iterations
    if target == "code":
        ns: dict = {}
        exec(compile(t.code, "<code>", "exec"), ns)
        with pytest.raises(RuntimeError, match="ran 8 iterations"):
            ns[t.graph.name](*far)
        np.testing.assert_allclose(ns[t.graph.name](x, a), fn(x, a), rtol=1e-12)
        return
    run = t if target == "interpreter" else tk.compile(t, target="cpu", progress=False)
    with pytest.raises(tk.GuardError, match=r"ran 8 iterations \(its max_iterations\)"):
        run(*far)


def test_max_iterations_must_be_a_positive_int():
    with pytest.raises(ValueError, match="max_iterations must be an int >= 1"):
        tk.trace(newton_sqrt, np.ones(2), np.ones(2), max_iterations=0)


def test_a_while_loop_on_the_cpu_is_one_numba_function_where_its_body_allows():
    fn, make = PROGRAMS["newton_sqrt"]
    with quiet():
        c = tk.compile(tk.trace(fn, *make(0)), target="cpu", progress=False)
    assert [run.how for run in c.program.loops.values()] == ["one numba function"]
    np.testing.assert_allclose(c(*make(3)), fn(*make(3)), rtol=1e-12)


def test_a_while_loop_that_indexes_with_its_count_stays_unrolled():
    def walk(a):
        i, s = 0, 0.0
        while s < 3.0:  # a[i] moves with the iteration: past the traced count it could not
            s = s + a[i]
            i += 1
        return s

    with quiet():
        t = tk.trace(walk, np.full(10, 0.5))
    assert not any(n.op == "while_loop" for n in t.graph.nodes)
    assert any("indexes with its iteration count" in note for note in t.notes), t.notes
    assert t(np.full(10, 0.5)) == 3.0
    with pytest.raises(tk.GuardError):
        t(np.full(10, 0.25))  # another count: the unrolled guards say so


def test_json_round_trip_of_a_while_loop():
    fn, make = PROGRAMS["jacobi_solve"]
    with quiet():
        t = tk.trace(fn, *make(0))
    back = Graph.from_json(t.graph.to_json())
    assert back.key() == t.graph.key()
    assert_same(interpret.run(back, list(make(2))), interpret.run(t.graph, list(make(2))))


# ---------------------------------------------------------------------- for loops left by break
def newton_break(x, a, steps=60):
    for _ in range(steps):
        y = 0.5 * (x + a / x)
        err = np.abs(y - x).max()
        x = y
        if err < 1e-10:  # the last statement: where the loop stops is decided when it runs
            break
    return x


def walk_break(a, tol=2.0):
    s = np.zeros(a.shape[1])
    for i in range(1, a.shape[0] - 1):  # a[i] moves with the loop, bounded by its range
        s = s + np.abs(a[i]) * 0.5
        if s.sum() > tol:
            break
    return s


def _newton_data(seed):  # its count depends on how far x starts from sqrt(a)
    return np.full(4, (1.0, 40.0, 1e4, 0.3)[seed % 4]), np.arange(1.0, 5.0) * (seed + 1)


def _walk_data(seed):  # 0 or 1 rows, several, or none (range end) reach the sum
    return (np.full((12, 3), (0.5, 0.1, 0.05, 0.01, 5.0)[seed % 5]),)


BREAKS = {"newton_break": (newton_break, _newton_data), "walk_break": (walk_break, _walk_data)}


def _break_count(name, args) -> int:  # the iterations the Python loop runs
    if name == "walk_break":
        (a,) = args
        return next((i for i in range(1, 11) if 0.5 * np.abs(a[1 : i + 1]).sum() > 2.0), 10)
    x, a = args
    for i in range(60):
        y = 0.5 * (x + a / x)
        if np.abs(y - x).max() < 1e-10:
            return i + 1
        x = y
    return 60


@pytest.mark.parametrize("name", sorted(BREAKS))
@pytest.mark.parametrize("target", ["interpreter", "code", "cpu", "cuda"])
def test_a_for_loop_left_by_a_break_decides_when_it_runs_where_to_stop(name, target):
    """``if <test>: break`` as the last statement of ``for i in range(...)``: a while_loop
    that goes on while the test is false and the range has iterations left, so data that
    breaks sooner, later or never gets NumPy's answer (no guard on the traced count)."""
    fn, make = BREAKS[name]
    with pytest.warns(tk.TracerWarning, match="became a loop whose break is tested when it runs"):
        t = tk.trace(fn, *make(0))
    (loop,) = _loops(t.graph)
    assert loop.op == "while_loop" and not t.graph.guards and not t.notes, str(t.graph)
    assert loop.attrs["max_iterations"] == (60 if name == "newton_break" else 10)
    if target == "code":
        ns: dict = {}
        exec(compile(t.code, "<code>", "exec"), ns)
        run = ns[t.graph.name]
    else:
        with quiet():
            run = t if target == "interpreter" else tk.compile(t, target=target, progress=False)
    seeds = range(4) if name == "newton_break" else range(5)
    counts = {_break_count(name, make(s)) for s in seeds}
    assert len(counts) >= 3 and loop.attrs["trips"] in counts, counts
    if name == "walk_break":
        assert {1, 10} <= counts  # the first iteration breaks; the range ends without a break
    for seed in seeds:
        args = make(seed)
        with quiet():
            got = run(*_copies(args))
        np.testing.assert_allclose(got, fn(*_copies(args)), rtol=1e-12, atol=1e-14)


def test_a_loop_left_by_a_break_runs_as_one_numba_function():
    fn, make = BREAKS["newton_break"]
    with quiet():
        c = tk.compile(tk.trace(fn, *make(0)), target="cpu", progress=False)
    assert [run.how for run in c.program.loops.values()] == ["one numba function"]
    np.testing.assert_allclose(c(*make(2)), fn(*make(2)), rtol=1e-12)


def sine_until(x):
    for _ in range(4):
        x = x + np.sin(x) * 0.5
        if np.sum(x) > 0.6:
            break
    return x


def test_a_break_test_on_a_0d_carry_compiles():
    """The body's row kernel (the sum and the range test in one pass, the break's ``and`` in
    the next) kept the range test in the row of the ``and``, a scalar the body returns and
    never stores: numba's NameError (fuzz seed 200, grad)."""
    with quiet():
        t = tk.trace(sine_until, np.float64(0.1))
        c = tk.compile(t, target="cpu", progress=False)
    for x0 in (0.1, 0.5, 0.3, 0.2, -0.5):  # the range ends; breaks after 1, 2, 3; never
        np.testing.assert_allclose(c(np.float64(x0)), sine_until(np.float64(x0)), rtol=1e-12)


def test_the_drawing_and_listing_of_a_loop_left_by_a_break():
    with quiet():
        t = tk.trace(walk_break, *_walk_data(1))
    assert "while_loop(" in str(t.graph) and "for i in range(1, a.shape[0] - 1):" in str(t.graph)
    (loop,) = _loops(t.graph)
    assert loop.attrs["trips"] == 10  # traced where it never breaks: the range's end
    svg = html.unescape(tk.render(t).pipe(format="svg").decode())
    assert "for i in range(1, a.shape[0] - 1)" in svg and "\u00d710 when traced, \u226410" in svg


def after_the_test(x, steps=10):
    for _ in range(steps):
        x = x * 1.5
        if x.max() > 20:
            break
        x = x + 1.0  # the iteration that breaks stops here: not every iteration's nodes
    return x


def over_a_list(x, factors=(1.5,) * 10):
    for f in factors:  # not range(): how many iterations the loop has is not known here
        x = x * f
        if x.max() > 20:
            break
    return x


@pytest.mark.parametrize(
    "fn,why",
    [(after_the_test, "statements follow the test of its break"),
     (over_a_list, "its range is not range()")],
)  # fmt: skip
def test_a_break_that_cannot_be_decided_when_the_loop_runs_is_guarded_and_says_why(fn, why):
    with quiet():
        t = tk.trace(fn, np.ones(3))
    (loop,) = _loops(t.graph)
    assert loop.op == "loop" and t.graph.guards
    assert any(why in note and "iterations rolled, but where it breaks" in note for note in t.notes)
    np.testing.assert_allclose(t(np.ones(3)), fn(np.ones(3)))
    with pytest.raises(tk.GuardError):
        t(np.full(3, 0.01))  # another count: the guards say so


def _weighted_walk(seed):  # rows that differ: the last iteration's row is a[its count]
    return (_walk_data(seed)[0] * np.linspace(0.5, 1.5, 36).reshape(12, 3),)


@pytest.mark.parametrize(
    "name,make,other",
    [("newton_break", _newton_data, 2), ("walk_break", _weighted_walk, 1)],
)  # fmt: skip
@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_the_gradient_of_a_loop_left_by_a_break_is_right_for_its_traced_count(
    name, make, other, target
):
    """As a while loop's: a reverse loop of the traced count less one and its last iteration
    (where the indices moving with it are the last iteration's); data that breaks elsewhere
    fails a guard, and tk.grad traces again."""
    fn = BREAKS[name][0]

    def scalar(*a):
        return (fn(*a) ** 2).sum()

    args, argnums = make(0), tuple(range(len(make(0))))
    with quiet():
        t = tk.trace(scalar, *args)
        assert any(n.op == "while_loop" for n in t.graph.nodes)
        b = tk.vjp(t)
        run = b if target == "interpreter" else tk.compile(b, target="cpu", progress=False)
        flat = tk.vjp(tk.trace(scalar, *args, loops="unroll"))(*args, np.ones(()))
        assert not any(n.op == "while_loop" for n in b.graph.nodes)
        for g, w in zip(run(*args, np.ones(())), flat, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300)
        elsewhere = make(other)  # breaks at another iteration
        with pytest.raises(tk.GuardError):
            run(*elsewhere, np.ones(()))
        got = tk.grad(scalar, argnums=argnums)(*elsewhere)
        want = tk.vjp(tk.trace(scalar, *elsewhere, loops="unroll"))(*elsewhere, np.ones(()))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300)


# ---------------------------------------------------------------------- guards in iterations
def _powers_after_a_branch(x, steps=16):
    for _ in range(steps):
        r = np.positive(x) if x.sum() > 0 else np.square(x)
        x = x**r  # an int to a negative power raises where the branch differs
    return x


@pytest.mark.parametrize("target", ["interpreter", "cpu-rolled", "cuda"])
def test_an_iteration_failing_on_the_other_branch_reports_the_guard(target, monkeypatch):
    """In iteration 0, data taking the other branch makes ``x ** r`` fail before the body's
    guard is checked: the call raises the guard's error naming the iteration, not NumPy's."""
    monkeypatch.setattr("tracekit.backends.control.UNROLL_AT_MOST", 0)
    with quiet():
        t = tk.trace(_powers_after_a_branch, np.ones(3, np.int64))
        run = (
            t
            if target == "interpreter"
            else tk.compile(t, target=target.split("-")[0], progress=False)
        )
    assert any(n.op == "loop" for n in t.graph.nodes)
    assert_same(run(np.ones(3, np.int64)), _powers_after_a_branch(np.ones(3, np.int64)))
    with pytest.raises(tk.GuardError, match="gave False on this call") as failed:
        run(-np.ones(3, np.int64))
    if target == "interpreter":  # the guard is checked as soon as its value is: x ** r never runs
        assert failed.value.__cause__ is None
    elif target != "cuda":  # NumPy's error, as the cause (a device kernel raises nothing)
        assert isinstance(failed.value.__cause__, ValueError)


def _counted_then_summed(x, a):
    carry = a
    for t in range(4):
        carry = np.arctan2(t + 1, x)  # t + 1 is the loop's next count, computed once (CSE)
        if np.sum(carry) > 100.0:
            break
    return carry


def test_a_scalar_result_read_after_a_reduction_in_a_loop_body(monkeypatch):
    """A loop body's kernel computes ``t + 1`` (also the next count, carried), sums, then
    tests the count again after the sum: the second pass reads the 0-d value the first gave
    back as a scalar (it stored it in no array; fuzz seed 19200457: numba's NameError)."""
    monkeypatch.setattr("tracekit.backends.control.UNROLL_AT_MOST", 0)
    args = np.float64(0.7), np.float64(0.1)
    with quiet():
        t = tk.trace(_counted_then_summed, *args)
        run = tk.compile(t, target="cpu", progress=False)
    assert any(n.op == "while_loop" for n in t.graph.nodes)
    assert_same(run(*args), _counted_then_summed(*args))


@pytest.mark.parametrize("target", ["interpreter", "cpu", "cpu-rolled", "cuda"])
def test_a_guard_inside_the_iterations_is_checked_in_every_iteration(target, monkeypatch):
    fn, make = PROGRAMS["halving_while_positive"]
    if target == "cpu-rolled":  # the loop stays a loop on the CPU (no small-loop unrolling)
        monkeypatch.setattr("tracekit.backends.control.UNROLL_AT_MOST", 0)
    with quiet():
        t = tk.trace(fn, *make(0))
        run = (
            t
            if target == "interpreter"
            else tk.compile(t, target=target.split("-")[0], progress=False)
        )
    (loop,) = _loops(t.graph)
    (guard,) = loop.attrs["body"].guards
    assert guard.how == "bool" and guard.value is True
    np.testing.assert_allclose(run(*make(1)), fn(*make(1)), rtol=1e-12)
    going_negative = np.array([0.2, 0.1, 0.1, -0.1])  # its sum turns negative in iteration 1
    with pytest.raises(tk.GuardError, match="gave False on this call"):
        run(going_negative)


# ---------------------------------------------------------------------- gradients: reverse loops
def _clipped_at_moving_bounds(x):
    ys = []
    for lo in (-0.5, 0.0):  # a number moving with the loop: its counter is carried
        ys.append(np.clip(x, lo, 2.0))
    return ys[0] + ys[1] * 3.0


def test_a_backward_loop_stacking_its_counter_compiles_unrolled():
    """The backward pass stacks the loop's counter for its reverse loop; unrolling that small
    loop on the CPU stacked the counter's first value, the number 0, as if it were an array
    (AttributeError; fuzz seed 17000413)."""
    x = np.array(0.3)
    with quiet():
        t = tk.trace(_clipped_at_moving_bounds, x)
        assert any(n.op == "loop" for n in t.graph.nodes)
        b = tk.vjp(t)
        c = tk.compile(b, target="cpu", progress=False)
    for at in (0.3, -0.2, -0.7, 2.5):
        assert_same(c(np.array(at), np.ones(()))[0], b(np.array(at), np.ones(()))[0])
    assert_same(b(x, np.ones(()))[0], np.float64(4.0))


def _rnn(x, w, steps=100):
    for _ in range(steps):
        x = np.tanh(x @ w) * 0.9 + 0.1 * x
    return (x * x).sum()


def _rnn_data(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, 4)), 0.6 * rng.standard_normal((4, 4))


def test_the_gradient_of_a_loop_is_a_reverse_loop_that_does_not_grow_with_the_trip_count():
    sizes = set()
    for steps in (10, 1000):
        t = tk.trace(lambda x, w, _s=steps: _rnn(x, w, _s), *_rnn_data())
        b = tk.vjp(t)
        assert [n.op for n in b.graph.nodes if n.op == "loop"] == ["loop", "loop"]
        reverse = b.graph.nodes[-1]
        assert reverse.op == "loop" and reverse.attrs["trips"] == steps
        assert "(reverse)" in reverse.attrs["body"].name
        sizes.add(len(str(b.graph).splitlines()))
    assert len(sizes) == 1, sizes


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_reverse_loop_gradients_equal_the_unrolled_ones(name):
    """The backward graph with reverse loops computes the unrolled backward's numbers, on the
    interpreter with residuals saved and checkpointed, compiled for the CPU one way or the other
    (every other program: compiling is most of this test's time)."""
    fn, make = PROGRAMS[name]

    def scalar(*a):
        return sum(np.sum(y**2) for y in _parts(fn(*[np.copy(x) for x in a])))

    args, one = make(5), np.ones(())
    compiled_way = (None, 4)[DIFFERENTIABLE.index(name) % 2]
    with quiet():
        flat = tk.vjp(tk.trace(scalar, *args, loops="unroll"))(*args, one)
        t = tk.trace(scalar, *args)
        for checkpoint in (None, 4):
            b = tk.vjp(t, checkpoint=checkpoint)
            runs = [b]
            if checkpoint == compiled_way:
                runs.append(tk.compile(b, target="cpu", progress=False))
            for got in (run(*args, one) for run in runs):
                for g, w in zip(got, flat, strict=True):
                    np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300)


def doubles_while_small(x):
    for _ in range(12):
        if x.max() < 1e3:  # a guard in every iteration of the rolled body
            x = x * 2.0
        else:
            x = x + 1.0
    return (x * x).sum()


@pytest.mark.parametrize("checkpoint", [None, 1, 4])
@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_gradients_through_a_loop_check_the_guards_of_its_body(checkpoint, target):
    """The backward pass replays the forward loop with its body's guards: data that takes the
    other branch in some iteration fails the guard (the traced branch's gradient was returned
    before) and tk.grad traces again, giving NumPy's gradient."""
    small, large = np.full(3, 0.1), np.full(3, 100.0)
    with quiet():
        t = tk.trace(doubles_while_small, small)
        assert any(n.op == "loop" for n in t.graph.nodes)
        b = tk.vjp(t, checkpoint=checkpoint)
        run = b if target == "interpreter" else tk.compile(b, target="cpu", progress=False)
        np.testing.assert_allclose(run(small * 2, np.ones(()))[0], 2 * 4096.0**2 * small * 2)
        at = 0 if checkpoint == 4 else 4  # segments of 4 count their iterations from 0
        said = f"iteration {at} of `for _ in range" if run is b else "gave False on this call"
        with pytest.raises(tk.GuardError, match=said):  # (the cpu target unrolls 12 trips)
            run(large, np.ones(()))
        grad = tk.grad(doubles_while_small, checkpoint=checkpoint)
        np.testing.assert_allclose(grad(small), 2 * 4096.0**2 * small)
        # 100 -> 1600 after four doublings, then eight steps of + 1: d/dx = 2 * 16 * (1600 + 8)
        np.testing.assert_allclose(grad(large), np.full(3, 2 * 16 * 1608.0))


@pytest.mark.parametrize("name", WHILE)
def test_the_gradient_of_a_while_loop_is_a_reverse_loop_of_its_traced_count(name):
    """A while loop differentiates as the loop of its traced count less one (the condition
    guarded true in its body) and its last iteration: a forward and a reverse loop, no
    while_loop and no unrolled iterations; data that needs another count fails a guard, and
    tk.grad traces again (its gradient then agrees with the one traced on that data)."""
    t = _trace(name)
    (node,) = [n for n in t.graph.nodes if n.op == "while_loop"]
    trips = node.attrs["trips"]
    b = tk.vjp(t)
    loops = [n for n in b.graph.nodes if "body" in n.attrs]
    assert [(n.op, n.attrs["trips"]) for n in loops] == [("loop", trips - 1)] * 2, str(b.graph)
    assert len(b.graph.nodes) < 4 * len(node.attrs["body"].nodes) + 40  # not unrolled
    fn, make = PROGRAMS[name]
    args = make(0)
    one = np.ones(t.graph.outputs[0].shape)
    with quiet():
        flat = tk.vjp(tk.trace(fn, *_copies(args), loops="unroll"))(*_copies(args), one)
        compiled = tk.compile(b, target="cpu", progress=False)
    for got in (b(*_copies(args), one), compiled(*_copies(args), one)):
        for g, w in zip(got, flat, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300)
    other = [a * 40.0 if a.ndim == 1 else a for a in make(0)]  # further off: more iterations
    with pytest.raises(tk.GuardError):
        b(*_copies(other), one)
    with quiet():
        regraded = tk.grad(lambda *a: fn(*a).sum(), argnums=tuple(range(len(args))))(*other)
        traced_there = tk.vjp(tk.trace(lambda *a: fn(*a).sum(), *_copies(other)))
        want = traced_there(*_copies(other), np.ones(()))
    for g, w in zip(regraded, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("checkpoint", [1, 7, 10, 33, 100, 1000])
def test_checkpointed_gradients_equal_the_saved_ones(checkpoint):
    x, w = _rnn_data(1)
    want = tk.grad(_rnn, argnums=(0, 1))(x, w)
    got = tk.grad(_rnn, argnums=(0, 1), checkpoint=checkpoint)(x, w)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)
    b = tk.vjp(tk.trace(_rnn, x, w), checkpoint=checkpoint)
    outer = b.graph.nodes[0]
    if 1 < checkpoint < 100:  # the forward loop runs segments: it saves one state per segment
        assert outer.attrs["trips"] == 100 // checkpoint, str(b.graph)
        assert "segments of" in outer.attrs["body"].name
    if checkpoint == 1:  # the state of every iteration, from which the reverse replays the body
        assert outer.attrs["trips"] == 100 and outer.attrs["stacked"] == 1, str(b.graph)


def _reverse_body_ops(b) -> list:
    (reverse,) = [
        n for n in b.graph.nodes if n.op == "loop" and "(reverse)" in n.attrs["body"].name
    ]
    return [n.op for n in reverse.attrs["body"].nodes]


def test_the_reverse_loop_reads_saved_residuals_and_checkpoint_1_replays_the_body():
    """By default the forward loop stacks the state and the matmul's result (x and x @ w), and
    the reverse loop computes only the elementwise tanh again; with ``checkpoint=1`` it saves
    the state only and replays the whole body, matmul included, in every reverse step."""
    x, w = _rnn_data(1)
    t = tk.trace(_rnn, x, w)
    saved, replayed = tk.vjp(t), tk.vjp(t, checkpoint=1)
    forward = saved.graph.nodes[0]
    assert forward.attrs["stacked"] == 2, str(saved.graph)  # x and x @ w, per iteration
    ops, again = _reverse_body_ops(saved), _reverse_body_ops(replayed)
    assert "tanh" in ops and ops.count("matmul") == 2  # the two of the matmul's gradient
    assert again.count("matmul") == 3  # and the forward's
    args = (x, w, np.ones(()))
    for g, e in zip(saved(*args), replayed(*args)):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-15)


def test_checkpoint_must_be_a_positive_int():
    with pytest.raises(ValueError, match="checkpoint must be an int >= 1"):
        tk.grad(_rnn, checkpoint=0)


def test_loop_gradients_match_jax_fori_loop():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def with_fori(x, w):
        x = jax.lax.fori_loop(0, 100, lambda i, x: jnp.tanh(x @ w) * 0.9 + 0.1 * x, x)
        return (x * x).sum()

    x, w = _rnn_data(2)
    want = jax.jit(jax.grad(with_fori, argnums=(0, 1)))(jnp.asarray(x), jnp.asarray(w))
    for checkpoint in (None, 10):
        got = tk.grad(_rnn, argnums=(0, 1), checkpoint=checkpoint)(x, w)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, np.asarray(e), rtol=1e-10, atol=1e-12)


def _driven(a, x, out):
    for i in range(60):
        x = np.tanh(x * a[i] + a[i + 1, ::-1])  # rows of a read with the iteration count
        out[i, 1:] = x[:-1] * 2.0  # and a row of out written
    return (x * x).sum() + (out**2).sum()


def test_a_loop_whose_indices_move_differentiates_as_a_reverse_loop_like_jax():
    """Its gradient is a reverse loop whose indices move backwards (not 60 unrolled
    iterations), equal to jax.grad of the same loop written with lax.fori_loop."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def with_fori(a, x, out):
        def step(i, s):
            x, out = s
            x = jnp.tanh(x * a[i] + a[i + 1, ::-1])
            return x, out.at[i, 1:].set(x[:-1] * 2.0)

        x, out = jax.lax.fori_loop(0, 60, step, (x, out))
        return (x * x).sum() + (out**2).sum()

    rng = np.random.default_rng(3)
    a, x, out = 0.3 * rng.standard_normal((61, 9)), rng.standard_normal(9), np.zeros((61, 9))
    with quiet():
        b = tk.vjp(tk.trace(_driven, a, x, out.copy()))
    assert [n.op for n in b.graph.nodes if OPS[n.op].kind == "control"] == ["loop", "loop"]
    want = jax.jit(jax.grad(with_fori, argnums=(0, 1, 2)))(a, x, out)
    for checkpoint in (None, 1, 7):  # segments of 7: 8 of them and 4 iterations left
        got = tk.grad(_driven, argnums=(0, 1, 2), checkpoint=checkpoint)(a, x, out.copy())
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, np.asarray(e), rtol=1e-10, atol=1e-12)
    with quiet():
        c = tk.compile(b, target="cpu", progress=False)
    for g, e in zip(c(a, x, out.copy(), np.ones(())), want):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-10, atol=1e-12)


def test_the_reverse_loop_of_moving_indices_works_on_their_rows_alone():
    """In the reverse loop, the gradient of ``a[i]`` and ``a[i + 1, ::-1]`` adds into the
    running total of ``a``'s gradient at those rows alone, and that of ``out[i, 1:] = ...``
    clears a row of the cotangent of ``out``: no value of ``a``'s or ``out``'s whole shape
    is made in an iteration but by those stores into the carried cotangents, each after the
    reads of the buffer it writes (so a runner stores in place, not into a copy)."""
    args = MOVING["driven"][1](0)
    with quiet():
        b = tk.vjp(tk.trace(_driven, *_copies(args)))
    reverse = [n for n in b.graph.nodes if OPS[n.op].kind == "control"][-1]
    body = reverse.attrs["body"]
    cotangents = set(body.inputs[: reverse.attrs["carried"]])  # and the stores into them
    stores = 0
    for i, n in enumerate(body.nodes):
        if any(o.shape == args[0].shape for o in n.outputs):  # a's and out's: (61, 9)
            assert OPS[n.op].store and n.inputs[0] in cotangents, str(body)
            later = body.nodes[i + 1 :]
            assert not any(n.inputs[0] in m.inputs for m in later), str(body)
            cotangents.add(n.out)
            stores += 1
    assert stores == 3, str(body)  # a's total at rows i and i + 1, out's cotangent at row i


def window_sums(x, a, steps=23):
    for t in range(steps):
        x = np.sin(x + a[t : t + 3].sum(axis=0)) * 0.8  # a window moving with the loop
    return (x**2).sum()


MOVING = {  # loops whose indices move with the iteration count
    "rows_written": (rows_written, lambda s: (_r(s, 6), _r(s + 1, 16, 6))),
    "diagonal": (diagonal, lambda s: (_r(s, 32, 32),)),
    "window_sums": (window_sums, lambda s: (_r(s, 5), _r(s + 1, 25, 5))),
    "driven": (_driven, lambda s: (0.3 * _r(s, 61, 9), _r(s + 1, 9), np.zeros((61, 9)))),
}


@pytest.mark.parametrize("name", sorted(MOVING))
@pytest.mark.parametrize("target", ["interpreter", "cpu", "cpu-rolled"])
def test_checkpoint_segments_of_a_loop_whose_indices_move_count_from_their_offset(
    name, target, monkeypatch
):
    """``checkpoint=S`` splits a loop indexing with its count too: segment ``j`` and its
    reverse loop count from ``S * j`` (attribute ``start``), the iterations left over from
    ``S * (trips // S)``; the gradient is the unrolled one's, for S = 1, 3, 7 (trips not a
    multiple of S), on the interpreter and the CPU target (its loop drivers too)."""
    if target == "cpu-rolled":  # the loops stay loops on the CPU (no small-loop unrolling)
        monkeypatch.setattr("tracekit.backends.control.UNROLL_AT_MOST", 0)
    fn, make = MOVING[name]

    def scalar(*a):
        return sum(np.sum(y**2) for y in _parts(fn(*[np.copy(x) for x in a])))

    args, one = make(4), np.ones(())
    with quiet():
        flat = tk.vjp(tk.trace(scalar, *args, loops="unroll"))(*args, one)
        t = tk.trace(scalar, *args)
    (loop,) = _loops(t.graph)
    trips = loop.attrs["trips"]
    left_over = set()
    # (compiled: one S per target, small segments unrolled on "cpu", drivers on "cpu-rolled")
    sizes = {"interpreter": (None, 1, 3, 7), "cpu": (3,), "cpu-rolled": (1, 7)}[target]
    for checkpoint in sizes:
        b = tk.vjp(t, checkpoint=checkpoint)
        control = [n for n in b.graph.nodes if OPS[n.op].kind == "control"]
        if checkpoint in (3, 7):  # the segments' loop, the rest, and their reverse loops
            outer = control[0]
            assert outer.attrs["trips"] == trips // checkpoint
            left_over.add(trips % checkpoint)
            if trips % checkpoint:
                rest = control[1]
                assert rest.attrs["trips"] == trips % checkpoint
                assert rest.attrs["start"] == trips // checkpoint * checkpoint
            (segment,) = outer.attrs["body"].nodes
            assert segment.attrs["start"] == tk.ir.Affine(0, checkpoint), str(b.graph)
        run = b
        if target != "interpreter":
            with quiet():
                run = tk.compile(b, target="cpu", progress=False)
        for g, w in zip(run(*_copies(args), one), flat, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
    if target != "cpu":
        assert left_over - {0}  # iterations left over after the segments, for one S at least


def test_json_round_trip_of_a_checkpointed_gradient_with_moving_indices():
    args = MOVING["driven"][1](0)
    with quiet():
        b = tk.vjp(tk.trace(_driven, *_copies(args)), checkpoint=7)
    back = Graph.from_json(b.graph.to_json())
    assert back.key() == b.graph.key()
    feed = list(_copies(args)) + [np.ones(())]
    assert_same(interpret.run(back, list(feed)), interpret.run(b.graph, list(feed)))


def test_the_explorer_steps_through_a_segment_at_its_offset():
    """The body of a segment inside the reverse loop over segments: iteration 2 of the
    segment the reverse loop's iteration 0 replays (the last: 7 to 13) reads row 9."""
    args = MOVING["driven"][1](0)
    a = args[0]
    with quiet():
        b = tk.vjp(tk.trace(_driven, *_copies(args)), checkpoint=7)
    w = tk.explore(b)
    ids = [r["id"] for r in w.nodes if r["type"] == "op"]
    loops = [n for n in b.graph.nodes if OPS[n.op].kind == "control"]
    reverse = [n for n in loops if "segments of 7" in n.attrs["body"].name][-1]
    outer = next(i for i in ids if i.startswith(f"node-{reverse.outputs[0].name}/"))
    replay = next(n for n in reverse.attrs["body"].nodes if n.op == "loop")
    (read,) = [n for n in replay.attrs["body"].nodes if n.attrs.get("idx") == (tk.ir.Affine(0, 1),)]
    inner = f"{outer.rsplit('/', 1)[0]}/node-{replay.outputs[0].name}/node-{read.out.name}"
    for segment, row in ((0, 7 * 7 + 2), (1, 6 * 7 + 2)):
        w.select(outer)
        w.iteration = segment  # the reverse loop goes over the segments last to first
        w.select(inner)
        w.iteration = 2
        np.testing.assert_allclose(w.details["value"]["mean"], a[row].mean(), rtol=1e-12)


def test_code_of_a_checkpointed_gradient_with_moving_indices():
    args = MOVING["window_sums"][1](0)
    with quiet():
        b = tk.vjp(tk.trace(window_sums, *args), checkpoint=4)
    ns: dict = {}
    exec(compile(b.code, "<code>", "exec"), ns)
    got = ns[b.graph.name](*args, np.ones(()))
    for g, w in zip(got, b(*args, np.ones(())), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------- numbers moving with a loop
def test_numbers_that_move_with_the_loop_are_computed_from_a_counter():
    sizes = set()
    for steps in (10, 100):
        with quiet():
            t = tk.trace(lambda x, _s=steps: forced(x, _s), _r(0, 6))
        (loop,) = _loops(t.graph)
        assert loop.attrs["trips"] == steps
        body = loop.attrs["body"]
        counter = body.inputs[loop.attrs["carried"] - 1]
        assert counter.weak and counter.dtype == np.int64  # carried after x: k = 0, 1, ...
        sizes.add(len(body.nodes))
    assert len(sizes) == 1


def squares(x, steps=8):
    for t in range(steps):
        x = x + t * t  # 0, 1, 4, 9: not a constant step
    return x


def decimal_steps(x, steps=40):
    for t in range(1, steps):
        x = x * (0.1 + 0.05 * t)  # 0.15, 0.2, 0.25000000000000006: a progression up to rounding
    for t in range(3, steps):
        x = x + t * 0.001  # from t = 3
    return x


def test_numbers_that_step_by_a_decimal_up_to_rounding_are_expressions_of_the_iteration():
    """``0.1 + 0.05 * t`` over ``range(1, n)`` and ``t * dt`` over ``range(3, n)`` are Python's
    ``a + b * (k + s)`` with the decimals the user wrote: no table, the same numbers."""
    x = np.linspace(0.1, 0.9, 4)
    with quiet():
        t = tk.trace(decimal_steps, x)
    assert [n.op for n in t.graph.nodes] == ["loop", "loop"], str(t.graph)
    assert "const" not in [s.kind for s in t.graph.specs]
    literals = {x for n in _loops(t.graph) for m in n.attrs["body"].nodes for x in m.inputs}
    assert {0.1, 0.05, 0.001, 1, 3} <= literals, str(t.graph)
    assert_same(t(x[::-1].copy()), decimal_steps(x[::-1].copy()))


def forced_by_a_sine(x, steps=30):
    for t in range(1, steps):
        x = x * 0.99 + math.sin(t * 0.1) * np.float32(0.5)  # Python's numbers, a float32
    return x


def shifting_literals(x, steps=6):
    for t in range(steps):
        x = x + np.array([t, 2 * t, t * t, 1.5], x.dtype)  # literals, new in each iteration
    return x


def nested_numbers(x):
    for i in range(3):
        for j in range(4):
            x = x * (i * j + 1) + math.cos(i + 0.5 * j)
    return x


@pytest.mark.parametrize("fn", [squares, forced_by_a_sine, shifting_literals, nested_numbers])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("target", ["interpreter", "cpu", "cuda"])
def test_numbers_that_do_not_move_by_a_constant_step_are_read_from_a_table(
    fn, dtype, target, monkeypatch
):
    """Numbers Python computes anew in each iteration that are not ``a + b * k`` (``t * t``,
    ``math.sin(t * dt)``, an array of them) roll into a constant holding each iteration's,
    read at the iteration's row: one loop node, NumPy's types (a Python number's row is weak)
    and values, on every target, the loop kept as a loop."""
    x = np.linspace(0.1, 0.9, 4).astype(dtype)
    with quiet():
        t = tk.trace(fn, x)
    assert [n.op for n in t.graph.nodes] == ["loop"], str(t.graph)
    assert t.notes == []
    assert "const" in [s.kind for s in t.graph.specs]
    monkeypatch.setattr("tracekit.backends.control.UNROLL_AT_MOST", 0)  # compiled as a loop
    with quiet():
        run = t if target == "interpreter" else tk.compile(t, target=target, progress=False)
        assert_same(run(x[::-1].copy()), fn(x[::-1].copy()))


def test_a_table_survives_json_and_the_gradient_reads_it():
    with quiet():
        t = tk.trace(forced_by_a_sine, np.linspace(0.1, 0.9, 4))
    again = Graph.from_json(t.graph.to_json())
    x = np.linspace(-1, 1, 4)
    assert_same(interpret.run(again, [x])[0], forced_by_a_sine(x))
    with quiet():
        g = tk.grad(lambda x: forced_by_a_sine(x).sum())(x)
    assert_same(g, np.full(4, 0.99**29), rtol=1e-12)


def with_a_changing_while_number(x):
    t = 0
    while x.sum() < 100.0:
        t += 1
        x = x * 1.5 + t * t
    return x


def test_a_while_loop_does_not_read_a_table():
    """A while loop may run more iterations than were traced: its numbers cannot come from
    a table of the traced ones, and the note says so."""
    with quiet():
        t = tk.trace(with_a_changing_while_number, np.ones(3))
    assert not any(n.op == "while_loop" for n in t.graph.nodes), str(t.graph)
    assert t.notes, str(t.graph)
    assert_same(t(np.ones(3)), with_a_changing_while_number(np.ones(3)))


def test_invariant_work_is_hoisted_out_of_the_loop():
    """The optimiser moves what reads only values from before the loop out of it (np.cos(w)
    in with_invariant_work; w.T in the reverse loop of a matmul chain's gradient)."""
    t = tk.optimize(_trace("with_invariant_work"))
    (loop,) = _loops(t.graph)
    assert [n.op for n in t.graph.nodes] == ["cos", "multiply", "loop"]
    assert [n.op for n in loop.attrs["body"].nodes] == ["add"]
    b = tk.optimize(tk.vjp(tk.trace(_rnn, *_rnn_data())))
    reverse = [n for n in b.graph.nodes if n.op == "loop"][-1]
    (w_t,) = [n for n in b.graph.nodes if n.op == "transpose"]  # w.T, once, before the loop
    assert w_t.inputs[0] is b.graph.inputs[1] and any(x is w_t.out for x in reverse.inputs)
    args = _rnn_data(3)
    assert_same(b(*args, np.ones(())), tk.vjp(tk.trace(_rnn, *_rnn_data()))(*args, np.ones(())))


def _damped(x, w):
    for _ in range(50):
        x = np.tanh(x @ w) * 0.9 + 0.01
    return x


def test_a_loops_buffers_are_fresh_at_each_call():
    """A driver's buffers (its carried state's two among them) are allocated by its caller at
    each call: a result handed back from one is not overwritten by the next call, through the
    loop's own run and through the runner (a graph large enough to keep it)."""
    x, w = _r(13, 64, 64), _r(14, 64, 64) / 8
    with quiet():
        c = tk.compile(tk.trace(_damped, x, w), target="cpu", progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function" and run.workspace, run.how
    assert c.runner.whole is None
    first = c(x, w)
    held = first.copy()
    second = c(x * 0.5, w)
    np.testing.assert_allclose(second, _damped(x * 0.5, w), rtol=1e-9, atol=1e-14)
    assert np.array_equal(first, held) and first is not second
    again = run(x, w)
    np.testing.assert_allclose(run(x * 0.25, w), _damped(x * 0.25, w), rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(again, held, rtol=1e-9, atol=1e-14)


def test_a_kernel_writes_the_region_a_loop_stores_into_directly():
    """``B[1:-1, 1:-1] = f(A)`` in a loop: the kernel writes B's interior, no temporary and no
    copy; where the kernel reads the array it writes (``u[1:-1] = g(u)``), it keeps its
    temporary (its neighbours would read values already written)."""
    sources, workspaces = {}, {}
    for name in ("jacobi", "heat"):
        with quiet():
            c = tk.compile(_trace(name), target="cpu", progress=False)
        (run,) = c.program.loops.values()
        assert run.how == "one numba function"
        driver = run.source[run.source.index("def loop_driver") :]
        sources[name], workspaces[name] = driver, run.workspace  # temporaries: passed in
        args = PROGRAMS[name][1](8)
        want, got = _copies(args), _copies(args)
        np.testing.assert_allclose(c(*got), PROGRAMS[name][0](*want), rtol=1e-12)
    assert not workspaces["jacobi"] and "for q0 in" not in sources["jacobi"]
    assert workspaces["heat"] and "np.empty" not in sources["heat"]
