"""Benchmark ``tracekit.backends.fastmath`` against numba's libm calls and NumPy.

For every function and dtype (10M elements by default) it times, median of
``--repeat`` runs:

* ``fast``        an njit loop calling ``fastmath.<op>_<f32|f64>``
* ``fast_par``    the same with ``parallel=True`` / ``prange``
* ``libm``        an njit loop calling ``np.<op>`` (numba lowers it to scalar libm)
* ``libm_par``    the same with ``prange``
* ``numpy``       the NumPy ufunc (``out=`` preallocated; erf: not in NumPy)

It also measures the compile time of a kernel that uses three fast functions
(first use in a fresh process, and a second kernel reusing them) against the
same kernel written with ``np.*`` calls, and writes everything to
``benchmarks/results/fastmath.json``.

    python benchmarks/fastmath.py                 # all ops, 10M elements
    python benchmarks/fastmath.py --ops exp tanh --n 1000000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numba
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracekit.backends import fastmath as fm  # noqa: E402

# input ranges typical of ML / scientific code
RANGES = {
    "exp": (-20.0, 20.0),
    "expm1": (-5.0, 5.0),
    "log": (1e-3, 100.0),
    "log1p": (-0.9, 10.0),
    "tanh": (-5.0, 5.0),
    "sigmoid": (-10.0, 10.0),
    "erf": (-4.0, 4.0),
    "sin": (-10.0, 10.0),
    "cos": (-10.0, 10.0),
    "power": (0.1, 10.0),  # base; exponent in (-4, 4)
    "exp2": (-30.0, 30.0),
    "log2": (1e-3, 100.0),
    "log10": (1e-3, 100.0),
    "sinh": (-10.0, 10.0),
    "cosh": (-10.0, 10.0),
    "tan": (-1.5, 1.5),
    "arctan": (-10.0, 10.0),
    "arcsin": (-1.0, 1.0),
    "arccos": (-1.0, 1.0),
    "arctan2": (-10.0, 10.0),  # y and x
    "arcsinh": (-10.0, 10.0),
    "arccosh": (1.0, 20.0),
    "arctanh": (-0.99, 0.99),
    "cbrt": (-100.0, 100.0),
    "hypot": (-10.0, 10.0),  # both
    "logaddexp": (-10.0, 10.0),  # both
}
BINARY = ("power", "arctan2", "hypot", "logaddexp")


def _libm_scalar(op):
    """The scalar function numba lowers to libm for `op`."""
    if op == "sigmoid":
        exp = np.exp

        @numba.njit(fastmath=False)
        def sigmoid(x):
            return 1 / (1 + exp(-x))

        return sigmoid
    if op == "erf":
        return math.erf
    return getattr(np, op)


def _loop(fn, nargs, parallel):
    jit = numba.njit(parallel=parallel, fastmath=False)
    if nargs == 1:

        def k(x, out):
            for i in numba.prange(x.shape[0]):
                out[i] = fn(x[i])

    else:

        def k(x, y, out):
            for i in numba.prange(x.shape[0]):
                out[i] = fn(x[i], y[i])

    return jit(k)


def _numpy_call(op):
    if op == "erf":
        return None
    if op == "sigmoid":
        return lambda x, out: np.divide(1, 1 + np.exp(-x), out=out)
    uf = getattr(np, op)
    if op in BINARY:
        return lambda x, y, out: uf(x, y, out=out)
    return lambda x, out: uf(x, out=out)


def _times(call, repeat):
    """(median, min) wall time of `repeat` calls after a warm-up call."""
    call()  # warm-up (compilation, page faults)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), float(np.min(ts))


def bench_op(op, dtype, n, repeat, rng):
    lo, hi = RANGES[op]
    args = [rng.uniform(lo, hi, n).astype(dtype)]
    if op in BINARY:
        args.append(rng.uniform(*((-4.0, 4.0) if op == "power" else RANGES[op]), n).astype(dtype))
    out = np.empty_like(args[0])
    fast = fm.FAST_MATH[(op, np.dtype(dtype))]
    libm = _libm_scalar(op)
    row = {}
    variants = {
        "fast": _loop(fast, len(args), False),
        "fast_par": _loop(fast, len(args), True),
        "libm": _loop(libm, len(args), False),
        "libm_par": _loop(libm, len(args), True),
    }
    for name, k in variants.items():
        row[name], row[name + "_min"] = _times(lambda k=k: k(*args, out), repeat)
    npc = _numpy_call(op)
    with np.errstate(all="ignore"):
        row["numpy"], row["numpy_min"] = (
            (None, None) if npc is None else _times(lambda: npc(*args, out), repeat)
        )
    # answer check against the libm loop (loose: this is a benchmark, not a test)
    ref = np.empty_like(out)
    variants["libm"](*args, ref)
    variants["fast"](*args, out)
    with np.errstate(all="ignore"):
        rel = np.max(np.abs(out.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-300))
    row["max_rel_diff_vs_libm"] = float(rel)
    return row


COMPILE_SNIPPET = textwrap.dedent(
    """
    import json, sys, time
    import numba, numpy as np
    sys.path.insert(0, {root!r})
    t0 = time.perf_counter()
    from tracekit.backends import fastmath as fm
    t_import = time.perf_counter() - t0
    USE_FAST = {use_fast}
    if USE_FAST:
        exp, tanh, log1p = fm.exp_f32, fm.tanh_f32, fm.log1p_f32
    else:
        exp, tanh, log1p = np.exp, np.tanh, np.log1p

    def make():
        @numba.njit(fastmath=False)
        def kernel(x, out):
            for i in range(x.shape[0]):
                v = x[i]
                out[i] = np.float32(0.5) * v * (np.float32(1) + tanh(np.float32(0.79788456) * v)) \\
                    + log1p(exp(-v))
        return kernel

    x = np.linspace(-3, 3, 1000).astype(np.float32)
    out = np.empty_like(x)
    times = []
    for _ in range(2):
        k = make()
        t0 = time.perf_counter()
        k(x, out)
        times.append(time.perf_counter() - t0)
    print(json.dumps(dict(import_s=t_import, first_s=times[0], second_s=times[1])))
    """
)


def compile_times():
    res = {}
    for label, use_fast in (("fast", True), ("libm", False)):
        code = COMPILE_SNIPPET.format(root=str(ROOT), use_fast=use_fast)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        res[label] = json.loads(p.stdout.strip().splitlines()[-1])
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", nargs="*", default=list(fm.OPS))
    ap.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "fastmath.json"))
    ap.add_argument("--no-compile-time", action="store_true")
    a = ap.parse_args(argv)

    rng = np.random.default_rng(0)
    results = []
    hdr = (
        f"{'op':8s} {'dtype':8s} {'fast':>8s} {'fast_par':>8s} {'libm':>8s} {'libm_par':>8s} "
        f"{'numpy':>8s}  (ms, n={a.n:,}, median of {a.repeat})  speedup vs libm / numpy"
    )
    print(hdr, flush=True)
    for op in a.ops:
        for dt in a.dtypes:
            row = bench_op(op, np.dtype(dt), a.n, a.repeat, rng)
            row.update(op=op, dtype=dt, n=a.n)
            results.append(row)

            def ms(v):
                return "   -    " if v is None else f"{1e3 * v:8.2f}"

            sp_np = "-" if row["numpy"] is None else f"{row['numpy'] / row['fast']:.1f}x"
            print(
                f"{op:8s} {dt:8s} {ms(row['fast'])} {ms(row['fast_par'])} {ms(row['libm'])} "
                f"{ms(row['libm_par'])} {ms(row['numpy'])}  {row['libm'] / row['fast']:5.1f}x / "
                f"{sp_np}",
                flush=True,
            )

    doc = {
        "benchmark": "fastmath",
        "n": a.n,
        "repeat": a.repeat,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "numba_threads": numba.config.NUMBA_NUM_THREADS,
            "numpy": np.__version__,
            "numba": numba.__version__,
        },
        "units": "seconds; <variant> = median, <variant>_min = fastest run",
        "results": results,
    }
    if not a.no_compile_time:
        ct = compile_times()
        doc["compile_time_3_functions"] = ct
        fast, libm = ct["fast"], ct["libm"]
        print(
            f"compile time, kernel with exp/tanh/log1p f32: fast first {fast['first_s']:.2f}s "
            f"(module import {fast['import_s']:.2f}s), second kernel {fast['second_s']:.2f}s; "
            f"np.* version {libm['first_s']:.2f}s / {libm['second_s']:.2f}s"
        )
    path = Path(a.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
