"""Graph -> Python source: a ``def`` equivalent to the graph (``Traced.code``)."""

from __future__ import annotations

import numpy as np

from .ir import Graph, Var, format_node
from .ops import OPS, helper_source


def graph_to_python(graph: Graph, name: str | None = None) -> str:
    """Source of a NumPy function computing ``graph``; paste it anywhere and run it.

    Captured arrays and constants become keyword-only parameters (their labels in a comment);
    constants of up to ``MAX_INLINE`` elements default to their values, so the function runs
    as it is. Write-backs into inputs are ``np.copyto`` calls, as the traced function did.
    """
    name = name or (graph.name if graph.name.isidentifier() else "traced")
    args = [v.ident for v, s in zip(graph.inputs, graph.specs) if s.kind == "arg"]
    extra = [(v, s) for v, s in zip(graph.inputs, graph.specs) if s.kind != "arg"]
    params = args + (["*"] + [_param(v, s, graph) for v, s in extra] if extra else [])
    helpers = []
    for n in graph.nodes:
        src = helper_source(OPS[n.op])
        if src and src not in helpers:
            helpers.append(src)
    lines = ["import numpy as np", ""]
    for h in helpers:
        lines += [h.rstrip(), "", ""]
    lines.append(f"def {name}({', '.join(params)}):")
    for v, s in extra:
        lines.append(f"    # {v.ident}: {s.kind} {s.label} {v.type}")
    for n in graph.nodes:
        lines.append(f"    # {format_node(n)}")
        ins = [x.ident if isinstance(x, Var) else _literal(x) for x in n.inputs]
        targets = ", ".join(o.ident for o in n.outputs)
        lines.append(f"    {targets} = {OPS[n.op].code(ins, dict(n.attrs))}")
    results = [o.ident for o in graph.outputs[: graph.n_results]]
    written = {graph.inputs[ii] for _, ii in graph.writebacks}
    for i, o in enumerate(graph.outputs[: graph.n_results]):
        if _may_view(graph, o, written):  # copy before the write-back changes it
            lines.append(f"    {o.ident}_result = {o.ident}.copy()")
            results[i] = f"{o.ident}_result"
    for oi, ii in graph.writebacks:
        lines.append(f"    np.copyto({graph.inputs[ii].ident}, {graph.outputs[oi].ident})")
    if len(results) == 1:
        lines.append(f"    return {results[0]}")
    else:
        lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    return "\n".join(lines) + "\n"


MAX_INLINE = 256
_VIEW_OPS = ("index", "reshape", "transpose", "broadcast_to", "real", "imag")


def _may_view(graph, var, written) -> bool:
    """``var`` may be NumPy memory shared with an input that the function writes into."""
    producers = graph.producers()
    while var not in written:
        node = producers.get(var)
        if node is None or node.op not in _VIEW_OPS or not isinstance(node.inputs[0], Var):
            return False
        var = node.inputs[0]
    return True


def _param(v, spec, graph) -> str:
    value = graph.constants.get(v) if spec.kind == "const" else None
    if value is not None and np.size(value) <= MAX_INLINE:
        return f"{v.ident}={_literal(value)}"
    return v.ident


def _literal(x) -> str:
    from .ops import py_literal

    return py_literal(x)
