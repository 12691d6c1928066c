"""Python operators inside a graph, modelled on caffe2's ``Net.Python``.

``op = tk.python_op(f, grad_f=None, python_func_type=None, grad_output_indices=None,
grad_input_indices=None, name=None)`` wraps an arbitrary Python function as ONE opaque node of
the graph (op ``python_op``; the node shows ``name``). Inside traced code ``op(*arrays)`` runs
``f`` on the example values (that is where the output shapes and dtypes come from) and records
the node; outside a trace it just calls ``f``.

- ``f``: ``f(*inputs) -> output or tuple of outputs``; or a builder tuple ``(func, args,
  kwargs)``: ``func(*args, **kwargs)`` is called once per process, when the op first runs, and
  returns the function. It can keep local state, and the op is serialised by reference to
  ``func`` and its arguments, so graphs holding it survive ``to_json``/``from_json``, pickling,
  and shipping to other processes (``func`` must be importable there).
- ``grad_f``: called as ``grad_f(*inputs, *outputs, *output_grads)``; returns the gradients of
  the inputs (one array, or a tuple; ``None`` for "zero"). ``grad_output_indices`` selects which
  output gradients it receives, ``grad_input_indices`` which input gradients it returns (the
  others are zero), as caffe2 documents. ``grad_f`` may be a builder tuple too.
- ``python_func_type``: a class; ``python_func_type(f)`` is made once per op and its
  ``forward(*inputs)`` and ``backward(inputs, outputs, output_grads)`` (lists) are used: a
  stateful op. A ``grad_f`` given as well takes precedence for the gradient.

In the backward graph the gradient is another python op, ``<name>_grad``. Python ops are treated
as pure functions of their inputs: ``f`` must not modify its inputs, and a python op whose
results are unused is removed like any dead node. Compiled code calls a numba-compiled ``f``
(``op.is_numba``) inside the fused kernel, and splits the kernel plan around any other ``f``.

>>> import numpy as np, tracekit as tk
>>> op = tk.python_op(np.sinh, grad_f=lambda x, y, gy: gy * np.cosh(x))
>>> t = tk.trace(lambda x: op(x).sum(), np.zeros(3))
>>> [n.op for n in t.graph.nodes], t.graph.nodes[0].attrs["name"]
(['python_op', 'sum'], 'sinh')
>>> tk.grad(lambda x: op(x).sum())(np.zeros(3))
array([1., 1., 1.])
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import itertools
import json
import pickle
import sys
import threading
import uuid
import weakref

import numpy as np

from .errors import TraceError
from .ir import _canonical, _uncanonical, register_json_loader, type_str
from .ops import Op, defvjp, register

_PROCESS = uuid.uuid4().hex[:12]
_uids = itertools.count()
_LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # uid -> PyOp
_BUILT: dict = {}  # builder key -> (built callable, the builder tuple kept alive)
_ADOPTED: dict = {}  # uid -> this process's copy of another process's stateful op (kept)
_LOCK = threading.RLock()


def python_op(
    f,
    grad_f=None,
    python_func_type=None,
    grad_output_indices=None,
    grad_input_indices=None,
    name=None,
    pass_workspace=False,
):
    """An opaque Python function usable inside traced code; see :mod:`tracekit.pyop`.

    Parameters
    ----------
    f : callable or (func, args, kwargs)
        The function, or a builder tuple called once per process to make it.
    grad_f : callable or (func, args, kwargs), optional
        ``grad_f(*inputs, *outputs, *output_grads) -> input grads``.
    python_func_type : type, optional
        ``python_func_type(f)`` provides ``forward(*inputs)`` and
        ``backward(inputs, outputs, output_grads)``.
    grad_output_indices, grad_input_indices : sequence of int, optional
        Which output gradients ``grad_f`` receives / which input gradients it returns.
    name : str, optional
        The node's name in listings and renderings (default: ``f``'s name).
    pass_workspace : bool, optional
        Call ``f`` (and ``grad_f``) with the run's :class:`Workspace` as one more, last
        argument (caffe2's ``pass_workspace``, at your own risk: see :class:`Workspace`).

    Returns
    -------
    PyOp
        Call it on arrays inside (or outside) traced code.
    """
    return PyOp(
        f, grad_f, python_func_type, grad_output_indices, grad_input_indices, name, pass_workspace
    )


def check_results(node, results):
    """A python op's results on this call have the shapes and dtypes the trace recorded (code
    compiled for them would read past the end, or reinterpret the bytes, otherwise)."""
    results = results if len(node.outputs) > 1 else (results,)
    for k, (var, val) in enumerate(zip(node.outputs, results)):
        shape, dtype = np.shape(val), np.asarray(val).dtype
        if shape != var.shape or dtype != var.dtype:
            where = f" (at {node.source} `{node.source.text}`)" if node.source else ""
            raise ValueError(
                f"python op {node.attrs.get('name')!r} returned {type_str(shape, dtype)} for "
                f"output {k} on this call but {var.type} when traced{where}: the graph is only "
                "valid for the traced shapes and dtypes; trace again"
            )
    return results if len(node.outputs) > 1 else results[0]


def _readonly(x):
    """``x`` as a read-only view: a python op that writes into its inputs would silently change
    values other nodes read; this makes it raise instead."""
    if isinstance(x, np.ndarray) and x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


def _invoke(op, fn, inputs, where=None):
    """``fn`` called on ``inputs``, read-only (and on the run's workspace when ``op`` asks for
    it), with NumPy's own functions in place (numba may compile ``fn`` now, while tracing);
    ``where``: the user's line, for the error of a write into an input."""
    from .tracer.active import numpy_as_is

    args = [_readonly(x) for x in inputs]
    if op.pass_workspace:
        args.append(current_workspace())
    try:
        with numpy_as_is():
            return fn(*args)
    except (ValueError, TypeError) as e:  # numba says so while typing: a TypingError
        if "read-only" not in str(e) and "readonly array" not in str(e):
            raise
        at = f" at {where} `{where.text}`" if where else ""
        raise ValueError(
            f"python op {op.name!r}{at} wrote into one of its inputs, which tracekit passes "
            "read-only: they are values of the graph that other ops, or the caller, read as "
            "well, and a write would change them behind the graph's back. Copy the input "
            f"first (x = x.copy()) or write into a new array. ({str(e).splitlines()[0]})"
        ) from e


class Workspace:
    """What a python op made with ``pass_workspace=True`` receives as its last argument: the
    place of one run of the graph (caffe2's workspace, in tracekit's terms).

    ``inputs``: the values of the graph's inputs in this run (arguments and captured arrays,
    read-only), by input name (``t.graph.inputs``). ``blobs``: a dict that the python ops of
    one run share, empty at the start of each run. In the backward pass (``tk.grad``) the
    forward ops run again in the same run as the gradient ops, so a forward op can leave in
    ``blobs`` what its ``grad_f`` reads.

    Dangers (at your own risk, as caffe2 says): tracekit still treats the op as a pure function
    of its inputs. A python op whose results are unused is removed, two calls on the same
    inputs may be merged into one, and ops that do not depend on each other may run in any
    order; only the graph's inputs are readable (compiled code keeps intermediate values inside
    fused kernels, where no workspace can see them); the workspace is one run's, never shared
    between runs or threads; a write into ``inputs`` raises. The op is never fused into a
    compiled kernel, and a graph holding one runs on the general path of compiled code. On
    the cuda target ``inputs`` is empty (the arguments stay on the device).

    >>> import numpy as np, tracekit as tk
    >>> def scaled(x, ws):
    ...     ws.blobs["seen"] = float(ws.inputs["s"])
    ...     return x * ws.inputs["s"]
    >>> op = tk.python_op(scaled, pass_workspace=True)
    >>> t = tk.trace(lambda x, s: op(x) + 0 * s, np.ones(2), np.full((), 3.0))
    >>> t(np.ones(2), np.full((), 4.0))
    array([4., 4.])
    """

    def __init__(self, inputs=None):
        self.inputs = {k: _readonly(v) for k, v in (inputs or {}).items()}
        self.blobs: dict = {}

    def __repr__(self):
        return f"Workspace(inputs={sorted(self.inputs)}, blobs={sorted(self.blobs, key=str)})"


_RUN = threading.local()


def current_workspace() -> Workspace:
    """The workspace of the run in progress (a fresh one outside any run: a call on plain
    arrays, or while tracing)."""
    ws = getattr(_RUN, "workspace", None)
    return ws if ws is not None else Workspace()


@contextlib.contextmanager
def run_workspace(graph, values):
    """A workspace for one run of ``graph`` on ``values`` (one per input, in order)."""
    prev = getattr(_RUN, "workspace", None)
    _RUN.workspace = Workspace({v.name: x for v, x in zip(graph.inputs, values)})
    try:
        yield _RUN.workspace
    finally:
        _RUN.workspace = prev


@contextlib.contextmanager
def tracing_workspace(ctx):
    """The workspace of a trace in progress (one per trace: tracing is a run on the examples)."""
    ws = getattr(ctx, "workspace", None)
    if ws is None:
        ws = ctx.workspace = Workspace()
    for v, x in zip(ctx.inputs, ctx.input_values):
        if v.name not in ws.inputs:
            ws.inputs[v.name] = _readonly(x)
    prev, _RUN.workspace = getattr(_RUN, "workspace", None), ws
    try:
        yield ws
    finally:
        _RUN.workspace = prev


def uses_workspace(graph) -> bool:
    """Whether a python op of ``graph`` (or of a loop body in it) asks for the workspace."""
    for node in graph.nodes:
        if getattr(node.attrs.get("pyop"), "pass_workspace", False):
            return True
        if any(uses_workspace(a) for a in node.attrs.values() if type(a) is type(graph)):
            return True
    return False


# ---------------------------------------------------------------------- references
def _is_builder(x) -> bool:
    return isinstance(x, tuple)


def _check_fn(x, what, optional):
    if x is None and optional:
        return None
    if _is_builder(x):
        if len(x) != 3:
            raise TypeError(f"{what}: expected a builder tuple (func, args, kwargs), got {x!r}")
        func, args, kwargs = x
        if not callable(func) or not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
            raise TypeError(
                f"{what}: a builder tuple is (callable, tuple of args, dict of kwargs), got {x!r}"
            )
        return (func, tuple(args), dict(kwargs))
    if not callable(x):
        raise TypeError(f"{what} must be callable or a builder tuple, got {type(x).__name__}")
    return x


def _qualname(obj) -> tuple:
    mod = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qual is None and hasattr(obj, "py_func"):
        qual = obj.py_func.__qualname__
    return mod, qual


def _resolves(mod, qual, obj) -> bool:
    if not mod or not qual or "<" in qual:
        return False
    target = sys.modules.get(mod)
    for part in qual.split("."):
        target = getattr(target, part, None)
    return target is obj


def _ref(obj) -> dict:
    mod, qual = _qualname(obj)
    key = "ref" if _resolves(mod, qual, obj) else "local"
    return {key: f"{mod}:{qual}"}


def _args_spec(x):
    try:
        c = _canonical(x)
        json.dumps(c)
        return {"value": c}
    except TypeError:
        pass
    try:
        return {"pickle": base64.b64encode(pickle.dumps(x)).decode()}
    except Exception:
        return {"local": repr(x)[:80]}


def _fn_spec(x):
    if x is None:
        return None
    if _is_builder(x):
        func, args, kwargs = x
        return {"builder": _ref(func), "args": _args_spec(args), "kwargs": _args_spec(kwargs)}
    return _ref(x)


def _is_local(spec) -> bool:
    if spec is None:
        return False
    if "builder" in spec:
        return _is_local(spec["builder"]) or "local" in spec["args"] or "local" in spec["kwargs"]
    return "local" in spec


def _import(ref: str, op_name: str):
    mod, _, qual = ref.partition(":")
    try:
        target = importlib.import_module(mod)
        for part in qual.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise TraceError(f"python op {op_name!r}: cannot import {ref} ({e})") from e
    return target


def _load_fn(spec, op_name: str):
    if spec is None:
        return None
    if _is_local(spec):
        what = spec.get("local") or spec.get("builder", {}).get("local") or "its builder arguments"
        raise TraceError(
            f"python op {op_name!r} uses {what}, which is not importable (defined inside a "
            "function, a lambda, or unpicklable builder arguments), so it cannot be loaded "
            "outside the process that made it. Define it at module level."
        )
    if "builder" in spec:
        func = _import(spec["builder"]["ref"], op_name)
        return (func, tuple(_load_args(spec["args"])), dict(_load_args(spec["kwargs"])))
    return _import(spec["ref"], op_name)


def _load_args(spec):
    if "value" in spec:
        return _uncanonical(spec["value"])
    return pickle.loads(base64.b64decode(spec["pickle"]))


def _builder_key(builder):
    func, args, kwargs = builder
    spec = _fn_spec(builder)
    if _is_local(spec):
        return ("id", id(func), id(args), id(kwargs))
    return ("spec", json.dumps(spec, sort_keys=True))


def build(x):
    """The callable ``x`` stands for: a builder tuple is called once per process."""
    if not _is_builder(x):
        return x
    key = _builder_key(x)
    with _LOCK:
        hit = _BUILT.get(key)
        if hit is None:
            func, args, kwargs = x
            made = func(*args, **kwargs)
            if not callable(made):
                raise TypeError(
                    f"builder {getattr(func, '__name__', func)!r} returned "
                    f"{type(made).__name__}, not a callable"
                )
            hit = _BUILT[key] = (made, x)
        return hit[0]


# ---------------------------------------------------------------------- the op object
def _default_name(f, python_func_type) -> str:
    target = f[0] if _is_builder(f) else f
    if target is None:
        target = python_func_type
    name = getattr(target, "__name__", None) or type(target).__name__
    return "lambda" if name == "<lambda>" else name


def _indices(x, what):
    if x is None:
        return None
    try:
        out = tuple(int(i) for i in x)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, got {x!r}") from None
    if any(i < 0 for i in out):
        raise ValueError(f"{what} must be non-negative, got {x!r}")
    return out


def _outputs(res, name):
    """(tuple of arrays, whether f returned a tuple)."""
    was_tuple = isinstance(res, tuple | list)
    items = tuple(res) if was_tuple else (res,)
    outs = []
    for r in items:
        a = np.asarray(r)
        if a.dtype.kind not in "biufc":
            raise TraceError(
                f"python op {name!r} returned {type(r).__name__} (dtype {a.dtype}); python ops "
                "must return numeric arrays or scalars (or a tuple of them)"
            )
        outs.append(a)
    if not outs:
        raise TraceError(f"python op {name!r} returned no outputs")
    return tuple(outs), was_tuple


class PyOp:
    """A Python function as one opaque graph op (see :func:`python_op`).

    Attributes: ``name``; ``fn`` (the resolved forward callable: builder called, or the
    ``python_func_type`` instance's ``forward``); ``is_numba`` (``fn`` is a numba CPU
    dispatcher, callable inside compiled kernels).

    >>> import numpy as np, tracekit as tk
    >>> op = tk.python_op(np.sinh, name="my_sinh")
    >>> op.name, op(np.zeros(2))
    ('my_sinh', array([0., 0.]))
    """

    def __init__(
        self,
        f,
        grad_f=None,
        python_func_type=None,
        grad_output_indices=None,
        grad_input_indices=None,
        name=None,
        pass_workspace=False,
    ):
        if python_func_type is not None and not callable(python_func_type):
            raise TypeError("python_func_type must be a class (called as python_func_type(f))")
        self.f = _check_fn(f, "f", optional=python_func_type is not None)
        self.grad_f = _check_fn(grad_f, "grad_f", optional=True)
        self.python_func_type = python_func_type
        self.grad_output_indices = _indices(grad_output_indices, "grad_output_indices")
        self.grad_input_indices = _indices(grad_input_indices, "grad_input_indices")
        self.name = str(name) if name is not None else _default_name(f, python_func_type)
        self.pass_workspace = bool(pass_workspace)
        self.uid = f"{_PROCESS}-{next(_uids)}"
        _LIVE[self.uid] = self
        self._fn = None
        self._instance = None
        self._grad_ops: dict = {}

    # -- the callable
    @property
    def __name__(self):  # listings print callables by name
        return self.name

    @property
    def fn(self):
        """The forward callable (a builder tuple is called, once per process, on first use).

        >>> import numpy as np, tracekit as tk
        >>> def make_scaler(k):
        ...     return lambda x: x * k
        >>> op = tk.python_op((make_scaler, (3.0,), {}), name="scale")
        >>> op.fn(np.ones(2))
        array([3., 3.])
        """
        if self._fn is None:
            with _LOCK:
                if self._fn is None:
                    f = build(self.f) if self.f is not None else None
                    if self.python_func_type is not None:
                        self._instance = self.python_func_type(f)
                        self._fn = self._instance.forward
                    else:
                        self._fn = f
        return self._fn

    @property
    def instance(self):
        """The ``python_func_type`` instance (None without one).

        >>> import numpy as np, tracekit as tk
        >>> class Scale:
        ...     def __init__(self, f):
        ...         self.k = 3.0
        ...     def forward(self, x):
        ...         return x * self.k
        >>> op = tk.python_op(None, python_func_type=Scale, name="scale")
        >>> op.instance.k, op(np.ones(2))
        (3.0, array([3., 3.]))
        >>> tk.python_op(np.sinh).instance is None
        True
        """
        _ = self.fn
        return self._instance

    @property
    def is_numba(self) -> bool:
        """Whether ``fn`` is a numba CPU dispatcher or ``@numba.vectorize`` ufunc (compiled code
        calls it inside kernels).

        >>> import numba, numpy as np, tracekit as tk
        >>> tk.python_op(numba.njit(lambda x: x + 1.0), name="inc").is_numba
        True
        >>> tk.python_op(np.sinh).is_numba
        False
        """
        disp = sys.modules.get("numba.core.dispatcher")
        dufunc = sys.modules.get("numba.np.ufunc.dufunc")
        return (disp is not None and isinstance(self.fn, disp.Dispatcher)) or (
            dufunc is not None and isinstance(self.fn, dufunc.DUFunc)
        )

    @property
    def has_grad(self) -> bool:
        """Whether the op can be differentiated (a ``grad_f``, or a ``backward`` method).

        >>> import numpy as np, tracekit as tk
        >>> tk.python_op(np.sinh).has_grad
        False
        >>> tk.python_op(np.sinh, grad_f=lambda x, y, gy: gy * np.cosh(x)).has_grad
        True
        """
        return self.grad_f is not None or (
            self.python_func_type is not None and hasattr(self.python_func_type, "backward")
        )

    def run(self, *inputs):
        """Call the function on values: one array, or a tuple for several outputs.

        The inputs are passed read-only (a python op must not modify them).

        >>> import numpy as np, tracekit as tk
        >>> tk.python_op(lambda x: (x + 1, x * 2)).run(np.ones(2))
        (array([2., 2.]), array([2., 2.]))
        """
        outs, _ = _outputs(_invoke(self, self.fn, inputs), self.name)
        return outs[0] if len(outs) == 1 else outs

    def __call__(self, *args):
        """Inside traced code: run ``f`` on the example values and record one node; outside a
        trace: just call ``f``.

        >>> import numpy as np, tracekit as tk
        >>> op = tk.python_op(np.sinh)
        >>> t = tk.trace(lambda x: op(x) * 2, np.zeros(3))
        >>> [n.op for n in t.graph.nodes], op(np.zeros(2))
        (['python_op', 'multiply'], array([0., 0.]))
        """
        from . import tracer as T
        from .tracer.active import _state, current

        ctx = next((a._ctx for a in args if isinstance(a, T.TracedArray)), None) or T.current()
        if ctx is None:
            outs, was_tuple = _outputs(_invoke(self, self.fn, args), self.name)
            return outs if was_tuple else outs[0]
        if ctx.lazy:
            src = T.user_source(2)
            raise TraceError(
                f"{src} `{src.text}`: "
                * (src is not None)
                + f"python op {self.name!r} on dask arrays: tracing runs it to learn its "
                "results' shapes, which would compute the arrays here. Trace the function on "
                "NumPy arrays of the same shapes and compile that for dask: "
                "tk.compile(tk.trace(fn, *numpy_examples), target='dask')"
            )
        tins = [ctx.lift(a) for a in args]
        vals = [t._value if isinstance(t, T.TracedArray) else t for t in tins]
        prev, _state.ctx = current(), None  # f runs on plain values: np.zeros & co. too
        try:
            with tracing_workspace(ctx):
                outs, was_tuple = _outputs(
                    _invoke(self, self.fn, vals, T.user_source(2)), self.name
                )
        except TraceError:
            raise
        except Exception as e:
            src = T.user_source(2)
            e.add_note(f"tracekit: in python op {self.name!r}" + (f" at {src}" if src else ""))
            raise
        finally:
            _state.ctx = prev
        vars_ = [ctx.new_var(o.shape, o.dtype) for o in outs]
        ins = [t.ir_var if isinstance(t, T.TracedArray) else t for t in tins]
        ctx.record("python_op", ins, {"pyop": self, "name": self.name}, vars_)
        res = tuple(T.TracedArray(ctx, T.Buffer(v), (), o) for v, o in zip(vars_, outs))
        return res if was_tuple else res[0]

    # -- gradient
    def grad_op(self, n_in: int, n_out: int) -> GradPyOp:
        """The python op computing this op's input gradients (``<name>_grad``), for ``n_in``
        inputs and ``n_out`` outputs; called as ``grad_f`` is.

        >>> import numpy as np, tracekit as tk
        >>> op = tk.python_op(np.sinh, grad_f=lambda x, y, gy: gy * np.cosh(x))
        >>> g = op.grad_op(1, 1)
        >>> g.name, g(np.zeros(2), np.sinh(np.zeros(2)), np.ones(2))
        ('sinh_grad', array([1., 1.]))
        """
        key = (n_in, n_out)
        if key not in self._grad_ops:
            self._grad_ops[key] = GradPyOp(self, n_in, n_out)
        return self._grad_ops[key]

    def vjp(self, g, out, inputs):
        """Cotangents of ``inputs`` (traced): calls ``grad_f`` as a python op.

        ``g`` is the cotangent of ``out``, the op's result for ``inputs``.

        >>> import numpy as np, tracekit as tk
        >>> op = tk.python_op(np.sinh, grad_f=lambda x, y, gy: gy * np.cosh(x))
        >>> t = tk.trace(lambda x, g: op.vjp(g, op(x), (x,)), np.zeros(2), np.ones(2))
        >>> [n.attrs["name"] for n in t.graph.nodes], t(np.zeros(2), np.full(2, 2.0))
        (['sinh', 'sinh_grad'], (array([2., 2.]),))
        """
        if not self.has_grad:
            raise TraceError(
                f"python op {self.name!r} has no gradient: pass grad_f=... (or a "
                "python_func_type with a backward method) to tk.python_op to differentiate "
                "through it"
            )
        gs = g if isinstance(g, tuple) else (g,)
        outs = out if isinstance(out, tuple) else (out,)
        n_in, n_out = len(inputs), len(outs)
        sel_out = self.grad_output_indices or tuple(range(n_out))
        sel_in = self.grad_input_indices or tuple(range(n_in))
        for what, sel, n in (
            ("grad_output_indices", sel_out, n_out),
            ("grad_input_indices", sel_in, n_in),
        ):
            if any(i >= n for i in sel):
                raise TraceError(f"python op {self.name!r}: {what} {sel} out of range for {n}")
        grads = [gs[i] if gs[i] is not None else np.zeros_like(outs[i]) for i in sel_out]
        res = self.grad_op(n_in, n_out)(*inputs, *outs, *grads)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(sel_in):
            raise TraceError(
                f"the gradient of python op {self.name!r} returned {len(res)} arrays; expected "
                f"{len(sel_in)} (one per input"
                + (" in grad_input_indices)" if self.grad_input_indices else ")")
            )
        cots = [None] * n_in
        for i, r in zip(sel_in, res):
            cots[i] = r
        return tuple(cots)

    # -- serialisation: by reference
    def __tracekit_json__(self) -> dict:
        d = {
            "type": "python_op",
            "name": self.name,
            "f": _fn_spec(self.f),
            "grad_f": _fn_spec(self.grad_f),
            "python_func_type": _fn_spec(self.python_func_type),
            "grad_output_indices": list(self.grad_output_indices or []) or None,
            "grad_input_indices": list(self.grad_input_indices or []) or None,
        }
        if self.pass_workspace:
            d["pass_workspace"] = True
        if self._stateful() or any(_is_local(d[k]) for k in ("f", "grad_f", "python_func_type")):
            d["uid"] = self.uid  # this very object (its state) in this process
        return d

    def _stateful(self) -> bool:
        return self.python_func_type is not None

    def __reduce__(self):
        d = self.__tracekit_json__()
        for k in ("f", "grad_f", "python_func_type"):
            if _is_local(d[k]):
                raise pickle.PicklingError(
                    f"python op {self.name!r}: its {k} is not importable (defined inside a "
                    "function, or a lambda); define it at module level to pickle the op"
                )
        return (object_from_json, (d,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"python_op({self.name})"


class GradPyOp(PyOp):
    """The gradient of a python op, as a python op: ``(*inputs, *outputs, *output_grads) ->
    input grads`` (its outputs: one per selected input; ``None`` from ``grad_f`` means zero)."""

    def __init__(self, parent: PyOp, n_in: int, n_out: int):
        self.parent, self.n_in, self.n_out = parent, n_in, n_out
        self.f = self.grad_f = self.python_func_type = None
        self.grad_output_indices = self.grad_input_indices = None
        self.name = f"{parent.name}_grad"
        self.pass_workspace = parent.pass_workspace
        self.uid = f"{parent.uid}/grad{n_in},{n_out}"
        self._fn = None
        self._instance = None
        self._grad_ops = {}

    @property
    def fn(self):
        if self._fn is None:
            p = self.parent
            if p.grad_f is not None:
                self._fn = build(p.grad_f)
            else:
                inst, n_in, n_out = p.instance, self.n_in, self.n_out

                def backward(*a):
                    extra = a[-1:] if p.pass_workspace else ()
                    a = a[: len(a) - len(extra)]
                    return inst.backward(
                        list(a[:n_in]),
                        list(a[n_in : n_in + n_out]),
                        list(a[n_in + n_out :]),
                        *extra,
                    )

                backward.__name__ = self.name
                self._fn = backward
        return self._fn

    @property
    def has_grad(self) -> bool:
        return False

    def run(self, *inputs):
        res = _invoke(self, self.fn, inputs)
        items = list(res) if isinstance(res, tuple | list) else [res]
        sel = self.parent.grad_input_indices or range(self.n_in)
        for j, i in enumerate(sel):
            if j < len(items) and items[j] is None:
                items[j] = np.zeros_like(inputs[i], dtype=np.result_type(inputs[i], 0.0))
            elif j < len(items):
                try:
                    np.broadcast_shapes(np.shape(items[j]), np.shape(inputs[i]))
                except ValueError:
                    raise ValueError(
                        f"python op {self.parent.name!r}: its gradient function returned shape "
                        f"{np.shape(items[j])} for input {i}, which has shape {np.shape(inputs[i])}"
                    ) from None
        outs, _ = _outputs(tuple(items), self.name)
        return outs[0] if len(outs) == 1 else outs

    def __call__(self, *args):
        from . import tracer as T
        from .tracer.active import _state, current

        ctx = next((a._ctx for a in args if isinstance(a, T.TracedArray)), None) or T.current()
        if ctx is None:
            return self.run(*args)
        tins = [ctx.lift(a) for a in args]
        vals = [t._value if isinstance(t, T.TracedArray) else t for t in tins]
        prev, _state.ctx = current(), None  # grad_f runs on plain values
        try:
            with tracing_workspace(ctx):
                res = self.run(*vals)
        finally:
            _state.ctx = prev
        outs = res if isinstance(res, tuple) else (res,)
        vars_ = [ctx.new_var(np.shape(o), np.asarray(o).dtype) for o in outs]
        ins = [t.ir_var if isinstance(t, T.TracedArray) else t for t in tins]
        ctx.record("python_op", ins, {"pyop": self, "name": self.name}, vars_)
        out = tuple(T.TracedArray(ctx, T.Buffer(v), (), o) for v, o in zip(vars_, outs))
        return out if isinstance(res, tuple) else out[0]

    def vjp(self, g, out, inputs):
        raise TraceError(
            f"python op {self.name!r} (the gradient of {self.parent.name!r}) has no gradient: "
            "second derivatives through python ops are not supported"
        )

    def __tracekit_json__(self) -> dict:
        return {
            "type": "python_op_grad",
            "of": self.parent.__tracekit_json__(),
            "n_in": self.n_in,
            "n_out": self.n_out,
        }

    def __reduce__(self):
        self.parent.__reduce__()  # raises for non-importable functions
        return (object_from_json, (self.__tracekit_json__(),))


def object_from_json(d):
    """Rebuild an object that a graph's JSON holds by reference (``{"object": d}``)."""
    kind = d.get("type") if isinstance(d, dict) else None
    if kind == "python_op_grad":
        return object_from_json(d["of"]).grad_op(int(d["n_in"]), int(d["n_out"]))
    if kind != "python_op":
        raise ValueError(f"unknown object in graph JSON: {d!r}")
    uid = d.get("uid")
    live = _LIVE.get(uid) if uid else None
    if live is not None:
        return live
    name = d["name"]
    op = PyOp(
        _load_fn(d["f"], name),
        _load_fn(d["grad_f"], name),
        _load_fn(d["python_func_type"], name),
        d.get("grad_output_indices"),
        d.get("grad_input_indices"),
        name=name,
        pass_workspace=d.get("pass_workspace", False),
    )
    if uid:  # a stateful op of another process: this one keeps one copy, with its own state
        with _LOCK:
            op = _ADOPTED.setdefault(uid, op)
            _LIVE[uid] = op
    return op


register_json_loader("python_op", object_from_json)
register_json_loader("python_op_grad", object_from_json)


# ---------------------------------------------------------------------- the op
def python_op_from_spec(spec):
    """The python op (``tk.python_op``) a JSON spec describes, for generated code."""
    from tracekit.pyop import object_from_json

    return object_from_json(spec)


def _python_op_impl(*inputs, pyop, name=None):
    return pyop.run(*inputs)


def _python_op_code(a, at):
    return f"python_op_from_spec({at['pyop'].__tracekit_json__()!r}).run({', '.join(a)})"


register(
    Op(
        "python_op",
        "opaque",
        _python_op_impl,
        _python_op_code,
        helper=python_op_from_spec,
        doc="An opaque user function (tk.python_op); attrs: pyop (the PyOp), name.",
    )
)


@defvjp("python_op")
def _python_op_vjp(g, out, *inputs, pyop, name=None):
    """The user's grad_f."""
    return pyop.vjp(g, out, inputs)
