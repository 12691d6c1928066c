"""tracekit.render: the drawing (parsed back from the SVG), engines, the Jupyter bundle."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import stat
import sys
import warnings
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import graphviz
import numpy as np
import pytest
from helpers.run import quiet

import tracekit as tk
from tracekit.ir import Graph, Node, Var
from tracekit.loops import unroll

R = importlib.import_module("tracekit.render")  # `tk.render` is the function

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"
SYSTEM_DOT = "/usr/bin/dot"


# ---------------------------------------------------------------------- models under test
class Linear:
    def __init__(self, n_in, n_out, rng):
        self.w = rng.standard_normal((n_in, n_out)).astype(np.float32)
        self.b = rng.standard_normal(n_out).astype(np.float32)

    def __call__(self, x):
        return x @ self.w + self.b


class MLP:
    def __init__(self):
        rng = np.random.default_rng(0)
        self.l1, self.l2 = Linear(6, 5, rng), Linear(5, 3, rng)

    def __call__(self, x):
        h = np.tanh(self.l1(x))
        return self.l2(h)


def mlp_traced(**kw):
    return tk.trace(MLP(), np.ones((4, 6), np.float32), **kw)


def layer(x, w):
    return np.tanh(x @ w) + x


def deep(x, w):
    for _ in range(12):
        x = layer(x, w)
    return x


def deep_traced(loops="unroll"):  # every layer's nodes, which collapse_repeats draws once
    return tk.trace(deep, np.ones((2, 4)), np.eye(4), loops=loops)


# ---------------------------------------------------------------------- reading the SVG back
class Drawing:
    """The parsed SVG of a render: groups by id, their classes, label text, tooltips, edges."""

    def __init__(self, svg):
        self.svg = svg if isinstance(svg, str) else svg.decode()
        self.root = ET.fromstring(self.svg)
        self.groups = {g.get("id"): g for g in self.root.iter(SVG + "g") if g.get("id")}

    def classes(self, gid):
        return set(self.groups[gid].get("class", "").split())

    def ids(self, cls):
        return [i for i in self.groups if cls in self.classes(i)]

    def text(self, gid):
        return "\n".join(t.text or "" for t in self.groups[gid].iter(SVG + "text"))

    def title(self, gid):
        return self.groups[gid].find(SVG + "title").text

    def tooltip(self, gid):
        a = next(self.groups[gid].iter(SVG + "a"), None)
        return None if a is None else a.get(XLINK + "title")

    def edges(self, cls="edge"):
        out = []
        for gid in self.ids(cls):
            if "edge" in self.classes(gid):
                tail, head = self.title(gid).split("->")
                out.append((tail, head))
        return out

    def box(self, gid):
        """(xmin, ymin, xmax, ymax) of the group's shapes."""
        xs, ys = [], []
        for el in self.groups[gid].iter():
            for x, y in re.findall(
                r"(-?[\d.]+),(-?[\d.]+)", el.get("points", "") + el.get("d", "")
            ):
                xs.append(float(x))
                ys.append(float(y))
        return min(xs), min(ys), max(xs), max(ys)

    def inside(self, gid, cluster):
        t = next(self.groups[gid].iter(SVG + "text"))
        x, y = float(t.get("x")), float(t.get("y"))
        x0, y0, x1, y1 = self.box(cluster)
        return x0 <= x <= x1 and y0 <= y <= y1


def draw(x, **kw):
    return Drawing(tk.render(x, **kw).pipe(format="svg"))


def drawn_ids(g, prefix=""):
    """Var name -> the id of the element drawing it, per the SVG contract."""
    src = {v.name: f"{prefix}input-{v.name}" for v in g.inputs}
    for n in g.nodes:
        for o in n.outputs:
            src[o.name] = f"{prefix}node-{n.outputs[0].name}"
    return src


def expected_data_edges(g, prefix="", forward=None):
    """(tail id, head id) for every value flowing in ``g``, ids per the SVG contract.

    ``forward``: ``g`` is a backward graph drawn beside this forward graph, whose half draws
    the values ``g`` replays under their forward names (and ``g``'s ops computing them not)."""
    src = drawn_ids(g, prefix)
    replayed = set()
    if forward is not None:
        fsrc = drawn_ids(forward, "fwd-")
        replayed = {i for i, n in enumerate(g.nodes) if all(o.name in fsrc for o in n.outputs)}
        src.update((k, fsrc[k]) for k in list(src) if k in fsrc)
    edges = set()
    for i, n in enumerate(g.nodes):
        for x in n.var_inputs if i not in replayed else ():
            edges.add((src[x.name], f"{prefix}node-{n.outputs[0].name}"))
    for i, o in enumerate(g.outputs):
        edges.add((src[o.name], f"{prefix}output-{i}"))
    return edges


@pytest.fixture(autouse=True)
def fresh_engine_cache():
    R._resolve.cache_clear()
    yield
    R._resolve.cache_clear()


def graphviz_pure():
    for cand in R._graphviz_pure_candidates():
        if R._executable(cand):
            return cand
    pytest.fail("the graphviz-pure command (a tracekit dependency) is not installed")


# ---------------------------------------------------------------------- what is drawn
def test_every_op_input_output_and_edge_is_drawn():
    t = mlp_traced()
    d = draw(t)
    g = t.graph
    for n in g.nodes:
        gid = f"node-{n.outputs[0].name}"
        assert gid in d.groups, gid
        assert {"node", "op", R._kind(n.op)} <= d.classes(gid)
        assert n.op in d.text(gid)
    for v, s in zip(g.inputs, g.specs):
        gid = f"input-{v.name}"
        assert {"node", "input", s.kind} <= d.classes(gid)
        assert s.label in d.text(gid) and v.type in d.text(gid)
    assert d.ids("return") == ["output-0"]
    assert "output" in d.classes(f"node-{g.outputs[0].name}")
    assert set(d.edges("data")) == expected_data_edges(g)
    assert len(d.edges("data")) == len(expected_data_edges(g))  # no duplicate edges
    # edges carry dtype[shape]
    texts = [d.text(i) for i in d.ids("data")]
    assert "f32[4,5]" in texts and "f32[5,3]" in texts


def test_colours_differ_by_kind_and_matmul_is_drawn_as_matmul():
    d = draw(mlp_traced())
    fills = {}
    for gid in d.ids("op"):
        kind = (d.classes(gid) & set(R.KIND_COLORS)).pop()
        shape = next(e for e in d.groups[gid].iter() if e.get("fill") not in (None, "none"))
        fills.setdefault(kind, set()).add(shape.get("fill").lower())
    assert fills["matmul"] == {R.KIND_COLORS["matmul"][0]}
    assert fills["elementwise"] == {R.KIND_COLORS["elementwise"][0]}


def test_broadcast_is_visible_on_the_edge_where_it_happens():
    t = mlp_traced()
    d = draw(t)
    bias = next(v for v, s in zip(t.graph.inputs, t.graph.specs) if s.label == "self.l1.b")
    edges = [i for i in d.ids("broadcast") if d.title(i).startswith(f"input-{bias.name}->")]
    assert len(edges) == 1
    assert d.text(edges[0]) == "f32[5] \u2192 [4,5]"
    assert len(d.ids("broadcast")) == 2  # the two bias adds, nothing else


def test_tooltips_carry_listing_kind_file_line_and_scope():
    t = mlp_traced()
    d = draw(t)
    for n in t.graph.nodes:
        tip = d.tooltip(f"node-{n.outputs[0].name}")
        assert f"{os.path.basename(__file__)}:{n.source.line}" in tip
        assert n.source.text in tip
        assert f"%{n.outputs[0].name}: {n.outputs[0].type} = {n.op}(" in tip
        assert "scope: " + " > ".join(n.scope) in tip


def test_scopes_are_nested_clusters_with_their_names():
    t = mlp_traced()
    d = draw(t)
    clusters = sorted(d.ids("scope"))
    assert clusters == [
        "cluster-MLP.__call__/Linear.__call__",
        "cluster-MLP.__call__/Linear.__call__#2",
    ]
    for c in clusters:
        assert "cluster" in d.classes(c)
        assert d.text(c) == c.rsplit("/", 1)[1]
    for n in t.graph.nodes:
        gid = f"node-{n.outputs[0].name}"
        cluster = "cluster-" + "/".join(n.scope)
        if cluster in d.groups:
            assert d.inside(gid, cluster)
        else:  # tanh sits in MLP.__call__ itself, which every op shares: not a cluster
            assert n.op == "tanh" and not any(d.inside(gid, c) for c in clusters)


def test_depth_collapses_scopes_into_summary_nodes():
    t = mlp_traced()
    full, collapsed = draw(t), draw(t, depth=0)
    assert len(collapsed.ids("node")) < len(full.ids("node"))
    assert len(collapsed.ids("op")) == 1  # tanh
    scopes = sorted(collapsed.ids("scope"))
    assert scopes == ["scope-MLP.__call__/Linear.__call__", "scope-MLP.__call__/Linear.__call__#2"]
    text = collapsed.text(scopes[0])
    assert "Linear.__call__" in text and "2 ops" in text
    assert "in: f32[4,6]\nout: f32[4,5]\n+2 captured: self.l1.w, self.l1.b" in text
    # the weights read only inside a collapsed scope are folded into it, the argument is not
    assert collapsed.ids("input") == ["input-x"]
    assert "capture %self_l1_w: f32[6,5] = self.l1.w" in collapsed.tooltip(scopes[0])
    assert not collapsed.ids("cluster")
    tanh = "node-" + next(n for n in t.graph.nodes if n.op == "tanh").outputs[0].name
    assert set(collapsed.edges("data")) >= {(scopes[0], tanh), (tanh, scopes[1])}
    assert (scopes[1], "output-0") in collapsed.edges("data")
    assert len(draw(t, depth=1).ids("op")) == len(t.graph.nodes)


def test_collapse_repeats_draws_one_block_inside_a_cluster_marked_xN():
    """The block's ops are drawn once, inside a cluster labelled ×N; values go in and out of
    that copy, and what one block hands the next is a dashed "next block" edge."""
    t = deep_traced()
    d = draw(t, collapse_repeats=True)
    [rep] = d.ids("repeat")
    assert rep == "repeat-deep/layer" and "cluster" in d.classes(rep)
    assert "layer \u00d712" in d.text(rep) and "3 ops each" in d.text(rep)
    matmul, tanh, add = (f"node-{n.outputs[0].name}" for n in t.graph.nodes[:3])
    assert sorted(d.ids("op")) == sorted([matmul, tanh, add])  # the first block, once
    assert all(d.inside(i, rep) for i in (matmul, tanh, add))
    x, w = (f"input-{v.name}" for v in t.graph.inputs)
    assert sorted(d.edges("data")) == sorted(
        [(x, matmul), (w, matmul), (matmul, tanh), (tanh, add), (x, add), (add, "output-0")]
    )
    # layer k+1 reads layer k's sum twice: in its matmul and in its residual add
    assert sorted(d.edges("carried")) == sorted([(add, matmul), (add, add)])
    assert d.ids("input") == [x, w]  # arguments are always drawn
    stands_for = tk.render(t, collapse_repeats=True).stands_for
    for k, n in enumerate(t.graph.nodes[3:]):
        assert stands_for[f"node-{n.outputs[0].name}"] == [matmul, tanh, add][k % 3]
    full = draw(t)
    assert len(full.ids("op")) == 36 and len(full.ids("scope")) == 12


def test_collapsed_repeats_nest_and_the_dot_holds_one_copy():
    """Blocks repeated inside a repeated block: the inner run is drawn once inside the outer
    copy (the DOT has one node per op of the innermost block)."""

    def inner(x):
        return np.sin(x) * 2.0

    def outer(x):
        for _ in range(3):
            x = inner(x)
        return x + 1.0

    def net(x):
        for _ in range(4):
            x = outer(x)
        return x

    t = tk.trace(net, np.ones(3), loops="unroll")
    dot = tk.render(t, collapse_repeats=True)
    sin, mul, add = (f"node-{t.graph.nodes[i].outputs[0].name}" for i in (0, 1, 6))
    assert t.graph.nodes[6].op == "add"
    # one copy: sin, multiply (inner, once) and add (outer, once)
    assert sorted(re.findall(r'^\s*"(node-[^"]+)" \[', dot.source, re.M)) == sorted([sin, mul, add])
    assert {"repeat-net/outer", "repeat-net/outer/inner"} == {
        k for k, v in dot.scene.items() if "repeat" in v.split()
    }
    assert "outer \u00d74" in dot.source and "inner \u00d73" in dot.source
    d = Drawing(dot.pipe(format="svg"))
    assert d.inside(sin, "repeat-net/outer/inner") and d.inside(mul, "repeat-net/outer/inner")
    assert d.inside(add, "repeat-net/outer") and not d.inside(add, "repeat-net/outer/inner")
    assert sorted(d.edges("data")) == sorted(
        [("input-x", sin), (sin, mul), (mul, add), (add, "output-0")]
    )
    assert sorted(d.edges("carried")) == sorted([(mul, sin), (add, sin)])


def test_large_graphs_draw_repeated_blocks_once_by_default():
    def deeper(x, w):
        for _ in range(R.REPEATS_ABOVE // 3 + 1):
            x = layer(x, w)
        return x

    t = tk.trace(deeper, np.ones((2, 4)), np.eye(4), loops="unroll")
    with pytest.warns(UserWarning, match="repeated blocks drawn once.*collapse_repeats=False"):
        d = draw(t)
    [rep] = d.ids("repeat")
    assert f"layer \u00d7{R.REPEATS_ABOVE // 3 + 1}" in d.text(rep) and len(d.ids("op")) == 3
    assert len(draw(t, collapse_repeats=False).ids("op")) == len(t.graph.nodes)
    assert not draw(deep_traced()).ids("repeat")  # a small graph: every block


def test_collapse_repeats_leaves_different_blocks_alone():
    t = mlp_traced()  # two Linear layers of different shapes
    d = draw(t, collapse_repeats=True)
    assert not d.ids("repeat")
    assert len(d.ids("op")) == len(t.graph.nodes)


def test_collapse_repeats_names_the_other_blocks_weights_on_the_xN_cluster():
    class Block:
        def __init__(self, rng):
            self.w = rng.standard_normal((4, 4))

        def __call__(self, x):
            return x + np.tanh(x @ self.w)

    rng = np.random.default_rng(0)
    blocks = [Block(rng) for _ in range(5)]

    def net(x):
        for b in blocks:
            x = b(x)
        return x

    d = draw(tk.trace(net, np.ones((2, 4))), collapse_repeats=True)
    [rep] = d.ids("repeat")
    assert d.ids("input") == ["input-x", "input-closure_blocks_0_w"]  # the drawn block's own
    assert "Block.__call__ \u00d75" in d.text(rep)
    assert "+4 captured of the other blocks: closure:blocks[1].w" in d.text(rep)


def test_collapse_repeats_with_depth_collapses_the_repeated_summaries():
    t = deep_traced()
    d = draw(t, depth=0, collapse_repeats=True)
    assert d.ids("repeat") == ["repeat-deep/layer"] and not d.ids("op")


def test_guard_from_an_if_is_marked_with_its_source_line():
    def f(x):
        y = np.exp(x)
        if y.sum() > 1:  # the guard
            y = y * 2
        return y

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tk.trace(f, np.ones(3))
    d = draw(t)
    [gid] = d.ids("guard")
    assert gid == "guard-0"
    text = d.text(gid)
    line = t.graph.guards[0].source.line
    assert "guard bool() == True" in text and f"test_render.py:{line}" in text
    attached = f"node-{t.graph.guards[0].var.name}"
    assert "guarded" in d.classes(attached)
    assert d.edges("guard-link") == [(attached, gid)]


def test_python_op_is_drawn_distinctly_with_its_name():
    x, y, z = Var("x", (3,), "f4"), Var("1", (3,), "f4"), Var("2", (3,), "f4")
    g = Graph(
        [x],
        [
            Node("python_op", (x,), {"name": "my_filter"}, (y,)),
            Node("exp", (y,), {}, (z,)),
        ],
        [z],
    )
    d = draw(g)
    assert {"op", "opaque", "python-op"} <= d.classes("node-1")
    assert "my_filter" in d.text("node-1") and "python op" in d.text("node-1")
    assert len(list(d.groups["node-1"].iter(SVG + "polygon"))) == 2  # a double octagon
    assert "python-op" not in d.classes("node-2")


def test_a_traced_python_op_shows_its_name():
    op = tk.python_op(np.sinh, name="my_sinh")
    t = tk.trace(lambda x: op(x).sum(), np.zeros(3))
    d = draw(t)
    [gid] = d.ids("python-op")
    assert gid == f"node-{t.graph.nodes[0].outputs[0].name}"
    assert d.text(gid).splitlines()[0] == "my_sinh"


def test_in_place_writes_and_write_backs_are_marked():
    def f(x):
        x[0] = 7.0
        return x.sum()

    t = tk.trace(f, np.ones(3))
    assert t.graph.writebacks
    d = draw(t)
    [upd] = [i for i in d.ids("inplace")]
    assert "write [0]" in d.text(upd)
    assert d.ids("writeback") and "output-1" in d.ids("writeback")
    assert "write back -> x" in d.text("output-1")
    back = [e for e in d.edges("writeback")]
    assert back == [("output-1", "input-x")]


def test_show_values_prints_small_values_and_statistics():
    t = tk.trace(lambda x: np.exp(x).sum(), np.arange(6.0).reshape(2, 3), keep_values=True)
    d = draw(t, show_values=True)
    exp = next(n for n in t.graph.nodes if n.op == "exp")
    total = next(n for n in t.graph.nodes if n.op == "sum")
    assert re.search(r"min 1 mean \S+ max 148", d.text(f"node-{exp.outputs[0].name}"))
    assert f"{float(np.exp(np.arange(6.0)).sum()):.4g}" in d.text(f"node-{total.outputs[0].name}")
    assert "min" not in draw(t).text(f"node-{exp.outputs[0].name}")


def test_show_constants_and_show_shapes_can_hide_things():
    t = tk.trace(lambda x: np.maximum(x, 0.5) * np.array([1.0, 2.0, 3.0]), np.ones(3))
    consts = [v for v, s in zip(t.graph.inputs, t.graph.specs) if s.kind == "const"]
    d = draw(t)
    assert "maximum(\u00b7, 0.5)" in "\n".join(d.text(i) for i in d.ids("op"))
    [const] = consts
    assert {"input", "const"} <= d.classes(f"input-{const.name}")
    assert "const f64[1.0, 2.0, 3.0]" in d.text(f"input-{const.name}")
    hidden = draw(t, show_constants=False, show_shapes=False)
    assert not hidden.ids("const")
    assert "0.5" not in "\n".join(hidden.text(i) for i in hidden.ids("op"))
    assert not any(hidden.text(i) for i in hidden.ids("data"))


def test_two_constants_get_two_inputs():
    t = tk.trace(lambda x: x * np.array([1.0, 2.0]) + np.array([3.0, 4.0]), np.ones(2))
    d = draw(t)
    assert len(d.ids("const")) == 2
    assert set(d.edges("data")) == expected_data_edges(t.graph)


def test_max_label_width_cuts_long_labels():
    def a_function_with_a_really_long_descriptive_name(x):
        return np.exp(x)

    def f(x):
        return a_function_with_a_really_long_descriptive_name(x) + 1

    t = tk.trace(f, np.ones(2))
    d = draw(t, max_label_width=12)
    [c] = d.ids("scope")
    assert d.text(c) == "a_function_\u2026"
    assert a_function_with_a_really_long_descriptive_name.__name__ in c  # the id is whole


def test_rankdir_and_bad_options():
    t = mlp_traced()
    assert "rankdir=LR" in tk.render(t, rankdir="LR").source
    with pytest.raises(ValueError, match="rankdir"):
        tk.render(t, rankdir="sideways")
    with pytest.raises(ValueError, match="depth"):
        tk.render(t, depth=-1)
    with pytest.raises(TypeError, match="Traced"):
        tk.render(42)


def test_render_accepts_a_graph_and_anything_with_a_graph():
    t = mlp_traced()
    a = tk.render(t).source
    assert tk.render(t.graph).source == a
    assert tk.render(SimpleNamespace(graph=t.graph)).source == a
    assert isinstance(tk.render(t), graphviz.Digraph)


def test_large_graphs_default_to_a_collapsed_depth_with_a_message(monkeypatch):
    monkeypatch.setattr(R, "LARGE_GRAPH", 3)
    monkeypatch.setattr(R, "COLLAPSED_TARGET", 4)
    t = mlp_traced()
    with pytest.warns(UserWarning, match=r"depth='all'"):
        d = draw(t)
    assert len(d.ids("op")) == 1 and len(d.ids("scope")) == 2
    assert "depth=0" in "".join(d.root.itertext())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(draw(t, depth="all").ids("op")) == len(t.graph.nodes)


# ---------------------------------------------------------------------- compiled and backward
def test_compiled_kernels_are_coloured_clusters_and_refusals_are_marked():
    t = mlp_traced()
    nodes = t.graph.nodes
    kernels = [
        SimpleNamespace(name="k0", nodes=nodes[0:3]),  # matmul, add, tanh: across scopes
        SimpleNamespace(name="k1", nodes=nodes[4:5]),
    ]
    refusal = SimpleNamespace(node=nodes[3], reason="matmul goes to BLAS")
    compiled = SimpleNamespace(
        graph=t.graph, kernels=kernels, plan=SimpleNamespace(refusals=[refusal])
    )
    d = draw(compiled)
    assert sorted(d.ids("kernel")) == ["kernel-k0", "kernel-k1"]
    assert not d.ids("scope")  # kernels replace scope clusters
    fills = {
        k: next(d.groups[k].iter(SVG + "path")).get("fill") for k in ("kernel-k0", "kernel-k1")
    }
    assert fills["kernel-k0"] != fills["kernel-k1"]
    for n in nodes[0:3]:
        assert d.inside(f"node-{n.outputs[0].name}", "kernel-k0")
    assert d.inside(f"node-{nodes[4].outputs[0].name}", "kernel-k1")
    assert not d.inside(f"node-{nodes[3].outputs[0].name}", "kernel-k0")
    refused = f"node-{nodes[3].outputs[0].name}"
    assert d.ids("refused") == [refused]
    assert "not fused: matmul goes to BLAS" in d.text(refused)
    assert "fusion refused: matmul goes to BLAS" in d.tooltip(refused)


def _two_stage_stencil(a):
    b = 0.5 * (a[1:] + a[:-1])  # read at two offsets below: computed again in their kernel
    c = np.tanh(b[1:] - b[:-1]) * 2.0
    return c[4:] + c[:-4] + c[1:-3] + c[2:-2] + c[3:-1]  # 5 slices of a costly value: an array


def test_compiled_view_marks_values_computed_again_at_offsets_and_kept_ones():
    with quiet():
        c = tk.compile(tk.trace(_two_stage_stencil, np.arange(12.0)), target="cpu", progress=False)
    kept = [dc for dc in c.plan.offsets if not dc.fused]
    fused = [dc for dc in c.plan.offsets if dc.fused]
    assert len(kept) == 1 and len(fused) == 1, [str(dc) for dc in c.plan.offsets]
    d = draw(c)
    again = d.ids("recomputed")
    assert again and all(f"{fused[0].value.name}@" in i for i in again)
    assert "computed again at an offset" in d.tooltip(again[0])
    held = f"node-{kept[0].value.name}"
    assert held in d.ids("refused")
    assert "not fused across offsets" in d.tooltip(held)


def test_backward_with_forward_on_one_canvas_linked_by_dashed_edges():
    x = np.linspace(-1, 1, 3)
    fwd = tk.trace(lambda x: np.tanh(x) * 2.0, x)
    tanh_out = fwd.graph.nodes[0].outputs[0].name

    def backward(t0, g):
        return g * 2.0 * (1.0 - t0 * t0)

    bwd_t = tk.trace(backward, np.tanh(x), np.ones(3))
    b = SimpleNamespace(graph=bwd_t.graph, forward=fwd, links={"t0": tanh_out})
    d = draw(b, with_forward=True)
    assert {"graph-forward", "graph-backward"} <= set(d.groups)
    assert set(d.edges("data")) == expected_data_edges(fwd.graph, "fwd-") | expected_data_edges(
        bwd_t.graph
    )
    for n in bwd_t.graph.nodes:
        assert "backward" in d.classes(f"node-{n.outputs[0].name}")
    for n in fwd.graph.nodes:
        assert "backward" not in d.classes(f"fwd-node-{n.outputs[0].name}")
    assert d.edges("link") == [(f"fwd-node-{tanh_out}", "input-t0")]
    link = d.groups[d.ids("link")[0]]
    assert next(link.iter(SVG + "path")).get("stroke-dasharray")
    with pytest.raises(ValueError, match="forward"):
        tk.render(fwd, with_forward=True)


def test_a_real_backward_graph_with_its_forward():
    """The forward values the backward graph replays are drawn once, in the forward half; the
    backward ops read them from there."""
    t = mlp_traced()
    b = tk.vjp(t)
    dot = tk.render(b, with_forward=True)
    d = Drawing(dot.pipe(format="svg"))
    assert set(d.edges("data")) == expected_data_edges(t.graph, "fwd-") | expected_data_edges(
        b.graph, forward=t.graph
    )
    forward_names = set(drawn_ids(t.graph))
    replayed = [n for n in b.graph.nodes if n.outputs[0].name in forward_names]
    assert replayed and not any(f"node-{n.outputs[0].name}" in d.groups for n in replayed)
    for n in replayed:
        assert dot.stands_for[f"node-{n.outputs[0].name}"] == f"fwd-node-{n.outputs[0].name}"
    assert d.edges("saved") and all(tail.startswith("fwd-") for tail, _ in d.edges("saved"))
    links = set(d.edges("link"))
    assert links and all(
        tail.startswith("fwd-") and not head.startswith("fwd-") for tail, head in links
    )


def test_a_layout_that_fails_on_the_rows_is_drawn_without_them(tmp_path, monkeypatch):
    """graphviz's ranking can fail on rank constraints across clusters ("trouble in
    init_rank"): the forward+backward drawing is then laid out without its rows, with a
    warning, rather than not at all."""
    fussy = tmp_path / "dot"
    fussy.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = -V ] && exec {graphviz_pure()} -V\n'
        "graph=$(cat)\n"
        'case "$graph" in *"rank=same"*) echo "Error: trouble in init_rank" >&2; exit 1;; esac\n'
        f'printf "%s" "$graph" | exec {graphviz_pure()} "$@"\n'
    )
    fussy.chmod(0o755)
    monkeypatch.setenv("TRACEKIT_DOT", str(fussy))
    monkeypatch.setattr(R.Digraph, "dot_binary", None)
    dot = tk.render(tk.vjp(tk.trace(lambda x: np.sum(np.sin(x)), np.ones(3))), with_forward=True)
    assert "rank=same" in dot.source
    with pytest.warns(RuntimeWarning, match="trouble in init_rank.*drawn without the rows"):
        d = Drawing(dot.pipe(format="svg", encoding="utf-8"))
    assert {"graph-forward", "graph-backward"} <= set(d.groups) and "rank=same" not in dot.source
    assert tk.render(mlp_traced()).pipe(format="svg")  # no rows: drawn as it is


def rank_groups(source) -> dict:
    """``{rank=same; a; b; ...}`` of a DOT source: first id -> the set of the others."""
    out = {}
    for body in re.findall(r"\{rank=same; ([^}]*)\}", source):
        first, *rest = re.findall(r'"([^"]+)"', body)
        out[first] = set(rest)
    return out


def test_each_gradient_is_drawn_on_the_row_of_its_forward_op(engine):
    """sum(exp(2 sin x)): the forward ops in one column, the backward ops beside them running
    up, each on the row of the forward op whose gradient rule made it; the links and the edges
    between rows do not rank anything."""
    t = tk.trace(lambda x: np.sum(np.exp(np.sin(x) * 2.0)), np.linspace(0, 1, 3))
    b = tk.vjp(t)
    sin, double, exp, total = (f"fwd-node-{n.outputs[0].name}" for n in t.graph.nodes)
    dot = tk.render(b, with_forward=True)
    backward_only = [n for n in b.graph.nodes if n.outputs[0].name not in drawn_ids(t.graph)]
    assert len(b.graph.nodes) - len(backward_only) == 3  # sin, multiply, exp replayed
    assert set(dot.scene) >= {f"node-{n.outputs[0].name}" for n in backward_only}
    assert not set(dot.scene) & {f"node-{n.outputs[0].name}" for n in b.graph.nodes[:3]}
    grad = {n.op: f"node-{n.outputs[0].name}" for n in backward_only}
    by_op = {}
    for n in backward_only:
        by_op.setdefault(n.op, []).append(f"node-{n.outputs[0].name}")
    mul_exp, mul_two, mul_sin = by_op["multiply"]
    assert rank_groups(dot.source) == {
        "fwd-input-x": {"output-0"},  # the gradient with respect to x, beside x
        sin: {grad["cos"], mul_sin},
        double: {mul_two},
        exp: {mul_exp},
        total: {"input-d3", grad["broadcast_to"]},  # the cotangent of the sum starts there
    }
    rows = rank_groups(dot.source)
    row_of = {i: first for first, rest in rows.items() for i in [first, *rest]}
    edges = re.findall(r'^\s*"([^"]+)" -> "([^"]+)" \[(.*)\]$', dot.source, re.M)
    assert len(edges) == dot.source.count(" -> ")
    kinds = set()
    for tail, head, attrs in edges:
        if 'class="link"' in attrs or (head in row_of and tail in row_of and head not in rows):
            # an edge between two rows ranks nothing; one within a row orders it left to right
            same_row = row_of[tail] == row_of[head] and 'class="link"' not in attrs
            assert ('constraint="false"' in attrs) != same_row, (tail, head)
            kinds.add(same_row)
    assert kinds == {True, False}
    d = Drawing(dot.pipe(format="svg"))
    assert (exp, mul_exp) in d.edges("saved") and ("fwd-input-x", grad["cos"]) in d.edges("saved")
    assert {tail for tail, _ in d.edges("link")} <= {"fwd-input-x", sin, double, total}

    def row(gid):
        x0, y0, x1, y1 = d.box(gid)
        return round((y0 + y1) / 2)

    for first, rest in rank_groups(dot.source).items():
        assert {row(first)} == {row(i) for i in rest}, first  # laid out as asked, by this engine
    assert row(sin) < row(double) < row(exp) < row(total)


# ---------------------------------------------------------------------- engines
@pytest.fixture(params=["system dot", "graphviz-pure"])
def engine(request, monkeypatch):
    if request.param == "system dot":
        if not os.path.exists(SYSTEM_DOT):
            pytest.skip("no system graphviz at /usr/bin/dot (make sysdeps installs it)")
        path = SYSTEM_DOT
    else:
        path = graphviz_pure()
    monkeypatch.setenv("TRACEKIT_DOT", path)
    return path


def test_each_engine_draws_the_same_graph(engine):
    t = mlp_traced()
    assert R.find_engine() == engine
    d = draw(t, depth=None)
    reference = Drawing(tk.render(t).pipe(format="svg"))  # same engine, twice: deterministic
    assert set(d.groups) == set(reference.groups)
    assert set(d.edges("data")) == expected_data_edges(t.graph)
    assert "viewBox" in d.root.attrib
    png = tk.render(t).pipe(format="png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_engines_agree_with_each_other():
    if not os.path.exists(SYSTEM_DOT):
        pytest.skip("no system graphviz at /usr/bin/dot")
    t = deep_traced()
    out = []
    for path in (SYSTEM_DOT, graphviz_pure()):
        dg = tk.render(t, collapse_repeats=True)
        dg.dot_binary = path
        d = Drawing(dg.pipe(format="svg"))
        out.append((set(d.groups), sorted(d.edges()), {i: d.text(i) for i in d.ids("node")}))
    assert out[0] == out[1]


def heat(u, steps):
    for _ in range(steps):
        u[1:-1, 1:-1] += 0.1 * (
            u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]
        )
    return u


def test_a_thousand_step_loop_is_drawn_once_by_each_engine(engine):
    """The drawing of a rolled loop does not grow with its trip count: a heat equation of
    1,000 in-place steps (whose unrolled picture crashed the system ``dot``) is its body once."""
    t = tk.trace(heat, np.zeros((16, 16)), 1000)
    (loop,) = [n for n in t.graph.nodes if n.op == "loop"]
    svg = tk.render(t).pipe(format="svg")
    d = Drawing(svg)
    cluster = f"node-{loop.outputs[0].name}"
    assert "\u00d71000" in d.text(cluster).replace(",", "")
    body_ops = [g for g in d.ids("op") if g.startswith(cluster + "/")]
    assert len(body_ops) == len(loop.attrs["body"].nodes) < 20
    assert len(svg) < 100_000, len(svg)


def test_render_to_a_file(tmp_path, engine):
    path = tk.render(mlp_traced()).render(tmp_path / "mlp", format="svg")
    assert path.endswith("mlp.svg") and ET.parse(path).getroot().tag == SVG + "svg"
    out = tk.render(mlp_traced()).render(outfile=tmp_path / "mlp.png")
    assert open(out, "rb").read(4) == b"\x89PNG"


def test_graphviz_pure_is_used_when_no_dot_is_on_path(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEKIT_DOT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing here: no `dot`
    path, how = R.find_engine(describe=True)
    assert how == "graphviz-pure" and os.path.basename(path).startswith("graphviz-pure")
    assert b"<svg" in tk.render(mlp_traced()).pipe(format="svg")


def test_system_dot_is_preferred_when_on_path(monkeypatch):
    if not shutil.which("dot"):
        pytest.skip("no dot on PATH")
    monkeypatch.delenv("TRACEKIT_DOT", raising=False)
    assert R.find_engine(describe=True) == (shutil.which("dot"), "system dot")


def test_tracekit_dot_overrides_the_engine(tmp_path, monkeypatch):
    log = tmp_path / "calls.log"
    fake = tmp_path / "my-dot"
    fake.write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{graphviz_pure()}" "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("TRACEKIT_DOT", str(fake))
    assert R.find_engine(describe=True) == (str(fake), "TRACEKIT_DOT")
    d = draw(mlp_traced())
    assert d.ids("op")
    assert "-Tsvg" in log.read_text()


def test_a_bad_tracekit_dot_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TRACEKIT_DOT", "/nonexistent/dot")
    with pytest.raises(R.EngineNotFound, match="TRACEKIT_DOT='/nonexistent/dot'"):
        tk.render(mlp_traced()).pipe(format="svg")


def test_no_engine_at_all_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEKIT_DOT", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(R, "_graphviz_pure_candidates", lambda: iter(()))
    t = mlp_traced()
    d = tk.render(t)  # building needs no engine
    assert "node-" in d.source
    with pytest.raises(R.EngineNotFound) as info:
        d.pipe(format="svg")
    msg = str(info.value)
    assert "pip install graphviz-pure" in msg and "apt install graphviz" in msg
    assert "TRACEKIT_DOT" in msg
    assert isinstance(info.value, graphviz.ExecutableNotFound)
    with pytest.warns(UserWarning, match="graph not drawn"):
        bundle = t._repr_mimebundle_()
    assert bundle == {"text/plain": str(t.graph)}


def test_the_graphviz_package_is_left_as_it_was(engine):
    before = graphviz.backend.dot_command.DOT_BINARY
    tk.render(mlp_traced()).pipe(format="svg")
    assert graphviz.backend.dot_command.DOT_BINARY == before


# ---------------------------------------------------------------------- Jupyter
def test_mimebundle_has_scaled_svg_and_the_listing():
    t = mlp_traced()
    bundle = t._repr_mimebundle_()
    assert set(bundle) == {"image/svg+xml", "text/plain"}
    assert bundle["text/plain"] == str(t.graph)
    root = ET.fromstring(bundle["image/svg+xml"])
    assert root.get("viewBox") and root.get("width") and root.get("height")
    assert root.get("style").replace(" ", "") == "max-width:100%;height:auto"
    # the viewBox covers the whole drawing: nothing is clipped
    vb = [float(v) for v in root.get("viewBox").split()]
    assert vb[2] == pytest.approx(float(root.get("width").rstrip("pt")), abs=1)
    assert vb[3] == pytest.approx(float(root.get("height").rstrip("pt")), abs=1)
    d = Drawing(bundle["image/svg+xml"])
    assert set(d.edges("data")) == expected_data_edges(t.graph)
    assert R.mimebundle(t) == bundle


def test_the_digraph_displays_scaled_too():
    svg = tk.render(mlp_traced())._repr_mimebundle_()["image/svg+xml"]
    assert "max-width:100%" in svg


def test_scale_svg_adds_a_viewbox_when_missing():
    out = R.scale_svg('<svg width="10pt" height="20pt"><g/></svg>')
    root = ET.fromstring(out)
    assert root.get("viewBox") == "0 0 10 20" and "max-width:100%" in root.get("style")


def test_tk_render_stays_the_function():
    import tracekit.render  # noqa: F401  (importing the module must not shadow the function)

    assert callable(tk.render) and tk.render.__module__ == "tracekit"
    assert sys.modules["tracekit.render"] is R


@pytest.mark.parametrize(
    "make, options",
    [
        (mlp_traced, {}),
        (mlp_traced, {"depth": 0}),
        (deep_traced, {"collapse_repeats": True}),
        (lambda: tk.compile(mlp_traced(), progress=False), {}),
        (lambda: tk.vjp(tk.trace(lambda x: np.tanh(x).sum(), np.ones(3))), {"with_forward": True}),
    ],
    ids=["scopes", "depth", "repeats", "kernels", "backward"],
)
def test_the_scene_is_what_the_svg_draws(make, options):
    """``Digraph.scene`` (what the explorer reads) names every node and cluster group of the
    SVG, with the same classes."""
    dot = tk.render(make(), **options)
    d = Drawing(dot.pipe(format="svg", encoding="utf-8"))
    drawn = {
        gid: " ".join(sorted(d.classes(gid)))
        for gid in d.groups
        if d.classes(gid) & {"node", "cluster"} and not gid.startswith("graph-")
    }
    assert drawn and {k: " ".join(sorted(v.split())) for k, v in dot.scene.items()} == drawn


def test_a_crashing_dot_falls_back_to_graphviz_pure(tmp_path, monkeypatch):
    """The system dot has crashed (SIGSEGV) on large graphs: the drawing is made by
    graphviz-pure instead, with a warning naming the crashed command."""
    crashing = tmp_path / "dot"
    crashing.write_text('#!/bin/sh\n[ "$1" = -V ] && exit 0\nkill -SEGV $$\n')
    crashing.chmod(0o755)
    monkeypatch.setenv("TRACEKIT_DOT", str(crashing))
    monkeypatch.setattr(R.Digraph, "dot_binary", None)  # the engine comes from TRACEKIT_DOT
    with pytest.warns(RuntimeWarning, match="crashed"):
        svg = tk.render(mlp_traced()).pipe(format="svg", encoding="utf-8")
    assert "<svg" in svg and "matmul" in svg


def test_a_dot_that_runs_too_long_falls_back_to_graphviz_pure_in_pictures_and_the_explorer(
    tmp_path, monkeypatch
):
    hanging = tmp_path / "dot"
    hanging.write_text('#!/bin/sh\n[ "$1" = -V ] && exit 0\nexec sleep 60\n')
    hanging.chmod(0o755)
    monkeypatch.setenv("TRACEKIT_DOT", str(hanging))
    monkeypatch.setenv("TRACEKIT_DOT_TIMEOUT", "1")
    monkeypatch.setattr(R.Digraph, "dot_binary", None)
    with pytest.warns(RuntimeWarning, match=r"timed out \(over 1 s, TRACEKIT_DOT_TIMEOUT\)"):
        svg = tk.render(mlp_traced()).pipe(format="svg", encoding="utf-8")
    assert "<svg" in svg and "matmul" in svg
    w = tk.explore(mlp_traced())  # the explorer shows the note in its message line
    assert "<svg" in w.svg and "matmul" in w.svg and "timed out" in w.message


def test_a_rolled_loop_is_drawn_once_in_a_cluster_with_back_edges():
    t = deep_traced(loops="roll")
    (loop,) = [n for n in t.graph.nodes if n.op == "loop"]
    d = draw(t)
    cluster = f"node-{loop.outputs[0].name}"
    assert "loop" in d.classes(cluster)
    assert "\u00d712" in d.text(cluster) and "for " in d.text(cluster)
    body_ops = [g for g in d.ids("op") if g.startswith(cluster + "/")]
    assert len(body_ops) == len(loop.attrs["body"].nodes) == 3
    assert d.edges("carried"), "no edge from a next value back to the carried value"
    x = f"input-{t.graph.inputs[0].name}"
    assert any(tail == x and head.startswith(cluster + "/input-") for tail, head in d.edges("data"))


def test_the_unrolled_picture_on_request():
    t = deep_traced(loops="roll")
    (loop,) = [n for n in t.graph.nodes if n.op == "loop"]
    d = tk.render(t, loops="unroll")
    ops = [k for k, v in d.scene.items() if "op" in v.split()]
    assert len(ops) == len(unroll(t.graph).nodes) >= 12 * len(loop.attrs["body"].nodes)
    assert not any("loop" in v.split() for v in d.scene.values())
    with pytest.raises(ValueError, match="loops must be"):
        tk.render(t, loops="fold")
