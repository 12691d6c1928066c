"""Test inputs: the dtypes, seeds, random values and memory layouts of the test suite."""

from __future__ import annotations

import zlib

import numpy as np

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
LAYOUTS = ("c", "nc", "neg")


def seed_of(*parts) -> int:
    """A seed that depends only on ``parts`` (stable across processes, unlike ``hash``)."""
    return zlib.crc32(repr(parts).encode())


def rng_for(*parts):
    """A generator seeded by :func:`seed_of` ``parts``."""
    return np.random.default_rng(seed_of(*parts))


def random_values(
    rng,
    shape,
    dtype,
    nonneg=False,
    specials=True,
    *,
    int_low=-4,
    int_rate=0.1,
    float_rate=0.15,
    float_specials=SPECIALS,
    smooth=False,
):
    """Random values of ``dtype``: small numbers, some extremes, NaN/inf/-0.0 for floats.

    Integers are drawn from ``[int_low, 9)`` (from 0 when ``nonneg`` or unsigned), a fraction
    ``int_rate`` of them replaced by the dtype's extremes; floats are normal with scale 2, a
    fraction ``float_rate`` replaced by ``float_specials`` (with ``specials``, and more than two
    elements). ``smooth`` floats are float64 values of magnitude 0.3 to 1.5, either sign (for
    finite differences: away from kinks). Complex values have such real and imaginary parts.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo = 0 if (nonneg or dtype.kind == "u") else int_low
        a = np.asarray(rng.integers(lo, 9, size=shape)).astype(dtype)
        if specials and a.size > 2:
            pick = rng.random(shape) < int_rate
            ends = np.array([info.max, info.max if nonneg else info.min], dtype)
            a[pick] = rng.choice(ends, int(pick.sum()))
        return a
    kw = dict(
        int_low=int_low,
        int_rate=int_rate,
        float_rate=float_rate,
        float_specials=float_specials,
        smooth=smooth,
    )
    if dtype.kind == "c":
        part = np.dtype(f"f{dtype.itemsize // 2}")
        out = np.empty(shape, dtype)
        out.real = random_values(rng, shape, part, nonneg, specials, **kw)
        out.imag = random_values(rng, shape, part, nonneg, specials, **kw)
        return out
    if smooth:
        return np.asarray(rng.uniform(0.3, 1.5, size=shape) * rng.choice([-1, 1], size=shape))
    a = np.asarray(rng.standard_normal(shape) * 2).astype(dtype)
    if nonneg:
        a = np.abs(a)
    if specials and a.size > 2:
        pick = rng.random(shape) < float_rate
        a[pick] = rng.choice(np.array(float_specials, dtype), int(pick.sum()))
    return a


def with_layout(a, layout):
    """``a``'s values in a contiguous ("c"), strided ("nc"), reversed ("neg") or transposed
    ("t": the transpose of a contiguous array, Fortran order) array.

    Anything but an array of one or more dimensions is returned as it is.
    """
    if not isinstance(a, np.ndarray) or a.ndim == 0 or layout == "c":
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
    if layout == "t":
        return np.ascontiguousarray(a.T).T
    raise ValueError(layout)


def layout_of(x) -> str:
    """The layout :func:`with_layout` would give an array like ``x``: "c", "nc", "neg" or "t"."""
    if x.ndim == 0 or x.flags.c_contiguous:
        return "c"
    if any(s < 0 for s in x.strides):
        return "neg"
    return "t" if x.flags.f_contiguous else "nc"
