"""numba functions on traced arrays (tracekit/numba_interop.py), and python ops that use numba,
the workspace, or write into their inputs (tracekit/pyop.py)."""

from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

import tracekit as tk

numba = pytest.importorskip("numba")
HERE = os.path.basename(__file__)
X = np.linspace(-3.0, 3.0, 257)
Y = np.linspace(0.0, 1.0, 257)


@numba.vectorize
def softplus(x):
    return math.log1p(math.exp(x)) if x < 20.0 else x


@numba.njit
def gate(x, y):  # a scalar function: numba cannot compile it for arrays (the `if`)
    if x > 0:
        return x * y
    return math.exp(x) - 1.0


@numba.njit
def running_max(x):  # an array function
    out = np.empty_like(x)
    best = -np.inf
    for i in range(x.size):
        best = max(best, x[i])
        out[i] = best
    return out


@numba.njit
def no_such_attribute(x):
    return x.foo


def line_of(msg: str) -> str:
    line = int(re.search(rf"{HERE}:(\d+)", msg).group(1))
    return open(__file__).read().splitlines()[line - 1]


def test_vectorize_and_scalar_njit_fuse_into_one_kernel():
    def f(x, y):
        return softplus(x * 2.0) + gate(x, y) * 3.0

    want = softplus(X * 2.0) + np.array([gate(a, b) for a, b in zip(X, Y)]) * 3.0
    t = tk.trace(f, X, Y)
    assert [n.attrs.get("name") for n in t.graph.nodes if n.op == "python_op"] == [
        "softplus",
        "gate",
    ]
    np.testing.assert_array_equal(t(X, Y), want)
    c = tk.compile(t, progress=False)
    np.testing.assert_allclose(c(X, Y), want, rtol=1e-15, atol=1e-15)
    assert len(c.kernels) == 1 and len(c.kernels[0].nodes) == len(t.graph.nodes)


@numba.vectorize(["float64(float64)"])
def doubled_below_two(x):
    if x > 2.0:
        raise ValueError("above two")
    return x * 2.0


def test_a_vectorized_function_that_raises_raises_from_a_fused_kernel():
    """A ``@numba.vectorize`` ufunc called inside numba code drops what its function raises:
    the fused kernel calls its function as ``@njit`` instead, and the call raises as NumPy's
    does (it returned 0.14 for an element that raised)."""

    def f(x):
        return np.sin(x) + doubled_below_two(x)

    t = tk.trace(f, np.array([1.0, 1.5, 0.5]))
    c = tk.compile(t, target="cpu", progress=False)
    assert len(c.kernels) == 1  # fused
    np.testing.assert_allclose(
        c(np.array([0.5, 2.0, -1.0])), f(np.array([0.5, 2.0, -1.0])), rtol=1e-15
    )
    for run in (t, c):
        with pytest.raises(ValueError, match="above two"):
            run(np.array([1.0, 3.0, 0.5]))


def test_a_vectorized_function_whose_loop_casts_its_inputs_runs_as_numpy_calls_it():
    """int64 values into a float64 ufunc: NumPy casts them to float64 first, so the kernel
    does not call the function on them (as int64 ``x * 2.0`` it would agree; ``x // 2``, an
    int's, would not)."""

    def f(k):
        return doubled_below_two(k) + 1.0

    k = np.arange(-3, 3)
    c = tk.compile(tk.trace(f, k), target="cpu", progress=False)
    np.testing.assert_array_equal(c(k), f(k))
    assert all(n.op != "python_op" for kern in c.kernels for n in kern.nodes)


def test_an_array_level_njit_becomes_a_python_op():
    t = tk.trace(lambda x: running_max(np.sin(x)) * 2.0, X)
    assert [n.op for n in t.graph.nodes] == ["sin", "python_op", "multiply"]
    want = running_max(np.sin(Y * 5)) * 2.0
    np.testing.assert_array_equal(t(Y * 5), want)
    np.testing.assert_allclose(tk.compile(t, progress=False)(Y * 5), want, rtol=1e-15)


def test_numba_functions_that_cannot_be_used_are_named_at_the_users_line():
    with pytest.raises(tk.TraceError) as e:
        tk.trace(lambda x: no_such_attribute(x) + 1.0, X)
    msg = str(e.value)
    assert "'no_such_attribute'" in msg and "Unknown attribute 'foo'" in msg
    assert "no_such_attribute(x) + 1.0" in line_of(msg)
    with pytest.raises(tk.TraceError) as e:
        tk.trace(lambda x: softplus(x, out=np.empty_like(X)), X)
    assert "softplus" in str(e.value) and "softplus(x, out=" in line_of(str(e.value))


def test_an_njit_that_allocates_inside_a_python_op_works_while_tracing():
    @numba.njit
    def shifted(x):
        out = np.zeros_like(x)
        ones = np.ones(x.shape[0])
        out[1:] = x[:-1]
        return out + ones

    op = tk.python_op(shifted)
    t = tk.trace(lambda x: op(x) * 2.0, X)
    np.testing.assert_array_equal(t(Y), shifted(Y) * 2.0)


def test_a_python_op_writing_into_its_input_says_which_op_where_and_why():
    def scale_in_place(x):
        if x[0] > 100:  # writes on some data only: traced fine, fails when it runs
            x *= 2
            return x
        return x * 2

    op = tk.python_op(scale_in_place)
    with pytest.raises(ValueError) as e:
        tk.trace(lambda x: op(x + 200.0), X)
    msg = str(e.value)
    assert "python op 'scale_in_place'" in msg and "read-only" in msg and "x.copy()" in msg
    assert "op(x + 200.0)" in line_of(msg)
    t = tk.trace(lambda x: op(x + 1.0), X)
    for run in (t, tk.compile(t, progress=False)):
        with pytest.raises(ValueError, match="python op 'scale_in_place' wrote into one"):
            run(X + 200.0)


# ---------------------------------------------------------------------- pass_workspace
RUNS = []


def scaled(x, ws):
    RUNS.append(sorted(ws.blobs))
    ws.blobs["twice"] = x * 2  # for the gradient, in the same run
    return x * ws.inputs["s"]


def scaled_grad(x, y, gy, ws):
    return gy * ws.inputs["s"] + 0.0 * ws.blobs["twice"]


SCALED = tk.python_op(scaled, grad_f=scaled_grad, pass_workspace=True)


def loss(x, s):
    return (SCALED(x) * s).sum()


def test_pass_workspace_on_the_interpreter_compiled_code_and_under_grad():
    x, s = np.arange(3.0), np.full((), 3.0)
    t = tk.trace(loss, x, s)
    RUNS.clear()
    for run in (t, tk.compile(t, progress=False)):
        assert run(x, np.full((), 4.0)) == pytest.approx(16.0 * x.sum())
    assert RUNS == [[], []]  # each run starts with empty blobs
    np.testing.assert_allclose(tk.grad(loss)(x, np.full((), 4.0)), np.full(3, 16.0))
    backward = tk.vjp(t)
    assert (backward(x, s, np.ones(()))[0] == 9.0).all()
    compiled_backward = tk.compile(backward, progress=False)
    assert (compiled_backward(x, s, np.ones(()))[0] == 9.0).all()
    with pytest.raises(KeyError):  # outside a run: a workspace of its own, without inputs
        tk.python_op(scaled_grad, pass_workspace=True)(x, x, x)
