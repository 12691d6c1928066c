"""The numba CUDA target: a plan's kernels as ``numba.cuda.jit`` code, and a runner.

The plan is the CPU target's (``planner.plan``); ``emit_cuda`` writes one kernel (or a short
sequence) per fused group, ``cuda_matmul`` a tiled kernel per matmul (with the elementwise kernel
that reads its result fused in as an epilogue where that fits, unless cuBLAS runs the matmul),
``cuda_views`` gathers for views that are not free and scatters for in-place writes. What has no
device code (Python ops, advanced indexing, concatenate, float16, a few complex functions) runs
through NumPy on the host, between kernels, with its operands copied across;
``CudaProgram.notes`` says which, and which matmuls got an epilogue.

Data: NumPy inputs are copied into pooled device buffers and the results copied back; arrays
with ``__cuda_array_interface__`` (numba device arrays, CuPy, torch) are used in place, and the
results come back as the kind that came in. Temporaries (and, for NumPy callers, outputs) come
from a per-thread device pool reused across calls; ``out=`` takes device or host buffers. All
work goes to one stream per ``Compiled`` (``stream=`` to pass your own).

Without a GPU, ``NUMBA_ENABLE_CUDASIM=1`` (set before numba is imported) runs the same kernels
in numba's CUDA simulator: correct, slow, and its timings mean nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time

import numpy as np

from .. import pytree
from ..errors import GuardError
from ..interpret import as_input_value, input_env, raise_failed_guard
from ..ir import Var, at_iteration, moves
from ..loops.op import body_at, in_iteration, iterate
from ..ops import OPS
from ..pyop import check_results
from ..traced import check_guards, check_layout_guards, check_value, parameter_names
from . import cache
from .control import prepared
from .cuda_device import Arg, DeviceUnsupported, Launch, Profile, _PseudoGroup
from .cuda_helpers import HELPERS
from .cuda_matmul import MatmulSource, epilogue_fits, matmul_plan
from .cuda_views import gather_source, is_c_contiguous, scatter_source, view_geometry
from .emit_cuda import CudaKernelSource, kernel_source
from .planner import Plan, Step, escaping
from .planner import plan as make_plan
from .runtime import check_out_types, device_array_types, is_device_array, simulator_active
from .windows import read_through, view_windows


class CudaUnavailableError(RuntimeError):
    """target="cuda" without a usable GPU and without the simulator."""


class CudaCompileError(RuntimeError):
    """numba could not compile a kernel; the message names the nodes and the user's lines."""


def require_cuda():
    """Import ``numba.cuda`` and check there is a GPU or the simulator; a clear error if not."""
    how = (
        "Either run on a machine with an NVIDIA GPU and driver (pip install numba-cuda, or "
        "tracekit[cuda]), or use numba's CUDA simulator for testing: set the environment "
        "variable NUMBA_ENABLE_CUDASIM=1 before numba is imported (slow, pure Python), or "
        "compile with target='cpu'."
    )
    try:
        from numba import cuda
    except Exception as e:  # numba-cuda missing or broken
        raise CudaUnavailableError(f"target='cuda' needs numba.cuda ({e}). {how}") from e
    if simulator_active():
        return cuda
    try:
        ok = cuda.is_available()
    except Exception as e:
        ok, why = False, f"{type(e).__name__}: {e}"
    else:
        why = "numba.cuda.is_available() is False: no GPU or no CUDA driver found"
    if not ok:
        raise CudaUnavailableError(f"target='cuda': no usable GPU ({why}). {how}")
    return cuda


# ---------------------------------------------------------------------- the simulator's libdevice
class _SimLibdevice:
    """``numba.cuda.libdevice`` for the simulator (it only has stubs): NumPy on scalars.

    The names ending in ``f`` compute in float32, the others in float64, as on the device; the
    accuracy is NumPy's, not libdevice's (the ulp bounds are checked on a real GPU)."""

    _NP = {
        "exp": np.exp,
        "exp2": np.exp2,
        "expm1": np.expm1,
        "log": np.log,
        "log2": np.log2,
        "log10": np.log10,
        "log1p": np.log1p,
        "sqrt": np.sqrt,
        "cbrt": np.cbrt,
        "sin": np.sin,
        "cos": np.cos,
        "tan": np.tan,
        "asin": np.arcsin,
        "acos": np.arccos,
        "atan": np.arctan,
        "sinh": np.sinh,
        "cosh": np.cosh,
        "tanh": np.tanh,
        "asinh": np.arcsinh,
        "acosh": np.arccosh,
        "atanh": np.arctanh,
        "floor": np.floor,
        "ceil": np.ceil,
        "trunc": np.trunc,
        "rint": np.rint,
        "fmod": np.fmod,
        "copysign": np.copysign,
        "atan2": np.arctan2,
        "hypot": np.hypot,
        "pow": np.power,
    }

    def __init__(self):
        for base, fn in self._NP.items():
            setattr(self, base, self._wrap(fn, np.float64))
            setattr(self, base + "f", self._wrap(fn, np.float32))

    @staticmethod
    def _wrap(fn, t):
        def f(*args):
            with np.errstate(all="ignore"):
                return t(fn(*(t(a) for a in args)))

        return f

    @staticmethod
    def signbitd(x):
        return int(np.signbit(np.float64(x)))

    @staticmethod
    def signbitf(x):
        return int(np.signbit(np.float32(x)))


sim_libdevice = _SimLibdevice()


def _header(profile: Profile) -> str:
    lib = (
        "from tracekit.backends.cuda import sim_libdevice as libdevice  # simulator: NumPy"
        if profile.simulator
        else "from numba.cuda import libdevice"
    )
    dev = "numba's CUDA simulator" if profile.simulator else f"{profile.name}, cc {profile.cc}"
    return (
        f"# Generated by tracekit: numba CUDA kernels for one graph ({dev}).\n"
        "import math\n\n"
        "import numpy as np\n"
        "from numba import cuda\n"
        "from numba import types as nbt\n"
        f"{lib}\n\n"
        f"{cache.CACHE_FLAG}\n"
    )


# ---------------------------------------------------------------------- the program
class Item:
    """One thing the runner does, in plan order."""

    def __init__(self, kind, step, **kw):
        self.kind, self.step = kind, step
        self.__dict__.update(kw)


class CudaProgram:
    """Source, launches and compiled kernels for one plan."""

    def __init__(self, plan: Plan, math: str = "fast", profile: Profile | None = None, modes=None):
        if profile is None:  # an explicit profile emits source for a device that may be absent
            require_cuda()
            profile = Profile.current()
        self.plan, self.math = plan, math
        self.profile = profile
        self.kernel_sources = {}
        self.items: list[Item] = []
        self.notes: list[str] = []
        self.loops: list[CudaProgram] = []  # the programs of loop bodies
        self._blas = None
        modes = modes or {}
        parts = [_header(self.profile), HELPERS]
        fused = self._epilogues(plan, math)
        deferred = {mi for mi, _, _ in fused.values()}
        windows = view_windows(plan, contiguous_inputs=True)
        unread = _views_read_through_windows(plan, windows, set(fused))
        for i, step in enumerate(plan.steps):
            if i in deferred:  # runs where its epilogue kernel would have run, with it
                continue
            if i in unread:  # its kernels index the array it views: no gather
                continue
            if i in fused:
                self._fused_matmul(step, *fused[i], parts, math)
            elif step.kind == "kernel":
                try:
                    ks = kernel_source(
                        step, math, self.profile, modes.get(step.group.name), windows
                    )
                except DeviceUnsupported as e:
                    self.notes.append(f"{step.group.name}: runs on the host through NumPy ({e})")
                    parts.append(f"# kernel {step.group.name}: host (NumPy) -- {e}")
                    self.items.append(Item("host", step, nodes=list(step.nodes)))
                    continue
                self.kernel_sources[step.group.name] = ks
                parts.append(ks.text)
                self.items.append(Item("kernel", step, launches=ks.launches, src=ks))
            elif step.kind == "view":
                self._view(step, parts)
            else:
                self._host_step(step, parts)
        self.source = "\n\n\n".join(parts) + "\n"
        self.module = None

    # -- matmuls with their elementwise epilogue
    def blas(self):
        """cuBLAS (through CuPy or torch) when importable, never on the simulator; made once
        and shared with the runners."""
        if self._blas is None:
            self._blas = False if self.profile.simulator else _Blas()
        return self._blas or None

    def _epilogues(self, plan: Plan, math: str) -> dict:
        """``{kernel step index: (matmul step index, MatmulPlan, keep_c)}``: the elementwise
        kernels that run inside the matmul kernel producing one of their inputs (see
        ``cuda_matmul.epilogue_fits``). The fused kernel runs at the epilogue's place in the plan
        (the matmul's operands are still there: nothing on the device writes into a value
        in place). The matmul result is stored only when it is a result (or a guard) or a later
        step reads it; one read by a step in between keeps the two kernels apart, and so does a
        matmul that cuBLAS runs. Every decision goes to ``notes``."""
        steps, g = plan.steps, plan.graph
        keep_always = set(g.outputs) | {gd.var for gd in g.guards}
        made, readers = {}, {}
        for i, st in enumerate(steps):
            for v in st.inputs:
                readers.setdefault(v, []).append(i)
            if st.kind == "host":
                mp = matmul_plan(st.nodes[0])
                if mp is not None:
                    made[st.nodes[0].out] = (i, mp)
        fused, taken = {}, set()
        for gi, st in enumerate(steps):
            if st.kind != "kernel":
                continue
            for v in st.inputs:
                if v not in made or made[v][0] in taken:
                    continue
                mi, mp = made[v]
                others = [r for r in readers.get(v, []) if r != gi]
                why = epilogue_fits(mp, st)
                if why is None and any(r < gi for r in others):
                    first = min(r for r in others if r < gi)
                    why = f"{steps[first].name} reads %{v.name} before {st.name} runs"
                if why is None and self._blas_runs(mp):
                    why = f"cuBLAS through {self.blas().lib} runs the matmul"
                if why is None:
                    try:
                        CudaKernelSource(st, math, self.profile).check()
                    except DeviceUnsupported as e:
                        why = str(e)
                if why is not None:
                    self.notes.append(f"matmul -> %{v.name}: epilogue not fused ({why})")
                    continue
                fused[gi] = (mi, mp, v in keep_always or bool(others))
                taken.add(mi)
                break
        return fused

    def _blas_runs(self, mp) -> bool:
        a, b = mp.node.inputs
        out = mp.node.out
        if not (a.dtype == b.dtype == out.dtype and out.dtype.kind == "f"):
            return False
        blas = self.blas()
        return blas is not None and blas.lib is not None

    def _fused_matmul(self, step, mi, mp, keep, parts, math):
        mm = self.plan.steps[mi]
        v = mp.node.out
        name = self._name("mm")
        ms = MatmulSource(mp, name, self.profile, epilogue=step, math=math, keep_c=keep)
        parts.append(ms.text)
        self.kernel_sources[name] = ms
        ins = list(mm.inputs) + [x for x in step.inputs if x is not v and x not in mm.inputs]
        outs = ([v] if keep else []) + list(step.outputs)
        fstep = Step("kernel", list(ms.group.nodes), ms.group, ins, outs)
        self.items.append(Item("kernel", fstep, launches=ms.launches, src=ms))
        self.notes.append(
            f"matmul -> %{v.name}: epilogue fused ({name} computes kernel {step.name}'s "
            f"{len(step.nodes)} node(s) at its store"
            + (f"; %{v.name} is stored too)" if keep else f"; %{v.name} is never stored)")
        )

    # -- non-kernel steps
    def _name(self, prefix) -> str:
        return f"{prefix}{len(self.items)}"

    def _view(self, step, parts):
        node = step.nodes[0]
        x = node.inputs[0]
        geo = moving = None
        if isinstance(x, Var) and not x.weak:
            op = OPS[node.op]

            def view(attrs):
                if op.kind != "index":
                    return lambda a: op.impl(a, **attrs)
                if any(isinstance(e, str) for e in attrs["idx"]):
                    return None  # index arrays: a gather
                idx = _as_view_index(attrs["idx"])
                return lambda a: a[idx]

            geo, moving = _geometry(x, node.attrs, view)
        if geo is None or tuple(geo[0]) != node.out.shape:
            self._host_step(step, parts, "not a pure view")
            return
        shape, strides, off = geo
        if is_c_contiguous(shape, strides):
            self.items.append(Item("alias", step, offset=off, offset_step=moving or 0))
            return
        name = self._name("v")
        at = None if moving is not None else off
        text, (blocks, threads) = gather_source(name, node, shape, strides, at, self.profile)
        parts.append(text)
        self.kernel_sources[name] = _Src(_PseudoGroup(name, "gather", [node]), text)
        size = node.out.size
        launch = Launch(
            name,
            (blocks,),
            (threads,),
            [Arg("operand", x, (x.size,), x.dtype), Arg("operand", node.out, (size,), x.dtype)]
            + ([Arg("offset", moving=(off, moving))] if moving is not None else []),
        )
        self.items.append(Item("kernel", step, launches=[launch], src=None))

    def _host_step(self, step, parts, why=None):
        node = step.nodes[0]
        mp = matmul_plan(node) if step.kind == "host" else None
        if mp is not None:
            name = self._name("mm")
            ms = MatmulSource(mp, name, self.profile)
            parts.append(ms.text)
            self.kernel_sources[name] = ms
            self.items.append(Item("kernel", step, launches=ms.launches, src=ms))
            return
        if OPS[node.op].update and "idx" in node.attrs and self._update(step, parts):
            return
        if OPS[node.op].kind == "control":
            if node.attrs.get("start", 0) == 0 and self._loop(step, parts):
                return
            # (a loop counting from another start: a segment of a checkpointed gradient's)
            why = why or "a segment of a loop's iterations (its count starts elsewhere)"
        reason = why or step.reason or f"{node.op} runs as a NumPy call"
        self.notes.append(f"{node.op} -> %{node.out.name}: host (NumPy): {reason}")
        parts.append(f"# {node.op} -> %{node.out.name}: on the host through NumPy ({reason})")
        self.items.append(Item("host", step, nodes=[node]))

    def _loop(self, step, parts) -> bool:
        """A loop: its body compiled once as a program of its own, whose kernels the runner
        launches from one host loop, the carried state and the stacked rows staying on the
        device; an index moving with the iteration is an offset each launch is given."""
        node = step.nodes[0]
        body = node.attrs["body"]
        program = CudaProgram(make_plan(prepared(body)), self.math, self.profile)
        self.loops.append(program)
        kernels = sum(it.kind == "kernel" for it in program.items)
        self.notes.append(
            f"{node.op} -> %{node.out.name}: its body's {kernels} kernel(s) launched from one "
            "host loop, the carried state on the device"
        )
        self.notes += [f"  {body.name}: {n}" for n in program.notes]
        parts.append(f"# {node.op} -> %{node.out.name}: its body is a program of its own")
        self.items.append(Item("loop", step, node=node, body=program))
        return True

    def _update(self, step, parts) -> bool:
        node = step.nodes[0]
        if len(node.inputs) != 2:
            return False
        x, value = node.inputs
        idx = node.attrs["idx"]
        if not isinstance(x, Var) or any(isinstance(e, str) for e in idx):
            return False
        region, moving = _geometry(
            x, node.attrs, lambda attrs: lambda a: a[_as_view_index(attrs["idx"])]
        )
        if region is None:
            return False
        rshape = region[0]
        if isinstance(value, Var) and value.weak:
            val = ("weak", value)
            arg = Arg("operand", value, None, value.dtype)
        elif isinstance(value, Var):
            vshape = tuple(value.shape)
            while len(vshape) > len(rshape) and vshape[0] == 1:  # setitem drops these
                vshape = vshape[1:]
            bcast = view_geometry(vshape, value.dtype, lambda a: np.broadcast_to(a, rshape))
            if bcast is None:
                return False
            val = ("var", value, bcast[1])
            arg = Arg("operand", value, (max(value.size, 1),), value.dtype)
        else:
            if not isinstance(value, bool | int | float | complex | np.generic):
                return False
            val = ("literal", value)
            arg = None
        name = self._name("u")
        at = region if moving is None else (*region[:2], None)
        text, (blocks, threads) = scatter_source(name, node, at, val, self.profile)
        parts.append(text)
        self.kernel_sources[name] = _Src(_PseudoGroup(name, "scatter", [node]), text)
        out_arg = Arg("operand", node.out, (node.out.size,), node.out.dtype)
        moved = [Arg("offset", moving=(region[2], moving))] if moving is not None else []
        args = [arg, out_arg, *moved]
        launch = Launch(name, (blocks,), (threads,), args)
        self.items.append(Item("update", step, launches=[launch], src=None))
        return True

    # -- compiling
    def load(self, disk=True, progress=None):
        for body in self.loops:
            body.load(disk=disk)
        mod = cache.load(self.source, disk=disk)
        self.module = mod
        if self.profile.simulator:
            if progress is not None:
                progress(1, 1, 0.0)
            return mod
        sigs = {}
        for item in self.items:
            for la in getattr(item, "launches", []) or []:
                sigs.setdefault((la.kernel, _signature(la.args)), (la, item))
        start, total = time.perf_counter(), len(sigs)
        for done, ((name, sig), (_, item)) in enumerate(sigs.items(), 1):
            try:
                getattr(mod, name).compile(sig)
            except Exception as e:
                raise CudaCompileError(_describe_failure(name, item.step, e)) from e
            if progress is not None:
                progress(done, total, time.perf_counter() - start)
        return mod

    def runner(self, stream=None) -> CudaRunner:
        if self.module is None:
            self.load()
        return CudaRunner(self, stream)


def _views_read_through_windows(plan: Plan, windows: dict, epilogues: set) -> set:
    """Indices of the view steps whose views only elementwise kernels read, through their
    windows (and only such views read, slices of slices): nothing needs them as arrays.
    ``epilogues``: kernels that run inside a matmul, reading their operands as arrays."""
    g = plan.graph
    needed = set(g.outputs) | {gd.var for gd in g.guards}
    skip = set()
    for i in range(len(plan.steps) - 1, -1, -1):
        st = plan.steps[i]
        if (
            st.kind == "view"
            and not needed & set(st.outputs)
            and read_through(st.outputs[0], windows)
        ):
            skip.add(i)
            continue
        through = st.kind == "kernel" and st.group.kind == "elementwise" and i not in epilogues
        needed.update(v for v in st.inputs if not (through and read_through(v, windows)))
    return skip


def _geometry(x: Var, attrs: dict, view):
    """``((shape, strides, offset), moving)`` of the view ``view(attrs)`` makes of ``x``
    (``view(attrs)`` a function of an array, or None), ``moving`` the offset's step per
    iteration where the attributes move with a loop (None where they do not); ``(None,
    None)`` when it is not a pure view, or when its shape or strides change as it moves."""
    if not moves(attrs):
        fn = view(attrs)
        return (None if fn is None else view_geometry(x.shape, x.dtype, fn)), None
    at = [view(at_iteration(attrs, k)) for k in (0, 1)]  # an Affine index: offsets in a line
    if None in at:
        return None, None
    g0, g1 = (view_geometry(x.shape, x.dtype, fn) for fn in at)
    if g0 is None or g1 is None or g0[:2] != g1[:2]:
        return None, None
    return g0, g1[2] - g0[2]


def _as_view_index(idx) -> tuple:
    """A basic index that gives a (0-d) view even when it picks one element."""
    idx = tuple(idx)
    return idx if any(e is Ellipsis for e in idx) else idx + (Ellipsis,)


class _Src:
    def __init__(self, group, text):
        self.group, self.text = group, text


def _signature(args) -> tuple:
    from numba import types as nbt
    from numba.np.numpy_support import from_dtype

    sig = []
    for a in args:
        if a is None or a.kind == "offset":
            sig.append(nbt.int64)
        elif a.shape is None:
            sig.append(nbt.complex128 if np.dtype(a.dtype).kind == "c" else nbt.float64)
        else:
            sig.append(nbt.Array(from_dtype(np.dtype(a.dtype)), len(a.shape), "C"))
    return tuple(sig)


def _describe_failure(name, step, e) -> str:
    lines = [f"numba.cuda could not compile {name}, which covers:"]
    for n in step.nodes:
        where = f"  at {n.source} `{n.source.text}`" if n.source else ""
        lines.append(f"  {n.op} -> %{n.out.name}: {n.out.type}{where}")
    first = str(e).strip().splitlines()
    lines.append(f"numba said: {first[0] if first else type(e).__name__}")
    lines.append("The generated source is in Compiled.source.")
    return "\n".join(lines)


# ---------------------------------------------------------------------- device arrays
def _dshape(v: Var) -> tuple:
    return tuple(v.shape) if v.shape else (1,)


def _kind(x) -> str:
    mod = type(x).__module__.split(".")[0]
    return mod if mod in ("cupy", "torch") else "numba"


def _to_numba(x):
    from numba import cuda

    if getattr(x, "__cuda_ndarray__", False):
        return x
    return cuda.as_cuda_array(x)


def _from_numba(d, kind, like):
    if kind == "cupy":
        import cupy

        return cupy.asarray(d)
    if kind == "torch":
        import torch

        return torch.as_tensor(d, device=like.device)
    return d


_COPY_KERNELS: dict = {}


def copy_kernel(nd: int):
    """A kernel copying between two device arrays of the same shape and any strides."""
    k = _COPY_KERNELS.get(nd)
    if k is not None:
        return k
    from numba import cuda

    idx = ", ".join(f"i{j}" for j in range(nd))
    lines = [
        f"def _copy{nd}(src, dst):",
        "    t = cuda.grid(1)",
        "    step = cuda.gridsize(1)",
        "    n = dst.size",
        "    while t < n:",
        "        rem = t",
    ]
    for j in range(nd - 1, 0, -1):
        lines += [f"        i{j} = rem % dst.shape[{j}]", f"        rem = rem // dst.shape[{j}]"]
    lines += ["        i0 = rem", f"        dst[{idx}] = src[{idx}]", "        t += step"]
    ns = {"cuda": cuda}
    exec(compile("\n".join(lines), f"<tracekit copy{nd}>", "exec"), ns)
    k = _COPY_KERNELS[nd] = cuda.jit(ns[f"_copy{nd}"])
    return k


class _Blas:
    """cuBLAS through CuPy or torch, whichever is importable, on the runner's stream; the tiled
    kernel runs when neither is (or for integer and mixed dtypes). ``TRACEKIT_CUDA_BLAS=0``
    turns it off."""

    def __init__(self):
        self.lib, self.mod = None, None
        if os.environ.get("TRACEKIT_CUDA_BLAS", "1") == "0":
            return
        for name in ("cupy", "torch"):
            try:
                mod = importlib.import_module(name)
                if name == "torch" and not mod.cuda.is_available():
                    continue
            except Exception:
                continue
            self.lib, self.mod = name, mod
            return

    def matmul(self, a, b, c, stream) -> bool:
        if self.lib is None or not (a.dtype == b.dtype == c.dtype and c.dtype.kind == "f"):
            return False
        try:
            h = _stream_handle(stream)
            if self.lib == "cupy":
                cp = self.mod
                with cp.cuda.ExternalStream(h):
                    cp.matmul(cp.asarray(a), cp.asarray(b), out=cp.asarray(c))
            else:
                torch = self.mod
                with torch.cuda.stream(torch.cuda.ExternalStream(h)):
                    ta, tb, tc = (torch.as_tensor(x, device="cuda") for x in (a, b, c))
                    torch.matmul(ta, tb, out=tc)
            return True
        except Exception as e:  # keep computing with the tiled kernel, and say so once
            cache.warn_once(
                "cublas",
                f"tracekit: cuBLAS through {self.lib} failed ({type(e).__name__}: {e}); "
                "using the tiled matmul kernel",
            )
            self.lib = None
            return False


def _stream_handle(stream) -> int:
    h = getattr(stream, "handle", 0)
    v = getattr(h, "value", None)
    if v is None:
        try:
            v = int(h)
        except (TypeError, ValueError):
            v = 0
    return v or 0


def _make_stream(stream):
    from numba import cuda

    if stream is None:
        return cuda.stream()
    if isinstance(stream, int):
        return cuda.external_stream(stream)
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return cuda.external_stream(h)
    return stream  # a numba stream


# ---------------------------------------------------------------------- the runner
class CudaRunner:
    """Runs a CudaProgram: moves data, allocates from the pool, launches, converts back."""

    def __init__(self, program: CudaProgram, stream=None):
        self.program, self.plan = program, program.plan
        self.profile = program.profile
        self.stream = _make_stream(stream)
        self.module = program.module
        g = self.plan.graph
        self.graph = g

        self.escaping = escaping(self.plan)
        self._const = {}
        self._bodies: dict = {}  # a loop's item -> the runner of its body's program
        self._lock = threading.Lock()
        has_mm = any(isinstance(getattr(it, "src", None), MatmulSource) for it in program.items)
        self.blas = program.blas() if has_mm else None
        if self.blas is not None and self.blas.lib:
            program.notes.append(f"matmul: cuBLAS through {self.blas.lib} (same dtypes, float)")

    # -- public entry points
    def _session(self):
        # the simulator, not the profile, decides: a program emitted for a GPU's profile still
        # runs on the simulator when it is active, and needs its shared-memory lock there
        sim = self.profile.simulator or simulator_active()
        return _simulator_session() if sim else contextlib.nullcontext()

    def fn(self, inputs, outs, pool):
        with self._session():
            return self._fn(inputs, outs, pool)

    def _fn(self, inputs, outs, pool):
        """NumPy in, NumPy out (the CPU runner's calling convention)."""
        ctx = _Call(self, pool, device_mode=False, outs=outs)
        env = self._run(ctx, inputs)
        results = self._results_host(ctx, env, outs)
        guards = [self._host_value(env[gd.var]) for gd in self.graph.guards]
        self.stream.synchronize()
        return results, guards

    def call(self, compiled, args, out):
        """``Compiled.__call__`` for the cuda target."""
        with self._session():
            return self._call(compiled, args, out)

    def _call(self, compiled, args, out):
        traced, g = compiled.traced, self.graph
        values, kinds = self._flatten(traced, args)
        if g.guards:
            check_layout_guards(g, values)
        inputs = values + [g.constants[v] for v, s in zip(g.inputs, g.specs) if s.kind == "const"]
        outs = _normalise_out(out, g.n_results, g.outputs)
        device_mode = bool(kinds) or any(o is not None and is_device_array(o) for o in outs or [])
        dev_inputs = [v for v in values if _is_dev(v)]
        # kernels writing into an out= buffer that is also an input would read what they have
        # already overwritten: compute into fresh buffers, then copy
        aliased = outs is not None and any(
            _overlap(_to_numba(o), v) for o in outs if _is_dev(o) for v in dev_inputs
        )
        ctx = _Call(self, compiled._pool(), device_mode, None if aliased else outs)
        env = self._run_guarded(ctx, inputs)
        if g.guards:
            gv = {gd.var: self._host_value(env[gd.var]) for gd in g.guards}
            check_guards(g, gv)
        if device_mode and g.writebacks:  # a result that is an input must not see the write
            for o in g.outputs[: g.n_results]:
                r = env[o]
                if _is_dev(r) and any(_overlap(r, v) for v in dev_inputs):
                    env[o] = self._device_copy(r)
        self._writebacks(ctx, env, values)
        if outs is not None:
            self._results_into(ctx, env, outs)
            return out
        if device_mode:
            kind, like = kinds[0]
            results = []
            for o in g.outputs[: g.n_results]:
                r = env[o]
                if o.weak or not _is_dev(r):
                    results.append(self._host_value(r) if o.weak else r)
                    continue
                results.append(_from_numba(_unpad(r, o), kind, like))
        else:
            results = self._results_host(ctx, env, None)
            self.stream.synchronize()
            results = [r[()] if isinstance(r, np.ndarray) and r.ndim == 0 else r for r in results]
        return pytree.unflatten(traced.out_tree, results)

    # -- arguments
    def _flatten(self, traced, args):
        """Like ``Traced.flatten_args``, with device arrays as leaves (converted to numba)."""
        kinds = []
        extra = device_array_types(args)
        leaves, tree = pytree.flatten(list(args), extra_types=extra)
        diff = pytree.describe_difference(traced.in_tree, tree, names=parameter_names(traced.fn))
        if diff:
            raise TypeError(f"{traced.graph.name}: arguments differ from the trace: {diff}")
        g, values = self.graph, []
        for var, spec, leaf in zip(g.inputs, g.specs, leaves):
            if is_device_array(leaf):
                kinds.append((_kind(leaf), leaf))
                leaf = _to_numba(leaf)
            check_value(var, leaf, f"argument {spec.label!r}")
            values.append(leaf)
        for var, spec, get in zip(g.inputs, g.specs, traced.capture_getters):
            if spec.kind == "capture":
                value = get()
                if is_device_array(value):
                    value = _to_numba(value)
                check_value(var, value, f"captured array {spec.label}")
                values.append(value)
        return values, kinds

    def _input(self, ctx, i, var, value):
        if var.weak:
            return as_input_value(var, value)
        if _is_dev(value):
            if value.is_c_contiguous():
                return value.reshape(_dshape(var)) if value.shape != _dshape(var) else value
            buf = ctx.temp(("in", i), _dshape(var), var.dtype)
            copy = copy_kernel(len(value.shape))
            ew = self.profile
            copy[ew.ew_blocks(var.size), ew.ew_threads, self.stream](
                value, buf.reshape(value.shape) if value.shape else buf
            )
            return buf
        spec = self.graph.specs[i]
        if spec.kind == "const":
            with self._lock:
                d = self._const.get(i)
                if d is None:
                    from numba import cuda

                    d = self._const[i] = cuda.device_array(_dshape(var), var.dtype)
                    self._copy_in(d, value, var)
            return d
        buf = ctx.temp(("in", i), _dshape(var), var.dtype)
        self._copy_in(buf, value, var)
        return buf

    def _copy_in(self, buf, value, var):
        """Host ``value`` into device ``buf``, flat: strides of unit dimensions (which NumPy
        leaves free) must not make the copy see a broadcast."""
        host = np.ascontiguousarray(value, dtype=var.dtype).reshape(-1)
        if host.size:
            buf.reshape(host.size).copy_to_device(host, stream=self.stream)

    # -- running
    def _run_guarded(self, ctx, inputs, where: str = "") -> dict:
        """:meth:`_run`, whose error becomes a failed guard's where one fails on these inputs
        (see :func:`~tracekit.interpret.raise_failed_guard`)."""
        try:
            return self._run(ctx, inputs)
        except GuardError:
            raise
        except Exception as error:
            g = self.graph
            if g.guards:
                self.stream.synchronize()
                host = [x.copy_to_host(stream=self.stream) if _is_dev(x) else x for x in inputs]
                self.stream.synchronize()
                nodes = body_at(g, ctx.k) if any(moves(n.attrs) for n in g.nodes) else None
                raise_failed_guard(g, input_env(g, host), error, where, nodes)
            raise

    def _run(self, ctx, inputs) -> dict:
        g = self.graph
        env = {}
        for i, (var, value) in enumerate(zip(g.inputs, inputs)):
            env[var] = self._input(ctx, i, var, value)
        for item in self.program.items:
            try:
                getattr(self, f"_do_{item.kind}")(ctx, env, item)
            except Exception as e:
                if not getattr(e, "__notes__", None):
                    nodes = ", ".join(f"{n.op} -> %{n.out.name}" for n in item.step.nodes[:6])
                    nodes += ", ..." if len(item.step.nodes) > 6 else ""
                    src = item.step.nodes[0].source
                    where = f" (from {src} `{src.text}`)" if src else ""
                    e.add_note(f"while running {item.step.name} on the device: {nodes}{where}")
                raise
        return env

    def _operand(self, ctx, env, a: Arg, item):
        if a is None:
            return 0
        if a.kind == "scratch":
            return ctx.temp(("s", item.step.name, a.key), a.shape, a.dtype)
        if a.kind == "offset":  # a loop body's index at this iteration
            return a.moving[0] + ctx.k * a.moving[1]
        val = env[a.var]
        if a.shape is None:
            return self._host_value(val) if _is_dev(val) else val
        if not _is_dev(val):  # a weak value (Python scalar) read as an array
            val = ctx.upload(np.asarray(val, a.var.dtype))
        return val.reshape(a.shape) if tuple(val.shape) != tuple(a.shape) else val

    def _launch(self, ctx, env, item):
        for la in item.launches:
            args = [self._operand(ctx, env, a, item) for a in la.args]
            kern = getattr(self.module, la.kernel)
            kern[la.grid, la.block, self.stream](*args)

    def _do_kernel(self, ctx, env, item):
        for v in item.step.outputs:
            env[v] = ctx.alloc(v)
        if (
            self.blas is not None
            and isinstance(item.src, MatmulSource)
            and item.src.epilogue is None  # a fused epilogue: the kernel's own work
        ):
            la = item.launches[0]
            a, b, c = (self._operand(ctx, env, x, item) for x in la.args)
            if self.blas.matmul(a, b, c, self.stream):
                return
        self._launch(ctx, env, item)

    def _do_update(self, ctx, env, item):
        node = item.step.nodes[0]
        x = node.inputs[0]
        out = env[node.out] = ctx.alloc(node.out)
        out.copy_to_device(env[x], stream=self.stream)
        self._launch(ctx, env, item)

    def _do_alias(self, ctx, env, item):
        node = item.step.nodes[0]
        src = env[node.inputs[0]]
        flat = src.reshape(max(node.inputs[0].size, 1))
        size = max(node.out.size, 1)
        at = item.offset + ctx.k * item.offset_step  # a loop body's index moving with it
        view = flat[at : at + size] if (at or size != flat.size) else flat
        env[node.out] = view.reshape(_dshape(node.out))

    def _do_loop(self, ctx, env, item):
        """Run a loop's body program once per iteration on device values; the body's results
        go to one of two pools by the iteration's parity (the state of the iteration before
        is read while the next is written)."""
        node, g = item.node, item.body.plan.graph
        runner = self._bodies.get(id(item))
        if runner is None:
            runner = self._bodies[id(item)] = CudaRunner(item.body, stream=self.stream)
        pools = ctx.pool.setdefault(("loop", item.step.name), ({}, {}))
        weak = [i for i, o in enumerate(g.outputs) if o.weak]
        cond = node.attrs.get("cond")

        def run_body(values, k):
            call = _Call(runner, pools[k % 2], True, None)
            call.k = k
            body_env = runner._run_guarded(call, values, in_iteration(g, k))
            if g.guards:
                seen = {gd.var: self._host_value(body_env[gd.var]) for gd in g.guards}
                check_guards(g, seen, in_iteration(g, k))
            outs = [body_env[o] for o in g.outputs]
            for i in weak + ([cond] if cond is not None else []):
                outs[i] = self._host_value(outs[i])
            return outs

        values = [env[x] if isinstance(x, Var) else x for x in node.inputs]
        plain = len(node.outputs) - node.attrs.get("stacked", 0)
        rows = [ctx.alloc(v) for v in node.outputs[plain:]]  # one row per iteration, on the device
        row_of = {id(buf): v for buf, v in zip(rows, g.outputs[plain:])}

        def set_row(buf, k, value):  # rows of one element: a slice (an index gives a number)
            self._copy_device(buf[k] if buf.ndim > 1 else buf[k : k + 1], value, row_of[id(buf)])

        results = iterate(values, node.attrs, run_body, rows, set_row)
        for v, r in zip(node.outputs[:plain], results):  # out of the loop's pools, the call's
            if v.weak:
                env[v] = r
                continue
            env[v] = ctx.alloc(v)
            self._copy_device(env[v], r, v)
        env.update(zip(node.outputs[plain:], rows))

    def _do_host(self, ctx, env, item):
        local = {}

        def get(x):
            if not isinstance(x, Var):
                return x
            if x in local:
                return local[x]
            v = env[x]
            if _is_dev(v):
                self.stream.synchronize()
                v = v.copy_to_host(stream=self.stream).reshape(x.shape)
                self.stream.synchronize()
            local[x] = v
            return v

        for node in item.nodes:
            args = [get(x) for x in node.inputs]
            attrs = at_iteration(node.attrs, ctx.k) if moves(node.attrs) else node.attrs
            try:
                res = OPS[node.op].impl(*args, **attrs)
                if OPS[node.op].kind == "opaque":  # device code after it assumes the traced types
                    res = check_results(node, res)
            except Exception as e:
                where = f" at {node.source} `{node.source.text}`" if node.source else ""
                e.add_note(f"while running {node.op} (node %{node.out.name}){where}")
                raise
            outs = node.outputs
            res = (res,) if len(outs) == 1 else tuple(res)
            for var, val in zip(outs, res):
                local[var] = np.asarray(val).item() if var.weak else val
        for v in item.step.outputs:
            val = local[v]
            if v.weak:
                env[v] = val
                continue
            buf = ctx.alloc(v)
            self._copy_in(buf, val, v)
            env[v] = buf

    # -- results
    def _host_value(self, val):
        if not _is_dev(val):
            return val
        self.stream.synchronize()
        host = val.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return host.reshape(-1)[0].item() if host.size == 1 else host

    def _results_host(self, ctx, env, outs):
        g = self.graph
        results = []
        for i, o in enumerate(g.outputs):
            r = env[o]
            if o.weak:
                results.append(self._host_value(r) if _is_dev(r) else r)
                continue
            if not _is_dev(r):
                results.append(np.asarray(r))
                continue
            buf = outs[i] if outs is not None and i < len(outs) else None
            if (
                isinstance(buf, np.ndarray)
                and buf.flags.c_contiguous
                and buf.shape == o.shape
                and buf.dtype == o.dtype
            ):
                if buf.size:
                    r.reshape(buf.size).copy_to_host(buf.reshape(-1), stream=self.stream)
                results.append(buf)
            else:
                results.append(r.copy_to_host(stream=self.stream).reshape(o.shape))
        return results

    def _results_into(self, ctx, env, outs):
        g = self.graph
        for buf, o in zip(outs, g.outputs):
            r = env[o]
            if r is buf:
                continue
            if isinstance(buf, np.ndarray):
                if _is_dev(r):
                    self.stream.synchronize()
                    host = r.copy_to_host(stream=self.stream)
                    self.stream.synchronize()
                else:
                    host = np.asarray(r)
                np.copyto(buf, host.reshape(o.shape))
            else:
                self._copy_device(_to_numba(buf), r, o)
        self.stream.synchronize()

    def _copy_device(self, dst, src, var):
        if not _is_dev(src):
            src = self._upload(np.asarray(src, var.dtype))
        if dst is src:
            return
        if dst.is_c_contiguous() and tuple(dst.shape) == _dshape(var):
            dst.copy_to_device(src.reshape(_dshape(var)), stream=self.stream)
            return
        shape = var.shape or (1,)
        k = copy_kernel(len(shape))
        P = self.profile
        k[P.ew_blocks(var.size), P.ew_threads, self.stream](src.reshape(shape), dst.reshape(shape))

    def _device_copy(self, d):
        from numba import cuda

        out = cuda.device_array(d.shape, d.dtype, stream=self.stream)
        if d.is_c_contiguous():
            out.copy_to_device(d, stream=self.stream)
        else:
            P = self.profile
            copy_kernel(len(d.shape))[P.ew_blocks(d.size), P.ew_threads, self.stream](d, out)
        return out

    def _upload(self, host):
        from numba import cuda

        return cuda.to_device(np.ascontiguousarray(host), stream=self.stream)

    def _writebacks(self, ctx, env, values):
        g = self.graph
        for oi, ii in g.writebacks:
            target, var = values[ii], g.outputs[oi]
            src = env[var]
            if _is_dev(target):
                self._copy_device(target, src, var)
                continue
            if not isinstance(target, np.ndarray) or not target.flags.writeable:
                raise ValueError(
                    f"the traced function writes into {g.specs[ii].label!r}, "
                    "which is not a writeable NumPy or device array here"
                )
            self.stream.synchronize()
            host = src.copy_to_host(stream=self.stream) if _is_dev(src) else np.asarray(src)
            self.stream.synchronize()
            np.copyto(target, host.reshape(var.shape))


class _Call:
    """Per-call state: the pool, whether results stay on the device, the out= buffers."""

    def __init__(self, runner: CudaRunner, pool: dict, device_mode: bool, outs):
        self.runner, self.pool, self.device_mode = runner, pool, device_mode
        self.outs = outs
        self.k = 0  # the iteration of the loop whose body this call runs
        self.result_pos = {}
        g = runner.graph
        for i, v in enumerate(g.outputs[: g.n_results]):
            self.result_pos.setdefault(v, i)

    def temp(self, key, shape, dtype):
        from numba import cuda

        shape, dtype = tuple(shape), np.dtype(dtype)
        buf = self.pool.get(key)
        if buf is None or buf.shape != shape or buf.dtype != dtype:
            buf = self.pool[key] = cuda.device_array(shape, dtype, stream=self.runner.stream)
        return buf

    def upload(self, host):
        return self.runner._upload(host)

    def alloc(self, v: Var):
        from numba import cuda

        if self.outs is not None and v in self.result_pos:
            buf = self.outs[self.result_pos[v]]
            if buf is not None and is_device_array(buf):
                d = _to_numba(buf)
                if d.is_c_contiguous() and tuple(d.shape) == v.shape and d.dtype == v.dtype:
                    return d.reshape(_dshape(v)) if not v.shape else d
        if self.device_mode and v in self.runner.escaping:
            return cuda.device_array(_dshape(v), v.dtype, stream=self.runner.stream)
        return self.temp(("v", v.name), _dshape(v), v.dtype)


_sim_lock = threading.RLock()


@contextlib.contextmanager
def _simulator_session():
    """One call at a time on the simulator, with a short GIL switch interval.

    The simulator runs a block's threads as Python threads that meet at every syncthreads;
    with the default 5 ms switch interval each meeting costs milliseconds. And it swaps the
    ``cuda`` name of a kernel's module for a fake while the kernel runs, so two launches from
    two threads at once break each other (a real GPU has neither problem)."""
    _make_simulated_shared_memory_thread_safe()
    with _sim_lock:
        old = sys.getswitchinterval()
        sys.setswitchinterval(min(old, 5e-5))
        try:
            yield
        finally:
            sys.setswitchinterval(old)


_shared_lock = threading.Lock()


def _make_simulated_shared_memory_thread_safe():
    """The simulator's ``cuda.shared.array`` looks the calling line up in a dict and, on a
    miss, stores a new array: two threads of a block missing at once each keep their own
    array, and the block no longer shares memory (results then depend on thread timing).
    Replace it, once, by the same lookup under a lock (keyed the same way, by file and line)."""
    from numba.cuda.simulator import kernelapi

    shared = kernelapi.FakeCUDAShared
    if getattr(shared.array, "_tracekit_locked", False):
        return

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:  # dynamic shared memory: no lookup
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with _shared_lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    original = shared.array
    array._tracekit_locked = True
    shared.array = array


def _extent(d) -> tuple | None:
    """(first byte, last byte + 1) a device array can touch, from its array interface."""
    cai = getattr(d, "__cuda_array_interface__", None)
    if cai is None:
        return None
    ptr, item = cai["data"][0], np.dtype(cai["typestr"]).itemsize
    shape = cai["shape"]
    strides = cai.get("strides")
    if strides is None:
        strides, acc = [], item
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = list(reversed(strides))
    if any(n == 0 for n in shape):
        return (ptr, ptr)
    lo = ptr + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = ptr + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + item
    return lo, hi


def _overlap(a, b) -> bool:
    """Whether two device arrays may share memory."""
    ha, hb = getattr(a, "_ary", None), getattr(b, "_ary", None)
    if ha is not None and hb is not None:  # the simulator: NumPy underneath
        return bool(np.may_share_memory(ha, hb))
    ea, eb = _extent(a), _extent(b)
    if ea is None or eb is None:
        return False
    return ea[0] < eb[1] and eb[0] < ea[1]


def _is_dev(x) -> bool:
    return is_device_array(x) and not isinstance(x, np.ndarray)


def _unpad(d, var: Var):
    if var.shape:
        return d
    try:
        return d.reshape(())
    except Exception:
        return d


def _normalise_out(out, n, results=None):
    if out is None:
        return None
    outs = list(out) if isinstance(out, tuple | list) else [out]
    if len(outs) != n:
        raise ValueError(f"out= needs {n} array(s), got {len(outs)}")
    for o in outs:
        if is_device_array(o) and not isinstance(o, np.ndarray):
            continue
        if not isinstance(o, np.ndarray) or not o.flags.writeable:
            raise TypeError("out= takes writeable NumPy arrays or device arrays")

    check_out_types([_to_numba(o) if _is_dev(o) else o for o in outs], results)  # numpy dtypes
    return outs


def device_info() -> dict:
    """What the CUDA target runs on (the simulator or a GPU's name and properties)."""
    require_cuda()
    p = Profile.current()
    return {k: getattr(p, k) for k in ("simulator", "name", "sm_count", "max_threads", "cc")}


__all__ = [
    "CudaProgram",
    "CudaRunner",
    "CudaUnavailableError",
    "CudaCompileError",
    "simulator_active",
    "require_cuda",
    "device_info",
    "is_device_array",
]
