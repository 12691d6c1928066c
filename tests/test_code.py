"""``Traced.code``: the generated source runs in a fresh namespace and computes the same."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from helpers.compare import assert_same
from helpers.run import load_code as load
from helpers.run import quiet, run_code
from test_ir import _TRACES
from test_ops import args_factory

import tracekit as tk
from tracekit import pytree

rng = np.random.default_rng(7)


def check_code(t, *args):
    """``t.code`` on copies of ``args`` == ``t`` on other copies (results and write-backs)."""
    a1, a2 = copy.deepcopy(args), copy.deepcopy(args)
    with quiet():
        expected = t(*a1)
        got = run_code(t, *a2)
    flat, _ = pytree.flatten(expected, extra_types=())
    flat = [x for x in flat]
    results = [got] if t.graph.n_results == 1 else list(got)
    arrays = [x for x in pytree.flatten(expected)[0]]
    assert len(results) == t.graph.n_results
    for r, e in zip(results, arrays):
        assert_same(r, e)
    for x, y in zip(pytree.flatten(list(a2))[0], pytree.flatten(list(a1))[0]):
        assert_same(x, y, "argument after the call")


@pytest.mark.parametrize("c,dt,t", _TRACES)
def test_code_of_every_op_case(c, dt, t):
    new = args_factory(c, dt, "c")(1)
    with quiet():
        try:
            t(*copy.deepcopy(new))
        except Exception:
            return  # data NumPy rejects (e.g. negative integer powers): nothing to compare
    if not c.values:
        return
    check_code(t, *new)


def test_code_is_readable():
    def f(x, w):
        return np.tanh(x @ w).sum(axis=0)

    t = tk.trace(f, np.ones((2, 3)), np.ones((3, 4)))
    code = t.code
    assert code.startswith("import numpy as np\n")
    assert "def f(x, w):" in code
    assert "np.tanh(" in code and "(x @ w)" in code and "axis=(0,)" in code
    assert "# %" in code  # every line carries its listing as a comment


def test_code_writes_into_inputs():
    def f(x, y):
        x += 1.0
        y[1:, ::2] = x[:2]
        return x.sum()

    check_code(tk.trace(f, rng.random(3), rng.random((3, 3))), rng.random(3), rng.random((3, 3)))
    code = tk.trace(f, rng.random(3), rng.random((3, 3))).code
    assert "np.copyto(x, " in code and "np.copyto(y, " in code


def test_code_only_mutating():
    def f(x):
        x *= 2

    check_code(tk.trace(f, rng.random(3)), rng.random(3))


def test_code_with_captured_arrays():
    class Layer:
        def __init__(self):
            self.w = rng.random((3, 2))
            self.b = rng.random(2)

        def __call__(self, x):
            return np.maximum(x @ self.w.T[::-1].T + self.b, 0.0)

    m = Layer()
    t = tk.trace(m, rng.random((4, 3)))
    assert "*, self_w, self_b" in t.code
    m.w = rng.random((3, 2))
    check_code(t, rng.random((4, 3)))


def test_code_with_index_updates_and_views():
    def f(U, idx, v):
        U = U.copy()
        u = U[1:-1, 1:-1]
        u += 1
        U[idx] = v
        U.T[0] *= 2
        z = np.zeros(U.shape, complex)
        z.imag[...] = U
        np.add.at(U, (idx, idx), 1.0)
        return U, z

    args = (rng.random((5, 5)), np.array([0, 3]), rng.random(5))
    check_code(tk.trace(f, *args), rng.random((5, 5)), np.array([4, 1]), rng.random(5))


def test_code_with_weak_scalars():
    def f(x, s):
        y = np.zeros_like(x)
        y[0] = s  # a Python float stored into a float32 array
        return x * s + y, np.asarray(s) * x

    t = tk.trace(f, np.ones(3, np.float32), 2.5)
    check_code(t, rng.random(3).astype(np.float32), -1.5)


def test_code_with_constants_and_special_values():
    def f(x):
        c = np.array([np.nan, np.inf, -0.0])
        k = np.array([1 + 2j, np.nan * 1j])
        return x * c, x[:2] + k, np.full(2, np.nan) + x[0], np.where(x > 0, x, -np.inf)

    t = tk.trace(f, rng.random(3))
    check_code(t, rng.random(3))
    check_code(tk.optimize(t), rng.random(3))  # folded constants become literals
    ns: dict = {}
    exec(t.code, ns)
    fn = ns["f"]
    assert_same(fn(np.ones(3))[0], np.array([np.nan, np.inf, -0.0]))  # constants have defaults


def test_code_of_pytrees_and_guards():
    def f(p, xs):
        out = p["w"] * xs[0]
        if out.sum() > 0:
            out = out + xs[1]
        return {"o": out, "n": 3}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tk.trace(f, {"w": np.ones(2)}, [np.ones(2), np.ones(2)])
    fn = load(t.code, "f")
    assert_same(fn(np.ones(2), np.ones(2), np.ones(2)), np.full(2, 2.0))


def _branchy(x):
    if x.sum() > 5:
        return x
    return x / x.max()


def test_code_checks_its_guards():
    """A call that would take the other branch raises GuardError at the branch's line instead
    of returning the traced branch's result."""
    with pytest.warns(tk.TracerWarning):
        t = tk.trace(_branchy, np.array([1.0, 2.0, 3.0, 4.0]))
    fn = load(t.code, "_branchy")
    same = np.array([2.0, 2.0, 3.0, 4.0])
    assert_same(fn(same), _branchy(same))
    with pytest.raises(tk.GuardError, match=r"bool\(\) gave False .* `if x.sum\(\) > 5:`"):
        fn(np.array([0.1, 0.2, 0.3, 0.4]))


def test_code_checks_its_guards_without_tracekit():
    """The code runs where tracekit is not installed: its own GuardError, the same check."""
    with pytest.warns(tk.TracerWarning):
        t = tk.trace(_branchy, np.array([1.0, 2.0, 3.0, 4.0]))
    program = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def no_tracekit(name, *a, **k):\n"
        "    if name.startswith('tracekit'):\n"
        "        raise ImportError(name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = no_tracekit\n" + t.code + "import numpy as np\n"
        "try:\n"
        "    _branchy(np.array([0.1, 0.2]))\n"
        "except GuardError as e:\n"
        "    print(type(e).__module__, e)\n"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("__main__ bool() gave False on this call but True"), out.stdout


def _scaled_by_a_python_quotient(a, x):
    return a * (2.0 / (x - 1.0))  # Python raises ZeroDivisionError for x == 1.0


def test_code_says_the_python_rule_its_guard_checks():
    """A guard on what Python decides by the values is checked before the node it guards, and
    its error says the rule in words, as the traced call's does."""
    t = tk.trace(_scaled_by_a_python_quotient, np.ones(2), 3.0)
    fn = load(t.code, "_scaled_by_a_python_quotient")
    assert_same(fn(np.ones(2), 5.0), _scaled_by_a_python_quotient(np.ones(2), 5.0))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(tk.GuardError) as failed:
            fn(np.ones(2), 1.0)
        with pytest.raises(tk.GuardError) as traced:
            t(np.ones(2), 1.0)
    assert said == []  # no NumPy warning for the division before the guard
    assert str(failed.value).startswith("Python raises ZeroDivisionError for a zero divisor")
    assert str(failed.value).split(", and the")[0] == str(traced.value).split(", and the")[0]


def _guarded_loop(x):
    for _ in range(6):
        if x.max() < 1e3:  # the same branch in every iteration: a guard in the rolled body
            x = x * 2.0
    return x


def test_code_checks_guards_in_every_loop_iteration():
    x = np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tk.trace(_guarded_loop, x)
    assert any(n.op == "loop" for n in t.graph.nodes)
    fn = load(t.code, "_guarded_loop")
    assert_same(fn(x * 3), _guarded_loop(x * 3))
    with pytest.raises(tk.GuardError) as failed:
        fn(np.full(3, 100.0))  # 100, 200, 400, 800, 1600: the test fails in iteration 4
    with pytest.raises(tk.GuardError) as traced:
        t(np.full(3, 100.0))
    assert "in iteration 4 of `for _ in range(6):`" in str(failed.value)
    assert str(failed.value).split(": the")[0] == str(traced.value).split(": the")[0]


def _reshape_then_write(x):
    flat = x.reshape(-1)  # a view of a C-contiguous x, a copy of a strided one
    flat[0] = 100.0
    return x * 1.0


def test_code_checks_layout_guards():
    contiguous = lambda: np.arange(12.0).reshape(3, 4)  # noqa: E731
    strided = lambda: np.arange(24.0).reshape(3, 8)[:, :4]  # noqa: E731  (reshape copies)
    t = tk.trace(_reshape_then_write, contiguous())
    fn = load(t.code, "_reshape_then_write")
    x, fresh = contiguous(), contiguous()
    assert_same(fn(x), _reshape_then_write(fresh))
    assert_same(x, fresh)
    with pytest.raises(tk.GuardError, match="reshape at .* made a view of 'x' when traced"):
        fn(strided())


def test_code_of_optimized_graphs():
    def f(x):
        y = np.negative(-x)
        return np.power(x, 3) + np.power(x, 2) - y * 1

    t = tk.trace(f, rng.random(4))
    o = tk.optimize(t)
    code = o.code
    assert "power" not in code
    x = rng.random(4)
    assert_same(load(code, "f")(x), o(x))


def test_code_of_the_readme_style_mlp():
    class MLP:
        def __init__(self):
            self.w1, self.b1 = rng.random((4, 8)), rng.random(8)
            self.w2, self.b2 = rng.random((8, 2)), rng.random(2)

        def __call__(self, x):
            with tk.scope("hidden"):
                h = np.maximum(x @ self.w1 + self.b1, 0)
            return h @ self.w2 + self.b2

    m = MLP()
    t = tk.trace(m, rng.random((3, 4)))
    check_code(t, rng.random((3, 4)))


def test_code_results_do_not_see_later_write_backs():
    def f(x):
        y = x.copy()
        head = x[:2].copy()
        x[...] = 0.0
        return y, head, x[1:]

    t = tk.trace(f, rng.random(3))
    check_code(t, rng.random(3))
