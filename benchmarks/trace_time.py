"""How long ``tk.trace`` takes on large unrolled loops (1k, 5k, 10k, 20k nodes).

Two programs, each unrolled by a Python loop so the graph grows linearly:

- ``chain``: ``x = x * a + b`` (2 elementwise nodes per iteration),
- ``mixed``: a matmul, a slice, a setitem through a view, a reduction and an in-place op per
  iteration (9 nodes: views, functionalised writes, source lines and scopes all work).

Prints a table (median of ``--repeat`` runs, seconds and microseconds per node) and writes
``benchmarks/results/trace_time.json``. A benchmark, not a test: nothing here asserts a time.

    .venv/bin/python benchmarks/trace_time.py            # 1k/5k/10k/20k nodes, 5 runs each
    .venv/bin/python benchmarks/trace_time.py --quick    # 1k/5k, 2 runs
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracekit as tk  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "trace_time.json"


def chain(n_nodes):
    def f(x, a, b):
        for _ in range(n_nodes // 2):
            x = x * a + b
        return x

    args = (np.ones(64), np.float64(1.0001), np.float64(0.5))
    return f, args, 2


def _block(u, w):
    h = np.tanh(u @ w)  # matmul, tanh
    v = u[1:, :]  # a view
    v += h[:-1] * 0.5  # multiply, add, write through the view (index_update)
    return u - u.mean(axis=0, keepdims=True)  # mean, subtract


def mixed(n_nodes):
    per = 9

    def f(u, w):
        for _ in range(max(1, n_nodes // per)):
            u = _block(u, w)
        return u

    return f, (np.ones((8, 8)), np.eye(8) * 0.1), per


PROGRAMS = {"chain": chain, "mixed": mixed}


def measure(make, n_nodes, repeat):
    fn, args, _ = make(n_nodes)
    times, nodes = [], None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        t = tk.trace(fn, *args, loops="unroll")  # every iteration's nodes: what tracing costs
        times.append(time.perf_counter() - t0)
        nodes = len(t.graph.nodes)
        del t
    return nodes, times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,10000,20000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1k and 5k nodes, 2 runs")
    ap.add_argument("--json", default=str(RESULTS))
    ap.add_argument("--no-json", action="store_true")
    a = ap.parse_args(argv)
    sizes = [1000, 5000] if a.quick else [int(s) for s in a.sizes.split(",")]
    repeat = 2 if a.quick else a.repeat

    rows = []
    header = f"{'program':8} {'target':>7} {'nodes':>7} {'median s':>9} {'min s':>7} {'us/node':>8}"
    print(header)
    print("-" * len(header))
    for name, make in PROGRAMS.items():
        for n in sizes:
            nodes, times = measure(make, n, repeat)
            med = statistics.median(times)
            row = {
                "program": name,
                "target_nodes": n,
                "nodes": nodes,
                "median_s": med,
                "min_s": min(times),
                "runs_s": times,
                "us_per_node": 1e6 * med / nodes,
            }
            rows.append(row)
            print(
                f"{name:8} {n:>7} {nodes:>7} {med:>9.3f} {min(times):>7.3f} "
                f"{row['us_per_node']:>8.1f}"
            )
    ten_k = [r for r in rows if r["target_nodes"] == 10000]
    for r in ten_k:
        print(f"10k-node unrolled loop ({r['program']}): {r['median_s']:.2f} s (median)")
    if not a.no_json:
        out = {
            "benchmark": "trace_time",
            "repeat": repeat,
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
            "rows": rows,
        }
        path = Path(a.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
