"""Fusion across constant offsets: a cheap elementwise value read only through slices is
computed again at the shifted indices inside the kernels that read it, instead of being
written out and read back.

Stencil codes chain stages that read the stage before at neighbouring points (``lap[1:, 1:-1]
- lap[:-1, 1:-1]``). The planner fuses a kernel with the values it reads at the position it
computes, not at other positions, so every stage would be materialised. Slicing commutes with
elementwise ops, ``f(a, b)[s] == f(a[s], b[s])`` when ``a`` and ``b`` have ``f``'s shape, so a
slice of ``f``'s result becomes ``f`` of slices of its inputs: the reading kernel then computes
``f`` itself, at its own offsets, from arrays it reads in place (``backends/windows.py``).

This costs the producer's operations once per slice read; it saves writing the producer's
array and reading it back once per slice. The cost model: the producer's elementwise cone
(what computing it from materialised values takes, transcendental functions weighing
``TRANSCENDENTAL`` operations) times the number of slices read must stay within
``MAX_RECOMPUTE`` operations per element. Every decision and refusal is an
:class:`OffsetFusion` in ``Plan.offsets``.

Pads (``pads.py``: a slice's gradient, zeros around it) are pushed through the same way on the
CPU, ``pad(f(a, b), 0) == f(pad(a, c), pad(b, d))`` where ``f(c, d)`` is that zero bit for bit
(``-a`` pads ``a`` with ``-0.0``; ``a * exp(v)`` pads ``exp(v)`` with 1, so ``v`` with 0), the
constants chosen among 0, -0.0 and 1, for ops exact there in any precision: each backward
stage of a stencil chain is then computed again in the kernel of the stage before it, where
the budget allows, as the forward's stages are.

A value over the budget whose last op reads one array (``-x``, ``6.0 * x``) is computed
again from that array at its offsets where that saves an array: the array then fits the
budget, or is written anyway (a backward stage hands the one before it both ``-x`` and
``6.0 * x``: one array ``x``, not two).

>>> import numpy as np, tracekit as tk
>>> def blur_then_diff(a):
...     b = 0.5 * (a[1:] + a[:-1])
...     return b[1:] - b[:-1]
>>> c = tk.compile(tk.trace(blur_then_diff, np.arange(6.0)), target="cpu", progress=False)
>>> len(c.plan.kernels), str(c.plan.offsets[0]).split(":")[0]
(1, 'computed again at 2 offsets')
>>> c(np.arange(6.0) ** 2)
array([2., 4., 6., 8.])
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Node, Var
from ..ops import OPS
from ..passes.cse import cse
from ..passes.dce import dce
from ..passes.rewrite import rebuild
from . import planner
from .broadcasts import DIVISIONS, broadcast_by, cheap_values
from .lowering import Builder
from .scalar import is_fast_math
from .windows import Window, without_ellipsis

MAX_RECOMPUTE = 24  # operations per element a producer may cost, summed over its slices read
TRANSCENDENTAL = 4  # the weight of a fast-math function (exp, tanh, ...) in that count
# the weight of a pad read in place: a test of its rows and a choice per element, which keeps
# the loop from vectorising as plain loads do (blur3's gradient, 2048², pads of pads read 9
# times per element at weight 0: 156 ms, against 68.7 ms as a kernel per stage)
PAD_READ = 4
THROUGH_PADS = True  # False: pads stop at the values they pad (benchmarks/stencils.py's "before")
ONE_INPUT = True  # False: a value over the budget is kept whole (benchmarks/stencils.py's "before")
# ops exact at 0, -0.0 and 1 whatever the precision they are computed in: what a pad pushed
# through them leaves outside its block is computed again in the kernel, and must be the pad's
# constant, bit for bit (``a / b`` pads ``a`` with 0 and ``b`` with 1; ``exp(v)`` padded with
# 1 pads ``v`` with 0): IEEE's correctly rounded ops, and the fast-math functions, exact there
# (tests/backends/test_offsets.py checks them in both precisions)
EXACT_AT_CONSTANTS = frozenset(
    "add subtract multiply negative positive absolute square maximum minimum where "
    "greater greater_equal less less_equal equal not_equal logical_and logical_or logical_not "
    "logical_xor divide sqrt exp expm1 log log1p sin tanh cos cosh".split()
)
# a division per pad read costs several multiplications, which the cost model counts as one:
# blur3's gradient (2048², pads pushed through its divisions by 3: 3 kernels, not 4) took 201
# and 210 ms against 152 and 174 ms with them kept (two runs, load averages 11-18)
THROUGH_DIVISIONS = False


@dataclass(frozen=True)
class OffsetFusion:
    """A value read through slices: computed again at each offset, or kept (and why)."""

    value: Var
    slices: int
    cost: int  # operations per element, for one computation of the value
    fused: bool
    reason: str = ""
    source: object = None  # the Source of the node making the value
    how: str = ""  # fused otherwise than computed again at each offset: in tiles (tiles.py)
    pads: int = 0  # of the offsets, those read through pads (their zeros outside the block)
    onto: Var | None = None  # computed again from this value alone, its input (kept or fused)

    def __str__(self):
        what = f"%{self.value.name}: {self.value.type}"
        if self.source is not None:
            what += f" at {self.source} `{self.source.text}`"
        if self.how:
            return f"computed in {self.how}: {what} ({self.reason})"
        if self.fused:
            through = f", {self.pads} of them through pads" if self.pads else ""
            if self.onto is not None:
                through += f", from %{self.onto.name} read there (the cone below over budget)"
            return (
                f"computed again at {self.slices} offsets{through}: {what} ({self.cost} op(s) "
                f"per element each, no array written and read back)"
            )
        return f"kept as an array: {what} ({self.reason})"


def fuse_at_offsets(graph: Graph, through_pads: bool = False) -> tuple[Graph, list]:
    """``graph`` with the slices of cheap elementwise values pushed through them, and the
    decisions (:class:`OffsetFusion`). ``through_pads``: the pads too (their kernels read
    pads in place, ``pads.py``): ``pad(f(a, b), 0)`` is ``f(pad(a, c), pad(b, d))`` where
    ``f(c, d)`` is that zero, bit for bit (its sign included)."""
    decisions: dict = {}
    through_pads = through_pads and THROUGH_PADS
    cheap: dict = {}  # broadcasts.cheap_values, updated where needed with what pushes made
    while True:
        found = _candidate(graph, decisions, through_pads, cheap)
        if found is None:
            return graph, list(decisions.values())
        graph = cse(dce(_push(graph, *found))).check()


def _candidate(graph: Graph, decisions: dict, through_pads: bool, cheap: dict):
    """The first elementwise node (in order) read only through static slices (and pads),
    whose cone of work, times its slices, fits; (node, its readers, the constants of its
    inputs' pads). Refusals go to ``decisions``."""
    readers: dict = {}
    for n in graph.nodes:
        for x in n.var_inputs:
            readers.setdefault(x, []).append(n)
    made = {o: n for n in graph.nodes for o in n.outputs}
    kept = set(graph.outputs) | {gd.var for gd in graph.guards}
    onto = {d.onto for d in decisions.values() if d.onto is not None}
    looked = False  # (cheap brought up to this graph: once, where first needed)
    for n in graph.nodes:
        if not _pushable(n) or n.out in kept:
            continue
        users = readers.get(n.out, [])
        pads = [u for u in users if OPS[u.op].pads]
        consts = None
        if pads:
            why, consts = _through_pads(n, users, pads, made, through_pads)
            if why is not None:
                decisions[n.out.name] = _read_through_pads(n, len(pads), made, why)
                continue
            users = [u for u in users if _is_slice(u, n.out) or OPS[u.op].pads]
        others = [u for u in users if not (_is_slice(u, n.out) or OPS[u.op].pads)]
        if not users or len(others) == len(users):
            continue
        if others and planner.BROADCASTS and not looked:
            cheap_values(graph, planner.classify, cheap)  # (the values made since it looked)
            looked = True
        if others and not _computed_where_read(n.out, others, cheap):
            continue
        users = [u for u in users if u not in others]
        cost = _cone(n.out, made)
        # slices made by a push: the value is part of a producer already decided on (but
        # for one that a value computed again from it alone left: its own decision)
        follows = all("@" in u.out.name for u in users) and n.out not in onto
        if cost * len(users) > MAX_RECOMPUTE:
            below = _one_input(n, len(users), made, readers)
            if below is None:
                decisions[n.out.name] = OffsetFusion(
                    n.out,
                    len(users),
                    cost,
                    False,
                    f"{_reads(users)} x {cost} op(s) per element > {MAX_RECOMPUTE}",
                    n.source,
                )
                continue
            decisions[n.out.name] = OffsetFusion(
                n.out, len(users), _weight(n), True, "", n.source, pads=len(pads), onto=below
            )
            return n, users, consts
        if not follows:
            decisions[n.out.name] = OffsetFusion(
                n.out, len(users), cost, True, "", n.source, pads=len(pads)
            )
        return n, users, consts
    return None


def _computed_where_read(v: Var, others: list, cheap: dict) -> bool:
    """``v``, read through slices, is also read by ``others``, which compute it themselves
    where they read it (``broadcasts.py``: a cheap value of the function's inputs, read
    broadcast, or by such values; ``cheap``: ``broadcasts.cheap_values`` of the graph): its
    slices may then compute it again too, and it needs no kernel of its own."""
    if not planner.BROADCASTS:
        return False
    if v not in cheap:
        return False
    return all(u.out in cheap or broadcast_by(u, v, planner.classify) for u in others)


def _one_input(n: Node, reads: int, made: dict, readers: dict) -> Var | None:
    """The one array ``n`` computes its value from, where computing ``n`` alone again at each
    of its ``reads`` fits the budget and saves an array: its slices and pads then read that
    array instead, which is then computed again itself (it fits), or is an array already (its
    chain of one-input ops down to one read by others too: ``-x`` and ``6 * x``, the two
    values a backward stage gives the one before it, are one array ``x``)."""
    x = _single_input(n)
    if not ONE_INPUT or x is None or _weight(n) * reads > MAX_RECOMPUTE:
        return None
    if _cone(x, made) * reads <= MAX_RECOMPUTE:
        return x
    v, chain = x, {id(n)}
    while v in made and OPS[made[v].op].kind == "elementwise":
        if any(id(r) not in chain for r in readers.get(v, [])):
            return x  # read by others: an array either way
        chain.add(id(made[v]))
        v = _single_input(made[v])
        if v is None:
            return None
    return x  # a graph input or a materialised value


def _single_input(n: Node) -> Var | None:
    """The one array input of an elementwise op that is not a division, or None."""
    arrays = list(dict.fromkeys(x for x in n.var_inputs if x.shape))
    if len(arrays) != 1 or n.op in DIVISIONS or OPS[n.op].kind != "elementwise":
        return None
    return arrays[0]


def _weight(n: Node) -> int:
    """Operations per element of an elementwise node (a fast-math function weighs more)."""
    return TRANSCENDENTAL if is_fast_math(n) else 1


def _reads(users: list) -> str:
    """``users`` (slices and pads of a value) counted: "3 slices + 2 pad(s)"."""
    pads = sum(bool(OPS[u.op].pads) for u in users)
    counts = ((len(users) - pads, "slices"), (pads, "pad(s)"))
    return " + ".join(f"{k} {what}" for k, what in counts if k)


def _read_through_pads(n: Node, pads: int, made: dict, why: str) -> OffsetFusion:
    """The refusal of a value read through pads (``pads.py``): a backward stage of a stencil
    chain, which the stage before it reads at transposed offsets, zeros around it."""
    cost = _cone(n.out, made)
    return OffsetFusion(
        n.out,
        pads,
        cost,
        False,
        f"read through {pads} pad(s) (a slice's gradient: zeros around it), {cost} op(s) per "
        f"element: {why}",
        n.source,
    )


def _through_pads(n: Node, users: list, pads: list, made: dict, through_pads: bool):
    """(why the pads of ``n`` cannot be pushed through it, or None; the constant of each of
    its array inputs' pads)."""
    if not through_pads:
        return "computed again only where read through slices", None
    others = [u for u in users if not (_is_slice(u, n.out) or OPS[u.op].pads)]
    if not all(_pushable(u) and u.out.shape == n.out.shape for u in others):
        return "also read as an array", None  # (by elementwise ops: in its kernel, not one)
    if n.op not in EXACT_AT_CONSTANTS:
        why = "not exact at 0 and 1 in every precision"
        return f"{n.op} is not pushed through a pad ({why})", None
    if n.op in DIVISIONS and not THROUGH_DIVISIONS:
        why = "a division per pad read: costlier than the one op counted"
        return f"{n.op} is not pushed through a pad ({why})", None
    if any(x.shape != n.out.shape for x in n.var_inputs):
        return "an input broadcast to its shape: its pad would be of another shape", None
    if not all(_padded_in_place(x, made) for x in n.var_inputs):
        why = "an input is a NumPy call's result, a slice adding an axis or of under half an input"
        return why, None
    fills = {_bits(u.attrs["constant_value"]): u.attrs["constant_value"] for u in pads}
    if any(np.asarray(c).item() not in (0, 1) for c in fills.values()):
        return "a pad's constant is not 0 or 1", None
    consts = {k: _constants_giving(n, c, made) for k, c in fills.items()}
    if any(v is None for v in consts.values()):
        return f"{n.op} of no constants (0, -0.0, 1) is its pad's constant, bit for bit", None
    return None, consts


def _padded_in_place(x: Var, made: dict) -> bool:
    """A pad of ``x`` can be read in place (``windows.py``): a kernel's result, a pad, or a
    static slice of one of them, or of at least half an input (smaller ones are copied), that
    adds no axis."""
    root = x
    while root in made and made[root].inputs and _is_slice(made[root], made[root].inputs[0]):
        if None in made[root].attrs["idx"]:
            return False  # a new axis: no base index to test (Window.padded)
        root = made[root].inputs[0]
    producer = made.get(root)
    if producer is None:
        return root is x or 2 * x.size >= root.size
    return OPS[producer.op].kind in ("elementwise", "reduction") or OPS[producer.op].pads


def _bits(x) -> bytes:
    return np.asarray(x).tobytes() + str(np.asarray(x).dtype).encode()


def _constants_giving(n: Node, want, made: dict | None = None):
    """``{input: the constant (0, -0.0 or 1) to pad it with}`` where ``n`` of those is
    ``want``, bit for bit (a NaN or an infinity is no choice: ``0 / 0``, ``1 / 0``); None where
    no such choice. With ``made``, each input's constants its own op can give come first (a
    factor ``exp(v)`` padded with 1, which ``exp`` of ``v`` padded with 0 gives)."""
    ins = list(dict.fromkeys(x for x in n.inputs if isinstance(x, Var)))
    choices = [_ranked(x, made) if made else _constants(x.dtype) for x in ins]
    target = _bits(np.asarray(want, dtype=n.out.dtype))
    for pick in itertools.product(*choices):
        at = dict(zip(ins, pick))
        args = [at[x] if isinstance(x, Var) else x for x in n.inputs]
        with np.errstate(all="ignore"):
            got = np.asarray(OPS[n.op].impl(*args, **n.attrs)).astype(n.out.dtype)
        if _bits(got) == target:
            return {x: x.dtype.type(c) for x, c in at.items()}
    return None


def _ranked(x: Var, made: dict) -> list:
    """``x``'s constants, those a pad pushed through its producer could be first."""
    producer = made.get(x)
    if producer is None or not _pushable(producer) or producer.op not in EXACT_AT_CONSTANTS:
        return _constants(x.dtype)
    return sorted(_constants(x.dtype), key=lambda c: _constants_giving(producer, c) is None)


def _constants(dtype) -> list:
    if dtype.kind == "f":
        return [np.array(c, dtype) for c in (0.0, -0.0, 1.0)]
    return [np.array(c, dtype) for c in (0, 1)]


def _pushable(n: Node) -> bool:
    """An elementwise op of one result whose array inputs broadcast to its shape."""
    if OPS[n.op].kind != "elementwise" or len(n.outputs) != 1 or n.out.weak or not n.out.shape:
        return False
    return all(_broadcasts(x.shape, n.out.shape) for x in n.var_inputs)


def _broadcasts(shape: tuple, to: tuple) -> bool:
    lead = len(to) - len(shape)
    return lead >= 0 and all(m in (1, to[lead + d]) for d, m in enumerate(shape))


def input_index(idx: tuple, shape: tuple, out_shape: tuple) -> tuple:
    """The index of an input of ``shape`` (broadcast to ``out_shape``) that selects what
    ``idx`` selects of the result: its broadcast dims are kept whole (or at 0 where ``idx``
    takes one element), the dims it lacks are left out: its result's dims are a suffix of the
    result's (all of them for an input of the result's ndim), broadcasting adds the rest.

    >>> input_index((slice(1, None), 2, None, slice(0, 3)), (4, 1, 5), (2, 4, 6, 5))
    (2, None, slice(None, None, None))
    >>> input_index((slice(1, None), 2, None, slice(0, 3)), (4, 6, 1), (2, 4, 6, 5))
    (2, None, slice(0, 3, None))
    """
    lead = len(out_shape) - len(shape)
    out, d = [], 0
    for e in without_ellipsis(idx, len(out_shape)):
        if e is None:
            if d >= lead:  # the result's dims from here on are the input's (a suffix)
                out.append(None)
            continue
        if d >= lead:
            if shape[d - lead] == out_shape[d]:
                out.append(e)
            else:
                out.append(slice(None) if isinstance(e, slice) else 0)
        d += 1
    return tuple(out)


def _is_slice(reader: Node, v: Var) -> bool:
    """``reader`` is a static basic index of ``v`` (ints and slices of fixed bounds)."""
    if not OPS[reader.op].view or "idx" not in reader.attrs or len(reader.inputs) != 1:
        return False
    if reader.inputs[0] is not v:
        return False
    w = Window.of(None, reader.attrs.get("idx"), v.shape)
    return w is not None and w.shape == reader.out.shape


def _cone(v: Var, made: dict) -> int:
    """Operations per element to compute ``v`` from values that are materialised: graph
    inputs, and the results of anything but elementwise ops and views; a pad read counts
    ``PAD_READ``."""
    total, todo, seen = 0, [v], set()
    while todo:
        x = todo.pop()
        n = made.get(x)
        if n is None or id(n) in seen:
            continue
        op = OPS[n.op]
        if op.kind == "elementwise":
            seen.add(id(n))
            total += _weight(n)
        elif op.pads:  # read in place, its rows tested: not a plain load
            seen.add(id(n))
            total += PAD_READ
            continue
        elif not (op.view and len(n.inputs) == 1):
            continue  # materialised
        todo += n.var_inputs
    return total


def _push(graph: Graph, producer: Node, users: list, consts: dict | None) -> Graph:
    """Each slice ``producer(...)[idx]`` becomes ``producer(a[idx], b[idx], ...)``; each pad
    ``pad(producer(...))`` becomes ``producer(pad(a), pad(b), ...)`` (``consts``: the
    constants of those pads)."""
    nodes, mapping, reading = [], {}, {id(u) for u in users}
    taken = {o.name.rsplit("_", 1)[0] for n in graph.nodes for o in n.outputs}
    at = (k for k in itertools.count() if f"{producer.out.name}@{k}" not in taken)
    for n in graph.nodes:
        if id(n) not in reading:
            nodes.append(n)
            continue
        b = Builder(n, f"{producer.out.name}@{next(at)}")  # the producer at its offset
        ins = [_moved(b, n, x, producer.out.shape, consts) for x in producer.inputs]
        out = b(producer.op, *ins, **producer.attrs)
        nodes += b.nodes
        mapping[n.out] = out
    return rebuild(graph, nodes, mapping)


def _moved(b: Builder, reader: Node, x, shape: tuple, consts: dict | None):
    """Input ``x`` of a producer of ``shape`` as ``reader`` (a slice or a pad) reads it."""
    if not isinstance(x, Var) or not x.shape:
        return x
    if OPS[reader.op].pads:
        c = consts[_bits(reader.attrs["constant_value"])][x]
        return b("pad", x, pad_width=reader.attrs["pad_width"], constant_value=c)
    return b("index", x, idx=input_index(reader.attrs["idx"], x.shape, shape))


def drawn_notes(graph: Graph, decisions: list) -> tuple[dict, dict]:
    """What a drawing of the compiled ``graph`` says of ``decisions``: ``({value name: why it
    stays an array}, {value name: the value it computes again at an offset, or how it is
    computed in tiles})``."""
    kept = {d.value.name: f"not fused across offsets: {d.reason}" for d in decisions if not d.fused}
    again = {}
    tiled = {d.value.name: f"computed in {d.how}" for d in decisions if d.how}
    for d in decisions:
        if getattr(d, "note", ""):  # a pad's (pads.py)
            tiled[d.value.name] = d.note
        elif d.fused and not d.how:
            note = f"computed again at an offset: %{d.value.name}"
            if d.source is not None:
                note += f" ({d.source} `{d.source.text}`)"
            again[f"{d.value.name}@"] = note
    by_name = dict(tiled)
    for n in graph.nodes:
        for o in n.outputs:
            head = o.name.split("@")[0] + "@" if "@" in o.name else None
            if head in again:
                by_name[o.name] = again[head]
    return kept, by_name
