"""Example-based tracing: run the user's function once on real arrays, record every op.

A :class:`TracedArray` wraps a real NumPy value and the graph :class:`~tracekit.ir.Var` holding
it. NumPy's own protocols (``__array_ufunc__``, ``__array_function__``) and Python's operators
route every operation here, where it is computed for real (so shapes, dtypes, errors and view
semantics are NumPy's own) and recorded as a node.

In-place writes and views are functionalised: every array lives in a :class:`Buffer` whose
``var`` is its current contents; a view is a buffer plus the chain of view ops that derive it.
Reading a view replays the chain on the buffer's current Var; writing through a view records
update nodes that produce the buffer's new Var, so every alias sees the write.
"""

from __future__ import annotations

import contextlib
import functools
import linecache
import operator
import os
import sys
import threading
import types
import warnings
from dataclasses import dataclass

import numpy as np
from numpy.lib.array_utils import byte_bounds

from . import ops as _ops
from .errors import TraceError, TracerWarning, UnsupportedOperation
from .ir import Guard, Node, Source, Var
from .ops import OPS

_state = threading.local()
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))
_SKIP_FILES = {os.path.abspath(contextlib.__file__), os.path.abspath(functools.__file__)}


def current():
    """The active trace context, or None outside tracing."""
    return getattr(_state, "ctx", None)


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return False
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return not (
        path.startswith(_PKG_DIR + os.sep) or path.startswith(_NUMPY_DIR) or path in _SKIP_FILES
    )


_user_file_cache: dict = {}


def is_user_frame(frame) -> bool:
    fn = frame.f_code.co_filename
    hit = _user_file_cache.get(fn)
    if hit is None:
        hit = _user_file_cache[fn] = _is_user_file(fn)
    return hit


def short_qualname(code) -> str:
    q = getattr(code, "co_qualname", code.co_name)
    return q.split(".<locals>.")[-1]


_sources: dict = {}


def source_of(frame) -> Source:
    code, line = frame.f_code, frame.f_lineno
    key = (code, line)  # one Source per line: unrolled loops record thousands of nodes there
    src = _sources.get(key)
    if src is None:
        fn = code.co_filename
        src = Source(fn, line, short_qualname(code), linecache.getline(fn, line).strip())
        if len(_sources) > 100_000:
            _sources.clear()
        _sources[key] = src
    return src


def user_source(depth: int = 1) -> Source | None:
    """The innermost frame outside tracekit and NumPy."""
    f = sys._getframe(depth)
    while f is not None and not is_user_frame(f):
        f = f.f_back
    return source_of(f) if f is not None else None


# ---------------------------------------------------------------------- buffers and views
class Buffer:
    """Storage of one array during tracing; ``var`` is the Var of its current contents."""

    __slots__ = ("var", "version", "origin", "readonly")

    def __init__(self, var: Var, origin=None, readonly=False):
        self.var, self.version, self.origin, self.readonly = var, 0, origin, readonly


@dataclass(frozen=True)
class ViewStep:
    """One view op on the way from a buffer to a view (``op`` None: an alias, e.g. ``.real``)."""

    op: str | None
    attrs: dict
    value: object  # the NumPy view at this level (for its shape and dtype)
    where: tuple | None = None  # (source, scope) where the view was taken


# ---------------------------------------------------------------------- the trace context
class Scope:
    """An explicit named scope entered in a user frame (``tk.scope``)."""

    __slots__ = ("name", "frame", "suppress", "label")

    def __init__(self, name, frame, suppress):
        self.name, self.frame, self.suppress, self.label = name, frame, suppress, name


class TraceContext:
    """Everything one trace accumulates."""

    def __init__(self, strict=False):
        self.strict = strict
        self.nodes: list[Node] = []
        self.inputs: list[Var] = []
        self.specs: list = []
        self.buffers: list[Buffer] = []  # one per input, same order
        self.capture_getters: list = []
        self.constants: dict = {}
        self.guards: list[Guard] = []
        self.layout_choices: list = []  # see note_layout_choice
        self.by_id: dict = {}  # id(plain ndarray) -> TracedArray
        self.keepalive: list = []
        self.capture_index: dict = {}  # id(array) -> (label, getter)
        self.scopes: list[Scope] = []
        self.counter = 0
        self.stop_code = None
        self._frame_names: dict = {}  # id(frame) -> (frame, name) for frames on the stack
        self._name_counts: dict = {}
        self._scope_counts: dict = {}

    # -- names
    def new_var(self, shape, dtype, weak=False, name=None) -> Var:
        if name is None:
            name, self.counter = str(self.counter), self.counter + 1
        return Var(name, shape, dtype, weak)

    # -- where are we in the user's code
    def where(self):
        """(source, scope) of the op being recorded now."""
        chain = []
        f = sys._getframe(2)
        while f is not None and f.f_code is not self.stop_code:
            if is_user_frame(f):
                chain.append(f)
            f = f.f_back
        chain.reverse()
        src = source_of(chain[-1]) if chain else None
        return src, self._scope_path(chain)

    def _scope_path(self, chain):
        names, seen = [], {}
        parent: tuple = ()
        by_frame: dict = {}
        for s in self.scopes:
            by_frame.setdefault(id(s.frame), []).append(s)
        suppress = None
        for s in by_frame.get(id(None), ()):  # entered outside the user's frames (a decorator
            names.append(s.label)  # on the traced function itself)
            suppress = s.suppress
        parent = tuple(names)
        for f in chain:
            entry = self._frame_names.get(id(f))
            if entry is None or entry[0] is not f:
                base = short_qualname(f.f_code)
                key = (parent, base)
                k = self._name_counts[key] = self._name_counts.get(key, 0) + 1
                entry = (f, base if k == 1 else f"{base}#{k}")
            seen[id(f)] = entry
            if f.f_code is not suppress:
                names.append(entry[1])
                parent = tuple(names)
            suppress = None
            for s in by_frame.get(id(f), ()):
                names.append(s.label)
                suppress = s.suppress
            parent = tuple(names)
        self._frame_names = seen
        return tuple(names)

    def push_scope(self, name, suppress=None):
        f = sys._getframe(2)
        while f is not None and not is_user_frame(f):
            f = None if f.f_code is self.stop_code else f.f_back
        s = Scope(name, f, suppress)
        chain_names = self.where()[1] if f is not None else ()
        key = (chain_names, name)
        k = self._scope_counts[key] = self._scope_counts.get(key, 0) + 1
        s.label = name if k == 1 else f"{name}#{k}"
        self.scopes.append(s)
        return s

    # -- recording
    def record(self, op, inputs, attrs, outputs, where=None):
        src, scope = where or self.where()
        node = Node(op, tuple(inputs), attrs, tuple(outputs), src, scope)
        self.nodes.append(node)
        return node

    def emit(self, op, inputs, attrs=None, *, n_out=1, weak=False, view=False):
        """Compute ``op`` on the real values and record it; returns TracedArray(s)."""
        attrs = dict(attrs or {})
        tins = [self.lift(x) for x in inputs]
        vals = [x._value if isinstance(x, TracedArray) else x for x in tins]
        try:
            out = OPS[op].impl(*vals, **attrs)
        except TraceError:
            raise
        except Exception as e:
            src = user_source(2)
            if src is not None:
                e.add_note(f"tracekit: in {op} at {src} `{src.text}`")
            raise
        if view:
            base = tins[0]
            if _shares(out, base._value):
                step = ViewStep(op, attrs, out, self.where())
                res = TracedArray(self, base._buf, base._chain + (step,), out)
                self.note_layout_choice(op, attrs, base, res)
                return res
        outs = [out] if n_out == 1 else list(out)
        vars_ = [self.new_var(np.shape(v), _dtype_of(v), weak) for v in outs]
        ins = [x.ir_var if isinstance(x, TracedArray) else x for x in tins]
        self.record(op, ins, attrs, vars_)
        res = [
            TracedArray(self, Buffer(v), (), (np.asarray(o).item() if weak else o))
            for v, o in zip(vars_, outs)
        ]
        if view:
            self.note_layout_choice(op, attrs, tins[0], res[0])
        return res[0] if n_out == 1 else res

    def note_layout_choice(self, op, attrs, base, res):
        """Remember a reshape of (a view of) an input that NumPy made a view or a copy of by
        the input's strides; ``layout_guards`` keeps those that a later write makes matter."""
        buf = base._buf
        if op != "reshape" or buf.origin is None or self.specs[buf.origin].kind == "const":
            return
        steps = tuple((st.op, st.attrs) for st in base._chain if st.op is not None)
        steps += ((op, attrs),)
        self.layout_choices.append(
            (buf, buf.version, res._buf, res._buf is buf, steps, user_source(3))
        )

    def layout_guards(self) -> list:
        """Guards on the reshapes whose view-or-copy choice decides what a write reaches: the
        input was written after the reshape, or the reshaped array was (a copy, when traced).
        An array of other strides in a later call could make NumPy choose the other way."""
        guards = []
        for buf, version, res_buf, is_view, steps, src in self.layout_choices:
            written = buf.version > version or (not is_view and res_buf.version > 0)
            if written:
                guards.append(Guard(self.inputs[buf.origin], (is_view, steps), "layout", src))
        return guards

    def emit_var(self, op, inputs, attrs, like, where=None) -> Var:
        """Record a node whose output has the shape and dtype of the NumPy value ``like``."""
        v = self.new_var(np.shape(like), _dtype_of(like))
        self.record(op, inputs, attrs, [v], where)
        return v

    # -- plain arrays reaching the trace
    def lift(self, x):
        """TracedArrays pass; plain arrays become captured inputs or constants; scalars stay."""
        if isinstance(x, TracedArray):
            if x._ctx is not self:
                raise TraceError("a traced array from another trace was used in this one")
            return x
        if isinstance(x, np.ndarray):
            hit = self.by_id.get(id(x))
            if hit is not None:
                return hit
            return self._new_input_for(x)
        if isinstance(x, list | tuple) and any(isinstance(e, TracedArray) for e in _iter_deep(x)):
            return array_from(x)
        if x is None or isinstance(x, bool | int | float | complex | np.generic | str):
            return x
        if isinstance(x, np.dtype) or (isinstance(x, type) and issubclass(x, np.generic)):
            return x
        if isinstance(x, list | tuple):
            return self.lift(np.asarray(x))
        if isinstance(x, np.ma.MaskedArray | np.matrix):
            raise TraceError(f"{type(x).__name__} inputs are not supported; pass a plain ndarray")
        raise TypeError(f"cannot use a {type(x).__name__} in a traced computation")

    def _new_input_for(self, arr: np.ndarray):
        if arr.dtype.kind not in "biufc":
            raise TraceError(
                f"arrays of dtype {arr.dtype} cannot be traced (at {user_source(3)}); "
                "tracekit supports bool, integer, float and complex arrays"
            )
        found = self.capture_index.get(id(arr)) or find_capture(arr)
        if found is not None:
            label, getter = found
            kind = "capture"
        else:
            label, getter, kind = "const", None, "const"
        t = self.add_input(same_layout_copy(arr), kind, label, getter)
        self.by_id[id(arr)] = t
        self.keepalive.append(arr)
        return t

    def add_input(self, value, kind, label, getter=None, name=None, weak=False):
        name = base = name or _ident(label)
        taken, k = {v.name for v in self.inputs}, 1
        while name in taken:  # two constants (or two captures with one label): names stay unique
            name, k = f"{base}_{k}", k + 1
        var = self.new_var(np.shape(value), _dtype_of(value), weak, name=name)
        self.inputs.append(var)
        from .ir import InputSpec

        self.specs.append(InputSpec(kind, label))
        buf = Buffer(var, origin=len(self.inputs) - 1)
        self.buffers.append(buf)
        self.capture_getters.append(getter)
        if kind == "const":
            self.constants[var] = value
        return TracedArray(self, buf, (), value)

    # -- baked values
    def guard(self, t: TracedArray, value, how):
        src = user_source(3)
        where = f"{src} `{src.text}`" if src else "an unknown line"
        msg = (
            f"{where}: {how}() read a traced value ({value!r}) and baked it into the trace: "
            "the graph is only valid for data that gives the same value. Use np.where for "
            "data-dependent choices, or tk.jit, which checks this and retraces."
        )
        if self.strict:
            raise TraceError(msg + " (strict=True)")
        self.guards.append(Guard(t.ir_var, value, how, src))
        warnings.warn_explicit(
            msg, TracerWarning, src.file if src else "<unknown>", src.line if src else 0
        )
        return value


def _ident(label: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in label).strip("_")
    while "__" in out:
        out = out.replace("__", "_")
    return out if out and not out[0].isdigit() else f"a_{out}"


def _iter_deep(x):
    for e in x:
        if isinstance(e, list | tuple):
            yield from _iter_deep(e)
        else:
            yield e


def _dtype_of(v) -> np.dtype:
    if isinstance(v, bool):
        return np.dtype(bool)
    if isinstance(v, int):
        return np.dtype(np.int64)
    if isinstance(v, float):
        return np.dtype(np.float64)
    if isinstance(v, complex):
        return np.dtype(np.complex128)
    return np.asarray(v).dtype


LAYOUT_COPY_LIMIT = 1 << 26  # bytes a strided input's copy may span (see same_layout_copy)


def same_layout_copy(arr: np.ndarray) -> np.ndarray:
    """A copy of ``arr`` with its strides, so that NumPy makes the same view-or-copy choices on
    it while tracing (``x[:, ::2].reshape(-1)`` copies, the same values made contiguous would
    give a view, and a later write through an alias would then reach it). A strided array
    whose copy would span more than ``LAYOUT_COPY_LIMIT`` bytes (and 16x its own size) is
    copied compactly instead: its reshapes are traced as for a contiguous array."""
    if arr.ndim == 0 or arr.size == 0 or arr.flags.c_contiguous:
        return np.array(arr, copy=True)
    if any(s == 0 and n > 1 for n, s in zip(arr.shape, arr.strides)):
        return np.array(arr, copy=True)  # a broadcast: its elements share memory; a copy not
    lo, hi = byte_bounds(arr)
    if hi - lo > max(16 * arr.nbytes, LAYOUT_COPY_LIMIT):
        return np.array(arr, copy=True)
    base = np.empty(hi - lo, np.uint8)
    offset = arr.ctypes.data - lo
    out = np.ndarray(arr.shape, arr.dtype, buffer=base, offset=offset, strides=arr.strides)
    out[...] = arr
    return out


def _shares(a, b) -> bool:
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.may_share_memory(a, b)


# ---------------------------------------------------------------------- captured arrays
def scan_captures(fn, depth=4, slots=None) -> dict:
    """id(array) -> (label, getter) for arrays reachable from ``fn`` without being passed in.

    ``slots`` (a list) receives ``(label, getter, setter, array)`` for each place holding one.
    """
    found, seen = {}, set()

    def visit(obj, label, getter, d, setter=None):
        if isinstance(obj, np.ndarray):
            found.setdefault(id(obj), (label, getter))
            if slots is not None and setter is not None:
                slots.append((label, getter, setter, obj))
            return
        if d <= 0 or id(obj) in seen or _opaque(obj):
            return
        seen.add(id(obj))
        if isinstance(obj, list | tuple):
            mutable = isinstance(obj, list)
            for i, e in enumerate(obj[:256]):
                put = _item_setter(getter, i) if mutable else None
                visit(e, f"{label}[{i}]", _item_getter(getter, i), d - 1, put)
        elif isinstance(obj, dict):
            for k, e in list(obj.items())[:256]:
                if isinstance(k, str | int):
                    get, put = _item_getter(getter, k), _item_setter(getter, k)
                    visit(e, f"{label}[{k!r}]", get, d - 1, put)
        elif isinstance(obj, types.FunctionType):  # a helper's closure cells
            for i, (k, cell) in enumerate(zip(obj.__code__.co_freevars, obj.__closure__ or ())):
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                get, put = _closure_getter(getter, i), _closure_setter(getter, i)
                visit(value, f"{label}.{k}", get, d - 1, put)
        elif hasattr(obj, "__dict__"):
            for k, e in list(vars(obj).items())[:256]:
                visit(e, f"{label}.{k}", _attr_getter(getter, k), d - 1, _attr_setter(getter, k))

    target = fn
    if isinstance(fn, functools.partial):
        target = fn.func
    owner = getattr(target, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        visit(owner, "self", lambda o=owner: o, depth)
        target = target.__func__
    elif not isinstance(target, types.FunctionType) and callable(target):
        visit(target, "self", lambda o=target: o, depth)
        target = getattr(type(target).__call__, "__func__", type(target).__call__)
    code = getattr(target, "__code__", None)
    if code is not None:
        _scan_code(target, code, visit)
    return found


def _scan_code(fn, code, visit):
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        put = functools.partial(setattr, cell, "cell_contents")
        visit(value, f"closure:{name}", lambda c=cell: c.cell_contents, 3, put)
    g = getattr(fn, "__globals__", {})
    for name in code.co_names:
        if name in g:
            put = functools.partial(g.__setitem__, name)
            visit(g[name], f"global:{name}", lambda g=g, n=name: g[n], 3, put)


def _opaque(obj) -> bool:
    return (
        isinstance(
            obj,
            types.ModuleType
            | type
            | types.BuiltinFunctionType
            | str
            | bytes
            | int
            | float
            | complex
            | np.generic
            | types.MethodType
            | functools.partial,
        )
        or obj is None
    )


def _closure_getter(getter, i):
    return lambda: getter().__closure__[i].cell_contents


def _closure_setter(getter, i):
    return lambda v: setattr(getter().__closure__[i], "cell_contents", v)


def _item_setter(getter, key):
    return lambda v: getter().__setitem__(key, v)


def _attr_setter(getter, key):
    return lambda v: setattr(getter(), key, v)


def install_captures(ctx, slots):
    """Put a traced stand-in where each captured array lives, for the duration of the trace.

    Then everything the code does with ``self.w`` is recorded, including operations that never
    meet a traced argument (``self.w.T``, ``self.w.sum()``), and reads the current weights
    on every call. :func:`restore_captures` puts the arrays back.
    """
    for _label, _getter, setter, arr in slots:
        if type(arr) is np.ndarray and arr.dtype.kind in "biufc":
            setter(ctx.lift(arr))


def restore_captures(ctx, slots, record=True):
    """Put captured arrays back where the traced code rebound them to traced values.

    ``self.w -= g`` (and ``self.w = self.w - g``) inside traced code leaves a TracedArray in
    ``self.w``; the user's object gets its array back, and with ``record`` a rebinding to a new
    value becomes a write into the captured array, which the Traced repeats on every call.
    """
    for label, getter, setter, original in slots:
        try:
            current = getter()
        except Exception:
            continue
        if not isinstance(current, TracedArray) or current._ctx is not ctx:
            continue
        setter(original)
        if not record:
            continue
        target = ctx.lift(original)
        if current._buf is target._buf and not current._chain:
            continue  # written in place: already recorded
        if current.shape != target.shape or current.dtype != target.dtype:
            raise TraceError(
                f"the traced code rebinds the captured array {label} ({target.ir_var.type}) to "
                f"a {current.ir_var.type} value; tracekit can only write values of the same "
                "shape and dtype back into it. Pass the array as an argument and return it."
            )
        target._write(conform(current, target))


def _item_getter(getter, key):
    return lambda: getter()[key]


def _attr_getter(getter, key):
    return lambda: getattr(getter(), key)


def find_capture(arr):
    """Look for ``arr`` in the objects, closures and globals of the user frames on the stack."""
    f = sys._getframe(1)
    ctx = current()
    while f is not None and (ctx is None or f.f_code is not ctx.stop_code):
        if is_user_frame(f):
            found, seen = None, set()
            for name, value in f.f_locals.items():
                if value is arr or isinstance(value, np.ndarray | TracedArray):
                    continue
                if name in f.f_code.co_freevars or _opaque(value) or id(value) in seen:
                    continue
                seen.add(id(value))
                hits = scan_captures(_Holder(value), 3)
                if id(arr) in hits:
                    label, getter = hits[id(arr)]
                    found = (label.replace("self", name, 1), getter)
                    break
            if found is None:
                cells = tuple(types.CellType() for _ in f.f_code.co_freevars)
                hits = scan_captures(types.FunctionType(f.f_code, f.f_globals, closure=cells), 1)
                found = hits.get(id(arr))
            if found is not None:
                return found
        f = f.f_back
    return None


class _Holder:
    """Lets :func:`scan_captures` scan one object as if it were ``self``."""

    __func__ = None

    def __init__(self, obj):
        self.__self__ = obj


# ---------------------------------------------------------------------- the traced array
_ARRAY_FUNCTIONS: dict = {}


def implements(*np_functions):
    """Register a handler for NumPy functions reaching ``__array_function__``."""

    def deco(fn):
        for f in np_functions:
            _ARRAY_FUNCTIONS[f] = fn
        return fn

    return deco


class TracedArray(_ops.Tracer):
    """A NumPy array being traced. Behaves like ``np.ndarray``; every operation is recorded."""

    __array_priority__ = 1000
    __slots__ = ("_ctx", "_buf", "_chain", "_value", "_levels", "_ver", "__weakref__")

    def __init__(self, ctx, buf, chain, value):
        self._ctx, self._buf, self._chain, self._value = ctx, buf, chain, value
        self._levels, self._ver = None, -1

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
        return _is_python_scalar(self._value)

    def _write(self, new: Var):
        """Replace this array's whole contents by ``new`` (same shape and dtype)."""
        if self._buf.readonly:
            raise ValueError("assignment destination is read-only")
        ctx, chain = self._ctx, self._chain
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
    shape = property(lambda self: np.shape(self._value))
    dtype = property(lambda self: _dtype_of(self._value))
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

    # -- NumPy protocols
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        handler = _ARRAY_FUNCTIONS.get(func)
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
        return self._concrete("item", lambda v: np.asarray(v).item(*args))

    def tolist(self):
        return self._concrete("tolist", lambda v: np.asarray(v).tolist())

    def __hash__(self):
        raise TypeError("unhashable type: 'TracedArray'")

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
        return np.conjugate(self) if self.dtype.kind == "c" else _alias(self)

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

    def __getattr__(self, name):  # only reached for names TracedArray does not define
        if not name.startswith("__") and hasattr(np.ndarray, name):
            f = types.SimpleNamespace(__name__=f"ndarray.{name}", __module__="numpy")
            err = unsupported(f)
            raise _UnsupportedAttribute(str(err))
        raise AttributeError(f"'TracedArray' object has no attribute {name!r}")


class _UnsupportedAttribute(UnsupportedOperation, AttributeError):
    """An ndarray attribute the tracer does not follow (an AttributeError for ``hasattr``)."""


# -- operators: Python's operators become ufunc calls; reflected and in-place forms too
def _binary(name, reflected=False):
    uf = getattr(np, name)

    def op(self, other):
        if other is None and name in ("equal", "not_equal"):  # NumPy compares elementwise
            fill = np.bool_(name == "not_equal")
            attrs = {"shape": self.shape, "fill_value": fill, "dtype": np.dtype(bool)}
            return self._ctx.emit("full", [], attrs)
        if isinstance(
            other,
            list | tuple | np.ndarray | TracedArray | int | float | complex | bool | np.generic,
        ):
            a, b = (other, self) if reflected else (self, other)
            fast = _fast_power(self, other) if name == "power" and not reflected else None
            if fast is not None:
                return _call_ufunc(fast, (self,), {})
            weak = _weak_operand(self) and _weak_operand(other)
            return _call_ufunc(uf, (a, b), {}, weak=weak)
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
    if isinstance(x, TracedArray):
        return x.weak
    return isinstance(x, float | complex | int) and not isinstance(x, bool | np.generic)


def _is_python_scalar(x) -> bool:
    """A Python float or complex (weak under NEP 50); NumPy scalars subclassing them are not."""
    return isinstance(x, float | complex) and not isinstance(x, np.generic)


def _inplace(name):
    uf = getattr(np, name)

    def op(self, other):
        if not isinstance(self._value, np.ndarray):  # scalars rebind, as in Python
            return _call_ufunc(uf, (self, other), {}, weak=self.weak and _weak_operand(other))
        fast = _fast_power(self, other) if name == "power" else None
        if fast is not None:
            _call_ufunc(fast, (self,), {"out": (self,)})
        else:
            _call_ufunc(uf, (self, other), {"out": (self,)})
        return self

    return op


_OPERATORS = {
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "truediv": "divide",
    "floordiv": "floor_divide",
    "mod": "remainder",
    "pow": "power",
    "matmul": "matmul",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "lshift": "left_shift",
    "rshift": "right_shift",
}
for _py, _np in _OPERATORS.items():
    setattr(TracedArray, f"__{_py}__", _binary(_np))
    setattr(TracedArray, f"__r{_py}__", _binary(_np, reflected=True))
    setattr(TracedArray, f"__i{_py}__", _inplace(_np))
for _py, _np in {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}.items():
    setattr(TracedArray, f"__{_py}__", _binary(_np))
TracedArray.__neg__ = lambda self: _call_ufunc(np.negative, (self,), {}, weak=self.weak)
TracedArray.__pos__ = lambda self: _call_ufunc(np.positive, (self,), {}, weak=self.weak)
TracedArray.__abs__ = lambda self: _call_ufunc(np.absolute, (self,), {}, weak=self.weak)
TracedArray.__invert__ = lambda self: _call_ufunc(np.invert, (self,), {})
TracedArray.__divmod__ = lambda self, o: (self // o, self % o)
TracedArray.__rdivmod__ = lambda self, o: (o // self, o % self)


# ---------------------------------------------------------------------- errors
def unsupported(func) -> UnsupportedOperation:
    mod = getattr(func, "__module__", "") or ""
    mod = "np" if mod.startswith("numpy") and mod.count(".") <= 1 else mod.replace("numpy", "np")
    name = f"{mod}.{getattr(func, '__name__', func)}"
    src = user_source(3)
    where = f" at {src} `{src.text}`" if src else ""
    return UnsupportedOperation(
        f"{name} is not supported by tracekit's tracer{where}. Wrap the code that needs it "
        f"in tk.python_op(...) to run it as one opaque Python op in the graph."
    )


def _ctx_of(*xs):
    for x in _iter_deep(xs):
        if isinstance(x, TracedArray):
            return x._ctx
    ctx = current()
    if ctx is None:
        raise TraceError("no trace is active")
    return ctx


# ---------------------------------------------------------------------- ufuncs


def _ufunc(ufunc, method, inputs, kwargs):
    if method == "__call__":
        return _call_ufunc(ufunc, inputs, kwargs)
    op = _ops.ufunc_method_op(ufunc.__name__, method)
    if op is not None:  # np.add.reduce is sum, np.multiply.accumulate is cumprod, ...
        axis = kwargs.pop("axis", 0)
        return (reduce if method == "reduce" else scan)(op, inputs[0], axis, **kwargs)
    if method == "at" and ufunc is np.add and len(inputs) == 3 and not kwargs:
        return _add_at(*inputs)
    raise unsupported(
        types.SimpleNamespace(__name__=f"{ufunc.__name__}.{method}", __module__="numpy")
    )


def _add_at(a, indices, b):
    """``np.add.at(a, indices, b)``: an unbuffered scatter-add into ``a`` (an ``index_add``)."""
    ctx = _ctx_of(a, indices, b)
    target = ctx.lift(a)
    if not isinstance(target, TracedArray):
        raise TypeError("np.add.at needs an array to add into")
    if isinstance(target._value, np.ndarray) and not target._value.flags.writeable:
        src = user_source(2)  # NumPy's own add.at writes into read-only views
        raise ValueError(f"np.add.at: the destination is read-only (at {src} `{src.text}`)")
    idx, arrays = _split_index(target, indices)
    value = ctx.lift(b)
    vv = value._value if isinstance(value, TracedArray) else value
    np.add.at(target._value, _ops.build_index(idx, [x._value for x in arrays]), vv)
    ins = [target.ir_var, value.ir_var if isinstance(value, TracedArray) else value]
    target._write(
        ctx.emit_var("index_add", ins + [x.ir_var for x in arrays], {"idx": idx}, target._value)
    )


def _call_ufunc(ufunc, inputs, kwargs, weak=False):
    name = ufunc.__name__
    out = kwargs.pop("out", None)
    dtype = kwargs.pop("dtype", None)
    where = kwargs.pop("where", True)
    if kwargs.get("casting") == "same_kind":
        kwargs.pop("casting")
    if kwargs or where is not True:
        bad = ", ".join(kwargs) or "where"
        raise unsupported(types.SimpleNamespace(__name__=f"{name}({bad}=...)", __module__="numpy"))
    if name not in OPS or OPS[name].ufunc is not ufunc or ufunc.nout != 1:
        raise unsupported(ufunc)
    ctx = _ctx_of(inputs, out)
    inputs = tuple(ctx.lift(x) for x in inputs)
    if dtype is not None:
        inputs = _cast_to_loop(ufunc, inputs, np.dtype(dtype))
    res = ctx.emit(name, inputs, weak=weak)
    if out is None:
        return res
    target = ctx.lift(out[0] if isinstance(out, tuple) else out)
    vals = [x._value if isinstance(x, TracedArray) else x for x in inputs]
    ufunc(*vals, out=target._value)  # NumPy's own casting rules and errors, on the real values
    target._write(conform(res, target))
    return target


def _cast_to_loop(ufunc, inputs, dtype):
    """Inputs cast to the loop NumPy picks for ``ufunc(*inputs, dtype=dtype)``."""
    ufunc(*(x._value if isinstance(x, TracedArray) else x for x in inputs), dtype=dtype)

    def kind(x):
        if isinstance(x, TracedArray):
            return type(x._value) if x.weak else x.dtype
        weak = isinstance(x, int | float | complex) and not isinstance(x, np.generic)
        return type(x) if weak else np.asarray(x).dtype

    loop = ufunc.resolve_dtypes(
        tuple(kind(x) for x in inputs) + (None,) * ufunc.nout,
        signature=(None,) * ufunc.nin + (dtype,) * ufunc.nout,
    )
    return tuple(
        astype(x, d, False) if isinstance(x, TracedArray) and (x.dtype != d or x.weak) else x
        for x, d in zip(inputs, loop)
    )


def store(target: TracedArray, value, casting="unsafe"):
    """``target[...] = value``: NumPy's broadcasting and casting, recorded as a write."""
    value = target._ctx.lift(value)
    vv = value._value if isinstance(value, TracedArray) else value
    np.copyto(target._value, vv, casting=casting)
    target._write(conform(value, target))


def conform(value, target: TracedArray) -> Var:
    """A Var holding ``value`` broadcast and cast to ``target``'s shape and dtype."""
    ctx = target._ctx
    if not isinstance(value, TracedArray):
        fill = np.asarray(value).astype(target.dtype)[()]
        attrs = {"shape": target.shape, "fill_value": fill, "dtype": target.dtype}
        return ctx.emit_var("full", [], attrs, target._value)
    v = value.ir_var
    if v.ndim > target.ndim:  # NumPy accepted it, so the extra leading axes have length 1
        v = ctx.emit_var(
            "reshape",
            [v],
            {"shape": v.shape[v.ndim - target.ndim :]},
            _like(v)[(0,) * (v.ndim - target.ndim)],
        )
    if v.dtype != target.dtype:
        v = ctx.emit_var("astype", [v], {"dtype": target.dtype}, _like(v, target.dtype))
    if v.shape != target.shape:
        v = ctx.emit_var("broadcast_to", [v], {"shape": target.shape}, target._value)
    return v


# ------------------------------------------------------------ unview: write back through a view
def _unview(ctx, step, base: Var, new: Var) -> Var:
    if step.op is None:
        return new
    like = _like(base)
    if step.op == "index":
        return ctx.emit_var("index_update", [base, new], {"idx": step.attrs["idx"]}, like)
    if step.op == "transpose":
        inv = tuple(int(i) for i in np.argsort(step.attrs["axes"]))
        return ctx.emit_var("transpose", [new], {"axes": inv}, like)
    if step.op == "reshape":
        return ctx.emit_var("reshape", [new], {"shape": base.shape}, like)
    if step.op == "real":
        return ctx.emit_var("update_real", [base, new], {}, like)
    if step.op == "imag":
        return ctx.emit_var("update_imag", [base, new], {}, like)
    src = step.where[0] if step.where else None
    where = f" taken at {src} `{src.text}`" if src else ""
    raise TraceError(
        f"cannot write through the {step.op} view{where}: tracekit cannot represent writes "
        "through it; write into a copy (.copy()) instead"
    )


def _like(var: Var, dtype=None):
    """A zero-cost NumPy stand-in with ``var``'s shape and dtype."""
    return np.broadcast_to(np.zeros((), dtype or var.dtype), var.shape)


# ------------------------------------------------------------ array ops used by the tracer
def _norm_axis(axis, ndim):
    if axis is None:
        return None
    axes = axis if isinstance(axis, tuple | list) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise np.exceptions.AxisError(a, ndim)
        out.append(a % ndim if ndim else 0)
    return tuple(sorted(out))


def reduce(op, x, axis=None, keepdims=False, dtype=None, ddof=None, out=None, **kw):
    if kw.pop("initial", np._NoValue) is not np._NoValue or kw.pop("where", True) is not True:
        raise unsupported(
            types.SimpleNamespace(__name__=f"{op}(initial=/where=)", __module__="numpy")
        )
    if kw:
        raise TypeError(f"{op}() got unexpected arguments {sorted(kw)}")
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    if x.ndim == 0 and op not in ("mean", "var", "std") and _is_int(axis) and axis in (0, -1):
        axis = None  # NumPy's ufunc reductions accept an int axis 0 or -1 on a 0-d array
    attrs = {
        "axis": _norm_axis(axis, x.ndim),
        "keepdims": bool(keepdims),
        "dtype": _opt_dtype(dtype),
    }
    if op in ("var", "std"):
        attrs["ddof"] = ddof or 0
    res = ctx.emit(op, [x], attrs)
    return _maybe_out(res, out)


def argreduce(op, x, axis=None, keepdims=False, out=None):
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    if axis is not None:
        axis = _norm_axis(axis, x.ndim)[0]
    res = ctx.emit(op, [x], {"axis": axis, "keepdims": bool(keepdims)})
    return _maybe_out(res, out)


def scan(op, x, axis=None, dtype=None, out=None):
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    if axis is None:
        x, axis = ravel(x), 0
    axis = _norm_axis(axis, x.ndim)[0]
    res = ctx.emit(op, [x], {"axis": axis, "dtype": _opt_dtype(dtype)})
    return _maybe_out(res, out)


def _is_int(x) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def _opt_dtype(dtype):
    return None if dtype is None else np.dtype(dtype)


def _maybe_out(res, out):
    if out is None:
        return res
    target = out[0] if isinstance(out, tuple) else out
    store(res._ctx.lift(target), res, casting="same_kind")
    return target


def astype(x, dtype, copy_=True):
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    dtype = np.dtype(dtype)
    if dtype == x.dtype and not x.weak:  # a weak Python scalar becomes a strong NumPy value
        return globals()["copy"](x) if copy_ else x
    return ctx.emit("astype", [x], {"dtype": dtype})


def reshape(x, shape, order="C"):
    if order != "C":
        raise unsupported(
            types.SimpleNamespace(__name__=f"reshape(order={order!r})", __module__="numpy")
        )
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(int(s) for s in shape)
    shape = np.empty(x.shape, dtype=[]).reshape(shape).shape  # resolve -1, check size
    if shape == x.shape:
        return _alias(x)
    return ctx.emit("reshape", [x], {"shape": shape}, view=True)


def _alias(x):
    return TracedArray(x._ctx, x._buf, x._chain + (ViewStep(None, {}, x._value),), x._value)


def transpose(x, axes=None):
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    else:
        if len(axes) != x.ndim:
            raise ValueError("axes don't match array")
        axes = tuple(_axis_index(a, x.ndim) for a in axes)
        if len(set(axes)) != len(axes):
            raise ValueError("repeated axis in transpose")
    if axes == tuple(range(x.ndim)):
        return _alias(x)
    return ctx.emit("transpose", [x], {"axes": axes}, view=True)


def _axis_index(a, ndim) -> int:
    """``a`` as an axis in ``range(ndim)``; AxisError (as NumPy) when out of bounds."""
    a = operator.index(a)
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(a, ndim)
    return a % ndim


def swapaxes(x, a, b):
    perm = list(range(np.ndim(x._value if isinstance(x, TracedArray) else x)))
    a, b = _axis_index(a, len(perm)), _axis_index(b, len(perm))
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, tuple(perm))


def moveaxis(x, source, destination):
    n = x.ndim
    src = [_axis_index(s, n) for s in (source if isinstance(source, tuple | list) else [source])]
    dst = [
        _axis_index(d, n)
        for d in (destination if isinstance(destination, tuple | list) else [destination])
    ]
    if len(src) != len(dst):
        raise ValueError(
            "`source` and `destination` arguments must have the same number of elements"
        )
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError("repeated axis in `source` or `destination` argument")
    order = [i for i in range(n) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def ravel(x, order="C"):
    return reshape(x, (x.size,), order)


def squeeze(x, axis=None):
    shape = x.shape
    axes = (
        [i for i, d in enumerate(shape) if d == 1]
        if axis is None
        else list(_norm_axis(axis, x.ndim))
    )
    for a in axes:
        if shape[a] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))


def expand_dims(x, axis):
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    n = x.ndim + (len(axis) if isinstance(axis, tuple | list) else 1)
    axes = _norm_axis(axis, n)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def copy(x):
    """A new buffer holding the same Var (the IR is pure: copying costs no node)."""
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    value = x._value if x.weak else np.array(x._value, copy=True)
    return TracedArray(ctx, Buffer(x.ir_var), (), value)


def real(x):
    x = _ctx_of(x).lift(x)
    if x.dtype.kind != "c":
        return _alias(x)
    return x._ctx.emit("real", [x], view=True)


def imag(x):
    x = _ctx_of(x).lift(x)
    if x.dtype.kind != "c":  # NumPy gives read-only zeros
        zero = np.zeros((), x.dtype)[()]
        res = x._ctx.emit("full", [], {"shape": x.shape, "fill_value": zero, "dtype": x.dtype})
        res._buf.readonly = True
        if isinstance(res._value, np.ndarray):
            res._value.flags.writeable = False
        return res
    return x._ctx.emit("imag", [x], view=True)


def _set_imag(x, value):
    if x.dtype.kind != "c":
        raise TypeError("array does not have imaginary part to set")
    store(imag(x), value)


def broadcast_to(x, shape):
    ctx = _ctx_of(x)
    x = ctx.lift(x)
    shape = tuple(int(s) for s in (shape if isinstance(shape, tuple | list) else (shape,)))
    if shape == x.shape:
        return _alias(x)
    return ctx.emit("broadcast_to", [x], {"shape": shape}, view=True)


# ---------------------------------------------------------------------- indexing
def _split_index(x, key):
    """Normalise ``key``: (idx with "@k" placeholders, arrays, is_basic)."""
    if not isinstance(key, tuple):
        key = (key,)
    ctx = x._ctx
    idx, arrays = [], []
    for k in key:
        if isinstance(k, TracedArray) or isinstance(k, np.ndarray) or isinstance(k, list):
            arr = ctx.lift(np.asarray(k) if isinstance(k, list) else k)
            if isinstance(arr, TracedArray) and arr.ndim == 0 and arr.dtype.kind in "iu":
                idx.append(int(arr.__index__()))
                continue
            if not isinstance(arr, TracedArray):
                arr = ctx.lift(np.asarray(arr))
            if arr.dtype.kind not in "iub":
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            idx.append(f"@{len(arrays)}")
            arrays.append(arr)
        elif isinstance(k, slice):
            idx.append(
                slice(*(None if v is None else _static_int(v) for v in (k.start, k.stop, k.step)))
            )
        elif k is None or k is Ellipsis:
            idx.append(k)
        elif isinstance(k, bool | np.bool_):
            raise unsupported(
                types.SimpleNamespace(__name__="indexing with a Python bool", __module__="numpy")
            )
        else:
            idx.append(_static_int(k))
    return tuple(idx), arrays


def _static_int(v):
    if isinstance(v, TracedArray):
        return v.__index__()
    return int(v) if isinstance(v, np.integer) else v.__index__()


def getitem(x, key):
    ctx = x._ctx
    idx, arrays = _split_index(x, key)
    if any(a.dtype == bool for a in arrays):
        raise TraceError(
            f"boolean-mask indexing at {user_source(3)} has a data-dependent shape and cannot be "
            "traced. Use np.where(mask, a, b) to select, or (mask * a).sum() to reduce."
        )
    if arrays:
        return ctx.emit("index", [x, *arrays], {"idx": idx})
    if idx == (Ellipsis,):
        return _alias(x)
    return ctx.emit("index", [x], {"idx": idx}, view=True)


def setitem(x, key, value):
    ctx = x._ctx
    idx, arrays = _split_index(x, key)
    value = ctx.lift(value)
    vv = value._value if isinstance(value, TracedArray) else value
    real_key = _ops.build_index(idx, [a._value for a in arrays])
    x._value[real_key] = vv  # NumPy's own checks, casting and broadcasting, on the real values
    if idx in ((Ellipsis,), ()) or (idx == (slice(None),) and x.ndim >= 1):
        x._write(conform(value, x))
        return
    if (
        len(arrays) == 1
        and idx == ("@0",)
        and arrays[0].dtype == bool
        and arrays[0].shape == x.shape
        and np.ndim(vv) == 0
    ):
        v = value if isinstance(value, TracedArray) else vv
        if isinstance(v, TracedArray) and v.dtype != x.dtype:
            v = astype(v, x.dtype, False)
        elif not isinstance(v, TracedArray):
            v = np.asarray(vv).astype(x.dtype)[()]
        new = ctx.emit_var(
            "where",
            [arrays[0].ir_var, v.ir_var if isinstance(v, TracedArray) else v, x.ir_var],
            {},
            x._value,
        )
        x._write(new)
        return
    ins = [x.ir_var, value.ir_var if isinstance(value, TracedArray) else value] + [
        a.ir_var for a in arrays
    ]
    new = ctx.emit_var("index_update", ins, {"idx": idx}, x._value)
    x._write(new)


# ---------------------------------------------------------------------- building arrays from lists
def array_from(seq, dtype=None):
    """``np.array([...])`` of traced values: a stack."""
    ctx = _ctx_of(seq)
    if isinstance(seq, TracedArray):
        return astype(seq, dtype) if dtype is not None else copy(seq)
    items = [array_from(e) if isinstance(e, list | tuple) else ctx.lift(e) for e in seq]
    items = [e if isinstance(e, TracedArray) else ctx.lift(np.asarray(e)) for e in items]
    res = _ARRAY_FUNCTIONS[np.stack]([i for i in items], axis=0)
    return astype(res, dtype, False) if dtype is not None else res


# ---------------------------------------------------------------------- tk.scope
class scope(contextlib.ContextDecorator):
    """Name a group of ops; shown as a cluster when rendered. Context manager or decorator.

    >>> import numpy as np, tracekit as tk
    >>> def f(x):
    ...     with tk.scope("block"):
    ...         y = np.exp(x)
    ...     return y + 1
    >>> tk.trace(f, np.ones(2)).graph.nodes[0].scope[-1]
    'block'
    """

    def __init__(self, name: str):
        self.name = str(name)
        self._entries = []
        self._suppress = None

    def __call__(self, fn):
        inner = scope(self.name)
        inner._suppress = getattr(fn, "__code__", None)

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with scope(self.name) as s:
                s._suppress_next(inner._suppress)
                return fn(*a, **k)

        return wrapper

    def _suppress_next(self, code):
        if self._entries and self._entries[-1] is not None:
            self._entries[-1].suppress = code

    def __enter__(self):
        ctx = current()
        self._entries.append(ctx.push_scope(self.name) if ctx is not None else None)
        return self

    def __exit__(self, *exc):
        entry = self._entries.pop()
        ctx = current()
        if entry is not None and ctx is not None and entry in ctx.scopes:
            ctx.scopes.remove(entry)
        return False
