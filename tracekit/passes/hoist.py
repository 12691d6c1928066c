"""Loop-invariant code motion: body nodes that read only the loop's invariants (values from
before the loop) and numbers compute the same value in every iteration; they move out of the
loop, before it, and the body reads their values as invariants.

A node stays in the body if its index moves with the iteration, if a guard checks its value,
or if it is a Python op (its calls are the user's: once per iteration).

>>> import numpy as np, tracekit as tk
>>> def f(x, w):
...     for _ in range(10):
...         x = x + np.cos(w) * 0.1  # np.cos(w) is the same in every iteration
...     return x
>>> g = hoist_invariants(tk.trace(f, np.zeros(3), np.ones(3)).graph)
>>> [n.op for n in g.nodes], [n.op for n in g.nodes[-1].attrs["body"].nodes]
(['cos', 'multiply', 'loop'], ['add'])
"""

from __future__ import annotations

from ..ir import Graph, Node, Var, moves
from ..ops import OPS


def hoist_invariants(graph: Graph) -> Graph:
    """``graph`` with the invariant work of each loop (loops in loop bodies too) before it."""
    if not any(OPS[n.op].kind == "control" for n in graph.nodes):
        return graph
    taken = _names(graph)
    nodes, changed = [], False
    for n in graph.nodes:
        if OPS[n.op].kind != "control":
            nodes.append(n)
            continue
        body = hoist_invariants(n.attrs["body"])
        before, n = _hoisted(n.replace(attrs={**n.attrs, "body": body}), taken)
        changed |= bool(before) or body is not n.attrs["body"]
        nodes += before + [n]
    return graph.replace(nodes=nodes) if changed or len(nodes) != len(graph.nodes) else graph


def _hoisted(loop: Node, taken: set) -> tuple[list, Node]:
    """(the nodes to run before ``loop``, the loop without them)."""
    body, c = loop.attrs["body"], loop.attrs["carried"]
    outside = dict(zip(body.inputs[c:], loop.inputs[c:]))  # a body invariant -> its value
    guarded = {g.var for g in body.guards}
    before, kept, new_inputs = [], [], []
    for m in body.nodes:
        if not _movable(m, outside, guarded):
            kept.append(m)
            continue
        outs = tuple(_fresh(o, taken) for o in m.outputs)
        ins = tuple(outside.get(x, x) if isinstance(x, Var) else x for x in m.inputs)
        before.append(m.replace(inputs=ins, outputs=outs, source=m.source))
        for inner, value in zip(m.outputs, outs):
            outside[inner] = value
            new_inputs.append(inner)  # the body reads it as an invariant now
    if not before:
        return [], loop
    used = {x for m in kept for x in m.var_inputs} | set(body.outputs)
    new_inputs = [v for v in new_inputs if v in used]
    if not new_inputs and len(kept) == len(body.nodes):
        return [], loop
    new_body = body.replace(inputs=list(body.inputs) + new_inputs, nodes=kept, specs=None)
    ins = tuple(loop.inputs) + tuple(outside[v] for v in new_inputs)
    return before, loop.replace(inputs=ins, attrs={**loop.attrs, "body": new_body})


def _movable(m: Node, outside: dict, guarded: set) -> bool:
    op = OPS[m.op]
    if op.kind in ("opaque", "control") or moves(m.attrs) or any(o in guarded for o in m.outputs):
        return False
    return all(x in outside for x in m.var_inputs)


def _names(graph: Graph) -> set:
    names = {v.name for v in graph.inputs}
    for n in graph.nodes:
        names |= {o.name for o in n.outputs}
        for body in (a for a in n.attrs.values() if isinstance(a, Graph)):
            names |= _names(body)
    return names


def _fresh(v: Var, taken: set) -> Var:
    name = v.name + "^"  # hoisted out of its loop
    while name in taken:
        name += "'"
    taken.add(name)
    return Var(name, v.shape, v.dtype, v.weak)
