"""Blocks written into a constant array (``z = np.zeros(n); z[1:-1] = g``) as pads of the block
(``np.pad(g, (1, 1))``), which the kernels reading them read through the block itself, at
shifted indices, the constant where those fall outside it: no padded array is made.

The gradient of a slice is such a block: the gradient of ``x[1:-1]`` is zeros of ``x``'s shape
with ``g`` written at ``1:-1``. The backward graph of a stencil chain adds up these blocks of
its stages' gradients at the offsets the forward read them at (transposed offsets): with the
blocks read as pads, each backward stage is one kernel over its stage's shape reading the
gradient of the stage after it at shifted indices, as the forward stages read the stage
before. Where a stage is cheap, ``offsets.py`` pushes its pads through it (``pad(f(a, b))``
is ``f(pad(a), pad(b))`` where ``f`` of the inner pads' zeros is the outer pad's zero), so the
stage is computed again in the kernel reading it, as slices are fused across offsets: the
pads then read are pads of pads and of slices, each read through the array at the bottom
with each pad's zero outside its own block (``windows.py``).

Every pad read in place, and every one kept as an array (and why), is a :class:`PadRead` in
``Plan.offsets``.

>>> import numpy as np, tracekit as tk
>>> def loss(u):
...     lap = u[2:] + u[:-2] - 2.0 * u[1:-1]
...     return (lap * lap).sum()
>>> c = tk.compile(tk.trace(tk.grad(loss), np.zeros(8)), target="cpu", progress=False)
>>> len(c.plan.kernels), str(c.plan.offsets[0]).split(":")[0]  # the forward, again
(1, 'computed again at 2 offsets, 2 of them through pads')
>>> [str(d).split(" by ")[0] for d in c.plan.offsets if isinstance(d, PadRead)][2]
'read in place through %u: f64[8] (rows (1, 1) of -0.0 around %1, a view of it)'
>>> u = np.arange(8.0) ** 3
>>> bool(np.array_equal(c(u), tk.trace(tk.grad(loss), u)(u)))
True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node, Var
from ..ops import OPS
from ..passes.dce import dce
from .planner import Plan
from .windows import Window, read_through, view_windows

READ_IN_PLACE = True  # False: blocks stay NumPy calls (benchmarks/stencils.py's "before")


@dataclass(frozen=True)
class PadRead:
    """A pad (a block written into a constant array): read in place by its kernels, or kept."""

    value: Var
    fused: bool
    reason: str = ""
    source: object = None  # the Source of the node making the value
    how: str = ""  # (as OffsetFusion's: set for values computed in tiles only)

    def __str__(self):
        node = f"%{self.value.name}: {self.value.type}"
        if self.source is not None:
            node += f" at {self.source} `{self.source.text}`"
        if self.fused:
            return f"read in place through {self.reason}"
        return f"kept as an array: {node} ({self.reason})"

    @property
    def note(self) -> str:
        """What a drawing of the compiled graph says of the pad (``offsets.drawn_notes``)."""
        return f"a pad read in place through {self.reason}" if self.fused else ""


def pads_of_blocks(graph: Graph) -> Graph:
    """``graph`` with each ``index_update(full(c), g, idx)`` whose index is slices of step 1
    covering ``g`` whole as ``pad(g, pad_width, c)`` (the same result Var)."""
    if not READ_IN_PLACE:
        return graph
    made = {o: n for n in graph.nodes for o in n.outputs}
    nodes = [_as_pad(n, made, graph.constants) or n for n in graph.nodes]
    if all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph
    return dce(graph.replace(nodes=nodes)).check()


def _as_pad(n: Node, made: dict, constants: dict) -> Node | None:
    if not OPS[n.op].store or len(n.inputs) != 2:
        return None
    x, block = n.inputs
    if not isinstance(block, Var) or not block.shape or not block.size:
        return None
    if block.dtype != n.out.dtype:
        return None
    fill = _uniform_value(x, made, constants)
    if fill is None or x.shape != n.out.shape or x.dtype != n.out.dtype:
        return None
    w = Window.of(None, n.attrs["idx"], x.shape)
    if w is None or w.shape != block.shape or len(block.shape) != len(x.shape):
        return None
    if any(d != k or step != 1 for k, (d, _, step) in enumerate(w.dims)):
        return None
    pad_width = tuple(
        (start, size - start - m) for (_, start, _), size, m in zip(w.dims, x.shape, block.shape)
    )
    return n.replace(
        op="pad", inputs=(block,), attrs={"pad_width": pad_width, "constant_value": fill}
    )


def _uniform_value(x, made: dict, constants: dict):
    """The one value of every element of ``x`` (``np.full``'s, or a constant's), or None."""
    node = made.get(x)
    if node is not None and OPS[node.op].uniform and not node.var_inputs:
        return node.attrs.get("fill_value")
    a = constants.get(x) if isinstance(x, Var) else None
    if isinstance(a, np.ndarray) and a.size and (a == a.flat[0]).all():
        return a.dtype.type(a.flat[0])
    return None


def read_pads_in_place(plan: Plan) -> None:
    """Make each pad step of ``plan`` a view that the kernels reading it (or slices of it, or
    pads of it) read through its input, where every one of them can; add the decisions to
    ``plan.offsets``.

    A pad of a pad (or of a slice of one) is read through the array at the bottom, so pads
    stand or fall together: all start as views, and those that cannot be (and then the pads
    of them and the pads they read) go back to NumPy calls until none changes."""
    if any(st.kind == "host" and OPS[st.nodes[0].op].kind == "control" for st in plan.steps):
        return  # loop drivers run plans step by step: not there
    pads = [st for st in plan.steps if st.kind == "host" and OPS[st.nodes[0].op].pads]
    reasons = {id(st): st.reason for st in pads}
    why: dict = {}
    for st in pads:
        st.kind, st.reason = "view", ""
    while True:
        refused = {id(st): _why_not(plan, st) for st in pads if st.kind == "view"}
        refused = {k: v for k, v in refused.items() if v is not None}
        if not refused:
            break
        for st in pads:
            if id(st) in refused:
                st.kind, st.reason = "host", reasons[id(st)]
                why[id(st)] = refused[id(st)]
    for st in pads:
        node = st.nodes[0]
        if st.kind == "view":  # not a refusal of the planner's any more: a view
            plan.refusals = [r for r in plan.refusals if r.node is not node]
            reason = _how(st, _readers(plan, st), view_windows(plan))
        else:
            reason = why[id(st)]
        plan.offsets.append(PadRead(node.out, st.kind == "view", reason, node.source))


def _readers(plan: Plan, step) -> list:
    """The steps reading ``step``'s value, or a view step's of it (the views themselves not)."""
    values, out = set(step.outputs), []
    for st in plan.steps:
        if not values.intersection(st.inputs):
            continue
        if st.kind == "view":
            values.update(st.outputs)
        else:
            out.append(st)
    return out


def _why_not(plan: Plan, step) -> str | None:
    base = step.nodes[0].inputs[0]
    if not isinstance(base, Var) or not base.shape:
        return "of a number"
    if any(base in st.outputs for st in plan.steps if st.kind not in ("kernel", "view")):
        return "its block is a NumPy call's result"
    ends = set(plan.graph.outputs) | {gd.var for gd in plan.graph.guards}
    values = set(step.outputs)
    for st in plan.steps:
        if not values.intersection(st.inputs):
            continue
        if values.intersection(ends):
            return "a result of the function"
        if st.kind == "view":
            if values.intersection(st.outputs):
                continue
            values.update(st.outputs)
            continue
        if st.kind != "kernel" or st.group.kind != "elementwise":
            return f"read by {st.name}, not an elementwise kernel"
    if values.intersection(ends):
        return "a result of the function"
    if not _windows_cover(plan, step, _readers(plan, step)):
        return "its kernels cannot all read it through a window"
    return None


def _windows_cover(plan: Plan, step, readers: list) -> bool:
    """Every value of the pad (it, slices of it) a reader reads has a window of its block."""
    windows = view_windows(plan)
    values = set(step.outputs)
    for st in plan.steps:
        if st.kind == "view" and values.intersection(st.inputs):
            values.update(st.outputs)
    read = {v for st in readers for v in st.inputs if v in values}
    return all(read_through(v, windows) and windows[v].fill is not None for v in read)


def _how(step, readers: list, windows: dict) -> str:
    node = step.nodes[0]
    block = node.inputs[0]
    base = windows[node.out].base if node.out in windows else block
    around = "it" if base is block else f"%{block.name}, a view of it"
    fill = np.asarray(node.attrs["constant_value"]).item()
    widths = ", ".join(str(tuple(p)) for p in node.attrs["pad_width"])
    kernels = ", ".join(st.name for st in readers)
    return (
        f"%{base.name}: {base.type} (rows {widths} of {fill!r} around {around}) by kernel(s) "
        f"{kernels}: %{node.out.name} not made"
    )
