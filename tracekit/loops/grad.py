"""Loops under reverse-mode autodiff: a reverse loop over the gradient of the body.

The backward pass replays the forward loop, which also stacks, in every iteration, the
residuals: of the values of the body that its backward graph (the :func:`tracekit.vjp` of the
body) reads and that depend on the carried state, the state itself and those of matmuls,
reductions and the like (``x`` and ``x @ w`` for ``x = tanh(x @ w)``; see :func:`_residuals`).
The reverse loop then runs the iterations last to first: its iteration ``k`` reads the
residuals of forward iteration ``trips - 1 - k``, computes the elementwise values again from
them (``tanh(x @ w)``) and runs the body's backward graph on the cotangents of the next state;
the cotangents of the invariants add up over the iterations. Neither loop grows with the trip
count.

``checkpoint=1`` stacks the carried state alone, and the reverse loop replays the body from it
in every iteration: less memory where the residuals outweigh the state, a second forward pass.
``checkpoint=S`` first splits a loop into an outer loop over segments of ``S`` iterations,
whose body is the loop of one segment: the forward saves the state at the start of each
segment, and the reverse of a segment replays it (saving its ``S`` iterations' residuals)
before running it backwards. Memory holds ``trips / S`` states and ``S`` iterations'
residuals instead of ``trips`` iterations' residuals, for one more forward pass.

An index that moves with the forward loop (``a[t]``, ``out[t] = ...``) moves the other way in
the reverse loop, and an iteration of it works on the slices it indexes, not on the arrays they
are in: the gradient of ``a[t]`` is zero but in row ``t`` (:class:`~tracekit.ops.Scattered`),
and the body's backward graph adds it into the running sum of ``a``'s gradient that the reverse
loop carries (an input of that graph: ``totals`` of :func:`tracekit.autodiff.backward`) at row
``t`` alone; the gradient of ``out[t] = v`` reads row ``t`` of the cotangent of ``out``, then
clears it (a store the CPU runner makes in place).

Split into segments, such a loop's segment counts its iterations from where it starts (its
``start``: ``S * j`` in segment ``j``, an index moving with the loop over segments), and so
does the reverse loop of a segment, backwards (``-S * j``); the rows of the residuals a reverse
loop reads are counted from 0 in each segment (a ``local`` :class:`~tracekit.ir.Affine`); the
reverse loop of a segment starts its sums from the running totals of the loop over segments.

A while loop is differentiated as the loop its traced iterations were
(:func:`~tracekit.loops.unroll.fixed_trips`: its condition guarded true in each iteration but
the last), so data that needs another count fails a guard, and ``tk.grad`` traces again.

>>> import numpy as np, tracekit as tk
>>> def f(x):
...     for _ in range(100):
...         x = np.sin(x) * 0.9 + 0.1
...     return x.sum()
>>> b = tk.vjp(tk.trace(f, np.ones(3)))
>>> [n.op for n in b.graph.nodes if n.op == "loop"]  # the forward loop, the reverse loop
['loop', 'loop']
>>> flat = tk.vjp(tk.trace(f, np.ones(3), loops="unroll"))  # 100 iterations' nodes
>>> np.allclose(b(np.ones(3), np.ones(())), flat(np.ones(3), np.ones(())))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import pytree
from ..ir import Affine, Graph, Node, Var, moves
from ..ops import OPS
from .op import is_while, later, negated, value_names


def reversible(node: Node) -> bool:
    """``node`` is a loop whose gradient is a reverse loop (others are unrolled first)."""
    return OPS[node.op].kind == "control" and not is_while(node)


def _moves(node: Node) -> bool:
    """A loop whose body indexes with the iteration count."""
    return any(moves(n.attrs) for n in node.attrs["body"].nodes)


def _reversed(attrs: dict, trips: int) -> dict:
    """A node's attributes in the reverse loop, whose iteration ``k`` is the forward's
    ``trips - 1 - k``: each index moving with the forward loop moves the other way."""

    def flip(x):
        if isinstance(x, Affine):
            return Affine(x.base + x.step * (trips - 1), -x.step, x.local)
        if isinstance(x, tuple):
            return tuple(flip(e) for e in x)
        if isinstance(x, slice):
            return slice(flip(x.start), flip(x.stop), flip(x.step))
        return x

    return {k: flip(v) for k, v in attrs.items()} if moves(attrs) else attrs


def _inexact(v: Var) -> bool:
    return v.dtype.kind in "fc"


# ---------------------------------------------------------------------- the forward
@dataclass
class Saved:
    """What a loop's forward pass keeps for its reverse loop."""

    backward: Graph  # the body's: (body inputs, a cotangent per output, totals, constants)
    wrt: list  # the body inputs it differentiates
    totals: list  # the invariants among them: their gradients add into running totals
    kept: list  # the values of ``backward`` the forward loop stacks, one row per iteration
    rows: list  # those stacks, traced
    consts: list  # the traced inputs of ``backward``'s constants


def replay(ctx, node: Node, ins: list, backward, recompute: bool = False):
    """Emit loop ``node`` on ``ins`` in the backward trace ``ctx``, also stacking in every
    iteration what the reverse loop reads: the residuals, the body's values its backward graph
    reads (``recompute``: the carried state only, from which the reverse loop replays the
    body). ``backward(traced, wrt, totals)`` builds the body's backward graph. Returns (the
    loop's outputs, :class:`Saved`)."""
    body, c = node.attrs["body"], node.attrs["carried"]
    n_in, n_out = len(body.inputs), len(body.outputs)
    wrt = [i for i in range(n_in) if _inexact(body.inputs[i])]
    totals = [i for i in wrt if i >= c]
    gb = _body_backward(body, ins, backward, wrt, totals)
    consts = gb.inputs[n_in + n_out + len(totals) :]
    const_ins = [ctx.add_input(np.array(gb.constants[v]), "const", "const") for v in consts]
    if recompute:
        kept, computing = list(gb.inputs[:c]), []
    else:
        kept, computing = _residuals(gb, n_in, n_out + len(totals), c)
    ctx.taken |= {v.name for v in body.inputs} | value_names(body.nodes)
    made = _Body(ctx, body.name)
    made.inputs, made.nodes = list(body.inputs), list(body.nodes)
    env = dict(zip(gb.inputs[:n_in], body.inputs))
    env.update((v, made.input(v, v.name)) for v in consts)
    made.inline(computing, env, None)
    # the body's guards stay checked in every iteration: a branch taken otherwise than traced
    # fails here, before its gradient would be the traced branch's
    saving = made.graph(list(body.outputs) + [env.get(v, v) for v in kept], body.guards)
    attrs = {**node.attrs, "body": saving, "stacked": node.attrs.get("stacked", 0) + len(kept)}
    n = len(node.outputs)
    res = ctx.emit("loop", list(ins) + const_ins, attrs, n_out=n + len(kept))
    res = [res] if n + len(kept) == 1 else list(res)
    return res[:n], Saved(gb, wrt, totals, kept, res[n:], const_ins)


def _body_backward(body: Graph, ins: list, backward, wrt: list, totals: list) -> Graph:
    from ..traced import Traced

    examples = [x._value if hasattr(x, "_value") else x for x in ins]
    t = Traced(
        body,
        pytree.flatten(list(examples))[1],
        pytree.flatten(tuple(body.outputs))[1],
        [None] * len(body.inputs),
        examples,
    )
    return backward(t, wrt, totals).graph


def _residuals(gb: Graph, n_in: int, n_out: int, carried: int):
    """(the residuals, the nodes computing them) of a body's backward graph ``gb``, whose
    ``n_out`` inputs after the body's ``n_in`` are cotangents.

    The reverse loop reads values that depend on the carried state and not on a cotangent.
    Those an elementwise op or a view makes are computed again there from what they are made
    of (as jax's ``dots_saveable`` policy does: reading a saved array costs more memory traffic
    than a few operations per element); the carried state and the values of the other ops
    (matmuls, reductions, loops, Python ops) are saved. Values of the invariants alone are
    computed again too (the hoisting pass takes them out of the reverse loop)."""
    tangent = set(gb.inputs[n_in : n_in + n_out])
    on_state = set(gb.inputs[:carried])
    made, reads = {}, []
    for n in gb.nodes:
        if any(x in tangent for x in n.var_inputs):
            tangent.update(n.outputs)
            reads += n.var_inputs
        elif any(x in on_state for x in n.var_inputs):
            on_state.update(n.outputs)
            made.update((o, n) for o in n.outputs)
    kept, seen, todo = [], set(), [x for x in reads + list(gb.outputs) if x in on_state]
    while todo:
        x = todo.pop(0)
        if x in seen:
            continue
        seen.add(x)
        n = made.get(x)
        if n is not None and _cheap(n):  # computed again from its own inputs
            todo += [y for y in n.var_inputs if y in on_state]
        else:
            kept.append(x)
    return kept, _needed(gb.nodes, kept, set(gb.inputs))


def _cheap(n: Node) -> bool:
    """An op the reverse loop computes again rather than reading its saved value."""
    op = OPS[n.op]
    return op.kind in ("elementwise", "movement") or (op.view and len(n.inputs) == 1)


def _needed(nodes: list, wanted: list, known: set) -> list:
    """The nodes (in order) that compute ``wanted`` from ``known`` values."""
    made = {o: n for n in nodes for o in n.outputs}
    need, todo = set(), [v for v in wanted if v not in known]
    while todo:
        n = made.get(todo.pop())
        if n is None or id(n) in need:
            continue
        need.add(id(n))
        todo += [x for x in n.var_inputs if x not in known]
    return [n for n in nodes if id(n) in need]


def segmented(graph: Graph, size: int) -> tuple[Graph, set]:
    """``graph`` with each reversible loop of more than ``size`` iterations (and no stacked
    outputs) split into a loop over segments of ``size`` iterations, and a loop of the
    iterations left over; and the loops over segments (their reverse replays a segment from
    the state saved at its start). A segment of a loop whose indices move starts at its
    offset (attribute ``start``)."""
    taken = {v.name for v in graph.inputs} | {o.name for n in graph.nodes for o in n.outputs}
    nodes, outer = [], set()
    for n in graph.nodes:
        # (a loop starting where a loop around it is: its segments' offsets would move with
        # two loops)
        if (
            reversible(n)
            and n.attrs["trips"] > size
            and not n.attrs.get("stacked")
            and not isinstance(n.attrs.get("start", 0), Affine)
        ):
            made = _segments(n, size, taken)
            outer.add(made[0])
            nodes += made
        else:
            nodes.append(n)
    return graph.replace(nodes=nodes), outer


def _segments(node: Node, size: int, taken: set) -> list:
    body, c, trips = node.attrs["body"], node.attrs["carried"], node.attrs["trips"]
    count, rest = divmod(trips, size)
    ins = [_like(v, f"{v.name}.seg", taken) for v in body.inputs]
    outs = [_like(o, f"{o.name}.seg", taken) for o in body.outputs]
    start = node.attrs.get("start", 0)
    moving = _moves(node)
    attrs = {**node.attrs, "trips": size}
    if moving:  # segment j starts at iteration start + size * j
        attrs["start"] = Affine(start, size)
    segment = Node("loop", ins, attrs, outs, node.source, node.scope)
    name = f"{body.name}  (segments of {size})"
    outer_body = Graph(ins, [segment], outs, name=name)
    after = [_like(o, f"{o.name}.mid", taken) for o in node.outputs] if rest else node.outputs
    attrs = {"body": outer_body, "trips": count, "carried": c, "stacked": 0}
    outer = Node("loop", node.inputs, attrs, after, node.source, node.scope)
    if not rest:
        return [outer]
    tail_ins = tuple(after[:c]) + tuple(node.inputs[c:])
    tail = {**node.attrs, "trips": rest}
    if moving:
        tail["start"] = later(start, count * size)
    return [outer, node.replace(inputs=tail_ins, attrs=tail)]


def _like(v: Var, name: str, taken: set) -> Var:
    while name in taken:
        name += "'"
    taken.add(name)
    return Var(name, v.shape, v.dtype, v.weak)


# ---------------------------------------------------------------------- the reverse loop
def loop_vjp(ctx, node: Node, gs: list, ins: list, saved: Saved, running=None) -> list:
    """Cotangents of loop ``node``'s inputs (``ins``, traced in ``ctx``; None where none) from
    those of its outputs (``gs``, None where none): a reverse loop over the rows that
    :func:`replay` saved. ``running``: ``{position: cotangent}`` of invariants whose sums
    start there (their cotangents returned include it), not at zero."""
    running = running or {}
    body, c, trips = node.attrs["body"], node.attrs["carried"], node.attrs["trips"]
    n_in, n_out = len(body.inputs), len(body.outputs)
    plain = n_out - node.attrs.get("stacked", 0)
    gb, wrt = saved.backward, saved.wrt
    n_cot = n_out + len(saved.totals)
    consts = gb.inputs[n_in + n_cot :]
    made = _Body(ctx, f"{body.name}  (reverse)")
    # carried: the cotangents of the state and of the plain outputs, the invariants' sums
    d_state = {i: made.input(body.outputs[i], "d") for i in range(c) if i in wrt}
    d_plain = {
        j: made.input(body.outputs[j], "d")
        for j in range(c, plain)
        if _inexact(body.outputs[j]) and gs[j] is not None
    }
    sums = {i: made.input(body.inputs[i], "sum_d", weak=False) for i in saved.totals}
    carried = len(made.inputs)
    # invariants: the saved rows, the loop's invariants, the stacked outputs' cotangents
    rows = [made.input(_stack_of(v, trips), f"{v.name}[]") for v in saved.kept]
    invariants = [made.input(v, v.name) for v in body.inputs[c:]]
    d_rows = {
        s: made.input(_stack_of(body.outputs[s], trips), "d[]")
        for s in range(plain, n_out)
        if gs[s] is not None
    }
    const_vars = [made.input(v, v.name) for v in consts]
    # reverse iteration j reads the rows of forward iteration trips-1-j (of this run of it)
    back = {"idx": (Affine(trips - 1, -1, local=True),)}
    env = dict(zip(gb.inputs[c:n_in], invariants))
    env.update((v, made.node("index", [r], back, like=v)) for r, v in zip(rows, saved.kept))
    for j, v in enumerate(gb.inputs[n_in : n_in + n_out]):
        if j in d_state or j in d_plain:
            env[v] = d_state.get(j, d_plain.get(j))
        elif j in d_rows:
            env[v] = made.node("index", [d_rows[j]], back, like=v)
        else:
            env[v] = made.zeros(v)
    env.update(zip(gb.inputs[n_in + n_out : n_in + n_cot], sums.values()))
    env.update(zip(consts, const_vars))
    made.inline(_needed(gb.nodes, list(gb.outputs), set(env)), env, trips)
    grads = {i: env[o] for i, o in zip(wrt, gb.outputs)}
    nexts = [grads[i] for i in d_state]
    nexts += [made.zeros(d) for d in d_plain.values()]  # the last iteration's only
    nexts += [grads[i] for i in sums]  # (the body's backward added its gradient to sums[i])
    reverse = made.graph(nexts)
    # the reverse loop in the backward trace
    start = [gs[i] if gs[i] is not None else _zeros(ctx, body.outputs[i]) for i in d_state]
    start += [gs[j] for j in d_plain]
    start += [running[i] if i in running else _zeros(ctx, sums[i]) for i in sums]
    loop_ins = start + list(saved.rows) + list(ins[c:]) + [gs[s] for s in d_rows]
    loop_ins += saved.consts
    attrs = {"body": reverse, "trips": trips, "carried": carried, "stacked": 0}
    if node.attrs.get("start", 0) != 0:  # its indices flipped (_reversed) count back from it
        attrs["start"] = negated(node.attrs["start"])
    outs = ctx.emit("loop", loop_ins, attrs, n_out=carried)
    outs = [outs] if carried == 1 else list(outs)
    cts = [None] * len(ins)
    for k, i in enumerate(d_state):
        cts[i] = outs[k]
    for k, i in enumerate(sums):
        cts[i] = outs[len(d_state) + len(d_plain) + k]
    return cts


def _stack_of(v: Var, trips: int) -> Var:
    return Var(v.name, (trips, *v.shape), v.dtype)


def _zeros(ctx, v: Var):
    z = np.zeros((), v.dtype)[()]
    return ctx.emit("full", [], {"shape": v.shape, "fill_value": z, "dtype": v.dtype})


class _Body:
    """A loop body being built: fresh Vars named apart from the trace ``ctx``'s values."""

    def __init__(self, ctx, name: str):
        self.ctx, self.name = ctx, name
        self.inputs: list = []
        self.nodes: list = []
        self.count = 0

    def _var(self, like: Var, base: str, weak=None) -> Var:
        if base == "r":  # the body's own values: r0, r1, ...
            while f"r{self.count}" in self.ctx.taken:
                self.count += 1
            base = f"r{self.count}"
        name = self.ctx.fresh(base)
        self.ctx.taken.add(name)
        return Var(name, like.shape, like.dtype, like.weak if weak is None else weak)

    def input(self, like: Var, base: str, weak=None) -> Var:
        v = self._var(like, f"{base}{like.name}" if base in ("d", "sum_d") else base, weak)
        self.inputs.append(v)
        return v

    def node(self, op: str, inputs: list, attrs: dict, like: Var, source=None) -> Var:
        out = self._var(like, "r")
        self.nodes.append(Node(op, tuple(inputs), attrs, (out,), source))
        return out

    def zeros(self, like: Var) -> Var:
        z = np.zeros((), like.dtype)[()]
        attrs = {"shape": like.shape, "fill_value": z, "dtype": like.dtype}
        return self.node("full", [], attrs, like=Var("", like.shape, like.dtype))

    def inline(self, nodes: list, env: dict, trips: int | None) -> list:
        """Append ``nodes`` (of a forward loop's iteration; with ``trips``, run here in reverse)
        with their inputs bound by ``env`` (which gets their outputs); the Vars they make."""
        made = []
        for n in nodes:
            outs = tuple(self._var(o, "r") for o in n.outputs)
            ins = tuple(env.get(x, x) if isinstance(x, Var) else x for x in n.inputs)
            attrs = n.attrs if trips is None else _reversed(n.attrs, trips)
            self.nodes.append(n.replace(inputs=ins, outputs=outs, attrs=attrs))
            env.update(zip(n.outputs, outs))
            made += outs
        return made

    def graph(self, outputs: list, guards=()) -> Graph:
        return Graph(self.inputs, self.nodes, outputs, guards=list(guards), name=self.name).check()
