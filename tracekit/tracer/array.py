"""The traced array: a real NumPy value and the graph Var holding it.

A :class:`TracedArray` lives in a :class:`Buffer` whose ``var`` is its current contents; a
view is a buffer plus the chain of :class:`ViewStep` s that derive it. Reading a view replays
the chain on the buffer's current Var; a write through a view is written back through each
step (the op's ``unview``), giving the buffer a new Var, so every alias sees it.

This module holds what the array is: its Var, its static attributes, NumPy's
``__array_function__`` table, and the Python conversions that read its value (each baked in as
a guard). The operations that create and inspect traced arrays live in the modules above this
one, and NumPy's ndarray methods and Python's operators are set on the class by
:mod:`.methods` and :mod:`.operators`, which import them.
"""

from __future__ import annotations

import types
from typing import NamedTuple

import numpy as np

from .. import ops as _ops
from ..errors import TraceError, UnsupportedOperation
from ..ir import Var
from ..ops import OPS
from .source import unsupported, user_source


# ---------------------------------------------------------------------- buffers and views
class Buffer:
    """Storage of one array during tracing; ``var`` is the Var of its current contents."""

    __slots__ = ("var", "version", "origin", "readonly")

    def __init__(self, var: Var, origin=None, readonly=False):
        self.var, self.version, self.origin, self.readonly = var, 0, origin, readonly


class ViewStep(NamedTuple):  # not a frozen dataclass: quicker to make, one per view taken
    """One view op on the way from a buffer to a view (``op`` None: an alias, e.g. ``.real``)."""

    op: str | None
    attrs: dict
    value: object  # the NumPy view at this level (for its shape and dtype)
    where: tuple | None = None  # (source, scope) where the view was taken


def _unview(ctx, step, base: Var, new: Var) -> Var:
    """The Var ``base`` becomes when its view through ``step`` is written with ``new``."""
    if step.op is None:
        return new
    like = stand_in(base)
    back = OPS[step.op].unview
    if back is not None:
        op, inputs, attrs = back(base, new, step.attrs)
        return ctx.emit_var(op, inputs, attrs, like)
    src = step.where[0] if step.where else None
    where = f" taken at {src} `{src.text}`" if src else ""
    raise TraceError(
        f"cannot write through the {step.op} view{where}: tracekit cannot represent writes "
        "through it; write into a copy (.copy()) instead"
    )


def stand_in(var: Var, dtype=None):
    """A zero-cost NumPy stand-in with ``var``'s shape and dtype."""
    return np.broadcast_to(np.zeros((), dtype or var.dtype), var.shape)


# ---------------------------------------------------------------------- values
class Deferred:
    """An op's value not computed yet (see ``TraceContext.deferring``): its op, its inputs
    (TracedArrays and literals) and its type. Reading the array's ``_value`` computes it, and
    first whatever deferred values it reads."""

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype")

    def __init__(self, op, inputs, attrs, shape, dtype):
        self.op, self.inputs, self.attrs, self.shape, self.dtype = op, inputs, attrs, shape, dtype


def force(t):
    """Compute the deferred value of TracedArray ``t`` and of the deferred values it reads,
    inputs first (a loop, not recursion: a gradient's chain may be thousands of ops long).
    Each is an array of its own, as its node says: a view NumPy gives is copied."""
    todo = [(t, False)]
    while todo:
        x, inputs_ready = todo.pop()
        d = x._v
        if type(d) is not Deferred:
            continue
        if not inputs_ready:
            todo.append((x, True))
            todo.extend((i, False) for i in d.inputs if type(i) is TracedArray)
            continue
        vals = [i._v if type(i) is TracedArray else i for i in d.inputs]
        try:
            out = OPS[d.op].impl(*vals, **d.attrs)
        except Exception as e:
            e.add_note(f"tracekit: computing {d.op} of a gradient's trace")
            raise
        if any(isinstance(v, np.ndarray) and np.may_share_memory(out, v) for v in vals):
            out = np.array(out, copy=True)
        if np.shape(out) != d.shape or dtype_of(out) != d.dtype:
            raise TraceError(
                f"internal: {d.op} computed a {dtype_of(out)}{list(np.shape(out))} value where "
                f"its type rule said {d.dtype}{list(d.shape)}"
            )
        x._v = out


def value_type(x) -> type:
    """The type of TracedArray ``x``'s value: ``np.ndarray`` for a deferred one of one dimension
    or more without computing it (a 0-d one may be a NumPy scalar: computed)."""
    v = x._v
    if type(v) is Deferred and v.shape:
        return np.ndarray
    return type(x._value)


def dtype_of(v) -> np.dtype:
    if type(v) is np.ndarray:
        return v.dtype
    if isinstance(v, bool):
        return np.dtype(bool)
    if isinstance(v, int):
        return np.dtype(np.int64)
    if isinstance(v, float):
        return np.dtype(np.float64)
    if isinstance(v, complex):
        return np.dtype(np.complex128)
    if isinstance(v, np.ndarray | np.generic):
        return v.dtype
    dt = getattr(v, "dtype", None)  # a dask array: its dtype, without computing it
    return np.dtype(dt) if dt is not None and hasattr(v, "__dask_graph__") else np.asarray(v).dtype


def is_python_scalar(x) -> bool:
    """A Python float or complex (weak under NEP 50); NumPy scalars subclassing them are not."""
    t = type(x)
    if t is np.ndarray or t is float:  # the common cases first
        return t is float
    return isinstance(x, float | complex) and not isinstance(x, np.generic)


def iter_deep(x):
    for e in x:
        if isinstance(e, list | tuple):
            yield from iter_deep(e)
        else:
            yield e


# ---------------------------------------------------------------------- the traced array
ARRAY_FUNCTIONS: dict = {}


def implements(*np_functions):
    """Register a handler for NumPy functions reaching ``__array_function__``."""

    def deco(fn):
        for f in np_functions:
            ARRAY_FUNCTIONS[f] = fn
        return fn

    return deco


class TracedArray(_ops.Tracer):
    """A NumPy array being traced. Behaves like ``np.ndarray``; every operation is recorded."""

    __array_priority__ = 1000
    __slots__ = ("_ctx", "_buf", "_chain", "_v", "_levels", "_ver", "__weakref__")

    def __init__(self, ctx, buf, chain, value):
        self._ctx, self._buf, self._chain, self._v = ctx, buf, chain, value
        self._levels, self._ver = None, -1

    @property
    def _value(self):
        """The NumPy value (a :class:`Deferred` one computed now)."""
        if type(self._v) is Deferred:
            force(self)
        return self._v

    def bind(self, op, inputs, attrs):
        return self._ctx.emit(op, inputs, attrs)

    # -- the Var of the current contents
    @property
    def ir_var(self) -> Var:
        buf = self._buf
        if self._ver != buf.version or self._levels is None:
            levels = [buf.var]
            for st in self._chain:
                if st.op is None:
                    levels.append(levels[-1])
                else:
                    levels.append(
                        self._ctx.emit_var(st.op, [levels[-1]], st.attrs, st.value, st.where)
                    )
            self._levels, self._ver = levels, buf.version
        return self._levels[-1]

    @property
    def weak(self) -> bool:
        return type(self._v) is not Deferred and is_python_scalar(self._v)

    def _write(self, new: Var):
        """Replace this array's whole contents by ``new`` (same shape and dtype)."""
        if self._buf.readonly:
            raise ValueError("assignment destination is read-only")
        ctx, chain = self._ctx, self._chain
        ctx.check_lazy_write(self._buf)
        levels = (
            self._levels if self._ver == self._buf.version and self._levels else None
        ) or self._recompute_levels()
        for st, base in zip(reversed(chain), reversed(levels[:-1])):
            new = _unview(ctx, st, base, new)
        self._buf.var = new
        self._buf.version += 1

    def _recompute_levels(self):
        self._ver = -1
        _ = self.ir_var
        return self._levels

    # -- static attributes
    shape = property(lambda self: self._v.shape if type(self._v) is Deferred else np.shape(self._v))
    dtype = property(lambda self: self._v.dtype if type(self._v) is Deferred else dtype_of(self._v))
    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    def __repr__(self):
        return f"TracedArray({self.ir_var.type}, %{self.ir_var.name})"

    __str__ = __repr__

    # -- NumPy protocols (``__array_ufunc__`` is set by .methods)
    def __array_function__(self, func, types_, args, kwargs):
        handler = ARRAY_FUNCTIONS.get(func)
        if handler is None:
            raise unsupported(func)
        return handler(*args, **kwargs)

    def __array__(self, dtype=None, copy=None):
        src = user_source(2)
        raise TraceError(
            "a traced array was converted to a plain NumPy array at "
            f"{src} `{src.text if src else ''}`: the graph would lose track of it. "
            "Create arrays inside the traced code with "
            "np.zeros/np.empty_like (they are traced), or wrap non-NumPy code with tk.python_op."
        )

    # -- values read by Python: baked into the trace as guards
    def _concrete(self, how, convert):
        value = convert(self._value)
        return self._ctx.guard(self, value, how)

    def __bool__(self):
        return self._concrete("bool", lambda v: bool(v))

    def __float__(self):
        return self._concrete("float", lambda v: float(v))

    def __int__(self):
        return self._concrete("int", lambda v: int(v))

    def __complex__(self):
        return self._concrete("complex", lambda v: complex(v))

    def __index__(self):
        if self.dtype.kind not in "iub":
            raise TypeError("only integer arrays can be used as an index")
        return self._concrete("index", lambda v: int(v))

    def item(self, *args):
        if args:  # x.item(k), x.item(i, j): the guard is on that element, not on the array
            if len(args) == 1 and not isinstance(args[0], tuple):
                return self.reshape(-1)[args[0]].item()  # a flat index
            return self[args[0] if len(args) == 1 else args].item()
        return self._concrete("item", lambda v: np.asarray(v).item())

    def tolist(self):
        return self._concrete("tolist", lambda v: np.asarray(v).tolist())

    def __hash__(self):
        raise TypeError("unhashable type: 'TracedArray'")

    def __getattr__(self, name):  # only reached for names TracedArray does not define
        if not name.startswith("__") and hasattr(np.ndarray, name):
            f = types.SimpleNamespace(__name__=f"ndarray.{name}", __module__="numpy")
            err = unsupported(f)
            raise _UnsupportedAttribute(str(err))
        raise AttributeError(f"'TracedArray' object has no attribute {name!r}")


class _UnsupportedAttribute(UnsupportedOperation, AttributeError):
    """An ndarray attribute the tracer does not follow (an AttributeError for ``hasattr``)."""
