"""Reshapes that copy, sunk below the elementwise ops that read them.

NumPy copies ``b.reshape(shape)`` where ``b``'s strides cannot express the new shape: a
broadcast whose repeated axis merges with another (``np.broadcast_to(x[:, None], (n, 8))
.reshape(-1)``, the ``np.repeat`` idiom), a transpose flattened. An elementwise op reading
only such a reshape (and numbers, or 0-d values) computes the same values in the same order
over the reshape's input, whose result, C-contiguous, reshapes without a copy: one pass over
the data instead of a copy and then a pass.

>>> import numpy as np, tracekit as tk
>>> def repeat(x):
...     return np.broadcast_to(x[:, None], (3, 4)).reshape(-1) * 2.0
>>> g = sink_reshapes(tk.trace(repeat, np.ones(3)).graph)
>>> [(n.op, n.out.shape) for n in g.nodes]
[('index', (3, 1)), ('broadcast_to', (3, 4)), ('multiply', (3, 4)), ('reshape', (12,))]
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Node, Var
from ..ops import OPS, strides_only
from .dce import dce
from .rewrite import rebuild, resolve

_fresh = itertools.count()


def sink_reshapes(graph: Graph) -> Graph:
    """``graph`` with each elementwise op that reads only copying reshapes of one shape (and
    numbers) computed over their inputs, and reshaped after (then the ops after it, in turn)."""
    producer: dict = {}
    sunk: dict = {}  # a reshape's result worth computing before it -> the reshape's input
    kept, mapping = [], {}
    for node in graph.nodes:
        node = node.replace(inputs=tuple(resolve(mapping, x) for x in node.inputs))
        moved = _sunk(node, sunk)
        if moved is None:
            kept.append(node)
            producer.update((o, node) for o in node.outputs)
            if OPS[node.op].view and OPS[node.op].may_copy and _copies(node, producer):
                sunk[node.out] = node.inputs[0]
            continue
        inner, reshape = moved
        kept += [inner, reshape]
        sunk[reshape.out] = inner.out  # (the next op sinks below it too)
        mapping[node.out] = reshape.out
    if not mapping:
        return graph
    return dce(rebuild(graph, kept, mapping))


def _sunk(node: Node, sunk: dict):
    """(``node`` over the reshapes' inputs, the reshape of its result) or None."""
    if OPS[node.op].kind != "elementwise" or len(node.outputs) != 1:
        return None
    arrays = [x for x in node.inputs if isinstance(x, Var) and x.shape != ()]
    if not arrays or any(x not in sunk or x.shape != node.out.shape for x in arrays):
        return None
    shapes = {sunk[x].shape for x in arrays}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    out = node.out
    inner_out = Var(f"{out.name}_r{next(_fresh)}", shape, out.dtype, out.weak)
    inputs = tuple(sunk.get(x, x) if isinstance(x, Var) else x for x in node.inputs)
    inner = Node(node.op, inputs, node.attrs, (inner_out,), node.source, node.scope)
    reshaped = Var(f"{out.name}_r{next(_fresh)}", out.shape, out.dtype, out.weak)
    reshape = Node(
        "reshape", (inner_out,), {"shape": out.shape}, (reshaped,), node.source, node.scope
    )
    return inner, reshape


def _copies(reshape: Node, producer: dict) -> bool:
    """Whether NumPy copies to make ``reshape``, its input a chain of views (a broadcast, a
    transpose, a slice) of a value taken as C-contiguous (as the planner makes every value it
    computes): the chain is applied to a stand-in of those strides (``ops.strides_only``),
    and the reshape asked not to copy."""
    chain, x = [], reshape.inputs[0]
    while isinstance(x, Var) and x in producer:
        made = producer[x]
        if not (OPS[made.op].view and not OPS[made.op].may_copy and len(made.inputs) == 1):
            break
        chain.append(made)
        x = made.inputs[0]
    if not chain or not isinstance(x, Var) or x.dtype.itemsize == 0:
        return False  # a reshape of a value the planner made C-contiguous: a view
    layout = strides_only(x.shape, x.dtype)
    try:
        for made in reversed(chain):
            layout = OPS[made.op].impl(layout, **made.attrs)
    except Exception:  # an index that moves with a loop's iteration: not known here
        return False
    try:
        np.reshape(layout, reshape.out.shape, copy=False)
    except ValueError:
        return True
    except TypeError:  # a NumPy before 2.1 (no copy=): a reshape of views mostly copies
        return True
    return False
