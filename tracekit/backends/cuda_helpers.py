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
def _ipow(a, b):
    if b < 0:  # NumPy raises; a kernel cannot: 1 ** b, (-1) ** b, else 0
        return a - a + (1 if a == 1 else (0 if a != -1 else (1 if b % 2 == 0 else -1)))
    r = a - a + 1
    while b:
        if b & 1:
            r = r * a
        a = a * a
        b >>= 1
    return r


@cuda.jit(device=True)
def _fsign(x):
    if x > 0:
        return 1.0
    if x < 0:
        return -1.0
    return x if x != x else 0.0  # NumPy: sign(-0.0) is 0.0

"""
    + _FLOAT_HELPERS.format(b="32", f="f")
    + _FLOAT_HELPERS.format(b="64", f="")
)
