"""Slices read (and written) by kernels through the array they slice (backends/windows.py).

A window's index, evaluated at every position of the view, must name the element NumPy's view
has there (hypothesis draws shapes and basic indices, and indices of those views); compiled
programs reading slices of inputs, of strided inputs and of kernel results, and loops writing
into regions of their buffers, must equal NumPy, and their kernels index the base."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers.run import hypothesis_settings
from hypothesis import given
from hypothesis import strategies as st

import tracekit as tk
from tracekit.backends.windows import Window

pytestmark = pytest.mark.filterwarnings("ignore::tracekit.TracerWarning")


@st.composite
def basic_index(draw, shape):
    """A basic index of an array of ``shape``: ints (negative too), slices of any step,
    None, at most one Ellipsis."""
    idx, d = [], 0
    while d < len(shape) and draw(st.booleans()):
        n = shape[d]
        kind = draw(st.sampled_from(["int", "slice", "slice", "none"] if n else ["slice"]))
        if kind == "none":
            idx.append(None)
            continue
        if kind == "int":
            idx.append(draw(st.integers(-n, n - 1)))
        else:
            bound = st.none() | st.integers(-n - 2, n + 2)
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2]))
            idx.append(slice(draw(bound), draw(bound), step))
        d += 1
    if draw(st.booleans()):
        idx.insert(draw(st.integers(0, len(idx))), Ellipsis)
    return tuple(idx)


def _element(w: Window, base: np.ndarray, at: tuple):
    names = [f"i{d}" for d in range(len(at))]
    src = w.index(names if at else [])
    return eval(f"base[{src}]", {"base": base, **dict(zip(names, at))})


@hypothesis_settings(300)
@given(st.data())
def test_a_window_names_the_element_of_numpys_view(data):
    shape = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple))
    base = np.arange(int(np.prod(shape))).reshape(shape)
    idx = data.draw(basic_index(shape))
    w = Window.of(None, idx, shape)
    view = base[idx]
    assert w is not None and w.shape == view.shape
    if data.draw(st.booleans()) and view.ndim:
        axes = tuple(data.draw(st.permutations(range(view.ndim))))
        w, view = w.permuted(axes), view.transpose(axes)
        assert w.shape == view.shape
    if data.draw(st.booleans()) and view.ndim:
        idx2 = data.draw(basic_index(view.shape))
        w, view = w.then(idx2, view.shape), view[idx2]
        assert w.shape == view.shape
    for at in np.ndindex(view.shape):
        assert _element(w, base, at) == view[at], (idx, at, w)


def test_indices_a_window_does_not_cover():
    assert Window.of(None, (slice(0, 2), "@0"), (3, 3)) is None  # an index array
    assert Window.of(None, (5,), (3,)) is None  # out of bounds: NumPy raises, no window
    assert Window.of(None, (Ellipsis, 0, Ellipsis), (3, 3)) is None


def _segments(c) -> str:
    return "\n".join(ks.text for ks in c.program.kernel_sources.values())


def stencil(a):
    return 0.25 * (a[1:-1, :-2] + a[1:-1, 2:] + a[:-2, 1:-1] + a[2:, 1:-1]) - a[1:-1, 1:-1]


def odd_slices(a):
    b = a[::-1, 1:]  # reversed rows
    c = a[:, None, 2:]  # a new axis
    return np.tanh(b[:, 1:]) + c[:, 0], (a[..., 1:][1:, ::-1] * 2.0).sum(axis=0)


def of_a_result(a):
    t = np.exp(a) - 1.0  # a kernel's result, sliced by the next kernel's reads
    return t[1:, 1:].sum(axis=1) + t[:-1, :-1].max(axis=1)


@pytest.mark.parametrize("fn", [stencil, odd_slices, of_a_result], ids=lambda f: f.__name__)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_compiled_slices_read_through_their_base(fn, layout):
    a = np.random.default_rng(0).standard_normal((9, 7))
    c = tk.compile(tk.trace(fn, a), target="cpu", cache=False, progress=False)
    assert "base_" in _segments(c)  # the kernels index the array, not a strided view
    x = {
        "contiguous": a + 1,
        "transposed": np.asfortranarray(a + 1),
        "strided": np.repeat(a + 1, 2, axis=1)[:, ::2],
    }[layout]
    assert x.shape == a.shape and np.array_equal(x, a + 1)
    got, want = c(x), fn(x)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


def few_rows(a):
    return np.tanh(a[3:5]) * 2.0  # two rows of a large input


def test_a_small_view_of_an_input_is_read_in_place():
    """Indexing through the base needs it C-contiguous: a view of less than half of an input
    is read in place instead (a strided input would be copied whole for two rows)."""
    a = np.random.default_rng(5).standard_normal((100, 64))
    c = tk.compile(tk.trace(few_rows, a), target="cpu", cache=False, progress=False)
    assert "base_" not in _segments(c)
    f = np.asfortranarray(a)
    np.testing.assert_allclose(c(f), few_rows(f), rtol=1e-14)


def jacobi(A, B):
    for _ in range(30):  # past UNROLL_AT_MOST nodes: it stays a loop
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1])
        A[1:-1, 2:] = 0.5 * (B[1:-1, 2:] + B[:-2, :-2])  # a region that is not the interior
    return A, B


def test_a_loop_writes_regions_of_its_buffers_from_its_kernels():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((12, 10)), rng.standard_normal((12, 10))
    t = tk.trace(jacobi, A.copy(), B.copy())
    c = tk.compile(t, target="cpu", cache=False, progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function"
    assert "w_" not in run.source.split("def loop_driver")[1]  # no region views: stores in place
    for got, want in zip(c(A.copy(), B.copy()), jacobi(A.copy(), B.copy())):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def kij_stencil(f):
    """A stencil over (I, J, K) of a field stored (K, I, J): J is the contiguous axis."""
    g = f.transpose(1, 2, 0)
    return g[1:-1, 1:-1] * 4.0 - g[2:, 1:-1] - g[:-2, 1:-1] - g[1:-1, 2:] - g[1:-1, :-2]


def _loop_nest(c) -> list:
    """The loop variables of the compiled kernels' loops, outermost first (the parallel one
    starred: a ``prange``, or a chunk kernel's loop over its chunk)."""
    lines = [ln.strip() for ln in _segments(c).splitlines()]
    return [
        ln.split()[1] + ("*" if re.search(r"prange\(|range\(k\d+_lo,", ln) else "")
        for ln in lines
        if ln.startswith("for ")
    ]


def test_loops_nest_by_strides_and_sizes():
    """The innermost loop runs along the axis the operands are contiguous in, the parallel
    one over the largest of the others; values equal NumPy's."""
    f = np.random.default_rng(2).standard_normal((9, 60, 70))  # K, I, J
    c = tk.compile(tk.trace(kij_stencil, f), target="cpu", cache=False, progress=False)
    assert "transpose" not in _segments(c) and "base_" in _segments(c)
    assert _loop_nest(c) == ["k0_i0*", "k0_i2", "k0_i1"]  # I, K, then J: the base's rows
    np.testing.assert_allclose(c(f), kij_stencil(f), rtol=1e-14)
    x = np.random.default_rng(3).standard_normal((2, 180, 200))
    c = tk.compile(tk.trace(lambda a: a[:, 1:] * 2.0, x), target="cpu", cache=False, progress=False)
    assert _loop_nest(c) == ["k0_i1*", "k0_i0", "k0_i2"]  # a prange of 2 planes would idle cores
    np.testing.assert_allclose(c(x), x[:, 1:] * 2.0)
