"""What the compiled targets share at run time, below all of them: device arrays, ``out=``
checks, whether numba simulates CUDA. Imports nothing of tracekit."""

from __future__ import annotations

import contextlib
import os
import threading
import time

import numpy as np


def is_device_array(x) -> bool:
    """An array in GPU memory (``__cuda_array_interface__``: numba, CuPy, torch; or a CUDA
    simulator array), which the cuda target uses in place."""
    if isinstance(x, np.ndarray | np.generic):
        return False
    return hasattr(x, "__cuda_array_interface__") or bool(getattr(x, "__cuda_ndarray__", False))


def device_array_types(args) -> tuple:
    """The types of the device arrays anywhere in ``args`` (extra pytree leaf types)."""
    found, todo = set(), list(args)
    while todo:
        x = todo.pop()
        if isinstance(x, tuple | list):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.values())
        elif is_device_array(x):
            found.add(type(x))
    return tuple(found)


def check_out_types(outs, results):
    """Each ``out=`` buffer has its result's shape, and a dtype the result casts to."""
    for i, (o, v) in enumerate(zip(outs, results or ())):
        shape, dtype = getattr(o, "shape", None), getattr(o, "dtype", None)
        if shape is not None and tuple(shape) != v.shape:
            raise ValueError(f"out[{i}]: the result is {v.type}, got an array of shape {shape}")
        if dtype is not None and not np.can_cast(v.dtype, dtype, "same_kind"):
            raise TypeError(f"out[{i}]: cannot store the {v.type} result in an array of {dtype}")


def simulator_active() -> bool:
    """Whether numba runs CUDA kernels in its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    import numba

    cfg = getattr(getattr(numba, "cuda", None), "config", None) or numba.config
    return bool(getattr(cfg, "ENABLE_CUDASIM", 0))


# ---------------------------------------------------------------------- threads on a busy machine
# A parallel region ends when its slowest thread does; on a machine whose cores other processes
# keep busy, one of its threads is often descheduled for a whole time slice, and a kernel NumPy
# runs in a millisecond takes tens (benchmarks/loaded.py). So the kernels run on as many numba
# threads as there are cores the rest of the machine leaves free (one at least), sampled at most
# every SAMPLE_S seconds from the count of runnable tasks (Linux; elsewhere the load average).
SAMPLE_S = 0.25
_per_thread = threading.local()
_load = [-SAMPLE_S, 0, 0]  # when sampled, other processes' runnable tasks, the last sample
_gate = [0.0, None]  # until when the last caller's thread count stands, and its thread


def _runnable(path: str) -> int:
    with open(path) as f:
        return int(f.read().split()[3].split("/")[0])


def _own_running() -> int:
    """This process's threads that are running or runnable now (spinning numba workers too)."""
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                n += f.read().rpartition(")")[2].split()[0] == "R"
        except OSError:
            pass
    return n


def _others_running() -> int:
    """The machine's runnable tasks less this process's. A thread of this process that starts
    or stops running between the two reads (a thread pool going idle after a call: numba's,
    OpenBLAS's, a peer library's) would look like another process's: it counts as this
    process's if it ran at either of two looks, one on each side of the machine's count.
    (With one look, right after calls of torch.compile and jax.jit functions, 45% of samples
    saw another process where there was none, and tracekit's kernels ran on one thread for the
    next ``SAMPLE_S``: 12% with two looks, 0.7% with two looks in both of two samples.)"""
    before = _own_running()
    runnable = _runnable("/proc/loadavg")
    return runnable - max(before, _own_running())


def other_load() -> int:
    """Cores the rest of the machine keeps busy now (other processes' runnable tasks), looked
    at again after ``SAMPLE_S`` seconds: the fewer of this look's and the last one's, so that
    a task that ran for a moment does not take a core from the kernels for ``SAMPLE_S``."""
    now = time.monotonic()
    if now - _load[0] >= SAMPLE_S:
        try:
            others = _others_running()
        except (OSError, ValueError, IndexError):
            try:
                others = int(os.getloadavg()[0])
            except OSError:
                others = 0
        _load[:] = [now, max(0, min(others, _load[2])), others]
    return _load[1]


@contextlib.contextmanager
def one_thread():
    """Run the calling thread's kernels on one numba thread inside the block, for callers that
    are themselves parallel (dask's chunks) or that measure serial speed.

    >>> with one_thread():
    ...     pass
    """
    import numba

    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(threads)


def runs_parallel(function) -> bool:
    """Whether numba function ``function`` may start a parallel region: it or a numba function
    its module (or theirs) holds was compiled with ``parallel=``.

    >>> import numba
    >>> runs_parallel(numba.njit(lambda x: x + 1))
    False
    """
    from numba.core.registry import CPUDispatcher

    seen, todo = set(), [function]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if f.targetoptions.get("parallel", False) is not False:  # (numba empties a dict of
            return True  # options as it compiles: {} is parallel too)
        todo += [v for v in f.py_func.__globals__.values() if isinstance(v, CPUDispatcher)]
    return False


def fit_threads():
    """Set the calling thread's numba thread count for its next kernels: the count it had
    (``numba.set_num_threads``) less the cores other processes keep busy, one at least."""
    now = time.monotonic()
    if now < _gate[0] and _gate[1] == threading.get_ident():
        return
    _gate[:] = [now + SAMPLE_S, threading.get_ident()]
    import numba

    chosen = getattr(_per_thread, "chosen", None)
    if chosen is None or numba.get_num_threads() != chosen:  # (first call, or the user set it)
        _per_thread.base = numba.get_num_threads()
    want = max(1, _per_thread.base - other_load())
    if want != chosen:
        numba.set_num_threads(want)
        _per_thread.chosen = want


# ------------------------------------------------------------------ BLAS threads on a busy machine
# OpenBLAS's threads wait for each other the same way: with other processes busy on every core,
# a product one BLAS thread finishes in 0.7 ms takes 40 ms on two (benchmarks/README.md). So
# tracekit's own BLAS and LAPACK calls run on as many BLAS threads as the cores the rest of the
# machine leaves free (never more than the library is set to), lowered just before the call and
# restored just after: the user's own NumPy calls keep the library's setting. The setting is the
# library's, process-wide: a product another Python thread of the user's runs while tracekit's
# runs gets the lowered count too. OpenBLAS only (NumPy's and SciPy's wheels, most builds); with
# another BLAS, or none found, the calls run as NumPy makes them.
_OPENBLAS_SYMBOLS = (
    "scipy_openblas_{}_num_threads64_",
    "scipy_openblas_{}_num_threads",
    "openblas_{}_num_threads64_",
    "openblas_{}_num_threads",
)
# OpenBLAS runs a product on one thread whatever its setting below these sizes (its interface
# code: m * n * k for a matrix product, m * n for a matrix-vector one, against 65536 and 2304
# times GEMM_MULTITHREAD_THRESHOLD, 4 by default): tracekit calls those as NumPy does.
ONE_THREAD_GEMM, _ONE_THREAD_GEMV = 65536 * 4, 2304 * 4
_blas_lock = threading.Lock()
_blas_state = {"controls": None, "depth": 0, "ones": 0, "restore": (), "as_set": 0}


def _loaded_openblas() -> list[str]:
    """The OpenBLAS libraries this process has loaded (NumPy's, SciPy's), as file paths."""
    try:
        with open("/proc/self/maps") as f:
            found = {ln.split(maxsplit=5)[5].strip() for ln in f if "openblas" in ln.lower()}
    except (OSError, IndexError):
        import glob

        root = os.path.dirname(os.path.dirname(np.__file__))
        found = glob.glob(os.path.join(root, "numpy*", "*openblas*"))
        found += glob.glob(os.path.join(root, "numpy", ".dylibs", "*openblas*"))
    return sorted(found)


def openblas_controls() -> list[tuple]:
    """``(get, set)`` of each loaded OpenBLAS library's thread count (found once per process).

    >>> all(callable(get) and callable(put) for get, put in openblas_controls())
    True
    """
    if _blas_state["controls"] is None:
        import ctypes

        controls = []
        for path in _loaded_openblas():
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for name in _OPENBLAS_SYMBOLS:
                get = getattr(lib, name.format("get"), None)
                put = getattr(lib, name.format("set"), None)
                if get is not None and put is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    put.restype, put.argtypes = None, [ctypes.c_int]
                    controls.append((get, put))
                    break
        _blas_state["controls"] = controls
    return _blas_state["controls"]


def _lower_blas_threads(one: bool = False):
    """Set every OpenBLAS library's thread count for a call of tracekit's starting now: one
    (``one``: the caller runs BLAS on threads of its own) or the cores other processes leave
    free. The counts the libraries had are kept by the first call to start and restored when
    the last one ends; while any call on one thread runs, the libraries stay on one."""
    with _blas_lock:
        state = _blas_state
        if not state["depth"] and not state["ones"]:
            state["restore"] = [(get, put, get()) for get, put in openblas_controls()]
        state["ones" if one else "depth"] += 1
        for get, put, count in state["restore"]:
            _put_if_changed(get, put, 1 if state["ones"] else max(1, count - other_load()))


def _restore_blas_threads(one: bool = False):
    with _blas_lock:
        state = _blas_state
        state["ones" if one else "depth"] -= 1
        if state["ones"]:
            return
        for get, put, count in state["restore"]:
            _put_if_changed(get, put, count if not state["depth"] else max(1, count - other_load()))
        if not state["depth"]:
            state["restore"] = ()


def _put_if_changed(get, put, count: int):
    if get() != count:
        put(count)


@contextlib.contextmanager
def blas_threads_as_set():
    """tracekit's BLAS calls, in every thread while the block runs, on the library's own thread
    count, as the user's NumPy calls (for comparisons, or where the caller sets the count).

    >>> with blas_threads_as_set():
    ...     pass
    """
    with _blas_lock:
        _blas_state["as_set"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_state["as_set"] -= 1


def blas_may_thread(a_shape, b_shape) -> bool:
    """Whether OpenBLAS may run ``a @ b`` of these shapes on more than one thread.

    >>> blas_may_thread((8, 8), (8, 8)), blas_may_thread((8, 1024), (1024, 199))
    (False, True)
    """
    if len(a_shape) >= 2 and len(b_shape) >= 2:
        return a_shape[-2] * a_shape[-1] * b_shape[-1] > ONE_THREAD_GEMM
    matrix = max(a_shape, b_shape, key=len)  # a matrix and a vector, or no matrix
    return len(matrix) >= 2 and matrix[-2] * matrix[-1] > _ONE_THREAD_GEMV


def fitted_blas(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, a BLAS or LAPACK call, on the BLAS threads the cores other
    processes leave free, the library's own count restored after it (even when it raises).

    >>> import numpy as np
    >>> fitted_blas(np.matmul, np.eye(2), np.ones((2, 1))).ravel()
    array([1., 1.])
    """
    if _blas_state["as_set"]:
        return fn(*args, **kwargs)
    _lower_blas_threads()
    try:
        return fn(*args, **kwargs)
    finally:
        _restore_blas_threads()


def on_one_blas_thread(fn, *args):
    """``fn(*args)`` with every OpenBLAS library on one thread, restored after it: for a numba
    parallel function each of whose threads calls BLAS (:mod:`.matmul_threads`).

    >>> on_one_blas_thread(max, 1, 2)
    2
    """
    _lower_blas_threads(one=True)
    try:
        return fn(*args)
    finally:
        _restore_blas_threads(one=True)


# ------------------------------------------------------------ chunk kernels on Python threads
# A parallel kernel of a plan without loops may compile as a serial ``nogil`` function of a
# chunk [lo, hi) of its parallel loop (emit_cpu.KernelSource.chunk), which skips numba's parfor
# pipeline for the kernel itself. By default (``numba``) the kernels drivers.worth_driving picks
# do (tiled, row and float64 fast-math kernels), their chunks run on numba's threads by a small
# parallel driver that calls them by address (drivers.py), and the others stay numba's
# parallel loops; with TRACEKIT_CPU_THREADS=pool every parallel kernel is a chunk kernel, its
# chunks on a small persistent pool of Python threads, the calling thread doing one; with
# ``prange``, every parallel kernel is numba's parallel loop (its body compiled at four levels).
THREAD_MODES = ("numba", "pool", "prange")


def thread_mode() -> str:
    """How parallel CPU kernels run (``TRACEKIT_CPU_THREADS``, one of :data:`THREAD_MODES`).

    >>> thread_mode() in THREAD_MODES
    True
    """
    mode = os.environ.get("TRACEKIT_CPU_THREADS", "numba").strip().lower()
    if mode not in THREAD_MODES:
        raise ValueError(f"TRACEKIT_CPU_THREADS={mode!r}: choose one of {THREAD_MODES}")
    return mode


def chunk_kernels() -> bool:
    """Whether parallel CPU kernels may compile as functions of a chunk of their loop (every
    mode but ``prange``; by default only those ``drivers.worth_driving`` picks).

    >>> chunk_kernels() in (True, False)
    True
    """
    return thread_mode() != "prange"


class _Worker:
    """A persistent thread running one chunk at a time, each handed over through a lock."""

    def __init__(self):
        self.job, self.error = None, None
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        threading.Thread(target=self._serve, daemon=True, name="tracekit-chunks").start()

    def _serve(self):
        while True:
            self.go.acquire()
            kernel, args = self.job
            self.job = None
            try:
                kernel(*args)
            except BaseException as e:  # noqa: BLE001 (raised again in the caller)
                self.error = e
            # dropped before the caller wakes: an argument held here until the next chunk was
            # a buffer the runner could not reuse (``cpu._recycled``), a large result then
            # page-faulting afresh in every call
            del kernel, args
            self.done.release()

    def start(self, kernel, args):
        self.job = (kernel, args)
        self.go.release()

    def wait(self):
        """The chunk's exception, or None, once it has ended."""
        self.done.acquire()
        error, self.error = self.error, None
        return error


class ChunkPool:
    """Threads that run a chunk kernel's chunks, the caller running the first. One caller at
    a time: another thread's call, while the pool is busy, runs all its chunks itself."""

    def __init__(self):
        self.busy = threading.Lock()
        self.workers: list = []

    def run(self, kernel, trips: int, grain: int, index, args: tuple, threads: int):
        """``kernel(lo, hi, *args)`` over ``[0, trips)`` in up to ``threads`` chunks, each
        ``lo`` a multiple of ``grain``, the bounds of type ``index``; a chunk's exception is
        raised here (the first chunk's first)."""
        per_thread = -(-trips // max(1, threads))
        step = -(-per_thread // grain) * grain
        if threads <= 1 or step >= trips or not self.busy.acquire(blocking=False):
            kernel(index(0), index(trips), *args)
            return
        try:
            self._run(kernel, trips, step, index, args)
        finally:
            self.busy.release()

    def _run(self, kernel, trips, step, index, args):
        starts = range(step, trips, step)
        while len(self.workers) < len(starts):
            self.workers.append(_Worker())
        for worker, lo in zip(self.workers, starts):
            worker.start(kernel, (index(lo), index(min(trips, lo + step)), *args))
        try:
            kernel(index(0), index(step), *args)
        finally:
            errors = [worker.wait() for worker in self.workers[: len(starts)]]
        for error in errors:
            if error is not None:
                raise error


_pool = [ChunkPool()]
if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
    os.register_at_fork(after_in_child=lambda: _pool.__setitem__(0, ChunkPool()))


def run_chunks(kernel, trips: int, grain: int, index, args: tuple):
    """Chunk kernel ``kernel`` over its ``trips`` on the calling thread's numba thread count
    (:func:`fit_threads` lowers it on a busy machine) of threads.

    >>> import numpy as np
    >>> out = np.zeros(6)
    >>> def fill(lo, hi, a):
    ...     a[lo:hi] = np.arange(lo, hi)
    >>> run_chunks(fill, 6, 1, int, (out,)); out
    array([0., 1., 2., 3., 4., 5.])
    """
    import numba

    _pool[0].run(kernel, trips, grain, index, args, numba.get_num_threads())
