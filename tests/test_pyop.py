"""Python operators (tk.python_op, caffe2's Net.Python): forward, gradient conventions, builder
tuples, python_func_type, serialisation by reference, compiled code."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tracekit as tk
from tracekit.pyop import PyOp

RNG = np.random.default_rng(99)
BUILT = []  # one entry per call of a builder in this process


def make_scaler(k, offset=0.0):
    BUILT.append(("scaler", k))
    return lambda x: k * x + offset


def make_scaler_grad(k):
    BUILT.append(("scaler_grad", k))
    return lambda x, y, gy: gy * k


def mul_add(x, y):
    return x * y, x + y


def mul_add_grad(x, y, p, s, gp, gs):
    return gp * y + gs, gp * x + gs


def sinh(x):
    return np.sinh(x)


def sinh_grad(x, y, gy):
    return gy * np.cosh(x)


class Accumulate:
    """A stateful op: forward counts its calls; backward uses the forward's function."""

    def __init__(self, f):
        self.f = f
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.f(x)

    def backward(self, inputs, outputs, grad_outputs):
        (x,), _, (gy,) = inputs, outputs, grad_outputs
        return gy * 2 * x


def square(x):
    return x * x


def fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


# ---------------------------------------------------------------------- forward
def test_one_opaque_node_named_and_run():
    op = tk.python_op(sinh, grad_f=sinh_grad, name="my_sinh")
    x = RNG.standard_normal(5)
    t = tk.trace(lambda x: op(x * 2.0) + 1.0, x)
    assert [n.op for n in t.graph.nodes] == ["multiply", "python_op", "add"]
    node = t.graph.nodes[1]
    assert node.attrs["name"] == "my_sinh" and node.attrs["pyop"] is op
    assert "my_sinh" in str(t.graph)
    np.testing.assert_allclose(t(x), np.sinh(2 * x) + 1)
    # outside a trace it is just the function
    np.testing.assert_allclose(op(x), np.sinh(x))
    assert op.fn is sinh and not op.is_numba and op.name == "my_sinh"
    assert tk.python_op(sinh).name == "sinh"


def test_several_outputs_and_shapes_from_the_example_values():
    op = tk.python_op(mul_add)
    x, y = RNG.standard_normal((2, 3)), RNG.standard_normal(3)
    t = tk.trace(lambda x, y: op(x, y), x, y)
    (node,) = t.graph.nodes
    assert [o.shape for o in node.outputs] == [(2, 3), (2, 3)]
    p, s = t(x, y)
    np.testing.assert_allclose(p, x * y)
    np.testing.assert_allclose(s, x + y)
    one = tk.python_op(lambda x: (x.sum(axis=0).astype(np.float32),))
    t1 = tk.trace(lambda x: one(x)[0] * 2, x)
    assert t1.graph.nodes[0].out.type == "f32[3]"
    np.testing.assert_allclose(t1(x), 2 * x.sum(axis=0), rtol=1e-6)


def test_bad_outputs_are_clear_errors():
    op = tk.python_op(lambda x: "nope", name="bad")
    with pytest.raises(tk.TraceError, match="'bad' returned str"):
        tk.trace(lambda x: op(x), np.ones(2))


# ---------------------------------------------------------------------- gradients (caffe2)
def test_grad_f_receives_inputs_outputs_and_output_grads():
    op = tk.python_op(mul_add, grad_f=mul_add_grad)
    x, y = RNG.standard_normal(4), RNG.standard_normal(4)

    def loss(x, y):
        p, s = op(x, y)
        return np.sum(p * 3.0 + np.sin(s))

    gx, gy = tk.grad(loss, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, fd_grad(lambda x: loss(x, y), x), rtol=1e-6)
    np.testing.assert_allclose(gy, fd_grad(lambda y: loss(x, y), y), rtol=1e-6)
    b = tk.vjp(tk.trace(loss, x, y))
    grad_nodes = [n for n in b.graph.nodes if n.op == "python_op" and n.attrs["name"] != "mul_add"]
    assert [n.attrs["name"] for n in grad_nodes] == ["mul_add_grad"]
    assert len(grad_nodes[0].inputs) == 2 + 2 + 2


def test_grad_output_and_input_indices():
    seen = {}

    def grad_only_p_for_y(x, y, p, s, gp):  # receives grads of output 0 only, returns dy only
        seen["n_args"] = 5
        return gp * x

    op = tk.python_op(
        mul_add, grad_f=grad_only_p_for_y, grad_output_indices=[0], grad_input_indices=[1]
    )
    x, y = RNG.standard_normal(3), RNG.standard_normal(3)

    def loss(x, y):
        p, s = op(x, y)
        return np.sum(p * 2.0 + s)

    gx, gy = tk.grad(loss, argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, np.zeros(3))  # not in grad_input_indices: zero
    np.testing.assert_allclose(gy, 2.0 * x)  # the gradient through s is not passed: caffe2
    assert seen["n_args"] == 5


def test_grad_f_may_return_none_and_must_return_the_right_count():
    op = tk.python_op(mul_add, grad_f=lambda x, y, p, s, gp, gs: (gp * y + gs, None))
    x, y = np.ones(2), np.full(2, 3.0)
    gx, gy = tk.grad(lambda x, y: np.sum(op(x, y)[0]), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, y)
    np.testing.assert_array_equal(gy, 0.0)
    bad = tk.python_op(mul_add, grad_f=lambda *a: a[-1], name="bad_grad")
    with pytest.raises(tk.TraceError, match="'bad_grad' returned 1 arrays; expected 2"):
        tk.grad(lambda x, y: np.sum(bad(x, y)[0]))(x, y)


def test_missing_grad_f_is_an_error_naming_the_op():
    op = tk.python_op(np.cos, name="opaque_cos")
    t = tk.trace(lambda x: np.sum(op(x)), np.ones(3))
    with pytest.raises(tk.TraceError, match="python op 'opaque_cos' has no gradient"):
        tk.vjp(t)
    # a python op off the differentiated path is fine
    g = tk.grad(lambda x, y: np.sum(x * 2.0) + np.sum(op(y)))(np.ones(2), np.ones(2))
    np.testing.assert_allclose(g, [2.0, 2.0])


def test_python_func_type_forward_backward_and_state():
    op = tk.python_op(square, python_func_type=Accumulate, name="acc_square")
    x = RNG.standard_normal(4)
    g = tk.grad(lambda x: np.sum(op(x) * 0.5))(x)
    np.testing.assert_allclose(g, x)
    inst = op.instance
    assert isinstance(inst, Accumulate) and inst.f is square
    before = inst.calls
    t = tk.trace(lambda x: op(x), x)
    t(x)
    t(x)
    assert op.instance is inst and inst.calls == before + 3  # trace + two calls
    assert op.fn == inst.forward


def test_builder_tuple_called_once_per_process():
    BUILT.clear()
    op = tk.python_op((make_scaler, (2.5,), {"offset": 1.0}), grad_f=(make_scaler_grad, (2.5,), {}))
    assert BUILT == []  # not before the op first runs
    x = RNG.standard_normal(4)
    t = tk.trace(lambda x: op(x), x)
    np.testing.assert_allclose(t(x), 2.5 * x + 1.0)
    np.testing.assert_allclose(tk.grad(lambda x: np.sum(op(x)))(x), np.full(4, 2.5))
    again = tk.python_op((make_scaler, (2.5,), {"offset": 1.0}))  # same builder: same function
    np.testing.assert_allclose(tk.trace(lambda x: again(x), x)(x), 2.5 * x + 1.0)
    g2 = tk.Graph.from_json(t.graph.to_json())
    t2 = t.with_graph(g2)
    np.testing.assert_allclose(t2(x), 2.5 * x + 1.0)
    assert BUILT == [("scaler", 2.5), ("scaler_grad", 2.5)]


def test_builder_tuple_in_another_process(tmp_path):
    op = tk.python_op((make_scaler, (3.0,), {}), grad_f=(make_scaler_grad, (3.0,), {}))
    x = np.arange(4.0)
    t = tk.trace(lambda x: np.sum(op(x) * 2.0), x)
    path = tmp_path / "graph.json"
    path.write_text(tk.vjp(t).graph.to_json())
    script = textwrap.dedent(
        f"""
        import numpy as np, tracekit as tk, test_pyop
        from tracekit.interpret import run
        g = tk.Graph.from_json(open({str(path)!r}).read())
        outs = [run(g, [np.arange(4.0), np.ones(())])[0] for _ in range(3)]
        print(outs[0].tolist(), len(test_pyop.BUILT), sorted({{b[0] for b in test_pyop.BUILT}}))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.getcwd()]))
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("]")[0] + "]" == "[6.0, 6.0, 6.0, 6.0]"
    assert res.stdout.strip().endswith("2 ['scaler', 'scaler_grad']")


# ---------------------------------------------------------------------- serialisation
def test_json_round_trip_by_reference():
    op = tk.python_op(sinh, grad_f=sinh_grad, name="my_sinh")
    x = RNG.standard_normal(3)

    def twice_sinh(x):
        return op(x) * 2.0

    t = tk.trace(twice_sinh, x)
    d = op.__tracekit_json__()
    assert d["f"] == {"ref": f"{__name__}:sinh"} and "uid" not in d
    g2 = tk.Graph.from_json(t.graph.to_json())
    assert g2.key() == t.graph.key()
    node = g2.nodes[0]
    assert isinstance(node.attrs["pyop"], PyOp) and node.attrs["pyop"].fn is sinh
    np.testing.assert_allclose(t.with_graph(g2)(x), 2 * np.sinh(x))
    # the backward graph (with the gradient op) round-trips too
    b = tk.vjp(tk.trace(lambda x: np.sum(op(x)), x))
    gb = tk.Graph.from_json(b.graph.to_json())
    np.testing.assert_allclose(b.with_graph(gb)(x, np.ones(()))[0], np.cosh(x))
    # generated code calls the op through its JSON spec
    ns: dict = {}
    exec(t.code, ns)
    np.testing.assert_allclose(ns[t.graph.name](x), 2 * np.sinh(x))


def test_local_functions_and_stateful_ops_round_trip_in_process_only():
    op = tk.python_op(lambda x: x + 1, name="plus_one")
    t = tk.trace(lambda x: op(x), np.ones(2))
    d = op.__tracekit_json__()
    assert "local" in d["f"] and "uid" in d
    g2 = tk.Graph.from_json(t.graph.to_json())
    assert g2.nodes[0].attrs["pyop"] is op  # the same object, in this process
    other = dict(d, uid="elsewhere-0")
    from tracekit.pyop import object_from_json

    with pytest.raises(tk.TraceError, match="plus_one.*not importable"):
        object_from_json(other)
    stateful = tk.python_op(square, python_func_type=Accumulate)
    assert object_from_json(stateful.__tracekit_json__()) is stateful


def test_pickling():
    op = tk.python_op(sinh, grad_f=sinh_grad, name="my_sinh")
    op2 = pickle.loads(pickle.dumps(op))
    assert isinstance(op2, PyOp) and op2.name == "my_sinh" and op2.fn is sinh
    np.testing.assert_allclose(op2(np.ones(2)), np.sinh(np.ones(2)))
    builder = tk.python_op((make_scaler, (4.0,), {}))
    b2 = pickle.loads(pickle.dumps(builder))
    np.testing.assert_allclose(b2(np.ones(2)), [4.0, 4.0])
    with pytest.raises(pickle.PicklingError, match="not importable"):
        pickle.dumps(tk.python_op(lambda x: x, name="anon"))


# ---------------------------------------------------------------------- compiled code
def test_compiled_with_a_python_op_splits_the_plan():
    op = tk.python_op(sinh, grad_f=sinh_grad, name="my_sinh")
    x = RNG.standard_normal(64)
    t = tk.trace(lambda x: np.tanh(op(np.exp(x) * 2.0)) + 1.0, x)
    c = tk.compile(t, target="cpu", progress=False)
    np.testing.assert_allclose(c(x), np.tanh(np.sinh(np.exp(x) * 2.0)) + 1.0, rtol=1e-12)
    assert "my_sinh" in str(c.plan) or "python_op" in str(c.plan)


def test_compiled_numba_python_op():
    numba = pytest.importorskip("numba")

    @numba.njit
    def nb_cube(x):
        return x * x * x

    op = tk.python_op(nb_cube, grad_f=lambda x, y, gy: gy * 3 * x * x, name="nb_cube")
    assert op.is_numba
    x = RNG.standard_normal(32)
    t = tk.trace(lambda x: op(x + 1.0) * 2.0, x)
    c = tk.compile(t, target="cpu", progress=False)
    np.testing.assert_allclose(c(x), 2 * (x + 1.0) ** 3, rtol=1e-12)
    g = tk.grad(lambda x: np.sum(op(x)))(x)
    np.testing.assert_allclose(g, 3 * x * x)
