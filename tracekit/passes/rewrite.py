"""The one mechanism passes share: replace Vars by other Vars or literals, in order."""

from __future__ import annotations

from ..ir import Graph, Guard, Var


def resolve(mapping: dict, x):
    """Follow replacement chains: ``x`` -> what it stands for now."""
    while isinstance(x, Var) and x in mapping:
        x = mapping[x]
    return x


def rebuild(graph: Graph, nodes, mapping: dict) -> Graph:
    """A graph with ``nodes`` whose inputs, the outputs and guards go through ``mapping``.

    Outputs must stay Vars: an output replaced by a literal keeps its original node.
    """
    out_nodes = [n.replace(inputs=tuple(resolve(mapping, x) for x in n.inputs)) for n in nodes]
    outputs = [resolve(mapping, o) for o in graph.outputs]
    if any(not isinstance(o, Var) for o in outputs):
        raise ValueError("a pass replaced a graph output by a constant")
    guards = [
        Guard(resolve(mapping, g.var), g.value, g.how, g.source)
        for g in graph.guards
        if isinstance(resolve(mapping, g.var), Var)
    ]
    return graph.replace(nodes=out_nodes, outputs=outputs, guards=guards)
