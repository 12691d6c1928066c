"""tk.save / tk.load, and the public functions taking a Graph (tracekit/saving.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import tracekit as tk

SCALE = np.array([1.0, 2.0, 3.0])  # captured by `model`


def shifted_sinh(x):
    return np.sinh(x) + 1.0


def shifted_sinh_grad(x, y, gy):
    return gy * np.cosh(x)


SINH = tk.python_op(shifted_sinh, grad_f=shifted_sinh_grad, name="shifted_sinh")


def model(x, n, extra):
    if x.sum() > 0:  # a guard
        y = SINH(x) * SCALE
    else:
        y = x - 1.0
    return {"y": y * n, "z": extra["k"] + 1.0}


def traced_model():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.TracerWarning)
        return tk.trace(model, np.ones(3), 3, {"k": np.zeros(2)})


def test_a_saved_trace_runs_compiles_differentiates_and_renders_in_a_new_process(tmp_path):
    path = tmp_path / "model.json"
    tk.save(traced_model(), path)
    x, extra = np.array([0.5, 1.0, 2.0]), {"k": np.array([1.0, 2.0])}
    want = model(x, 3, extra)
    script = textwrap.dedent(
        f"""
        import json, numpy as np, tracekit as tk
        t = tk.load({str(path)!r})
        x, extra = np.array([0.5, 1.0, 2.0]), {{"k": np.array([1.0, 2.0])}}
        c = tk.compile(t, progress=False)
        try:
            t(-x, 3, extra)
            guard = "no GuardError"
        except tk.GuardError as e:
            guard = str(e)
        b = tk.vjp(t)
        grads = b(x, 3, extra, np.ones(3), np.ones(2))
        print(json.dumps({{
            "interpreted": {{k: v.tolist() for k, v in t(x, 3, extra).items()}},
            "compiled": {{k: v.tolist() for k, v in c(x, 3, extra).items()}},
            "guard": guard,
            "grad": grads[0].tolist(),
            "svg": "shifted_sinh" in tk.render(t).pipe(format="svg").decode(),
            "optimized": [n.op for n in tk.optimize(t).graph.nodes],
        }}))
        """
    )
    here = os.path.dirname(__file__)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.getcwd()]))
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    for key in ("interpreted", "compiled"):
        np.testing.assert_allclose(out[key]["y"], want["y"])
        np.testing.assert_allclose(out[key]["z"], want["z"])
    assert "test_saving.py" in out["guard"] and "x.sum() > 0" in out["guard"]
    np.testing.assert_allclose(out["grad"], 3 * np.cosh(x) * SCALE)
    assert out["svg"] and "python_op" in out["optimized"]


def test_captured_arrays_are_saved_with_their_values_and_can_be_rebound(tmp_path):
    path = tmp_path / "model.json"
    tk.save(traced_model(), path)
    t = tk.load(path)
    x, extra = np.ones(3), {"k": np.zeros(2)}
    assert list(t.captured) == ["global:SCALE"]
    np.testing.assert_allclose(t(x, 3, extra)["y"], shifted_sinh(x) * SCALE * 3)
    t.captured["global:SCALE"] = np.full(3, 10.0)
    np.testing.assert_allclose(t(x, 3, extra)["y"], shifted_sinh(x) * 30.0)
    with pytest.raises(TypeError, match="static value was 3, got 2"):
        t(x, 2, extra)


def test_what_cannot_be_saved_is_refused_with_the_reason(tmp_path):
    local = tk.python_op(lambda x: x * 2, name="doubled")
    t = tk.trace(lambda x: local(x) + 1.0, np.ones(2))
    with pytest.raises(TypeError, match=r"python op 'doubled' \(at test_saving.py:\d+.*module"):
        tk.save(t, tmp_path / "local.json")
    assert not (tmp_path / "local.json").exists()
    (tmp_path / "graph.json").write_text(t.graph.to_json())
    with pytest.raises(ValueError, match="Graph's JSON: tk.Graph.from_json reads it"):
        tk.load(tmp_path / "graph.json")


def test_public_functions_take_a_graph():
    t = tk.trace(lambda x, y: (np.exp(x) * 1.0, x * y), np.ones(3), np.full(3, 2.0))
    g = tk.Graph.from_json(t.graph.to_json())
    x, y = np.arange(3.0), np.full(3, 2.0)
    want = (np.exp(x), x * y)
    for result in (tk.compile(g, progress=False)(x, y), tk.optimize(g)(x, y)):
        np.testing.assert_allclose(result[0], want[0])
        np.testing.assert_allclose(result[1], want[1])
    assert [n.op for n in tk.optimize(g).graph.nodes] == ["exp", "multiply"]
    dx, dy = tk.vjp(g)(x, y, np.ones(3), np.ones(3))
    np.testing.assert_allclose(dx, np.exp(x) + y)
    assert "exp" in tk.render(g).source


def test_public_functions_say_what_they_take():
    for call in (tk.compile, tk.optimize, tk.vjp, tk.save):
        with pytest.raises(TypeError, match=r"takes a Traced .*a Graph .* trace it first"):
            call(np.exp) if call is not tk.save else call(np.exp, "unused.json")
    captured = tk.trace(lambda x: x * SCALE, np.ones(3)).graph
    with pytest.raises(TypeError, match="captured arrays .*global:SCALE.*tk.save"):
        tk.compile(tk.Graph.from_json(captured.to_json()))


def test_an_unknown_pass_lists_the_known_ones():
    t = tk.trace(lambda x: x + 0.0, np.ones(2))
    with pytest.raises(ValueError, match="unknown pass 'nope'; the passes are cse, fold_const"):
        tk.optimize(t, passes=["nope"])
