#!/usr/bin/env python
"""tracekit's CUDA target against CuPy, torch eager and torch.compile, on one GPU.

Run from the repository root on a machine with an NVIDIA GPU::

    .venv/bin/python benchmarks/cuda.py                # everything: about 3-5 minutes
    .venv/bin/python benchmarks/cuda.py --quick        # small sizes (smoke test)
    .venv/bin/python benchmarks/cuda.py --only gelu,softmax --no-torch-compile

Without a GPU it says so and exits with status 0 (the CUDA simulator's timings mean nothing;
``--simulator`` runs the harness there on tiny sizes, to test the script itself).

Workloads (float32): gelu (100M elements), softmax and layernorm over the rows of 8192x8192,
Black-Scholes (20M options), an MLP layer ``gelu(x @ w + b)`` (8192x4096 @ 4096x4096). The
formulas are the CPU benchmark's (``benchmarks/cpu.py``), written once for NumPy, CuPy and torch.
Every peer gets device arrays (no host copies are timed); each answer is checked against NumPy
before it is timed. Times are medians of rounds of back-to-back calls between full device
synchronisations. GB/s counts the bytes of the inputs and outputs once and "%copy" relates it
to a device-to-device copy measured at the start of the run; the MLP layer reports TFLOP/s.
Results go to ``benchmarks/results/cuda-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# This file is named like NVIDIA's ``cuda`` package, which numba-cuda imports (``cuda.bindings``):
# import that package before this directory goes on the path, so that the name is taken.
_path = list(sys.path)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
try:
    import cuda  # noqa: F401
except ImportError:
    pass
sys.path[:] = [str(HERE)] + [p for p in _path if Path(p or ".").resolve() != HERE]
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))  # tracekit from this checkout when not installed

from common import check, fmt_time, git_revision, machine_info, table  # noqa: E402
from cpu import black_scholes, gelu, layernorm, mlp, softmax  # noqa: E402

SIZES = {
    "full": {
        "gelu": (100_000_000,),
        "softmax": (8192, 8192),
        "layernorm": (8192, 8192),
        "black_scholes": (20_000_000,),
        "mlp": (8192, 4096, 4096),
    },
    "quick": {
        "gelu": (4_000_000,),
        "softmax": (1024, 2048),
        "layernorm": (1024, 2048),
        "black_scholes": (1_000_000,),
        "mlp": (1024, 512, 512),
    },
    "simulator": {
        "gelu": (300,),
        "softmax": (4, 64),
        "layernorm": (4, 64),
        "black_scholes": (200,),
        "mlp": (8, 16, 8),
    },
}
TOL = {  # (rtol, atol) against NumPy float32
    "gelu": (1e-5, 1e-6),
    "softmax": (1e-4, 1e-8),
    "layernorm": (1e-4, 1e-4),
    "black_scholes": (1e-4, 1e-3),
    "mlp": (2e-3, 2e-3),
}
WORKLOADS = list(TOL)
CHECK_ROWS = 256  # the MLP answer is checked on its first rows (the host reference is slow)


# ---------------------------------------------------------------------------------------------
def gpu_available(simulator: bool) -> tuple[bool, str]:
    if simulator:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    try:
        from numba import cuda
    except Exception as e:
        return False, f"numba.cuda is not importable ({e})"
    from tracekit.backends.cuda import simulator_active

    if simulator_active():
        return simulator, "NUMBA_ENABLE_CUDASIM=1: the simulator, not a GPU"
    try:
        ok = cuda.is_available()
    except Exception as e:
        return False, str(e)
    return ok, "" if ok else "numba.cuda.is_available() is False"


def host_inputs(name, size, rng):
    f32 = np.float32
    if name == "gelu":
        return [rng.standard_normal(size, dtype=f32)]
    if name == "softmax":
        return [rng.standard_normal(size, dtype=f32)]
    if name == "layernorm":
        n = size[-1]
        return [
            rng.standard_normal(size, dtype=f32),
            rng.standard_normal(n, dtype=f32),
            rng.standard_normal(n, dtype=f32),
        ]
    if name == "black_scholes":
        (n,) = size
        return [
            rng.uniform(5.0, 30.0, n).astype(f32),
            rng.uniform(1.0, 100.0, n).astype(f32),
            rng.uniform(0.25, 10.0, n).astype(f32),
        ]
    m, k, n = size
    return [
        rng.standard_normal((m, k), dtype=f32),
        (rng.standard_normal((k, n), dtype=f32) / np.sqrt(k)).astype(f32),
        rng.standard_normal(n, dtype=f32),
    ]


FUNCS = {
    "gelu": gelu,
    "softmax": softmax,
    "layernorm": layernorm,
    "black_scholes": black_scholes,
    "mlp": mlp,
}


def reference(name, args):
    fn = FUNCS[name]
    if name == "mlp":
        x, w, b = args
        return fn(x[:CHECK_ROWS], w, b)
    return fn(*args)


def traffic(name, args, outs) -> float:
    return float(sum(a.nbytes for a in args) + sum(o.nbytes for o in outs))


def flops(name, size) -> float | None:
    if name == "mlp":
        m, k, n = size
        return 2.0 * m * k * n
    return None


# ---------------------------------------------------------------------------------------------
# peers: each setup returns (call, to_host), with call() -> device result(s)


def _as_list(x):
    return list(x) if isinstance(x, tuple | list) else [x]


def peer_tracekit(name, args, simulator):
    from numba import cuda

    import tracekit as tk

    fn = FUNCS[name]
    t = tk.trace(lambda *a: fn(*a), *args)
    c = tk.compile(t, target="cuda", progress=False)
    dev = [cuda.to_device(a) for a in args]

    def to_host(r):
        return [d.copy_to_host() for d in _as_list(r)]

    return (lambda: c(*dev)), to_host, c


def peer_cupy(name, args, fuse=False):
    import cupy as cp

    fn = FUNCS[name]
    dev = [cp.asarray(a) for a in args]
    if fuse:
        if name not in ("gelu", "black_scholes"):
            raise NotImplementedError("cupy.fuse is for elementwise workloads")
        f = cp.fuse()(lambda *a: fn(*a, xp=cp))
    else:

        def f(*a):
            return fn(*a, xp=cp)

    return (lambda: f(*dev)), (lambda r: [cp.asnumpy(o) for o in _as_list(r)]), None


def peer_torch(name, args, compiled=False):
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch has no CUDA")
    fn = FUNCS[name]
    dev = [torch.from_numpy(a).cuda() for a in args]

    def f(*a):
        return fn(*a, xp=torch)

    if compiled:
        f = torch.compile(f)
    with torch.no_grad():
        f(*dev)  # torch.compile compiles here
    return (lambda: f(*dev)), (lambda r: [o.cpu().numpy() for o in _as_list(r)]), None


PEERS = {
    "tracekit": lambda n, a, sim: peer_tracekit(n, a, sim),
    "cupy": lambda n, a, sim: peer_cupy(n, a),
    "cupy.fuse": lambda n, a, sim: peer_cupy(n, a, fuse=True),
    "torch": lambda n, a, sim: peer_torch(n, a),
    "torch.compile": lambda n, a, sim: peer_torch(n, a, compiled=True),
}


# ---------------------------------------------------------------------------------------------
def synchronize():
    from numba import cuda

    cuda.synchronize()  # the whole context: every stream of every library in it


def time_call(call, budget_s: float, min_rounds: int) -> list[float]:
    synchronize()
    t0 = time.perf_counter()
    call()
    synchronize()
    one = max(time.perf_counter() - t0, 1e-6)
    per_round = max(1, min(1000, int(budget_s / max(min_rounds, 1) / one)))
    samples = []
    deadline = time.perf_counter() + budget_s
    while len(samples) < min_rounds or time.perf_counter() < deadline:
        synchronize()
        t0 = time.perf_counter()
        for _ in range(per_round):
            call()
        synchronize()
        samples.append((time.perf_counter() - t0) / per_round)
        if len(samples) >= 200:
            break
    return samples


def copy_bandwidth(nbytes: int) -> float:
    """Bytes per second of a device-to-device copy (bytes read + bytes written)."""
    from numba import cuda

    src = cuda.to_device(np.ones(nbytes // 4, np.float32))
    dst = cuda.device_array_like(src)
    dst.copy_to_device(src)
    times = []
    for _ in range(9):
        synchronize()
        t0 = time.perf_counter()
        dst.copy_to_device(src)
        synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times)


def device_name() -> str:
    from numba import cuda

    d = cuda.get_current_device()
    name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
    return f"{name} (cc {d.compute_capability[0]}.{d.compute_capability[1]})"


def run_workload(name, size, peers, opts, bw, rng) -> dict:
    args = host_inputs(name, size, rng)
    ref = reference(name, args)
    rows, res = [], {"size": list(size), "peers": {}}
    tol = TOL[name]
    for peer in peers:
        entry = res["peers"].setdefault(peer, {})
        t0 = time.perf_counter()
        try:
            call, to_host, compiled = PEERS[peer](name, args, opts.simulator)
            first = call()
            entry["setup_s"] = time.perf_counter() - t0
            got = to_host(first)
            if name == "mlp":
                got = [g[:CHECK_ROWS] for g in got]
            ok, msg, worst = check(tuple(got), ref, *tol)
            entry.update(ok=ok, message=msg, worst=worst)
            if not ok:
                entry["error"] = f"WRONG: {msg}"
                rows.append([peer, "WRONG", "-", "-", "-", msg[:60]])
                continue
            samples = time_call(call, opts.budget, opts.min_rounds)
            t = statistics.median(samples)
            entry.update(median_s=t, samples=len(samples))
            outs = _as_list(first)
            nbytes = traffic(name, args, [np.empty(o.shape, np.float32) for o in outs])
            gbs = nbytes / t / 1e9
            entry.update(gb_s=gbs, copy_fraction=gbs * 1e9 / bw)
            fl = flops(name, size)
            extra = f"{fl / t / 1e12:.1f} TFLOP/s" if fl else f"{100 * gbs * 1e9 / bw:.0f}%"
            if compiled is not None:
                entry["kernels"] = [k.kind for k in compiled.kernels]
                entry["notes"] = list(compiled.program.notes)
            rows.append([peer, fmt_time(t), f"{gbs:.0f}", extra, f"{entry['setup_s']:.1f} s", ""])
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
            if opts.verbose:
                traceback.print_exc()
            rows.append([peer, "-", "-", "-", "-", entry["error"].splitlines()[0][:70]])
    base = [
        res["peers"][p]["median_s"]
        for p in ("cupy", "cupy.fuse", "torch")
        if res["peers"].get(p, {}).get("median_s")
    ]
    tk_t = res["peers"].get("tracekit", {}).get("median_s")
    if base and tk_t:
        res["tracekit_vs_best_eager"] = min(base) / tk_t
    print(f"\n{name} {list(size)}  (float32)")
    print(
        table(
            ["peer", "time", "GB/s", "%copy or TFLOP/s", "setup", "note"],
            rows,
            right={1, 2, 3, 4},
        )
    )
    if "tracekit_vs_best_eager" in res:
        print(f"tracekit vs the faster of CuPy / torch eager: {res['tracekit_vs_best_eager']:.2f}x")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, short timing")
    ap.add_argument("--only", help=f"comma-separated workloads of {','.join(WORKLOADS)}")
    ap.add_argument("--peers", help=f"comma-separated peers of {','.join(PEERS)}")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--budget", type=float, help="seconds of timing per peer and workload")
    ap.add_argument("--min-rounds", type=int, default=5)
    ap.add_argument("--json", type=Path, help="where to write the JSON results")
    ap.add_argument("--no-json", action="store_true")
    ap.add_argument(
        "--simulator", action="store_true", help="run the harness on the CUDA simulator (tiny)"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    opts = ap.parse_args(argv)

    ok, why = gpu_available(opts.simulator)
    if not ok:
        print(f"no GPU: {why}. Nothing measured (run this on a machine with an NVIDIA GPU).")
        return 0
    mode = "simulator" if opts.simulator else ("quick" if opts.quick else "full")
    if opts.budget is None:
        opts.budget = {"full": 2.0, "quick": 0.5, "simulator": 0.0}[mode]
    if mode == "simulator":
        opts.min_rounds = 1
        print("CUDA simulator: the timings below mean nothing; this only exercises the harness.")
    workloads = opts.only.split(",") if opts.only else WORKLOADS
    peers = opts.peers.split(",") if opts.peers else list(PEERS)
    if opts.no_torch_compile and "torch.compile" in peers:
        peers.remove("torch.compile")
    if mode == "simulator":
        peers = [p for p in peers if p == "tracekit"]

    dev = "simulator" if mode == "simulator" else device_name()
    bw = copy_bandwidth(4096 if mode == "simulator" else 1 << 30)
    print(f"device: {dev}; device-to-device copy: {bw / 1e9:.0f} GB/s")
    rng = np.random.default_rng(0)
    results = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": dev,
        "copy_bandwidth_gb_s": bw / 1e9,
        "mode": mode,
        "git": git_revision(),
        "machine": machine_info(),
        "workloads": {},
    }
    for name in workloads:
        results["workloads"][name] = run_workload(name, SIZES[mode][name], peers, opts, bw, rng)
    if not opts.no_json and mode != "simulator":
        path = opts.json or HERE / "results" / f"cuda-{datetime.date.today().isoformat()}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1, default=str))
        print(f"\nwrote {path}")
    wrong = [
        (w, p)
        for w, r in results["workloads"].items()
        for p, e in r["peers"].items()
        if str(e.get("error", "")).startswith("WRONG")
    ]
    return 3 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
