"""Tracing and rolling the loop workloads of ``benchmarks/loops.py`` at 1,000 steps: how long
recording the ops takes and how long rolling them (the rest of ``tk.trace``: dead code,
rolling, the graph check), per recorded op, without compiling.

Each run traces every workload once to warm caches, then ``--repeat`` times; medians. Prints a
table and writes ``benchmarks/results/loop_trace.json``. A benchmark, not a test.

    .venv/bin/python benchmarks/loop_trace.py                      # 6 workloads, 3 runs
    .venv/bin/python benchmarks/loop_trace.py --quick              # 100 steps, one run
    .venv/bin/python benchmarks/loop_trace.py --only jacobi --steps 100 --no-json
    .venv/bin/python benchmarks/loop_trace.py --cpu   # CPU seconds: steadier on a busy machine
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tracekit as tk  # noqa: E402
import tracekit.traced as traced_module  # noqa: E402
from benchmarks.common import load_average, table  # noqa: E402
from benchmarks.loops import WORKLOADS, _copies  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "loop_trace.json"
DEFAULT = "jacobi,heat3d,gray_scott,nested,stacked,converge"
clock = time.perf_counter  # time.process_time with --cpu


def _timed_finish(spent: dict):
    """``tk.trace``'s last stage (dead code, rolling, the check), timed into ``spent``."""
    finish = traced_module._finish

    def timed(*args, **kwargs):
        t0 = clock()
        try:
            return finish(*args, **kwargs)
        finally:
            spent["roll"] = clock() - t0

    return timed


def trace_once(fn, args, steps, spent, loops="roll"):
    """(seconds of the whole trace, seconds of its last stage, the graph's node count)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()
        t0 = clock()
        t = tk.trace(fn, *_copies(args), steps, loops=loops)
        total = clock() - t0
    return total, spent["roll"], len(t.graph.nodes)


def measure(name, steps, repeat, spent):
    fn, make, _ = WORKLOADS[name]
    args = make()
    trace_once(fn, args, 3, spent)  # warm: source lines, op tables
    recorded = trace_once(fn, args, steps, spent, loops="unroll")[2]
    runs = [trace_once(fn, args, steps, spent) for _ in range(repeat)]
    total = statistics.median(r[0] for r in runs)
    roll = statistics.median(r[1] for r in runs)
    record = statistics.median(r[0] - r[1] for r in runs)
    return {
        "workload": name,
        "steps": steps,
        "recorded_ops": recorded,
        "rolled_nodes": runs[0][2],
        "trace_roll_s": total,
        "record_s": record,
        "roll_s": roll,
        "record_us_per_op": 1e6 * record / recorded,
        "roll_us_per_op": 1e6 * roll / recorded,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="100 steps, one run")
    ap.add_argument("--json", default=str(RESULTS))
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="CPU seconds of this process, not wall")
    a = ap.parse_args(argv)
    if a.quick:
        a.steps, a.repeat = 100, 1
    names = [w for w in a.only.split(",") if w]
    unknown = set(names) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workload(s) {sorted(unknown)}; choose from {sorted(WORKLOADS)}")
    print(f"load average {load_average()}")
    global clock
    clock = time.process_time if a.cpu else time.perf_counter
    spent: dict = {}
    traced_module._finish = _timed_finish(spent)
    rows = [measure(name, a.steps, a.repeat, spent) for name in names]
    head = ["workload", "ops", "rolled nodes", "trace+roll s", "record µs/op", "roll µs/op"]
    cells = [
        [
            r["workload"],
            str(r["recorded_ops"]),
            str(r["rolled_nodes"]),
            f"{r['trace_roll_s']:.3f}",
            f"{r['record_us_per_op']:.1f}",
            f"{r['roll_us_per_op']:.1f}",
        ]
        for r in rows
    ]
    print(table(head, cells, right=set(range(1, 6))))
    if not a.no_json:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(
            json.dumps({"load_average": load_average(), "rows": rows}, indent=2)
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
