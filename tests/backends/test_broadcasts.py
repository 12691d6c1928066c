"""Cheap values read broadcast (backends/broadcasts.py): computed in each kernel that reads
them instead of in a kernel of their own. Programs against NumPy on the CPU, the CUDA
simulator and dask; the plan's decisions; the values that must keep their own kernel."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.run import quiet

import tracekit as tk
from tracekit.backends import planner


def _compile(fn, *args, target="cpu"):
    with quiet():
        return tk.compile(tk.trace(fn, *args), target=target, cache=False, progress=False)


def grid(t, dx, dz):
    """A stretched grid's face widths scaling differences of a field (the ocean kernels)."""
    dxu = 0.5 * (dx[1:] + dx[:-1])  # (n-1,): read broadcast along rows
    dzw = (0.5 * (dz[1:] + dz[:-1]))[None, :]  # (1, m-1)
    return (t[1:, 1:] - t[:-1, 1:]) / dxu[:, None] + (t[1:, 1:] - t[1:, :-1]) * dzw


def two_readers(x, w):
    """One value read broadcast by two kernels: an elementwise one and a row reduction."""
    s = w * 2.0 - 1.0
    y = np.exp(x) * s
    return y / y.sum(axis=1, keepdims=True), (x[:3] + s).T


def of_a_number(x, a):
    """A 0-d value of an input, read by a kernel over x."""
    return x * (a + 1.0) - a * 3.0


def integers(x, k):
    """An integer value read by a float kernel (NumPy's casting inside the reader)."""
    return x + (k * 3 + 1)


def chained(x, w):
    """A cone of four plain ops: within the budget."""
    return x - ((w + 1.0) * 2.0 - w) * 0.25


def through_slices(x, w):
    """Read broadcast and through slices: the slices compute it again too."""
    c = 0.5 * (w + 1.0)
    return x * c, x[:, 1:] * c[1:] - x[:, :-1] * c[:-1]


CASES = {
    grid: [(9, 7), (9,), (7,)],
    two_readers: [(5, 6), (6,)],
    of_a_number: [(4, 5), ()],
    integers: [(3, 4), (4,)],
    chained: [(6, 5), (5,)],
    through_slices: [(5, 6), (6,)],
}


def _args(fn, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for shape in CASES[fn]:
        if fn is integers and len(out) == 1:
            out.append(rng.integers(-5, 5, shape))
        else:
            out.append(np.asarray(rng.standard_normal(shape) + 2.0))
    return out


def _equal(got, want, rtol=1e-13):
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-14)


@pytest.mark.parametrize("fn", list(CASES), ids=lambda f: f.__name__)
def test_cheap_values_read_broadcast_get_no_kernel_of_their_own(fn, monkeypatch):
    args = _args(fn)
    c = _compile(fn, *args)
    assert c.plan.broadcasts, str(c.plan)
    assert "values computed where read broadcast:" in str(c.plan)
    made = {o for st in c.plan.steps if st.kind == "kernel" for o in st.outputs}
    for d in c.plan.broadcasts:
        assert d.value not in made  # no kernel writes it
        assert 1 <= d.cost <= 4 and d.readers >= 1
        assert "test_broadcasts.py" in str(d) and "no kernel of its own" in str(d)
    monkeypatch.setattr(planner, "BROADCASTS", False)
    before = _compile(fn, *args)
    assert len(c.plan.kernels) < len(before.plan.kernels)
    for seed in (0, 1):
        xs = _args(fn, seed)
        _equal(c(*xs), fn(*xs))
        _equal(c(*xs), before(*xs))


def test_the_grid_is_one_kernel_and_reads_the_widths_in_place():
    args = _args(grid)
    c = _compile(grid, *args)
    assert len(c.plan.kernels) == 1
    assert [d.cost for d in c.plan.broadcasts] == [2, 2]
    strided = [a[::-1] if a.ndim == 1 else np.asfortranarray(a) for a in args]  # other layouts
    _equal(c(*strided), grid(*strided))


def test_a_value_read_by_two_kernels_is_computed_in_both():
    args = _args(two_readers)
    c = _compile(two_readers, *args)
    (d,) = c.plan.broadcasts
    assert d.readers == 2
    holding = [st for st in c.plan.kernels if any(d.value in n.outputs for n in st.nodes)]
    assert len(holding) == 2 and len(c.plan.kernels) == 2


def costly(x, w):
    return x * ((((w + 1.0) * 2.0 - w) * 0.25) + 3.0)  # five plain ops


def divided(x, w):
    return x * (1.0 / (w + 2.0))


def of_a_function(x, w):
    return x * np.exp(w)


def also_a_result(x, w):
    s = w + 1.0
    return x * s, s


def also_reduced(x, w):
    s = w + 1.0
    return x * s + s.sum()


def of_a_kernel(x, w):
    s = w.sum() + w  # of a reduction's value: not of the inputs alone
    return x * (s + 1.0)


def same_shape(x, w):
    s = w + 1.0
    return x * s, s * w  # also read at its own shape: a kernel of its shape anyway


def of_a_value_kept(x, w):
    n = -w  # cheap, but read at its own shape after the reduction too: a kernel's value
    s = np.sin(x + np.maximum(n, 1.5)).sum(axis=0)
    return n * s  # (computing the maximum beside the sum would make the plan a cycle)


@pytest.mark.parametrize(
    "fn",
    [costly, divided, of_a_function, also_a_result, also_reduced, of_a_kernel, same_shape]
    + [of_a_value_kept],
)
def test_values_that_keep_their_own_kernel(fn):
    rng = np.random.default_rng(2)
    args = rng.standard_normal((5, 4)), rng.standard_normal(4)
    c = _compile(fn, *args)
    assert not c.plan.broadcasts, str(c.plan)
    _equal(c(*args), fn(*args))


def test_a_per_row_op_does_not_read_a_value_computed_where_read():
    def normed(x, a):
        m = x.sum(axis=1, keepdims=True)
        return x / (m * (a + 1.0))  # (a + 1.0) (1, 1) read by a per-row product

    rng = np.random.default_rng(4)
    args = rng.standard_normal((5, 6)), rng.standard_normal((1, 1))
    c = _compile(normed, *args)
    _equal(c(*args), normed(*args))


def test_the_drawing_says_where_it_is_computed():
    args = _args(grid)
    c = _compile(grid, *args)
    svg = tk.render(c).pipe(format="svg", encoding="utf-8")
    assert "computed in each kernel reading it broadcast (2 op(s) per element)" in svg


def test_the_explorer_says_which_kernels_compute_it():
    pytest.importorskip("anywidget")
    args = _args(two_readers)
    c = _compile(two_readers, *args)
    (d,) = c.plan.broadcasts
    w = tk.explore(c)
    (node,) = [n for n in c.graph.nodes if d.value in n.outputs]
    w.select(node)
    text = w.details_text()
    assert "computed in each kernel reading it broadcast (2 op(s) per element)" in text
    for st in c.plan.kernels:  # both kernels reading it
        assert f"fused into kernel {st.group.name}" in text


@pytest.mark.parametrize("fn", [grid, two_readers, of_a_number, through_slices])
def test_the_cuda_target_computes_them_where_read(fn):
    pytest.importorskip("numba.cuda")
    from tracekit.backends.cuda import simulator_active

    if not simulator_active():
        pytest.skip("runs on the CUDA simulator")
    args = _args(fn)
    c = _compile(fn, *args, target="cuda")
    cpu = _compile(fn, *args)
    assert [d.value.name for d in c.plan.broadcasts] == [d.value.name for d in cpu.plan.broadcasts]
    assert len(c.plan.kernels) == len(cpu.plan.kernels)
    _equal(c(*args), fn(*args))


def test_the_dask_target_computes_them_where_read():
    da = pytest.importorskip("dask.array")
    args = _args(grid)
    t = da.from_array(args[0], chunks=(4, 3))
    with quiet():
        f = tk.jit(grid, target="dask")
        got = f(t, *args[1:]).compute(scheduler="synchronous")
    _equal(got, grid(*args))


def test_gradients_through_a_value_computed_where_read():
    def loss(x, w):
        return np.sum(np.tanh(x * (0.5 * (w[1:] + w[:-1]))))

    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((4, 5)), rng.standard_normal(6)
    with quiet():
        gx, gw = tk.jit(tk.grad(loss, argnums=(0, 1)), wait=True)(x, w)
    eps, want = 1e-6, np.zeros_like(w)
    for i in range(w.size):
        d = np.zeros_like(w)
        d[i] = eps
        want[i] = (loss(x, w + d) - loss(x, w - d)) / (2 * eps)
    np.testing.assert_allclose(gw, want, rtol=1e-6, atol=1e-8)
    c = 0.5 * (w[1:] + w[:-1])
    np.testing.assert_allclose(gx, c * (1 - np.tanh(x * c) ** 2), rtol=1e-12)
