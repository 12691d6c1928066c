"""Unrolling: every loop node replaced by its iterations, the flat graph tracing recorded.

The values of iteration ``t`` of a body are named ``<name>@<t>``. The guards of a body are
guards of each iteration's values; a while loop unrolls to the iterations it had when traced,
its condition guarded true in each but the last, as tracing recorded it (the unrolled graph
is right for data that needs as many iterations, and says so otherwise). :func:`fixed_trips`
keeps such a loop a loop of its traced count (for differentiation).

>>> import numpy as np, tracekit as tk
>>> def f(x):
...     for _ in range(3):
...         x = np.sin(x)
...     return x
>>> t = tk.trace(f, np.ones(2))
>>> [n.op for n in unroll(t.graph).nodes]
['sin', 'sin', 'sin']
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Guard, Var, moves
from ..ops import OPS
from .op import LOOP, body_at, later, value_names


def unroll(graph: Graph, which=None, taken: set | None = None) -> Graph:
    """``graph`` with its loop nodes (those ``which(node)`` is true of, default all) replaced
    by their iterations, nested loops too. ``taken``: names the new values must not have."""
    which = which or (lambda node: True)
    if not any(OPS[n.op].kind == "control" and which(n) for n in graph.nodes):
        return graph

    def expand(n, nodes, guards, taken):
        if OPS[n.op].kind != "control" or not which(n):
            return None
        return _iterations(n, nodes, guards, taken)

    return _expanded(graph, taken, expand)


def _expanded(graph: Graph, taken, expand, prepare=lambda n: n) -> Graph:
    """``graph`` with each node ``n`` (its inputs renamed, then ``prepare(n)``) for which
    ``expand(n, nodes, guards, taken)`` appends nodes and guards and gives the values of its
    outputs replaced by them; a node for which it gives None stays."""
    if taken is None:
        taken = {v.name for v in graph.inputs} | value_names(graph.nodes)
    env: dict = {}
    nodes: list = []
    guards: list = []
    for n in graph.nodes:
        n = n.replace(inputs=tuple(env.get(x, x) if isinstance(x, Var) else x for x in n.inputs))
        n = prepare(n)
        outs = expand(n, nodes, guards, taken)
        if outs is None:
            nodes.append(n)
            continue
        env.update(zip(n.outputs, outs))
    rename = lambda v: env.get(v, v)  # noqa: E731
    return graph.replace(
        nodes=nodes,
        outputs=[rename(o) for o in graph.outputs],
        guards=[g.__class__(rename(g.var), g.value, g.how, g.source) for g in graph.guards]
        + guards,
    )


def fixed_trips(graph: Graph, taken: set | None = None) -> Graph:
    """``graph`` with each while loop of more than one iteration replaced by the loop its
    traced iterations were: a ``loop`` of ``trips - 1`` iterations whose body guards the
    condition true, then the last iteration, where it is guarded false (nested loops too).

    The graph is right for data that needs as many iterations, and says so otherwise, as the
    unrolled one is; its size does not grow with the trip count, and its loop has a reverse
    loop for a gradient.

    >>> import warnings, numpy as np, tracekit as tk
    >>> def f(x):
    ...     while x.max() > 1.0:
    ...         x = x * 0.5
    ...     return x
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # the loop became data-dependent: said elsewhere
    ...     t = tk.trace(f, np.array([9.0, 3.0]))
    >>> [(n.op, n.attrs.get("trips")) for n in t.graph.nodes if "body" in n.attrs]
    [('while_loop', 4)]
    >>> fixed = fixed_trips(t.graph)
    >>> [n.op + (f" x{n.attrs['trips']}" if "body" in n.attrs else "") for n in fixed.nodes]
    ['max', 'greater', 'loop x3', 'multiply', 'max', 'greater']
    """
    if not any(isinstance(a, Graph) for n in graph.nodes for a in n.attrs.values()):
        return graph
    if taken is None:
        taken = {v.name for v in graph.inputs} | value_names(graph.nodes)

    def nested_too(n):
        if OPS[n.op].kind != "control":
            return n
        return n.replace(attrs={**n.attrs, "body": fixed_trips(n.attrs["body"], taken)})

    def expand(n, nodes, guards, taken):
        if n.attrs.get("cond") is None or n.attrs["trips"] < 2:
            return None
        return _fixed(n, nodes, guards, taken)

    return _expanded(graph, taken, expand, nested_too)


def _fixed(node, nodes: list, guards: list, taken: set) -> list:
    """Append while loop ``node`` as a loop of its traced count less one, its condition
    guarded true in every iteration, and its last iteration; the values of its outputs."""
    body, cond, carried = node.attrs["body"], node.attrs["cond"], node.attrs["carried"]
    going_on = Guard(body.outputs[cond], True, "bool", node.source)
    attrs = {k: v for k, v in node.attrs.items() if k not in ("cond", "max_iterations")}
    attrs.update(body=body.replace(guards=[*body.guards, going_on]), trips=node.attrs["trips"] - 1)
    before = tuple(_renamed(o, ".before", taken) for o in node.outputs)
    nodes.append(node.replace(op=LOOP.name, attrs=attrs, outputs=before))
    last_attrs = {**node.attrs, "trips": 1}
    if any(moves(n.attrs) for n in body.nodes):  # its indices: the last iteration's
        last_attrs["start"] = later(node.attrs.get("start", 0), node.attrs["trips"] - 1)
    last = node.replace(inputs=before[:carried] + tuple(node.inputs[carried:]), attrs=last_attrs)
    return _iterations(last, nodes, guards, taken)


def _iterations(node, nodes: list, guards: list, taken: set) -> list:
    """Append the iterations of loop ``node`` to ``nodes`` and their guards to ``guards``;
    the values of its outputs."""
    body = unroll(node.attrs["body"], taken=taken)
    cond = node.attrs.get("cond")
    carried, trips = node.attrs["carried"], node.attrs["trips"]
    state, invariants = list(node.inputs[:carried]), list(node.inputs[carried:])
    plain = len(body.outputs) - node.attrs.get("stacked", 0)
    outs, rows = state, [[] for _ in body.outputs[plain:]]
    for t in range(trips):
        env = dict(zip(body.inputs, state + invariants))
        for m in body_at(body, t, node.attrs.get("start", 0)):
            ins = tuple(env.get(x, x) if isinstance(x, Var) else x for x in m.inputs)
            if _number(m, ins):  # a number moving with the loop: the literal tracing saw
                env[m.out] = _number(m, ins)[0]
                continue
            new = tuple(_renamed(o, f"@{t}", taken) for o in m.outputs)
            env.update(zip(m.outputs, new))
            nodes.append(m.replace(inputs=ins, outputs=new))
        outs = [env.get(o, o) for o in body.outputs]
        guards += [g.__class__(env[g.var], g.value, g.how, g.source) for g in body.guards]
        if cond is not None:  # a while loop's test, as tracing recorded it
            guards.append(Guard(outs[cond], t < trips - 1, "bool", node.source))
        state = outs[:carried]
        for row, value in zip(rows, outs[plain:]):
            row.append(value)
    return outs[:plain] + [
        _stack(row, out, node, nodes, taken) for row, out in zip(rows, node.outputs[plain:])
    ]


def _number(m, ins) -> tuple:
    """``(value,)`` of a scalar arithmetic node on numbers only (a number moving with the loop:
    rolling computes it from the iteration counter), else ()."""
    if not (OPS[m.op].arithmetic and m.out.shape == () and len(m.outputs) == 1):
        return ()
    if any(isinstance(x, Var) or not isinstance(x, int | float | np.number) for x in ins):
        return ()
    value = OPS[m.op].impl(*ins, **m.attrs)
    return (np.asarray(value).item() if m.out.weak else np.asarray(value, m.out.dtype)[()],)


def _stack(values, out: Var, node, nodes: list, taken: set) -> Var:
    """``np.stack(values)`` as tracing records it: each reshaped to ``(1, ...)``, then one
    concatenate along axis 0; its value is a new Var like ``out``."""
    parts = []
    for t, v in enumerate(values):
        if isinstance(v, Var):
            part = _renamed(Var(out.name, (1, *v.shape), v.dtype), f"@{t}", taken)
            step = {"op": "reshape", "inputs": (v,), "attrs": {"shape": part.shape}}
        else:  # a number: the loop's first value of its counter, or one moving with the loop
            part = _renamed(Var(out.name, (1, *out.shape[1:]), out.dtype), f"@{t}", taken)
            fill = np.asarray(v, out.dtype)[()]
            step = {"op": "full", "inputs": (), "attrs": {"shape": part.shape, "fill_value": fill}}
            step["attrs"]["dtype"] = out.dtype
        nodes.append(node.replace(**step, outputs=(part,)))
        parts.append(part)
    stacked = _renamed(out, "@", taken)
    nodes.append(
        node.replace(op="concatenate", inputs=tuple(parts), attrs={"axis": 0}, outputs=(stacked,))
    )
    return stacked


def _renamed(v: Var, suffix: str, taken: set) -> Var:
    """``v`` as a new value named ``<name><suffix>`` (primes added until no value has it)."""
    name = v.name + suffix
    while name in taken:
        name += "'"
    taken.add(name)
    return Var(name, v.shape, v.dtype, v.weak)
