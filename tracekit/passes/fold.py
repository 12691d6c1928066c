"""Constant folding: nodes whose inputs are all literals and whose result is small."""

from __future__ import annotations

import numpy as np

from ..ir import Graph, Var
from ..ops import OPS
from .rewrite import rebuild, resolve

MAX_FOLDED_SIZE = 64


def fold_constants(graph: Graph) -> Graph:
    mapping, kept = {}, []
    protected = set(graph.outputs)
    consts = {v: a for v, a in graph.constants.items() if a.size <= MAX_FOLDED_SIZE}
    for node in graph.nodes:
        ins = [resolve(mapping, x) for x in node.inputs]
        ins = [consts.get(x, x) if isinstance(x, Var) else x for x in ins]
        foldable = (
            OPS[node.op].kind not in ("opaque",)
            and len(node.outputs) == 1
            and not any(isinstance(x, Var) for x in ins)
            and node.out.size <= MAX_FOLDED_SIZE
            and node.out not in protected
        )
        if not foldable:
            kept.append(node)
            continue
        with np.errstate(all="ignore"):
            value = OPS[node.op].impl(*ins, **node.attrs)
        value = np.asarray(value).astype(node.out.dtype, copy=False)
        mapping[node.out] = (
            value.item() if node.out.weak else (value[()] if value.ndim == 0 else value)
        )
    return rebuild(graph, kept, mapping)
