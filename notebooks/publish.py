"""The course as a reader sees it without running it: ``make course`` executes every notebook and
writes it, outputs included, to ``docs/course/`` (a repository browser shows the graphs there).

Exercise cells (tagged ``exercise``) run with their solution, the code in the ``<details>`` block
of the markdown cell after them, so that their check cells (tagged ``check``) really run; the
published copy keeps the exercise as the reader gets it and leaves both cells without outputs.
``tests/test_notebooks.py`` runs the notebooks the same way and checks that the published copy
has the same cells and draws a picture where a fresh run does.

    python notebooks/publish.py [NAME ...]     # default: every notebook
"""

from __future__ import annotations

import copy
import glob
import os
import re
import sys

import nbclient
import nbformat

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED = os.path.join(os.path.dirname(HERE), "docs", "course")
SOLUTION = re.compile(r"<details><summary>Solution</summary>\s*```python\n(.*?)```", re.S)
IMAGES = ("image/svg+xml", "image/png")


def tags(cell) -> list:
    return cell.get("metadata", {}).get("tags", [])


def with_solutions(nb):
    """A copy of ``nb`` whose exercise cells hold their solutions."""
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        if "exercise" not in tags(cell):
            continue
        following = [c for c in nb.cells[i + 1 :] if c.cell_type == "markdown"]
        found = SOLUTION.search(following[0].source) if following else None
        if found is None:
            raise ValueError(f"exercise cell {i} has no <details> solution after it")
        cell.source = found.group(1).strip("\n")
    return nb


def execute(nb, kernel_name="python3", timeout=300):
    """Run ``nb`` (with its solutions) top to bottom in notebooks/; return the executed copy."""
    run = with_solutions(nb)
    nbclient.NotebookClient(
        run,
        timeout=timeout,
        kernel_name=kernel_name,
        record_timing=False,
        resources={"metadata": {"path": HERE}},
    ).execute()
    return run


def published(nb, executed):
    """The executed notebook as published: exercises as given, exercise and check cells empty."""
    out = copy.deepcopy(executed)
    for cell, original in zip(out.cells, nb.cells):
        if {"exercise", "check"} & set(tags(original)):
            cell.source, cell.outputs, cell.execution_count = original.source, [], None
    return out


def pictures(nb) -> list:
    """For each code cell: does it show a picture?"""
    return [
        any(o.get("data", {}).keys() & set(IMAGES) for o in c.outputs)
        for c in nb.cells
        if c.cell_type == "code"
    ]


def published_path(path: str) -> str:
    return os.path.join(PUBLISHED, os.path.basename(path))


def main(names):
    paths = sorted(glob.glob(os.path.join(HERE, "*.ipynb")))
    if names:
        paths = [p for p in paths if any(n in os.path.basename(p) for n in names)]
    os.makedirs(PUBLISHED, exist_ok=True)
    failed = []
    for path in paths:
        print("running", os.path.basename(path), flush=True)
        nb = nbformat.read(path, as_version=4)
        try:
            nbformat.write(published(nb, execute(nb)), published_path(path))
        except nbclient.exceptions.CellExecutionError as e:
            print(e, file=sys.stderr)
            failed.append(os.path.basename(path))
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main(sys.argv[1:])
