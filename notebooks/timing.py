"""Timing for the course notebooks: the best of several runs, printed with how busy the machine is.

Every notebook that shows a time uses ``time_all``, so every figure comes with the same caveats:

>>> import numpy as np
>>> times = time_all({"sum": lambda: np.ones(1000).sum()}, repeat=3)  # doctest: +ELLIPSIS
sum ...
>>> sorted(times)
['sum']

Why the best and not the median: a run can only be slowed down by other work, never sped up, so
the fastest of several runs is the closest to what the code itself costs (``timeit`` reports the
same). Compiled kernels run on several threads, and a parallel loop is as slow as its slowest
thread: on a machine busy with other work they lose most, and NumPy (one thread) least. The
load average and the thread count are printed beside the numbers for that reason.
"""

from __future__ import annotations

import os
import time


def best_ms(fn, repeat=7, number=1):
    """Best wall time of ``number`` calls of ``fn()`` over ``repeat`` runs, in ms per call."""
    fn()  # a first call compiles, fills caches, allocates: not what we want to time
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return 1e3 * min(runs)


def machine_line() -> str:
    """The machine as the timings saw it: cores, compiled-kernel threads, load average."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    try:
        import numba

        threads = numba.get_num_threads()
    except ImportError:
        threads = 1
    line = f"{cores} cores, {threads} numba threads, load average {load:.2f} (1 min)"
    # this notebook's own kernel is one runnable process; more than that is somebody else's work
    if load - 1 > 0.5:
        line += (
            "\nWARNING: the machine is busy: other work competes with the parallel kernels, so"
            "\nthe compiled figures below are likely too slow. Re-run on a quiet machine."
        )
    return line


def time_all(fns: dict, baseline=None, repeat=7, number=1) -> dict:
    """Time each ``name: fn`` side by side, print a table (ms per call, ratio to ``baseline``)
    and the machine line; return ``{name: ms}``."""
    times = {name: best_ms(fn, repeat, number) for name, fn in fns.items()}
    width = max(len(name) for name in times)
    for name, ms in times.items():
        ratio = f"   {times[baseline] / ms:5.2f}x {baseline}" if baseline else ""
        print(f"{name:{width}s} {ms:9.3f} ms{ratio}")
    print(f"(best of {repeat}; {machine_line()})")
    return times
