"""Graph passes: each rewrite shown before/after, results equal to the unoptimised graph."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.compare import assert_same
from helpers.run import quiet
from helpers.values import DTYPES, random_values
from test_ops import OP_GROUPS, args_factory

import tracekit as tk
from tracekit.interpret import run
from tracekit.ir import Graph, Node, Var
from tracekit.passes import PIPELINE, PassRecord, cse, dce, fold_constants, optimize, simplify

rng = np.random.default_rng(3)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def ops_of(g):
    return [n.op for n in g.nodes]


def equal_results(t, passes, *args, exact=True):
    """``passes`` applied to ``t``'s graph give the same outputs (bitwise when ``exact``)."""
    g = t.graph
    for p in passes:
        g = p(g).check()
    with quiet():
        ref = run(t.graph, list(args))
        got = run(g, list(args))
    for a, b in zip(got, ref, strict=True):
        if exact:
            assert_same(a, b)
        else:
            np.testing.assert_allclose(
                a, b, rtol=4e-16 if np.asarray(b).dtype == np.float64 else 4e-7
            )
    return g


# ---------------------------------------------------------------------- dce
def test_dce_drops_dead_nodes_and_keeps_guards():
    def f(x):
        unused = np.exp(x) * 2  # noqa: F841
        if x.sum() > 0:
            return x + 1
        return x

    with pytest.warns(tk.TracerWarning):
        t = tk.trace(f, np.ones(3))
    assert ops_of(t.graph) == ["sum", "greater", "add"]  # tracing already ran dce
    raw = t.graph.replace(
        nodes=[Node("exp", (t.graph.inputs[0],), {}, (Var("dead", (3,), np.float64),))]
        + t.graph.nodes
    )
    assert ops_of(dce(raw)) == ["sum", "greater", "add"]
    no_guard = t.graph.replace(guards=[])
    assert ops_of(dce(no_guard)) == ["add"]
    equal_results(t, [dce], np.ones(3))


def test_dce_keeps_writebacks():
    def f(x):
        x[0] = 5.0
        return x.sum()

    t = tk.trace(f, np.ones(3))
    assert ops_of(dce(t.graph)) == ops_of(t.graph) == ["index_update", "sum"]


# ---------------------------------------------------------------------- cse
def test_cse_merges_identical_nodes():
    def f(x, y):
        a = np.exp(x) + np.exp(x)
        b = np.exp(x) * (x @ y) - (x @ y)
        c = x.sum(axis=0) + x.sum(axis=1)  # different attrs: kept apart
        return a, b, c

    x, y = rng.random((3, 3)), rng.random((3, 3))
    t = tk.trace(f, x, y)
    g = equal_results(t, [cse, dce], x, y)
    assert ops_of(t.graph).count("exp") == 3 and ops_of(g).count("exp") == 1
    assert ops_of(t.graph).count("matmul") == 2 and ops_of(g).count("matmul") == 1
    assert ops_of(g).count("sum") == 2


def test_cse_respects_constants_and_types():
    def f(x):
        return x + 1.0, x + 2.0, x.astype(np.float32) + 1.0, x + np.float32(1.0)

    t = tk.trace(f, np.ones(3))
    g = equal_results(t, [cse], np.ones(3))
    assert ops_of(g).count("add") == 4


# ---------------------------------------------------------------------- constant folding
def test_fold_constants():
    def f(x):
        k = np.arange(4.0) * 2 + 1  # all constant
        big = np.ones(1000) * 3  # too large to fold
        return x * k, x.sum() + big

    t = tk.trace(f, np.ones(4))
    g = equal_results(t, [fold_constants, dce], np.ones(4))
    assert "arange" not in ops_of(g)
    mult = [n for n in g.nodes if n.op == "multiply" and n.inputs[0] is t.graph.inputs[0]][0]
    assert_same(mult.inputs[1], np.arange(4.0) * 2 + 1)
    assert "full" in ops_of(g) and ops_of(g).count("multiply") == 2  # the big one stays


def test_fold_keeps_outputs_and_weak_scalars():
    def f(x, s):
        return np.zeros(3) + 1, x * (s * 2.0), x * (np.float64(1.5) * 2)

    t = tk.trace(f, np.ones(3, np.float32), 2.0)
    g = equal_results(t, [fold_constants, dce], np.ones(3, np.float32), 3.0)
    assert g.outputs[0] is t.graph.outputs[0]
    assert [o.dtype for o in g.outputs] == [np.float64, np.float32, np.float64]


def test_fold_substitutes_small_constant_inputs():
    def f(x):
        c = np.array([1.0, 2.0])  # a constant input of the graph
        return x + (np.ones(2) + c)

    t = tk.trace(f, np.ones(2))
    assert len(t.graph.constants) == 1
    g = equal_results(t, [fold_constants, dce], np.ones(2))
    assert ops_of(g) == ["add"]
    assert_same(g.nodes[0].inputs[1], np.array([2.0, 3.0]))


# ---------------------------------------------------------------------- simplify
FLOATS = [np.float32, np.float64]


def _run_both(t, *args, exact=True):
    return equal_results(t, [simplify, dce], *args, exact=exact)


def _x(dtype, shape=(64,)):
    return random_values(rng, shape, dtype)


@pytest.mark.parametrize("dt", FLOATS + [np.int32, np.uint8], ids=str)
def test_power_two_becomes_multiply(dt):
    t = tk.trace(lambda x: np.power(x, 2), _x(dt))
    assert ops_of(t.graph) == ["power"]
    assert ops_of(_run_both(t, _x(dt))) == ["multiply"]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_power_three_becomes_two_multiplies(dt):
    t = tk.trace(lambda x: np.power(x, 3), _x(dt))
    g = _run_both(t, random_values(rng, (64,), dt, specials=False), exact=False)
    assert ops_of(g) == ["multiply", "multiply"]
    assert len({n.out.name for n in g.nodes}) == 2


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_power_half_becomes_sqrt(dt):
    t = tk.trace(lambda x: np.power(x, 0.5), _x(dt))
    g = _run_both(t, _x(dt))
    assert ops_of(g) == ["sqrt"]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_division_by_a_power_of_two_becomes_a_multiplication(dt):
    """``x / 2**k`` is ``x * 2**-k`` bit for bit (subnormal results included); other
    divisors, integer arrays and strong integer scalars (which promote otherwise) stay."""

    def f(x):
        return x / 4.0, x / 2, x / np.float32(0.125), x / -1024.0, x / 3.0, x / np.int64(4)

    x = np.concatenate([_x(dt), np.array([1e-40, -3e-39, 5e-324, np.inf, -0.0]).astype(dt)])
    g = _run_both(tk.trace(f, x), x)
    assert ops_of(g) == ["multiply"] * 4 + ["divide", "divide"]
    assert [n.inputs[1] for n in g.nodes[:4]] == [0.25, 0.5, np.float32(8.0), -1 / 1024]
    assert isinstance(g.nodes[2].inputs[1], np.float32)
    t = tk.trace(lambda x: (x / 4.0, x / 2**-1074), _x(np.int32))
    assert ops_of(_run_both(t, _x(np.int32))) == ["divide", "divide"]


def test_a_rewritten_python_number_stays_a_python_number():
    """``s / 0.5`` of a Python float is ``s * 2.0``, still a Python float (NEP 50: it takes
    the dtype of the array it meets): ``(s / 0.5) * a`` of a float16 ``a`` is float16, on the
    CPU too, where float16 runs as NumPy calls beside a kernel computing ``s * 2.0``."""

    def f(s, a):
        return (s / 0.5) * a

    a = np.array([1.0, -2.5, 3.25], np.float16)
    t = tk.trace(f, 1.5, a)
    (rewritten,) = [n for n in optimize(t).graph.nodes if n.inputs[0] is t.graph.inputs[0]]
    assert rewritten.op == "multiply" and rewritten.out.weak
    with quiet():
        c = tk.compile(t, target="cpu", cache=False, progress=False)
    assert_same(c(0.75, a), f(0.75, a))


def test_power_one_is_identity_and_complex_powers_stay():
    t = tk.trace(lambda x: np.power(x, 1) + 0, _x(np.int64))
    g = _run_both(t, _x(np.int64))
    assert ops_of(g) == [] and g.outputs[0] is g.inputs[0]
    for p in (2, 3, 0.5):
        t = tk.trace(lambda x, p=p: np.power(x, p), _x(np.complex128))
        assert ops_of(_run_both(t, _x(np.complex128))) == ["power"]
    t = tk.trace(lambda x: np.power(x, np.float64(2.0)), _x(np.float32))  # promotes: kept
    assert ops_of(_run_both(t, _x(np.float32))) == ["power"]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_multiply_by_one(dt):
    t = tk.trace(lambda x: (x * 1) * 2, _x(dt))
    g = _run_both(t, _x(dt))
    if dt == np.bool_ or dt.kind == "c":
        # bool * 1 is an int64; complex (inf+1j) * 1 has a nan real part
        assert ops_of(g) == ["multiply", "multiply"]
    else:
        assert ops_of(g) == ["multiply"]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_add_zero(dt):
    t = tk.trace(lambda x: (x + 0) * 2, _x(dt))
    g = _run_both(t, _x(dt))
    if dt.kind in "iu":
        assert ops_of(g) == ["multiply"]
    else:  # bool promotes; float: -0.0 + 0 is +0.0, so x + 0 is not x
        assert ops_of(g) == ["add", "multiply"]


@pytest.mark.parametrize("dt", [np.dtype(d) for d in ("f4", "f8", "c8", "c16")], ids=str)
def test_add_and_subtract_signed_zeros(dt):
    t = tk.trace(lambda x: (x + -0.0) * 2, _x(dt))
    g = _run_both(t, _x(dt))
    assert ("add" in ops_of(g)) == (dt.kind == "c")
    t = tk.trace(lambda x: (x - 0.0) * 2, _x(dt))
    g = _run_both(t, _x(dt))
    assert "subtract" not in ops_of(g)
    t = tk.trace(lambda x: (x - -0.0) * 2, _x(dt))
    g = _run_both(t, _x(dt))
    assert "subtract" in ops_of(g)


def test_add_minus_zero_is_identity_for_floats():
    t = tk.trace(lambda x: (x + -0.0) * 2, _x(np.float64))
    assert ops_of(_run_both(t, _x(np.float64))) == ["multiply"]
    t = tk.trace(lambda x: (x - 0.0) * 2, _x(np.float32))
    assert ops_of(_run_both(t, _x(np.float32))) == ["multiply"]


@pytest.mark.parametrize("dt", [np.int8, np.float32, np.complex128], ids=str)
def test_double_negation(dt):
    t = tk.trace(lambda x: np.negative(-x) * 2, _x(dt))
    assert ops_of(_run_both(t, _x(dt))) == ["multiply"]


def test_transpose_of_transpose():
    x = rng.random((2, 3, 4))
    t = tk.trace(lambda x: x.T.T + 1, x)
    assert ops_of(t.graph) == ["transpose", "transpose", "add"]
    assert ops_of(_run_both(t, x)) == ["add"]
    t = tk.trace(lambda x: np.transpose(np.transpose(x, (1, 0, 2)), (2, 0, 1)) + 1, x)
    g = _run_both(t, x)
    assert ops_of(g) == ["transpose", "add"]
    assert g.nodes[0].attrs["axes"] == (2, 1, 0)


def test_reshape_chains():
    x = rng.random((2, 3, 4))
    t = tk.trace(lambda x: x.reshape(6, 4).reshape(4, 6).reshape(24) + 1, x)
    g = _run_both(t, x)
    assert ops_of(g) == ["reshape", "add"]
    t = tk.trace(lambda x: x.reshape(6, 4).reshape(2, 3, 4) + 1, x)
    assert ops_of(_run_both(t, x)) == ["add"]


def test_astype_to_the_same_dtype():
    x = Var("x", (3,), np.float32)
    a, b = Var("0", (3,), np.float32), Var("1", (3,), np.float32)
    g = Graph(
        [x],
        [Node("astype", (x,), {"dtype": np.dtype(np.float32)}, (a,)), Node("exp", (a,), {}, (b,))],
        [b],
    ).check()
    g2 = dce(simplify(g)).check()
    assert ops_of(g2) == ["exp"] and g2.nodes[0].inputs[0] is x
    assert_same(run(g2, [np.ones(3, np.float32)])[0], run(g, [np.ones(3, np.float32)])[0])


def test_simplify_keeps_weak_and_strong_scalars_apart():
    def f(x, s):
        return x * (s * np.float64(1.0))  # strong: x (float32) * float64 -> float64

    t = tk.trace(f, np.ones(3, np.float32), 2.0)
    assert t.graph.outputs[0].dtype == np.float64
    g = _run_both(t, np.ones(3, np.float32), 3.0)
    assert g.outputs[0].dtype == np.float64


# ---------------------------------------------------------------------- optimize and history
def test_optimize_records_history_and_matches():
    def f(x):
        y = np.power(x, 2) + np.power(x, 2)
        return np.negative(-y) * 1 + np.arange(3.0).sum()

    x = rng.random(3)
    t = tk.trace(f, x)
    o = tk.optimize(t)
    assert [h.name for h in o.history] == [name for name, _ in PIPELINE]
    assert all(isinstance(h, PassRecord) for h in o.history)
    assert o.history[0].before is t.graph and o.history[-1].after is o.graph
    for a, b in zip(o.history, o.history[1:]):
        assert a.after is b.before
    assert any(h.changed for h in o.history)
    assert len(o.graph.nodes) < len(t.graph.nodes)
    assert ops_of(o.graph) == ["multiply", "add", "add"]
    assert_same(o(x), t(x))
    assert o.graph is not t.graph and ops_of(t.graph)[0] == "power"  # the original is untouched
    o2 = optimize(t, passes=["dce"])
    assert [h.name for h in o2.history] == ["dce"] and not o2.history[0].changed
    again = tk.optimize(o)
    assert [h.name for h in again.history] == [name for name, _ in PIPELINE] * 2


def test_optimize_keeps_calling_convention():
    class M:
        def __init__(self):
            self.w = np.ones(3)

        def f(self, x, n):
            x *= 2
            return {"y": np.power(x * self.w, 2), "n": n}

    m = M()
    t = tk.trace(m.f, np.ones(3), 4)
    o = tk.optimize(t)
    a, b = rng.random(3), None
    b = a.copy()
    m.w[:] = 3.0
    r1, r2 = t(a, 4), o(b, 4)
    assert_same(r2, r1)
    assert_same(b, a)


# ---------------------------------------------------------------------- every op-test program
_EXACT_EXCEPTIONS = {"power"}  # x**3 -> x*x*x is within an ulp, not bitwise


@pytest.mark.parametrize("op", sorted(OP_GROUPS))
def test_optimized_equals_unoptimized_on_every_case(op):
    failures = []
    for c in OP_GROUPS[op]:
        for dt in [d for d in (np.float32, np.int16, np.complex128, np.bool_) if d in c.dtypes]:
            make = args_factory(c, np.dtype(dt), "c")
            try:
                with quiet():
                    t = tk.trace(c.program(np.dtype(dt)), *make(0))
            except Exception:
                continue
            new = make(1)
            o = tk.optimize(t)
            with quiet():
                try:
                    ref = t(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in new])
                except Exception:
                    continue
                got = o(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in new])
            if not c.values:
                continue
            try:
                assert_same(got, ref)
            except AssertionError as e:
                if op not in _EXACT_EXCEPTIONS:
                    failures.append(f"{c.name} [{dt.__name__}]: {e}")
    assert not failures, "\n\n".join(failures)


def test_simplify_drops_the_self_write_left_by_augmented_slice_assignment():
    def f(U, v):
        U2 = U * 1.5
        U2[1:-1, 1:3] += v  # __iadd__ writes the view, then __setitem__ writes it again
        return U2

    U, v = np.arange(20.0).reshape(4, 5), np.ones((2, 2))
    t = tk.trace(f, U, v)
    o = tk.optimize(t)
    assert [n.op for n in t.graph.nodes].count("index_update") == 2
    assert [n.op for n in o.graph.nodes].count("index_update") == 1
    np.testing.assert_array_equal(o(U, v), f(U, v))


def _repeat(x):
    return np.broadcast_to(x[:, None], (x.shape[0], 3)).reshape(-1)


SINKS = [  # (function, args, ops after sink_reshapes)
    (
        lambda x: _repeat(x) * 2.0 + 1.0,  # a chain: each op sinks below the last reshape
        (rng.standard_normal(5),),
        ["index", "broadcast_to", "multiply", "add", "reshape"],
    ),
    (
        lambda x: np.exp(x.T.reshape(-1)),  # a transpose flattened
        (rng.standard_normal((3, 4)).astype(np.float32),),
        ["transpose", "exp", "reshape"],
    ),
    (
        lambda x, y: _repeat(x) - _repeat(y) * np.float32(0.5),  # two reshapes of one shape
        (rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)),
        ["index", "broadcast_to", "index", "broadcast_to", "multiply", "subtract", "reshape"],
    ),
    (
        lambda x: x[:, :4].reshape(-1) + 1.0,  # a slice of rows flattened
        (rng.standard_normal((3, 8)),),
        ["index", "add", "reshape"],
    ),
    (
        lambda x, s: _repeat(x) * s,  # a 0-d operand
        (rng.standard_normal(4), np.array(1.5)),
        ["index", "broadcast_to", "multiply", "reshape"],
    ),
]

STAYS = [  # reshapes that are NumPy views, and ops that read more than reshapes
    lambda x: x.reshape(-1) * 2.0,  # of a C-contiguous value: a view
    lambda x: np.broadcast_to(x[None], (1, x.size)).reshape(-1) * 2.0,  # no dim repeated
    lambda x: x[1:].reshape(-1) * 2.0,  # a contiguous slice
    lambda x: x[::2].reshape(-1, 1) * 2.0,  # a strided slice NumPy reshapes as a view
    lambda x: _repeat(x) * np.arange(x.size * 3.0),  # another array of the reshape's shape
]


@pytest.mark.parametrize("case", range(len(SINKS)))
def test_reshapes_that_copy_sink_below_elementwise_ops(case):
    """An elementwise op reading only reshapes that NumPy copies (and numbers, 0-d values) is
    computed over their input and reshaped after, bit for bit NumPy's, compiled too: the
    result is one kernel's (fast math: within its bound), whose reshape is a view."""
    from tracekit.passes import sink_reshapes

    fn, args, ops = SINKS[case]
    t = tk.trace(fn, *args)
    g = equal_results(t, [sink_reshapes], *args)
    assert ops_of(g) == ops
    with quiet():
        c = tk.compile(t, cache=False, progress=False)
        first = c(*args)
        np.testing.assert_allclose(first, fn(*args), rtol=1e-6)
        np.testing.assert_allclose(c(*args), fn(*args), rtol=1e-6)
    assert not np.shares_memory(first, c(*args))
    assert [s.kind for s in c.plan.steps].count("kernel") == 1


@pytest.mark.parametrize("case", range(len(STAYS)))
def test_reshapes_that_are_views_or_read_beside_other_arrays_stay(case):
    from tracekit.passes import sink_reshapes

    x = rng.standard_normal(6)
    t = tk.trace(STAYS[case], x)
    assert ops_of(equal_results(t, [sink_reshapes], x)) == ops_of(t.graph)
