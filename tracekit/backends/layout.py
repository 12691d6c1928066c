"""The collapsed iteration space of a fused group, and how each operand is indexed in it.

Dimensions of size 1 are dropped; adjacent dimensions merge when every operand treats them
alike (all broadcast or all full) and they are of the same class (kept or reduced). A C-ordered
``[N, M]`` elementwise chain becomes one flat loop of ``N*M``; a bias ``[M]`` added to ``[N, M]``
keeps two loops and is indexed by the inner one only. The runner reshapes every operand to its
collapsed shape (a view for contiguous arrays, a copy otherwise); a view the plan itself makes
(a slice) keeps its dims, and is read in place through its strides.
"""

from __future__ import annotations

import numpy as np

from ..ir import Var


class Layout:
    def __init__(
        self,
        shape: tuple,
        axes: tuple | None,
        operands: list,
        prefix: str = "",
        aligned: dict | None = None,
        strided: frozenset = frozenset(),
    ):
        """``aligned`` gives an operand's shape in the full space when NumPy's right-alignment
        would be wrong: a per-row value without keepdims (``x.sum(axis=1)`` of ``[N, M]`` is
        ``[N]``, aligned ``[N, 1]``). ``strided`` operands are views whose dims may not merge
        (a slice ``a[1:-1, :-2]``): the loops keep the dims those span, and the kernel indexes
        the view itself instead of a flattened copy."""
        self.shape, self.axes = tuple(shape), tuple(axes or ())
        self.aligned = aligned or {}
        nd = len(self.shape)
        dims = [d for d in range(nd) if self.shape[d] != 1]
        pattern = {v: self._pattern(v, dims) for v in operands}
        groups: list[list[int]] = []
        for k, d in enumerate(dims):
            if groups:
                prev = groups[-1][-1]
                same_class = (prev in self.axes) == (d in self.axes)
                pk = dims.index(prev)
                same_pat = all(p[pk] == p[k] for p in pattern.values())
                spans = any(p[pk] == p[k] == "f" for v, p in pattern.items() if v in strided)
                if same_class and same_pat and not spans:
                    groups[-1].append(d)
                    continue
            groups.append([d])
        self.dims = groups  # collapsed dim -> original dims
        self.sizes = [int(np.prod([self.shape[d] for d in g])) for g in groups]
        self.reduced = [g[0] in self.axes for g in groups]
        self.names = []
        ki = ai = 0
        for red in self.reduced:
            if red:
                self.names.append(f"{prefix}j{ai}")
                ai += 1
            else:
                self.names.append(f"{prefix}i{ki}")
                ki += 1
        self._full = {}
        for v, p in pattern.items():
            self._full[v] = [c for c, g in enumerate(groups) if p[dims.index(g[0])] == "f"]

    def _pattern(self, v: Var, dims) -> list:
        aligned = self.aligned.get(v) or (1,) * (len(self.shape) - len(v.shape)) + tuple(v.shape)
        return ["f" if aligned[d] == self.shape[d] else "b" for d in dims]

    # -- per operand
    def operand_shape(self, v: Var) -> tuple:
        """The shape the runner gives ``v`` (its full collapsed dims)."""
        return tuple(self.sizes[c] for c in self._full[v])

    def full_dims(self, v: Var) -> list:
        """The collapsed dims ``v`` spans (not broadcast along), in order."""
        return list(self._full[v])

    def index(self, v: Var) -> str:
        """Source of ``v``'s index inside the loop nest (``""`` for a scalar)."""
        cs = self._full[v]
        return ", ".join(self.names[c] for c in cs)

    def is_scalar(self, v: Var) -> bool:
        return not self._full[v]

    # -- the loop nest
    @property
    def kept(self) -> list:
        return [c for c, r in enumerate(self.reduced) if not r]

    @property
    def red(self) -> list:
        return [c for c, r in enumerate(self.reduced) if r]

    @property
    def total(self) -> int:
        return int(np.prod(self.sizes, dtype=np.int64)) if self.sizes else 1

    @property
    def red_total(self) -> int:
        return int(np.prod([self.sizes[c] for c in self.red], dtype=np.int64))

    def flat_red(self) -> str:
        """Source of the flat (C-order) index over the reduced dims."""
        cs = self.red
        if not cs:
            return "0"
        src = self.names[cs[0]]
        for c in cs[1:]:
            src = f"({src} * {self.sizes[c]} + {self.names[c]})"
        return src

    def unravel_red(self, flat: str) -> list[str]:
        """Statements setting each reduced loop variable from a flat index."""
        cs = self.red
        if len(cs) == 1:
            return [f"{self.names[cs[0]]} = {flat}"]
        out, rest = [], flat
        for k, c in enumerate(cs):
            inner = int(np.prod([self.sizes[d] for d in cs[k + 1 :]], dtype=np.int64))
            out.append(f"{self.names[c]} = ({rest}) // {inner} % {self.sizes[c]}")
        return out
