"""Slices that kernels index through their base array: ``A[1:-1, :-2]`` read as ``A[i0 + 1, i1]``.

numba types a slice as an array of any layout, whose strides it learns only at run time, and
does not vectorise a loop over it; the array it slices is C-contiguous, and indexed at constant
offsets from the loop variables the same loop vectorises. A 5-point Jacobi stencil on 150²
float64, 50 steps: 2.06 ms through slices, 0.44 ms through the base (AVX-512).

A :class:`Window` maps a view's indices to its base's: per base dimension, either a fixed
index or ``start + step * i`` of one view dimension ``i``. Slices of slices compose into one
window of the array at the bottom.

>>> w = Window.of(None, (slice(1, -1), slice(None, -2)), (150, 150))
>>> w.index(["i0", "i1"])
'1 + i0, i1'
>>> w.then((3, slice(None, None, 2)), (148, 148)).index(["j"])
'4, 2 * j'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Var
from ..ops import OPS


@dataclass(frozen=True)
class Window:
    base: Var | None
    dims: tuple  # per base dim: (view dim, start, step); view dim None: the fixed index start
    shape: tuple  # the view's shape
    # of pads (np.pad, constant mode), innermost first: (box, fill), the value outside the box
    # of base indices (per base dim (first, stop)) that the pad's block covers
    layers: tuple = ()

    @property
    def fill(self):
        """The value of the outermost pad outside its block (None: no pad)."""
        return self.layers[-1][1] if self.layers else None

    @staticmethod
    def padding(base: Var, pad_width) -> Window:
        """The window of ``np.pad(base, pad_width)``: ``base`` at indices shifted back by the
        rows before, which may fall outside it (:meth:`bounds`); the fill is :meth:`padded`'s.

        >>> w = Window.padding(Var("g", (3, 4), np.dtype("f8")), ((1, 1), (0, 2)))
        >>> w.shape, w.index(["i0", "i1"]), w.bounds(["i0", "i1"])
        ((5, 6), '-1 + i0, i1', [('i0', 1, 4), ('i1', 0, 4)])
        """
        return Window.of(base, (), base.shape).padded(pad_width, None)

    def padded(self, pad_width, fill) -> Window | None:
        """``np.pad`` of this window's view with ``fill``: the view at indices shifted back by
        the rows before; outside the view's own box of base indices, ``fill`` (a pad of a
        slice reads the slice's neighbours as ``fill``, not the base's values).

        >>> w = Window.of(None, (slice(1, None),), (5,)).padded(((1, 0),), 0.0)
        >>> w.shape, w.index(["i"]), w.layers[0]
        ((5,), 'i', (((1, 5),), 0.0))
        >>> w.bounds(["i"], w.layers[0][0])  # the slice's row 0 is outside
        [('i', 1, None)]
        """
        mapped = {d for d, _, _ in self.dims}
        if any((a or b) and k not in mapped for k, (a, b) in enumerate(pad_width)):
            return None  # rows padded along a new axis: no base index to test
        lo = [p for p, _ in pad_width]
        dims = tuple((d, s, st) if d is None else (d, s - st * lo[d], st) for d, s, st in self.dims)
        shape = tuple(a + n + b for (a, b), n in zip(pad_width, self.shape))
        layer = (self._box(), fill)
        layers = self.layers
        if layers and _same(layers[-1][1], fill):  # one test for both: the boxes' overlap
            layer = (_overlap(layers[-1][0], layer[0]), fill)
            layers = layers[:-1]
        return Window(self.base, dims, shape, (*layers, layer))

    def _box(self) -> tuple:
        """Per base dim, the (first, stop) of the base indices this view's indices take."""
        out = []
        for view_dim, start, step in self.dims:
            if view_dim is None:
                out.append((start, start + 1))
                continue
            if not self.shape[view_dim]:
                out.append((start, start))
                continue
            last = start + step * (self.shape[view_dim] - 1)
            out.append((min(start, last), max(start, last) + 1))
        return tuple(out)

    @staticmethod
    def of(base, idx, shape) -> Window | None:
        """The window of ``base[idx]`` (``base`` of ``shape``): ints, slices of static bounds,
        ``None`` and ``Ellipsis``; None for anything else (arrays, indices moving with a loop)."""
        if not isinstance(idx, tuple):
            return None
        if idx.count(Ellipsis) > 1:
            return None
        idx = without_ellipsis(idx, len(shape))
        dims, out, d = [], [], 0
        for e in idx:
            if e is None:
                out.append(1)
                continue
            if d >= len(shape):
                return None
            n = shape[d]
            if isinstance(e, slice):
                if not all(x is None or type(x) is int for x in (e.start, e.stop, e.step)):
                    return None
                start, stop, step = e.indices(n)
                dims.append((len(out), start, step))
                out.append(len(range(start, stop, step)))
            elif type(e) is int and -n <= e < n:
                dims.append((None, e % n, 0))
            else:
                return None
            d += 1
        for n in shape[d:]:
            dims.append((len(out), 0, 1))
            out.append(n)
        return Window(base, tuple(dims), tuple(out))

    def permuted(self, axes) -> Window:
        """This window transposed: view dim ``k`` of the result is view dim ``axes[k]``.

        >>> w = Window.of(None, (slice(1, None),), (5, 4)).permuted((1, 0))
        >>> w.shape, w.index(["i0", "i1"])
        ((4, 4), '1 + i1, i0')
        """
        axes = tuple(range(len(self.shape)))[::-1] if axes is None else tuple(axes)
        where = {a: k for k, a in enumerate(axes)}
        dims = tuple((None if d is None else where[d], s, st) for d, s, st in self.dims)
        return Window(self.base, dims, tuple(self.shape[a] for a in axes), self.layers)

    def then(self, idx, shape) -> Window | None:
        """This window indexed further by ``idx`` (the view being of ``shape``)."""
        inner = Window.of(None, idx, shape)
        if inner is None:
            return None
        dims = []
        for view_dim, start, step in self.dims:
            if view_dim is None:
                dims.append((None, start, 0))
                continue
            d, s, st = inner.dims[view_dim]
            dims.append((d, start + step * s, step * st))
        return Window(self.base, tuple(dims), inner.shape, self.layers)

    def index(self, view_index: list) -> str:
        """Source of the base's index, ``view_index`` the source of each view dim's index."""
        return ", ".join(self.indices(view_index)) or "()"

    def indices(self, view_index: list) -> list[str]:
        """Source of the index of each of the base's dims (see :meth:`index`)."""
        parts = []
        for view_dim, start, step in self.dims:
            if view_dim is None:
                parts.append(str(start))
                continue
            i = view_index[view_dim]
            if i == "0":
                parts.append(str(start))
                continue
            term = i if step == 1 else f"{step} * {i}" if step > 0 else f"{-step} * {i}"
            if step < 0:
                parts.append(f"{start} - {term}")
            else:
                parts.append(term if start == 0 else f"{start} + {term}")
        return parts

    def bounds(self, view_index: list, box=None) -> list[tuple] | None:
        """``(index, first, stop)`` per base dim the view's indices may take outside ``box`` (per
        base dim (first, stop); default: the base), a pad's: the base's index (:meth:`indices`)
        is inside where ``first <= index < stop`` (``first`` 0 or ``stop`` None: no bound on
        that side); None where no index is (examples: :meth:`padding`, :meth:`padded`)."""
        out = []
        box = box or tuple((0, n) for n in self.base.shape)
        for (view_dim, start, step), (b0, b1) in zip(self.dims, box):
            if view_dim is None:
                if not b0 <= start < b1:
                    return None
                continue
            last = start + step * (self.shape[view_dim] - 1)
            lo, hi = min(start, last), max(start, last)
            if lo >= b0 and hi < b1:
                continue
            first, last = _inside(start - b0, step, self.shape[view_dim], b1 - b0)
            if first > last:
                return None  # every index of the view is outside: the fill only
            stop = last + 1 if last + 1 < self.shape[view_dim] else None
            out.append((view_index[view_dim], first, stop))
        return out


def _same(a, b) -> bool:
    """The same value, bit for bit (0.0 and -0.0 differ; a NaN is itself)."""
    return np.asarray(a).tobytes() == np.asarray(b).tobytes() and type(a) is type(b)


def _overlap(a: tuple, b: tuple) -> tuple:
    return tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))


def _inside(start: int, step: int, size: int, n: int) -> tuple[int, int]:
    """The first and last ``k`` in ``range(size)`` with ``0 <= start + step * k < n``
    (first > last: none).

    >>> _inside(-2, 1, 6, 3), _inside(4, -1, 6, 3), _inside(-1, 2, 4, 3)
    ((2, 4), (2, 4), (1, 1))
    """
    if step < 0:  # the same indices, counted from the other end
        first, last = _inside(start + step * (size - 1), -step, size, n)
        return size - 1 - last, size - 1 - first
    first = max(0, -(start // step)) if start < 0 else 0
    last = min(size - 1, (n - 1 - start) // step)
    return first, last


def read_through(v: Var, windows: dict) -> bool:
    """Whether kernels read ``v`` through its window (one of a single element is read as
    the array it is)."""
    return v in windows and any(n != 1 for n in v.shape)


def _window(node, parent: Window) -> Window | None:
    """The window of ``node``'s view of the window ``parent``: a static basic index or a
    permutation of the axes (a transpose); None for other views."""
    if OPS[node.op].pads:  # (pads.py)
        return parent.padded(node.attrs["pad_width"], node.attrs["constant_value"])
    if not OPS[node.op].view or len(node.inputs) != 1:
        return None
    if "idx" in node.attrs:
        return parent.then(node.attrs["idx"], parent.shape)
    axes = _permutation(node, parent.shape)
    return None if axes is None else parent.permuted(axes)


def _permutation(node, shape: tuple) -> tuple | None:
    """The axes ``node``'s view permutes an array of ``shape`` by, or None: the view of a
    stand-in of distinct strides (one element of memory, never read) tells."""
    strides = tuple(8 * (len(shape) - d) for d in range(len(shape)))
    a = np.lib.stride_tricks.as_strided(np.zeros(1), shape, strides)
    try:
        v = OPS[node.op].impl(a, **node.attrs)
    except Exception:
        return None
    if not isinstance(v, np.ndarray) or sorted(v.strides) != sorted(strides):
        return None
    if v.__array_interface__["data"][0] != a.__array_interface__["data"][0]:
        return None
    axes = tuple(strides.index(s) for s in v.strides)
    return axes if v.shape == tuple(shape[d] for d in axes) else None


def without_ellipsis(idx: tuple, ndim: int) -> tuple:
    """``idx`` (of an array of ``ndim`` dims) with its Ellipsis written out as full slices."""
    if Ellipsis not in idx:
        return idx
    at = idx.index(Ellipsis)
    fill = ndim - sum(1 for e in idx if e is not None and e is not Ellipsis)
    return idx[:at] + (slice(None),) * fill + idx[at + 1 :]


def view_windows(plan, contiguous_inputs: bool = False) -> dict:
    """``{view: Window}`` for the views the plan's view steps make by slicing and transposing
    (slices of transposes of slices included), each of the array at the bottom of its chain:
    an input, or an array a step makes that is not a view of another (its copy, were it
    strided, would cost a pass).
    Of an array the runner may have to copy (an input, a host op's result: a caller's
    Fortran-ordered array, say), only a view of at least half of it: a stencil's interior, not
    a few rows of a large array. ``contiguous_inputs``: the runner makes every input
    C-contiguous anyway (the CUDA target's copy to the device): any view of it is a window."""
    made = {o for st in plan.steps if st.kind == "kernel" for o in st.outputs}
    out, views = {}, set()
    for step in plan.steps:
        if step.kind == "view" or step.kind == "host" and OPS[step.nodes[0].op].may_view:
            views.update(step.outputs)
        if step.kind != "view":
            continue
        node = step.nodes[0]
        base = node.inputs[0]
        if not isinstance(base, Var) or (base in views and base not in out):
            continue
        w = _window(node, out.get(base) or Window.of(base, (), base.shape))
        if w is None or w.shape != node.out.shape:
            continue
        if not contiguous_inputs and w.base not in made and 2 * node.out.size < w.base.size:
            continue  # a copy of the whole base would cost more than reading the view in place
        out[node.out] = w
    return out
