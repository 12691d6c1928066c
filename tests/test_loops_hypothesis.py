"""hypothesis: random loop programs (carried values, invariants, stacked histories, writes at the
loop variable, numbers moving with it, nested loops, while loops) rolled and checked against
NumPy on new inputs, unrolled and rolled.

Each program is Python source written into a module file of its own (tracing finds the loops of a
function in its source file), imported, traced and run. ``TK_HYPOTHESIS_EXAMPLES=500`` explores
more; the default keeps the suite fast and derandomized.
"""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
from helpers.compare import assert_same
from helpers.run import hypothesis_settings, quiet
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit as tk

SETTINGS = hypothesis_settings(40)

# one statement of a body: ``x`` the carried value, ``w`` an invariant, ``t`` the loop variable
STATEMENTS = [
    "x = np.tanh(x) * 0.9 + 0.1 * w",
    "x = x * 0.5 + w",
    "x = np.sin(x + w) - 0.25 * x",
    "x = x + 0.01 * t",  # a number moving with the loop
    "x = x - np.cos(w) * 0.1",  # invariant work: hoisted
    "x = np.maximum(x, w * 0.5)",
    "x = x / (1.0 + np.abs(w))",
]
_modules = itertools.count()


@st.composite
def loop_programs(draw):
    """Source of ``f(x, w, out)``: one loop (maybe nested, maybe a while), its body drawn from
    STATEMENTS; it may keep a history (np.stack), write ``out[t]`` and return several values."""
    trips = draw(st.integers(2, 6))
    body = draw(st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=3))
    stacked = draw(st.booleans())
    writes_row = draw(st.booleans())
    nested = draw(st.booleans())
    as_while = draw(st.booleans()) and not nested
    lines = ["def f(x, w, out):", "    history = []"]
    if as_while:  # a while on a traced counter: its test in every iteration
        lines += [
            "    count = np.zeros(()) + 0 * x.sum()",
            "    t = 0",
            f"    while count < {trips}:",
        ]
    else:
        lines.append(f"    for t in range({trips}):")
    indent = "        "
    if nested:
        lines.append(f"{indent}for _ in range(2):")
        indent += "    "
    lines += [indent + s for s in body]
    indent = "        "
    if stacked:
        lines.append(f"{indent}history.append(x)")
    if writes_row:
        lines.append(f"{indent}out[t] = x")
    if as_while:
        lines += [f"{indent}count = count + 1", f"{indent}t += 1"]
    result = ["x"] + (["np.stack(history)"] if stacked else [])
    lines.append(f"    return {', '.join(result)}")
    return "\n".join(lines) + "\n", trips


def _load(source: str, folder):
    path = folder / f"loop_program_{next(_modules)}.py"
    path.write_text("import numpy as np\n\n\n" + source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def _inputs(seed, trips):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(4), rng.standard_normal(4), np.zeros((trips, 4))]


def _traced(program, seed, folder):
    """(the program's function, it traced on inputs of ``seed``, its trip count)."""
    source, trips = program
    f = _load(source, folder)
    with quiet():
        return f, tk.trace(f, *_inputs(seed, trips)), trips


def _parts(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


@SETTINGS
@given(program=loop_programs(), seed=st.integers(0, 2**16))
def test_random_loops_roll_and_agree_with_numpy(program, seed, tmp_path):
    source = program[0]
    f, rolled, trips = _traced(program, seed, tmp_path)
    with quiet():
        flat = tk.trace(f, *_inputs(seed, trips), loops="unroll")
    loops = [n for n in rolled.graph.nodes if n.op in ("loop", "while_loop")]
    assert loops or rolled.notes, source + str(rolled.graph)  # rolled, or it says why not
    new = _inputs(seed + 1, trips)
    want_args = [a.copy() for a in new]
    with quiet():
        want = f(*want_args)
        for traced in (rolled, flat):
            got_args = [a.copy() for a in new]
            assert_same(traced(*got_args), want)
            assert_same(got_args, want_args, "arguments after the call (writes into inputs)")


@settings(SETTINGS, max_examples=max(4, SETTINGS.max_examples // 8))
@given(program=loop_programs(), seed=st.integers(0, 2**16))
def test_random_loops_compiled_for_the_cpu_agree_with_the_interpreter(program, seed, tmp_path):
    _, t, trips = _traced(program, seed, tmp_path)
    with quiet():
        c = tk.compile(t, target="cpu", progress=False)
        new = _inputs(seed + 2, trips)
        want_args, got_args = [a.copy() for a in new], [a.copy() for a in new]
        want, got = t(*want_args), c(*got_args)
    for g, w in zip(_parts(got), _parts(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got_args[2], want_args[2], rtol=1e-12, atol=1e-14)
