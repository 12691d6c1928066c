#!/usr/bin/env python
"""``tk.jit``'s tiers: time to first answer, and how much an off-path compile disturbs the caller.

Run from the repository root::

    .venv/bin/python benchmarks/tiers.py                  # both sections (a few minutes)
    .venv/bin/python benchmarks/tiers.py --only first     # time to first answer only
    .venv/bin/python benchmarks/tiers.py --only disturb   # compile server against thread only

``first``: per workload of ``benchmarks/cpu.py`` (its quick sizes; ``--full`` for its full
ones), with an empty disk cache: NumPy's eager time and the trace time (warm: medians of three
in a row), the first answer of ``tk.jit`` (the trace's own answer or the interpreter's) and of
``tk.jit(wait=True)`` (compile, then run). The issue's target is first answer <= trace + 1.5 x
NumPy. A first answer follows other work (in a notebook, the cells before), and a trace timed
right after a compile takes up to 2-3x its warm time (caches, clocks): so the first answers
and a second set of traces are each timed right after the same event, a blocking compile of
the workload from an empty cache (medians of three), and the target is given both ways.

``disturb``: while a new graph's kernels compile off the caller's path, the caller keeps calling
an interpreted 20-op chain; its calls per second during the compile, relative to the rate just
before, and its 90th-percentile call time, for the compile server and for a thread, rounds
interleaved. numba's compiler holds the GIL much of the time, which a thread takes from the
caller. Medians; the load average is printed with them (a shared machine is noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))

from common import fmt_time, load_average  # noqa: E402
from cpu import WORKLOADS, make_chain  # noqa: E402

import tracekit as tk  # noqa: E402
from tracekit.backends import cache, compile_server  # noqa: E402


def _fresh_cache():
    """An empty disk cache, and none of the modules this process loaded (a cold compile)."""
    os.environ["TRACEKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="tk-bench-tiers-")
    cache._modules.clear()


def _median_time(fn, n=3):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _after_a_compile(w, args) -> float:
    """Seconds of a blocking ``tk.jit`` call of ``w`` from an empty disk cache: what the
    machine did just before each timed first answer, and just before each trace timed the
    same way (its caches and the compiler's threads then are as a notebook's after a cell)."""
    _fresh_cache()
    f = tk.jit(w.fn, wait=True, progress=False)
    t0 = time.perf_counter()
    f(*args)
    return time.perf_counter() - t0


def first_answer(full: bool, rounds: int = 3) -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for w in WORKLOADS:
        args = w.make(not full, rng)
        numpy_s = _median_time(lambda w=w, args=args: w.fn(*args))
        trace_s = _median_time(lambda w=w, args=args: tk.trace(w.fn, *args))
        row = {"workload": w.name, "numpy_s": numpy_s, "trace_s": trace_s}
        blocking, traces, firsts, compiled_after = [], [], [], []
        for _ in range(rounds):  # each timed call right after the same event: a cold compile
            blocking.append(_after_a_compile(w, args))
            t0 = time.perf_counter()
            tk.trace(w.fn, *args)
            traces.append(time.perf_counter() - t0)
            _after_a_compile(w, args)
            g = tk.jit(w.fn, wait=False, progress=False)
            t0 = time.perf_counter()
            g(*args)
            firsts.append(time.perf_counter() - t0)
            row["tiered_tier"] = g.tier
            g.wait()
            compiled_after.append(time.perf_counter() - t0)
        row["blocking_s"] = statistics.median(blocking)
        row["trace_after_compile_s"] = statistics.median(traces)
        row["tiered_s"] = statistics.median(firsts)
        row["compiled_after_s"] = statistics.median(compiled_after)
        row["target_s"] = row["trace_after_compile_s"] + 1.5 * numpy_s
        row["target_warm_s"] = trace_s + 1.5 * numpy_s
        rows.append(row)
        print(
            f"{w.name:13s} numpy {fmt_time(numpy_s):>9s}  trace {fmt_time(trace_s):>9s} "
            f"(after a compile {fmt_time(row['trace_after_compile_s']):>9s})  first answer "
            f"{fmt_time(row['tiered_s']):>9s} (target {fmt_time(row['target_s'])}; "
            f"{fmt_time(row['target_warm_s'])} from the warm trace)  compiled after "
            f"{row['compiled_after_s']:.2f} s  blocking {fmt_time(row['blocking_s']):>9s}",
            flush=True,
        )
    return rows


def _caller_calls(traced, args, stop: threading.Event) -> list[float]:
    times = []
    while not stop.is_set():
        t0 = time.perf_counter()
        traced(*args)
        times.append(time.perf_counter() - t0)
    return times


def _rate(traced, args, seconds: float) -> float:
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    return len(_caller_calls(traced, args, stop)) / seconds


def disturbance(rounds: int, n: int) -> dict:
    x = np.linspace(-3, 3, n, dtype=np.float32)
    y = np.linspace(0.5, 1.0, n, dtype=np.float32)
    caller = tk.trace(make_chain(20), x, y)
    _fresh_cache()
    os.environ["TRACEKIT_JIT_COMPILER"] = "process"  # the server started, numba imported here
    t0 = time.perf_counter()
    warm = tk.jit(make_chain(3), wait=False, progress=False)
    warm(x, y)
    warm.wait()
    print(f"compile server's first job (start, imports, compile): {time.perf_counter() - t0:.2f} s")
    out: dict = {"process": [], "thread": []}
    length = 21
    for r in range(rounds):
        for mode in ("process", "thread") if r % 2 == 0 else ("thread", "process"):
            os.environ["TRACEKIT_JIT_COMPILER"] = mode
            base = _rate(caller, (x, y), 1.0)
            length += 1  # a graph no earlier round compiled
            f = tk.jit(make_chain(length), wait=False, progress=False)
            stop = threading.Event()
            times: list = []
            worker = threading.Thread(
                target=lambda times=times, stop=stop: times.extend(
                    _caller_calls(caller, (x, y), stop)
                )
            )
            t0 = time.perf_counter()
            f(x, y)
            worker.start()
            f.wait()
            wall = time.perf_counter() - t0
            stop.set()
            worker.join()
            rate = len(times) / wall
            p90 = sorted(times)[int(0.9 * len(times))] if times else float("nan")
            out[mode].append({"compile_s": wall, "relative_rate": rate / base, "p90_s": p90})
            print(
                f"  round {r} {mode:7s}: compiled in {wall:5.2f} s; caller at "
                f"{rate / base:4.0%} of its rate, p90 call {fmt_time(p90)}",
                flush=True,
            )
    for mode, runs in out.items():
        print(
            f"{mode:7s} medians: compile {statistics.median(r['compile_s'] for r in runs):.2f} s, "
            f"caller at {statistics.median(r['relative_rate'] for r in runs):.0%} of its rate, "
            f"p90 call {fmt_time(statistics.median(r['p90_s'] for r in runs))}"
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("first", "disturb"))
    p.add_argument("--full", action="store_true", help="cpu.py's full sizes for 'first'")
    p.add_argument("--rounds", type=int, default=3)
    opts = p.parse_args(argv)
    print(f"load average before: {load_average()}")
    if opts.only in (None, "first"):
        print("== time to first answer, empty disk cache")
        first_answer(opts.full)
    if opts.only in (None, "disturb"):
        for n in (1_000, 100_000):
            print(f"== the caller's interpreted 20-op chain on {n:,} float32 during a compile")
            disturbance(opts.rounds, n)
    print(f"load average after: {load_average()}")
    compile_server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
