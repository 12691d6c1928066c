"""The IR: checks, structural keys, JSON round trips, the text listing."""

from __future__ import annotations

import json
import re
import sys
import types
import warnings

import numpy as np
import pytest
from helpers.compare import assert_same
from helpers.run import quiet
from helpers.values import DTYPES
from test_ops import CASES, args_factory

import tracekit as tk
from tracekit.interpret import run
from tracekit.ir import FrozenDict, Graph, Guard, InputSpec, Node, Source, Var

F64 = np.dtype("float64")


def v(name, shape=(3,), dtype=F64):
    return Var(name, shape, dtype)


def simple_graph():
    x, y, a, b = v("x"), v("y"), v("0"), v("1")
    nodes = [Node("add", (x, y), {}, (a,)), Node("exp", (a,), {}, (b,))]
    return Graph([x, y], nodes, [b])


# ---------------------------------------------------------------------- check()
def test_check_accepts_a_good_graph():
    g = simple_graph()
    assert g.check() is g


def _broken(kind):
    x, y, a, b = v("x"), v("y"), v("0"), v("1")
    add = Node("add", (x, y), {}, (a,))
    exp = Node("exp", (a,), {}, (b,))
    if kind == "duplicate input":
        return Graph([x, x], [add], [a])
    if kind == "specs length":
        return Graph([x, y], [add], [a], specs=[InputSpec("arg", "x")])
    if kind == "const without value":
        return Graph([x, y], [add], [a], specs=[InputSpec("arg", "x"), InputSpec("const", "c")])
    if kind == "unknown op":
        return Graph([x, y], [Node("frobnicate", (x,), {}, (a,))], [a])
    if kind == "used before defined":
        return Graph([x, y], [exp, add], [b])
    if kind == "undefined input":
        return Graph([x], [add], [a])
    if kind == "defined twice":
        return Graph([x, y], [add, Node("exp", (x,), {}, (a,))], [a])
    if kind == "output is an input twice over":
        return Graph([x, y], [Node("exp", (x,), {}, (x,))], [x])
    if kind == "undefined output":
        return Graph([x, y], [add], [b])
    if kind == "guard on undefined":
        return Graph([x, y], [add], [a], guards=[Guard(b, True, "bool")])
    if kind == "bad writeback":
        return Graph([x, y], [add], [a], writebacks=[(1, 0)])
    if kind == "bad writeback input":
        return Graph([x, y], [add], [a, a], writebacks=[(1, 5)])
    if kind == "duplicate name":
        return Graph([x, y], [add, Node("exp", (a,), {}, (v("0"),))], [a])
    if kind == "wrong output count":
        return Graph([x, y], [Node("add", (x, y), {}, (a, b))], [a])
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind,message",
    [
        ("duplicate input", "appears twice"),
        ("specs length", "specs"),
        ("const without value", "no value"),
        ("unknown op", "unknown op"),
        ("used before defined", "before it is defined"),
        ("undefined input", "before it is defined"),
        ("defined twice", "defined twice"),
        ("output is an input twice over", "defined twice"),
        ("undefined output", "not defined"),
        ("guard on undefined", "guard"),
        ("bad writeback", "writeback"),
        ("bad writeback input", "writeback"),
        ("duplicate name", "name"),
    ],
)
def test_check_catches_broken_graphs(kind, message):
    with pytest.raises(ValueError, match=message):
        _broken(kind).check()


def test_nodes_and_vars_are_immutable():
    x = v("x")
    with pytest.raises(AttributeError):
        x.shape = (4,)
    n = Node("clip", (x, 0.0, 1.0), {"k": 1}, (v("0"),))
    with pytest.raises(TypeError):
        n.attrs["k"] = 2
    with pytest.raises(Exception):  # noqa: B017  (frozen dataclass)
        n.op = "exp"
    assert isinstance(n.attrs, FrozenDict) and hash(n.attrs) == hash(FrozenDict({"k": 1}))


# ---------------------------------------------------------------------- key()
def _f1(a, b):
    return np.tanh(a @ b) + 1.0


def _f2(x, w):  # the same computation, other names, other lines, a scope
    with tk.scope("s"):
        y = x @ w
    return np.tanh(y) + 1.0


def test_key_ignores_names_sources_and_scopes():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    k1 = tk.trace(_f1, a, b).graph.key()
    k2 = tk.trace(_f2, a, b).graph.key()
    k3 = tk.trace(lambda p, q: np.tanh(p @ q) + 1.0, a, b).graph.key()
    assert k1 == k2 == k3
    assert re.fullmatch(r"[0-9a-f]{64}", k1)


@pytest.mark.parametrize(
    "other",
    [
        lambda a, b: np.tanh(a @ b) - 1.0,  # another op
        lambda a, b: np.tanh(a @ b) + 2.0,  # another constant
        lambda a, b: np.tanh(a @ b) + np.float32(1.0),  # another constant type
        lambda a, b: np.tanh(a @ b).sum(axis=0) + 1.0,  # more nodes
        lambda a, b: 1.0 + np.tanh(a @ b),  # another argument order
        lambda a, b: np.tanh(b.T @ a.T).T + 1.0,  # other ops, same result
    ],
)
def test_key_differs_for_different_computations(other):
    a, b = np.ones((2, 3)), np.ones((3, 4))
    assert tk.trace(other, a, b).graph.key() != tk.trace(_f1, a, b).graph.key()


def test_key_differs_for_shapes_dtypes_attrs_and_constant_values():
    base = tk.trace(lambda x: x.sum(axis=0), np.ones((2, 3))).graph.key()
    assert tk.trace(lambda x: x.sum(axis=1), np.ones((2, 3))).graph.key() != base
    assert tk.trace(lambda x: x.sum(axis=0), np.ones((2, 4))).graph.key() != base
    assert tk.trace(lambda x: x.sum(axis=0), np.ones((2, 3), np.float32)).graph.key() != base
    assert tk.trace(lambda x: x.sum(axis=0, keepdims=True), np.ones((2, 3))).graph.key() != base
    k1 = tk.trace(lambda x: x * np.array([1.0, 2.0, 3.0]), np.ones(3)).graph.key()
    k2 = tk.trace(lambda x: x * np.array([1.0, 2.0, 4.0]), np.ones(3)).graph.key()
    assert k1 != k2  # constants baked into the graph
    c = np.array([1.0, 2.0, 3.0])
    k3 = tk.trace(lambda x: x * c, np.ones(3)).graph.key()
    c = np.array([1.0, 2.0, 4.0])
    assert tk.trace(lambda x: x * c, np.ones(3)).graph.key() == k3  # captures: read per call
    w1 = tk.trace(lambda x, s: x * s, np.ones(3), 2.0).graph.key()
    w2 = tk.trace(lambda x, s: x * s, np.ones(3), np.float64(2.0)).graph.key()
    assert w1 != w2  # a weak Python float and a strong NumPy scalar promote differently


def test_key_includes_guards_and_writebacks():
    def writes(x):
        x += 1

    def returns(x):
        return x + 1

    assert tk.trace(writes, np.ones(3)).graph.key() != tk.trace(returns, np.ones(3)).graph.key()

    def branch(x):
        return x * 2 if x.sum() > 0 else x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kp = tk.trace(branch, np.ones(3)).graph.key()
        kn = tk.trace(branch, -np.ones(3)).graph.key()
    assert kp != kn


# ---------------------------------------------------------------------- JSON
def _example_traces():
    """One Traced per op-test case (float64 or the first dtype that works)."""
    out = []
    for c in CASES:
        found = []
        for dt in sorted(c.dtypes, key=lambda d: d != np.dtype("float64")):
            try:
                with quiet():
                    t = tk.trace(c.program(dt), *args_factory(c, dt, "c")(0))
            except Exception:
                continue
            found.append((dt, t))
            if c.op in {n.op for n in t.graph.nodes}:
                found = [(dt, t)]
                break
        if found:
            out.append(pytest.param(c, *found[0], id=c.name))
    return out


_TRACES = _example_traces()


def test_json_cases_cover_every_op():
    from tracekit.ops import OPS

    seen = {n.op for p in _TRACES for n in p.values[2].graph.nodes}
    missing = {name for name, op in OPS.items() if op.kind != "opaque"} - seen
    assert not missing, missing


def _assert_graphs_equal(g2, g):
    assert g2.key() == g.key()
    assert str(g2) == str(g)
    assert [vv.name for vv in g2.inputs] == [vv.name for vv in g.inputs]
    assert [(s.kind, s.label) for s in g2.specs] == [(s.kind, s.label) for s in g.specs]
    assert [vv.weak for vv in g2.inputs] == [vv.weak for vv in g.inputs]
    for n2, n in zip(g2.nodes, g.nodes, strict=True):
        assert n2.op == n.op and n2.source == n.source and n2.scope == n.scope
        assert set(n2.attrs) == set(n.attrs)
        for k in n.attrs:
            _assert_attr_equal(n2.attrs[k], n.attrs[k])
        for a, b in zip(n2.inputs, n.inputs, strict=True):
            if isinstance(b, Var):
                assert isinstance(a, Var) and a.name == b.name and a.type == b.type
            else:
                _assert_attr_equal(a, b)
    assert g2.writebacks == [tuple(w) for w in g.writebacks]
    assert [(gd.var.name, gd.value, gd.how, gd.source) for gd in g2.guards] == [
        (gd.var.name, gd.value, gd.how, gd.source) for gd in g.guards
    ]
    assert {k.name: a for k, a in g2.constants.items()}.keys() == {k.name for k in g.constants}
    for k, a in g.constants.items():
        assert_same([c for c in g2.constants.items() if c[0].name == k.name][0][1], a)


def _assert_attr_equal(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(b, Graph):  # a loop's body
        _assert_graphs_equal(a, b)
    elif isinstance(b, np.ndarray):
        assert_same(a, b)
    elif isinstance(b, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_attr_equal(x, y)
    elif isinstance(b, float) and b != b:
        assert a != a
    elif isinstance(b, np.generic):
        assert a.dtype == b.dtype and (a == b or (a != a and b != b))
    else:
        assert a == b


@pytest.mark.parametrize("c,dt,t", _TRACES)
def test_json_round_trip_of_every_case(c, dt, t):
    text = t.graph.to_json()
    json.loads(text)  # plain JSON
    g2 = Graph.from_json(text)
    _assert_graphs_equal(g2, t.graph)
    ex = args_factory(c, dt, "c")(1)
    t2 = t.with_graph(g2)
    with quiet():
        try:
            expected = t(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in ex])
        except Exception as err:
            with pytest.raises(type(err)):
                t2(*ex)
            return
        got = t2(*ex)
    if c.values:
        assert_same(got, expected)


def test_json_round_trip_of_guards_writebacks_constants_and_weak_inputs():
    def f(x, s, y):
        y[1:] += x[:2] * s
        if x.sum() > 0:
            x[...] = np.array([1.0, np.nan, -np.inf])
        return y[::-1, None, ...], np.float32(2.5) * x.astype(np.complex64)

    with pytest.warns(tk.TracerWarning):
        t = tk.trace(f, np.ones(3), 0.5, np.ones(3))
    g = t.graph
    assert g.guards and g.writebacks and g.constants and g.inputs[1].weak
    g2 = Graph.from_json(g.to_json())
    _assert_graphs_equal(g2, g)


def test_from_json_rejects_other_documents():
    with pytest.raises(ValueError, match="tracekit-graph"):
        Graph.from_json(json.dumps({"nodes": []}))


@pytest.mark.parametrize(
    "value",
    [
        slice(1, None, -2),
        (Ellipsis, None, slice(None), 3, "@0"),
        np.dtype("complex64"),
        np.float32(-0.0),
        np.int8(-128),
        np.uint64(2**64 - 1),
        np.array([[1, 2], [3, 4]], np.int16),
        np.array([np.nan, -0.0, np.inf], np.float32),
        np.array([1 + 2j], np.complex128),
        np.zeros((0, 3), bool),
        float("nan"),
        float("-inf"),
        -0.0,
        1 + 2j,
        True,
        None,
        "ij,jk->ik",
        ((1, 0), (0, 2)),
        [1, (2, 3)],
        {"a": 1, "b": (2.5,)},
        2**70,
    ],
    ids=repr,
)
def test_attribute_values_round_trip(value):
    x, out = v("x"), v("0")
    g = Graph([x], [Node("positive", (x,), {"attr": value}, (out,))], [out])
    g2 = Graph.from_json(g.to_json())
    _assert_attr_equal(g2.nodes[0].attrs["attr"], value)
    assert g2.key() == g.key()


# ---------------------------------------------------------------------- listing
def test_listing_format():
    x, w = v("x", (128, 32)), v("w", (32, 64), np.float32)
    a = Var("7", (128, 64), np.float32)
    src = Source("/some/where/file.py", 12, "forward", "y = x @ w")
    n = Node("matmul", (x, w), {}, (a,), src, ("MLP.__call__", "Linear.forward"))
    expected = "%7: f32[128,64] = matmul(%x, %w)  # file.py:12 (MLP.__call__ > Linear.forward)"
    assert str(n) == expected
    s = Node("sum", (a,), {"axis": (0,), "keepdims": False, "dtype": None}, (Var("8", (64,), F64),))
    assert str(s) == "%8: f64[64] = sum(%7, axis=(0,), keepdims=False)"
    i = Node(
        "index",
        (a,),
        {"idx": (slice(None, None, -1), Ellipsis, None, 3)},
        (Var("9", (64, 1), np.float32),),
    )
    assert str(i) == "%9: f32[64,1] = index(%7, idx=(::-1, ..., None, 3))"


def test_a_notebook_cell_is_named_as_jupyter_numbers_it(monkeypatch):
    """In IPython a cell's code lives in a file such as ipykernel_<pid>/<hash>.py; a listing
    names it as the notebook does (``In [3], line 7``), from IPython's own file -> cell map."""
    cell_file = "/tmp/ipykernel_42/1234.py"
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(_filename_map={cell_file: 3}))
    fake_ipython = types.SimpleNamespace(get_ipython=lambda: shell)
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython)
    assert str(Source(cell_file, 7, "f", "y = x + 1")) == "In [3], line 7"
    assert str(Source("/tmp/ipykernel_42/5678.py", 2, "f")) == "cell:2"  # not a cell it ran
    assert str(Source("/some/where/file.py", 12, "f")) == "file.py:12"
    monkeypatch.setattr(fake_ipython, "get_ipython", lambda: None)  # imported, no shell running
    assert str(Source(cell_file, 7, "f")) == "cell:7"


def test_graph_listing_shows_inputs_captures_guards_and_writes():
    class M:
        def __init__(self):
            self.w = np.ones(3, np.float32)

        def f(self, x, s):
            x *= s
            if x.sum() > 0:
                return x * self.w
            return x

    with pytest.warns(tk.TracerWarning):
        t = tk.trace(M().f, np.ones(3, np.float32), 2.0)
    text = str(t.graph)
    lines = text.splitlines()
    assert lines[0] == "f(%x: f32[3], %s: f64[]~) {"
    assert "  capture %self_w: f32[3] = self.w" in lines
    assert any(re.fullmatch(r"  guard bool\(%\d+\) == True  # test_ir.py:\d+", s) for s in lines)
    assert re.search(r"  return %\d+\n  write %\d+ -> %x\n}$", text)
    assert repr(t) == text


def test_all_dtypes_have_short_names():
    from tracekit.ir import short_dtype

    names = [short_dtype(d) for d in DTYPES]
    assert names == "bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 c64 c128".split()


def test_interpreter_returns_every_intermediate_value():
    t = tk.trace(lambda x: np.exp(x) * 2 + 1, np.zeros(2))
    env = {}
    outs = run(t.graph, [np.ones(2)], env_out=env)
    assert len(env) == 1 + len(t.graph.nodes)
    assert_same(env[t.graph.nodes[0].out], np.exp(np.ones(2)))
    assert_same(outs[0], np.exp(np.ones(2)) * 2 + 1)
    part = run(t.graph, [np.ones(2)], until=1)
    assert part == [None]
    with pytest.raises(TypeError, match="takes 1 inputs, got 2"):
        run(t.graph, [np.ones(2), np.ones(2)])


def test_interpreter_errors_name_the_node_and_line():
    t = tk.trace(lambda x, i: x[i], np.ones(3), np.array([0, 2]))
    with pytest.raises(IndexError) as e:
        t(np.ones(3), np.array([0, 5]))
    assert any("test_ir.py" in note and "index" in note for note in e.value.__notes__)
