"""Which NumPy functions a corpus of real programs calls, and how many of them tracekit traces.

Reads every Python file under the given directories, collects the NumPy functions its code
names (``np.sort``, ``numpy.linalg.inv``, ``np.add.outer`` counts as ``np.add``), and asks this
checkout's tracekit whether it records each: a ufunc of the op table, a function with an
``__array_function__`` handler, or a creation function traced while tracing. Constants, dtypes
and submodules (``np.pi``, ``np.float64``, ``np.random``) are not functions and are left out, as
are ``np.random.*`` generators (no array argument to trace). A count of rules, not a run: a
function counted here may still refuse some of its arguments (``np.linalg.norm(ord=2)`` of a
matrix), which the run of the programs themselves would show.

    .venv/bin/python benchmarks/numpy_coverage.py PATH [PATH ...] [--glob "*_numpy.py"] [--json F]

The corpus of the closing note: npbench's NumPy kernels (github.com/spcl/npbench,
``npbench/benchmarks/**/*_numpy.py``, one file per benchmark).

For a count before a change, run it with ``PYTHONPATH`` pointing at that revision's tree.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

_ALIASES = ("np", "numpy")
_SUBMODULES = ("linalg", "fft")


def used_functions(source: str) -> Counter:
    """``np.<name>`` / ``np.linalg.<name>`` attributes a program's code reads, by public path."""
    found: Counter = Counter()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return found
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(
            node.value, ast.Name | ast.Attribute
        ):
            continue
        path = _dotted(node)
        if path is None or path[0] not in _ALIASES or len(path) < 2:
            continue
        if path[1] in _SUBMODULES and len(path) >= 3:
            found[f"np.{path[1]}.{path[2]}"] += 1
        elif path[1] not in _SUBMODULES:
            found[f"np.{path[1]}"] += 1
    return found


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def resolve(path: str):
    """The NumPy object ``np.<...>`` names, or None."""
    obj = np
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def is_function(obj) -> bool:
    if obj is None or isinstance(obj, type) or not callable(obj):
        return False  # constants, dtypes and scalar types (np.float64), classes
    return not (getattr(obj, "__module__", "") or "").startswith("numpy.random")


def traced(path: str, obj) -> bool:
    """Whether this checkout's tracer records ``obj`` (reached through ``np.<path>``)."""
    import tracekit  # noqa: F401  (registers the handlers)
    from tracekit import traced as traced_module
    from tracekit.ops import OPS
    from tracekit.tracer.array import ARRAY_FUNCTIONS

    if isinstance(obj, np.ufunc):
        op = OPS.get(obj.__name__)
        return op is not None and op.ufunc is obj
    if obj in ARRAY_FUNCTIONS:
        return True
    return path.count(".") == 1 and path.split(".")[1] in traced_module._CREATION


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--glob", default="*.py", help="which files under a directory")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    files = sorted(f for p in args.paths for f in ([p] if p.is_file() else p.rglob(args.glob)))
    uses: Counter = Counter()
    programs: dict = {}
    for f in files:
        found = used_functions(f.read_text(errors="replace"))
        uses.update(found)
        for name in found:
            programs.setdefault(name, set()).add(f.name)
    rows = []
    for name in sorted(uses):
        obj = resolve(name)
        if is_function(obj):
            rows.append((name, len(programs[name]), traced(name, obj)))
    yes = [r for r in rows if r[2]]
    print(f"{len(files)} files, {len(rows)} distinct NumPy functions, {len(yes)} traced")
    calls_in = sum(r[1] for r in rows)
    print(f"weighted by the files using them: {sum(r[1] for r in yes)} of {calls_in}")
    print("not traced:", ", ".join(f"{n} ({k})" for n, k, ok in rows if not ok) or "none")
    if args.json:
        out = {
            "files": len(files),
            "functions": {n: {"files": k, "traced": ok} for n, k, ok in rows},
        }
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
