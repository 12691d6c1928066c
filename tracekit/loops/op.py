"""The ``loop`` op: a rolled Python loop, whose body is a graph run ``trips`` times.

A loop node's inputs are the initial values of its carried state, then its invariants; its
attributes are ``body`` (a :class:`~tracekit.ir.Graph`), ``trips`` and ``carried`` (how many of
the inputs are carried state). The body takes the carried values and the invariants, and
returns the next carried values, then the values used after the loop (the last iteration's);
the node's outputs are the body's outputs after the last iteration.

>>> import numpy as np, tracekit as tk
>>> def f(x):
...     for _ in range(3):
...         x = np.tanh(x) + 1.0
...     return x
>>> t = tk.trace(f, np.zeros(2))
>>> [n.op for n in t.graph.nodes]
['loop']
>>> t(np.zeros(2)).round(6)
array([1.942681, 1.942681])
"""

from __future__ import annotations

import numpy as np

from ..interpret import run
from ..ir import Graph, Node, Var, fmt_value
from ..ops import Op, register


def run_loop(*inputs, body: Graph, trips: int, carried: int):
    """Run ``body`` ``trips`` times from ``inputs`` (carried values, then invariants)."""
    state, invariants = list(inputs[:carried]), list(inputs[carried:])
    outs = state
    for _ in range(trips):
        outs = run(body, state + invariants)
        state = outs[:carried]
    given = {id(x) for x in inputs}  # a value the body passes through is the caller's array
    outs = [o.copy() if isinstance(o, np.ndarray) and id(o) in given else o for o in outs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def check_loop(node: Node):
    """Raise ``ValueError`` unless ``node``'s body is a valid graph whose values match the node's:
    its inputs the node's (carried first), its outputs the node's, each carried value's next
    value of the carried value's type."""
    body, carried = node.attrs.get("body"), node.attrs.get("carried")
    if not isinstance(body, Graph) or not isinstance(node.attrs.get("trips"), int):
        raise ValueError(f"a loop needs a body graph and a trip count: {node}")
    if not isinstance(carried, int) or not 0 <= carried <= min(len(body.inputs), len(body.outputs)):
        raise ValueError(f"a loop's carried count does not fit its body: {node}")
    body.check()
    if len(node.inputs) != len(body.inputs) or len(node.outputs) != len(body.outputs):
        raise ValueError(f"a loop's values do not match its body's: {node}")
    for x, v in zip(node.inputs, body.inputs):
        if not isinstance(x, Var) or x.shape != v.shape or x.dtype != v.dtype:
            raise ValueError(f"a loop passes {fmt_value(x)} where its body takes {v!r}: {node}")
    for o, b in zip(node.outputs, body.outputs):
        if o.shape != b.shape or o.dtype != b.dtype:
            raise ValueError(f"loop output %{o.name}: {o.type} is %{b.name}: {b.type} in its body")
    for v, b in zip(body.inputs[:carried], body.outputs[:carried]):
        if v.shape != b.shape or v.dtype != b.dtype:
            raise ValueError(f"carried %{v.name}: {v.type} becomes %{b.name}: {b.type}")


def loop_types(input_types, attrs) -> list:
    """A loop's outputs have its body's output types (``check_loop`` matches the inputs)."""
    return [(o.shape, o.dtype) for o in attrs["body"].outputs]


def _code(args, attrs):  # Traced.code writes a loop as a for statement (codegen_py)
    return f"_loop({', '.join(args)})"


LOOP = register(
    Op(
        "loop",
        "control",
        run_loop,
        _code,
        check=check_loop,
        type_rule=loop_types,
        doc="A rolled loop; attrs: body (Graph), trips, carried (see tracekit.loops).",
    )
)
