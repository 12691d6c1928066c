"""Python's operators on traced arrays, set on :class:`~.array.TracedArray`.

Each operator is the NumPy ufunc that ``ndarray`` calls for it (``a + b`` is ``np.add(a, b)``;
NumPy defines this in C), recorded through ``__array_ufunc__``'s path, so the op table decides
which op it is. This module is the one place that knows which ufunc a Python operator is, and
the two things NumPy's operators do that its ufuncs do not: ``a ** 2`` (``-1``, ``0.5``) is a
square (a reciprocal, a square root), and ``a == None`` compares elementwise.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from ..errors import TraceError
from .array import TracedArray, value_type
from .source import user_source
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
            scalar = value_type(self) is not np.ndarray
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
    if value_type(x) is not np.ndarray:
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
    if isinstance(x, TracedArray):
        return None if value_type(x) is np.ndarray else _python_value(x._value)
    return x if type(x) in (bool, int, float, complex) else None


def _on_python_scalars(uf, py_op, *operands):
    """``py_op`` (``ufunc``'s Python operator) of Python scalars, of the type Python gives:
    ``True + True`` is the int 2 (NumPy's bool loop: True), ``True ** True`` the int 1 (NumPy's:
    int8), ``2 ** -1`` the float 0.5. The operands are cast to that type's dtype first; the
    result is weak, as a Python scalar is. Python computes this trace's value first, so its
    errors (``1 // 0``) are the function's own; where Python decides by the values (a zero
    divisor, a power's type, an int's size), guards keep later calls to the trace's way."""
    values = [_python_value(x) for x in operands]
    result = py_op(*values)
    if type(result) is int and not -(2**63) <= result < 2**63:
        raise _too_big(result)
    cast = operands
    if type(result) is not bool:
        dtype = _PYTHON_DTYPE[type(result)]
        cast = [_as_python_type(x, dtype) for x in operands]
    size = _int_size(py_op, operands) if type(result) is int else None
    # the guards before the node: a run checks them before it computes on the traced way
    _guard_pythons_rules(uf, py_op, operands, values, size is None and type(result) is int)
    res = call_ufunc(uf, tuple(cast), {}, weak=True)
    if size is not None and size < 2**62:
        res._ctx.int_sizes[res.ir_var] = size
    return res


def _size(x) -> int | None:
    """The largest ``abs`` that the int or bool ``x`` can have on any call, or None."""
    if not isinstance(x, TracedArray):
        return abs(x)
    return 1 if type(x._value) is bool else x._ctx.int_sizes.get(x.ir_var)


def _bits(a, b):
    return (1 << max(a, b).bit_length() + 1) - 1


# the largest |result| of Python's int operators, from the largest |operand|s (shifts and
# powers of more than 64 bits are unknown: a guard checks them)
_SIZE_OF = {
    operator.add: operator.add,
    operator.sub: operator.add,
    operator.mul: operator.mul,
    operator.pow: lambda a, b: a**b if a <= 1 or b < 64 else None,
    operator.lshift: lambda a, b: a << b if b < 64 else None,
    operator.rshift: lambda a, b: a,
    operator.floordiv: lambda a, b: a,
    operator.mod: lambda a, b: b,
    operator.and_: _bits,
    operator.or_: _bits,
    operator.xor: _bits,
    operator.neg: abs,
    operator.pos: abs,
    operator.abs: abs,
    operator.invert: lambda a: a + 1,
}


def _int_size(py_op, operands) -> int | None:
    sizes = [_size(x) for x in operands]
    return None if None in sizes else _SIZE_OF[py_op](*sizes)


_DIVISIONS = (operator.truediv, operator.floordiv, operator.mod)
_SHIFTS = (operator.lshift, operator.rshift)
_GROWING = (operator.add, operator.sub, operator.mul, operator.pow, operator.lshift)


def _guard_pythons_rules(uf, py_op, operands, values, unbounded_int):
    """Guards on what Python decides by the values of ``py_op``'s operands, where one of them
    is traced: a zero divisor raises, an int to a negative power is a float, a negative float
    to a fractional power complex, an int (``unbounded_int``: whose size is not known) grows
    past int64 (``ir.PYTHON_RULES``)."""
    ctx = next(x._ctx for x in operands if isinstance(x, TracedArray))
    if py_op in _DIVISIONS:
        ctx.guard_rule(operands[1] != 0, "nonzero")
    elif py_op is operator.pow:
        ctx.guard_rule(_zero_to_negative(*operands, values[1]), "nonzero")
        ctx.guard_rule(_changes_type(*operands, values), "pow_type")
    elif py_op in _SHIFTS:
        ctx.guard_rule(operands[1] >= 0, "shift")
    if unbounded_int and py_op in _GROWING:
        ctx.guard_rule(_fits_int64(uf, operands), "int64")


def _both(a, b):
    """``a & b`` of bools that are literals or traced, without a node where a literal decides."""
    if a is False or b is False:
        return False
    return b if a is True else a if b is True else a & b


def _zero_to_negative(base, exponent, exponent_value):
    """Whether ``base ** exponent`` raises ZeroDivisionError in Python."""
    if type(exponent_value) is complex:
        return _both(base == 0, (exponent.real < 0) | (exponent.imag != 0))
    return _both(base == 0, exponent < 0)


def _changes_type(base, exponent, values):
    """Whether ``base ** exponent`` is a float (of ints) or complex (of floats) in Python."""
    kinds = {type(v) for v in values}
    if complex in kinds:
        return False
    if kinds <= {bool, int}:
        return exponent < 0
    negative = _both(base < 0, base > -math.inf)  # (-inf) ** 0.5 is inf
    return _both(negative, exponent % 1.0 > 0)  # (nan and inf % 1.0 are nan)


def _fits_int64(uf, operands):
    """Whether ``uf`` of the int ``operands``, computed in float64, is within int64."""
    floats = [_as_python_type(x, _PYTHON_DTYPE[float]) for x in operands]
    if uf is np.left_shift:
        uf, floats = np.multiply, [floats[0], _power_of_two(floats[1])]
    value = call_ufunc(uf, tuple(floats), {}, weak=True)
    size = call_ufunc(np.absolute, (value,), {}, weak=True)
    fits = call_ufunc(np.less, (size, 2.0**63), {}, weak=True)
    if not fits._value:
        raise _too_big(None)
    return fits


def _power_of_two(n):
    return 2.0**n if not isinstance(n, TracedArray) else call_ufunc(np.power, (2.0, n), {})


def _too_big(result):
    src = user_source(3)
    where = f"{src} `{src.text}`" if src else "an unknown line"
    what = f"the Python int {result}" if result is not None else "a Python int this near its limits"
    return TraceError(
        f"{where}: {what} does not fit int64, the integers a graph computes with; compute it "
        "outside the traced function, or as a float"
    )


def _as_python_type(x, dtype):
    """A Python scalar operand as ``dtype``'s Python type (``True`` as the int 1), where that
    is wider than its own (``abs`` of a complex is a float: its operand stays complex)."""
    if not isinstance(x, TracedArray):
        return dtype.type(x).item() if np.can_cast(type(x), dtype) else x
    if x.dtype == dtype or not np.can_cast(x.dtype, dtype):
        return x
    return x._ctx.emit("astype", [x], {"dtype": dtype}, weak=True)


def _weak_operand(x) -> bool:
    if isinstance(x, TracedArray):
        return x.weak
    return isinstance(x, float | complex | int) and not isinstance(x, bool | np.generic)


def _inplace(uf, py_op, fast_power=False):
    def op(self, other):
        if value_type(self) is not np.ndarray:  # scalars rebind, as in Python
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
