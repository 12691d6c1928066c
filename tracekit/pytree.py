"""Flatten nested tuples/lists/dicts of arrays into leaves and a structure, and back.

Leaves are arrays and scalars that tracing follows: NumPy arrays and scalars, Python floats and
complexes, dask arrays. Everything else (ints, bools, strings, None, objects) is static and kept
in the structure, so it is baked into a trace and is part of a ``jit`` signature.

>>> leaves, tree = flatten({"w": 1.5, "n": 3})
>>> leaves
[1.5]
>>> unflatten(tree, [2.5])
{'n': 3, 'w': 2.5}
"""

from __future__ import annotations

import numpy as np


class Leaf:
    """Placeholder for a traced leaf in a structure."""

    __slots__ = ()

    def __repr__(self):
        return "*"

    def __eq__(self, other):
        return isinstance(other, Leaf)

    def __hash__(self):
        return 0


LEAF = Leaf()


def is_leaf(x, extra_types=()) -> bool:
    if isinstance(x, bool | int):
        return False
    return isinstance(x, (np.ndarray, np.generic, float, complex, *extra_types)) or is_dask_array(x)


def is_dask_array(x) -> bool:
    """A ``dask.array.Array`` (told without importing dask)."""
    return type(x).__module__.startswith("dask.array") and hasattr(x, "__dask_graph__")


def flatten(obj, extra_types=(), path="", paths=None, keep_order=False):
    """``(leaves, structure)``; ``paths`` (a list) receives a readable name per leaf.

    Dicts are walked in the order of their keys (so that ``{"a": x, "b": y}`` and
    ``{"b": y, "a": x}`` are one call signature), or, ``keep_order``, in their own order (a
    function's results: the dict it returns comes back with its keys in its order).

    >>> unflatten(*reversed(flatten({"b": 1.0, "a": 2.0}, keep_order=True)))
    {'b': 1.0, 'a': 2.0}
    """
    leaves = []
    return leaves, _walk(obj, path, leaves, paths, extra_types, keep_order)


def _walk(x, p, leaves, paths, extra_types, keep_order=False):
    if is_leaf(x, extra_types):
        leaves.append(x)
        if paths is not None:
            paths.append(p)
        return LEAF
    named = paths is not None
    if isinstance(x, tuple | list):
        kids = [
            _walk(e, f"{p}[{i}]" if named else p, leaves, paths, extra_types, keep_order)
            for i, e in enumerate(x)
        ]
        return (type(x), tuple(kids))
    if isinstance(x, dict):
        keys = list(x) if keep_order else sorted(x, key=repr)
        return (
            dict,
            tuple(
                (
                    k,
                    _walk(
                        x[k], f"{p}[{k!r}]" if named else p, leaves, paths, extra_types, keep_order
                    ),
                )
                for k in keys
            ),
        )
    return ("static", x)


def unflatten(tree, leaves):
    return _build(tree, iter(leaves))


def _build(t, it):
    # module-level recursion: a self-referencing closure would keep the leaves alive in a cycle
    if isinstance(t, Leaf):
        return next(it)
    kind, body = t
    if kind == "static":
        return body
    if kind is dict:
        return {k: _build(v, it) for k, v in body}
    return kind(_build(e, it) for e in body)


def same_structure(a, b) -> bool:
    """Equal structures (static values compared with ``==``; arrays never equal)."""
    try:
        return bool(a == b)
    except Exception:  # a static value whose == is elementwise or raises
        return a is b


def describe(tree) -> str:
    """A structure in words.

    >>> describe(flatten([np.ones(2), 3])[1]), describe(flatten({"a": 1.0})[1])
    ('a list of 2 items', "a dict with keys ['a']")
    """
    if isinstance(tree, Leaf):
        return "an array or float"
    kind, body = tree
    if kind == "static":
        return repr(body)
    if kind is dict:
        return f"a dict with keys {[k for k, _ in body]}"
    return f"a {kind.__name__} of {len(body)} item{'s' if len(body) != 1 else ''}"


def differences(a, b, names=(), leaves=None, path="args") -> list:
    """Where structure ``b`` differs from ``a``: ``(where, was, now, what)`` for each place
    (``what``: "static", "structure" or "leaf"), the
    function's arguments named by ``names`` (its parameters, in order) or ``args[i]``; static
    values and structures in words (:func:`describe`); with ``leaves`` (the leaves of ``a`` and
    of ``b``, such as signatures), the leaves that differ too.

    >>> differences(flatten([[1.0, 2.0], 3])[1], flatten([[1.0], 4])[1], names=["xs", "n"])
    [('xs', 'a list of 2 items', 'a list of 1 item', 'structure'), ('n', '3', '4', 'static')]
    """
    out: list = []
    pending = (iter(leaves[0]), iter(leaves[1])) if leaves is not None else None
    _differences(a, b, path, out, pending, list(names))
    return out


def _differences(a, b, path, out, pending, names=None):
    if isinstance(a, Leaf) and isinstance(b, Leaf):
        if pending is not None:
            x, y = next(pending[0]), next(pending[1])
            if x != y:
                out.append((path, x, y, "leaf"))
        return
    same_kind = not isinstance(a, Leaf) and not isinstance(b, Leaf) and a[0] == b[0]
    if same_kind and a[0] == "static":
        if not same_structure(a, b):
            out.append((path, repr(a[1]), repr(b[1]), "static"))
        return
    if (
        same_kind
        and len(a[1]) == len(b[1])
        and (a[0] is not dict or [k for k, _ in a[1]] == [k for k, _ in b[1]])
    ):
        for i, (x, y) in enumerate(zip(a[1], b[1])):
            if a[0] is dict:
                where, x, y = f"{path}[{x[0]!r}]", x[1], y[1]
            else:
                where = names[i] if names and i < len(names) else f"{path}[{i}]"
            _differences(x, y, where, out, pending)
        return
    out.append((path, describe(a), describe(b), "structure"))
    if pending is not None:  # the leaves of the two unlike parts are not compared
        for tree, it in ((a, pending[0]), (b, pending[1])):
            for _ in range(count_leaves(tree)):
                next(it)


def count_leaves(tree) -> int:
    if isinstance(tree, Leaf):
        return 1
    kind, body = tree
    if kind == "static":
        return 0
    return sum(count_leaves(e[1] if kind is dict else e) for e in body)


def describe_difference(a, b, path="args", names=()) -> str | None:
    """The first place where two structures differ, in words (None if equal).

    >>> describe_difference(flatten([np.ones(2)])[1], flatten([[1.0, 2.0]])[1], names=["x"])
    'x: traced with an array or float, got a list of 2 items'
    """
    found = differences(a, b, names, path=path)
    if not found:
        return None
    where, was, now, what = found[0]
    if what == "static":
        return f"{where}: static value was {was}, got {now}"
    if where == path and a[0] is list and b[0] is list:
        return f"{path}: traced with {len(a[1])} arguments, got {len(b[1])}"
    return f"{where}: traced with {was}, got {now}"
