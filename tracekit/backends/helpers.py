"""Scalar helpers both targets compile from one definition: the numba CPU target inlines them
(``cpu_helpers``: ``numba.njit(inline="always")``), the CUDA target pastes their source into its
device modules (``cuda_helpers.HELPERS``: ``cuda.jit(device=True)``). Plain Python: each target
adds its decorator, and none calls another helper (the CPU target compiles each alone, so
such a call would reach the undecorated function). Helpers whose best form differs per target
stay with their target.
"""

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
)
