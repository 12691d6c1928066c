"""Scalar helpers both targets compile from one definition: the numba CPU target inlines them
(``cpu_helpers``: ``numba.njit(inline="always")``), the CUDA target pastes their source into its
device modules (``cuda_helpers.HELPERS``: ``cuda.jit(device=True)``). Plain Python: each target
adds its decorator, and none calls another helper (the CPU target compiles each alone, so
such a call would reach the undecorated function). Helpers whose best form differs per target
stay with their target.
"""

import math

import numpy as np


def _maximum(a, b):
    return a if (a > b or a != a) else b  # a tie (-0.0, 0.0) gives b, as NumPy


def _minimum(a, b):
    return a if (a < b or a != a) else b


def _fmax(a, b):
    return a if (a > b or b != b) else b


def _fmin(a, b):
    return a if (a < b or b != b) else b


def _lshift(a, b):
    return a << b if 0 <= b < 64 else a - a


# int64 arithmetic that wraps as NumPy's does: numba's signed integer ops carry LLVM's nsw flag,
# so an overflow is undefined and LLVM folds, say, sign(x * x) to x != 0
def _wadd(a, b):
    return np.int64(np.uint64(a) + np.uint64(b))


def _wsub(a, b):
    return np.int64(np.uint64(a) - np.uint64(b))


def _wmul(a, b):
    return np.int64(np.uint64(a) * np.uint64(b))


def _wneg(a):
    return np.int64(np.uint64(0) - np.uint64(a))


def _wabs(a):
    return a if a >= 0 else np.int64(np.uint64(0) - np.uint64(a))


def _ireciprocal(a):
    return a if (a == 1 or a == -1) else a - a


def _iremainder(a, b):
    if b == 0 or b == -1:
        return a - a
    return a % b


def _ifloor_divide(a, b):
    if b == 0:
        return a - a
    if b == -1:  # wrapping, as _wneg: -(-2**63) is -2**63
        return np.int64(np.uint64(0) - np.uint64(a))
    return a // b


def _rshift(a, b):
    if 0 <= b < 64:
        return a >> b
    return (a >> 63) >> 1  # -1 for negative a, else 0 (in a's own type: uint64 stays exact)


# NumPy orders complex numbers lexicographically; a NaN part makes a value unordered
def _cgt(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    return (ar > br and ai == ai and bi == bi) or (ar == br and ai > bi)


def _cge(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    return (ar > br and ai == ai and bi == bi) or (ar == br and ai >= bi)


def _clt(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    return (ar < br and ai == ai and bi == bi) or (ar == br and ai < bi)


def _cle(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    return (ar < br and ai == ai and bi == bi) or (ar == br and ai <= bi)


# NaN-propagating extrema (maximum, minimum: a NaN in either wins; fmax, fmin: the other one)
def _cmaximum(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    ge = (ar > br and ai == ai and bi == bi) or (ar == br and ai >= bi)
    return a if (ar != ar or ai != ai or ge) else b


def _cminimum(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    le = (ar < br and ai == ai and bi == bi) or (ar == br and ai <= bi)
    return a if (ar != ar or ai != ai or le) else b


def _cfmax(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    ge = (ar > br and ai == ai and bi == bi) or (ar == br and ai >= bi)
    return a if (br != br or bi != bi or ge) else b


def _cfmin(a, b):
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    le = (ar < br and ai == ai and bi == bi) or (ar == br and ai <= bi)
    return a if (br != br or bi != bi or le) else b


# ``one`` is 1 in the real type of the values: the arithmetic stays in it (complex64 in float32)
def _cdiv(a, b, one):
    # NumPy's complex division (Smith's method, scaled by a reciprocal)
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    abs_br = abs(br)
    abs_bi = abs(bi)
    if abs_br >= abs_bi:
        if abs_br == 0 and abs_bi == 0:
            return complex(ar / abs_br, ai / abs_br)
        rat = bi / br
        scl = one / (br + bi * rat)
        return complex((ar + ai * rat) * scl, (ai - ar * rat) * scl)
    rat = br / bi
    scl = one / (bi + br * rat)
    return complex((ar * rat + ai) * scl, (ai * rat - ar) * scl)


def _creciprocal(z, one):
    re, im = z.real, z.imag
    if abs(im) <= abs(re):
        r = im / re
        d = re + im * r
        return complex(one / d, -r / d)
    r = re / im
    d = re * r + im
    return complex(r / d, -one / d)


def _csign(z, one):
    re, im = z.real, z.imag
    r = math.hypot(re, im)
    zero = one - one
    if r != r:
        return complex(zero / zero, zero / zero)
    if r == one / zero:
        if abs(re) == r:
            if abs(im) == r:
                return complex(zero / zero, zero / zero)
            return complex(one if re > zero else -one, zero)
        return complex(zero, one if im > zero else -one)
    if r == zero:
        return complex(zero, zero)
    return complex(re / r, im / r)


SHARED = (
    _maximum,
    _minimum,
    _fmax,
    _fmin,
    _lshift,
    _wadd,
    _wsub,
    _wmul,
    _wneg,
    _wabs,
    _ireciprocal,
    _iremainder,
    _ifloor_divide,
    _rshift,
    _cgt,
    _cge,
    _clt,
    _cle,
    _cmaximum,
    _cminimum,
    _cfmax,
    _cfmin,
    _cdiv,
    _creciprocal,
    _csign,
)
