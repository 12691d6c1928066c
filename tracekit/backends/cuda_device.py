"""The CUDA device as the code generator sees it: its profile (launch shapes), the launch
records a kernel's source comes with, and the small source helpers every CUDA emitter uses."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir import Var
from . import scalar as S


@dataclass
class Profile:
    """What the code generator needs to know about the device."""

    simulator: bool
    name: str = "simulator"
    sm_count: int = 2
    max_threads: int = 32
    warp: int = 32
    shared_bytes: int = 48 * 1024
    max_grid_x: int = 2**31 - 1
    max_grid_yz: int = 65535
    cc: tuple = (0, 0)
    sim_row_threads: int = 8  # simulator: threads per row block (each sync costs a GIL round)
    force_shuffle: bool = False  # tests: warp shuffles on the simulator too (emulated there)

    @classmethod
    def current(cls) -> Profile:
        from numba import cuda

        from .runtime import simulator_active

        if simulator_active():
            # The simulator runs every thread as a Python thread and blocks one after the
            # other: small blocks and grids keep it usable; the code paths are the same.
            return cls(simulator=True)
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        return cls(
            simulator=False,
            name=name,
            sm_count=int(dev.MULTIPROCESSOR_COUNT),
            max_threads=int(dev.MAX_THREADS_PER_BLOCK),
            warp=int(dev.WARP_SIZE),
            shared_bytes=int(dev.MAX_SHARED_MEMORY_PER_BLOCK),
            max_grid_x=int(dev.MAX_GRID_DIM_X),
            max_grid_yz=int(dev.MAX_GRID_DIM_Y),
            cc=tuple(dev.compute_capability),
        )

    # -- launch shapes
    @property
    def shuffle(self) -> bool:
        """Warp shuffles (the simulator has none)."""
        return self.force_shuffle or (not self.simulator and self.warp == 32)

    @property
    def ew_threads(self) -> int:
        return 32 if self.simulator else 256

    def ew_blocks(self, total: int) -> int:
        need = -(-max(total, 1) // self.ew_threads)
        cap = 2 if self.simulator else self.sm_count * 32
        return max(1, min(need, cap))

    def row_threads(self, r: int) -> int:
        if self.simulator:
            return min(self.sim_row_threads, _pow2(max(r, 2)))
        return min(min(self.max_threads, 1024), max(32, _pow2(-(-r // 4))))

    def row_blocks(self, rows: int) -> int:
        cap = 2 if self.simulator else self.sm_count * 32
        return max(1, min(rows, cap, self.max_grid_x))

    @property
    def target_blocks(self) -> int:
        """Blocks that keep the whole device busy."""
        return 4 if self.simulator else self.sm_count * 8

    @property
    def mm_tile(self) -> int:
        return 4 if self.simulator else 16


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


# ---------------------------------------------------------------------- launches


@dataclass(frozen=True, eq=False)
class Arg:
    """One kernel argument: a Var's device array (reshaped), a Var's scalar, or scratch."""

    kind: str  # "operand" | "scratch" | "offset"
    var: Var | None = None
    shape: tuple | None = None  # None: a weak (Python scalar) operand
    dtype: np.dtype | None = None
    key: str = ""
    moving: tuple = ()  # an "offset": (base, step), the element offset at iteration k


@dataclass
class Launch:
    kernel: str
    grid: tuple
    block: tuple
    args: list


class DeviceUnsupported(Exception):
    """An op/dtype the device emitter has no code for: the group runs on the host instead."""


def nb_type(dtype) -> str:
    """Source of the numba type of ``dtype``: ``nbt.float32``."""
    dtype = np.dtype(dtype)
    return "nbt.boolean" if dtype.kind == "b" else f"nbt.{dtype.name}"


def typed(src: str, dtype) -> str:
    """``src`` forced to ``dtype``: numba widens small ints and mixes, NumPy does not. Always
    a NumPy scalar, float64 too: on the simulator a Python float would divide by zero with a
    ZeroDivisionError instead of giving inf."""
    return f"{S.ctor(dtype)}({src})"


@dataclass
class _PseudoGroup:
    """A kernel that is not a fusion group (matmul, gathers): what ``Compiled.kernels`` lists."""

    name: str
    kind: str
    nodes: list = field(default_factory=list)
