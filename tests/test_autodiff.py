"""Reverse mode: every gradient rule against central finite differences (float64, table-driven
over the op table), composite functions against jax.grad, backward graphs as Traced, errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import tracekit as tk
from tracekit import ops
from tracekit import tracer as T
from tracekit.autodiff import BackwardTraced, backward

RNG = np.random.default_rng(1234)


# ---------------------------------------------------------------------- helpers
def U(shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape)


def P(shape):  # positive, away from 0
    return RNG.uniform(0.5, 1.5, shape)


def NZ(shape):  # away from 0, both signs
    return RNG.uniform(0.3, 1.0, shape) * RNG.choice([-1.0, 1.0], shape)


def C(shape):
    return U(shape) + 1j * U(shape)


class Lit:
    """A literal (non-traced) input of a node."""

    def __init__(self, value):
        self.value = value


def op_fn(name, args, attrs):
    """A function of the array arguments that records exactly one ``name`` node."""

    def fn(*arrays):
        it = iter(arrays)
        ins = [a.value if isinstance(a, Lit) else next(it) for a in args]
        ctx = T.ctx_of(*[x for x in ins if isinstance(x, T.TracedArray)])
        types = [x.ir_var if isinstance(x, T.TracedArray) else x for x in ins]
        n_out = len(ops.OPS[name].type_rule(types, attrs)) if ops.OPS[name].type_rule else 1
        out = ctx.emit(name, ins, attrs, n_out=n_out)
        return tuple(out) if n_out > 1 else out

    fn.__name__ = name
    return fn


def loss_value(t, args, cts):
    outs = t(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return sum(float(np.real(np.sum(np.asarray(c) * np.asarray(o)))) for c, o in zip(cts, outs))


def numeric_grads(t, args, cts, eps=1e-6):
    """Central differences of Re(sum(ct * f(args))); complex leaves get d/dx - i d/dy."""
    grads = []
    for k, a in enumerate(args):
        a = np.asarray(a)
        if a.dtype.kind not in "fc":
            grads.append(None)
            continue
        gr = np.zeros(a.shape, a.dtype)
        units = (1.0, 1j) if a.dtype.kind == "c" else (1.0,)
        for idx in np.ndindex(a.shape):
            total = 0j
            for u in units:
                vals = []
                for sgn in (1, -1):
                    moved = a.copy()
                    moved[idx] += sgn * eps * u
                    new = list(args)
                    new[k] = moved
                    vals.append(loss_value(t, new, cts))
                d = (vals[0] - vals[1]) / (2 * eps)
                total += d if u == 1.0 else -1j * d
            gr[idx] = total if a.dtype.kind == "c" else total.real
        grads.append(gr)
    return grads


def check_fd(fn, *args, rtol=1e-5, atol=1e-7):
    """tk.vjp of fn's trace equals finite differences, for a random cotangent."""
    t = tk.trace(fn, *args)
    b = tk.vjp(t)
    assert isinstance(b, BackwardTraced)
    outs = t(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    cts = []
    for o in outs:
        dt = np.asarray(o).dtype
        c = U(np.shape(o)) + (1j * U(np.shape(o)) if dt.kind == "c" else 0)
        cts.append(np.asarray(c).astype(dt) if dt.kind in "fc" else np.ones(np.shape(o), dt))
    got = b(*args, *cts)
    want = numeric_grads(t, list(args), cts)
    assert len(got) == len(args)
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None:
            assert g is None
            continue
        assert np.shape(g) == np.shape(w) and np.asarray(g).dtype == w.dtype, (k, g, w)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"argument {k}")
    return b


# ---------------------------------------------------------------------- the table of cases
# op name -> list of (args (arrays or Lit), attrs)
A34, A4, A31, A14 = (3, 4), (4,), (3, 1), (1, 4)


def _unary(sampler=U, shape=A34):
    return [([sampler(shape)], {})]


UNARY_DOMAINS = {
    "negative": U,
    "positive": U,
    "absolute": NZ,
    "exp": U,
    "exp2": U,
    "expm1": U,
    "log": P,
    "log2": P,
    "log10": P,
    "log1p": P,
    "sqrt": P,
    "cbrt": NZ,
    "square": U,
    "reciprocal": NZ,
    "sin": U,
    "cos": U,
    "tan": U,
    "arcsin": lambda s: U(s, -0.8, 0.8),
    "arccos": lambda s: U(s, -0.8, 0.8),
    "arctan": U,
    "sinh": U,
    "cosh": U,
    "tanh": U,
    "arcsinh": U,
    "arccosh": lambda s: U(s, 1.2, 2.0),
    "arctanh": lambda s: U(s, -0.8, 0.8),
    "conjugate": C,
}

CASES: dict = {name: _unary(f) for name, f in UNARY_DOMAINS.items()}
CASES["absolute"] += _unary(lambda s: C(s) + 0.5)
CASES["exp"] += _unary(C)
CASES["sqrt"] += _unary(lambda s: C(s) + 2.0)
CASES["conjugate"] += _unary(U)


def _binary(sa=U, sb=U):
    return [
        ([sa(A34), sb(A34)], {}),
        ([sa(A34), sb(A4)], {}),
        ([sa(A31), sb(A14)], {}),
        ([Lit(0.7), sb(A4)], {}),
        ([sa(A4), Lit(1.3)], {}),
    ]


def _distinct_pair(shape_a, shape_b):
    a, b = U(shape_a), U(shape_b)
    return a, b + np.where(
        np.abs(np.broadcast_to(b, np.broadcast_shapes(shape_a, shape_b)) - a).min() < 1e-3,
        0.01,
        0.0,
    )


CASES.update(
    add=_binary(),
    subtract=_binary(),
    multiply=_binary() + [([C(A34), C(A4)], {}), ([U(A34), C(A4)], {})],
    divide=_binary(U, NZ) + [([C(A4), C(A4) + 2.0], {})],
    remainder=[([U(A34, 2.1, 2.5), U(A4, 1.3, 1.4)], {}), ([U(A4, 2.1, 2.5), Lit(1.3)], {})],
    power=[
        ([P(A34), U(A4)], {}),
        ([P(A34), Lit(3)], {}),
        ([P(A34), Lit(0.5)], {}),
        ([P(A34), Lit(2)], {}),
        ([Lit(1.7), U(A4)], {}),
        ([C(A4) + 2.0, Lit(3)], {}),
    ],
    maximum=[([U(A34), U(A4)], {}), ([U(A4), Lit(0.1)], {})],
    minimum=[([U(A34), U(A4)], {}), ([U(A4), Lit(0.1)], {})],
    fmax=[([U(A34), U(A4)], {})],
    fmin=[([U(A34), U(A4)], {})],
    arctan2=_binary(NZ, NZ),
    hypot=_binary(NZ, NZ),
    copysign=[([NZ(A34), NZ(A4)], {})],
    logaddexp=_binary(),
    where=[([Lit(RNG.random(A34) < 0.5), U(A34), U(A4)], {}), ([U(A34) > 0, U(A31), Lit(2.0)], {})],
    clip=[
        ([U(A34), U(A4, -0.6, -0.2), U(A4, 0.2, 0.6)], {}),
        ([U(A34), Lit(-0.3), Lit(None)], {}),
        ([U(A34), Lit(None), Lit(0.3)], {}),
    ],
    astype=[([U(A34)], {"dtype": np.dtype("complex128")}), ([C(A4)], {"dtype": np.dtype("f8")})],
    real=[([C(A34)], {})],
    imag=[([C(A34)], {})],
    angle=[([C(A34)], {"deg": False}), ([C(A4)], {"deg": True})],
)

_R = {"keepdims": False, "dtype": None}
CASES.update(
    sum=[
        ([U((3, 4, 2))], dict(_R, axis=None)),
        ([U((3, 4, 2))], dict(_R, axis=(1,))),
        ([U((3, 4, 2))], dict(_R, axis=(0, 2), keepdims=True)),
        ([U(())], dict(_R, axis=None)),
        ([C(A34)], dict(_R, axis=(0,))),
    ],
    mean=[([U((3, 4, 2))], dict(_R, axis=(0, 2))), ([U(A34)], dict(_R, axis=None))],
    prod=[
        ([U((3, 4, 2))], dict(_R, axis=(1,))),
        ([U((3, 4))], dict(_R, axis=None)),
        ([np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 2.0], [1.5, 2.0, -1.0]])], dict(_R, axis=(1,))),
        ([U((2, 3, 2))], dict(_R, axis=(0, 2), keepdims=True)),
    ],
    var=[
        ([U((3, 4))], dict(_R, axis=(1,), ddof=0)),
        ([U((3, 4))], dict(_R, axis=None, ddof=1)),
        ([C((3, 4))], dict(_R, axis=(0,), ddof=0)),
    ],
    std=[([U((3, 4))], dict(_R, axis=(0,), ddof=0)), ([U((3, 4))], dict(_R, axis=None, ddof=1))],
    max=[([U((3, 4, 2))], dict(_R, axis=(1,))), ([U((3, 4))], dict(_R, axis=None))],
    min=[([U((3, 4, 2))], dict(_R, axis=(0, 2), keepdims=True)), ([U((5,))], dict(_R, axis=None))],
    cumsum=[([U((3, 4))], {"axis": 1, "dtype": None}), ([U((3, 4))], {"axis": 0, "dtype": None})],
    cumprod=[
        ([U((3, 4))], {"axis": 1, "dtype": None}),
        ([np.array([[1.5, 0.0, 2.0, 0.5], [0.0, 0.0, 1.2, 2.0]])], {"axis": 1, "dtype": None}),
        ([U((4, 2))], {"axis": 0, "dtype": None}),
    ],
)

CASES.update(
    matmul=[
        ([U((3, 4)), U((4, 2))], {}),
        ([U((4,)), U((4, 2))], {}),
        ([U((3, 4)), U((4,))], {}),
        ([U((4,)), U((4,))], {}),
        ([U((2, 3, 4)), U((4, 5))], {}),
        ([U((2, 1, 3, 4)), U((5, 4, 2))], {}),
        ([C((2, 3)), C((3, 2))], {}),
    ],
    dot=[
        ([U((3, 4)), U((4, 2))], {}),
        ([U((2, 3, 4)), U((3, 4, 2))], {}),
        ([U((4,)), U((4,))], {}),
        ([U((3, 4)), U((4,))], {}),
    ],
    einsum=[
        ([U((3, 4)), U((4, 2))], {"subscripts": "ij,jk->ik"}),
        ([U((3, 3))], {"subscripts": "ii->i"}),
        ([U((3, 3))], {"subscripts": "ii"}),
        ([U((3, 4))], {"subscripts": "ij->"}),
        ([U((2, 3, 4)), U((2, 4, 5))], {"subscripts": "...ij,...jk->...ik"}),
        ([U((3, 4)), U((4,))], {"subscripts": "ij,j"}),
        ([U((3,)), U((4,))], {"subscripts": "i,j->ij"}),
        ([U((2, 3, 4))], {"subscripts": "ijk->kij"}),
        ([U((3, 4)), U((3, 4)), U((4,))], {"subscripts": "ij,ij,j->i"}),
        ([U((3, 3, 2))], {"subscripts": "iij->j"}),
    ],
    tensordot=[
        ([U((3, 4)), U((4, 2))], {"axes": ((1,), (0,))}),
        ([U((2, 3, 4)), U((4, 2, 5))], {"axes": ((0, 2), (1, 0))}),
        ([U((3,)), U((2,))], {"axes": ((), ())}),
    ],
    reshape=[([U((3, 4))], {"shape": (2, 6)}), ([U((3, 4))], {"shape": (12,)})],
    transpose=[([U((2, 3, 4))], {"axes": (2, 0, 1)})],
    broadcast_to=[([U((4,))], {"shape": (3, 4)}), ([U((3, 1))], {"shape": (2, 3, 4)})],
    concatenate=[
        ([U((2, 4)), U((3, 4)), U((1, 4))], {"axis": 0}),
        ([U((3, 2)), U((3, 1))], {"axis": 1}),
    ],
    tile=[
        ([U((3,))], {"reps": (2,)}),
        ([U((2, 3))], {"reps": (2, 1, 3)}),
        ([U((2, 3))], {"reps": (2,)}),
    ],
    repeat=[
        ([U((2, 3))], {"repeats": 2, "axis": None}),
        ([U((2, 3))], {"repeats": 3, "axis": 1}),
        ([U((3, 2))], {"repeats": (2, 0, 3), "axis": 0}),
    ],
    roll=[
        ([U((3, 4))], {"shift": 2, "axis": None}),
        ([U((3, 4))], {"shift": (1, -1), "axis": (0, 1)}),
        ([U((3, 4))], {"shift": 1, "axis": 1}),
    ],
    pad=[([U((2, 3))], {"pad_width": ((1, 2), (0, 1)), "constant_value": 0.5})],
    index=[
        ([U((4, 5))], {"idx": (slice(1, None, 2), slice(None, None, -1))}),
        ([U((4, 5))], {"idx": (None, Ellipsis, 2)}),
        ([U((4, 5))], {"idx": (1,)}),
        ([U((4, 5)), Lit(np.array([0, 2, 2, 3]))], {"idx": ("@0",)}),
        ([U((4, 5)), Lit(np.array([[1, 1], [0, 4]]))], {"idx": (slice(1, 3), "@0")}),
    ],
    index_update=[
        ([U((4, 5)), U((5,))], {"idx": (slice(1, 3),)}),
        ([U((4, 5)), U(())], {"idx": (2, slice(None, None, 2))}),
        ([U((4, 5)), U((2, 5)), Lit(np.array([3, 0]))], {"idx": ("@0",)}),
    ],
    index_add=[([U((4, 5)), U((3, 5)), Lit(np.array([1, 1, 3]))], {"idx": ("@0",)})],
    update_real=[([C((3, 4)), U((3, 4))], {})],
    update_imag=[([C((3, 4)), U((4,))], {})],
)

_EYE3 = 3 * np.eye(3)
_SPD = (lambda m: m @ m.T + _EYE3)(U((3, 3)))
_XP = np.sort(U((5,), -1.2, 1.2))
_Q = {"q_dtype": None, "axis": None, "keepdims": False}
_H = {"bins": 4, "range": (-1.0, 1.0), "density": None}
CASES.update(
    float_power=[([P(A34), U(A4)], {}), ([P(A4), Lit(1.5)], {}), ([Lit(1.7), U(A4)], {})],
    inv=[([U((3, 3)) + _EYE3], {}), ([U((2, 3, 3)) + _EYE3], {})],
    solve=[
        ([U((3, 3)) + _EYE3, U((3,))], {}),
        ([U((3, 3)) + _EYE3, U((3, 2))], {}),
        ([U((2, 3, 3)) + _EYE3, U((3,))], {}),
        ([U((3, 3)) + _EYE3, U((2, 3, 1))], {}),
    ],
    det=[([U((3, 3)) + _EYE3], {}), ([U((2, 3, 3))], {})],
    cholesky=[([_SPD], {"upper": False}), ([_SPD + 0.1 * U((3, 3))], {"upper": True})],
    sort=[([U(A34)], {"axis": 1, "kind": None}), ([U(A34)], {"axis": 0, "kind": "stable"})],
    median=[([U(A34)], {"axis": (1,), "keepdims": False}), ([U((3, 5))], {"axis": None})],
    quantile=[
        ([U(A34)], dict(_Q, q=0.3, axis=(1,), method="linear")),
        ([U((5,))], dict(_Q, q=(0.1, 0.5, 0.9), q_dtype="float64", method="linear")),
        ([U((2, 3, 4))], dict(_Q, q=0.6, axis=(0, 2), method="lower", keepdims=True)),
        ([U((6,))], dict(_Q, q=0.5, method="midpoint")),
        ([U((6,))], dict(_Q, q=0.35, method="nearest")),
    ],
    histogram=[
        ([U((10,), -1.5, 1.5), U((10,))], _H),
        ([U((10,), -1.5, 1.5), U((10,))], dict(_H, density=True)),
        ([U((8,))], dict(_H, range=None)),
        ([U((8,))], dict(_H, range=None, density=True)),
    ],
    interp=[
        ([U(A34, -1.5, 1.5), Lit(_XP), U((5,)), Lit(None), Lit(None)], {}),
        ([U(A34, -1.5, 1.5), _XP, U((5,)), U(()), U(())], {}),
        ([U((7,), -1.5, 1.5), _XP, Lit(U((5,))), Lit(-2.0), Lit(None)], {}),
    ],
    convolve=[
        ([U((6,)), U((3,))], {"mode": "full"}),
        ([U((6,)), U((4,))], {"mode": "same"}),
        ([U((3,)), U((5,))], {"mode": "valid"}),
        ([U((4,)), U((7,))], {"mode": "same"}),
    ],
)


def _sinh_grad(x, y, gy):
    return gy * np.cosh(x)


_SINH = tk.python_op(np.sinh, grad_f=_sinh_grad, name="my_sinh")
CASES["python_op"] = [([U(A34)], {"pyop": _SINH, "name": "my_sinh"})]

FD_CASES = [
    pytest.param(name, i, id=f"{name}-{i}")
    for name in sorted(CASES)
    for i in range(len(CASES[name]))
]


def test_every_op_has_a_rule_or_is_declared_non_differentiable():
    """A control op (a loop) has no rule of its own: it is differentiated through its body
    (``autodiff.backward`` runs its iterations' rules, test_loops checks the gradients)."""
    for name, op in ops.OPS.items():
        ruled = op.vjp is not None or op.kind == "control"
        assert ruled != (name in ops.NON_DIFFERENTIABLE), name
    assert ops.NON_DIFFERENTIABLE <= set(ops.OPS)


def test_every_rule_is_checked_by_finite_differences():
    ruled = {name for name, op in ops.OPS.items() if op.vjp is not None}
    assert ruled - set(CASES) == set(), "ops with a gradient rule but no finite-difference case"


@pytest.mark.parametrize("name,i", FD_CASES)
@pytest.mark.filterwarnings("ignore::numpy.exceptions.ComplexWarning")
def test_rule_against_finite_differences(name, i):
    args, attrs = CASES[name][i]
    arrays = [a for a in args if not isinstance(a, Lit)]
    b = check_fd(op_fn(name, args, attrs), *arrays)
    assert name in {n.op for n in b.forward.graph.nodes}


def test_cumprod_division_path(monkeypatch):
    monkeypatch.setattr(ops, "NONDIV_CUMPROD_LIMIT", 0)
    check_fd(op_fn("cumprod", [P((3, 4))], {"axis": 1, "dtype": None}), P((3, 4)))


@pytest.mark.parametrize(
    "name", sorted(["sign", "floor", "greater", "argmax", "rint", "floor_divide"])
)
def test_non_differentiable_ops_give_zero(name):
    x = U((3, 4)) * 3

    def f(x):
        if name in ("greater", "floor_divide"):
            y = getattr(np, name)(x, 0.5)
        elif name == "argmax":
            y = np.argmax(x, axis=1)
        else:
            y = getattr(np, name)(x)
        return np.sum(y * 1.0) + np.sum(x)

    np.testing.assert_array_equal(tk.grad(f)(x), np.ones_like(x))


def test_ties_split_evenly():
    x = np.array([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_allclose(tk.grad(np.max)(x), [0, 0.5, 0.5, 0])
    a, b = np.array([1.0, 2.0]), np.array([1.0, 3.0])
    ga, gb = tk.grad(lambda a, b: np.sum(np.maximum(a, b)), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, [0.5, 0.0])
    np.testing.assert_allclose(gb, [0.5, 1.0])
    # clip: the closed interval passes the gradient to x
    g = tk.grad(lambda x: np.sum(np.clip(x, 0.0, 1.0)))(np.array([-1.0, 0.0, 0.5, 1.0, 2.0]))
    np.testing.assert_allclose(g, [0, 1, 1, 1, 0])
    # NaN propagated by maximum gets the gradient
    g = tk.grad(lambda x: np.nansum(x) if False else np.sum(np.maximum(x, 0.0) * 0 + x))(
        np.array([1.0])
    )
    np.testing.assert_allclose(g, [1.0])


def test_prod_with_zeros_is_exact():
    x = np.array([0.0, 2.0, 3.0])
    np.testing.assert_array_equal(tk.grad(np.prod)(x), [6.0, 0.0, 0.0])
    x = np.array([0.0, 2.0, 0.0])
    np.testing.assert_array_equal(tk.grad(np.prod)(x), [0.0, 0.0, 0.0])


# ---------------------------------------------------------------------- composite functions
jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jnp = jax.numpy


def _mlp(np_):
    def loss(w1, b1, w2, x, y):
        h = np_.maximum(x @ w1 + b1, 0.0)
        out = np_.tanh(h @ w2)
        return np_.mean((out - y) ** 2)

    return loss


def _softmax_xent(np_):
    def loss(logits, onehot):
        m = np_.max(logits, axis=-1, keepdims=True)
        z = logits - m
        lse = np_.log(np_.sum(np_.exp(z), axis=-1, keepdims=True))
        return -np_.sum(onehot * (z - lse)) / logits.shape[0]

    return loss


def _layernorm(np_):
    def f(x, g, b):
        mu = np_.mean(x, axis=-1, keepdims=True)
        var = np_.var(x, axis=-1, keepdims=True)
        y = (x - mu) / np_.sqrt(var + 1e-5) * g + b
        return np_.sum(np_.sin(y) * y)

    return f


def _attention(np_):
    def f(q, k, v):
        s = np_.einsum("bqd,bkd->bqk", q, k) / np_.sqrt(q.shape[-1])
        s = s - np_.max(s, axis=-1, keepdims=True)
        p = np_.exp(s)
        p = p / np_.sum(p, axis=-1, keepdims=True)
        o = np_.einsum("bqk,bkd->bqd", p, v)
        return np_.sum(o * o)

    return f


def _misc(np_):
    def f(x, w):
        a = np_.concatenate([x[:, ::-1], np_.roll(x, 1, axis=0)], axis=1)
        c = np_.cumsum(a, axis=1) * np_.where(a > 0, 1.0, -0.5)
        d = np_.tensordot(c, w, axes=([1], [0]))
        e = np_.pad(d, ((1, 0), (0, 2)))
        return np_.sum(np_.tile(e, (2, 1)) ** 2) + np_.sum(np_.abs(x[np_.array([0, 2, 2])]))

    return f


def _complex(np_):
    def f(z, w):
        y = np_.exp(z) * np_.conj(w) + z * z
        return np_.sum(np_.abs(y) ** 2) + np_.sum(np_.real(y) * np_.angle(w))

    return f


COMPOSITES = {
    "mlp": (_mlp, [(6, 5), (5,), (5, 3), (4, 6), (4, 3)], (0, 1, 2)),
    "softmax_xent": (_softmax_xent, [(4, 5), (4, 5)], (0,)),
    "layernorm": (_layernorm, [(3, 6), (6,), (6,)], (0, 1, 2)),
    "attention": (_attention, [(2, 3, 4), (2, 5, 4), (2, 5, 4)], (0, 1, 2)),
    "misc": (_misc, [(3, 4), (8, 2)], (0, 1)),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_against_jax(name):
    make, shapes, argnums = COMPOSITES[name]
    args = [U(s) for s in shapes]
    got = tk.grad(make(np), argnums=argnums)(*args)
    want = jax.jit(jax.grad(make(jnp), argnums=argnums))(*[jnp.asarray(a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9, atol=1e-12)


def test_complex_against_jax():
    z, w = C((3,)), C((3,)) + 0.5
    got = tk.grad(_complex(np), argnums=(0, 1))(z, w)
    want = jax.jit(jax.grad(_complex(jnp), argnums=(0, 1)))(jnp.asarray(z), jnp.asarray(w))
    for g, w_ in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w_), rtol=1e-9, atol=1e-12)


def test_inplace_writes_against_jax():
    def f(x, v):
        y = x.copy()
        y[1:3] = v
        y[:, 0] *= 2.0
        y[np.array([0, 3])] += np.sin(v)
        return np.sum(y**2)

    def fj(x, v):
        y = x.at[1:3].set(v)
        y = y.at[:, 0].multiply(2.0)
        y = y.at[jnp.array([0, 3])].add(jnp.sin(v))
        return jnp.sum(y**2)

    x, v = U((4, 3)), U((3,))
    got = tk.grad(f, argnums=(0, 1))(x, v)
    want = jax.jit(jax.grad(fj, argnums=(0, 1)))(jnp.asarray(x), jnp.asarray(v))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12)


def test_second_order_against_jax():
    def f(np_):
        return lambda x: np_.sum(np_.sin(x) * x**3 + np_.exp(0.5 * x))

    x = U((4,))
    inner = tk.grad(f(np))
    got = tk.grad(lambda x: np.sum(inner(x) ** 2))(x)
    jinner = jax.grad(f(jnp))
    want = jax.jit(jax.grad(lambda x: jnp.sum(jinner(x) ** 2)))(jnp.asarray(x))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-9)
    # and the plain second derivative of a scalar function
    g2 = tk.grad(tk.grad(lambda s: np.sin(s) * s**2))(0.7)
    np.testing.assert_allclose(g2, jax.jit(jax.grad(jax.grad(lambda s: jnp.sin(s) * s**2)))(0.7))


# ---------------------------------------------------------------------- grad API
def test_grad_argnums_and_pytrees():
    def f(params, x, scale):
        return np.sum((x @ params["w"] + params["b"]) ** 2) * scale

    params = {"w": U((3, 2)), "b": U((2,))}
    x = U((4, 3))
    g = tk.grad(f)(params, x, 2.0)
    assert set(g) == {"w", "b"}
    gw = 2.0 * 2 * x.T @ (x @ params["w"] + params["b"])
    np.testing.assert_allclose(g["w"], gw, rtol=1e-12)
    v, (gp, gs) = tk.value_and_grad(f, argnums=(0, 2))(params, x, 2.0)
    np.testing.assert_allclose(v, f(params, x, 2.0))
    np.testing.assert_allclose(gs, v / 2.0)
    np.testing.assert_allclose(gp["b"], g["b"])


def test_grad_caches_per_signature_and_retraces_on_guards():
    def f(x):
        if np.sum(x) > 0:  # data-dependent branch: baked in, guarded
            return np.sum(x**2)
        return np.sum(-x)

    g = tk.grad(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tk.TracerWarning)
        x = np.ones(3)
        np.testing.assert_allclose(g(x), 2 * x)
        np.testing.assert_allclose(g(x * 3), 6 * x)
        assert g.cache.traces == 1
        np.testing.assert_allclose(g(-x), -np.ones(3))  # guard fails: retrace
        assert g.cache.traces == 2
        np.testing.assert_allclose(g(np.ones(5)), 2 * np.ones(5))
        assert g.cache.traces == 3


def test_grad_sees_captured_arrays_updates():
    w = np.array([1.0, 2.0])
    g = tk.grad(lambda x: np.sum(x * w))
    np.testing.assert_allclose(g(np.zeros(2)), [1.0, 2.0])
    w[:] = [5.0, 6.0]
    np.testing.assert_allclose(g(np.zeros(2)), [5.0, 6.0])


def test_grad_errors():
    with pytest.raises(TypeError, match="real scalar"):
        tk.grad(lambda x: x * 2)(np.ones(3))
    with pytest.raises(TypeError, match="real scalar"):
        tk.grad(lambda x: (np.sum(x), np.sum(x)))(np.ones(3))
    with pytest.raises(TypeError, match="dtype int64"):
        tk.grad(lambda x: np.sum(x * 1.0))(np.arange(3))
    with pytest.raises(TypeError, match="static"):
        tk.grad(lambda x, n: np.sum(x) * n, argnums=1)(np.ones(2), 3)
    with pytest.raises(TypeError, match="out of range"):
        tk.grad(lambda x: np.sum(x), argnums=2)(np.ones(2))
    op = tk.python_op(np.cos, name="opaque_cos")
    with pytest.raises(tk.TraceError, match="opaque_cos.*grad_f"):
        tk.grad(lambda x: np.sum(op(x)))(np.ones(2))


def test_integer_inputs_get_no_gradient_in_vjp():
    t = tk.trace(lambda x, i: x[i] * 2.0, U((4,)), np.array([1, 1, 3]))
    b = tk.vjp(t)
    gx, gi = b(np.ones(4), np.array([1, 1, 3]), np.ones(3))
    np.testing.assert_allclose(gx, [0, 4, 0, 2])
    assert gi is None


# ---------------------------------------------------------------------- the backward graph
def test_backward_is_an_ordinary_traced():
    def f(x, w):
        return np.tanh(x @ w).sum(axis=0)

    x, w = U((4, 3)), U((3, 2))
    t = tk.trace(f, x, w)
    b = tk.vjp(t)
    assert b.forward is t
    text = str(b.graph)
    assert "matmul" in text and "tanh" in text
    ct = U((2,))
    gx, gw = b(x, w, ct)
    # links: every backward Var name maps to a Var of the forward graph
    fwd_names = {v.name for v in t.graph.inputs} | {
        o.name for n in t.graph.nodes for o in n.outputs
    }
    bwd_names = {v.name for v in b.graph.inputs} | {
        o.name for n in b.graph.nodes for o in n.outputs
    }
    assert set(b.links) == bwd_names
    assert set(b.links.values()) <= fwd_names
    # replayed forward values keep their names and sources; gradient nodes keep sources
    assert all(n.source is not None for n in b.graph.nodes)
    # generated code runs and agrees
    ns: dict = {}
    exec(b.code, ns)
    fn = ns[b.graph.name]
    np.testing.assert_allclose(fn(x, w, ct)[0], gx)
    # JSON round trip
    g2 = tk.Graph.from_json(b.graph.to_json())
    assert g2.key() == b.graph.key()
    # optimisation keeps .forward and .links
    ob = tk.optimize(b)
    assert isinstance(ob, BackwardTraced) and ob.forward is t and ob.links
    for a, c in zip(ob(x, w, ct), (gx, gw)):
        np.testing.assert_allclose(a, c, rtol=1e-12)
    # the backward graph can itself be differentiated (second order via vjp)
    bb = tk.vjp(b)
    assert len(bb(x, w, ct, np.ones((4, 3)), np.ones((3, 2)))) == 3
    json.dumps(b.links)


def test_backward_links_and_gradient_of_place_the_rendered_gradients():
    """What the forward+backward picture draws on each forward op's row: every gradient node
    links to the op whose rule made it, even a view (broadcast_to) recorded only when a later
    rule reads it; each output names the forward value it is the gradient (or value) of."""
    t = tk.trace(lambda x: np.sum(np.exp(np.sin(x) * 2.0)), np.linspace(0, 1, 3))
    sin, double, exp, total = (n.outputs[0].name for n in t.graph.nodes)
    b = tk.vjp(t)
    made_by = {n.outputs[0].name: n.op for n in b.graph.nodes}
    rules = {}
    for name, fwd in b.links.items():
        if name not in made_by or name == fwd:
            continue  # inputs and replayed forward values
        rules.setdefault(fwd, []).append(made_by[name])
    assert rules == {
        total: ["broadcast_to"],
        exp: ["multiply"],
        double: ["multiply"],
        sin: ["cos", "multiply"],
    }
    assert b.gradient_of == ("x",)
    assert tk.optimize(b).gradient_of == ("x",)
    t2 = tk.trace(lambda x, y: np.sum(x * y), np.ones(2), np.ones(2))
    assert backward(t2, [1], with_value=True).gradient_of == (t2.graph.outputs[0].name, "y")


def test_vjp_of_captured_weights_and_constants():
    class Layer:
        def __init__(self):
            self.w = U((3, 2))

        def __call__(self, x):
            return np.sum(np.sin(x @ self.w) * np.array([1.0, 2.0]))

    layer = Layer()
    x = U((4, 3))
    t = tk.trace(layer, x)
    b = tk.vjp(t)
    kinds = [s.kind for s in b.graph.specs]
    assert kinds.count("capture") == 1
    (gx,) = b(x, np.ones(()))
    want = (np.cos(x @ layer.w) * np.array([1.0, 2.0])) @ layer.w.T
    np.testing.assert_allclose(gx, want, rtol=1e-12)
    layer.w = layer.w * 2  # rebinding is seen by the backward graph too
    (gx2,) = b(x, np.ones(()))
    np.testing.assert_allclose(gx2, (np.cos(x @ layer.w) * np.array([1.0, 2.0])) @ layer.w.T)


def test_float32_gradients_stay_float32():
    x = U((3, 4)).astype(np.float32)
    w = U((4,)).astype(np.float32)
    g = tk.grad(lambda x, w: np.sum(np.tanh(x @ w) * 0.5), argnums=(0, 1))(x, w)
    assert all(a.dtype == np.float32 for a in g)


# ---------------------------------------------------------------------- compiled backward graphs


def _compiled_cases():
    mlp = _mlp(np)
    return {
        "mlp": (mlp, [U((6, 5)), U((5,)), U((5, 3)), U((4, 6)), U((4, 3))]),
        "gather_cumprod": (
            lambda x: np.sum(np.cumprod(x[np.array([0, 0, 3, 1])] + 1.0) ** 2),
            [U((5,))],
        ),
        "python_op": (
            lambda x: np.sum(np.tanh(_SINH(x * 2.0)) * np.exp(x)),
            [U((3, 4))],
        ),
    }


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("name", ["mlp", "gather_cumprod", "python_op"])
def test_compiled_backward_equals_interpreted(name, target):
    if target == "cuda":
        pytest.importorskip("tracekit.backends.cuda")
    fn, args = _compiled_cases()[name]
    t = tk.trace(fn, *args)
    b = tk.vjp(t)
    c = tk.compile(b, target=target, progress=False)
    ct = np.ones(())
    for got, want in zip(c(*args, ct), b(*args, ct)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _slices_read(x):
    return np.sum(np.sin(x[0]) * x[1]) + np.sum(x[1:3] ** 2) + np.sum(x[3, ::2])


def _slices_and_whole_read(x):
    return _slices_read(x) + np.sum(x * 0.5)


@pytest.mark.parametrize("fn", [_slices_read, _slices_and_whole_read])
def test_gradients_of_slices_add_into_one_cotangent_at_their_slices(fn):
    """The gradient of ``x[0]`` (of ``x[1:3]``, ``x[3, ::2]``) is zero but in its slice: it
    adds into the cotangent ``x`` already has there alone (a read, a sum and a store of the
    slice), not as an array of zeros of ``x``'s shape, written at the slice, added whole. One
    array of zeros where no whole-array gradient comes; the result is NumPy's. (Slices of at
    most an eighth of ``x``, ``autodiff.SCATTER_AT_MOST``: larger ones add as whole arrays,
    read as pads by the kernel adding them, ``test_offsets.py``.)"""
    x = U((16, 6))
    b = tk.vjp(tk.trace(fn, x))
    whole = [n for n in b.graph.nodes if n.out.shape == x.shape and not ops.OPS[n.op].store]
    assert not [n for n in whole if n.op == "add"], str(b.graph)
    zeros = [n for n in whole if n.op == "full"]
    assert len(zeros) == (1 if fn is _slices_read else 0), str(b.graph)
    want = np.zeros_like(x)
    want[0] += np.cos(x[0]) * x[1]
    want[1] += np.sin(x[0])
    want[1:3] += 2 * x[1:3]
    want[3, ::2] += 1
    want += 0.5 if fn is _slices_and_whole_read else 0.0
    c = tk.compile(b, target="cpu", progress=False)
    for (got,) in (b(x, np.ones(())), c(x, np.ones(()))):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


# ---------------------------------------------------------------------- values computed when read
def _stencil_loss(x):
    a = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) / 3.0
    return np.sum(np.sin(a[:-2] * a[2:]))


def test_a_gradients_trace_computes_no_value_it_does_not_read(monkeypatch):
    """The backward pass and a gradient inlined in another trace record their ops with
    deferred values (``TraceContext.deferring``): tracing ``tk.grad`` computes none of them;
    the trace's answer computes each once, as NumPy does."""
    from tracekit.tracer import array

    forced = []
    real = array.force
    monkeypatch.setattr(array, "force", lambda t: forced.append(t) or real(t))
    x = U((9, 12))
    t = tk.trace(tk.grad(_stencil_loss), x)
    assert forced == []
    assert sum(n.op == "cos" for n in t.graph.nodes) == 1  # the backward's own ops are there
    from tracekit.traced import trace_answering

    t, answer = trace_answering(tk.grad(_stencil_loss), x)
    assert forced  # the answer's values: computed now
    np.testing.assert_array_equal(t.answer(answer, (x,)), tk.grad(_stencil_loss)(x))


def test_a_write_after_a_gradient_in_a_trace_does_not_reach_its_values():
    """Values not computed yet are computed before a write into an array they read: the
    trace's gradient is of ``y`` as it was, NumPy's."""
    from tracekit.traced import trace_answering

    def f(x):
        y = x * 1.0
        g = tk.grad(_stencil_loss)(y)
        y[:, 0] = 100.0  # after the gradient: it must not see this
        return g * 2.0, y

    x = U((9, 12))
    want = 2.0 * tk.grad(_stencil_loss)(x.copy())
    t, answer = trace_answering(f, x)
    got, y = t.answer(answer, (x,))
    np.testing.assert_array_equal(got, want)
    assert (y[:, 0] == 100.0).all()
    np.testing.assert_array_equal(t(x)[0], want)


def test_jit_of_a_grad_whose_loss_reads_arrays_in_its_closure():
    """An array the loss reads from its closure (in a list) is captured by the jitted gradient
    too, and read at each call, in both tiers."""

    def make():
        ws = [np.ones(4)]

        def loss(x):
            return np.sum(ws[0] * np.sin(x))

        return loss, ws

    loss, ws = make()
    x = np.linspace(0.0, 1.0, 4)
    for wait in (True, False):
        f = tk.jit(tk.grad(loss), wait=wait, progress=False)
        np.testing.assert_allclose(f(x), np.cos(x), rtol=1e-15)
        f.wait()
        ws[0] = np.full(4, 3.0)
        np.testing.assert_allclose(f(x), 3.0 * np.cos(x), rtol=1e-15)
        ws[0] = np.ones(4)
