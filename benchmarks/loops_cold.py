"""Cold trace + roll + compile of each loop workload in a new process with an empty disk cache.

The figure a user meets in a fresh kernel: one process per workload and trip count, each with a
cache directory of its own (numba's first use and the fast-math functions' compile included),
``tk.trace`` then ``tk.compile``; the import is reported apart. ``loops.py`` measures the same in
one process, where later trip counts reuse the loop's machine code.

    .venv/bin/python benchmarks/loops_cold.py --only jacobi,nested --steps 10,1000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import load_average  # noqa: E402

CHILD = r"""
import sys, time, warnings, json
sys.path.insert(0, sys.argv[3])
t0 = time.perf_counter()
import tracekit as tk
import loops
t1 = time.perf_counter()
fn, make, _ = loops.WORKLOADS[sys.argv[1]]
args, steps = make(), int(sys.argv[2])
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    a = time.perf_counter()
    t = tk.trace(fn, *loops._copies(args), steps)
    b = time.perf_counter()
    c = tk.compile(t, target="cpu", progress=False)
    d = time.perf_counter()
print(json.dumps({"import": t1 - t0, "trace": b - a, "compile": d - b}))
"""


def cold(name: str, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TRACEKIT_CACHE_DIR=cache)
        run = subprocess.run(
            [sys.executable, "-c", CHILD, name, str(steps), str(HERE)],
            capture_output=True,
            text=True,
            env=env,
            cwd=HERE.parent,
            timeout=600,
        )
    if run.returncode:
        raise SystemExit(f"{name} at {steps} steps failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(argv=None):
    from loops import WORKLOADS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="jacobi,heat3d,gray_scott,nested,stacked,converge")
    p.add_argument("--steps", default="10,100,1000", help="comma-separated trip counts")
    args = p.parse_args(argv)
    names = args.only.split(",")
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {unknown}; known: {', '.join(WORKLOADS)}")
    print(f"load average {load_average():.2f}")
    head = ("workload", "steps", "trace+roll", "compile", "total", "import")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (15, 6, 11, 8, 7, 7))))
    for steps in (int(s) for s in args.steps.split(",")):
        for name in names:
            r = cold(name, steps)
            total = r["trace"] + r["compile"]
            print(
                f"{name:>15} {steps:6d} {r['trace']:10.2f}s {r['compile']:7.2f}s {total:6.2f}s"
                f" {r['import']:6.2f}s",
                flush=True,
            )
    print(f"load average {load_average():.2f}")


if __name__ == "__main__":
    main()
