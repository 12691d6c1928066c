"""Multi-stage stencils: tracekit's CPU target, with and without fusion across constant offsets
(``backends/offsets.py``), against NumPy, a parallel ``numba.njit`` of the same NumPy code,
``jax.jit`` and ``torch.compile``, side by side in one run (numba in a phase of its own beside
tracekit: see ``measure``). "vs best" is the smallest of tracekit's ratios to the peers, each
measured side by side. "cold": the first call's seconds (tracekit: trace and compile).

    .venv/bin/python benchmarks/stencils.py
    .venv/bin/python benchmarks/stencils.py --only hdiff --budget 2
    .venv/bin/python benchmarks/stencils.py --only "hdiff grad,biharmonic grad"
    .venv/bin/python benchmarks/stencils.py --cold --repeats 3 --tracekit /before --tracekit .

"<workload> grad": the gradient of ``sum(w * <workload>(x))`` in ``x`` (a vector-Jacobian
product: the backward graph, a stencil chain of transposed offsets), against ``jax.grad``
under ``jax.jit``; NumPy, numba and torch have no gradient of the same code (their columns
are empty); "w/o pads": tracekit with the slices' gradients kept as zeros written into
(``backends/pads.py`` off), as before pads were read in place; "unpushed": pads read in place
but not pushed through the values they pad (``offsets.THROUGH_PADS`` off), each backward
stage then a kernel; "whole": a value over the budget kept whole, not computed again from the
one array its last op reads (``offsets.ONE_INPUT`` off) and no pad pushed through divisions
(``offsets.THROUGH_DIVISIONS``: off by default; ``--divisions`` on); "untiled": no stage read
through pads computed in tiles (``tiles.THROUGH_PADS`` off), each such stage an array.

``--cold``: each workload's cold compile alone, as a new user meets it: trace, compile and the
first call in a new process with a new, empty cache directory (numba already imported), the
median of ``--repeats`` processes; ``--tracekit DIR`` given twice or more measures those
checkouts side by side, their processes alternating.

"bytes / least": the bytes of the inputs, the outputs and every array a kernel writes that is
not an output, over those of the inputs and outputs alone (1.00: nothing materialised between
them), unfused -> fused.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# --cold's children import the checkout they measure (its tracekit, these workloads)
sys.path.insert(0, os.environ.get("STENCILS_TRACEKIT", str(HERE.parent)))
sys.path.insert(1, str(HERE.parent))
import tracekit as tk  # noqa: E402
from benchmarks.common import interleaved, load_average, summarize, table  # noqa: E402
from benchmarks.stencil_programs import biharmonic, blur3, hdiff, isoneutral, laplace3  # noqa: E402

RESULTS = HERE / "results" / "stencils.json"


def _r(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


WORKLOADS = {
    "hdiff": (hdiff, lambda: (_r(0, 68, 68, 60), _r(1, 64, 64, 60))),  # issue 22's size
    "biharmonic": (biharmonic, lambda: (_r(2, 1024, 1024),)),
    "blur3": (blur3, lambda: (_r(3, 2048, 2048),)),
    "laplace3": (laplace3, lambda: (_r(4, 96, 96, 96),)),
    "isoneutral": (isoneutral, lambda: _ocean()),  # 64x64x60 interior, as hdiff
}
GRADS = ("hdiff", "biharmonic", "blur3", "laplace3")  # workloads measured backward too
NAMES = [*WORKLOADS, *(f"{name} grad" for name in GRADS)]


def _vjp(fn):
    """``(x, w, *rest) -> sum(w * fn(x, *rest))``, whose gradient in ``x`` is ``fn``'s
    vector-Jacobian product with ``w``."""

    def loss(x, w, *rest, np=np):
        return (fn(x, *rest, np=np) * w).sum()

    return loss


def _backward(name):
    """(the loss, its arguments: the workload's with a random ``w`` second) of ``name``."""
    fn, make = WORKLOADS[name]
    args = make()
    w = _r(9, *np.shape(fn(*args)))
    return _vjp(fn), (args[0], w, *args[1:])


def _ocean(nx=66, ny=66, nz=62, seed=5):
    """A stratified ocean: temperature falling with depth, salinity, land cells masked, a
    stretched grid."""
    rng = np.random.default_rng(seed)
    z = np.linspace(5.0, 4000.0, nz)
    temp = 20.0 * np.exp(-z / 800.0)[None, None, :] + rng.standard_normal((nx, ny, nz))
    salt = 35.0 + 0.5 * rng.standard_normal((nx, ny, nz))
    mask = (rng.random((nx, ny, nz)) > 0.05).astype(np.float64)
    dxt = 1e4 * (1.0 + 0.1 * rng.random(nx))
    dyt = 1e4 * (1.0 + 0.1 * rng.random(ny))
    dzt = 50.0 * (1.0 + rng.random(nz))
    cost = np.cos(np.linspace(-1.0, 1.0, ny))
    return temp, salt, mask, -z, dxt, dyt, dzt, cost


def bytes_moved(c) -> tuple[int, int]:
    """(the bytes a compiled program's kernels and views touch at least once: its inputs, its
    outputs and every array a kernel writes that is not an output; the minimum, inputs and
    outputs)."""
    g = c.plan.graph
    ends = {v for v in g.inputs} | set(g.outputs)
    made = {o for st in c.plan.steps if st.kind == "kernel" for o in st.outputs}
    least = sum(v.size * v.dtype.itemsize for v in ends)
    return least + sum(v.size * v.dtype.itemsize for v in made - ends), least


def _compiled(fn, args, fused=True, pads=True, pushed=True, whole=False, tiled_pads=True):
    """tracekit's compiled ``fn``; with ``fused=False``, every stage an array (no value
    computed again at offsets, none in tiles, no pad read in place); ``pads=False``: no pad
    read in place; ``pushed=False``: no pad pushed through the value it pads;
    ``whole=True``: a value over the budget kept whole (``offsets.ONE_INPUT`` off), no pad
    pushed through a division (``offsets.THROUGH_DIVISIONS`` off, its default);
    ``tiled_pads=False``: no producer read through pads computed in tiles
    (``tiles.THROUGH_PADS`` off)."""
    from tracekit.backends import offsets, tiles
    from tracekit.backends import pads as pads_module

    saved, rate, divisions = offsets.MAX_RECOMPUTE, tiles.OPS_PER_BYTE, offsets.THROUGH_DIVISIONS
    offsets.MAX_RECOMPUTE = saved if fused else 0
    tiles.OPS_PER_BYTE = rate if fused else -1.0
    pads_module.READ_IN_PLACE = pads and fused
    offsets.THROUGH_PADS, offsets.ONE_INPUT = pushed, not whole
    offsets.THROUGH_DIVISIONS = divisions and not whole
    tiles.THROUGH_PADS = tiled_pads
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            c = tk.compile(tk.trace(fn, *args), target="cpu", cache=False, progress=False)
            return c, time.perf_counter() - start
    finally:
        offsets.MAX_RECOMPUTE, tiles.OPS_PER_BYTE = saved, rate
        pads_module.READ_IN_PLACE = offsets.THROUGH_PADS = offsets.ONE_INPUT = True
        tiles.THROUGH_PADS = True
        offsets.THROUGH_DIVISIONS = divisions


def _close(got, want, rtol=1e-12) -> bool:
    """``got`` (arrays, jax's or torch's, or a tuple of them) equal to NumPy's ``want``."""
    got, want = (x if isinstance(x, tuple) else (x,) for x in (got, want))
    return len(got) == len(want) and all(
        np.allclose(np.asarray(g), w, rtol=rtol, atol=rtol) for g, w in zip(got, want)
    )


def _timed(make_thunk):
    """(a peer's call, its first call's seconds: its compile)."""
    thunk = make_thunk()
    start = time.perf_counter()
    thunk()
    return thunk, time.perf_counter() - start


def _jax(fn, args):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jx = jax.jit(lambda *a: fn(*a, np=jnp))
    on = [jnp.asarray(a) for a in args]
    return lambda: jax.block_until_ready(jx(*on))


def _jax_grad(loss, args):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    jx = jax.jit(jax.grad(lambda *a: loss(*a, np=jnp)))
    on = [jnp.asarray(a) for a in args]
    return lambda: jax.block_until_ready(jx(*on))


def measure_grad(name, budget, peers):
    """The backward of workload ``name`` (``<name> grad``): tracekit, without pads read in
    place, unfused, and ``jax.grad``; the interpreter's gradient is the reference."""
    loss, args = _backward(name)
    grad = tk.grad(loss)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = tk.trace(grad, *args)(*args)
    fused, cold = _compiled(grad, args)
    before, _ = _compiled(grad, args, pads=False)
    unpushed, _ = _compiled(grad, args, pushed=False)
    whole, _ = _compiled(grad, args, whole=True)
    untiled, _ = _compiled(grad, args, tiled_pads=False)
    unfused, _ = _compiled(grad, args, fused=False)
    fns = {
        "tracekit": lambda: fused(*args),
        "tracekit unpushed": lambda: unpushed(*args),
        "tracekit whole": lambda: whole(*args),
        "tracekit untiled": lambda: untiled(*args),
        "tracekit w/o pads": lambda: before(*args),
        "tracekit unfused": lambda: unfused(*args),
    }
    colds = {"tracekit": cold}
    if "jax" in peers:
        fns["jax"], colds["jax"] = _timed(lambda: _jax_grad(loss, args))
    ok = {k: _close(f(), want) for k, f in fns.items()}
    samples = interleaved(fns, budget_s=budget, min_rounds=5, max_rounds=200)
    med = {k: summarize(v)["median_s"] for k, v in samples.items()}
    ratios = {"jax": med["jax"] / med["tracekit"]} if "jax" in med else {}
    return {
        **_result(f"{name} grad", med, ok, fused, unfused, cold, colds, ratios),
        "kernels_without_pads": len(before.plan.kernels),
        "kernels_unpushed": len(unpushed.plan.kernels),
        "kernels_whole": len(whole.plan.kernels),
        "kernels_untiled": len(untiled.plan.kernels),
        "bytes_moved_untiled": bytes_moved(untiled),
        "bytes_moved_whole": bytes_moved(whole),
        "host_steps": sum(st.kind == "host" for st in fused.plan.steps),
        "host_steps_without_pads": sum(st.kind == "host" for st in before.plan.steps),
    }


def _result(workload, med, ok, fused, unfused, cold, colds, ratios) -> dict:
    """The JSON row of one workload: medians, correctness, kernels, compile times, bytes."""
    return {
        "workload": workload,
        "median_s": med,
        "correct": ok,
        "kernels": len(fused.plan.kernels),
        "kernels_unfused": len(unfused.plan.kernels),
        "cold_s": cold,
        "cold_s_peers": colds,
        "bytes_moved": bytes_moved(fused),
        "bytes_moved_unfused": bytes_moved(unfused),
        "ratio_vs_best": min(ratios.values()) if ratios else None,
        "ratios": ratios,
        "offsets": [str(d) for d in fused.plan.offsets],
    }


def _torch(fn, args):
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    torch._dynamo.reset()  # a fresh start per workload: no guard chains, no recompile limit
    tc = torch.compile(lambda *a: fn(*a, np=torch))
    on = [torch.from_numpy(a) for a in args]
    return lambda: tc(*on)


def measure(name, budget, peers):
    fn, make = WORKLOADS[name]
    return measure_program(name, fn, make(), budget, peers)


def measure_program(name, fn, args, budget, peers, rtol=1e-12):
    """NumPy, tracekit fused and unfused, and ``peers`` (numba, jax, torch) on ``fn(*args,
    np=...)``, each checked against NumPy's answer within ``rtol``, timed side by side."""
    want = fn(*args)
    fused, cold = _compiled(fn, args)
    unfused, _ = _compiled(fn, args, fused=False)
    fns = {"numpy": lambda: fn(*args), "tracekit": lambda: fused(*args)}
    fns["tracekit unfused"] = lambda: unfused(*args)
    colds = {"tracekit": cold}
    for peer, make_peer in (("jax", _jax), ("torch", _torch)):
        if peer in peers:
            fns[peer], colds[peer] = _timed(lambda: make_peer(fn, args))  # noqa: B023
    ok = {k: _close(f(), want, rtol) for k, f in fns.items()}
    samples = interleaved(fns, budget_s=budget, min_rounds=5, max_rounds=200)
    med = {k: summarize(v)["median_s"] for k, v in samples.items()}
    ratios = {k: med[k] / med["tracekit"] for k in ("jax", "torch") if k in med}
    if "numba" in peers:
        # a phase of its own, beside tracekit again: its parallel regions' threads slow the
        # other peers' work when they alternate call by call (tracekit's 0.18 ms hdiff took
        # 0.48 ms beside it)
        import numba

        dispatcher = numba.njit(parallel=True)(fn)
        try:
            nb, colds["numba"] = _timed(lambda: lambda: dispatcher(*args))
        except numba.core.errors.TypingError:  # NumPy code numba does not compile
            return _result(name, med, ok, fused, unfused, cold, colds, ratios)
        ok["numba"] = _close(nb(), want, rtol)
        again = interleaved(
            {"numba": nb, "tracekit": lambda: fused(*args)},
            budget_s=budget,
            min_rounds=5,
            max_rounds=200,
        )
        beside = {k: summarize(v)["median_s"] for k, v in again.items()}
        med["numba"] = beside["numba"]
        ratios["numba"] = beside["numba"] / beside["tracekit"]
    return _result(name, med, ok, fused, unfused, cold, colds, ratios)


def cold_child(name: str) -> None:
    """Print the seconds of workload ``name``'s trace, compile and first call (this process's
    first compile: ``--cold``) and its kernel count, as JSON."""
    import numba  # noqa: F401  (imported before the clock starts, as in a notebook)

    if name.endswith(" grad"):
        fn, args = _backward(name.split()[0])
        fn = tk.grad(fn)
    else:
        fn, make = WORKLOADS[name]
        args = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        c = tk.compile(tk.trace(fn, *args), target="cpu", progress=False)
        c(*args)
        seconds = time.perf_counter() - start
    print(json.dumps({"cold_s": seconds, "kernels": len(c.plan.kernels), "tracekit": tk.__file__}))


def cold(names, checkouts, repeats) -> dict:
    """``{(workload, checkout): [seconds, ...]}``: each a new process of ``checkout`` with an
    empty cache directory (:func:`cold_child`), the checkouts alternating."""
    script = Path(__file__).resolve()
    out: dict = {}
    for name in names:
        for _ in range(repeats):
            for root in checkouts:
                cache = tempfile.mkdtemp(prefix="tk-cold-")
                env = dict(os.environ, STENCILS_TRACEKIT=str(root), TRACEKIT_CACHE_DIR=cache)
                try:
                    done = subprocess.run(
                        [sys.executable, str(script), "--cold-child", name],
                        cwd=root, env=env, capture_output=True, text=True, check=True,
                    )  # fmt: skip
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                out.setdefault((name, str(root)), []).append(row["cold_s"])
                assert row["tracekit"].startswith(str(root)), row  # the checkout measured
                print(f"{name} ({root}): {row['cold_s']:.2f} s, {row['kernels']} kernel(s), "
                      f"load average {load_average()}", flush=True)  # fmt: skip
    return out


def _moved(pair) -> str:
    moved, least = pair
    return f"{moved / least:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--peers", default="numba,jax,torch")
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="a short timing (smoke test)")
    ap.add_argument("--json", default=str(RESULTS))
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument("--cold", action="store_true", help="cold compiles in new processes")
    ap.add_argument("--repeats", type=int, default=3, help="--cold: processes per figure")
    ap.add_argument("--tracekit", action="append", help="--cold: a checkout (repeatable)")
    ap.add_argument("--divisions", action="store_true", help="pads through divisions")
    ap.add_argument("--cold-child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.cold_child:
        return cold_child(a.cold_child)
    only = [w for w in a.only.split(",") if w]
    if set(only) - set(NAMES):
        ap.error(f"unknown workload(s); choose from {NAMES}")
    if a.cold:
        roots = [Path(p).resolve() for p in a.tracekit or [Path(__file__).resolve().parent.parent]]
        print(f"load average {load_average()}")
        got = cold(only or NAMES, roots, a.repeats)
        rows = [
            [name, *(f"{statistics.median(got[name, str(r)]):.2f}" for r in roots)]
            for name in only or NAMES
        ]
        print(table(["workload", *(f"cold s: {r}" for r in roots)], rows, right={1, 2, 3}))
        return None
    peers = set(a.peers.split(","))
    from tracekit.backends import offsets

    offsets.THROUGH_DIVISIONS = a.divisions
    budget = 0.3 if a.quick else a.budget
    print(f"load average {load_average()}")
    rows, results = [], []
    for name in NAMES:
        if only and name not in only:
            continue
        grad = name.endswith(" grad")
        r = measure_grad(name.split()[0], budget, peers) if grad else measure(name, budget, peers)
        results.append(r)
        m = r["median_s"]
        cells = [f"{m[k] * 1e3:.3g}" if k in m else "-" for k in
                 ("numpy", "numba", "jax", "torch", "tracekit unfused", "tracekit w/o pads",
                  "tracekit unpushed", "tracekit whole", "tracekit untiled",
                  "tracekit")]  # fmt: skip
        best = r["ratio_vs_best"]
        vs_numpy = f"{m['numpy'] / m['tracekit']:.2f}x" if "numpy" in m else "-"
        rows.append(
            [name, f"{r['kernels_unfused']} -> {r['kernels']}", f"{r['cold_s']:.2f}", *cells,
             vs_numpy, "-" if best is None else f"{best:.2f}x",
             _moved(r["bytes_moved_unfused"]) + " -> " + _moved(r["bytes_moved"]),
             "yes" if all(r["correct"].values()) else f"NO {r['correct']}"]
        )  # fmt: skip
    head = ["workload", "kernels", "cold s", "numpy ms", "numba ms", "jax ms", "torch ms",
            "unfused ms", "w/o pads ms", "unpushed ms", "whole ms", "untiled ms", "tracekit ms",
            "vs numpy",
            "vs best peer", "bytes / least", "correct"]  # fmt: skip
    print(table(head, rows, right=set(range(1, 16))))
    for r in results:
        colds = ", ".join(f"{k} {v:.2f} s" for k, v in r["cold_s_peers"].items())
        print(f"{r['workload']}: cold s: {colds}")
        if "kernels_without_pads" in r:
            print(
                f"{r['workload']}: without pads read in place {r['kernels_without_pads']} "
                f"kernel(s), {r['host_steps_without_pads']} NumPy call(s); with them "
                f"{r['kernels']}, {r['host_steps']}; pads not pushed through values "
                f"{r['kernels_unpushed']} kernel(s); whole (ONE_INPUT, THROUGH_DIVISIONS off) "
                f"{r['kernels_whole']} kernel(s), bytes / least {_moved(r['bytes_moved_whole'])}; "
                f"no tiles through pads (tiles.THROUGH_PADS off) {r['kernels_untiled']} "
                f"kernel(s), bytes / least {_moved(r['bytes_moved_untiled'])}"
            )
        for d in r["offsets"]:
            print(f"{r['workload']}: {d}")
    if not a.no_json:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({"load_average": load_average(), "rows": results}))
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
