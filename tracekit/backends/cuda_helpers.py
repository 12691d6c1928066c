"""The device source of the scalar helpers the CUDA kernels call (``_cdiv``, ``_ipow``, ...):
those written once for both targets (:mod:`tracekit.backends.helpers`) under
``cuda.jit(device=True)``, and the device's own. Every generated module starts with them."""

from __future__ import annotations

import inspect

from . import helpers


def _shared_helpers() -> str:
    """The device source of the helpers both targets share (``backends/helpers.py``)."""
    return "".join(
        "\n@cuda.jit(device=True)\n" + inspect.getsource(fn) + "\n" for fn in helpers.SHARED
    )


_FLOAT_HELPERS = """
@cuda.jit(device=True)
def _ffloordiv{b}(a, b):
    mod = libdevice.fmod{f}(a, b)
    if b == 0:
        return a / b
    div = (a - mod) / b
    if mod != 0:
        if (b < 0) != (mod < 0):
            div -= 1
    if div != 0:
        fl = libdevice.floor{f}(div)
        if div - fl > 0.5:
            fl += 1
        return fl
    return libdevice.copysign{f}(np.float{b}(0), a / b)


@cuda.jit(device=True)
def _fremainder{b}(a, b):
    mod = libdevice.fmod{f}(a, b)
    if b == 0:
        return mod
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod += b
        return mod
    return libdevice.copysign{f}(np.float{b}(0), b)


@cuda.jit(device=True)
def _logaddexp{b}(x, y):
    if x == y:
        return x + np.float{b}(0.6931471805599453)
    d = x - y
    if d > 0:
        return x + libdevice.log1p{f}(libdevice.exp{f}(-d))
    if d <= 0:
        return y + libdevice.log1p{f}(libdevice.exp{f}(d))
    return d
"""

HELPERS = (
    _shared_helpers()
    + """
@cuda.jit(device=True)
def _ifloordiv(a, b):
    if b == 0:
        return a - a
    if b == -1:
        return -a
    return a // b


@cuda.jit(device=True)
def _rshift(a, b):
    if 0 <= b < 64:
        return a >> b
    return a - a - 1 if a < 0 else a - a


@cuda.jit(device=True)
def _ipow(a, b):
    if b < 0:
        return a - a + (1 if a == 1 else (0 if a != -1 else (1 if b % 2 == 0 else -1)))
    r = a - a + 1
    while b:
        if b & 1:
            r = r * a
        a = a * a
        b >>= 1
    return r


# int64 arithmetic that wraps as NumPy's does (numba's signed ops carry LLVM's nsw flag): the
# CPU templates call these for int64
@cuda.jit(device=True)
def _fsign(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return x if x != x else 0.0  # NumPy: sign(-0.0) is 0.0


@cuda.jit(device=True)
def _cgt(a, b):
    if a.real == b.real:
        return a.imag > b.imag
    return a.real > b.real and a.imag == a.imag and b.imag == b.imag


@cuda.jit(device=True)
def _cge(a, b):
    if a.real == b.real:
        return a.imag >= b.imag
    return a.real > b.real and a.imag == a.imag and b.imag == b.imag


@cuda.jit(device=True)
def _clt(a, b):
    return _cgt(b, a)


@cuda.jit(device=True)
def _cle(a, b):
    return _cge(b, a)


@cuda.jit(device=True)
def _cmaximum(a, b):
    return a if (a.real != a.real or a.imag != a.imag or _cge(a, b)) else b


@cuda.jit(device=True)
def _cminimum(a, b):
    return a if (a.real != a.real or a.imag != a.imag or _cle(a, b)) else b


@cuda.jit(device=True)
def _cfmax(a, b):
    return a if (b.real != b.real or b.imag != b.imag or _cge(a, b)) else b


@cuda.jit(device=True)
def _cfmin(a, b):
    return a if (b.real != b.real or b.imag != b.imag or _cle(a, b)) else b


@cuda.jit(device=True)
def _cdiv(a, b):
    # NumPy's complex division (Smith's method), so infinities and NaNs come out as NumPy's
    br, bi = b.real, b.imag
    if abs(br) >= abs(bi):
        if br == 0 and bi == 0:
            return complex(a.real / abs(br), a.imag / abs(br))
        rat = bi / br
        scl = 1.0 / (br + bi * rat)
        return complex((a.real + a.imag * rat) * scl, (a.imag - a.real * rat) * scl)
    rat = br / bi
    scl = 1.0 / (bi + br * rat)
    return complex((a.real * rat + a.imag) * scl, (a.imag * rat - a.real) * scl)


@cuda.jit(device=True)
def _creciprocal(z):
    zr, zi = z.real, z.imag
    if abs(zi) <= abs(zr):
        r = zi / zr
        d = zr + zi * r
        return complex(1.0 / d, -r / d)
    r = zr / zi
    d = zr * r + zi
    return complex(r / d, -1.0 / d)


@cuda.jit(device=True)
def _csign(z):
    r = abs(z)
    if r == 0:
        return complex(0.0, 0.0)
    if r == np.inf:
        if abs(z.real) == np.inf:
            if abs(z.imag) == np.inf:
                return complex(np.nan, np.nan)
            return complex(1.0 if z.real > 0 else -1.0, 0.0)
        return complex(0.0, 1.0 if z.imag > 0 else -1.0)
    if r != r:
        return complex(np.nan, np.nan)
    return z / r


"""
    + _FLOAT_HELPERS.format(b="32", f="f")
    + _FLOAT_HELPERS.format(b="64", f="")
)
