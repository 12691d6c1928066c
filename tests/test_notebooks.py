"""Every notebook in notebooks/ runs top to bottom (nbclient) in a kernel of this interpreter.

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
def test_notebook_runs_top_to_bottom(path, kernel):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=kernel,
        resources={"metadata": {"path": NOTEBOOK_DIR}},
    )
    client.execute()  # raises CellExecutionError naming the cell that failed
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors
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
