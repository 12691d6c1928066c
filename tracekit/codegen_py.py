"""Graph -> Python source: a ``def`` equivalent to the graph (``Traced.code``)."""

from __future__ import annotations

import ast
import builtins
import keyword

import numpy as np

from .ir import PYTHON_RULES, Graph, Var, format_node
from .loops.op import Affine, moves, not_converged
from .ops import OPS, helper_source


def graph_to_python(graph: Graph, name: str | None = None) -> str:
    """Source of a NumPy function computing ``graph``; paste it anywhere and run it.

    Captured arrays and constants become keyword-only parameters (their labels in a comment);
    constants of up to ``MAX_INLINE`` elements default to their values, so the function runs
    as it is. Write-backs into inputs are ``np.copyto`` calls, as the traced function did.
    Values are named by :func:`~tracekit.ir.ident`; parameters keep their own names where no
    generated name, module, helper or builtin has them (see :func:`parameter_names`).
    """
    helpers = []
    for n in _all_nodes(graph):
        src = helper_source(OPS[n.op])
        if src and src not in helpers:
            helpers.append(src)
    guarded = _has_guards(graph)
    if guarded:
        helpers.append(_GUARD_CHECK)
    results = {o: f"{o.ident}_result" for o in graph.outputs[: graph.n_results]}
    reserved = _RESERVED | set(_defined_names(helpers)) | set(results.values())
    reserved |= {"GuardError"} if guarded else set()
    ids = parameter_names(graph, reserved)
    name = name or graph.name
    if not name.isidentifier() or name in reserved or name in ids.values():
        name = "traced"
    args = [ids[v] for v, s in zip(graph.inputs, graph.specs) if s.kind == "arg"]
    extra = [(v, s) for v, s in zip(graph.inputs, graph.specs) if s.kind != "arg"]
    params = args + (["*"] + [_param(v, s, graph, ids) for v, s in extra] if extra else [])
    lines = ["import numpy as np", ""]
    for h in helpers:
        lines += [h.rstrip(), "", ""]
    lines.append(f"def {name}({', '.join(params)}):")
    for v, s in extra:
        lines.append(f"    # {ids[v]}: {s.kind} {s.label} {v.type}")
    lines += _guard_checks(graph, graph.inputs, ids, "    ")
    lines += _statements(
        graph.nodes, ids, taken=set(ids.values()) | reserved, indent="    ", guards=graph.guards
    )
    returned = [ids[o] for o in graph.outputs[: graph.n_results]]
    written = {graph.inputs[ii] for _, ii in graph.writebacks}
    for i, o in enumerate(graph.outputs[: graph.n_results]):
        if _may_view(graph, o, written):  # copy before the write-back changes it
            lines.append(f"    {results[o]} = {ids[o]}.copy()")
            returned[i] = results[o]
    for oi, ii in graph.writebacks:
        lines.append(f"    np.copyto({ids[graph.inputs[ii]]}, {ids[graph.outputs[oi]]})")
    if len(returned) == 1:
        lines.append(f"    return {returned[0]}")
    else:
        lines.append(f"    return ({', '.join(returned)}{',' if len(returned) == 1 else ''})")
    return "\n".join(lines) + "\n"


def _all_nodes(graph: Graph):
    """The nodes of ``graph`` and of the bodies of its loops."""
    for n in graph.nodes:
        yield n
        for body in (a for a in n.attrs.values() if isinstance(a, Graph)):
            yield from _all_nodes(body)


def _statements(nodes, ids: dict, taken: set, indent: str, guards=(), counter=None) -> list[str]:
    """The lines computing ``nodes``; ``ids`` (Var -> identifier) grows with their values.
    Each of ``guards`` is checked right after its value is computed (``counter``: the loop's
    counter variable and header, for the iteration a failing check names)."""
    lines = []
    for n in nodes:
        lines.append(f"{indent}# {format_node(n)}")
        ins = [ids[x] if isinstance(x, Var) else _literal(x) for x in n.inputs]
        if OPS[n.op].kind == "control":
            lines += _loop(n, ins, ids, taken, indent)
            continue
        targets = ", ".join(ids[o] for o in n.outputs)
        call = OPS[n.op].code(ins, dict(n.attrs))
        if len(n.outputs) == 1 and n.out.weak:  # a Python number, as the graph has it (NEP 50)
            call = f"{_PYTHON_NUMBER[n.out.dtype.kind]}({call})"
        lines.append(f"{indent}{targets} = {call}")
        lines += _guard_checks_of(guards, n.outputs, ids, indent, counter)
    return lines


def _has_guards(graph: Graph) -> bool:
    return bool(graph.guards) or any(
        _has_guards(body)
        for n in graph.nodes
        for body in n.attrs.values()
        if isinstance(body, Graph)
    )


# Checks the guards of generated code: it raises tracekit's GuardError, and runs without it.
_GUARD_CHECK = """\
try:
    from tracekit import GuardError
except ImportError:  # this code runs without tracekit too

    class GuardError(RuntimeError):
        \"\"\"A value that tracing baked into this code differs on this call.\"\"\"


def _check_guard(seen, traced, how, where, iteration=None, loop=""):
    if seen == traced or (seen != seen and traced != traced):  # NaN as traced is no change
        return
    at = "" if iteration is None else f" in iteration {iteration} of `{loop}:`"
    if " " in how:  # a rule of Python's arithmetic, said in words
        said = f"{how}: this call's values take another way{at} than the traced ones{where}, "
        said += "and the code would compute a wrong result"
    else:
        said = f"{how}() gave {seen!r} on this call{at} but {traced!r} when traced{where}: "
        said += "the code took the traced path and would compute a wrong result"
    raise GuardError(
        f"{said}. Trace again with these inputs, or use tk.jit, which retraces when a guard "
        "fails."
    )
"""

_READ_AS = {  # how tracing read a guarded value, as an expression of the value
    "bool": "bool({})",
    "int": "int({})",
    "index": "int({})",
    "float": "float({})",
    "complex": "complex({})",
    "item": "np.asarray({}).item()",
    "tolist": "np.asarray({}).tolist()",
} | dict.fromkeys(PYTHON_RULES, "bool({})")


def _guard_checks(graph: Graph, values, ids, indent) -> list[str]:
    """Checks of the guards on ``values`` (the graph's inputs): layout guards too."""
    lines = []
    for gd in graph.guards:
        if gd.how == "layout" and gd.var in values:
            lines += _layout_check(gd, ids, indent)
    return lines + _guard_checks_of(graph.guards, values, ids, indent, None)


def _guard_checks_of(guards, values, ids, indent, counter) -> list[str]:
    lines = []
    for gd in guards:
        if gd.how == "layout" or gd.var not in values:
            continue
        where = f" at {gd.source} `{gd.source.text}`" if gd.source else ""
        seen = _READ_AS[gd.how].format(ids[gd.var])
        how = PYTHON_RULES.get(gd.how, gd.how)
        args = [seen, _literal(gd.value), repr(how), repr(where)]
        if counter:  # (the loop's counter variable, the loop's header)
            args += [counter[0], repr(counter[1])]
        lines.append(f"{indent}_check_guard({', '.join(args)})")
    return lines


def _layout_check(gd, ids, indent) -> list[str]:
    """A reshape of an input that a write depends on: NumPy's view-or-copy choice for this
    call's array must be the traced one."""
    made_view, steps = gd.value
    expr = ids[gd.var]
    for op, attrs in steps:
        expr = OPS[op].code([expr], dict(attrs))
    where = f" at {gd.source} `{gd.source.text}`" if gd.source else ""
    said = {True: "a view", False: "a copy"}
    message = (
        f"reshape{where} made {said[made_view]} of {gd.var.name!r} when traced but makes "
        f"{said[not made_view]} of this call's array (other strides), and the function writes "
        "into one of them afterwards"
    )
    return [
        f"{indent}if np.may_share_memory({expr}, {ids[gd.var]}) != {made_view}:",
        f"{indent}    raise GuardError({message!r})",
    ]


_PYTHON_NUMBER = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}


def _loop(node, ins, ids, taken, indent) -> list[str]:
    """A loop node as a ``for`` statement: the carried values are variables the body updates."""
    body, carried = node.attrs["body"], node.attrs["carried"]
    for v in (o for m in body.nodes for o in m.outputs):
        ids[v] = _fresh(v.ident, taken)
    for v, o in zip(body.inputs[:carried], node.outputs):
        ids[v] = ids[o]  # a carried value's variable holds the loop's result at the end
    for v, x in zip(body.inputs[carried:], ins[carried:]):
        ids[v] = x  # an invariant is the value from before the loop
    lines = [f"{indent}{ids[v]} = {x}" for v, x in zip(body.inputs[:carried], ins[:carried])]
    plain = len(body.outputs) - node.attrs.get("stacked", 0)
    for o in node.outputs[plain:]:  # one row per iteration
        lines.append(f"{indent}{ids[o]} = np.empty({o.shape!r}, np.{o.dtype.name})")
    counter = _fresh("k", taken)
    cond = node.attrs.get("cond")
    count = node.attrs["trips"] if cond is None else node.attrs["max_iterations"]
    lines.append(f"{indent}for {counter} in range({count}):")
    at = (counter, body.name)
    lines += _guard_checks_of(body.guards, body.inputs, ids, indent + "    ", at)
    nodes = _with_counter(body, counter, node.attrs.get("start", 0))
    lines += _statements(nodes, ids, taken, indent + "    ", body.guards, at)
    for o, b in zip(node.outputs[plain:], body.outputs[plain:]):
        lines.append(f"{indent}    {ids[o]}[{counter}] = {ids[b]}")
    nexts = [ids[o] for o in body.outputs[:carried]]
    if carried:
        state = ", ".join(ids[v] for v in body.inputs[:carried])
        lines.append(f"{indent}    {state} = {', '.join(nexts)}")
    if cond is not None:  # a while loop: its condition tested when it runs
        lines += [f"{indent}    if not {ids[body.outputs[cond]]}:", f"{indent}        break"]
        lines += [
            f"{indent}else:",
            f"{indent}    raise RuntimeError({not_converged(node.attrs)!r})",
        ]
    for o, b in zip(node.outputs[carried:plain], body.outputs[carried:plain]):
        lines.append(f"{indent}{ids[o]} = {ids[b]}")
    return lines


class _Expr:
    """Source text printed as itself (an index moving with a loop: ``1 + k``)."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text

    __str__ = __repr__


def _with_counter(body: Graph, counter: str, start=0) -> list:
    """The body's nodes, each index that moves with the loop written with ``counter`` (and the
    count the loop starts from, ``start``: an int, or an expression of the loop around it)."""
    shifted = counter if not isinstance(start, _Expr) and start == 0 else f"({counter} + {start})"

    def expr(x):
        if isinstance(x, Affine):
            count = counter if x.local else shifted
            step = "" if x.step == 1 else f"{x.step} * "
            return _Expr(f"{x.base} + {step}{count}" if x.base else f"{step}{count}")
        if isinstance(x, tuple):
            return tuple(expr(e) for e in x)
        if isinstance(x, slice):
            return slice(expr(x.start), expr(x.stop), expr(x.step))
        return x

    return [
        n.replace(attrs={k: expr(v) for k, v in n.attrs.items()}) if moves(n.attrs) else n
        for n in body.nodes
    ]


def _fresh(name: str, taken: set) -> str:
    k, fresh = 0, name
    while fresh in taken:
        k += 1
        fresh = f"{name}_{k}"
    taken.add(fresh)
    return fresh


# Names generated code reads: a parameter named like one of them would shadow it.
_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))
_RESERVED |= {"np"}


def parameter_names(graph: Graph, reserved=frozenset()) -> dict:
    """Var -> identifier for ``graph``'s generated function, one to one.

    An input whose name is an identifier keeps it (the function's signature is the traced
    one's) unless it is a keyword, a builtin or in ``reserved``; every other value is named by
    its ``ident``, or ``<ident>_<k>`` where a parameter already has that name.

    >>> import numpy as np
    >>> from tracekit.ir import Graph, Node, Var
    >>> v1, one = Var("v1", (), np.float64), Var("1", (), np.float64)
    >>> g = Graph([v1], [Node("negative", (v1,), {}, (one,))], [one])
    >>> list(parameter_names(g).values())
    ['v1', 'v1_1']
    """
    ids, kept, blocked = {}, set(), _RESERVED | set(reserved)
    for v in graph.inputs:
        if v.name.isidentifier() and v.name not in blocked and v.name not in kept:
            ids[v] = v.name
            kept.add(v.name)
    generated = [v for v in graph.inputs if v not in ids]
    generated += [o for n in graph.nodes for o in n.outputs]
    taken = kept | {v.ident for v in generated} | blocked
    for v in generated:
        name, k = v.ident, 1
        if name in kept:  # a parameter has it: the first ``<ident>_<k>`` nothing else has
            while f"{v.ident}_{k}" in taken:
                k += 1
            name = f"{v.ident}_{k}"
        taken.add(name)
        ids[v] = name
    return ids


def _defined_names(sources):
    for src in sources:
        for node in ast.parse(src).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                yield node.name


MAX_INLINE = 256


def _may_view(graph, var, written) -> bool:
    """``var`` may be NumPy memory shared with an input that the function writes into."""
    producers = graph.producers()
    while var not in written:
        node = producers.get(var)
        if node is None or not OPS[node.op].may_view or not isinstance(node.inputs[0], Var):
            return False
        var = node.inputs[0]
    return True


def _param(v, spec, graph, ids) -> str:
    value = graph.constants.get(v) if spec.kind == "const" else None
    if value is not None and np.size(value) <= MAX_INLINE:
        return f"{ids[v]}={_literal(value)}"
    return ids[v]


def _literal(x) -> str:
    from .ops import py_literal

    return py_literal(x)
