"""Whether a change to tracing or rolling leaves the graphs the same: a hash of each trace's
``graph.to_json()``, listing and notes, for the loop workloads of ``benchmarks/loops.py`` and a
few programs of other shapes (scopes, lambdas, comprehensions, a branch and a generator in a
loop; a guarded ``break``; a loop reading ``a[i]`` and writing ``out[i]``) at 1, 2, 3, 5, 10, 37
and 120 steps, rolled and unrolled, and most of them rolled at 1,000. Paths under the checkout
are written relative to it, so two checkouts compare. Not a timing.

    .venv/bin/python benchmarks/loop_graphs.py --out /tmp/after.json
    (cd OTHER && /path/.venv/bin/python benchmarks/loop_graphs.py --out /tmp/before.json)
    .venv/bin/python benchmarks/loop_graphs.py --compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import tracekit as tk  # noqa: E402
from benchmarks.loops import WORKLOADS, _copies  # noqa: E402

STEPS = (1, 2, 3, 5, 10, 37, 120)
AT_1000 = {"jacobi", "heat3d", "gray_scott", "nested", "stacked", "diagonal", "moving_literal"}


def _shifted(x, n):
    for i in range(n):
        yield x * 1.5 + i


def shapes(x, steps):
    """A scope, a lambda, a comprehension and a branch in a loop; a generator in another."""
    acc = x
    with tk.scope("outer"):
        for _ in range(steps):
            f = lambda v: np.sin(v) * 0.5  # noqa: E731
            acc = f(acc) + sum([acc * c for c in (1.0, 2.0)])
            if steps > 2:
                acc = acc - 0.1
    for y in _shifted(acc, steps):
        acc = acc + y
    return acc


def breaking(x, steps):
    for _ in range(steps):
        x = x * 0.5 + 1.0
        if float(x.sum()) > 1e9:
            break
    return x


def indexed(a, steps):
    out = np.zeros((steps, a.shape[1]))
    s = 0.0
    for i in range(steps):
        out[i] = a[i] * 2.0 + i
        s = s + a[i, 0]
    return out, s


PROGRAMS = {name: (fn, make) for name, (fn, make, _) in WORKLOADS.items()}
PROGRAMS.update(
    shapes=(shapes, lambda: (np.ones(4),)),
    breaking=(breaking, lambda: (np.ones(4),)),
    indexed=(indexed, lambda: (np.arange(5000.0).reshape(1250, 4),)),
)
AT_1000.add("indexed")
ERRORS: list = []  # the traces that raised


def fingerprint(fn, args, steps, loops) -> str:
    """A hash of the trace's JSON, listing and notes (or of the error it raises)."""
    try:
        t = tk.trace(fn, *_copies(args), steps, loops=loops)
        text = "\x00".join([t.graph.to_json(), str(t), "\n".join(t.notes)])
    except Exception as e:  # the same error on both sides is the same result
        ERRORS.append(f"{fn.__name__} at {steps} steps, {loops}: {type(e).__name__}")
        text = f"error {type(e).__name__}: {e}"
    return hashlib.sha256(text.replace(str(ROOT), "<root>").encode()).hexdigest()


def fingerprints() -> dict:
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (fn, make) in PROGRAMS.items():
            for steps in STEPS:
                for loops in ("roll", "unroll"):
                    out[f"{name}/{steps}/{loops}"] = fingerprint(fn, make(), steps, loops)
            if name in AT_1000:
                out[f"{name}/1000/roll"] = fingerprint(fn, make(), 1000, "roll")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the hashes here (JSON)")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args(argv)
    if a.compare:
        before, after = (json.loads(Path(p).read_text()) for p in a.compare)
        differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        print(f"{len(before)} / {len(after)} traces; differ: {differ or 'none'}")
        return 1 if differ else 0
    found = fingerprints()
    print(f"{len(found)} traces; raised: {ERRORS or 'none'}")
    if a.out:
        Path(a.out).write_text(json.dumps(found, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
