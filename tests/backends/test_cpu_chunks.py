"""Chunk kernels: parallel CPU kernels compiled as serial functions of a chunk of their
parallel loop, run on numba's threads through a parallel driver (the default, ``drivers.py``)
or on tracekit's own threads (``TRACEKIT_CPU_THREADS=pool``, ``runtime.ChunkPool``), against
the reference interpreter and against numba's parallel loops: every kernel kind that is
chunked, odd sizes, empty arrays, the libm fallback per chunk, operands of other types than a
driver's, exceptions inside kernels, and threads calling the same compiled function at once."""

from __future__ import annotations

import os
import re
import sys
import threading

import numpy as np
import pytest
from helpers.run import in_threads, quiet

import tracekit as tk
from tracekit.backends import emit_cpu, runtime

numba = pytest.importorskip("numba")

BIG = emit_cpu.POOL_MIN_WORK + 37  # elements: the pool's threads run the chunks
MIDDLE = emit_cpu.PARALLEL_MIN_WORK + 37  # a chunk kernel called as one chunk


@pytest.fixture
def pool(monkeypatch):
    """Chunk kernels, on every core whatever the machine's load (the workers do run)."""
    monkeypatch.setenv("TRACEKIT_CPU_THREADS", "pool")
    monkeypatch.setattr(runtime, "other_load", lambda: 0)
    return runtime


@pytest.fixture
def driven(monkeypatch):
    """The default mode, every chunk kernel however small run through a driver."""
    from tracekit.backends import drivers

    monkeypatch.delenv("TRACEKIT_CPU_THREADS", raising=False)
    monkeypatch.setattr(drivers, "worth_driving", lambda *args: True)
    return drivers


@pytest.fixture(params=["pool", "numba"])
def chunked(request, monkeypatch):
    """Chunk kernels, their chunks on the pool's threads or on numba's (a driver)."""
    from tracekit.backends import drivers

    monkeypatch.setenv("TRACEKIT_CPU_THREADS", request.param)
    monkeypatch.setattr(runtime, "other_load", lambda: 0)
    monkeypatch.setattr(drivers, "worth_driving", lambda *args: True)
    return request.param


def compiled(fn, *args):
    with quiet():
        t = tk.trace(fn, *args)
        return t, tk.compile(t, cache=False, progress=False)


def kinds(c) -> list:
    """The kinds of the kernels compiled as chunk kernels."""
    return sorted(
        ks.group.kind + ("+tiles" if ks.step.tiles else "") for ks in c.program.chunks.values()
    )


def check(fn, *args, rtol=1e-12, atol=1e-14):
    """``fn`` compiled both ways and interpreted on ``args``: the same values."""
    t, c = compiled(fn, *args)
    want = t(*args)
    with quiet():
        got = c(*args)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return c


def chain(x, y):
    return np.tanh(x * 1.5 + y) * np.exp(-x * x) + np.sqrt(np.abs(y))


def trig(a, b):
    return np.sin(a) * np.cos(b) + np.arctan2(a, b + 3.0)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def column_norms(x):
    return np.sqrt((np.exp(x * 0.1) ** 2).sum(axis=0)) + np.tanh(x).mean(axis=0)


def running(x):
    return np.cumsum(np.sin(x), axis=1)


def bias_gelu(x, b):
    z = x + b
    return 0.5 * z * (1.0 + np.tanh(0.7978845608 * (z + 0.044715 * z**3)))


@pytest.mark.parametrize("n", [BIG, BIG + 1, 3 * 5 * 7 * 11 * 13 * 17 + 1, MIDDLE, 1, 0])
def test_elementwise_chunk_kernels_match_the_interpreter(chunked, n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    c = check(chain, x, y)
    if n >= MIDDLE:
        assert kinds(c) == ["elementwise"] and "prange(" not in c.source
        assert "nogil=True" in c.source
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    check(chain, x32, y32, rtol=2e-6, atol=1e-6)  # (float32: interleaved streams)


def test_broadcast_chunk_kernels_chunk_their_outer_loop(chunked):
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal((1031, 257)), rng.standard_normal(257)
    c = check(bias_gelu, x, b)
    assert kinds(c) == ["elementwise"]
    check(bias_gelu, x.astype(np.float32), b.astype(np.float32), rtol=2e-6, atol=1e-6)
    check(bias_gelu, x[:, ::2], b[::2])  # a strided input


def test_huge_arguments_take_the_libm_fallback_in_their_chunk_only(chunked):
    """sin's version for ordinary arguments misses huge ones: the kernel computes the chunks
    that met one again through libm (see ``_near_first``); elements in other chunks keep
    their fast values, and every value is right."""
    rng = np.random.default_rng(2)
    a, b = rng.uniform(-3, 3, BIG), rng.uniform(-3, 3, BIG)
    for where in (0, BIG // 2, BIG - 1):
        a2 = a.copy()
        a2[where] = 1e300
        c = check(trig, a2, b, rtol=1e-13, atol=1e-15)
        assert kinds(c) == ["elementwise"]
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        a32[where] = 1e30
        check(trig, a32, b32, rtol=3e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(1201, 301), (3, 70001), (70001, 3), (0, 300)])
def test_row_reductions_chunk_their_rows(chunked, shape):
    x = np.random.default_rng(3).standard_normal(shape)
    c = check(softmax, x)
    if x.size:
        assert kinds(c) == ["row"]


@pytest.mark.parametrize("shape", [(301, 1201), (1000, 130), (300, 0)])
def test_column_reductions_chunk_their_column_blocks(chunked, shape):
    x = np.random.default_rng(4).standard_normal(shape)
    c = check(column_norms, x)
    if x.size:
        assert kinds(c) == ["row"] and re.search(r"for k\d+_cb in range\(k\d+_lo", c.source)


def centred_rows(x):
    y = np.log1p(np.abs(x)) * 1.5
    d = y - y.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5) * y


def centred_columns(x):
    d = x - x.mean(axis=0)
    return d / np.sqrt((d * d).mean(axis=0) + 1e-5) * np.exp(-np.abs(x))


@pytest.mark.parametrize("fn", [centred_rows, centred_columns])
def test_scratch_is_never_allocated_on_numbas_threads(chunked, fn):
    """A chunk kernel on numba's threads takes its scratch (accumulators, row values, values
    kept for a later pass) as rows of arrays its caller passes, one row per thread (malloc
    on numba's threads contends for a lock where two threads share an arena); on the
    pool's Python threads, which all have numba's thread id 0, each chunk allocates its own.
    Threads calling the kernel at once each have theirs."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((1201, 301))
    t, c = compiled(fn, x)
    (ks,) = c.program.chunks.values()
    if chunked == "numba":
        assert ks.workspace and "np.empty(" not in c.source and "get_thread_id()" in c.source
    else:
        assert not ks.workspace and "np.empty(" in c.source
    inputs = [x * (k + 1) for k in range(4)]
    wants = [t(a) for a in inputs]

    def call(k):
        for _ in range(10):
            np.testing.assert_allclose(c(inputs[k]), wants[k], rtol=1e-12, atol=1e-14)

    in_threads(call, 4)


@pytest.mark.parametrize("fn", [centred_rows, centred_columns])
def test_a_parallel_loops_scratch_is_one_row_per_thread_allocated_before_it(fn, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CPU_THREADS", "prange")  # numba's parallel loops
    monkeypatch.setattr(runtime, "other_load", lambda: 0)
    x = np.random.default_rng(14).standard_normal((1201, 301))
    c = check(fn, x)
    body = c.source[c.source.index("prange(") :]
    assert "np.empty(" not in body and "get_thread_id()" in body
    assert re.search(r"np\.empty\(\(\d+, \d+\)", c.source[: c.source.index("prange(")])


def test_scans_chunk_their_rows(chunked):
    x = np.random.default_rng(5).standard_normal((4099, 67))
    c = check(running, x)
    assert kinds(c) == ["elementwise", "scan"]


def test_whole_array_reductions_keep_numba_parallel_loops(chunked):
    x = np.random.default_rng(6).standard_normal(BIG * 4)
    c = check(lambda x: np.sum(np.sin(x) ** 2), x)
    assert not c.program.chunks and "prange(" in c.source


def costly(a):
    b = np.tanh(a[1:] - a[:-1]) * np.exp(-a[1:] * a[1:])
    return b[2:] * b[1:-1] - 0.5 * b[:-2] + b[1:-1, ::-1]


def test_tiled_kernels_chunk_their_tiles_with_scratch_per_call(chunked, monkeypatch):
    from tracekit.backends import tiles

    a = np.random.default_rng(8).standard_normal((403, 200))
    monkeypatch.setattr(tiles, "TILE_BYTES", 8 * a.shape[1] * 11)
    c = check(costly, a, rtol=1e-13, atol=1e-14)
    assert kinds(c) == ["elementwise+tiles"] and "get_thread_id" not in c.source


def test_loops_keep_numba_parallel_loops(chunked):
    """A loop's driver calls its kernels from inside numba: no chunk kernels there."""
    x = np.random.default_rng(9).standard_normal(BIG)

    def f(x):
        for _ in range(100):  # rolled into a loop
            x = np.tanh(x) * 1.1 + 0.1
        return x

    t, c = compiled(f, x)
    assert c.program.loops and not c.program.chunks
    np.testing.assert_allclose(c(x), t(x), rtol=1e-13)


@pytest.mark.parametrize("first", [True, False], ids=["caller", "worker"])
def test_an_exception_in_any_chunk_is_raised_in_the_caller(pool, first):
    """The runner's call of a chunk kernel raises what any of its chunks raised (the first
    chunk runs on the caller, the others on the pool's threads), and the pool serves on."""
    x = np.random.default_rng(10).uniform(1.0, 2.0, BIG)
    t, c = compiled(lambda x: np.log(x * 2.0) + np.sin(x), x)
    (name,) = c.program.chunks
    kernel = c.runner.ns[name]

    def failing(lo, hi, *args):
        if (lo == 0) == first:
            raise FloatingPointError(f"chunk [{lo}, {hi})")
        kernel(lo, hi, *args)

    c.runner.ns[name] = failing
    with pytest.raises(FloatingPointError, match="chunk"):
        c(x)
    c.runner.ns[name] = kernel
    np.testing.assert_allclose(c(x), t(x), rtol=1e-13)


def test_threads_calling_the_same_compiled_function_at_once(chunked):
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal(BIG), rng.standard_normal(BIG)
    t, c = compiled(chain, x, y)
    inputs = [(x * k, y + k) for k in range(6)]
    wants = [t(*a) for a in inputs]

    def call(k):
        for _ in range(20):
            np.testing.assert_allclose(c(*inputs[k]), wants[k], rtol=1e-12, atol=1e-14)

    in_threads(call, 6)


def test_chunk_kernels_run_on_numba_threads_by_default(driven, monkeypatch):
    x = np.random.default_rng(12).standard_normal(BIG)
    t, c = compiled(chain, x, x)
    assert kinds(c) == ["elementwise"] and list(c.program.drivers) == list(c.program.chunks)
    assert "prange(" not in c.source and "nogil=True" in c.source
    np.testing.assert_allclose(c(x, x), t(x, x), rtol=1e-12, atol=1e-14)
    monkeypatch.setenv("TRACEKIT_CPU_THREADS", "prange")  # numba's parallel loops
    t, c = compiled(chain, x, x)
    assert not c.program.chunks and "prange(" in c.source
    np.testing.assert_allclose(c(x, x), t(x, x), rtol=1e-12, atol=1e-14)
    monkeypatch.setenv("TRACEKIT_CPU_THREADS", "openmp")
    with pytest.raises(ValueError, match="TRACEKIT_CPU_THREADS='openmp'"):
        compiled(chain, x, x)


def test_large_chunk_kernels_alone_run_through_a_driver(monkeypatch):
    """By default a kernel that is no large tiled one (``drivers.worth_driving``) stays
    numba's parallel loop; one that is runs as a chunk kernel through a driver."""
    from tracekit.backends import drivers

    monkeypatch.delenv("TRACEKIT_CPU_THREADS", raising=False)
    x = np.random.default_rng(15).standard_normal(BIG)

    def small(x):
        return x * 2.0 + 1.0

    t, c = compiled(small, x)
    assert not c.program.chunks and "prange(" in c.source
    monkeypatch.setattr(drivers, "worth_driving", lambda *args: True)
    t, c = compiled(small, x)
    assert list(c.program.drivers) == ["segment0"] and "prange(" not in c.source
    np.testing.assert_allclose(c(x), t(x), rtol=1e-15)


def _laplace3_stage(v):
    c = v[1:-1, 1:-1, 1:-1]
    return 6.0 * c - (
        v[2:, 1:-1, 1:-1] + v[:-2, 1:-1, 1:-1] + v[1:-1, 2:, 1:-1]
        + v[1:-1, :-2, 1:-1] + v[1:-1, 1:-1, 2:] + v[1:-1, 1:-1, :-2]
    )  # fmt: skip


def test_a_stencils_backward_stage_reads_its_pads_through_a_driver(monkeypatch):
    """A backward stencil stage reads the gradient of each shifted slice through its pad,
    in place: such a kernel runs as a chunk kernel through a driver (compiled once, not four
    times), and the bounds of its pads on outer loops' indices are one branchless value
    (``&``) that LLVM takes out of the inner loop, the inner loop's own bound last."""
    monkeypatch.delenv("TRACEKIT_CPU_THREADS", raising=False)
    rng = np.random.default_rng(22)
    x, w = rng.standard_normal((33, 34, 35)), rng.standard_normal((29, 30, 31))

    def loss(x, w):
        return (_laplace3_stage(_laplace3_stage(x)) * w).sum()

    t, c = compiled(tk.grad(loss), x, w)
    assert c.program.drivers and "prange(" not in c.program.source
    outer_then_inner = r"if \(1 <= (\w+)\) & \(\1 < \d+\) & \(1 <= (\w+)\) & \(\2 < \d+\) and "
    assert re.search(outer_then_inner, c.program.source), c.program.source
    np.testing.assert_allclose(c(x, w), t(x, w), rtol=1e-13, atol=1e-12)


def test_operands_of_other_types_run_through_the_driver_too(driven):
    """A kernel signature's launch takes the operand types it was compiled for; read-only
    inputs (other numba types) get a kernel, an entry and a launch of their own at their first
    call, and run through the same driver on numba's threads."""
    x = np.random.default_rng(13).standard_normal(BIG)
    t, c = compiled(chain, x, x)
    (run,) = c.program.drivers.values()
    fixed = x.copy()
    fixed.flags.writeable = False
    for _ in range(2):
        np.testing.assert_allclose(c(fixed, fixed), t(x, x), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(c(fixed, x), t(x, x), rtol=1e-12, atol=1e-14)
    assert len(run.launches) == 3 and all(run.launches.values())
    assert len(run.kernel.overloads) == 3 and len(run.drive.overloads) == 1


def _unaligned(x):
    """A copy of float64 ``x`` at an odd address (numba's type: ``aligned=False``)."""
    buffer = np.zeros(x.nbytes + 1, np.uint8)
    out = np.frombuffer(buffer.data[1:], np.float64)
    out[...] = x
    assert not out.flags.aligned
    return out


def triads(t, s, mask):
    """The slopes of an ocean model's isoneutral mixing: differences at neighbouring offsets
    along the innermost axis, a limiter and a tanh taper (benchmarks/stencil_programs.py)."""
    n = t.shape[2]
    drdt, drds = -mask * (1.67e-4 + 1e-5 * t), mask * (7.6e-4 - 2e-6 * t)
    dtdz, dsdz = t[:, :, 1:] - t[:, :, :-1], s[:, :, 1:] - s[:, :, :-1]
    dtdx, dsdx = t[1:] - t[:-1], s[1:] - s[:-1]
    out = 0.0
    for px in (0, 1):
        for kr in (0, 1):
            x, z = slice(1 + px, t.shape[0] - 1 + px), slice(kr, n - 2 + kr)
            at_t, at_s = drdt[x, 1:-1, 1:-1], drds[x, 1:-1, 1:-1]
            along = at_t * dtdx[1:, 1:-1, 1:-1] + at_s * dsdx[1:, 1:-1, 1:-1]
            vert = at_t * dtdz[x, 1:-1, z] + at_s * dsdz[x, 1:-1, z]
            slope = -along / (np.where(vert < 0.0, vert, 0.0) - 1e-20)
            out = out + 0.5 * (1.0 + np.tanh((1e-3 - np.abs(slope)) / 1e-3)) * slope
    return out


def test_a_chunk_kernel_reading_neighbours_along_its_inner_loop_vectorises(driven):
    """A chunk kernel's arrays are ``noalias``, so LLVM's GVN could keep a load of ``a[i + 1]``
    for the next iteration's ``a[i]``: a value carried around the loop, which left the
    vectoriser out (isoneutral: 23 ms, its loop scalar; 8 ms vectorised). tracekit turns that
    off (``scalar._allow_alias_checks``): the loop's machine code is mostly packed operations."""
    rng = np.random.default_rng(16)
    t, s = rng.standard_normal((20, 20, 20)), rng.standard_normal((20, 20, 20))
    mask = (rng.random((20, 20, 20)) > 0.1) * 1.0
    c = check(triads, t, s, mask, rtol=1e-11, atol=1e-13)
    (name,) = c.program.chunks
    asm = "\n".join(c.program.module.__dict__[name].inspect_asm().values())
    packed = len(re.findall(r"\tv\w+pd\t.*%[xyz]mm", asm))
    scalar = len(re.findall(r"\tv\w+sd\t", asm))  # (the loop's remainder, the tiles' loops)
    assert packed > scalar / 2, (packed, scalar)


def test_unaligned_operands_and_types_without_a_launch(driven, monkeypatch):
    """Unaligned arrays give the same values; operands of a type with no spelling in a
    launch's source run the kernel as one chunk on the calling thread, through a copy with
    numba's Python wrapper (the driven kernel has none: ``_DrivenPipeline``)."""
    x = np.random.default_rng(15).standard_normal(BIG)
    t, c = compiled(chain, x, x)
    np.testing.assert_allclose(c(_unaligned(x), x), t(x, x), rtol=1e-12, atol=1e-14)
    monkeypatch.setattr(driven, "entry_source", lambda types: None)
    t, c = compiled(chain, x, x * 0.5)
    (run,) = c.program.drivers.values()
    np.testing.assert_allclose(c(x, x * 0.5), t(x, x * 0.5), rtol=1e-12, atol=1e-14)
    assert list(run.launches.values()) == [None]


def test_drivers_are_cached_on_disk(driven, monkeypatch, tmp_path):
    """The calls of a kernel signature through the driver go to the disk cache beside its
    kernel (numba refuses to cache a function that calls ``numba.get_num_threads``: the runner
    passes the count)."""
    import warnings
    from collections import OrderedDict

    from tracekit.backends import cache

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_modules", OrderedDict())  # none loaded in this process yet
    x = np.random.default_rng(14).standard_normal(BIG)
    with quiet():
        t = tk.trace(chain, x, x * 0.5)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        c = tk.compile(t, progress=False)
    assert not [w for w in said if "Cannot cache" in str(w.message)]
    assert len(c.program.drivers) == 1
    assert list((tmp_path / "__pycache__").glob("tk_*.launch-*.nbi"))  # the kernel signature's
    np.testing.assert_allclose(c(x, x * 0.5), t(x, x * 0.5), rtol=1e-12, atol=1e-14)


def test_one_driver_serves_every_kernel_signature_compiled_where_installed(tmp_path):
    """The driver is one function for every chunk kernel, whatever its operands: compiled once
    into the folder :func:`drivers.precompile` is given (``make setup``: the installed one),
    and loaded from there by a process whose own cache directory is empty."""
    import subprocess

    from tracekit.backends import drivers

    installed = tmp_path / "installed"
    drivers.precompile(str(installed))
    code = (
        "import numba, numpy as np\n"
        "from tracekit.backends import drivers\n"
        "@numba.njit(nogil=True)\n"
        "def fill(lo, hi, out, rows):\n"
        "    for i in range(lo, hi):\n"
        "        out[i] = rows[i, 0] + i\n"
        "    return 0\n"
        "out, rows = np.zeros(100), np.ones((100, 3), np.float32)\n"
        "types = (numba.int64, numba.int64, numba.typeof(out), numba.typeof(rows))\n"
        "fill.compile(types)\n"
        "run = drivers.chunk_driver(fill, types)\n"
        "run(100, 8, out, rows)\n"
        "assert (out == np.arange(100) + 1).all()\n"
        "print(len(run.drive.stats.cache_hits), len(run.drive.stats.cache_misses))\n"
    )
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "empty")}
    code = f"from tracekit.backends import drivers; drivers.INSTALLED = {str(installed)!r}\n" + code
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"]  # the driver from the installed folder
    assert not list((tmp_path / "empty").glob("**/tk_*.drive-*"))


DTYPES = [bool, np.int8, np.uint16, np.int32, np.uint64, np.float32, np.float64, np.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_drivers_entry_spells_every_operand_type_a_kernel_takes(dtype):
    """A kernel signature's entry names its operands' numba types in its source (they are its
    disk cache's key): arrays of every dtype, layout and writeability, and numbers; a type it
    cannot spell would leave the kernel on one thread."""
    from numba.core import types

    from tracekit.backends.drivers import _spelled

    a = np.zeros((3, 4), dtype)
    fixed = a.copy()
    fixed.flags.writeable = False
    for value in (a, a.T, a[:, ::2], fixed, a[0], np.zeros((), dtype), a.reshape(-1)[0]):
        t = numba.typeof(value)
        assert eval(_spelled(t), {"types": types}) == t, t


@pytest.mark.parametrize("trips, grain", [(1001, 4), (7, 1), (1, 8), (0, 1), (64, 64)])
def test_a_driver_covers_the_loop_once_in_whole_grains(trips, grain):
    from tracekit.backends.drivers import chunk_driver

    @numba.njit(nogil=True)
    def count(lo, hi, seen, starts):
        for i in range(lo, hi):
            seen[i] += 1
            starts[i] = lo
        return 0

    types = (numba.int64, numba.int64, numba.int64[::1], numba.int64[::1])
    count.compile(types)
    run = chunk_driver(count, types, disk=False)
    seen, starts = np.zeros(trips, np.int64), np.zeros(trips, np.int64)
    run(trips, grain, seen, starts)
    assert (seen == 1).all() and (starts % grain == 0).all()
    assert len(np.unique(starts)) <= numba.get_num_threads()


# ---------------------------------------------------------------------- the pool itself
def test_the_pool_cuts_whole_grains_and_covers_the_loop_once():
    seen, lock = [], threading.Lock()

    def kernel(lo, hi, out):
        with lock:
            seen.append((int(lo), int(hi)))
        out[lo:hi] += 1

    pool = runtime.ChunkPool()
    for trips, grain, threads in [(100, 1, 3), (1000, 48, 4), (47, 48, 4), (0, 1, 4), (5, 1, 8)]:
        seen.clear()
        out = np.zeros(trips)
        pool.run(kernel, trips, grain, np.uint64, (out,), threads)
        assert (out == 1).all()
        assert len(seen) <= max(1, threads)
        assert all(lo % grain == 0 for lo, _ in seen)


def test_a_workers_exception_is_raised_in_the_caller_and_the_pool_serves_on():
    def kernel(lo, hi):
        if lo > 0:
            raise ZeroDivisionError(f"chunk from {lo}")

    pool = runtime.ChunkPool()
    with pytest.raises(ZeroDivisionError, match="chunk from"):
        pool.run(kernel, 10, 1, int, (), 3)
    out = np.zeros(10)
    pool.run(lambda lo, hi, o: o.__setitem__(slice(lo, hi), 1), 10, 1, int, (out,), 3)
    assert (out == 1).all()


def test_a_busy_pool_lets_another_caller_run_its_chunks_itself():
    pool = runtime.ChunkPool()
    inner = []

    def outer(lo, hi):
        if lo == 0:  # while the pool runs this call, another one
            pool.run(lambda lo, hi: inner.append((lo, hi)), 8, 1, int, (), 4)

    pool.run(outer, 8, 1, int, (), 2)
    assert inner == [(0, 8)]


def test_the_workers_hold_no_argument_once_their_chunks_end():
    """A chunk's arguments are the caller's again when the call returns: a result buffer the
    caller has dropped is reused by the next call, as with numba's threads."""
    out = np.zeros(64)
    held = sys.getrefcount(out)
    pool = runtime.ChunkPool()
    pool.run(lambda lo, hi, o: o.__setitem__(slice(lo, hi), 1), 64, 1, int, (out,), 4)
    assert (out == 1).all() and sys.getrefcount(out) == held


def test_a_chunked_result_dropped_by_the_caller_is_reused(pool):
    x = np.random.default_rng(3).standard_normal(BIG)
    t, c = compiled(chain, x, x)
    with quiet():
        first = c(x, x)
        address = first.ctypes.data
        del first
        again = c(x, x)
    assert again.ctypes.data == address
    np.testing.assert_allclose(again, t(x, x), rtol=1e-12, atol=1e-14)


def test_a_chunk_kernel_marks_its_arrays_noalias_as_numba_marks_a_parallel_loop_body(driven):
    """A chunk kernel is compiled by ``_NoAliasPipeline`` (``_DrivenPipeline`` where only
    the driver calls it: the same, without the Python wrapper): its pointer arguments (the
    arrays' data) are ``noalias`` in its LLVM, as numba makes a ``prange`` body's where it
    finds no aliases; without the mark its loops vectorized only behind run-time checks (7-10%
    slower). A kernel that writes what it reads (an in-place update) still gives the
    interpreter's values."""
    x = np.linspace(-2.0, 2.0, BIG)
    c = check(chain, x, x[::-1].copy())
    assert c.program.chunks
    name = next(iter(c.program.chunks))
    module = c.program.kernel_modules[name]
    assert "pipeline_class=_DrivenPipeline" in module.source
    dispatcher = c.program.module.__dict__[name]
    llvm = "\n".join(dispatcher.inspect_llvm().values())
    defines = [ln for ln in llvm.splitlines() if ln.startswith("define") and "segment" in ln]
    assert any(ln.count("noalias") >= 3 for ln in defines), defines
    assert not any("cpython" in ln for ln in defines), defines  # no Python wrapper

    def update(a, b):
        a[1:] = a[1:] * 2.0 + b[1:]
        return a

    a = np.linspace(0.0, 1.0, BIG)
    t, c = compiled(update, a.copy(), a)
    np.testing.assert_array_equal(c(a.copy(), a), t(a.copy(), a))


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _great_circle(a, b):
    d = np.sin((b - a) / 2) ** 2 + np.cos(a) * np.cos(b) * np.sin((b + a) / 2) ** 2
    return 2 * np.arctan2(np.sqrt(d), np.sqrt(1 - d))


def _gelu32(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    "fn, shapes, dtype, driven",
    [
        (_softmax, [(600, 512)], np.float32, True),  # a row kernel
        (_great_circle, [(BIG,), (BIG,)], np.float64, True),  # float64 fast-math calls
        (_gelu32, [(BIG,)], np.float32, False),
    ],  # a float32 chain: numba's loop  # fmt: skip
    ids=["softmax", "great-circle", "gelu-f32"],
)
def test_which_kernels_take_a_driver_by_default(fn, shapes, dtype, driven, monkeypatch):
    """By default a row kernel, or one calling float64 fast-math functions four times or more,
    runs as a chunk kernel through a driver (one compile of its body, not four); a float32
    elementwise chain stays numba's parallel loop (its chunk form ran 3-5% slower)."""
    monkeypatch.delenv("TRACEKIT_CPU_THREADS", raising=False)
    monkeypatch.setattr(runtime, "other_load", lambda: 0)
    rng = np.random.default_rng(21)
    args = [rng.uniform(-1.0, 1.0, s).astype(dtype) for s in shapes]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    c = check(fn, *args, rtol=tol, atol=tol)
    assert bool(c.program.drivers) == driven
    assert ("prange(" in c.source) != driven
