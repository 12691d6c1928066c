"""Python's operators on traced arrays, set on :class:`~.array.TracedArray`.

Each operator is the NumPy ufunc that ``ndarray`` calls for it (``a + b`` is ``np.add(a, b)``;
NumPy defines this in C), recorded through ``__array_ufunc__``'s path, so the op table decides
which op it is. This module is the one place that knows which ufunc a Python operator is, and
the two things NumPy's operators do that its ufuncs do not: ``a ** 2`` (``-1``, ``0.5``) is a
square (a reciprocal, a square root), and ``a == None`` compares elementwise.
"""

from __future__ import annotations

import numpy as np

from .array import TracedArray, is_python_scalar
from .ufuncs import call_ufunc

_OPERAND = list | tuple | np.ndarray | TracedArray | int | float | complex | bool | np.generic


def _binary(uf, reflected=False, fast_power=False, with_none=None):
    """``self <op> other``; ``with_none``: the elementwise result of comparing with None."""

    def op(self, other):
        if other is None and with_none is not None:  # NumPy compares elementwise
            fill = np.bool_(with_none)
            attrs = {"shape": self.shape, "fill_value": fill, "dtype": np.dtype(bool)}
            return self._ctx.emit("full", [], attrs)
        if isinstance(other, _OPERAND):
            a, b = (other, self) if reflected else (self, other)
            fast = _fast_power(self, other) if fast_power and not reflected else None
            if fast is not None:
                return call_ufunc(fast, (self,), {})
            weak = type(self._value) is not np.ndarray and _weak_operand(self)
            weak = weak and _weak_operand(other)
            return call_ufunc(uf, (a, b), {}, weak=weak)
        return NotImplemented

    return op


def _fast_power(x, exponent):
    """The ufunc NumPy's ``array ** scalar`` uses instead of ``power`` (its results differ)."""
    if not isinstance(x._value, np.ndarray):
        return None
    kind = x.dtype.kind
    if type(exponent) is int and exponent == 2:
        return np.square
    if type(exponent) is int and exponent == -1 and kind in "fc":
        return np.reciprocal
    if type(exponent) is float and exponent == 0.5 and kind in "fc":
        return np.sqrt
    return None


def _weak_operand(x) -> bool:
    if type(x) is TracedArray:
        return is_python_scalar(x._value)
    if isinstance(x, TracedArray):
        return x.weak
    return isinstance(x, float | complex | int) and not isinstance(x, bool | np.generic)


def _inplace(uf, fast_power=False):
    def op(self, other):
        if not isinstance(self._value, np.ndarray):  # scalars rebind, as in Python
            return call_ufunc(uf, (self, other), {}, weak=self.weak and _weak_operand(other))
        fast = _fast_power(self, other) if fast_power else None
        if fast is not None:
            call_ufunc(fast, (self,), {"out": (self,)})
        else:
            call_ufunc(uf, (self, other), {"out": (self,)})
        return self

    return op


# -- arithmetic and bitwise operators, with their reflected and in-place forms
_ARITHMETIC = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "truediv": np.divide,
    "floordiv": np.floor_divide,
    "mod": np.remainder,
    "pow": np.power,
    "matmul": np.matmul,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "lshift": np.left_shift,
    "rshift": np.right_shift,
}
for _py, _uf in _ARITHMETIC.items():
    _pow = _py == "pow"
    setattr(TracedArray, f"__{_py}__", _binary(_uf, fast_power=_pow))
    setattr(TracedArray, f"__r{_py}__", _binary(_uf, reflected=True))
    setattr(TracedArray, f"__i{_py}__", _inplace(_uf, fast_power=_pow))

# -- comparisons
_COMPARISONS = {
    "eq": (np.equal, False),
    "ne": (np.not_equal, True),
    "lt": (np.less, None),
    "le": (np.less_equal, None),
    "gt": (np.greater, None),
    "ge": (np.greater_equal, None),
}
for _py, (_uf, _with_none) in _COMPARISONS.items():
    setattr(TracedArray, f"__{_py}__", _binary(_uf, with_none=_with_none))

# -- unary operators
TracedArray.__neg__ = lambda self: call_ufunc(np.negative, (self,), {}, weak=self.weak)
TracedArray.__pos__ = lambda self: call_ufunc(np.positive, (self,), {}, weak=self.weak)
TracedArray.__abs__ = lambda self: call_ufunc(np.absolute, (self,), {}, weak=self.weak)
TracedArray.__invert__ = lambda self: call_ufunc(np.invert, (self,), {})
TracedArray.__divmod__ = lambda self, o: (self // o, self % o)
TracedArray.__rdivmod__ = lambda self, o: (o // self, o % self)
