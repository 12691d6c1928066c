"""Regressions found by the autodiff tests: plan order and per-row outputs without keepdims."""

import numpy as np

import tracekit as tk


def _both(fn, *args):
    t = tk.trace(fn, *args)
    c = tk.compile(t, progress=False)
    return c(*args), t(*args)


def test_view_read_by_a_kernel_opened_before_it_runs_first():
    got, want = _both(
        lambda x, s: np.broadcast_to(s, (5,)) * np.cos(x), np.arange(5.0), np.array(3.0)
    )
    np.testing.assert_array_equal(got, want)


def test_row_sum_without_keepdims_is_indexed_by_row():
    x, m = np.arange(5.0), np.arange(25.0).reshape(5, 5)
    got, want = _both(lambda x, m: np.sum((x + 1.0) * m, axis=1), x, m)
    np.testing.assert_array_equal(got, want)


def test_array_literals_in_nodes_are_fused_as_constants():
    mask = np.array([[True, False], [False, True]])
    t = tk.trace(lambda x: np.where(mask, x, 1.0) * 2, np.ones((2, 2)))
    c = tk.compile(t, progress=False)
    assert len(c.kernels) == 1
    np.testing.assert_array_equal(c(np.full((2, 2), 3.0)), t(np.full((2, 2), 3.0)))


def test_tuple_result_is_not_unwrapped_by_the_fast_path():
    t = tk.trace(lambda x: (x + 1,), np.ones(3))
    c = tk.compile(t, progress=False)
    out = c(np.ones(3))
    assert isinstance(out, tuple) and len(out) == 1


def test_numba_python_op_runs_inside_the_fused_kernel():
    import numba

    @numba.njit
    def softplus(x):
        return np.log1p(np.exp(x))

    op = tk.python_op(softplus, name="softplus")
    f = lambda x: op(x * 2.0) + 1.0  # noqa: E731
    x = np.linspace(-3, 3, 7)
    c = tk.compile(tk.trace(f, x), progress=False)
    assert len(c.kernels) == 1 and "softplus" in str(c.plan)
    np.testing.assert_allclose(c(x), f(x), rtol=1e-15)


def test_plain_python_op_splits_the_plan_and_says_so():
    op = tk.python_op(lambda x: np.sort(x), name="sort")
    x = np.array([3.0, 1.0, 2.0])
    c = tk.compile(tk.trace(lambda x: op(x * 2) + 1, x), progress=False)
    assert len(c.kernels) == 2 and "splits" in str(c.plan)
    np.testing.assert_array_equal(c(x), np.sort(x * 2) + 1)


def test_different_numba_functions_get_different_kernel_sources():
    import numba

    a = tk.python_op(numba.njit(lambda x: x + 1.0), name="f")
    b = tk.python_op(numba.njit(lambda x: x + 2.0), name="f")
    x = np.ones(3)
    ca = tk.compile(tk.trace(lambda x: a(x) * 2, x), progress=False)
    cb = tk.compile(tk.trace(lambda x: b(x) * 2, x), progress=False)
    assert ca.source != cb.source
    np.testing.assert_array_equal(ca(x), 4.0)
    np.testing.assert_array_equal(cb(x), 6.0)


def test_index_update_of_a_dead_fresh_buffer_stores_in_place_and_results_stay_distinct():
    def step(U):
        V = U * 2.0
        V[1:-1, 1:-1] = 0.25 * (U[:-2, 1:-1] + U[2:, 1:-1])
        return V + 1, V[0]

    U = np.random.default_rng(0).standard_normal((6, 5))
    c = tk.compile(tk.trace(step, U), progress=False)
    assert "_store(" in c.runner.source
    a, b = c(U)
    a2, b2 = c(U * 3)
    for got, want in zip((a, b, a2, b2), step(U) + step(U * 3)):
        np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(b, b2)


def test_whole_array_argmax_finds_the_first_nan_across_chunks():
    x = np.random.default_rng(0).standard_normal(100_003).astype(np.float32)
    x[500] = np.nan
    t = tk.trace(lambda x: x.argmax(), x)
    assert tk.compile(t, progress=False)(x) == t(x) == 500


def test_whole_array_reductions_in_chunks_match_the_interpreter():
    rng = np.random.default_rng(1)
    for n in (7, 33, 100_001):
        x = rng.standard_normal(n)
        t = tk.trace(lambda x: (x.sum(), x.max(), x.min(), (x > 0).all(), x / x.sum()), x)
        c = tk.compile(t, progress=False)
        for got, want in zip(c(x), t(x)):
            np.testing.assert_allclose(got, want, rtol=1e-13)
