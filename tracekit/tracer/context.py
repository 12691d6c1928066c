"""The trace context: everything one trace accumulates, and how it records.

A :class:`TraceContext` names Vars, finds the user's source line and scope of each op it records
(``where``), computes every op on the real values and records it as a node (``emit``), makes
plain arrays that reach the trace inputs (``lift``: a captured array or a constant, copied with
its strides by :func:`same_layout_copy`), and records the guards of values that Python read and
baked into the trace (``guard``, ``layout_guards``).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import warnings
import weakref

import numpy as np
from numpy.lib.array_utils import byte_bounds

from ..errors import TraceError, TracerWarning
from ..ir import FrozenDict, Guard, InputSpec, Node, Var, at_iteration, moves
from ..loops.source import break_exit, range_position
from ..ops import OPS
from ..pytree import is_dask_array
from ..type_rules import type_of as input_type
from .array import Buffer, Deferred, TracedArray, ViewStep, dtype_of, force, iter_deep
from .captures import find_capture
from .movement import array_from
from .source import (
    USER_FILES,
    is_user_frame,
    short_qualname,
    source_at,
    source_of,
    user_frame,
    user_source,
)


class Scope:
    """An explicit named scope entered in a user frame (``tk.scope``)."""

    __slots__ = ("name", "frame", "suppress", "label")

    def __init__(self, name, frame, suppress):
        self.name, self.frame, self.suppress, self.label = name, frame, suppress, name


class TraceContext:
    """Everything one trace accumulates."""

    def __init__(self, strict=False):
        self.strict = strict
        self.lazy = False  # values are dask arrays: built, never computed (see _no_compute)
        self.layout_bound: set = set()  # buffers whose writes a lazy trace refuses
        self.nodes: list[Node] = []
        self.stacks: dict = {}  # node -> the sources of its call chain, outermost first
        # id of a guard on the test of ``if ...: break`` in ``for i in range(...)`` -> (the
        # iteration's index in the range, the range's length): a loop it leaves may be rolled
        # into one that decides when it runs where to stop (tracekit.loops.roll)
        self.breaks: dict = {}
        self.last_stack: tuple = ()
        self.inputs: list[Var] = []
        self.input_values: list = []  # the value of each input while tracing
        self.specs: list = []
        self.buffers: list[Buffer] = []  # one per input, same order
        self.capture_getters: list = []
        self.constants: dict = {}
        self.guards: list[Guard] = []
        self.int_sizes: dict = {}  # Var of a Python int -> the largest |value| it can have
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
        # (user frame, its callers, scopes, their lines, sources, scope path, chains by line)
        self._last_where = None
        # while emit records an op: the frame of its caller, where the search for the user's
        # frame starts (None outside emit), and the op's place found from there, once: (where(),
        # its call chain), or None until the op first needs it (see record)
        self._caller = None
        self._place = None
        self._producers: dict = {}  # Var -> the node computing it, for self.nodes[:_n_produced]
        self._n_produced = 0
        self._defer = False  # see deferring
        self._deferred = weakref.WeakValueDictionary()  # id -> an array not computed yet

    # -- names
    def new_var(self, shape, dtype, weak=False, name=None) -> Var:
        if name is None:
            name, self.counter = str(self.counter), self.counter + 1
        return Var(name, shape, dtype, weak)

    # -- where are we in the user's code
    def where(self, start=None):
        """(source, scope) of the op being recorded now; the search for the user's frame
        starts at ``start`` (emit's caller), else at the caller of where's caller."""
        stop = self.stop_code
        inner = _innermost_user_frame(start or sys._getframe(2), stop)
        if inner is None:
            self.last_stack = ()
            return None, self._scope_path([])
        src = source_at(inner)
        last = self._last_where
        # the same frame (held, so no other object at a reused address) of a function, not of
        # a generator (which its caller may resume from another line, or another caller), runs
        # one call: the frames calling it are the same, stopped at the same lines; under the
        # same scopes (compared by identity) it has the same scope path and call stack. A loop
        # records thousands of ops from one frame.
        if (
            last is not None
            and last[0] is inner
            and not inner.f_code.co_flags & _RESUMABLE
            and last[2] == self.scopes
        ):
            # the ops of one line share their chain (rolling finds their loops once per chain
            # object); keyed by the id of the Source, which the chain holds
            stack = last[6].get(id(src))
            if stack is None:
                stack = last[6][id(src)] = last[4] + (src,)
            self.last_stack = stack
            return src, last[5]
        callers = list(_user_frames(inner.f_back, stop))  # around the innermost, innermost first
        callers.reverse()
        outer = tuple([source_at(g) for g in callers])
        self.last_stack = outer + (src,)  # for rolling loops in callees
        path = self._scope_path([*callers, inner])
        chains = {id(src): self.last_stack}
        self._last_where = (inner, None, list(self.scopes), None, outer, path, chains)
        return src, path

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
        """Append the node ``op(inputs, **attrs) -> outputs`` at the user's current line, or at
        ``where`` (source, scope) where a view was taken; its call chain is the current one."""
        if self._caller is None:
            src, scope = where or self.where()
            if where is not None:
                self.where()
            stack = self.last_stack
        else:  # inside emit: one search of the user's frames serves the op and its views
            place, stack = self._place or self._find_place()
            src, scope = where or place
        node = Node(op, inputs, attrs, outputs, src, scope)  # Node makes them tuples
        self.nodes.append(node)
        self.stacks[node] = stack
        return node

    def emit(self, op, inputs, attrs=None, *, n_out=1, weak=False, view=False):
        """Compute ``op`` on the real values and record it; returns TracedArray(s)."""
        outer = self._caller, self._place  # an op emitted while another is (lifting a list)
        self._caller = self._place = None  # finds its own place; _emit sets them
        try:
            return self._emit(op, inputs, attrs, n_out, weak, view, sys._getframe(1))
        finally:
            self._caller, self._place = outer

    def _find_place(self) -> tuple:
        """(``where()``, the call chain) of the op emit is recording, searched for once per op
        from the frame of emit's caller."""
        self._place = (self.where(self._caller), self.last_stack)
        return self._place

    # -- values computed when read
    @contextlib.contextmanager
    def deferring(self):
        """While it lasts, an op of one array output whose type its type rule gives is recorded
        with a :class:`Deferred` value, computed only where something reads it (a rule's test,
        the trace's answer, a write next to it): a gradient's graph is built from types alone,
        where its values would cost NumPy's time on every op. Its views are arrays of their
        own, as nothing writes through them there. Only for code that writes into no array
        (tracekit's own: the backward pass, a graph inlined)."""
        before, self._defer = self._defer, not self.lazy
        try:
            yield
        finally:
            self._defer = before

    def settle(self):
        """Compute every deferred value now: before a write into an array they may read."""
        for t in list(self._deferred.values()):
            force(t)
        self._deferred.clear()

    def _deferred_result(self, spec, tins, attrs, caller):
        """``spec``'s result on ``tins``, recorded with a deferred value; None where NumPy
        computes it now: a control or Python op, one reading an index array, or one whose type
        rule refuses its inputs or gives several outputs."""
        if spec.type_rule is None or spec.kind in ("control", "opaque"):
            return None
        if spec.kind not in ("elementwise", "reduce", "scan") and any(
            type(x) is TracedArray and x.dtype.kind in "biu" and x.ndim for x in tins[1:]
        ):
            return None  # (integers as positions: NumPy checks them against the axis, here)
        types = [
            input_type(x.ir_var, None if type(x._v) is Deferred else x._v)
            if type(x) is TracedArray
            else input_type(x)
            for x in tins
        ]
        try:
            outs = spec.type_rule(types, attrs)
        except Exception:  # NumPy's own error, computing it now, says it better
            return None
        if len(outs) != 1:
            return None
        ((shape, dtype),) = outs
        self._caller = caller
        var = self.new_var(shape, dtype)
        ins = [x.ir_var if type(x) is TracedArray else x for x in tins]
        self.record(spec.name, ins, attrs, (var,))
        res = TracedArray(self, Buffer(var), (), Deferred(spec.name, tins, attrs, shape, dtype))
        self._deferred[id(res)] = res
        return res

    def _emit(self, op, inputs, attrs, n_out, weak, view, caller):
        attrs = FrozenDict(attrs) if attrs else _NO_ATTRS  # a Node keeps a FrozenDict as it is
        tins = [x if type(x) is TracedArray and x._ctx is self else self.lift(x) for x in inputs]
        spec = OPS[op]
        if self._defer and n_out == 1 and not weak and not (attrs and moves(attrs)):
            if int not in map(type, (x._v if type(x) is TracedArray else x for x in tins)):
                res = self._deferred_result(spec, tins, attrs, caller)
                if res is not None:
                    return res
        if spec.kind == "opaque":
            self.settle()  # a Python op may write into the arrays it is given
        vals = [x._value if type(x) is TracedArray else x for x in tins]
        python_int = int in map(type, vals)
        # an index moving with a loop (a loop body's backward pass is built from its first
        # iteration's values): computed where it is then, recorded as it moves
        now = at_iteration(attrs, 0) if attrs and moves(attrs) else attrs
        try:
            if self.lazy and spec.whole_array:
                out = _one_task(op, vals, now, n_out)
            else:
                out = spec.impl(*vals, **now)
        except TraceError:
            raise
        except Exception as e:
            src = user_source(2)
            if src is not None:
                e.add_note(f"tracekit: in {op} at {src} `{src.text}`")
            raise
        self._caller = caller  # where() searches from there when first needed (see record)
        if view:
            base = tins[0]
            if self._is_view(op, out, base):
                step = ViewStep(op, attrs, out, (self._place or self._find_place())[0])
                res = TracedArray(self, base._buf, base._chain + (step,), out)
                self.note_layout_choice(op, attrs, base, res)
                return res
        if n_out == 1:
            var = self.new_var(*_type_of(out), weak)
            ins = [x.ir_var if type(x) is TracedArray else x for x in tins]
            self.record(op, ins, attrs, (var,))
            res = [TracedArray(self, Buffer(var), (), np.asarray(out).item() if weak else out)]
        else:
            outs = list(out)
            vars_ = [self.new_var(*_type_of(v), weak) for v in outs]
            ins = [x.ir_var if type(x) is TracedArray else x for x in tins]
            self.record(op, ins, attrs, vars_)
            res = [
                TracedArray(self, Buffer(v), (), (np.asarray(o).item() if weak else o))
                for v, o in zip(vars_, outs)
            ]
        if None in self.layout_bound:  # a lazy reshape's result (see _is_view)
            self.layout_bound.discard(None)
            self.layout_bound.add(res[0]._buf)
        if view:
            self.note_layout_choice(op, attrs, tins[0], res[0])
        if python_int:
            self._guard_int_bounds(op, tins, vals, now)
        return res[0] if n_out == 1 else res

    def _guard_int_bounds(self, op, tins, vals, attrs):
        """Guard the traced Python ints among ``op``'s inputs to stay within the bounds of the
        integer arrays they meet, where NumPy raises OverflowError outside them (compiled code
        would wrap) and the int's size is not known to be within them."""
        traced = [i for i, x in enumerate(tins) if type(x) is TracedArray and type(vals[i]) is int]
        dtypes = [v.dtype for v in vals if isinstance(v, np.ndarray) and v.dtype.kind in "iu"]
        dtype = np.result_type(*dtypes) if traced and dtypes else None
        if dtype is None or dtype.kind not in "iu" or dtype == np.int64:
            return
        info = np.iinfo(dtype)
        for i in traced:
            x = tins[i]
            size = self.int_sizes.get(x.ir_var)
            if size is not None and info.min <= -size and size <= info.max:
                continue
            if _raises_out_of_bounds(op, i, vals, attrs, info):
                low = x >= info.min if info.min > -(2**63) else True
                high = x <= info.max if info.max < 2**63 - 1 else True
                self.guard_rule(
                    high if low is True else low if high is True else low & high, "bounds"
                )

    def _is_view(self, op, out, base) -> bool:
        """Whether NumPy made ``out`` a view of ``base`` (so writes into one reach the other).
        Dask values share no memory: an op that NumPy always makes a view is one; of one that
        NumPy makes a view or a copy by the strides (reshape), writes are refused instead."""
        if not self.lazy:
            return _shares(out, base._value)
        if OPS[op].may_copy:
            self.layout_bound.update((base._buf, None))  # the result's buffer: added by emit
            return False
        return True

    def check_lazy_write(self, buf):
        """Refuse a write whose effect NumPy decides by memory layout, which dask values lack."""
        if self.lazy and buf in self.layout_bound:
            src = user_source(4)
            where = f"{src} `{src.text}`: " if src else ""
            raise TraceError(
                f"{where}a write into an array that was reshaped (or into the reshaped array): "
                "NumPy makes a reshape a view or a copy by the memory layout, which dask arrays "
                "do not have; write into a copy (.copy()) instead"
            )

    def note_layout_choice(self, op, attrs, base, res):
        """Remember a reshape of (a view of) an input that NumPy made a view or a copy of by
        the input's strides; ``layout_guards`` keeps those that a later write makes matter."""
        buf = base._buf
        if not OPS[op].may_copy or buf.origin is None or self.specs[buf.origin].kind == "const":
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
        v = self.new_var(*_type_of(like))
        self.record(op, inputs, attrs, [v], where)
        return v

    # -- plain arrays reaching the trace
    def lift(self, x):
        """TracedArrays pass; plain arrays become captured inputs or constants; scalars stay."""
        if type(x) is float:  # the common literal first
            return x
        if isinstance(x, TracedArray):
            if x._ctx is not self:
                raise TraceError("a traced array from another trace was used in this one")
            return x
        if isinstance(x, np.ndarray):
            hit = self.by_id.get(id(x))
            if hit is not None:
                return hit
            return self._new_input_for(x)
        if isinstance(x, list | tuple) and any(isinstance(e, TracedArray) for e in iter_deep(x)):
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
        value = same_layout_copy(arr)
        t = self.add_input(value, kind, label, getter)
        if kind == "const":  # the trace may write into its value: the graph keeps the one read
            self.constants[t.ir_var] = value.copy()
        self.by_id[id(arr)] = t
        self.keepalive.append(arr)
        return t

    def add_input(self, value, kind, label, getter=None, name=None, weak=False):
        name = base = name or identifier(label)
        taken, k = {v.name for v in self.inputs}, 1
        while name in taken:  # two constants (or two captures with one label): names stay unique
            name, k = f"{base}_{k}", k + 1
        var = self.new_var(np.shape(value), dtype_of(value), weak, name=name)
        self.inputs.append(var)
        self.input_values.append(value)
        self.specs.append(InputSpec(kind, label))
        buf = Buffer(var, origin=len(self.inputs) - 1)
        self.buffers.append(buf)
        self.capture_getters.append(getter)
        if kind == "const":
            self.constants[var] = value
        return TracedArray(self, buf, (), value)

    # -- values known while tracing
    def origins(self, var: Var) -> set | None:
        """The kinds of input ("arg", "capture", "const") that ``var`` is computed from, or None
        when an opaque op (a python op, free to return anything) is among its producers."""
        for node in self.nodes[self._n_produced :]:
            for out in node.outputs:
                self._producers[out] = node
        self._n_produced = len(self.nodes)
        positions = {v: i for i, v in enumerate(self.inputs)}
        kinds, todo, seen = set(), [var], set()
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in positions:
                kinds.add(self.specs[positions[v]].kind)
                continue
            node = self._producers.get(v)
            if node is None:
                continue
            if OPS[node.op].kind in ("opaque", "control"):
                return None
            todo.extend(x for x in node.inputs if isinstance(x, Var))
        return kinds

    # -- baked values
    def guard(self, t: TracedArray, value, how):
        frame = user_frame(2)
        src = source_of(frame) if frame is not None else None
        where = f"{src} `{src.text}`" if src else "an unknown line"
        msg = (
            f"{where}: {how}() read a traced value ({value!r}) and baked it into the trace: "
            "the graph is only valid for data that gives the same value. Use np.where for "
            "data-dependent choices, or tk.jit, which checks this and retraces."
        )
        if self.strict:
            raise TraceError(msg + " (strict=True)")
        self.guards.append(Guard(t.ir_var, value, how, src))
        if how == "bool" and src is not None:  # the test of ``if ...: break`` in a for loop?
            found = break_exit(src.file, src.line)
            at = range_position(frame, found) if found and found[2] else None
            if at is not None:
                self.breaks[id(self.guards[-1])] = at
        warnings.warn_explicit(
            msg, TracerWarning, src.file if src else "<unknown>", src.line if src else 0
        )
        return value

    def guard_rule(self, condition: TracedArray, how: str):
        """Python's rule ``how`` (a key of ``ir.PYTHON_RULES``) took the way ``condition`` (a
        traced bool) says on this trace's values; every call checks that it still does. No
        warning: the trace holds for all values that follow the rule the same way."""
        if isinstance(condition, TracedArray):
            src = user_source(2)
            self.guards.append(Guard(condition.ir_var, bool(condition._value), how, src))

    def guard_known(self, t: TracedArray, what: str):
        """Bake in ``t``'s whole value (``what`` says what it is), checked at every call."""
        src = user_source(4)
        where = f"{src} `{src.text}`" if src else "an unknown line"
        msg = (
            f"{where}: {what} was read while tracing and baked into the trace; every call "
            "checks that it still holds the same values (GuardError otherwise, a retrace in "
            "tk.jit)."
        )
        if self.strict:
            raise TraceError(msg + " (strict=True)")
        self.guards.append(Guard(t.ir_var, t._value.tolist(), "tolist", src))
        warnings.warn_explicit(
            msg, TracerWarning, src.file if src else "<unknown>", src.line if src else 0
        )


_RAISES: dict = {}  # (op, position, operand kinds) -> whether NumPy raises (_raises_out_of_bounds)


def _raises_out_of_bounds(op, position, vals, attrs, info) -> bool:
    """Whether NumPy raises OverflowError for ``op`` of ``vals`` with a Python int out of
    ``info``'s bounds at ``position`` (an operator does; a comparison does not)."""
    kinds = tuple(v.dtype if isinstance(v, np.ndarray) else type(v) for v in vals)
    key = (op, position, kinds)
    if key not in _RAISES:
        probe = [np.zeros(1, v.dtype) if isinstance(v, np.ndarray) else v for v in vals]
        probe[position] = info.max + 1
        try:
            with np.errstate(all="ignore"):
                OPS[op].impl(*probe, **attrs)
            _RAISES[key] = False
        except OverflowError:
            _RAISES[key] = True
        except Exception:
            _RAISES[key] = False
    return _RAISES[key]


def _innermost_user_frame(f, stop):
    """The first frame of the user's from ``f`` outwards, below the trace's entry, or None."""
    known = USER_FILES
    while f is not None:
        code = f.f_code
        if code is stop:
            return None
        user = known.get(code.co_filename)
        if user is None:
            user = is_user_frame(f)
        if user:
            return f
        f = f.f_back
    return None


def _user_frames(f, stop):
    """The user's frames from ``f`` outwards, innermost first, up to the trace's entry
    (the frame running the code ``stop``)."""
    f = _innermost_user_frame(f, stop)
    while f is not None:
        yield f
        f = _innermost_user_frame(f.f_back, stop)


# code flags of a generator, a coroutine, an async generator: their frames are resumed
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
_NO_ATTRS = FrozenDict()  # the attributes of every node without any (immutable: shared)


def identifier(label: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in label).strip("_")
    while "__" in out:
        out = out.replace("__", "_")
    return out if out and not out[0].isdigit() else f"a_{out}"


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


def _type_of(v) -> tuple:
    """(shape, dtype) of an op's result: an ndarray, a NumPy or Python scalar, a dask array."""
    if type(v) is np.ndarray:
        return v.shape, v.dtype
    return np.shape(v), dtype_of(v)


def _shares(a, b) -> bool:
    return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.may_share_memory(a, b)


def _one_task(op, vals, attrs, n_out):
    """A dask trace's value of an op NumPy computes on whole arrays: one delayed task, its
    shapes and dtypes from the op's type rule (nothing is computed)."""
    import dask
    import dask.array as da

    from ..type_rules import ValueType, type_of

    types = [ValueType(tuple(v.shape), v.dtype) if is_dask_array(v) else type_of(v) for v in vals]
    outs = OPS[op].type_rule(types, attrs)
    task = dask.delayed(_as_arrays, pure=True, nout=len(outs))(op, attrs, *vals)
    tasks = task if len(outs) > 1 else (task,)
    res = [da.from_delayed(t, shape, dtype) for t, (shape, dtype) in zip(tasks, outs)]
    return res[0] if n_out == 1 else tuple(res)


def _as_arrays(op, attrs, *vals):
    out = OPS[op].impl(*vals, **attrs)
    return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)
