"""Names from the user's code never reach generated code as identifiers that can collide.

Every place that writes source from a graph (``Traced.code``, the CPU kernels and their runner,
the CUDA kernels and launchers) names values by :func:`tracekit.ir.ident`, which is injective
and has no ``_``; only ``Traced.code`` keeps parameter names, through a checked namespace. Each
test below is one kind of collision that gave a wrong answer or a crash before.
"""

from __future__ import annotations

import builtins
import json
import keyword
import string

import numpy as np
import pytest
from helpers.run import quiet, run_code
from hypothesis import given, settings
from hypothesis import strategies as st

import tracekit as tk
from tracekit.codegen_py import parameter_names
from tracekit.ir import Graph, InputSpec, Node, Var, ident
from tracekit.traced import Traced

TARGETS = ["interpreter", "code", "cpu", "jit", "cuda"]


def run_on(target, fn, args):
    with quiet():
        t = tk.trace(fn, *args)
        if target == "interpreter":
            return t(*args)
        if target == "code":
            return run_code(t, *args)
        if target == "jit":
            return tk.jit(fn)(*args)
        return tk.compile(t, target=target)(*args)


def check_all_targets(fn, *args, rtol=1e-12):
    expected = fn(*[np.copy(a) for a in args])
    for target in TARGETS:
        got = run_on(target, fn, [np.copy(a) for a in args])
        np.testing.assert_allclose(got, expected, rtol=rtol, err_msg=target)


rng = np.random.default_rng(20)


def test_issue_example_parameters_named_like_values():
    def h(w, v1, v2):
        return np.outer(w, w) + np.outer(v1, v2)

    check_all_targets(h, rng.random(4), rng.random(4), rng.random(4))


def test_gemver_kernel_as_its_authors_wrote_it():
    def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
        A += np.outer(u1, v1) + np.outer(u2, v2)
        x += beta * y @ A + z
        w += alpha * A @ x
        return A, x, w

    n = 12
    args = (
        [np.float64(1.5), np.float64(1.2)]
        + [rng.random((n, n))]
        + [rng.random(n) for _ in range(8)]
    )
    expected = gemver(*[np.copy(a) for a in args])
    for target in TARGETS:
        got = run_on(target, gemver, [np.copy(a) for a in args])
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, err_msg=target)


def test_parameters_named_like_kernel_locals():
    """``acc``, ``ch``, ``f``, ``t_v0``, ``i0``: the CPU kernels' own names after their prefix."""

    def k(acc, ch, f, t_v0, i0, j0, rem, r_v1):
        s = np.sum(acc * ch, axis=1) + f.max(axis=1)
        return s * t_v0 + i0 - j0 + rem * np.argmax(r_v1, axis=1)

    shapes = [(5, 7)] * 3 + [(5,)] * 4 + [(5, 3)]
    check_all_targets(k, *[rng.random(s) for s in shapes])


def test_parameters_named_like_modules_helpers_and_builtins():
    def m(np_, math, numba, prange, cuda, range, len, slice, _wadd, fm_tanh):
        y = np.tanh(np_ * math + numba) - prange * cuda + range / (1 + len)
        return y + slice - _wadd * fm_tanh

    # ``np_`` would not reach ``np``; the real test is a parameter literally named ``np``:
    check_all_targets(m, *[rng.random(6) for _ in range(10)])

    src = "def g(np, x):\n    return np * x + x.sum()\n"
    ns: dict = {"__name__": "g_mod"}
    exec(compile(src, "<g>", "exec"), ns)
    check_all_targets(ns["g"], rng.random(4), rng.random(4))


class Layer:
    def __init__(self):
        self.w_1 = rng.random(5)
        self.v0 = rng.random(5)

    def __call__(self, self_w_1, v0):
        return self.w_1 * 2.0 + self_w_1 * 3.0 + self.v0 * 5.0 + v0 * 7.0


def test_captures_and_parameters_that_fold_to_one_identifier():
    """``self.w_1`` (a capture) and ``self_w_1`` (a parameter) are two values."""
    layer = Layer()
    check_all_targets(layer, rng.random(5), rng.random(5))


def renamed(t, names: dict):
    """``t`` with its values renamed by hand, as a JSON file or a pass may name them."""
    d = json.loads(t.graph.to_json())
    for v in d["inputs"] + [o for n in d["nodes"] for o in n["outputs"]]:
        v["name"] = names.get(v["name"], v["name"])
    for n in d["nodes"]:
        for x in n["inputs"]:
            if "var" in x:
                x["var"] = names.get(x["var"], x["var"])
    d["outputs"] = [names.get(o, o) for o in d["outputs"]]
    text = json.dumps(d)
    g = Graph.from_json(text).check()
    assert {v.name for v in g.inputs} | {o.name for n in g.nodes for o in n.outputs} >= set(
        names.values()
    )
    return Traced(g, t.in_tree, t.out_tree, t.capture_getters, t.example_leaves)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_values_whose_names_extend_one_another(target):
    """``s`` and ``s_i``: the CPU kernel named the argmax index of ``s`` ``<k>_r_s_i``, and the
    sum into ``s_i`` too."""
    x = rng.random((6, 9))
    t = tk.trace(lambda x: (np.argmax(x, 1), x.sum(1)), x)
    t = renamed(t, {"0": "s", "1": "s_i"})
    a, s = tk.compile(t, target=target)(x)
    np.testing.assert_array_equal(a, np.argmax(x, axis=1))
    np.testing.assert_allclose(s, x.sum(axis=1), rtol=1e-12)


def test_graphs_differing_only_in_which_input_a_node_reads_have_different_keys():
    def f(a, b):
        return a - 2 * b

    def f_swapped(a, b):
        return b - 2 * a

    args = (rng.random(3), rng.random(3))
    t1, t2 = tk.trace(f, *args), tk.trace(f_swapped, *args)
    assert t1.graph.key() != t2.graph.key()
    assert tk.trace(f, *args).graph.key() == t1.graph.key()


# ---------------------------------------------------------------------- the naming functions
names = st.text(alphabet=string.ascii_letters + string.digits + "_.[]:é ", min_size=1, max_size=8)


@settings(max_examples=500, deadline=None)
@given(st.lists(names, min_size=2, max_size=6, unique=True))
def test_ident_is_injective_and_never_a_keyword_builtin_or_underscored(ns):
    ids = [ident(n) for n in ns]
    assert len(set(ids)) == len(ids)
    for i in ids:
        assert i.isidentifier() and "_" not in i and i.startswith("v")
        assert not keyword.iskeyword(i) and i not in dir(builtins)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(["v0", "v1", "v1_1", "np", "len", "x", "x_1", "vx"]),
        min_size=1,
        max_size=5,
        unique=True,
    ),
    st.integers(0, 4),
)
def test_parameter_names_are_one_to_one(params, n_nodes):
    inputs = [Var(p, (), np.float64) for p in params]
    nodes, prev = [], inputs[0]
    for k in range(n_nodes):
        out = Var(str(k), (), np.float64)
        nodes.append(Node("negative", (prev,), {}, (out,)))
        prev = out
    g = Graph(inputs, nodes, [prev], specs=[InputSpec("arg", p) for p in params])
    ids = parameter_names(g)
    assert len(set(ids.values())) == len(ids)
    assert not {"np", "len"} & set(ids.values())
    for v in inputs:
        if v.name not in ("np", "len"):
            assert ids[v] == v.name  # the signature is the traced function's


def test_backward_graphs_of_parameters_named_like_values():
    """The backward graph names its values too (``g<k>``, cotangent inputs): compiled, it must
    read the arrays the interpreter reads."""

    def h(w, v1, v2, g1):
        return np.sum(np.outer(w, w) * g1 + np.outer(v1, v2))

    args = [rng.random(4), rng.random(4), rng.random(4), rng.random((4, 4))]
    with quiet():
        b = tk.vjp(tk.trace(h, *args))
        want = b(*args, np.float64(1.0))
        got = tk.compile(b, target="cpu")(*args, np.float64(1.0))
        grads = tk.grad(h, argnums=(0, 1, 2, 3))(*args)
    for g, w, d in zip(got, want, grads):
        np.testing.assert_allclose(g, w, rtol=1e-12)
        np.testing.assert_allclose(d, w, rtol=1e-12)


def test_lifted_literals_take_names_no_value_has():
    """Array literals a pass folded into a node become const inputs named ``lit<k>``: never a
    name an input already has (a parameter ``lit1`` and a lifted literal ``lit1`` were two
    values of one name)."""
    from tracekit.backends.lowering import lift_array_literals

    lit0, lit1 = Var("lit0", (3,), np.float64), Var("lit1", (3,), np.float64)
    out = Var("0", (3,), np.float64)
    node = Node("add", (lit0, np.array([1.0, 2.0, 3.0])), {}, (out,))
    g = Graph(
        [lit0, lit1], [node], [out], specs=[InputSpec("arg", "lit0"), InputSpec("arg", "lit1")]
    )
    lifted = lift_array_literals(g.check()).check()
    assert [v.name for v in lifted.inputs] == ["lit0", "lit1", "lit2"]
