"""``tk.trace``: run a function once on example inputs and return a callable :class:`Traced`."""

from __future__ import annotations

import contextlib
import gc
import inspect
import linecache
import sys
import types
import warnings

import numpy as np

from . import (
    numba_interop,
    numpy_functions,  # noqa: F401  (registers the NumPy function handlers)
    pytree,
)
from . import tracer as T
from .errors import GuardError, TraceError, TracerWarning
from .interpret import check_guards, run  # noqa: F401  (check_guards: the backends import it here)
from .ir import Graph, InputSpec, Var, moves
from .loops import roll
from .loops.op import is_while
from .ops import OPS
from .pyop import run_workspace, uses_workspace
from .tracer.active import CREATION_NAMES, _state


def trace(
    fn,
    *example_args,
    strict: bool = False,
    keep_values: bool = False,
    name=None,
    loops="roll",
    max_iterations: int | None = None,
):
    """Trace ``fn`` on example inputs into a graph; returns a callable :class:`Traced`.

    Arrays, NumPy scalars and Python floats/complexes (also inside tuples, lists and dicts) are
    traced; other arguments (ints, bools, strings, objects) are static and baked in. Python
    control flow on traced values is baked in too, with a ``TracerWarning`` naming the line
    (``strict=True`` raises ``TraceError`` instead).

    Iterations of a Python loop that repeat the same computation are rolled into one ``loop``
    node (:mod:`tracekit.loops`); ``loops="unroll"`` keeps every iteration's nodes, and
    ``Traced.notes`` says which loops did not roll, and why. A ``while`` loop on a traced
    condition becomes a ``while_loop`` that tests its condition when it runs, so new data may
    need more or fewer iterations than the example did: at most ``max_iterations`` (default
    ten times the traced count, at least 1,000; more raises ``GuardError``). So does a ``for i
    in range(...)`` loop whose last statement is ``if <traced test>: break``, for at most the
    iterations its range has.

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: np.tanh(x) * 2.0, np.zeros(3, np.float32))
    >>> print(t.graph)  # doctest: +ELLIPSIS
    <lambda>(%x: f32[3]) {
      %0: f32[3] = tanh(%x)  # ...
      %1: f32[3] = multiply(%0, 2.0)  # ...
      return %1
    }
    >>> t(np.ones(3, np.float32))
    array([1.5231884, 1.5231884, 1.5231884], dtype=float32)
    """
    return _trace(fn, example_args, strict, keep_values, name, loops, max_iterations)[0]


def trace_answering(fn, *example_args) -> tuple[Traced, TracedAnswer | None]:
    """``trace(fn, *example_args)`` and the results the trace computed on the way: NumPy's
    own answer to this very call (None where they cannot stand for the interpreter's).

    >>> import numpy as np
    >>> x = np.ones(2)
    >>> t, answer = trace_answering(lambda x: np.exp(x) + 1.0, x)
    >>> t.answer(answer, (x,))
    array([3.71828183, 3.71828183])
    """
    return _trace(fn, example_args, answer=True)


def _trace(
    fn,
    example_args,
    strict=False,
    keep_values=False,
    name=None,
    loops="roll",
    max_iterations=None,
    answer=False,
):
    if loops not in ("roll", "unroll"):
        raise ValueError(f"tk.trace: loops must be 'roll' or 'unroll', not {loops!r}")
    if max_iterations is not None and (type(max_iterations) is not int or max_iterations < 1):
        raise ValueError(f"tk.trace: max_iterations must be an int >= 1, not {max_iterations!r}")
    numba_interop.install()  # numba functions called on traced arrays become python ops
    ctx = T.TraceContext(strict=strict)
    paths: list[str] = []
    leaves, in_tree = pytree.flatten(list(example_args), paths=paths)
    names = _leaf_names(fn, paths)
    args = []
    for leaf, nm in zip(leaves, names):
        weak = T.is_python_scalar(leaf)
        if isinstance(leaf, np.ndarray):
            if leaf.dtype.kind not in "biufc":
                raise TraceError(
                    f"argument {nm!r} has dtype {leaf.dtype}; tracekit traces bool, integer, "
                    "float and complex arrays"
                )
            _check_plain(leaf, f"argument {nm!r}")
            value = T.same_layout_copy(leaf)
        elif pytree.is_dask_array(leaf):  # traced lazily: values are dask arrays, never computed
            _check_dask(leaf, f"argument {nm!r}")
            ctx.lazy, value = True, leaf.copy()  # a new object: tracing's writes change it only
        else:
            value = leaf
        args.append(ctx.add_input(value, "arg", nm, name=nm, weak=weak))
    slots, generators = [], []
    ctx.capture_index = T.scan_captures(fn, slots=slots, generators=generators)
    ctx.stop_code = _call_user.__code__
    draws = T.RandomDraws(generators)
    with _rare_collections(), draws.watching():
        try:
            T.install_captures(ctx, slots)
            result = _call_user(ctx, fn, pytree.unflatten(in_tree, args))
        except BaseException:
            T.restore_captures(ctx, slots, record=False)
            raise
        T.restore_captures(ctx, slots)
        graph, out_tree, notes = _finish(
            ctx, result, len(args), name or _fn_name(fn), loops, max_iterations
        )
    ctx._last_where = None  # it holds a frame of the user's, with its locals
    traced = Traced(graph, in_tree, out_tree, ctx.capture_getters, leaves, fn=fn)
    traced.notes = [str(n) for n in notes] + _random_draws(draws.moved(), fn)
    if keep_values:
        traced.values = traced.run_values(*example_args)
    own = _traced_answer(ctx, result, graph, leaves, n_args=len(args)) if answer else None
    return traced, own


class TracedAnswer:
    """The results a trace computed for its example arguments (NumPy's own answer to that
    call), and the trace's copies of its inputs, which those results may share memory with."""

    __slots__ = ("results", "held")

    def __init__(self, results: list, held: list):
        self.results, self.held = results, held


def _traced_answer(ctx, result, graph, leaves, n_args) -> TracedAnswer | None:
    """The trace's results where the interpreter's answer to the same call is certainly the
    same values of the same types; None where it may not be: writes into arguments or
    captured arrays (the trace wrote into its copies), lazy values, python ops (run again, as
    the user's code they are), inputs whose copies have other strides than the arrays
    themselves, and 0-d results but those of an op on arrays (see ``_zero_d_as_interpreted``)."""
    if ctx.lazy or graph.writebacks or not _replayable(graph):
        return None
    originals = [(leaf, ctx.input_values[i]) for i, leaf in enumerate(leaves[:n_args])]
    originals += [(a, ctx.by_id[id(a)]._value) for a in ctx.keepalive]
    if any(isinstance(a, np.ndarray) and a.strides != c.strides for a, c in originals):
        return None
    out_leaves = pytree.flatten(result, extra_types=(T.TracedArray,), keep_order=True)[0]
    traced = [ctx.lift(x) for x in out_leaves if isinstance(x, T.TracedArray | np.ndarray)]
    results = [t._value for t in traced]
    outputs = graph.outputs[: graph.n_results]
    if len(results) != len(outputs) or not all(map(_same_kind, results, outputs)):
        return None
    if any(v.ndim == 0 and not v.weak for v in outputs):
        recorded = set(ctx.nodes)
        producers = {o: n for n in graph.nodes for o in n.outputs}
        for t, v in zip(traced, outputs):
            if v.ndim == 0 and not v.weak and not _zero_d_as_interpreted(t, v, producers, recorded):
                return None
    return TracedAnswer(results, list(ctx.input_values))


def _zero_d_as_interpreted(t, var, producers, recorded) -> bool:
    """Whether the trace's 0-d value ``t`` for ``var`` is of the interpreter's type (a NumPy
    scalar or a 0-d array: the producing op decides, and may decide by its inputs' types,
    which for 0-d values may differ between the trace and the interpreter): ``t`` is what the
    op recorded for ``var`` computed on arrays of one dimension or more, nothing written into
    since, and a NumPy scalar (a 0-d array here may be a copy of one written into, whose
    recorded op gives a scalar). An input returned as it is: its trace copy has the argument's
    own type."""
    if t._chain or t._buf.version or t._buf.var is not var:
        return False
    node = producers.get(var)
    if node is None:
        return t._buf.origin is not None
    return (
        isinstance(t._value, np.generic)
        and node in recorded
        and OPS[node.op].kind != "control"
        and all(x.ndim > 0 for x in node.var_inputs)
    )


def _replayable(graph, tables=frozenset()) -> bool:
    """No python op and no index moving with a loop, in ``graph`` or its loops' bodies, but
    the reads of a table's rows (``tables``: the graph's constants and their rows; a row of
    one holds the number the trace read in that iteration)."""
    tables = set(tables) | set(graph.constants)
    for n in graph.nodes:
        if OPS[n.op].kind == "opaque":
            return False
        if n.attrs and moves(n.attrs):
            if not OPS[n.op].view or n.inputs[0] not in tables:
                return False
            tables.update(n.outputs)
        for body in (a for a in n.attrs.values() if isinstance(a, Graph)):
            inner = {v for v, x in zip(body.inputs, n.inputs) if x in tables}
            if not _replayable(body, inner):
                return False
    return True


def _same_kind(value, var: Var) -> bool:
    """Whether ``value`` is of the kind the interpreter gives for ``var``: a Python scalar for a
    weak value, an array (or, 0-d, a NumPy scalar) of its shape and dtype otherwise."""
    if var.weak:
        return type(value) in (float, complex) and np.asarray(value).dtype == var.dtype
    if isinstance(value, np.generic):
        return var.ndim == 0 and value.dtype == var.dtype
    return type(value) is np.ndarray and value.shape == var.shape and value.dtype == var.dtype


# young objects between the cyclic garbage collector's passes while tracing: a trace keeps
# nearly every object it makes (nodes, values, their tuples), so each pass would walk objects
# that all survive; a loop's thousands of recorded ops spent a third of their time there
TRACING_GC_THRESHOLD = 100_000


@contextlib.contextmanager
def _rare_collections():
    """The garbage collector's first threshold raised to ``TRACING_GC_THRESHOLD`` for the
    duration (restored after; collections still happen, rarely)."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], TRACING_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _call_user(ctx, fn, args):
    prev = T.current()
    _state.ctx = ctx
    try:
        with creation_functions_traced(ctx), _no_compute(ctx.lazy):
            return fn(*args)
    finally:
        _state.ctx = prev


@contextlib.contextmanager
def _no_compute(lazy: bool):
    """While tracing dask arrays, computing one (Python reading a value: ``if x.max() > 0``,
    ``float(x)``) raises :class:`TraceError` naming the line: tracing builds the graph only."""
    if not lazy:
        yield
        return
    import dask

    def refuse(*args, **kwargs):
        src = T.user_source(2)
        where = f"{src} `{src.text}`: " if src else ""
        raise TraceError(
            f"{where}this reads the value of a dask array while tracing, which would compute "
            "it; tracekit traces dask arrays without computing them. Use np.where for "
            "data-dependent choices, or compute the value before calling the function"
        )

    with dask.config.set(scheduler=refuse):
        yield


def _check_dask(x, what: str):
    if np.dtype(x.dtype).kind not in "biufc":
        raise TraceError(
            f"{what} has dtype {x.dtype}; tracekit traces bool, integer, float and complex arrays"
        )
    if any(c != c for chunks in x.chunks for c in chunks):  # NaN: unknown chunk sizes
        raise ValueError(
            f"{what}: a dask array of unknown chunk sizes (shape {x.shape}); call "
            "x.compute_chunk_sizes() first"
        )


def _fn_name(fn) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name if name.isidentifier() or name == "<lambda>" else "fn"


def parameter_names(fn) -> list[str]:
    """The names of ``fn``'s positional parameters (none where it has no signature)."""
    return _positional_parameters(fn)[0]


def _positional_parameters(fn) -> tuple[list[str], str]:
    """The names of ``fn``'s positional parameters, and of its ``*args`` ("args" if none).
    A plain function's come from its code (``inspect.signature`` takes 6 us a trace)."""
    plain = type(fn) is types.FunctionType
    if plain and not hasattr(fn, "__wrapped__") and not hasattr(fn, "__signature__"):
        code = fn.__code__
        names, n = code.co_varnames, code.co_argcount
        star = names[n + code.co_kwonlyargcount] if code.co_flags & inspect.CO_VARARGS else "args"
        return list(names[:n]), star
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return [], "args"
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return pos, next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "args")


def _leaf_names(fn, paths):
    pos, star = _positional_parameters(fn)
    names, used = [], set()
    for p in paths:  # "[0]['w'][1]"
        head, _, rest = p[1:].partition("]")
        i = int(head)
        base = pos[i] if i < len(pos) else f"{star}{i - len(pos)}"
        nm = T.identifier(base + rest)
        while nm in used:
            nm += "_"
        used.add(nm)
        names.append(nm)
    return names


def _finish(ctx, result, n_args, name, loops="unroll", max_iterations=None):
    from .passes import dce

    out_leaves, out_tree = pytree.flatten(result, extra_types=(T.TracedArray,), keep_order=True)
    outputs = []
    for leaf in out_leaves:
        if isinstance(leaf, T.TracedArray | np.ndarray):
            outputs.append(ctx.lift(leaf).ir_var)
        else:  # a Python or NumPy scalar that does not depend on the inputs: a constant
            outputs.append(None)
    statics = [(i, leaf) for i, (leaf, o) in enumerate(zip(out_leaves, outputs)) if o is None]
    if statics:
        out_tree = _make_static(out_tree, out_leaves, outputs)
        outputs = [o for o in outputs if o is not None]
    writebacks = []
    for i, buf in enumerate(ctx.buffers):
        if ctx.specs[i].kind != "const" and buf.var is not ctx.inputs[i]:
            writebacks.append((len(outputs), i))
            outputs.append(buf.var)
        elif ctx.specs[i].kind == "const" and buf.var is not ctx.inputs[i]:
            pass  # a constant written in place only matters through the values it produced
    order = _input_order(ctx.specs)
    perm = {old: new for new, old in enumerate(order)}
    graph = Graph(
        inputs=[ctx.inputs[i] for i in order],
        nodes=ctx.nodes,
        outputs=outputs,
        specs=[ctx.specs[i] for i in order],
        constants=dict(ctx.constants),
        guards=list(ctx.guards) + ctx.layout_guards(),
        writebacks=[(o, perm[i]) for o, i in writebacks],
        name=name,
    )
    ctx.capture_getters = [ctx.capture_getters[i] for i in order]
    graph = dce(graph)
    notes = []
    if loops == "roll":
        graph, notes = roll(graph, ctx.stacks, max_iterations=max_iterations, breaks=ctx.breaks)
        added = len(graph.inputs) - len(ctx.capture_getters)  # tables of numbers, constants
        ctx.capture_getters += [None] * added
        _warn_while_loops(graph.nodes)
    graph, ctx.capture_getters = _drop_unused_inputs(graph, ctx.capture_getters)
    return graph.check(), out_tree, notes


def _overlap(a, b) -> bool:
    return isinstance(b, np.ndarray) and np.may_share_memory(a, b)


def _random_draws(generators: list, fn) -> list[str]:
    """A ``TracerWarning`` (and a note) where the traced function drew random numbers."""
    if not generators:
        return []
    said = (
        f"{_fn_name(fn)} drew random numbers from {', '.join(generators)} while it was traced: "
        "they are baked into the graph as constants, and every call reuses them. Draw them "
        "outside the function and pass them in as arguments."
    )
    code = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__code__", None)
    if code is None:
        warnings.warn(said, TracerWarning, stacklevel=4)
    else:
        warnings.warn_explicit(said, TracerWarning, code.co_filename, code.co_firstlineno)
    return [said]


def _warn_while_loops(nodes):
    """A ``TracerWarning`` for each while loop: its trip count now depends on the data."""
    for n in nodes:
        if is_while(n):
            src = n.source
            what = (
                "a loop whose break is tested when it runs"
                if src.text.startswith("for")
                else "a while loop whose condition is tested when it runs"
            )
            warnings.warn_explicit(
                f"{src}: `{src.text}` became {what} ({n.attrs['trips']} iterations when "
                f"traced, at most {n.attrs['max_iterations']}): the traced function follows "
                "new data that needs more or fewer iterations.",
                TracerWarning,
                src.file,
                src.line,
            )
        for body in (a for a in n.attrs.values() if isinstance(a, Graph)):
            _warn_while_loops(body.nodes)


def _drop_unused_inputs(graph, getters):
    """Remove captured arrays and constants that no live node reads and no write goes back
    into (arguments stay)."""
    used = {v for n in graph.nodes for v in n.var_inputs} | set(graph.outputs)
    used |= {g.var for g in graph.guards} | {graph.inputs[i] for _, i in graph.writebacks}
    keep = [
        i for i, (v, s) in enumerate(zip(graph.inputs, graph.specs)) if s.kind == "arg" or v in used
    ]
    if len(keep) == len(graph.inputs):
        return graph, getters
    new_index = {old: new for new, old in enumerate(keep)}
    graph = graph.replace(
        inputs=[graph.inputs[i] for i in keep],
        specs=[graph.specs[i] for i in keep],
        constants={v: a for v, a in graph.constants.items() if v in used},
        writebacks=[(o, new_index[i]) for o, i in graph.writebacks],
    )
    return graph, [getters[i] for i in keep]


def _input_order(specs):
    rank = {"arg": 0, "capture": 1, "const": 2}
    return sorted(range(len(specs)), key=lambda i: (rank[specs[i].kind], i))


def _make_static(tree, leaves, outputs):
    it = iter(zip(leaves, outputs))

    def walk(t):
        if isinstance(t, pytree.Leaf):
            leaf, out = next(it)
            return t if out is not None else ("static", leaf)
        kind, body = t
        if kind == "static":
            return t
        if kind is dict:
            return (dict, tuple((k, walk(v)) for k, v in body))
        return (kind, tuple(walk(e) for e in body))

    return walk(tree)


# ---------------------------------------------------------------------- creation functions
# each create op of the table under its NumPy name (``_create_<name>`` records it), and the
# NumPy functions recorded with them (zeros: full, identity: eye, array: a constant)
_CREATION = tuple(name for name, op in OPS.items() if op.kind == "create")
_CREATION += ("zeros", "ones", "empty", "identity", "array", "asarray", "asanyarray")
_CREATION += ("ascontiguousarray",)


CREATION_NAMES[:] = _CREATION


@contextlib.contextmanager
def creation_functions_traced(ctx):
    """While tracing, ``np.zeros`` & co. called from user code record creation nodes."""
    saved = {n: getattr(np, n) for n in _CREATION}
    try:
        for n in _CREATION:
            setattr(np, n, _creation_wrapper(n, saved[n]))
        yield
    finally:
        for n, f in saved.items():
            setattr(np, n, f)


def _creation_wrapper(name, original):
    builder = globals()[f"_create_{name}"]

    def wrapper(*args, **kwargs):
        ctx = T.current()
        caller = sys._getframe(1)
        if (
            ctx is None
            or not T.is_user_frame(caller)
            or kwargs.get("like") is not None
            or not _calls_by_name(caller, name)
        ):
            return original(*args, **kwargs)
        res = builder(ctx, *args, **kwargs)
        return original(*args, **kwargs) if res is NotImplemented else res

    wrapper.__name__ = name
    wrapper.__wrapped__ = original
    wrapper.tracekit_creation = True  # (tracer.active.numpy_as_is puts the original back)
    return wrapper


def _calls_by_name(frame, name) -> bool:
    """Whether the call running in the user's ``frame`` is of ``name`` (``np.zeros(...)``), not of
    a C function that calls it (``np.random.rand`` calls ``np.empty``, and gets an ndarray)."""
    code = frame.f_code
    if name not in code.co_names:
        return False
    try:
        lineno, _, col, _ = list(code.co_positions())[frame.f_lasti // 2]
    except (AttributeError, IndexError, ValueError):
        return True
    line = linecache.getline(code.co_filename, lineno) if lineno else ""
    if not line or col is None:
        return True  # no source to read: trust the name
    callee = line.encode()[col:].decode(errors="ignore").split("(", 1)[0]
    return callee.strip().rsplit(".", 1)[-1] == name


def _static(x):
    """A Python number from a possibly traced scalar (baked in with a guard)."""
    if isinstance(x, T.TracedArray):
        return x.item()
    return x


def _shape_arg(shape):
    if isinstance(shape, T.TracedArray) or np.ndim(shape) == 0:
        return (int(_static(shape)),)
    return tuple(int(_static(s)) for s in shape)


def _create_full_node(ctx, shape, fill, dtype):
    value = np.full(shape, fill, dtype=dtype)
    fill = np.asarray(fill).astype(value.dtype)[()]
    return ctx.emit("full", [], {"shape": shape, "fill_value": fill, "dtype": value.dtype})


def _create_zeros(ctx, shape, dtype=float, order="C", **kw):
    return _create_full_node(ctx, _shape_arg(shape), 0, np.dtype(dtype))


_create_empty = _create_zeros


def _create_ones(ctx, shape, dtype=None, order="C", **kw):
    return _create_full_node(ctx, _shape_arg(shape), 1, np.dtype(dtype or float))


def _create_full(ctx, shape, fill_value, dtype=None, order="C", **kw):
    shape = _shape_arg(shape)
    if isinstance(fill_value, T.TracedArray):
        res = T.broadcast_to(fill_value, shape)
        return T.astype(res, dtype) if dtype is not None else T.copy(res)
    dtype = np.dtype(dtype) if dtype is not None else np.asarray(fill_value).dtype
    if np.ndim(fill_value):
        return T.array_from(np.broadcast_to(np.asarray(fill_value, dtype), shape).copy())
    return _create_full_node(ctx, shape, fill_value, dtype)


def _create_arange(ctx, *args, dtype=None, **kw):
    if len(args) == 4:  # arange(start, stop, step, dtype)
        *args, dtype = args
    args = [_static(a) for a in args]
    value = np.arange(*args, dtype=dtype)
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (list(args) + [1])[:3]
    attrs = {"start": start, "stop": stop, "step": step, "dtype": value.dtype}
    return ctx.emit("arange", [], attrs)


def _create_linspace(ctx, start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    if retstep or axis != 0 or np.ndim(start) or np.ndim(stop):
        raise T.unsupported(
            type(
                "f", (), {"__name__": "linspace(retstep/axis/array bounds)", "__module__": "numpy"}
            )
        )
    start, stop = _static(start), _static(stop)
    dtype = np.linspace(start, stop, 2, dtype=dtype).dtype
    attrs = {
        "start": start,
        "stop": stop,
        "num": int(num),
        "endpoint": bool(endpoint),
        "dtype": dtype,
    }
    return ctx.emit("linspace", [], attrs)


def _create_eye(ctx, N, M=None, k=0, dtype=float, order="C", **kw):
    attrs = {"N": int(N), "M": None if M is None else int(M), "k": int(k), "dtype": np.dtype(dtype)}
    return ctx.emit("eye", [], attrs)


def _create_identity(ctx, n, dtype=None, **kw):
    return _create_eye(ctx, n, dtype=dtype or float)


def _create_array(ctx, obj, dtype=None, *, copy=True, ndmin=0, **kw):
    res = _as_traced_array(obj, dtype, copy)
    if res is NotImplemented or res.ndim >= ndmin:
        return res
    return T.reshape(res, (1,) * (ndmin - res.ndim) + res.shape)


def _create_asarray(ctx, a, dtype=None, order=None, **kw):
    return _as_traced_array(a, dtype, kw.get("copy"))


_create_asanyarray = _create_ascontiguousarray = _create_asarray


def _as_traced_array(obj, dtype, copy):
    """``np.array``/``np.asarray`` of traced values (NotImplemented: no traced value inside)."""
    if isinstance(obj, T.TracedArray):
        if dtype is not None and (np.dtype(dtype) != obj.dtype or obj.weak):
            return T.astype(obj, dtype, False)
        if obj.weak:
            return T.astype(obj, obj.dtype, False)
        return T.copy(obj) if copy else obj
    if isinstance(obj, list | tuple) and any(
        isinstance(e, T.TracedArray) for e in T.iter_deep(obj)
    ):
        return T.array_from(obj, dtype)
    return NotImplemented


# ---------------------------------------------------------------------- the traced callable
class Traced:
    """A traced function: callable (runs the reference interpreter), printable, renderable.

    Attributes: ``graph`` (the :class:`~tracekit.ir.Graph`), ``code`` (equivalent Python source),
    ``values`` (Var -> example value, when traced with ``keep_values=True``), ``history``
    (the optimisation passes applied: name, before, after).

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3))
    >>> t(np.zeros(3))
    array([2., 2., 2.])
    >>> [n.op for n in t.graph.nodes], t.graph.name
    (['exp', 'add'], '<lambda>')
    """

    def __init__(self, graph, in_tree, out_tree, capture_getters, example_leaves, fn=None):
        self.graph: Graph = graph
        self.in_tree, self.out_tree = in_tree, out_tree
        self.capture_getters = list(capture_getters)
        self.example_leaves = list(example_leaves)
        self.fn = fn
        self.values: dict | None = None
        self.history: list = []
        self.notes: list[str] = []  # loops that did not roll, and why

    @classmethod
    def from_graph(cls, graph: Graph) -> Traced:
        """A Traced running ``graph``: its arguments positional, in order; its results one value
        or a tuple. Tracing examples are zeros (for ``tk.vjp``). A graph that reads captured
        arrays (``self.w``) cannot be run alone: ``tk.save``/``tk.load`` keep their values.

        >>> import numpy as np, tracekit as tk
        >>> g = tk.Graph.from_json(tk.trace(lambda x: np.exp(x), np.ones(2)).graph.to_json())
        >>> tk.Traced.from_graph(g)(np.zeros(2))
        array([1., 1.])
        """
        captured = [s.label for s in graph.specs if s.kind == "capture"]
        if captured:
            raise TypeError(
                f"graph {graph.name!r} reads captured arrays ({', '.join(captured)}) whose values "
                "a Graph does not hold; save the Traced with tk.save (it keeps them) and load it "
                "with tk.load"
            )
        args = [v for v, s in zip(graph.inputs, graph.specs) if s.kind == "arg"]
        in_tree = (list, (pytree.LEAF,) * len(args))
        n = graph.n_results
        out_tree = pytree.LEAF if n == 1 else (tuple, (pytree.LEAF,) * n)
        examples = [np.zeros(v.shape, v.dtype)[()] for v in args]
        examples = [e.item() if v.weak else e for v, e in zip(args, examples)]
        return cls(graph, in_tree, out_tree, [None] * len(graph.inputs), examples)

    # -- calling
    def flatten_args(self, args) -> list:
        """Check call arguments against the trace; return one value per non-constant input.

        The values of captured arrays (read now) follow the arguments.

        >>> import numpy as np, tracekit as tk
        >>> w = np.full(2, 3.0)
        >>> t = tk.trace(lambda x: x * w, np.ones(2))
        >>> t.flatten_args((np.zeros(2),))
        [array([0., 0.]), array([3., 3.])]
        >>> t.flatten_args((np.zeros(5),))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: argument 'x': expected shape (2,) (f64[2]), got shape (5,); ...
        """
        leaves, tree = pytree.flatten(list(args))
        diff = pytree.describe_difference(self.in_tree, tree, names=parameter_names(self.fn))
        if diff:
            raise TypeError(f"{self.graph.name}: arguments differ from the trace: {diff}")
        values = []
        for var, spec, leaf in zip(self.graph.inputs, self.graph.specs, leaves):
            check_value(var, leaf, f"argument {spec.label!r}")
            values.append(leaf)
        return values + self.capture_values()

    def capture_values(self) -> list:
        """Current values of the captured arrays, checked against the trace.

        >>> import numpy as np, tracekit as tk
        >>> w = np.full(2, 3.0)
        >>> t = tk.trace(lambda x: x * w, np.ones(2))
        >>> w[:] = 4.0  # an in-place update is seen at the next call
        >>> t.capture_values(), t(np.ones(2))
        ([array([4., 4.])], array([4., 4.]))
        """
        values = []
        for var, spec, get in zip(self.graph.inputs, self.graph.specs, self.capture_getters):
            if spec.kind == "capture":
                value = get()
                check_value(var, value, f"captured array {spec.label}")
                values.append(value)
        return values

    def __call__(self, *args):
        """Run the graph on new arguments of the traced shapes and dtypes (the interpreter).

        Writes the traced function made into its inputs are made into these arguments too.

        >>> import numpy as np, tracekit as tk
        >>> def f(x, acc):
        ...     acc += x
        ...     return x * 2
        >>> t = tk.trace(f, np.ones(2), np.zeros(2))
        >>> acc = np.zeros(2)
        >>> t(np.array([1.0, 2.0]), acc), acc
        (array([2., 4.]), array([1., 2.]))
        """
        values = self.flatten_args(args)
        if self.graph.guards:
            check_layout_guards(self.graph, values)
        if uses_workspace(self.graph):
            with run_workspace(self.graph, values):
                outs = run(self.graph, values, drop_dead=True, check=True)
        else:
            outs = run(self.graph, values, drop_dead=True, check=True)
        return self.finish_call(values, outs)

    def finish_call(self, values, outs):
        """Write back in-place updates of inputs and rebuild the output structure.

        A result that shares memory with an input, a constant of the graph or an earlier result
        (the graph returns an input, a view of one, or one value twice) is copied first, so
        results never alias the caller's arrays, the graph's or each other, and never see the
        write-backs. ``values``: one per input of the graph (constants may follow).

        >>> import numpy as np, tracekit as tk
        >>> t = tk.trace(lambda x: (x, x), np.ones(2))
        >>> x = np.ones(2)
        >>> a, b = t.finish_call([x], [x, x])
        >>> np.shares_memory(a, x), np.shares_memory(a, b)
        (False, False)
        """
        held = [*values, *self.graph.constants.values()] if self.graph.constants else values
        results = detach(list(outs[: self.graph.n_results]), held)
        for _, ii in self.graph.writebacks:  # all checked before any is written
            target = values[ii]
            if not isinstance(target, np.ndarray) or not target.flags.writeable:
                raise ValueError(
                    f"the traced function writes into {self.graph.specs[ii].label!r}, "
                    "which is not a writeable NumPy array here"
                )
        targets = [values[ii] for _, ii in self.graph.writebacks]
        sources = [outs[oi] for oi, _ in self.graph.writebacks]
        # a value written into one input may be another input (``b[:] = a`` before ``a`` is
        # written): read every value before any write
        sources = [
            s.copy() if isinstance(s, np.ndarray) and any(_overlap(s, x) for x in targets) else s
            for s in sources
        ]
        for target, source in zip(targets, sources):
            np.copyto(target, source)
        return pytree.unflatten(self.out_tree, results)

    def answer(self, answer: TracedAnswer, args):
        """The results of a call on the very arguments traced (the same objects: ``args``),
        from the values the trace computed (``trace_answering``), as the interpreter would
        give them: the same structure and types, none sharing memory with what the trace
        keeps or with another. None where ``args`` are not those objects.

        >>> import numpy as np
        >>> x = np.ones(2)
        >>> t, answer = trace_answering(lambda x: (x * 2.0, x.sum()), x)
        >>> t.answer(answer, (x,))
        (array([2., 2.]), np.float64(2.0))
        >>> t.answer(answer, (np.ones(2),)) is None  # other arrays: not the call traced
        True
        """
        leaves = pytree.flatten(list(args))[0]
        if len(leaves) != len(self.example_leaves) or any(
            a is not b for a, b in zip(leaves, self.example_leaves)
        ):
            return None
        return self.finish_call([*leaves, *answer.held], answer.results)

    def run_values(self, *args) -> dict:
        """Every intermediate value (Var -> value) for these arguments.

        >>> import numpy as np, tracekit as tk
        >>> t = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(2))
        >>> {v.name: a for v, a in t.run_values(np.zeros(2)).items()}
        {'x': array([0., 0.]), '0': array([1., 1.]), '1': array([2., 2.])}
        """
        env = {}
        run(self.graph, self.flatten_args(args), env_out=env)
        return env

    # -- views of the graph
    @property
    def code(self) -> str:
        """Python source of a function equivalent to the graph (like torch.fx's ``.code``).

        >>> import numpy as np, tracekit as tk
        >>> def f(x):
        ...     return np.exp(x) + 1.0
        >>> print(tk.trace(f, np.ones(3)).code)  # doctest: +ELLIPSIS
        import numpy as np
        <BLANKLINE>
        def f(x):
            # %0: f64[3] = exp(%x)  # ...
            v0 = np.exp(x)
            # %1: f64[3] = add(%0, 1.0)  # ...
            v1 = np.add(v0, 1.0)
            return v1
        <BLANKLINE>
        """
        from .codegen_py import graph_to_python

        return graph_to_python(self.graph)

    def __repr__(self):
        return str(self.graph)

    def _repr_mimebundle_(self, include=None, exclude=None):
        from .render import mimebundle

        return mimebundle(self)

    def with_graph(self, graph, history_entry=None) -> Traced:
        """A Traced with the same calling convention and another (equivalent) graph.

        >>> import numpy as np, tracekit as tk
        >>> t = tk.trace(lambda x: np.exp(x) + 0.0, np.ones(2))
        >>> t2 = t.with_graph(t.graph.replace(name="renamed"))
        >>> t2.graph.name, t2(np.zeros(2))
        ('renamed', array([1., 1.]))
        """
        t = Traced(
            graph, self.in_tree, self.out_tree, self.capture_getters, self.example_leaves, self.fn
        )
        t.history = list(self.history) + ([history_entry] if history_entry else [])
        t.notes = list(self.notes)
        return t


def detach(results: list, inputs) -> list:
    """``results`` with each array that may share memory with an input array or an earlier
    result replaced by a copy."""
    held = [x for x in inputs if isinstance(x, np.ndarray)]
    for i, r in enumerate(results):
        if isinstance(r, np.ndarray):
            if any(np.may_share_memory(r, x) for x in held):
                r = results[i] = r.copy()
            held.append(r)
    return results


def _check_plain(value, what: str):
    """Masked arrays and np.matrix compute differently from ndarrays (masks, ``*`` is a matrix
    product): tracing them as ndarrays would answer differently from NumPy."""
    if isinstance(value, np.ma.MaskedArray):
        raise TypeError(f"{what}: masked arrays are not supported; pass .filled() or .data")
    if isinstance(value, np.matrix):
        raise TypeError(f"{what}: np.matrix is not supported; pass np.asarray(...)")


def check_value(var: Var, value, what: str):
    """Raise a clear TypeError/ValueError if ``value`` does not fit ``var``."""
    if var.weak:
        if not isinstance(value, float | complex | np.floating | np.complexfloating):
            raise TypeError(
                f"{what}: traced with a Python {'complex' if var.dtype.kind == 'c' else 'float'}, "
                f"got {type(value).__name__}"
            )
        return
    if isinstance(value, float | complex | int) and not isinstance(value, bool | np.generic):
        raise TypeError(
            f"{what}: traced with an array {var.type}, got a Python {type(value).__name__}"
        )
    shape, dtype = np.shape(value), getattr(value, "dtype", None)
    if dtype is None:
        raise TypeError(f"{what}: expected an array {var.type}, got {type(value).__name__}")
    _check_plain(value, what)
    if tuple(shape) != var.shape:
        raise ValueError(
            f"{what}: expected shape {var.shape} ({var.type}), got shape {tuple(shape)}; "
            "trace again (or use tk.jit, which retraces per shape)"
        )
    if np.dtype(dtype) != var.dtype:
        raise TypeError(f"{what}: expected dtype {var.dtype}, got {np.dtype(dtype)}")


def check_layout_guards(graph: Graph, values: list):
    """Raise GuardError if NumPy would make another view-or-copy choice for a reshape of one of
    this call's arrays (``values``, in ``graph.inputs`` order) than it made when traced; only
    reshapes followed by a write have such a guard (``TraceContext.layout_guards``)."""
    for g in graph.guards:
        if g.how == "layout":
            _check_layout(g, values[graph.inputs.index(g.var)])


def _check_layout(g, value):
    """Replay the views and the reshape on this call's array (views: nothing is copied unless
    the reshape itself copies) and compare NumPy's choice with the traced one."""
    traced_view, steps = g.value
    if not isinstance(value, np.ndarray):
        return  # device arrays: not checked
    v = value
    for op, attrs in steps:
        v = OPS[op].impl(v, **attrs)
    now_view = bool(np.may_share_memory(v, value))
    if now_view != traced_view:
        where = f" at {g.source} `{g.source.text}`" if g.source else ""
        said = {True: "a view", False: "a copy"}
        raise GuardError(
            f"reshape{where} made {said[traced_view]} of {g.var.name!r} when traced but makes "
            f"{said[now_view]} of this call's array (other strides), and the function writes "
            "into one of them afterwards: the graph would compute a wrong result. Trace again "
            "with an array of this layout, or use tk.jit, which retraces when a guard fails."
        )


def make_input_spec(kind, label):
    return InputSpec(kind, label)
