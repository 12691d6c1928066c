"""Scan kernels (cumsum, cumprod, ...) of the CUDA emitter: one block per row, a Hillis-Steele
scan of each tile in shared memory plus a carry; or one thread per row, in NumPy's order
(``CudaKernelSource`` chooses).

Shared memory in the block scan: every thread writes its slot, sync; each level reads, syncs,
writes, syncs (a thread's write would otherwise reach a slot another is still to read); the
tile's last slot gives the carry, and a sync protects it from the next tile's writes."""

from __future__ import annotations

from . import scalar as S
from .cuda_device import Launch, nb_type, typed
from .emit_cpu import _init
from .planner import accumulation


class ScanKernels:
    """The scan shapes of :class:`tracekit.backends.emit_cuda.CudaKernelSource`."""

    def _scan(self):
        (node,) = self.group.nodes
        L, P, p = self.layout, self.profile, self.p
        x, out = node.inputs[0], node.out
        rows = self._rows_count()
        n = L.red_total
        bs = P.row_threads(n)
        init = _init(node, out.dtype)

        def comb(a, b):
            return typed(S.accumulate(accumulation(node), a, b, out.dtype), out.dtype)

        self.begin(self.group.name, f"one block of {bs} per row, tiled Hillis-Steele scan")
        self.emit(f"{p}sh = cuda.shared.array({bs}, {nb_type(out.dtype)})", 1)
        self.emit(f"{p}tid = cuda.threadIdx.x", 1)
        self.emit(f"{p}row = cuda.blockIdx.x", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        self._unravel(f"{p}row", L.kept, 2)
        self.emit(f"{p}carry = {init}", 2)
        self.emit(f"{p}base = 0", 2)
        self.emit(f"while {p}base < {n}:", 2)
        self.emit(f"{p}j = {p}base + {p}tid", 3)
        self.emit(f"{p}v = {init}", 3)
        self.emit(f"if {p}j < {n}:", 3)
        self._unravel(f"{p}j", L.red, 4)
        self.emit(f"{p}v = {typed(S.cast(self.read(x), x.dtype, out.dtype), out.dtype)}", 4)
        self.emit(f"{p}sh[{p}tid] = {p}v", 3)
        self.emit("cuda.syncthreads()", 3)
        self.emit(f"{p}off = 1", 3)
        # the first element is never combined with an identity (NumPy copies it: -0.0 stays
        # -0.0, and a complex inf is not multiplied by 1+0j)
        self.emit(f"while {p}off < {bs}:", 3)
        self.emit(f"{p}w = {p}sh[{p}tid]", 4)
        self.emit(f"if {p}tid >= {p}off:", 4)
        self.emit(f"{p}w = {comb(f'{p}sh[{p}tid - {p}off]', f'{p}w')}", 5)
        self.emit("cuda.syncthreads()", 4)
        self.emit(f"{p}sh[{p}tid] = {p}w", 4)
        self.emit("cuda.syncthreads()", 4)
        self.emit(f"{p}off *= 2", 4)
        first = f"{p}base == 0"
        self.emit(f"if {p}j < {n}:", 3)
        self._unravel(f"{p}j", L.red, 4)
        self.local[out] = f"({p}sh[{p}tid] if {first} else {comb(f'{p}carry', f'{p}sh[{p}tid]')})"
        self.store(out, 4)
        last = f"{p}sh[{bs - 1}]"
        self.emit(f"{p}carry = {last} if {first} else {comb(f'{p}carry', last)}", 3)
        self.emit("cuda.syncthreads()", 3)
        self.emit(f"{p}base += {bs}", 3)
        self.emit(f"{p}row += cuda.gridDim.x", 2)
        self.end(self.params())
        self.launches.append(Launch(self.group.name, (P.row_blocks(rows),), (bs,), self.all_args()))

    def _scan_thread(self):
        (node,) = self.group.nodes
        L, P, p = self.layout, self.profile, self.p
        x, out = node.inputs[0], node.out
        rows = self._rows_count()
        self.begin(self.group.name, "one thread per row, in order")
        self.emit(f"{p}row = cuda.grid(1)", 1)
        self.emit(f"{p}step = cuda.gridsize(1)", 1)
        self.emit(f"while {p}row < {rows}:", 1)
        self._unravel(f"{p}row", L.kept, 2)
        self.emit(f"{p}acc = {_init(node, out.dtype)}", 2)
        self.emit(f"for {p}j in range({L.red_total}):", 2)
        self._unravel(f"{p}j", L.red, 3)
        v = typed(S.cast(self.read(x), x.dtype, out.dtype), out.dtype)
        step = typed(S.accumulate(accumulation(node), f"{p}acc", v, out.dtype), out.dtype)
        self.emit(f"{p}acc = {v} if {p}j == 0 else {step}", 3)
        self.local[out] = f"{p}acc"
        self.store(out, 3)
        self.emit(f"{p}row += {p}step", 2)
        self.end(self.params())
        self.launches.append(
            Launch(self.group.name, (P.ew_blocks(rows),), (P.ew_threads,), self.all_args())
        )
