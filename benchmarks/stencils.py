"""Multi-stage stencils: tracekit's CPU target, with and without fusion across constant offsets
(``backends/offsets.py``), against NumPy, a parallel ``numba.njit`` of the same NumPy code and
``jax.jit``, side by side in one run (numba in a phase of its own beside tracekit: see
``measure``). "vs best" is the smaller of tracekit's ratios to jax and to numba, each measured
side by side.

    .venv/bin/python benchmarks/stencils.py
    .venv/bin/python benchmarks/stencils.py --only hdiff --budget 2

"bytes / least": the bytes of the inputs, the outputs and every array a kernel writes that is
not an output, over those of the inputs and outputs alone (1.00: nothing materialised between
them), unfused -> fused.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tracekit as tk  # noqa: E402
from benchmarks.common import interleaved, load_average, summarize, table  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "stencils.json"


def hdiff(in_field, coeff, np=np):
    """Horizontal diffusion (COSMO): a Laplacian, fluxes with a limiter, the update."""
    I, J = in_field.shape[0] - 4, in_field.shape[1] - 4  # noqa: E741
    lap = 4.0 * in_field[1 : I + 3, 1 : J + 3, :] - (
        in_field[2 : I + 4, 1 : J + 3, :]
        + in_field[0 : I + 2, 1 : J + 3, :]
        + in_field[1 : I + 3, 2 : J + 4, :]
        + in_field[1 : I + 3, 0 : J + 2, :]
    )
    res = lap[1:, 1 : J + 1, :] - lap[:-1, 1 : J + 1, :]
    diff = in_field[2 : I + 3, 2 : J + 2, :] - in_field[1 : I + 2, 2 : J + 2, :]
    flx = np.where(res * diff > 0, 0, res)
    res = lap[1 : I + 1, 1:, :] - lap[1 : I + 1, :-1, :]
    diff = in_field[2 : I + 2, 2 : J + 3, :] - in_field[2 : I + 2, 1 : J + 2, :]
    fly = np.where(res * diff > 0, 0, res)
    return in_field[2 : I + 2, 2 : J + 2, :] - coeff * (
        flx[1:, :, :] - flx[:-1, :, :] + fly[:, 1:, :] - fly[:, :-1, :]
    )


def biharmonic(u, np=np):
    """The Laplacian of the Laplacian (plate bending, hyperdiffusion): two 5-point stages."""
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    return lap[2:, 1:-1] + lap[:-2, 1:-1] + lap[1:-1, 2:] + lap[1:-1, :-2] - 4.0 * lap[1:-1, 1:-1]


def blur3(img, np=np):
    """Three separable box blurs in a row (x, then y, then x again)."""
    a = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / 3.0
    b = (a[:-2, :] + a[1:-1, :] + a[2:, :]) / 3.0
    return (b[:, :-2] + b[:, 1:-1] + b[:, 2:]) / 3.0


def laplace3(u, np=np):
    """A 3-D 7-point stencil, three stages in a row (each reads the one before at 7 offsets)."""

    def stage(v):
        c = v[1:-1, 1:-1, 1:-1]
        return 6.0 * c - (
            v[2:, 1:-1, 1:-1] + v[:-2, 1:-1, 1:-1] + v[1:-1, 2:, 1:-1]
            + v[1:-1, :-2, 1:-1] + v[1:-1, 1:-1, 2:] + v[1:-1, 1:-1, :-2]
        )  # fmt: skip

    return stage(stage(stage(u)))


def _r(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


WORKLOADS = {
    "hdiff": (hdiff, lambda: (_r(0, 68, 68, 60), _r(1, 64, 64, 60))),  # issue 22's size
    "biharmonic": (biharmonic, lambda: (_r(2, 1024, 1024),)),
    "blur3": (blur3, lambda: (_r(3, 2048, 2048),)),
    "laplace3": (laplace3, lambda: (_r(4, 96, 96, 96),)),
}


def bytes_moved(c) -> tuple[int, int]:
    """(the bytes a compiled program's kernels and views touch at least once: its inputs, its
    outputs and every array a kernel writes that is not an output; the minimum, inputs and
    outputs)."""
    g = c.plan.graph
    ends = {v for v in g.inputs} | set(g.outputs)
    made = {o for st in c.plan.steps if st.kind == "kernel" for o in st.outputs}
    least = sum(v.size * v.dtype.itemsize for v in ends)
    return least + sum(v.size * v.dtype.itemsize for v in made - ends), least


def _compiled(fn, args, fused=True):
    from tracekit.backends import offsets

    saved = offsets.MAX_RECOMPUTE
    offsets.MAX_RECOMPUTE = saved if fused else 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            c = tk.compile(tk.trace(fn, *args), target="cpu", cache=False, progress=False)
            return c, time.perf_counter() - start
    finally:
        offsets.MAX_RECOMPUTE = saved


def measure(name, budget, peers):
    fn, make = WORKLOADS[name]
    args = make()
    want = fn(*args)
    fused, cold = _compiled(fn, args)
    unfused, _ = _compiled(fn, args, fused=False)
    fns = {"numpy": lambda: fn(*args), "tracekit": lambda: fused(*args)}
    fns["tracekit unfused"] = lambda: unfused(*args)
    ok = {k: bool(np.allclose(f(), want, rtol=1e-12, atol=1e-12)) for k, f in fns.items()}
    if "jax" in peers:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        jx = jax.jit(lambda *a: fn(*a, np=jnp))
        on = [jnp.asarray(a) for a in args]
        jx(*on).block_until_ready()
        fns["jax"] = lambda: jx(*on).block_until_ready()
        ok["jax"] = bool(np.allclose(np.asarray(fns["jax"]()), want, rtol=1e-12, atol=1e-12))
    samples = interleaved(fns, budget_s=budget, min_rounds=5, max_rounds=200)
    med = {k: summarize(v)["median_s"] for k, v in samples.items()}
    ratios = {"jax": med["jax"] / med["tracekit"]} if "jax" in med else {}
    if "numba" in peers:
        # a phase of its own, beside tracekit again: its parallel regions' threads slow the
        # other peers' work when they alternate call by call (tracekit's 0.18 ms hdiff took
        # 0.48 ms beside it)
        import numba

        nb = numba.njit(parallel=True)(fn)
        nb(*args)
        ok["numba"] = bool(np.allclose(nb(*args), want, rtol=1e-12, atol=1e-12))
        again = interleaved(
            {"numba": lambda: nb(*args), "tracekit": lambda: fused(*args)},
            budget_s=budget,
            min_rounds=5,
            max_rounds=200,
        )
        beside = {k: summarize(v)["median_s"] for k, v in again.items()}
        med["numba"] = beside["numba"]
        ratios["numba"] = beside["numba"] / beside["tracekit"]
    return {
        "workload": name,
        "median_s": med,
        "correct": ok,
        "kernels": len(fused.plan.kernels),
        "kernels_unfused": len(unfused.plan.kernels),
        "cold_s": cold,
        "bytes_moved": bytes_moved(fused),
        "bytes_moved_unfused": bytes_moved(unfused),
        "ratio_vs_best": min(ratios.values()) if ratios else None,
        "ratios": ratios,
        "offsets": [str(d) for d in fused.plan.offsets],
    }


def _moved(pair) -> str:
    moved, least = pair
    return f"{moved / least:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--peers", default="numba,jax")
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="a short timing (smoke test)")
    ap.add_argument("--json", default=str(RESULTS))
    ap.add_argument("--no-json", action="store_true")
    a = ap.parse_args(argv)
    only = [w for w in a.only.split(",") if w]
    if set(only) - set(WORKLOADS):
        ap.error(f"unknown workload(s); choose from {sorted(WORKLOADS)}")
    peers = set(a.peers.split(","))
    budget = 0.3 if a.quick else a.budget
    print(f"load average {load_average()}")
    rows, results = [], []
    for name in WORKLOADS:
        if only and name not in only:
            continue
        r = measure(name, budget, peers)
        results.append(r)
        m = r["median_s"]
        cells = [f"{m[k] * 1e3:.3g}" if k in m else "-" for k in
                 ("numpy", "numba", "jax", "tracekit unfused", "tracekit")]  # fmt: skip
        best = r["ratio_vs_best"]
        rows.append(
            [name, f"{r['kernels_unfused']} -> {r['kernels']}", f"{r['cold_s']:.2f}", *cells,
             f"{m['numpy'] / m['tracekit']:.2f}x", "-" if best is None else f"{best:.2f}x",
             _moved(r["bytes_moved_unfused"]) + " -> " + _moved(r["bytes_moved"]),
             "yes" if all(r["correct"].values()) else f"NO {r['correct']}"]
        )  # fmt: skip
    head = ["workload", "kernels", "cold s", "numpy ms", "numba ms", "jax ms",
            "unfused ms", "tracekit ms", "vs numpy", "vs best(numba,jax)",
            "bytes / least", "correct"]  # fmt: skip
    print(table(head, rows, right=set(range(1, 11))))
    for r in results:
        for d in r["offsets"]:
            print(f"{r['workload']}: {d}")
    if not a.no_json:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"load_average": load_average(), "rows": results}))
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
