"""Comparing results: bit for bit, in ulps, and structure by structure."""

from __future__ import annotations

import numpy as np


def ulp_distance(got, ref):
    """Representable floats between ``got`` and ``ref``, elementwise: 0 where they are equal,
    both NaN, or +0.0 and -0.0; inf where one is NaN. (float16, float32 or float64 arrays.)"""
    got, ref = np.atleast_1d(got), np.atleast_1d(ref)

    def ordered(a):  # the float's bits as integers that count representable numbers
        n = a.dtype.itemsize
        i = np.ascontiguousarray(a).view(f"i{n}").astype(np.int64)
        magnitude = i & ((1 << (8 * n - 1)) - 1)
        return np.where(i < 0, -magnitude, i)

    og, orf = ordered(got), ordered(ref)
    same_sign = (og >= 0) == (orf >= 0)
    with np.errstate(over="ignore"):  # int64 differences: exact where they are small
        d_same = np.abs(np.where(same_sign, og - orf, 0)).astype(np.float64)
    d_cross = np.abs(og).astype(np.float64) + np.abs(orf).astype(np.float64)
    d = np.where(same_sign, d_same, d_cross)
    nan_g, nan_r = np.isnan(got), np.isnan(ref)
    return np.where(nan_g & nan_r, 0.0, np.where(nan_g != nan_r, np.inf, d))


def bits_equal(a, b) -> bool:
    """Same dtype, shape and bits (any NaN equals any NaN; -0.0 differs from 0.0)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "c":
        return bits_equal(a.real, b.real) and bits_equal(a.imag, b.imag)
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if not np.array_equal(nan, np.isnan(b)):
            return False
        ia = a.view(f"u{a.dtype.itemsize}")
        ib = b.view(f"u{b.dtype.itemsize}")
        return bool(np.all((ia == ib) | nan))
    return bool(np.array_equal(a, b))


def assert_same(got, expected, where="result", rtol=0.0):
    """Bit for bit (NaN == NaN, -0.0 != 0.0), same dtype, same shape, same structure.

    ``rtol`` > 0 relaxes values (not dtypes or shapes) of inexact results to that tolerance.
    """
    if isinstance(expected, list | tuple):
        assert isinstance(got, list | tuple), f"{where}: got {type(got).__name__}"
        assert len(got) == len(expected), f"{where}: {len(got)} items, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{where}[{i}]", rtol)
        return
    if isinstance(expected, dict):
        assert isinstance(got, dict) and sorted(got) == sorted(expected), where
        for k in expected:
            assert_same(got[k], expected[k], f"{where}[{k!r}]", rtol)
        return
    g, e = np.asarray(got), np.asarray(expected)
    assert g.dtype == e.dtype, f"{where}: dtype {g.dtype}, expected {e.dtype}"
    assert g.shape == e.shape, f"{where}: shape {g.shape}, expected {e.shape}"
    if rtol and e.dtype.kind in "fc":
        np.testing.assert_allclose(g, e, rtol=rtol, atol=0, equal_nan=True, err_msg=where)
        return
    assert bits_equal(g, e), f"{where}: values differ\n got      {g!r}\n expected {e!r}"


def assert_same_type(got, expected):
    """Same structure, dtypes and shapes (values are not compared)."""
    if isinstance(expected, list | tuple):
        for g, e in zip(got, expected):
            assert_same_type(g, e)
        return
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    assert np.shape(got) == np.shape(expected)
