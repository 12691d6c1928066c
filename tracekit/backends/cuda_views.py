"""CUDA kernels for views that are not free (transposes, strided slices, broadcasts: a
gather) and for in-place writes with a basic index (a scatter), from the view's geometry."""

from __future__ import annotations

import numpy as np

from ..ir import Node, format_node
from ..ops import strides_only
from . import scalar as S
from .cuda_device import Profile, typed


def view_geometry(src_shape, dtype, fn):
    """``(shape, strides, offset)`` in elements of ``fn(a)`` for a C-ordered ``a`` of
    ``src_shape``, or None when ``fn`` is not a pure view. Only the addresses are computed:
    the stand-in array has one element of real memory and is never read."""
    dtype = np.dtype(dtype)
    a = strides_only(src_shape, dtype)
    try:
        v = fn(a)
    except Exception:
        return None
    if not isinstance(v, np.ndarray) or not np.may_share_memory(v, a):
        return None
    off = v.__array_interface__["data"][0] - a.__array_interface__["data"][0]
    isz = dtype.itemsize
    if off % isz or any(s % isz for s in v.strides):
        return None
    return tuple(v.shape), tuple(s // isz for s in v.strides), off // isz


def is_c_contiguous(shape, strides) -> bool:
    acc = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != acc:
            return False
        acc *= d
    return True


def _index_terms(names, strides, sizes, offset) -> str:
    terms = [str(offset)] if offset else []
    for nm, st, sz in zip(names, strides, sizes):
        if st and sz != 1:
            terms.append(nm if st == 1 else f"{nm} * {st}")
    return " + ".join(terms) or "0"


def _unravel_lines(flat, sizes, names, indent) -> list[str]:
    pad = "    " * indent
    if not sizes:
        return []
    if len(sizes) == 1:
        return [f"{pad}{names[0]} = {flat}"]
    lines = [f"{pad}rem = {flat}"]
    for k in range(len(sizes) - 1, 0, -1):
        lines.append(f"{pad}{names[k]} = rem % {sizes[k]}")
        lines.append(f"{pad}rem = rem // {sizes[k]}")
    lines.append(f"{pad}{names[0]} = rem")
    return lines


def gather_source(name: str, node: Node, shape, strides, offset, profile: Profile):
    """A kernel copying the view ``(shape, strides, offset)`` of flat ``src`` into flat ``out``;
    ``offset`` None: the kernel's third argument ``base`` (an index moving with a loop)."""
    size = int(np.prod(shape, dtype=np.int64))
    names = [f"i{k}" for k in range(len(shape))]
    params = "src, out" if offset is not None else "src, out, base"
    offset = "base" if offset is None else offset
    lines = [
        "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
        f"def {name}({params}):",
        f"    # view {node.op} as a gather: shape {list(shape)}, strides {list(strides)}, "
        f"offset {offset}",
        f"    # {format_node(node)}",
        "    t = cuda.grid(1)",
        "    step = cuda.gridsize(1)",
        f"    while t < {size}:",
        *_unravel_lines("t", shape, names, 2),
        f"        out[t] = src[{_index_terms(names, strides, shape, offset)}]",
        "        t += step",
    ]
    launch = (profile.ew_blocks(size), profile.ew_threads)
    return "\n".join(lines), launch


def scatter_source(name, node, region, value, profile: Profile):
    """A kernel writing ``value`` (broadcast) into the region ``(shape, strides, offset)`` of
    flat ``out`` (``index_update`` with a basic index, after ``out`` got a copy of ``x``).

    ``value`` is ``("var", Var, value strides)``, ``("weak", Var)`` or ``("literal", x)``;
    ``offset`` None: the kernel's third argument ``base`` (an index moving with a loop)."""
    shape, strides, offset = region
    params = "val, out" if offset is not None else "val, out, base"
    offset = "base" if offset is None else offset
    x = node.inputs[0]
    size = int(np.prod(shape, dtype=np.int64))
    names = [f"i{k}" for k in range(len(shape))]
    if value[0] == "var":
        v, vstrides = value[1], value[2]
        src = S.cast(f"val[{_index_terms(names, vstrides, shape, 0)}]", v.dtype, x.dtype)
    elif value[0] == "weak":
        v = value[1]
        src = S.cast("val", v.dtype, x.dtype)
    else:
        lit = value[1]
        d = np.asarray(lit).dtype
        src = S.cast(S.literal(lit, d), d, x.dtype)
    lines = [
        "@cuda.jit(cache=_TRACEKIT_DISK_CACHE)",
        f"def {name}({params}):",
        f"    # in-place write as direct stores: region {list(shape)}, strides {list(strides)}, "
        f"offset {offset}",
        f"    # {format_node(node)}",
        "    t = cuda.grid(1)",
        "    step = cuda.gridsize(1)",
        f"    while t < {size}:",
        *_unravel_lines("t", shape, names, 2),
        f"        out[{_index_terms(names, strides, shape, offset)}] = {typed(src, x.dtype)}",
        "        t += step",
    ]
    return "\n".join(lines), (profile.ew_blocks(size), profile.ew_threads)
