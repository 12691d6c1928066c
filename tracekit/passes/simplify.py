"""Algebraic simplification, as a table of local rewrite rules per op.

Each rule takes (node, producers) and returns a replacement: a Var, a list of new nodes whose
last output replaces the node's, or None. Rules only fire when the result is exactly equal
(bit for bit) to NumPy's, except ``x ** 3``, which becomes two multiplies (within 1 ulp).
(Other constant powers are the code generators' to reduce: ``scalar._constant_power``.)
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ir import Graph, Node, Var
from ..ops import OPS
from .rewrite import rebuild, resolve


def _is(x, value) -> bool:
    return not isinstance(x, Var) and np.ndim(x) == 0 and not isinstance(x, str) and x == value


def _same_type(node, x) -> bool:
    """``x`` can stand for the node's output: same shape, dtype and weakness (NEP 50)."""
    out = node.out
    return (
        isinstance(x, Var) and x.shape == out.shape and x.dtype == out.dtype and x.weak == out.weak
    )


def _zero(y):
    """ "+0" or "-0" for a real scalar literal equal to zero, else None."""
    if isinstance(y, Var) or np.ndim(y) != 0 or isinstance(y, str | complex | np.complexfloating):
        return None
    if y != 0:
        return None
    return "-0" if np.signbit(y) else "+0"


_fresh = itertools.count()


def _new(node, op, inputs, attrs=None, like=None):
    like = like or node.out
    out = Var(f"{node.out.name}_s{next(_fresh)}", like.shape, like.dtype, like.weak)
    return Node(op, tuple(inputs), attrs or {}, (out,), node.source, node.scope)


def _power(node, prod):
    x, p = node.inputs
    if not isinstance(x, Var) or isinstance(p, Var) or np.ndim(p) != 0 or x.dtype.kind == "c":
        return None
    if x.dtype != node.out.dtype:
        return None
    if _is(p, 1):
        return x
    if _is(p, 2):
        return [_new(node, "multiply", (x, x))]
    if _is(p, 3):
        sq = _new(node, "multiply", (x, x))
        return [sq, _new(node, "multiply", (sq.out, x))]
    if _is(p, 0.5) and x.dtype.kind == "f":
        return [_new(node, "sqrt", (x,))]
    return None


def _reciprocal_of_power_of_two(c, dtype):
    """``1 / c`` in ``c``'s own type where ``c`` is a real literal ``±2**k`` whose reciprocal
    is a normal number of ``dtype`` (then ``x / c`` and ``x * (1 / c)`` both scale ``x``
    exactly, or round the same exact value once), else None."""
    if isinstance(c, bool) or not isinstance(c, float | int | np.floating):
        return None  # a strong NumPy integer would promote differently from the float
    v = float(c)
    if not np.isfinite(v) or v == 0 or np.frexp(v)[0] not in (0.5, -0.5):
        return None
    info = np.finfo(dtype)
    if not info.tiny <= abs(v) <= info.max or not info.tiny <= 1 / abs(v) <= info.max:
        return None
    return type(c)(1 / v) if isinstance(c, np.floating) else 1 / v


def _divide(node, prod):
    """``x / 2**k`` is ``x * 2**-k`` bit for bit; a multiplication costs a fraction of a
    division."""
    x, c = node.inputs
    if not isinstance(x, Var) or isinstance(c, Var) or np.ndim(c) != 0:
        return None
    if x.dtype.kind != "f" or node.out.dtype != x.dtype:
        return None
    r = _reciprocal_of_power_of_two(c, x.dtype)
    return None if r is None else [_new(node, "multiply", (x, r))]


def _multiply(node, prod):
    a, b = node.inputs
    for x, y in ((a, b), (b, a)):
        # not complex: (a+bj)*(1+0j) turns inf imaginary parts into nan real parts
        if _is(y, 1) and _same_type(node, x) and x.dtype.kind in "biuf":
            return x
    return None


def _add(node, prod):
    a, b = node.inputs
    for x, y in ((a, b), (b, a)):
        z = _zero(y)
        if not _same_type(node, x) or z is None:
            continue
        # x + 0 is x for integers; for floats only x + (-0.0) (-0.0 + 0.0 is +0.0); never for
        # complex (the zero's imaginary part is +0.0)
        if x.dtype.kind in "iu" or (x.dtype.kind == "f" and z == "-0"):
            return x
    return None


def _subtract(node, prod):
    x, y = node.inputs
    z = _zero(y)
    if _same_type(node, x) and z is not None and (x.dtype.kind in "iu" or z == "+0"):
        return x  # x - (+0) is x, also for -0.0 and complex; x - (-0.0) is x + 0.0
    return None


def _negative(node, prod):
    (x,) = node.inputs
    inner = prod.get(x)
    if inner is not None and inner.op == node.op and _same_type(node, inner.inputs[0]):
        return inner.inputs[0]  # -(-x)
    return None


def _transpose(node, prod):
    (x,) = node.inputs
    axes = node.attrs["axes"]
    inner = prod.get(x)
    if axes == tuple(range(len(axes))):
        return x if isinstance(x, Var) else None  # a folded constant stays a node
    if inner is not None and inner.op == node.op:  # a transpose of a transpose
        composed = tuple(inner.attrs["axes"][a] for a in axes)
        if composed == tuple(range(len(composed))):
            return inner.inputs[0] if isinstance(inner.inputs[0], Var) else None
        return [_new(node, "transpose", (inner.inputs[0],), {"axes": composed})]
    return None


def _reshape(node, prod):
    (x,) = node.inputs
    if _same_type(node, x):
        return x
    inner = prod.get(x)
    if inner is not None and inner.op == node.op:  # a reshape of a reshape
        src = inner.inputs[0]
        if not isinstance(src, Var):
            return None  # a folded constant stays a node
        if src.shape == node.out.shape:
            return src
        return [_new(node, "reshape", (src,), {"shape": node.attrs["shape"]})]
    return None


def _astype(node, prod):
    (x,) = node.inputs
    return x if _same_type(node, x) else None


def _index_update(node, prod):
    """``b[idx] = b[idx]`` (left by ``b[s] += v``: the view was already written) is ``b``."""
    base, value = node.inputs[:2]
    inner = prod.get(value) if isinstance(value, Var) else None
    if (
        len(node.inputs) == 2
        and inner is not None
        and inner.op == "index"
        and len(inner.inputs) == 1
        and inner.inputs[0] is base
        and inner.attrs["idx"] == node.attrs["idx"]
        and _same_type(node, base)
    ):
        return base
    return None


RULES = {
    "index_update": _index_update,
    "divide": _divide,
    "power": _power,
    "multiply": _multiply,
    "add": _add,
    "subtract": _subtract,
    "negative": _negative,
    "transpose": _transpose,
    "reshape": _reshape,
    "astype": _astype,
}


class _Producers(dict):
    """Var -> producing node; a literal (folded constants are arrays: unhashable) has none."""

    def get(self, key, default=None):
        return super().get(key, default) if isinstance(key, Var) else default


_BINARY = ("add", "subtract", "multiply", "divide")


def _literal_operands(node, prod):
    """``x * np.broadcast_to(c, x.shape)`` (a gradient's seed, ``c`` a number) as ``x * c``:
    the same values where ``x`` has the result's shape and type and the broadcast the
    result's type (``c`` then a NumPy scalar of that type)."""
    if node.op not in _BINARY:
        return node
    ins = list(node.inputs)
    for k, x in enumerate(ins):
        inner = prod.get(x)
        other = ins[1 - k]
        if inner is None or not OPS[inner.op].view or not _same_type(node, other):
            continue
        c = inner.inputs[0]
        if isinstance(c, Var) or np.ndim(c) != 0 or x.dtype != node.out.dtype:
            continue
        ins[k] = x.dtype.type(c)
    return node.replace(inputs=tuple(ins))


def simplify(graph: Graph) -> Graph:
    mapping, kept, prod = {}, [], _Producers()
    for node in graph.nodes:
        node = node.replace(inputs=tuple(resolve(mapping, x) for x in node.inputs))
        node = _literal_operands(node, prod)
        rule = RULES.get(node.op)
        res = rule(node, prod) if rule else None
        if not isinstance(res, Var | list):  # a rule may only forward a Var, not a literal
            res = None
        if res is None:
            kept.append(node)
            prod.update({o: node for o in node.outputs})
        elif isinstance(res, Var):
            mapping[node.out] = res
        else:
            kept.extend(res)
            prod.update({n.out: n for n in res})
            mapping[node.out] = res[-1].out
    return rebuild(graph, kept, mapping)
