"""A whole loop as one numba function: the body's kernels called ``trips`` times from a
compiled driver, with no Python per iteration.

The driver is generated from the body's plan when every step of it has a numba form: views
that slice (``x[1:-1, k]``, indices moving with the loop included), the body's fused kernel
segments, and functionalised writes (stores into buffers the loop owns, or copies). Buffers
are allocated once before the loop; a carried value that a kernel makes alternates between
two of them (the previous iteration's is still read while the next one is written). Kernels
read slices through the arrays they slice and write into regions of the loop's buffers
directly (:mod:`.windows`); 0-d state is a numba scalar; a product of two matrices goes to
numba's BLAS. Where a body has a step without a numba form (a Python op, a gather, a batched
matmul), the loop runs its compiled body from Python instead
(:func:`~tracekit.backends.control.loop_runner`).

>>> import numpy as np, tracekit as tk
>>> def f(a):
...     s = 0.0
...     for i in range(50):
...         s = s + np.tanh(a[i, i])
...     return s
>>> c = tk.compile(tk.trace(f, np.eye(50)), target="cpu", progress=False)
>>> round(float(c(np.eye(50))), 6) == round(50 * float(np.tanh(1.0)), 6)
True
"""

from __future__ import annotations

import re

import numpy as np

from ..ir import Var
from ..loops.op import Affine
from ..ops import OPS, py_literal
from . import cache, small_matmul
from .matmul_threads import numba_has_blas
from .planner import blas_out, handed_over, in_place_updates
from .windows import Window, without_ellipsis


class NoDriver(Exception):
    """A body step without a numba form: the loop runs its body from Python."""


def driver_source(node, plan, program, name: str, remake=None, counted=True, external=False):
    """``(source, program, workspace)``: the source of ``name(carried..., invariants...,
    [start,] count, [workspace...])``
    running loop ``node`` whose body was planned as ``plan`` and compiled as ``program`` (its
    segments), and the program it calls: ``remake(out_windows, scalar_results)`` when kernels
    write their results straight into the regions that stores would copy them to, or return
    0-d results as scalars. ``count`` (:func:`trip_count`; none where ``counted`` is false:
    then the loop's own, written in) is an argument, so that one machine code serves a loop
    traced for any number of iterations. ``external``: the buffers the loop works in are
    arguments too, allocated by its caller at each call (``workspace``: their shapes and
    dtypes; :func:`allocate`), so that the driver does not compile numba's ``np.empty``
    (0.1-0.2 s in a new process); else ``workspace`` is empty. Raises :class:`NoDriver`."""
    d = _Driver(node, plan, program, name, remake, counted, external)
    d.program.callees.update({callee: fn for callee, (fn, _) in d.callees.items()})
    return d.source, d.program, tuple(shape_dtype for _, shape_dtype in d.workspace)


class _Driver:
    def __init__(self, node, plan, program, name, remake=None, counted=True, external=False):
        self.node, self.plan, self.program = node, plan, program
        self.external = external
        self.workspace: list = []  # (name, (shape, dtype)) of the buffers the caller passes
        self.count = "n_trips" if counted else str(trip_count(node))
        g = plan.graph
        self.body, self.carried = g, node.attrs["carried"]
        # a loop counting from another start takes it last (``k0``): its indices move from there
        self.k0 = "k0" if node.attrs.get("start", 0) != 0 else None
        self.remake = remake
        self.names: dict = {}
        self.contiguous: set = set()  # Vars known to be C-contiguous arrays in the driver
        self.scalars: set = set()  # Vars that are numba scalars (an index giving one element)
        self.before: list[str] = []
        self.lines: list[str] = []
        self.view_lines: set = set()  # positions in lines of the views taken
        self.callees: dict = {}  # name -> (a nested loop's driver or a kernel, its source)
        if g.constants or g.guards:
            raise NoDriver("the body has constants or guards")
        values = list(g.inputs) + [o for n in g.nodes for o in n.outputs]
        if any(
            v.dtype.kind not in "biufc" or v.dtype.itemsize < 4 and v.dtype.kind == "f"
            for v in values
        ):
            raise NoDriver("a dtype numba has no arrays of (float16)")
        params = [self._name(v) for v in g.inputs] + ([self.k0] if self.k0 else [])
        params += [self.count] if counted else []
        for v in g.inputs:
            if v.weak:
                self.scalars.add(v)
            else:
                self.contiguous.add(v)  # the caller passes contiguous copies
        self._steps()
        params += [name for name, _ in self.workspace]
        self.source = self._assemble(name, params)

    def _name(self, v: Var) -> str:
        self.names[v] = f"d_{v.ident}"
        return self.names[v]

    # -- the body's steps
    def _steps(self):
        handed = handed_over(self.plan)
        in_place = in_place_updates(self.plan, handed)
        # kernels write into stores' regions only in a program remade for it
        direct = self.remake is not None
        self.direct = _direct_stores(self.plan, self.program.segments, in_place) if direct else {}
        windows = _store_windows(self.plan, self.direct)
        scalar = _scalar_results(self.plan, self.direct)
        if (windows or scalar) and self.remake is not None:
            self.program = self.remake(windows, scalar)
        else:
            windows = {}
        seg_at = {first: (nm, steps, srcs) for nm, first, steps, srcs in self.program.segments}
        returned = {
            v for _, _, _, srcs in self.program.segments for ks in srcs for v in ks.returned
        }
        self._scalar_state(returned)
        self.temps: dict = {}  # Var -> its buffer(s)
        carried_next = set(self.body.outputs[: self.carried])
        for i, step in enumerate(self.plan.steps):
            if i in seg_at:
                nm, steps, srcs = seg_at[i]
                for st in steps:
                    for v in st.outputs:
                        if v in windows or v in returned:  # into its base's region; a scalar
                            continue
                        if v in self.direct:  # the kernel writes into the store's region
                            self._region_view(v, self.plan.steps[self.direct[v]].nodes[0])
                            continue
                        self._temp(v, double=v in carried_next)
                args = [self._operand(v, ks, whole) for ks in srcs for _, v, whole in ks.operands()]
                gives = [v for ks in srcs for v in ks.returned]
                for v in gives:
                    self.names[v] = f"s_{v.ident}"
                    self.scalars.add(v)
                got = "".join(f"{self.names[v]}, " for v in gives)
                call = f"{nm}({', '.join(args)})"
                self.lines.append(f"{got}= {call}" if got else call)
                for v in (v for st in steps for v in st.outputs if v.weak and v not in returned):
                    # a Python number the kernel computed: a numba scalar from here on
                    self.lines.append(f"s_{v.ident} = {self.names[v]}[()]")
                    self.names[v] = f"s_{v.ident}"
                    self.scalars.add(v)
            elif step.kind == "kernel":
                continue
            elif step.kind == "view":
                self._view(step.nodes[0])
            elif OPS[step.nodes[0].op].store and not step.nodes[0].inputs[2:]:
                self._store(step.nodes[0], i in in_place)
            elif blas_out(step.nodes[0]):
                self._matmul(step.nodes[0], double=step.nodes[0].out in carried_next)
            elif OPS[step.nodes[0].op].kind == "control":
                self._loop(step.nodes[0], handed.get(i) or ())
            else:
                raise NoDriver(f"{step.nodes[0].op} has no numba form in a loop driver")

    def _matmul(self, n, double: bool):
        """A product of two matrices of one float dtype into a buffer of the loop's: through
        the small-matrix kernel where it is faster here (:mod:`.small_matmul`), else numba's
        BLAS (SciPy's), ``np.dot(a, b, out)``."""
        a, b = n.inputs
        if not (isinstance(a, Var) and isinstance(b, Var)) or a.ndim != 2 or b.ndim != 2:
            raise NoDriver("a matmul of other than two matrices")
        if not a.dtype == b.dtype == n.out.dtype or a.dtype.kind not in "fc":
            raise NoDriver("a matmul of mixed or integer dtypes")
        if a in self.scalars or b in self.scalars:
            raise NoDriver("a matmul of a scalar")
        (m, k), nc = a.shape, b.shape[1]
        blas, disk = numba_has_blas(), self.program.disk
        if small_matmul.candidate(m, k, nc, a.dtype) and (
            not blas or small_matmul.faster_than_blas(m, k, nc, a.dtype, disk)
        ):
            call = f"matmul_{len(self.callees)}"
            fn = small_matmul.kernel(m, k, nc, a.dtype, disk)
            self.callees[call] = (fn, small_matmul.kernel_source(m, k, nc, a.dtype))
        elif blas:
            call = "np.dot"
        else:
            raise NoDriver("matmul needs SciPy for numba's BLAS")
        self._temp(n.out, double)
        x, y = (  # the kernel takes arrays typed C-contiguous (for those, a no-op)
            self.names[v]
            if v in self.contiguous and call == "np.dot"
            else f"np.ascontiguousarray({self.names[v]})"
            for v in (a, b)
        )
        self.lines.append(f"{call}({x}, {y}, {self.names[n.out]})")

    def _loop(self, n, handed):
        """A nested loop: its own driver, called once per iteration of this one (bound to a
        name of this driver's module at load, :attr:`CpuProgram.callees`), on copies of its
        carried arrays (but those handed over) and on its invariants, C-contiguous."""
        run = self.program.loop_run(n)
        if getattr(run, "driver", None) is None:
            raise NoDriver(f"a nested loop that runs {run.how}")
        callee = f"inner_{len(self.callees)}"
        self.callees[callee] = (run.driver, run.source)
        body, carried = n.attrs["body"], n.attrs["carried"]
        args = []
        for k, (x, b) in enumerate(zip(n.inputs, body.inputs)):
            if not isinstance(x, Var):  # a number; the 0-d array of it where the body takes one
                value = py_literal(x)
                args.append(
                    _typed(value, b.dtype)
                    if b.weak
                    else f"np.full({b.shape!r}, {value}, np.{b.dtype})"
                )
                continue
            name = self.names[x]
            if b.weak:
                args.append(name)
            elif x in self.scalars or x.dtype != b.dtype or x.shape != b.shape:
                raise NoDriver("a nested loop's input held as a scalar or of another type")
            elif k < carried and (k not in handed or x not in self.contiguous):
                args.append(f"{name}.copy()")  # C-contiguous (np.ascontiguousarray is >= 1-d)
            elif x in self.contiguous or x.ndim == 0:
                args.append(name)
            else:
                args.append(f"np.ascontiguousarray({name})")
        start = n.attrs.get("start", 0)
        if start != 0:  # where its count starts: an int, or moving with this loop
            args.append(_typed(_int(start, self.k0), _COUNT))
        args.append(_typed(str(trip_count(n)), _COUNT))
        args += [_empty(shape, dtype) for shape, dtype in run.workspace]
        outs = []
        for o in n.outputs:
            outs.append(self._name(o))
            (self.scalars if o.weak else self.contiguous).add(o)
        self.lines.append(f"{''.join(o + ', ' for o in outs)}= {callee}({', '.join(args)})")

    def _scalar_state(self, returned: set):
        """Carried 0-d arrays whose next value a kernel returns as a scalar are numba scalars
        for the whole loop (read out of their array once, before it)."""
        g = self.body
        for v, nxt in zip(g.inputs[: self.carried], g.outputs[: self.carried]):
            if not v.weak and v.shape == () and nxt in returned:
                self.before.append(f"{self.names[v]} = {self.names[v]}[()]")
                self.contiguous.discard(v)
                self.scalars.add(v)

    def _temp(self, v: Var, double: bool):
        if v.weak and v.shape == () and v.dtype.kind in "biufc":
            double = False  # read into a scalar right after its kernel: one buffer serves
        elif v.weak or v.dtype.kind not in "biufc":
            raise NoDriver("a weak or non-numeric temporary")
        base = f"b_{v.ident}"
        if double:  # carried: the previous iteration's is read while this one is written
            self._buffer(f"{base}0", v.shape, v.dtype)
            self._buffer(f"{base}1", v.shape, v.dtype)
            self.lines.append(f"d_{v.ident} = {base}0 if k % 2 == 0 else {base}1")
        else:
            self._buffer(base, v.shape, v.dtype)
            self.lines.append(f"d_{v.ident} = {base}")
        self.names[v] = f"d_{v.ident}"
        self.contiguous.add(v)

    def _buffer(self, name: str, shape: tuple, dtype: np.dtype):
        """A buffer of the loop's, made before it: an argument where the caller allocates."""
        if self.external:
            self.workspace.append((name, (shape, dtype)))
        else:
            self.before.append(f"{name} = {_empty(shape, dtype)}")

    def _operand(self, v: Var, ks, whole=False) -> str:
        name = self.names[v]
        if whole:  # a window's base (see windows.py)
            if v in self.contiguous:
                return name
            if v in set(ks.outputs) | {w.base for o, w in ks.windows.items() if o in ks.outputs}:
                raise NoDriver("a kernel writing through a strided view")
            return f"np.ascontiguousarray({name})"
        if ks.layout.is_scalar(v) and v in ks.inputs:
            if v in self.scalars:
                return name
            if v.shape == ():
                return f"{name}[()]"
            if v in self.contiguous:
                return f"{name}.reshape(-1)[0]"
            raise NoDriver("a one-element view read by value")
        shape = ks.layout.operand_shape(v)
        if shape == v.shape:
            return name
        if v not in self.contiguous:
            raise NoDriver("a view a kernel reads flattened")
        return f"{name}.reshape({shape!r})"

    def _view(self, n):
        idx = n.attrs.get("idx")
        if not OPS[n.op].view or not isinstance(idx, tuple):
            raise NoDriver(f"the view {n.op} has no numba form in a loop driver")
        if any(isinstance(e, str) for e in idx) or len(n.inputs) != 1:
            raise NoDriver("an index by arrays")
        if any(e is None or e is Ellipsis for e in idx):
            raise NoDriver("an index with a new axis or an ellipsis")
        base = n.inputs[0]
        if base in self.scalars:
            raise NoDriver("an index of a scalar")
        out = self._name(n.out)
        self.lines.append(f"{out} = {self.names[base]}[{_index(idx, self.k0)}]")
        self.view_lines.add(len(self.lines) - 1)
        if all(type(e) is int or isinstance(e, Affine) for e in idx) and len(idx) == base.ndim:
            self.scalars.add(n.out)  # one element: numba gives a scalar

    def _region_view(self, v: Var, store):
        """``v``'s elements are the region ``store`` writes in place: the kernel making ``v``
        writes there directly (:func:`_direct_stores`), and the store does nothing."""
        name = f"w_{store.out.ident}"
        index = _index(store.attrs["idx"], self.k0)
        self.lines.append(f"{name} = {self.names[store.inputs[0]]}[{index}]")
        self.names[v] = name

    def _store(self, n, in_place: bool):
        base, value = n.inputs[0], n.inputs[1]
        if value in self.direct:  # the kernel wrote the region already
            self.names[n.out] = self.names[base]
            self.contiguous.add(n.out)
            return
        idx = n.attrs.get("idx")
        if not isinstance(idx, tuple) or any(isinstance(e, str) for e in idx):
            raise NoDriver("a write through index arrays")
        if any(e is None or e is Ellipsis for e in idx):
            raise NoDriver("a write with a new axis or an ellipsis")
        if not isinstance(base, Var) or base in self.scalars:
            raise NoDriver("a write into a scalar")
        src = self.names[value] if isinstance(value, Var) else py_literal(value)
        if isinstance(value, Var) and value.shape == () and value not in self.scalars:
            src = f"{src}[()]"
        target = self.names[base]
        if not in_place:  # a copy; a carried one alternates (the old value may still be read)
            copy = f"c_{n.out.ident}"
            if n.out in set(self.body.outputs[: self.carried]):
                self._buffer(f"{copy}0", base.shape, base.dtype)
                self._buffer(f"{copy}1", base.shape, base.dtype)
                self.lines.append(f"{copy} = {copy}0 if k % 2 == 0 else {copy}1")
            else:
                self._buffer(copy, base.shape, base.dtype)
            self._copy(copy, target, base.shape, base.shape)
            target = copy
        region = _region(base.shape, idx)
        if region is None:
            raise NoDriver("a write whose region has no static shape")
        value_shape = value.shape if isinstance(value, Var) and value not in self.scalars else ()
        dest = f"w_{n.out.ident}"
        # a complex value written into a real array: NumPy keeps its real part, numba will not
        real = ".real" if np.dtype(_dtype_of(value)).kind == "c" and base.dtype.kind != "c" else ""
        index = _index(idx, self.k0)
        if region == ():  # one element
            self.lines.append(f"{target}[{index}] = ({src}){real}")
        elif value_shape == ():
            self.lines.append(f"{dest} = {target}[{index}]")
            self._fill(dest, f"({src}){real}", region)
        elif value_shape == region:
            self.lines.append(f"{dest} = {target}[{index}]")
            self._copy(dest, src, region, region, real)
        else:
            raise NoDriver("a write that broadcasts")
        self.names[n.out] = target
        self.contiguous.add(n.out)

    def _copy(self, dest, src, dest_shape, src_shape, real=""):
        """Element loops copying ``src`` into ``dest`` (quicker to compile than numba's
        slice assignment); ``real``: ".real" to keep the real part of complex elements."""
        self._loops(dest_shape, lambda ix: f"{dest}[{ix}] = {src}[{ix}]{real}")

    def _fill(self, dest, value, shape):
        self._loops(shape, lambda ix: f"{dest}[{ix}] = {value}")

    def _row_store(self, stack: str, o: Var) -> list[str]:
        """The lines storing body output ``o`` as row ``k`` of ``stack``: element loops (numba
        compiles ``stack[k] = value`` through its generic slice assignment, seconds cold)."""
        value = self.names[o]
        if o in self.scalars or not o.shape:
            return [f"{stack}[k] = {value}" if o in self.scalars else f"{stack}[k] = {value}[()]"]
        names = [f"q{d}" for d in range(o.ndim)]
        loops = [
            "    " * d + f"for {q} in range({n}):" for d, (q, n) in enumerate(zip(names, o.shape))
        ]
        ix = ", ".join(names)
        return loops + ["    " * o.ndim + f"{stack}[k, {ix}] = {value}[{ix}]"]

    def _loops(self, shape, statement):
        if not shape:
            self.lines.append(statement("()"))
            return
        names = [f"q{d}" for d in range(len(shape))]
        for d, (nm, size) in enumerate(zip(names, shape)):
            self.lines.append("    " * d + f"for {nm} in range({size}):")
        self.lines.append("    " * len(shape) + statement(", ".join(names)))

    # -- the function
    def _assemble(self, name, params) -> str:
        g, c = self.body, self.carried
        invariants = set(g.inputs[c:])  # the caller's own arrays: handed back as copies
        own = {
            o: f"{self.names[o]}.copy()" if o in invariants else self.names[o] for o in g.outputs
        }
        nexts = [own[o] for o in g.outputs[:c]]
        state = [self.names[v] for v in g.inputs[:c]]
        outs = [own[o] for o in g.outputs]
        for o in g.outputs:
            if o not in self.contiguous and o not in self.scalars:
                raise NoDriver("a body output that is a view")
        stacked = self.node.attrs.get("stacked", 0)
        plain = len(g.outputs) - stacked
        lines = [  # nested loops' drivers, matmul kernels: their modules' keys keep caches apart
            f"{callee} = None  # bound at load: {cache.module_key(src)}"
            for callee, (_, src) in self.callees.items()
        ]
        lines += [
            "@numba.njit(error_model='numpy', cache=_TRACEKIT_DISK_CACHE)",
            f"def {name}({', '.join(params)}):",
        ]
        lines += ["    " + b for b in self.before]
        for s, o in enumerate(g.outputs[plain:]):
            shape = ", ".join([self.count, *map(str, o.shape)])
            lines.append(f"    r_{s} = np.empty(({shape},), np.{o.dtype.name})")
        cond = self.node.attrs.get("cond")
        if cond is None:
            lines.append(f"    for k in range({self.count}):")
        else:  # a while loop: returns whether its condition became false in time
            lines += ["    done = False", f"    for k in range({self.count}):"]
        read_after = {self.names[o] for o in g.outputs}  # stacked, carried on, returned
        body = _unread_views_dropped(self.lines, self.view_lines, read_after)
        lines += ["        " + ln for ln in body]
        for s, o in enumerate(g.outputs[plain:]):
            lines += ["        " + ln for ln in self._row_store(f"r_{s}", o)]
        if c:
            lines.append(f"        {', '.join(state)}, = {', '.join(nexts)},")
        results = state + outs[c:plain] + [f"r_{s}" for s in range(stacked)]
        boxed = []  # a 0-d value held as a scalar goes back as the 0-d array it is
        for j, (v, name) in enumerate(zip(list(g.inputs[:c]) + list(g.outputs[c:plain]), results)):
            if v in self.scalars and not v.weak:
                boxed += [f"o_{j} = np.empty((), np.{v.dtype.name})", f"o_{j}[()] = {name}"]
                results[j] = f"o_{j}"
        if cond is not None:
            flag = g.outputs[cond]
            test = self.names[flag] if flag in self.scalars else f"{self.names[flag]}[()]"
            lines += [f"        if not {test}:", "            done = True", "            break"]
            results.append("done")
        lines += ["    " + b for b in boxed]
        lines.append(f"    return ({', '.join(results)},)")
        return "\n".join(lines) + "\n"


def _direct_stores(plan, segments, in_place: set) -> dict:
    """``{value: store step}`` for kernel results that a later in-place store writes into a
    region of its base and nothing else reads, where the kernel reads no view of that base and
    no step between them does (the region may then hold the result as the kernel makes it):
    ``B[1:-1, 1:-1] = f(A)`` writes B's interior from the kernel, without a temporary."""
    root, reads, users, made_at = {}, [], {}, {}
    for i, st in enumerate(plan.steps):
        reads.append({root.get(v, v) for v in st.inputs})
        made_at.update({o: i for o in st.outputs})
        for v in st.inputs:
            users.setdefault(v, set()).add(i)
        if st.kind == "view" or (st.kind == "host" and OPS[st.nodes[0].op].may_view):
            base = st.nodes[0].inputs[0]
            if isinstance(base, Var):
                for o in st.outputs:
                    root[o] = root.get(base, base)
    made_by = {}  # a kernel result -> (its segment's first step, its last step, its kernel)
    for _, first, steps, srcs in segments:
        last = plan.steps.index(steps[-1])
        for st, ks in zip(steps, srcs):
            for v in st.outputs:
                made_by[v] = (first, last, ks)
    kept = set(plan.graph.outputs) | {gd.var for gd in plan.graph.guards}
    out = {}
    for i in sorted(in_place):
        n = plan.steps[i].nodes[0]
        base, value, idx = n.inputs[0], n.inputs[1], n.attrs.get("idx")
        if not isinstance(value, Var) or value not in made_by or value in kept or n.inputs[2:]:
            continue
        if value.ndim == 0:  # one element: the store writes it (a kernel's 0-d result is a
            continue  # buffer or a returned scalar, never a window: fuzz seed 13101497)
        first, last, ks = made_by[value]
        if users.get(value) != {i} or value.dtype != base.dtype or not isinstance(idx, tuple):
            continue
        if any(not isinstance(e, int | slice | Affine) for e in idx):
            continue
        if _region(base.shape, idx) != value.shape or ks.layout.operand_shape(value) != value.shape:
            continue
        home = root.get(base, base)
        if made_at.get(base, -1) >= first:
            continue  # the base is made after the kernel runs
        if any(home in reads[j] for j in range(first, i)):
            continue  # the kernel, or a step before the store, reads what the region holds
        out[value] = i
    return out


def _unread_views_dropped(lines: list, views: set, read_after: set) -> list:
    """``lines`` without the views nothing reads (the kernels index their bases instead):
    not in ``lines``, not among the names ``read_after`` them."""
    lines, views = list(lines), set(views)
    while True:
        unread = {
            i
            for i in views
            if lines[i].split(" = ")[0] not in read_after
            and not any(
                re.search(rf"\b{lines[i].split(' = ')[0]}\b", ln)
                for j, ln in enumerate(lines)
                if j != i and ln
            )
        }
        if not unread:
            return [ln for ln in lines if ln]
        for i in unread:
            lines[i] = ""
        views -= unread


def _scalar_results(plan, direct: dict) -> frozenset:
    """0-d numeric kernel results a segment may return as scalars: not written into a region,
    read only by kernels and stores (never by a view)."""
    made = {o for st in plan.steps if st.kind == "kernel" for o in st.outputs}
    viewed = {x for st in plan.steps if st.kind == "view" for x in st.inputs}
    return frozenset(
        v
        for v in made
        if v.shape == () and v.dtype.kind in "biufc" and v not in direct and v not in viewed
    )


def _store_windows(plan, direct: dict) -> dict:
    """``{value: Window}`` for the direct stores (:func:`_direct_stores`) whose base is an array
    the driver holds whole and C-contiguous (an input, a kernel's temporary, a store's result)
    and whose index is static: the kernel making ``value`` writes into the base through it."""
    whole = set(plan.graph.inputs)
    for st in plan.steps:
        if st.kind == "kernel":
            whole.update(o for o in st.outputs if o not in direct)
        elif st.kind == "host" and OPS[st.nodes[0].op].store:
            whole.update(st.outputs)
    out = {}
    for value, i in direct.items():
        n = plan.steps[i].nodes[0]
        base = n.inputs[0]
        if base not in whole or base.weak or base.ndim == 0:
            continue
        w = Window.of(base, n.attrs["idx"], base.shape)
        if w is not None and w.shape == value.shape:
            out[value] = w
    return out


def _dtype_of(value):
    return value.dtype if isinstance(value, Var) else np.asarray(value).dtype


def _region(shape, idx):
    """The static shape of ``x[idx]`` for ``x`` of ``shape`` (ints, slices with static
    bounds or moving starts of a static length, None, Ellipsis), or None."""
    out, dims = [], list(shape)
    idx = without_ellipsis(idx, len(shape))
    d = 0
    for e in idx:
        if e is None:
            out.append(1)
            continue
        if d >= len(dims):
            return None
        n = dims[d]
        d += 1
        if isinstance(e, slice):
            if any(isinstance(x, Affine) for x in (e.start, e.stop, e.step)):
                if isinstance(e.step, Affine) or not all(
                    isinstance(x, Affine) for x in (e.start, e.stop)
                ):
                    return None
                if e.start.step != e.stop.step or min(e.start.base, e.stop.base) < 0:
                    return None
                out.append(max(0, len(range(e.start.base, e.stop.base, e.step or 1))))
            else:
                out.append(len(range(*e.indices(n))))
        # an integer (static or moving) takes the dim away
    out += dims[d:]
    return tuple(out)


def _index(idx, k0=None) -> str:
    """``idx`` as numba source in iteration ``k`` of a driver counting from ``k0`` (None: 0)."""
    parts = []
    for e in idx:
        if isinstance(e, slice):
            bounds = (e.start, e.stop, e.step)
            parts.append(":".join("" if x is None else _int(x, k0) for x in bounds))
        elif e is None:
            parts.append("None")
        elif e is Ellipsis:
            parts.append("...")
        else:
            parts.append(_int(e, k0))
    return ", ".join(parts) if parts else "()"


_COUNT = np.dtype(np.int64)  # a driver's count and start


def _empty(shape: tuple, dtype: np.dtype) -> str:
    """numba source allocating an uninitialised array."""
    return f"np.empty({shape!r}, np.{dtype.name})"


def allocate(workspace) -> list:
    """Fresh buffers for a driver's ``workspace`` (:func:`driver_source`), one call's."""
    return [np.empty(shape, dtype) for shape, dtype in workspace]


def _typed(value: str, dtype: np.dtype) -> str:
    """``value`` (an expression of a number) as a callee's argument of the type that its driver
    was compiled for: numba types an int or bool literal as a literal type, and compiles a
    callee once more for each such literal (a nested loop's count, a third of a second each)."""
    if dtype.kind == "b":
        return f"np.bool_({value})"
    return f"np.int64({value})" if dtype.kind in "iu" else value  # driver_signature's int


def _int(x, k0=None) -> str:
    if isinstance(x, Affine):
        count = "k" if x.local or k0 is None else f"(k + {k0})"
        return f"({x.base} + {x.step} * {count})"
    return str(int(x))


def prepared_argument(x, dtype, shape, carried: bool):
    """One array argument of a loop driver: C-contiguous, of the body's dtype and shape; a
    copy where the driver writes into it (``carried``) or where it is not."""
    plain = type(x) is np.ndarray and x.dtype == dtype and x.shape == shape and x.flags.c_contiguous
    if carried:
        return x.copy() if plain else np.array(x, dtype, order="C").reshape(shape)
    return x if plain else np.ascontiguousarray(x, dtype=dtype).reshape(shape)


def input_preparer(body, carried: int):
    """``prepare(values, handed=())``: the driver's arguments (:func:`prepared_argument`);
    the carried buffers at positions in ``handed`` the caller hands over (it never reads them
    again) are passed as they are where they are already what the driver needs."""
    arrays = [(i, v.dtype, v.shape) for i, v in enumerate(body.inputs) if not v.weak]

    def prepare(values, handed=()) -> list:
        out = list(values)
        for i, dtype, shape in arrays:
            x = out[i]
            if i in handed and type(x) is np.ndarray and x.flags.writeable:
                if x.dtype == dtype and x.shape == shape and x.flags.c_contiguous:
                    continue
            out[i] = prepared_argument(x, dtype, shape, i < carried)
        return out

    return prepare


def driver_signature(body, shifted: bool = False, counted: bool = False, workspace=()):
    """numba types of a driver's arguments (what :func:`input_preparer` gives; ``shifted``:
    and the count the loop starts from; ``counted``: and its :func:`trip_count`; and the
    buffers of its ``workspace``)."""
    import numba

    return (
        tuple(
            numba.typeof(np.asarray(0, v.dtype).item())
            if v.weak
            else numba.types.Array(numba.from_dtype(v.dtype), v.ndim, "C")
            for v in body.inputs
        )
        + ((numba.int64,) if shifted else ())
        + ((numba.int64,) if counted else ())
        + tuple(
            numba.types.Array(numba.from_dtype(dtype), len(shape), "C")
            for shape, dtype in workspace
        )
    )


def trip_count(node) -> int:
    """The iterations loop ``node``'s driver runs: its trips, a while loop's most."""
    return (
        node.attrs["max_iterations"] if node.attrs.get("cond") is not None else node.attrs["trips"]
    )
