"""Random numbers drawn while tracing: what NumPy's generators give is baked into the graph as
a constant, so every call of the trace reuses those numbers. :class:`RandomDraws` notices
a draw (a generator whose state moved) to say so.

>>> import numpy as np
>>> draws = RandomDraws([("global:rng", np.random.default_rng(0))])
>>> draws.moved()
[]
>>> _ = draws.generators[1][1].random()
>>> draws.moved()
['global:rng']
"""

from __future__ import annotations

import numpy as np


class RandomDraws:
    """The states of NumPy's global generator (``np.random.rand``...) and of ``generators``
    (``(label, generator)`` pairs) now, to compare with later."""

    def __init__(self, generators):
        self.generators = [("np.random", np.random.mtrand._rand), *generators]
        self.states = [_state(g) for _, g in self.generators]

    def moved(self) -> list[str]:
        """The labels of the generators that drew numbers since."""
        return [
            label for (label, g), before in zip(self.generators, self.states) if _state(g) != before
        ]


def _state(generator):
    if isinstance(generator, np.random.RandomState):  # (with its cached second normal)
        return _hashable(generator.get_state(legacy=False))
    if isinstance(generator, np.random.Generator):
        return _hashable(generator.bit_generator.state)
    return _hashable(generator.state)


def _hashable(x):
    if isinstance(x, dict):
        return tuple((k, _hashable(v)) for k, v in sorted(x.items()))
    if isinstance(x, np.ndarray):
        return x.tobytes()
    return x
