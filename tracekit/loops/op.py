"""The ``loop`` op: a rolled Python loop, whose body is a graph run ``trips`` times.

A loop node's inputs are the initial values of its carried state, then its invariants; its
attributes are ``body`` (a :class:`~tracekit.ir.Graph`), ``trips``, ``carried`` (how many of
the inputs are carried state) and ``stacked``, and optionally ``start``: the count of its first
iteration, at which the indices moving with it (:class:`~tracekit.ir.Affine`) are taken (an
int, or an Affine of the loop around it: a segment of another loop's iterations, as a
checkpointed gradient runs them). The body takes the carried values and the
invariants, and returns the next carried values, then the values used after the loop (the
last iteration's), then the ``stacked`` values of every iteration used after it; the node's
outputs are the body's outputs after the last iteration, the stacked ones gathered into arrays
of one row per iteration (``np.stack(history)``).

>>> import numpy as np, tracekit as tk
>>> def f(x):
...     for _ in range(3):
...         x = np.tanh(x) + 1.0
...     return x
>>> t = tk.trace(f, np.zeros(2))
>>> [n.op for n in t.graph.nodes]
['loop']
>>> t(np.zeros(2)).round(6)
array([1.942681, 1.942681])
"""

from __future__ import annotations

import numpy as np

from ..errors import GuardError
from ..interpret import (
    as_input_value,
    check_guards,
    check_guards_of,
    guards_by_value,
    raise_failed_guard,
    run_node,
)
from ..ir import Affine, Graph, Node, Var, at_iteration, fmt_value, moves, register_json_loader
from ..ops import Op, register

register_json_loader(
    "affine", lambda d: Affine(int(d["base"]), int(d["step"]), bool(d.get("local", False)))
)


def value_names(nodes) -> set:
    """The names of the values ``nodes`` make, inside loop bodies too (with their inputs)."""
    out = set()
    for n in nodes:
        out.update(o.name for o in n.outputs)
        for body in (a for a in n.attrs.values() if isinstance(a, Graph)):
            out.update(v.name for v in body.inputs)
            out |= value_names(body.nodes)
    return out


def body_at(body: Graph, k: int, start=0) -> list:
    """The body's nodes in iteration ``k`` of a loop counting from ``start`` (the indices that
    move, taken there)."""
    return [
        n.replace(attrs=at_iteration(dict(n.attrs), k, start)) if moves(n.attrs) else n
        for n in body.nodes
    ]


def later(start, n: int):
    """A loop's ``start`` ``n`` iterations on (an int, or an Affine of the loop around it)."""
    return Affine(start.base + n, start.step) if isinstance(start, Affine) else start + n


def negated(start):
    """``-start`` (an int, or an Affine of the loop around it)."""
    return Affine(-start.base, -start.step) if isinstance(start, Affine) else -start


def start_of(attrs: dict) -> int:
    """The count a loop's first iteration has (its ``start``: an int where it runs)."""
    start = attrs.get("start", 0)
    if not isinstance(start, int):
        raise ValueError(f"a loop whose start moves ({start!r}) runs only inside its loop")
    return start


def stacked_buffers(body: Graph, trips: int, stacked: int) -> list:
    """Fresh arrays for a loop's stacked outputs: one row per iteration."""
    return [
        np.empty((trips, *o.shape), o.dtype) for o in body.outputs[len(body.outputs) - stacked :]
    ]


def _set_row(buf, k, value):
    buf[k] = value


def iterate(inputs, node_attrs: dict, run_body, rows=None, set_row=_set_row) -> list:
    """A loop's outputs from ``inputs`` (carried values, then invariants): ``run_body(values,
    k)`` gives the body's outputs in iteration ``k``; the last ``stacked`` of them are gathered,
    one row per iteration, into ``rows`` (default: fresh NumPy arrays) by ``set_row(buffer, k,
    value)``. A while loop (attribute ``cond``: the body output that says whether to go on)
    stops after the iteration whose condition is false. The interpreter and every target's
    loop share it."""
    body, carried = node_attrs["body"], node_attrs["carried"]
    trips, stacked, cond = node_attrs["trips"], node_attrs.get("stacked", 0), node_attrs.get("cond")
    state, invariants = list(inputs[:carried]), list(inputs[carried:])
    outs = state
    rows = stacked_buffers(body, trips, stacked) if rows is None else rows
    plain = len(body.outputs) - stacked
    k = 0
    while cond is not None or k < trips:
        outs = run_body(state + invariants, k)
        state = outs[:carried]
        for buf, value in zip(rows, outs[plain:]):
            set_row(buf, k, value)
        k += 1
        if cond is not None and not bool(outs[cond]):
            break
        if cond is not None and k >= node_attrs["max_iterations"]:
            raise GuardError(not_converged(node_attrs))
    return list(outs[:plain]) + rows


def in_iteration(body: Graph, k: int) -> str:
    """Where a guard of ``body`` failed, for its ``GuardError``."""
    return f" in iteration {k} of `{body.name}:`"


def not_converged(attrs: dict) -> str:
    """Why a while loop stopped without its condition becoming false."""
    return (
        f"the loop `{attrs['body'].name}:` ran {attrs['max_iterations']} iterations (its "
        f"max_iterations) and its condition is still true ({attrs['trips']} iterations when "
        "traced). Pass a larger max_iterations= to tk.trace if it needs more."
    )


def run_loop(*inputs, body: Graph, **attrs):
    """The interpreter's loop: ``body`` run ``trips`` times, or while its condition holds (see
    :func:`iterate`); the guards of the body are checked in every iteration."""
    moving = any(moves(n.attrs) for n in body.nodes)
    start = start_of(attrs)

    guarded = guards_by_value(body)

    def run_body(values, k):
        env = {v: as_input_value(v, x) for v, x in zip(body.inputs, values)}
        nodes = body_at(body, k, start) if moving else body.nodes
        try:
            for node in nodes:
                run_node(node, env)
                if guarded:
                    check_guards_of(node, guarded, env, in_iteration(body, start + k))
        except GuardError:
            raise
        except Exception as error:
            raise_failed_guard(body, env, error, in_iteration(body, start + k), nodes)
            raise
        check_guards(body, env, in_iteration(body, start + k))
        return [env[o] for o in body.outputs]

    outs = iterate(inputs, {**attrs, "body": body}, run_body)
    given = {id(x) for x in inputs}  # a value the body passes through is the caller's array
    outs = [o.copy() if isinstance(o, np.ndarray) and id(o) in given else o for o in outs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _fits(x, v: Var) -> bool:
    """Loop input ``x`` (a value, or a literal the passes folded it to) fits body input ``v``."""
    if isinstance(x, Var):
        return x.shape == v.shape and x.dtype == v.dtype
    if v.weak:
        return isinstance(x, bool | int | float | complex | np.generic)
    a = np.asarray(x)
    return a.shape == v.shape and a.dtype == v.dtype


def check_loop(node: Node):
    """Raise ``ValueError`` unless ``node``'s body is a valid graph whose values match the node's:
    its inputs the node's (carried first), its outputs the node's, each carried value's next
    value of the carried value's type."""
    body, carried = node.attrs.get("body"), node.attrs.get("carried")
    if not isinstance(body, Graph) or not isinstance(node.attrs.get("trips"), int):
        raise ValueError(f"a loop needs a body graph and a trip count: {node}")
    if not isinstance(carried, int) or not 0 <= carried <= min(len(body.inputs), len(body.outputs)):
        raise ValueError(f"a loop's carried count does not fit its body: {node}")
    body.check()
    if len(node.inputs) != len(body.inputs) or len(node.outputs) != len(body.outputs):
        raise ValueError(f"a loop's values do not match its body's: {node}")
    for x, v in zip(node.inputs, body.inputs):
        if not _fits(x, v):
            raise ValueError(f"a loop passes {fmt_value(x)} where its body takes {v!r}: {node}")
    stacked, trips = node.attrs.get("stacked", 0), node.attrs["trips"]
    start = node.attrs.get("start", 0)
    if not (type(start) is int or isinstance(start, Affine) and not start.local):
        raise ValueError(f"a loop's start is an int or an Affine of the loop around it: {node}")
    if not isinstance(stacked, int) or not 0 <= stacked <= len(body.outputs) - carried:
        raise ValueError(f"a loop's stacked count does not fit its body: {node}")
    for k, (o, b) in enumerate(zip(node.outputs, body.outputs)):
        shape = (trips, *b.shape) if k >= len(body.outputs) - stacked else b.shape
        if o.shape != shape or o.dtype != b.dtype:
            raise ValueError(f"loop output %{o.name}: {o.type} is %{b.name}: {b.type} in its body")
    for v, b in zip(body.inputs[:carried], body.outputs[:carried]):
        if v.shape != b.shape or v.dtype != b.dtype:
            raise ValueError(f"carried %{v.name}: {v.type} becomes %{b.name}: {b.type}")


def is_while(node: Node) -> bool:
    """``node`` is a while loop: its body gives the condition to go on (attribute ``cond``)."""
    return node.attrs.get("cond") is not None


def check_while_loop(node: Node):
    """:func:`check_loop`, and the condition is a scalar output of the body."""
    check_loop(node)
    body, carried, stacked = node.attrs["body"], node.attrs["carried"], node.attrs["stacked"]
    cond, most = node.attrs.get("cond"), node.attrs.get("max_iterations")
    if not isinstance(cond, int) or not carried <= cond < len(body.outputs) - stacked:
        raise ValueError(f"a while loop's condition is not one of its body's outputs: {node}")
    if body.outputs[cond].shape != ():
        raise ValueError(f"a while loop's condition %{body.outputs[cond].name} is not a scalar")
    if stacked or not isinstance(most, int) or most < 1:
        raise ValueError(f"a while loop needs max_iterations >= 1 and no stacked outputs: {node}")


def loop_types(input_types, attrs) -> list:
    """A loop's outputs have its body's output types (``check_loop`` matches the inputs)."""
    body, stacked = attrs["body"], attrs.get("stacked", 0)
    plain = len(body.outputs) - stacked
    return [
        ((attrs["trips"], *o.shape) if k >= plain else o.shape, o.dtype)
        for k, o in enumerate(body.outputs)
    ]


def _code(args, attrs):  # Traced.code writes a loop as a for statement (codegen_py)
    return f"_loop({', '.join(args)})"


WHILE_LOOP = register(
    Op(
        "while_loop",
        "control",
        run_loop,
        _code,
        check=check_while_loop,
        type_rule=loop_types,
        doc="A rolled while loop: a loop whose body also gives the condition (attr cond, an "
        "output index) to go on, up to max_iterations; trips is the traced count.",
    )
)

LOOP = register(
    Op(
        "loop",
        "control",
        run_loop,
        _code,
        check=check_loop,
        type_rule=loop_types,
        doc="A rolled loop; attrs: body (Graph), trips, carried (see tracekit.loops).",
    )
)
