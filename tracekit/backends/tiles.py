"""Tiled fusion across offsets (a ``compute_at`` schedule, CPU): a producer too costly to
compute again at every offset (``offsets.py`` keeps it as an array) is computed inside the
kernel that reads it, tile by tile: for each tile of the consumer's rows (its first axis),
the producer's rows that tile reads, a halo included, go to a scratch buffer of the thread,
small enough to stay in cache, and the consumer reads them from there at its offsets.

The producer's array is then never written to memory and read back; what it costs is its
halo rows, computed by two neighbouring tiles. A producer read through pads (``pads.py``: a
backward stage of a stencil chain, read by the stage before it at transposed offsets) is
computed in tiles the same way: a tile computes the producer's rows it reads that the
producer has, and reads its pads' constant outside their blocks as the kernel would. A
producer that computes tiles itself (a chain of stages) is computed in the tiles of the
kernel reading it with its own producers before it, each over the rows the tile reads
through the stages after it (their halos added up).

The cost model: the producer's values must not fit in ``TILE_BYTES`` already (a small
array is written and read back from cache anyway), and the work the halo rows of a tile
within ``TILE_BYTES`` add, per element, must stay within ``OPS_PER_BYTE`` per byte saved
(each value's element written and read back), a pad read weighing ``offsets.PAD_READ`` there
as in ``offsets.py`` (laplace3's gradient, 96³: its two stages of 7 pad reads each in tiles
of 5 94² rows, 16.4 operations per element for 16 bytes, took 8.3 ms against 5.2-5.4 ms as
arrays, load average 7). Every decision, and every refusal of a value
``offsets.py`` kept, is an :class:`~tracekit.backends.offsets.OffsetFusion` in
``Plan.offsets``.

>>> import numpy as np, tracekit as tk
>>> def smooth_twice(a):
...     b = np.tanh(a[1:] - a[:-1]) * np.exp(a[1:])  # costly: 2 transcendental functions
...     return b[2:] + b[1:-1] - 2.0 * b[:-2] + b[:-2] * b[1:-1]
>>> a = np.random.default_rng(0).standard_normal((600, 200))
>>> c = tk.compile(tk.trace(smooth_twice, a), target="cpu", progress=False)
>>> len(c.plan.kernels), c.plan.offsets[0].how
(1, 'tiles of 325 rows (+2 halo rows) in kernel k1')
>>> bool(np.allclose(c(a), smooth_twice(a)))
True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..ops import OPS
from . import emit_cpu
from . import scalar as S
from .emit_cpu import KernelSource
from .layout import Layout
from .offsets import PAD_READ, TRANSCENDENTAL, OffsetFusion
from .planner import Plan, Step
from .scalar import is_fast_math
from .windows import view_windows

TILE_BYTES = 512 * 1024  # a tile's scratch: within a core's L2 cache on most current CPUs
# operations per element the halo may add for each byte per element not written to memory
# and read back (a core computes several vector operations in the time memory moves a byte)
OPS_PER_BYTE = 1.0
# producers read through pads (a backward stage of a stencil chain, read by the stage before
# it at transposed offsets) computed in tiles too: False keeps them arrays
# (benchmarks/stencils.py's "untiled")
THROUGH_PADS = True


@dataclass
class Tile:
    """A producer kernel computed in tiles inside the kernel reading its values."""

    producer: Step
    lo: int  # consumer row i reads producer rows i + lo .. i + hi
    hi: int
    windows: dict  # the consumer's views of the producer's values: their windows
    rows: int = 0  # consumer rows per tile (all tiles of one consumer alike)
    reader: str = ""  # the kernel reading the producer's values (the consumer's, or nested)
    work: int = 0  # the producer's operations per element, a pad read weighing ``PAD_READ``


def tile_producers(plan: Plan) -> None:
    """Move each producer kernel whose values, kept as arrays by ``offsets.py``, one
    elementwise kernel reads through windows along its first axis into that kernel as a
    :class:`Tile`, where the cost model says so; decisions replace those of ``plan.offsets``."""
    if any(st.kind == "host" and OPS[st.nodes[0].op].kind == "control" for st in plan.steps):
        return  # loop drivers run plans step by step: not there
    windows = view_windows(plan)
    kept = {d.value: i for i, d in enumerate(plan.offsets) if not d.fused}
    made = {o: st for st in plan.steps for o in st.outputs}
    by_consumer: dict = {}
    for v, i in kept.items():
        producer = made.get(v)
        found = _tile_of(plan, producer, windows) if producer is not None else "not a kernel's"
        if isinstance(found, str):
            plan.offsets[i] = _refused(plan.offsets[i], found)
            continue
        consumer, tile = found
        by_consumer.setdefault(id(consumer), (consumer, {}))[1][id(producer)] = tile
    at = {id(st): k for k, st in enumerate(plan.steps)}  # producers first: nested in order
    for consumer, tiles in sorted(by_consumer.values(), key=lambda ct: at[id(ct[0])]):
        tiles = list(tiles.values())
        flat = [u for t in tiles for u in _with_its_own(t)]
        why = _cost(consumer, flat)
        decided = {o for t in flat for o in t.producer.outputs}
        for v, i in kept.items():
            if v in decided and (why is None or not plan.offsets[i].how):
                d = plan.offsets[i]
                plan.offsets[i] = _tiled(d, consumer, flat) if why is None else _refused(d, why)
        if why is None:
            _move_into(plan, consumer, tiles, flat)


def _with_its_own(t: Tile) -> list:
    """``t``, after the tiles its producer computes itself (a chain of stages), each of those
    over the rows the consumer's tile reads through ``t``'s (their halos added up)."""
    inner = [dataclasses.replace(u, lo=u.lo + t.lo, hi=u.hi + t.hi) for u in t.producer.tiles]
    return [*inner, t]


def _tile_of(plan: Plan, producer: Step, windows: dict):
    """``(consumer step, Tile)`` for ``producer``, or why it cannot be tiled."""
    g = producer.group
    if producer.kind != "kernel" or g.kind != "elementwise" or producer.tiles:
        return "its kernel is not a plain elementwise one"
    if g.shape[0] < 2:  # (read through a pad by more rows: no loop over its rows)
        return "one row: its first axis is no loop to tile"
    ends = set(plan.graph.outputs) | {gd.var for gd in plan.graph.guards}
    readers: dict = {}
    for st in plan.steps:
        for v in st.inputs:
            readers.setdefault(v, []).append(st)
    consumer, starts, seen = None, [], {}
    for o in producer.outputs:
        if o in ends or o.shape != g.shape:
            return "a result of the function, or of another shape"
        for view in readers.get(o, []):
            w = windows.get(view.outputs[0]) if view.kind == "view" else None
            if w is None and OPS[view.nodes[0].op].pads:
                return "read through a pad that is not read in place (pads.py)"
            if w is None or w.base is not o or view.outputs[0] in ends:
                return "read as an array, not only through slices of it"
            if w.fill is not None and not THROUGH_PADS:
                return "read through a pad (pads.py): rows outside it are its constant"
            users = readers.get(view.outputs[0], [])
            if len(users) != 1 or (consumer is not None and users[0] is not consumer):
                return "read by more than one kernel"
            if users[0].kind != "kernel":
                return "its slices are read by other steps than a kernel (views of them)"
            consumer = users[0]
            if w.dims[0][0] != 0 or w.dims[0][2] != 1 or w.shape != consumer.group.shape:
                return "its slices do not follow the reading kernel's first axis"
            starts.append(w.dims[0][1])
            seen[view.outputs[0]] = w
    c = consumer.group if consumer is not None else None
    if c is None or consumer.kind != "kernel" or c.kind != "elementwise" or c.shape[0] < 2:
        return "no elementwise kernel over rows reads it"
    pads = sum(x in windows and windows[x].fill is not None for x in producer.inputs)
    work = _work(producer) + PAD_READ * pads
    return consumer, Tile(producer, min(starts), max(starts), seen, reader=c.name, work=work)


def _cost(consumer: Step, tiles: list) -> str | None:
    """Choose the rows per tile (``Tile.rows``), or say why tiles do not pay: the work the
    halo rows add, per element, against the bytes not written and read back."""
    values = [o for t in tiles for o in t.producer.outputs]
    total = sum(o.size * o.dtype.itemsize for o in values)
    if total <= TILE_BYTES:
        return f"{total // 1024} KB: written and read back within the cache"
    per_row = sum(_row_bytes(o) for o in values)
    halo = sum(_row_bytes(o) * (t.hi - t.lo) for t in tiles for o in t.producer.outputs)
    rows = max(1, (TILE_BYTES - halo) // per_row)
    extra = sum(t.work * (t.hi - t.lo) / rows for t in tiles)
    saved = sum(2 * o.dtype.itemsize for o in values)
    if extra > OPS_PER_BYTE * saved:
        return (
            f"tiles of {rows} row(s) in {TILE_BYTES // 1024} KB: their halo rows would add "
            f"{extra:.3g} op(s) per element, {saved} bytes saved"
        )
    for t in tiles:
        t.rows = min(rows, consumer.group.shape[0])
    return None


def _work(step: Step) -> int:
    """Operations per element of a kernel (fast-math functions weighing ``TRANSCENDENTAL``)."""
    return sum(TRANSCENDENTAL if is_fast_math(n) else 1 for n in step.group.nodes)


def _row_bytes(v) -> int:
    return (v.size // v.shape[0]) * v.dtype.itemsize


def _tiled(d: OffsetFusion, consumer: Step, tiles: list) -> OffsetFusion:
    t = next(t for t in tiles if d.value in t.producer.outputs)
    mb = 2 * d.value.size * d.value.dtype.itemsize / 1e6
    how = f"tiles of {t.rows} rows (+{t.hi - t.lo} halo rows) in kernel {consumer.group.name}"
    if t.reader != consumer.group.name:  # read by a kernel computed in its tiles too
        how += f", for kernel {t.reader}'s rows there"
    if d.how:  # decided before, tiled into that kernel
        return dataclasses.replace(d, how=how)
    return dataclasses.replace(
        d, fused=True, how=how, reason=f"{mb:.2g} MB not written and read back; {d.reason}"
    )


def _refused(d: OffsetFusion, why: str) -> OffsetFusion:
    return dataclasses.replace(d, reason=f"{d.reason}; not in tiles: {why}")


def _move_into(plan: Plan, consumer: Step, tiles: list, flat: list):
    """The plan without the producers and the views of their values, which ``consumer``
    computes and reads in tiles (its step lists them, and their inputs, as its own);
    ``flat``: ``tiles`` after those their producers computed in tiles themselves."""
    gone = {id(t.producer) for t in tiles}
    values = {o for t in tiles for o in t.producer.outputs}
    views = [st for st in plan.steps if st.kind == "view" and st.inputs[0] in values]
    gone |= {id(st) for st in views}
    consumer.kernel_inputs = list(consumer.inputs)
    moved = [n for t in tiles for n in t.producer.nodes] + [st.nodes[0] for st in views]
    inside = {o for n in moved for o in n.outputs}  # (a nested producer's values, its views)
    extra = [x for t in tiles for x in t.producer.inputs if x not in consumer.inputs]
    consumer.inputs = consumer.inputs + [x for x in dict.fromkeys(extra) if x not in inside]
    consumer.nodes = moved + list(consumer.nodes)
    consumer.tiles = flat
    plan.steps = [st for st in plan.steps if id(st) not in gone]
    moved = {id(n) for st in views for n in st.nodes}
    plan.refusals = [r for r in plan.refusals if id(r.node) not in moved]


class TiledKernelSource(KernelSource):
    """A consumer kernel that computes its tiled producers' rows for each tile of its rows
    into per-thread scratch, then reads them there (``Step.tiles``)."""

    def __init__(
        self, step: Step, math, min_parallel, strided, windows, returns, chunked=False, **kw
    ):
        own = dataclasses.replace(step, inputs=step.kernel_inputs, tiles=[])
        windows = {**(windows or {}), **{v: w for t in step.tiles for v, w in t.windows.items()}}
        super().__init__(own, math, min_parallel, strided, windows, returns, chunked, **kw)
        self.step, self.tiles = step, step.tiles
        self.scratch = {}  # each tiled value: (its scratch's name, the source of its row 0)
        self.producers = []
        for k, t in enumerate(self.tiles):
            row0 = f"{self.p}p{k}_row0"
            ps = _ProducerSource(t.producer, math, strided, windows, row0, self.scratch)
            for o in t.producer.outputs:
                self.scratch[o] = (f"{self.p}tile_{o.ident}", row0)
            self.producers.append(ps)

    def operands(self) -> list:
        return [op[:3] for op in self.owned_operands()]

    def owned_operands(self) -> list:
        own = [(*op, self) for op in super().operands() if op[1] not in self.scratch]
        return own + [op for ps in self.producers for op in ps.owned_operands()]

    def at(self, v) -> str:
        return _in_scratch(self, v, self.scratch) or super().at(v)

    def _streams(self) -> int:
        return 1

    def _elementwise(self):
        import numba

        L = self.layout
        first, rest = L.kept[0], L.kept[1:]
        if L.dims[first] != [0]:  # the planner tiles kernels over rows of size > 1 only
            raise AssertionError(f"{self.group.name}: tiles need the first axis as a loop")
        n, rows = L.sizes[first], self.tiles[0].rows
        count = -(-n // rows)
        parallel = self._parallel() and count > 1
        per_thread = parallel and not self.chunked  # (a chunk kernel's scratch is its call's)
        slots = numba.config.NUMBA_NUM_THREADS if per_thread else 1
        for t in self.tiles:
            for o in t.producer.outputs:
                shape = (slots, rows + t.hi - t.lo, *o.shape[1:])
                self.emit(f"{self.scratch[o][0]} = np.empty({shape}, {S.ctor(o.dtype)})", 1)
        tile, r0, r1 = f"{self.p}tile", f"{self.p}r0", f"{self.p}r1"
        self.emit(f"# {count} tile(s) of {rows} rows; producers' rows in per-thread scratch", 1)
        if parallel:
            self._parallel_loop(tile, count, 1, "tiles")
        else:
            self.emit(f"for {tile} in range({count}):", 1)
        thread = "numba.get_thread_id()" if per_thread else "0"
        self.emit(f"{self.p}slot = {thread}", 2)
        self.emit(f"{r0} = {tile} * {rows}", 2)
        self.emit(f"{r1} = min({n}, {r0} + {rows})", 2)
        for t, ps in zip(self.tiles, self.producers):
            self.emit(f"{ps.row0} = {r0} + {t.lo}", 2)
            for o in t.producer.outputs:
                name = self.scratch[o][0]
                self.emit(f"{name}_t = {name}[{self.p}slot]", 2)
            self.lines += ps.rows_source(*_producer_rows(t, ps.row0, r1, n), 2)
        self.emit(f"for {L.names[first]} in range({r0}, {r1}):", 2)
        depth = self._loops(self._loop_order(rest), 3, False)
        self._elementwise_body(depth)


def _producer_rows(t: Tile, row0: str, r1: str, n: int) -> tuple[str, str]:
    """Source of the first and stop rows of ``t``'s producer a tile computes, ``row0`` its
    first row read (below 0 through a pad), ``r1`` the tile's stop of the consumer's ``n``
    rows: those the producer has (a pad's rows outside them read its fill, not scratch)."""
    rows = t.producer.group.shape[0]
    first = f"max(0, {row0})" if t.lo < 0 else row0
    stop = f"min({rows}, {r1} + {t.hi})" if n + t.hi > rows else f"{r1} + {t.hi}"
    return first, stop


def _in_scratch(ks: KernelSource, v, scratch: dict) -> str | None:
    """The element of ``v`` at ``ks``'s loop position where ``v`` is a window of a value in
    ``scratch``: the tile's row there (a pad's constant outside its block), else None."""
    w = ks.windows.get(v)
    if w is None or w.base not in scratch:
        return None
    name, row0 = scratch[w.base]
    view_index = ks._view_index(v)
    parts = w.indices(view_index)
    parts[0] = f"{parts[0]} - {row0}"
    return ks.guarded(w, view_index, f"{name}_t[{', '.join(parts)}]")


class _ProducerSource(KernelSource):
    """A tiled producer's loop nest over some of its rows, storing into scratch (and reading
    the values of the producers before it there: ``scratch``, shared)."""

    def __init__(self, step: Step, math, strided, windows, row0: str, scratch: dict):
        if step.tiles:  # its own nodes: the tiles it computed are the consumer's now
            step = dataclasses.replace(step, inputs=step.kernel_inputs, tiles=[])
        super().__init__(step, math, 1 << 62, strided, windows)
        g = self.group
        # every dim a loop of its own: rows are the first one, scratch is indexed per dim
        self.layout = Layout(
            g.shape,
            g.axes,
            self.inputs + self.outputs,
            self.p,
            {},
            self.strided | set(self.outputs),
        )
        self.row0, self.scratch = row0, scratch

    def operands(self) -> list:
        return [op for op in super().operands() if op[1] not in self.scratch]

    def at(self, v) -> str:
        if v not in self.outputs:
            return _in_scratch(self, v, self.scratch) or super().at(v)
        parts = self._view_index(v)
        parts[0] = f"{parts[0]} - {self.row0}"
        return f"{self.scratch[v][0]}_t[{', '.join(parts)}]"

    def rows_source(self, start: str, stop: str, depth: int) -> list[str]:
        self.lines = []
        L = self.layout
        first, rest = L.kept[0], L.kept[1:]
        if L.dims[first] != [0]:  # the planner tiles producers of 2 rows or more only
            raise AssertionError(f"{self.group.name}: tiles need the first axis as a loop")
        self.emit(f"# producer {self.group.name}: {len(self.group.nodes)} node(s)", depth)
        self.emit(f"for {L.names[first]} in range({start}, {stop}):", depth)
        inner = self._loops(self._loop_order(rest), depth + 1, False)
        self._elementwise_body(inner)
        return self.lines


def kernel_source(step: Step, *args, far_apart=False, thread_scratch=False) -> KernelSource:
    """:func:`emit_cpu.kernel_source`, for a step with tiles too (whose libm pass stays in the
    kernel: ``far_apart`` applies to untiled ones)."""
    if not step.tiles:
        return emit_cpu.kernel_source(
            step, *args, far_apart=far_apart, thread_scratch=thread_scratch
        )
    ks = TiledKernelSource(step, *args, thread_scratch=thread_scratch)
    ks.text = ks.source()
    return ks
