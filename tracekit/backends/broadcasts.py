"""Cheap values read broadcast: computed in every kernel that reads them, not in one of their own.

Coefficients of a stretched grid, a bias plus one, a half-sum of neighbouring cell widths:
values of a small shape computed from the function's inputs by a few plain operations, and
read broadcast by kernels over larger shapes. The planner fuses ops of one shape, so each
such value was a kernel of its own: a few hundred elements, a numba function to compile
(0.05-0.25 s each), a launch per call and an array more for its readers. jax.jit fuses them
the same way (XLA computes a broadcast of an elementwise value inside its consumer).

Elementwise ops commute with broadcasting, ``broadcast(f(a, b)) == f(broadcast(a),
broadcast(b))``, so a kernel reading ``f(a, b)`` broadcast can compute ``f`` itself, at each
of its elements, from ``a`` and ``b`` read broadcast. A value is computed so where:

- it is made from the function's inputs (or slices and reshapes of them) by elementwise ops
  that each cost one plain operation per element (no division, no function), at most
  ``MAX_OPS`` of them (a loop reading it pays them per element of its own; where they do not
  vary along its inner loop, LLVM takes them out of it);
- every op reading it is an elementwise op of a larger shape (it is read broadcast), or is
  such a value itself;
- it is not a result of the function.

Every value so computed is a :class:`BroadcastFusion` in ``Plan.broadcasts``.

>>> import numpy as np, tracekit as tk
>>> def scaled(x, w):
...     return x * (0.5 * (w[1:] + w[:-1]))
>>> x, w = np.ones((4, 3)), np.arange(4.0)
>>> c = tk.compile(tk.trace(scaled, x, w), target="cpu", progress=False)
>>> len(c.plan.kernels), str(c.plan.broadcasts[0]).split(":")[0]
(1, 'computed in each kernel reading it')
>>> c(x, w)[0]
array([0.5, 1.5, 2.5])
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import Graph, Node, Var
from ..ops import OPS
from .scalar import element_cost, is_fast_math

MAX_OPS = 4  # plain operations per element a value costs each kernel reading it
# not plain operations: a division costs several multiplications per element (here, and in
# offsets.py's values computed again from their one input alone: blur3, 2048², its sum in
# tiles, then three divisions per element where there was one)
DIVISIONS = frozenset(("divide", "floor_divide", "remainder", "reciprocal"))


@dataclass(frozen=True)
class BroadcastFusion:
    """A value computed in each kernel that reads it broadcast, not in a kernel of its own."""

    value: Var
    cost: int  # operations per element
    readers: int  # elementwise ops of larger shapes reading it
    source: object = None  # the Source of the node making it

    def __str__(self):
        what = f"%{self.value.name}: {self.value.type}"
        if self.source is not None:
            what += f" at {self.source} `{self.source.text}`"
        return (
            f"computed in each kernel reading it: {what} ({self.cost} op(s) per element, read "
            f"broadcast by {self.readers} op(s); no kernel of its own)"
        )


def cheap_values(graph: Graph, classify, cost: dict | None = None) -> dict:
    """``{value: operations per element}`` of each value ``graph`` makes from its inputs by at
    most ``MAX_OPS`` plain elementwise operations (this module's first rule); ``classify``:
    the planner's (what becomes a kernel). ``cost``: such a dict of an earlier form of the
    graph (values it did not hold were not cheap, or were made since), updated in place: only
    values not in it are looked at (``offsets.py`` asks after every rewrite)."""
    made = {o: n for n in graph.nodes for o in n.outputs}
    cost = {} if cost is None else cost
    seen = cost.setdefault(None, {})  # the nodes looked at, by id (``None``: no value's key;
    # a rewrite makes new nodes for the same values where their inputs changed)
    for n in graph.nodes:
        if id(n) in seen or len(n.outputs) != 1:
            continue
        seen[id(n)] = n  # (held: no later node takes its id)
        total = 1
        for x in n.var_inputs:
            if x in cost:
                total += cost[x]
            elif not _of_inputs(x, made):
                break
        else:  # (classify last: it costs most)
            if total <= MAX_OPS and _plain(n, classify):
                cost[n.out] = total
    return cost


def broadcast_values(graph: Graph, classify) -> dict:
    """``{value: its node}`` for each value of ``graph`` that the kernels reading it compute
    themselves (this module's rules); ``classify``: the planner's (what becomes a kernel)."""
    readers: dict = {}
    for n in graph.nodes:
        for x in n.var_inputs:
            readers.setdefault(x, []).append(n)
    cost = cheap_values(graph, classify)
    del cost[None]
    kept = set(graph.outputs) | {gd.var for gd in graph.guards}
    chosen: dict = {}
    for n in reversed(graph.nodes):
        v = n.outputs[0] if len(n.outputs) == 1 else None
        if v not in cost or v in kept:
            continue
        users = readers.get(v, [])
        if users and all(u.out in chosen or broadcast_by(u, v, classify) for u in users):
            chosen[v] = n
    made = {o: n for n in graph.nodes for o in n.outputs}
    for n in graph.nodes:  # of the inputs and values so computed only: nothing a kernel makes
        if n.outputs and n.out in chosen:
            if not all(x in chosen or _of_inputs(x, made) for x in n.var_inputs):
                del chosen[n.out]
    return chosen


def decisions(graph: Graph, chosen: dict) -> list:
    """The :class:`BroadcastFusion` of each value in ``chosen``, in the graph's order."""
    readers: dict = {}
    for n in graph.nodes:
        for x in n.var_inputs:
            readers[x] = readers.get(x, 0) + (n.out not in chosen)
    out = []
    for n in graph.nodes:
        if n.outputs and n.out in chosen and readers.get(n.out):
            out.append(BroadcastFusion(n.out, _cone(n.out, chosen), readers[n.out], n.source))
    return out


def drawn_notes(decisions: list) -> dict:
    """What a drawing of the compiled graph says of ``decisions``: ``{value name: note}``."""
    return {
        d.value.name: f"computed in each kernel reading it broadcast ({d.cost} op(s) per element)"
        for d in decisions
    }


def _cone(v: Var, chosen: dict) -> int:
    n = chosen[v]
    return 1 + sum(_cone(x, chosen) for x in n.var_inputs if x in chosen)


def _plain(n: Node, classify) -> bool:
    """One plain operation per element: no division, no function call."""
    if len(n.outputs) != 1 or n.out.weak or classify(n) != "elementwise":
        return False
    op = OPS[n.op]
    if op.kind != "elementwise" or n.op in DIVISIONS or is_fast_math(n):
        return False
    return element_cost(n) == 0


def _of_inputs(x: Var, made: dict) -> bool:
    """``x`` is an input of the function, or a view (a slice, a reshape) of one."""
    while x in made:
        n = made[x]
        if not (OPS[n.op].view and len(n.var_inputs) == 1 and not OPS[n.op].pads):
            return False
        x = n.var_inputs[0]
    return True


def broadcast_by(u: Node, v: Var, classify) -> bool:
    """``u`` is an elementwise op (a kernel's) reading ``v`` broadcast to its larger shape."""
    if len(u.outputs) != 1 or classify(u) != "elementwise" or u.out.shape == v.shape:
        return False
    lead = len(u.out.shape) - len(v.shape)
    return lead >= 0 and all(m in (1, u.out.shape[lead + d]) for d, m in enumerate(v.shape))
