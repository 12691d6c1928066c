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
import ctypes
import sys
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
        return _legacy_state(generator)
    if isinstance(generator, np.random.Generator):
        return _hashable(generator.bit_generator.state)
    return _hashable(generator.state)


def _hashable(x):
    if isinstance(x, dict):
        return tuple((k, _hashable(v)) for k, v in sorted(x.items()))
    if isinstance(x, np.ndarray):
        return x.tobytes()
    return x


# a legacy generator's state as NumPy gives it is a dict around a copy of 624 words (30 us, twice
# per trace); its Mersenne Twister's words and position are read from memory instead (0.4 us)
# where they are laid out as NumPy's own state says (checked once), and the cached second normal
# only where the last full reading had one: setting it takes a draw from the words
_known: dict[int, tuple] = {}  # id(generator) -> (generator, words, its full state)
_MT_BYTES = 624 * 4 + 4  # uint32 key[624]; int pos


def _legacy_state(generator):
    words = _mt_words(generator)
    known = _known.get(id(generator))
    if words is not None and known is not None and known[1] == words:
        full = known[2]
        if not dict(full)["has_gauss"]:
            return full
    full = _hashable(generator.get_state(legacy=False))
    if words is not None and _laid_out_as(words, full):
        if len(_known) >= 16:  # (generators made and dropped: keep only the newest readings)
            _known.clear()
        _known[id(generator)] = (generator, words, full)
    return full


def _mt_words(generator) -> bytes | None:
    bit_generator = generator._bit_generator
    if type(bit_generator) is not np.random.MT19937:
        return None
    return ctypes.string_at(bit_generator.ctypes.state_address, _MT_BYTES)


def _laid_out_as(words: bytes, full: tuple) -> bool:
    state = dict(dict(full)["state"])
    pos = int.from_bytes(words[-4:], sys.byteorder, signed=True)
    return words[:-4] == state["key"] and pos == state["pos"]
