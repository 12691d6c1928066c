"""The dask target: a planned graph lowered to a dask graph, with compiled kernels per chunk.

Called with ``dask.array.Array`` arguments (``tk.jit`` does this by itself for them), a
compiled function builds dask arrays and computes nothing. Each step of the fusion plan
(:mod:`.planner`) becomes dask work:

- a fused group whose reduced axes lie in one chunk (elementwise chains; softmax or layernorm
  over rows held whole in a chunk) is one ``blockwise`` layer per result: one task per output
  chunk, running tracekit's compiled CPU kernel of the group for that chunk's shape (compiled
  once per process and shape, from the disk cache where the workers share one);
- a fused group that reduces over axes split into several chunks is a dask tree reduction
  (``da.reduction``): its chunk step is the compiled kernel of the group up to the reduction,
  kept with the reduced axes, and combining and aggregating apply the same reduction;
- everything else (matmul, slicing, movement, what dask computes better by its own rules) runs
  as the op's NumPy function on dask arrays: dask.array's own implementation.

``Compiled.dask_layers`` (and ``print(compiled.plan)``) says, for the last call, which steps
became which dask layers and why.

>>> import numpy as np, dask.array as da, tracekit as tk
>>> f = tk.jit(lambda x: np.tanh(x) * 2 + 1)
>>> y = f(da.ones((8, 6), chunks=(4, 6)))
>>> type(y).__name__, y.numblocks, round(float(y.sum().compute()), 6)  # 48 * (2 tanh(1) + 1)
('Array', (2, 1), 121.113039)
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..ir import Graph, Node, Var
from ..ops import OPS
from ..pytree import is_dask_array
from .planner import Step
from .runtime import one_thread

LETTERS = "abcdefghijklmnopqrstuvwxyz"
CHUNK_LOCAL_KINDS = ("elementwise", "reduce")
TREE_COMBINES = {"add": np.sum, "multiply": np.prod, "max": np.max, "min": np.min}
TREE_COMBINES.update({"or": np.any, "and": np.all})


class DaskProgram:
    """Lowers the plan's steps to dask arrays, per call (the layers depend on the chunks)."""

    def __init__(self, plan, math_mode: str, cache: bool, compile_cpu):
        # compile_cpu: tk.compile (passed in: this module is below the one defining it)
        self.plan, self.math, self.cache, self.compile_cpu = plan, math_mode, cache, compile_cpu
        self.layers: list[str] = []
        self.became: dict = {}  # step name -> what it became in the last call
        self.producers = {o: n for n in plan.graph.nodes for o in n.outputs}
        self.guarded = guarded(plan.graph)

    def run(self, inputs: list) -> list:
        import dask.array as da

        g = self.plan.graph
        env: dict = {}
        for v, x in zip(g.inputs, inputs):
            env[v] = x if is_dask_array(x) or np.ndim(x) == 0 else da.asarray(x)
        self.became = {step.name: self._step(step, env) for step in self.plan.steps}
        layers = [f"{name}: {text}" for name, text in self.became.items()]
        results = [env[v] if isinstance(v, Var) else v for v in g.outputs]
        layers.append(f"{_tasks(results)} tasks in the results' graph (their inputs' included)")
        self.layers = self.plan.dask = layers
        return results

    # -- steps
    def _step(self, step: Step, env: dict) -> str:
        if step.kind == "kernel" and 0 not in step.group.shape:
            stencil = self._stencil(step, env)
            if stencil is not None:
                return stencil
            why = _not_chunk_local(step, env)
            if why is None:
                for v in step.outputs:
                    env[v] = self._blockwise(step, v, env)
                return f"blockwise, compiled per chunk ({_describe(step, env)})"
            if _tree_reducible(step):
                return f"{self._trees(step, env)} ({why})"
            rechunked = _rows_in_one_chunk(step, env)
            if rechunked is not None:
                local = {**env, **rechunked}
                if _not_chunk_local(step, local) is None:
                    for v in step.outputs:
                        env[v] = self._blockwise(step, v, local)
                    return (
                        f"rechunked to hold axes {list(step.group.axes)} in one "
                        f"chunk ({why}), then blockwise, compiled per chunk"
                    )
            whole = self._own(step.nodes, env)
            return f"dask's own ops ({why}){whole}"
        whole = self._own(step.nodes, env)
        return f"dask's own{whole}"

    def _stencil(self, step: Step, env: dict) -> str | None:
        """An elementwise group reading one array at constant offsets (``a[1:-1, 2:] +
        a[1:-1, :-2]``) as one task per chunk of that array, over the chunk and a halo of the
        depth the offsets need from its neighbours (dask's ``overlap``); None where the
        group is not such a stencil."""
        import dask.array as da

        found = _offsets(step, self.producers, env)
        if found is None:
            return None
        base, windows = found
        x = env[base]
        shape = step.group.shape
        lo = [min(w[1][d][0] for w in windows) for d in range(len(shape))]
        depth = {d: max(w[1][d][0] for w in windows) - lo[d] for d in range(len(shape))}
        depth = {d: (h if len(x.chunks[d]) > 1 else 0) for d, h in depth.items()}
        if any(h > min(x.chunks[d]) for d, h in depth.items()):
            return None  # a halo deeper than a chunk: dask would need rechunking first
        out_chunks = [_anchored(c, lo[d], shape[d]) for d, c in enumerate(x.chunks)]
        shifts = [[w[1][d][0] - lo[d] for d in range(len(shape))] for w in windows]
        ins = [w[0] for w in windows]
        halo = da.overlap.overlap(x, depth=depth, boundary="none") if any(depth.values()) else x
        if halo.chunks != _with_halos(x.chunks, depth):  # the blocks _Windows expects, or none
            return None
        for v in step.outputs:
            nodes = _needed(step.nodes, [v])
            used = [i for i, w in enumerate(ins) if w in _inputs_of(nodes)]
            windows_of = (base, [ins[i] for i in used], [shifts[i] for i in used])
            kernels = (self.compile_cpu, self.math, self.cache)
            env[v] = da.map_blocks(
                _Windows(nodes, windows_of, kernels, x.chunks, lo, shape, depth),
                halo,
                chunks=tuple(out_chunks),
                dtype=v.dtype,
                meta=np.empty((0,) * len(shape), v.dtype),
            )
            if any(0 in c for c in out_chunks):  # chunks of the base outside the windows
                # (dask broadcasts an axis of length 1 only when it is one chunk)
                env[v] = env[v].rechunk(tuple(tuple(n for n in c if n) or (0,) for c in out_chunks))
        halos = {d: h for d, h in depth.items() if h}
        return (
            f"one task per chunk of %{base.name} with a halo of depth {halos} "
            f"(window offsets {[tuple(sh) for sh in shifts]}), compiled per chunk"
        )

    def _own(self, nodes, env) -> str:
        """Each node as its NumPy function on dask values: dask.array's implementation; a
        python op, or an op dask.array has no implementation of for these arguments (``np.repeat``
        with an array of counts), as one task on its inputs whole (see :func:`_whole`). Says
        which ops ran whole."""
        from ..interpret import run_node

        whole = []
        for n in nodes:
            if OPS[n.op].kind == "opaque":
                _whole(n, env)
                whole.append(f"python op {n.attrs.get('name', n.op)!r} as one task on a worker")
                continue
            if OPS[n.op].whole_array:
                _whole(n, env)
                whole.append(f"{n.op} as one task on whole arrays (NumPy's {n.op})")
                continue
            if any(0 in v.shape for v in (*n.var_inputs, *n.outputs)):
                _whole(n, env)  # nothing to split, and dask.array's edge cases (its matmul of
                whole.append(f"{n.op} of empty arrays as one task")  # empty arrays fails)
                continue
            try:
                run_node(n, env)
            except Exception as e:  # the trace checked these arguments: it is dask.array's
                _whole(n, env)  # limit (an AssertionError inside its indexing, even)
                why = f"{type(e).__name__}: {e}".split("\n")[0]
                whole.append(f"{n.op} as one task on whole arrays (dask.array: {why})")
                continue
            wrong = next((o for o in n.outputs if not _conform(env, o)), None)
            if wrong is not None:  # dask.array disagrees with NumPy here: NumPy's, whole
                _whole(n, env)
                got = tuple(np.shape(env[wrong]))
                whole.append(f"{n.op} as one task on whole arrays (dask.array gave shape {got})")
        return "".join(f"; {w}" for w in whole)

    def _blockwise(self, step: Step, out: Var, env: dict):
        import dask.array as da

        nodes = _needed(step.nodes, [out], have=env)
        ins = _inputs_of(nodes)
        shape = step.group.shape
        index = LETTERS[: len(shape)]
        made = {o for n in step.nodes for o in n.outputs}  # (a reduction's: its kept axes)
        args = []
        for v in ins:
            at = _out_index(step, v, index)[0] if v in made else None
            args += [env[v], at if at is not None else index[len(shape) - v.ndim :] or None]
        out_index, adjust = _out_index(step, out, index)
        kernel = self._kernel(nodes, ins, [out])
        return da.blockwise(
            kernel,
            out_index,
            *args,
            dtype=out.dtype,
            adjust_chunks=adjust or None,
            new_axes=_new_axes(out_index, args, shape) or None,
            concatenate=True,
            meta=np.empty((0,) * len(out_index), out.dtype),
        )

    def _kernel(self, nodes, inputs, outputs):
        return ChunkKernel(nodes, inputs, outputs, self.compile_cpu, self.math, self.cache)

    def _trees(self, step: Step, env: dict) -> str:
        """A group reducing over axes split into several chunks: each reduction, in order, a
        ``da.reduction`` whose chunk step is the compiled kernel of the work before it (the
        results of earlier reductions are inputs there: ``x - mean`` of a variance); the
        values of reduced shape after them through dask.array's own; the full values leaving
        the group blockwise. Says what it made."""
        made, done = [], {}
        for r in (n for n in step.nodes if OPS[n.op].kind == "reduce"):
            key = (r.op, r.inputs[0], _axes(r), r.out.dtype)
            if key in done:  # the same reduction again (a sum, and the sum of a mean)
                env[r.out] = done[key].reshape(r.out.shape)
                continue
            self._tree(step, r, env)
            done[key] = env[r.out]
            made.append(f"%{r.out.name} tree reduction, compiled chunk step")
            for n in step.nodes:  # in order: a value of reduced shape may need the one before
                ready = all(v in env for v in n.var_inputs)
                if ready and n.out not in env and OPS[n.op].kind != "reduce":
                    if n.out.shape != step.group.shape:
                        self._own([n], env)
        for v in step.outputs:
            if v not in env:  # a full value leaving the group
                env[v] = self._blockwise(step, v, env)
                made.append(f"%{v.name} blockwise, compiled per chunk")
        return "; ".join(made)

    def _tree(self, step: Step, node: Node, env: dict):
        """``da.reduction`` of ``node``, its chunk step the compiled kernel of the work before
        it that is not computed yet."""
        import dask.array as da

        producers = _needed(step.nodes, [node.inputs[0]], have=env)
        axes = tuple(node.attrs["axis"]) if node.attrs.get("axis") is not None else None
        kept = Node(node.op, node.inputs, {**node.attrs, "keepdims": True}, _kept_outputs(node))
        chunk_nodes = [*producers, kept]
        ins = _inputs_of(chunk_nodes)
        kernel = self._kernel(chunk_nodes, ins, list(kept.outputs))
        combine = TREE_COMBINES[OPS[node.op].reduction.combine]
        shape = step.group.shape
        index = LETTERS[: len(shape)]
        # the kernel's inputs as one blockwise array: the chunk step reads them block by block
        args = []
        for v in ins:
            args += [env[v], index[len(shape) - v.ndim :] if v.ndim else None]
        src_value = da.blockwise(
            _Pack(kernel),
            index,
            *args,
            dtype=kept.out.dtype,
            adjust_chunks={index[a]: 1 for a in (axes or range(len(shape)))},
            new_axes=_new_axes(index, args, shape) or None,
            concatenate=True,
            meta=np.empty((0,) * len(shape), kept.out.dtype),
        )
        keepdims = bool(node.attrs.get("keepdims", False))
        dtype = node.out.dtype
        env[node.out] = da.reduction(
            src_value,
            chunk=_identity_chunk,
            combine=_Combine(combine),
            aggregate=_Combine(combine, dtype),
            axis=axes,
            keepdims=keepdims,
            dtype=dtype,
            concatenate=True,
            meta=np.empty((0,) * node.out.ndim, dtype),
        )


def _offsets(step: Step, producers: dict, env: dict):
    """``(the base, [(window Var, ((start, stop) per axis)), ...])`` when every array input of
    an elementwise group is a unit-stride slice of one dask array with the group's shape (two
    windows at least); else None."""
    if step.group.kind != "elementwise" or any(OPS[n.op].kind != "elementwise" for n in step.nodes):
        return None
    shape = step.group.shape
    base, windows = None, []
    for v in _inputs_of(step.nodes):
        n = producers.get(v)
        if n is None or not (OPS[n.op].view and "idx" in n.attrs) or len(n.var_inputs) != 1:
            return None
        if v.shape != shape:
            return None
        b = n.inputs[0]
        if base is not None and b is not base or b.ndim != len(shape):
            return None
        base = b
        ranges = _slice_ranges(n.attrs["idx"], b.shape)
        if ranges is None or any(e - s != d for (s, e), d in zip(ranges, shape)):
            return None
        windows.append((v, ranges))
    if base is None or len(windows) < 2 or not hasattr(env.get(base), "chunks"):
        return None
    return base, windows


def _slice_ranges(idx, shape):
    """``(start, stop)`` per axis of a basic index of unit-stride slices, or None."""
    idx = tuple(idx) + (slice(None),) * (len(shape) - len(idx))
    if len(idx) != len(shape) or not all(isinstance(e, slice) for e in idx):
        return None
    out = []
    for e, n in zip(idx, shape):
        start, stop, step = e.indices(n)
        if step != 1 or stop < start:
            return None
        out.append((start, stop))
    return out


def _with_halos(chunks, depth) -> tuple:
    """The chunks of ``overlap(x, depth, boundary="none")``: a halo on each inner side."""
    return tuple(
        tuple(c + depth[d] * ((j > 0) + (j < len(cs) - 1)) for j, c in enumerate(cs))
        for d, cs in enumerate(chunks)
    )


def _anchored(chunks, lo: int, size: int) -> tuple:
    """The output's chunks along an axis: the outputs whose first window element lies in each
    chunk of the base (``lo`` is the first window's start, ``size`` the output's length)."""
    out, start = [], 0
    for c in chunks:
        a, b = max(start, lo), min(start + c, lo + size)
        out.append(max(0, b - a))
        start += c
    return tuple(out)


class _Windows:
    """The block function of a stencil: a kernel of the group's windows of a block of the base
    with its halo (the outputs anchored in its chunk), compiled with the windows as slices of
    the block, which compiled kernels read in place, at constant offsets."""

    def __init__(self, nodes, windows_of, kernels, chunks, lo, shape, depth):
        self.nodes, (self.base, self.windows, self.shifts) = nodes, windows_of
        self.compile_cpu, self.math, self.cache = kernels
        self.lo, self.shape, self.depth = lo, shape, depth
        self.starts = [np.cumsum((0, *c)).tolist() for c in chunks]
        self.kernels: dict = {}  # the cut of a block -> its ChunkKernel

    def __call__(self, block, block_id=None):
        cut = []
        for d, j in enumerate(block_id):
            c0, c1 = self.starts[d][j], self.starts[d][j + 1]
            a = max(c0, self.lo[d])
            n = max(0, min(c1, self.lo[d] + self.shape[d]) - a)
            left = self.depth[d] if j > 0 else 0
            cut.append((a - c0 + left, n))
        cut = tuple(cut)
        if any(n == 0 for _, n in cut):
            return np.empty(tuple(n for _, n in cut), self.nodes[-1].out.dtype)
        kernel = self.kernels.get((cut, block.shape))
        if kernel is None:
            kernel = self.kernels[cut, block.shape] = self._kernel(cut, block)
        return kernel(block)

    def _kernel(self, cut, block):
        base = Var(self.base.name, block.shape, self.base.dtype)
        slicing = []
        for w, shift in zip(self.windows, self.shifts):
            idx = tuple(slice(s + sh, s + sh + n) for (s, n), sh in zip(cut, shift))
            slicing.append(Node("index", (base,), {"idx": idx}, (w,)))  # retyped below
        g = at_shapes(Graph([base], slicing + list(self.nodes), [self.nodes[-1].out]), [])
        return ChunkKernel(g.nodes, g.inputs, g.outputs, self.compile_cpu, self.math, self.cache)


def _conform(env: dict, v: Var) -> bool:
    """Where dask.array's function gives another dtype than NumPy's (its einsum of uint8
    arrays is uint64), the value cast to NumPy's, which is what the graph says; False where it
    gives another shape."""
    x = env[v]
    if not hasattr(x, "dtype") or v.weak:
        return True
    if tuple(np.shape(x)) != v.shape:
        return False
    if np.dtype(x.dtype) != v.dtype:
        env[v] = x.astype(v.dtype)
    return True


def guarded(g: Graph) -> bool:
    """Whether ``g`` or a loop body in it holds guards (values its trace baked in)."""
    bodies = (a for n in g.nodes for a in n.attrs.values() if isinstance(a, Graph))
    return bool(g.guards) or any(guarded(b) for b in bodies)


def _whole(node: Node, env: dict):
    """``node`` as one task on a worker, on its inputs whole: a python op's function (a builder
    tuple's too, called once per worker process) runs there, never on the client."""
    import dask
    import dask.array as da

    task = dask.delayed(_run_whole, pure=False)(node, *[env[x] for x in node.var_inputs])
    for i, o in enumerate(node.outputs):
        env[o] = da.from_delayed(task[i], o.shape, o.dtype)


def _run_whole(node: Node, *values) -> tuple:
    from ..interpret import run_node

    env = dict(zip(node.var_inputs, values))
    run_node(node, env)
    return tuple(env[o] for o in node.outputs)


class _Pack:
    """A chunk kernel whose one result is returned as the block (for ``da.reduction``)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, *blocks):
        return self.kernel(*blocks)


def _identity_chunk(x, axis=None, keepdims=True):
    return x


class _Combine:
    def __init__(self, fn, dtype=None):
        self.fn, self.dtype = fn, dtype

    def __call__(self, x, axis=None, keepdims=True):
        r = self.fn(x, axis=axis, keepdims=keepdims)
        return r if self.dtype is None else np.asarray(r).astype(self.dtype, copy=False)


def _kept_outputs(node: Node) -> tuple:
    """The outputs of ``node`` reduced with ``keepdims=True``."""
    x = node.inputs[0]
    axes = node.attrs.get("axis")
    axes = range(x.ndim) if axes is None else axes
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return (Var(node.out.name + "_kept", shape, node.out.dtype),)


def _not_chunk_local(step: Step, env: dict) -> str | None:
    """Why the group cannot run as one compiled kernel per chunk, or None if it can."""
    group = step.group
    for n in step.nodes:
        if OPS[n.op].kind not in CHUNK_LOCAL_KINDS:
            return f"{n.op} is not elementwise"
        if "shape" in n.attrs:
            return f"{n.op} has a shape of its own"
    if group.kind == "scan":
        return "a scan"
    for v in _inputs_of(step.nodes):
        if v.ndim > len(group.shape):
            return "an input of more dimensions than the group"
    axes = group.axes or ()
    shape = group.shape
    for v in _inputs_of(step.nodes):
        chunks = getattr(env[v], "chunks", None)
        if chunks is None:
            continue
        offset = len(shape) - v.ndim
        for a in axes:
            if a >= offset and v.shape[a - offset] > 1 and len(chunks[a - offset]) > 1:
                return f"axis {a} of %{v.name} spans {len(chunks[a - offset])} chunks"
    for v in step.outputs:
        if _out_index(step, v, LETTERS[: len(shape)])[0] is None:
            return f"%{v.name} has a shape the group's blocks do not give"
    return None


ROW_CHUNK_LIMIT = 1 << 28  # bytes a chunk may grow to when its rows are gathered into it


def _rows_in_one_chunk(step: Step, env: dict):
    """The group's inputs rechunked so that its reduced axes lie in one chunk, where the chunks
    stay under ``ROW_CHUNK_LIMIT``; else None."""
    group = step.group
    if group.kind != "row" or not group.axes:
        return None
    out = {}
    for v in _inputs_of(step.nodes):
        x = env[v]
        if not hasattr(x, "rechunk") or v.ndim == 0:
            continue
        offset = len(group.shape) - v.ndim
        axes = {a - offset: -1 for a in group.axes if a >= offset and v.shape[a - offset] > 1}
        if not axes:
            continue
        size = (
            math.prod(v.shape[i] if i in axes else max(c) for i, c in enumerate(x.chunks))
            * v.dtype.itemsize
        )
        if size > ROW_CHUNK_LIMIT:
            return None
        out[v] = x.rechunk(axes)
    return out


def _axes(node: Node) -> tuple:
    axes = node.attrs.get("axis")
    return tuple(range(node.inputs[0].ndim)) if axes is None else tuple(sorted(axes))


def _tree_reducible(step: Step) -> bool:
    """Whether a group's reductions can each be a dask tree reduction: elementwise work and
    reductions that combine partial results (sum, prod, max, min, any, all; not positions),
    each over the group's axes of a value of the group's shape."""
    reductions = [n for n in step.nodes if OPS[n.op].kind == "reduce"]
    if not reductions or step.group.kind != "row":
        return False
    if any(OPS[n.op].kind not in CHUNK_LOCAL_KINDS or "shape" in n.attrs for n in step.nodes):
        return False
    for n in reductions:
        red = OPS[n.op].reduction
        if red is None or red.index or red.combine not in TREE_COMBINES:
            return False
        if n.inputs[0].ndim != len(step.group.shape):
            return False
        if _axes(n) != tuple(sorted(step.group.axes or ())):
            return False
    return True


def _out_index(step: Step, out: Var, index: str):
    """(the blockwise index of ``out``, the chunks it changes) or (None, None)."""
    shape = step.group.shape
    axes = step.group.axes or ()
    if out.shape == shape:
        return index, {}
    if out.ndim == len(shape) and all(
        d == s or (d == 1 and i in axes) for i, (d, s) in enumerate(zip(out.shape, shape))
    ):
        return index, {index[i]: 1 for i, (d, s) in enumerate(zip(out.shape, shape)) if d != s}
    kept = "".join(c for i, c in enumerate(index) if i not in axes)
    if out.shape == tuple(d for i, d in enumerate(shape) if i not in axes):
        return kept, {}
    return None, None


def _new_axes(out_index: str, args: list, shape: tuple) -> dict:
    """The axes of the output no input has (every input broadcasts along them): one chunk
    each, of the group's length."""
    have = set("".join(ind for ind in args[1::2] if ind))
    return {c: shape[LETTERS.index(c)] for c in out_index if c not in have}


def _tasks(results) -> int:
    keys: set = set()
    for r in results:
        if is_dask_array(r):
            keys.update(r.__dask_graph__().keys())
    return len(keys)


def _describe(step: Step, env: dict) -> str:
    """The inputs' chunks, and a note where blockwise rechunks some of them to agree (dask's
    ``unify_chunks``: along an axis the inputs share, the finer boundaries of the two)."""
    ins = [v for v in _inputs_of(step.nodes) if hasattr(env[v], "chunks")]
    text = ", ".join(f"%{v.name} chunks {env[v].chunksize}" for v in ins)
    n = len(step.group.shape)
    seen: dict = {}
    for v in ins:
        for i, c in enumerate(env[v].chunks):
            axis = n - v.ndim + i
            if v.shape[i] > 1:
                seen.setdefault(axis, set()).add(c)
    split = sorted(a for a, cs in seen.items() if len(cs) > 1)
    if split:
        text += f"; inputs chunked differently along axes {split}: rechunked to agree"
    return text


def _needed(nodes, outs, have=()) -> list:
    """The nodes of ``nodes`` that ``outs`` depend on, in order, less those whose values are
    in ``have`` already (and what only they need)."""
    want = {v for v in outs if v not in have}
    keep = []
    for n in reversed(nodes):
        if any(o in want for o in n.outputs):
            keep.append(n)
            want.update(v for v in n.var_inputs if v not in have)
    return keep[::-1]


def _inputs_of(nodes) -> list:
    made = {o for n in nodes for o in n.outputs}
    seen, ins = set(), []
    for n in nodes:
        for v in n.var_inputs:
            if v not in made and v not in seen:
                seen.add(v)
                ins.append(v)
    return ins


def _python_numbers_as_arrays(inputs) -> tuple[list, list]:
    """A group's inputs, with each Python number among them (an argument, or a number computed
    in another group: its block is a 0-d array there) as a 0-d array input that a weak
    ``astype`` turns into the Python number the group's nodes read; those nodes."""
    ins, made = [], []
    for v in inputs:
        if v.weak:
            block = Var(f"{v.name}_block", v.shape, v.dtype)
            made.append(Node("astype", (block,), {"dtype": v.dtype}, (v,)))
            v = block
        ins.append(v)
    return ins, made


# ---------------------------------------------------------------------- kernels per chunk
_KERNELS: dict = {}  # (graph key, block types) -> Compiled, per process
_KERNELS_LOCK = threading.Lock()


class ChunkKernel:
    """A fused group as a function of blocks: compiled (tracekit's CPU target) once per
    process for each block shape it meets, then called. Pickles as its graph (JSON)."""

    def __init__(self, nodes, inputs, outputs, compile_cpu, math_mode="fast", cache=True):
        inputs, made = _python_numbers_as_arrays(inputs)
        self.graph = Graph(inputs, made + list(nodes), list(outputs), name="chunk")
        self.compile_cpu, self.math, self.cache = compile_cpu, math_mode, cache

    def __getstate__(self):  # a function pickles by its name: tk.compile on the worker
        state = {"graph": self.graph.to_json(), "compile_cpu": self.compile_cpu}
        return {**state, "math": self.math, "cache": self.cache}

    def __setstate__(self, state):
        self.graph = Graph.from_json(state["graph"])
        self.compile_cpu, self.math, self.cache = (
            state["compile_cpu"],
            state["math"],
            state["cache"],
        )

    def __call__(self, *blocks):
        blocks = [np.asarray(b) for b in blocks]  # (Python numbers too: 0-d array inputs)
        if getattr(self, "_key", None) is None:
            self._key = self.graph.key()
        key = (self._key, tuple(_block_type(b) for b in blocks), self.math)
        compiled = _KERNELS.get(key)
        if compiled is None:
            with _KERNELS_LOCK:
                compiled = _KERNELS.get(key)
                if compiled is None:
                    compiled = _KERNELS[key] = self._compile(blocks)
        # dask runs chunks in parallel: a kernel's own threads would only compete with them
        # (numba's setting is the calling thread's: the caller's own on dask's sync scheduler)
        with one_thread():
            return compiled(*blocks)

    def _compile(self, blocks):
        from .. import pytree
        from ..traced import Traced

        g = at_shapes(self.graph, [np.shape(b) for b in blocks])
        t = Traced(
            g,
            pytree.flatten(list(blocks))[1],
            pytree.LEAF,  # one result
            [None] * len(g.inputs),
            blocks,
        )
        return self.compile_cpu(t, target="cpu", math=self.math, progress=False, cache=self.cache)


def _block_type(b) -> tuple:
    return (b.shape, b.dtype.str)


def at_shapes(g: Graph, shapes: list) -> Graph:
    """``g`` (elementwise ops and reductions over axes) for inputs of ``shapes``: every value's
    shape from its op's type rule.

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: np.exp(x).sum(axis=1, keepdims=True), np.ones((4, 3)))
    >>> print(at_shapes(t.graph, [(2, 3)]).outputs)
    [%1: f64[2,1]]
    """
    typed: dict = {}
    inputs = []
    for i, v in enumerate(g.inputs):
        typed[v] = Var(v.name, tuple(shapes[i]) if i < len(shapes) else v.shape, v.dtype, v.weak)
        inputs.append(typed[v])
    nodes = []
    for n in g.nodes:
        ins = tuple(typed.get(x, x) if isinstance(x, Var) else x for x in n.inputs)
        out_types = OPS[n.op].type_rule(list(ins), dict(n.attrs))
        outs = []
        for o, (shape, dtype) in zip(n.outputs, out_types):
            if np.dtype(dtype) != o.dtype:
                raise ValueError(f"{n.op}: {dtype} at these shapes, {o.dtype} when traced")
            typed[o] = Var(o.name, tuple(shape), o.dtype, o.weak)
            outs.append(typed[o])
        nodes.append(Node(n.op, ins, n.attrs, tuple(outs), n.source, n.scope))
    return Graph(inputs, nodes, [typed.get(v, v) for v in g.outputs], name=g.name)
