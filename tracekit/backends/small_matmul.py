"""Products of small float matrices in registers: a numba kernel for a loop driver's ``a @ b``
where BLAS spends more on its calling overhead and its choice of kernels than on the product.

The kernel of a shape (:func:`kernel_source`) walks ``c`` in tiles of ``ROWS`` rows by
``vectors_per_row()`` SIMD vectors: each tile's accumulators stay in vector registers while
``k`` runs, fed by one broadcast element of ``a`` per row and the tile's columns of one row of
``b`` (contiguous in a C-contiguous ``b``). The tile (``_matmul_tile``, an intrinsic) is written
with LLVM vectors as wide as this CPU's numba target has (512 bits with AVX-512, 256 with AVX,
128 otherwise), so it is the same code on every CPU in registers of its width; the columns
after the last whole vector are computed one by one.

Whether the kernel replaces BLAS is measured once per process, shape and dtype
(:func:`faster_than_blas`): BLAS libraries choose their kernels by CPU, and the same library
may be twice as fast on one CPU as on another, so no CPU model decides it. Only products whose
operands fit in a core's cache are candidates (the kernel has no cache blocking; large products
are BLAS's). ``TRACEKIT_SMALL_MATMUL=never`` (or ``always``) fixes the choice.

>>> import numpy as np
>>> a, b = np.arange(15.0).reshape(3, 5), np.arange(35.0).reshape(5, 7)
>>> c = np.empty((3, 7))
>>> kernel(3, 5, 7, "float64", disk=False)(a, b, c)
>>> bool(np.allclose(c, a @ b))
True
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np

ROWS = 4  # rows of a tile: each row's accumulators are fed by one broadcast of a's element
MAX_OPERAND_BYTES = 256 * 1024  # a, b and c together: products that stay in a core's cache


@functools.cache
def vector_bytes() -> int:
    """The widest SIMD register numba's target has here: 64 (AVX-512), 32 (AVX), else 16."""
    from .cache import cpu_target

    features = cpu_target().target_context.codegen().magic_tuple()[2]
    if not features:
        import llvmlite.binding as llvm

        have = {k for k, v in llvm.get_host_cpu_features().items() if v}
    else:
        have = {f[1:] for f in features.split(",") if f.startswith("+")}
    return 64 if "avx512f" in have else 32 if "avx" in have else 16


def vectors_per_row() -> int:
    """SIMD vectors a tile's row holds: ``ROWS`` times this many accumulators, this many
    vectors of ``b`` and one broadcast fit the 32 registers of AVX-512 or the 16 of others."""
    return 4 if vector_bytes() == 64 else 2


def candidate(m: int, k: int, n: int, dtype) -> bool:
    """Whether a product of ``(m, k) @ (k, n)`` of ``dtype`` may use the kernel at all."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or dtype.itemsize not in (4, 8) or min(m, k, n) < 1:
        return False
    return (m * k + k * n + m * n) * dtype.itemsize <= MAX_OPERAND_BYTES


def faster_than_blas(m: int, k: int, n: int, dtype, disk: bool = True) -> bool:
    """Whether the kernel computes ``(m, k) @ (k, n)`` of ``dtype`` faster than numba's BLAS
    does on this machine: measured once per process (both compiled, then timed in alternation,
    the best of several rounds each), unless ``TRACEKIT_SMALL_MATMUL`` is ``always`` or
    ``never``."""
    if not candidate(m, k, n, dtype):
        return False
    fixed = os.environ.get("TRACEKIT_SMALL_MATMUL", "auto")
    if fixed in ("always", "never"):
        return fixed == "always"
    return _measured(m, k, n, np.dtype(dtype).name, disk)


@functools.cache
def _measured(m: int, k: int, n: int, dtype: str, disk: bool) -> bool:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = np.empty((m, n), dtype)
    ours, blas = kernel(m, k, n, dtype, disk), _blas_probe()
    calls = max(1, min(200, 1_000_000 // (m * k * n)))  # about 1e6 multiply-adds a round
    best = {}
    for _ in range(5):
        for fn in (ours, blas):
            fn(a, b, c)
            start = time.perf_counter()
            for _ in range(calls):
                fn(a, b, c)
            spent = time.perf_counter() - start
            best[fn] = min(best.get(fn, spent), spent)
    return best[ours] < best[blas]


@functools.cache
def _blas_probe():
    """``np.dot(a, b, c)`` as a loop driver calls it (numba's BLAS)."""
    import numba

    @numba.njit(cache=True)
    def blas_matmul(a, b, c):
        np.dot(a, b, c)

    return blas_matmul


def kernel_source(m: int, k: int, n: int, dtype) -> str:
    """The module source of ``small_matmul(a, b, c)``: ``c[...] = a @ b`` for C-contiguous
    ``a`` of ``(m, k)``, ``b`` of ``(k, n)`` and ``c`` of ``(m, n)``, all of float ``dtype``."""
    from .cache import CACHE_FLAG

    dtype = np.dtype(dtype)
    lanes = vector_bytes() // dtype.itemsize
    wide = lanes * vectors_per_row()
    n_wide, n_vectors, m_tiles = n - n % wide, n - n % lanes, m - m % ROWS
    body = []
    for rows, first, last in ((ROWS, 0, m_tiles), (1, m_tiles, m)):
        if first == last or not n_vectors:
            continue
        body.append(f"    for i0 in range({first}, {last}, {rows}):")
        if n_wide:
            body.append(f"        for j0 in range(0, {n_wide}, {wide}):")
            body.append(f"            _matmul_tile(a, b, c, i0, j0, {rows}, {vectors_per_row()})")
        if n_vectors > n_wide:
            body.append(f"        for j0 in range({n_wide}, {n_vectors}, {lanes}):")
            body.append(f"            _matmul_tile(a, b, c, i0, j0, {rows}, 1)")
    if n > n_vectors:  # the last columns, one by one
        body += [
            f"    for i in range({m}):",
            f"        for j in range({n_vectors}, {n}):",
            f"            s = np.{dtype.name}(0)",
            f"            for q in range({k}):",
            "                s += a[i, q] * b[q, j]",
            "            c[i, j] = s",
        ]
    return "\n".join(
        [
            f"# Generated by tracekit: a ({m}, {k}) @ ({k}, {n}) product of {dtype.name} in "
            f"registers of {vector_bytes()} bytes.",
            "import numba",
            "import numpy as np",
            "from tracekit.backends.small_matmul import _matmul_tile",
            CACHE_FLAG,
            "",
            "",
            "@numba.njit(error_model='numpy', cache=_TRACEKIT_DISK_CACHE)",
            "def small_matmul(a, b, c):",
            *(body or ["    pass"]),
            "",
        ]
    )


def kernel(m: int, k: int, n: int, dtype, disk: bool = True):
    """The compiled ``small_matmul`` of :func:`kernel_source`, once per process."""
    return _kernel(m, k, n, np.dtype(dtype).name, disk)


@functools.cache
def _kernel(m: int, k: int, n: int, dtype: str, disk: bool):
    import numba

    from . import cache

    fn = cache.load(kernel_source(m, k, n, dtype), disk=disk).small_matmul
    array = numba.types.Array(numba.from_dtype(np.dtype(dtype)), 2, "C")
    fn.compile((array, array, array))
    return fn


def _make_tile():
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    i64 = ir.IntType(64)

    @intrinsic(prefer_literal=True)
    def matmul_tile(typingctx, a, b, c, i0, j0, rows, vectors):
        """``c[i0:i0+rows, j0:j0+vectors*lanes] = a[i0:i0+rows] @ b[:, j0:j0+vectors*lanes]``
        for C-contiguous 2-D arrays of one float dtype; ``rows`` and ``vectors`` literal."""
        if not (
            all(isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" for x in (a, b, c))
            and isinstance(a.dtype, types.Float)
            and a.dtype == b.dtype == c.dtype
            and isinstance(rows, types.IntegerLiteral)
            and isinstance(vectors, types.IntegerLiteral)
        ):
            return None
        n_rows, n_vectors = rows.literal_value, vectors.literal_value
        lanes = vector_bytes() * 8 // a.dtype.bitwidth

        def codegen(context, builder, sig, args):
            attrs = builder.function.attributes
            if isinstance(attrs, set):  # llvmlite checks names against a list without these
                set.add(attrs, f'"min-legal-vector-width"="{vector_bytes() * 8}"')
            arrays = [
                context.make_array(t)(context, builder, v) for t, v in zip(sig.args[:3], args)
            ]
            (pa, pb, pc), first_row, first_col = [x.data for x in arrays], args[3], args[4]
            lda, ldb, ldc = (cgutils.unpack_tuple(builder, x.shape, 2)[1] for x in arrays)
            fty = pa.type.pointee
            vty = ir.VectorType(fty, lanes)
            vptr = vty.as_pointer()
            fmuladd = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(vty, [vty] * 3),
                f"llvm.fmuladd.v{lanes}f{a.dtype.bitwidth}",
            )
            zero = ir.Constant(vty, [ir.Constant(fty, 0.0)] * lanes)
            acc = [
                [cgutils.alloca_once_value(builder, zero) for _ in range(n_vectors)]
                for _ in range(n_rows)
            ]
            splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)
            a_rows = [
                builder.mul(builder.add(first_row, ir.Constant(i64, r)), lda) for r in range(n_rows)
            ]

            def vector_at(base, offset, v):
                at = builder.gep(base, [builder.add(offset, ir.Constant(i64, v * lanes))])
                return builder.bitcast(at, vptr)

            with cgutils.for_range(builder, lda) as loop:
                kk = loop.index
                row = builder.add(builder.mul(kk, ldb), first_col)
                bv = [builder.load(vector_at(pb, row, v), align=1) for v in range(n_vectors)]
                for r in range(n_rows):
                    x = builder.load(builder.gep(pa, [builder.add(a_rows[r], kk)]))
                    x = builder.insert_element(
                        ir.Constant(vty, ir.Undefined), x, ir.Constant(ir.IntType(32), 0)
                    )
                    x = builder.shuffle_vector(x, ir.Constant(vty, ir.Undefined), splat_mask)
                    for v in range(n_vectors):
                        s = builder.call(fmuladd, [x, bv[v], builder.load(acc[r][v])])
                        builder.store(s, acc[r][v])
            for r in range(n_rows):
                out = builder.add(
                    builder.mul(builder.add(first_row, ir.Constant(i64, r)), ldc), first_col
                )
                for v in range(n_vectors):
                    builder.store(builder.load(acc[r][v]), vector_at(pc, out, v), align=1)
            return context.get_dummy_value()

        return types.none(a, b, c, types.intp, types.intp, rows, vectors), codegen

    return matmul_tile


def __getattr__(name):  # built on first use (numba imports are slow)
    if name == "_matmul_tile":
        globals()[name] = fn = _make_tile()
        return fn
    raise AttributeError(name)
