"""tracekit.explore, driven from Python through its API and its synced traits.

The browser side (widgets/explorer.js) is tested in tests/browser/ in a real JupyterLab.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tracekit as tk
from tracekit.interpret import run

anywidget = pytest.importorskip("anywidget")
E = importlib.import_module("tracekit.explore")

REPO = pathlib.Path(__file__).resolve().parents[1]
rng = np.random.default_rng(3)


def mlp(x, w1, b1, w2):
    with tk.scope("hidden"):
        h = np.maximum(x @ w1 + b1, 0.0)
    return np.tanh(h @ w2)


def mlp_args(dtype=np.float64):
    return (
        rng.standard_normal((8, 5)).astype(dtype),
        rng.standard_normal((5, 7)).astype(dtype),
        rng.standard_normal(7).astype(dtype),
        rng.standard_normal((7, 3)).astype(dtype),
    )


@pytest.fixture(scope="module")
def traced():
    return tk.trace(mlp, *mlp_args(), keep_values=True)


@pytest.fixture(scope="module")
def compiled(traced):
    return tk.compile(traced, target="cpu", progress=False)


def records(w, type_=None):
    return [r for r in w.nodes if type_ is None or r["type"] == type_]


# ---------------------------------------------------------------------- the widget itself
def test_explore_is_an_anywidget_with_the_package_assets(traced):
    w = tk.explore(traced)
    assert isinstance(w, anywidget.AnyWidget)
    assert w._esm == (REPO / "widgets" / "explorer.js").read_text()
    assert w._css == (REPO / "widgets" / "explorer.css").read_text()
    assert "export default" in w._esm and ".tk-explorer" in w._css
    assert w.svg.lstrip().startswith("<?xml") and "<svg" in w.svg
    ids = {r["id"] for r in records(w)}
    for n in traced.graph.nodes:
        assert f"node-{n.outputs[0].name}" in ids
        assert f'id="node&#45;{n.outputs[0].name}"' in w.svg  # graphviz escapes "-"
    assert {"input-x", "input-w1", "output-0", "cluster-mlp/hidden"} <= ids
    assert w.view == "forward" and w.n_steps == len(traced.graph.nodes) and int(w.step) == 0


def test_widget_state_is_plain_json(traced):
    w = tk.explore(traced)
    w.select(traced.graph.nodes[1])
    w.step(2)
    w.compare(budget=0.01)
    json.dumps(w.get_state(), allow_nan=False)  # what the comm sends to the browser


def test_no_remote_code_in_the_front_end():
    js = (REPO / "widgets" / "explorer.js").read_text()
    css = (REPO / "widgets" / "explorer.css").read_text()
    for text in (js, css):
        assert "http://" not in text.replace("http://www.w3.org/", "")
        assert "https://" not in text
    assert "\nimport " not in js  # one self-contained module: no build step, no CDN


def test_import_tracekit_does_not_import_ipywidgets():
    code = "import sys, tracekit; print('ipywidgets' in sys.modules, 'anywidget' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_tk_explore_stays_the_function(traced):
    tk.explore(traced)
    assert callable(tk.explore) and tk.explore.__name__ == "explore"
    assert not isinstance(tk.explore, type(sys))
    code = (
        "import numpy as np, tracekit.explore, tracekit as tk\n"
        "t = tk.trace(lambda x: np.tanh(x), np.ones(3))\n"
        "w = tk.explore(t)\n"  # the module object is callable, and puts the function back
        "print(type(w).__name__, type(tk.explore).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["Explorer", "function"]


def test_assets_are_found_in_a_source_checkout():
    assert E._asset("explorer.js") == (REPO / "widgets" / "explorer.js").read_text()
    with pytest.raises(FileNotFoundError, match="nope.js"):
        E._asset("nope.js")


def test_explore_rejects_other_objects():
    with pytest.raises(TypeError, match="tk.explore takes"):
        tk.explore(np.ones(3))
    with pytest.raises(ValueError, match="view must be one of"):
        tk.explore(tk.trace(np.tanh, np.ones(2)), view="sideways")


# ---------------------------------------------------------------------- selection + details
def test_select_shows_the_node_details(traced):
    w = tk.explore(traced)
    node = traced.graph.nodes[2]  # maximum(%1, 0.0) in scope hidden
    w.select(node)
    assert w.selected == f"node-{node.outputs[0].name}"
    assert w.selected_node is node
    text = w.details_text()
    for word in (
        "maximum",
        f"%{node.outputs[0].name}",
        "f64[8,7]",
        "mlp > hidden",
        "test_explore.py",
        "np.maximum(x @ w1 + b1, 0.0)",
        "recorded by trace(keep_values=True)",
    ):
        assert word in text, word
    value = traced.values[node.outputs[0]]
    v = w.details["value"]
    assert v["min"] == pytest.approx(value.min()) and v["max"] == pytest.approx(value.max())
    assert v["mean"] == pytest.approx(value.mean()) and v["std"] == pytest.approx(value.std())
    assert v["nan"] == 0 and v["inf"] == 0
    assert sum(v["hist"]["counts"]) == value.size
    assert "array" in v  # 56 elements: small enough to print


@pytest.mark.parametrize("how", ["node", "var", "name", "%name", "id", "op"])
def test_select_accepts_nodes_vars_names_ids_and_ops(traced, how):
    w = tk.explore(traced)
    node = traced.graph.nodes[3]
    what = {
        "node": node,
        "var": node.outputs[0],
        "name": node.outputs[0].name,
        "%name": "%" + node.outputs[0].name,
        "id": f"node-{node.outputs[0].name}",
        "op": None,
    }[how]
    if how == "op":
        w.select("tanh")
        assert w.selected == f"node-{traced.graph.nodes[-1].outputs[0].name}"
        return
    w.select(what)
    assert w.selected == f"node-{node.outputs[0].name}"
    assert "matmul" in w.details_text()


def test_select_unknown_names_raise(traced):
    w = tk.explore(traced)
    with pytest.raises(KeyError, match="nothing called"):
        w.select("no_such_thing")


def test_selection_from_the_browser_fills_the_details(traced):
    w = tk.explore(traced)
    w.selected = "input-x"  # what a click in the browser does
    assert w.details["id"] == "input-x"
    text = w.details_text()
    assert "arg input %x: f64[8,5]" in text
    assert w.details["value"]["max"] == pytest.approx(traced.values[traced.graph.inputs[0]].max())
    w.selected = "output-0"
    assert "graph output 0" in w.details_text()
    w.selected = ""
    assert w.details_text() == "nothing selected"


def test_values_on_demand_without_keep_values():
    args = mlp_args()
    t = tk.trace(mlp, *args)
    assert t.values is None
    w = tk.explore(t)
    w.select(t.graph.nodes[-1])
    expected = np.tanh(np.maximum(args[0] @ args[1] + args[2], 0.0) @ args[3])
    assert w.details["value"]["mean"] == pytest.approx(expected.mean())
    assert "reference interpreter" in w.details_text()


def test_details_of_nan_and_inf_and_complex():
    def f(x):
        return np.log(x), x * 1j

    x = np.array([-1.0, 0.0, 1.0, np.e])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        t = tk.trace(f, x, keep_values=True)
        w = tk.explore(t)
        w.select(t.graph.nodes[0])
    v = w.details["value"]
    assert (v["nan"], v["inf"]) == (1, 1) and v["min"] == 0.0 and v["max"] == pytest.approx(1.0)
    assert "nan 1  inf 1" in w.details_text()
    w.select(t.graph.outputs[1])
    assert "|z|" in w.details_text()


def test_guards_are_shown():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tk.trace(f, np.ones(3))
    w = tk.explore(t)
    assert t.graph.guards
    guarded = t.graph.guards[0].var
    w.select(guarded)
    assert "guard" in w.details_text()
    guard_ids = [r["id"] for r in records(w, "guard")]
    assert guard_ids == ["guard-0"]
    w.select("guard-0")
    assert "if x.sum() > 0" in w.details_text()


# ---------------------------------------------------------------------- stepping
def test_step_values_equal_the_interpreter(traced):
    args = [np.asarray(a) for a in traced.example_leaves]
    w = tk.explore(traced)
    n = len(traced.graph.nodes)
    assert w.step(0) is None
    assert set(w.step_env) == {v.name for v in traced.graph.inputs}
    for k in [1, 3, n, 2, 0, n]:  # forwards, backwards, to the end
        value = w.step(k)
        assert int(w.step) == k and w.step == k
        env: dict = {}
        run(traced.graph, args, env_out=env, until=k)
        if k:
            node = traced.graph.nodes[k - 1]
            np.testing.assert_array_equal(value, env[node.outputs[0]])
            assert w.step_info["label"] == str(node).split("  #")[0]
            assert w.step_info["value"]["mean"] == pytest.approx(np.mean(env[node.outputs[0]]))
            assert w.step_info["id"] == f"node-{node.outputs[0].name}"
        assert set(w.step_env) == {v.name for v in env}
        for var, expected in env.items():
            np.testing.assert_array_equal(w.step_env[var.name], expected)


def test_step_trait_set_from_the_browser(traced):
    w = tk.explore(traced)
    w.step = 2  # the slider sets the trait
    assert w.step_info["step"] == 2
    assert w.step_info["id"] == f"node-{traced.graph.nodes[1].outputs[0].name}"
    # a node not computed yet says so; one computed shows the interpreter's value
    w.select(traced.graph.nodes[4])
    assert "not computed yet at step 2" in w.details_text()
    w.select(traced.graph.nodes[1])
    assert "interpreter, step 2 of 5" in w.details_text()
    with pytest.raises(ValueError, match="between 0 and 5"):
        w.step(6)
    w.step = 99  # out of range from the browser: clamped
    assert int(w.step) == 5


# ---------------------------------------------------------------------- views
def test_a_compiled_opens_on_the_compiled_view(traced, compiled):
    assert tk.explore(compiled).view == "compiled"
    assert tk.explore(compiled, view="forward").view == "forward"
    assert tk.explore(traced).view == "forward"


def test_compiled_view_lists_the_kernels(traced, compiled):
    w = tk.explore(compiled)
    assert w.view == "compiled" and not w.message
    names = [k.name for k in compiled.kernels]
    assert [k["name"] for k in w.kernels] == names and names
    assert w.plan == str(compiled.plan)
    for name in names:
        assert f'id="kernel&#45;{name}"' in w.svg
    kernel_records = records(w, "kernel")
    assert [r["id"] for r in kernel_records] == [f"kernel-{n}" for n in names]
    first = compiled.kernels[0]
    assert kernel_records[0]["members"] == [f"node-{n.outputs[0].name}" for n in first.nodes]
    w.select(f"kernel-{first.name}")
    text = w.details_text()
    assert f"kernel {first.name}" in text
    assert first.source.strip().splitlines()[0].strip() in text  # its generated source
    assert "refused fusions" in text and "BLAS" in text  # the plan's reasons
    # a node the plan ran on the host says why
    matmul = next(n for n in compiled.graph.nodes if n.op == "matmul")
    w.select(matmul)
    assert "plan: host step" in w.details_text()
    assert w.n_steps == len(compiled.graph.nodes)


def test_compiled_view_compiles_a_traced_on_demand(traced):
    w = tk.explore(traced)
    w.view = "compiled"
    assert w.view == "compiled", w.message
    assert w.kernels and all(k["source"] for k in w.kernels)
    w.view = "forward"
    assert not w.kernels and w.plan == ""


def test_backward_view(traced):
    w = tk.explore(traced, view="backward")
    if w.view != "backward":  # autodiff missing or failing: the widget says why
        assert "vjp" in w.message
        pytest.skip(w.message)
    ids = {r["id"] for r in w.nodes}
    assert "fwd-node-0" in ids and "input-x" in ids and "fwd-input-x" in ids
    assert 'id="graph&#45;backward"' in w.svg
    b = tk.vjp(traced)
    assert w.n_steps == len(b.graph.nodes)
    # the forward values the backward graph replays are shown by the forward half
    replayed = [n for n in b.graph.nodes if f"fwd-node-{n.outputs[0].name}" in ids]
    assert replayed
    for n in replayed:
        rec = next(r for r in w.nodes if r["id"] == f"node-{n.outputs[0].name}")
        assert rec["unit"] == f"fwd-node-{n.outputs[0].name}"
    last = b.graph.nodes[-1]
    w.select(last)
    assert last.op in w.details_text()
    assert "min" in w.details["value"]
    value = w.step(len(b.graph.nodes))
    env = b.run_values(*E._example_args(b))
    np.testing.assert_allclose(value, env[last.outputs[0]])
    w.select("fwd-node-2")  # the forward half has values too
    assert "maximum" in w.details_text() and "min" in w.details_text()


def test_passes_view_shows_before_after_and_changes():
    def f(x):
        a = np.exp(x)
        b = np.exp(x)  # cse merges it
        return (a + b) * 1.0  # simplify drops the * 1.0

    t = tk.trace(f, np.ones(4))
    w = tk.explore(t, view="passes")
    assert w.view == "passes", w.message
    names = [p["name"] for p in w.passes]
    assert names == [h.name for h in tk.optimize(t).history]
    cse = names.index("cse")
    w.pass_index = cse
    p = w.passes[cse]
    assert p["changed"] and p["n_after"] == p["n_before"] - 1
    assert len(p["removed"]) == 1
    assert p["added"] == [] and p["modified"]  # the add now reads the kept exp
    assert 'id="b4-node' in w.svg_before
    removed = p["removed"][0]
    assert f"b4-node-{removed}" in {r["id"] for r in w.nodes}
    w.select(f"b4-node-{removed}")
    assert "exp" in w.details_text()


def test_unavailable_views_keep_the_widget_usable():
    t = tk.trace(lambda x: np.tanh(x), np.ones(3))
    w = tk.explore(t.graph)  # a bare Graph: no example inputs, nothing to compile
    w.view = "compiled"
    assert w.view == "forward" and "compiled view needs" in w.message
    w.select(t.graph.nodes[0])
    assert "tanh" in w.details_text() and "no example inputs" in w.details_text()
    w.view = "nonsense"
    assert w.view == "forward" and "unknown view" in w.message


def test_large_graph_collapses_and_selection_maps_to_the_group():
    def block(x, w):
        with tk.scope("block"):
            return np.tanh(x @ w) * 0.5 + x

    def big(x, w):
        for _ in range(400):
            x = block(x, w)
        return x

    t = tk.trace(big, np.ones((2, 2)), np.eye(2) * 0.1, loops="unroll")  # 1,600 nodes
    assert len(t.graph.nodes) == 1600 > importlib.import_module("tracekit.render").LARGE_GRAPH
    w = tk.explore(t, collapse_repeats=False)  # (by default: the repeated block, once)
    assert "collapsed" in w.message  # the renderer's note is shown
    node = t.graph.nodes[801]
    rec = next(r for r in w.nodes if r["id"] == f"node-{node.outputs[0].name}")
    assert rec["unit"] and rec["unit"].startswith("scope-")
    group = next(r for r in w.nodes if r["id"] == rec["unit"])
    assert rec["id"] in group["members"]
    w.select(node)
    assert node.op in w.details_text()
    w.select(rec["unit"])
    assert "op(s)" in w.details_text()
    by_default = tk.explore(t)
    assert "repeated blocks drawn once" in by_default.message
    rec = next(r for r in by_default.nodes if r["id"] == f"node-{node.outputs[0].name}")
    first = t.graph.nodes[801 % 4]  # the same op of the first block, drawn for all 400
    assert first.op == node.op and rec["unit"] == f"node-{first.outputs[0].name}"
    assert 'id="{}"'.format(rec["unit"].replace("-", "&#45;")) in by_default.svg
    group = next(r for r in by_default.nodes if r["id"] == "repeat-big/block")
    assert group["type"] == "cluster" and group["kind"] == "repeat"
    assert rec["id"] in group["members"] and len(group["members"]) == 1600
    by_default.select(node)
    assert node.op in by_default.details_text()


# ---------------------------------------------------------------------- compare
def test_compare_reports_differences_and_timings(traced):
    w = tk.explore(traced)
    r = w.compare(budget=0.02)
    names = [t.name for t in r.targets]
    assert names[:3] == ["interpreter", "numpy", "cpu"]
    for t in r.targets[:3]:
        assert t.error is None and t.seconds > 0 and t.runs >= 3
    assert r.targets[2].compile_seconds is not None
    (out,) = r.outputs
    assert out["type"] == "f64[8,3]"
    assert out["diffs"]["numpy"]["max_abs"] == 0.0
    assert out["diffs"]["cpu"]["max_abs"] < 1e-12 and out["diffs"]["cpu"]["max_rel"] < 1e-10
    assert w.compare_result["targets"][0]["name"] == "interpreter"
    text = str(r)
    assert "interpreter" in text and "cpu" in text and "max abs diff" in text


def test_compare_reports_a_target_that_cannot_run(traced):
    w = tk.explore(traced)
    r = w.compare(targets=["tpu"], budget=0.01)
    bad = r.targets[-1]
    assert bad.name == "tpu" and "unknown target" in bad.error
    assert "unavailable" in str(r)


def test_compare_with_writes_into_inputs_leaves_them_alone():
    def f(x):
        x[0] = 5.0
        return x * 2

    x = np.arange(3.0)
    t = tk.trace(f, x)
    before = np.array(t.example_leaves[0], copy=True)
    r = tk.explore(t).compare(targets=[], budget=0.01)
    assert r.outputs[0]["diffs"]["numpy"]["max_abs"] == 0.0
    np.testing.assert_array_equal(t.example_leaves[0], before)


def test_diff_counts_nan_and_inf():
    d = E._diff(np.array([1.0, np.nan, np.inf]), np.array([1.0, np.nan, np.inf]))
    assert d == {"max_abs": 0.0, "max_rel": 0.0}
    d = E._diff(np.array([0.0, 2.0]), np.array([1e-3, 2.5]))
    assert d["max_abs"] == pytest.approx(0.5) and d["max_rel"] == np.inf
    assert E._json_safe({"a": [np.inf, 1.0]}) == {"a": ["inf", 1.0]}


def test_backward_view_of_a_softmax_lays_out():
    """dot's classic ranking fails on this clustered forward+backward drawing; the explorer
    retries with newrank instead of giving up on the view."""

    def f(x, w):
        with tk.scope("hidden"):
            h = np.maximum(x @ w, 0.0)
        with tk.scope("head"):
            z = h - h.max(axis=-1, keepdims=True)
            e = np.exp(z)
            return e / e.sum(axis=-1, keepdims=True)

    t = tk.trace(f, rng.standard_normal((4, 3)), rng.standard_normal((3, 5)))
    w = tk.explore(t, view="backward")
    assert w.view == "backward", w.message
    assert 'id="graph&#45;backward"' in w.svg


# ---------------------------------------------------------------------- loops
def relax_then_converge(x, w):
    for _ in range(6):
        x = np.tanh(x * w) + 0.5
    err = 1.0
    while err > 1e-9:  # a while loop: Newton's square root of 2
        y = 0.5 * (x + 2.0 / x)
        err = np.abs(y - x).max()
        x = y
    return x.sum()


@pytest.fixture(scope="module")
def looped():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tk.trace(relax_then_converge, np.ones(3), np.full(3, 0.5))


def _loops(w):
    return [r for r in records(w, "op") if r["kind"] == "control"]


def test_a_loop_opens_into_its_body_and_the_slider_picks_the_iteration(looped):
    w = tk.explore(looped)
    for_loop, while_loop = _loops(w)
    body = [r for r in records(w, "op") if r["id"].startswith(for_loop["id"] + "/")]
    assert [r["op"] for r in body] == ["multiply", "tanh", "add"]  # the body's nodes are there
    w.select(body[-1]["id"])
    loop = w.details["loop"]
    assert (loop["iteration"], loop["count"], loop["trips"]) == (0, 6, 6)
    x, wt = np.ones(3), np.full(3, 0.5)
    for k in range(6):
        x = np.tanh(x * wt) + 0.5
        w.iteration = k
        assert w.details["value"]["source"].startswith(f"iteration {k}")
        np.testing.assert_allclose(w.details["value"]["mean"], x.mean(), rtol=1e-12)
        (carried,) = w.details["loop"]["carried"]
        np.testing.assert_allclose(carried["value"]["mean"], x.mean(), rtol=1e-12)
    assert "iteration 5 of 6" in w.details_text()


def test_a_while_loop_counts_the_iterations_it_runs(looped):
    w = tk.explore(looped)
    _, while_loop = _loops(w)
    w.select(while_loop["id"])
    loop = w.details["loop"]
    assert loop["while"] and loop["count"] == while_loop_count() == loop["trips"]
    w.iteration = 10_000  # past the end: the last iteration
    assert w.details["loop"]["iteration"] == loop["count"] - 1 or "error" not in w.details["loop"]


def while_loop_count():
    x = np.ones(3)
    for _ in range(6):
        x = np.tanh(x * 0.5) + 0.5
    count, err = 0, 1.0
    while err > 1e-9:
        y = 0.5 * (x + 2.0 / x)
        err, x, count = np.abs(y - x).max(), y, count + 1
    return count


def test_the_compiled_view_shows_how_each_loop_runs(looped):
    w = tk.explore(looped, view="compiled")
    loops = [k for k in w.kernels if k["kind"] == "loop"]
    assert loops, [k["id"] for k in w.kernels]
    (k,) = loops  # the 6-step loop is small: the compiled graph unrolls it
    assert k["plan"].endswith("one numba function") and "def loop_driver" in k["source"]
    w.select(k["id"])
    assert "while err > 1e-9: one numba function" in w.details_text()
