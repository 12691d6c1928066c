"""Python source for the ``numba.cuda`` kernels of a plan (the planner is the CPU target's):
``CudaKernelSource`` turns one fused group into a kernel, or a short sequence of kernels, and
chooses its shape.

The shapes, and where each is written:

- **elementwise** (here): a grid-stride loop over the collapsed iteration space (``layout.Layout``);
- **row** (``cuda_rows``: reductions fused with their producers and consumers, e.g. softmax,
  layernorm) in one of three shapes, chosen from the problem size and the device:

  * ``block``: one thread block per row (grid-stride over rows); threads stride over the row,
    then a shared-memory tree (warp shuffles for the last levels on a real GPU) gives every
    thread the row's value; a later pass re-reads its inputs (they are in L1/L2) and recomputes
    cheap elementwise values instead of spilling them;
  * ``thread``: one thread per row, sequential over the row, when the reduced axes are outer
    ones (coalesced: neighbouring threads read neighbouring columns) and there are many rows;
  * ``split``: a two-pass tree reduction for a whole-array reduction or a few long rows: pass
    kernels over ``(chunk, row)`` blocks write per-block partials, a combine kernel per row
    reduces them and computes the per-row values later passes read;

- **scan** (``cuda_scan``): one block per row, a Hillis-Steele scan of each tile in shared
  memory plus a carry;
- **matmul** (``cuda_matmul``; a host step in the plan): a tiled shared-memory kernel; the
  elementwise kernel that consumes its result (bias, activation: ``np.maximum(a @ b + bias, 0)``)
  runs in it as an epilogue at the store when it covers the matmul's output shape
  (``CudaProgram`` decides);
- **views** (``cuda_views``) that are not free (transpose, strided slices, broadcasts): a
  gather kernel; **index_update** with a basic index: a copy and a scatter kernel.

Scalar expressions come from :mod:`tracekit.backends.scalar` with the device's templates
(``cuda_math``: ``libdevice`` calls and the device helpers of ``cuda_helpers``); the device
profile and the launch records are in ``cuda_device``; ``cuda.py`` assembles the program and runs
it.
"""

from __future__ import annotations

import numpy as np

from ..ir import Var, format_node
from ..ops import OPS
from .cuda_device import Arg, DeviceUnsupported, Launch, Profile, typed
from .cuda_math import device_expr
from .cuda_rows import RowKernels
from .cuda_scan import ScanKernels
from .emit_cpu import KernelSource
from .planner import Step, accumulation, is_reduction

ROW_MODES = ("block", "thread", "split")
FORCE_ROW_MODE = None  # tests set one of ROW_MODES to run every row group that way


class CudaKernelSource(RowKernels, ScanKernels, KernelSource):
    """Source and launches of one fused group. ``text`` holds its kernel functions."""

    VECTORISE = False

    def __init__(
        self, step: Step, math: str, profile: Profile, mode: str | None = None, windows=None
    ):
        # slices an elementwise kernel indexes through their base (windows.py), as on the CPU
        windows = windows if step.group.kind == "elementwise" else None
        super().__init__(step, math, windows=windows)
        self.profile = profile
        self.funcs: list[str] = []
        self.launches: list[Launch] = []
        self.scratch: list[Arg] = []
        self.hoisted: dict = {}
        self.forced_mode = mode
        self.mode = None

    # -- operands
    @staticmethod
    def is_alias(node) -> bool:
        """A view in a group is a per-row alias (the planner keeps no other view in one): its
        element is its input's."""
        return OPS[node.op].view

    def is_weak_scalar(self, v: Var) -> bool:
        return v.weak and self.layout.is_scalar(v) and v in self.inputs

    def operand_args(self) -> list[Arg]:
        out = []
        for _, v, whole in self.operands():
            if whole:  # a window's base, in its own shape
                out.append(Arg("operand", v, v.shape or (1,), v.dtype))
            elif self.is_weak_scalar(v):
                out.append(Arg("operand", v, None, v.dtype))
            else:
                shape = self.layout.operand_shape(v) or (1,)
                out.append(Arg("operand", v, shape, v.dtype))
        return out

    def all_args(self) -> list[Arg]:
        return self.operand_args() + self.scratch

    def add_scratch(self, key: str, shape: tuple, dtype) -> str:
        name = f"{self.p}{key}"
        self.scratch.append(Arg("scratch", None, tuple(shape), np.dtype(dtype), name))
        return name

    def read(self, v: Var) -> str:
        if v in self.local:
            return self.local[v]
        if v in self.hoisted:
            return self.hoisted[v]
        if self.layout.is_scalar(v) and v in self.inputs:
            return self.arg(v) if v.weak else f"{self.arg(v)}[0]"
        return self.at(v)

    def at(self, v: Var) -> str:
        if v in self.windows:
            return super().at(v)
        idx = self.layout.index(v)
        return f"{self.arg(v)}[{idx or '0'}]"

    def compute(self, node, depth: int):
        out = node.out
        name = f"{self.p}t_{out.ident}"
        if self.is_alias(node):
            self.emit(f"{name} = {self.read(node.inputs[0])}", depth)
        else:
            vals = [self.value(x) for x in node.inputs]
            src = device_expr(node, [v[0] for v in vals], [v[1] for v in vals], self.math)
            self.emit(f"{name} = {typed(src, out.dtype)}", depth)
        self.local[out] = name

    def store(self, v: Var, depth: int, guard: str | None = None):
        if v in self.outputs:
            if guard:
                self.emit(f"if {guard}:", depth)
                depth += 1
            self.emit(f"{self.at(v)} = {self.local[v]}", depth)

    # -- functions
    def begin(self, name: str, doc: str = ""):
        self.lines = []
        self.fname = name
        self._extra_params = []
        self.emit_header = doc

    def end(self, params: list[str]):
        g = self.group
        head = [
            "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
            f"def {self.fname}({', '.join(params)}):",
            f"    # kernel {g.name}: {g.kind} over {list(g.shape)}"
            + (f", axes {list(g.axes)}" if g.axes else "")
            + (f"; {self.emit_header}" if self.emit_header else ""),
        ]
        head += [f"    # {format_node(n)}" for n in g.nodes]
        self.funcs.append("\n".join(head + self.lines))

    def params(self) -> list[str]:
        return [p for p, _, _ in self.operands()] + [a.key for a in self.scratch]

    def _hoist(self, depth: int):
        self.hoisted = {}
        for v in self.inputs:
            if self.layout.is_scalar(v) and not v.weak:
                name = f"{self.p}s_{v.ident}"
                self.emit(f"{name} = {self.arg(v)}[0]", depth)
                self.hoisted[v] = name

    def _unravel(self, flat: str, dims: list, depth: int):
        L = self.layout
        if not dims:
            return
        if len(dims) == 1:
            self.emit(f"{L.names[dims[0]]} = {flat}", depth)
            return
        r = f"{self.p}rem"
        self.emit(f"{r} = {flat}", depth)
        for c in reversed(dims[1:]):
            self.emit(f"{L.names[c]} = {r} % {L.sizes[c]}", depth)
            self.emit(f"{r} = {r} // {L.sizes[c]}", depth)
        self.emit(f"{L.names[dims[0]]} = {r}", depth)

    # -- the group
    def check(self):
        """Raise DeviceUnsupported unless every op of the group has device code."""
        g = self.group
        for n in g.nodes:
            if not self.is_alias(n) and not is_reduction(n) and g.kind != "scan":
                dts = [x.dtype if isinstance(x, Var) else self.value(x)[1] for x in n.inputs]
                device_expr(n, [f"_a{k}" for k in range(len(dts))], dts, self.math)
            if is_reduction(n) and accumulation(n).index and n.inputs[0].dtype.kind == "c":
                raise DeviceUnsupported("argmax/argmin of complex values")

    def source(self) -> str:
        g = self.group
        self.check()  # every op must have device code, else the group runs on the host
        if g.kind == "elementwise":
            self._elementwise()
        elif g.kind == "scan":
            self.mode = "thread" if self._scan_sequential() else "block"
            self._scan_thread() if self.mode == "thread" else self._scan()
        else:
            self.mode = self.forced_mode or FORCE_ROW_MODE or self._choose_mode()
            if self.mode == "thread":
                self._rows_thread()
            elif self.mode == "split":
                self._rows_split()
            else:
                self._rows_block()
        return "\n\n\n".join(self.funcs)

    def _choose_mode(self) -> str:
        L, P = self.layout, self.profile
        rows = int(np.prod([L.sizes[c] for c in L.kept], dtype=np.int64)) if L.kept else 1
        r = L.red_total
        inner_kept = bool(L.reduced) and not L.reduced[-1]
        if not L.kept:
            return "split"
        if inner_kept and rows >= (64 if P.simulator else P.sm_count * 256):
            return "thread"
        if rows < P.target_blocks // 2 and r >= 8 * P.row_threads(r):
            return "split"
        return "block"

    # -- elementwise
    def _elementwise(self):
        L, p = self.layout, self.p
        self.begin(self.group.name, "grid-stride loop")
        self._hoist(1)
        self.emit(f"{p}t = cuda.grid(1)", 1)
        self.emit(f"{p}step = cuda.gridsize(1)", 1)
        self.emit(f"while {p}t < {L.total}:", 1)
        self._unravel(f"{p}t", L.kept, 2)
        for n in self.group.nodes:
            self.compute(n, 2)
            for o in n.outputs:
                self.store(o, 2)
        self.emit(f"{p}t += {p}step", 2)
        self.end(self.params())
        P = self.profile
        self.launches.append(
            Launch(self.group.name, (P.ew_blocks(L.total),), (P.ew_threads,), self.all_args())
        )

    # -- scan
    def _scan_sequential(self) -> bool:
        """One thread per row, in NumPy's order: for complex values and float products (a
        parallel scan reassociates: complex infinities, and products that overflow in another
        order, 0 * 3e38 * -3 -> inf * 0 -> nan), and for many rows scanned along an outer
        axis (coalesced). Float sums scan in parallel: they only round differently."""
        L, P = self.layout, self.profile
        if FORCE_ROW_MODE in ("thread", "block"):
            return FORCE_ROW_MODE == "thread"
        node = self.group.nodes[0]
        kind = node.out.dtype.kind
        if kind == "c" or (kind == "f" and accumulation(node).combine == "multiply"):
            return True
        inner_kept = bool(L.reduced) and not L.reduced[-1]
        return not P.simulator and inner_kept and self._rows_count() >= P.sm_count * 256

    def _rows_count(self) -> int:
        L = self.layout
        return int(np.prod([L.sizes[c] for c in L.kept], dtype=np.int64)) if L.kept else 1


def kernel_source(
    step: Step, math: str, profile: Profile, mode=None, windows=None
) -> CudaKernelSource:
    ks = CudaKernelSource(step, math, profile, mode, windows)
    ks.text = ks.source()
    return ks
