"""numba functions called on traced arrays, without ``tk.python_op``.

- A ``@numba.vectorize`` ufunc (numba's ``DUFunc``) becomes an elementwise python op: the
  interpreter calls the ufunc, compiled kernels call it per element inside the fused loop.
- An ``@numba.njit`` function that numba can compile for the arrays it is called with is an
  array-level python op: it runs as numba runs it, between the compiled kernels.
- An ``@numba.njit`` function that numba compiles only for scalars (a scalar function called on
  arrays: ``math.exp(x)``, ``if x > 0``) is applied elementwise, as ``@numba.vectorize`` would,
  and fused like one.
- Anything else is a ``TraceError`` naming the function and the user's line, with numba's
  reason.

Numba's dispatcher learns this when a trace starts (:func:`install`, only if numba is already
imported: code that has numba functions has imported it). An ``@njit`` function that numba can
compile both ways runs as numba runs it on the arrays: it is not fused, since its meaning on
arrays may differ from its meaning per element (``x - x.mean()``); make it ``@numba.vectorize``
to fuse it.

>>> import numba, numpy as np, tracekit as tk
>>> @numba.vectorize
... def relu(x):
...     return x if x > 0 else 0.0
>>> t = tk.trace(lambda x: relu(x - 1.0) * 2, np.arange(3.0))
>>> [n.attrs.get("name", n.op) for n in t.graph.nodes], t(np.arange(3.0))
(['subtract', 'relu', 'multiply'], array([0., 0., 2.]))
"""

from __future__ import annotations

import sys
import threading
import weakref

import numpy as np

from . import tracer as T
from .errors import TraceError
from .pyop import PyOp
from .tracer.ufuncs import FOREIGN_UFUNCS

_LOCK = threading.Lock()
_OPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # numba function -> its PyOp
_VECTORIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # njit -> DUFunc
_SCALAR: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # DUFunc -> njit of its function
_installed = False


def is_numba_ufunc(f) -> bool:
    """Whether ``f`` is a ufunc made by ``@numba.vectorize`` (a DUFunc)."""
    dufunc = sys.modules.get("numba.np.ufunc.dufunc")
    return dufunc is not None and isinstance(f, dufunc.DUFunc)


def kernel_function(fn, dtypes):
    """What a fused CPU kernel calls per element for the numba python op ``fn`` on inputs of
    ``dtypes``: ``fn`` itself (an ``@njit`` function), or for a ``@numba.vectorize`` ufunc its
    scalar function as an ``@njit`` function, where the ufunc's loop for these inputs takes
    them as they are; None where it casts them (the ufunc then runs outside the kernels).

    A ufunc called inside numba code drops what its function raises and hands on a wrong
    value; an ``@njit`` function's exception reaches the caller, as NumPy's call of the ufunc
    raises it.
    """
    if not is_numba_ufunc(fn):
        return fn
    own = "".join(np.dtype(d).char for d in dtypes) + "->"
    if not any(t.startswith(own) for t in fn.types):
        return None
    with _LOCK:
        made = _SCALAR.get(fn)
        if made is None:
            import numba

            made = _SCALAR[fn] = numba.njit(fn._dispatcher.py_func)
        return made


def ufunc_op(ufunc) -> PyOp:
    """The elementwise python op of a ``@numba.vectorize`` ufunc (one per ufunc)."""
    with _LOCK:
        op = _OPS.get(ufunc)
        if op is None:
            op = _OPS[ufunc] = PyOp(ufunc, name=ufunc.__name__)
        return op


def call_ufunc(ufunc, inputs, kwargs):
    """``ufunc(*inputs)`` on traced arrays (the tracer's ``__array_ufunc__`` hands it here)."""
    if kwargs or ufunc.nout != 1:
        bad = ", ".join(kwargs) if kwargs else f"{ufunc.nout} outputs"
        src = T.user_source(2)
        raise TraceError(
            f"the numba ufunc {ufunc.__name__!r}"
            + (f" at {src} `{src.text}`" if src else "")
            + f" is traced for plain calls with one output, not with {bad}"
        )
    return ufunc_op(ufunc)(*inputs)


FOREIGN_UFUNCS.append((is_numba_ufunc, call_ufunc))


def install():
    """Let numba's dispatcher hand calls on traced arrays to :func:`call_njit` (once)."""
    global _installed
    dispatcher = sys.modules.get("numba.core.dispatcher")
    if _installed or dispatcher is None:
        return
    with _LOCK:
        if _installed:
            return
        cls = dispatcher.Dispatcher
        original = cls._compile_for_args

        def _compile_for_args(self, *args, **kws):
            if any(isinstance(a, T.TracedArray) for a in T.iter_deep((args, list(kws.values())))):
                result = call_njit(self, args, kws)
                return lambda *_, **__: result  # what numba calls with the arguments next
            return original(self, *args, **kws)

        _compile_for_args.__wrapped__ = original
        cls._compile_for_args = _compile_for_args
        _installed = True


def call_njit(dispatcher, args, kws):
    """An ``@numba.njit`` function called on traced arrays: an array-level python op, or
    elementwise (see the module's docstring)."""
    import numba

    from .tracer.active import numpy_as_is

    name = getattr(dispatcher.py_func, "__name__", "njit function")
    src = T.user_source(3)
    where = f" at {src} `{src.text}`" if src else ""
    if kws:
        raise TraceError(
            f"numba function {name!r}{where} is called with keyword arguments on traced "
            "arrays; pass them positionally"
        )
    values = [a._value if isinstance(a, T.TracedArray) else a for a in args]
    with numpy_as_is():  # numba compiles now: NumPy's own functions, not the tracer's
        as_called = _compiles(dispatcher, [numba.typeof(v) for v in values])
        if as_called is True:
            return _op_of(dispatcher, lambda: PyOp(dispatcher, name=name))(*args)
        scalars = [
            numba.from_dtype(v.dtype) if hasattr(v, "dtype") else numba.typeof(v) for v in values
        ]
        per_element = _compiles(dispatcher, scalars)
    if per_element is True:
        vectorized = _vectorized(dispatcher)
        return _op_of(vectorized, lambda: PyOp(vectorized, name=name))(*args)
    raise TraceError(
        f"numba function {name!r}{where} compiles neither for the arrays it is called with "
        f"({as_called}) nor for their elements ({per_element}); wrap the call in "
        "tk.python_op(...) with a function that takes these arrays"
    )


def _compiles(dispatcher, types):
    """True if numba compiles ``dispatcher`` for argument ``types`` to a result of numbers or
    arrays, else the first line of numba's reason."""
    import numba

    try:
        dispatcher.compile(tuple(types))
        result = dispatcher.overloads[tuple(types)].signature.return_type
    except Exception as e:  # numba's TypingError and its kin
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        said = [line for line in lines if not line.startswith(("Failed in", "During:", "File "))]
        return said[0] if said else type(e).__name__
    ok = (numba.types.Number, numba.types.Boolean, numba.types.Array, numba.types.BaseTuple)
    return True if isinstance(result, ok) else f"it returns {result}"


def _vectorized(dispatcher):
    """``@numba.vectorize`` of the scalar function ``dispatcher`` compiles."""
    import numba

    with _LOCK:
        made = _VECTORIZED.get(dispatcher)
        if made is None:
            made = _VECTORIZED[dispatcher] = numba.vectorize(dispatcher.py_func)
        return made


def _op_of(fn, make) -> PyOp:
    with _LOCK:
        op = _OPS.get(fn)
        if op is None:
            op = _OPS[fn] = make()
        return op
