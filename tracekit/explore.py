"""The notebook explorer: ``tk.explore(x)`` returns an interactive widget for a traced graph.

The browser side is ``widgets/explorer.js`` and ``widgets/explorer.css`` (plain ES module and CSS,
no build step, nothing from a CDN), shipped in the wheel as ``tracekit/_widgets``. This is the
only tracekit module that imports ipywidgets (through anywidget).

>>> import numpy as np, tracekit as tk
>>> t = tk.trace(lambda x: np.tanh(x) * 2, np.ones(3), keep_values=True)
>>> w = tk.explore(t)
>>> w.select("1")                                # a node, a Var, its name or its SVG id
>>> "multiply" in w.details_text()
True
>>> w.step(1)                                    # the interpreter runs the first node
array([0.76159416, 0.76159416, 0.76159416])
>>> int(w.step)
1

Synced traits (the browser and Python both read and write them): ``selected`` (the SVG id of the
selected element: ``node-<var>``, ``input-<var>``, ``output-<i>``, ``kernel-<name>``...),
``view`` (``"forward"``, ``"backward"``, ``"compiled"``, ``"passes"``), ``step`` (how many nodes
of the view's graph the interpreter has run; ``w.step(k)`` runs to ``k``), ``svg`` and ``nodes``
(the drawing and one JSON record per drawn element), ``details`` (what the details panel shows,
values included), ``step_info``, ``kernels`` and ``plan`` (compiled view), ``passes`` /
``pass_index`` / ``svg_before`` (pass history view), ``compare_result``, ``collapsed``
(collapsed scope clusters) and ``message``.
"""

from __future__ import annotations

import importlib.resources
import linecache
import os
import pathlib
import re
import subprocess
import sys
import time
import types
import warnings
from dataclasses import dataclass, field

import anywidget
import numpy as np
import traitlets

from . import pytree
from .interpret import as_input_value, run, run_node
from .ir import Affine, Graph, Node, Var, at_iteration, fmt_value, format_node, type_str
from .loops.op import body_at, is_while
from .ops import OPS
from .render import decision_notes, plan_decisions, render

__all__ = ["explore", "Explorer", "Comparison"]

VIEWS = ("forward", "backward", "compiled", "passes")
SMALL_ARRAY = 64  # elements: the details panel prints the whole array up to this size
HIST_BINS = 24
CONTEXT_LINES = 2  # source lines shown before and after the node's line


# ====================================================================== assets
def _asset(name: str) -> str:
    """The text of ``widgets/<name>``: from the installed wheel, else from a source checkout."""
    try:
        res = importlib.resources.files("tracekit").joinpath("_widgets", name)
        if res.is_file():
            return res.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        pass
    path = pathlib.Path(__file__).resolve().parent.parent / "widgets" / name
    if path.is_file():
        return path.read_text(encoding="utf-8")
    raise FileNotFoundError(
        f"tracekit's widget file {name!r} is missing: neither tracekit/_widgets/{name} (installed "
        f"wheel) nor widgets/{name} (source checkout) exists"
    )


# ====================================================================== values
def _describe_value(value) -> dict:
    """Statistics, a histogram and (when small) the array itself, as JSON-able data."""
    a = np.asarray(value)
    info: dict = {"type": type_str(a.shape, a.dtype), "size": int(a.size)}
    if a.dtype.kind not in "biufc":
        info["note"] = f"dtype {a.dtype} has no statistics"
        return info
    data = a
    if a.dtype.kind == "c":
        data = np.abs(a)
        info["note"] = "statistics of |z|"
    data = np.asarray(data, dtype=np.float64).ravel()
    with np.errstate(all="ignore"):
        nan, inf = np.isnan(data), np.isinf(data)
        finite = data[~(nan | inf)]
        info["nan"], info["inf"] = int(nan.sum()), int(inf.sum())
        if finite.size:
            info["min"], info["max"] = float(finite.min()), float(finite.max())
            info["mean"], info["std"] = float(finite.mean()), float(finite.std())
            lo, hi = info["min"], info["max"]
            if lo == hi:
                lo, hi = lo - 0.5, hi + 0.5
            counts, edges = np.histogram(finite, bins=HIST_BINS, range=(lo, hi))
            info["hist"] = {"counts": counts.tolist(), "edges": edges.tolist()}
    if a.size <= SMALL_ARRAY:
        info["array"] = np.array2string(
            a, precision=4, suppress_small=True, max_line_width=64, threshold=SMALL_ARRAY
        )
    return info


def _stats_line(info: dict) -> str:
    if "min" not in info:
        return info.get("note", "")
    s = (
        f"min {info['min']:.4g}  max {info['max']:.4g}  "
        f"mean {info['mean']:.4g}  std {info['std']:.4g}"
    )
    if info.get("nan") or info.get("inf"):
        s += f"  nan {info['nan']}  inf {info['inf']}"
    return s


_BARS = " \u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"


def _hist_text(info: dict) -> list[str]:
    """The histogram as one line of bar characters (empty bins blank, others at least one step)."""
    h = info.get("hist")
    if not h:
        return []
    counts, edges = h["counts"], h["edges"]
    top = max(counts) or 1
    bars = "".join(_BARS[0 if c == 0 else max(1, round(8 * c / top))] for c in counts)
    return [f"  histogram [{edges[0]:.4g}, {edges[-1]:.4g}]: |{bars}|"]


def _json_safe(x):
    """``x`` with non-finite floats as strings ("inf", "nan"): JSON for the browser."""
    if isinstance(x, float):
        return x if np.isfinite(x) else repr(x)
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


# ====================================================================== one drawn graph
def _example_args(traced) -> list:
    """The example arguments a Traced was traced with, as a call would take them."""
    return pytree.unflatten(traced.in_tree, list(traced.example_leaves))


def _base(name: str) -> str:
    return re.sub(r"#\d+$", "", name)


def _source_context(src) -> dict | None:
    if src is None:
        return None
    out = {
        "file": src.file,
        "short": os.path.basename(src.file),
        "where": str(src),  # "In [3], line 7" for a notebook cell, "model.py:7" for a file
        "line": src.line,
        "function": src.function,
        "text": src.text,
        "context": [],
    }
    lines = linecache.getlines(src.file)
    if lines and 0 < src.line <= len(lines):
        lo, hi = max(1, src.line - CONTEXT_LINES), min(len(lines), src.line + CONTEXT_LINES)
        ctx = [[i, lines[i - 1].rstrip("\n").expandtabs()] for i in range(lo, hi + 1)]
        indents = [len(t) - len(t.lstrip()) for _, t in ctx if t.strip()]
        cut = min(indents, default=0)
        out["context"] = [[i, t[cut:]] for i, t in ctx]
    elif src.text:
        out["context"] = [[src.line, src.text]]
    return out


def _kind(op: str) -> str:
    o = OPS.get(op)
    return o.kind if o is not None else "opaque"


def _short(x, limit=60) -> str:
    try:
        s = fmt_value(x)
    except Exception:  # an odd attribute value must not break the panel
        s = repr(x)
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


class _Drawn:
    """One graph drawn in the current view: its Nodes by SVG id and a way to compute values.

    ``prefix`` is the id prefix of this graph in the SVG (``fwd-`` for the forward half of the
    backward view); ``inputs`` returns the input values to run the graph on (or raises).
    """

    def __init__(self, graph: Graph, prefix: str, inputs, recorded=None, title=""):
        self.graph, self.prefix, self._inputs, self.title = graph, prefix, inputs, title
        self.recorded = recorded  # Var -> value (keep_values=True), if any
        self._env: dict | None = None
        self.error: str | None = None
        self.by_id: dict[str, tuple] = {}
        producers = graph.producers()
        for i, n in enumerate(graph.nodes):
            self.by_id[self.node_id(n)] = ("op", n, i)
        for v, s in zip(graph.inputs, graph.specs):
            self.by_id[f"{prefix}input-{v.name}"] = ("input", v, s)
        for i, v in enumerate(graph.outputs):
            self.by_id[f"{prefix}output-{i}"] = ("output", v, i)
        for i, gd in enumerate(graph.guards):
            self.by_id[f"{prefix}guard-{i}"] = ("guard", gd, i)
        self.var_id = {v: f"{prefix}input-{v.name}" for v in graph.inputs}
        self.var_id.update({v: self.node_id(n) for v, n in producers.items()})
        self.by_name = {v.name: v for v in self.var_id}

    def node_id(self, n: Node) -> str:
        return f"{self.prefix}node-{n.outputs[0].name}"

    def input_values(self) -> list:
        return list(self._inputs())

    def env(self) -> dict | None:
        """Every value of the graph (recorded, or by running the interpreter once)."""
        if self.recorded is not None:
            return self.recorded
        if self._env is None and self.error is None:
            try:
                env: dict = {}
                run(self.graph, self.input_values(), env_out=env)
                self._env = env
            except Exception as e:  # the panel says why instead of failing
                self.error = f"{type(e).__name__}: {e}"
        return self._env


class _LoopRun:
    """The iterations of one loop node on the values of its inputs (``inputs()``), run as they
    are asked for; the carried state entering each iteration is kept."""

    def __init__(self, node: Node, inputs, start=lambda: 0):
        self.node, self._inputs = node, inputs
        self.start = start  # the count its iterations start from (see tracekit.loops.op)
        self.states: list | None = None  # states[t]: the carried values entering iteration t
        self.finished = False

    def count(self) -> int:
        """How many iterations the loop runs on these inputs (a while loop's: as it runs)."""
        while not self._next():
            pass
        return len(self.states) - 1

    def env_at(self, k: int) -> dict:
        """Every value of the body in iteration ``k`` (the last one, past the end)."""
        while len(self.states or ()) - 1 <= k and not self._next():
            pass
        return self._run(min(k, len(self.states) - 2 if self.finished else k))

    def _next(self) -> bool:
        """Run the next iteration (keeping the state it hands on); True once there is none."""
        attrs, c = self.node.attrs, self.node.attrs["carried"]
        if self.states is None:
            values = list(self._inputs())
            self.states, self.invariants = [values[:c]], values[c:]
        if not self.finished:
            t = len(self.states) - 1
            env = self._run(t)
            self.states.append([env[o] for o in attrs["body"].outputs[:c]])
            cond = attrs.get("cond")
            most = attrs["trips"] if cond is None else attrs["max_iterations"]
            stop = cond is not None and not bool(env[attrs["body"].outputs[cond]])
            self.finished = stop or t + 1 >= most
        return self.finished

    def _run(self, t: int) -> dict:
        body = self.node.attrs["body"]
        values = self.states[t] + self.invariants
        env = {v: as_input_value(v, x) for v, x in zip(body.inputs, values)}
        for node in body_at(body, t, self.start()):
            run_node(node, env)
        return env


class _BodyDrawn(_Drawn):
    """A loop's body drawn inside the loop's cluster; its values are those of one iteration."""

    def __init__(self, body: Graph, prefix: str, loop_run: _LoopRun, title: str):
        super().__init__(body, prefix, lambda: [], None, title)
        self.loop_run, self.iteration = loop_run, 0

    def env(self) -> dict | None:
        if self._env is None and self.error is None:
            try:
                self._env = self.loop_run.env_at(self.iteration)
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
        return self._env

    def at(self, k: int):
        """Show iteration ``k`` (the bodies of loops inside it start over)."""
        self.iteration, self._env, self.error = k, None, None


def _with_bodies(d: _Drawn) -> list:
    """``d`` and, after it, a drawn body for each loop in it (loops inside bodies too)."""
    out = [d]
    for n in d.graph.nodes:
        if OPS[n.op].kind != "control":
            continue

        def inputs(node=n, parent=d):
            env = parent.env()
            if env is None:
                raise ValueError(parent.error or "no values")
            return [env[x] if isinstance(x, Var) else x for x in node.inputs]

        def start(node=n, parent=d):  # an Affine start moves with the loop whose body d is
            at = node.attrs.get("start", 0)
            if not isinstance(at, Affine):
                return at
            return at_iteration(at, parent.iteration, parent.loop_run.start())

        body = n.attrs["body"]
        title = f"{d.title} \u203a {body.name}"
        run = _LoopRun(n, inputs, start)
        out += _with_bodies(_BodyDrawn(body, d.node_id(n) + "/", run, title))
    return out


# ====================================================================== metadata for the browser
def _guard_text(gd) -> str:
    return str(gd)


def _nodes_meta(d: _Drawn, svg_classes: dict, kernels=None, plan_notes=None) -> list[dict]:
    """One record per drawn element of ``d`` (JSON): what the tooltip, search and panel show."""
    g, p = d.graph, d.prefix
    out: list[dict] = []
    guards_of: dict = {}
    for gd in g.guards:
        guards_of.setdefault(gd.var, []).append(_guard_text(gd))
    outputs = set(g.outputs)

    def var_ref(v):
        return {"name": v.name, "type": v.type, "id": d.var_id.get(v)}

    scope_groups: dict = {}  # scope path -> id of the node standing for it (depth=)
    repeat_groups: dict = {}  # (parent path, base name) -> id of a repeated-blocks node
    for sid, cls in svg_classes.items():
        if not sid.startswith(p) or "scope" not in cls.split():
            continue
        rest = sid[len(p) :]
        if rest.startswith("scope-"):
            scope_groups[tuple(rest[len("scope-") :].split("/"))] = sid
        elif rest.startswith("repeat-"):
            path = tuple(rest[len("repeat-") :].split("/"))
            repeat_groups[(path[:-1], _base(path[-1]))] = sid

    stands_for = getattr(svg_classes, "stands_for", {})

    def unit_of(nid, scope):
        """The drawn element showing this op: itself, the one drawn for it (the first of
        repeated blocks, a forward value the backward graph replays), or its collapsed group."""
        if nid in svg_classes:
            return nid
        if nid in stands_for:
            return stands_for[nid]
        scope = tuple(scope)
        for k in range(len(scope), 0, -1):
            path = scope[:k]
            sid = scope_groups.get(path) or repeat_groups.get((path[:-1], _base(path[-1])))
            if sid is not None:
                return sid
        return None

    sources: dict = {}

    def source_of(src):
        if src not in sources:
            sources[src] = _source_context(src)
        return sources[src]

    for v, s in zip(g.inputs, g.specs):
        nid = f"{p}input-{v.name}"
        rec = {
            "id": nid,
            "type": "input",
            "var": v.name,
            "op": s.kind,
            "kind": s.kind,
            "label": f"{s.kind} input %{v.name}: {v.type}",
            "title": s.label,
            "outputs": [var_ref(v)],
            "scope": [],
            "index": -1,
            "unit": nid if nid in svg_classes else None,
            "graph": d.title,
        }
        if s.kind == "const" and v in g.constants:
            rec["attrs"] = {"value": _short(g.constants[v])}
        if v in guards_of:
            rec["guards"] = guards_of[v]
        out.append(rec)
    for i, n in enumerate(g.nodes):
        nid = d.node_id(n)
        kind = _kind(n.op)
        rec = {
            "id": nid,
            "type": "op",
            "var": n.outputs[0].name,
            "op": n.op,
            "kind": kind,
            "label": format_node(n, comment=False),
            "title": str(n.attrs.get("name") or n.op) if kind == "opaque" else n.op,
            "inputs": [
                var_ref(x) if isinstance(x, Var) else {"const": _short(x)} for x in n.inputs
            ],
            "outputs": [var_ref(o) for o in n.outputs],
            "attrs": {k: _short(v) for k, v in n.attrs.items() if v is not None},
            "scope": list(n.scope),
            "index": i,
            "unit": unit_of(nid, n.scope),
            "graph": d.title,
        }
        if any(o in outputs for o in n.outputs):
            rec["is_output"] = True
        src = source_of(n.source)
        if src:
            rec["source"] = src
        gs = [t for o in n.outputs for t in guards_of.get(o, ())]
        if gs:
            rec["guards"] = gs
        if plan_notes and nid in plan_notes:
            rec["plan"] = plan_notes[nid]
        out.append(rec)
    for i, v in enumerate(g.outputs):
        nid = f"{p}output-{i}"
        wb = dict(g.writebacks).get(i)
        label = f"graph output {i}: %{v.name}: {v.type}"
        if wb is not None:
            label += f" (written back into {g.specs[wb].label})"
        out.append(
            {
                "id": nid,
                "type": "output",
                "var": v.name,
                "op": "return" if wb is None else "write back",
                "kind": "output",
                "label": label,
                "title": "return" if wb is None else "write back",
                "inputs": [var_ref(v)],
                "scope": [],
                "index": -1,
                "unit": nid if nid in svg_classes else None,
                "graph": d.title,
            }
        )
    for i, gd in enumerate(g.guards):
        nid = f"{p}guard-{i}"
        rec = {
            "id": nid,
            "type": "guard",
            "var": gd.var.name,
            "op": "guard",
            "kind": "guard",
            "label": str(gd),
            "title": f"guard {gd.how}() == {gd.value!r}",
            "inputs": [var_ref(gd.var)],
            "scope": [],
            "index": -1,
            "unit": nid if nid in svg_classes else None,
            "graph": d.title,
            "guards": [str(gd)],
        }
        src = _source_context(gd.source)
        if src:
            rec["source"] = src
        out.append(rec)
    # clusters and collapsed groups: members for collapse, search and the panel
    by_prefix: dict = {}
    by_unit: dict = {}
    for r in out:
        if r["type"] != "op":
            continue
        by_unit.setdefault(r["unit"], []).append(r["id"])
        sc = tuple(r["scope"])
        for k in range(1, len(sc) + 1):
            by_prefix.setdefault(sc[:k], []).append(r["id"])
    for sid, cls in svg_classes.items():
        if not sid.startswith(p):
            continue
        rest = sid[len(p) :]
        classes = cls.split()
        if rest.startswith("cluster-") and "scope" in classes:
            path = rest[len("cluster-") :].split("/")
            members = by_prefix.get(tuple(path), [])
            out.append(_group_record(sid, "cluster", path, members, d.title))
        elif rest.startswith("repeat-") and "cluster" in classes:  # blocks drawn once
            path = rest[len("repeat-") :].split("/")
            drawn = set(by_prefix.get(tuple(path), []))
            members = [r["id"] for r in out if r["type"] == "op" and r["unit"] in drawn]
            rec = _group_record(sid, "cluster", path, members, d.title)
            rec["kind"] = "repeat"
            out.append(rec)
        elif (rest.startswith("scope-") or rest.startswith("repeat-")) and "node" in classes:
            head = "scope-" if rest.startswith("scope-") else "repeat-"
            path = rest[len(head) :].split("/")
            rec = _group_record(sid, "group", path, by_unit.get(sid, []), d.title)
            rec["kind"] = "repeat" if head == "repeat-" else "scope"
            out.append(rec)
    for k in kernels or ():
        members = [d.node_id(n) for n in k.nodes if d.node_id(n) in d.by_id]
        out.append(
            {
                "id": f"{p}kernel-{k.name}",
                "type": "kernel",
                "var": "",
                "op": "kernel",
                "kind": k.kind,
                "label": f"fused kernel {k.name} ({k.kind}): {len(members)} node(s)",
                "title": f"kernel {k.name}",
                "scope": [],
                "members": members,
                "index": -1,
                "unit": f"{p}kernel-{k.name}",
                "graph": d.title,
            }
        )
    return out


class _Scene(dict):
    """A drawing's scene (drawn id -> classes) and its ``stands_for`` (see tracekit.render)."""

    def __init__(self, scene, stands_for):
        super().__init__(scene)
        self.stands_for = dict(stands_for)


def _group_record(sid, type_, path, members, title) -> dict:
    return {
        "id": sid,
        "type": type_,
        "var": "",
        "op": "scope",
        "kind": "scope",
        "label": "scope " + " > ".join(path) + f": {len(members)} op(s)",
        "title": path[-1],
        "scope": path,
        "members": members,
        "index": -1,
        "unit": sid,
        "graph": title,
    }


# ====================================================================== pass history
def _node_sig(n: Node):
    ins = tuple(x.name if isinstance(x, Var) else ("c", _short(x, 200)) for x in n.inputs)
    attrs = tuple(sorted((k, _short(v, 200)) for k, v in n.attrs.items()))
    return (n.op, ins, attrs, tuple(o.type for o in n.outputs))


def _pass_changes(before: Graph, after: Graph) -> dict:
    """Nodes a pass added, removed or changed, by the name of their first output."""
    b = {n.outputs[0].name: n for n in before.nodes}
    a = {n.outputs[0].name: n for n in after.nodes}
    added = [k for k in a if k not in b]
    removed = [k for k in b if k not in a]
    modified = [k for k in a if k in b and _node_sig(a[k]) != _node_sig(b[k])]
    return {"added": added, "removed": removed, "modified": modified}


# ====================================================================== comparison
@dataclass
class TargetResult:
    """One way of running the graph: its time per call and its outputs."""

    name: str
    seconds: float | None = None  # best time per call
    median: float | None = None
    runs: int = 0
    compile_seconds: float | None = None
    error: str | None = None
    outputs: list = field(default_factory=list, repr=False)


@dataclass
class Comparison:
    """What :meth:`Explorer.compare` measured: timings and differences to the interpreter."""

    targets: list
    outputs: list  # per output: {"index", "type", "diffs": {target: {"max_abs", "max_rel"}}}
    reference: str = "interpreter"

    def to_dict(self) -> dict:
        return {
            "reference": self.reference,
            "targets": [
                {
                    "name": t.name,
                    "seconds": t.seconds,
                    "median": t.median,
                    "runs": t.runs,
                    "compile_seconds": t.compile_seconds,
                    "error": t.error,
                }
                for t in self.targets
            ],
            "outputs": self.outputs,
        }

    def __str__(self):
        ref = next((t for t in self.targets if t.name == self.reference), None)
        lines = ["target         time/call    speed-up   compile"]
        for t in self.targets:
            if t.error:
                lines.append(f"{t.name:<14} unavailable: {t.error}")
                continue
            speed = ""
            if ref is not None and ref.seconds and t.seconds:
                speed = f"x{ref.seconds / t.seconds:.2f}"
            comp = f"{t.compile_seconds:.2f} s" if t.compile_seconds is not None else ""
            lines.append(f"{t.name:<14} {_fmt_time(t.seconds):>10}   {speed:>8}   {comp}")
        for o in self.outputs:
            lines.append(f"output {o['index']} {o['type']}:")
            for name, d in o["diffs"].items():
                lines.append(
                    f"  {name:<12} max abs diff {d['max_abs']:.3g}  max rel diff {d['max_rel']:.3g}"
                )
        return "\n".join(lines)

    __repr__ = __str__


def _fmt_time(s) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _time_calls(fn, budget: float, max_runs: int = 200):
    fn()  # warm-up (and first-call costs)
    times = []
    end = time.perf_counter() + budget
    while len(times) < 3 or (time.perf_counter() < end and len(times) < max_runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), float(np.median(times)), len(times)


def _diff(ref, x) -> dict:
    a = np.asarray(ref)
    b = np.asarray(x)
    if a.shape != b.shape:
        return {"max_abs": float("inf"), "max_rel": float("inf"), "note": "shapes differ"}
    if a.size == 0:
        return {"max_abs": 0.0, "max_rel": 0.0}
    if a.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
        same = bool(np.all(a == b))
        return {"max_abs": 0.0 if same else float("inf"), "max_rel": 0.0 if same else float("inf")}
    a = a.astype(np.complex128 if "c" in (a.dtype.kind, b.dtype.kind) else np.float64)
    b = b.astype(a.dtype)
    with np.errstate(all="ignore"):
        both_nan = np.isnan(a) & np.isnan(b)
        same_inf = np.isinf(a) & (a == b)
        d = np.abs(a - b)
        d = np.where(both_nan | same_inf, 0.0, d)
        d = np.where(np.isnan(d), np.inf, d)
        mag = np.abs(a)
        rel = np.where(d == 0, 0.0, d / np.where(mag > 0, mag, 0.0))
        rel = np.where(np.isnan(rel), np.inf, rel)
    return {"max_abs": float(d.max()), "max_rel": float(rel.max())}


def _cuda_usable() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:
        return False


# ====================================================================== the widget
class _Unavailable(Exception):
    """A view cannot be shown (no autodiff, compile failed...): the message says why."""


class _StepIndex(int):
    """The current step (an ``int``), also callable: ``w.step(k)`` runs the interpreter to k."""

    def __call__(self, k):
        return self._widget.run_to(k)


class _StepTrait(traitlets.Int):
    """An Int trait whose value, read from a widget, is a callable :class:`_StepIndex`."""

    def get(self, obj, cls=None):
        value = super().get(obj, cls)
        if obj is None:
            return value
        s = _StepIndex(value)
        s._widget = obj
        return s


def _int_to_json(value, widget):
    return int(value)


class Explorer(anywidget.AnyWidget):
    """The explorer widget (see the module docstring). Make one with :func:`explore`.

    >>> import numpy as np, tracekit as tk
    >>> w = tk.explore(tk.trace(lambda x: np.tanh(x) * 2, np.ones(3)))
    >>> w.view, w.n_steps, [n["op"] for n in w.nodes if n.get("op")]
    ('forward', 2, ['arg', 'tanh', 'multiply', 'return'])
    """

    _esm = _asset("explorer.js")
    _css = _asset("explorer.css")

    svg = traitlets.Unicode("").tag(sync=True)
    nodes = traitlets.List([]).tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    view = traitlets.Unicode("forward").tag(sync=True)
    step = _StepTrait(0).tag(sync=True, to_json=_int_to_json)
    n_steps = traitlets.Int(0).tag(sync=True)
    details = traitlets.Dict({}).tag(sync=True)
    step_info = traitlets.Dict({}).tag(sync=True)
    kernels = traitlets.List([]).tag(sync=True)
    plan = traitlets.Unicode("").tag(sync=True)
    passes = traitlets.List([]).tag(sync=True)
    pass_index = traitlets.Int(0).tag(sync=True)
    svg_before = traitlets.Unicode("").tag(sync=True)
    compare_result = traitlets.Dict({}).tag(sync=True)
    collapsed = traitlets.List([]).tag(sync=True)
    message = traitlets.Unicode("").tag(sync=True)
    busy = traitlets.Unicode("").tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    height = traitlets.Int(560).tag(sync=True)
    iteration = traitlets.Int(0).tag(sync=True)

    def __init__(self, x, *, view=None, target="cpu", height=560, **render_options):
        self._x = x
        self._target = target
        self._render_options = render_options
        self._traced, self._compiled, self._backward = _classify(x)
        self._graph_only = self._traced is None and isinstance(getattr(x, "graph", x), Graph)
        self._drawn: list[_Drawn] = []
        self._step_env: dict = {}
        self._step_pos = 0
        self._cache: dict = {}
        self._history = None
        self._reverting = False
        self._notes: list[str] = []
        self._meta_by_id: dict = {}
        super().__init__(height=int(height))
        self.title = _graph_of(x).name
        self.observe(self._on_view, names="view")
        self.observe(self._on_selected, names="selected")
        self.observe(self._on_step, names="step")
        self.observe(self._on_pass_index, names="pass_index")
        self.observe(self._on_iteration, names="iteration")
        self.on_msg(self._on_custom_msg)
        if view is None:
            view = "compiled" if self._compiled is not None else "forward"
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, got {view!r}")
        self._show("forward")
        if view != "forward":
            self.view = view

    # ------------------------------------------------------------------ public API
    def select(self, what) -> None:
        """Select a node: a :class:`Node`, a :class:`Var`, a Var name (``"3"``, ``"%3"``), an
        SVG id (``"node-3"``, ``"input-x"``, ``"kernel-k0"``) or an op name (its first node).

        >>> import numpy as np, tracekit as tk
        >>> w = tk.explore(tk.trace(lambda x: np.tanh(x) * 2, np.ones(3)))
        >>> w.select("multiply")
        >>> w.selected
        'node-1'
        >>> w.select("%0")
        >>> w.selected
        'node-0'
        """
        self.selected = self._resolve(what)

    @property
    def selected_node(self):
        """The selected :class:`Node` (or input :class:`Var`, kernel...), or None.

        >>> import numpy as np, tracekit as tk
        >>> w = tk.explore(tk.trace(lambda x: np.tanh(x) * 2, np.ones(3)))
        >>> w.selected_node is None
        True
        >>> w.select("tanh")
        >>> print(w.selected_node)  # doctest: +ELLIPSIS
        %0: f64[3] = tanh(%x)  # ...
        """
        entry = self._lookup(self.selected)
        return None if entry is None else entry[1][1]

    def run_to(self, k: int):
        """Run the interpreter over the view's graph until ``k`` nodes have run (``w.step(k)``).

        Returns the value computed at step ``k`` (the output of node ``k - 1``; None for 0).

        >>> import numpy as np, tracekit as tk
        >>> w = tk.explore(tk.trace(lambda x: np.exp(x) * 2, np.zeros(3)))
        >>> w.run_to(1), w.run_to(2), int(w.step)
        (array([1., 1., 1.]), array([2., 2., 2.]), 2)
        """
        k = int(k)
        if not 0 <= k <= self.n_steps:
            raise ValueError(f"step must be between 0 and {self.n_steps}, got {k}")
        self.step = k
        if k == 0:
            return None
        return self._step_env.get(self._main.graph.nodes[k - 1].outputs[0])

    @property
    def step_env(self) -> dict:
        """Values computed so far in step-through mode: Var name -> value (inputs included).

        >>> import numpy as np, tracekit as tk
        >>> w = tk.explore(tk.trace(lambda x: np.exp(x) * 2, np.zeros(3)))
        >>> w.step(1)  # the interpreter runs the first node
        array([1., 1., 1.])
        >>> w.step_env
        {'x': array([0., 0., 0.]), '0': array([1., 1., 1.])}
        """
        if not self._step_env and self._drawn:
            try:
                self._advance(int(self.step))
            except Exception:  # no example inputs (a bare Graph)
                return {}
        return {v.name: x for v, x in self._step_env.items()}

    def details_text(self) -> str:
        """What the details panel shows for the selection, as plain text.

        >>> import numpy as np, tracekit as tk
        >>> w = tk.explore(tk.trace(lambda x: np.tanh(x) * 2, np.ones(3)))
        >>> w.select("multiply")
        >>> print(w.details_text())  # doctest: +ELLIPSIS
        multiply (elementwise)  %1
        %1: f64[3] = multiply(%0, 2)
        inputs: %0: f64[3], 2
        outputs: %1: f64[3]
        ...
        """
        return _details_text(self.details)

    def compare(self, targets=None, budget: float = 0.25) -> Comparison:
        """Run the graph on the interpreter, the original NumPy function, cpu (and cuda when a GPU
        is present, or when ``targets`` names it) on the example inputs.

        Shows max abs / rel difference of every output against the interpreter and the time per
        call (best of repeated calls for about ``budget`` seconds each); the browser shows it
        as a table and a bar chart. Returns a :class:`Comparison`.

        >>> import numpy as np, tracekit as tk
        >>> w = tk.explore(tk.trace(lambda x: np.tanh(x) * 2, np.ones(3)))
        >>> r = w.compare(targets=["cpu"], budget=0.01)
        >>> [t.name for t in r.targets], r.outputs[0]["diffs"]["cpu"]["max_abs"] < 1e-12
        (['interpreter', 'numpy', 'cpu'], True)
        """
        self.busy = "comparing backends\u2026"
        try:
            result = self._compare(targets, budget)
        finally:
            self.busy = ""
        self.compare_result = _json_safe(result.to_dict())
        return result

    # ------------------------------------------------------------------ views
    @property
    def _main(self) -> _Drawn:
        return self._drawn[0]

    def _on_view(self, change):
        if self._reverting:
            return
        new, old = change["new"], change["old"]
        if not self._show(new):
            self._reverting = True
            try:
                self.view = old if self._drawn else "forward"
            finally:
                self._reverting = False
            if not self._drawn:
                self._show("forward")

    def _show(self, view) -> bool:
        """Draw ``view``; on failure say why in ``message`` and return False."""
        self.busy = f"drawing the {view} view\u2026"
        self._notes = []
        try:
            if view not in VIEWS:
                raise _Unavailable(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
            self._show_view(view)
            return True
        except _Unavailable as e:
            self.message = str(e)
        except Exception as e:  # the widget says what went wrong and stays usable
            if view == "forward":
                raise
            self.message = f"{view} view: {type(e).__name__}: {e}"
        finally:
            self.busy = ""
        return False

    def _show_view(self, view):
        kernels, plan, passes, svg_before = [], "", [], ""
        if view == "forward":
            graph_obj = self._traced if self._traced is not None else self._x
            svg, scene = self._svg(("forward",), graph_obj)
            drawn = _with_bodies(self._drawn_for(graph_obj, "", "forward"))
            metas = [_nodes_meta(d, scene) for d in drawn]
        elif view == "backward":
            b = self._backward_traced()
            svg, ids = self._svg(("backward",), b, with_forward=True)
            drawn = _with_bodies(self._drawn_for(b, "", "backward"))
            drawn += _with_bodies(self._drawn_for(b.forward, "fwd-", "forward"))
            metas = [_nodes_meta(d, ids) for d in drawn]
        elif view == "compiled":
            c = self._compiled_obj()
            svg, ids = self._svg(("compiled",), c)
            d = self._drawn_for(c, "", "compiled")
            notes = _plan_notes(c, d)
            drawn = _with_bodies(d)
            metas = [_nodes_meta(d, ids, kernels=c.kernels, plan_notes=notes)]
            metas += [_nodes_meta(b, ids) for b in drawn[1:]]
            kernels = _kernels_meta(c, d) + _loop_kernels_meta(c, d)
            plan = str(c.plan)
        else:  # passes
            history = self._pass_history()
            if not history:
                raise _Unavailable("no optimisation passes recorded for this graph")
            i = min(max(self.pass_index, 0), len(history) - 1)
            rec = history[i]
            base = self._traced
            after = base.with_graph(rec.after) if base is not None else rec.after
            before = base.with_graph(rec.before) if base is not None else rec.before
            svg, scene = self._svg(("pass", i, "after"), after)
            svg_before, scene_before = self._svg(("pass", i, "before"), before)
            svg_before = _prefix_ids(svg_before, "b4-")
            scene_before = _Scene(
                {f"b4-{k}": v for k, v in scene_before.items()},
                {f"b4-{k}": f"b4-{v}" for k, v in scene_before.stands_for.items()},
            )
            d_after = self._drawn_for(after, "", f"after {rec.name}")
            d_before = self._drawn_for(before, "b4-", f"before {rec.name}")
            drawn = [d_after, d_before]
            metas = [
                _nodes_meta(d_after, scene),
                _nodes_meta(d_before, scene_before),
            ]
            passes = [
                {
                    "name": r.name,
                    "changed": bool(r.changed),
                    "n_before": len(r.before.nodes),
                    "n_after": len(r.after.nodes),
                    **(_pass_changes(r.before, r.after) if j == i else {}),
                }
                for j, r in enumerate(history)
            ]
            if self.pass_index != i:  # clamped: say so without drawing again
                self._reverting = True
                try:
                    self.pass_index = i
                finally:
                    self._reverting = False
        for rec in metas[0]:
            rec["main"] = True
        self._drawn = drawn
        self._step_env, self._step_pos = {}, 0
        with self.hold_sync():
            self.n_steps = len(drawn[0].graph.nodes)
            self.step = 0
            self.step_info = {}
            self.selected = ""
            self.details = {}
            self.collapsed = []
            self.kernels = kernels
            self.plan = plan
            self.passes = passes
            self.svg_before = svg_before
            self.nodes = [r for m in metas for r in m]
            self.svg = svg
            self.message = " ".join(self._notes)
        self._meta_by_id = {r["id"]: r for r in self.nodes}

    def _svg(self, key, obj, **extra) -> tuple:
        """(SVG, scene: drawn id -> classes) of ``obj`` drawn with the widget's options."""
        if key not in self._cache:
            opts = dict(self._render_options)
            opts.update(extra)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                dot = render(obj, **opts)
                try:
                    svg = dot.pipe(format="svg", encoding="utf-8")
                except subprocess.CalledProcessError:
                    # dot's classic ranking fails on some clustered graphs ("trouble in
                    # init_rank"); its newer ranking lays them out
                    dot.attr(newrank="true")
                    svg = dot.pipe(format="svg", encoding="utf-8")
            notes = [str(w.message) for w in caught]
            self._cache[key] = (svg, _Scene(dot.scene, dot.stands_for), notes)
        svg, scene, notes = self._cache[key]
        self._notes += notes
        return svg, scene

    def _drawn_for(self, obj, prefix, title) -> _Drawn:
        graph = _graph_of(obj)
        traced = self._traced
        recorded = None
        if obj is self._traced and traced is not None:
            recorded = traced.values
        if hasattr(obj, "in_tree") and hasattr(obj, "example_leaves"):
            traced = obj
        compiled = getattr(obj, "traced", None)
        if compiled is not None and hasattr(compiled, "flatten_args"):
            traced = compiled
        if traced is None:

            def inputs():
                raise ValueError("a bare Graph has no example inputs to compute values from")

        else:

            def inputs(t=traced):
                return t.flatten_args(_example_args(t))

        return _Drawn(graph, prefix, inputs, recorded, title)

    def _backward_traced(self):
        if self._backward is not None:
            return self._backward
        if self._traced is None:
            raise _Unavailable("the forward + backward view needs a Traced (from tk.trace)")
        try:
            from .autodiff import vjp
        except ImportError as e:
            raise _Unavailable(f"the forward + backward view needs tk.vjp ({e})") from None
        try:
            b = vjp(self._traced)
        except Exception as e:
            raise _Unavailable(
                f"tk.vjp could not differentiate this graph: {type(e).__name__}: {e}"
            ) from None
        if getattr(b, "forward", None) is None or getattr(b, "links", None) is None:
            raise _Unavailable("tk.vjp returned no .forward / .links: cannot draw both halves")
        self._backward = b
        return b

    def _compiled_obj(self):
        if self._compiled is None:
            if self._traced is None:
                raise _Unavailable("the compiled view needs a Traced (tk.trace) or a Compiled")
            self.busy = f"compiling for {self._target}\u2026"
            try:
                from .backends import compile as compile_

                self._compiled = compile_(self._traced, target=self._target, progress=False)
            except Exception as e:
                raise _Unavailable(
                    f"compiling for {self._target!r} failed: {type(e).__name__}: {e}"
                ) from None
        return self._compiled

    def _pass_history(self):
        if self._history is None:
            hist = list(getattr(self._x, "history", None) or [])
            if not hist and self._traced is not None:
                from .passes import optimize

                hist = list(optimize(self._traced).history)
            self._history = hist
        return self._history

    def _on_pass_index(self, change):
        if self.view == "passes" and not self._reverting:
            self._show("passes")

    # ------------------------------------------------------------------ selection
    def _lookup(self, sid: str):
        for d in self._drawn:
            e = d.by_id.get(sid)
            if e is not None:
                return d, e
        if sid.startswith("kernel-") or "kernel-" in sid:
            for k in self.kernels:
                if k["id"] == sid:
                    return self._main, ("kernel", k, None)
        return None

    def _resolve(self, what) -> str:
        if what is None or what == "":
            return ""
        if isinstance(what, Node):
            for d in self._drawn:
                nid = d.node_id(what)
                if nid in d.by_id:
                    return nid
            raise KeyError(f"node {what} is not in the {self.view} view")
        if isinstance(what, Var):
            for d in self._drawn:
                if what in d.var_id:
                    return d.var_id[what]
            raise KeyError(f"%{what.name} is not in the {self.view} view")
        s = str(what)
        if self._lookup(s) is not None or s in self._meta_by_id:
            return s
        name = s[1:] if s.startswith("%") else s
        for d in self._drawn:
            if name in d.by_name:
                return d.var_id[d.by_name[name]]
        for d in self._drawn:
            for n in d.graph.nodes:
                if n.op == s:
                    return d.node_id(n)
        raise KeyError(f"nothing called {s!r} in the {self.view} view")

    def _on_selected(self, change):
        body = self._body_of_selection(change["new"]) if change["new"] else None
        if body is not None and body.iteration != self.iteration:
            self._reverting = True  # the slider shows this loop's iteration
            try:
                self.iteration = body.iteration
            finally:
                self._reverting = False
        self.details = _json_safe(self._details(change["new"]))

    def _details(self, sid: str) -> dict:
        if not sid:
            return {}
        found = self._lookup(sid)
        meta = self._meta_by_id.get(sid)
        if found is None:
            if meta is not None:  # a cluster or a collapsed group
                return {"id": sid, "meta": meta}
            return {"id": sid, "error": f"no element {sid!r} in this view"}
        d, (what, obj, extra) = found
        out: dict = {"id": sid, "meta": meta or {}}
        if what == "kernel":
            out["kernel"] = obj
            return out
        var = None
        if what == "op":
            var = obj.outputs[0]
            if len(obj.outputs) > 1:
                out["more_outputs"] = [o.name for o in obj.outputs[1:]]
        elif what in ("input", "output"):
            var = obj
        elif what == "guard":
            var = obj.var
        if var is not None:
            out["value"] = self._value_of(d, var)
        body = self._body_of_selection(sid)
        if body is not None:
            out["loop"] = self._loop_details(body)
        return out

    # ------------------------------------------------------------------ loops
    def _body_of_selection(self, sid: str):
        """The drawn loop body the iteration slider moves for ``sid``: the body ``sid`` is in,
        or the body of the loop ``sid`` is."""
        for d in self._drawn:
            if isinstance(d, _BodyDrawn) and sid + "/" == d.prefix:
                return d
        found = self._lookup(sid)
        return found[0] if found is not None and isinstance(found[0], _BodyDrawn) else None

    def _loop_details(self, body: _BodyDrawn) -> dict:
        run_ = body.loop_run
        node = run_.node
        try:
            count = run_.count()
            env = body.env()
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
        if env is None:
            return {"error": body.error or "no values"}
        g, c = node.attrs["body"], node.attrs["carried"]
        carried = [
            {"name": o.name, "of": v.name, "value": _describe_value(env[o])}
            for v, o in zip(g.inputs[:c], g.outputs[:c])
        ]
        return {
            "id": body.prefix[:-1],
            "header": g.name,
            "trips": node.attrs["trips"],
            "count": count,
            "iteration": body.iteration,
            "while": is_while(node),
            "carried": carried,
        }

    def _on_iteration(self, change):
        body = self._body_of_selection(self.selected) if self.selected else None
        if body is None or self._reverting:
            return
        k = max(0, int(change["new"]))
        body.at(k)
        for d in self._drawn:  # the loops inside it run again from this iteration's values
            if isinstance(d, _BodyDrawn) and d is not body and d.prefix.startswith(body.prefix):
                d.loop_run.states, d.loop_run.finished = None, False
                d.at(d.iteration)
        self.details = _json_safe(self._details(self.selected))

    def _value_of(self, d: _Drawn, var: Var) -> dict:
        stepping = self.step > 0 and d is self._main
        if stepping:
            if var in self._step_env:
                info = _describe_value(self._step_env[var])
                info["source"] = f"interpreter, step {int(self.step)} of {self.n_steps}"
                return info
            return {"pending": f"not computed yet at step {int(self.step)} of {self.n_steps}"}
        env = d.env()
        if env is None:
            return {"unavailable": d.error or "no values"}
        if var not in env:
            return {"unavailable": f"%{var.name} has no value"}
        info = _describe_value(env[var])
        info["source"] = (
            "recorded by trace(keep_values=True)"
            if d.recorded is not None
            else f"iteration {d.iteration}, reference interpreter"
            if isinstance(d, _BodyDrawn)
            else "example inputs, reference interpreter"
        )
        return info

    # ------------------------------------------------------------------ stepping
    def _on_step(self, change):
        k = int(change["new"])
        if not self._drawn:
            return
        n = len(self._main.graph.nodes)
        if k < 0 or k > n:
            self.step = min(max(k, 0), n)
            return
        if k == 0:
            self._step_env, self._step_pos = {}, 0
        else:
            try:
                self._advance(k)
            except Exception as e:
                self.step_info = {"step": k, "total": n, "error": f"{type(e).__name__}: {e}"}
                return
        info: dict = {"step": k, "total": n}
        if k > 0:
            node = self._main.graph.nodes[k - 1]
            info["id"] = self._main.node_id(node)
            info["label"] = format_node(node, comment=False)
            info["value"] = _describe_value(self._step_env[node.outputs[0]])
        self.step_info = _json_safe(info)
        if self.selected:
            self.details = _json_safe(self._details(self.selected))

    def _advance(self, k: int):
        d = self._main
        if k < self._step_pos or not self._step_env:
            self._step_env = {}
            run(d.graph, d.input_values(), env_out=self._step_env, until=0)
            self._step_pos = 0
        for node in d.graph.nodes[self._step_pos : k]:
            run_node(node, self._step_env)
        self._step_pos = k

    # ------------------------------------------------------------------ compare
    def _on_custom_msg(self, widget, content, buffers):
        if not isinstance(content, dict):
            return
        action = content.get("action")
        try:
            if action == "compare":
                self.compare()
            elif action == "select":
                self.select(content.get("what", ""))
        except Exception as e:
            self.message = f"{action}: {type(e).__name__}: {e}"

    def _compare(self, targets, budget) -> Comparison:
        t = self._traced
        if t is None:
            raise ValueError("compare() needs a Traced or a Compiled (with example inputs)")
        if targets is None:
            targets = ["cpu"] + (["cuda"] if _cuda_usable() else [])
        args = _example_args(t)
        copy_args = bool(t.graph.writebacks)

        def fresh():
            if not copy_args:
                return args
            return pytree.unflatten(
                t.in_tree, [np.array(x, copy=True) for x in pytree.flatten(list(args))[0]]
            )

        runners: list[tuple[str, object, float | None, str | None]] = [
            ("interpreter", t, None, None)
        ]
        if callable(getattr(t, "fn", None)):
            runners.append(("numpy", t.fn, None, None))
        for target in targets:
            c, err, secs = None, None, None
            if self._compiled is not None and self._compiled.target == target:
                c = self._compiled
                secs = getattr(c, "compile_seconds", None)
            else:
                try:
                    from .backends import compile as compile_

                    c = compile_(t, target=target, progress=False)
                    secs = getattr(c, "compile_seconds", None)
                    if target == self._target and self._compiled is None:
                        self._compiled = c  # the compiled view will not compile it again
                except Exception as e:
                    err = f"{type(e).__name__}: {e}"
            runners.append((target, c, secs, err))
        results = []
        for name, fn, secs, err in runners:
            r = TargetResult(name, compile_seconds=secs, error=err)
            if err is None:
                try:
                    out = fn(*fresh())
                    r.outputs = pytree.flatten(out)[0]
                    r.seconds, r.median, r.runs = _time_calls(lambda fn=fn: fn(*fresh()), budget)
                except Exception as e:
                    r.error = f"{type(e).__name__}: {e}"
            results.append(r)
        ref = results[0]
        outputs = []
        for i, v in enumerate(ref.outputs):
            a = np.asarray(v)
            diffs = {}
            for r in results[1:]:
                if r.error is None and i < len(r.outputs):
                    diffs[r.name] = _diff(v, r.outputs[i])
            outputs.append({"index": i, "type": type_str(a.shape, a.dtype), "diffs": diffs})
        return Comparison(results, outputs)


# ====================================================================== helpers
def _classify(x):
    """(traced, compiled, backward) for what explore() was given."""
    from .traced import Traced

    compiled = backward = traced = None
    if (
        hasattr(x, "kernels")
        and hasattr(x, "plan")
        and isinstance(getattr(x, "traced", None), Traced)
    ):
        compiled, traced = x, x.traced
    elif isinstance(x, Traced):
        traced = x
        if getattr(x, "forward", None) is not None and getattr(x, "links", None) is not None:
            backward = x
    elif isinstance(x, Graph) or isinstance(getattr(x, "graph", None), Graph):
        pass
    else:
        raise TypeError(
            "tk.explore takes a Traced (tk.trace), a Compiled (tk.compile), a backward graph "
            f"(tk.vjp) or a Graph; got {type(x).__name__}"
        )
    return traced, compiled, backward


def _graph_of(x) -> Graph:
    return x if isinstance(x, Graph) else x.graph


def _prefix_ids(svg: str, prefix: str) -> str:
    """Give every id in an SVG a prefix (two drawings share one page in the pass view)."""
    return re.sub(r'\bid="', f'id="{prefix}', svg)


def _plan_notes(c, d: _Drawn) -> dict:
    """Node id -> what the plan did with it (its step, and refused fusions with reasons)."""
    notes: dict = {}
    for s in getattr(c.plan, "steps", ()):
        for n in s.nodes:
            nid = d.node_id(n)
            if s.kind == "kernel" and s.group is not None:
                text = f"fused into kernel {s.group.name} ({s.group.kind})"
            else:
                text = f"{s.kind} step" + (f": {s.reason}" if s.reason else "")
            notes.setdefault(nid, []).append(text)
    for r in getattr(c.plan, "refusals", ()):
        node = getattr(r, "node", None)
        if node is not None:
            notes.setdefault(d.node_id(node), []).append(f"fusion refused: {r.reason}")
    kept, again = decision_notes(c.graph, plan_decisions(c.plan))
    for n in c.graph.nodes:
        for text in (kept.get(n.out.name), again.get(n.out.name)):
            if text:
                notes.setdefault(d.node_id(n), []).append(text)
    return notes


def _kernels_meta(c, d: _Drawn) -> list[dict]:
    plan_lines = str(c.plan).splitlines()
    refusals = list(getattr(c.plan, "refusals", ()))
    out = []
    for k in c.kernels:
        ids = [d.node_id(n) for n in k.nodes]
        names = {n.outputs[0].name for n in k.nodes}
        reasons = [
            str(r)
            for r in refusals
            if f"kernel {k.name}" in str(r.reason) or r.node.outputs[0].name in names
        ]
        head = next(
            (ln.strip() for ln in plan_lines if ln.strip().startswith(f"kernel {k.name}:")), ""
        )
        out.append(
            {
                "id": f"kernel-{k.name}",
                "name": k.name,
                "kind": k.kind,
                "nodes": ids,
                "labels": [format_node(n, comment=False) for n in k.nodes],
                "source": k.source,
                "plan": head,
                "reasons": reasons,
            }
        )
    return out


def _loop_kernels_meta(c, d: _Drawn) -> list[dict]:
    """The compiled loops: how each runs, its body's nodes and the source compiled for it."""
    out = []
    for node, run_ in (getattr(getattr(c, "program", None), "loops", None) or {}).items():
        body, prefix = node.attrs["body"], d.node_id(node) + "/"
        out.append(
            {
                "id": f"kernel-loop-{node.outputs[0].name}",
                "name": f"loop %{node.outputs[0].name}",
                "kind": "loop",
                "nodes": [f"{prefix}node-{n.outputs[0].name}" for n in body.nodes],
                "labels": [format_node(n, comment=False) for n in body.nodes],
                "source": getattr(run_, "source", ""),
                "plan": f"{body.name}: {run_.how}",
                "reasons": [],
            }
        )
    return out


def _details_text(det: dict) -> str:
    if not det:
        return "nothing selected"
    if "error" in det:
        return det["error"]
    lines: list[str] = []
    meta = det.get("meta") or {}
    k = det.get("kernel")
    if k is not None:
        lines.append(f"kernel {k['name']} ({k['kind']}), {len(k['nodes'])} node(s)")
        if k.get("plan"):
            lines.append(f"plan: {k['plan']}")
        lines += ["  " + s for s in k["labels"]]
        if k["reasons"]:
            lines.append("refused fusions:")
            lines += ["  " + r for r in k["reasons"]]
        lines.append("source:")
        lines += ["  " + s for s in k["source"].splitlines()]
        return "\n".join(lines)
    t = meta.get("type")
    if t == "op":
        lines.append(f"{meta['op']} ({meta['kind']})  %{meta['var']}")
    elif t:
        lines.append(f"{meta.get('title', '')} ({t})")
    if meta.get("label"):
        lines.append(meta["label"])
    if meta.get("inputs"):
        ins = [
            f"%{i['name']}: {i['type']}" if "name" in i else str(i.get("const"))
            for i in meta["inputs"]
        ]
        lines.append("inputs: " + ", ".join(ins))
    if meta.get("outputs"):
        lines.append("outputs: " + ", ".join(f"%{o['name']}: {o['type']}" for o in meta["outputs"]))
    for key, val in (meta.get("attrs") or {}).items():
        lines.append(f"attr {key} = {val}")
    if meta.get("scope"):
        lines.append("scope: " + " > ".join(meta["scope"]))
    if meta.get("members"):
        lines.append(f"{len(meta['members'])} op(s)")
    src = meta.get("source")
    if src:
        lines.append(f"source: {src['where']} in {src['function']}")
        for no, text in src.get("context", []):
            mark = ">" if no == src["line"] else " "
            lines.append(f"  {mark}{no:5d} | {text}")
    for gd in meta.get("guards") or ():
        lines.append(gd)
    for note in meta.get("plan") or ():
        lines.append("plan: " + note)
    val = det.get("value")
    if val:
        if "pending" in val:
            lines.append("value: " + val["pending"])
        elif "unavailable" in val:
            lines.append("value unavailable: " + val["unavailable"])
        else:
            lines.append(f"value {val['type']} ({val.get('source', '')})")
            st = _stats_line(val)
            if st:
                lines.append("  " + st)
            if val.get("note"):
                lines.append("  " + val["note"])
            lines += _hist_text(val)
            if "array" in val:
                lines += ["  " + s for s in val["array"].splitlines()]
    loop = det.get("loop")
    if loop and "error" in loop:
        lines.append("loop: " + loop["error"])
    elif loop:
        traced = "" if loop["count"] == loop["trips"] else f", {loop['trips']} when traced"
        lines.append(
            f"iteration {loop['iteration']} of {loop['count']}{traced}: `{loop['header']}:`"
        )
        for c in loop["carried"]:
            lines.append(f"  %{c['of']} -> %{c['name']}: " + _stats_line(c["value"]))
    return "\n".join(lines)


def explore(x, *, view=None, target="cpu", height=560, **render_options) -> Explorer:
    """An interactive notebook widget for a Traced, a Compiled or a backward graph.

    Parameters
    ----------
    x : Traced, Compiled, backward Traced (``tk.vjp``) or Graph
    view : {"forward", "backward", "compiled", "passes"} or None
        The view shown first (the widget switches between them); by default the compiled
        view for a Compiled, the forward view otherwise.
    target : str
        The target the compiled view compiles for when ``x`` is not compiled yet.
    height : int
        Height of the graph pane in pixels.
    **render_options
        Passed to :func:`tracekit.render` (``depth``, ``rankdir``, ``show_values``...).

    Returns
    -------
    Explorer
        The widget: ``w.select(...)``, ``w.step(k)``, ``w.view = "compiled"``,
        ``w.details_text()``, ``w.compare()``.
    """
    return Explorer(x, view=view, target=target, height=height, **render_options)


class _CallableModule(types.ModuleType):
    """``tracekit.explore`` stays callable even where the import system bound it to this module."""

    def __call__(self, x, **options):
        pkg = sys.modules.get(__package__)
        entry = getattr(pkg, "_explore_entry", None)
        if entry is not None:  # put `tracekit.explore` back to the function
            pkg.explore = entry
        return explore(x, **options)


sys.modules[__name__].__class__ = _CallableModule
