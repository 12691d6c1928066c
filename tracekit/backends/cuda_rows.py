"""Row kernels of the CUDA emitter: reductions fused with their producers and consumers
(softmax, layernorm), in the three shapes ``CudaKernelSource`` chooses from (``block``,
``thread``, ``split``), and the block-wide reductions they use (a shared-memory tree, or warp
shuffles for the last levels).

Shared memory: each reduction has its own shared arrays; a block reduction writes every
thread's slot, syncs, halves (one sync per level, the writes of a level never touching a slot
another thread reads in that level), reads the result, and syncs again before any slot is
written for the next row. With warp shuffles: lane 0 of each warp writes its warp's slot, sync,
warp 0 reduces them and writes slot 0, sync, every thread reads it, sync. Every barrier is
outside any branch a thread may skip (the loops over rows and elements have the same trip
count in all threads of a block). ``tests/backends/test_cuda.py`` checks each kernel for races
on the simulator (``_RaceCheck``)."""

from __future__ import annotations

import numpy as np

from . import scalar as S
from .cuda_device import Launch, nb_type, typed
from .emit_cpu import _init, acc_dtype
from .planner import accumulation, is_reduction


class RowKernels:
    """The row shapes of :class:`tracekit.backends.emit_cuda.CudaKernelSource`."""

    # -- row groups: shared pieces
    def _row_info(self):
        g = self.group
        phase = self._phases()
        full = [n for n in g.nodes if g.role[n.out] == "full"]
        passes = 1 + max(
            [phase[n.out] for n in full] + [phase.get(r.inputs[0], 0) for r in self.reduces]
        )
        return phase, passes

    def _reds(self, phase, p):
        return [r for r in self.reduces if phase.get(r.inputs[0], 0) == p]

    def _needed(self, phase, p, reds) -> list:
        """Full nodes to compute in pass ``p``: what its reductions read, its stored outputs,
        and (recomputed) everything of earlier passes those depend on."""
        g = self.group
        producer = {n.out: n for n in g.nodes if g.role[n.out] == "full"}
        want = [r.inputs[0] for r in reds if r.inputs[0] in producer]
        want += [v for v in producer if phase[v] == p and v in self.outputs]
        need, stack = set(), list(want)
        while stack:
            v = stack.pop()
            if v in need or v not in producer:
                continue
            need.add(v)
            stack.extend(x for x in producer[v].var_inputs if x in producer)
        return [n for n in g.nodes if n.out in need]

    def _pass_elements(self, phase, p, reds, depth, flat: str):
        """Body for one element of pass ``p``: compute, store outputs of phase p, accumulate."""
        g = self.group
        self.local = {k: v for k, v in self.local.items() if g.role.get(k) == "row"}
        for n in self._needed(phase, p, reds):
            self.compute(n, depth)
            if phase[n.out] == p:
                self.store(n.out, depth)
        for r in reds:
            x = r.inputs[0]
            v = self.read(x)
            if accumulation(r).index:
                self._arg_update(r, v, flat, depth)
            else:
                self._combine(r, v, depth)

    def _row_nodes_at(self, phase, p, depth, guard=None, rv=None):
        g = self.group
        for n in g.nodes:
            if g.role[n.out] == "row" and not is_reduction(n) and phase[n.out] == p:
                self.compute(n, depth)
                self.store(n.out, depth, guard)
                if rv is not None:
                    rv(n.out, depth)

    def _acc_names(self, r):
        a = f"{self.p}r_{r.out.ident}"
        return a, f"{a}_i"

    def _tree_types(self, r):
        if accumulation(r).index:
            return [np.dtype(r.inputs[0].dtype), np.dtype(np.int64)]
        return [acc_dtype(r, r.out.dtype)]

    def _use_shfl(self, reds, bs) -> bool:
        """Warp shuffles for the last levels of these reductions' tree (32/64-bit values)."""
        shufflable = {np.dtype(t) for t in ("int32", "int64", "float32", "float64")}
        return (
            self.profile.shuffle
            and bs >= 64
            and bs % 32 == 0
            and all(set(self._tree_types(r)) <= shufflable for r in reds)
        )

    def _shared_bytes(self, groups, bs) -> int:
        size = {True: 32, False: bs}
        return sum(
            t.itemsize * size[self._use_shfl(reds, bs)]
            for reds in groups
            for r in reds
            for t in self._tree_types(r)
        )

    def _fit(self, groups, bs) -> int:
        """The block size, halved while the reduction trees exceed static shared memory."""
        limit = min(self.profile.shared_bytes, 48 * 1024)
        while bs > 32 and self._shared_bytes(groups, bs) > limit:
            bs //= 2
        return bs

    def _declare_shared(self, groups, bs, depth):
        """Shared arrays of each group of reductions reduced together: one slot per thread for
        a shared-memory tree, one per warp when warp shuffles do the rest."""
        for reds in groups:
            size = 32 if self._use_shfl(reds, bs) else bs
            for r in reds:
                a, ai = self._acc_names(r)
                types = self._tree_types(r)
                self.emit(f"{a}_sh = cuda.shared.array({size}, {nb_type(types[0])})", depth)
                if len(types) > 1:
                    self.emit(f"{ai}_sh = cuda.shared.array({size}, nbt.int64)", depth)

    def _merge(self, r, a, ai, b, bi, depth):
        """Emit ``(a, ai) <- combine((a, ai), (b, bi))`` for the tree (order-independent)."""
        if accumulation(r).index:
            cmp = ">" if accumulation(r).combine == "max" else "<"
            nan = ""
            if r.inputs[0].dtype.kind == "f":
                nan = f" or ({b} != {b} and ({a} == {a} or {bi} < {ai}))"
            self.emit(
                f"if {b} {cmp} {a} or ({b} == {a} and {bi} < {ai}){nan}:",
                depth,
            )
            self.emit(f"{a} = {b}", depth + 1)
            self.emit(f"{ai} = {bi}", depth + 1)
            return
        acc = acc_dtype(r, r.out.dtype)
        self.emit(f"{a} = {typed(S.accumulate(accumulation(r), a, b, acc), acc)}", depth)

    def _block_reduce(self, reds, bs, depth):
        """Every thread's accumulators -> the block's, visible to all threads."""
        p, tid = self.p, f"{self.p}tid"
        if self._use_shfl(reds, bs):
            self._block_reduce_shfl(reds, bs, depth)
            return
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a}_sh[{tid}] = {a}", depth)
            if accumulation(r).index:
                self.emit(f"{ai}_sh[{tid}] = {ai}", depth)
        self.emit("cuda.syncthreads()", depth)
        self.emit(f"{p}half = {bs // 2}", depth)
        self.emit(f"while {p}half > 0:", depth)
        self.emit(f"if {tid} < {p}half:", depth + 1)
        for r in reds:
            a, ai = self._acc_names(r)
            arg = accumulation(r).index
            self.emit(f"{a}_x = {a}_sh[{tid}]", depth + 2)
            if arg:
                self.emit(f"{ai}_x = {ai}_sh[{tid}]", depth + 2)
            self._merge(
                r,
                f"{a}_x",
                f"{ai}_x",
                f"{a}_sh[{tid} + {p}half]",
                f"{ai}_sh[{tid} + {p}half]",
                depth + 2,
            )
            self.emit(f"{a}_sh[{tid}] = {a}_x", depth + 2)
            if arg:
                self.emit(f"{ai}_sh[{tid}] = {ai}_x", depth + 2)
        self.emit("cuda.syncthreads()", depth + 1)
        self.emit(f"{p}half //= 2", depth + 1)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a} = {a}_sh[0]", depth)
            if accumulation(r).index:
                self.emit(f"{ai} = {ai}_sh[0]", depth)
        self.emit("cuda.syncthreads()", depth)

    def _block_reduce_shfl(self, reds, bs, depth):
        p, tid = self.p, f"{self.p}tid"
        nw = bs // 32

        def warp_level(d, width):
            off = width // 2
            while off >= 1:
                for r in reds:
                    a, ai = self._acc_names(r)
                    arg = accumulation(r).index
                    self.emit(f"{a}_y = cuda.shfl_down_sync(0xFFFFFFFF, {a}, {off})", d)
                    if arg:
                        self.emit(f"{ai}_y = cuda.shfl_down_sync(0xFFFFFFFF, {ai}, {off})", d)
                    self._merge(r, a, ai, f"{a}_y", f"{ai}_y", d)
                off //= 2

        self.emit(f"{p}lane = {tid} % 32", depth)
        self.emit(f"{p}warp = {tid} // 32", depth)
        warp_level(depth, 32)
        self.emit(f"if {p}lane == 0:", depth)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a}_sh[{p}warp] = {a}", depth + 1)
            if accumulation(r).index:
                self.emit(f"{ai}_sh[{p}warp] = {ai}", depth + 1)
        self.emit("cuda.syncthreads()", depth)
        self.emit(f"if {p}warp == 0:", depth)
        for r in reds:
            a, ai = self._acc_names(r)
            x = r.inputs[0]
            init = (
                _init(r, x.dtype) if accumulation(r).index else _init(r, acc_dtype(r, r.out.dtype))
            )
            self.emit(f"{a} = {a}_sh[{p}lane] if {p}lane < {nw} else {init}", depth + 1)
            if accumulation(r).index:
                self.emit(f"{ai} = {ai}_sh[{p}lane] if {p}lane < {nw} else 0", depth + 1)
        warp_level(depth + 1, 32)
        self.emit(f"if {p}lane == 0:", depth + 1)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a}_sh[0] = {a}", depth + 2)
            if accumulation(r).index:
                self.emit(f"{ai}_sh[0] = {ai}", depth + 2)
        self.emit("cuda.syncthreads()", depth)
        for r in reds:
            a, ai = self._acc_names(r)
            self.emit(f"{a} = {a}_sh[0]", depth)
            if accumulation(r).index:
                self.emit(f"{ai} = {ai}_sh[0]", depth)
        self.emit("cuda.syncthreads()", depth)

    def _finish_reds(self, reds, depth, guard=None, rv=None):
        for r in reds:
            a, ai = self._acc_names(r)
            src = ai if accumulation(r).index else S.cast(a, acc_dtype(r, r.out.dtype), r.out.dtype)
            name = f"{self.p}t_{r.out.ident}"
            self.emit(f"{name} = {typed(src, r.out.dtype)}", depth)
            self.local[r.out] = name
            self.store(r.out, depth, guard)
            if rv is not None:
                rv(r.out, depth)

    # -- block mode
    def _rows_block(self):
        L, P, p = self.layout, self.profile, self.p
        phase, passes = self._row_info()
        rows, n = self._rows_count(), L.red_total
        groups = [self._reds(phase, q) for q in range(passes)]
        bs = self._fit(groups, P.row_threads(n))
        tid = f"{p}tid"
        self.begin(self.group.name, f"one block of {bs} threads per row, {passes} pass(es)")
        self._hoist(1)
        self.emit(f"{tid} = cuda.threadIdx.x", 1)
        self._declare_shared(groups, bs, 1)
        self.emit(f"{p}row = cuda.blockIdx.x", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        d = 2
        self._unravel(f"{p}row", L.kept, d)
        self.local = {}
        guard = f"{tid} == 0"
        self._row_nodes_at(phase, 0, d, guard)
        for q in range(passes):
            reds = self._reds(phase, q)
            for r in reds:
                self._acc_init(r, d)
            j = f"{p}j"
            self.emit(f"{j} = {tid}", d)
            self.emit(f"while {j} < {n}:", d)
            self._unravel(j, L.red, d + 1)
            self._pass_elements(phase, q, reds, d + 1, L.flat_red())
            self.emit(f"{j} += {bs}", d + 1)
            if reds:
                self._block_reduce(reds, bs, d)
                self._finish_reds(reds, d, guard)
            self._row_nodes_at(phase, q + 1, d, guard)
        self.emit(f"{p}row += cuda.gridDim.x", d)
        self.end(self.params())
        self.launches.append(Launch(self.group.name, (P.row_blocks(rows),), (bs,), self.all_args()))

    # -- thread mode
    def _rows_thread(self):
        L, P, p = self.layout, self.profile, self.p
        phase, passes = self._row_info()
        rows, n = self._rows_count(), L.red_total
        self.begin(self.group.name, f"one thread per row, {passes} sequential pass(es)")
        self._hoist(1)
        self.emit(f"{p}row = cuda.grid(1)", 1)
        self.emit(f"{p}step = cuda.gridsize(1)", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        d = 2
        self._unravel(f"{p}row", L.kept, d)
        self.local = {}
        self._row_nodes_at(phase, 0, d)
        for q in range(passes):
            reds = self._reds(phase, q)
            for r in reds:
                self._acc_init(r, d)
            j = f"{p}j"
            self.emit(f"for {j} in range({n}):", d)
            self._unravel(j, L.red, d + 1)
            self._pass_elements(phase, q, reds, d + 1, j)
            self._finish_reds(reds, d)
            self._row_nodes_at(phase, q + 1, d)
        self.emit(f"{p}row += {p}step", d)
        self.end(self.params())
        self.launches.append(
            Launch(self.group.name, (P.ew_blocks(rows),), (P.ew_threads,), self.all_args())
        )

    # -- split mode
    def _rows_split(self):
        g, L, P, p = self.group, self.layout, self.profile, self.p
        phase, passes = self._row_info()
        rows, n = self._rows_count(), L.red_total
        bs = min(self._fit([self._reds(phase, q)], P.row_threads(n)) for q in range(passes))
        chunks = max(1, min(-(-n // bs), max(1, P.target_blocks // max(rows, 1))))
        ch = -(-n // chunks)
        chunks = -(-n // ch)
        grid_rows = min(rows, P.max_grid_yz)
        tid = f"{p}tid"
        row_vars = [n_.out for n_ in g.nodes if g.role[n_.out] == "row"]
        rv_name = {v: self.add_scratch(f"rv_{v.ident}", (rows,), v.dtype) for v in row_vars}
        part = {}
        for r in self.reduces:
            types = self._tree_types(r)
            part[r] = [self.add_scratch(f"pt_{r.out.ident}", (rows * chunks,), types[0])]
            if len(types) > 1:
                part[r].append(self.add_scratch(f"pi_{r.out.ident}", (rows * chunks,), types[1]))
        computed_before = {q: [] for q in range(passes + 1)}  # row vars available at pass q
        for v in row_vars:
            computed_before[phase[v]].append(v)

        def load_rows(upto, d):
            self.local = {}
            for q in range(1, upto + 1):  # phase-0 row values are recomputed from scalars
                for v in computed_before[q]:
                    name = f"{p}t_{v.ident}"
                    self.emit(f"{name} = {rv_name[v]}[{p}row]", d)
                    self.local[v] = name
            self._row_nodes_at(phase, 0, d)

        for q in range(passes):
            reds = self._reds(phase, q)
            # pass kernel: (chunk, row) blocks
            self.begin(f"{g.name}_p{q}", f"pass {q}: blocks over (chunk, row), {chunks} chunk(s)")
            self._hoist(1)
            self.emit(f"{tid} = cuda.threadIdx.x", 1)
            self._declare_shared([reds], bs, 1)
            self.emit(f"{p}chunk = cuda.blockIdx.x", 1)
            self.emit(f"{p}row = cuda.blockIdx.y", 1)
            self.emit(f"while {p}row < {rows}:", 1)
            d = 2
            self._unravel(f"{p}row", L.kept, d)
            load_rows(q, d)
            for r in reds:
                self._acc_init(r, d)
            j = f"{p}j"
            self.emit(f"{j} = {p}chunk * {ch} + {tid}", d)
            self.emit(f"{p}end = min({n}, ({p}chunk + 1) * {ch})", d)
            self.emit(f"while {j} < {p}end:", d)
            self._unravel(j, L.red, d + 1)
            self._pass_elements(phase, q, reds, d + 1, j)
            self.emit(f"{j} += {bs}", d + 1)
            if reds:
                self._block_reduce(reds, bs, d)
                self.emit(f"if {tid} == 0:", d)
                for r in reds:
                    a, ai = self._acc_names(r)
                    self.emit(f"{part[r][0]}[{p}row * {chunks} + {p}chunk] = {a}", d + 1)
                    if len(part[r]) > 1:
                        self.emit(f"{part[r][1]}[{p}row * {chunks} + {p}chunk] = {ai}", d + 1)
            self.emit(f"{p}row += cuda.gridDim.y", d)
            self.end(self.params())
            self.launches.append(
                Launch(f"{g.name}_p{q}", (chunks, grid_rows), (bs,), self.all_args())
            )
            if not reds:
                continue
            # combine kernel: one block per row
            bs2 = self._fit([reds], P.row_threads(chunks))
            self.begin(f"{g.name}_r{q}", f"pass {q}: combine {chunks} partial(s) per row")
            self._hoist(1)
            self.emit(f"{tid} = cuda.threadIdx.x", 1)
            self._declare_shared([reds], bs2, 1)
            self.emit(f"{p}row = cuda.blockIdx.x", 1)
            self.emit(f"while {p}row < {rows}:", 1)
            self._unravel(f"{p}row", L.kept, d)
            load_rows(q, d)
            for r in reds:
                self._acc_init(r, d)
            c = f"{p}c"
            self.emit(f"{c} = {tid}", d)
            self.emit(f"while {c} < {chunks}:", d)
            for r in reds:
                a, ai = self._acc_names(r)
                b = f"{part[r][0]}[{p}row * {chunks} + {c}]"
                bi = f"{part[r][1]}[{p}row * {chunks} + {c}]" if len(part[r]) > 1 else ""
                self._merge(r, a, ai, b, bi, d + 1)
            self.emit(f"{c} += {bs2}", d + 1)
            self._block_reduce(reds, bs2, d)
            guard = f"{tid} == 0"

            def rv(v, dd, guard=guard):
                self.emit(f"if {guard}:", dd)
                self.emit(f"{rv_name[v]}[{p}row] = {self.local[v]}", dd + 1)

            self._finish_reds(reds, d, guard, rv)
            if q == 0:
                for v in computed_before[0]:
                    if v in self.outputs and v in self.local:
                        self.store(v, d, guard)
            self._row_nodes_at(phase, q + 1, d, guard, rv)
            self.emit(f"{p}row += cuda.gridDim.x", d)
            self.end(self.params())
            self.launches.append(
                Launch(f"{g.name}_r{q}", (P.row_blocks(rows),), (bs2,), self.all_args())
            )
