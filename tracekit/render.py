"""Draw tracekit graphs with graphviz: ``render(x) -> graphviz.Digraph``, and the Jupyter reprs.

>>> import numpy as np, tracekit as tk
>>> t = tk.trace(lambda x: np.tanh(x) * 2, np.ones(3))
>>> d = tk.render(t)                     # a graphviz.Digraph
>>> 'id="node-0"' in d.source or "id=node-0" in d.source
True

``render`` accepts a :class:`~tracekit.traced.Traced`, a :class:`~tracekit.ir.Graph`, or anything
with a ``.graph`` (a compiled object: its ``.kernels`` are drawn as clusters and the refused
fusions in ``.plan.refusals`` are marked; a backward Traced with ``.forward`` and ``.links``
is drawn beside its forward graph with ``with_forward=True``: each backward op on the row of
the forward op whose gradient rule made it, the gradients running up beside the forward ops
running down, and the forward values the backward graph replays drawn once, in the forward
half). The result is an ordinary
``graphviz.Digraph``: ``.source``, ``.pipe(format="svg" | "png")`` and ``.render(path)`` work as
in the graphviz package, laid out by the engine that :func:`find_engine` picks.

Layout engine
-------------
:func:`find_engine` returns, in this order: the command named by the ``TRACEKIT_DOT`` environment
variable (a path or a name on ``PATH``); the system ``dot`` on ``PATH``; the ``graphviz-pure``
command installed by the ``graphviz-pure`` pip package (a dependency of tracekit, so
``pip install tracekit`` renders with nothing else installed). If none of them runs,
:class:`EngineNotFound` says what to install. The graphviz package always runs a module-level
``DOT_BINARY``; the Digraph returned here swaps it, under a lock, for the duration of each
layout call, and runs the engine with ``quiet=True`` (its stderr is kept in the exception if it
fails). An engine that crashes, or runs past ``TRACEKIT_DOT_TIMEOUT`` seconds (default 120), is
replaced by graphviz-pure for that drawing, with a warning (the explorer shows it in its message
line).

SVG contract (stable: the explorer widget and tests rely on it)
---------------------------------------------------------------
Graphviz writes one ``<g>`` per node, cluster and edge, with the class ``node``, ``cluster`` or
``edge``; tracekit sets each group's ``id`` and adds classes after that first one:

==========================  ========================================  =========================
element                     ``id``                                    ``class``
==========================  ========================================  =========================
op node                     ``node-<name of its first output Var>``   ``node op <op kind>`` (a)
graph input                 ``input-<Var name>``                      ``node input <spec kind>``
result / write-back marker  ``output-<position in graph.outputs>``    ``node return``
collapsed scope (depth=)    ``scope-<scope path joined by "/">``      ``node scope``
repeated blocks (xN)        ``repeat-<path of the first block>``      ``cluster scope repeat``
                                                                      (c)
guard marker                ``guard-<index in graph.guards>``         ``node guard``
scope cluster               ``cluster-<scope path joined by "/">``    ``cluster scope``
fused kernel cluster        ``kernel-<kernel name>``                  ``cluster kernel``
forward / backward halves   ``graph-forward``, ``graph-backward``     ``cluster``
edge                        graphviz's own (``edge12``)               ``edge <edge kind>`` (b)
==========================  ========================================  =========================

- <op kind> is the op table's kind (``elementwise``, ``reduce``, ``matmul``, ...; ``opaque``
  for python ops); <spec kind> is ``arg``, ``capture`` or ``const``.
- (a) Also, where they apply: ``output`` (its value is a graph output; inputs and collapsed
  scopes get it too), ``guarded`` (tracing read its value; inputs and scopes too), ``inplace``
  (a functionalised in-place write), ``python-op``, ``refused`` (its fusion was refused; the
  reason is in the label and tooltip), ``backward`` (the backward half of ``with_forward=True``).
  A write-back marker also has ``writeback``.
- (b) <edge kind>: ``data`` (a value flowing; ``data broadcast`` when the consumer broadcasts
  it; ``data saved`` when the backward half reads a forward value), ``guard-link`` (value ->
  guard), ``writeback`` (marker -> the input it is copied into), ``carried`` (a loop body's
  next value -> the input it replaces; in repeated blocks drawn once, a value of one block ->
  where the next block reads it), ``link`` (forward op -> the backward op on its row).
- (c) Repeated blocks are a cluster holding the first block's ops (the others' ops are not
  drawn: ``Digraph.stands_for`` maps their ids to the drawn ones). Where ``depth=`` collapses
  the blocks themselves, they are one node, ``node scope repeat``.
- A captured array or constant read only by one collapsed node (``depth=``, ``collapse_repeats``)
  is folded into it (named in its label and tooltip) and has no ``input-`` node of its own;
  arguments are always drawn. Edges from a folded input start at the collapsed node.
- Scope paths are whole ``Node.scope`` tuples (the outermost function included; the scope
  every op shares is not drawn as a cluster). With ``with_forward=True`` every id of the
  forward half gets the prefix ``fwd-`` (``fwd-node-3``).
- Each group's ``<title>`` is its DOT name, which equals its ``id``; edges' titles are
  ``<tail id>-><head id>``. The hover text (the tooltip, which graphviz writes as
  ``<a xlink:title="...">`` inside the group) holds the listing line
  (``%7: f32[128,64] = add(%5, %6)``), the op kind, ``file.py:line`` with the line's text,
  and the scope path; a collapsed node's tooltip lists its ops.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

import graphviz
import numpy as np
from graphviz.backend import dot_command, execute, piping, rendering

from .ir import Graph, Var, fmt_value, format_node, type_str
from .loops import unroll
from .loops.op import is_while
from .ops import OPS

__all__ = [
    "render",
    "mimebundle",
    "find_engine",
    "scale_svg",
    "EngineNotFound",
    "Digraph",
    "LARGE_GRAPH",
    "REPEATS_ABOVE",
    "COLLAPSED_TARGET",
]

ENV_VAR = "TRACEKIT_DOT"
LARGE_GRAPH = 1500  # ops; above this the default depth collapses scopes (see render)
REPEATS_ABOVE = 300  # ops; above this repeated blocks are drawn once, ×N, by default
COLLAPSED_TARGET = 500  # ... to the deepest depth that draws at most this many op/scope nodes

# fill, border per op kind
KIND_COLORS = {
    "elementwise": ("#e2f0d9", "#548235"),
    "reduce": ("#fbe5d6", "#c55a11"),
    "scan": ("#fff2cc", "#bf9000"),
    "matmul": ("#dae3f3", "#2f5597"),
    "movement": ("#eeeeee", "#7f7f7f"),
    "index": ("#f6dcea", "#a03070"),
    "create": ("#e4dff0", "#5b4a8b"),
    "opaque": ("#ffe699", "#7f6000"),
}
INPUT_COLORS = {
    "arg": ("#d6e9f8", "#2e75b6"),
    "capture": ("#e8e0f4", "#7030a0"),
    "const": ("#ffffff", "#999999"),
}
SCOPE_FILL = ("#f7f9fc", "#eef2f7")
SUMMARY_COLORS = ("#f2f2f2", "#595959")
GUARD_COLORS = ("#fff3b0", "#b08800")
BACKWARD_FILL = "#ffd9c7"
REFUSED_COLOR = "#c00000"
KERNEL_FILLS = [
    ("#e8f1fb", "#2e75b6"),
    ("#fdf0e2", "#c55a11"),
    ("#e9f6e9", "#548235"),
    ("#f7e9f6", "#a03070"),
    ("#efeefb", "#5b4a8b"),
    ("#fbf8dc", "#bf9000"),
    ("#e6f6f6", "#1f7f7f"),
]
FONT = "Helvetica"


def _updates(op: str) -> bool:
    """A functionalised in-place write (drawn bold, marked ``inplace``)."""
    o = OPS.get(op)
    return o is not None and o.update


# ====================================================================== engine
class EngineNotFound(graphviz.ExecutableNotFound):
    """No graphviz layout command can run: says what to install."""

    def __init__(self, message: str):
        RuntimeError.__init__(self, message)


_INSTALL_HINT = (
    "tracekit draws graphs with a graphviz `dot` command. Install one of: the pip package "
    "`graphviz-pure` (`pip install graphviz-pure`; a tracekit dependency, it provides the "
    "`graphviz-pure` command), or the system graphviz (`apt install graphviz`, "
    "`brew install graphviz`, `conda install graphviz`); or set TRACEKIT_DOT to the path of a "
    "working `dot`."
)


@functools.lru_cache(maxsize=64)
def _runs(path: str) -> bool:
    try:
        proc = subprocess.run([path, "-V"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _graphviz_pure_candidates():
    exe = "graphviz-pure" + (".exe" if os.name == "nt" else "")
    found = shutil.which("graphviz-pure")
    if found:
        yield found
    for d in (os.path.dirname(sys.executable), sysconfig.get_path("scripts")):
        if d:
            yield os.path.join(d, exe)
    try:
        dist = importlib.metadata.distribution("graphviz-pure")
    except importlib.metadata.PackageNotFoundError:
        return
    for f in dist.files or ():
        if f.name == exe:
            yield str(dist.locate_file(f))


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


@functools.lru_cache(maxsize=32)
def _resolve(env_value: str | None, search_path: str | None) -> tuple[str, str]:
    if env_value:
        path = shutil.which(env_value) or (env_value if _executable(env_value) else None)
        if path is None or not _runs(path):
            raise EngineNotFound(
                f"{ENV_VAR}={env_value!r} does not name a runnable `dot` command "
                f"(`{env_value} -V` failed). Unset it to use the system `dot` or "
                f"graphviz-pure. {_INSTALL_HINT}"
            )
        return path, "TRACEKIT_DOT"
    dot = shutil.which("dot")
    if dot and _runs(dot):
        return dot, "system dot"
    for cand in _graphviz_pure_candidates():
        if _executable(cand) and _runs(cand):
            return cand, "graphviz-pure"
    raise EngineNotFound(
        "no graphviz layout engine found: no `dot` on PATH and no runnable `graphviz-pure` "
        f"command. {_INSTALL_HINT}"
    )


def find_engine(describe: bool = False):
    """The path of the layout command to run (``describe=True``: ``(path, where it came from)``).

    Order: ``$TRACEKIT_DOT``, the system ``dot`` on ``PATH``, the ``graphviz-pure`` command.
    Raises :class:`EngineNotFound` if none runs. Resolved once per (``TRACEKIT_DOT``, ``PATH``).
    """
    path, how = _resolve(os.environ.get(ENV_VAR) or None, os.environ.get("PATH"))
    return (path, how) if describe else path


_ENGINE_LOCK = threading.RLock()


def _with_engine(fn, binary=None):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        exe = binary or find_engine()
        kwargs["quiet"] = True
        # the DOT lines are read again where the engine crashes (_crash_fallback)
        lines_at = [i for i, a in enumerate(args) if isinstance(a, Iterator)]
        lines_kw = [k for k, a in kwargs.items() if isinstance(a, Iterator)]
        args = [list(a) if i in lines_at else a for i, a in enumerate(args)]
        kwargs = {k: list(a) if k in lines_kw else a for k, a in kwargs.items()}

        def attempt():
            a = [iter(x) if i in lines_at else x for i, x in enumerate(args)]
            return fn(*a, **{k: iter(x) if k in lines_kw else x for k, x in kwargs.items()})

        with _ENGINE_LOCK:
            saved = dot_command.DOT_BINARY, execute._run_input_lines
            dot_command.DOT_BINARY = pathlib.Path(exe)
            execute._run_input_lines = _run_input_lines_timed
            try:
                try:
                    return attempt()
                except (subprocess.CalledProcessError, BrokenPipeError) as e:
                    fallback = _crash_fallback(exe, e)
                    if fallback is None:
                        raise
                    dot_command.DOT_BINARY = pathlib.Path(fallback)
                    execute._run_input_lines = saved[1]  # the last resort: no time limit
                    return attempt()
            finally:
                dot_command.DOT_BINARY, execute._run_input_lines = saved

    return call


def engine_timeout() -> float:
    """Seconds a layout may take before the engine is stopped and the graph laid out by
    graphviz-pure instead (``TRACEKIT_DOT_TIMEOUT``, default 120)."""
    try:
        return float(os.environ.get("TRACEKIT_DOT_TIMEOUT", "120"))
    except ValueError:
        return 120.0


class _EngineTimeout(subprocess.CalledProcessError):
    """The layout engine ran past :func:`engine_timeout` and was killed."""


def _run_input_lines_timed(cmd, input_lines, *, kwargs):
    """graphviz's own way of running the engine on the DOT lines, stopped after
    :func:`engine_timeout` seconds (the system ``dot`` can also run for ever)."""
    popen = subprocess.Popen(cmd, stdin=subprocess.PIPE, **kwargs)
    for line in input_lines:
        popen.stdin.write(line)
    try:
        stdout, stderr = popen.communicate(timeout=engine_timeout())
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.communicate()
        raise _EngineTimeout(popen.returncode, popen.args) from None
    return subprocess.CompletedProcess(popen.args, popen.returncode, stdout=stdout, stderr=stderr)


def _crash_fallback(exe: str, error) -> str | None:
    """graphviz-pure, when the command ``exe`` was killed by a signal (the system ``dot`` can
    crash on large graphs), ran past :func:`engine_timeout`, or died before it read the graph
    (a broken pipe), and is not graphviz-pure itself; a warning says so."""
    code = getattr(error, "returncode", None)
    if code is not None and code >= 0:
        return None
    pure = next((p for p in _graphviz_pure_candidates() if _executable(p)), None)
    if pure is None or os.path.samefile(pure, exe):
        return None
    how = f"signal {-code}" if code is not None else "it stopped reading the graph"
    did = "crashed"
    if isinstance(error, _EngineTimeout):
        did, how = "timed out", f"over {engine_timeout():g} s, TRACEKIT_DOT_TIMEOUT"
    warnings.warn(
        f"the graphviz command {exe} {did} ({how}) laying out this graph; it was drawn "
        f"with {pure} instead",
        RuntimeWarning,
        stacklevel=3,
    )
    return pure


class Digraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` laid out by :func:`find_engine`'s command; its Jupyter SVG scales.

    Set ``.dot_binary`` to force a command for this object. ``render`` sets ``.scene`` (drawn
    id -> classes) and ``.stands_for`` (id of an op not drawn -> the id drawn for it).
    """

    dot_binary: str | None = None
    scene: dict = {}
    stands_for: dict = {}
    rows: tuple = ()  # the rank=same lines of a forward+backward drawing (see _draw_rows)

    def pipe(self, *args, **kwargs):
        return self._without_rows_if_needed(super().pipe, *args, **kwargs)

    def render(self, *args, **kwargs):
        return self._without_rows_if_needed(super().render, *args, **kwargs)

    def _without_rows_if_needed(self, call, *args, **kwargs):
        """Lay out; if the engine fails on the rows (graphviz's ranking can: "trouble in
        init_rank"), lay out again without them, with a warning."""
        try:
            return call(*args, **kwargs)
        except subprocess.CalledProcessError as e:
            if not self.rows or not any(line in self.body for line in self.rows):
                raise
            stderr = getattr(e, "stderr", None) or ""
            if isinstance(stderr, bytes):
                stderr = stderr.decode(errors="replace")
            reason = next((r for r in stderr.splitlines() if "Error" in r), "")
            self.body = [line for line in self.body if line not in self.rows]
            warnings.warn(
                "the layout engine could not draw each gradient on its forward op's row"
                + (f" ({reason.strip()})" if reason else "")
                + "; drawn without the rows",
                RuntimeWarning,
                stacklevel=3,
            )
            return call(*args, **kwargs)

    @property
    def _pipe_lines(self):
        return _with_engine(piping.pipe_lines, self.dot_binary)

    @property
    def _pipe_lines_string(self):
        return _with_engine(piping.pipe_lines_string, self.dot_binary)

    @property
    def _render(self):
        return _with_engine(rendering.render, self.dot_binary)

    def _repr_image_svg_xml(self) -> str:
        return scale_svg(self.pipe(format="svg", encoding="utf-8"))


_SVG_TAG = re.compile(r"<svg\b[^>]*>", re.S)


def scale_svg(svg: str) -> str:
    """Make graphviz's SVG shrink to its container's width (keeping its natural size when smaller).

    Keeps the ``viewBox`` (it must be there: nothing is clipped when the size changes) and adds
    ``style="max-width:100%;height:auto"`` to the root element.
    """
    m = _SVG_TAG.search(svg)
    if m is None:
        return svg
    tag = m.group(0)
    if "viewBox" not in tag:
        w = re.search(r'\bwidth="([\d.]+)(pt|px)?"', tag)
        h = re.search(r'\bheight="([\d.]+)(pt|px)?"', tag)
        if w and h:
            tag = tag.replace("<svg", f'<svg viewBox="0 0 {w.group(1)} {h.group(1)}"', 1)
    tag = re.sub(r'\sstyle="[^"]*"', "", tag)
    tag = tag.replace("<svg", '<svg style="max-width:100%;height:auto"', 1)
    return svg[: m.start()] + tag + svg[m.end() :]


# ====================================================================== labels
def _clip(text: str, width: int) -> str:
    text = str(text)
    if width and len(text) > width:
        return text[: max(1, width - 1)] + "\u2026"
    return text


def _label(lines, width) -> str:
    """A DOT label from lines: clipped, backslashes literal, never an HTML label."""
    out = [_clip(s, width).replace("\\", "\\\\") for s in lines if s is not None and s != ""]
    return graphviz.nohtml("\\n".join(out))


def _tooltip(lines) -> str:
    return graphviz.nohtml("\\n".join(str(s).replace("\\", "\\\\") for s in lines if s))


def _dask_layer(kern) -> list:
    """What a kernel became in a dask graph (target dask, after a call): ["dask: ..."]."""
    layer = getattr(kern, "layer", "")
    return [f"dask: {layer}"] if layer else []


def _ops(n: int) -> str:
    return f"{n} op" if n == 1 else f"{n} ops"


def _base(name: str) -> str:
    return re.sub(r"#\d+$", "", name)


def _quote(value) -> str:
    """A double-quoted DOT string (labels come here with their backslashes already doubled)."""
    text = str(value).replace('"', '\\"')
    if (len(text) - len(text.rstrip("\\"))) % 2:
        text += "\\"
    return f'"{text}"'


def _attr_text(attrs: dict) -> str:
    return " ".join(f"{k}={_quote(v)}" for k, v in attrs.items() if v is not None and v != "")


def _cluster(sub, scene, cid, kind, **attrs):
    """Gives a cluster its id, its SVG class (``kind``) and its look, and records it in the
    scene as ``cluster <kind>``: what the explorer reads back from the SVG."""
    scene[cid] = f"cluster {kind}"
    sub.attr(id=cid, _attributes={"class": kind}, **attrs)


def _add_node(dot, name: str, attrs: dict):
    # written straight into the body: graphviz's node() quoting dominated the build time
    dot.body.append(f"\t{_quote(name)} [{_attr_text(attrs)}]\n")


def _add_edge(dot, tail: str, head: str, attrs: dict):
    dot.body.append(f"\t{_quote(tail)} -> {_quote(head)} [{_attr_text(attrs)}]\n")


@functools.lru_cache(maxsize=4096)
def _back_edge(dot, tail: str, head: str, cls: str, color: str, tooltip: str):
    """A dashed edge against the flow (a write-back, a carried value), not ranking the nodes."""
    attrs = {"class": cls, "style": "dashed", "color": color, "constraint": "false"}
    _add_edge(dot, tail, head, {**attrs, "arrowhead": "vee", "tooltip": tooltip})


def _type_of(shape, dtype, weak) -> str:
    return type_str(shape, dtype) + ("~" if weak else "")


def _vtype(v: Var) -> str:
    return _type_of(v.shape, v.dtype, v.weak)


def _kind(op: str) -> str:
    o = OPS.get(op)
    return o.kind if o is not None else "opaque"


def _short(x, limit=24) -> str:
    try:
        s = fmt_value(x)
    except Exception:  # an odd attribute value must not stop the drawing
        s = repr(x)
    return _clip(s, limit)


def _value_line(value) -> str | None:
    try:
        a = np.asarray(value)
    except Exception:
        return None
    if a.dtype.kind not in "biufc":
        return None
    if a.size <= 4:
        flat = a.ravel().tolist()
        text = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat)
        return text if a.ndim == 0 else f"[{text}]"
    if a.dtype.kind == "c":
        a = np.abs(a)
    with np.errstate(all="ignore"):
        lo, mean, hi = float(a.min()), float(a.mean()), float(a.max())
    return f"min {lo:.3g} mean {mean:.3g} max {hi:.3g}"


# ====================================================================== the builder
@dataclass
class _Unit:
    """One drawn node standing for one op (``op``) or a group of ops (``scope``, ``repeat``)."""

    id: str
    kind: str
    nodes: list
    cluster: tuple
    path: tuple = ()
    count: int = 1
    absorbed: list = field(default_factory=list)  # (Var, InputSpec) folded into a summary


@dataclass
class _Options:
    depth: object = None
    show_shapes: bool = True
    show_values: bool = False
    show_constants: bool = True
    collapse_repeats: bool = False
    max_label_width: int = 40


def _common_prefix(scopes) -> tuple:
    scopes = list(scopes)
    if not scopes:
        return ()
    first = scopes[0]
    n = len(first)
    for s in scopes[1:]:
        n = min(n, len(s))
        for i in range(n):
            if s[i] != first[i]:
                n = i
                break
        if n == 0:
            break
    return tuple(first[:n])


def _attr_key(attrs) -> str:
    try:
        return repr(sorted((k, _short(v, 200)) for k, v in attrs.items()))
    except Exception:
        return repr(attrs)


class _Builder:
    """Adds one graph's nodes, clusters and edges to a DOT graph (or a subgraph)."""

    def __init__(self, graph: Graph, opts: _Options, prefix="", values=None, kernels=None,
                 refusals=None, backward=False, body_of=None, offsets=None,
                 elsewhere=None, pin_to=None):  # fmt: skip
        self.g = graph
        # the backward half beside its forward: what to draw on the row of which forward node
        self.pin_to = pin_to or {}  # Var name or ("output", k) -> (forward id, tooltip line)
        self.pins: dict[str, tuple] = {}  # drawn id -> (forward id of its row, why)
        self.reads_forward: set = set()  # (forward id, drawn id) of the data edges between
        self.elsewhere = elsewhere or {}  # Var -> the id drawing it in the other half
        self.runs: dict[tuple, tuple] = {}  # repeated blocks drawn once: first path -> run
        self.copy_of: dict[int, tuple] = {}  # see _find_repeats
        self.block_size: dict[tuple, int] = {}  # first path -> ops in one block
        self.in_run: set[int] = set()  # ops of blocks drawn once (the first and the others)
        self.body_of = body_of  # the loop node whose body this graph is
        self.loop_inputs: dict = {}  # a loop's drawn id -> {its input Var: its body input's id}
        self.o = opts
        self.prefix = prefix
        self.values = values or {}
        self.kernels = list(kernels or [])
        self.refusals = list(refusals or [])
        # fusion across offsets: values kept as arrays (and why), nodes computing one again
        self.offsets_kept, self.recomputed = decision_notes(graph, offsets)
        self.backward = backward
        self.width = opts.max_label_width
        nodes = graph.nodes
        self.root = _common_prefix(n.scope for n in nodes)
        self.rel = [tuple(n.scope[len(self.root) :]) for n in nodes]
        self.scene: dict[str, str] = {}  # drawn id -> classes, as the SVG's <g> will carry them

    # ------------------------------------------------------------------ ids
    def pid(self, s: str) -> str:
        return self.prefix + s

    def input_id(self, v: Var) -> str:
        return self.pid(f"input-{v.name}")

    # ------------------------------------------------------------------ grouping
    def units(self):
        """Group the ops into drawn units: depth collapse, repeat collapse, kernels.

        ``unit_of[i]`` is None for an op not drawn: a replayed forward value drawn in the
        forward half (``elsewhere``), or an op of a repeated block after the first, which
        stands for it (``copy_of``)."""
        nodes, rel, o = self.g.nodes, self.rel, self.o
        assigned: dict[int, tuple] = {}
        repeat_info: dict[tuple, tuple] = {}
        depth = None if self.kernels else o.depth
        if o.collapse_repeats and not self.kernels:
            self._find_repeats(depth, assigned, repeat_info)
        if depth is not None:
            for i, r in enumerate(rel):
                if i not in assigned and len(r) > depth:
                    assigned[i] = ("scope", r[: depth + 1])
        kernel_of = self._kernel_map()
        units: dict[tuple, _Unit] = {}
        unit_of: list[_Unit | None] = []
        for i, n in enumerate(nodes):
            if i in self.copy_of or all(v in self.elsewhere for v in n.outputs):
                unit_of.append(None)
                continue
            key = assigned.get(i, ("op", i))
            u = units.get(key)
            if u is None:
                if key[0] == "op":
                    cl = kernel_of.get(i, ()) if self.kernels else rel[i]
                    u = _Unit(self.pid(f"node-{n.outputs[0].name}"), "op", [], cl)
                elif key[0] == "scope":
                    path = self.root + key[1]
                    u = _Unit(self.pid("scope-" + "/".join(path)), "scope", [], key[1][:-1], path)
                else:
                    run = repeat_info[key]
                    path = self.root + run[0]
                    u = _Unit(
                        self.pid("repeat-" + "/".join(path)),
                        "repeat",
                        [],
                        run[0][:-1],
                        path,
                        count=len(run),
                    )
                units[key] = u
            u.nodes.append(n)
            unit_of.append(u)
        return list(units.values()), unit_of

    def _find_repeats(self, depth, assigned, repeat_info):
        """Runs of identical consecutive sibling blocks. A run at the depth limit becomes one
        ``×N`` node (``repeat_info``, ``assigned``); any other is drawn once, its first block
        in a cluster marked ``×N`` (``self.runs``), the ops of the other blocks standing for
        the first block's (``self.copy_of``: op index -> (first block's op index, block))."""
        rel = self.rel
        limit = 10**9 if depth is None else depth + 1
        members: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(rel):
            for k in range(1, min(len(r), limit) + 1):
                members[r[:k]].append(i)
        children: dict[tuple, list] = defaultdict(list)
        for p in members:
            children[p[:-1]].append(p)

        def contiguous(idx):
            return idx[-1] - idx[0] + 1 == len(idx)

        sig_cache: dict[tuple, tuple] = {}

        def sig(p):
            if p not in sig_cache:
                sig_cache[p] = self._signature(p, members[p])
            return sig_cache[p]

        def flush(run):
            if len(run) < 2:
                return
            if depth is not None and len(run[0]) > depth:
                key = ("repeat", run[0])
                repeat_info[key] = tuple(run)
                for p in run:
                    for i in members[p]:
                        assigned[i] = key
                return
            self.runs[run[0]] = tuple(run)
            self.block_size[run[0]] = len(members[run[0]])
            for p in run:
                self.in_run.update(members[p])
            for p in run[1:]:
                for first, i in zip(members[run[0]], members[p]):
                    self.copy_of[i] = (first, run[0])
                    assigned[i] = ("copy",)

        for parent in sorted(children, key=len):
            sibs = sorted(children[parent], key=lambda p: members[p][0])
            run: list = []
            for p in sibs:
                if members[p][0] in assigned or not contiguous(members[p]):
                    flush(run)
                    run = []
                    continue
                if (
                    run
                    and _base(p[-1]) == _base(run[0][-1])
                    and members[run[-1]][-1] + 1 == members[p][0]
                    and sig(p) == sig(run[0])
                ):
                    run.append(p)
                else:
                    flush(run)
                    run = [p]
            flush(run)
        for i in self.copy_of:  # a block inside a repeated block: the first of the first
            first, block = self.copy_of[i]
            while first in self.copy_of:
                first = self.copy_of[first][0]
            self.copy_of[i] = (first, block)

    def _signature(self, path, idxs):
        local: dict = {}
        out = []
        for j, i in enumerate(idxs):
            n = self.g.nodes[i]
            ins = []
            for x in n.inputs:
                if isinstance(x, Var):
                    ins.append(("l", local[x]) if x in local else ("x", _vtype(x)))
                else:
                    ins.append(("c", _short(x, 200)))
            inner = tuple(_base(s) for s in self.rel[i][len(path) :])
            out.append(
                (n.op, _attr_key(n.attrs), tuple(_vtype(v) for v in n.outputs), tuple(ins), inner)
            )
            for k, v in enumerate(n.outputs):
                local[v] = (j, k)
        return tuple(out)

    def _kernel_map(self) -> dict:
        if not self.kernels:
            return {}
        index = {}
        for i, n in enumerate(self.g.nodes):
            index[id(n)] = i
            for v in n.outputs:
                index.setdefault(("var", v.name), i)
        out = {}
        for k, kern in enumerate(self.kernels):
            for n in getattr(kern, "nodes", ()):
                i = index.get(id(n))
                if i is None and getattr(n, "outputs", None):
                    i = index.get(("var", n.outputs[0].name))
                if i is not None and i not in out:
                    out[i] = (("kernel", k),)
        return out

    # ------------------------------------------------------------------ drawing
    def build(self, dot) -> dict:
        """Draw into ``dot``; return Var -> the DOT name of the node that shows it."""
        g, o, width = self.g, self.o, self.width
        units, unit_of = self.units()
        self.unit_list, self.unit_of = units, unit_of
        nodes = g.nodes
        self.producer_index = {v: i for i, n in enumerate(nodes) for v in n.outputs}
        self.rep: dict[Var, Var] = {}  # a value of a block drawn once -> the drawn block's
        for i, (first, _) in self.copy_of.items():
            self.rep.update(zip(nodes[i].outputs, nodes[first].outputs))
        producer_unit = {}
        for n, u in zip(nodes, unit_of):
            for v in n.outputs if u is not None else ():
                producer_unit[v] = u
        spec_of = dict(zip(g.inputs, g.specs))
        # consumers: drawn units; ("run", path) for the blocks a repeated block stands for
        consumers = defaultdict(set)
        for i, (n, u) in enumerate(zip(nodes, unit_of)):
            c = (
                u.id
                if u is not None
                else ("run", self.copy_of[i][1])
                if i in self.copy_of
                else None
            )
            for x in n.var_inputs if c is not None else ():
                consumers[x].add(c)
        # an input read only by values drawn in the other half is not drawn here either
        read = {x for n in nodes for x in n.var_inputs}
        hidden = {v for v in g.inputs if v in read and v not in consumers}
        if not o.show_constants:
            hidden |= {v for v, s in spec_of.items() if s.kind == "const"}
        src: dict[Var, str] = {v: self.input_id(v) for v in g.inputs}
        for v, u in producer_unit.items():
            src[v] = u.id
        src.update(self.elsewhere)
        self.elsewhere_ids = set(self.elsewhere.values())
        for v, w in self.rep.items():
            src[v] = src[w]
        # captured arrays and constants read by one collapsed node only are folded into it
        by_id = {u.id: u for u in units}
        guard_vars = {gd.var for gd in g.guards}
        self.run_absorbed: dict[tuple, list] = defaultdict(list)
        absorbed = {}
        for v, s in spec_of.items():
            if s.kind == "arg" or v in guard_vars or v in set(g.outputs) or v in hidden:
                continue
            cs = consumers.get(v, ())
            if len(cs) != 1:
                continue
            (c,) = cs
            if isinstance(c, tuple):  # read by the blocks drawn as the first one only
                self.run_absorbed[c[1]].append((v, s))
                absorbed[v] = None
                src[v] = None
            elif by_id[c].kind != "op":
                absorbed[v] = by_id[c]
                absorbed[v].absorbed.append((v, s))
                src[v] = absorbed[v].id
        self.src = src
        self.drawn: set[str] = set()
        # guards on values drawn in the other half are drawn there
        self._guards_drawn = {
            self.pid(f"guard-{gi}") for gi, gd in enumerate(g.guards) if gd.var in self.elsewhere
        }

        refused = {}
        for r in self.refusals:
            node = getattr(r, "node", None)
            if node is not None and getattr(node, "outputs", None):
                refused.setdefault(node.outputs[0].name, []).append(str(getattr(r, "reason", "")))
        for name, reason in self.offsets_kept.items():
            refused.setdefault(name, []).append(reason)

        guarded = defaultdict(list)
        for gi, gd in enumerate(g.guards):
            guarded[src.get(gd.var)].append(gi)
        output_vars = set(g.outputs)

        # ---- clusters: a tree of relative paths (or kernel keys)
        tree: dict[tuple, list] = defaultdict(list)  # cluster path -> drawn items
        children: dict[tuple, list] = defaultdict(list)

        def ensure(path):
            while path and path not in children[path[:-1]]:
                children[path[:-1]].append(path)
                path = path[:-1]

        for u in units:
            ensure(u.cluster)
            tree[u.cluster].append(("unit", u))
            for gi in guarded.get(u.id, ()):
                tree[u.cluster].append(("guard", gi))

        # ---- inputs
        for v in g.inputs:
            if v in hidden or v in absorbed or v in self.elsewhere:
                continue
            s = spec_of[v]
            fill, border = INPUT_COLORS.get(s.kind, INPUT_COLORS["arg"])
            classes = ["input", s.kind] + (["output"] if v in output_vars else [])
            if guarded.get(src[v]):
                classes.append("guarded")
            lines = [s.label if s.kind != "const" else "const", _vtype(v)]
            if self.body_of is not None:  # a loop body's input: carried, or read every iteration
                k = g.inputs.index(v)
                lines[0] = ("carried " if k < self.body_of.attrs["carried"] else "") + f"%{v.name}"
            if s.kind == "const" and v in g.constants:
                lines[0] = "const " + _short(g.constants[v], 20)
            vl = self._value(v)
            attrs = dict(
                shape={"arg": "box", "capture": "cylinder", "const": "plaintext"}.get(
                    s.kind, "box"
                ),
                style="rounded,filled" if s.kind != "const" else "",
                fillcolor=fill,
                color=border,
            )
            if s.kind == "const":
                attrs.update(fontsize="9", fontcolor="#666666")
            self._node(
                dot,
                src[v],
                _label(lines + [vl], width),
                _tooltip(
                    [f"{s.kind} input %{v.name}: {_vtype(v)}", s.label, self._pin(src[v], v.name)]
                ),
                classes,
                **attrs,
            )
            for gi in guarded.get(src[v], ()):
                self._guard(dot, gi, src[v])

        # ---- units, inside nested clusters
        counter = [0]

        def emit(container, path):
            for what, item in tree.get(path, ()):
                if what == "unit":
                    self._unit(container, item, refused, guarded, output_vars)
                else:
                    self._guard(container, item, None)
            for child in children.get(path, ()):
                counter[0] += 1
                sub = graphviz.Digraph(name=f"cluster_{self.prefix}{counter[0]}")
                self._cluster_attrs(sub, child)
                emit(sub, child)
                container.subgraph(sub)

        emit(dot, ())
        for gi in range(len(g.guards)):  # guards on values that are not drawn (hidden constants)
            self._guard(dot, gi, None)

        # ---- edges
        seen = set()
        for i, n in enumerate(nodes):
            first = self.copy_of.get(i, (i,))[0]
            u = unit_of[first]
            if u is None:
                continue
            for x, y in zip(n.inputs, nodes[first].inputs):
                if not isinstance(x, Var) or x in hidden:
                    continue
                drawn_x = self.rep.get(x, x)
                if first != i and drawn_x == self.rep.get(y, y):
                    continue  # the first block's own edge, drawn with it
                s = src.get(x)
                carried = first != i and self.producer_index.get(x) in self.in_run
                if s is None or (s == u.id and not carried):
                    continue
                head = self.loop_inputs.get(u.id, {}).get(y, u.id)
                key = (s, head, drawn_x, carried)
                if key in seen:
                    continue
                seen.add(key)
                if carried:
                    _add_edge(dot, s, head, {
                        "class": "carried", "style": "dashed", "color": "#2e75b6",
                        "constraint": "false", "arrowhead": "vee", "label": "next block",
                        "fontcolor": "#2e75b6", "fontsize": "8",
                        "tooltip": f"%{drawn_x.name} of one block is read by the next block",
                    })  # fmt: skip
                else:
                    self._data_edge(dot, s, head, drawn_x, nodes[first] if u.kind == "op" else None)
        # ---- outputs
        for oi, v in enumerate(g.outputs):
            oid = self.pid(f"output-{oi}")
            classes = ["return"]
            if self.body_of is not None:
                self._body_output(dot, oi, v, src, hidden)
                continue
            if oi >= g.n_results:
                ii = dict(g.writebacks)[oi]
                target = g.inputs[ii]
                text = f"write back -> {spec_of[target].label}"
                classes.append("writeback")
            else:
                target = None
                text = "return" if g.n_results == 1 else f"return[{oi}]"
            self._node(
                dot,
                oid,
                _label([text], width),
                _tooltip(
                    [
                        f"graph output {oi}: %{v.name}: {_vtype(v)}",
                        text,
                        self._pin(oid, ("output", oi)),
                    ]
                ),
                classes,
                shape="box",
                style="rounded,bold",
                color="#333333",
                fontsize="10",
                peripheries="2",
            )
            if v in src and v not in hidden:
                self._data_edge(dot, src[v], oid, v, None)
            if target is not None and target not in hidden:
                tip = f"copied into {spec_of[target].label} after each call"
                _back_edge(dot, oid, src[target], "writeback", "#c0504d", tip)
        return {v: s for v, s in src.items() if s in self.drawn}

    def stands_for(self) -> dict:
        """The id of each op or input not drawn -> the id of what is drawn for it: the first
        block's op (repeated blocks drawn once), the forward half's (a replayed value)."""
        out = {self.input_id(v): s for v, s in self.elsewhere.items() if v in self.g.inputs}
        for i, n in enumerate(self.g.nodes):
            first = self.copy_of.get(i, (i,))[0]
            u = self.unit_of[first]
            at = u.id if u is not None else self.elsewhere.get(n.outputs[0])
            nid = self.pid(f"node-{n.outputs[0].name}")
            if at is not None and at != nid and nid not in self.drawn:
                out[nid] = at
        return out

    def _body_output(self, dot, k, v, src, hidden):
        """Output ``k`` of a loop body: the next value of a carried input (a dashed edge back to
        it) or a value the loop gives after its last iteration."""
        carried = k < self.body_of.attrs["carried"]
        stacked = k >= len(self.g.outputs) - self.body_of.attrs.get("stacked", 0)
        trips = self.body_of.attrs["trips"]
        text = "next" if carried else f"stacked \u00d7{trips}" if stacked else "after the loop"
        oid = self.pid(f"output-{k}")
        self._node(
            dot,
            oid,
            _label([text], self.width),
            _tooltip([f"body output {k}: %{v.name}: {_vtype(v)}", text]),
            ["return", "next" if carried else "stacked" if stacked else "last"],
            shape="box",
            style="rounded",
            color="#333333",
            fontsize="9",
        )
        if v in src and v not in hidden:
            self._data_edge(dot, src[v], oid, v, None)
        if carried:
            tip = f"%{v.name} is %{self.g.inputs[k].name} in the next iteration"
            _back_edge(dot, oid, self.input_id(self.g.inputs[k]), "carried", "#2e75b6", tip)

    def _value(self, v):
        if not self.o.show_values or v not in self.values:
            return None
        return _value_line(self.values[v])

    def _node(self, dot, nid, label, tooltip, classes, **attrs):
        self.drawn.add(nid)
        attrs["id"] = nid
        attrs["class"] = " ".join(dict.fromkeys(classes))
        self.scene[nid] = f"node {attrs['class']}"
        attrs["tooltip"] = tooltip
        attrs["label"] = label
        _add_node(dot, nid, attrs)

    def _cluster_attrs(self, sub, path):
        if path and path[0] and isinstance(path[0], tuple) and path[0][0] == "kernel":
            k = path[0][1]
            kern = self.kernels[k]
            name = str(getattr(kern, "name", k))
            fill, border = KERNEL_FILLS[k % len(KERNEL_FILLS)]
            n_ops = len(getattr(kern, "nodes", ()))
            _cluster(
                sub, self.scene, self.pid(f"kernel-{name}"), "kernel",
                label=_label([f"kernel {name}", *_dask_layer(kern)], self.width),
                tooltip=_tooltip([f"fused kernel {name}: {_ops(n_ops)}", *_dask_layer(kern)]),
                style="filled,rounded", fillcolor=fill, color=border, fontcolor=border,
                fontsize="11", penwidth="1.5",
            )  # fmt: skip
            return
        full = self.root + path
        if path in self.runs:
            self._run_attrs(sub, path)
            return
        _cluster(
            sub, self.scene, self.pid("cluster-" + "/".join(full)), "scope",
            label=_label([path[-1]], self.width),
            tooltip=_tooltip(["scope " + " > ".join(full)]),
            style="filled,rounded", fillcolor=SCOPE_FILL[len(path) % 2], color="#9aa5b1",
            fontcolor="#44546a", fontsize="11", labeljust="l",
        )  # fmt: skip

    def _run_attrs(self, sub, path):
        """The cluster of a run of identical blocks drawn once: the first block's ops, marked
        ``×N``; what the other blocks read alone (their own weights) is named in its label."""
        run = self.runs[path]
        full = self.root + path
        rid = self.pid("repeat-" + "/".join(full))
        n_ops = self.block_size[path]
        lines = [f"{_base(path[-1])} \u00d7{len(run)}  ({_ops(n_ops)} each, drawn once)"]
        tip = [
            f"{len(run)} identical blocks " + " > ".join(full[:-1]),
            "drawn once (the first); the others compute the same ops on their own inputs:",
            ", ".join(p[-1] for p in run),
        ]
        own = self.run_absorbed.get(path, [])
        if own:
            kinds = {s.kind for _, s in own}
            what = "captured" if kinds == {"capture"} else "inputs"
            lines.append(
                f"+{len(own)} {what} of the other blocks: " + ", ".join(s.label for _, s in own)
            )
            tip += [f"{s.kind} %{v.name}: {_vtype(v)} = {s.label}" for v, s in own[:12]]
        _cluster(
            sub, self.scene, rid, "scope repeat",
            label=_label(lines, self.width * 2),
            tooltip=_tooltip(tip),
            style="filled,rounded,bold", fillcolor=SCOPE_FILL[len(path) % 2], color="#595959",
            fontcolor="#262626", fontsize="11", penwidth="2", labeljust="l",
        )  # fmt: skip

    def _loop(self, dot, u: _Unit, node):
        """A loop: its body drawn once in a cluster labelled with the Python loop and its trip
        count; the loop's inputs enter the body's inputs, carried values go back from each
        ``next`` output to the value it replaces (dashed), the loop's results leave from the
        body's outputs."""
        body = node.attrs["body"]
        sub = graphviz.Digraph(name=f"cluster_{u.id}")
        where = f"  {node.source}" if node.source else ""
        title = f"{body.name}  \u00d7{node.attrs['trips']}"
        if is_while(node):  # its count is the data's: the traced one, and the bound
            title += f" when traced, \u2264{node.attrs['max_iterations']}"
        _cluster(
            sub, self.scene, u.id, "loop",
            label=_label([title + where], self.width * 2),
            tooltip=_tooltip([format_node(node)]),
            style="rounded,dashed,filled", fillcolor="#f7f7f7", color="#7f7f7f",
            fontcolor="#404040", penwidth="1.5",
        )  # fmt: skip
        inner = _Builder(body, self.o, prefix=f"{u.id}/", body_of=node)
        inner.build(sub)
        dot.subgraph(sub)
        self.drawn |= inner.drawn
        self.scene.update(inner.scene)
        self.loop_inputs[u.id] = dict(zip(node.inputs, map(inner.input_id, body.inputs)))
        for k, o in enumerate(node.outputs):
            self.src[o] = inner.pid(f"output-{k}")

    def _unit(self, dot, u: _Unit, refused, guarded, output_vars):
        width = self.width
        if u.kind != "op":
            ops = len(u.nodes)
            produced = {v for n in u.nodes for v in n.outputs}
            produced.update(v for v, _ in u.absorbed)
            ins, outs = [], []
            for n in u.nodes:
                for x in n.inputs:
                    if isinstance(x, Var) and x not in produced and _vtype(x) not in ins:
                        ins.append(_vtype(x))
            users = self._users()
            for n in u.nodes:
                for v in n.outputs:
                    used_out = v in output_vars or any(m not in u.nodes for m in users.get(v, ()))
                    if used_out and _vtype(v) not in outs:
                        outs.append(_vtype(v))

            def short_list(ts):
                return ", ".join(ts[:3]) + (", \u2026" if len(ts) > 3 else "")

            name = u.path[-1]
            if u.kind == "repeat":
                title = f"{_base(name)} \u00d7{u.count}"
                count_line = f"{_ops(ops // u.count)} each"
            else:
                title = name
                count_line = _ops(ops)
            lines = [title, count_line, "in: " + short_list(ins), "out: " + short_list(outs)]
            if u.absorbed:
                kinds = {s.kind for _, s in u.absorbed}
                what = "captured" if kinds == {"capture"} else "inputs"
                names = ", ".join(s.label for _, s in u.absorbed)
                lines.append(f"+{len(u.absorbed)} {what}: {names}")
            classes = ["scope"] + (["repeat"] if u.kind == "repeat" else [])
            if any(v in output_vars for n in u.nodes for v in n.outputs):
                classes.append("output")
            if guarded.get(u.id):
                classes.append("guarded")
            fill, border = SUMMARY_COLORS
            tip = [
                f"{'repeated block' if u.kind == 'repeat' else 'collapsed scope'} "
                + " > ".join(u.path),
                _ops(ops) + (f" in {u.count} identical blocks" if u.kind == "repeat" else ""),
            ]
            tip += [f"{s.kind} %{v.name}: {_vtype(v)} = {s.label}" for v, s in u.absorbed[:12]]
            tip += [format_node(n) for n in u.nodes[:12]]
            if len(u.nodes) > 12:
                tip.append(f"... {len(u.nodes) - 12} more")
            self._node(
                dot,
                u.id,
                _label(lines, width),
                _tooltip(tip),
                classes,
                shape="box3d" if u.kind == "repeat" else "box",
                style="filled,bold" if u.kind == "repeat" else "filled",
                fillcolor=fill,
                color=border,
            )
            return
        n = u.nodes[0]
        if OPS[n.op].kind == "control":
            self._loop(dot, u, n)
            return
        kind = _kind(n.op)
        fill, border = KIND_COLORS.get(kind, KIND_COLORS["opaque"])
        classes = ["op", kind]
        if any(v in output_vars for v in n.outputs):
            classes.append("output")
        if guarded.get(u.id):
            classes.append("guarded")
        head = n.op
        if kind == "opaque":
            classes.append("python-op")
            head = str(n.attrs.get("name") or n.op)
        consts = [_short(x, 12) for x in n.inputs if not isinstance(x, Var)]
        if consts and self.o.show_constants:
            args = ["\u00b7" if isinstance(x, Var) else _short(x, 12) for x in n.inputs]
            head = f"{head}({', '.join(args)})"
        lines = [head]
        attrs_line = self._attrs_line(n, kind)
        if attrs_line:
            lines.append(attrs_line)
        if _updates(n.op):
            classes.append("inplace")
        if kind == "opaque":
            lines.append("python op")
        vl = self._value(n.outputs[0])
        if vl:
            lines.append(vl)
        reasons = refused.get(n.outputs[0].name, [])
        style = "rounded,filled"
        extra = {}
        if reasons:
            classes.append("refused")
            reason = reasons[0]
            if not reason.lower().startswith("not fused"):
                reason = "not fused: " + reason
            wrapped = textwrap.wrap(reason, max(12, width or 40))
            lines += wrapped[:2]
            if len(wrapped) > 2:
                lines[-1] = _clip(lines[-1] + " \u2026", width)
            extra.update(color=REFUSED_COLOR, penwidth="2", fontcolor=REFUSED_COLOR)
            style = "rounded,filled,dashed"
        if _updates(n.op):
            style += ",bold"
        if self.backward:
            classes.append("backward")
            fill = BACKWARD_FILL
        tip = [format_node(n, comment=False), f"kind: {kind}", self._pin(u.id, n.outputs[0].name)]
        if n.source is not None:
            where = f"{n.source.file}:{n.source.line}"
            tip.append(f"{where}  {n.source.text}".rstrip())
        if n.scope:
            tip.append("scope: " + " > ".join(n.scope))
        if _updates(n.op):
            tip.append("functionalised in-place write: a new value for the written buffer")
        for r in reasons:
            tip.append(f"fusion refused: {r}")
        again = self.recomputed.get(n.outputs[0].name)
        if again:
            classes.append("tiled" if again.startswith("computed in tiles") else "recomputed")
            tip.append(again)
        attrs = dict(
            shape="doubleoctagon" if kind == "opaque" else "box",
            style=style if kind != "opaque" else "filled" + (",dashed" if reasons else ""),
            fillcolor=fill,
            color=border,
        )
        attrs.update(extra)
        self._node(dot, u.id, _label(lines, width), _tooltip(tip), classes, **attrs)

    def _attrs_line(self, n, kind):
        if _updates(n.op) and "idx" in n.attrs:
            idx = n.attrs["idx"]
            idx = idx if isinstance(idx, tuple) else (idx,)
            return "write [" + ", ".join(_short(i, 16) for i in idx) + "]"
        if kind == "opaque":
            return ""
        parts = []
        for k, v in n.attrs.items():
            if v is None or (k == "keepdims" and v is False):
                continue
            if kind == "create" and k in ("shape", "dtype"):
                continue
            parts.append(f"{k}={_short(v, 16)}")
        return " ".join(parts)

    @functools.cached_property
    def _users_map(self):
        return self.g.users()

    def _users(self):
        return self._users_map

    def _guard(self, dot, gi, attach):
        gd = self.g.guards[gi]
        gid = self.pid(f"guard-{gi}")
        if gid in self._guards_drawn:
            return
        self._guards_drawn.add(gid)
        where = str(gd.source) if gd.source else ""
        text = gd.source.text if gd.source and gd.source.text else ""
        lines = [f"guard {gd.how}() == {_short(gd.value, 16)}", where, text]
        fill, border = GUARD_COLORS
        self._node(
            dot,
            gid,
            _label(lines, self.width),
            _tooltip(
                [
                    str(gd),
                    "tracing read this value and baked it into the graph",
                    f"{gd.source.file}:{gd.source.line}  {text}" if gd.source else "",
                ]
            ),
            ["guard"],
            shape="note",
            style="filled",
            fillcolor=fill,
            color=border,
            fontsize="9",
        )
        source = self.src.get(gd.var)
        if source in self.drawn:
            _add_edge(
                dot,
                source,
                gid,
                {
                    "class": "guard-link",
                    "style": "dashed",
                    "color": border,
                    "arrowhead": "none",
                },
            )

    def _pin(self, drawn_id, key) -> str:
        """Draw ``drawn_id`` on the row of the forward node ``pin_to`` names for ``key``;
        returns the line its tooltip gets (empty if it has no row)."""
        at = self.pin_to.get(key)
        if at is None:
            return ""
        self.pins[drawn_id] = at
        return at[1]

    def _data_edge(self, dot, tail, head, v: Var, consumer):
        attrs = {"class": "data"}
        from_forward = tail in self.elsewhere_ids
        if from_forward:  # the backward half reads a forward value
            attrs.update({"class": "data saved", "color": "#7f9cc7"})
            self.reads_forward.add((tail, head))
        row = self.pins.get(head, (None,))[0]
        placed = from_forward or tail in self.pins or head.startswith(self.pid("output-"))
        if row is not None and placed and self.pins.get(tail, (None,))[0] != row != tail:
            attrs["constraint"] = "false"  # the forward half's rows place its ends
        # (an edge within one row is a flat edge: it orders the row left to right)
        label = _vtype(v) if self.o.show_shapes else ""
        tip = f"%{v.name}: {_vtype(v)}"
        if consumer is not None and _kind(consumer.op) == "elementwise":
            out = consumer.outputs[0]
            if v.shape != out.shape and out.ndim > 0:
                attrs.update({"class": "data broadcast", "color": "#d35400", "style": "bold"})
                shape = ",".join(map(str, out.shape))
                if self.o.show_shapes:
                    label = f"{_vtype(v)} \u2192 [{shape}]"
                tip += f" broadcast to [{shape}]"
        if label:
            attrs["label"] = graphviz.nohtml(label)
        attrs["tooltip"] = graphviz.nohtml(tip)
        _add_edge(dot, tail, head, attrs)


# ====================================================================== entry points
def _graph_of(x) -> Graph:
    if isinstance(x, Graph):
        return x
    g = getattr(x, "graph", None)
    if isinstance(g, Graph):
        return g
    raise TypeError(
        f"render() takes a Traced, a Graph or an object with a .graph; got {type(x).__name__}"
    )


def _replayed(graph: Graph, fgraph: Graph, links: dict, fby: dict) -> dict:
    """The backward graph's inputs and replayed forward ops that the forward half draws
    (same name, same op, same inputs) -> the forward half's id for them."""
    finputs = {v.name for v in fgraph.inputs}
    fnode = {o.name: n for n in fgraph.nodes for o in n.outputs}
    out = {
        v: fby[v.name]
        for v in graph.inputs
        if links.get(v.name) == v.name and v.name in finputs and v.name in fby
    }
    const = {v for v, s in zip(graph.inputs, graph.specs) if s.kind == "const"}
    for n in graph.nodes:
        f = fnode.get(n.outputs[0].name)
        if (
            f is None
            or f.op != n.op
            or [o.name for o in f.outputs] != [o.name for o in n.outputs]
            or any(links.get(o.name) != o.name or o.name not in fby for o in n.outputs)
            or len(f.inputs) != len(n.inputs)
        ):
            continue
        if all(
            b in const or (b in out and isinstance(a, Var) and a.name == b.name)
            for a, b in zip(f.inputs, n.inputs)
            if isinstance(b, Var)
        ):
            out.update((o, fby[o.name]) for o in n.outputs)
    return out


def _rows(graph: Graph, fgraph: Graph, links: dict, fby: dict, gradient_of) -> dict:
    """Where each backward value is drawn: on the row of the forward node whose gradient rule
    computed it (a cotangent of an output: on that output's row; a gradient: on its input's)."""
    fnode = {o.name: n for n in fgraph.nodes for o in n.outputs}
    inputs = {v.name for v in graph.inputs}
    out: dict = {}
    for b, f in links.items():
        if f not in fby or b == f:
            continue
        if b in inputs:
            text = f"cotangent of %{f}: where the gradient of it starts"
        elif f in fnode:
            text = "in the gradient of " + format_node(fnode[f], comment=False)
        else:
            text = f"in the gradient of input %{f}"
        out[b] = (fby[f], text)
    finputs = {v.name for v in fgraph.inputs}
    for k, f in enumerate(gradient_of):
        if f in fby:
            what = f"the gradient with respect to %{f}" if f in finputs else f"the value %{f}"
            out[("output", k)] = (fby[f], what)
    return out


def _draw_rows(dot, bb: _Builder):
    """Each backward node on the row of its forward node (``rank=same``), and one light link
    from the forward node to the last of them (the gradient leaving the row), unless a data
    edge already joins the forward node to the row."""
    rows: dict = defaultdict(list)
    for drawn, (fid, _) in bb.pins.items():
        if drawn in bb.drawn:
            rows[fid].append(drawn)
    for fid, drawn in rows.items():
        names = " ".join(_quote(i) for i in [fid, *drawn])
        dot.rows += (f"\t{{rank=same; {names}}}\n",)
        dot.body.append(dot.rows[-1])
        if any((fid, d) in bb.reads_forward for d in drawn):
            continue
        _add_edge(dot, fid, drawn[-1], {
            "class": "link", "style": "dashed", "color": "#bfbfbf", "penwidth": "0.8",
            "arrowhead": "none", "constraint": "false",
            "tooltip": bb.pins[drawn[-1]][1],
        })  # fmt: skip


def _drawn_once(graph: Graph) -> int:
    """How many op nodes draw ``graph`` with its repeated blocks drawn once."""
    units, _ = _Builder(graph, _Options(collapse_repeats=True)).units()
    return len(units)


def _auto_depth(graph: Graph):
    """For a graph over LARGE_GRAPH ops: the deepest depth drawing <= COLLAPSED_TARGET units."""
    if len(graph.nodes) <= LARGE_GRAPH:
        return None
    root = _common_prefix(n.scope for n in graph.nodes)
    rel = [n.scope[len(root) :] for n in graph.nodes]
    deepest = max((len(r) for r in rel), default=0)
    for d in range(deepest - 1, -1, -1):
        drawn = sum(1 for r in rel if len(r) <= d) + len({r[: d + 1] for r in rel if len(r) > d})
        if drawn <= COLLAPSED_TARGET:
            return d
    return 0 if deepest else None


LOOP_DRAWINGS = ("roll", "unroll")  # render(loops=): a loop's body once, or every iteration


def render(
    x,
    depth=None,
    show_shapes=True,
    rankdir="TB",
    show_values=False,
    show_constants=True,
    collapse_repeats=None,
    max_label_width=40,
    with_forward=False,
    loops="roll",
) -> Digraph:
    """Draw a traced graph as a ``graphviz.Digraph`` (``.pipe(format="svg")``, ``.render(path)``).

    Parameters
    ----------
    x : Traced, Graph, or an object with ``.graph``
        Compiled objects add their ``.kernels`` (clusters, one colour each) and
        ``.plan.refusals`` (marked nodes); a backward Traced has ``.forward`` and ``.links``.
    depth : int, "all" or None
        Scopes nested deeper than ``depth`` levels (below the scope every op shares, usually the
        traced function) collapse into one summary node each (op count, in/out types).
        ``None`` draws every op, except that graphs of more than ``LARGE_GRAPH`` (1,500) ops
        collapse to the deepest depth that draws at most ``COLLAPSED_TARGET`` (500) nodes,
        with a note (a warning and the graph's title) saying how to expand;
        ``"all"`` always draws every op.
    show_shapes : bool
        Label edges with dtype and shape (``f32[128,64]``); a broadcast shows its target shape.
    rankdir : str
        ``"TB"`` (top to bottom) or ``"LR"``, ``"BT"``, ``"RL"``.
    show_values : bool
        Print small values or min/mean/max on nodes (needs ``trace(..., keep_values=True)``).
    show_constants : bool
        Draw constant inputs and literal arguments (``multiply(·, 2)``); ``False`` hides them.
    collapse_repeats : bool or None
        Draw consecutive identical sibling scopes (the same layer called N times) once: the
        first block's ops in a cluster marked ``×N``, values entering and leaving it, and a
        dashed "next block" edge where a block reads what the one before it made. ``None``:
        for graphs of more than ``REPEATS_ABOVE`` (300) ops, with a note saying so (``False``
        draws every block); the automatic ``depth`` then applies only if the graph drawn so
        is still too large.
    max_label_width : int
        Longer label lines are cut with ``…`` (full text in the tooltip).
    with_forward : bool
        For a backward graph: draw its forward graph on the same canvas. Each backward op
        is drawn on the row of the forward op whose gradient rule made it (``rank=same``), so
        the gradients run up beside the forward ops; the forward values it replays are drawn
        once, in the forward half, and read from there (``data saved``); a light line joins
        a forward op to its row where no data edge does.
    loops : "roll" or "unroll"
        ``"roll"`` draws a loop's body once in a cluster; ``"unroll"`` draws every iteration, as
        ``tk.trace(..., loops="unroll")`` records them (without a compiled graph's kernels).

    Returns
    -------
    graphviz.Digraph
        Its ``scene`` attribute maps the id of every drawn node and cluster to the classes its
        SVG group carries (``"node op elementwise"``, ``"cluster scope"``): what the explorer
        reads, instead of parsing the SVG.

    >>> import numpy as np, tracekit as tk
    >>> d = tk.render(tk.trace(lambda x: np.exp(x) + 1, np.ones(3)))
    >>> sorted(k for k, v in d.scene.items() if "op" in v.split())
    ['node-0', 'node-1']
    """
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"rankdir must be one of TB, LR, BT, RL; got {rankdir!r}")
    if loops not in LOOP_DRAWINGS:
        raise ValueError(f"loops must be 'roll' or 'unroll'; got {loops!r}")
    graph = _graph_of(x)
    unrolled = loops == "unroll" and graph is not unroll(graph)
    if unrolled:
        graph = unroll(graph)
    notes, auto_repeats = [], []  # auto_repeats: graphs drawn with collapse_repeats by default

    def opts_for(g):
        repeats = collapse_repeats
        if repeats is None:
            repeats = len(g.nodes) > REPEATS_ABOVE
            if repeats:
                auto_repeats.append(g)
        d = depth
        if d is None:
            d = _auto_depth(g)
            if d is not None and repeats and _drawn_once(g) <= COLLAPSED_TARGET:
                d = None  # its repeated blocks drawn once, every op of the rest fits
            if d is not None:
                notes.append(
                    f"{g.name}: {len(g.nodes):,} ops, drawn with scopes collapsed below depth={d}. "
                    f"tk.render(x, depth='all') draws every op; depth={d + 1} one level more."
                )
        elif d == "all":
            d = None
        elif not isinstance(d, int | np.integer) or d < 0:
            raise ValueError(f"depth must be a non-negative int, 'all' or None; got {depth!r}")
        return _Options(
            depth=None if d is None else int(d),
            show_shapes=show_shapes,
            show_values=show_values,
            show_constants=show_constants,
            collapse_repeats=bool(repeats),
            max_label_width=int(max_label_width or 0),
        )

    dot = Digraph(name=graph.name)
    dot.attr(
        rankdir=rankdir,
        fontname=FONT,
        fontsize="12",
        nodesep="0.25",
        ranksep="0.35",
        labelloc="t",
        labeljust="l",
        id=graph.name if not with_forward else "tracekit",
    )
    if with_forward:  # dot's default ranking fails ("trouble in init_rank") on scoped pairs
        dot.attr(newrank="true")
    dot.attr("node", fontname=FONT, fontsize="11", shape="box", height="0.3", margin="0.12,0.05")
    dot.attr("edge", fontname=FONT, fontsize="9", fontcolor="#555555", color="#666666",
             arrowsize="0.6")  # fmt: skip

    values = getattr(x, "values", None) if show_values else None
    plan = getattr(x, "plan", None)
    refusals = getattr(plan, "refusals", None) if plan is not None else None
    offsets = plan_decisions(plan) if plan is not None else None
    kernels = getattr(x, "kernels", None)
    if kernels is not None and not isinstance(kernels, list | tuple):
        kernels = list(kernels)
    if unrolled:  # the kernels and plan are the rolled graph's
        kernels = refusals = offsets = None

    if with_forward:
        fwd = getattr(x, "forward", None)
        links = getattr(x, "links", None)
        if fwd is None or links is None:
            raise ValueError(
                "with_forward=True needs a backward graph with .forward (the forward Traced) "
                "and .links (backward var name -> forward var name), as tk.vjp returns"
            )
        fgraph = unroll(_graph_of(fwd)) if loops == "unroll" else _graph_of(fwd)
        fvalues = getattr(fwd, "values", None) if show_values else None
        fsub = graphviz.Digraph(name="cluster_forward")
        fsub.attr(id="graph-forward", label="forward", style="rounded", color="#9aa5b1",
                  fontcolor="#44546a", fontsize="13")  # fmt: skip
        fb = _Builder(fgraph, opts_for(fgraph), prefix="fwd-", values=fvalues)
        fsrc = fb.build(fsub)
        fby = {v.name: s for v, s in fsrc.items()}
        links = {str(b): str(f) for b, f in dict(links).items()}
        bsub = graphviz.Digraph(name="cluster_backward")
        bsub.attr(id="graph-backward", label="backward (gradients flow up)", style="rounded",
                  color="#c0504d", fontcolor="#c0504d", fontsize="13")  # fmt: skip
        gradient_of = getattr(x, "gradient_of", None) or ()
        bb = _Builder(graph, opts_for(graph), values=values, kernels=kernels, refusals=refusals,
                      backward=True, offsets=offsets,
                      elsewhere=_replayed(graph, fgraph, links, fby),
                      pin_to=_rows(graph, fgraph, links, fby, gradient_of))  # fmt: skip
        bb.build(bsub)
        dot.subgraph(fsub)
        dot.subgraph(bsub)
        dot.scene = {**fb.scene, **bb.scene}
        dot.stands_for = {**fb.stands_for(), **bb.stands_for()}
        _draw_rows(dot, bb)
    else:
        b = _Builder(graph, opts_for(graph), values=values, kernels=kernels, refusals=refusals,
                     offsets=offsets)  # fmt: skip
        b.build(dot)
        dot.scene = b.scene
        dot.stands_for = b.stands_for()

    if auto_repeats and any("repeat" in c.split() for c in dot.scene.values()):
        g = auto_repeats[0]
        notes.append(
            f"{g.name}: {len(g.nodes):,} ops, repeated blocks drawn once (×N); "
            "tk.render(x, collapse_repeats=False) draws every block."
        )
    title = graph.name
    if notes:
        for note in notes:
            warnings.warn(note, stacklevel=2)
        title = title + "\\n" + "\\n".join(notes)
    dot.attr(label=graphviz.nohtml(title))
    return dot


def mimebundle(x) -> dict:
    """Jupyter's view of a Traced: ``{"image/svg+xml": scaled SVG, "text/plain": the listing}``.

    If no layout engine can run, returns the listing alone and warns with what to install.
    """
    graph = _graph_of(x)
    listing = str(graph)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            svg = render(x).pipe(format="svg", encoding="utf-8")
    except EngineNotFound as e:
        warnings.warn(f"graph not drawn: {e}", stacklevel=2)
        return {"text/plain": listing}
    return {"image/svg+xml": scale_svg(svg), "text/plain": listing}


def plan_decisions(plan) -> list:
    """What a compiled plan decided about values, drawn as notes (:func:`decision_notes`):
    fusion across offsets, and values computed where read broadcast."""
    return [*(getattr(plan, "offsets", None) or ()), *(getattr(plan, "broadcasts", None) or ())]


def decision_notes(graph, decisions) -> tuple[dict, dict]:
    """``({value name: why it stays an array}, {value name: where it is computed again})``
    of the plan's decisions: fusion across offsets, and values computed where read."""
    if not decisions:
        return {}, {}
    from .backends import broadcasts, offsets

    where_read = [d for d in decisions if isinstance(d, broadcasts.BroadcastFusion)]
    kept, again = offsets.drawn_notes(graph, [d for d in decisions if d not in where_read])
    return kept, {**again, **broadcasts.drawn_notes(where_read)}
