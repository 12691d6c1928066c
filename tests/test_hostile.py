"""Hostile input at every public entry point.

Each case must end in a specific exception that names the argument (or the user's line), or in
a correct result (compared with NumPy) - never a crash, a silent wrong answer or a numba
traceback from generated code.
"""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

import tracekit as tk

HERE = re.escape("test_hostile.py")
pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
X = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
Y = np.arange(12.0).reshape(3, 4)


def _f(x, y):
    return np.exp(x) * y + x.sum(axis=0)


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
    assert np.array_equal(np.isnan(got), np.isnan(want))


# ---------------------------------------------------------------------- tk.trace
TRACE_ERRORS = [
    ("object array", (np.array([1, "a"], dtype=object), Y), tk.TraceError, "argument 'x'.*object"),
    ("structured", (np.zeros(3, dtype=[("a", "f8")]), Y), tk.TraceError, "argument 'x'"),
    ("datetime", (np.zeros(3, "M8[s]"), Y), tk.TraceError, "argument 'x'.*datetime"),
    ("masked", (np.ma.masked_array(X, X > 0), Y), TypeError, "argument 'x'.*masked"),
    ("np.matrix", (np.matrix(X), Y), TypeError, "argument 'x'.*matrix"),
    ("None", (None, Y), TypeError, None),
    ("string", ("abc", Y), TypeError, None),
    ("too few arguments", (X,), TypeError, "'y'"),
]


@pytest.mark.parametrize("name,args,exc,match", TRACE_ERRORS, ids=[c[0] for c in TRACE_ERRORS])
def test_trace_rejects(name, args, exc, match):
    with pytest.raises(exc, match=match):
        tk.trace(_f, *args)


def test_trace_rejects_a_non_callable():
    with pytest.raises(TypeError):
        tk.trace(3, X)


UNSUPPORTED = [
    ("np.partition", lambda x: np.partition(x, 1)),
    ("np.linalg.pinv", lambda x: np.linalg.pinv(x[:3, :3])),
    ("np.fft.fft", lambda x: np.fft.fft(x)),
    ("ufunc.outer", lambda x: np.add.outer(x, x)),
    ("ufunc where=", lambda x: np.add(x, 1, where=x > 0)),
    ("np.divmod", lambda x: np.divmod(x, 2)),
    ("np.unwrap", lambda x: np.unwrap(x)),
    ("reshape order=F", lambda x: x.reshape((4, 3), order="F")),
    ("ndarray.tobytes", lambda x: x.tobytes()),  # before: a bare AttributeError, no line
    ("ndarray.view", lambda x: x.view(np.int64)),
    ("ndarray.strides", lambda x: x.strides),
]


@pytest.mark.parametrize("name,fn", UNSUPPORTED, ids=[c[0] for c in UNSUPPORTED])
def test_unsupported_numpy_names_the_line(name, fn):
    with pytest.raises(tk.UnsupportedOperation, match=HERE + r":\d+"):
        tk.trace(fn, X)


def test_unsupported_attribute_is_still_an_attribute_error_for_hasattr():
    def f(x):
        assert not hasattr(x, "ctypes")
        return x * 2

    _same(tk.trace(f, X)(X), X * 2)


DATA_DEPENDENT = [
    ("boolean mask", lambda x: x[x > 0]),
    ("np.nonzero", lambda x: np.nonzero(x)),
    ("np.unique", lambda x: np.unique(x)),
]


@pytest.mark.parametrize("name,fn", DATA_DEPENDENT, ids=[c[0] for c in DATA_DEPENDENT])
def test_data_dependent_shapes_name_the_line(name, fn):
    with pytest.raises(tk.TraceError, match=HERE + r":\d+"):
        tk.trace(fn, X)


def test_strict_refuses_a_branch_on_data_at_its_line():
    with pytest.raises(tk.TraceError, match=HERE + r":\d+.*strict"):
        tk.trace(lambda x: x * 2 if x.sum() > 0 else x, X, strict=True)


def test_writes_numpy_would_not_allow_or_tracekit_cannot_follow():
    def diag_write(y):  # NumPy writes through einsum's diagonal view; tracekit says it cannot
        np.einsum("ii->i", y)[...] = 1.0
        return y

    with pytest.raises(tk.TraceError, match=r"einsum view taken at .*" + HERE):
        tk.trace(diag_write, np.zeros((3, 3)))

    def add_at_readonly(x):  # NumPy's own add.at writes into the read-only view
        np.add.at(np.broadcast_to(x, (3,)), [0], 1.0)
        return x

    with pytest.raises(ValueError, match="read-only.*" + HERE):
        tk.trace(add_at_readonly, np.float64(1.0))

    def write_readonly(x):
        np.broadcast_to(x, (2, 3))[0, 0] = 1.0
        return x

    with pytest.raises(ValueError, match="read-only"):
        tk.trace(write_readonly, np.ones(3))


def test_einsum_transpose_view_writes_reach_the_input():
    def f(x):  # np.einsum('ij->ji', x) is a view in NumPy; the write went nowhere before
        v = np.einsum("ij->ji", x)
        v *= 2.0
        return x + 0

    _same(tk.trace(f, X.copy())(X.copy()), f(X.copy()))


def test_random_numbers_inside_traced_code_do_not_crash():
    # before: a segmentation fault (np.random's C code received a traced array from np.empty)
    t = tk.trace(lambda x: x + np.random.default_rng(0).random((3, 4)) + np.random.rand(3, 4), X)
    assert t(X).shape == (3, 4)


def test_python_op_may_build_arrays_with_numpy_while_tracing():
    op = tk.python_op(lambda a: np.ones(a.shape[0]) * a.sum())  # np.ones was traced: TraceError
    t = tk.trace(lambda x: op(x) * 2, X)
    _same(t(X), np.ones(3) * X.sum() * 2)


# ---------------------------------------------------------------------- calling: interp/cpu/cuda
def _g(x, y, acc):
    acc += x.sum(axis=0)
    return np.exp(x) * y, (x > 0).astype(np.int64) * 3


@pytest.fixture(scope="module", params=["interp", "cpu", "cuda"])
def callable_g(request):
    t = tk.trace(_g, X, Y, np.zeros(4))
    if request.param == "interp":
        return t
    return tk.compile(t, target=request.param, progress=False)


CALL_ERRORS = [
    ("wrong shape", (np.ones((3, 5)), Y, np.zeros(4)), ValueError, "argument 'x'.*shape"),
    ("wrong rank", (np.ones(12), Y, np.zeros(4)), ValueError, "argument 'x'.*shape"),
    ("wrong dtype", (X.astype(np.float32), Y, np.zeros(4)), TypeError, "argument 'x'.*dtype"),
    ("too few", (X, Y), TypeError, "arguments differ.*traced with 3 arguments, got 2"),
    ("too many", (X, Y, np.zeros(4), Y), TypeError, "arguments differ"),
    ("object array", (X.astype(object), Y, np.zeros(4)), TypeError, "argument 'x'"),
    ("structured", (np.zeros((3, 4), [("a", "f8")]), Y, np.zeros(4)), TypeError, "argument 'x'"),
    ("masked", (np.ma.masked_array(X), Y, np.zeros(4)), TypeError, "argument 'x'.*masked"),
    ("np.matrix", (np.matrix(X), Y, np.zeros(4)), TypeError, "argument 'x'.*matrix"),
    ("string", ("abc", Y, np.zeros(4)), TypeError, "x: traced with an array or float, got 'abc'"),
    ("None", (None, Y, np.zeros(4)), TypeError, "x: traced with an array or float, got None"),
    (
        "list",
        (X.tolist(), Y, np.zeros(4)),
        TypeError,
        "x: traced with an array or float, got a list of 3",
    ),
    ("Python float", (1.5, Y, np.zeros(4)), TypeError, "argument 'x'"),
    ("big-endian", (X.astype(">f8"), Y, np.zeros(4)), TypeError, "argument 'x'"),
]


@pytest.mark.parametrize("name,args,exc,match", CALL_ERRORS, ids=[c[0] for c in CALL_ERRORS])
def test_call_rejects(callable_g, name, args, exc, match):
    with pytest.raises(exc, match=match):
        callable_g(*args)


def test_call_refuses_to_write_into_a_read_only_input(callable_g):
    acc = _readonly(np.zeros(4))
    with pytest.raises(ValueError, match="writes into 'acc'"):
        callable_g(X, Y, acc)
    assert not acc.any()


def _g_numpy(x, y, acc):
    acc = acc.copy()
    res = _g(x, y, acc)
    return res, acc


def _readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def _specials(a):
    s = np.array([np.nan, np.inf, -np.inf, 5e-324, -0.0, 1e308])
    return np.where(
        np.arange(a.size).reshape(a.shape) % 2 == 0, s[np.arange(a.size) % 6].reshape(a.shape), a
    )


LAYOUTS = {
    "nan inf subnormal": _specials,
    "subnormals": lambda a: a * 1e-310,
    "infinities": lambda a: a * np.inf,
    "strided": lambda a: np.repeat(a, 2, axis=1)[:, ::2],
    "negative strides": lambda a: a[::-1, ::-1].copy()[::-1, ::-1],
    "Fortran order": np.asfortranarray,
    "read-only (not written)": _readonly,
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_call_is_right_on_awkward_values_and_layouts(callable_g, layout):
    x = LAYOUTS[layout](X.copy())
    y = LAYOUTS[layout](Y.copy())
    acc = np.zeros(8)[::2]  # a strided input written in place
    (want0, want1), want_acc = _g_numpy(x, y, acc)
    got0, got1 = callable_g(x, y, acc)
    _same(got0, want0)
    _same(got1, want1)
    _same(acc, want_acc)


def test_out_arguments(callable_g):
    if isinstance(callable_g, tk.Traced):
        pytest.skip("out= is a Compiled argument")
    with pytest.raises(TypeError, match="writeable"):
        callable_g(X, Y, np.zeros(4), out=(_readonly(X), np.empty((3, 4), int)))
    with pytest.raises(ValueError, match=r"out\[0\].*f64\[3,4\].*\(4, 3\)"):
        callable_g(X, Y, np.zeros(4), out=(np.empty((4, 3)), np.empty((3, 4), int)))
    with pytest.raises(TypeError, match=r"out\[1\].*i64\[3,4\].*bool"):
        callable_g(X, Y, np.zeros(4), out=(np.empty((3, 4)), np.empty((3, 4), bool)))
    with pytest.raises(ValueError, match="needs 2"):
        callable_g(X, Y, np.zeros(4), out=np.empty((3, 4)))


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_out_aliasing_an_input(target):
    # before (cpu): the kernel overwrote x while still reading it: [8, 7, 6, 5, 6, 7, 8, 9]
    def rev(x):
        return x[::-1] + 1

    def tr(x):
        return x.T * 2

    for fn, x in ((rev, np.arange(8.0)), (tr, np.arange(16.0).reshape(4, 4))):
        c = tk.compile(tk.trace(fn, x), target=target, progress=False)
        a = x.copy()
        want = fn(a)
        assert c(a, out=a) is a
        _same(a, want)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_results_never_alias_inputs_or_each_other(target):
    def f(x):
        y = x.copy()
        x += 1  # a write-back into x after y was taken
        z = np.exp(x)
        return y, z, z.copy(), x

    t = tk.trace(f, np.zeros(3))
    run = t if target == "interp" else tk.compile(t, progress=False)
    a = np.zeros(3)
    y, z, z2, x = run(a)
    _same(y, np.zeros(3))  # before: y was `a` itself, showing the write-back: [1, 1, 1]
    assert not np.shares_memory(y, a) and not np.shares_memory(x, a)
    assert not np.shares_memory(z, z2)


@pytest.fixture(scope="module", params=["interp", "cpu", "cuda"])
def odd_shapes(request):
    def f(e, s, big, i, j):
        return (
            np.exp(e).sum(axis=0) + s,
            (np.tanh(big) * s).sum(axis=-1),
            i * j + i,  # int64 overflow wraps, as NumPy
            np.abs(j.astype(np.int8)) - j.astype(np.int8),
            np.sign(i * i),  # before: 1 for i = -2**63 (LLVM took the overflow as impossible)
            (i + 1) > i,
        )

    args = (
        np.ones((0, 3)),
        np.float64(2.0),
        np.ones((1,) * 30 + (2, 2)),
        np.array([2**62, 3, -(2**63)], np.int64),
        np.array([4, -128, -1], np.int64),
    )
    t = tk.trace(f, *args)
    run = t if request.param == "interp" else tk.compile(t, target=request.param, progress=False)
    return run, f, args


def test_empty_0d_32_dims_and_overflow(odd_shapes):
    run, f, args = odd_shapes
    with np.errstate(all="ignore"):
        want = f(*args)
    got = run(*args)
    for g, w in zip(got, want):
        _same(g, w)


# ---------------------------------------------------------------------- tk.compile, tk.jit
COMPILE_ERRORS = [
    ("target", dict(target="gpu"), ValueError, "unknown target"),
    ("math", dict(math="exact"), ValueError, "unknown math"),
    ("option", dict(foo=1), TypeError, "foo"),
    ("stream on cpu", dict(stream=object()), ValueError, "target='cuda' only"),
]


@pytest.mark.parametrize("name,kw,exc,match", COMPILE_ERRORS, ids=[c[0] for c in COMPILE_ERRORS])
def test_compile_rejects(name, kw, exc, match):
    with pytest.raises(exc, match=match):
        tk.compile(tk.trace(_f, X, Y), progress=False, **kw)


@pytest.mark.parametrize("what", [_f, None, "x"], ids=["function", "None", "str"])
def test_compile_takes_only_a_traced_or_a_graph(what):  # (a Graph: tests/test_saving.py)
    with pytest.raises(TypeError, match="takes a Traced .*, a Graph"):
        tk.compile(what)


def test_compile_checks_a_graph_that_lies_about_its_shapes():
    t = tk.trace(_f, X, Y)
    d = json.loads(t.graph.to_json())
    d["nodes"][0]["outputs"][0]["shape"] = [300, 400]  # exp(x) claims to be 40x bigger
    g = tk.Graph.from_json(json.dumps(d))
    with pytest.raises(ValueError, match=r"exp gives f64\[3,4\].*not the recorded f64\[300,400\]"):
        tk.compile(t.with_graph(g), progress=False)


JIT_ERRORS = [
    ("None", (None, Y), TypeError, None),
    ("string", ("abc", Y), TypeError, None),
    ("object array", (X.astype(object), Y), tk.TraceError, "argument 'x'"),
    ("masked", (np.ma.masked_array(X), Y), TypeError, "argument 'x'"),
    ("too few", (X,), TypeError, "'y'"),
]


@pytest.mark.parametrize("name,args,exc,match", JIT_ERRORS, ids=[c[0] for c in JIT_ERRORS])
def test_jit_rejects(name, args, exc, match):
    with pytest.raises(exc, match=match):
        tk.jit(_f)(*args)


def test_jit_rejects_bad_decorations_when_decorating():
    with pytest.raises(TypeError, match="takes a function"):
        tk.jit(3)
    with pytest.raises(ValueError, match="unknown target"):
        tk.jit(_f, target="tpu")
    with pytest.raises(TypeError, match="foo"):
        tk.jit(_f, foo=1)


def test_jit_follows_new_shapes_dtypes_and_nan():
    f = tk.jit(lambda x: np.tanh(x) * 2.0, progress=False)
    for a in (X, np.full((2, 2), np.nan), np.ones(0)):
        _same(f(a), np.tanh(a) * 2.0)


# ---------------------------------------------------------------------- autodiff
GRAD_ERRORS = [
    ("int input", lambda a: a.sum(), (np.ones(3, int),), {}, "dtype int64"),
    ("vector output", lambda a: a * 2, (np.ones(3),), {}, "must return a real scalar"),
    ("complex output", lambda a: (a * 1j).sum(), (np.ones(3),), {}, "real scalar"),
    ("argnums", lambda a: a.sum(), (np.ones(3),), {"argnums": 3}, "argnums 3 is out of range"),
    ("None", lambda a: a.sum(), (None,), {}, "static value"),
    ("string", lambda a: a.sum(), ("abc",), {}, "static value"),
    ("object", lambda a: a.sum(), (np.ones(3, object),), {}, "dtype object"),
]


@pytest.mark.parametrize("name,fn,args,kw,match", GRAD_ERRORS, ids=[c[0] for c in GRAD_ERRORS])
def test_grad_rejects(name, fn, args, kw, match):
    with pytest.raises(TypeError, match=match):
        tk.grad(fn, **kw)(*args)


def test_grad_of_awkward_values():
    g = tk.grad(lambda a: np.sqrt(a).sum())(np.array([0.0, 4.0, -1.0, np.nan]))
    _same(g, np.array([np.inf, 0.25, np.nan, np.nan]))
    _same(tk.grad(lambda a: a.sum())(np.ones(0)), np.ones(0))
    assert tk.grad(lambda a: a * a)(np.float64(3.0)) == 6.0
    assert tk.grad(lambda a: a * a)(3.0) == 6.0


def test_vjp_rejects():
    with pytest.raises(TypeError, match="takes a Traced"):
        tk.vjp(_f)
    b = tk.vjp(tk.trace(lambda a: np.exp(a) * 2, X))
    with pytest.raises(ValueError, match="argument 'd1'.*shape"):
        b(X, np.ones(3))
    with pytest.raises(TypeError, match="argument 'd1'.*dtype"):
        b(X, np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="arguments differ"):
        b(X)
    _same(b(X, np.ones((3, 4)))[0], np.exp(X) * 2)


# ---------------------------------------------------------------------- tk.python_op
def test_python_op_rejects_bad_definitions():
    with pytest.raises(TypeError, match="f must be callable"):
        tk.python_op(3)
    with pytest.raises(TypeError, match="builder tuple"):
        tk.python_op((1, 2))
    with pytest.raises(TypeError, match="grad_f must be callable"):
        tk.python_op(np.sin, grad_f=3)


@pytest.mark.parametrize(
    "result",
    [lambda a: "abc", lambda a: None, lambda a: a.astype(object)],
    ids=["str", "None", "obj"],
)
def test_python_op_rejects_non_numeric_results(result):
    op = tk.python_op(result)
    with pytest.raises(tk.TraceError, match="must return numeric arrays"):
        tk.trace(lambda x: op(x), X)


def test_python_op_errors_name_the_op():
    def boom(a):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom") as info:
        tk.trace(lambda x: tk.python_op(boom)(x), X)
    assert any("python op 'boom'" in n for n in info.value.__notes__)
    op = tk.python_op(lambda a: a * 2, grad_f=lambda a, y, gy: np.ones(5), name="twice")
    with pytest.raises(ValueError, match="'twice'.*shape \\(5,\\) for input 0"):
        tk.grad(lambda a: op(a).sum())(np.ones(3))


def test_python_op_that_writes_into_its_input_raises():
    def bad(a):  # before: the write silently changed values other nodes read
        a += 1
        return a

    with pytest.raises(ValueError, match="read-only"):
        tk.trace(lambda x: tk.python_op(bad)(x) + x, X.copy())


@pytest.mark.parametrize("target", ["interp", "cpu", "cuda"])
def test_python_op_returning_another_shape_later_raises(target):
    op = tk.python_op(lambda a: np.ones(3 if a[0, 0] < 0 else 2), name="shifty")
    t = tk.trace(lambda x: op(x) * 2, X)
    run = t if target == "interp" else tk.compile(t, target=target, progress=False)
    _same(run(X), np.full(3, 2.0))
    # before: interp returned f64[2] silently, cpu read past its end (garbage third element)
    with pytest.raises(ValueError, match=r"'shifty' returned f64\[2\].*f64\[3\] when traced"):
        run(-X)


# ---------------------------------------------------------------------- render, explore, JSON
T = tk.trace(_f, X, Y)

RENDER_ERRORS = [
    ("None", (None,), {}, TypeError, "render\\(\\) takes"),
    ("string", ("abc",), {}, TypeError, "render\\(\\) takes"),
    ("depth -1", (T,), {"depth": -1}, ValueError, "depth"),
    ("depth str", (T,), {"depth": "a"}, ValueError, "depth"),
    ("rankdir", (T,), {"rankdir": "XX"}, ValueError, "rankdir"),
    ("option", (T,), {"foo": 1}, TypeError, "foo"),
]


@pytest.mark.parametrize("name,args,kw,exc,match", RENDER_ERRORS, ids=[c[0] for c in RENDER_ERRORS])
def test_render_rejects(name, args, kw, exc, match):
    with pytest.raises(exc, match=match):
        tk.render(*args, **kw)


def test_render_odd_graphs():
    s32 = (1,) * 30 + (2, 2)
    odd = tk.trace(lambda e, big: (np.exp(e).sum(), big * 2), np.ones((0, 3)), np.ones(s32))
    assert "digraph" in tk.render(odd).source
    assert "digraph" in tk.render(T.graph).source


@pytest.mark.parametrize(
    "args,kw,exc,match",
    [((None,), {}, TypeError, "takes a Traced"), ((3,), {}, TypeError, "takes a Traced"),
     ((T,), {"view": "zzz"}, ValueError, "view must be one of")],
    ids=["None", "int", "view"],
)  # fmt: skip
def test_explore_rejects(args, kw, exc, match):
    with pytest.raises(exc, match=match):
        tk.explore(*args, **kw)


def _json_variant(edit):
    d = json.loads(T.graph.to_json())
    edit(d)
    return json.dumps(d)


def _set(path, value):
    def edit(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return edit


JSON_ERRORS = [
    ("not JSON", "{not json", "not JSON text"),
    ("None", None, "not JSON text"),
    ("a list", "[]", "expected a JSON object"),
    ("no format tag", "{}", "format tag"),
    ("missing op", _json_variant(lambda d: d["nodes"][0].pop("op")), "malformed.*'op'"),
    ("unknown op", _json_variant(_set(["nodes", 0, "op"], "nope")), "unknown op 'nope'"),
    ("undefined var", _json_variant(_set(["nodes", 0, "inputs", 0], {"var": "zz"})), "'zz'"),
    ("undefined output", _json_variant(_set(["outputs"], ["zz"])), "'zz'"),
    ("bad dtype", _json_variant(_set(["inputs", 0, "dtype"], "garbage")), "data type"),
    ("bad writeback", _json_variant(_set(["writebacks"], [[5, 7]])), "writeback"),
    (
        "foreign object",
        _json_variant(_set(["nodes", 0, "attrs"], {"x": {"object": {"module": "os"}}})),
        "unknown object",
    ),
]


@pytest.mark.parametrize("name,text,match", JSON_ERRORS, ids=[c[0] for c in JSON_ERRORS])
def test_from_json_rejects(name, text, match):
    with pytest.raises(ValueError, match=match):
        tk.Graph.from_json(text)


@pytest.mark.parametrize(
    "edit,match",
    [
        (_set(["inputs", 0, "shape"], [-1, 4]), "invalid type"),
        (_set(["nodes", 0, "outputs", 0, "dtype"], "<U3"), "not the recorded str"),
        (_set(["nodes", 1, "attrs"], {"bogus": 1}), "bogus"),
    ],
    ids=["negative dim", "string dtype", "bogus attribute"],
)
def test_json_graphs_are_checked_before_compiling(edit, match):
    g = tk.Graph.from_json(_json_variant(edit))
    with pytest.raises(ValueError, match=match):
        tk.compile(T.with_graph(g), progress=False)


def test_json_round_trip_still_compiles():
    g = tk.Graph.from_json(T.graph.to_json())
    c = tk.compile(T.with_graph(copy.copy(g)), progress=False)
    _same(c(X, Y), _f(X, Y))
