#!/usr/bin/env python
"""The two forms of tracekit's parallel CPU kernels side by side in one process, per call.

Run from the repository root::

    .venv/bin/python benchmarks/thread_forms.py                         # cpu.py's workloads
    .venv/bin/python benchmarks/thread_forms.py --only gelu,chain20 --all-threads

Each of ``cpu.py``'s workloads (full sizes) is compiled twice, with ``TRACEKIT_CPU_THREADS``
``numba`` (``prange`` loops on numba's threads, the default) and ``pool`` (chunk kernels on
tracekit's own threads), and the two are called in turns, ``--rounds`` rounds of ``--round``
seconds each. Per call: the wall time (median and fastest round), the CPU time of the calling
thread and of the whole process (numba's threads wait spinning, so its process time counts
their wait too) and the minor page faults (a result allocated afresh instead of reused). On a
busy machine ``runtime.fit_threads`` runs both forms on fewer threads; ``--all-threads`` runs
both on every core whatever the load (CPU times and page faults are then the firmer figures).
tracekit is imported as ``PYTHONPATH`` says (``PYTHONPATH=/other/checkout``: that one's).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import tracekit as tk  # as PYTHONPATH says (before cpu.py, which puts this checkout on the path)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import load_average  # noqa: E402

FORMS = ("numba", "pool")


def _compiled(w, args):
    made, want = {}, w.fn(*args)
    for form in FORMS:
        os.environ["TRACEKIT_CPU_THREADS"] = form
        made[form] = c = tk.compile(tk.trace(w.fn, *args), progress=False)
        atol = w.atol * float(np.max(np.abs(want)))
        np.testing.assert_allclose(c(*args), want, rtol=w.rtol, atol=atol, err_msg=form)
    os.environ.pop("TRACEKIT_CPU_THREADS")
    return made


def _round(c, args, seconds) -> tuple:
    """(wall, calling thread's CPU, process CPU, minor faults) per call over one round."""
    calls, f0 = 0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        c(*args)
        calls += 1
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    spent = (time.perf_counter() - t0, time.thread_time() - c0, time.process_time() - p0)
    return (*(s / calls for s in spent), faults / calls)


def main():
    import cpu

    workloads = {w.name: w for w in cpu.WORKLOADS}
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="gelu,softmax,layernorm,blackscholes,chain20,chain200")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--round", type=float, default=0.05, help="seconds per form and round")
    ap.add_argument("--all-threads", action="store_true", help="every core whatever the load")
    ap.add_argument("--quick", action="store_true", help="cpu.py's quick sizes, 3 rounds")
    opts = ap.parse_args()
    print(f"tracekit from {Path(tk.__file__).parent.parent}")
    if opts.all_threads:
        from tracekit.backends import runtime

        runtime.other_load = lambda: 0
    print(f"load average {load_average():.2f}")
    print(
        f"{'workload':<14}{'form':<7}{'wall med':>10}{'wall min':>10}{'caller CPU':>12}"
        f"{'process CPU':>13}{'faults':>8}"
    )
    for name in opts.only.split(","):
        w = workloads[name]
        args = w.make(opts.quick, np.random.default_rng(0))
        made = _compiled(w, args)
        rounds = {form: [] for form in FORMS}
        for _ in range(3 if opts.quick else opts.rounds):
            for form in FORMS:
                rounds[form].append(_round(made[form], args, opts.round))
        for form in FORMS:
            wall, caller, process, faults = (statistics.median(col) for col in zip(*rounds[form]))
            fastest = min(r[0] for r in rounds[form])
            print(
                f"{name:<14}{form:<7}{wall * 1e6:>8.0f}us{fastest * 1e6:>8.0f}us"
                f"{caller * 1e6:>10.0f}us{process * 1e6:>11.0f}us{faults:>8.0f}"
            )
    print(f"load average {load_average():.2f}")


if __name__ == "__main__":
    main()
