"""Scale-out: tracekit's dask target against the same NumPy code on dask.array (what a dask user
writes today) and ``map_blocks`` of a hand-written parallel-free ``numba.njit`` kernel, on a
``distributed.LocalCluster`` of worker processes, side by side in one run.

Inputs are made on the workers (``dask.array.random``), so the client holds none of them. For
each workload: the tasks of each graph after dask's optimisation, the median wall time of a
``client.persist`` of the results (computed and kept on the workers: moving them to the client
would time the network) (``rounds`` rounds, interleaved), ratios (dask+NumPy's time over
tracekit's: above 1 is faster), and the workers' peak memory. The first tracekit round compiles
each chunk kernel once per worker (later rounds and runs load it from the disk cache).

    .venv/bin/python benchmarks/dask_scale.py                     # 2 GB per input
    .venv/bin/python benchmarks/dask_scale.py --gb 0.5 --rounds 3
    .venv/bin/python benchmarks/dask_scale.py --quick             # 32 MB, one round
    .venv/bin/python benchmarks/dask_scale.py --huge 40           # a 40 GB sum as well
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import tracekit as tk  # noqa: E402
from benchmarks.common import load_average, machine_info, table  # noqa: E402
from benchmarks.cpu import gelu, softmax  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "dask_scale.json"


def layernorm(x):  # benchmarks/cpu.py's, without the scale and shift
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


def moments(x):
    return x.sum(), x.mean(), x.std()


def stencil(x):
    return x[1:-1, 2:] + x[1:-1, :-2] + x[2:, 1:-1] + x[:-2, 1:-1] - 4.0 * x[1:-1, 1:-1]


WORKLOADS = {"gelu": gelu, "softmax": softmax, "layernorm": layernorm}
WORKLOADS.update({"moments": moments, "stencil": stencil})


def numba_blocks(name):
    """``map_blocks`` of a hand-written numba kernel, where the workload is blockwise."""
    import numba

    if name == "gelu":

        @numba.njit(fastmath=True, cache=True)
        def kernel(b):
            out = np.empty_like(b)
            for i in range(b.shape[0]):
                for j in range(b.shape[1]):
                    x = b[i, j]
                    out[i, j] = 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
            return out

        return lambda x: x.map_blocks(kernel, dtype=x.dtype)
    if name == "softmax":

        @numba.njit(fastmath=True, cache=True)
        def kernel(b):
            out = np.empty_like(b)
            for i in range(b.shape[0]):
                m = b[i].max()
                s = 0.0
                for j in range(b.shape[1]):
                    out[i, j] = np.exp(b[i, j] - m)
                    s += out[i, j]
                for j in range(b.shape[1]):
                    out[i, j] /= s
            return out

        return lambda x: x.map_blocks(kernel, dtype=x.dtype)
    return None


def tasks(results) -> int:
    import dask

    return sum(len(r.__dask_graph__()) for r in dask.optimize(*results))


def run(args):
    import dask.array as da
    import distributed

    cluster = distributed.LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    side = int((args.gb * 2**30 / 8) ** 0.5) // 256 * 256
    chunk = side // args.chunks_per_side
    x = da.random.default_rng(0).standard_normal((side, side), chunks=(chunk, side))
    x = x.persist()
    distributed.wait(x)
    rows = []
    record = {"machine": machine_info(), "load_average": load_average(), "workloads": {}}
    for name, fn in WORKLOADS.items():
        if args.only and name not in args.only.split(","):
            continue
        ours = tk.jit(fn)
        peers = {"dask+numpy": fn, "tracekit": ours}
        hand = numba_blocks(name)
        if hand is not None:
            peers["map_blocks(numba)"] = hand
        graphs = {k: _as_tuple(p(x)) for k, p in peers.items()}
        counts = {k: tasks(g) for k, g in graphs.items()}
        first = {}
        for k, g in graphs.items():  # compiles (tracekit: on every worker), warms the caches
            t0 = time.perf_counter()
            _persisted(client, g)
            first[k] = time.perf_counter() - t0
            got = client.compute([s for r in g for s in _sample(r)], sync=True)
            if k == "dask+numpy":
                want = got
            else:
                for a, b in zip(got, want):
                    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)
        times: dict = {k: [] for k in graphs}
        for _ in range(args.rounds):
            for k in graphs:
                g = _as_tuple(peers[k](x))  # a new graph each round, as a user's new call
                t0 = time.perf_counter()
                _persisted(client, g)
                times[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        peak = max(client.run(_peak_rss).values()) / 2**30
        record["workloads"][name] = {
            "median_s": med,
            "first_s": first,
            "tasks": counts,
            "peak_worker_rss_gb": peak,
            "layers": ours.compiled.dask_layers,
        }
        rows.append(
            [
                name,
                f"{med['dask+numpy']:.2f}",
                f"{med.get('map_blocks(numba)', float('nan')):.2f}",
                f"{med['tracekit']:.2f}",
                f"{med['dask+numpy'] / med['tracekit']:.2f}x",
                "/".join(str(counts[k]) for k in graphs),
                f"{peak:.2f}",
            ]
        )
        print(rows[-1], flush=True)
    if args.huge:
        record["huge"] = huge_sum(client, args.huge)
    headers = ["workload", "dask+numpy s", "map_blocks(numba) s", "tracekit s", "vs dask+numpy"]
    headers += ["tasks (dask/tracekit/numba)", "peak worker RSS GB"]
    print(f"\n{side}x{side} float64 ({side * side * 8 / 2**30:.2f} GB), chunks ({chunk}, {side})")
    print(table(headers, rows))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=1, default=str))
    client.close()
    cluster.close()


def huge_sum(client, gb: float) -> dict:
    """A reduction over an array larger than memory, made and reduced chunk by chunk."""
    import dask.array as da

    side = int((gb * 2**30 / 8) ** 0.5)
    x = da.random.default_rng(1).standard_normal((side, side), chunks=(2048, 2048))
    f = tk.jit(lambda a: np.tanh(a).sum())
    t0 = time.perf_counter()
    total = float(client.compute(f(x), sync=True))
    seconds = time.perf_counter() - t0
    peak = max(client.run(_peak_rss).values()) / 2**30
    print(f"{gb} GB tanh-sum: {seconds:.1f} s, peak worker RSS {peak:.2f} GB, sum {total:.4g}")
    return {"gb": gb, "seconds": seconds, "peak_worker_rss_gb": peak}


def _persisted(client, results):
    """Computed on the workers and kept there (results are not moved to the client: that
    would time the network, not the compute), then released."""
    import distributed

    kept = client.persist(list(results))
    distributed.wait(kept)
    del kept


def _sample(r):
    """What the correctness check compares: a block of rows and the total."""
    return (r[:64] if r.ndim else r), r.sum()


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _as_tuple(r):
    return r if isinstance(r, tuple) else (r,)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=2.0, help="size of the input in GB")
    p.add_argument("--chunks-per-side", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="")
    p.add_argument("--huge", type=float, default=0, help="also sum an array of this many GB")
    p.add_argument("--quick", action="store_true", help="a 32 MB input, one round: smoke test")
    a = p.parse_args()
    if a.quick:
        a.gb, a.rounds = 1 / 32, 1
    run(a)
