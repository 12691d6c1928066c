"""Rolling: consecutive identical iterations of a Python loop in a trace become one loop node.

Tracing records every iteration of a loop. A run of consecutive iterations rolls when the
iterations agree node by node (op, attributes, literals, types, source line, all inside one
loop statement of the user's source) and their dataflow is consistent: each value a body
position reads is, in every iteration, the same value from before the loop (an invariant), a
value of the same iteration (internal), or the previous iteration's value at one body position
(carried state; the first iteration reads its initial value from before the loop). Values used
after the loop must be the last iteration's. An iteration that differs (a sum that starts from
the Python float ``0.0``) stays outside, before the loop. Loops nest: a body is rolled too.

>>> import numpy as np, tracekit as tk
>>> def f(x, w):
...     for _ in range(10):
...         x = np.tanh(x @ w)
...     return x
>>> t = tk.trace(f, np.ones((2, 2)), np.eye(2))
>>> node = t.graph.nodes[0]
>>> node.op, node.attrs["trips"], [n.op for n in node.attrs["body"].nodes]
('loop', 10, ['matmul', 'tanh'])
"""

from __future__ import annotations

import bisect
import json
from collections import ChainMap
from dataclasses import dataclass, field

import numpy as np

from ..ir import Graph, InputSpec, Node, Source, Var, _canonical
from ..ops import OPS
from ..passes.dce import dce
from .op import Affine, moves, value_names
from .source import break_exit, enclosing_loops

MAX_CANDIDATES = 16  # periods tried from one position: the next occurrences of its node


@dataclass(frozen=True)
class RollNote:
    """Iterations that could not be rolled, and why (shown in ``Traced.notes``)."""

    source: Source | None
    trips: int
    reason: str
    rolled: bool = False  # rolled as they were traced, but not as general as they could be

    def __str__(self):
        where = f"{self.source}: `{self.source.text}`" if self.source else "a loop"
        done = "rolled, but" if self.rolled else "not rolled:"
        return f"{where}: {self.trips} iterations {done} {self.reason}"


def roll(
    graph: Graph,
    stacks: dict | None = None,
    top=True,
    max_iterations: int | None = None,
    within: tuple | None = None,
    breaks: dict | None = None,
) -> tuple[Graph, list[RollNote]]:
    """``graph`` with its runs of identical loop iterations rolled, and notes on the runs that
    could not be. ``stacks`` maps a node to the sources of its whole call chain (outermost
    first), so that a loop calling a function rolls too; without it a node's own source is
    its only one. A ``while`` loop whose condition held in every iteration but the last
    becomes a ``while_loop`` that evaluates it when it runs, for at most ``max_iterations``
    (default: ten times the traced count, at least 1,000). ``within``: the loop statement
    whose body ``graph`` is; the runs rolled in it are of loops inside that one (``u * v * v``
    in its body is not two iterations of it). ``breaks`` maps the id of a guard on the test
    of ``if <test>: break``, the last statement of a ``for i in range(...)`` loop, to (the
    iteration's index in the range, the range's length): a run of that loop's iterations
    that ends where the loop ended (the break, or the range's end) becomes a ``while_loop``
    that goes on while the test is false and the range has iterations left."""
    notes: list[RollNote] = []
    guards: dict = {}
    for g in graph.guards:
        guards.setdefault(g.var, []).append(g)
    ctx = _Context(graph, stacks, notes, guards, max_iterations, within, breaks or {})
    nodes = _roll_all(graph.nodes, set(graph.outputs), ctx)
    if top:
        notes += _unmatched(nodes, stacks, notes)
        notes[:] = dict.fromkeys(notes)  # a run refused again when the graph is scanned again
    if len(nodes) == len(graph.nodes) and all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph, notes
    defined = set(graph.inputs) | {o for n in nodes for o in n.outputs}
    kept = [g for g in graph.guards if g.var in defined and id(g) not in ctx.handled]
    graph = dce(graph.replace(nodes=nodes, guards=kept))  # and drop the replaced rows
    return _with_tables(graph, ctx.tables), notes


def _with_tables(graph: Graph, tables: dict) -> Graph:
    """``graph`` with the tables its nodes read as constant inputs (the tables of inner loops
    that an outer loop's table replaced are read by none)."""
    read = {v for n in graph.nodes for v in n.var_inputs}
    new = {v: a for v, a in tables.items() if v in read}
    if not new:
        return graph
    return graph.replace(
        inputs=[*graph.inputs, *new],
        specs=[*graph.specs, *(InputSpec("const", "const") for _ in new)],
        constants={**graph.constants, **new},
    )


@dataclass
class _Context:
    graph: Graph
    stacks: dict | None
    notes: list
    guards: dict  # Var -> the guards on it
    max_iterations: int | None
    within: tuple | None  # the loop statement whose body this is
    breaks: dict  # id of a guard on a break's test -> (index in the range, range's length)
    handled: set = field(default_factory=set)  # ids of the guards the loops check now
    signatures: dict = field(default_factory=dict)  # node -> its keys (_signatures)
    keys: _Keys = field(default_factory=lambda: _Keys())  # small ints of signatures' parts
    tables: dict = field(default_factory=dict)  # const Var -> the value of each iteration, stacked

    @property
    def constants(self):
        """The graph's constants and the tables made so far."""
        return ChainMap(self.tables, self.graph.constants)


def _is_loop(n: Node) -> bool:
    return OPS[n.op].kind == "control"


def _unmatched(nodes, stacks, notes) -> list[RollNote]:
    """Notes on the loops that left several iterations' nodes and rolled nothing, and have no
    note yet: their iterations differ (counted by the op of the loop seen least often)."""
    rolled = {(n.source.file, n.source.line) for n in nodes if _is_loop(n) and n.source}
    noted = {(n.source.file, n.source.line) for n in notes if n.source}
    seen: dict = {}
    for n in nodes:
        loops = _loops_of(n, stacks) if not _is_loop(n) and n.source else ()
        if loops:
            site = loops[0]
            lines = seen.setdefault(site, {})
            key = (n.source.line, n.op)
            lines[key] = lines.get(key, 0) + 1
    out = []
    for (file, line, text), lines in seen.items():
        repeats = min(lines.values())  # every op of it seen twice: two iterations at least
        if repeats >= 2 and (file, line) not in rolled | noted:
            out.append(
                RollNote(
                    Source(file, line, "", text),
                    repeats,
                    "its iterations differ (an op, an attribute, a literal such as the loop "
                    "variable, or a type changes from one to the next)",
                )
            )
    return out


def _roll_all(nodes, live_out, ctx) -> list:
    while True:  # an outer loop may match only once its inner loops are nodes
        rolled = _roll_once(nodes, live_out, ctx)
        if len(rolled) == len(nodes):
            return rolled
        nodes = rolled


def _roll_once(nodes, live_out, ctx) -> list:
    graph, stacks, notes = ctx.graph, ctx.stacks, ctx.notes
    taken = _Names([*graph.inputs, *ctx.tables], nodes)  # for the stacked outputs' names
    # numbers in a node's inputs may move with the loop (``x * t``): first try runs that
    # match them by type only, then runs that match them by value
    loose, strict = _signatures(nodes, ctx)
    # the nodes of one line share their loops: found once per call chain, and once per chain
    # object (the tracer gives the ops of one line one; ``stacks`` holds them while we look)
    loops, memo, by_id = [], {}, {}
    for n in nodes:
        chain = stacks.get(n) if stacks else None
        found = by_id.get(id(chain)) if chain else None
        if found is None:
            sources = chain or _sources_of(n, None)
            found = memo.get(sources)
            if found is None:
                found = memo[sources] = _inside(_enclosing(sources), ctx.within)
            if chain:
                by_id[id(chain)] = found
        loops.append(found)
    numbered: dict = {}  # each loops tuple object: a small int, so windows of them compare fast
    chain_ids = [numbered.setdefault(id(chain), len(numbered)) for chain in loops]
    at_loose, at_strict = _positions(loose), _positions(strict)
    last_use: dict = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            if type(v) is Var:
                last_use[v] = i
    uses = (last_use, live_out, taken)
    out, i, n_nodes = [], 0, len(nodes)
    while i < n_nodes:
        tried = None
        for sigs, at in ((loose, at_loose), (strict, at_strict)):
            best = _best_run(i, sigs, (loops, chain_ids), at) if loops[i] else None
            if best is not None:
                tried = _attempt(nodes, i, best, sigs, uses, ctx)
                if not isinstance(tried[1], str) or sigs is strict:
                    break
        if tried is None:
            out.append(nodes[i])
            i += 1
            continue
        shift, made, run, end, trips, loop = tried
        out.extend(nodes[i : i + shift])  # a while's first test, before the loop
        if isinstance(made, str):
            notes.append(RollNote(Source(loop[0], loop[1], "", loop[2]), trips, made))
            out.extend(run)
        else:
            loop_node, *rows = made
            body, body_notes = roll(
                loop_node.attrs["body"], stacks, False, ctx.max_iterations, loop, ctx.breaks
            )
            notes.extend(body_notes)
            out.append(loop_node.replace(attrs={**loop_node.attrs, "body": body}))
            out.extend(rows)
        i = end
    return _fold_stacks(out)


class _Names:
    """The names of the values of a scan's nodes and the graph's inputs, gathered when a run
    first needs a fresh one (most scans roll nothing); ``add`` takes one."""

    def __init__(self, inputs, nodes):
        self._inputs, self._nodes, self._names = inputs, nodes, None

    def _all(self) -> set:
        if self._names is None:
            self._names = {v.name for v in self._inputs} | value_names(self._nodes)
        return self._names

    def __contains__(self, name) -> bool:
        return name in self._all()

    def add(self, name):
        self._all().add(name)


def _positions(sigs) -> dict:
    at: dict = {}
    for i, s in enumerate(sigs):
        at.setdefault(s, []).append(i)
    return at


def _attempt(nodes, i, best, sigs, uses, ctx):
    """Roll the run ``best`` found at node ``i``: (the nodes before its iterations, the loop
    and its rows or why not, the run's nodes, where it ends, its trips, its loop)."""
    period, trips, loop = best
    shift = _while_shift(nodes, i, period, trips, sigs, loop, ctx.guards)
    i += shift
    run = nodes[i : i + period * trips]
    end = i + period * trips
    made = _build(run, period, trips, loop, end, uses, ctx)
    if isinstance(made, int):  # a value of iteration ``made`` is used after the loop
        trips, end = made, i + period * made  # the loop ends there; the rest follows it
        run = run[: period * trips]
        made = _build(run, period, trips, loop, end, uses, ctx)
        if isinstance(made, int):
            made = "values of several of its last iterations are used after it, or "
            made += "control flow goes another way in some iterations"
    return shift, made, run, end, trips, loop


def _best_run(i, sigs, chains, at):
    """(period, trips, loop) of the longest run of repeats starting at node ``i``, or None.
    ``chains``: each node's loops, and a small int per loops object (equal windows of them
    have equal common loops)."""
    loops, chain_ids = chains
    same = at[sigs[i]]
    k = bisect.bisect_right(same, i)
    best = None
    for j in same[k : k + MAX_CANDIDATES]:
        period = j - i
        if i + 2 * period > len(sigs):
            break
        loop = _common_loop(loops[i : i + period])
        if loop is None:
            continue
        window, chain_window, trips = sigs[i:j], chain_ids[i:j], 1
        while sigs[i + trips * period : i + (trips + 1) * period] == window:
            a, b = i + trips * period, i + (trips + 1) * period
            if chain_ids[a:b] != chain_window and _common_loop(loops[a:b]) != loop:
                break
            trips += 1
        if trips >= 2 and (best is None or trips * period > best[0] * best[1]):
            best = (period, trips, loop)
    return best


def _common_loop(chains):
    """The innermost loop statement that holds every node of a window, or None."""
    common = None
    for chain in {id(c): c for c in chains}.values():  # a line's nodes share one chain object
        common = set(chain) if common is None else common & set(chain)
        if not common:
            return None
    return next(loop for loop in chains[0] if loop in common)


def _inside(chain: tuple, loop) -> tuple:
    """The loops of ``chain`` (innermost first) inside ``loop``."""
    return chain[: chain.index(loop)] if loop in chain else chain


def _sources_of(node, stacks) -> tuple:
    """The sources of ``node``'s call chain (outermost first), or its own source alone."""
    return (stacks or {}).get(node) or ((node.source,) if node.source else ())


def _loops_of(node, stacks) -> tuple:
    return _enclosing(_sources_of(node, stacks))


def _enclosing(sources: tuple) -> tuple:
    """The loops around a call chain's lines, innermost first."""
    found = ()
    for src in reversed(sources):  # innermost frame first
        found += enclosing_loops(src.file, src.line)
    return found


def _signatures(nodes, ctx) -> tuple[list, list]:
    """What two iterations' nodes at one body position must share, per node: loosely (a
    number among the inputs only its type; :func:`_progression` matches the values) and
    strictly, each as a small int (``ctx.keys``: runs of them compare quickly).
    ``ctx.signatures`` keeps each node's pair for the next scan of the graph."""
    memo, keys = ctx.signatures, ctx.keys
    loose, strict = [], []
    for n in nodes:
        known = memo.get(n)
        if known is None:
            known = memo[n] = _signature(n, keys)
        loose.append(known[0])
        strict.append(known[1])
    return loose, strict


class _Keys:
    """Small ints for what signatures are made of: each signature (``ids``), each Var's
    shape, dtype and weakness (``types``: made for its producer, read by its readers), and
    the key of each source line and literal, a small int too, by the object's id (a loop's
    iterations share these objects; ``held`` keeps each object alive, so that no other reuses
    its id), with whether a literal is a number."""

    __slots__ = ("ids", "types", "held")

    def __init__(self):
        self.ids: dict = {}
        self.types: dict = {}
        self.held: dict = {}


def _source_key(src):
    return (src.file, src.line) if src else None


def _signature(n: Node, keys: _Keys) -> tuple[int, int]:
    """(loose, strict) of ``n``, small ints from ``keys`` (written out: a loop of a thousand
    iterations has tens of thousands of nodes)."""
    ids, types, held = keys.ids, keys.types, keys.held
    attrs = _attrs_key(n) if n.attrs else ""
    if attrs is None:  # an attribute holding a value of the graph: never a repeat
        unique = ids.setdefault(("unique", id(n)), len(ids))
        return unique, unique
    outs = []
    for o in n.outputs:
        types[o] = k = ids.setdefault((o.shape, o.dtype, o.weak), len(ids))
        outs.append(k)
    src = n.source
    found = held.get(id(src))
    if found is None or found[0] is not src:
        found = held[id(src)] = (src, ids.setdefault(("line", _source_key(src)), len(ids)))
    ins, loose = [], None  # loose: the inputs with each number by its type only, once one is
    for x in n.inputs:
        if type(x) is Var:
            k = types.get(x)
            if k is None:  # an input of the graph
                k = types[x] = ids.setdefault((x.shape, x.dtype, x.weak), len(ids))
            number = False
        else:
            lit = held.get(id(x))
            if lit is None or lit[0] is not x:
                key = ids.setdefault(("literal", _literal_key(x)), len(ids))
                lit = held[id(x)] = (x, key, _is_number(x))
            _, k, number = lit
            if number and loose is None:
                loose = ins.copy()
        ins.append(k)
        if loose is not None:
            loose.append(("n", type(x).__name__) if number else k)
    outs = tuple(outs)
    strict = ids.setdefault((n.op, tuple(ins), attrs, outs, found[1]), len(ids))
    if loose is None:
        return strict, strict
    return ids.setdefault((n.op, tuple(loose), attrs, outs, found[1]), len(ids)), strict


def _attrs_key(n: Node) -> tuple | str | None:
    """A node's attributes as a key equal for equal attributes (an index's integers by their
    sign only: :func:`_moving` matches them), None if one holds a Var."""
    attrs = n.attrs
    if not attrs:
        return ""
    if _may_move(n):  # an index may move with the loop: its integers are matched in _moving
        idx = _plain_index(attrs["idx"])
        if len(attrs) == 1 and idx is not _NOT_PLAIN:
            return (("idx", idx),)
        attrs = {**attrs, "idx": _skeleton(attrs["idx"])}
    plain = _plain_key(attrs)
    if plain is not None:
        return plain
    if _has_var_attr(attrs):
        return None
    return json.dumps(_canonical(attrs, graph=_body_key))


def _plain_index(idx: tuple):
    """``_plain(_skeleton(idx))`` in one pass: an index's plain key, its integers (not a
    slice's step) by their sign."""
    out = []
    for e in idx:
        t = type(e)
        if t is int:
            out.append("#-" if e < 0 else "#+")
        elif t is slice:
            start, stop = e.start, e.stop
            start = ("#-" if start < 0 else "#+") if type(start) is int else _plain(start)
            stop = ("#-" if stop < 0 else "#+") if type(stop) is int else _plain(stop)
            step = _plain(e.step)
            if _NOT_PLAIN in (start, stop, step):
                return _NOT_PLAIN
            out.append((_SLICE, start, stop, step))
        else:
            key = _plain(e)
            if key is _NOT_PLAIN:
                return _NOT_PLAIN
            out.append(key)
    return tuple(out)


_SLICE = object()  # tags a slice in a plain key (no attribute value is this object)


def _plain_key(attrs: dict) -> tuple | None:
    """``attrs`` as a hashable tuple equal only for equal attributes, where every value is
    plain (numbers, strings, None, Ellipsis, and tuples and slices of them), else None: a
    key built without ``repr`` or JSON, as each traced node of a loop needs one."""
    out = []
    for name in sorted(attrs):
        key = _plain(attrs[name])
        if key is _NOT_PLAIN:
            return None
        out.append((name, key))
    return tuple(out)


_NOT_PLAIN = object()


def _plain(x):
    """A hashable form of ``x`` that tells apart what ``==`` does not (1, 1.0, True; 0.0 and
    -0.0), or ``_NOT_PLAIN``."""
    t = type(x)
    if t is int or t is str or x is None or x is Ellipsis:
        return x
    if t is slice:
        ends = (_plain(x.start), _plain(x.stop), _plain(x.step))
        return _NOT_PLAIN if _NOT_PLAIN in ends else (_SLICE, *ends)
    if t is tuple:
        items = tuple(_plain(e) for e in x)
        return _NOT_PLAIN if _NOT_PLAIN in items else items
    if t is bool or t is float:
        return (t, repr(x))
    return _NOT_PLAIN


def _may_move(n: Node) -> bool:
    """Indexing (a view or a functionalised write) whose integers may move with the loop."""
    op = OPS[n.op]
    return (op.view or op.update) and isinstance(n.attrs.get("idx"), tuple)


def _skeleton(idx):
    """``idx`` with its integers (not a slice's step) replaced by their sign."""

    def leaf(e):
        if type(e) is int:
            return "#-" if e < 0 else "#+"
        return e

    out = []
    for e in idx:
        if isinstance(e, slice):
            out.append(slice(leaf(e.start), leaf(e.stop), e.step))
        else:
            out.append(leaf(e))
    return tuple(out)


def _moving(idxs: list):
    """One index for every iteration's ``idxs``: its integers static or :class:`Affine`
    (moving by one step per iteration, keeping its sign); None where they do not."""
    first, trips = idxs[0], len(idxs)

    def combine(values):
        step = values[1] - values[0]
        if any(v != values[0] + step * t for t, v in enumerate(values)):
            return None
        return values[0] if step == 0 else Affine(values[0], step)

    out = []
    for p, e in enumerate(first):
        if isinstance(e, slice):
            ends = []
            for part in ("start", "stop"):
                v = getattr(e, part)
                if type(v) is int:
                    v = combine([getattr(idx[p], part) for idx in idxs])
                    if v is None:
                        return None
                ends.append(v)
            out.append(slice(ends[0], ends[1], e.step))
        elif type(e) is int:
            v = combine([idx[p] for idx in idxs])
            if v is None:
                return None
            out.append(v)
        else:
            out.append(e)
    return tuple(out) if trips else None


def _body_key(body: Graph) -> dict:
    return {"body": body.key()}


def _literal_key(x):
    if type(x) in (float, int, bool, complex):  # 0.0 and -0.0, 1 and True stay apart
        return ("c", type(x).__name__, repr(x))
    if isinstance(x, np.generic) and x.dtype.kind in "biufc":  # a NumPy scalar: its dtype too
        return ("c", x.dtype.str, repr(x.item()))
    return ("c", json.dumps(_canonical(x)))


def _has_var_attr(x) -> bool:
    if isinstance(x, Var):
        return True
    if isinstance(x, dict):
        return any(_has_var_attr(v) for v in x.values())
    if isinstance(x, tuple | list):
        return any(_has_var_attr(v) for v in x)
    if isinstance(x, slice):
        return any(_has_var_attr(v) for v in (x.start, x.stop, x.step))
    return False


def _build(run, period, trips, loop, end, uses, ctx):
    """The loop node of ``run`` (``trips`` iterations of ``period`` nodes), or why not, or the
    number of its first iterations that would roll (a value of the next is used after it).
    ``uses``: (each value's last reader, the values used after the nodes, the names taken)."""
    last_use, live_out, taken = uses
    stacks = ctx.stacks
    where = {}
    for idx, node in enumerate(run):
        t, j = divmod(idx, period)
        for o, v in enumerate(node.outputs):
            where[v] = (t, j, o)
    guarding = _guards_of(where, trips, period, loop, ctx)
    if isinstance(guarding, str | int):
        return guarding
    # left: the iterations a for loop left by a break has in its range; note: why it has none
    body_guards, cond_slot, left, note = guarding
    roles, carried, invariants = {}, {}, {}
    for j in range(period):
        for s, first in enumerate(run[j].inputs):
            if not isinstance(first, Var):
                continue
            values = [m.inputs[s] for m in run[j::period]]
            role = _role(values, [where.get(v) for v in values], j, ctx.constants)
            if role is None:
                return (
                    f"{run[j].op} at {run[j].source} reads a different value in each iteration "
                    "(neither one from before the loop, nor this or the previous iteration's)"
                )
            kind, what = role
            if kind == "table":
                what = _table(np.stack([ctx.constants[v] for v in values]), ctx, taken)
                if what is None:
                    return (
                        f"{run[j].op} at {run[j].source} reads another constant in each iteration"
                    )
                role = kind, what
            if kind == "carried" and carried.setdefault(what, first) is not first:
                return "a carried value starts from two different values"
            if kind in ("invariant", "table"):
                invariants.setdefault(what, None)
            roles[(j, s)] = role
    escaping = [
        (v, t, j, o)
        for v, (t, j, o) in where.items()
        if last_use.get(v, -1) >= end or v in live_out
    ]
    earliest = min((t for _, t, _, _ in escaping), default=trips - 1)
    if 1 <= earliest < trips - 1:
        return earliest + 1  # roll the iterations up to that one
    # a value of every iteration used after the loop (a list stacked afterwards): stacked
    stacked_slots = sorted({(j, o) for _, t, j, o in escaping if t < trips - 1})
    carried_slots = sorted(carried)
    extras = {(j, o) for _, t, j, o in escaping if t == trips - 1}
    if body_guards and not (carried_slots or extras or stacked_slots):
        extras.add(where[body_guards[0].var][1:])  # a loop gives a value: its last guarded one
    if cond_slot is not None:
        if stacked_slots:
            return "values of every iteration of a while loop are used after it"
        if left is None:
            extras.add(cond_slot)
    slots = carried_slots + sorted(extras - set(carried_slots) - set(stacked_slots))
    state = {
        slot: _like(run[slot[0]].outputs[slot[1]], run[slot[0]].outputs[slot[1]].name + "'")
        for slot in carried_slots
    }
    numbers = _moving_numbers(run, period, trips, ctx, taken)
    if isinstance(numbers, str):
        return numbers
    tables = [v for v in numbers.values() if isinstance(v, Var)]
    tables += [what for kind, what in roles.values() if kind == "table"]
    if tables and cond_slot is not None:  # (it may run past the traced count)
        return "a loop whose iteration count depends on the data reads values of a table"
    if numbers and cond_slot is not None and left is None:
        return "a while loop reads a number that changes with each iteration"
    for v in tables:
        invariants.setdefault(v, None)
    inner = {v: _like(v, v.name) for v in invariants}
    counter, counter_next, body_nodes, number_vars = None, None, [], {}
    by_counter = any(not isinstance(v, Var) for v in numbers.values())  # (not of a table)
    if by_counter or left is not None:  # an iteration counter, carried: a number is a + b * it
        counter = Var(_fresh_name("k", taken), (), np.int64, True)
    for (j, s), found in numbers.items():
        if isinstance(found, Var):  # a number of a table, read at the iteration's row
            weak = type(run[j].inputs[s]) in (int, float)  # a Python number
            number_vars[(j, s)] = _row(inner[found], run[j], body_nodes, taken, weak)
        else:
            number_vars[(j, s)] = _number_nodes(counter, *found, body_nodes, run[j], taken)
    if counter is not None:
        counter_next = Var(_fresh_name("k'", taken), (), np.int64, True)
        body_nodes.append(Node("add", (counter, 1), {}, (counter_next,), run[0].source))
    for j in range(period):
        ins = []
        for s, x in enumerate(run[j].inputs):
            if (j, s) in number_vars:
                ins.append(number_vars[(j, s)])
                continue
            kind, what = roles.get((j, s), ("literal", x))
            if kind == "table" and (j, s) not in number_vars:  # (a row read once per iteration)
                number_vars[(j, s)] = _row(inner[what], run[j], body_nodes, taken, x.weak)
                ins.append(number_vars[(j, s)])
                continue
            ins.append(
                x
                if kind in ("literal", "internal")
                else state[what]
                if kind == "carried"
                else inner[what]
            )
        attrs = run[j].attrs
        if _may_move(run[j]):
            idx = _moving([run[t * period + j].attrs["idx"] for t in range(trips)])
            if idx is None:
                return f"{run[j].op} at {run[j].source} indexes differently in each iteration"
            attrs = {**attrs, "idx": idx}
        body_nodes.append(run[j].replace(inputs=tuple(ins), attrs=attrs))
        if stacks is not None and run[j] in stacks:
            stacks[body_nodes[-1]] = stacks[run[j]]
    if cond_slot is not None and left is None and any(moves(n.attrs) for n in body_nodes):
        return "a while loop indexes with its iteration count (it may run past the traced count)"
    going = None
    if left is not None:  # a for loop left by a break: on while the test is false, in range
        test = run[cond_slot[0]].outputs[cond_slot[1]]
        going = _going_on(test, counter_next, left, body_nodes, run[cond_slot[0]], taken)
    # a value of the first iteration used after the loop is a row of a stacked output there:
    # inside the body it gets a name of its own (no Var is defined in two graphs)
    first_rows = {v for v, t, j, o in escaping if t == 0 and (j, o) in stacked_slots}
    inside = {v: _like(v, v.name + ".k") for v in first_rows}
    if inside:
        renamed = [
            n.replace(
                inputs=tuple(inside.get(x, x) if isinstance(x, Var) else x for x in n.inputs),
                outputs=tuple(inside.get(o, o) for o in n.outputs),
            )
            for n in body_nodes
        ]
        if stacks is not None:
            stacks.update(
                {new: stacks[old] for old, new in zip(body_nodes, renamed) if old in stacks}
            )
        body_nodes = renamed
    header = loop[2].rstrip(":").strip()
    counted = [counter] if counter is not None else []  # carried after the loop's own state
    outputs = [inside.get(run[j].outputs[o], run[j].outputs[o]) for j, o in slots + stacked_slots]
    outputs[len(carried_slots) : len(carried_slots)] = [counter_next] if counted else []
    if going is not None:  # the condition to go on: the last plain output
        outputs.insert(len(outputs) - len(stacked_slots), going)
    body = Graph(
        inputs=[state[s] for s in carried_slots] + counted + list(inner.values()),
        nodes=body_nodes,
        outputs=outputs,
        guards=[
            gd.__class__(inside.get(gd.var, gd.var), gd.value, gd.how, gd.source)
            for gd in body_guards
        ],
        name=header,
    )
    last = (trips - 1) * period
    stacked = {
        slot: _stacked_like(run[slot[0]].outputs[slot[1]], trips, taken) for slot in stacked_slots
    }
    src = Source(loop[0], loop[1], run[0].source.function if run[0].source else "", loop[2])
    n_carried = len(carried_slots) + len(counted)
    attrs = {"body": body, "trips": trips, "carried": n_carried, "stacked": len(stacked)}
    if going is not None:  # the range bounds it: the condition is false after ``left``
        attrs.update(cond=len(body.outputs) - len(stacked_slots) - 1, max_iterations=left)
    elif cond_slot is not None:
        most = ctx.max_iterations or max(1000, 10 * trips)
        attrs.update(cond=slots.index(cond_slot), max_iterations=most)
    outs = [run[last + j].outputs[o] for j, o in slots]
    if counted:  # the counter's last value: no one reads it
        outs.insert(len(carried_slots), _like(counter, _fresh_name(counter.name + "@end", taken)))
    if going is not None:
        outs.append(_like(going, _fresh_name(going.name + "@end", taken)))
    node = Node(
        "while_loop" if cond_slot is not None else "loop",
        tuple(carried[s] for s in carried_slots) + (0,) * len(counted) + tuple(invariants),
        attrs,
        tuple(outs) + tuple(stacked.values()),
        src,
        _common_prefix([n.scope for n in run]),
    )
    ctx.handled.update(id(gd) for v in where for gd in ctx.guards.get(v, ()))
    if note is not None:
        ctx.notes.append(note)
    # each value of the iterations used afterwards: its row of the stacked output
    produced = set(node.outputs)
    rows = [
        Node("index", (stacked[(j, o)],), {"idx": (t,)}, (v,), src, node.scope)
        for v, t, j, o in sorted(escaping, key=lambda e: (e[2], e[3], e[1]))
        if (j, o) in stacked and v not in produced
    ]
    return [node, *rows]


def _guards_of(where: dict, trips: int, period: int, loop, ctx):
    """(the guards of the body, the slot of a while loop's condition or None, the iterations
    a for loop left by a break has in its range or None) for the values of the iterations
    (``where``: Var -> (iteration, position, output)), or why they do not roll. A guard the
    same in every iteration is checked in every iteration; a ``bool`` on the value of the
    ``while`` statement's line, true in every iteration but the last, is the loop's
    condition; so is the test of a break ending the iterations (:func:`_break_exit`)."""
    guards = ctx.guards
    per_slot: dict = {}
    for v, (t, j, o) in where.items():
        for gd in guards.get(v, ()):
            per_slot.setdefault((j, o), {}).setdefault(t, []).append(gd)
    body_guards, cond_slot = [], None
    left = note = None
    for slot, per in sorted(per_slot.items()):
        if len(per) != trips:
            return "control flow on a value of some iterations only (a guard)"
        seen = [[(gd.how, _literal_key(gd.value)) for gd in per[t]] for t in range(trips)]
        exit_left = _break_exit(slot, per, trips, period, loop, ctx) if cond_slot is None else None
        if isinstance(exit_left, RollNote):
            note, exit_left = exit_left, None
        if exit_left is not None:
            cond_slot, left = slot, exit_left
        elif all(s == seen[0] for s in seen):
            body_guards += per[0]
        elif cond_slot is None and _is_while_exit(slot, per, trips, period, loop):
            cond_slot = slot
        else:
            same = next(t for t, s in enumerate(seen) if s != seen[0])
            if same >= 2:  # the first iterations agree: they roll, the others follow
                return same
            return "control flow goes another way in some iterations (a guarded value differs)"
    return body_guards, cond_slot, left, note


def _break_exit(slot, per: dict, trips: int, period: int, loop, ctx):
    """The iterations the range of a for loop has from the first of the run (its last
    iterations' guards ``per`` iteration are the test of ``if <test>: break``, its last
    statement), or None: where the test is false in every iteration but the last, which
    broke, or false in all of them, the last of the range. The loop then decides when it
    runs where to stop: a do-while on ``not test``, as the for loop with the break is when
    nothing follows the test. A :class:`RollNote` says why a break's test cannot be that."""
    if not loop[2].startswith("for"):
        return None
    tests = [per[t][0] if len(per[t]) == 1 else None for t in range(trips)]
    if any(gd is None or gd.how != "bool" or gd.source is None for gd in tests):
        return None
    if any(gd.value is not False for gd in tests[:-1]) or type(tests[-1].value) is not bool:
        return None
    found = break_exit(loop[0], tests[-1].source.line)
    if found is None or found[0] != loop[1]:
        return None
    at = ctx.breaks.get(id(tests[-1]))
    places = [ctx.breaks.get(id(gd)) for gd in tests]
    if at is not None and places != [(at[0] - (trips - 1) + t, at[1]) for t in range(trips)]:
        at = None  # not one step of the range per iteration, or its length read otherwise
    why = (
        "statements follow the test of its break (the iteration that breaks is a part of one)"
        if slot[0] != period - 1
        else "its range is not range() of ints and names the loop keeps (its length is unknown)"
        if at is None
        else None
    )
    if why is not None:
        src = Source(loop[0], loop[1], "", loop[2])
        reason = f"where it breaks is checked against the trace (guards), not when it runs: {why}"
        return RollNote(src, trips, reason, rolled=True)
    index, length = at
    if tests[-1].value is False and index != length - 1:
        return None  # the run stops before the range does: its iterations do not end the loop
    return length - (index - (trips - 1))


def _is_while_exit(slot, per: dict, trips: int, period: int, loop) -> bool:
    """The guards ``per`` iteration of one body slot are a ``while`` statement's tests: on its
    line, true but in the last iteration, which ends with them."""
    if not loop[2].startswith("while") or slot[0] != period - 1:
        return False
    for t in range(trips):
        (gd,) = per[t] if len(per[t]) == 1 else (None,)
        if gd is None or gd.how != "bool" or gd.source is None or gd.source.line != loop[1]:
            return False
        if gd.value is not (t < trips - 1):
            return False
    return True


def _while_shift(nodes, i, period, trips, sigs, loop, guards) -> int:
    """How many nodes of the run at ``i`` come before a while loop's iterations: a while
    statement tests its condition before the first iteration, so where the run's iterations
    each test it (true) at position ``j`` and the nodes after them repeat positions 0..j with
    a false test, the iterations start after the first test (0 where this is not so)."""
    if not loop[2].startswith("while"):
        return 0
    end = i + period * trips
    for j in range(period - 1):
        tests = [_bool_guard(nodes[i + t * period + j], loop, guards) for t in range(trips)]
        if not all(tests):
            continue
        if sigs[end : end + j + 1] == sigs[i : i + j + 1] and end + j < len(nodes):
            if _bool_guard(nodes[end + j], loop, guards) is False:
                return j + 1
    return 0


def _going_on(test: Var, counted: Var, left: int, nodes: list, at: Node, taken: set) -> Var:
    """Append to ``nodes`` those of ``not test and counted < left`` (``counted``: the
    iterations run so far, this one's included); its Var."""

    def made(op: str, *ins) -> Var:
        out = Var(_fresh_name(f"{test.name}.{op.split('_')[-1]}", taken), (), np.dtype(bool))
        nodes.append(Node(op, ins, {}, (out,), at.source, at.scope))
        return out

    return made("logical_and", made("logical_not", test), made("less", counted, left))


def _bool_guard(node, loop, guards):
    """The value of the ``bool`` guard on ``node``'s output at line ``loop[1]``, or None."""
    found = [g for o in node.outputs for g in guards.get(o, ())]
    if len(found) == 1 and found[0].how == "bool" and found[0].source:
        if found[0].source.line == loop[1]:
            return found[0].value
    return None


def _moving_numbers(run, period: int, trips: int, ctx, taken):
    """``{(position, input): (a, b, s)}`` for the numbers among the body's inputs that are
    ``a + b * (k + s)`` in iteration ``k``, and ``{(position, input): table}`` for the others
    (a constant holding the number of each iteration: ``math.sin(t * dt)``, ``t * t``); the
    same number in every iteration is no entry. Or why a number cannot move with the loop."""
    out = {}
    for j in range(period):
        for s, first in enumerate(run[j].inputs):
            if not _is_number(first):
                continue
            values = [m.inputs[s] for m in run[j::period]]
            if all(v is first for v in values):  # one literal of the code, every iteration
                continue
            key = _literal_key(first)
            if all(_literal_key(v) == key for v in values):
                continue
            found = _progression(values)
            if found is None and len({type(v) for v in values}) == 1:
                if type(first) is not int or all(-(2**63) <= v < 2**63 for v in values):
                    dtype = np.int64 if type(first) is int else np.asarray(first).dtype
                    found = _table(np.array(values, dtype), ctx, taken)
            if found is None:
                return (
                    f"{run[j].op} at {run[j].source} reads a number that changes from one "
                    "iteration to the next"
                )
            out[(j, s)] = found
    return out


def _table(values: np.ndarray, ctx, taken) -> Var | None:
    """A constant of the graph holding ``values``, a row for each iteration, or None where
    the graph cannot hold one (in a loop's body: only the whole trace has constants)."""
    if ctx.within is not None:
        return None
    var = Var(_fresh_name("table", taken), values.shape, values.dtype)
    ctx.tables[var] = values
    return var


def _row(table: Var, at: Node, nodes: list, taken, weak: bool) -> Var:
    """Append the node reading the iteration's row of ``table`` to ``nodes``; its Var (weak
    where the rows stand for Python numbers, as they were)."""
    name = _fresh_name(f"{at.outputs[0].name}.row", taken)
    out = Var(name, table.shape[1:], table.dtype, weak)
    nodes.append(Node("index", (table,), {"idx": (Affine(0, 1),)}, (out,), at.source, at.scope))
    return out


def _is_number(x) -> bool:
    """A real number among a node's inputs that may move with the loop (not a bool)."""
    return type(x) in (int, float) or isinstance(x, np.integer | np.floating)


def _progression(values):
    """``(a, b, s)`` with ``values[k] == a + b * (k + s)`` exactly for every k, as Python
    computes it, or None. ``a + b * k`` of the first two values is tried first; numbers a
    user computes as ``0.1 + 0.05 * t`` for ``t`` in ``range(1, n)`` differ from that by
    rounding, so the step and the start are also tried as the shortest decimals near them,
    counted from ``s`` of 0 to ``_OFFSETS``."""
    if len({type(v) for v in values}) != 1 or not all(np.isfinite(values)):
        return None
    first, n = values[0], len(values)
    tried = [(first, values[1] - first, 0)]
    if isinstance(first, float | np.floating):
        step = (values[-1] - first) / (n - 1)
        for b in _decimals_near(step, type(first)):
            for s in range(_OFFSETS + 1):
                tried += [(a, b, s) for a in _decimals_near(first - b * s, type(first))]
            start = round(first / b) if b != 0 else 0  # t * dt from any t: a is 0
            if _OFFSETS < start < 2**31:
                tried.append((type(first)(0.0), b, start))
    for a, b, s in tried:
        if all(_literal_key(_affine(a, b, k + s)) == _literal_key(v) for k, v in enumerate(values)):
            return a, b, s
    return None


_OFFSETS = 2  # ``range(1, n)`` and ``range(2, n)``: the counts a loop variable starts from


def _affine(a, b, k):
    """``a + b * k`` as :func:`_number_nodes` computes it (a 0 of the right type is not added)."""
    return b * k if _adds_nothing(a, b) else a + b * k


def _decimals_near(x, kind) -> list:
    """``x`` and the shortest decimals within a few units in the last place of it (the
    literal a user wrote, before rounding moved it)."""
    near = [x]
    for digits in range(1, 17):
        d = kind(float(f"{float(x):.{digits}g}"))
        if d not in near and abs(d - x) <= 8 * abs(np.spacing(x)):
            near.append(d)
    return near


def _adds_nothing(a, b) -> bool:
    """Whether ``a + b * k`` is ``b * k`` for every k: ``a`` is 0 and adding it changes
    nothing (an int, or a float of b's own type, b > 0: then b * k is a float of that type,
    and not -0.0, which 0.0 + would make 0.0)."""
    same = type(a) is int or type(a) is type(b) and not isinstance(b, int | np.integer) and b > 0
    return a == 0 and same


def _number_nodes(counter: Var, a, b, s, nodes: list, at: Node, taken: set) -> Var:
    """Append the nodes computing ``a + b * (counter + s)`` (a weak scalar, like the numbers
    it stands for) to ``nodes``; its Var."""
    steps = [("add", s)] if s else []
    if not (b == 1 and type(b) is int):
        steps.append(("multiply", b))
    if not _adds_nothing(a, b):
        steps.append(("add", a))
    value, sample = counter, 1
    for op, other in steps:
        sample = OPS[op].impl(sample, other)  # NumPy's type for it (NEP 50)
        weak = value.weak and type(other) in (int, float)
        name = _fresh_name(f"{at.outputs[0].name}.{op[:3]}", taken)
        out = Var(name, (), np.asarray(sample).dtype, weak)
        nodes.append(Node(op, (value, other), {}, (out,), at.source, at.scope))
        value = out
    return value


def _fresh_name(name: str, taken: set) -> str:
    while name in taken:
        name += "'"
    taken.add(name)
    return name


def _stacked_like(v: Var, trips: int, taken: set) -> Var:
    """The stacked output of ``v``'s values: ``%v[]`` (a name no value of the graph has)."""
    name = v.name + "[]"
    while name in taken:
        name += "'"
    taken.add(name)
    return Var(name, (trips, *v.shape), v.dtype)


def _fold_stacks(nodes: list) -> list:
    """``np.stack`` of the rows of a loop's stacked output, in order (a concatenate of the
    rows reshaped to ``(1, ...)``, as tracing records it), is that output: the loop gives it
    directly. A rewrite of one recorded pattern, so it names the ops of the pattern."""
    producer = {o: n for n in nodes for o in n.outputs}
    stacked = {}  # a stacked output -> (its loop, its position)
    for n in nodes:
        if _is_loop(n):
            first = len(n.outputs) - n.attrs.get("stacked", 0)
            stacked.update({o: (n, k) for k, o in enumerate(n.outputs) if k >= first})
    rename, dropped = {}, set()
    for c in nodes:
        if c.op != "concatenate" or c.attrs.get("axis") != 0 or len(c.outputs) != 1:
            continue
        source = _rows_of(c, producer, stacked)
        if source is not None and source.shape == c.out.shape and source.dtype == c.out.dtype:
            rename[source] = c.out
            dropped.add(c)
    if not rename:
        return nodes
    out = []
    for n in nodes:
        if n in dropped:
            continue
        ins = tuple(rename.get(x, x) if isinstance(x, Var) else x for x in n.inputs)
        outs = tuple(rename.get(o, o) for o in n.outputs)
        out.append(
            n.replace(inputs=ins, outputs=outs) if (ins, outs) != (n.inputs, n.outputs) else n
        )
    return out


def _rows_of(c, producer, stacked):
    """The stacked output whose rows 0, 1, ... ``c`` concatenates (each reshaped to
    ``(1, ...)``), or None."""
    rows = []
    for x in c.inputs:
        r = producer.get(x) if isinstance(x, Var) else None
        if r is None or r.op != "reshape" or not isinstance(r.inputs[0], Var):
            return None
        if r.out.shape != (1, *r.inputs[0].shape):
            return None
        rows.append(r.inputs[0])
    source = None
    for t, row in enumerate(rows):
        ix = producer.get(row)
        if ix is not None and ix.op == "index" and ix.attrs.get("idx") == (t,):
            s = ix.inputs[0]
        elif t == len(rows) - 1 and source is not None:
            s = source if _is_last_row(row, *stacked[source]) else None
        else:
            return None
        if s not in stacked or (source is not None and s is not source):
            return None
        source = s
    if source is None or source.shape[0] != len(rows):
        return None
    return source


def _is_last_row(v: Var, loop: Node, k: int) -> bool:
    """``v`` is an output of ``loop`` giving the value its stacked output ``k`` has last."""
    body = loop.attrs["body"]
    return any(o is v and body.outputs[p] is body.outputs[k] for p, o in enumerate(loop.outputs))


def _role(values, locs, j, constants):
    """How body position ``j`` gets one of its inputs, ``values`` in each iteration."""
    first, t_first = values[0], locs[0]
    trips = len(locs)  # the lists below compare in one C loop each (a loop has thousands)
    if t_first is not None:
        _, at, out = t_first
        if locs == [(t, at, out) for t in range(trips)]:
            return ("internal", (at, out))
    if t_first is None and values.count(first) == trips:  # a Var equals itself alone
        return ("invariant", first)
    if t_first is None and locs[1] is not None:
        _, at, out = locs[1]
        if locs[1:] == [(t - 1, at, out) for t in range(1, trips)]:
            return ("carried", (at, out))
    if all(v in constants for v in values):
        if all(_same_constant(constants[first], constants[v]) for v in values):
            return ("invariant", first)  # one literal array lifted in every iteration
        if all(_same_type(first, v) for v in values):
            return ("table", None)  # an array of literals changing with the iteration
    return None


def _same_type(a: Var, b: Var) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.weak == b.weak


def _same_constant(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _like(v: Var, name: str) -> Var:
    return Var(name, v.shape, v.dtype, v.weak)


def _common_prefix(scopes) -> tuple:
    scopes = list({id(s): s for s in scopes}.values())  # the nodes of a line share one tuple
    first = scopes[0]
    n = len(first)
    for s in scopes[1:]:
        n = next((k for k in range(min(n, len(s))) if s[k] != first[k]), min(n, len(s)))
    return first[:n]
