"""Shared helpers for the benchmark scripts: timing, correctness checks, machine facts, tables.

Benchmarks are scripts, never timed assertions in tests (DESIGN.md "Conventions"). Everything
here is plain NumPy + the standard library so that every script can import it.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Timing


def _time_batch(fn: Callable[[], object], number: int) -> float:
    """Seconds per call, averaged over ``number`` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def calibrate(
    fn: Callable[[], object], batch_s: float, max_number: int = 100_000
) -> tuple[int, float]:
    """(calls per batch, seconds per call): enough back-to-back calls for about ``batch_s``."""
    t = _time_batch(fn, 1)
    if t < batch_s / 10:  # too short to trust one call: measure a few
        n = max(1, min(max_number, int(batch_s / 10 / max(t, 1e-9))))
        t = _time_batch(fn, n)
    t = max(t, 1e-9)
    return max(1, min(max_number, math.ceil(batch_s / t))), t


@contextlib.contextmanager
def gc_paused():
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _others_running() -> int:
    """This process's threads other than the calling one that are running or runnable now
    (Linux; 0 elsewhere)."""
    me, n = str(threading.get_native_id()), 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for task in tasks:
        if task == me:
            continue
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                n += f.read().rpartition(")")[2].split()[0] == "R"
        except (OSError, IndexError):
            pass
    return n


def settle(pause_s: float = 0.002, most_s: float = 0.5) -> float:
    """Sleep ``pause_s``, then on until no other thread of this process runs (at most
    ``most_s`` in all): the thread pools a peer leaves spinning after its calls (torch's
    OpenMP workers spin about 10 ms, OpenBLAS's 104 ms after a product, XLA's a while too)
    would otherwise hold a core through the next peer's batch. (With ``most_s`` 0.1 the batch
    after a product met OpenBLAS's last 4 ms of spinning: torch.compile's batches of a
    18x128 by 128x2048 product then took 4-15 ms a call against 0.09 ms.) Returns the seconds
    slept."""
    t0 = time.perf_counter()
    time.sleep(pause_s)
    while _others_running() and time.perf_counter() - t0 < most_s:
        time.sleep(0.0005)
    return time.perf_counter() - t0


def interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    budget_s: float,
    min_rounds: int,
    max_rounds: int,
    batch_s: float = 0.02,
    pause_s: float = 0.002,
) -> dict[str, list[float]]:
    """Time several callables side by side; returns seconds per call, one sample per round.

    Each round runs one batch of every callable, in an order rotated from round to round, so a
    burst of load from another process on a shared machine hits every peer alike instead of
    whichever ran during it. Before each batch the thread pools the previous peer left
    spinning (OpenMP, numba, OpenBLAS, XLA) are let go idle (``settle``). The number of rounds
    fills ``budget_s`` within ``[min_rounds, max_rounds]``.
    """
    if not fns:
        return {}
    names = list(fns)
    cal = {k: calibrate(fns[k], batch_s) for k in names}
    numbers = {k: n for k, (n, _) in cal.items()}
    per_round = sum(n * t for n, t in cal.values()) + pause_s * len(names)
    rounds = int(min(max_rounds, max(min_rounds, budget_s / max(per_round, 1e-9))))
    samples: dict[str, list[float]] = {k: [] for k in names}
    deadline = time.perf_counter() + 3 * budget_s
    with gc_paused():
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for k in order:
                settle(pause_s)
                samples[k].append(_time_batch(fns[k], numbers[k]))
            if r + 1 >= min_rounds and time.perf_counter() > deadline:
                break  # the machine is much slower than calibrated: keep what we have
    return samples


def summarize(samples: list[float]) -> dict:
    """Median and spread of per-call times (seconds)."""
    s = sorted(samples)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0]] * 3
    return {
        "median_s": statistics.median(s),
        "min_s": s[0],
        "q1_s": q[0],
        "q3_s": q[2],
        "rounds": len(s),
    }


class Timeout(Exception):
    """Raised by :func:`time_limit` when a setup step runs too long."""


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Best-effort wall-clock limit (SIGALRM, main thread, POSIX only).

    A long C call (one LLVM pass) is not interrupted; the exception is raised when control
    returns to Python bytecode.
    """
    usable = (
        seconds
        and hasattr(signal, "setitimer")
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
    )
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise Timeout(f"took longer than {seconds:g} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------------------------------------
# Memory bandwidth


def copy_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 9) -> float:
    """Bytes per second of ``np.copyto`` between two big arrays (bytes read + bytes written)."""
    src = np.random.default_rng(0).random(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in
    times = []
    with gc_paused():
        for _ in range(repeats):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times)


# ---------------------------------------------------------------------------------------------
# Correctness


def as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def check(got, ref, rtol: float, atol: float) -> tuple[bool, str, float]:
    """Compare a result with NumPy's: ``|got - ref| <= atol + rtol * |ref|`` element-wise.

    ``got`` and ``ref`` may be arrays or tuples of arrays. Returns ``(ok, message, worst)``
    where ``worst`` is the largest ``|got - ref| / (atol + rtol * |ref|)`` (ok iff <= 1).
    Shapes must agree and NaNs must be in the same places. Dtype differences are reported in
    the message but judged by the caller.
    """
    got_t, ref_t = as_tuple(got), as_tuple(ref)
    if len(got_t) != len(ref_t):
        return False, f"{len(got_t)} outputs, expected {len(ref_t)}", math.inf
    worst = 0.0
    notes = []
    for i, (g, r) in enumerate(zip(got_t, ref_t)):
        g = np.asarray(g)
        r = np.asarray(r)
        tag = f"output {i}: " if len(ref_t) > 1 else ""
        if g.shape != r.shape:
            return False, f"{tag}shape {g.shape}, expected {r.shape}", math.inf
        if g.dtype != r.dtype:
            notes.append(f"{tag}dtype {g.dtype}, expected {r.dtype}")
        g64 = g.astype(np.float64)
        r64 = r.astype(np.float64)
        gn, rn = np.isnan(g64), np.isnan(r64)
        if not np.array_equal(gn, rn):
            return False, f"{tag}{int(np.sum(gn != rn))} NaNs in different places", math.inf
        gi, ri = np.isinf(g64), np.isinf(r64)
        if not np.array_equal(gi, ri) or not np.array_equal(g64[gi], r64[ri]):
            return False, f"{tag}infinities differ", math.inf
        fin = ~(rn | ri)
        if g64.size and fin.any():
            err = np.abs(g64[fin] - r64[fin]) / (atol + rtol * np.abs(r64[fin]))
            k = int(np.argmax(err))
            w = float(err[k])
            if w > worst:
                worst = w
            if w > 1.0:
                idx = np.unravel_index(np.flatnonzero(fin)[k], r.shape) if r.ndim else ()
                return (
                    False,
                    f"{tag}at {tuple(int(j) for j in idx)}: got {g64[fin][k]!r}, "
                    f"expected {r64[fin][k]!r} ({w:.3g}x the tolerance)",
                    w,
                )
    return True, "; ".join(notes), worst


# ---------------------------------------------------------------------------------------------
# Machine facts


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_revision() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "tracekit"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("+dirty" if dirty else "")) or None


def machine_info() -> dict:
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
    }


# ---------------------------------------------------------------------------------------------
# Formatting


def fmt_time(s: float | None) -> str:
    """Seconds as a short string with a unit: 2.26 s, 44.0 ms, 854 ns."""
    if s is None or not math.isfinite(s):
        return "-"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        v = s / scale
        if round(v, 2) >= 1.0 or unit == "ns":
            if round(v, 2) < 10:
                return f"{v:.2f} {unit}"
            return f"{v:.1f} {unit}" if round(v, 1) < 100 else f"{v:.0f} {unit}"
    return "-"  # pragma: no cover


def load_average() -> float | None:
    """The 1-minute load average (None where the OS does not say)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def table(headers: list[str], rows: list[list[str]], right: set[int] | None = None) -> str:
    """A plain-text table; columns in ``right`` are right-aligned."""
    right = right or set()
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells):
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if i in right else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])
