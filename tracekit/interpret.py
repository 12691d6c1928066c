"""The reference interpreter: runs a graph node by node with the op table's NumPy code.

It is the oracle every backend is tested against.

>>> import numpy as np, tracekit as tk
>>> t = tk.trace(lambda x: np.exp(x) + 1, np.zeros(2))
>>> run(t.graph, [np.ones(2)])[0]
array([3.71828183, 3.71828183])
"""

from __future__ import annotations

import numpy as np

from .errors import GuardError
from .ir import PYTHON_RULES, Graph, Node, Var
from .ops import OPS
from .pyop import check_results


def as_input_value(var: Var, value):
    """A call-time value in the form the op table expects (Python scalar for weak inputs)."""
    if var.weak:
        return np.asarray(value).item()
    return value


def input_env(graph: Graph, inputs) -> dict:
    """The values of ``graph.inputs`` by variable, as the op table takes them."""
    return {v: as_input_value(v, x) for v, x in zip(graph.inputs, inputs)}


def run_node(node: Node, env: dict):
    """Run one node, storing its outputs in ``env``; errors name the node's source line."""
    args = [env[x] if isinstance(x, Var) else x for x in node.inputs]
    try:
        out = OPS[node.op].impl(*args, **node.attrs)
        if OPS[node.op].kind == "opaque":
            out = check_results(node, out)
    except Exception as e:
        where = f" at {node.source} `{node.source.text}`" if node.source else ""
        e.add_note(f"while running {node.op} (node %{node.out.name}){where}")
        raise
    outs = node.outputs
    results = (out,) if len(outs) == 1 else tuple(out)
    for var, val in zip(outs, results):
        env[var] = np.asarray(val).item() if var.weak else val


def run(
    graph: Graph,
    inputs,
    *,
    env_out: dict | None = None,
    until: int | None = None,
    drop_dead: bool = False,
    check: bool = False,
):
    """Run ``graph`` on input values (one per ``graph.inputs``, constants included or not).

    Returns the list of output values. ``env_out`` (a dict) receives every intermediate value;
    ``until`` stops after that many nodes (the outputs computed so far are returned as None);
    ``drop_dead`` keeps in it only the outputs and the guarded values, dropping every other
    value after its last use (as NumPy frees temporaries: the memory is reused while hot).
    ``check`` checks the guards, each as soon as its value is computed (a later node would
    compute on the traced way: a Python division by a number that is 0 now would warn before
    the guard says that Python raises).
    """
    inputs = list(inputs)
    n_args = len(graph.inputs) - len(graph.constants)
    if len(inputs) == n_args and graph.constants:
        inputs += [graph.constants[v] for v in graph.inputs[n_args:]]
    if len(inputs) != len(graph.inputs):
        raise TypeError(f"graph takes {len(graph.inputs)} inputs, got {len(inputs)}")
    env = env_out if env_out is not None else {}
    given = input_env(graph, inputs)
    env.update(given)
    nodes = graph.nodes if until is None else graph.nodes[:until]
    dead = _dead_after(graph) if drop_dead else ()
    guarded = guards_by_value(graph) if check else None
    try:
        for k, node in enumerate(nodes):
            run_node(node, env)
            if guarded:
                check_guards_of(node, guarded, env)
            for v in dead[k] if dead else ():
                env.pop(v, None)
    except GuardError:
        raise
    except Exception as error:
        raise_failed_guard(graph, given | env, error)  # (dead inputs were dropped from env)
        raise
    if check:
        check_guards(graph, given | env)
    return [env.get(o) for o in graph.outputs]


def _dead_after(graph: Graph) -> list:
    """Per node, the values nothing after it reads (outputs and guarded values excepted)."""
    kept = set(graph.outputs) | {g.var for g in graph.guards}
    last = {}
    for k, node in enumerate(graph.nodes):
        for x in node.inputs:
            if isinstance(x, Var):
                last[x] = k
        for o in node.outputs:
            last.setdefault(o, k)  # an unused value dies where it is made
    dead = [[] for _ in graph.nodes]
    for v, k in last.items():
        if v not in kept:
            dead[k].append(v)
    return dead


def guards_by_value(graph: Graph) -> dict:
    """The guards of ``graph`` by the value they read (layout guards, checked on the
    arguments before a run, left out)."""
    guarded = {}
    for g in graph.guards:
        if g.how != "layout":
            guarded.setdefault(g.var, []).append(g)
    return guarded


def check_guards_of(node, guarded: dict, env: dict, where: str = ""):
    """Check the guards on what ``node`` computed as soon as it is computed: a later node
    would compute on the traced path (a Python division by a number that is 0 now would warn
    before its guard says that Python raises)."""
    for o in node.outputs:
        if o in guarded:
            _check(guarded[o], env, where)


def check_guards(graph: Graph, env: dict, where: str = ""):
    """Raise GuardError if a value baked in at trace time differs in this run (``where``: the
    iteration of a loop whose body ``graph`` is, said in the message)."""
    _check(graph.guards, env, where)


def _check(guards, env: dict, where: str):
    for g in guards:
        if g.how == "layout" or g.var not in env:  # layout: checked on the arguments, before
            continue
        value = env[g.var]
        try:
            seen = _as_guard_value(value, g.how)
        except (TypeError, ValueError):
            continue
        if not _same(seen, g.value):
            at = f" at {g.source} `{g.source.text}`" if g.source else ""
            if g.how in PYTHON_RULES:
                raise GuardError(
                    f"{PYTHON_RULES[g.how]}: this call's values take another way{where} than "
                    f"the traced ones{at}, and the graph would compute a wrong result. Trace "
                    "again with these inputs, or use tk.jit, which retraces when a guard fails."
                )
            raise GuardError(
                f"{g.how}() gave {seen!r} on this call{where} but {g.value!r} when traced{at}: "
                "the graph took the traced path and would compute a wrong result. Trace again "
                "with these inputs, or use tk.jit, which retraces when a guard fails."
            )


def raise_failed_guard(graph: Graph, env: dict, error: Exception, where: str = "", nodes=None):
    """After ``error`` in a run of ``graph``: raise the ``GuardError`` of a guard that fails
    on these inputs, if one does, from ``error``; return otherwise.

    Inputs that take another branch than the traced one can make a node after the branch
    fail (``x ** r`` with ``r`` now negative) before the guard is checked: the guard's error
    is the true one (and ``tk.jit`` retraces on it). ``env`` holds the inputs and maybe more;
    what the guards read is computed here, as far as it can be (from ``nodes``: the graph's
    own, or a loop body's in one iteration).
    """
    if not graph.guards:
        return
    env = dict(env)
    for node in _guard_ancestors(graph, graph.nodes if nodes is None else nodes):
        if any(o not in env for o in node.outputs):
            try:
                run_node(node, env)
            except Exception:
                break  # what a guard reads fails too: that failure is the program's own
    try:
        check_guards(graph, env, where)
    except GuardError as failed:
        raise failed from error


def _guard_ancestors(graph: Graph, nodes: list) -> list:
    """The nodes the guards' values are computed from, in graph order."""
    wanted = {g.var for g in graph.guards if g.how != "layout"}
    needed = []
    for node in reversed(nodes):
        if any(o in wanted for o in node.outputs):
            needed.append(node)
            wanted.update(x for x in node.inputs if isinstance(x, Var))
    return needed[::-1]


def _as_guard_value(value, how):
    a = np.asarray(value)
    if how == "bool" or how in PYTHON_RULES:
        return bool(a)
    if how in ("int", "index"):
        return int(a)
    if how == "float":
        return float(a)
    if how == "complex":
        return complex(a)
    return a.item() if how == "item" else a.tolist()


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return a == b
