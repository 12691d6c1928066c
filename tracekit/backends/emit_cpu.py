"""Python source for the numba CPU kernels of a plan.

One kernel per fused group, written as plain loops: ``prange`` over the outer (kept) dimension
when the work is large, ``range`` below a threshold; reductions as per-row passes with
accumulators (per-chunk partials and an ordered combine when the whole array is reduced); scans
as a sequential inner loop. Each kernel's source carries the graph nodes it covers as comments.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ..ir import Var, format_node
from ..ops import OPS
from . import scalar as S
from .layout import Layout
from .planner import Step, accumulation, is_reduction
from .windows import read_through

# work (elements, weighted by what their ops cost: scalar.element_cost); below this a kernel
# runs serially (no thread start-up)
PARALLEL_MIN_WORK = 1 << 15
# Beside BLAS calls a parallel kernel costs more than it gains below this: NumPy's OpenBLAS and
# numba's OpenMP threads each spin a while after their work, and on few cores they take turns
# slowing each other down (measured: matmul 1024² + a parallel gelu epilogue 19 ms, with the
# epilogue serial 13 ms, the matmul alone 12 ms). Products on numba's threads
# (matmul_threads.py) leave no such threads: beside those alone, PARALLEL_MIN_WORK holds.
PARALLEL_MIN_WORK_BESIDE_BLAS = 1 << 22
# A chunk kernel (KernelSource.chunk) runs on Python threads from this much work; below it, on
# the calling thread alone: waking a pool's thread costs more than waking numba's
POOL_MIN_WORK = 4 * PARALLEL_MIN_WORK
# A parallel loop over at least this many trips keeps its place outermost (see _loop_order)
LOOP_TRIPS_TO_SHARE = 16
CHUNKS = 64  # partial results per whole-array reduction
# A reduction over leading dims (the column sums of a C-order matrix) runs over blocks of
# consecutive kept elements, one accumulator each (see KernelSource._columns): a block's part of
# each row is at least COLUMN_BYTES, a page, so that the hardware prefetchers stream it from
# memory (1 KB parts left a float64 column kernel 1.7x slower on data not in the caches), and
# COLUMNS at least, which is also the width where the kernel keeps a whole block's values for a
# later pass or where more blocks keep more threads busy
COLUMNS = 128
COLUMN_BYTES = 4096
BLOCK = 512  # elements a float32 sum adds up in float32 (see KernelSource._blocks)
# Interleaved element streams (see KernelSource._streams): at most STREAMS, each LANES
# consecutive elements (the widest vector: 16 float32 in 512 bits), for kernels of at least
# STREAM_MIN_WORK elements calling at least STREAM_MIN_FAST_MATH fast-math functions per
# element, as many as fit STREAM_BUDGET statements per loop iteration: numba takes about 15 ms
# to compile each statement, so a 20-op chain gets 3 streams (+0.6 s); Black-Scholes (61 ops,
# 1.5x faster in 4 streams, but +1.5 s to compile) and a 200-op chain get none.
STREAMS = 4
LANES = 16
STREAM_MIN_WORK = PARALLEL_MIN_WORK
STREAM_MIN_FAST_MATH = 2
STREAM_BUDGET = 64
# Where a kernel calls STREAM_MIN_FAST_MATH fast-math functions or more per element and no
# streams are written (too many statements, too few elements), LLVM's vectoriser interleaves
# this many vector iterations of its loops instead (see KernelSource.interleave)
INTERLEAVE = 4
VECTOR_BYTES = 64  # the widest vector register (AVX-512's; AVX2's is half: counts then err low)
# An interleaved elementwise loop of at least this many trips has no vector loop for the trips
# after its last interleaved iteration, only the scalar one (see KernelSource.vector_tail)
SCALAR_TAIL_TRIPS = 8192
# A column kernel computes a value of at most this many arithmetic ops on its inputs again in
# a later pass that reads it, rather than storing it in a pass and loading it in that one (see
# KernelSource._recomputed)
RECOMPUTE_OPS = 4
SHORT_ROW = 64  # rows up to this long loop to a bound LLVM cannot see (see _row_end)


def acc_dtype(node, out):
    """The dtype reduction ``node`` of results ``out`` accumulates in."""
    out = np.dtype(out)
    if accumulation(node).wide:
        return {"f": np.dtype(np.float64), "c": np.dtype(np.complex128)}.get(out.kind, out)
    return out


def _init(node, dtype) -> str:
    """The starting value of reduction or scan ``node``'s accumulator, a literal of ``dtype``."""
    return S.literal(accumulation(node).identity(dtype), np.dtype(dtype))


APART = 256  # bytes between two threads' scratch: a line and its prefetched neighbour, twice


def apart(size: int, dtype) -> int:
    """Elements of a row of per-thread scratch of ``size`` elements: ``size`` and
    :data:`APART` bytes more, a whole number of cache lines, so that two threads' rows share
    none (two threads writing one line slow each other down)."""
    itemsize = np.dtype(dtype).itemsize
    return -(-size * itemsize // 64) * 64 // itemsize + APART // itemsize


class KernelSource:
    """Source of one kernel: loop nests over its operands ``<kernel>_<var>`` (no ``def``)."""

    VECTORISE = True  # float accumulators through the intrinsics LLVM vectorises

    def __init__(
        self,
        step: Step,
        math: str = "fast",
        min_parallel: int = PARALLEL_MIN_WORK,
        strided: frozenset = frozenset(),
        windows: dict | None = None,
        returns: frozenset = frozenset(),
        chunked: bool = False,
        far_apart: bool = False,
        thread_scratch: bool = False,
    ):
        self.step, self.group, self.math = step, step.group, math
        # the libm pass (see _near_first) as the lines of a function of its own (``far_lines``),
        # the near pass's count of missed arguments (``far_count``) the segment's result
        self.far_apart, self.far_lines, self.far_count = far_apart, None, None
        self.min_parallel = min_parallel
        # the parallel loop as a serial loop over a chunk [lo, hi) of it, given at each call
        # (runtime.ChunkPool runs the chunks on threads): ``chunk`` = (its dim, trips, grain)
        self.chunked, self.chunk = chunked, None
        # a chunk kernel's scratch: rows (one per numba thread) of arrays its caller passes,
        # ``workspace`` (one array of rows per dtype), where ``thread_scratch`` (its chunks run
        # on numba's threads), else allocated in the chunk (see _scratch_buffers)
        self.thread_scratch = thread_scratch and chunked
        self._work: dict = {}  # parameter -> [elements of a row, dtype]
        self._work_at: dict = {}  # a scratch array's name -> its offset in its row
        self.lo, self.hi = f"{step.group.name}_lo", f"{step.group.name}_hi"
        g = self.group
        self.p = f"{g.name}_"
        self.inputs = list(step.inputs)
        self.outputs = list(step.outputs)
        rows = {v: g.row_shape for v in self.outputs if g.role.get(v) == "row"}
        windows = windows or {}
        # operands indexed through the array they slice (see windows.py)
        self.windows = {
            v: windows[v]
            for v in self.inputs + self.outputs
            if v not in rows and read_through(v, windows)
        }
        self.strided = frozenset(v for v in self.inputs if v in strided) | set(self.windows)
        self.layout = Layout(
            g.shape, g.axes, self.inputs + self.outputs, self.p, rows, self.strided
        )
        # 0-d results computed outside every loop (no kept dims) that the kernel gives back
        # as numba scalars instead of storing them (a loop driver's scalar state)
        self.returned = [
            v for v in self.outputs if v in returns and not v.shape and not self.layout.kept
        ]
        self.lines: list[str] = []
        self._open_loops: list = []  # (depth, index) of the loops around the next line
        self.local: dict = {}  # Var -> source of its current element / row value
        self.reduces = [n for n in g.nodes if is_reduction(n)]
        self.blocked: list = []  # reductions adding up in blocks in the loop being emitted
        self.rare = False  # emitting the rare pass through libm (_near_first)
        self.block_range: tuple = ()  # (index, start, end) of the block being emitted
        self.near = False  # fast-math functions' versions for ordinary arguments (_near_first)
        self._far = f"{self.p}far"  # how many arguments those versions missed
        self._farc = f"{self.p}farc"  # ... in a parallel chunk of a reduction (one update each)
        self.far_into = self._farc  # the count a reduction's row or element adds its tests to
        self.far_terms: list = []  # the element's tests (numba allows one update per loop)
        self.streamed = False  # some loop interleaves streams (see _streams)
        self.recompute: dict = {}  # values later passes compute again (see _recomputed)

    # -- naming
    def arg(self, v: Var) -> str:
        return f"{self.p}{v.ident}"

    def base_arg(self, base: Var) -> str:
        return f"{self.p}base_{base.ident}"

    def at(self, v: Var) -> str:
        """The element of array operand ``v`` at the current loop position."""
        w = self.windows.get(v)
        if w is None:
            return f"{self.arg(v)}[{self.layout.index(v) or '()'}]"
        view_index = self._view_index(v)
        return self.guarded(w, view_index, f"{self.base_arg(w.base)}[{w.index(view_index)}]")

    def guarded(self, w, view_index: list, element: str) -> str:
        """``element`` (of window ``w`` at ``view_index``) where each of its pads' blocks
        holds it, the pad's fill outside."""
        for box, fill in w.layers:  # a pad's: its fill outside its block, innermost first
            bounds = w.bounds(view_index, box)
            if bounds != []:
                fill = S.literal(fill, w.base.dtype)
                element = f"({element} if {self._within(bounds)} else {fill})"
        return element

    def _within(self, bounds: list | None) -> str:
        """The condition that each ``(index, first, stop)`` of ``bounds`` holds (None: never).

        The bounds on the indices of loops outside the innermost open one are combined with
        ``&``, without branches: one value the inner loop does not change, which LLVM takes
        out of it and splits the loop on. Joined by ``and`` (branches), they left LLVM a mask
        per read: laplace3's backward kernels, which read through pads at seven offsets, took
        1.36 ms a chunk instead of 0.48 on one thread."""
        if bounds is None:
            return "False"
        inner = self._open_loops[-1][1] if self._open_loops else None
        outer, last = [], []
        for i, first, stop in bounds:
            if i == inner:
                last.append(f"{f'{first} <= ' if first else ''}{i}{f' < {stop}' if stop else ''}")
            else:
                outer += [f"({first} <= {i})"] if first else []
                outer += [f"({i} < {stop})"] if stop else []
        return " and ".join([" & ".join(outer)] * bool(outer) + last)

    def _view_index(self, v: Var) -> list[str]:
        """Source of the index of each of ``v``'s own dims (a windowed operand's dims never
        merge with others: see Layout's ``strided``)."""
        L = self.layout
        lead = len(L.shape) - v.ndim
        out = []
        for d, n in enumerate(v.shape):
            c = next((c for c, dims in enumerate(L.dims) if d + lead in dims), None)
            out.append("0" if n == 1 or c is None else L.names[c])
        return out

    def operands(self) -> list:
        """``(parameter, Var, whole)`` per parameter: the Var whose array the caller passes, and
        whether it is passed whole (a window's base) rather than in the layout's shape."""
        out, bases = [], set()
        for v in self.inputs + self.outputs:
            w = self.windows.get(v)
            if v in self.returned:
                continue
            if w is None:
                out.append((self.arg(v), v, False))
            elif w.base not in bases:
                bases.add(w.base)
                out.append((self.base_arg(w.base), w.base, True))
        return out

    def owned_operands(self) -> list:
        """:meth:`operands` with the kernel source whose layout shapes each (``self`` but in
        a kernel with tiles, see ``tiles.py``)."""
        return [(*op, self) for op in self.operands()]

    def params(self) -> list[str]:
        return [p for p, _, _ in self.operands()] + [p for p, _, _ in self.workspace]

    @property
    def workspace(self) -> list:
        """A chunk kernel's scratch its caller passes: ``(parameter, (rows, size), dtype)``, an
        array per dtype, a row per numba thread holding each scratch array of the dtype."""
        import numba

        rows = numba.config.NUMBA_NUM_THREADS
        return [(p, (rows, apart(size, dtype)), dtype) for p, (size, dtype) in self._work.items()]

    def read(self, v: Var) -> str:
        if v in self.local:
            return self.local[v]
        if self.layout.is_scalar(v) and v in self.inputs:
            return self.arg(v)
        if v in self.returned:  # a 0-d result of an earlier pass: stored in no array
            return self.returned_name(v)
        return self.at(v)

    # -- emission helpers
    def emit(self, line: str, depth: int):
        self.lines.append("    " * depth + line)
        self._open_loops = [(d, i) for d, i in self._open_loops if d < depth]
        if line.startswith("for "):
            self._open_loops.append((depth, line.split()[1]))

    def value(self, x, dtype_hint=None):
        """(source, dtype) of a node input."""
        if isinstance(x, Var):
            return self.read(x), x.dtype
        if x is None:
            return "None", None
        weak = isinstance(x, bool | int | float | complex) and not isinstance(x, np.generic)
        d = None if weak else np.asarray(x).dtype
        if d is None:
            d = {
                bool: np.dtype(bool),
                int: np.dtype(np.int64),
                float: np.dtype(np.float64),
                complex: np.dtype(np.complex128),
            }[type(x)]
        return S.literal(x, d), d

    def compute(self, node, depth: int):
        """Emit the statement computing an elementwise (or alias) node."""
        out = node.out
        name = f"{self.p}t_{out.ident}"
        if OPS[node.op].keeps_order:  # a per-row alias (reshape)
            self.emit(f"{name} = {self.read(node.inputs[0])}", depth)
        else:
            vals = [self.value(x) for x in node.inputs]
            args, dtypes = [v[0] for v in vals], [v[1] for v in vals]
            src = S.expr(node, args, dtypes, self.math, near=self.near)
            self.emit(f"{name} = {S.typed_expr(node, src, self.math)}", depth)
            far = S.far_test(node, args, dtypes, self.math) if self.near else None
            if far:
                self.far_terms.append(far)
        self.local[out] = name

    def store(self, v: Var, depth: int):
        if v in self.returned:
            self.emit(f"{self.returned_name(v)} = {self.local[v]}", depth)
        elif v in self.outputs:
            self.emit(f"{self.at(v)} = {self.local[v]}", depth)

    def returned_name(self, v: Var) -> str:
        return f"{self.p}ret_{v.ident}"

    # -- kernels
    def source(self) -> str:
        g = self.group
        self.emit(f"# kernel {g.name}: {g.kind} over {list(g.shape)}", 1)
        for n in g.nodes:
            self.emit(f"# {format_node(n)}", 1)
        if g.kind == "elementwise":
            self._elementwise()
        elif g.kind == "scan":
            self._scan()
        else:
            self._near_first(self._reduction)
        return "\n".join(self.lines)

    def _reduction(self, rare: bool):
        """A kernel with reductions; ``rare``: serial (see ``_near_first``)."""
        if self._columns_fit():
            self._columns(serial=rare)
        elif self.layout.kept:
            self._rows(serial=rare)
        else:  # passes with a combine between them: numba's parallel loops
            self.chunked = False
            self._whole(serial=rare)

    def _loops(self, dims, depth, parallel) -> int:
        if self.chunk is not None and depth == 1 and self.chunk[0] in dims:
            dims = [self.chunk[0]] + [c for c in dims if c != self.chunk[0]]
        for k, c in enumerate(dims):
            name, size = self.layout.names[c], self.layout.sizes[c]
            innermost = k == len(dims) - 1
            if parallel and k == 0:
                self._parallel_loop(name, size, depth, c, innermost)
            elif k == 0 and self._in_chunk(c, depth):
                self._chunk_range(name, depth, innermost)
            else:
                self.emit(f"for {name} in range({size}):", depth)
            depth += 1
        return depth

    def _loop_order(self, dims) -> list:
        """``dims`` (collapsed loop dims, C order) in the order the loops nest, outermost first.

        Innermost: the dim along which the most operand bytes lie contiguous, so that the
        inner loop vectorises over unit-stride loads and stores (a transposed view's base
        is contiguous along another dim; ties keep C order: a short contiguous last axis,
        K = 60 in a 64x64x60 stencil, stays innermost). Outermost, the parallel one: the
        largest of the others (a prange over 2 planes would leave cores idle)."""
        if len(dims) < 2:
            return list(dims)
        votes = {c: 0 for c in dims}
        for v in self.inputs + self.outputs:
            c = self._contiguous_dim(v)
            if c in votes:
                votes[c] += v.dtype.itemsize
        inner = max(reversed(dims), key=lambda c: votes[c])  # the last of equals
        rest = [c for c in dims if c != inner]
        sizes = self.layout.sizes
        outer = max(rest, key=lambda c: sizes[c])  # the first of equals
        if sizes[rest[0]] >= LOOP_TRIPS_TO_SHARE:
            outer = rest[0]
        return [outer] + [c for c in rest if c != outer] + [inner]

    def _contiguous_dim(self, v: Var):
        """The collapsed loop dim along which ``v``'s elements are adjacent in memory, or None
        (a scalar, a strided view whose strides only the call knows)."""
        w = self.windows.get(v)
        L = self.layout
        if w is None:
            if v in self.strided or L.is_scalar(v):
                return None
            return L.full_dims(v)[-1]  # the runner passes it C-contiguous in the layout's shape
        view_dim, _, step = w.dims[-1]
        if view_dim is None or step != 1:
            return None
        d = view_dim + len(L.shape) - v.ndim
        return next((c for c, dims in enumerate(L.dims) if d in dims), None)

    def _parallel_loop(self, name, n, depth, dim, innermost=False):
        """A parallel loop of ``n`` trips over ``dim``: ``prange``, or in a chunk kernel (at the
        top level, once) a loop over the chunk ``[lo, hi)`` of it."""
        if not self._chunk_loop_at(depth):
            self._prange(name, n, depth)
            return
        self.chunk = (dim, n, 1)
        self._chunk_range(name, depth, innermost)

    def _chunk_range(self, name, depth, innermost):
        """The loop over the chunk ``[lo, hi)``; the innermost one as ``_range`` opens it
        (unsigned bounds need not: numba does not wrap an unsigned index around)."""
        if innermost and not self.chunk_unsigned():
            self._range(name, self.lo, self.hi, depth)
        else:
            self.emit(f"for {name} in range({self.lo}, {self.hi}):", depth)

    def _chunk_loop_at(self, depth) -> bool:
        """Whether a parallel loop at ``depth`` is the chunk kernel's loop over its chunk
        (the first at the top level) rather than a ``prange``."""
        return self.chunked and depth == 1 and self.chunk is None

    def _in_chunk(self, dim, depth) -> bool:
        """Whether a serial loop over ``dim`` at ``depth`` covers the chunk only (the same
        kernel's loops again, through libm: see ``_near_first``)."""
        return self.chunk is not None and depth == 1 and self.chunk[0] == dim

    @property
    def reads_pads(self) -> bool:
        """Whether the kernel reads a pad in place (a window with a fill: the element or the
        pad's constant, by a comparison of the indices)."""
        return any(w.fill is not None for w in self.windows.values())

    def chunk_unsigned(self) -> bool:
        """Whether the chunk's bounds may be uint64: the chunk loop's index only indexes
        arrays (an elementwise kernel without windows). numba adds no negative-index
        wraparound for an unsigned index (with int64 bounds a trig kernel ran 4x slower)."""
        if self.group.kind != "elementwise" or self.windows:
            return False
        return all(
            OPS[n.op].kind == "elementwise" or OPS[n.op].keeps_order for n in self.group.nodes
        )

    def _scratch_buffers(self, buffers, depth, header=None, chunk=False):
        """Scratch ``buffers`` (name, size, dtype) at ``depth``: inside a ``prange`` body
        (whose header is line ``header``) one row per numba thread of arrays the calling
        thread allocates before the loop; at the top of a chunk kernel whose chunks run on
        numba's threads (``chunk``, :attr:`thread_scratch`) the rows of arrays its caller
        passes (:attr:`workspace`); else arrays of their own. No ``np.empty`` runs on numba's
        threads: allocations there contend for malloc's lock wherever two threads share an
        arena (in a process of more threads than arenas, 8 per core: one that has run
        jax.jit), where a column kernel ran 1.6x slower on two threads than on one."""
        import numba

        slots = numba.config.NUMBA_NUM_THREADS
        if chunk and self.thread_scratch:
            rows = []
            for name, size, dtype in buffers:
                dtype = np.dtype(dtype)
                param = f"{self.p}{dtype.name}_work"
                if name not in self._work_at:  # (the libm pass reuses the near pass's)
                    used = self._work.setdefault(param, [0, dtype])
                    self._work_at[name] = used[0]
                    used[0] += apart(size, dtype) - APART // dtype.itemsize  # whole lines
                at = self._work_at[name]
                rows.append((name, f"{param}[{self.p}slot, {at}:{at + size}]"))
        elif header is not None:
            indent = "    " * (depth - 1)
            self.lines[header:header] = [
                f"{indent}{name}_t = np.empty(({slots}, {apart(size, dtype)}), {S.ctor(dtype)})"
                for name, size, dtype in buffers
            ]
            rows = [(name, f"{name}_t[{self.p}slot]") for name, _, _ in buffers]
        else:
            for name, size, dtype in buffers:
                self.emit(f"{name} = np.empty({size}, {S.ctor(dtype)})", depth)
            return
        if rows:
            self.emit(f"{self.p}slot = numba.get_thread_id()", depth)
        for name, row in rows:
            self.emit(f"{name} = {row}", depth)

    def _prange(self, name, n, depth):
        """A parallel loop: numba compiles its body as a function of its own (see
        ``scalar._make_kernel_intrinsics`` for ``_wide_vectors``)."""
        self.emit(f"for {name} in prange({n}):", depth)
        self.emit("_wide_vectors()", depth + 1)

    def _range(self, name, lo, hi, depth) -> int:
        """Open a loop of ``name`` over ``[lo, hi)`` (int64 bounds) whose index LLVM can
        see is not negative: numba wraps a negative index around by the axis's length, lane
        by lane where it cannot rule one out, and a loop from an unknown ``lo`` indexed its
        arrays by gathers (a whole-array sum of shifted slices, rosen's: 2.0 G elements/s on
        one thread, 5.7 as a count from a bound known to be at least 0). Returns the body's
        depth."""
        if lo == "0":
            self.emit(f"for {name} in range({hi}):", depth)
            return depth + 1
        start, count = f"{name}_lo", f"{name}_k"  # (a streamed row pass's blocks are {name}s)
        self.emit(f"{start} = max(0, {lo})", depth)
        self.emit(f"for {count} in range({hi} - {start}):", depth)
        self.emit(f"{name} = {start} + {count}", depth + 1)
        return depth + 1

    def work(self) -> int:
        """Elements times what one costs: a short chain of transcendental functions over 2k
        elements is worth two threads, 30k additions are not."""
        per_element = 1 + sum(S.element_cost(n, self.math) for n in self.group.nodes)
        return self.layout.total * per_element

    def _parallel(self) -> bool:
        return self.work() >= self.min_parallel

    def _elementwise(self):
        self._near_first(lambda rare: self._element_loops(1, rare=rare))

    def _near_first(self, loops):
        """The kernel's loops (``loops(rare)``); where some function has a version for
        ordinary arguments (``sin`` without its huge-argument reduction, which a vectorised
        loop would otherwise evaluate for every element), the loops with those versions,
        counting the arguments they miss, then, where there were any, the whole kernel again
        through libm (as ``math="libm"`` computes it): serial loops of one stream
        (``rare=True``), for a case that is rare and should cost little to compile (the
        fast-math functions' full versions, inlined a second time, doubled the kernel's
        compile; a parallel loop's body is optimised four times over by numba, a plain one
        once)."""
        if not self._may_run_twice() or not any(self._has_near(n) for n in self.group.nodes):
            loops(rare=False)
            return
        self.emit(f"{self._far} = 0", 1)
        self.near = True
        loops(rare=False)
        self.near = False
        if self.far_apart:  # compiled only where an argument is ever huge
            kept, self.lines, self.local = self.lines, [], {}
            self._rare_pass(loops)
            self.far_lines, self.lines, self.far_count = self.lines, kept, self._far
            return
        self.emit(f"if {self._far} != 0:", 1)
        start, self.local = len(self.lines), {}
        self._rare_pass(loops)
        self.lines[start:] = ["    " + line for line in self.lines[start:]]

    def _rare_pass(self, loops):
        fast, self.math, self.rare = self.math, "libm", True
        loops(rare=True)
        self.math, self.rare = fast, False

    def _count_far(self, depth):
        """Add the tests of the values a reduction kernel just computed to its count."""
        if self.far_terms:
            self.emit(f"{self.far_into} += {' + '.join(self.far_terms)}", depth)
            self.far_terms = []

    def _far_chunk(self, depth, end=False):
        """Start (``end``: add to the kernel's count) a chunk's count of missed arguments."""
        if self.near:
            self.emit(f"{self._far} += {self._farc}" if end else f"{self._farc} = 0", depth)

    def _has_near(self, node) -> bool:
        if OPS[node.op].keeps_order or OPS[node.op].ufunc is None:  # (reductions among them)
            return False
        dtypes = [x.dtype if isinstance(x, Var) else self.value(x)[1] for x in node.inputs]
        return S.far_test(node, ["x"] * len(dtypes), dtypes, self.math) is not None

    def _may_run_twice(self) -> bool:
        """Whether computing every element again gives the same results: no result is written
        through a view (whose base a read might share) and none is also read."""
        return not any(v in self.windows or v in self.inputs for v in self.outputs)

    def _element_loops(self, base: int, rare: bool = False):
        streams = 1 if rare else self._streams()
        if streams == 1:
            parallel = False if rare else self._parallel()
            depth = self._loops(self._loop_order(self.layout.kept), base, parallel)
            self._elementwise_body(depth)
            return
        L = self.layout
        outer, inner = L.kept[:-1], L.kept[-1]
        i, size = L.names[inner], L.sizes[inner]
        self.streamed = True
        width = streams * LANES
        full = size // width * width
        parallel = self._parallel()
        depth = self._loops(outer, base, parallel)
        blocks = f"{i}b"
        self.emit(f"# {streams} interleaved streams of {LANES} elements (see _streams)", depth)
        if parallel and not outer and self.chunked:  # chunks of elements, whole blocks each
            self.chunk = (inner, size, width)
            self.emit(self._chunk_blocks(blocks, width), depth)
        elif parallel and not outer:
            self._prange(blocks, size // width, depth)
        else:
            self.emit(f"for {blocks} in range({size // width}):", depth)
        self._interleave(self._elementwise_body(0, keep=False), i, blocks, streams, depth + 1)
        if self.near:
            terms = " + ".join(f"{self.p}t_far_{k}" for k in range(streams))
            self.emit(f"{self._far} += {terms}", depth + 2)
        if self._in_chunk(inner, depth):  # the chunk's elements past the last whole block
            self.emit(f"for {i} in range({self._bound(full)}, {self.hi}):", depth)
        else:
            self.emit(f"for {i} in range({full}, {size}):", depth)
        self._elementwise_body(depth + 1)

    def _chunk_blocks(self, blocks, width) -> str:
        """The loop over the whole blocks of ``width`` elements in the chunk (whose ``lo`` is
        a multiple of ``width``)."""
        w = self._bound(width)
        return f"for {blocks} in range({self.lo} // {w}, {self.hi} // {w}):"

    def _bound(self, n) -> str:
        """A constant beside the chunk's bounds, of their type."""
        return f"np.uint64({n})" if self.chunk_unsigned() else str(n)

    def _interleave(self, body, i, block, streams, depth):
        """Emit the statements ``body`` of the element at ``i`` for the ``streams`` elements
        ``LANES`` apart in each of the block ``block``'s LANES iterations (the block's loop is
        open at ``depth - 1``); the values they assign and ``i`` take a stream's suffix."""
        assigned = {m for line in body for m in re.findall(r"^\s*(\w+) = ", line)}
        local = sorted(
            {v for v in assigned if v.startswith((f"{self.p}t_", f"{self.p}b_"))} | {i},
            key=len,
            reverse=True,
        )
        names = re.compile(rf"\b({'|'.join(map(re.escape, local))})\b")
        self.emit(f"{i}o = np.uint64({block}) * np.uint64({streams * LANES})", depth)
        self.emit(f"for {i}l in range({LANES}):", depth)
        for k in range(streams):
            self.emit(f"{i}_{k} = {i}o + np.uint64({k * LANES} + {i}l)", depth + 1)
        for line in body:
            for k in range(streams):
                self.emit(names.sub(rf"\1_{k}", line), depth + 1)

    def _elementwise_body(self, depth, keep=True) -> list[str]:
        """Emit the group's statements at ``depth``; with ``keep=False`` return them instead
        (the count of missed arguments left to the caller, in ``<kernel>_t_far``)."""
        start = len(self.lines)
        self.local, self.far_terms = {}, []
        for n in self.group.nodes:
            self.compute(n, depth)
            for o in n.outputs:
                self.store(o, depth)
        if self.near:
            self.emit(f"{self.p}t_far = {' + '.join(self.far_terms)}", depth)
            if keep:
                self.emit(f"{self._far} += {self.p}t_far", depth)
        body = self.lines[start:]
        if not keep:
            del self.lines[start:]
        return body

    def _streams(self) -> int:
        """How many independent element streams one loop iteration interleaves.

        A chain of transcendental functions is one long dependency chain per element, and the
        CPU cannot overlap enough of the next vector iteration with it (5 chained float32 tanh
        took 10.6x the time of one, 5 independent ones 5.2x). The statements of independent
        vector iterations, interleaved line by line, keep its units busy (the 5 chained tanh:
        1.7x faster in 3 streams). Stream indices are unsigned, so numba adds no negative-index
        wraparound and LLVM sees plain strided accesses. Elements are independent here, as in
        a ``prange``."""
        L, g = self.layout, self.group
        if self.math != "fast" or not L.kept or L.total < STREAM_MIN_WORK:
            return 1
        if any(OPS[n.op].kind == "opaque" for n in g.nodes):
            return 1
        if any(w.fill is not None for w in self.windows.values()):
            return 1  # a pad's guards compare signed indices (stream indices are unsigned)
        heavy = sum(S.is_fast_math(n, self.math) for n in g.nodes)
        streams = min(STREAMS, STREAM_BUDGET // len(g.nodes))
        if heavy < STREAM_MIN_FAST_MATH or streams < 2 or L.sizes[L.kept[-1]] < streams * LANES:
            return 1
        return streams

    @property
    def interleave(self) -> int:
        """The count of vector iterations LLVM's vectoriser interleaves in this kernel's loops
        (0: its own choice, which is 1 for long loop bodies). Where each element calls a chain
        of fast-math functions, one vector iteration is a dependency chain too long for the CPU
        to overlap the next one with it: interleaved iterations, as streams do in the source
        (``_streams``), keep its units busy (a float64 chain of 10 functions: 80 ns an element,
        27 interleaved by 4; a float32 chain of 5 tanh as fast as in 4 streams)."""
        if self.streamed:
            return 0
        heavy = sum(S.is_fast_math(n, self.math) for n in self.group.nodes)
        if heavy < STREAM_MIN_FAST_MATH:
            return 0
        count, L = INTERLEAVE, self.layout
        if self.group.kind == "elementwise" and L.kept:  # a short inner loop: fewer, so that
            # two interleaved iterations fit in it (isoneutral's 60 float64 trips: by 4 they
            # were one, then the epilogue's vector loop and the scalar one; by 2, 7.9 -> 7.0
            # ms warm, and 0.2 s less to compile: one copy fewer of its 300-op body)
            nodes = self.group.nodes
            widest = max((o.dtype.itemsize for n in nodes for o in n.outputs), default=8)
            trips, lanes = L.sizes[L.kept[-1]], max(1, VECTOR_BYTES // widest)
            while count > 1 and 2 * count * lanes > trips:
                count //= 2
        return count

    @property
    def vector_tail(self) -> bool:
        """Whether LLVM writes, for an interleaved loop (``interleave``), a vector loop for
        the trips after its last interleaved iteration (its epilogue) as well as the scalar
        one: one more copy of the loop's body to compile (0.1-0.2 s of the great-circle kernel
        of ``cold_compile.py``), which pays on short loops only (a chain of 5 float32 tanh:
        7.7 us over 2,000 elements with it, 8.5 without; the same over 10,000)."""
        L = self.layout
        if self.group.kind != "elementwise" or not L.kept:
            return True
        return L.sizes[L.kept[-1]] < SCALAR_TAIL_TRIPS

    def _scan(self):
        (node,) = self.group.nodes
        x = node.inputs[0]
        out = node.out
        depth = self._loops(self.layout.kept, 1, self._parallel())
        acc = f"{self.p}acc"
        self.emit(f"{acc} = {_init(node, out.dtype)}", depth)
        inner = self._loops(self.layout.red, depth, False)
        v = S.cast(self.read(x), x.dtype, out.dtype)
        step = S.accumulate(accumulation(node), acc, v, out.dtype)
        self.emit(f"{acc} = {S.typed(step, out.dtype)}", inner)
        self.local[out] = acc
        self.store(out, inner)

    # -- reductions: phases
    def _phases(self):
        """Phase of every value: the pass over the reduced dims in which it is computed.

        That is the first pass in which its inputs are available, but for a full value
        computed from the kernel's inputs and row values alone and read only in later passes
        (a ``sin(x)`` added to a layer norm's result): that one is computed in the first pass
        that reads it, from the inputs read again, instead of being kept in a scratch row
        from an earlier pass (a store and a load more per element, and more work in a pass
        that may be a reduction's); not in short rows of a row kernel (see below)."""
        g, L, phase = self.group, self.layout, {}
        for n in g.nodes:
            p = max([phase.get(x, 0) for x in n.var_inputs] or [0])
            for o in n.outputs:
                phase[o] = p + 1 if is_reduction(n) else p
        made = {o: n for n in g.nodes for o in n.outputs}
        readers: dict = {}
        for n in g.nodes:
            for x in n.var_inputs:
                readers.setdefault(x, []).append(n)
        free = set()  # full values of inputs and row values only, computable in any pass
        if L.red and L.sizes[L.red[-1]] <= SHORT_ROW and not self._columns_fit():
            return phase  # (rows of 64: a float32 RMS norm with a log and an exp2 moved to its
            # last pass ran 1.6x slower, 185 us against 116; a column kernel's inner loop is
            # over its block of columns, however few the rows)
        for n in g.nodes:
            if not is_reduction(n) and len(n.outputs) == 1 and g.role.get(n.out) != "row":
                if all(x not in made or g.role.get(x) == "row" or x in free for x in n.var_inputs):
                    free.add(n.out)
        for n in reversed(g.nodes):
            later = readers.get(n.out, [])
            if n.out in free and later and all(g.role.get(r.out) != "row" for r in later):
                phase[n.out] = max(phase[n.out], min(phase[r.out] for r in later))
        return phase

    def _passes(self, phase) -> int:
        """How many passes over the reduced dims a row kernel makes."""
        g = self.group
        full = [n for n in g.nodes if g.role[n.out] == "full"]
        return 1 + max(
            [phase[n.out] for n in full] + [phase.get(r.inputs[0], 0) for r in self.reduces]
        )

    def _rows(self, serial: bool = False):
        L = self.layout
        phase = self._phases()
        passes = self._passes(phase)
        scratch = self._scratch(phase)
        outer, rest = L.kept[0], L.kept[1:]
        n_outer = L.sizes[outer]
        parallel = not serial and self._parallel() and n_outer > 1
        nch = min(n_outer, CHUNKS) if parallel else 1
        i0, ch = L.names[outer], f"{self.p}ch"
        depth = 1
        header = None  # the prange's first line
        if parallel and self.chunked:
            self.chunk = (outer, n_outer, 1)
        elif parallel:
            header = len(self.lines)
            self._prange(ch, nch, depth)
            depth += 1
        chunk_depth = depth
        self._far_chunk(chunk_depth)
        buffers = [
            (f"{self.p}s_{v.ident}", L.red_total, v.dtype) for v in scratch if v not in self.alias
        ]
        self._scratch_buffers(buffers, depth, header, chunk=parallel and self.chunked)
        if self._in_chunk(outer, depth):
            lo, hi = self.lo, self.hi
        elif parallel:  # rows spread evenly over the chunks (see _even_chunk)
            lo, hi = _even_chunk(ch, n_outer, nch)
        else:
            lo, hi = "0", str(n_outer)
        self.emit(f"for {i0} in range({lo}, {hi}):", depth)
        depth = self._loops(rest, depth + 1, False)
        self._row_nodes(phase, 0, depth)
        for p in range(passes):
            reds = [r for r in self.reduces if phase.get(r.inputs[0], 0) == p]
            for r in reds:
                self._acc_init(r, depth)
            if L.red:
                inner = self._loops(L.red[:-1], depth, False)
                self._row_pass(p, phase, scratch, reds, inner)
            else:  # reduced dims of size 1, collapsed away: one element per row
                self._pass_body(p, phase, scratch, reds, depth)
            for r in reds:
                self._acc_final(r, depth)
            self._row_nodes(phase, p + 1, depth)
        self._far_chunk(chunk_depth, end=True)

    def _row_pass(self, p, phase, scratch, reds, depth):
        """Pass ``p``'s loop over the last reduced dim: where it is heavy, in interleaved
        streams (see ``_pass_streams``) up to a multiple of their width, then one by one."""
        L = self.layout
        j, n = L.names[L.red[-1]], L.sizes[L.red[-1]]
        streams = self._pass_streams(p, phase, reds)
        start = 0
        if streams > 1:
            self.streamed = True
            width = streams * LANES
            blocks, start = n // width, n // width * width
            self.emit(f"for {j}s in range({blocks}):", depth)
            first = len(self.lines)
            self._pass_body(p, phase, scratch, reds, 0)
            body = self.lines[first:]
            del self.lines[first:]
            self._interleave(body, j, f"{j}s", streams, depth + 1)
            if start == n:
                return
        inner = self._blocks(reds, j, str(start), self._row_end(reds), depth)
        self._pass_body(p, phase, scratch, reds, inner)
        self._fold_blocks(inner - 1, functools.partial(self._pass_body, p, phase, scratch, reds))

    def _row_end(self, reds) -> str:
        """Source of the length of the last reduced dim, the end of a row's loop adding to
        ``reds``: for a short row and a max or min among them, ``min(n, <operand>.shape[k])``,
        which is n when the kernel runs but not a constant to LLVM. LLVM unrolls a loop of a
        known short trip count before it would vectorise it, and leaves the unrolled chain of
        NaN-propagating maxima scalar (a float32 max over rows of 64: 4.0 ns an element, 0.2
        in a loop of at most 64 trips; a pass of fast-math calls alone ran slower so bounded)."""
        L = self.layout
        c = L.red[-1]
        n = L.sizes[c]
        if n > SHORT_ROW or not any(accumulation(r).extremum for r in reds):
            return str(n)
        for v in self.inputs + self.outputs:
            if v in self.strided or v in self.returned or c not in L.full_dims(v):
                continue
            return f"min({n}, {self.arg(v)}.shape[{L.full_dims(v).index(c)}])"
        return str(n)

    def _pass_streams(self, p, phase, reds) -> int:
        """How many element streams pass ``p`` of a row kernel interleaves (see ``_streams``):
        one that computes full values only (a row's consumers), whose elements are as
        independent as an elementwise kernel's. (A pass adding to accumulators ran slower so
        on rows of 64: a float32 RMS norm's, 139 us against 119.)"""
        L = self.layout
        if self.math != "fast" or L.total < STREAM_MIN_WORK or reds:
            return 1
        if not self._unsigned_index_ok(reds):
            return 1
        now = self._computed_in(p, phase)
        heavy = sum(S.is_fast_math(n, self.math) for n in now)
        streams = min(STREAMS, STREAM_BUDGET // (len(now) or 1))
        if heavy < STREAM_MIN_FAST_MATH or streams < 2 or L.sizes[L.red[-1]] < streams * LANES:
            return 1
        return streams

    acc_at = ""  # an accumulator's subscript: "[c]" where it is one of a block's columns

    def _columns_fit(self) -> bool:
        """Whether the reduced dims all lead the kept one, which is contiguous: a row loop over
        the kept elements would read the reduced dim at a stride (scalar, a cache line per
        element) where a loop over a block of columns reads unit-stride vectors."""
        L = self.layout
        return (
            len(L.kept) == 1
            and L.kept[0] == len(L.sizes) - 1
            and bool(L.red)
            and L.sizes[L.kept[0]] >= 16
            and not self.windows
            and not self.returned
            and not any(accumulation(r).index for r in self.reduces)
        )

    def _column_width(self, scratch) -> int:
        """The most columns of a block (``_columns``): COLUMN_BYTES of the kernel's widest
        float, or COLUMNS where a block keeps values of every row for a later pass (``scratch``
        not held in a result) or where blocks of COLUMNS leave numba's threads too few."""
        import numba

        itemsize = max(v.dtype.itemsize for v in self.inputs + self.outputs)
        wide = max(COLUMNS, COLUMN_BYTES // itemsize)
        (kept,) = self.layout.kept
        n = self.layout.sizes[kept]
        few = self._parallel() and -(-n // wide) < numba.config.NUMBA_NUM_THREADS
        kept_rows = any(v not in self.alias for v in scratch)
        return COLUMNS if kept_rows or few else wide

    def _column_blocks(self, n: int, width: int) -> int:
        """Blocks of at most ``width`` of a column kernel's ``n`` columns, spread evenly; where
        the kernel is parallel, a multiple of 4 of them while blocks keep ``width // 4``
        columns: numba hands each thread an equal run of blocks, and 331 columns in blocks of
        128 put 256 on one of two threads and 75 on the other."""
        least = -(-n // width)
        if not self._parallel():
            return least
        return max(least, min(-(-least // 4) * 4, n // (width // 4)))

    def _columns(self, serial: bool = False):
        """The passes of ``_rows`` over a block of COLUMNS kept elements at a time: each pass
        loops over the reduced dims outside and the block's columns inside (unit stride,
        vectorised), with one accumulator per column; row values (reductions' results and
        what is computed from them) live in per-block arrays between passes."""
        g, L = self.group, self.layout
        phase = self._phases()
        passes = self._passes(phase)
        scratch = self._scratch(phase)
        (kept,) = L.kept
        n, i = L.sizes[kept], L.names[kept]
        width = self._column_width(scratch)
        nblocks = self._column_blocks(n, width)
        b, c, count, start = f"{self.p}cb", f"{self.p}c", f"{self.p}cn", f"{self.p}c0"
        depth = 1
        rows = [v for v in g.role if g.role[v] == "row"]
        buffers = [
            (f"{self.p}r_{r.out.ident}", width, acc_dtype(r, r.out.dtype)) for r in self.reduces
        ]
        buffers += [(f"{self.p}cv_{v.ident}", width, v.dtype) for v in rows]
        buffers += [
            (f"{self.p}s_{v.ident}", L.red_total * width, v.dtype)
            for v in scratch
            if v not in self.alias
        ]
        parallel = not serial and self._parallel() and nblocks > 1
        chunk = parallel and self._chunk_loop_at(depth)
        per_thread = parallel and not chunk
        if not per_thread:  # the call's (or the chunk's) blocks one after another: once
            self._scratch_buffers(buffers, depth, chunk=chunk)
        header = len(self.lines)
        if parallel:
            self._parallel_loop(b, nblocks, depth, "columns")
        elif self._in_chunk("columns", depth):
            self.emit(f"for {b} in range({self.lo}, {self.hi}):", depth)
        else:
            self.emit(f"for {b} in range({nblocks}):", depth)
        depth += 1
        if per_thread:
            self._scratch_buffers(buffers, depth, header)
        lo, hi = (
            f"np.uint64({k}) * np.uint64({n}) // np.uint64({nblocks})" for k in (b, f"{b} + 1")
        )
        self.emit(f"{start} = {lo}", depth)
        self.emit(f"{count} = {hi} - {start}", depth)
        self._far_chunk(depth)
        self.acc_at = f"[{c}]"
        flat = f"np.uint64({L.flat_red()}) * np.uint64({width}) + {c}"

        def columns(depth, saved) -> int:
            """Open the loop over the block's columns; read back the row values ``saved``."""
            self.emit(f"for {c} in range({count}):", depth)
            self.emit(f"{i} = {start} + {c}", depth + 1)
            for v in saved:
                self.emit(f"{self.p}t_{v.ident} = {self.p}cv_{v.ident}[{c}]", depth + 1)
                self.local[v] = f"{self.p}t_{v.ident}"
            return depth + 1

        def save(depth, saved):
            for v in rows:
                if v in self.local and v not in saved:
                    self.emit(f"{self.p}cv_{v.ident}[{c}] = {self.local[v]}", depth)
                    saved.append(v)

        def row_nodes_at(p) -> bool:
            return any(
                g.role[m.out] == "row" and not is_reduction(m) and phase[m.out] == p
                for m in g.nodes
            )

        saved = []
        if row_nodes_at(0):
            inner = columns(depth, saved)
            self._row_nodes(phase, 0, inner)
            save(inner, saved)
        for p in range(passes):
            reds = [r for r in self.reduces if phase.get(r.inputs[0], 0) == p]
            if reds:
                inner = columns(depth, [])
                for r in reds:
                    self._acc_init(r, inner)
            inner = self._loops(L.red, depth, False)
            inner = columns(inner, saved)
            self._pass_body(p, phase, scratch, reds, inner, flat=flat)
            if reds or row_nodes_at(p + 1):
                inner = columns(depth, saved)
                for r in reds:
                    self._acc_final(r, inner)
                self._row_nodes(phase, p + 1, inner)
                save(inner, saved)
        self._far_chunk(depth, end=True)
        self.acc_at = ""

    def _blocks(self, reds, j, lo, hi, depth) -> int:
        """Open the innermost reduced loop, ``j`` from ``lo`` to ``hi``. float32 sums add up in
        float32 within blocks of BLOCK elements (vector-wide, as fast as the data arrives) and
        the blocks' sums in float64: about as accurate as NumPy's pairwise sum. A block whose
        float32 sum leaves float32's range is added up again in float64 (``_fold_blocks``); the
        rare pass through libm (``_near_first``) adds up in float64 alone, as small to compile."""
        self.blocked = [] if self.rare else [r for r in reds if _block_dtype(r) is not None]
        if not self.blocked:
            return self._range(j, lo, hi, depth)
        jb = f"{j}b"
        self.emit(f"for {jb} in range({lo}, {hi}, {BLOCK}):", depth)
        for r in self.blocked:
            init = _init(r, _block_dtype(r))
            self.emit(f"{self.p}r_{r.out.ident}_b = {init}", depth + 1)
        self.block_range = (j, jb, f"min({jb} + {BLOCK}, {hi})")
        return self._range(*self.block_range, depth + 1)

    def _unsigned_index_ok(self, reds) -> bool:
        """Whether a row pass's interleaved streams may index in uint64 (``_interleave``'s
        indices are): the reduced dim's index only indexes arrays (one reduced dim, no windows
        read at offsets from it, no op computing from positions, no reduction carrying a
        position: numba would make int64 and uint64 mixes float64)."""
        if len(self.layout.red) != 1 or self.windows:
            return False
        if any(accumulation(r).index for r in reds):
            return False
        return all(OPS[n.op].kind in ("elementwise", "reduce") for n in self.group.nodes)

    def _fold_blocks(self, depth, again):
        """Add the blocks' sums of ``_blocks`` to the accumulators. A block sum that is not
        finite may be one whose partial sums overflowed float32 (two values near its maximum
        give inf, which meets -inf: nan where the sum is inf): that block is added up again in
        float64, ``again(depth, redone=...)`` emitting the values the reductions redone read."""
        blocked, self.blocked = self.blocked, []
        if not blocked:
            return
        acc = {r: acc_dtype(r, r.out.dtype) for r in blocked}
        sums = {r: f"{self.p}r_{r.out.ident}" for r in blocked}
        finite = " and ".join(f"np.isfinite({sums[r]}_b)" for r in blocked)
        self.emit(f"if {finite}:", depth)
        for r in blocked:
            a = sums[r]
            self.emit(f"{a} = {a} + {S.cast(f'{a}_b', _block_dtype(r), acc[r])}", depth + 1)
        self.emit("else:", depth)
        for r in blocked:
            self.emit(f"{sums[r]}_w = {_init(r, acc[r])}", depth + 1)
        again(self._range(*self.block_range, depth + 1), redone=blocked)
        for r in blocked:
            self.emit(f"{sums[r]} = {sums[r]} + {sums[r]}_w", depth + 1)

    def _whole(self, serial: bool = False):
        """A reduction over every dimension: parallel chunks, then an ordered combine of the
        chunks' partial results (one chunk where ``serial``)."""
        L = self.layout
        phase = self._phases()
        passes = self._passes(phase)
        total = L.red_total
        nch = 1 if serial else max(1, min(CHUNKS, total // (self.min_parallel // 4)))
        chunk = -(-total // nch)
        nch = -(-total // chunk)
        scratch = self._scratch(phase)
        for v in scratch:
            if v not in self.alias:
                self.emit(f"{self.p}s_{v.ident} = np.empty({total}, {S.ctor(v.dtype)})", 1)
        self._whole_row_nodes(phase, 0)
        ch, f = f"{self.p}ch", f"{self.p}f"
        for p in range(passes):
            reds = [r for r in self.reduces if phase.get(r.inputs[0], 0) == p]
            for r in reds:
                a = f"{self.p}r_{r.out.ident}"
                pdt = r.inputs[0].dtype if accumulation(r).index else acc_dtype(r, r.out.dtype)
                self.emit(f"{a}_p = np.empty({nch}, {S.ctor(pdt)})", 1)
                if accumulation(r).index:
                    self.emit(f"{a}_q = np.empty({nch}, np.int64)", 1)
            if nch > 1:
                self._prange(ch, nch, 1)
            else:
                self.emit(f"for {ch} in range({nch}):", 1)
            lo, hi = f"{ch} * {chunk}", f"min({total}, ({ch} + 1) * {chunk})"
            self._far_chunk(2)
            for r in reds:
                self._acc_init(r, 2)

            def element(depth, redone=(), p=p, reds=reds):
                for stmt in L.unravel_red(f):
                    self.emit(stmt, depth)
                self._pass_body(p, phase, scratch, reds, depth, flat=f, redone=redone)

            inner = self._blocks(reds, f, lo, hi, 2)
            element(inner)
            self._fold_blocks(inner - 1, element)
            self._far_chunk(2, end=True)
            for r in reds:
                a = f"{self.p}r_{r.out.ident}"
                self.emit(f"{a}_p[{ch}] = {a}", 2)
                if accumulation(r).index:
                    self.emit(f"{a}_q[{ch}] = {a}_i", 2)
            for r in reds:
                self._acc_init(r, 1)
                a = f"{self.p}r_{r.out.ident}"
                self.emit(f"for {ch} in range({nch}):", 1)
                if accumulation(r).index:
                    self._arg_update(r, f"{a}_p[{ch}]", f"{a}_q[{ch}]", 2)
                else:
                    self._combine(r, f"{a}_p[{ch}]", 2, v_dtype=acc_dtype(r, r.out.dtype))
                self._acc_final(r, 1)
            self._whole_row_nodes(phase, p + 1)

    def _whole_row_nodes(self, phase, p):
        """``_row_nodes`` of a whole-array reduction: outside its chunks, counted directly."""
        self.far_into = self._far
        self._row_nodes(phase, p, 1)
        self.far_into = self._farc

    def _scratch(self, phase) -> list:
        """Full values computed in one pass and read in a later one, not stored as outputs.

        A scratch value is kept in the row of an output computed in a later pass when one fits
        (softmax keeps ``exp(x - max)`` in the output row), else in a per-chunk buffer.
        """
        g, need, last = self.group, [], {}
        self.recompute = self._recomputed()
        for n in g.nodes:
            for x in n.var_inputs:
                if x in self.recompute:
                    continue
                if g.role.get(x) == "full" and phase[x] < self._use_phase(n, phase):
                    last[x] = max(last.get(x, 0), self._use_phase(n, phase))
                    if x not in self.outputs and x not in need:
                        need.append(x)
        self.alias, taken = {}, set()
        for x in need:
            for o in self.outputs:
                if (
                    g.role.get(o) == "full"
                    and o not in taken
                    and o not in self.returned  # (a returned scalar has no row to hold it)
                    and o.shape == g.shape
                    and o.dtype == x.dtype
                    and phase[o] >= last[x]
                    and phase[o] > phase[x]
                ):
                    self.alias[x] = o
                    taken.add(o)
                    break
        return need

    def _recomputed(self) -> dict:
        """``{value: its node}``: in a column kernel, the full values that a pass reading them
        from an earlier one computes again from the kernel's inputs and row values, rather
        than loading them from where that pass stored them (a scratch block, or the result's
        row: a store and a load of each element, past the caches for a large result). Those
        of at most RECOMPUTE_OPS plain arithmetic ops, no function calls, that are not
        results (a float64 column norm of ``x ** 3``: 1.70 ms against 1.93 a call)."""
        g = self.group
        if not self._columns_fit():
            return {}
        made = {o: n for n in g.nodes for o in n.outputs}
        ops: dict = {}  # value -> the nodes computing it again
        for n in g.nodes:
            if len(n.outputs) != 1 or g.role.get(n.out) != "full" or n.out in self.outputs:
                continue
            if is_reduction(n) or OPS[n.op].keeps_order or S.element_cost(n, self.math):
                continue
            if OPS[n.op].kind != "elementwise":
                continue
            chain = {n}
            for x in n.var_inputs:
                if x in made and g.role.get(x) != "row":
                    if x not in ops:
                        break
                    chain |= ops[x]
            else:
                if len(chain) <= RECOMPUTE_OPS:
                    ops[n.out] = chain
        return {v: made[v] for v in ops}

    def _recompute(self, x, depth):
        """Emit the statements computing ``x`` again (``_recomputed``), its inputs first."""
        for v in self.recompute[x].var_inputs:
            if v in self.recompute and v not in self.local:
                self._recompute(v, depth)
        self.compute(self.recompute[x], depth)

    def _use_phase(self, n, phase):
        if is_reduction(n):
            return phase.get(n.inputs[0], 0)
        return phase[n.out]

    def _scratch_at(self, x, flat) -> str:
        o = self.alias.get(x)
        return self.at(o) if o is not None else f"{self.p}s_{x.ident}[{flat}]"

    def _pass_body(self, p, phase, scratch, reds, depth, flat=None, redone=()):
        """Pass ``p``'s statements for one element; with ``redone`` (``_fold_blocks``), only
        what those reductions read, added to their float64 sums."""
        g, L = self.group, self.layout
        flat = flat or L.flat_red()
        self.local = {k: v for k, v in self.local.items() if g.role.get(k) == "row"}
        now = self._computed_in(p, phase) + reds
        for n in now:  # full values of earlier passes are read back first
            for x in n.var_inputs:
                if g.role.get(x) == "full" and phase[x] < p and x not in self.local:
                    if x in self.recompute:
                        self._recompute(x, depth)
                        continue
                    src = self._scratch_at(x, flat) if x in scratch else self.read(x)
                    self.emit(f"{self.p}b_{x.ident} = {src}", depth)
                    self.local[x] = f"{self.p}b_{x.ident}"
        for n in now[: len(now) - len(reds)]:
            self.compute(n, depth)
            if redone:
                continue
            self.store(n.out, depth)
            if n.out in scratch:
                self.emit(f"{self._scratch_at(n.out, flat)} = {self.local[n.out]}", depth)
        if redone:
            for r in redone:
                v = self.local.get(r.inputs[0]) or self.read(r.inputs[0])
                self._combine(r, v, depth, into=f"{self.p}r_{r.out.ident}_w")
            self.far_terms = []  # counted by the pass itself
            return
        for r in reds:
            x = r.inputs[0]
            v = self.local.get(x) or self.read(x)
            if accumulation(r).index:
                self._arg_update(r, v, flat, depth)
            else:
                self._combine(r, v, depth, blocked=r in self.blocked)
        self._count_far(depth)

    def _computed_in(self, p, phase) -> list:
        """The nodes of full values pass ``p`` computes."""
        g = self.group
        return [n for n in g.nodes if g.role[n.out] == "full" and phase[n.out] == p]

    def _row_nodes(self, phase, p, depth):
        g = self.group
        for n in g.nodes:
            if g.role[n.out] == "row" and not is_reduction(n) and phase[n.out] == p:
                self.compute(n, depth)
                self.store(n.out, depth)
        self._count_far(depth)

    def _acc_init(self, r, depth):
        a = f"{self.p}r_{r.out.ident}{self.acc_at}"
        x = r.inputs[0]
        if accumulation(r).index:
            self.emit(f"{a} = {_init(r, x.dtype)}", depth)
            self.emit(f"{a}_i = 0", depth)
        else:
            self.emit(f"{a} = {_init(r, acc_dtype(r, r.out.dtype))}", depth)

    def _combine(self, r, v, depth, blocked=False, v_dtype=None, into=None):
        """``acc = acc (op) v``, ``v`` of the reduction input's dtype (or ``v_dtype``);
        ``into``: an accumulator of the reduction's own dtype other than its sum's."""
        a = into or f"{self.p}r_{r.out.ident}" + ("_b" if blocked else self.acc_at)
        acc = _block_dtype(r) if blocked else acc_dtype(r, r.out.dtype)
        v = S.cast(v, v_dtype or r.inputs[0].dtype, acc)
        vectorise = self.VECTORISE and into is None  # a block added up again: the rare path
        step = S.accumulate(accumulation(r), a, v, acc, vectorise=vectorise)
        self.emit(f"{a} = {S.typed(step, acc)}", depth)

    def _arg_update(self, r, v, idx, depth):
        a = f"{self.p}r_{r.out.ident}"
        cmp = ">" if accumulation(r).combine == "max" else "<"
        nan = f" or ({v} != {v} and {a} == {a})" if r.inputs[0].dtype.kind == "f" else ""
        self.emit(f"if {v} {cmp} {a}{nan}:", depth)
        self.emit(f"{a} = {v}", depth + 1)
        self.emit(f"{a}_i = {idx}", depth + 1)

    def _acc_final(self, r, depth):
        a = f"{self.p}r_{r.out.ident}{self.acc_at}"
        if accumulation(r).combine == "add" and self.layout.red_total == 0:  # nothing: +0.0
            self.emit(f"{a} = {S.literal(0, acc_dtype(r, r.out.dtype))}", depth)
        src = (
            f"{a}_i" if accumulation(r).index else S.cast(a, acc_dtype(r, r.out.dtype), r.out.dtype)
        )
        self.emit(f"{self.p}t_{r.out.ident} = {S.typed(src, r.out.dtype)}", depth)
        self.local[r.out] = f"{self.p}t_{r.out.ident}"
        self.store(r.out, depth)


def _even_chunk(ch: str, n: int, nch: int) -> tuple[str, str]:
    """Bounds ``[lo, hi)`` of chunk ``ch`` of ``nch`` over ``n`` trips, each ``n // nch`` or one
    more, the longer ones spread out. numba hands each thread an equal run of a ``prange``'s
    trips: with chunks of ``ceil(n / nch)`` the last ones were empty, and 86 rows in 64 chunks
    on two threads ran 64 rows on one and 22 on the other."""
    return f"{ch} * {n} // {nch}", f"({ch} + 1) * {n} // {nch}"


def _block_dtype(r):
    """The dtype a reduction accumulates in within a block (``_blocks``), or None."""
    f32 = np.dtype(np.float32)
    if accumulation(r).combine == "add" and r.inputs[0].dtype == f32 and r.out.dtype == f32:
        return f32
    return None


def kernel_source(
    step: Step,
    math: str = "fast",
    min_parallel=PARALLEL_MIN_WORK,
    strided=frozenset(),
    windows: dict | None = None,
    returns: frozenset = frozenset(),
    chunked: bool = False,
    far_apart: bool = False,
    thread_scratch: bool = False,
) -> KernelSource:
    """The kernel of ``step``; ``strided`` inputs are views the plan makes (read in place),
    ``windows`` the views read (or written) through the arrays they slice, ``returns`` the
    0-d results it may give back as scalars (``KernelSource.returned``); ``chunked``: its
    parallel loop as a chunk of it (``KernelSource.chunk``), where its kind allows;
    ``far_apart``: its pass through libm for huge trig arguments as a function of its own
    (``KernelSource.far_lines``), which its caller runs where the kernel's result says so;
    ``thread_scratch``: a chunk kernel's scratch from its caller (``KernelSource.workspace``)."""
    ks = KernelSource(
        step, math, min_parallel, strided, windows, returns, chunked, far_apart, thread_scratch
    )
    ks.text = ks.source()
    return ks
