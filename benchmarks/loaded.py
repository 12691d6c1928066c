#!/usr/bin/env python
"""Compiled small kernels on a busy machine: tracekit against NumPy in the same loaded run.

Run from the repository root::

    .venv/bin/python benchmarks/loaded.py              # a busy process on every core
    .venv/bin/python benchmarks/loaded.py --load 0     # the same table on the machine as it is
    .venv/bin/python benchmarks/loaded.py --pool       # and a column of chunk kernels

While ``--load`` processes (default: one per core) spin, every workload runs as NumPy, as
tracekit's compiled code (``tk.jit(wait=True)``, numba's threads as configured), and as the
same compiled code with one numba thread (``numba.set_num_threads(1)`` around the call): the
third column says what a serial kernel would give; and as tracekit's compiled code with its
BLAS calls on the library's own thread count (``blas_threads_as_set``: as before tracekit fitted
them to the free cores); with ``--pool``, also compiled with ``TRACEKIT_CPU_THREADS=pool``
(chunk kernels on tracekit's own threads). Small kernels (the ones whose parallel regions
wait for a descheduled thread), products with an epilogue
(``benchmarks/random_programs.py``'s programs 83, 181, 56) and ``benchmarks/cpu.py``'s
workloads at its quick sizes.
Medians of interleaved rounds; ratios are NumPy's time / the peer's (above 1.0: faster).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))

from common import fmt_time, load_average  # noqa: E402
from cpu import WORKLOADS  # noqa: E402

import tracekit as tk  # noqa: E402
from tracekit.backends.runtime import blas_threads_as_set, one_thread  # noqa: E402


def l2_norm(x):
    return np.sqrt((x * x).sum())


def cronbach_alpha(items):
    k = items.shape[1]
    item_var = items.var(axis=0, ddof=1).sum()
    total_var = items.sum(axis=1).var(ddof=1)
    return k / (k - 1) * (1.0 - item_var / total_var)


def evolve(u, v):
    lap = u[:-2] + u[2:] - 2.0 * u[1:-1]
    return u[1:-1] + 0.1 * lap - 0.05 * v[1:-1] * u[1:-1]


def repeat_rows(x):
    return np.broadcast_to(x[:, None], (x.shape[0], 8)).reshape(-1) * 2.0


def affine_square(a, w, bias):
    return np.square(a @ w + bias)


def affine_cos(a, w, bias):
    return np.cos((a @ w + bias) / 1.7)


def affine_powers(a, w, bias):
    v = a @ w + bias
    return ((((1.4142135 + v) / (np.abs(v) + 4.0)) ** 4 / 4.0) + 0.698) ** -2


def _affine_args(rng, m, k, n, dtype):
    return tuple(rng.standard_normal(s).astype(dtype) for s in ((m, k), (k, n), (n,)))


def matmul_workloads(rng):
    return [
        ("mm83 f64", affine_powers, _affine_args(rng, 8, 1024, 199, np.float64)),
        ("mm181 f32", affine_square, _affine_args(rng, 18, 128, 2048, np.float32)),
        ("mm56 f32", affine_cos, _affine_args(rng, 1065, 256, 64, np.float32)),
    ]


def small_workloads(rng):
    return [
        ("l2norm", l2_norm, (rng.standard_normal(200_000),)),
        ("cronbach", cronbach_alpha, (rng.standard_normal((2_000, 20)),)),
        ("evolve", evolve, (rng.standard_normal(200_000), rng.standard_normal(200_000))),
        ("repeat", repeat_rows, (rng.standard_normal(20_000),)),
    ]


def _spin(stop):
    x = 0
    while not stop.is_set():
        x += 1


def _median_call(fn, args, batch_s=0.02):
    n, t0 = 0, time.perf_counter()
    while True:
        fn(*args)
        n += 1
        t = time.perf_counter() - t0
        if t >= batch_s:
            return t / n


def _serial(fn):
    def call(*args):
        with one_thread():
            return fn(*args)

    return call


def _blas_as_set(fn):
    def call(*args):
        with blas_threads_as_set():
            return fn(*args)

    return call


def _compiled_with_pool(fn, args):
    """``fn`` compiled with chunk kernels on tracekit's own threads, checked."""
    os.environ["TRACEKIT_CPU_THREADS"] = "pool"
    try:
        f = tk.jit(fn, wait=True, progress=False)
        np.testing.assert_allclose(f(*args), fn(*args), rtol=1e-4, atol=1e-5)
    finally:
        del os.environ["TRACEKIT_CPU_THREADS"]
    return f


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--load", type=int, default=os.cpu_count(), help="busy processes")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--pool", action="store_true", help="also TRACEKIT_CPU_THREADS=pool")
    opts = p.parse_args(argv)
    rng = np.random.default_rng(0)
    cases = small_workloads(rng) + matmul_workloads(rng)
    cases += [(w.name, w.fn, w.make(True, rng)) for w in WORKLOADS]
    peers = {}
    for name, fn, args in cases:
        f = tk.jit(fn, wait=True, progress=False)
        np.testing.assert_allclose(f(*args), fn(*args), rtol=1e-4, atol=1e-5)
        peers[name] = {
            "numpy": fn,
            "tracekit": f,
            "tracekit 1 thread": _serial(f),
            "tracekit BLAS as set": _blas_as_set(f),
        }
        if opts.pool:
            peers[name]["tracekit pool"] = _compiled_with_pool(fn, args)
    stop = multiprocessing.Event()
    load = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(opts.load)]
    for proc in load:
        proc.start()
    try:
        time.sleep(1.0)
        times = {name: {peer: [] for peer in peers[name]} for name, _, _ in cases}
        for _ in range(opts.rounds):
            for name, _, args in cases:
                for peer, fn in peers[name].items():
                    times[name][peer].append(_median_call(fn, args))
        during = load_average()
    finally:
        stop.set()
        for proc in load:
            proc.join()
    print(f"{opts.load} busy processes on {os.cpu_count()} cores; 1-min load average {during}")
    print(
        f"{'':13s} {'numpy':>10s} {'tracekit':>10s} {'ratio':>6s} {'1 thread':>10s} {'ratio':>6s}"
        f" {'BLAS as set':>11s} {'ratio':>6s}"
        + (f" {'pool':>10s} {'ratio':>6s}" if opts.pool else "")
    )
    for name, _, _ in cases:
        med = {peer: statistics.median(t) for peer, t in times[name].items()}
        base = med["numpy"]
        print(
            f"{name:13s} {fmt_time(base):>10s} {fmt_time(med['tracekit']):>10s} "
            f"{base / med['tracekit']:6.2f} {fmt_time(med['tracekit 1 thread']):>10s} "
            f"{base / med['tracekit 1 thread']:6.2f} {fmt_time(med['tracekit BLAS as set']):>11s} "
            f"{base / med['tracekit BLAS as set']:6.2f}"
            + (
                f" {fmt_time(med['tracekit pool']):>10s} {base / med['tracekit pool']:6.2f}"
                if opts.pool
                else ""
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
