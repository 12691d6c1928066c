"""The numba helpers of the CPU target's generated code, defined once per process.

The scalar templates (``scalar.TEMPLATES``, ``scalar.CPU_TEMPLATES``) call these where numba's
own operation differs from NumPy's (NaN-propagating extrema, floor division and remainder,
shifts, wrapping int64 arithmetic, complex ordering, division and absolute value). A generated
module imports only those it calls (see ``cpu._helper_imports``): numba's dispatchers are never
freed, so defining the helpers in every module kept a copy per compiled graph alive for good.

Imported by generated code only (it imports numba).
"""

import math

import numba
import numpy as np

from tracekit.backends import helpers as _shared
from tracekit.backends.scalar import _fma

# the helpers both targets share (tracekit/backends/helpers.py), compiled for the CPU
_inline = numba.njit(inline="always")
_maximum = _inline(_shared._maximum)
_minimum = _inline(_shared._minimum)
_fmax = _inline(_shared._fmax)
_fmin = _inline(_shared._fmin)
_lshift = _inline(_shared._lshift)
_wadd = _inline(_shared._wadd)
_wsub = _inline(_shared._wsub)
_wmul = _inline(_shared._wmul)
_wneg = _inline(_shared._wneg)
_wabs = _inline(_shared._wabs)
_ireciprocal = _inline(_shared._ireciprocal)
_iremainder = _inline(_shared._iremainder)


@numba.njit(inline="always")
def _floor_divide(a, b):
    return np.floor_divide(a, b)


@numba.njit(inline="always")
def _remainder(a, b):
    return np.remainder(a, b)


@numba.njit(inline="always")
def _rshift(a, b):
    if 0 <= b < 64:
        return a >> b
    return (a >> 63) >> 1  # -1 for negative a, else 0 (in a's own type: uint64 stays exact)


@numba.njit
def _ipow(a, b, one):
    if b < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    r = np.uint64(one)
    x = np.uint64(a)  # unsigned: the low bits of the products, wrapped as NumPy's
    while b:
        if b & 1:
            r = r * x
        x = x * x
        b >>= 1
    return r


@numba.njit(inline="always")
def _fdivmod(a, b, one):
    # NumPy's npy_divmod for floats: (floor quotient, Python-style remainder)
    zero = one - one
    mod = np.fmod(a, b)
    if not b:
        return a / b, mod
    div = (a - mod) / b
    if mod:
        if (b < zero) != (mod < zero):
            mod = mod + b
            div = div - one
    else:
        mod = np.copysign(zero, b)
    if div:
        floordiv = np.floor(div)
        if div - floordiv > one / (one + one):
            floordiv = floordiv + one
    else:
        floordiv = np.copysign(zero, a / b)
    return floordiv, mod


@numba.njit(inline="always")
def _ffloor_divide(a, b, one):
    if not b:
        return a / b
    return _fdivmod(a, b, one)[0]


@numba.njit(inline="always")
def _fremainder(a, b, one):
    if not b:
        return np.fmod(a, b)
    return _fdivmod(a, b, one)[1]


@numba.njit(inline="always")
def _ifloor_divide(a, b):
    if b == 0:
        return a - a
    if b == -1:
        return _wneg(a)
    return a // b


@numba.njit(inline="always")
def _uremainder(a, b):
    if b == 0:
        return a - a
    return a % b


@numba.njit(inline="always")
def _ufloor_divide(a, b):
    if b == 0:
        return a - a
    return a // b


@numba.njit(inline="always")
def _cabs(z, one):
    # NumPy's SIMD complex absolute: larger * sqrt(fma(ratio, ratio, 1))
    re = abs(z.real)
    im = abs(z.imag)
    inf = one / (one - one)
    if re == inf or im == inf:
        return inf
    if re != re or im != im:
        return re + im
    larger = re if re > im else im
    smaller = im if re > im else re
    if larger == 0:
        return larger
    ratio = smaller / larger
    return np.sqrt(_fma(ratio, ratio, one)) * larger


@numba.njit(inline="always")
def _csign(z, one):
    re = z.real
    im = z.imag
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


@numba.njit(inline="always")
def _cdiv(a, b, one):
    # NumPy's complex division (Smith's method, scaled by a reciprocal)
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
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


@numba.njit(inline="always")
def _creciprocal(z, one):
    re = z.real
    im = z.imag
    if abs(im) <= abs(re):
        r = im / re
        d = re + im * r
        return complex(one / d, -r / d)
    r = re / im
    d = re * r + im
    return complex(r / d, -one / d)


@numba.njit(inline="always")
def _cge(a, b):
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    return (ar > br and ai == ai and bi == bi) or (ar == br and ai >= bi)


@numba.njit(inline="always")
def _cle(a, b):
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    return (ar < br and ai == ai and bi == bi) or (ar == br and ai <= bi)


@numba.njit(inline="always")
def _cgt(a, b):
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    return (ar > br and ai == ai and bi == bi) or (ar == br and ai > bi)


@numba.njit(inline="always")
def _clt(a, b):
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    return (ar < br and ai == ai and bi == bi) or (ar == br and ai < bi)


@numba.njit(inline="always")
def _cisnan(z):
    return z.real != z.real or z.imag != z.imag


@numba.njit(inline="always")
def _cmaximum(a, b):
    return a if (_cisnan(a) or _cge(a, b)) else b


@numba.njit(inline="always")
def _cminimum(a, b):
    return a if (_cisnan(a) or _cle(a, b)) else b


@numba.njit(inline="always")
def _cfmax(a, b):
    return a if (_cisnan(b) or _cge(a, b)) else b


@numba.njit(inline="always")
def _cfmin(a, b):
    return a if (_cisnan(b) or _cle(a, b)) else b


@numba.njit(inline="always")
def _cmul(a, b):
    # NumPy's SIMD complex multiply: fused multiply-adds
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    return complex(_fma(ar, br, -(ai * bi)), _fma(ar, bi, ai * br))
