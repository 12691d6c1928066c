"""Compilation targets. ``compile(traced, target="cpu"|"cuda")`` -> :class:`Compiled`.

The pipeline, shared by every target: optimise the graph (``tracekit.passes``), lower it
(``lowering``), plan fusion (``planner``), emit and compile kernels (``cpu`` / ``cuda``), and
run them through a generated runner.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from .. import pytree
from ..errors import GuardError
from ..interpret import input_env, raise_failed_guard
from ..ops import OPS
from ..passes import cse, dce, optimize
from ..pyop import run_workspace, uses_workspace
from ..saving import as_traced
from ..traced import Traced, check_guards, check_layout_guards
from .control import unroll_small_loops
from .lowering import lower
from .offsets import fuse_at_offsets
from .pads import pads_of_blocks, read_pads_in_place
from .planner import blas_out
from .planner import plan as make_plan
from .runtime import check_out_types, chunk_kernels, fit_threads, thread_mode
from .tiles import tile_producers

TARGETS = ("cpu", "cuda", "dask")
MATH = ("fast", "libm")


@dataclass
class Kernel:
    """One fused kernel: its name, kind, the graph nodes it covers, and its source."""

    name: str
    kind: str
    nodes: list
    source: str
    layer: str = ""  # target dask: what the kernel became in the last call's dask graph

    def __repr__(self):
        return f"Kernel({self.name}, {self.kind}, {len(self.nodes)} nodes)"


class Compiled:
    """A traced graph compiled for a target; call it like the traced function.

    ``kernels`` lists the fused kernels, ``source`` is the generated numba source (with the
    covered graph nodes as comments), ``plan`` the fusion decisions and refusals.

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: np.tanh(x) * 2 + 1, np.ones(1000, np.float32))
    >>> c = tk.compile(t, target="cpu", progress=False)
    >>> len(c.kernels), float(c(np.zeros(1000, np.float32))[0])
    (1, 1.0)
    """

    tier = "compiled"  # what ``tk.jit`` reports for a call this answers

    def __init__(
        self, traced: Traced, target="cpu", math="fast", progress=None, cache=True, stream=None
    ):
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; choose one of {TARGETS}")
        if math not in MATH:
            raise ValueError(f"unknown math {math!r}; choose 'fast' (vectorised) or 'libm'")
        self.traced, self.target, self.math = traced, target, math
        if getattr(traced.graph, "from_json_unchecked", False):
            from ..ir import check_types  # generated code trusts every recorded shape

            check_types(traced.graph)
        opt = optimize(traced.with_graph(unroll_small_loops(traced.graph)))
        self.history = opt.history
        # lowering spells composite ops (mean, var, ...) in primitives: the same primitives
        # again (a var's own mean beside the user's mean) are merged, then dropped
        self.graph = g = dce(cse(lower(opt.graph))).check()
        offsets = []
        if target == "cpu":  # blocks written into zeros (a slice's gradient) as pads (pads.py)
            g = pads_of_blocks(g)
        if target in ("cpu", "cuda"):  # kernels read slices in place (windows.py): fuse across
            self.graph, offsets = fuse_at_offsets(g, through_pads=target == "cpu")
            g = self.graph
        self.plan = make_plan(self.graph)
        self.plan.offsets = offsets
        if target == "cpu":  # producers kept as arrays: computed in tiles where that pays
            read_pads_in_place(self.plan)  # (first: tiles read through the pads it keeps)
            tile_producers(self.plan)
        report = _progress_reporter(progress, f"{traced.graph.name} ({target})")
        self._fast = _fast_signature(traced)
        self._detach = _results_may_alias(self.plan)
        plain = self._fast is not None and not self._detach  # what the fast path needs
        if target == "cpu":
            from .cpu import RUNTIME, CpuProgram, Runner, whole_graph_source

            if stream is not None:
                raise ValueError("stream= applies to target='cuda' only")

            chunked, pool = chunk_kernels(), thread_mode() == "pool"
            self.program = CpuProgram(
                self.plan, math, disk=cache, chunked=chunked, pool=pool, far_apart=True
            )
            whole = whole_graph_source(self.plan, self.program) if plain else None
            if whole:
                self.program.source += "\n\n" + whole
            self.program.load(disk=cache, progress=report)
            statics = [(v,) if k is STATIC else None for k, v in self._fast] if plain else None
            self.runner = Runner(self.plan, self.program, statics, whole=bool(whole))
            self.runner.ns.update(RUNTIME)
        elif target == "dask":
            from .dask import DaskProgram

            if stream is not None:
                raise ValueError("stream= applies to target='cuda' only")
            self.program = DaskProgram(self.plan, math, cache, compile)
            self.runner = None
        else:
            from .cuda import CudaProgram

            self.program = CudaProgram(self.plan, math)
            self.program.load(disk=cache, progress=report)
            self.runner = self.program.runner(stream=stream)
        self._pools = threading.local()
        self._statics = self._fast if any(k is STATIC for k, _ in self._fast or ()) else None
        self._workspace = uses_workspace(self.graph)  # python ops reading the run's workspace
        if (not plain or self._workspace) and target == "cpu":
            self.runner.fast = None  # the generated fast path returns one fresh plain result
        self._fits = target == "cpu" and self.runner.threads  # (numba's thread count)
        self._quick = self._quick_call() if target == "cpu" and not self._workspace else None
        self._consts = [g.constants[v] for v, s in zip(g.inputs, g.specs) if s.kind == "const"]
        self.kernels = [
            Kernel(ks.group.name, ks.group.kind, _kernel_nodes(ks), ks.text)
            for ks in getattr(self.program, "kernel_sources", {}).values()
        ]
        if target == "dask":  # the plan's kernels; each call says what they became
            self.kernels = [
                Kernel(st.name, st.group.kind, list(st.nodes), "") for st in self.plan.kernels
            ]

    @property
    def source(self) -> str:
        """The generated numba source of every kernel, with the graph nodes each covers as
        comments.

        >>> import numpy as np, tracekit as tk
        >>> t = tk.trace(lambda x: np.tanh(x) * 2 + 1, np.ones(1000, np.float32))
        >>> c = tk.compile(t, target="cpu", progress=False)
        >>> for line in c.source.splitlines():
        ...     if "# %" in line:
        ...         print(line.strip())
        # %0: f32[1000] = tanh(%x)  # ...
        # %1: f32[1000] = multiply(%0, 2)  # ...
        # %2: f32[1000] = add(%1, 1)  # ...
        """
        return self.program.source

    def _quick_call(self):
        """``quick(args)``: the result of a call without ``out=`` on plain arrays (and the
        traced static values) through the generated fast path; None where that does not
        apply (the general path then checks the arguments and says what is wrong)."""
        pools, make_pool = self._pools, self._pool
        fast = self.runner.quick
        if fast is not None and self.runner.quick_whole:
            return fast  # (whole_graph's: it fits the threads where it needs to)
        if fast is None:  # arrays only: the fast path takes them as they are, no out=
            plain = self.runner.fast
            if plain is None or self._statics is not None:
                return None
            fast = lambda args, pool: plain(args, None, pool)  # noqa: E731
        fits = self._fits

        def quick(args):
            if fits:
                fit_threads()
            try:
                pool = pools.pool
            except AttributeError:
                pool = make_pool()
            result = fast(args, pool)
            if result is None:
                return None
            return result[()] if getattr(result, "ndim", None) == 0 else result

        return quick

    def _pool(self) -> dict:
        pool = getattr(self._pools, "pool", None)
        if pool is None:
            pool = self._pools.pool = {}
        return pool

    def _arguments(self, args) -> list:
        """Checked input values; a fast path for plain arrays of the traced shapes and dtypes."""
        fast = self._fast
        if fast is not None and len(args) == len(fast):
            for a, (shape, dtype) in zip(args, fast):
                if shape is STATIC:
                    if type(a) is not type(dtype) or a != dtype:
                        break
                elif type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
                    break
            else:  # the statics matched above: the arrays are the rest
                arrays = (
                    args
                    if self._statics is None
                    else [a for a, (shape, _) in zip(args, fast) if shape is not STATIC]
                )
                return list(arrays) + self.traced.capture_values()
        return self.traced.flatten_args(args)

    def __call__(self, *args, out=None):
        """Run the compiled kernels on arguments of the traced shapes and dtypes.

        ``out`` (an array, or a tuple of arrays for several results) receives the results
        instead of new arrays, and is returned.

        >>> import numpy as np, tracekit as tk
        >>> t = tk.trace(lambda x: np.tanh(x) * 2 + 1, np.ones(1000, np.float32))
        >>> c = tk.compile(t, target="cpu", progress=False)
        >>> out = np.empty(1000, np.float32)
        >>> c(np.zeros(1000, np.float32), out=out) is out, out[:3]
        (True, array([1., 1., 1.], dtype=float32))
        """
        if out is None and self._quick is not None:
            result = self._quick(args)
            if result is not None:
                return result
        if self._fits:
            fit_threads()
        if self.target == "cuda":  # device arrays in/out, streams: the cuda runner's own path
            if self._workspace:  # (its inputs stay on the device: the workspace has none)
                with run_workspace(self.graph, []):
                    return self.runner.call(self, args, out)
            return self.runner.call(self, args, out)
        if self.target == "dask":
            return self._dask_call(args, out)
        fast = self.runner.fast
        outs = None
        if fast is not None and out is not None:
            outs = self._plain_out(out, args)
            if outs is None:
                fast = None  # out= that needs the general path's checks (or shares memory)
        if fast is not None and self._statics is not None:  # f(x, steps): the arrays only
            arrays = _arrays_of(args, self._statics) if len(args) == len(self._statics) else None
            fast = None if arrays is None else fast
        else:
            arrays = args
        if fast is not None:
            try:
                pool = self._pools.pool
            except AttributeError:
                pool = self._pool()
            result = fast(arrays, outs, pool)
            if result is not None:
                if out is not None:
                    if result is not outs[0]:
                        np.copyto(outs[0], result)
                    return out
                return result[()] if result.ndim == 0 else result
        values = self._arguments(args)
        g = self.graph
        if g.guards:
            check_layout_guards(g, values)
        inputs = values + self._consts if self._consts else values
        outs = _normalise_out(out, g.n_results, g.outputs) if out is not None else None
        # kernels writing into an out= buffer that is also an input would read what they have
        # already overwritten: compute into fresh buffers, then copy
        run_outs = None if outs is not None and _overlaps(outs, values) else outs
        try:
            if self._workspace:
                with run_workspace(g, values):
                    results, guard_values = self.runner.fn(inputs, run_outs, self._pool())
            else:
                results, guard_values = self.runner.fn(inputs, run_outs, self._pool())
        except GuardError:
            raise
        except Exception as error:
            raise_failed_guard(g, input_env(g, inputs), error)
            raise
        if g.guards:
            check_guards(g, dict(zip([gd.var for gd in g.guards], guard_values)))
        if outs is not None:
            for buf, r in zip(outs, results):
                if buf is not r:
                    np.copyto(buf, r)
            self.traced.finish_call(inputs, list(outs) + results[g.n_results :])
            return out
        results = [r[()] if getattr(r, "ndim", 1) == 0 else r for r in results]
        if self._fast is not None and not g.writebacks and len(results) == 1 and not self._detach:
            return results[0]
        return self.traced.finish_call(inputs, results)  # (constants: results may be them)

    def _dask_call(self, args, out):
        """Dask arrays for the results, computing nothing (see :mod:`.dask`)."""
        if out is not None:
            raise TypeError("out= is not supported with target='dask' (dask arrays are immutable)")
        values = self.traced.flatten_args(args)
        g = self.graph
        if self.program.guarded:  # (in loop bodies too: each iteration would compute)
            raise TypeError(
                "this function's trace baked in values read from its data (guards); on dask "
                "arrays they cannot be checked without computing: use np.where instead"
            )
        results = self.program.run(values + self._consts)
        for k in self.kernels:
            k.layer = self.program.became.get(k.name, "")
        returned = set(map(id, results[: g.n_results]))
        for oi, ii in g.writebacks:
            if id(results[oi]) not in returned:
                raise ValueError(
                    f"the traced function writes into its argument {g.specs[ii].label!r} and "
                    "does not return it: dask arrays are immutable, so the write would be lost; "
                    "return the written array"
                )
        results = results[: g.n_results]
        return pytree.unflatten(self.traced.out_tree, results)

    @property
    def dask_layers(self) -> list:
        """For ``target='dask'``: what each plan step became in the last call's dask graph.

        >>> import numpy as np, dask.array as da, tracekit as tk
        >>> f = tk.jit(lambda x: np.exp(x).sum())
        >>> s = f(da.ones((8, 4), chunks=(2, 4)))
        >>> for layer in f.compiled.dask_layers:
        ...     print(layer)
        k0: %1 tree reduction, compiled chunk step (axis 0 of %x spans 4 chunks)
        15 tasks in the results' graph (their inputs' included)
        >>> round(float(s.compute()), 4)  # 32 e
        86.985
        """
        return list(getattr(self.program, "layers", []))

    def _plain_out(self, out, args):
        """``[out]`` when ``out`` is a writeable array of the one result's own shape and dtype
        and the arguments are arrays it does not overlap; else None."""
        v = self.graph.outputs[0]
        if type(out) is not np.ndarray or out.shape != v.shape or out.dtype != v.dtype:
            return None
        flags = out.flags
        if not (flags.writeable and flags.c_contiguous):
            return None
        for a in args:
            if type(a) is not np.ndarray or np.may_share_memory(out, a):
                return None
        return [out]

    def __repr__(self):
        return f"Compiled({self.graph.name}, target={self.target!r}, {len(self.kernels)} kernels)"

    def _repr_mimebundle_(self, include=None, exclude=None):
        from ..render import mimebundle

        return mimebundle(self)


def _fast_signature(traced):
    """Per argument, (shape, dtype) of an array or ``(STATIC, value)`` of a static number,
    string or None (``f(x, steps)``), when the arguments are a flat list of those; else
    None."""
    g = traced.graph
    args = [v for v, s in zip(g.inputs, g.specs) if s.kind == "arg"]
    items = traced.in_tree[1] if traced.in_tree[0] is list else None
    if items is None or any(v.weak for v in args) or not isinstance(traced.out_tree, pytree.Leaf):
        return None
    arrays = iter(args)
    out = []
    for t in items:
        if isinstance(t, pytree.Leaf):
            v = next(arrays, None)
            if v is None:
                return None
            out.append((v.shape, v.dtype))
        elif t[0] == "static" and type(t[1]) in _SIMPLE_STATICS:
            out.append((STATIC, t[1]))
        else:
            return None
    return out if next(arrays, None) is None else None


STATIC = object()  # marks a static argument in a fast signature
_SIMPLE_STATICS = (int, bool, str, type(None))


def _arrays_of(args, fast):
    """The array arguments of a call matching ``fast``'s statics exactly, or None."""
    arrays = []
    for a, (kind, value) in zip(args, fast):
        if kind is STATIC:
            if type(a) is not type(value) or a != value:
                return None
        else:
            arrays.append(a)
    return arrays


def _results_may_alias(plan) -> bool:
    """Whether a result can share memory with an input or another result: the runner passes
    inputs, views and most host calls' results through as they are."""
    g = plan.graph
    passed = set(g.inputs)
    base = {}  # a view's result -> the array it views (a kernel's result: fresh memory)
    for step in plan.steps:
        node = step.nodes[0]
        if OPS[node.op].kind == "control":  # a loop gives fresh arrays unless its body passes
            if _passes_through(node.attrs["body"]):  # an input (or a view of one) on
                passed.update(step.outputs)
        elif step.kind == "view" and len(step.inputs) == 1 and step.inputs[0] not in passed:
            base.update((o, base.get(step.inputs[0], step.inputs[0])) for o in step.outputs)
        elif step.kind == "view" or (step.kind == "host" and not blas_out(node)):
            passed.update(step.outputs)
    res = [base.get(o, o) for o in g.outputs[: g.n_results]]
    return len(set(res)) < len(res) or any(o in passed for o in res)


def _passes_through(body) -> bool:
    """Whether a loop body's results may be its inputs' arrays, or views of them."""
    passed = set(body.inputs)
    for n in body.nodes:
        if OPS[n.op].view or OPS[n.op].may_view or OPS[n.op].kind == "control":
            passed.update(n.outputs)
    return any(o in passed for o in body.outputs)


def _overlaps(out, args) -> bool:
    """Whether an ``out=`` array may share memory with an argument (or captured array)."""
    outs = out if isinstance(out, tuple | list) else (out,)
    leaves = pytree.flatten(list(args))[0]
    return any(
        isinstance(o, np.ndarray) and isinstance(a, np.ndarray) and np.may_share_memory(o, a)
        for o in outs
        for a in leaves
    )


def _normalise_out(out, n, results=None):
    if out is None:
        return None
    outs = list(out) if isinstance(out, tuple | list) else [out]
    if len(outs) != n:
        raise ValueError(f"out= needs {n} array(s), got {len(outs)}")
    for o in outs:
        if not isinstance(o, np.ndarray) or not o.flags.writeable:
            raise TypeError("out= takes writeable NumPy arrays")
    check_out_types(outs, results)
    return outs


def _kernel_nodes(ks) -> list:
    """The graph nodes a kernel source covers: its step's (a kernel computing others in tiles
    covers theirs too), or its group's (a gather, a matmul)."""
    step = getattr(ks, "step", None)
    return list(step.nodes if step is not None else ks.group.nodes)


def _progress_reporter(progress, what):
    """A callback showing kernels compiled / total once compiling takes over a second."""
    if progress is False:
        return None
    state = {"shown": False, "handle": None}

    def report(done, total, elapsed):
        if not state["shown"] and elapsed < 1.0 and done < total:
            return
        if not state["shown"] and elapsed < 1.0:
            return
        state["shown"] = True
        if _in_notebook():
            from IPython.display import HTML, display

            html = HTML(
                f"<progress value='{done}' max='{total}'></progress> "
                f"compiling {what}: {done}/{total} kernels, {elapsed:.1f} s"
            )
            if state["handle"] is None:
                state["handle"] = display(html, display_id=True)
            else:
                state["handle"].update(html)
        else:  # a terminal redraws one line; a log gets one line per report
            tty = getattr(sys.stderr, "isatty", lambda: False)()
            back = "\r" if tty else ""
            print(
                f"{back}compiling {what}: {done}/{total} kernels, {elapsed:.1f} s",
                end="\n" if done == total or not tty else "",
                file=sys.stderr,
                flush=True,
            )

    return report


def _in_notebook() -> bool:
    ip = sys.modules.get("IPython")
    if ip is None:
        return False
    shell = ip.get_ipython() if hasattr(ip, "get_ipython") else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def compile(  # noqa: A001
    traced, target: str = "cpu", math: str = "fast", progress=None, cache=True, stream=None
):
    """Compile a :class:`~tracekit.traced.Traced` for ``target``.

    ``math="fast"`` uses tracekit's vectorisable exp/log/tanh/... (stated ulp bounds);
    ``math="libm"`` calls numba's libm. ``progress=False`` silences the compile progress;
    ``cache=False`` skips the on-disk cache. ``stream=`` (cuda only) runs every call on that
    stream (numba, CuPy or torch stream, or a raw handle) instead of one made for it.
    """
    traced = as_traced(traced, "tk.compile")
    t0 = time.perf_counter()
    c = Compiled(traced, target, math, progress, cache, stream)
    c.compile_seconds = time.perf_counter() - t0
    return c
