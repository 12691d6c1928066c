"""The CUDA matmul kernel: ``t x t`` tiles of both operands in shared memory (each thread
loads one element of each, sync, accumulates over the tiles, sync before the next k tile
overwrites them), with the elementwise kernel that reads its result optionally fused in as an
epilogue."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Node, Var, format_node
from ..ops import OPS
from . import scalar as S
from .cuda_device import Arg, Launch, Profile, _PseudoGroup, nb_type, typed
from .emit_cuda import CudaKernelSource
from .planner import Step


@dataclass
class MatmulPlan:
    """A device matmul: ``c[z] = a[z or 0] @ b[z or 0]`` over a flattened batch."""

    node: Node
    batch: int
    m: int
    k: int
    n: int
    a_shape: tuple
    b_shape: tuple
    c_shape: tuple


def matmul_plan(node: Node) -> MatmulPlan | None:
    """How ``node`` runs as a tiled kernel, or None (then it runs through NumPy on the host)."""
    op = OPS[node.op]
    # a product of two matrices: einsum and tensordot carry their contraction in attributes
    if op.kind != "matmul" or op.lapack or node.attrs or len(node.var_inputs) != 2:
        return None
    a, b = node.inputs
    if not (isinstance(a, Var) and isinstance(b, Var)):
        return None
    out = node.out
    if any(v.dtype.kind not in "fiu" or v.dtype == np.float16 for v in (a, b, out)):
        return None
    if a.ndim == 0 or b.ndim == 0 or out.size == 0:
        return None
    if op.ufunc is None and (a.ndim > 2 or b.ndim > 2):  # only a gufunc (matmul) batches
        return None
    m, k = (1, a.shape[0]) if a.ndim == 1 else a.shape[-2:]
    k2, n = (b.shape[0], 1) if b.ndim == 1 else b.shape[-2:]
    if k != k2 or k == 0:
        return None
    batch_shape = out.shape[: max(0, out.ndim - (a.ndim > 1) - (b.ndim > 1))]
    batch = int(np.prod(batch_shape, dtype=np.int64)) if batch_shape else 1
    ab = a.shape[:-2] if a.ndim > 2 else ()
    bb = b.shape[:-2] if b.ndim > 2 else ()
    for s in (ab, bb):
        sz = int(np.prod(s, dtype=np.int64)) if s else 1
        if sz not in (1, batch) or (sz == batch and tuple(s) != tuple(batch_shape)[-len(s) :]):
            return None
        if sz == batch and batch > 1 and len(s) != len(batch_shape):
            return None
    ba = int(np.prod(ab, dtype=np.int64)) if ab else 1
    bbn = int(np.prod(bb, dtype=np.int64)) if bb else 1
    return MatmulPlan(node, batch, m, k, n, (ba, m, k), (bbn, k, n), (batch, m, n))


def epilogue_fits(mp: MatmulPlan, step: Step) -> str | None:
    """Why the elementwise kernel ``step`` cannot run as the epilogue of matmul ``mp`` (None
    when it can): it must be a plain elementwise group over the matmul's output shape, reading
    the matmul result element for element (its other inputs broadcast to that shape)."""
    v = mp.node.out
    g = step.group
    if g is None or g.kind != "elementwise":
        return f"kernel {step.name} is not elementwise"
    if v.weak or v not in step.inputs:
        return f"kernel {step.name} does not read %{v.name}"
    if tuple(g.shape) != tuple(v.shape):
        return f"kernel {step.name} runs over {list(g.shape)}, the matmul gives {list(v.shape)}"
    return None


class MatmulSource:
    """A tiled shared-memory matmul kernel for one matmul step, optionally with the elementwise
    kernel that reads its result fused in as an epilogue (``epilogue``, a plan step accepted by
    :func:`epilogue_fits`): each thread computes the group's expression from its accumulator
    and stores the group's outputs; the matmul result itself is stored only when ``keep_c``
    (it is a result, or read by a later step)."""

    def __init__(
        self,
        mp: MatmulPlan,
        name: str,
        profile: Profile,
        epilogue: Step | None = None,
        math: str = "fast",
        keep_c: bool = True,
    ):
        self.mp, self.name, self.profile = mp, name, profile
        self.epilogue, self.keep_c = epilogue, keep_c or epilogue is None
        node = mp.node
        ep = None
        if epilogue is not None:
            ep = CudaKernelSource(epilogue, math, profile)
            ep.check()  # DeviceUnsupported: the caller keeps the two kernels apart
        nodes = [node] + (list(epilogue.nodes) if epilogue is not None else [])
        self.group = _PseudoGroup(name, "matmul", nodes)
        out = node.out
        acc = out.dtype if out.dtype.kind == "f" else np.dtype(np.int64)
        a, b = node.inputs
        t = profile.mm_tile
        kt = -(-mp.k // t)
        zero = S.literal(0, acc)
        params = ["a", "b"] + (["c"] if self.keep_c else [])
        if ep is not None:  # in the order of ep.operand_args(), as the launch passes them
            params += [ep.arg(x) for x in ep.inputs + ep.outputs if x is not out]
        head = (
            [
                "    # (on a GPU with CuPy or torch importable, float matmuls of one dtype run in",
                "    # cuBLAS instead, on the same stream; this kernel is the fallback)",
            ]
            if ep is None
            else [
                f"    # epilogue: kernel {epilogue.name} fused, computed from the accumulator"
                + ("" if self.keep_c else f" (%{out.name} is never stored)")
            ]
        )
        lines = [
            "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
            f"def {name}({', '.join(params)}):",
            f"    # matmul {list(a.shape)} @ {list(b.shape)} -> {list(out.shape)}: "
            f"{t}x{t} tiles in shared memory, accumulating in {acc.name}",
            *head,
            *[f"    # {format_node(n)}" for n in nodes],
            f"    sa = cuda.shared.array(({t}, {t}), {nb_type(acc)})",
            f"    sb = cuda.shared.array(({t}, {t}), {nb_type(acc)})",
            "    tx = cuda.threadIdx.x",
            "    ty = cuda.threadIdx.y",
            "    z = cuda.blockIdx.z",
            f"    while z < {mp.batch}:",
            f"        za = {'z' if mp.a_shape[0] > 1 else '0'}",
            f"        zb = {'z' if mp.b_shape[0] > 1 else '0'}",
            f"        row = cuda.blockIdx.y * {t} + ty",
            f"        col = cuda.blockIdx.x * {t} + tx",
            f"        acc = {zero}",
            f"        for kt in range({kt}):",
            f"            k = kt * {t} + tx",
            f"            if row < {mp.m} and k < {mp.k}:",
            f"                sa[ty, tx] = {typed(S.cast('a[za, row, k]', a.dtype, acc), acc)}",
            "            else:",
            f"                sa[ty, tx] = {zero}",
            f"            k = kt * {t} + ty",
            f"            if k < {mp.k} and col < {mp.n}:",
            f"                sb[ty, tx] = {typed(S.cast('b[zb, k, col]', b.dtype, acc), acc)}",
            "            else:",
            f"                sb[ty, tx] = {zero}",
            "            cuda.syncthreads()",
            f"            for kk in range({t}):",
            f"                acc = {typed('acc + sa[ty, kk] * sb[kk, tx]', acc)}",
            "            cuda.syncthreads()",
            f"        if row < {mp.m} and col < {mp.n}:",
        ]
        result = typed(S.cast("acc", acc, out.dtype), out.dtype)
        if ep is None:
            lines.append(f"            c[z, row, col] = {result}")
        else:
            hoisted = self._hoisted(ep)
            lines += self._epilogue(ep, result)
            at = lines.index("    tx = cuda.threadIdx.x")  # scalar operands: read once, first
            lines[at:at] = hoisted
        lines.append("        z += cuda.gridDim.z")
        self.text = "\n".join(lines)
        grid = (-(-mp.n // t), -(-mp.m // t), min(mp.batch, profile.max_grid_yz))
        self.launches = [
            Launch(
                name,
                grid,
                (t, t),
                [
                    Arg("operand", a, mp.a_shape, a.dtype),
                    Arg("operand", b, mp.b_shape, b.dtype),
                    *([Arg("operand", out, mp.c_shape, out.dtype)] if self.keep_c else []),
                    *([x for x in ep.operand_args() if x.var is not out] if ep is not None else []),
                ],
            )
        ]

    def _hoisted(self, ep: CudaKernelSource) -> list[str]:
        out = self.mp.node.out
        ep.lines, ep.hoisted = [], {}
        for v in ep.inputs:
            if v is not out and ep.layout.is_scalar(v) and not v.weak:
                name = f"{ep.p}s_{v.ident}"
                ep.emit(f"{name} = {ep.arg(v)}[0]", 1)
                ep.hoisted[v] = name
        return ep.lines

    def _epilogue(self, ep: CudaKernelSource, result: str) -> list[str]:
        """The store: the matmul element (``c[z, row, col]``, kept only when needed) and the
        epilogue group's expression at that element, indexed like its own kernel (the flat
        index of the element, unravelled over the group's collapsed loop dims)."""
        mp, out, L = self.mp, self.mp.node.out, ep.layout
        ep.lines, ep.local = [], {}
        d = 3
        ep.emit(f"mmc = {result}", d)
        if self.keep_c:
            ep.emit("c[z, row, col] = mmc", d)
        ep.local[out] = "mmc"
        if L.kept:
            ep.emit(f"{ep.p}flat = (z * {mp.m} + row) * {mp.n} + col", d)
            ep._unravel(f"{ep.p}flat", L.kept, d)
        for n in ep.group.nodes:
            ep.compute(n, d)
            for o in n.outputs:
                ep.store(o, d)
        return ep.lines
