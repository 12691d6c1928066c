"""Random numbers drawn while tracing: what NumPy's generators give is baked into the graph as
a constant, so every call of the trace reuses those numbers. :class:`RandomDraws` notices
a draw (a generator whose state moved, or a generator seeded from the operating system's
entropy while it was watched: ``np.random.default_rng()`` made inside the function) to say so.

>>> import numpy as np
>>> draws = RandomDraws([("global:rng", np.random.default_rng(0))])
>>> draws.moved()
[]
>>> _ = draws.generators[1][1].random()
>>> draws.moved()
['global:rng']
>>> with draws.watching():
...     _ = np.random.default_rng().random()
>>> draws.moved()[-1].startswith('a generator seeded from fresh entropy')
True
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np
import numpy.random.bit_generator as _bit_generator

from .source import source_of, user_frame


class RandomDraws:
    """The states of NumPy's global generator (``np.random.rand``...) and of ``generators``
    (``(label, generator)`` pairs) now, to compare with later."""

    def __init__(self, generators):
        self.generators = [("np.random", np.random.mtrand._rand), *generators]
        self.states = [_state(g) for _, g in self.generators]
        self.unseeded: list[str] = []  # where generators were seeded from fresh entropy

    def moved(self) -> list[str]:
        """The labels of the generators that drew numbers since, and of the generators
        seeded from fresh entropy while :meth:`watching`."""
        drew = [
            label for (label, g), before in zip(self.generators, self.states) if _state(g) != before
        ]
        return drew + self.unseeded

    @contextlib.contextmanager
    def watching(self):
        """Notice, in this thread, generators seeded from the operating system's entropy
        (``np.random.default_rng()``, ``np.random.RandomState()``, a ``SeedSequence()``
        without entropy): NumPy asks ``bit_generator.randbits`` for it."""
        entropy = getattr(_bit_generator, "randbits", None)
        if entropy is None:  # a NumPy that seeds another way: nothing to watch
            yield
            return
        thread = threading.get_ident()

        def randbits(k):
            if threading.get_ident() == thread:
                frame = user_frame(1)
                where = f" at {source_of(frame)}" if frame is not None else ""
                self.unseeded.append(f"a generator seeded from fresh entropy{where}")
            return entropy(k)

        _bit_generator.randbits = randbits
        try:
            yield
        finally:
            _bit_generator.randbits = entropy


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
