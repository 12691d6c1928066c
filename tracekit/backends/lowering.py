"""Rewrites that prepare a graph for code generation (shared by the cpu and cuda targets).

``mean``, ``var`` and ``std`` become sums and elementwise ops, so the fusion planner only sees
the primitive reductions (sum, prod, max, min, any, all, argmax, argmin).
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Node, Var
from ..ops import OPS
from ..passes.rewrite import rebuild, resolve


def infer(op: str, inputs, attrs) -> tuple[tuple, np.dtype]:
    """Shape and dtype of ``op(*inputs, **attrs)``, by running it on zero-cost stand-ins."""
    args = [_stand_in(x) if isinstance(x, Var) else x for x in inputs]
    with np.errstate(all="ignore"):
        out = np.asarray(OPS[op].impl(*args, **attrs))
    return out.shape, out.dtype


def _stand_in(x: Var):
    """A zero like ``x``; a Python number for a weak value, which takes the dtype of the array
    it meets (NEP 50: a float32 array times a Python float is float32)."""
    zero = np.zeros((), x.dtype)
    return zero.item() if x.weak else np.broadcast_to(zero, x.shape)


class Builder:
    """Appends new nodes that inherit the source line and scope of the node they replace."""

    def __init__(self, origin: Node, prefix: str):
        self.origin, self.prefix, self.nodes = origin, prefix, []

    def __call__(self, op, *inputs, **attrs) -> Var:
        shape, dtype = infer(op, inputs, attrs)
        out = Var(f"{self.prefix}_{len(self.nodes)}", shape, dtype)
        self.nodes.append(Node(op, inputs, attrs, (out,), self.origin.source, self.origin.scope))
        return out


def _count(x: Var, axis) -> int:
    axes = range(x.ndim) if axis is None else axis
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def _divide_by_count(b: Builder, s: Var, n: int) -> Var:
    """``s / n`` as NumPy's mean and var divide: by an ``intp`` count, so a float32 or complex64
    sum is divided in float64 or complex128 and rounded back once (complex64 division in its
    own precision can differ by an ulp)."""
    q = b("divide", s, np.intp(n))
    return q if q.dtype == s.dtype else b("astype", q, dtype=s.dtype)


def _mean(b: Builder, x, axis, keepdims, dtype):
    out_dtype = b.origin.out.dtype
    if dtype is None and out_dtype == np.float16:  # NumPy's mean of float16 adds in float32
        s = b("sum", x, axis=axis, keepdims=keepdims, dtype=np.dtype(np.float32))
        return b("astype", _divide_by_count(b, s, _count(x, axis)), dtype=out_dtype)
    s = b("sum", x, axis=axis, keepdims=keepdims, dtype=out_dtype)
    return _divide_by_count(b, s, _count(x, axis))


def _var(b: Builder, x, axis, keepdims, dtype, ddof):
    acc = np.dtype(dtype) if dtype is not None else None
    if acc is None:
        acc = np.dtype(np.float64) if x.dtype.kind in "biu" else x.dtype
    n = _count(x, axis)
    m = b("sum", x, axis=axis, keepdims=True, dtype=acc)
    m = _divide_by_count(b, m, n)
    d = b("subtract", x, m)
    sq = (
        b("real", b("multiply", d, b("conjugate", d)))
        if d.dtype.kind == "c"
        else b("multiply", d, d)
    )
    s = b("sum", sq, axis=axis, keepdims=keepdims, dtype=sq.dtype)
    return _divide_by_count(b, s, max(n - ddof, 0))


# op -> fn(builder, node): the nodes computing it from primitive reductions and elementwise ops
LOWERINGS = {
    "mean": lambda b, n: _mean(
        b, n.inputs[0], n.attrs["axis"], n.attrs["keepdims"], n.attrs["dtype"]
    ),
    "var": lambda b, n: _var(b, n.inputs[0], *_var_args(n)),
    "std": lambda b, n: b("sqrt", _var(b, n.inputs[0], *_var_args(n))),
}


def _var_args(n: Node) -> tuple:
    a = n.attrs
    return a["axis"], a["keepdims"], a["dtype"], a.get("ddof", 0)


def lift_array_literals(graph: Graph) -> Graph:
    """Array constants written into nodes become ``const`` inputs, so kernels can read them."""
    from ..ir import InputSpec

    inputs, specs, consts, nodes = list(graph.inputs), list(graph.specs), dict(graph.constants), []
    taken = {v.name for v in graph.inputs} | {o.name for n in graph.nodes for o in n.outputs}
    fresh = (f"lit{k}" for k in itertools.count() if f"lit{k}" not in taken)
    for node in graph.nodes:
        ins = []
        for x in node.inputs:
            if isinstance(x, np.ndarray) and x.ndim > 0:
                v = Var(next(fresh), x.shape, x.dtype)
                inputs.append(v)
                specs.append(InputSpec("const", "literal"))
                consts[v] = x
                x = v
            ins.append(x)
        nodes.append(node.replace(inputs=tuple(ins)))
    if len(inputs) == len(graph.inputs):
        return graph
    return graph.replace(inputs=inputs, specs=specs, constants=consts, nodes=nodes)


def lower(graph: Graph) -> Graph:
    """Replace mean/var/std by primitive reductions and elementwise ops; lift array literals."""
    graph = lift_array_literals(graph)
    mapping, kept = {}, []
    for node in graph.nodes:
        node = node.replace(inputs=tuple(resolve(mapping, x) for x in node.inputs))
        b = Builder(node, f"{node.out.name}l")
        rule = LOWERINGS.get(node.op)
        res = rule(b, node) if rule is not None else None
        if res is None:
            kept.append(node)
            continue
        if res.dtype != node.out.dtype:
            res = b("astype", res, dtype=node.out.dtype)
        if res.shape != node.out.shape:
            res = b("reshape", res, shape=node.out.shape)
        kept.extend(b.nodes)
        mapping[node.out] = res
    return rebuild(graph, kept, mapping)
