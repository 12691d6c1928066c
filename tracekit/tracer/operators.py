"""Python's operators on traced arrays, set on :class:`~.array.TracedArray`.

Each operator is the NumPy ufunc that ``ndarray`` calls for it (``a + b`` is ``np.add(a, b)``;
NumPy defines this in C), recorded through ``__array_ufunc__``'s path, so the op table decides
which op it is. This module is the one place that knows which ufunc a Python operator is, and
the two things NumPy's operators do that its ufuncs do not: ``a ** 2`` (``-1``, ``0.5``) is a
square (a reciprocal, a square root), and ``a == None`` compares elementwise.
"""

from __future__ import annotations

import operator

import numpy as np

from .array import TracedArray, is_python_scalar
from .ufuncs import call_ufunc

_OPERAND = list | tuple | np.ndarray | TracedArray | int | float | complex | bool | np.generic
_PYTHON_DTYPE = {int: np.dtype(np.int64), float: np.dtype(np.float64)}
_PYTHON_DTYPE[complex] = np.dtype(np.complex128)


def _binary(uf, py_op, reflected=False, fast_power=False, with_none=None):
    """``self <op> other`` (``py_op``: Python's operator, for two Python scalars);
    ``with_none``: the elementwise result of comparing with None."""

    def op(self, other):
        if other is None and with_none is not None:  # NumPy compares elementwise
            fill = np.bool_(with_none)
            attrs = {"shape": self.shape, "fill_value": fill, "dtype": np.dtype(bool)}
            return self._ctx.emit("full", [], attrs)
        if isinstance(other, _OPERAND):
            a, b = (other, self) if reflected else (self, other)
            scalar = type(self._value) is not np.ndarray
            if scalar and _python_value(self) is not None and _python_value(other) is not None:
                return _on_python_scalars(uf, py_op, a, b)
            fast = _fast_power(self, other) if fast_power and not reflected else None
            if fast is not None:
                return call_ufunc(fast, (self,), {})
            weak = scalar and _weak_operand(self) and _weak_operand(other)
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


def _python_value(x):
    """The Python scalar ``x`` is (a literal) or stands for (a traced value computed from a
    Python float argument, a Python value); None for anything else."""
    v = x._value if isinstance(x, TracedArray) else x
    return v if type(v) in (bool, int, float, complex) else None


def _on_python_scalars(uf, py_op, *operands):
    """``py_op`` (``ufunc``'s Python operator) of Python scalars, of the type Python gives:
    ``True + True`` is the int 2 (NumPy's bool loop: True), ``True ** True`` the int 1 (NumPy's:
    int8), ``2 ** -1`` the float 0.5. The operands are cast to that type's dtype first; the
    result is weak, as a Python scalar is. Python computes this trace's value first, so its
    errors (``1 // 0``) are the function's own. (Where Python's type depends on the values,
    the trace's values decide it: ``k ** n`` and ``x ** y`` keep the type they had.)"""
    result = py_op(*(_python_value(x) for x in operands))
    if type(result) is not bool:
        dtype = _PYTHON_DTYPE[type(result)]
        operands = [_as_python_type(x, dtype) for x in operands]
    return call_ufunc(uf, tuple(operands), {}, weak=True)


def _as_python_type(x, dtype):
    """A Python scalar operand as ``dtype``'s Python type (``True`` as the int 1), where that
    is wider than its own (``abs`` of a complex is a float: its operand stays complex)."""
    if not isinstance(x, TracedArray):
        return dtype.type(x).item() if np.can_cast(type(x), dtype) else x
    if x.dtype == dtype or not np.can_cast(x.dtype, dtype):
        return x
    return x._ctx.emit("astype", [x], {"dtype": dtype}, weak=True)


def _weak_operand(x) -> bool:
    if type(x) is TracedArray:
        return is_python_scalar(x._value)
    if isinstance(x, TracedArray):
        return x.weak
    return isinstance(x, float | complex | int) and not isinstance(x, bool | np.generic)


def _inplace(uf, py_op, fast_power=False):
    def op(self, other):
        if not isinstance(self._value, np.ndarray):  # scalars rebind, as in Python
            if _python_value(self) is not None and _python_value(other) is not None:
                return _on_python_scalars(uf, py_op, self, other)
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
    _pow, _py_op = _py == "pow", getattr(operator, f"{_py}_" if _py in ("and", "or") else _py)
    setattr(TracedArray, f"__{_py}__", _binary(_uf, _py_op, fast_power=_pow))
    setattr(TracedArray, f"__r{_py}__", _binary(_uf, _py_op, reflected=True))
    setattr(TracedArray, f"__i{_py}__", _inplace(_uf, _py_op, fast_power=_pow))

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
    _py_op = getattr(operator, _py)
    setattr(TracedArray, f"__{_py}__", _binary(_uf, _py_op, with_none=_with_none))


# -- unary operators
def _unary(uf, py_op):
    def op(self):
        if _python_value(self) is not None:  # -True is the int -1
            return _on_python_scalars(uf, py_op, self)
        return call_ufunc(uf, (self,), {}, weak=self.weak)

    return op


TracedArray.__neg__ = _unary(np.negative, operator.neg)
TracedArray.__pos__ = _unary(np.positive, operator.pos)
TracedArray.__abs__ = _unary(np.absolute, operator.abs)
TracedArray.__invert__ = _unary(np.invert, operator.invert)
TracedArray.__divmod__ = lambda self, o: (self // o, self % o)
TracedArray.__rdivmod__ = lambda self, o: (o // self, o % self)
