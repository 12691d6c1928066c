"""Time drawing traced graphs of about 100 / 500 / 2,000 ops with each layout engine.

Build (``tk.render``) plus layout to SVG (``.pipe(format="svg")``), median of 3, for the system
``dot`` (when installed) and the ``graphviz-pure`` command, each at ``depth="all"`` (every op
drawn) and at the default (which collapses scopes for graphs over 1,500 ops).
Prints a table and writes ``benchmarks/results/render.json``.

    .venv/bin/python benchmarks/render.py [--sizes 100 500 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import tracekit as tk  # noqa: E402

R = importlib.import_module("tracekit.render")  # tk.render is the function

HERE = os.path.dirname(os.path.abspath(__file__))
OPS_PER_BLOCK = 20


class Block:
    """A transformer-ish block in plain NumPy: 20 ops, a scope of its own."""

    def __init__(self, d, rng):
        self.w1 = rng.standard_normal((d, 2 * d)).astype(np.float32) / d**0.5
        self.w2 = rng.standard_normal((2 * d, d)).astype(np.float32) / d**0.5
        self.g = np.ones(d, np.float32)

    def norm(self, x):
        mu = x.mean(axis=-1, keepdims=True)
        xc = x - mu
        var = (xc * xc).mean(axis=-1, keepdims=True)
        return xc / np.sqrt(var + 1e-5) * self.g

    def __call__(self, x):
        h = self.norm(x)
        h = h @ self.w1
        h = 0.5 * h * (1.0 + np.tanh(0.79788456 * (h + 0.044715 * h * h * h)))
        h = h @ self.w2
        return x + h


def make_traced(n_ops: int, d: int = 16):
    rng = np.random.default_rng(0)
    blocks = [Block(d, rng) for _ in range(max(1, round(n_ops / OPS_PER_BLOCK)))]

    def model(x):
        for b in blocks:
            x = b(x)
        return x

    return tk.trace(model, rng.standard_normal((4, d)).astype(np.float32))


def engines():
    found = {}
    dot = shutil.which("dot")
    if dot:
        found["system dot"] = dot
    os.environ.pop(R.ENV_VAR, None)
    for cand in R._graphviz_pure_candidates():
        if R._executable(cand) and R._runs(cand):
            found["graphviz-pure"] = cand
            break
    return found


def time_one(traced, binary, depth, repeat):
    """Median wall seconds (build + layout), median build seconds, median engine CPU seconds."""
    walls, builds, cpus, svg_len, drawn = [], [], [], 0, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d = tk.render(traced, depth=depth)
        t1 = time.perf_counter()
        d.dot_binary = binary
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        svg = d.pipe(format="svg")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        walls.append(time.perf_counter() - t0)
        builds.append(t1 - t0)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        svg_len = len(svg)
        drawn = svg.count(b'class="node')
    med = statistics.median
    return med(walls), med(builds), med(cpus), svg_len, drawn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 2000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "render.json"))
    args = ap.parse_args(argv)

    found = engines()
    rows = []
    print(
        f"{'ops':>6} {'engine':<14} {'depth':<8} {'drawn':>6} {'total s':>8} {'build s':>8} "
        f"{'engine cpu s':>12} {'svg KB':>7}"
    )
    for size in args.sizes:
        traced = make_traced(size)
        n_ops = len(traced.graph.nodes)
        for name, binary in found.items():
            for depth in ("all", None):
                if depth is None and n_ops <= R.LARGE_GRAPH:
                    continue
                sec, build, cpu, svg_len, drawn = time_one(traced, binary, depth, args.repeat)
                label = "all" if depth == "all" else "default"
                rows.append(
                    dict(
                        ops=n_ops,
                        engine=name,
                        binary=binary,
                        depth=label,
                        drawn_nodes=drawn,
                        median_total_s=round(sec, 4),
                        median_build_s=round(build, 4),
                        median_engine_cpu_s=round(cpu, 4),
                        svg_bytes=svg_len,
                        repeat=args.repeat,
                    )
                )
                print(
                    f"{n_ops:>6} {name:<14} {label:<8} {drawn:>6} {sec:>8.2f} {build:>8.2f} "
                    f"{cpu:>12.2f} {svg_len / 1024:>7.0f}",
                    flush=True,
                )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    meta = dict(
        python=sys.version.split()[0],
        platform=platform.platform(),
        cpu_count=os.cpu_count(),
        load_average=os.getloadavg(),
        engines=found,
        note="total = tk.render() + .pipe(format='svg'), wall clock; engine cpu = the layout "
        "subprocess's user+sys time (robust to other load on the machine)",
    )
    with open(args.out, "w") as f:
        json.dump(dict(meta=meta, results=rows), f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
