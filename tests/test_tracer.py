"""Tracer behaviour: writes and views, inputs written back, captured arrays, guards and warnings,
errors, pytrees, scopes and source lines."""

from __future__ import annotations

import inspect
import os
import re
import warnings

import numpy as np
import pytest
from helpers.compare import assert_same
from helpers.run import check_trace
from helpers.values import random_values

import tracekit as tk
from tracekit.loops import unroll
from tracekit.tracer import context

rng = np.random.default_rng(0)
HERE = os.path.basename(__file__)


def randn(*shape, dtype=np.float64):
    return random_values(rng, shape, dtype, specials=False)


def same_as_numpy(fn, *shapes_or_arrays, dtype=np.float64):
    """Trace on one set of inputs, run on another, compare with NumPy (args included)."""

    def make(seed):
        r = np.random.default_rng(seed + 100)
        return tuple(
            random_values(r, s, dtype, specials=False) if isinstance(s, tuple) else s
            for s in shapes_or_arrays
        )

    t = check_trace(fn, make)
    assert t is not None, "NumPy raised on the example"
    return t


def line_of(marker: str) -> int:
    """The line of this file that carries the comment ``# <marker>``."""
    src = open(__file__).read().splitlines()
    hits = [i + 1 for i, text in enumerate(src) if text.rstrip().endswith(f"# {marker}")]
    assert len(hits) == 1, (marker, hits)
    return hits[0]


# ---------------------------------------------------------------------- in-place ops and setitem
def test_inplace_operators():
    def f(x):
        y = x * 1.0
        y += 1
        y *= x
        y -= 0.5
        y /= 3.0
        y **= 2
        return y

    t = same_as_numpy(f, (3, 4))
    assert [n.op for n in t.graph.nodes].count("add") == 1


def test_inplace_integer_ops():
    def f(x):
        y = x.copy()
        y //= 3
        y %= 5
        y <<= 1
        y >>= 1
        y &= 7
        y |= 8
        y ^= 3
        return y

    same_as_numpy(f, (3, 4), dtype=np.int32)


def test_inplace_casting_error_is_numpys():
    def f(x):
        y = x.copy()
        y += 1.5
        return y

    with pytest.raises(np._core._exceptions._UFuncOutputCastingError):
        f(np.ones(3, np.int32))
    with pytest.raises(np._core._exceptions._UFuncOutputCastingError):
        tk.trace(f, np.ones(3, np.int32))


def test_inplace_on_python_scalar_rebinds():
    def f(x, s):
        s += 1.0
        s *= 2.0
        return x * s

    t = same_as_numpy(f, (3,), 2.5)
    assert t.graph.inputs[1].weak


def test_setitem_forms():
    def f(x, row, m):
        y = np.zeros_like(x)
        y[1:3] = 1.0
        y[0] = row
        y[m] = -1.0
        y[:, 0] = x[:, 1]
        y[..., -1] = 7
        y[::2, 1:3] += x[::2, :2]
        return y

    same_as_numpy(f, (4, 4), (4,), rng.random((4, 4)) < 0.5)


def test_setitem_row_loop():
    def f(x, w):
        out = np.empty((x.shape[0], w.shape[1]))
        for i in range(x.shape[0]):
            out[i, :] = np.tanh(x[i] @ w)
        return out

    t = same_as_numpy(f, (3, 4), (4, 2))
    # one functionalised row write per iteration; the iterations roll into one loop
    assert sum(n.op == "index_update" for n in unroll(t.graph).nodes) == 3
    assert [n.op for n in t.graph.nodes if n.op == "loop"] == ["loop"]


def test_setitem_mask_with_traced_scalar_is_a_where():
    def f(x, v):
        y = x.copy()
        y[x > 0] = v
        return y

    t = same_as_numpy(f, (5,), (), dtype=np.float32)
    assert "where" in [n.op for n in t.graph.nodes]


def test_fill_and_out_arguments():
    def f(x):
        y = np.empty_like(x)
        y.fill(2.0)
        np.add(x, y, out=y)
        z = np.zeros(x.shape[1])
        np.sum(x, axis=0, out=z)
        np.multiply(z, 2, out=z)
        return y, z

    same_as_numpy(f, (3, 4))


# ---------------------------------------------------------------------- views
def test_write_through_interior_view_updates_base():
    def f(U):
        U = U.copy()
        u = U[1:-1, 1:-1]
        u += 1
        u[0, 0] = -5.0
        return U

    same_as_numpy(f, (5, 6))


def test_write_through_transposed_and_reshaped_views():
    def f(x):
        a = np.zeros((3, 4))
        a.T[1] = x[:3]  # column 1 of a
        r = a.reshape(-1)
        r[::5] = 9.0
        a.reshape(2, 6)[1, :2] += 1.0
        v = np.swapaxes(a[None], 0, 2)
        v[0] -= 3.0
        return a

    same_as_numpy(f, (5,))


def test_write_through_real_and_imag_views():
    def f(z, v):
        y = z.copy()
        y.real[1:] = v
        y.imag[0] *= -1
        y.real += 2
        return y

    same_as_numpy(f, (3, 2), (2,), dtype=np.complex128)


def test_views_see_later_writes_and_writes_see_views():
    def f(x):
        y = x.copy()
        head = y[:2]
        tail = y[::-1][:2]
        before = head * 1
        y[...] = 0.5
        y[1] = x[0]
        return before, head * 1, tail + 0, y

    same_as_numpy(f, (4, 3))


def test_view_of_view_chain():
    def f(x):
        y = x.copy()
        v = y[1:][:, ::2].T[::-1]
        v += 10
        return y, v

    same_as_numpy(f, (4, 5))


def test_copy_is_not_a_view():
    def f(x):
        y = x.copy()
        c = y[1:].copy()
        c += 1
        r = y.ravel()  # a view of a contiguous array
        r[0] = 42.0
        f = y.T.flatten()  # always a copy
        f[1] = -42.0
        return y, c, f

    same_as_numpy(f, (3, 4))


def test_reshape_of_noncontiguous_copies():
    def f(x):
        y = x.copy()
        r = y.T.reshape(-1)  # not a view: a copy
        r[:] = 0
        return y, r

    same_as_numpy(f, (3, 4))


def test_broadcast_view_is_read_only():
    def f(x):
        b = np.broadcast_to(x, (2, 3))
        b[0, 0] = 1.0
        return b

    with pytest.raises(ValueError):
        f(np.ones(3))
    with pytest.raises(ValueError):
        tk.trace(f, np.ones(3))


def test_asarray_aliases_and_array_copies():
    def f(x):
        y = x * 1
        a = np.asarray(y)
        a[0] = 5.0
        b = np.array(y)
        b[1] = 7.0
        c = np.array([y[0], y[1] * 2])
        return y, b, c

    same_as_numpy(f, (3,))


# ---------------------------------------------------------------------- writes into inputs
def test_writes_into_inputs_are_written_back_and_examples_untouched():
    def f(x, y):
        x += 1.0
        x[0] = y.sum()
        y[:, 1] *= 2
        return x * y[0]

    x, y = randn(3), randn(2, 3)
    x0, y0 = x.copy(), y.copy()
    t = tk.trace(f, x, y)
    assert_same(x, x0)
    assert_same(y, y0)
    assert len(t.graph.writebacks) == 2
    assert "write %" in str(t.graph)
    a, b = randn(3), randn(2, 3)
    a2, b2 = a.copy(), b.copy()
    assert_same(t(a, b), f(a2, b2))
    assert_same(a, a2)
    assert_same(b, b2)


@pytest.mark.parametrize("target", ["interpreter", "cpu", "cuda"])
def test_an_input_copied_into_another_before_it_is_written_keeps_its_old_value(target):
    """``tmp[:] = x`` then ``x **= ...``: tmp is written back with x's value from before the
    write (all write-backs read their values before any is written; fuzz seed 9000295)."""

    def f(x, tmp):
        tmp[:] = x
        x **= np.isinf(x)
        return x

    x, tmp = np.array([1.0, 1.5, 2.0, 3.0]), np.zeros(8)[::-2]
    t = tk.trace(f, x.copy(), tmp.copy())
    run = t if target == "interpreter" else tk.compile(t, target=target, progress=False)
    want_x, want_tmp, got_x, got_tmp = x.copy(), tmp.copy(), x.copy(), tmp.copy()
    assert_same(run(got_x, got_tmp), f(want_x, want_tmp))
    assert_same(got_tmp, want_tmp)
    assert_same(got_x, want_x)


def test_write_through_view_of_input_and_read_only_target():
    def f(x):
        x[1:, ::2] = 0.0
        return x.sum()

    t = tk.trace(f, randn(3, 4))
    a = randn(3, 4)
    a2 = a.copy()
    assert_same(t(a), f(a2))
    assert_same(a, a2)
    ro = randn(3, 4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writes into"):
        t(ro)


def test_function_that_only_mutates():
    def f(x):
        x *= 2

    t = tk.trace(f, randn(3))
    a = randn(3)
    expected = a * 2
    assert t(a) is None
    assert_same(a, expected)


def test_returning_an_input():
    t = tk.trace(lambda x, y: (x, y + 1), randn(2), randn(2))
    a = randn(2)
    out = t(a, a)
    assert_same(out[0], a)


# ---------------------------------------------------------------------- captured arrays
SCALE = np.array([1.0, 2.0, 3.0])


def _uses_global(x):
    return x * SCALE


class Linear:
    def __init__(self, n_in, n_out):
        self.w = randn(n_in, n_out)
        self.b = randn(n_out)

    def forward(self, x):
        return np.tanh(x @ self.w + self.b)

    def __call__(self, x):
        return self.forward(x)


class MLP:
    def __init__(self):
        self.layers = [Linear(4, 8), Linear(8, 8), Linear(8, 2)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_captured_global_read_at_call_time():
    global SCALE
    saved = SCALE
    try:
        t = tk.trace(_uses_global, np.ones(3))
        assert [s.label for s in t.graph.specs if s.kind == "capture"] == ["global:SCALE"]
        SCALE *= 2  # in place
        assert_same(t(np.ones(3)), np.ones(3) * SCALE)
        SCALE = np.array([5.0, 6.0, 7.0])  # rebound
        assert_same(t(np.ones(3)), np.array([5.0, 6.0, 7.0]))
    finally:
        SCALE = saved


def test_captured_closure_read_at_call_time():
    scale = np.array([1.0, 2.0])

    def f(x):
        return x * scale

    t = tk.trace(f, np.ones(2))
    assert "closure:scale" in str(t.graph)
    scale[:] = 3.0
    assert_same(t(np.ones(2)), np.array([3.0, 3.0]))
    scale = np.array([4.0, 5.0])  # noqa: F841  (rebinding the cell)
    assert_same(t(np.ones(2)), np.array([4.0, 5.0]))


def _make_helper():
    table = np.array([1.0, 10.0])

    def helper(x):
        return x * table

    return helper, table


HELPER, HELPER_TABLE = _make_helper()


def test_closure_of_a_called_helper_is_captured():
    def f(x):
        return HELPER(x) + 1

    t = tk.trace(f, np.ones(2))
    assert not t.graph.constants, str(t.graph)
    HELPER_TABLE[1] = 100.0
    try:
        assert_same(t(np.ones(2)), f(np.ones(2)))
    finally:
        HELPER_TABLE[1] = 10.0


def test_captured_self_attributes_and_nested_layers():
    m = MLP()
    x = randn(5, 4)
    t = tk.trace(m, x)
    labels = {s.label for s in t.graph.specs if s.kind == "capture"}
    assert "self.layers[0].w" in labels and "self.layers[2].b" in labels, labels
    assert len(labels) == 6
    assert not t.graph.constants
    m.layers[1].w -= 0.1  # in place
    assert_same(t(x), m(x))
    m.layers[2].b = randn(2)  # rebound
    assert_same(t(x), m(x))
    m.layers[0] = Linear(4, 8)  # a new layer object
    assert_same(t(x), m(x))


def test_bound_method_captures_self():
    lin = Linear(3, 2)
    t = tk.trace(lin.forward, randn(4, 3))
    assert {s.label for s in t.graph.specs if s.kind == "capture"} == {"self.w", "self.b"}
    lin.w = randn(3, 2)
    x = randn(4, 3)
    assert_same(t(x), lin.forward(x))


def test_captured_shape_change_is_an_error():
    lin = Linear(3, 2)
    t = tk.trace(lin.forward, randn(4, 3))
    lin.w = randn(3, 5)
    with pytest.raises(ValueError, match=r"self\.w.*\(3, 2\).*\(3, 5\)"):
        t(randn(4, 3))


def test_write_into_captured_array_is_written_back_on_call_only():
    class Opt:
        def __init__(self):
            self.w = np.ones(3)

        def step(self, g):
            self.w -= 0.5 * g
            return self.w.sum()

    o = Opt()
    w0 = o.w
    t = tk.trace(o.step, np.ones(3))
    assert o.w is w0  # tracing left the user's object alone
    assert_same(o.w, np.ones(3))
    out = t(np.ones(3))
    assert_same(o.w, np.full(3, 0.5))
    assert_same(out, np.float64(1.5))


def test_rebinding_a_captured_array_becomes_a_write():
    class Model:
        def __init__(self):
            self.w = np.ones(3)
            self.stats = {"n": np.zeros(())}

        def step(self, g):
            self.w = self.w - 0.5 * g
            self.stats["n"] = self.stats["n"] + 1
            return (self.w * 2).sum()

    m = Model()
    w0 = m.w
    t = tk.trace(m.step, np.ones(3))
    assert m.w is w0 and m.stats["n"] == 0
    ref = Model()
    for _ in range(2):
        assert_same(t(np.ones(3)), ref.step(np.ones(3)))
    assert_same(m.w, ref.w)
    assert_same(m.stats["n"], ref.stats["n"])

    class Bad:
        def __init__(self):
            self.w = np.ones(3)

        def step(self, g):
            self.w = np.concatenate([self.w, g])
            return self.w

    b = Bad()
    with pytest.raises(tk.TraceError, match=r"self\.w"):
        tk.trace(b.step, np.ones(3))
    assert isinstance(b.w, np.ndarray) and b.w.shape == (3,)


def test_distinct_constants_get_distinct_names():
    def f(x):
        return x * np.array([1.0, 2.0, 3.0]) + np.array([4.0, 5.0, 6.0])

    t = tk.trace(f, np.ones(3))
    names = [v.name for v in t.graph.inputs]
    assert len(set(names)) == len(names), names
    assert_same(t(np.ones(3)), f(np.ones(3)))
    g = tk.Graph.from_json(t.graph.to_json())
    assert g.key() == t.graph.key()


def test_argument_and_capture_names_do_not_collide():
    class M:
        def __init__(self):
            self.w = np.ones(2)

        def f(self, self_w):
            return self_w * self.w

    t = tk.trace(M().f, randn(2))
    names = [v.name for v in t.graph.inputs]
    assert len(set(names)) == len(names), names
    ns = {}
    exec(t.code, {"np": np}, ns)


# ---------------------------------------------------------------------- baked values and guards
def _branchy(x):
    if x.sum() > 0:  # L:branch
        return x * 2
    return x - 1


def _bake_float(x):
    return x * float(x[0])  # L:float


def _bake_int(x):
    return x[: int(x[1] > 0) + 1]  # L:int


def _bake_item(x):
    return x * x[0].item()  # L:item


def _bake_tolist(x):
    return x[0] * len(x[:2].tolist())  # L:tolist


def _bake_max(x):
    return max(x[0], x[1]) * x  # L:max


def _bake_range(x):
    return sum(x[i] for i in range(x.astype(int)[2] % 3 + 1))  # L:range


@pytest.mark.parametrize(
    "fn,how",
    [
        (_branchy, "bool"),
        (_bake_float, "float"),
        (_bake_int, "int"),
        (_bake_item, "item"),
        (_bake_tolist, "tolist"),
        (_bake_max, "bool"),
        (_bake_range, "index"),
    ],
    ids=["if", "float", "int", "item", "tolist", "max", "range"],
)
def test_baked_values_warn_with_the_users_line(fn, how):
    marker = {"_branchy": "L:branch"}.get(fn.__name__, "L:" + fn.__name__[len("_bake_") :])
    line = line_of(marker)
    x = np.array([1.5, -2.0, 4.0])
    with pytest.warns(tk.TracerWarning) as rec:
        t = tk.trace(fn, x)
    w = [r for r in rec if issubclass(r.category, tk.TracerWarning)][0]
    assert os.path.basename(w.filename) == HERE
    assert w.lineno == line
    assert f"{HERE}:{line}" in str(w.message)
    assert any(g.how == how for g in t.graph.guards), t.graph.guards
    assert all(g.source is not None and g.source.line == line for g in t.graph.guards)
    with pytest.raises(tk.TraceError, match=f"{HERE}:{line}"):
        tk.trace(fn, x, strict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(t(x.copy()), fn(x))


def test_guard_failure_on_call():
    with pytest.warns(tk.TracerWarning):
        t = tk.trace(_branchy, np.ones(3))
    assert len(t.graph.guards) == 1
    g = t.graph.guards[0]
    assert g.value is True and g.how == "bool"
    assert "guard bool(" in str(t.graph)
    assert_same(t(np.full(3, 2.0)), np.full(3, 4.0))
    with pytest.raises(tk.GuardError, match=f"{HERE}:{line_of('L:branch')}"):
        t(-np.ones(3))


@pytest.mark.parametrize(
    "read, at",
    [
        (lambda x: x.item(1), (0, 1)),  # a flat index
        (lambda x: x.item(-2), (2, 0)),
        (lambda x: x.item((1, 0)), (1, 0)),
        (lambda x: x.item(1, 0), (1, 0)),
    ],
)
@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_item_of_one_element_guards_that_element(read, at, target):
    """``x.item(k)`` bakes in one element: a call where that element differs fails the guard
    (it was checked as ``x.item()`` of the whole array, which cannot be read, and skipped)."""

    def f(x):
        return x * read(x)

    x = np.arange(6.0).reshape(3, 2)
    with pytest.warns(tk.TracerWarning):
        t = tk.trace(f, x)
    run = t if target == "interpreter" else tk.compile(t, target="cpu", progress=False)
    other = x.copy()
    other[tuple(1 - i for i in at)] = 7.0  # not the element read: the traced result holds
    assert_same(run(other), f(other))
    changed = x.copy()
    changed[at] = 9.0
    with pytest.raises(tk.GuardError, match="item"):
        run(changed)


def _power_after_a_branch(x):
    r = np.positive(x) if x > 1.3 else np.square(x)  # L:power-branch
    return x ** r.reshape(1)  # an int to a negative power raises where the branch differs


@pytest.mark.parametrize("target", ["interpreter", "cpu", "cuda"])
def test_a_node_failing_on_the_other_branch_reports_the_guard(target):
    """Inputs that take the other branch make ``x ** r`` fail (an int to a negative power)
    where the guard is checked after it: the call raises the guard's error, not NumPy's (fuzz seed
    14100021), and tk.jit traces again and gives NumPy's answer."""
    with pytest.warns(tk.TracerWarning):
        t = tk.trace(_power_after_a_branch, np.array(2))
    run = t if target == "interpreter" else tk.compile(t, target=target, progress=False)
    assert_same(run(np.array(3)), _power_after_a_branch(np.array(3)))
    with pytest.raises(tk.GuardError, match=f"{HERE}:{line_of('L:power-branch')}") as failed:
        run(np.array(-1))
    if target == "interpreter":  # the guard is checked as soon as its value is: x ** r never runs
        assert failed.value.__cause__ is None
    elif target == "cpu":  # NumPy's error, as the cause (a device kernel raises nothing)
        assert isinstance(failed.value.__cause__, ValueError)
    with pytest.warns(tk.TracerWarning):
        jitted = tk.jit(_power_after_a_branch)
        assert_same(jitted(np.array(2)), _power_after_a_branch(np.array(2)))
        assert_same(jitted(np.array(-1)), _power_after_a_branch(np.array(-1)))


@pytest.mark.parametrize(
    "expr",
    [
        lambda x: (x == 2.0) ** (x == 2.0) * 100 + (x == 2.0) * 100,  # int8 wrapped to -56
        lambda x: (x == 2.0) + (x == 2.0),  # 2, not True
        lambda x: (x > 0) - (x > 1),  # NumPy refuses bool subtraction
        lambda x: -(x > 0),
        lambda x: ~(x > 0),  # the int -2
        lambda x: abs(x > 0) * 300,
        lambda x: (x > 0) % 3 + (x > 1) // 2,
        lambda x: (x > 0) / 2,
        lambda x: (x > 0) & (x < 5),  # bool & bool stays a bool
        lambda x: (x > 0) << 7,
        lambda x: ((x > 0) + 1) * x,
        lambda x: 2.0 ** -(x > 0),
        lambda x: (x > 0).imag + (x > 0).real * 300 + (x > 1).conjugate(),  # True.real: 1
    ],
)
@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_python_scalars_compute_as_python_does(expr, target):
    """Arithmetic on Python scalars (a Python float argument, the bools and ints Python
    computes from it) has Python's types, as the function has: an int times a float32 array is
    float32, an int16 array times it int16; ``True ** True`` is the int 1, not int8's."""

    def f(x, a32, a16):
        y = expr(x)
        return a32 * y, a16 * y, np.asarray(y) + np.zeros(1, np.float64)

    a32, a16 = np.ones(2, np.float32), np.ones(2, np.int16)
    t = tk.trace(f, 2.0, a32, a16)
    run = t if target == "interpreter" else tk.compile(t, target="cpu", progress=False)
    for x in (2.0, 0.5, -1.5):
        for got, want in zip(run(x, a32, a16), f(x, a32, a16), strict=True):
            assert_same(got, want)


_A8 = np.arange(4, dtype=np.int8)

# (function, its Python float argument when traced, one on which Python decides otherwise);
# each function's second line is the one Python decides on
_PYTHONS_RULES = [
    ("nonzero", lambda x: 1.0 / x, 2.0, 0.0),  # Python raises ZeroDivisionError
    ("nonzero", lambda x: (x > 1.0) // (x > 3.0), 5.0, 2.0),
    ("nonzero", lambda x: x**-1.0, 2.0, 0.0),  # 0.0 to a negative power raises
    ("pow_type", lambda x: (x > 1.0) ** ((x > 1.0) - 2 * (x > 3.0)), 2.0, 5.0),  # a float
    ("pow_type", lambda x: x**0.5, 4.0, -4.0),  # complex (the graph: nan)
    ("pow_type", lambda x: (x - 1.0) ** x, 3.0, 0.5),
    ("int64", lambda x: ((x > 1.0) + 1) ** 70, 0.5, 2.0),  # 2**70, the graph's int64: 0
    ("shift", lambda x: 1 << ((x > 1.0) - (x > 3.0) * 2), 2.0, 5.0),  # negative shift count
    ("bounds", lambda x: _A8 * ((x > 1.0) * 300), 0.5, 2.0),  # NumPy: OverflowError
    ("bounds", lambda x: _A8.astype(np.uint8) + ((x > 1.0) * -1), 0.5, 2.0),
]


@pytest.mark.parametrize("rule, fn, traced, other", _PYTHONS_RULES)
@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_what_python_decides_by_the_values_is_guarded(rule, fn, traced, other, target):
    """Python decides by the values whether ``1.0 / x`` raises, whether ``k ** n`` is an int
    or a float, whether an int fits: the trace follows the traced values' way, and a call
    whose values go another way raises GuardError naming the line (no inf, nan or wrapped
    int, no NumPy warning before it); tk.jit traces again and does as Python does."""
    t = tk.trace(fn, traced)
    assert [gd.how for gd in t.graph.guards].count(rule) >= 1
    run = t if target == "interpreter" else tk.compile(t, target="cpu", progress=False)
    assert_same(run(traced), fn(traced))
    line = inspect.getsourcelines(fn)[1]
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(tk.GuardError, match=f"{HERE}:{line}"):
            run(other)
    assert [str(w.message) for w in said] == []  # the guard first: no NumPy warning before it
    try:
        want = fn(other)
    except (ZeroDivisionError, OverflowError, ValueError) as error:
        with pytest.raises(type(error)):
            tk.jit(fn)(other)
    else:
        if rule == "int64":  # Python's big int is not an int64: tracing says so
            with pytest.raises(tk.TraceError, match="does not fit int64"):
                tk.jit(fn)(other)
        else:
            assert_same(tk.jit(fn)(other), want)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, a: a * x**2 + 2.0**x - x / 2.0,  # a literal decides
        lambda x, a: (a * ((x > 0.5) * 300)).astype(np.int16) + ((x > 1) + (x > 2)) ** 3,
    ],
)
def test_python_numbers_that_cannot_change_their_way_have_no_guard(fn):
    """A literal exponent or base, a divisor that is a literal, ints whose size the trace
    knows (bools times literals) fitting the arrays they meet: no guard, nothing checked."""
    t = tk.trace(fn, 1.5, np.ones(3, np.int16))
    assert t.graph.guards == []


_RNG = np.random.default_rng(5)


class _Noisy:
    def __init__(self):
        self.noise = np.random.default_rng(6)

    def __call__(self, x):
        return x - self.noise.standard_normal(x.shape)


@pytest.mark.parametrize(
    "fn, source",
    [
        (lambda x: x + np.random.normal(size=x.shape), "np.random"),
        (lambda x: x * np.random.rand(*x.shape), "np.random"),
        (lambda x: x * _RNG.random(x.shape), "global:_RNG"),
        (_Noisy(), "self.noise"),
    ],
)
def test_random_numbers_drawn_while_tracing_are_said_to_be_baked_in(fn, source):
    """What a generator the function reaches draws is a constant of the graph: every call
    reuses it. The trace says so, in a warning and in its notes."""
    with pytest.warns(tk.TracerWarning, match=f"from {re.escape(source)} while it was traced"):
        t = tk.trace(fn, np.ones(3))
    assert any("every call reuses them" in n for n in t.notes)
    assert_same(t(np.zeros(3)), t(np.zeros(3)))  # the same numbers: what the warning says


_LEGACY = np.random.RandomState(7)


@pytest.mark.parametrize("generator", [np.random.mtrand._rand, _LEGACY], ids=["np.random", "own"])
def test_a_normal_drawn_from_a_legacy_generators_cache_is_said_to_be_baked_in(generator):
    """A legacy generator draws normals in pairs and keeps the second for the next draw, which
    then leaves its Mersenne Twister's words as they were: only its cached normal is gone.
    Traces before and after (with nothing drawn) read the state cheaply; the draw is seen."""
    f = lambda x: x + generator.standard_normal()  # noqa: E731
    for _ in range(2):
        tk.trace(lambda x: x * 2.0, np.ones(3))  # states read, none moved
    generator.standard_normal()  # the first of a pair: its second is cached
    for _ in range(2):
        tk.trace(lambda x: x * 2.0, np.ones(3))
    with pytest.warns(tk.TracerWarning, match="while it was traced"):
        t = tk.trace(f, np.ones(3))
    assert any("every call reuses them" in n for n in t.notes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tk.trace(lambda x: x * 2.0, np.ones(3))  # and no draw is seen where there was none


@pytest.mark.parametrize(
    "make",
    [np.random.default_rng, np.random.RandomState, lambda: np.random.Generator(np.random.PCG64())],
)
def test_an_unseeded_generator_made_inside_the_function_is_said_to_be_baked_in(make):
    """A generator seeded from fresh entropy while tracing gives numbers that a NumPy call
    would draw anew every time: the trace names it, with the user's line."""

    def f(x):
        rng = make()  # the line the warning names
        return x * rng.random(x.shape)

    own = getattr(make, "__name__", "") == "<lambda>"  # its line is the innermost user line
    line = make.__code__.co_firstlineno if own else f.__code__.co_firstlineno + 1
    said = f"seeded from fresh entropy at test_tracer.py:{line}"
    with pytest.warns(tk.TracerWarning, match=said):
        t = tk.trace(f, np.ones(3))
    assert any("every call reuses them" in n for n in t.notes)


def test_a_seeded_generator_made_inside_the_function_is_not_a_baked_in_draw():
    def f(x):
        return x * np.random.default_rng(0).random(x.shape)  # the same numbers every call

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = tk.trace(f, np.ones(3))
    assert t.notes == []
    assert_same(t(np.ones(3)), f(np.ones(3)))


def test_guard_survives_optimize_and_json():
    with pytest.warns(tk.TracerWarning):
        t = tk.trace(_branchy, np.ones(3))
    o = tk.optimize(t)
    assert len(o.graph.guards) == 1
    with pytest.raises(tk.GuardError):
        o(-np.ones(3))
    g = tk.Graph.from_json(t.graph.to_json())
    assert g.guards[0].value is True and g.guards[0].source == t.graph.guards[0].source


def test_static_shape_attributes_do_not_warn():
    def f(x):
        n = x.shape[0]
        if x.ndim == 2 and x.size > 3 and len(x) == n and x.dtype == np.float64:
            return x.T @ x / n
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("error", tk.TracerWarning)
        t = tk.trace(f, randn(4, 2))
    assert not t.graph.guards


# ---------------------------------------------------------------------- data-dependent shapes
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: np.nonzero(x > 0),
        lambda x: np.where(x > 0),
        lambda x: x[x > 0],
        lambda x: np.argwhere(x),
        lambda x: np.unique(x),
        lambda x: (x > 0).nonzero(),
        lambda x: np.flatnonzero(x),
        lambda x: np.extract(x > 0, x),
    ],
    ids=["nonzero", "where1", "mask", "argwhere", "unique", "method-nonzero", "flatnonzero", "ext"],
)
def test_data_dependent_shapes_raise(fn):
    with pytest.raises(tk.TraceError, match=r"np\.where\(") as e:
        tk.trace(fn, randn(5))
    assert HERE in str(e.value)


@pytest.mark.parametrize(
    "fn,name",
    [
        (lambda x: np.nonzero(x > 0), "np.nonzero"),
        (lambda x: (x > 0).nonzero(), "np.nonzero"),
        (lambda x: np.where(x > 0), "np.where(condition) with one argument"),
        (lambda x: np.argwhere(x), "np.argwhere"),
        (lambda x: np.flatnonzero(x), "np.flatnonzero"),
        (lambda x: np.unique(x), "np.unique"),
        (lambda x: np.extract(x > 0, x), "np.extract"),
        (lambda x: np.compress(x > 0, x), "np.compress"),
        (lambda x: np.repeat(x, (x > 0).astype(int)), "np.repeat"),
        (lambda x: x[x > 0], "boolean-mask indexing"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_data_dependent_shape_errors_name_the_function_and_line(fn, name):
    with pytest.raises(tk.TraceError) as e:
        tk.trace(fn, randn(5))
    msg = str(e.value)
    assert name in msg and "data" in msg
    line = int(re.search(rf"{HERE}:(\d+)", msg).group(1))
    assert "lambda x:" in open(__file__).read().splitlines()[line - 1]


def test_masked_mean_error_shows_the_weighted_rewrite():
    def centroid(X, labels, k):
        return X[labels == k].mean(0)

    X, labels = randn(6, 2), np.array([0, 1, 0, 1, 1, 0])
    with pytest.raises(tk.TraceError) as e:
        tk.trace(centroid, X, labels, 1)
    msg = str(e.value)
    assert "X[labels == k].mean(0)" in msg
    rewrite = "np.where(mask[:, None], a, 0).sum(0) / mask.sum()"
    assert rewrite in msg and "np.average(a, axis=0, weights=mask)" in msg
    # the advice computes the same value
    mask, a = labels == 1, X
    assert np.allclose(eval(rewrite), centroid(X, labels, 1))
    assert np.allclose(np.average(a, axis=0, weights=mask), centroid(X, labels, 1))


COLUMNS = np.array([True, False, True, True, False])


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: a[:, [True, False, True, True, False]] * 2,
        lambda a: a[np.array([[True, False, True, True, False]] * 3)] + 1,
        lambda a: a[:, np.arange(5) % 2 == 0].sum(1),
        lambda a: np.exp(a[[False, True, True]])[:, 1:],
        lambda a: a[:, np.nonzero(np.arange(5) > 2)[0]] - np.compress(np.arange(5) < 2, a, 1),
        lambda a: a[:, np.where(np.arange(5) > 2)[0]] * np.extract([1, 0, 1], a[0, :3]),
    ],
    ids=["literal", "constant-2d", "from-constants", "rows", "nonzero", "extract"],
)
def test_masks_known_while_tracing_trace_with_their_static_shape(fn):
    a = randn(3, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tk.TracerWarning)
        t = tk.trace(fn, a)
    assert not t.graph.guards
    b = randn(3, 5)
    assert_same(t(b), fn(b))
    # compiled: an exp of the fast-math library, within its few ulps of NumPy's
    assert_same(tk.compile(t, progress=False)(b), fn(b), rtol=1e-14)


def test_a_captured_mask_is_guarded():
    def f(a):
        return a[:, COLUMNS].sum(1)

    a = randn(3, 5)
    with pytest.warns(tk.TracerWarning, match="captured array"):
        t = tk.trace(f, a)
    c = tk.compile(t, progress=False)
    assert_same(t(a), f(a))
    assert_same(c(a), f(a))
    COLUMNS[1] = True
    try:
        for run in (t, c):
            with pytest.raises(tk.GuardError, match=r"\[True, True, True, True, False\]"):
                run(a)
    finally:
        COLUMNS[1] = False


def test_masked_assignment_from_masked_select_raises():
    def f(x, v):
        y = x.copy()
        y[x > 0] = v[x > 0]
        return y

    with pytest.raises(tk.TraceError, match="np.where"):
        tk.trace(f, randn(4), randn(4))


# ---------------------------------------------------------------------- unsupported functions
@pytest.mark.parametrize(
    "fn,name",
    [
        (lambda x: np.linalg.svd(x)[0], "np.linalg.svd"),
        (lambda x: np.partition(x, 1, axis=0), "np.partition"),
        (lambda x: np.fft.fft(x[0]), "np.fft.fft"),
        (lambda x: np.argpartition(x, 1), "np.argpartition"),
        (lambda x: np.linalg.pinv(x), "np.linalg.pinv"),  # its public path
        (lambda x: np.cov(x), "np.cov"),
        (lambda x: np.modf(x)[0], "modf"),
        (lambda x: np.add.outer(x, x), "outer"),
        (lambda x: np.exp(x, where=x > 0), "where"),
        (lambda x: x.reshape(-1, order="F"), "order"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unsupported_functions_name_the_function_and_line(fn, name):
    with pytest.raises(tk.UnsupportedOperation) as e:
        tk.trace(fn, randn(3, 3))
    msg = str(e.value)
    assert name in msg and "tk.python_op" in msg
    assert re.search(rf"{HERE}:\d+", msg), msg
    line = int(re.search(rf"{HERE}:(\d+)", msg).group(1))
    assert line != 0 and "lambda x:" in open(__file__).read().splitlines()[line - 1]


def test_converting_to_a_plain_array_is_an_error():
    def f(x):
        return np.float32(x[0]) * x

    with pytest.raises(tk.TraceError, match=HERE):
        tk.trace(f, randn(3))


# ---------------------------------------------------------------------- calling conventions
def test_wrong_shape_dtype_and_arity_on_call():
    def f(x, w):
        return x @ w

    t = tk.trace(f, randn(4, 3), randn(3, 2))
    with pytest.raises(ValueError) as e:
        t(randn(5, 3), randn(3, 2))
    assert "'x'" in str(e.value) and "(4, 3)" in str(e.value) and "(5, 3)" in str(e.value)
    with pytest.raises(TypeError) as e:
        t(randn(4, 3), randn(3, 2, dtype=np.float32))
    assert "'w'" in str(e.value) and "float64" in str(e.value) and "float32" in str(e.value)
    with pytest.raises(TypeError, match="traced with 2 arguments, got 1"):
        t(randn(4, 3))
    with pytest.raises(TypeError, match="traced with 2 arguments, got 3"):
        t(randn(4, 3), randn(3, 2), randn(2))
    with pytest.raises(TypeError, match="'w'"):
        t(randn(4, 3), 2.0)
    with pytest.raises(TypeError, match="list"):
        t(randn(4, 3), [[1.0, 2.0]] * 3)


def test_weak_scalar_argument_checks():
    t = tk.trace(lambda x, s: x * s, randn(3), 2.0)
    assert_same(t(np.ones(3), 3.0), np.full(3, 3.0))
    assert_same(t(np.ones(3), np.float64(3.0)), np.full(3, 3.0))
    with pytest.raises(TypeError, match="'s'"):
        t(np.ones(3), np.ones(3))


def test_pytrees_in_and_out():
    def f(params, batch, n_steps, mode):
        w, b = params["w"], params["b"]
        x, y = batch
        out = x @ w + b
        for _ in range(n_steps):
            out = np.tanh(out)
        loss = ((out - y) ** 2).mean() if mode == "mse" else np.abs(out - y).mean()
        return {"loss": loss, "out": [out, (out.sum(axis=0),)], "n": n_steps, "mode": mode}

    params = {"w": randn(3, 2), "b": randn(2)}
    batch = (randn(4, 3), randn(4, 2))
    t = tk.trace(f, params, batch, 2, "mse")
    assert [v.name for v in t.graph.inputs if True][:4] == [
        "params_b",
        "params_w",
        "batch_0",
        "batch_1",
    ]
    p2, b2 = {"w": randn(3, 2), "b": randn(2)}, [randn(4, 3), randn(4, 2)]
    got = t(p2, tuple(b2), 2, "mse")
    exp = f(p2, tuple(b2), 2, "mse")
    assert got["n"] == 2 and got["mode"] == "mse"
    assert_same(got["loss"], exp["loss"])
    assert_same(got["out"], exp["out"])
    assert isinstance(got["out"], list) and isinstance(got["out"][1], tuple)
    with pytest.raises(TypeError, match="n_steps: static value was 2, got 3"):
        t(p2, tuple(b2), 3, "mse")
    with pytest.raises(TypeError, match="'mse'.*'mae'"):
        t(p2, tuple(b2), 2, "mae")
    with pytest.raises(TypeError, match=r"params: traced with a dict with keys \['b', 'w'\], got"):
        t({"w": p2["w"], "bias": p2["b"]}, tuple(b2), 2, "mse")
    with pytest.raises(
        TypeError, match=r"batch\[1\]: traced with an array or float, got a list of 1 item"
    ):
        t(p2, (b2[0], [b2[1]]), 2, "mse")
    with pytest.raises(TypeError, match="tuple.*list|list.*tuple"):
        t(p2, b2, 2, "mse")


def test_numpy_scalar_inputs_and_outputs():
    def f(x, s):
        return x.sum() * s, s

    t = same_as_numpy(f, (3,), np.float32(2.0))
    assert t.graph.inputs[1].dtype == np.float32 and not t.graph.inputs[1].weak


def test_static_python_scalars_in_outputs():
    t = tk.trace(lambda x: (x + 1, 3, "s", None), randn(2))
    out = t(np.zeros(2))
    assert out[1:] == (3, "s", None)


# ---------------------------------------------------------------------- iteration, len, attributes
def test_iteration_and_len_over_first_axis():
    def f(x):
        acc = np.zeros(x.shape[1:])
        for row in x:
            acc = acc + row * len(x)
        return acc, [r.sum() for r in x]

    t = same_as_numpy(f, (3, 2))
    assert sum(n.op == "index" for n in t.graph.nodes) >= 3


def test_iterating_a_0d_array_is_a_type_error():
    with pytest.raises(TypeError):
        tk.trace(lambda x: [v for v in x], np.float64(1.0) * np.ones(()))
    with pytest.raises(TypeError):
        tk.trace(lambda x: len(x), np.ones(()))


def test_static_attributes():
    seen = {}

    def f(x):
        seen.update(shape=x.shape, ndim=x.ndim, size=x.size, dtype=x.dtype, nbytes=x.nbytes)
        seen.update(itemsize=x.itemsize, np_shape=np.shape(x), np_ndim=np.ndim(x))
        return x

    tk.trace(f, np.ones((2, 3), np.float32))
    assert seen == dict(
        shape=(2, 3),
        ndim=2,
        size=6,
        dtype=np.float32,
        nbytes=24,
        itemsize=4,
        np_shape=(2, 3),
        np_ndim=2,
    )


def test_mixed_with_plain_numpy_arrays_and_lists():
    def f(x):
        c = np.array([1.0, 2.0, 3.0])
        return np.concatenate([x, c]) + [1, 2, 3, 4, 5, 6], c @ x, np.maximum([0.5] * 3, x)

    same_as_numpy(f, (3,))


# ---------------------------------------------------------------------- scopes
def test_automatic_scopes_from_the_call_hierarchy():
    m = MLP()
    t = tk.trace(m, randn(5, 4))
    scopes = {n.scope for n in t.graph.nodes}
    assert ("MLP.__call__", "Linear.__call__", "Linear.forward") in scopes
    assert ("MLP.__call__", "Linear.__call__#2", "Linear.forward") in scopes
    assert ("MLP.__call__", "Linear.__call__#3", "Linear.forward") in scopes
    text = str(t.graph)
    assert "(MLP.__call__ > Linear.__call__#2 > Linear.forward)" in text


def _laplacian(u):
    return u[:-2] + u[2:] - 2 * u[1:-1]  # L:lap


def _evolve(u, steps):
    for _ in range(steps):
        u = u[1:-1] + 0.1 * _laplacian(u)
    return u


def test_function_scopes_nested_and_numbered():
    t = tk.trace(_evolve, randn(12), 2)
    scopes = [n.scope for n in t.graph.nodes]
    assert ("_evolve", "_laplacian") in scopes
    assert ("_evolve", "_laplacian#2") in scopes
    assert ("_evolve",) in scopes
    for n in t.graph.nodes:
        if n.scope[-1].startswith("_laplacian"):
            assert n.source.line == line_of("L:lap"), n


def test_explicit_scopes_context_manager_and_decorator():
    @tk.scope("block")
    def block(x):
        return np.exp(x)

    def f(x):
        with tk.scope("outer"):
            y = x + 1
            with tk.scope("inner"):
                y = y * 2
            y = block(y)
            y = block(y)
        return y - 1

    t = tk.trace(f, randn(3))
    by_op = [(n.op, n.scope) for n in t.graph.nodes]
    assert by_op == [
        ("add", ("f", "outer")),
        ("multiply", ("f", "outer", "inner")),
        ("exp", ("f", "outer", "block")),
        ("exp", ("f", "outer", "block#2")),
        ("subtract", ("f",)),
    ], by_op


def test_scope_outside_tracing_is_harmless():
    with tk.scope("nothing"):
        assert np.exp(0.0) == 1.0

    @tk.scope("deco")
    def g(x):
        return x + 1

    assert g(1) == 2


def _source_lines_program(x, w):
    y = x @ w  # L:s1
    z = y.T[::-1]  # L:s2
    z = z * 2.0  # L:s3
    u = np.zeros_like(y)  # L:s4
    u[0] = 1.0  # L:s5
    return z.sum(axis=0) + u[0, 0]  # L:s6


def test_source_lines_of_every_node():
    t = tk.trace(_source_lines_program, randn(3, 4), randn(4, 2))
    expected = {
        "matmul": "L:s1",
        "transpose": "L:s2",
        "multiply": "L:s3",
        "full": "L:s4",
        "index_update": "L:s5",
        "sum": "L:s6",
        "add": "L:s6",
    }
    ops = {n.op for n in t.graph.nodes}
    assert set(expected) <= ops, ops
    for n in t.graph.nodes:
        assert n.source is not None and os.path.basename(n.source.file) == HERE
        assert n.source.function == "_source_lines_program"
        if n.op == "index":  # z[::-1] (line s2) and u[0, 0] (line s6)
            assert n.source.line in (line_of("L:s2"), line_of("L:s6")), n
        else:
            assert n.source.line == line_of(expected[n.op]), n
        assert n.source.text == open(__file__).read().splitlines()[n.source.line - 1].strip()


def _twice(fn):
    def wrapper(*args):
        return fn(*args) * 2.0  # L:w1

    return wrapper


@_twice
def _decorated(v):
    return np.cos(v)  # L:d1


def _steps(x, n):
    for k in range(n):
        yield x * (k + 1.0)  # L:g1


def _resume_a(it):
    return next(it) + 1.0  # L:ra


def _resume_b(it):
    return next(it) - 1.0  # L:rb


def _where_program(x):
    def inner(v):
        return np.tanh(v)  # L:i1

    (square,) = [lambda v: v * v]  # L:l1
    parts = [np.exp(x) + k for k in range(2)]  # L:c1
    y = (
        x * 3.0  # L:m1
        - np.sin(x)  # L:m2
    )
    for _ in range(3):
        y = inner(y) + square(y)  # L:f1
    it = _steps(y, 2)
    y = _resume_a(it) * _resume_b(it)  # L:f2
    return _decorated(y) + parts[1] - parts[0]  # L:f3


def test_source_lines_and_scopes_of_nested_calls_loops_and_generators():
    """Every op names the line that recorded it and the calls around it: nested functions,
    lambdas, comprehensions, decorators, a generator resumed from two functions, an
    expression over two lines, and a loop's repeated lines (recorded three times)."""
    expected = [  # (op, marker of its line, scope) in recording order
        ("exp", "L:c1", ("_where_program", "<listcomp>")),
        ("add", "L:c1", ("_where_program", "<listcomp>")),
        ("exp", "L:c1", ("_where_program", "<listcomp>")),
        ("add", "L:c1", ("_where_program", "<listcomp>")),
        ("multiply", "L:m1", ("_where_program",)),
        ("sin", "L:m2", ("_where_program",)),
        ("subtract", "L:m1", ("_where_program",)),
    ]
    for k in ("", "#2", "#3"):
        expected += [
            ("tanh", "L:i1", ("_where_program", "inner" + k)),
            ("multiply", "L:l1", ("_where_program", "<lambda>" + k)),
            ("add", "L:f1", ("_where_program",)),
        ]
    expected += [
        ("multiply", "L:g1", ("_where_program", "_resume_a", "_steps")),
        ("add", "L:ra", ("_where_program", "_resume_a")),
        ("multiply", "L:g1", ("_where_program", "_resume_b", "_steps")),
        ("subtract", "L:rb", ("_where_program", "_resume_b")),
        ("multiply", "L:f2", ("_where_program",)),
        ("cos", "L:d1", ("_where_program", "wrapper", "_decorated")),
        ("multiply", "L:w1", ("_where_program", "wrapper")),
        ("add", "L:f3", ("_where_program",)),
        ("subtract", "L:f3", ("_where_program",)),
    ]
    text = open(__file__).read().splitlines()
    t = tk.trace(_where_program, randn(4), loops="unroll")
    got = [(n.op, n.source.line, n.scope) for n in t.graph.nodes]
    assert got == [(op, line_of(m), scope) for op, m, scope in expected], got
    for n in t.graph.nodes:
        assert os.path.basename(n.source.file) == HERE
        assert n.source.text == text[n.source.line - 1].strip(), n
    rolled = tk.trace(_where_program, randn(4))
    loops = [n for n in rolled.graph.nodes if n.op == "loop"]
    bodies = [[(m.op, m.source.line) for m in n.attrs["body"].nodes] for n in loops]
    assert [(op, line_of(m)) for op, m, _ in expected[7:10]] in bodies, rolled


def test_listing_line_format():
    t = tk.trace(_source_lines_program, randn(3, 4), randn(4, 2))
    line = [s for s in str(t.graph).splitlines() if "matmul" in s][0]
    where = f"{HERE}:{line_of('L:s1')}"
    assert re.fullmatch(
        rf"  %\d+: f64\[3,2\] = matmul\(%x, %w\)  # {where} \(_source_lines_program\)", line
    ), line


def test_numpy_is_unpatched_after_tracing_even_on_errors():
    zeros, asarray = np.zeros, np.asarray
    t = tk.trace(lambda x: x + np.zeros(2), np.ones(2))
    assert np.zeros is zeros and np.asarray is asarray
    with pytest.raises(ZeroDivisionError):
        tk.trace(lambda x: 1 / 0, np.ones(2))
    assert np.zeros is zeros and np.asarray is asarray
    assert_same(t(np.ones(2)), np.ones(2))
    assert isinstance(np.zeros(2), np.ndarray)


def test_signature_of_trace_is_documented():
    params = inspect.signature(tk.trace).parameters
    assert list(params)[:2] == ["fn", "example_args"]
    assert {"strict", "keep_values", "name"} <= set(params)


def test_keep_values_and_name():
    t = tk.trace(lambda x: np.exp(x) + 1, np.zeros(2), keep_values=True, name="myfn")
    assert t.graph.name == "myfn" and str(t.graph).startswith("myfn(")
    vals = [t.values[n.out] for n in t.graph.nodes]
    assert_same(vals[0], np.ones(2))
    assert_same(vals[1], np.full(2, 2.0))


def test_round_builtin_and_comparison_with_none():
    def f(x):
        return x == None, x != None, round(x[0], 1)  # noqa: E711

    same_as_numpy(f, (3,))
    with pytest.warns(tk.TracerWarning, match="int"):
        t = tk.trace(lambda x: x * round(x[1]), np.array([1.4, 2.6]))
    assert t.graph.guards[0].value == 3
    with pytest.raises(TypeError, match="__round__"):
        tk.trace(lambda x: round(x), np.ones(2))


class _Block:
    def __init__(self):
        self.w = randn(3, 3)

    def forward(self, x):
        return np.tanh(x @ self.w)


class _Net:
    def __init__(self):
        self.blocks = [_Block(), _Block()]

    @tk.scope("net")
    def __call__(self, x):
        for b in self.blocks:
            x = b.forward(x)
        return x.sum()


def test_method_scopes_and_decorated_methods():
    net = _Net()
    t = tk.trace(net, randn(2, 3))
    scopes = [n.scope for n in t.graph.nodes]
    assert scopes[0] == ("net", "_Block.forward"), scopes
    assert ("net", "_Block.forward#2") in scopes
    assert scopes[-1] == ("net",)
    net.blocks[1].w = randn(3, 3)
    x = randn(2, 3)
    assert_same(t(x), net(x))


def test_reshape_views_and_copies_follow_the_traced_layout():
    """NumPy's reshape is a view of a contiguous array and a copy of a strided one: a write
    through another view of the input reaches the first and not the second. The trace makes
    the choice NumPy makes for the layout it was traced with."""

    def fn(x):
        flat = x.reshape(-1)  # a view or a copy, by layout
        x.T[...] = np.fmin(x.T, -1.5)  # write into the input through a view
        return flat * 1

    def run(layout):
        base = np.arange(35.0).reshape(5, 7) - 10
        strided = lambda: base.copy()[:, 1::2]  # noqa: E731  (rows 56 bytes apart: no flat view)
        make = (lambda: base[:, 1::2].copy()) if layout == "c" else strided
        t = tk.trace(fn, make())
        want = fn(make())
        got = t(make())
        return got, want

    for layout in ("c", "nc"):
        got, want = run(layout)
        np.testing.assert_array_equal(got, want)


def _reshape_then_write(x):
    flat = x.reshape(-1)  # a view of a C-contiguous x, a copy of a strided one
    flat[0] = 100.0
    return x * 1.0


def _contiguous():
    return np.arange(12.0).reshape(3, 4)


def _strided():
    return np.arange(24.0).reshape(3, 8)[:, :4]  # rows 64 bytes apart: reshape copies


@pytest.mark.parametrize("traced_on", ["contiguous", "strided"])
@pytest.mark.parametrize("target", [None, "cpu"])
def test_a_call_with_another_layout_than_traced_fails_its_layout_guard(traced_on, target):
    """When a reshape's view-or-copy choice decides what a later write reaches, a call with an
    array for which NumPy chooses the other way raises GuardError naming the reshape's line,
    before anything runs (the traced choice would give a wrong answer)."""
    make, other = (_contiguous, _strided) if traced_on == "contiguous" else (_strided, _contiguous)
    t = tk.trace(_reshape_then_write, make())
    (guard,) = t.graph.guards
    assert guard.how == "layout" and guard.value[0] == (traced_on == "contiguous")
    f = t if target is None else tk.compile(t, target=target, progress=False)
    x, fresh = make(), make()
    np.testing.assert_array_equal(f(x), _reshape_then_write(fresh))
    np.testing.assert_array_equal(x, fresh)  # written as NumPy writes
    y = other()
    with pytest.raises(tk.GuardError, match=r"reshape at .*test_tracer.py:\d+ `flat = x.reshape"):
        f(y)
    np.testing.assert_array_equal(y, other())  # nothing ran, nothing was written back
    g = type(t.graph).from_json(t.graph.to_json())
    assert g.guards[0].value == guard.value


def test_jit_retraces_when_the_layout_guard_fails():
    f = tk.jit(_reshape_then_write)
    for k, make in enumerate((_contiguous, _strided, _contiguous)):
        x, fresh = make(), make()
        expected = _reshape_then_write(fresh)  # and writes into fresh as NumPy does
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got = f(x)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(x, fresh)
        retraced = any("retracing: reshape" in str(w.message) for w in seen)
        assert retraced == (k > 0), [str(w.message) for w in seen]


def test_reshapes_without_a_later_write_have_no_layout_guard():
    def fn(x):
        flat = x.reshape(-1)
        return flat * 2, x.reshape(2, -1)

    assert not tk.trace(fn, _strided()).graph.guards
    assert not tk.trace(fn, _contiguous()).graph.guards


def test_same_layout_copy(monkeypatch):
    from tracekit.tracer.context import same_layout_copy

    x = np.arange(60.0).reshape(6, 10)
    for view in (x[:, ::3], x[::-2, 1:], x.T, x[2]):
        c = same_layout_copy(view)
        assert c.strides == view.strides and not np.shares_memory(c, view)
        np.testing.assert_array_equal(c, view)
    b = same_layout_copy(np.broadcast_to(np.arange(3.0), (4, 3)))
    assert 0 not in b.strides and b.flags.writeable  # not four rows in one
    column = np.zeros((40, 100))[:, 0]  # spans 100x its own size
    monkeypatch.setattr(context, "LAYOUT_COPY_LIMIT", 0)
    c = same_layout_copy(column)
    assert c.flags.c_contiguous and not np.shares_memory(c, column)


@pytest.mark.parametrize(
    "fn,arg",
    [
        (lambda x: np.remainder(np.float32(0.5), np.imag(x)), 1.5),
        (lambda x: np.float32(2) * np.real(x), 1 + 2j),
        (lambda x: np.float32(2) * np.imag(x), 1 + 2j),
    ],
    ids=["imag-of-float", "real-of-complex", "imag-of-complex"],
)
def test_real_and_imag_of_a_python_number_are_python_numbers(fn, arg):
    """np.imag(1.5) is the Python float 0.0: with a float32 it gives a float32, as NumPy's
    does (the trace made it a float64 array: fuzz seed 9101436)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = tk.trace(fn, arg)
        got, want = t(arg), fn(arg)
    assert np.asarray(got).dtype == np.asarray(want).dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_returned_dicts_keep_the_functions_key_order():
    def f(x):
        return {"zeta": x * 2, "alpha": {"y": x + 1, "b": x.sum()}, "mid": x}

    x = np.arange(3.0)
    t = tk.trace(f, x)
    for run in (t, tk.compile(t, progress=False), tk.jit(f, progress=False)):
        got = run(x)
        assert list(got) == ["zeta", "alpha", "mid"] and list(got["alpha"]) == ["y", "b"]
        assert_same(got, f(x))
    t2 = tk.trace(lambda d: d["b"] - d["a"], {"b": x, "a": x})  # arguments: any key order
    assert_same(t2({"a": x, "b": x * 3}), x * 2)


def test_tracing_collects_garbage_rarely_and_restores_the_collector():
    """While tracing, the garbage collector's first threshold is raised (a trace keeps nearly
    everything it makes); afterwards, and after a traced function that raises, it is back."""
    import gc

    seen = []

    def f(x):
        seen.append(gc.get_threshold()[0])
        return x * 2.0

    def fails(x):
        raise ValueError("from the user's code")

    before = gc.get_threshold()
    tk.trace(f, np.ones(3))
    assert seen[0] >= tk.traced.TRACING_GC_THRESHOLD and gc.get_threshold() == before
    with pytest.raises(ValueError, match="user's code"):
        tk.trace(fails, np.ones(3))
    assert gc.get_threshold() == before


def _made_inside(x):
    k = np.random.default_rng(0).random(3)  # a plain array the trace bakes in as a constant
    return x.sum(), k, k[1:]


@pytest.mark.parametrize("how", ["interpreter", "compiled"])
def test_a_returned_constant_is_a_copy_each_call(how, tmp_path, monkeypatch):
    """A result that is (a view of) a graph constant is the caller's to write into: the next
    call still returns the constant's own values."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    t = tk.trace(_made_inside, np.ones(3))
    f = t if how == "interpreter" else tk.compile(t, progress=False)
    _, k, tail = f(np.ones(3))
    want = np.random.default_rng(0).random(3)
    k[:] = 99.0
    tail[:] = -1.0
    _, k2, tail2 = f(np.ones(3))
    np.testing.assert_array_equal(k2, want)
    np.testing.assert_array_equal(tail2, want[1:])
    assert not np.shares_memory(k2, tail2)


def test_a_constant_the_function_writes_into_keeps_its_value_before_the_write():
    def f(x):
        k = np.random.default_rng(0).random(3)  # a constant of the graph
        y = x + k
        np.multiply(x, 2.0, out=k)  # written while tracing: the graph's constant is the read one
        return y, k

    x = np.linspace(0, 1, 3)
    want = f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.TracerWarning)
        t = tk.trace(f, x)
    for got, w in zip(t(x), want):
        np.testing.assert_array_equal(got, w)
