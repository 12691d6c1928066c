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
_load = [-SAMPLE_S, 0]  # when sampled, other processes' runnable tasks
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


def other_load() -> int:
    """Cores the rest of the machine keeps busy now (other processes' runnable tasks), looked
    at again after ``SAMPLE_S`` seconds."""
    now = time.monotonic()
    if now - _load[0] >= SAMPLE_S:
        try:
            others = _runnable("/proc/loadavg") - _own_running()
        except (OSError, ValueError, IndexError):
            try:
                others = int(os.getloadavg()[0])
            except OSError:
                others = 0
        _load[:] = [now, max(0, others)]
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
