"""Graph -> graph transforms. Each pass is a small function ``Graph -> Graph``.

``optimize`` runs a pipeline and records every pass (name, graph before, graph after) in the
result's ``history``, which the explorer shows.

>>> import numpy as np, tracekit as tk
>>> t = tk.optimize(tk.trace(lambda x: (x * 1.0) ** 2, np.ones(3)))
>>> [n.op for n in t.graph.nodes]
['square']
>>> [h.name for h in t.history]
['cse', 'fold_constants', 'simplify', 'sink_reshapes', 'hoist_invariants', 'dce']
"""

from __future__ import annotations

from dataclasses import dataclass

from .cse import cse
from .dce import dce
from .fold import fold_constants
from .hoist import hoist_invariants
from .simplify import simplify
from .sink import sink_reshapes

PIPELINE = (
    ("cse", cse),
    ("fold_constants", fold_constants),
    ("simplify", simplify),
    ("sink_reshapes", sink_reshapes),
    ("hoist_invariants", hoist_invariants),
    ("dce", dce),
)


@dataclass(frozen=True)
class PassRecord:
    """One pass applied: its name and the graph before and after."""

    name: str
    before: object
    after: object

    @property
    def changed(self) -> bool:
        return self.before.key() != self.after.key() or len(self.before.nodes) != len(
            self.after.nodes
        )


def optimize(traced, passes=None):
    """Run the optimisation pipeline on a Traced; returns a new Traced with ``history``.

    ``passes`` is a list of pass names (default: cse, fold_constants, simplify,
    sink_reshapes, hoist_invariants, dce); an unknown name is a ``ValueError`` listing them.

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: x * 1.0 + 0.0, np.ones(3))
    >>> o = tk.optimize(t, passes=["simplify", "dce"])
    >>> [n.op for n in t.graph.nodes], [n.op for n in o.graph.nodes]
    (['multiply', 'add'], ['add'])
    >>> [(h.name, h.changed) for h in o.history]
    [('simplify', True), ('dce', False)]
    >>> tk.optimize(t, passes=["nope"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: tk.optimize: unknown pass 'nope'; the passes are cse, fold_constants, ...
    """
    table = dict(PIPELINE)
    if isinstance(passes, str):
        passes = [passes]
    unknown = [n for n in passes or () if n not in table]
    if unknown:
        raise ValueError(
            f"tk.optimize: unknown pass {', '.join(map(repr, unknown))}; the passes are "
            + ", ".join(table)
        )
    chosen = [(n, table[n]) for n in passes] if passes is not None else list(PIPELINE)
    result = traced
    for name, fn in chosen:
        after = fn(result.graph).check()
        result = result.with_graph(after, PassRecord(name, result.graph, after))
    return result


__all__ = [
    "optimize",
    "dce",
    "cse",
    "fold_constants",
    "simplify",
    "sink_reshapes",
    "hoist_invariants",
    "PassRecord",
    "PIPELINE",
]
