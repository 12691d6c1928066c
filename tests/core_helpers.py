"""Shared helpers of the core tests: input generation, bit-for-bit comparison, trace checks."""

from __future__ import annotations

import copy
import warnings
import zlib

import numpy as np
import pytest

import tracekit as tk

DTYPES = tuple(
    np.dtype(d)
    for d in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
)
INEXACT = tuple(d for d in DTYPES if d.kind in "fc")
INTEGER = tuple(d for d in DTYPES if d.kind in "iu")
SPECIALS = (np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0)


def seed_of(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def random_values(rng, shape, dtype, nonneg=False, specials=True):
    """Random values of ``dtype``: small numbers, some extremes, NaN/inf/-0.0 for floats."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo = 0 if (nonneg or dtype.kind == "u") else -4
        a = np.asarray(rng.integers(lo, 9, size=shape)).astype(dtype)
        if specials and a.size > 2:
            pick = rng.random(shape) < 0.1
            ends = np.array([info.max, info.max if nonneg else info.min], dtype)
            a[pick] = rng.choice(ends, pick.sum())
        return a
    if dtype.kind == "c":
        part = np.dtype(f"f{dtype.itemsize // 2}")
        re = random_values(rng, shape, part, nonneg, specials)
        im = random_values(rng, shape, part, nonneg, specials)
        out = np.empty(shape, dtype)
        out.real, out.imag = re, im
        return out
    a = np.asarray(rng.standard_normal(shape) * 2).astype(dtype)
    if nonneg:
        a = np.abs(a)
    if specials and a.size > 2:
        pick = rng.random(shape) < 0.15
        a[pick] = rng.choice(SPECIALS, pick.sum())
    return a


def with_layout(a, layout, rng=None):
    """``a``'s values in a contiguous ("c"), strided ("nc") or reversed ("neg") array."""
    if layout == "c" or a.ndim == 0:
        return a
    if layout == "nc":
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1] + 1,), a.dtype)
        big[..., 1::2] = a
        view = big[..., 1::2]
        assert not view.flags.c_contiguous or view.size <= 1
        return view
    if layout == "neg":
        rev = tuple(slice(None, None, -1) for _ in range(a.ndim))
        return np.ascontiguousarray(a[rev])[rev]
    raise ValueError(layout)


# ---------------------------------------------------------------------- comparison
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


def quiet():
    """Silence NumPy's floating-point and casting warnings (and TracerWarnings)."""

    class _Q:
        def __enter__(self):
            self.err = np.errstate(all="ignore")
            self.err.__enter__()
            self.w = warnings.catch_warnings()
            self.w.__enter__()
            warnings.simplefilter("ignore")

        def __exit__(self, *exc):
            self.w.__exit__(*exc)
            self.err.__exit__(*exc)

    return _Q()


def _copy_args(args):
    return copy.deepcopy(args)


def check_trace(fn, make_args, *, expect_op=None, values=True, rtol=0.0):
    """Trace ``fn`` on ``make_args(0)``, run it on ``make_args(1)``, compare with NumPy.

    If NumPy raises on the example, tracing must raise the same exception type; if it raises
    on the new inputs, the Traced must too. Writes into inputs are compared as well.
    Returns the Traced (or None when NumPy raised while tracing).
    """
    ex = make_args(0)
    with quiet():
        try:
            fn(*_copy_args(ex))
        except Exception as err:
            with pytest.raises(type(err)):
                tk.trace(fn, *ex)
            return None
        before = _copy_args(ex)
        t = tk.trace(fn, *ex)
    for i, (a, b) in enumerate(zip(ex, before)):
        assert_same(a, b, f"example argument {i} (tracing must not modify it)")
    t.graph.check()
    if expect_op is not None:
        assert expect_op in {n.op for n in t.graph.nodes}, (expect_op, str(t.graph))
    new = make_args(1)
    a1, a2 = _copy_args(new), _copy_args(new)
    with quiet():
        try:
            expected = fn(*a1)
        except Exception as err:
            with pytest.raises(type(err)):
                t(*a2)
            return t
        got = t(*a2)
    if values:
        assert_same(got, expected, rtol=rtol)
        assert_same(list(a2), list(a1), "arguments after the call (write-backs)", rtol)
    else:
        assert_same_type(got, expected)
    return t


def assert_same_type(got, expected):
    if isinstance(expected, list | tuple):
        for g, e in zip(got, expected):
            assert_same_type(g, e)
        return
    assert np.asarray(got).dtype == np.asarray(expected).dtype
    assert np.shape(got) == np.shape(expected)
