"""Every notebook in notebooks/ runs top to bottom (nbclient) in a kernel of this interpreter,
its exercises with their solutions through their check cells, and the published copy in
docs/course/ (``make course``) has the same cells and the same pictures as a fresh run.

The kernel is a private kernelspec made with ``ipykernel install --prefix`` in a temporary
directory and found through ``JUPYTER_PATH``: it runs ``sys.executable`` whatever kernels the
machine has (a fresh ``make setup`` venv, a user-wide ``python3`` kernel of another Python, none).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(glob.glob(os.path.join(NOTEBOOK_DIR, "*.ipynb")))
sys.path.insert(0, NOTEBOOK_DIR)
import publish  # noqa: E402  (notebooks/publish.py: how the course is run and published)

KERNEL = "tracekit-tests"
CELL_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def kernel_path(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("jupyter")
    cmd = [sys.executable, "-m", "ipykernel", "install", "--prefix", str(prefix), "--name", KERNEL]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    share = prefix / "share" / "jupyter"
    spec = json.loads((share / "kernels" / KERNEL / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    return str(share)


@pytest.fixture
def kernel(kernel_path, monkeypatch):
    monkeypatch.setenv(
        "JUPYTER_PATH", kernel_path + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    )
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # quiets a debugger warning
    return KERNEL


def test_there_are_notebooks():
    assert any(p.endswith("01_tour.ipynb") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_every_exercise_has_a_solution_and_a_check(path):
    nb = nbformat.read(path, as_version=4)
    publish.with_solutions(nb)  # raises for an exercise without a <details> solution
    for i, cell in enumerate(nb.cells):
        if "exercise" in publish.tags(cell):
            checks = [c for c in nb.cells[i + 1 :] if c.cell_type == "code"][:1]
            assert checks and "check" in publish.tags(checks[0]), cell.source[:60]
            assert "assert" in checks[0].source, checks[0].source[:60]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_the_published_copy_has_the_notebooks_cells(path):
    """docs/course/ is rebuilt by `make course`; it must follow every edit of a notebook."""
    published = publish.published_path(path)
    assert os.path.exists(published), f"{published} is missing: run `make course`"
    nb, pub = nbformat.read(path, as_version=4), nbformat.read(published, as_version=4)
    assert [(c.cell_type, c.source) for c in pub.cells] == [
        (c.cell_type, c.source) for c in nb.cells
    ], f"{published} is stale: run `make course`"
    code = [c for c in pub.cells if c.cell_type == "code"]
    assert any(c.outputs for c in code), f"{published} has no outputs: run `make course`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_top_to_bottom(path, kernel):
    original = nbformat.read(path, as_version=4)
    nb = publish.execute(original, kernel_name=kernel, timeout=CELL_TIMEOUT_S)
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
    fresh = publish.published(original, nb)
    pub = nbformat.read(publish.published_path(path), as_version=4)
    assert publish.pictures(fresh) == publish.pictures(pub), "pictures differ: run `make course`"
    if os.path.basename(path) == "01_tour.ipynb":
        svgs = [
            o.data["image/svg+xml"]
            for c in nb.cells
            if c.cell_type == "code"
            for o in c.outputs
            if o.output_type in ("execute_result", "display_data") and "image/svg+xml" in o.data
        ]
        assert len(svgs) >= 5  # the graph, depth=0, xN, values, the guard
        assert all("max-width:100%" in s for s in svgs)
        printed = "".join(
            o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
        )
        assert "def MLP(" in printed  # .code
        assert "guard bool(" in printed and "GuardError" in printed
