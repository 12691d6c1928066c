"""The package's shape: no import cycles, every module importable on its own.

Data flows one way (tracer -> IR -> passes -> render | interpret | backends -> explore), so the
import graph of ``tracekit`` (every import statement, at module level or inside a function) has
no cycle, and each module imports alone in a fresh interpreter.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

import tracekit

ROOT = pathlib.Path(tracekit.__file__).parent


def module_files() -> dict:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ("tracekit",) + p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


MODULES = module_files()


def imported(module: str, node) -> list[str]:
    """The tracekit modules an import statement of ``module`` names."""
    is_package = MODULES[module].name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            up = package
            for _ in range(node.level - 1):
                up = up.rpartition(".")[0]
            base = f"{up}.{base}" if base else up
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for n in names:
        while n not in MODULES and "." in n:
            n = n.rpartition(".")[0]
        if n in MODULES and n != module:
            out.append(n)
    return out


def import_graph() -> dict:
    edges = {}
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges.setdefault(m, set()).update(imported(m, node))
    return edges


def cycles(edges) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in MODULES:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    edges = import_graph()
    assert edges["tracekit.ops"] >= {"tracekit.ir"}  # the analysis sees imports at all
    assert not cycles(edges), cycles(edges)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"tracekit.ir": {"tracekit.ops"}, "tracekit.ops": {"tracekit.ir"}})


def test_ir_is_a_leaf():
    assert not import_graph().get("tracekit.ir")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_imports_alone(module):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    p = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, env=env
    )
    assert p.returncode == 0, p.stderr[-2000:]


# Every stage asks an op's capabilities (ops.py) instead of testing its name. These are the most
# comparisons of a string literal that spells an op of the table with anything, per module,
# outside ops.py and the CUDA modules (backends/cuda*.py, backends/emit_cuda*.py). Most of the
# literals left only share an op's spelling:
NAME_TESTS = {
    "backends/emit_cpu.py": 9,  # a fusion group's role "full" (6); Reduction.combine "add", "max"
    "backends/planner.py": 6,  # the group role "full" (4); the kind "matmul" (2)
    "render.py": 8,  # a drawn scope's kind "repeat" (6), its scene class "repeat"; depth="all"
    "type_rules.py": 6,  # Reduction.combine: sums and products, extrema
    "traced.py": 2,  # the option loops="roll" (2)
    "interpret.py": 1,  # the guard conversion "index"
    "loops/roll.py": 3,  # np.stack's recorded pattern: concatenate of reshapes of index rows
    "passes/simplify.py": 1,  # index_update's rewrite: its pattern is b[idx] = b[idx] (index)
    "pyop.py": 1,  # the "type" of a Python op in graph JSON
    "ir.py": 1,  # the key "var" of a node's input in graph JSON
    "explore.py": 1,  # the key "min" of a value's statistics
}


def op_name_comparisons() -> dict:
    """``{module: [(line, literal), ...]}``: the comparisons ``NAME_TESTS`` counts."""
    from tracekit.ops import OPS

    names = set(OPS)
    found = {}
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if p.name == "ops.py" or re.fullmatch(r"backends/(emit_)?cuda.*\.py", rel):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Compare):
                for e in [node.left, *node.comparators]:
                    for c in ast.walk(e):
                        if isinstance(c, ast.Constant) and c.value in names:
                            found.setdefault(rel, []).append((node.lineno, c.value))
    return found


def test_stages_ask_capabilities_not_op_names():
    found = op_name_comparisons()
    assert found  # the count sees comparisons at all
    over = {m: hits for m, hits in found.items() if len(hits) > NAME_TESTS.get(m, 0)}
    assert not over, f"op names tested (ask the op's capabilities instead): {over}"
    assert sum(map(len, found.values())) <= sum(NAME_TESTS.values())
