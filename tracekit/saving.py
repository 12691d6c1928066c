"""Saving a traced function to a file and loading it in another process (``tk.save``/``tk.load``).

The file is JSON: the graph (``Graph.to_json``: its nodes, source lines, scopes, constants and
guards), how the function takes its arguments and returns its results (the pytree structures,
static arguments included), the example arguments it was traced with (the backward pass of
``tk.vjp`` replays them) and the values its captured arrays (``self.w``, globals) had when it
was saved. The loaded :class:`~tracekit.traced.Traced` runs, compiles, differentiates
(``tk.vjp``), optimises, renders and explores like the one saved, and checks its guards.

What a file cannot hold, saving refuses with the reason:

- Python ops are saved by reference (caffe2's builder tuples): their functions, gradient
  functions, classes and builders must be importable by module and name in the loading process
  (defined at module level, not lambdas or functions defined inside a function), and builder
  arguments JSON-able or picklable. A stateful op (``python_func_type``) starts with new state.
- Static arguments (ints, strings, ...) are saved as JSON, or pickled when JSON cannot hold them;
  an unpicklable one cannot be saved.
- The Python function itself is not saved: the loaded Traced cannot retrace (``t.fn`` is None),
  so a call that fails a guard raises ``GuardError``; ``history`` (the passes applied) is not kept.
"""

from __future__ import annotations

import json
import os
import pickle

import numpy as np

from . import pytree
from .ir import Graph, _canonical, _uncanonical
from .pyop import _args_spec, _load_args
from .traced import Traced

FORMAT = "tracekit-traced-1"


def save(x, path) -> None:
    """Write a Traced (or a Graph, or a Compiled's trace) to ``path`` as JSON.

    >>> import os, tempfile, numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x, n: np.tanh(x) * n, np.ones(3), 2)
    >>> path = os.path.join(tempfile.mkdtemp(), "f.json")
    >>> tk.save(t, path)
    >>> tk.load(path)(np.zeros(3), 2)
    array([0., 0., 0.])
    """
    traced = as_traced(x, "tk.save")
    for node in _all_nodes(traced.graph):
        pyop = node.attrs.get("pyop")
        if pyop is not None:
            _check_importable(pyop, node)
    doc = {
        "format": FORMAT,
        "graph": json.loads(traced.graph.to_json()),
        "in_tree": _tree_to_obj(traced.in_tree),
        "out_tree": _tree_to_obj(traced.out_tree),
        "examples": [_canonical(_plain(v)) for v in traced.example_leaves],
        "captures": {
            spec.label: _canonical(np.asarray(get()))
            for spec, get in zip(traced.graph.specs, traced.capture_getters)
            if spec.kind == "capture"
        },
        "notes": list(traced.notes),
    }
    text = json.dumps(doc)
    tmp = f"{os.fspath(path)}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load(path) -> Traced:
    """The Traced that :func:`save` wrote to ``path``.

    Its captured arrays are the saved values, in ``t.captured`` (label -> array; update or
    rebind them there). ``ValueError`` if the file is not one ``tk.save`` wrote.

    >>> import os, tempfile, numpy as np, tracekit as tk
    >>> path = os.path.join(tempfile.mkdtemp(), "g.json")
    >>> tk.save(tk.trace(lambda d: {"y": d["x"] + 1.0}, {"x": np.ones(2)}), path)
    >>> t = tk.load(path)
    >>> t({"x": np.zeros(2)}), [n.op for n in t.graph.nodes]
    ({'y': array([1., 1.])}, ['add'])
    """
    from . import pyop  # noqa: F401  (registers the loader of python ops)

    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"tk.load: {path} is not JSON ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        hint = ""
        if isinstance(doc, dict) and doc.get("format") == "tracekit-graph-1":
            hint = " (it is a Graph's JSON: tk.Graph.from_json reads it)"
        raise ValueError(f"tk.load: {path} was not written by tk.save{hint}")
    graph = Graph.from_json(json.dumps(doc["graph"]))
    captured = {label: _uncanonical(v) for label, v in doc["captures"].items()}
    getters = [
        (lambda label=spec.label: captured[label]) if spec.kind == "capture" else None
        for spec in graph.specs
    ]
    t = Traced(
        graph,
        _tree_from_obj(doc["in_tree"]),
        _tree_from_obj(doc["out_tree"]),
        getters,
        [_uncanonical(v) for v in doc["examples"]],
    )
    t.captured = captured
    t.notes = list(doc.get("notes", []))
    return t


def as_traced(x, what: str) -> Traced:
    """``x`` as a Traced: a Traced itself, a Graph (its arguments positional, in order; its
    results one value or a tuple), or a Compiled's trace; a TypeError saying what ``what``
    takes otherwise."""
    if isinstance(x, Traced):
        return x
    if isinstance(x, Graph):
        return Traced.from_graph(x)
    inner = getattr(x, "traced", None)
    if isinstance(inner, Traced):
        return inner
    raise TypeError(
        f"{what} takes a Traced (tk.trace, tk.load, tk.vjp), a Graph (tk.Graph.from_json) or a "
        f"Compiled (tk.compile), got {type(x).__name__}"
        + (": a function? trace it first, tk.trace(f, *example_args)" if callable(x) else "")
    )


# ---------------------------------------------------------------------- checks
def _all_nodes(graph: Graph):
    for node in graph.nodes:
        yield node
        for body in (a for a in node.attrs.values() if isinstance(a, Graph)):
            yield from _all_nodes(body)


def _check_importable(pyop, node):
    try:
        pickle.dumps(pyop)  # refuses functions that another process cannot import
    except pickle.PicklingError as e:
        where = f" (at {node.source} `{node.source.text}`)" if node.source else ""
        raise TypeError(
            f"tk.save: python op {pyop.name!r}{where} cannot be saved: {e}. A saved graph "
            "holds python ops by reference (module and name), to be imported when loaded."
        ) from None


def _plain(v):
    return v if isinstance(v, np.ndarray | np.generic | float | complex) else np.asarray(v)


# ---------------------------------------------------------------------- pytree structures
_SEQUENCES = {"tuple": tuple, "list": list}


def _tree_to_obj(tree):
    if isinstance(tree, pytree.Leaf):
        return {"leaf": True}
    kind, body = tree
    if kind == "static":
        return {"static": _static_to_obj(body)}
    if kind is dict:
        return {"dict": [[_static_to_obj(k), _tree_to_obj(v)] for k, v in body]}
    if kind in (tuple, list):
        return {kind.__name__: [_tree_to_obj(e) for e in body]}
    raise TypeError(f"tk.save: cannot save a {kind.__name__} among the arguments or results")


def _tree_from_obj(d):
    if "leaf" in d:
        return pytree.LEAF
    if "static" in d:
        return ("static", _static_from_obj(d["static"]))
    if "dict" in d:
        return (dict, tuple((_static_from_obj(k), _tree_from_obj(v)) for k, v in d["dict"]))
    (name, items), *_ = d.items()
    return (_SEQUENCES[name], tuple(_tree_from_obj(e) for e in items))


def _static_to_obj(value):
    spec = _args_spec(value)  # as a python op's builder arguments are saved: JSON, or pickled
    if "local" in spec:
        raise TypeError(
            f"tk.save: the static argument {value!r} ({type(value).__name__}) can be neither "
            "written as JSON nor pickled"
        )
    return spec


_static_from_obj = _load_args
