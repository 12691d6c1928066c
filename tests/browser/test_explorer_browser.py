"""The explorer in a real browser: JupyterLab (headless) + Debian's Chromium through Playwright.

A temporary notebook shows ``tk.explore(t)``; the test runs it in the browser, clicks a node
and checks the details panel names it (and that the Python side saw the click), hovers for a
tooltip, zooms and pans, moves the step slider, compares backends and saves a screenshot
(``TRACEKIT_SAVE_SCREENSHOT=docs/explorer.png`` also writes it there, for the README).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import textwrap
import time

import pytest

pytestmark = pytest.mark.browser

REPO = pathlib.Path(__file__).resolve().parents[2]

MODEL = textwrap.dedent(
    """\
    import numpy as np
    import tracekit as tk


    class Linear:
        def __init__(self, n_in, n_out, rng):
            self.w = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
            self.b = np.full(n_out, 0.1)

        def __call__(self, x):
            return x @ self.w + self.b


    class MLP:
        def __init__(self):
            rng = np.random.default_rng(0)
            self.l1, self.l2 = Linear(16, 32, rng), Linear(32, 4, rng)

        def __call__(self, x):
            with tk.scope("hidden"):
                h = np.maximum(self.l1(x), 0.0)
            with tk.scope("head"):
                z = self.l2(h)
                z = z - z.max(axis=-1, keepdims=True)
                e = np.exp(z)
                return e / e.sum(axis=-1, keepdims=True)


    x = np.random.default_rng(1).standard_normal((64, 16))
    t = tk.trace(MLP(), x, keep_values=True)
    """
)

SHOW = "w = tk.explore(t, height=600)\nw"
CHECK = 'print("STATE", repr(w.selected), int(w.step), w.view, w.collapsed)'


def _local_trace():
    ns: dict = {}
    exec(compile(MODEL, "<model>", "exec"), ns)
    return ns["t"]


JS_RUN_CELL = """async (index) => {
  const app = window.jupyterapp;
  const panel = app.shell.currentWidget;
  await panel.context.ready;
  await panel.sessionContext.ready;
  panel.content.activeCellIndex = index;
  await app.commands.execute('notebook:run-cell');
}"""

JS_APP_READY = """() => {
  const app = window.jupyterapp;
  const w = app && app.shell && app.shell.currentWidget;
  return !!(w && w.content && w.content.widgets && w.content.widgets.length >= 4
            && w.sessionContext && w.sessionContext.session
            && w.sessionContext.session.kernel);
}"""


def _view(stage):
    """The pane's zoom (px per unit) and the drawing's offset, as the widget reports them."""
    return {k: float(stage.get_attribute(f"data-{k}")) for k in ("zoom", "tx", "ty")}


# the whole drawing lies inside its pane (what "fit" promises: nothing clipped)
JS_INSIDE = """() => {
  const st = document.querySelector('.tk-explorer .tk-stage').getBoundingClientRect();
  const d = document.querySelector('.tk-explorer .tk-svg').getBoundingClientRect();
  return d.width > 50 && d.left >= st.left - 1 && d.top >= st.top - 1
    && d.right <= st.right + 1 && d.bottom <= st.bottom + 1;
}"""


def _inside(page):
    page.wait_for_function(JS_INSIDE)
    return True


def expect_selected(page, sid):
    page.wait_for_function(
        "(id) => { const e = document.querySelector('.tk-explorer .tk-svg .tk-selected');"
        " return e && e.id === id; }",
        arg=sid,
    )


def _open_explorer(page, server, path, timeout=45_000):
    """Open the notebook at ``path``, run its first two cells (the trace, the widget) and
    return the widget's locator; on failure, say what the browser and the server said."""
    page.set_default_timeout(timeout)
    page.goto(f"{server.url}/{path}?token={server.token}")
    try:
        page.wait_for_function(JS_APP_READY, timeout=timeout)
        page.evaluate(JS_RUN_CELL, 0)
        page.evaluate(JS_RUN_CELL, 1)
        page.wait_for_selector(".tk-explorer .tk-svg g.node", timeout=timeout)
    except Exception as e:
        errors = "\n".join(page.errors[-20:])
        pytest.fail(
            f"the explorer did not appear: {e}\n--- browser errors:\n{errors}\n"
            f"--- server log:\n{server.log_tail()}"
        )
    ex = page.locator(".tk-explorer").first
    ex.scroll_into_view_if_needed()
    return ex


def test_explorer_in_jupyterlab(page, lab, tmp_path):  # page first: skips before starting a server
    t = _local_trace()
    clicked = t.graph.nodes[-1]  # the softmax's divide
    hovered = t.graph.nodes[0]  # the first matmul
    lab.write_notebook("explorer.ipynb", [MODEL, SHOW, CHECK, 'w.select("sum")'])
    # /doc: JupyterLab's single-document mode (no side panels: the widget gets the width)
    ex = _open_explorer(page, lab, "doc/tree/explorer.ipynb")

    # ---- click a node: the details panel names it, and Python computed its value
    node_id = f"node-{clicked.outputs[0].name}"
    ex.locator(f'[id="{node_id}"]').click()
    details = ex.locator(".tk-details")
    page.wait_for_selector(".tk-explorer .tk-details .tk-stats")
    assert details.locator(".tk-d-op").inner_text().strip() == clicked.op
    assert f"%{clicked.outputs[0].name}" in details.inner_text()
    assert "head" in details.inner_text()  # its scope
    assert ex.locator(f'[id="{node_id}"].tk-selected').count() == 1

    # ---- hover a node: a tooltip with its op and source line
    ex.locator(f'[id="node-{hovered.outputs[0].name}"]').hover()
    tip = ex.locator(".tk-tip").first
    tip.wait_for(state="visible")
    assert hovered.op in tip.inner_text()
    assert re.search(r"\.py:\d+", tip.inner_text()), tip.inner_text()  # the cell's file:line

    # ---- zoom with the wheel (around the cursor), pan by dragging, fit (nothing clipped)
    stage = ex.locator(".tk-stage").first
    box = stage.bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    fitted = _view(stage)
    assert _inside(page)
    level_before = ex.locator(".tk-zoom-level").first.inner_text()
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -600)
    page.wait_for_function(
        "(z) => +document.querySelector('.tk-explorer .tk-stage').dataset.zoom > z * 1.1",
        arg=fitted["zoom"],
    )
    zoomed = _view(stage)
    assert ex.locator(".tk-zoom-level").first.inner_text() != level_before
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 80, cy + 40, steps=5)
    page.mouse.up()
    panned = _view(stage)
    assert panned["tx"] == pytest.approx(zoomed["tx"] + 80, abs=1)
    assert panned["ty"] == pytest.approx(zoomed["ty"] + 40, abs=1)
    assert panned["zoom"] == zoomed["zoom"]
    ex.locator(".tk-zoom-in").first.click()
    assert _view(stage)["zoom"] > panned["zoom"]
    ex.locator(".tk-zoom-fit").first.click()
    assert _view(stage) == fitted
    page.wait_for_function(JS_INSIDE)
    # the selection survived the drag (a drag is not a click)
    assert ex.locator(f'[id="{node_id}"].tk-selected').count() == 1

    # ---- the step slider: executed nodes shaded, the current one highlighted, its value shown
    k = 7
    ex.locator(".tk-slider").first.fill(str(k))
    page.wait_for_function(
        f"() => /step {k} \\//.test(document.querySelector('.tk-explorer .tk-step-label')"
        ".textContent)"
    )
    current = ex.locator(".tk-svg g.node.tk-current")
    assert current.count() == 1
    assert current.first.get_attribute("id") == f"node-{t.graph.nodes[k - 1].outputs[0].name}"
    assert ex.locator(".tk-svg g.node.tk-done").count() >= k - 1
    assert ex.locator(".tk-svg g.node.tk-pending").count() >= 1
    page.wait_for_selector(".tk-explorer .tk-step-value .tk-step-stats")
    shown = ex.locator(".tk-step-value").inner_text()
    assert t.graph.nodes[k - 1].op in shown and "min" in shown

    # ---- search by op / scope: matches marked, Enter selects the next one
    search = ex.locator(".tk-search-input")
    search.fill("exp")
    page.wait_for_function(
        "() => document.querySelectorAll('.tk-explorer .tk-svg g.node.tk-match').length > 0"
    )
    exp_id = f"node-{next(n for n in t.graph.nodes if n.op == 'exp').outputs[0].name}"
    assert ex.locator(".tk-svg g.node.tk-match").first.get_attribute("id") == exp_id
    search.press("Enter")
    expect_selected(page, exp_id)
    search.fill("head")  # a scope: every op in it
    page.wait_for_function(
        "() => document.querySelectorAll('.tk-explorer .tk-svg g.node.tk-match').length >= 7"
    )
    ex.screenshot(path=str(tmp_path / "search.png"))
    search.fill("")
    page.wait_for_function("() => !document.querySelector('.tk-explorer .tk-svg.tk-searching')")

    # ---- click a scope box: it collapses (Python sees it); click again: it expands
    ex.locator(".tk-zoom-fit").first.click()  # Enter above centred the match: see it all
    cluster = ex.locator('[id="cluster-MLP.__call__/hidden"]')
    cluster.click(position={"x": 12, "y": 8})
    overlay = ex.locator('.tk-overlay[data-cluster="cluster-MLP.__call__/hidden"]')
    overlay.wait_for()
    assert "3 ops" in overlay.text_content()
    ex.screenshot(path=str(tmp_path / "collapsed.png"))

    # ---- the Python side sees what the browser did
    page.evaluate(JS_RUN_CELL, 2)
    out = page.locator(".jp-OutputArea-output", has_text="STATE").first
    out.wait_for()
    assert f"STATE '{exp_id}' {k} forward ['cluster-MLP.__call__/hidden']" in out.inner_text()
    overlay.click()
    overlay.wait_for(state="detached")

    # ---- Python selects: the browser highlights and shows it
    page.evaluate(JS_RUN_CELL, 3)
    sum_id = f"node-{next(n for n in t.graph.nodes if n.op == 'sum').outputs[0].name}"
    expect_selected(page, sum_id)
    details.locator(".tk-d-op", has_text="sum").wait_for()

    # ---- play runs the steps by itself; a second click pauses
    ex.locator(".tk-slider").first.fill("0")
    ex.locator(".tk-play").click()
    page.wait_for_function(
        "() => /step [2-9]/.test(document.querySelector('.tk-explorer .tk-step-label').textContent)"
    )
    ex.locator(".tk-play").click()
    paused = ex.locator(".tk-step-label").inner_text()
    page.wait_for_timeout(700)
    assert ex.locator(".tk-step-label").inner_text() == paused

    # ---- compiled view: kernels as clusters; a kernel shows its highlighted source
    ex.locator('.tk-view-btn[data-view="compiled"]').click()
    page.wait_for_selector(".tk-explorer .tk-svg g.cluster.kernel", timeout=60_000)
    kernel = ex.locator(".tk-svg g.cluster.kernel").first
    kernel_name = kernel.get_attribute("id").removeprefix("kernel-")
    kernel.click(position={"x": 10, "y": 6})
    page.wait_for_selector(".tk-explorer .tk-details .tk-code .tk-hl-k")
    assert f"kernel {kernel_name}" in details.inner_text()
    assert "generated source" in details.inner_text().lower()
    ex.screenshot(path=str(tmp_path / "compiled.png"))

    # ---- compare backends: a bar per target
    ex.locator(".tk-compare-btn").click()
    page.wait_for_selector(".tk-explorer .tk-compare .tk-bar-row", timeout=60_000)
    names = ex.locator(".tk-bar-name").all_inner_texts()
    assert "interpreter" in names and "cpu" in names
    assert re.search(r"\d", ex.locator(".tk-cmp-table").inner_text())

    # ---- forward + backward, and the pass history (two panes)
    ex.locator('.tk-view-btn[data-view="backward"]').click()
    page.wait_for_selector('.tk-explorer [id="graph-backward"]')
    assert ex.locator('.tk-svg [id="fwd-node-0"]').count() == 1
    ex.screenshot(path=str(tmp_path / "backward.png"))
    ex.locator('.tk-view-btn[data-view="passes"]').click()
    page.wait_for_function("() => document.querySelectorAll('.tk-explorer .tk-pane').length == 2")
    assert ex.locator(".tk-pass-btn").count() >= 2
    ex.screenshot(path=str(tmp_path / "passes.png"))

    # ---- back to the forward view for the screenshot: a step, and a node computed by now
    ex.locator('.tk-view-btn[data-view="forward"]').click()
    page.wait_for_function("() => document.querySelectorAll('.tk-explorer .tk-pane').length == 1")
    page.wait_for_selector('.tk-explorer .tk-svg [id="cluster-MLP.__call__/hidden"]')
    ex.locator(".tk-slider").first.fill(str(k))
    page.wait_for_selector(".tk-explorer .tk-step-value .tk-step-stats")
    shown_id = f"node-{t.graph.nodes[2].outputs[0].name}"
    ex.locator(f'[id="{shown_id}"]').click()
    page.wait_for_function(
        "(v) => { const d = document.querySelector('.tk-explorer .tk-details');"
        " return d.querySelector('.tk-hist') && d.textContent.includes(v); }",
        arg=f"%{t.graph.nodes[2].outputs[0].name}",
    )
    page.mouse.move(1, 1)
    tip.wait_for(state="hidden")
    shot = tmp_path / "explorer.png"
    ex.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    target = os.environ.get("TRACEKIT_SAVE_SCREENSHOT")
    if target:
        dest = pathlib.Path(target)
        dest = dest if dest.is_absolute() else REPO / dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)

    uncaught = [e for e in page.errors if "tk-" in e or "explorer" in e.lower()]
    assert not uncaught, uncaught


def test_explorer_in_notebook7(page, notebook7):
    """The same widget in Jupyter Notebook 7: it appears, fits its cell without clipping, a
    click selects a node that Python then sees, and a selection from Python is highlighted."""
    t = _local_trace()
    clicked = t.graph.nodes[-1]
    notebook7.write_notebook("explorer.ipynb", [MODEL, SHOW, CHECK, 'w.select("sum")'])
    ex = _open_explorer(page, notebook7, "notebooks/explorer.ipynb")
    page.wait_for_function(JS_INSIDE)  # fitted: the whole drawing inside its pane

    node_id = f"node-{clicked.outputs[0].name}"
    ex.locator(f'[id="{node_id}"]').click()
    page.wait_for_selector(".tk-explorer .tk-details .tk-stats")
    assert ex.locator(".tk-d-op").first.inner_text().strip() == clicked.op

    page.evaluate(JS_RUN_CELL, 2)
    out = page.locator(".jp-OutputArea-output", has_text="STATE").first
    out.wait_for()
    assert f"STATE '{node_id}'" in out.inner_text()

    page.evaluate(JS_RUN_CELL, 3)
    sum_id = f"node-{next(n for n in t.graph.nodes if n.op == 'sum').outputs[0].name}"
    expect_selected(page, sum_id)
    uncaught = [e for e in page.errors if "tk-" in e or "explorer" in e.lower()]
    assert not uncaught, uncaught


BIG = textwrap.dedent(
    """
    import numpy as np
    import tracekit as tk

    def long_chain(x):
        for i in range(400):
            x = np.tanh(x * 1.01 + 0.5) - x * 0.1
        return x

    t = tk.trace(long_chain, np.ones(8), loops="unroll")  # 2,000 nodes, not one loop
    assert len(t.graph.nodes) == 2000
    """
)


JS_NODE_IN_VIEW = """() => {
  const st = document.querySelector('.tk-explorer .tk-stage').getBoundingClientRect();
  for (const g of document.querySelectorAll('.tk-explorer .tk-svg g.node')) {
    const r = g.getBoundingClientRect();
    const x = r.left + r.width / 2, y = r.top + r.height / 2;
    if (r.width > 8 && x > st.left + 20 && x < st.right - 20 && y > st.top + 20
        && y < st.bottom - 20) return g.id;
  }
  return null;
}"""


def test_explorer_with_2000_nodes_stays_usable(page, notebook7):
    """2,000 nodes, every one drawn: the widget appears, zooms around the cursor, selects a
    clicked node and shows its details, and Python sees the selection (each step within the
    usual timeouts; the times are printed, not asserted)."""
    notebook7.write_notebook("big.ipynb", [BIG, SHOW, CHECK, "w.view"])
    ex = _open_explorer(page, notebook7, "notebooks/big.ipynb", timeout=120_000)
    assert ex.locator(".tk-svg g.node").count() >= 2000
    stage = ex.locator(".tk-stage").first
    box = stage.bounding_box()
    before = _view(stage)["zoom"]
    start = time.perf_counter()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -600)
    page.wait_for_function(
        "(z) => +document.querySelector('.tk-explorer .tk-stage').dataset.zoom > z * 1.1",
        arg=before,
    )
    zoom_s = time.perf_counter() - start
    for _ in range(12):  # fitted, 2,000 nodes are specks: zoom in until one is clickable
        node_id = page.evaluate(JS_NODE_IN_VIEW)
        if node_id:
            break
        page.mouse.wheel(0, -600)
        page.wait_for_timeout(150)
    assert node_id, "no node inside the pane after zooming in"
    start = time.perf_counter()
    ex.locator(f'[id="{node_id}"]').click()
    page.wait_for_selector(".tk-explorer .tk-details .tk-d-op")
    expect_selected(page, node_id)
    click_s = time.perf_counter() - start
    page.evaluate(JS_RUN_CELL, 2)
    out = page.locator(".jp-OutputArea-output", has_text="STATE").first
    out.wait_for()
    assert f"STATE '{node_id}'" in out.inner_text()
    print(f"2,000 nodes: wheel zoom {zoom_s:.2f} s, click to selected {click_s:.2f} s")


LOOP = textwrap.dedent(
    """\
    import numpy as np
    import tracekit as tk


    def relax(x):
        for _ in range(10):
            x = 0.5 * x + 1.0
        return x.sum()


    t = tk.trace(relax, np.zeros(4))
    (loop,) = [n for n in t.graph.nodes if n.op == "loop"]
    """
)


def test_explorer_loop_iteration_slider(page, notebook7, tmp_path):
    """A rolled loop in the browser: clicking a node of its body shows the iteration slider;
    moving it shows that iteration's values, and Python sees the iteration."""
    check = 'print("ITER", int(w.iteration), repr(w.selected))'
    notebook7.write_notebook("loop.ipynb", [LOOP, SHOW, check, "w.iteration"])
    ex = _open_explorer(page, notebook7, "notebooks/loop.ipynb")
    ns: dict = {}
    source = tmp_path / "loop_model.py"  # a file: tracing finds the loop in its source
    source.write_text(LOOP)
    exec(compile(LOOP, str(source), "exec"), ns)  # the ids the notebook's trace has
    loop = ns["loop"]
    body_node = loop.attrs["body"].nodes[-1]  # x = 0.5 * x + 1.0: the add
    node_id = f"node-{loop.outputs[0].name}/node-{body_node.outputs[0].name}"
    ex.locator(f'[id="{node_id}"]').click()
    label = ex.locator(".tk-iter-label")
    label.wait_for()
    assert "iteration 0 of 10" in label.inner_text()
    ex.locator(".tk-iter").evaluate(
        "(s) => { s.value = '3'; s.dispatchEvent(new Event('input', { bubbles: true })); }"
    )
    page.wait_for_function(
        "() => { const l = document.querySelector('.tk-explorer .tk-iter-label');"
        " return l && l.textContent.includes('iteration 3 of 10'); }"
    )
    # x after iteration 3 starting from 0: 1, 1.5, 1.75, 1.875
    assert "1.875" in ex.locator(".tk-details").inner_text()
    page.evaluate(JS_RUN_CELL, 2)
    out = page.locator(".jp-OutputArea-output", has_text=re.compile("ITER [0-9]")).first
    out.wait_for()
    assert f"ITER 3 '{node_id}'" in out.inner_text()
