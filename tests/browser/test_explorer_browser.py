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
CHECK = 'print("STATE", repr(w.selected), int(w.step), w.view)'


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
  return !!(w && w.content && w.content.widgets && w.content.widgets.length >= 3
            && w.sessionContext && w.sessionContext.session
            && w.sessionContext.session.kernel);
}"""


def _viewbox(page):
    vb = page.locator(".tk-explorer .tk-svg").first.get_attribute("viewBox")
    return [float(v) for v in vb.split()]


def test_explorer_in_jupyterlab(lab, page, tmp_path):
    t = _local_trace()
    clicked = t.graph.nodes[-1]  # the softmax's divide
    hovered = t.graph.nodes[0]  # the first matmul
    lab.write_notebook("explorer.ipynb", [MODEL, SHOW, CHECK])

    def fail(msg):
        errors = "\n".join(page.errors[-20:])
        pytest.fail(f"{msg}\n--- browser errors:\n{errors}\n--- jupyterlab log:\n{lab.log_tail()}")

    page.set_default_timeout(45_000)
    # /doc: JupyterLab's single-document mode (no side panels: the widget gets the width)
    page.goto(f"{lab.url}/doc/tree/explorer.ipynb?token={lab.token}")
    try:
        page.wait_for_function(JS_APP_READY, timeout=45_000)
        page.evaluate(JS_RUN_CELL, 0)
        page.evaluate(JS_RUN_CELL, 1)
        page.wait_for_selector(".tk-explorer .tk-svg g.node", timeout=45_000)
    except Exception as e:  # say what the server and the browser said
        fail(f"the explorer did not appear: {e}")
    ex = page.locator(".tk-explorer").first
    ex.scroll_into_view_if_needed()

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

    # ---- zoom with the wheel (around the cursor), pan by dragging, fit
    stage = ex.locator(".tk-stage").first
    box = stage.bounding_box()
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    before = _viewbox(page)
    level_before = ex.locator(".tk-zoom-level").first.inner_text()
    page.mouse.move(cx, cy)
    page.mouse.wheel(0, -600)
    page.wait_for_function(
        "(w) => parseFloat(document.querySelector('.tk-explorer .tk-svg')"
        ".getAttribute('viewBox').split(' ')[2]) < w * 0.9",
        arg=before[2],
    )
    zoomed = _viewbox(page)
    assert zoomed[2] < before[2] and zoomed[3] < before[3]
    assert ex.locator(".tk-zoom-level").first.inner_text() != level_before
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 80, cy + 40, steps=5)
    page.mouse.up()
    panned = _viewbox(page)
    assert panned[0] < zoomed[0] and panned[2] == pytest.approx(zoomed[2])
    ex.locator(".tk-zoom-in").first.click()
    assert _viewbox(page)[2] < panned[2]
    ex.locator(".tk-zoom-fit").first.click()
    assert _viewbox(page)[2] == pytest.approx(before[2], rel=1e-6)
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

    # ---- the Python side sees what the browser did
    page.evaluate(JS_RUN_CELL, 2)
    out = page.locator(".jp-OutputArea-output", has_text="STATE").first
    out.wait_for()
    assert f"STATE '{node_id}' {k} forward" in out.inner_text()

    # ---- compare backends: a bar per target
    ex.locator(".tk-compare-btn").click()
    page.wait_for_selector(".tk-explorer .tk-compare .tk-bar-row", timeout=60_000)
    names = ex.locator(".tk-bar-name").all_inner_texts()
    assert "interpreter" in names and "cpu" in names
    assert re.search(r"\d", ex.locator(".tk-cmp-table").inner_text())

    # ---- a screenshot (and, when asked, the README's): a node computed by now, selected
    shown_id = f"node-{t.graph.nodes[2].outputs[0].name}"
    ex.locator(f'[id="{shown_id}"]').click()
    page.wait_for_function(
        "(id) => { const d = document.querySelector('.tk-explorer .tk-details');"
        " return d.querySelector('.tk-hist') && d.textContent.includes('%' + id); }",
        arg=shown_id.removeprefix("node-"),
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
