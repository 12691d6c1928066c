"""Reverse-mode autodiff from the op table's gradient rules.

The backward graph is made by tracing: a fresh trace whose inputs are the forward inputs and the
output cotangents replays the forward graph (so it has every forward value), then walks the
forward nodes in reverse and runs each node's gradient rule (``Op.vjp``, NumPy code in
:mod:`tracekit.ops`) on traced values. That trace records its ops from their types: a value is
computed only where a rule reads it (``TraceContext.deferring``), so tracing a gradient costs
NumPy's time on no array. The result is an ordinary :class:`~tracekit.Traced`: printable,
renderable, optimisable, compilable; forward values the backward does not need are removed by
dead-code elimination.

>>> import numpy as np, tracekit as tk
>>> t = tk.trace(lambda x: np.sum(np.sin(x)), np.zeros(3))
>>> b = tk.vjp(t)
>>> [n.op for n in b.graph.nodes]
['broadcast_to', 'cos', 'multiply']
>>> b(np.zeros(3), np.ones(()))
(array([1., 1., 1.]),)
>>> tk.grad(lambda x: np.sum(x ** 3))(np.arange(3.0))
array([ 0.,  3., 12.])

Conventions: cotangents flow only through float and complex values (integer and bool values
and non-differentiable ops carry none); gradients of complex inputs follow JAX (see the rules
section of ``tracekit/ops.py``); in-place writes are differentiated through their functional
updates; writes into inputs (write-backs) are not differentiated.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import pytree
from . import tracer as T
from .errors import GuardError, TraceError
from .ir import Graph, Guard, Var
from .loops import grad as loop_grad
from .loops import unroll
from .loops.unroll import fixed_trips
from .ops import NON_DIFFERENTIABLE, OPS, Scattered, sum_to
from .passes import dce
from .pyop import tracing_workspace
from .saving import as_traced
from .traced import Traced, check_value, trace


def _inexact(v) -> bool:
    return np.dtype(v.dtype).kind in "fc"


class BackwardTraced(Traced):
    """A backward graph: a :class:`Traced` that also knows where it came from.

    ``forward`` is the forward Traced; ``links`` maps a backward Var name to the forward Var
    name it came from (a replayed forward value, a cotangent of that value, or the result of
    that value's gradient rule), which the renderer draws as dashed edges.
    """

    forward: Traced = None
    links: dict = None
    gradient_of: tuple = ()  # per output: the forward Var name it is the value or gradient of

    def with_graph(self, graph, history_entry=None) -> BackwardTraced:
        t = super().with_graph(graph, history_entry)
        b = BackwardTraced(
            t.graph, t.in_tree, t.out_tree, t.capture_getters, t.example_leaves, t.fn
        )
        b.history, b.forward, b.gradient_of = t.history, self.forward, self.gradient_of
        names = {v.name for v in graph.inputs} | {o.name for n in graph.nodes for o in n.outputs}
        b.links = {k: v for k, v in self.links.items() if k in names}
        return b


class _Where(tuple):
    """(source, scope), and the forward Var a view taken there is linked to when it is read."""

    link: str | None = None


class _BackwardContext(T.TraceContext):
    """A trace context whose nodes take the source, scope and names we give them."""

    def __init__(self, taken):
        super().__init__(strict=False)
        self._defer = True  # built from types: values only where a rule reads them
        self.at = (None, ())
        self.pending: list = []
        self.taken = set(taken)
        self.link_to = None
        self.links: dict = {}
        self.generated: set = set()
        self._k = 0

    def where(self, start=None):  # ours, wherever the frames are
        at = _Where(self.at)
        at.link = self.link_to
        return at

    def emit_var(self, op, inputs, attrs, like, where=None):
        """A view read later (under another node's rule) keeps the link of where it was taken."""
        if not isinstance(where, _Where):
            return super().emit_var(op, inputs, attrs, like, where)
        now, self.link_to = self.link_to, where.link
        try:
            return super().emit_var(op, inputs, attrs, like, where)
        finally:
            self.link_to = now

    def emit(self, op, inputs, attrs=None, **options):
        if OPS[op].kind != "opaque":
            return super().emit(op, inputs, attrs, **options)
        with tracing_workspace(self):  # a python op replayed here: the trace is its run
            return super().emit(op, inputs, attrs, **options)

    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        return name

    def new_var(self, shape, dtype, weak=False, name=None) -> Var:
        if name is None and self.pending:
            name = self.pending.pop(0)
        if name is None:
            while f"g{self._k}" in self.taken:
                self._k += 1
            name = f"g{self._k}"
            self.generated.add(name)
        self.taken.add(name)
        if self.link_to is not None:
            self.links[name] = self.link_to
        return Var(name, shape, dtype, weak)


def _literal(ctx, x, consts):
    """A node's literal input, as the backward trace takes it (arrays become constants)."""
    if isinstance(x, np.ndarray):
        if id(x) not in consts:
            consts[id(x)] = ctx.add_input(np.array(x), "const", "const")
        return consts[id(x)]
    return x


def _fit(c, v: Var, ref):
    """Cotangent ``c`` summed over broadcast axes and cast to ``v``'s shape and dtype."""
    if isinstance(c, Scattered):
        return c.cast(lambda x: _cast(x, v.dtype))  # (of ``v``'s shape)
    if not isinstance(c, T.TracedArray):
        c = ref._ctx.lift(np.asarray(c))
    if c.shape != v.shape:
        c = sum_to(c, v.shape)
    return _cast(c, v.dtype)


def _cast(c, dtype):
    if c.dtype.kind == "c" and dtype.kind != "c":
        c = np.real(c)
    if c.dtype != dtype:
        c = T.astype(c, dtype, False)
    return c


# A cotangent that is zero but in a slice is added into another at its slice alone where the
# slice is at most this part of the array (a host read-add-store of the slice); a larger one is
# added as a whole array (a kernel reading the block of zeros as a pad).
SCATTER_AT_MOST = 0.125


def _sum(a, b):
    """Two cotangents of one value added: a :class:`~tracekit.ops.Scattered` one of a small
    slice (a row ``a[t]`` of a loop) into the other at its slice alone, one of a large slice
    (the shifted slices of a stencil) as a whole array, which the CPU target reads as a pad
    inside the kernel adding them (``backends/pads.py``)."""
    scattered = [c for c in (b, a) if isinstance(c, Scattered) and _worth_scattering(c)]
    if not scattered:
        return _dense(a) + _dense(b)
    s = scattered[0]
    return s.added_to(_dense(a if s is b else b))


def _worth_scattering(c) -> bool:
    return bool(c.arrays) or c.value.size <= SCATTER_AT_MOST * math.prod(c.shape)


def _dense(c):
    """Cotangent ``c`` as an array (None stays None)."""
    return c.dense() if isinstance(c, Scattered) else c


def _zeros(ctx, v: Var):
    z = np.zeros((), v.dtype)[()]
    return ctx.emit("full", [], {"shape": v.shape, "fill_value": z, "dtype": v.dtype})


def _leaf_args(graph: Graph) -> list:
    return [i for i, s in enumerate(graph.specs) if s.kind == "arg"]


def backward(
    t: Traced,
    wrt=None,
    *,
    seed: bool = False,
    with_value: bool = False,
    checkpoint=None,
    totals=(),
):
    """The backward Traced of ``t`` (see :func:`vjp`).

    ``wrt``: positions of the argument leaves to differentiate (default: every float or complex
    one). ``seed``: the output cotangent is 1 (a constant), not an input (``tk.grad``).
    ``with_value``: the forward results come first in the outputs, then the gradients.
    ``checkpoint``: loops save their state every that many iterations (see
    :mod:`tracekit.loops.grad`) instead of their residuals in every iteration.
    ``totals``: positions of ``wrt`` whose gradient is added to a running total, an input after
    the output cotangents (a reverse loop's sum over its iterations): a gradient that is zero
    but in a slice adds into the total there alone.
    """
    # a loop's gradient is a reverse loop (tracekit.loops.grad), or it is unrolled; a while
    # loop is first the loop of its traced count (its condition guarded)
    g = unroll(fixed_trips(t.graph), which=lambda n: not loop_grad.reversible(n))
    recompute = set()  # loops whose reverse replays their body from the saved state
    if checkpoint is not None and checkpoint > 1:
        g, recompute = loop_grad.segmented(g, checkpoint)

    def body_backward(body_traced, body_wrt, body_totals):
        return backward(body_traced, body_wrt, checkpoint=checkpoint, totals=body_totals)

    arg_pos = _leaf_args(g)
    if wrt is None:
        wrt = [k for k, i in enumerate(arg_pos) if _inexact(g.inputs[i])]
    wrt = list(wrt)
    wrt_vars = {g.inputs[arg_pos[k]] for k in wrt}
    taken = {v.name for v in g.inputs} | {o.name for n in g.nodes for o in n.outputs}
    ctx = _BackwardContext(taken)
    env: dict = {}
    getters: dict = {}

    # inputs: the forward's own (args, captures, constants), same names
    for i, (v, s) in enumerate(zip(g.inputs, g.specs)):
        if s.kind == "arg":
            value = t.example_leaves[i]
        elif s.kind == "capture":
            value = t.capture_getters[i]()
            if isinstance(value, T.TracedArray):  # an enclosing trace's (a grad inside a jit)
                value = value._value
        else:
            value = g.constants[v]
        if isinstance(value, np.ndarray):
            value = np.array(value, copy=True)
        ctx.link_to = v.name
        env[v] = ctx.add_input(value, s.kind, s.label, None, name=v.name, weak=v.weak)
        getters[v] = t.capture_getters[i] if s.kind == "capture" else None

    # replay the forward graph
    consts: dict = {}
    saved: dict = {}  # a loop -> the states it saved for its reverse loop
    for node in g.nodes:
        ctx.at = (node.source, node.scope)
        ctx.pending = [o.name for o in node.outputs]
        ctx.link_to = None
        ins = [env[x] if isinstance(x, Var) else _literal(ctx, x, consts) for x in node.inputs]
        if OPS[node.op].kind == "control":
            res, saved[node] = loop_grad.replay(
                ctx, node, ins, body_backward, checkpoint == 1 or node in recompute
            )
        else:
            attrs, n_out = dict(node.attrs), len(node.outputs)
            res = ctx.emit(node.op, ins, attrs, n_out=n_out, weak=node.out.weak)
            res = [res] if len(node.outputs) == 1 else list(res)
        for o, r in zip(node.outputs, res):
            ctx.links[o.name] = o.name
            if (r.shape, r.dtype) != (o.shape, o.dtype):
                raise TraceError(
                    f"replaying {node} for the backward pass gave {r.ir_var.type}, not {o.type}"
                )
            env[o] = r

    # what depends on the variables we differentiate
    active = set(wrt_vars)
    for node in g.nodes:
        if node.op not in NON_DIFFERENTIABLE and any(x in active for x in node.var_inputs):
            active.update(o for o in node.outputs if _inexact(o))

    # output cotangents
    results = g.outputs[: g.n_results]
    ct: dict = {}
    ct_args = []

    def accumulate(v, c):
        c = _fit(c, v, env[v])
        ct[v] = c if v not in ct else _sum(ct[v], c)

    ctx.at = (None, ())
    for o in results:
        ctx.link_to = o.name
        if seed:
            c = ctx.emit(
                "full", [], {"shape": o.shape, "fill_value": o.dtype.type(1), "dtype": o.dtype}
            )
        else:
            name = ctx.fresh(f"d{o.name}")
            c = ctx.add_input(np.ones(o.shape, o.dtype), "arg", name, name=name)
            ct_args.append(c)
        if o in active:
            accumulate(o, c)
    for k in totals:
        v = g.inputs[arg_pos[k]]
        ctx.link_to = v.name
        name = ctx.fresh(f"sum_d{v.name}")
        total = ctx.add_input(np.zeros(v.shape, v.dtype), "arg", name, name=name)
        ct_args.append(total)
        accumulate(v, total)

    # reverse sweep
    for node in reversed(g.nodes):
        gs = [ct.get(o) for o in node.outputs]
        if all(x is None for x in gs) or node.op in NON_DIFFERENTIABLE:
            continue
        need = [isinstance(x, Var) and x in active for x in node.inputs]
        if not any(need):
            continue
        rule = OPS[node.op].vjp
        where = f" at {node.source} `{node.source.text}`" if node.source else ""
        if node in saved:
            running = _running_totals(node, saved[node], ct)
            rule = functools.partial(_loop_rule, node, saved[node], ctx, running)
        if rule is None:
            raise TraceError(f"op {node.op!r} has no gradient rule (in: {node}){where}")
        ctx.at = (node.source, node.scope)
        ctx.link_to = node.out.name
        gs = [_dense(x) for x in gs]
        ins = [env[x] if isinstance(x, Var) else _literal(ctx, x, consts) for x in node.inputs]
        outs = [env[o] for o in node.outputs]
        single = len(node.outputs) == 1
        try:
            cots = rule(
                gs[0] if single else tuple(gs),
                outs[0] if single else tuple(outs),
                *ins,
                **node.attrs,
            )
        except Exception as e:
            e.add_note(f"tracekit: in the gradient of {node.op} (node %{node.out.name}){where}")
            raise
        if len(cots) != len(node.inputs):
            raise TraceError(f"gradient rule of {node.op!r} returned {len(cots)} cotangents")
        for x, c, nd in zip(node.inputs, cots, need):
            if nd and c is not None:
                accumulate(x, c)

    # outputs: the forward results (with_value), then one gradient per wrt leaf
    ctx.at = (None, ())
    outputs = [env[o].ir_var for o in results] if with_value else []
    gradient_of = [o.name for o in results] if with_value else []
    for k in wrt:
        v = g.inputs[arg_pos[k]]
        ctx.link_to = v.name
        c = _dense(ct.get(v))
        outputs.append((c if c is not None else _zeros(ctx, v)).ir_var)
        gradient_of.append(v.name)

    guards = [Guard(env[gd.var].ir_var, gd.value, gd.how, gd.source) for gd in g.guards]
    rank = {"arg": 0, "capture": 1, "const": 2}
    order = sorted(range(len(ctx.inputs)), key=lambda i: (rank[ctx.specs[i].kind], i))
    inputs = [ctx.inputs[i] for i in order]
    by_var = {env[v].ir_var: getters[v] for v in g.inputs}
    graph = Graph(
        inputs=inputs,
        nodes=ctx.nodes,
        outputs=outputs,
        specs=[ctx.specs[i] for i in order],
        constants=dict(ctx.constants),
        guards=guards,
        writebacks=[],
        name=f"{g.name}_backward" if g.name.isidentifier() else "backward",
    )
    graph = dce(graph)
    graph = graph.replace(nodes=_stores_late(graph.nodes))
    graph, rename = _renumber(graph, ctx.generated, ctx.taken - ctx.generated)
    graph.check()

    # calling convention: (*primal args, *one cotangent per result) -> gradients
    body = t.in_tree[1]
    counter = iter(range(len(arg_pos)))
    wrt_set = set(wrt)

    def grad_tree(tree):
        if isinstance(tree, pytree.Leaf):
            return tree if next(counter) in wrt_set else ("static", None)
        kind, items = tree
        if kind == "static":
            return ("static", None)
        if kind is dict:
            return (dict, tuple((k, grad_tree(e)) for k, e in items))
        return (kind, tuple(grad_tree(e) for e in items))

    grads_tree = (tuple, tuple(grad_tree(e) for e in body))
    in_tree = (t.in_tree[0], tuple(body) + (pytree.LEAF,) * len(ct_args))
    out_tree = (tuple, (t.out_tree, grads_tree)) if with_value else grads_tree
    examples = list(t.example_leaves[: len(arg_pos)]) + [c._value for c in ct_args]
    b = BackwardTraced(graph, in_tree, out_tree, [by_var.get(v) for v in inputs], examples)
    b.forward, b.gradient_of = t, tuple(gradient_of)
    names = {v.name for v in graph.inputs} | {o.name for n in graph.nodes for o in n.outputs}
    links = {
        rename.get(k, k): v
        for k, v in ctx.links.items()
        if k in rename or k not in ctx.generated  # (dropped gradient Vars kept their old names)
    }
    b.links = {k: v for k, v in links.items() if k in names}
    return b


def _loop_rule(node, saved, ctx, running, g, outs, *ins, **attrs):
    """The gradient rule of a loop, called as the op table's rules are."""
    gs = list(g) if len(node.outputs) > 1 else [g]
    return loop_grad.loop_vjp(ctx, node, gs, list(ins), saved, running)


def _running_totals(node, saved, ct: dict) -> dict:
    """``{position: cotangent}``: the cotangents that loop ``node``'s invariants have so far
    (taken out of ``ct``), from which its reverse loop's sums start (their gradients then
    include them): a loop inside a reverse loop adds into its total instead of into zeros
    added to it after."""
    running = {}
    for i in saved.totals:
        x = node.inputs[i]
        if isinstance(x, Var) and x in ct and node.inputs.index(x) == i and not x.weak:
            running[i] = _dense(ct.pop(x))
    return running


def _stores_late(nodes: list) -> list:
    """``nodes`` with each ``store`` (a functionalised write, as the gradient of ``x[t] = v``
    clearing ``g[t]``) moved to just before the first node reading its result: after the reads
    of the old contents of its base (``g[t]``, the gradient of ``v``), so that a runner writes
    into the base's buffer instead of a copy of it."""
    placed, waiting = [], {}

    def place(n):
        for x in n.var_inputs:
            if x in waiting:
                place(waiting.pop(x))
        placed.append(n)

    for n in nodes:
        if OPS[n.op].store:
            waiting.update((o, n) for o in n.outputs)
        else:
            place(n)
    while waiting:
        place(waiting.pop(next(iter(waiting))))
    return placed


def _renumber(graph: Graph, generated: set, reserved: set):
    """Name the gradient Vars g0, g1, ... in node order (they were named in creation order)."""
    new: dict = {}
    rename: dict = {}
    k = 0
    for n in graph.nodes:
        for o in n.outputs:
            if o.name in generated:
                while f"g{k}" in reserved:
                    k += 1
                new[o] = Var(f"g{k}", o.shape, o.dtype, o.weak)
                rename[o.name] = f"g{k}"
                k += 1
    if not new:
        return graph, rename

    def m(x):
        return new.get(x, x) if isinstance(x, Var) else x

    nodes = [
        n.replace(inputs=tuple(m(x) for x in n.inputs), outputs=tuple(m(o) for o in n.outputs))
        for n in graph.nodes
    ]
    guards = [Guard(m(gd.var), gd.value, gd.how, gd.source) for gd in graph.guards]
    return graph.replace(nodes=nodes, outputs=[m(o) for o in graph.outputs], guards=guards), rename


def vjp(t: Traced, checkpoint: int | None = None) -> BackwardTraced:
    """The backward graph of ``t`` as a Traced.

    Its inputs are ``t``'s arguments followed by one cotangent per result of ``t`` (in the
    order of the flattened results); it returns a tuple with one gradient per argument of
    ``t`` (same structure; ``None`` for integer and static arguments). It also has
    ``.forward`` (``t``) and ``.links`` (backward Var name -> forward Var name).

    >>> import numpy as np, tracekit as tk
    >>> b = tk.vjp(tk.trace(lambda x, y: x * y, np.ones(2), np.full(2, 3.0)))
    >>> b(np.ones(2), np.full(2, 3.0), np.ones(2))
    (array([3., 3.]), array([1., 1.]))
    """
    return backward(as_traced(t, "tk.vjp"), checkpoint=_checkpoint(checkpoint))


def _checkpoint(size):
    if size is not None and (type(size) is not int or size < 1):
        raise ValueError(f"tk.grad: checkpoint must be an int >= 1 (iterations), not {size!r}")
    return size


# ---------------------------------------------------------------------- grad / value_and_grad
class _Cache:
    """Backward graphs per call signature (slots: hidden from the tracer's capture scan)."""

    __slots__ = ("entries", "traces")

    def __init__(self):
        self.entries: dict = {}
        self.traces = 0


def _signature(leaves):
    return tuple((type(x).__name__, np.shape(x), str(getattr(x, "dtype", ""))) for x in leaves)


def _fn_label(fn) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def _build(fn, nums, args, checkpoint=None):
    for i in nums:
        if not -len(args) <= i < len(args):
            raise TypeError(
                f"tk.grad: argnums {i} is out of range: {_fn_label(fn)} was called with "
                f"{len(args)} positional arguments"
            )
    nums = tuple(i % len(args) for i in nums)
    wrt = []
    for i in nums:
        before = len(pytree.flatten(list(args[:i]))[0])
        leaves = pytree.flatten(args[i])[0]
        if not leaves:
            raise TypeError(
                f"tk.grad: argument {i} of {_fn_label(fn)} is {args[i]!r}, a static value "
                "(tracekit differentiates float and complex arrays and Python floats)"
            )
        for k, leaf in enumerate(leaves):
            dtype = np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
            if dtype.kind not in "fc":  # (a dask array's dtype, without computing it)
                raise TypeError(
                    f"tk.grad: argument {i} of {_fn_label(fn)} has dtype "
                    f"{dtype}; gradients are defined for float and complex "
                    "inputs only (cast it with .astype(float), or leave it out of argnums)"
                )
            wrt.append(before + k)
    t = trace(fn, *args)
    g = t.graph
    if g.n_results == 1 and isinstance(t.out_tree, pytree.Leaf):
        o = g.outputs[0]
        if o.shape != () or o.dtype.kind != "f":
            raise TypeError(
                f"tk.grad: {_fn_label(fn)} must return a real scalar, but it returned "
                f"{o.type}: reduce it to a scalar (e.g. .sum()), or use tk.vjp for "
                "non-scalar outputs"
            )
    elif not (g.n_results == 0 and t.out_tree[0] == "static"):
        raise TypeError(
            f"tk.grad: {_fn_label(fn)} must return a real scalar, but it returned "
            f"{g.n_results} arrays (in a tuple, list or dict); use tk.vjp for several outputs"
        )
    return backward(t, wrt, seed=True, with_value=True, checkpoint=checkpoint), nums


def _captures_fit(b: Traced) -> bool:
    for var, spec, get in zip(b.graph.inputs, b.graph.specs, b.capture_getters):
        if spec.kind == "capture":
            try:
                check_value(var, get(), "")
            except (TypeError, ValueError):
                return False
    return True


def _select(grads, nums, single):
    picked = tuple(grads[i] for i in nums)
    return picked[0] if single else picked


def _has_traced(leaves) -> bool:
    return any(isinstance(x, T.TracedArray) for x in leaves)


def value_and_grad(fn, argnums=0, checkpoint: int | None = None):
    """``fn``'s value and its gradient with respect to ``args[argnums]``.

    ``fn`` must return a real scalar. ``argnums`` is an int (the gradient has the structure of
    that argument: an array, or a tuple/list/dict of arrays) or a tuple of ints (a tuple of
    gradients). The backward graph is traced once per call signature (shapes, dtypes, static
    arguments) and cached; a call whose data takes another branch than the traced one (a guard
    fails) is traced again. Calling it inside a trace records the backward computation in that
    trace, so ``tk.grad(tk.grad(f))`` works.

    A loop's gradient is a reverse loop over the states its forward iterations saved;
    ``checkpoint=S`` saves one state per ``S`` iterations and recomputes the others (memory of
    ``trips / S + S`` states for one more forward pass; see :mod:`tracekit.loops.grad`).
    """
    checkpoint = _checkpoint(checkpoint)
    single = isinstance(argnums, int | np.integer)
    nums = (int(argnums),) if single else tuple(int(i) for i in argnums)
    if not nums:
        raise ValueError("tk.grad: argnums is empty")
    cache = _Cache()

    def lookup(args):
        leaves, tree = pytree.flatten(list(args))
        key = _signature(leaves)
        for entry_tree, b, picked in cache.entries.get(key, ()):
            if pytree.describe_difference(entry_tree, tree) is None and _captures_fit(b):
                return b, picked
        return None

    def rebuild(args):
        leaves, tree = pytree.flatten(list(args))
        b, picked = _build(fn, nums, args, checkpoint)
        cache.traces += 1
        lst = cache.entries.setdefault(_signature(leaves), [])
        lst[:] = [e for e in lst if pytree.describe_difference(e[0], tree) is not None]
        lst.append((tree, b, picked))
        return b, picked

    @functools.wraps(fn)
    def value_and_grad_fn(*args):
        leaves = pytree.flatten(list(args), extra_types=(T.TracedArray,))[0]
        if _has_traced(leaves):
            return _inline_value_and_grad(fn, nums, single, args, checkpoint)
        hit = lookup(args)
        b, picked = hit if hit is not None else rebuild(args)
        try:
            value, grads = b(*args)
        except GuardError:
            b, picked = rebuild(args)
            value, grads = b(*args)
        return value, _select(grads, picked, single)

    value_and_grad_fn.cache = cache
    return value_and_grad_fn


def grad(fn, argnums=0, checkpoint: int | None = None):
    """``d fn / d args[argnums]`` as a function; ``fn`` must return a real scalar.

    See :func:`value_and_grad` for ``argnums``, caching and higher order.

    >>> import numpy as np, tracekit as tk
    >>> tk.grad(lambda w, x: np.sum(np.tanh(x @ w)), argnums=(0, 1))(np.zeros(2), np.ones(2))
    (array([1., 1.]), array([0., 0.]))
    """
    vag = value_and_grad(fn, argnums, checkpoint)

    @functools.wraps(fn)
    def grad_fn(*args):
        return vag(*args)[1]

    grad_fn.cache = vag.cache
    return grad_fn


def _inline_value_and_grad(fn, nums, single, args, checkpoint=None):
    """Inside a trace: record ``fn``'s value and gradient computation in that trace."""
    leaves, tree = pytree.flatten(list(args), extra_types=(T.TracedArray,))
    ctx = next(x._ctx for x in leaves if isinstance(x, T.TracedArray))
    concrete = [x._value if isinstance(x, T.TracedArray) else x for x in leaves]
    b, picked = _build(fn, nums, pytree.unflatten(tree, concrete), checkpoint)
    values = []
    arg_leaves = iter(leaves)
    for v, s, get in zip(b.graph.inputs, b.graph.specs, b.capture_getters):
        if s.kind == "arg":
            x = next(arg_leaves)
            values.append(ctx.lift(x) if isinstance(x, np.ndarray | T.TracedArray) else x)
        elif s.kind == "capture":
            values.append(ctx.lift(get()))
        else:
            values.append(ctx.add_input(np.array(b.graph.constants[v]), "const", "const"))
    outs = inline(ctx, b.graph, values)
    value, grads = pytree.unflatten(b.out_tree, outs)
    return value, _select(grads, picked, single)


def inline(ctx, graph: Graph, values) -> list:
    """Record ``graph``'s nodes in the trace ``ctx`` on traced ``values`` (one per input)."""
    env = dict(zip(graph.inputs, values))
    with ctx.deferring():  # values computed where the trace reads them
        for node in graph.nodes:
            ins = [env[x] if isinstance(x, Var) else x for x in node.inputs]
            n_out, weak = len(node.outputs), node.out.weak
            res = ctx.emit(node.op, ins, dict(node.attrs), n_out=n_out, weak=weak)
            res = [res] if len(node.outputs) == 1 else list(res)
            env.update(zip(node.outputs, res))
    return [env[o] for o in graph.outputs[: graph.n_results]]


__all__ = ["grad", "value_and_grad", "vjp", "backward", "BackwardTraced", "inline"]
