"""Dead code elimination: drop nodes whose outputs nothing needs (outputs and guards are live,
and so is a loop that checks guards in its iterations, or tests a while condition)."""

from __future__ import annotations

from ..ir import Graph, Node, Var
from ..loops.op import is_while


def dce(graph: Graph) -> Graph:
    live = set(graph.outputs) | {g.var for g in graph.guards}
    kept = []
    for node in reversed(graph.nodes):
        outs = node.outputs
        if (outs[0] in live if len(outs) == 1 else any(o in live for o in outs)) or checks(node):
            kept.append(node)
            live.update([v for v in node.inputs if type(v) is Var])
    kept.reverse()
    return graph.replace(nodes=kept)


def checks(node: Node) -> bool:
    """``node`` may raise ``GuardError`` when it runs: a loop whose body (or a loop inside it)
    has guards, or a while loop (which may run out of iterations)."""
    if is_while(node):
        return True
    return any(
        isinstance(a, Graph) and (a.guards or any(checks(m) for m in a.nodes))
        for a in node.attrs.values()
    )
