"""The kernels issue reports were made of, as their users wrote them: a float64 series of
integer powers, divisions by constants and a fractional power of an absolute value; a float32
RMS norm of rows with a sigmoid gate; a float64 great-circle distance. Against NumPy, a
parallel ``numba.njit`` of the same NumPy code, ``jax.jit`` (x64) and ``torch.compile``, side
by side in one run (``stencils.measure_program``: numba in a phase of its own beside tracekit).

    .venv/bin/python benchmarks/user_kernels.py                 # all three, ~1 min
    .venv/bin/python benchmarks/user_kernels.py --only series   # one
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import load_average, table  # noqa: E402
from stencils import measure_program  # noqa: E402


def series(x, np=np):
    """A truncated series with a correction term, float64."""
    return 1.0 + x / 2.0 + x**2 / 6.0 - x**3 / 24.0 + x**4 / 120.0 - np.abs(x) ** 1.5 / 7.0


def rms_gate(x, g, w, np=np):
    """An RMS-normalised activation of rows gated by a sigmoid, float32."""
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6)
    return x / rms * w * (1.0 / (1.0 + np.exp(-g)))


def great_circle(lat1, lon1, lat2, lon2, np=np):
    """The haversine distance in km between two arrays of points, float64."""
    dlat = lat2 - lat1
    dlon = lon2 - lon1
    a = np.sin(dlat / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin(dlon / 2) ** 2
    return 6371.0 * 2 * np.arctan2(np.sqrt(a), np.sqrt(1 - a))


def _inputs():
    rng = np.random.default_rng(19)
    n = 4_000_000
    rows = rng.standard_normal((4096, 1024), np.float32)
    points = [rng.uniform(-1.5, 1.5, n), rng.uniform(-3.1, 3.1, n)]
    points += [rng.uniform(-1.5, 1.5, n), rng.uniform(-3.1, 3.1, n)]
    return {
        "series": (series, (rng.uniform(-2.0, 2.0, n),), 1e-12),
        "rms_gate": (
            rms_gate,
            (rows, rng.standard_normal((4096, 1024), np.float32), rng.random(1024, np.float32)),
            2e-5,
        ),
        "great_circle": (great_circle, tuple(points), 1e-12),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--peers", default="numba,jax,torch")
    ap.add_argument("--budget", type=float, default=3.0)
    a = ap.parse_args(argv)
    peers = set(a.peers.split(","))
    workloads = _inputs()
    only = [w for w in a.only.split(",") if w] or list(workloads)
    print(f"load average {load_average()}")
    rows = []
    for name in only:
        fn, args, rtol = workloads[name]
        r = measure_program(name, fn, args, a.budget, peers, rtol)
        m = r["median_s"]
        cells = [f"{m[k] * 1e3:.3g}" if k in m else "-" for k in
                 ("numpy", "numba", "jax", "torch", "tracekit")]  # fmt: skip
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in r["ratios"].items())
        correct = "yes" if all(r["correct"].values()) else f"NO {r['correct']}"
        rows.append([name, str(r["kernels"]), f"{r['cold_s']:.2f}", *cells, ratios, correct])
    head = ["kernel", "kernels", "cold s", "numpy ms", "numba ms", "jax ms", "torch ms",
            "tracekit ms", "peer / tracekit", "correct"]  # fmt: skip
    print(table(head, rows, right=set(range(1, 8))))
    print(f"load average {load_average()}")


if __name__ == "__main__":
    main()
