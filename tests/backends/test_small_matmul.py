"""The small-matrix product kernel (tracekit/backends/small_matmul.py) against NumPy, alone and
in loop drivers, whichever of it and BLAS the machine's measurement chooses."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit as tk
from tracekit.backends import small_matmul


def _operands(m, k, n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def _tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if np.dtype(dtype) == np.float32 else {"rtol": 1e-12}


@pytest.mark.parametrize(
    "m,k,n,dtype",
    [(64, 64, 64, "float64"), (6, 3, 45, "float64"), (1, 9, 70, "float64"),
     (37, 5, 1, "float64"), (9, 17, 40, "float32"), (1, 1, 1, "float32"), (5, 64, 33, "float32")],
)  # fmt: skip
def test_the_kernel_computes_numpys_product(m, k, n, dtype):
    """Whole tiles, tiles of one row (rows beyond the last tile of four), single vectors, and
    columns one by one after the last whole vector: 1xN, Nx1, non-square, float64 and 32."""
    a, b = _operands(m, k, n, dtype)
    c = np.full((m, n), np.nan, dtype)
    small_matmul.kernel(m, k, n, dtype, disk=False)(a, b, c)
    np.testing.assert_allclose(c, a @ b, **_tolerance(dtype))


def test_which_products_may_use_the_kernel():
    assert small_matmul.candidate(64, 64, 64, np.float64)
    assert small_matmul.candidate(1, 3, 1, np.float32)
    assert not small_matmul.candidate(4, 4, 4, np.int64)
    assert not small_matmul.candidate(4, 4, 4, np.complex128)
    assert not small_matmul.candidate(512, 512, 512, np.float64)  # BLAS's, with cache blocking
    assert not small_matmul.candidate(0, 4, 4, np.float64)


def test_the_choice_is_measured_once_per_shape(monkeypatch):
    """Without ``TRACEKIT_SMALL_MATMUL`` the kernel and numba's BLAS are timed once per process
    and shape; the variable fixes the choice either way."""
    pytest.importorskip("scipy")  # numba's BLAS
    monkeypatch.delenv("TRACEKIT_SMALL_MATMUL", raising=False)
    before = small_matmul._measured.cache_info()
    first = small_matmul.faster_than_blas(7, 6, 5, np.float64, disk=False)
    assert small_matmul.faster_than_blas(7, 6, 5, np.float64, disk=False) is first
    after = small_matmul._measured.cache_info()
    assert after.hits == before.hits + 1 and after.misses <= before.misses + 1
    for fixed, want in (("always", True), ("never", False)):
        monkeypatch.setenv("TRACEKIT_SMALL_MATMUL", fixed)
        assert small_matmul.faster_than_blas(7, 6, 5, np.float64) is want
    assert not small_matmul.faster_than_blas(7, 6, 5, np.int32)  # never a candidate


def recurrent(x, w):
    for _ in range(40):  # (loops of at most 128 unrolled nodes are compiled unrolled)
        x = np.tanh(x @ w) + 0.5 * x
    return x


@pytest.mark.parametrize("choice", ["always", "never"])
@pytest.mark.parametrize("shape,dtype", [((5, 7), "float64"), ((1, 9), "float32")])
def test_a_loop_driver_computes_its_products_either_way(monkeypatch, choice, shape, dtype):
    """The loop driver calls the kernel where it is chosen and numba's BLAS where not; both
    give NumPy's result (non-square operands, a single row)."""
    if choice == "never":
        pytest.importorskip("scipy")
    monkeypatch.setenv("TRACEKIT_SMALL_MATMUL", choice)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(dtype)
    w = (0.3 * rng.standard_normal((shape[1], shape[1]))).astype(dtype)
    c = tk.compile(tk.trace(recurrent, x, w), target="cpu", cache=False, progress=False)
    (run,) = c.program.loops.values()
    assert run.how == "one numba function"
    assert ("matmul_0(" in run.source) == (choice == "always"), run.source
    assert ("np.dot(" in run.source) == (choice == "never"), run.source
    got = c(x, w)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, recurrent(x, w), **_tolerance(dtype))
