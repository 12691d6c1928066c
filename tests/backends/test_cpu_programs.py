"""CPU backend: whole programs against the interpreter, and what fusion makes of them.

hypothesis draws small programs (bounded: each example is one numba compile) built from exact
ops, so the compiled results must equal the interpreter's bit for bit: elementwise chains with
broadcasting, views (reversed and transposed operands, size-1 slices) between ops, matmuls with
elementwise consumers, reductions feeding elementwise consumers (softmax/layernorm shapes), and
in-place writes (into slices, through views, into the inputs, where the write-back is checked).
Fixed programs cover the movement, indexing, creation and linear-algebra ops (host and view steps
between kernels), matmul epilogues, and the fusion decisions (softmax, layernorm, logsumexp,
rmsnorm: one kernel each).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.run import both, compiled, quiet
from helpers.values import with_layout
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cpu import assert_matches, values

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning"),
    pytest.mark.filterwarnings("ignore::tracekit.TracerWarning"),
]

SETTINGS = settings(
    max_examples=10,  # each example compiles a graph (about a second)
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
N = 5  # square base shape: transposes keep operands broadcastable
DTYPES = ["int32", "int64", "uint8", "float32", "float64", "bool"]


# ---------------------------------------------------------------------- random programs
def _binary(name):
    return {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b if a.dtype != bool or b.dtype != bool else a ^ b,
        "mul": lambda a, b: a * b,
        "max": np.maximum,
        "min": np.minimum,
        "fmin": np.fmin,
        "less": lambda a, b: a < b,
        "eq": lambda a, b: a == b,
        "where": lambda a, b: np.where(a > b, a, b),
        "floordiv": lambda a, b: a // b if a.dtype != bool or b.dtype != bool else a & b,
    }[name]


UNARY = {
    "neg": lambda a: -a if a.dtype != bool else ~a,
    "abs": np.abs,
    "square": np.square,
    "floor": lambda a: np.floor(a) if a.dtype.kind == "f" else a + 1,
    "sqrt": lambda a: np.sqrt(a) if a.dtype.kind == "f" else a,
    "f32": lambda a: a.astype(np.float32),
    "i16": lambda a: a.astype(np.int16),
}
VIEWS = {
    "flip": lambda a: a[::-1] if a.ndim else a,
    "flip-inner": lambda a: a[..., ::-1] if a.ndim else a,
    "T": lambda a: a.T,
    "row": lambda a: a[1:2] if a.ndim and a.shape[0] > 1 else a,
    "col": lambda a: a[..., 2:3] if a.ndim and a.shape[-1] > 2 else a,
    "step-pair": lambda a: a[::2][:1] if a.ndim else a,
}
SHAPES = [(N, N), (N,), (1, N), (N, 1), ()]


@st.composite
def programs(draw, reductions=False, writes=False):
    n_in = draw(st.integers(1, 3))
    shapes = [(N, N)] + [draw(st.sampled_from(SHAPES)) for _ in range(n_in - 1)]
    dtypes = [draw(st.sampled_from(DTYPES)) for _ in range(n_in)]
    kinds = ["unary", "binary", "binary", "view", "matmul"]
    if reductions:
        kinds += ["reduce", "reduce", "center"]
    if writes:
        kinds += ["slice_add", "view_write", "input_write"]
    prog = []
    for k in range(draw(st.integers(2, 6))):
        size = n_in + k
        kind = draw(st.sampled_from(kinds))
        i = draw(st.integers(0, size - 1))
        j = draw(st.integers(0, size - 1))
        if kind == "unary":
            prog.append((kind, draw(st.sampled_from(sorted(UNARY))), i))
        elif kind == "binary":
            prog.append(
                (
                    kind,
                    draw(
                        st.sampled_from(
                            [
                                "add",
                                "sub",
                                "mul",
                                "max",
                                "min",
                                "fmin",
                                "less",
                                "eq",
                                "where",
                                "floordiv",
                            ]
                        )
                    ),
                    i,
                    j,
                )
            )
        elif kind == "view":
            prog.append((kind, draw(st.sampled_from(sorted(VIEWS))), i))
        elif kind == "matmul":  # BLAS on the host, its consumers in kernels (an epilogue)
            prog.append((kind, i, j))
        elif kind in ("reduce", "center"):
            op = draw(st.sampled_from(["max", "min", "argmax", "sum-int", "any"]))
            prog.append((kind, op, i, draw(st.sampled_from([0, -1, None]))))
        else:
            prog.append((kind, i, j))
    return shapes, dtypes, prog


def _reduce(op, a, axis, keepdims):
    if a.ndim == 0:
        axis = None
    if op == "sum-int":  # integer sums are exact
        return np.sum(
            a.astype(np.int64) if a.dtype.kind == "f" else a, axis=axis, keepdims=keepdims
        )
    if op == "argmax":
        return np.argmax(a, axis=axis, keepdims=keepdims)
    return getattr(np, op)(a, axis=axis, keepdims=keepdims)


def execute(prog, *inputs):
    """The program on NumPy arrays or traced arrays alike; returns every value it made."""
    pool = list(inputs)
    for ins in prog:
        kind = ins[0]
        if kind == "unary":
            pool.append(UNARY[ins[1]](pool[ins[2]]))
        elif kind == "binary":
            pool.append(_binary(ins[1])(pool[ins[2]], pool[ins[3]]))
        elif kind == "view":
            pool.append(VIEWS[ins[1]](pool[ins[2]]))
        elif kind == "matmul":
            pool.append(pool[ins[1]] @ pool[ins[2]])
        elif kind == "reduce":
            pool.append(_reduce(ins[1], pool[ins[2]], ins[3], False))
        elif kind == "center":  # a per-row value used against its rows (softmax's shape)
            a = pool[ins[2]]
            r = _reduce(ins[1], a, ins[3], True)
            pool.append(a - r if a.dtype != bool and r.dtype != bool else a ^ r)
        elif kind == "slice_add":  # y = copy; y[1:3] += value
            y = np.copy(pool[ins[1]])
            if y.ndim and y.shape[0] >= 3:
                v = pool[ins[2]]
                v = v[1:3] if v.ndim == y.ndim and v.shape[0] == y.shape[0] else v
                with quiet():
                    y[1:3] += np.asarray(v).astype(y.dtype) if hasattr(v, "astype") else v
            pool.append(y)
        elif kind == "view_write":  # a write through a transposed, reversed view of a copy
            y = np.copy(pool[ins[1]])
            if y.ndim == 2:
                t = y.T[::-1]
                t[0] = 3
            pool.append(y)
        elif kind == "input_write":  # into the first argument: written back after the call
            x = pool[0]
            x[..., 1] = pool[ins[2]].astype(x.dtype)[..., :1] if np.ndim(pool[ins[2]]) else 7
            pool.append(x + 0 if x.dtype != bool else ~x)
    return tuple(pool[len(inputs) :])


def _inputs(shapes, dtypes, seed):
    rng = np.random.default_rng(seed)
    return [values(rng, s, d, "small") for s, d in zip(shapes, dtypes)]


def check_program(shapes, dtypes, prog, layouts=("c", "neg")):
    ex = _inputs(shapes, dtypes, 0)
    try:
        with quiet():
            execute(prog, *[np.copy(a) for a in ex])
    except (ValueError, TypeError, IndexError):
        return  # not a valid NumPy program (broadcasting, dtypes): nothing to compile
    c, t = compiled(lambda *a: execute(prog, *a), *ex)
    new = _inputs(shapes, dtypes, 1)
    for layout in layouts:
        args = [with_layout(a, layout) for a in new]
        got, want, a1, a2 = both(c, t, *args)
        assert_matches(got, want, None, "fast", f"{prog} {layout}")
        assert_matches(a1, a2, None, "fast", f"inputs after the call {layout}")


@SETTINGS
@given(programs())
def test_random_elementwise_programs(p):
    check_program(*p)


@SETTINGS
@given(programs(reductions=True))
def test_random_programs_with_reductions(p):
    check_program(*p)


@SETTINGS
@given(programs(writes=True))
def test_random_programs_with_inplace_writes(p):
    check_program(*p)


# ---------------------------------------------------------------------- fixed programs
def test_writes_into_inputs_and_through_views_are_written_back():
    def fn(x, y):
        x[1:3] += y[0]  # into an input
        v = y.T[::-1]  # a view of another input
        v[0] *= 2
        z = x * 1.5
        z[::2] = -z[::2]  # into a fresh array through a strided slice
        return z, x.sum(axis=0)

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((4, 6)), rng.standard_normal((6, 6))
    c, t = compiled(fn, x.copy(), y.copy())
    for layout in ("c", "nc"):
        got, want, a1, a2 = both(c, t, with_layout(x, layout), with_layout(y, layout))
        assert_matches(got, want, ["multiply", "sum"])
        assert_matches(a1, a2, None, where="inputs after the call")
        assert not np.array_equal(a1[0], x)  # the write really happened


def test_aliased_inputs():
    """The same array passed twice, read and written: as NumPy (the interpreter) does it."""

    def fn(a, b):
        a += 1
        return a * b

    x = np.arange(6.0)
    c, t = compiled(fn, x.copy(), x.copy())
    x1, x2 = np.arange(6.0), np.arange(6.0)
    with quiet():
        got = c(x1, x1)
        want = t(x2, x2)
    assert_matches(got, want, "multiply")
    assert_matches(x1, x2, None, where="the aliased input")


def movement_program(x, w, i):
    """Every op that runs as a view or a NumPy call, with kernels reading and feeding them."""
    a = x.reshape(6, 4) + 1
    b = np.transpose(x) * 2
    bc = np.broadcast_to(x[0], (3, 6)) - 1
    cat = np.concatenate([x, x[::-1]], axis=0) * 2
    tl = np.tile(x[:1], (2, 1)) + np.repeat(x[:1], 2, axis=0)
    rl = np.roll(x, 2, axis=1) - np.pad(x, 1)[1:-1, 1:-1]
    mm = x @ w + 1
    dt_ = np.dot(x, w) * 2 + np.einsum("ij,jk->ik", x, w) - np.tensordot(x, w, 1)
    g = x[i] * 3 + x[1:4, ::2][:, :1]
    z = x.copy()
    z[i, 1:] += 1  # index_update
    np.add.at(z, i, x[0])  # index_add
    cr = np.arange(6) * x[0] + np.linspace(0, 1, 6).astype(x.dtype) + np.eye(6, 6, 1) @ w.T[0]
    out = [a, b, bc, cat, tl, rl, mm, dt_, g, z * 2, cr, np.full((3, 2), 7, x.dtype) + w[:2].T]
    if x.dtype.kind == "c":
        u = x.copy()
        u.real[1:] = 2.0  # update_real
        u.imag *= -1  # update_imag
        out.append(u + 1)
    return tuple(out)


def movement_inputs(dt):
    rng = np.random.default_rng(5)
    return values(rng, (4, 6), dt, "small"), values(rng, (6, 3), dt, "small"), np.array([2, 0, 3])


@pytest.mark.parametrize("dt", ["float32", "int64", "complex128"])
def test_movement_indexing_creation_and_linalg_between_kernels(dt):
    x, w, i = movement_inputs(dt)
    fn = movement_program
    c, t = compiled(fn, x, w, i)
    ops = {n.op for n in t.graph.nodes}
    assert ops >= {
        "reshape",
        "transpose",
        "broadcast_to",
        "concatenate",
        "tile",
        "repeat",
        "roll",
        "pad",
        "matmul",
        "dot",
        "einsum",
        "tensordot",
        "index",
        "index_update",
        "index_add",
        "arange",
        "linspace",
        "eye",
    }
    assert c.kernels and any(s.kind == "view" for s in c.plan.steps)
    assert any(s.kind == "host" for s in c.plan.steps)
    for layout in ("c", "neg"):
        got, want, a1, a2 = both(c, t, with_layout(x, layout), with_layout(w, layout), i)
        assert_matches(got, want, None)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_matmul_with_fused_epilogue(dt):
    rng = np.random.default_rng(6)
    x = values(rng, (8, 16), dt, "small")
    w, b = values(rng, (16, 12), dt, "small"), values(rng, (12,), dt, "small")

    def mlp(x, w, b):
        h = x @ w + b
        return np.maximum(h, 0) * 2, (h * h).max(axis=-1), np.matmul(x[None], w)[0] - b

    c, t = compiled(mlp, x, w, b)
    assert any(s.kind == "host" and s.nodes[0].op == "matmul" for s in c.plan.steps)
    for layout in ("c", "nc"):
        got, want, _, _ = both(c, t, with_layout(x, layout), w, b)
        assert_matches(got, want, None)


def test_python_scalar_and_numpy_scalar_inputs():
    def fn(x, s, k):
        return x * s + k, (x > s).sum()

    x = np.linspace(-2, 2, 7, dtype=np.float32)
    c, t = compiled(fn, x, 0.5, np.float32(3))
    for s, k in ((0.5, np.float32(3)), (-1.25, np.float32(-2))):
        got, want, _, _ = both(c, t, x, s, k)
        assert_matches(got, want, None)


# ---------------------------------------------------------------------- fusion decisions
def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(x, g, b):
    m = x.mean(axis=-1, keepdims=True)
    v = x.var(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5) * g + b


def _logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True)) + m


def _rmsnorm(x, g):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


FUSED = {
    "softmax": (_softmax, 1),
    "layernorm": (_layernorm, 3),
    "logsumexp": (_logsumexp, 1),
    "rmsnorm": (_rmsnorm, 2),
}


@pytest.mark.parametrize("name", FUSED)
def test_row_programs_compile_to_one_kernel(name):
    fn, n_args = FUSED[name]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    args = [x] + [rng.standard_normal(96).astype(np.float32) for _ in range(n_args - 1)]
    c, t = compiled(fn, *args)
    assert len(c.kernels) == 1, c.plan
    (k,) = c.kernels
    assert k.kind == "row"
    assert [s.kind for s in c.plan.steps] == ["kernel"], c.plan
    assert not c.plan.refusals, c.plan
    assert "1 fused kernel" in str(c.plan)
    got, want, _, _ = both(c, t, *args)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_gelu_chain_is_one_elementwise_kernel():
    def gelu(x):
        return 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))

    x = np.random.default_rng(8).standard_normal(5000).astype(np.float32)
    c, t = compiled(gelu, x)
    assert len(c.kernels) == 1 and c.kernels[0].kind == "elementwise"
    assert len(c.kernels[0].nodes) >= 7
    assert "prange(" not in c.source  # 5000 elements: below the parallel threshold
    got, want, _, _ = both(c, t, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_refused_fusions_carry_reasons():
    def fn(x, w):
        h = np.exp(x) @ w  # an elementwise producer of a matmul: BLAS between kernels
        s = h.sum(axis=0)  # a reduction over another axis than the consumer below
        return h - h.max(axis=1, keepdims=True) + s

    rng = np.random.default_rng(9)
    c, t = compiled(fn, rng.standard_normal((6, 5)), rng.standard_normal((5, 4)))
    assert c.plan.refusals
    for r in c.plan.refusals:
        assert r.reason and str(r.node.out.name) in str(r)
    text = str(c.plan)
    assert "refused fusions:" in text and "BLAS" in text
    got, want, _, _ = both(c, t, rng.standard_normal((6, 5)), rng.standard_normal((5, 4)))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)  # exp: within its 1 ulp


def test_softmax_rows_of_every_length():
    for n in (3, 32, 47):  # vectorised accumulators: whole vectors, then a tail
        x = np.random.default_rng(n).standard_normal((3, n))
        c, t = compiled(_softmax, x)
        got, want, _, _ = both(c, t, x)
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_float32_sums_in_blocks_are_as_accurate_as_numpys():
    """float32 sums add up in float32 within blocks of emit_cpu.BLOCK elements, then in float64:
    rows and whole arrays around the block edges, checked against a float64 sum, with NaN and
    infinities still propagated by max and sum."""
    rng = np.random.default_rng(7)
    for n in (3, 511, 512, 513, 1537, 40_000):
        x = (rng.standard_normal((3, n)) * 100 + 1).astype(np.float32)
        x[1, n // 2] = np.nan
        x[2, 0] = np.inf
        c, t = compiled(lambda x: (x.sum(axis=1), x.max(axis=1), x[0].sum(), x[0].mean()), x)
        rows, maxes, whole, mean = c(x)
        exact = x.astype(np.float64).sum(axis=1)
        scale = np.abs(x[0]).astype(np.float64).sum()
        assert abs(rows[0] - exact[0]) <= 1e-6 * scale, n
        assert abs(whole - exact[0]) <= 1e-6 * scale, n
        assert abs(mean - exact[0] / n) <= 1e-6 * scale / n, n
        assert np.isnan(rows[1]) and np.isnan(maxes[1]), n
        assert rows[2] == np.inf and maxes[2] == np.inf, n
        np.testing.assert_array_equal(maxes[0], x[0].max())


def test_float32_sums_whose_blocks_overflow_are_added_up_again_in_float64():
    """A block's float32 partial sums can overflow where the sum does not (fuzz seed 25500000:
    nan where NumPy gives inf): such a block is added up again in float64, rows and whole
    arrays alike, so that the result is the float64 sum's, rounded to float32."""
    n = 1300  # blocks of 512, 512 and 276
    x = np.zeros((3, n), np.float32)
    x[0, [5, 600]] = np.inf  # +inf beside two large negatives in one block: +inf
    x[0, [7, 9]] = -3.0e38
    x[1, ::2], x[1, 1::2] = 3.0e38, -3.0e38  # overflows in float32 partial sums
    x[1, 1001] = -1.0e38  # exact in float64 in any order: 3e38 - 1e38
    x[2] = np.linspace(-1, 1, n, dtype=np.float32)  # blocks that do not overflow

    def fn(x):
        return (x * 1.0).sum(axis=1), (x[0] * 1.0).sum(), (x[1] * 1.0).sum()

    c, t = compiled(fn, x)
    rows, first, second = c(x)
    exact = x.astype(np.float64).sum(axis=1)
    assert rows[0] == np.inf and first == np.inf
    assert rows[1] == second == np.float32(exact[1]) and np.isfinite(exact[1])
    assert abs(rows[2] - exact[2]) <= 1e-6 * np.abs(x[2]).sum()


def test_a_float16_number_read_by_a_kernel_of_a_wider_dtype():
    """numba has no float16 scalars: a float16 constant (``np.imag`` of a float16 number, 0)
    that an op computing in float64 reads is spelled as its float32 value (fuzz seed
    25900171: "numba said: float16")."""

    def fn(x0, x1):
        zero = np.imag(np.min(np.rint(x1)))  # float16
        return np.power(zero, x0.reshape(1, 1)[:, [0, -1, 0]]), np.rint(x1) * x0

    x0, x1 = np.array(3, np.uint64), np.array(-2, np.int8)
    c, t = compiled(fn, x0, x1)
    got, want, _, _ = both(c, t, x0, x1)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_divisions_by_constants_are_numpys_quotients(dtype):
    """``x / c`` of a literal: NumPy's bits, signed zeros, NaN, infinities, subnormal
    dividends and the largest floats included, in elementwise and reduction kernels (a
    product by the reciprocal and its fma correction was tried: the same bits, no faster on
    AMD EPYC; see benchmarks/README.md)."""
    rng = np.random.default_rng(11)
    info = np.finfo(dtype)
    x = (rng.standard_normal(40_000) * 100).astype(dtype)
    x[:6] = [0.0, -0.0, 3.0, -21.0, 1.0, 5e-5]

    def fn(x):
        y = x / 3.0 - x / 0.1 + (x * 2) / 7
        return y, (x / 6.0).sum(), np.maximum(x / 1e-3, x)

    c, t = compiled(fn, x)
    for rare in (None, np.nan, np.inf, info.smallest_subnormal * 5, info.max, -np.inf):
        v = x.copy()
        if rare is not None:
            v[7] = rare
        got = c(v)
        with np.errstate(all="ignore"):
            want = fn(v)
        for g, w in (got[0], want[0]), (got[2], want[2]):
            np.testing.assert_array_equal(g, w, err_msg=str(rare))
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=str(rare))
        scale = np.abs(x / 6.0).sum()  # (the sum's rounding; NaN equal)
        np.testing.assert_allclose(got[1], want[1], rtol=0, atol=1e-6 * scale, err_msg=str(rare))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "bool"])
def test_reductions_over_axes_of_size_one(dtype):
    """Reduced axes of size 1 collapse away: a row group with nothing left to loop over."""
    x = np.random.default_rng(3).standard_normal((1, 6, 1)) > 0 if dtype == "bool" else None
    if x is None:
        x = (np.random.default_rng(3).standard_normal((1, 6, 1)) * 10).astype(dtype)

    def fn(x):
        return (
            x.sum(axis=0),
            x.max(axis=(0, 2), keepdims=True),
            np.var(x, axis=-1),
            x.argmin(axis=0),
            x.mean(axis=2) * 2,
        )

    c, t = compiled(fn, x)
    got, want, _, _ = both(c, t, x)
    assert_matches(got, want, None)


def test_int64_scans_wrap_as_numpy():
    """Scans accumulate as their reductions do: int64 overflow wraps (no undefined signed
    overflow in the kernel)."""
    x = np.array([[2**62, 2**62, 2**62, 5], [-(2**63), -1, 3, 2**40]], np.int64)
    c, t = compiled(lambda x: (np.cumsum(x, axis=1), np.cumprod(x, axis=1), x.cumsum()), x)
    got, want, _, _ = both(c, t, x)
    assert_matches(got, want, None)
    with quiet():
        np.testing.assert_array_equal(got[0], np.cumsum(x, axis=1))


def test_kernels_of_one_compiled_function_run_in_order():
    """A row kernel over axis 1 reads what a row kernel over axis 0 wrote, in one compiled
    function (the same array handed to both under two names). numba's own loop fusion merged
    the two parallel loops, so the second read rows the first had not written: NaN on a first
    call, the previous call's values on later ones."""
    import tracekit as tk

    def split(x):
        return (x - x.sum(axis=0)).sum(axis=1)

    rng = np.random.default_rng(0)
    x, x2 = rng.standard_normal((2, 1024, 1024)).astype(np.float32)
    c = tk.compile(tk.trace(split, x))
    assert len(c.kernels) == 2
    for a in (x, x2, x):
        np.testing.assert_allclose(c(a), split(a.astype(np.float64)), rtol=1e-4, atol=1e-2)
