"""``tk.jit``: trace and compile per signature, with an explanation of every retrace.

The signature of a call is the structure of its arguments (static values included) and the
shape, dtype and weakness of every array leaf, plus the shapes and dtypes of the arrays the
function captured. A new signature traces and compiles (the disk cache makes that fast in a new
process); a guard that fails on new data (a branch taken the other way) retraces with a warning
instead of returning a wrong answer.

On the CPU, a new signature's first call answers with the values its trace computed (or
through the interpreter) while its kernels compile off the caller's path (``tiers.py``);
``wait=True`` (or ``TRACEKIT_JIT_WAIT=1``) compiles before answering instead.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import warnings
from collections import OrderedDict

import numpy as np

from .. import pytree
from ..errors import GuardError, TracerWarning
from ..traced import parameter_names, trace, trace_answering
from .runtime import device_array_types, is_device_array
from .tiers import Tiered, blocking_by_default, notebook_notice, start_worker

MAX_SIGNATURES = 64


def _leaf_sig(x):
    if isinstance(x, float | complex):
        return ("weak", type(x).__name__)
    if pytree.is_dask_array(x):  # the target is dask; the chunks are the call's own
        return ("dask", tuple(x.shape), np.dtype(x.dtype).str)
    if type(x) is not np.ndarray and is_device_array(x):
        cai = getattr(x, "__cuda_array_interface__", None)
        if cai is not None:
            return (tuple(cai["shape"]), np.dtype(cai["typestr"]).str)
        return (tuple(x.shape), np.dtype(x.dtype).str)  # the simulator's arrays have no interface
    a = np.asarray(x)
    return (a.shape, a.dtype.str)


def _to_host(x):
    """A host copy of a device array, for tracing only (the call itself gets the device array)."""
    if not is_device_array(x):
        return x
    if hasattr(x, "copy_to_host"):  # numba device arrays, the simulator's included
        return np.asarray(x.copy_to_host())
    from numba import cuda

    return cuda.as_cuda_array(x).copy_to_host()


def host_args(args):
    """``args`` with every device array replaced by a host copy; ``args`` itself when none."""
    extra = device_array_types(args)
    if not extra:
        return args
    leaves, tree = pytree.flatten(list(args), extra_types=extra)
    return tuple(pytree.unflatten(tree, [_to_host(x) for x in leaves]))


def _has_dask_array(args) -> bool:
    return any(pytree.is_dask_array(x) for x in pytree.flatten(list(args))[0])


_PLAIN_STATICS = (int, bool, str, type(None))  # static arguments the quick signature keeps


HIT = "cache hit: no retrace, no recompile"


def _plain_key(args):
    """The quick signature of a call whose arguments are NumPy arrays and simple static values
    (``f(x, steps)``): (shape, dtype) of each array, (type, value) of each static, no pytree
    flattening; None for any other call."""
    key = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            key.append((a.shape, a.dtype))
        elif t in _PLAIN_STATICS:
            key.append((t, a))
        else:
            return None
    return tuple(key)


def _static_key(tree):
    try:
        hash(tree)
        return tree
    except TypeError:
        return repr(tree)


def signature(args):
    leaves, tree = pytree.flatten(list(args), extra_types=device_array_types(args))
    return _static_key(tree), tuple(_leaf_sig(x) for x in leaves)


def describe_change(cached, new, names=()) -> str:
    """In words, what differs between call signature ``new`` and the nearest of the ``cached``
    ones (fewest differences), the arguments named by ``names`` (the function's parameters)."""
    if not cached:
        return "first call: traced and compiled"
    found = min((signature_differences(old, new, names) for old in cached), key=len)
    return "recompiled: " + ("; ".join(found) or "the signature changed")


def signature_differences(old, new, names=()) -> list[str]:
    """Each difference between two call signatures, in words (``n: 3 -> 4``)."""
    (otree, oleaves), (ntree, nleaves) = old, new
    (otree, okw), (ntree, nkw) = _keywords(otree), _keywords(ntree)
    if isinstance(otree, str) or isinstance(ntree, str):  # unhashable statics: kept as repr
        found = [] if otree == ntree else ["the static arguments changed"]
    else:
        found = [
            _said(where, was, now, what)
            for where, was, now, what in pytree.differences(
                otree, ntree, names, leaves=(oleaves, nleaves)
            )
        ]
    for k in sorted(set(okw) | set(nkw), key=str):
        if okw.get(k, _ABSENT) != nkw.get(k, _ABSENT):
            was, now = (repr(d[k]) if k in d else "not given" for d in (okw, nkw))
            found.append(f"static argument {k}: {was} -> {now}")
    return found


_ABSENT = object()


def _keywords(tree):
    """(the positional structure, {keyword: static value}) of a signature's structure."""
    if isinstance(tree, tuple) and len(tree) == 2 and isinstance(tree[1], tuple | str):
        positional, kw = tree
        if isinstance(positional, tuple) and positional and positional[0] is list:
            return positional, dict(kw) if isinstance(kw, tuple) else {"(keywords)": kw}
    return tree, {}


def _said(where, was, now, what) -> str:
    if what == "static":
        return f"static argument {where}: {was} -> {now}"
    if what == "structure":
        return f"{where}: {was} -> {now}"
    return f"{where}: {_leaf_change(was, now)}"


def _leaf_change(a, b) -> str:
    """What differs between two leaf signatures (:func:`_leaf_sig`)."""
    if a[0] == "weak" or b[0] == "weak":
        return f"{_leaf_words(a)} -> {_leaf_words(b)}"
    changes = []
    if a[-2] != b[-2]:
        changes.append(f"shape {a[-2]} -> {b[-2]}")
    if a[-1] != b[-1]:
        changes.append(f"dtype {np.dtype(a[-1]).name} -> {np.dtype(b[-1]).name}")
    return ", ".join(changes) or f"{_leaf_words(a)} -> {_leaf_words(b)}"


def _leaf_words(sig) -> str:
    if sig[0] == "weak":
        return f"a Python {sig[1]}"
    kind = "a dask array" if sig[0] == "dask" else "an array"
    return f"{kind} {np.dtype(sig[-1]).name}{list(sig[-2])}"


class Explanation(str):
    """What the last call did and why (a str)."""


class JitFunction:
    """A function compiled per signature. Call it like the function; ``explain()`` says why the
    last call retraced or recompiled, and ``tier`` which tier answered it ("trace": the values
    its trace computed, for a new signature's first call; "interpreter"; or "compiled")."""

    def __init__(self, fn, target="cpu", wait=None, **options):
        from . import TARGETS

        if not callable(fn):  # said at decoration, not at the first call
            raise TypeError(f"tk.jit takes a function, got {type(fn).__name__}")
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; choose one of {TARGETS}")
        unknown = set(options) - {"math", "progress", "cache", "stream"}
        if unknown:
            raise TypeError(f"tk.jit got unexpected options {sorted(unknown)}")
        self.fn, self.target, self.options = fn, target, options
        self.wait_for_kernels = wait  # None: TRACEKIT_JIT_WAIT decides at each new signature
        self.options.setdefault("progress", None)
        self.tier: str | None = None  # which tier answered the last call
        self._last_entry = None
        self._last_quick = None  # the last entry's Compiled._quick (on the CPU)
        if target == "cpu" and not self._blocking():
            start_worker()  # now, not on the first call's path
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._last_sig = None
        self._last_reason: str | None = None
        # plain calls (arrays only, no captures) by (shape, dtype) of each argument: a signature
        # without pytree flattening
        self._plain: dict = {}
        functools.update_wrapper(self, fn, updated=())

    def __getstate__(self):  # to dask workers: the function and options; each compiles its own
        return {
            "fn": self.fn,
            "target": self.target,
            "wait": self.wait_for_kernels,
            "options": self.options,
        }

    def __setstate__(self, state):
        self.__init__(state["fn"], state["target"], state.get("wait"), **state["options"])

    def _compile(self, args, kw=None):
        """The compiled entry for a new signature, or a :class:`Tiered` one (not started)
        whose calls the interpreter answers while its kernels compile off the caller's path."""
        from . import compile as compile_graph

        # tracing runs the function on host values: device arrays are copied to the host here,
        # once per signature; calls pass them to the compiled function as they are
        traced_args = host_args(args)
        if traced_args is not args and self.target != "cuda":
            raise TypeError(
                f"tk.jit(target={self.target!r}) takes host (NumPy) arrays, got a device array; "
                "use target='cuda' for device arrays"
            )
        fn = functools.partial(self.fn, **kw) if kw else self.fn
        target = "dask" if _has_dask_array(args) else self.target
        if target != "cpu" or self._blocking():
            return compile_graph(trace(fn, *traced_args), target=target, **self.options)
        t, answer = trace_answering(fn, *traced_args)
        quiet = dict(self.options, progress=False)
        progress = self.options["progress"]
        entry = Tiered(
            t,
            lambda: compile_graph(t, target="cpu", **quiet),
            self.options.get("math", "fast"),
            self.options.get("cache", True),
            None if progress is False else notebook_notice(t.graph.name),
            answer,
        )
        entry.on_ready(self._promote)
        return entry

    def _blocking(self) -> bool:
        wait = self.wait_for_kernels
        return blocking_by_default() if wait is None else bool(wait)

    def _promote(self, entry: Tiered):
        """Once ``entry``'s kernels are ready, calls of its signature go straight to them."""
        c = entry.compiled
        if c is None:
            return
        c.signature, c.capture_sig, c.tiered = entry.signature, entry.capture_sig, entry
        with self._lock:
            if self._cache.get(entry.signature) is entry:
                self._cache[entry.signature] = c
            self._plain = {k: c if e is entry else e for k, e in self._plain.items()}

    @staticmethod
    def _capture_sig(compiled):
        t = compiled.traced
        return tuple(
            (np.shape(get()), np.asarray(get()).dtype.str)
            for get, spec in zip(t.capture_getters, t.graph.specs)
            if spec.kind == "capture"
        )

    def _bind(self, args, kwargs):
        """Keyword arguments as positional ones where the function allows it; keyword-only
        ones stay keywords and are static (baked into the trace, part of the signature)."""
        try:
            ba = inspect.signature(self.fn).bind(*args, **kwargs)
        except ValueError:  # no signature (a builtin): let the call itself complain
            return args, kwargs
        for k, v in ba.kwargs.items():
            if isinstance(v, np.ndarray | np.generic | list | tuple | dict) or is_device_array(v):
                raise TypeError(
                    f"tk.jit: keyword-only argument {k!r} holds arrays; tk.jit traces positional "
                    "arguments only (keyword-only ones are static)"
                )
        return tuple(ba.args), dict(ba.kwargs)

    def __call__(self, *args, **kwargs):
        quick = self._last_quick  # the last call's compiled fast path: it checks the arguments
        if quick is not None and not kwargs:
            result = quick(args)
            if result is not None:
                self._last_reason = HIT
                return result
        key = None if kwargs else _plain_key(args)
        if key is not None:
            entry = self._plain.get(key)
            if entry is not None:
                try:
                    result = entry(*args)
                except GuardError:
                    pass  # the general path below retraces and says so
                else:
                    self._last_sig, self._last_entry, self.tier = entry.signature, entry, entry.tier
                    self._last_reason, self._last_quick = HIT, getattr(entry, "_quick", None)
                    return result
        kw = None
        if kwargs:
            args, kw = self._bind(args, kwargs)
        sig = signature(args)
        if kw:
            sig = ((sig[0], _static_key(tuple(sorted(kw.items())))), sig[1])
        with self._lock:
            entry = self._cache.get(sig)
            if entry is not None:
                self._cache.move_to_end(sig)
        reason = None
        if entry is not None and entry.capture_sig != self._capture_sig(entry):
            reason, entry = "recompiled: a captured array changed shape or dtype", None
        if entry is None:
            with self._lock:
                cached = list(self._cache)
            entry = self._store(sig, args, kw)
            reason = reason or self._first_or_changed(cached, sig, entry)
        else:
            reason = HIT
        self._last_sig, self._last_quick = sig, None
        try:
            result = entry(*args)
        except GuardError as e:
            warnings.warn(f"retracing: {e}", TracerWarning, stacklevel=2)
            entry = self._store(sig, args, kw)
            reason = f"retraced: a value baked into the trace changed ({e})"
            result = entry(*args)
        self._last_reason, self._last_entry, self.tier = reason, entry, entry.tier
        self._last_quick = getattr(entry, "_quick", None)  # (a Tiered entry has none)
        if isinstance(entry, Tiered) and not entry.started:
            entry.start()  # after its first answer: that answer does not share the GIL
        return result

    def _first_or_changed(self, cached, sig, entry) -> str:
        if cached:
            return describe_change(cached, sig, parameter_names(self.fn))
        origin = getattr(getattr(entry, "program", None), "machine_code_origin", None)
        said = origin() if origin else "machine code compiled now"
        if said == "machine code compiled now":
            return "first call: traced and compiled"
        return f"first call: traced; {said}"

    def _store(self, sig, args, kw=None):
        c = self._compile(args, kw)
        c.capture_sig = self._capture_sig(c)
        c.signature = sig
        with self._lock:
            self._cache[sig] = c
            while len(self._cache) > MAX_SIGNATURES:
                self._cache.popitem(last=False)
            self._plain = {  # a new dict: a concurrent reader sees the old or the new one
                k: e for k, e in self._plain.items() if e.signature in self._cache
            }
            key = None if kw else _plain_key(args)
            if key is not None and not c.capture_sig:
                self._plain[key] = c
        return c

    def explain(self) -> Explanation:
        """Why the last call traced/compiled again, or that it hit the cache; and, where the
        kernels compiled off the caller's path, which tier answered it."""
        if self._last_reason is None:
            return Explanation("not called yet")
        tier = _tier_line(self._last_entry)
        return Explanation(self._last_reason + (f"\n{tier}" if tier else ""))

    def wait(self, timeout=None) -> bool:
        """Block until the kernels of every signature seen so far are compiled (or failed);
        whether all of them are ready.

        >>> import numpy as np, tracekit as tk
        >>> f = tk.jit(lambda x: np.tanh(x) * 2, wait=False)
        >>> f(np.zeros(3)).tolist(), f.tier
        ([0.0, 0.0, 0.0], 'trace')
        >>> f(np.ones(3)).shape, f.tier in ("interpreter", "compiled")  # (compiled: once ready)
        ((3,), True)
        >>> f.wait(), f(np.zeros(3)).tolist(), f.tier
        (True, [0.0, 0.0, 0.0], 'compiled')
        """
        with self._lock:
            pending = [e for e in self._cache.values() if isinstance(e, Tiered)]
        deadline = None if timeout is None else time.perf_counter() + timeout
        for entry in pending:
            left = None if deadline is None else max(0.0, deadline - time.perf_counter())
            entry.wait(left)
        return all(e.compiled is not None for e in pending)

    @property
    def compiled(self):
        """The Compiled of the most recent signature (waiting for its kernels where they
        compile off the caller's path; None if that failed)."""
        entry = self._cache.get(self._last_sig)
        if isinstance(entry, Tiered):
            entry.wait()
            return entry.compiled
        return entry

    def __set_name__(self, owner, name):
        self._attr = name

    def __get__(self, obj, objtype=None):  # @tk.jit on a method
        if obj is None:
            return self
        bound = JitFunction(
            self.fn.__get__(obj, objtype), self.target, self.wait_for_kernels, **self.options
        )
        try:  # the instance keeps its compiled method (found before this descriptor next time)
            vars(obj)[getattr(self, "_attr", self.fn.__name__)] = bound
            return bound
        except TypeError:  # no __dict__ (__slots__): kept here, and the object with it
            pass
        return self.__dict__.setdefault("_bound", {}).setdefault(id(obj), bound)


def _tier_line(entry) -> str:
    """Which tier answered a call served by ``entry``; empty for kernels compiled before the
    first answer (``wait=True``)."""
    tiered = entry if isinstance(entry, Tiered) else getattr(entry, "tiered", None)
    if tiered is None:
        return ""
    if entry.tier == "compiled":
        ready = f"ready {tiered.seconds:.2f} s after the first call"
        return f"served by compiled kernels ({tiered.how}; {ready})"
    if tiered.error is not None:
        first = str(tiered.error).strip().splitlines()[0]
        return f"served by the {_TIER_WORDS[entry.tier]}: compiling the kernels failed ({first})"
    off_path = "while the kernels compile off the caller's path"
    return f"served by the {_TIER_WORDS[entry.tier]} {off_path}"


_TIER_WORDS = {
    "trace": "values the trace computed (NumPy's own answer to this call)",
    "interpreter": "interpreter",
}


def jit(fn=None, *, target="cpu", wait=None, **options):
    """Trace and compile ``fn`` per signature; use as ``@tk.jit`` or ``tk.jit(fn, target=...)``.

    On the CPU, a new signature's first call answers with the values its trace computed
    (NumPy's own answer: the function runs once) while the kernels compile off the caller's
    path; later calls run through the interpreter until the kernels are ready, then use them.
    ``wait=True`` compiles before the first answer (benchmarks, scripts); ``TRACEKIT_JIT_WAIT=1``
    makes that the default.

    >>> import numpy as np, tracekit as tk
    >>> @tk.jit(wait=True)
    ... def f(x):
    ...     return np.tanh(x) * 2
    >>> f(np.zeros(3)).tolist(), f.explain(), f.tier  # (or: loaded from the disk cache)
    ([0.0, 0.0, 0.0], 'first call: traced...', 'compiled')
    >>> _ = f(np.zeros(4)); f.explain()
    'recompiled: x: shape (3,) -> (4,)'
    """
    if fn is None:
        return lambda f: JitFunction(f, target, wait, **options)
    return JitFunction(fn, target, wait, **options)
