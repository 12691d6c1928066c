#!/usr/bin/env python
"""Blocking cold compiles: ``tk.jit(fn, wait=True)``'s first call with an empty disk cache.

Run from the repository root::

    .venv/bin/python benchmarks/cold_compile.py                 # every graph, 3 repeats
    .venv/bin/python benchmarks/cold_compile.py --only trig,chain200 --repeats 5
    .venv/bin/python benchmarks/cold_compile.py --tracekit /path/to/other/checkout  # another
    .venv/bin/python benchmarks/cold_compile.py --tracekit /before --tracekit .  # side by side
    .venv/bin/python benchmarks/cold_compile.py --threads numba,pool  # TRACEKIT_CPU_THREADS

Each figure is the median over ``--repeats`` new processes, each with a new, empty cache
directory (``TRACEKIT_CACHE_DIR``), of the first call of ``tk.jit(fn, wait=True)``: trace,
compile, run. Three situations:

``new process``: the first compile of the process (numba's own first-use costs included) with
nothing in the cache directory; the fast-math functions are compiled too, unless the checkout's
fast-math library was precompiled at install (``make setup``: ``fastmath.precompile()``, kept
in ``tracekit/backends/fastmath_cache`` like a compiled extension), which the output says for
each checkout; the import of tracekit (before the call, not in the figure) is printed beside
it; ``warm process``: the same after another
small graph compiled in that process; ``fast-math cached``: a warm process whose cache
directory holds only the fast-math functions (compiled once per machine and kept in the cache
directory; where the library was precompiled at install, the cache directory is empty and the
functions come from there): what a new or edited graph costs a notebook.

``edit``: in one process, the k-means step compiled, then the same step with one constant
edited: the edit's compile time and how many of the five kernels it compiled again.

The issue's targets: every graph of <= 30 nodes <= 1.0 s, the 200-op chain <= 2.5 s, an edit
of one node recompiles at most one kernel. The load average is printed: on a busy machine the
figures are not comparable with another run's.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def great_circle(lat1, lon1, lat2, lon2):  # 19 float64 nodes: sin, cos, arctan2, sqrt
    dlat = lat2 - lat1
    dlon = lon2 - lon1
    a = np.sin(dlat / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin(dlon / 2) ** 2
    c = 2 * np.arctan2(np.sqrt(a), np.sqrt(1 - a))
    return 6371.0 * c


def kmeans_step(points, centers):  # five kernels around a matmul
    d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    onehot = (d.argmin(axis=1)[:, None] == np.arange(centers.shape[0])).astype(np.float64)
    return (onehot.T @ points + centers) / (onehot.sum(axis=0)[:, None] + 1.0)


def kmeans_step_edited(points, centers):  # one node edited: 2.0 for 1.0
    d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
    onehot = (d.argmin(axis=1)[:, None] == np.arange(centers.shape[0])).astype(np.float64)
    return (onehot.T @ points + centers) / (onehot.sum(axis=0)[:, None] + 2.0)


def attention(x, wq, wk, wv):  # an attention block with a layer norm and a residual
    q, k, v = x @ wq, x @ wk, x @ wv
    s = q @ k.T / np.sqrt(np.float32(q.shape[-1]))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    h = (p / p.sum(axis=-1, keepdims=True)) @ v
    mu = h.mean(axis=-1, keepdims=True)
    var = ((h - mu) ** 2).mean(axis=-1, keepdims=True)
    return (h - mu) / np.sqrt(var + 1e-5) + x


def warm_up(x):  # compiled first in a "warm process": no fast-math function
    return x * 2.0 + 1.0


def _graphs():
    sys.path.insert(0, str(HERE))
    from cpu import make_chain

    rng = np.random.default_rng(0)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "trig": (great_circle, lambda: tuple(rng.uniform(-1, 1, 10_000) for _ in range(4))),
        "chain20": (make_chain(20), lambda: (f32(10_000), f32(10_000))),
        "chain200": (make_chain(200), lambda: (f32(10_000), f32(10_000))),
        "kmeans": (
            kmeans_step,
            lambda: (rng.standard_normal((2000, 2)), rng.standard_normal((4, 2))),
        ),
        "attention": (attention, lambda: (f32(64, 32), f32(32, 32), f32(32, 32), f32(32, 32))),
    }


GRAPHS = ("trig", "chain20", "chain200", "kmeans", "attention")
MODES = ("new process", "warm process", "fast-math cached")


def _first_call(fn, args) -> tuple[float, object]:
    import tracekit as tk

    t0 = time.perf_counter()
    f = tk.jit(fn, wait=True, progress=False)
    out = f(*args)
    return time.perf_counter() - t0, (f, out)


def _compiled_kernels(program) -> int | None:
    origins = getattr(program, "origins", None)
    if origins is None:
        return None
    return sum(len(s[-1]) for s, o in zip(program.segments, origins) if o == "compiled")


def child(name: str, mode: str) -> dict:
    """One measurement, in this (new) process."""
    t0 = time.perf_counter()
    import tracekit as tk

    import_s = time.perf_counter() - t0

    graphs = _graphs()
    if mode != "new process":
        _first_call(warm_up, (np.ones(8),))
    if name == "edit":
        fn, make = graphs["kmeans"]
        args = make()
        _first_call(kmeans_step, args)
        t0 = time.perf_counter()
        c = tk.compile(tk.trace(kmeans_step_edited, *args), progress=False)
        out = c(*args)
        seconds = time.perf_counter() - t0
        np.testing.assert_allclose(out, kmeans_step_edited(*args), rtol=1e-10)
        return {"seconds": seconds, "recompiled": _compiled_kernels(c.program)}
    fn, make = graphs[name]
    args = make()
    seconds, (_, out) = _first_call(fn, args)
    np.testing.assert_allclose(out, fn(*args), rtol=1e-3, atol=1e-3)
    return {"seconds": seconds, "import_s": import_s}


def _run_child(name, mode, cache_dir, checkout) -> dict:
    """``checkout``: a checkout's folder, or ``(folder, TRACEKIT_CPU_THREADS)``."""
    tracekit_dir, threads = checkout if isinstance(checkout, tuple) else (checkout, None)
    env = dict(os.environ, TRACEKIT_CACHE_DIR=cache_dir, PYTHONPATH=tracekit_dir)
    if threads:
        env["TRACEKIT_CPU_THREADS"] = threads
    env.pop("TRACEKIT_DISABLE_DISK_CACHE", None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", name, mode]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fast_math_cache(tracekit_dir) -> str | None:
    """A cache directory holding only the fast-math functions this benchmark's graphs call."""
    primed = tempfile.mkdtemp(prefix="tk-bench-cold-")
    for name in ("trig", "chain20", "attention"):
        _run_child(name, "new process", primed, tracekit_dir)
    folder = os.path.join(primed, "fastmath")
    return folder if os.path.isdir(folder) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help=f"comma-separated graphs: {', '.join(GRAPHS)}, edit")
    ap.add_argument("--repeats", type=int, default=3, help="new processes per figure")
    ap.add_argument(
        "--tracekit",
        action="append",
        help="a checkout to import tracekit from (default: this one); given twice or more, the "
        "checkouts' processes alternate and each figure has one row per checkout",
    )
    ap.add_argument(
        "--threads",
        help="comma-separated TRACEKIT_CPU_THREADS settings (numba, pool): each checkout's "
        "processes alternate between them, one row each",
    )
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        print(json.dumps(child(*opts.child)))
        return
    names = opts.only.split(",") if opts.only else [*GRAPHS, "edit"]
    checkouts = opts.tracekit or [str(ROOT)]
    if opts.threads:
        checkouts = [(c, t) for c in checkouts for t in opts.threads.split(",")]
    fast_math = {c: _fast_math_cache(c) for c in checkouts}
    for k, c in enumerate(checkouts):
        folder, threads = c if isinstance(c, tuple) else (c, None)
        pattern = os.path.join(folder, "tracekit", "backends", "fastmath_cache", "*.nbi")
        installed = glob.glob(pattern)
        said = f"{len(installed)} functions" if installed else "none"
        setting = f", TRACEKIT_CPU_THREADS={threads}" if threads else ""
        print(f"[{k}] tracekit from {folder}{setting}; fast-math library at install: {said}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    tag = len(checkouts) > 1
    print(f"{'graph':{14 if tag else 10}s} " + " ".join(f"{m:>17s}" for m in MODES))
    for name in names:
        cells = {c: [] for c in checkouts}
        for mode in MODES:
            runs = {c: [] for c in checkouts}
            skip = name == "edit" and mode == "new process"
            for _ in range(0 if skip else opts.repeats):
                for c in checkouts:  # alternating: a change in the load reaches every checkout
                    folder = tempfile.mkdtemp(prefix="tk-bench-cold-")
                    if mode == "fast-math cached" and fast_math[c] is not None:
                        shutil.copytree(fast_math[c], os.path.join(folder, "fastmath"))
                    runs[c].append(_run_child(name, mode, folder, c))
                    shutil.rmtree(folder, ignore_errors=True)
            for c in checkouts:
                cells[c].append(_cell(name, mode, runs[c], skip))
        for k, c in enumerate(checkouts):
            label = f"{name} [{k}]" if tag else name
            print(f"{label:{14 if tag else 10}s} " + " ".join(f"{x:>17s}" for x in cells[c]))
        sys.stdout.flush()
    print(f"load average {os.getloadavg()[0]:.2f}")


def _cell(name, mode, runs, skip) -> str:
    if skip:
        return ""
    if not runs:
        return "n/a"
    cell = f"{statistics.median(r['seconds'] for r in runs):.2f} s"
    if runs[0].get("import_s") is not None and mode == "new process":
        cell += f" (+{statistics.median(r['import_s'] for r in runs):.2f})"
    if name == "edit":
        cell += f" ({runs[0]['recompiled']}/5 kernels)"
    return cell


if __name__ == "__main__":
    main()
