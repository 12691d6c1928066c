"""Dead code elimination: drop nodes whose outputs nothing needs (outputs and guards are live)."""

from __future__ import annotations

from ..ir import Graph


def dce(graph: Graph) -> Graph:
    live = set(graph.outputs) | {g.var for g in graph.guards}
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(node.var_inputs)
    kept.reverse()
    return graph.replace(nodes=kept)
