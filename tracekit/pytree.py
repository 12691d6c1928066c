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


def flatten(obj, extra_types=(), path="", paths=None):
    """``(leaves, structure)``; ``paths`` (a list) receives a readable name per leaf."""
    leaves = []
    return leaves, _walk(obj, path, leaves, paths, extra_types)


def _walk(x, p, leaves, paths, extra_types):
    if is_leaf(x, extra_types):
        leaves.append(x)
        if paths is not None:
            paths.append(p)
        return LEAF
    named = paths is not None
    if isinstance(x, tuple | list):
        kids = [
            _walk(e, f"{p}[{i}]" if named else p, leaves, paths, extra_types)
            for i, e in enumerate(x)
        ]
        return (type(x), tuple(kids))
    if isinstance(x, dict):
        keys = sorted(x, key=repr)
        return (
            dict,
            tuple(
                (k, _walk(x[k], f"{p}[{k!r}]" if named else p, leaves, paths, extra_types))
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


def describe_difference(a, b, path="args") -> str | None:
    """The first place where two structures differ, in words (None if equal)."""
    if isinstance(a, Leaf) and isinstance(b, Leaf):
        return None
    if isinstance(a, Leaf) or isinstance(b, Leaf):
        was = "an array" if isinstance(a, Leaf) else repr(a[1])
        now = "an array" if isinstance(b, Leaf) else repr(b[1])
        return f"{path}: traced with {was}, got {now}"
    if a[0] != b[0]:
        return f"{path}: traced with a {a[0]}, got a {b[0]}"
    if a[0] == "static":
        return None if same_structure(a, b) else f"{path}: static value was {a[1]!r}, got {b[1]!r}"
    if len(a[1]) != len(b[1]):
        return f"{path}: traced with {len(a[1])} items, got {len(b[1])}"
    for i, (x, y) in enumerate(zip(a[1], b[1])):
        if a[0] is dict:
            if x[0] != y[0]:
                return f"{path}: keys differ ({x[0]!r} vs {y[0]!r})"
            d = describe_difference(x[1], y[1], f"{path}[{x[0]!r}]")
        else:
            d = describe_difference(x, y, f"{path}[{i}]")
        if d:
            return d
    return None
