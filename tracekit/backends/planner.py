"""The fusion planner, shared by the cpu and cuda targets.

It walks the graph once, in order, and puts each node in one of:

- a **fused group** (one loop nest): elementwise ops over one iteration shape, with broadcast
  inputs; a group becomes a *row group* when it also holds reductions over the same axes, whose
  per-row results feed later elementwise ops in the same loop nest (softmax, layernorm: one
  kernel, the row held in cache); a *scan group* for cumsum/cumprod;
- a **view step**: transposes, slices and reshapes of materialised arrays, done by NumPy as
  views (no copy);
- a **host step**: ops that run as NumPy calls (matmul and friends go to BLAS this way), with the
  reason recorded.

Every refused fusion is recorded in the plan with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph, Node, Var, format_node
from ..numba_interop import kernel_function
from ..ops import OPS
from . import matmul_threads
from .broadcasts import broadcast_values
from .broadcasts import decisions as broadcast_decisions

# False: cheap values read broadcast get kernels of their own (benchmarks' "before")
BROADCASTS = True

SUPPORTED_KINDS = "biufc"


@dataclass(eq=False)
class Group:
    """One fused loop nest. ``axes`` is None for a plain elementwise group."""

    id: int
    kind: str  # "elementwise" | "row" | "scan"
    shape: tuple
    axes: tuple | None = None
    nodes: list = field(default_factory=list)
    role: dict = field(default_factory=dict)  # Var -> "full" | "row"

    @property
    def name(self) -> str:
        return f"k{self.id}"

    @property
    def row_shape(self) -> tuple:
        return tuple(1 if i in self.axes else d for i, d in enumerate(self.shape))


@dataclass
class Step:
    """One thing the compiled function does, in order."""

    kind: str  # "kernel" | "view" | "host"
    nodes: list
    group: Group | None = None
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    reason: str = ""
    tiles: list = field(default_factory=list)  # producers computed in tiles inside (tiles.py)
    kernel_inputs: list | None = None  # with tiles: the inputs of the kernel's own nodes

    @property
    def name(self) -> str:
        return self.group.name if self.group else f"{self.kind}:{self.nodes[0].op}"


@dataclass
class Refusal:
    """A fusion the planner did not make, and why."""

    node: Node
    reason: str

    def __str__(self):
        return f"%{self.node.out.name} ({self.node.op}): {self.reason}"


@dataclass
class Plan:
    """The compiled program: steps in order, and the fusions refused."""

    graph: Graph
    steps: list
    refusals: list
    owned: frozenset = frozenset()  # inputs the runner may write into (a loop's carried state)
    offsets: list = field(default_factory=list)  # values fused across offsets, or kept (offsets.py)
    broadcasts: list = field(default_factory=list)  # values computed where read (broadcasts.py)
    dask: list = field(default_factory=list)  # target dask: what each step became (last call)

    @property
    def kernels(self) -> list:
        return [s for s in self.steps if s.kind == "kernel"]

    def __str__(self):
        lines = [f"plan: {len(self.kernels)} fused kernel(s), {len(self.steps)} step(s)"]
        for s in self.steps:
            if s.kind == "kernel":
                g = s.group
                what = f"{g.kind} over {list(g.shape)}" + (
                    f", axes {list(g.axes)}" if g.axes else ""
                )
                lines.append(f"  kernel {g.name}: {len(s.nodes)} node(s), {what}")
                for t in s.tiles:
                    lines.append(
                        f"    computes kernel {t.producer.group.name} in tiles of {t.rows} rows"
                        f" (+{t.hi - t.lo} halo rows)"
                    )
            else:
                lines.append(
                    f"  {s.kind} {s.nodes[0].op}" + (f"  ({s.reason})" if s.reason else "")
                )
            for n in s.nodes:
                lines.append(f"      {format_node(n, comment=False)}")
        if self.refusals:
            lines.append("refused fusions:")
            lines += [f"  {r}" for r in self.refusals]
        if self.offsets:
            lines.append("fusion across offsets:")
            lines += [f"  {d}" for d in self.offsets]
        if self.broadcasts:
            lines.append("values computed where read broadcast:")
            lines += [f"  {d}" for d in self.broadcasts]
        if self.dask:
            lines.append("dask layers (the last call's chunks):")
            lines += [f"  {d}" for d in self.dask]
        return "\n".join(lines)

    def __bool__(self):
        return True


def _supported_dtypes(node: Node) -> bool:
    vs = node.var_inputs + list(node.outputs)
    return all(v.dtype.kind in SUPPORTED_KINDS and v.dtype != np.float16 for v in vs)


def _literal_ok(x) -> bool:
    if isinstance(x, Var):
        return True
    if x is None:
        return True
    return isinstance(x, bool | int | float | complex | np.generic) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    )


def _numpy_only(node: Node) -> str | None:
    """Why an elementwise op is left to NumPy though its dtypes are supported, or None."""
    from .scalar import loop_dtypes

    if not OPS[node.op].complex and any(
        v.dtype.kind == "c" for v in node.var_inputs + list(node.outputs)
    ):
        return f"complex {node.op}: NumPy's special values (inf, nan) are kept"
    if OPS[node.op].ufunc is not None and np.dtype(np.float16) in loop_dtypes(node)[0]:
        return f"NumPy computes {node.op} of {node.var_inputs[0].dtype} in float16"
    if not _has_lowering(node.op):
        return f"no compiled lowering of {node.op} (neither a template nor numba's np.{node.op})"
    return None


def _has_lowering(op: str) -> bool:
    """An elementwise op compiles when the scalar templates spell it or, for a ufunc without
    one, numba implements that ufunc (the emitters then write ``np.<op>(...)``); every other
    op takes the default, a NumPy call between kernels, with this reason in the plan."""
    from numba.np import ufunc_db

    from .scalar import CPU_TEMPLATES, TEMPLATES

    uf = OPS[op].ufunc
    return uf is None or op in TEMPLATES or op in CPU_TEMPLATES or uf in ufunc_db.get_ufuncs()


def scalar_pyop(node: Node) -> bool:
    """A python op whose function is a numba dispatcher that also works on scalars, with one
    output of the inputs' broadcast shape: it is called per element inside fused kernels."""
    if OPS[node.op].kind != "opaque" or len(node.outputs) != 1 or not node.attrs["pyop"].is_numba:
        return False
    if node.attrs["pyop"].pass_workspace:  # it reads the run's workspace: called on the host
        return False
    if not all(isinstance(x, Var) for x in node.inputs) or not node.inputs:
        return False
    if np.broadcast_shapes(*(x.shape for x in node.inputs)) != node.out.shape:
        return False
    import numba

    disp = kernel_function(node.attrs["pyop"].fn, [x.dtype for x in node.inputs])
    if disp is None:
        return False
    argtypes = tuple(numba.from_dtype(x.dtype) for x in node.inputs)
    try:
        disp.compile(argtypes)
        restype = disp.overloads[argtypes].signature.return_type
    except Exception:  # not typable on scalars: an array function, run as a host step
        return False
    return isinstance(restype, numba.types.Number | numba.types.Boolean)


def classify(node: Node) -> str:
    """``elementwise``, ``reduce``, ``scan``, ``view`` or ``host``."""
    op = OPS[node.op]
    if not _supported_dtypes(node) or any(v.size == 0 for v in (*node.outputs, *node.var_inputs)):
        return "host"  # empty arrays (a reduction over an empty axis too): NumPy's results
    if op.kind == "opaque":
        return "elementwise" if scalar_pyop(node) else "host"
    if op.kind == "elementwise" and _numpy_only(node):
        return "host"
    if (op.kind == "elementwise" and all(_literal_ok(x) for x in node.inputs)) or op.uniform:
        return "elementwise"
    red = accumulation(node)
    if red is not None:
        if not isinstance(node.inputs[0], Var):
            return "host"  # of a literal that passes folded in (fuzz: cpu-full-7100672)
        if not red.complex and "c" in (node.inputs[0].dtype.kind, node.out.dtype.kind):
            return "host"
        return "reduce" if op.reduction is not None else "scan"
    if op.view and len(node.inputs) == 1:  # an index with index arrays gathers: a copy
        return "view"
    return "host"


def is_reduction(node: Node) -> bool:
    """A reduction the compiled loops accumulate (mean/var/std are lowered to sums first)."""
    return OPS[node.op].reduction is not None


def calls_blas(node: Node) -> bool:
    """Whether ``node`` calls BLAS or LAPACK through NumPy: a matmul-kind op."""
    return OPS[node.op].kind == "matmul"


def blas_out(node: Node) -> bool:
    """Whether ``node`` is a BLAS call NumPy writes into a given buffer (``out=``): a matmul-kind
    op that is a ufunc (``np.matmul``; ``np.dot`` and ``np.tensordot`` allocate their own)."""
    return calls_blas(node) and OPS[node.op].ufunc is not None


def accumulation(node: Node):
    """The :class:`~tracekit.ops.Reduction` a reduction or scan node accumulates with."""
    op = OPS[node.op]
    return op.reduction or op.scan


def _aligned(shape, ndim) -> tuple:
    return (1,) * (ndim - len(shape)) + tuple(shape)


class Planner:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.group_of: dict = {}  # Var -> Group
        self.deps: dict = {}  # Var -> bitmask of groups it depends on
        self.groups: list[Group] = []
        self.order: list = []  # Group or Node (non-fused), in program order
        self.refusals: list[Refusal] = []
        self.open: list[Group] = []
        self.gdeps: dict = {}  # group id -> bitmask of the groups its nodes read from
        # cheap values read broadcast: computed in each group reading them (broadcasts.py)
        self.broadcast = broadcast_values(graph, classify) if BROADCASTS else {}

    # -- dependencies
    def _dep(self, x) -> int:
        if not isinstance(x, Var):
            return 0
        g = self.group_of.get(x)
        return self.deps.get(x, 0) | (1 << g.id if g is not None else 0)

    def _closure(self, mask: int) -> int:
        """``mask`` plus every group those groups read from, transitively: a group runs as a
        whole, so a value made by it waits for everything any of its nodes reads."""
        seen, todo = 0, mask
        while todo:
            low = todo & -todo
            todo ^= low
            if not seen & low:
                seen |= low
                todo |= self.gdeps.get(low.bit_length() - 1, 0) & ~seen
        return seen

    def _cycle_free(self, node: Node, g: Group) -> bool:
        """Joining ``g`` is safe if no input outside ``g`` depends on ``g``."""
        bit = 1 << g.id
        return all(
            self.group_of.get(v) is g or not (self._closure(self._dep(v)) & bit)
            for v in node.var_inputs
        )

    def _new_group(self, kind, shape, axes=None) -> Group:
        g = Group(len(self.groups), kind, tuple(shape), axes)
        self.groups.append(g)
        self.order.append(g)
        self.open.append(g)
        return g

    def _waits_for(self, node: Node) -> int:
        """The groups ``node``'s inputs wait for (a bitmask)."""
        dep = 0
        for v in node.var_inputs:
            dep |= self._dep(v)
        return dep

    def _add(self, g: Group, node: Node, role: str):
        self._computed_here(g, node)
        g.nodes.append(node)
        dep = self._waits_for(node)
        for o in node.outputs:
            self.group_of[o] = g
            self.deps[o] = dep & ~(1 << g.id)
            g.role[o] = role
        self.gdeps[g.id] = self.gdeps.get(g.id, 0) | (dep & ~(1 << g.id))

    def _computed_here(self, g: Group, node: Node):
        """Put the cheap values ``node`` reads broadcast (and those they read) in ``g`` before
        it, where ``g`` does not compute them yet: each group reading one computes it."""
        for x in node.var_inputs:
            if x in self.broadcast and x not in g.role:
                made = self.broadcast[x]
                self._computed_here(g, made)
                g.nodes.append(made)
                g.role[x] = "full"

    def _mark_computed_where_read(self, node: Node):
        """``node`` is computed in the groups that read it (:meth:`_computed_here`): in none
        of its own, its value waiting for what its inputs wait for."""
        self.deps[node.outputs[0]] = self._waits_for(node)

    def _mark_external(self, node: Node):
        dep = self._waits_for(node)
        for o in node.outputs:
            self.deps[o] = dep
        self.order.append(node)

    # -- roles inside a group
    def _row_like(self, g: Group, v: Var) -> bool:
        return g.axes is not None and _aligned(v.shape, len(g.shape)) == g.row_shape

    def _fits(self, g: Group, node: Node) -> str | None:
        """The role ``node`` would have in ``g`` or None; reasons go to ``self._why``."""
        shape = node.out.shape
        if g.kind == "scan":
            return None
        if shape == g.shape:
            role = "full"
        elif g.axes is not None and shape in (g.row_shape, self._squeezed(g)):
            role = "row"
        else:
            return None
        for x in node.inputs:
            if not isinstance(x, Var):
                continue
            inner = self.group_of.get(x) is g
            if inner:
                r = g.role[x]
                if role == "full" and r == "row" and not self._row_like(g, x):
                    self._why = "per-row value used with a shape that is not the row's"
                    return None
                if role == "row" and r == "full":
                    return None
            else:
                if role == "row" and x in self.broadcast:
                    self._why = "a per-row op reading a value computed where it is read"
                    return None
                if role == "row" and x.size != 1:
                    self._why = "non-scalar input to a per-row op"
                    return None
                if role == "full":
                    try:
                        if np.broadcast_shapes(x.shape, g.shape) != g.shape:
                            return None
                    except ValueError:
                        return None
        return role

    def _squeezed(self, g: Group) -> tuple:
        return tuple(d for i, d in enumerate(g.shape) if i not in g.axes)

    # -- the walk
    def plan(self) -> Plan:
        for node in self.graph.nodes:
            kind = classify(node)
            if node.outputs and node.outputs[0] in self.broadcast:
                self._mark_computed_where_read(node)
                continue
            if kind == "elementwise":
                self._elementwise(node)
            elif kind == "reduce":
                self._reduce(node)
            elif kind == "scan":
                self._scan(node)
            elif kind == "view" and OPS[node.op].keeps_order and self._row_alias(node):
                pass
            else:
                self._external(node, kind)
        return self._finish()

    def _candidates(self, node: Node):
        own = [self.group_of[v] for v in node.var_inputs if v in self.group_of]
        seen, out = set(), []
        for g in own + list(reversed(self.open)):
            if g.id not in seen:
                seen.add(g.id)
                out.append(g)
        return out

    def _elementwise(self, node: Node):
        self._why = None
        for g in self._candidates(node):
            if g not in self.open:
                continue
            role = self._fits(g, node)
            if role and self._cycle_free(node, g):
                self._add(g, node, role)
                return
        for v in node.var_inputs:
            g = self.group_of.get(v)
            if g is not None and g.shape != node.out.shape and self._why:
                self.refusals.append(Refusal(node, self._why))
                break
        g = self._new_group("elementwise", node.out.shape)
        self._add(g, node, "full")

    def _reduce(self, node: Node):
        x = node.inputs[0]
        axes = node.attrs.get("axis")
        axes = (
            tuple(range(x.ndim)) if axes is None else (axes if isinstance(axes, tuple) else (axes,))
        )
        g = self.group_of.get(x)
        if (
            g is not None
            and g in self.open
            and g.shape == x.shape
            and g.role[x] == "full"
            and (g.axes is None or g.axes == axes)
            and g.kind != "scan"
            and self._cycle_free(node, g)
        ):
            g.kind, g.axes = "row", axes
            self._add(g, node, "row")
            return
        if g is not None:
            self.refusals.append(
                Refusal(node, f"its input %{x.name} is in kernel {g.name} over other axes/shape")
            )
        else:  # a sibling reduction of an input over the same rows (layernorm: mean and var),
            # or the first one beside elementwise work of its shape (``np.sin(x)`` added to
            # ``x``'s layer norm: computed in the pass that reads it, not in a kernel before)
            for h in reversed(self.open):
                same = h.shape == x.shape and h.axes in (axes, None) and h.kind != "scan"
                if same and self._cycle_free(node, h):
                    h.kind, h.axes = "row", axes
                    self._add(h, node, "row")
                    return
        g = self._new_group("row", x.shape, axes)
        self._add(g, node, "row")

    def _scan(self, node: Node):
        g = self._new_group("scan", node.inputs[0].shape, (node.attrs["axis"],))
        self._add(g, node, "full")
        self.open.remove(g)

    def _row_alias(self, node: Node) -> bool:
        """A reshape that only adds/removes unit dims of a per-row value stays in the row group."""
        (x,) = node.inputs
        g = self.group_of.get(x)
        if g is None or g not in self.open or g.role.get(x) != "row":
            return False
        if node.out.shape not in (g.row_shape, self._squeezed(g)) and not self._row_like(
            g, node.out
        ):
            return False
        self._add(g, node, "row")
        return True

    def _external(self, node: Node, kind: str):
        for v in node.var_inputs:
            g = self.group_of.get(v)
            if g is not None:
                self.refusals.append(
                    Refusal(node, f"not fused with kernel {g.name}: {_host_reason(node)}")
                )
                break
        self._mark_external(node)

    def _finish(self) -> Plan:
        used_outside: dict = {}
        for item in self.order:
            nodes = item.nodes if isinstance(item, Group) else [item]
            for n in nodes:
                for v in n.var_inputs:
                    g = self.group_of.get(v)
                    if g is not None and (not isinstance(item, Group) or item is not g):
                        used_outside.setdefault(v, True)
        for v in list(self.graph.outputs) + [gd.var for gd in self.graph.guards]:
            if v in self.group_of:
                used_outside[v] = True
        steps = []
        for item in self.order:
            if isinstance(item, Group):
                if not item.nodes:
                    continue
                produced = {o for n in item.nodes for o in n.outputs}
                ins, seen = [], set()
                for n in item.nodes:
                    for v in n.var_inputs:
                        if v not in produced and v not in seen:
                            seen.add(v)
                            ins.append(v)
                outs = [o for n in item.nodes for o in n.outputs if o in used_outside]
                steps.append(Step("kernel", item.nodes, item, ins, outs))
            else:
                kind = classify(item)
                reason = "" if kind == "view" else _host_reason(item)
                steps.append(
                    Step(
                        "view" if kind == "view" else "host",
                        [item],
                        None,
                        item.var_inputs,
                        list(item.outputs),
                        reason,
                    )
                )
        fused = broadcast_decisions(self.graph, self.broadcast)
        return Plan(self.graph, _topological(steps), self.refusals, broadcasts=fused)


def _topological(steps: list) -> list:
    """Steps in an order where every value is produced before it is read.

    A group sits where it was opened, but it may later absorb a node that reads a value
    produced after that point (a view, a host op); such a group moves down, and so does
    everything that reads it. Among ready steps the planner's order is kept.
    """
    producer = {o: i for i, st in enumerate(steps) for o in st.outputs}
    for i, st in enumerate(steps):
        for n in st.nodes:
            for o in n.outputs:
                producer.setdefault(o, i)
    deps = [
        {producer[v] for n in st.nodes for v in n.var_inputs if producer.get(v, i) != i}
        for i, st in enumerate(steps)
    ]
    done, order = set(), []
    while len(order) < len(steps):
        for i in range(len(steps)):
            if i not in done and deps[i] <= done:
                done.add(i)
                order.append(steps[i])
                break
        else:
            raise RuntimeError("fusion plan has a cycle")  # the planner prevents this
    return order


def _host_reason(node: Node) -> str:
    op = OPS[node.op]
    if op.kind == "matmul":
        if op.lapack:
            return "LAPACK through NumPy"
        if blas_out(node) and matmul_threads.runs_here(node):
            return "BLAS on numba's threads, a block of rows each"
        return "BLAS through NumPy"
    if op.kind == "opaque":
        if node.attrs["pyop"].is_numba:
            return "numba python op that is not elementwise: called between kernels"
        return "Python op: the plan splits around it (kernels before, the call, kernels after)"
    if not _supported_dtypes(node):
        return "dtype not supported in compiled loops"
    if op.kind == "elementwise" and _numpy_only(node):
        return _numpy_only(node)
    if any(v.size == 0 for v in (*node.outputs, *node.var_inputs)):
        return "empty array"
    if classify(node) == "view":
        return f"{node.op} is a NumPy view (no copy)"
    return f"{node.op} runs as a NumPy call"


def plan(graph: Graph) -> Plan:
    """Fusion plan for ``graph`` (already lowered)."""
    return Planner(graph).plan()


def in_place_updates(plan: Plan, handed: dict | None = None) -> set:
    """Indices of host steps of a ``store`` op (index_update) that may write into their base's
    buffer: the base is a fresh buffer of this run (a kernel's or a copying host op's result,
    or an input the plan owns; not another input, a view or a Python op's value) and nothing
    reads it afterwards. ``handed``: :func:`handed_over` of ``plan``, where the caller has it."""
    handed = handed_over(plan) if handed is None else handed
    return {i for i, ks in handed.items() if ks and OPS[plan.steps[i].nodes[0].op].store}


def handed_over(plan: Plan) -> dict:
    """Per host step of a ``store`` op or a loop, the positions of its inputs whose buffers it
    may take over instead of copying: a store's base, a loop's carried state; each a fresh
    buffer of this run (a kernel's or a copying host op's result, or an input the plan owns;
    not another input, a view or a Python op's value) read once by the step and never after."""
    g = plan.graph
    producer, last, root = {}, {}, {}
    for i, st in enumerate(plan.steps):
        for v in st.inputs:
            last[root.get(v, v)] = i  # a read of a view is a read of the buffer it views
        for o in st.outputs:
            producer[o] = st
        if st.kind == "view" or (st.kind == "host" and OPS[st.nodes[0].op].may_view):
            base = st.nodes[0].inputs[0]
            if isinstance(base, Var):
                for o in st.outputs:
                    root[o] = root.get(base, base)
    for v in list(g.outputs) + [gd.var for gd in g.guards]:
        last[root.get(v, v)] = len(plan.steps)

    def fresh(v) -> bool:
        src = producer.get(v)
        return v in plan.owned or (
            src is not None
            and (
                src.kind == "kernel"
                or (src.kind == "host" and OPS[src.nodes[0].op].kind != "opaque")
            )
        )

    out = {}
    for i, st in enumerate(plan.steps):
        if st.kind != "host":
            continue
        node = st.nodes[0]
        if OPS[node.op].store:
            candidates = [0]  # a host op's view keeps its base's buffer: _store checks owndata
        elif OPS[node.op].kind == "control":  # a loop's state: its own buffers, not views
            candidates = [
                k for k in range(node.attrs["carried"]) if root.get(node.inputs[k]) is None
            ]
        else:
            continue
        out[i] = tuple(
            k
            for k in candidates
            if isinstance(v := node.inputs[k], Var)
            and not v.weak
            and fresh(v)
            and last.get(root.get(v, v)) == i
            and node.inputs.count(v) == 1
        )
    return out


def escaping(plan: Plan, handed: dict | None = None) -> set:
    """Vars whose memory a caller can see: outputs, what views of them are taken from, and the
    bases that in-place updates write them into."""
    g = plan.graph
    esc = set(g.outputs)
    handed = handed_over(plan) if handed is None else handed
    for i in range(len(plan.steps) - 1, -1, -1):
        step = plan.steps[i]
        if (step.kind == "view" or handed.get(i)) and any(o in esc for o in step.outputs):
            if handed.get(i):  # a store's or a loop's result may be the buffer handed to it
                esc.update(step.nodes[0].inputs[k] for k in handed[i])
            else:  # a view: of its input (none where a constant was folded into a literal)
                esc.update(step.inputs)
    return esc
