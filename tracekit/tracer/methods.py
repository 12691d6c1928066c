"""NumPy's ndarray API on traced arrays: ``__array_ufunc__``, indexing, ``.T``, ``.real``,
``.reshape()``, ``.sum()``, ... Each method calls the module that records it; they are set on
:class:`~.array.TracedArray` here because those modules create and inspect traced arrays, so
:mod:`.array` is below them all."""

from __future__ import annotations

import types

import numpy as np

from .array import TracedArray
from .indexing import getitem, setitem, store
from .movement import (
    alias,
    astype,
    copy,
    imag,
    python_int,
    ravel,
    real,
    reshape,
    squeeze,
    swapaxes,
    transpose,
)
from .reductions import argreduce, reduce, scan
from .ufuncs import array_ufunc


def _set_imag(x, value):
    if x.dtype.kind != "c":
        raise TypeError("array does not have imaginary part to set")
    store(imag(x), value)


class _NdarrayMethods:
    """The methods, as a class body; each is set on TracedArray below."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return array_ufunc(ufunc, method, inputs, kwargs)

    # -- indexing
    def __getitem__(self, key):
        return getitem(self, key)

    def __setitem__(self, key, value):
        setitem(self, key, value)

    # -- methods (NumPy's ndarray API)
    T = property(lambda self: transpose(self))
    mT = property(lambda self: swapaxes(self, -1, -2))
    # a.real = v / a.imag = v cast as NumPy's setters do (unsafe: a complex v gives its real part)
    real = property(lambda self: real(self), lambda self, v: store(real(self), v))
    imag = property(lambda self: imag(self), lambda self, v: _set_imag(self, v))

    def astype(self, dtype, copy=True, **kw):
        return astype(self, dtype, copy)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return reshape(self, shape, order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], tuple | list)):
            axes = axes[0]
        return transpose(self, axes or None)

    def swapaxes(self, a, b):
        return swapaxes(self, a, b)

    def ravel(self, order="C"):
        return ravel(self, order)

    def flatten(self, order="C"):
        return copy(ravel(self, order))

    def squeeze(self, axis=None):
        return squeeze(self, axis)

    def copy(self, order="C"):
        return copy(self)

    def conj(self):
        if type(self._value) is bool:  # True.conjugate() is the int 1
            return python_int(self)
        return np.conjugate(self) if self.dtype.kind == "c" else alias(self)

    conjugate = conj

    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return reduce("sum", self, axis, keepdims, dtype, out=out, **kw)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return reduce("prod", self, axis, keepdims, dtype, out=out, **kw)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **kw):
        return reduce("mean", self, axis, keepdims, dtype, out=out, **kw)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return reduce("var", self, axis, keepdims, dtype, ddof=ddof, out=out, **kw)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kw):
        return reduce("std", self, axis, keepdims, dtype, ddof=ddof, out=out, **kw)

    def max(self, axis=None, out=None, keepdims=False, **kw):
        return reduce("max", self, axis, keepdims, None, out=out, **kw)

    def min(self, axis=None, out=None, keepdims=False, **kw):
        return reduce("min", self, axis, keepdims, None, out=out, **kw)

    def any(self, axis=None, out=None, keepdims=False, **kw):
        return reduce("any", self, axis, keepdims, None, out=out, **kw)

    def all(self, axis=None, out=None, keepdims=False, **kw):
        return reduce("all", self, axis, keepdims, None, out=out, **kw)

    def argmax(self, axis=None, out=None, keepdims=False):
        return argreduce("argmax", self, axis, keepdims, out)

    def argmin(self, axis=None, out=None, keepdims=False):
        return argreduce("argmin", self, axis, keepdims, out)

    def cumsum(self, axis=None, dtype=None, out=None):
        return scan("cumsum", self, axis, dtype, out)

    def cumprod(self, axis=None, dtype=None, out=None):
        return scan("cumprod", self, axis, dtype, out)

    def clip(self, min=None, max=None, out=None, **kw):
        return np.clip(self, min, max, out=out, **kw)

    def dot(self, other, out=None):
        return np.dot(self, other, out=out)

    def round(self, decimals=0, out=None):
        return np.round(self, decimals, out=out)

    def __round__(self, ndigits=None):  # NumPy scalars have it (an int, baked); arrays do not
        if isinstance(self._value, np.ndarray):
            raise TypeError("type numpy.ndarray doesn't define __round__ method")
        if ndigits is None:
            return int(np.round(self))
        return np.round(self, ndigits)

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis)

    def fill(self, value):
        self[...] = value

    def nonzero(self):
        return np.nonzero(self)

    def sort(self, axis=-1, kind=None, order=None, *, stable=None):
        store(self, np.sort(self, axis, kind, order, stable=stable))

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None):
        return np.argsort(self, axis, kind, order, stable=stable)

    def searchsorted(self, v, side="left", sorter=None):
        return np.searchsorted(self, v, side, sorter)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return np.diagonal(self, offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None, out=None):
        return np.trace(self, offset, axis1, axis2, dtype, out)


for _name, _attr in vars(_NdarrayMethods).items():
    if isinstance(_attr, types.FunctionType | property):
        setattr(TracedArray, _name, _attr)
