"""Common subexpression elimination: one node per distinct (op, inputs, attrs)."""

from __future__ import annotations

from ..ir import Graph, Var, _canonical
from .rewrite import rebuild, resolve


def _key(node, mapping):
    ins = tuple(
        ("v", id(resolve(mapping, x))) if isinstance(x, Var) else ("c", repr(_canonical(x)))
        for x in node.inputs
    )
    types = tuple((o.shape, o.dtype.str, o.weak) for o in node.outputs)
    return node.op, ins, repr(_canonical(dict(node.attrs))), types


def cse(graph: Graph) -> Graph:
    from ..ops import OPS

    seen, mapping, kept = {}, {}, []
    for node in graph.nodes:
        if OPS[node.op].kind == "opaque" and not OPS[node.op].extra.get("pure", False):
            kept.append(node)
            continue
        k = _key(node, mapping)
        if k in seen:
            for old, new in zip(node.outputs, seen[k].outputs):
                mapping[old] = new
        else:
            seen[k] = node
            kept.append(node)
    return rebuild(graph, kept, mapping)
