#!/usr/bin/env python
"""Kernels without numba's parallel pipeline: serial chunk kernels on a pool of Python threads.

An experiment beside the CPU backend, not part of it. For a few graphs, tracekit's generated
kernel (the one with a top-level ``prange`` loop, as ``tk.compile`` makes it, not compiled by
tracekit here) is rewritten as a serial ``@numba.njit(nogil=True)`` function of a chunk
``[lo, hi)`` of that loop, run on a small persistent pool of Python threads with the calling
thread working too (one chunk on the caller where the kernel is serial), and compared with the
kernel as tracekit compiles it (``prange``: ``parallel=True``). Two pools: ``chunked`` gives
each thread one chunk (:class:`Pool`), ``claimed`` cuts the loop into 4 pieces a thread, which
free threads claim (:class:`ClaimingPool`: a worker that wakes late holds nobody up).

``--cold``: the compile in new processes (numba's import and the module's load apart, the
first call after), the two variants' processes alternating; medians of ``--repeats``.
``--warm``: time per call, the two variants interleaved in short rounds (the median round and
the fastest: on a busy machine the fastest says what the code can do, the median what it
gets), each call preceded by tracekit's thread fit (``runtime.fit_threads``; the pool runs as
many threads as numba would run; ``--all-threads``: no fit, every core), the results
of both compared first. ``--load K`` runs K busy processes during ``--warm``. Without
``--cold``, ``--warm``; ``--quick``: ``--warm`` of two kernels, briefly.

Run from the repository root::

    .venv/bin/python benchmarks/chunk_threads.py --cold --only trig,chain20 --repeats 5
    .venv/bin/python benchmarks/chunk_threads.py --cold --only hdiff,isoneutral --repeats 1
    .venv/bin/python benchmarks/chunk_threads.py --warm
    .venv/bin/python benchmarks/chunk_threads.py --warm --load 2
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import pickle
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))

from common import calibrate, fmt_time, gc_paused  # noqa: E402

VARIANTS = ("prange", "chunked")
CHAIN_SIZES = {"chain20": 10_000, "chain20-4k": 4096, "chain20-64k": 1 << 16}
CHAIN_SIZES |= {"chain20-1M": 1 << 20, "chain20-16M": 1 << 24}
COLD = ("trig", "chain20", "hdiff", "isoneutral")
WARM = ("chain20-4k", "chain20-4k-forced", "chain20-64k", "chain20-1M", "chain20-16M")
WARM += ("trig", "hdiff", "isoneutral")


def _cases() -> dict:
    """name -> (function, arguments, parallel threshold or None for tracekit's)."""
    from cold_compile import great_circle
    from cpu import make_chain
    from stencils import WORKLOADS

    rng = np.random.default_rng(0)
    cases = {"trig": (great_circle, tuple(rng.uniform(-1, 1, 10_000) for _ in range(4)), None)}
    for name, n in CHAIN_SIZES.items():
        x = rng.standard_normal(n).astype(np.float32)
        cases[name] = (make_chain(20), (x, rng.standard_normal(n).astype(np.float32)), None)
    cases["chain20-4k-forced"] = (*cases["chain20-4k"][:2], 0)  # parallel at any size
    for name in ("hdiff", "isoneutral"):
        fn, make = WORKLOADS[name]
        cases[name] = (fn, make(), None)
    return cases


# ------------------------------------------------------------------ the kernels' sources
class _Planned(Exception):
    pass


def _program(fn, args, min_parallel):
    """tracekit's CpuProgram of ``fn`` on ``args``, its source made, nothing compiled."""
    import tracekit as tk
    from tracekit.backends import cpu

    made = []

    def load(self, *a, **k):
        made.append(self)
        raise _Planned

    threshold = cpu.PARALLEL_MIN_WORK if min_parallel is None else min_parallel
    prange = {"TRACEKIT_CPU_THREADS": "prange"}  # the kernel as numba's parallel loop
    with mock.patch.object(cpu.CpuProgram, "load", load), mock.patch.dict(os.environ, prange):
        with mock.patch.object(cpu, "PARALLEL_MIN_WORK", threshold):
            try:
                tk.compile(tk.trace(fn, *args), progress=False)
            except _Planned:
                pass
    return made[0]


def chunked(source: str) -> tuple[str, int]:
    """``source``'s kernel as a serial nogil function of a chunk ``[lo, hi)`` of its top-level
    ``prange`` loop, and that loop's trip count (0: the kernel is serial; it then ignores the
    chunk). After the loop, a loop over the same range runs over the chunk; a loop over another
    (the tail of interleaved streams), in the last chunk; per-thread scratch is the call's own."""
    loops = re.findall(r"^( *)for \w+ in prange\(", source, re.MULTILINE)
    if loops not in ([], ["    "]):
        raise ValueError("a kernel of more than one prange, or of a nested one: not rewritten")
    out, trips, after = [], 0, None
    for line in source.splitlines():
        line = line.replace("numba.get_thread_id()", "0")
        loop = re.match(r"^    for (\w+) in prange\((\d+)\):$", line)
        if loop:
            trips, after = int(loop.group(2)), "body"
            out.append(f"    for {loop.group(1)} in range(lo, hi):")
            continue
        if line.startswith("@numba.njit("):
            line = "@numba.njit(nogil=True, error_model='numpy', cache=_TRACEKIT_DISK_CACHE)"
        line = line.replace("def segment(", "def segment(lo, hi, ", 1)
        if after and re.match(r"^    \S", line):
            after = "after"
        if after == "tail" and not line.startswith("        "):
            after = "after"
        if after == "after":
            again = re.match(rf"^(\s+)for (\w+) in range\({trips}\):$", line)
            tail = re.match(r"^    for \w+ in range\(\d+, \d+\):$", line)
            if again:
                line = f"{again.group(1)}for {again.group(2)} in range(lo, hi):"
            elif tail:
                out.append(f"    if hi == {trips}:")
                after = "tail"
        if after == "tail":
            line = "    " + line
        out.append(line)
    return "\n".join(out) + "\n", trips


def _only_indexes(source: str) -> bool:
    """Whether the chunk loop's index does nothing but index (a loop over elements or over
    blocks of streams): it may then count in uint64, with which numba adds no negative-index
    wraparound (with int64 bounds trig's chunk kernel ran 4x slower)."""
    i = re.search(r"for (\w+) in range\(lo, hi\)", source).group(1)
    return not re.search(rf"\b{i}\s*[-+*/]|[-+*/]\s*{i}\b", source)


def _operand(v, owner, whole):
    """(shape or None for a scalar, dtype, whether the kernel writes it)."""
    written = v in owner.outputs
    if whole:
        return list(v.shape), v.dtype.str, written
    if owner.layout.is_scalar(v) and v in owner.inputs:
        return None, v.dtype.str, written
    return list(owner.layout.operand_shape(v)), v.dtype.str, written


def generate(folder: Path, names) -> dict:
    """Write each case's two kernel modules and its facts into ``folder``."""
    from tracekit.backends.cpu import _numba_type

    cases, facts = _cases(), {}
    for name in names:
        program = _program(*cases[name])
        found = [s for s in program.segments if "prange(" in program.kernel_modules[s[0]].source]
        seg, _, _, srcs = (found or program.segments)[0]
        source = program.kernel_modules[seg].source.replace(
            "_TRACEKIT_DISK_CACHE = True", "_TRACEKIT_DISK_CACHE = False"
        )
        text, trips = chunked(source)
        owned = [op for ks in srcs for op in ks.owned_operands()]
        sig = tuple(_numba_type(v, owner, whole) for _, v, whole, owner in owned)
        (folder / f"{name}.prange.py").write_text(source)
        (folder / f"{name}.chunked.py").write_text(text)
        (folder / f"{name}.sig").write_bytes(pickle.dumps(sig))
        facts[name] = {
            "trips": trips,
            "unsigned": bool(trips) and _only_indexes(text),
            "operands": [_operand(v, owner, whole) for _, v, whole, owner in owned],
        }
    (folder / "facts.json").write_text(json.dumps(facts))
    return facts


def load_kernel(folder: Path, name: str, variant: str):
    """(the compiled segment, its facts)."""
    import numba

    facts = json.loads((folder / "facts.json").read_text())[name]
    path = folder / f"{name}.{variant}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_{variant}".replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sig = pickle.loads((folder / f"{name}.sig").read_bytes())
    if variant == "chunked":
        index = numba.uint64 if facts["unsigned"] else numba.int64
        sig = (index, index, *sig)
    module.segment.compile(sig)
    return module.segment, facts


def operands(facts, seed=0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype, _ in facts["operands"]:
        x = rng.uniform(0.5, 1.5, shape or ()).astype(dtype)
        out.append(x[()] if shape is None else x)
    return out


# ------------------------------------------------------------------ the pool
class Pool:
    """Persistent worker threads, each waiting on a lock of its own; ``run`` gives each worker
    a chunk and runs the first itself. A worker's exception is raised in the caller."""

    def __init__(self, workers: int):
        self.jobs: list = [None] * workers
        self.errors: list = [None] * workers
        self.go = [threading.Lock() for _ in range(workers)]
        self.done = [threading.Lock() for _ in range(workers)]
        for k in range(workers):
            self.go[k].acquire()
            self.done[k].acquire()
            threading.Thread(target=self._serve, args=(k,), daemon=True).start()

    def _serve(self, k):
        while True:
            self.go[k].acquire()
            kernel, args = self.jobs[k]
            try:
                kernel(*args)
            except BaseException as e:  # noqa: BLE001 (raised again in the caller)
                self.errors[k] = e
            self.done[k].release()

    def run(self, kernel, trips, args, chunks, index=int):
        """``kernel(lo, hi, *args)`` over ``[0, trips)`` in ``chunks`` chunks."""
        if chunks <= 1 or trips <= 1:
            kernel(index(0), index(trips), *args)
            return
        step = -(-trips // min(chunks, len(self.jobs) + 1, trips))
        busy = []
        for k, lo in enumerate(range(step, trips, step)):
            self.jobs[k] = (kernel, (index(lo), index(min(trips, lo + step)), *args))
            self.go[k].release()
            busy.append(k)
        try:
            kernel(index(0), index(step), *args)
        finally:
            for k in busy:
                self.done[k].acquire()
        errors = [self.errors[k] for k in busy if self.errors[k] is not None]
        for k in busy:
            self.errors[k] = None
        if errors:
            raise errors[0]


class _Job:
    """One run's pieces, claimed one at a time by whichever thread is free: a worker that
    wakes late finds them taken, and the caller never waits for a piece nobody started."""

    def __init__(self, kernel, trips, args, pieces, index):
        self.kernel, self.trips, self.args, self.index = kernel, trips, args, index
        self.step = -(-trips // pieces)
        self.pieces = -(-trips // self.step)
        self.next = self.finished = 0
        self.error = None
        self.lock = threading.Lock()
        self.all_done = threading.Lock()
        self.all_done.acquire()

    def work(self):
        while True:
            with self.lock:
                lo = self.next
                if lo >= self.trips:
                    return
                self.next = lo + self.step
            try:
                hi = min(self.trips, lo + self.step)
                self.kernel(self.index(lo), self.index(hi), *self.args)
            except BaseException as e:  # noqa: BLE001 (raised again in the caller)
                self.error = e
            with self.lock:
                self.finished += 1
                if self.finished == self.pieces:
                    self.all_done.release()


class ClaimingPool:
    """Persistent worker threads; ``run`` cuts the loop into PIECES pieces per thread, wakes
    the workers and claims pieces itself too, then waits for the pieces others started."""

    PIECES = 4

    def __init__(self, workers: int):
        self.queues = [queue.SimpleQueue() for _ in range(workers)]
        for q in self.queues:
            threading.Thread(target=self._serve, args=(q,), daemon=True).start()

    @staticmethod
    def _serve(q):
        while True:
            q.get().work()

    def run(self, kernel, trips, args, chunks, index=int):
        if chunks <= 1 or trips <= 1:
            kernel(index(0), index(trips), *args)
            return
        threads = min(chunks, len(self.queues) + 1)
        job = _Job(kernel, trips, args, min(trips, threads * self.PIECES), index)
        for q in self.queues[: threads - 1]:
            q.put(job)
        job.work()
        job.all_done.acquire()
        if job.error is not None:
            raise job.error


# ------------------------------------------------------------------ cold
def cold_child(folder: Path, name: str, variant: str) -> dict:
    t0 = time.perf_counter()
    import numba

    t1 = time.perf_counter()
    kernel, facts = load_kernel(folder, name, variant)
    t2 = time.perf_counter()
    args = operands(facts)
    if variant == "chunked":
        pool = Pool(numba.get_num_threads() - 1)
        index = np.uint64 if facts["unsigned"] else int
        pool.run(kernel, facts["trips"], args, numba.get_num_threads(), index)
    else:
        kernel(*args)
    t3 = time.perf_counter()
    return {"numba import": t1 - t0, "load + compile": t2 - t1, "first call": t3 - t2}


def cold(folder: Path, names, repeats: int):
    print(f"load average {os.getloadavg()[0]:.2f}")
    runs: dict = {}
    for _ in range(repeats):
        for name in names:
            for variant in VARIANTS:  # alternating: a change in the load reaches both
                cmd = [sys.executable, __file__, "--child", str(folder), name, variant]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
                if out.returncode:
                    raise RuntimeError(out.stderr[-3000:])
                runs.setdefault((name, variant), []).append(json.loads(out.stdout))
    print(f"{'kernel':12s} {'variant':8s} numba import  load + compile  first call  (each run)")
    for (name, variant), rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        each = ", ".join(f"{r['load + compile']:.2f}" for r in rs)
        print(
            f"{name:12s} {variant:8s} {med['numba import']:10.2f} s {med['load + compile']:12.2f} s"
            f" {med['first call']:9.3f} s  ({each})"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")


# ------------------------------------------------------------------ warm
def warm(folder: Path, names, budget: float, fit: bool = True):
    import numba

    from tracekit.backends.runtime import fit_threads as fitted

    def fit_threads():
        if fit:
            fitted()

    pools = {"chunked": Pool(numba.get_num_threads() - 1)}
    pools["claimed"] = ClaimingPool(numba.get_num_threads() - 1)
    print(f"load average {os.getloadavg()[0]:.2f}; numba threads {numba.get_num_threads()}")
    print("per call: median of rounds / fastest round; in brackets, over prange's")
    print(f"{'kernel':18s} {'prange':>20s} {'chunked':>36s} {'claimed':>36s}")
    for name in names:
        parallel, facts = load_kernel(folder, name, "prange")
        serial, _ = load_kernel(folder, name, "chunked")
        a = operands(facts)  # all on the same arrays: where they lie matters (4k aliasing)
        index = np.uint64 if facts["unsigned"] else int

        def run_prange(a=a, kernel=parallel):
            fit_threads()
            kernel(*a)

        def on(pool, a=a, kernel=serial, trips=facts["trips"], index=index):
            def run():
                fit_threads()
                pool.run(kernel, trips, a, numba.get_num_threads(), index)

            return run

        peers = {"prange": run_prange} | {k: on(pool) for k, pool in pools.items()}
        run_prange()
        want = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
        for label in pools:
            for x, (_, _, written) in zip(a, facts["operands"]):
                if written:
                    x[...] = np.nan
            peers[label]()
            for x, y in zip(a, want):
                if isinstance(x, np.ndarray) and not np.array_equal(x, y, equal_nan=True):
                    raise AssertionError(f"{name}: the {label} kernel's results differ")
        samples = short_rounds(peers, budget)
        med, low = ({k: stat(v) for k, v in samples.items()} for stat in (statistics.median, min))
        cells = [f"{fmt_time(med['prange'])} / {fmt_time(low['prange'])}"]
        for k in pools:
            ratio = f"({med[k] / med['prange']:.2f} / {low[k] / low['prange']:.2f})"
            cells.append(f"{fmt_time(med[k])} / {fmt_time(low[k])} {ratio}")
        print(f"{name:18s} {cells[0]:>20s} {cells[1]:>36s} {cells[2]:>36s}")
        sys.stdout.flush()
    print(f"load average {os.getloadavg()[0]:.2f}")


def short_rounds(peers: dict, budget: float, batch_s: float = 0.002) -> dict:
    """Seconds per call of each peer, one sample per round of ~``batch_s`` batches in a random
    order. (``common.interleaved``'s 20 ms batches in a rotating order gave the same function
    under two names 20 and 55 us per call at load 5-8: in step with other processes' own
    rounds, presumably.)"""
    rng = np.random.default_rng(0)
    numbers = {k: calibrate(fn, batch_s)[0] for k, fn in peers.items()}
    samples: dict = {k: [] for k in peers}
    end = time.perf_counter() + budget
    with gc_paused():
        while time.perf_counter() < end or len(samples[next(iter(peers))]) < 20:
            for k in rng.permutation(list(peers)):
                fn, n = peers[k], numbers[k]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                samples[k].append((time.perf_counter() - t0) / n)
    return samples


def _spin(stop):
    x = 0
    while not stop.is_set():
        x += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="compile in new processes")
    ap.add_argument("--warm", action="store_true", help="time per call")
    ap.add_argument("--only", help="comma-separated kernels: " + ", ".join(dict.fromkeys(WARM)))
    ap.add_argument("--repeats", type=int, default=3, help="new processes per --cold figure")
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of --warm timing each")
    ap.add_argument("--load", type=int, default=0, help="busy processes during --warm")
    ap.add_argument("--quick", action="store_true", help="--warm of two kernels, briefly")
    ap.add_argument("--all-threads", action="store_true", help="no thread fit in --warm")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        folder, name, variant = opts.child
        print(json.dumps(cold_child(Path(folder), name, variant)))
        return
    if opts.quick:
        opts.budget, opts.only = 0.2, opts.only or "chain20-64k,trig"
    opts.warm = opts.warm or not opts.cold
    names = opts.only.split(",") if opts.only else list(COLD if opts.cold else WARM)
    folder = Path(tempfile.mkdtemp(prefix="tk-chunk-threads-"))
    try:
        measure(opts, folder, names)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(opts, folder: Path, names):
    generate(folder, names)
    if opts.cold:
        cold(folder, names, opts.repeats)
    if opts.warm:
        stop = multiprocessing.Event()
        busy = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(opts.load)]
        for p in busy:
            p.start()
        try:
            warm(folder, names, opts.budget, fit=not opts.all_threads)
        finally:
            stop.set()
            for p in busy:
                p.join()


if __name__ == "__main__":
    main()
