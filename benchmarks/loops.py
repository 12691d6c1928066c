"""Loop workloads: tracekit's rolled loops against NumPy, a hand-written ``numba.njit`` loop of
the same program, and ``jax.jit`` with ``lax.fori_loop``, measured side by side in one run.

For each workload: the nodes of the rolled graph at 10, 100 and 1,000 steps (they must not
grow), trace + roll + compile time (cold, no disk cache) at each, and warm medians with ratios
(tracekit's speed relative to the faster of numba and jax: above 1 is faster). Programs tracekit
does not roll yet are listed with the reason it gives (``Traced.notes``).

    .venv/bin/python benchmarks/loops.py               # every workload
    .venv/bin/python benchmarks/loops.py --only jacobi,heat3d --budget 2
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

RESULTS = Path(__file__).resolve().parent / "results" / "loops.json"


# ---------------------------------------------------------------------- the workloads (NumPy)
def jacobi(A, B, steps):
    for _ in range(steps):
        B[1:-1, 1:-1] = 0.2 * (
            A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]
        )
        A[1:-1, 1:-1] = 0.2 * (
            B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]
        )
    return A


def heat3d(u, steps):
    for _ in range(steps):
        c = u[1:-1, 1:-1, 1:-1]
        lap = (
            u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
            + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6.0 * c
        )  # fmt: skip
        u[1:-1, 1:-1, 1:-1] = c + 0.1 * lap
    return u


def gray_scott(U, V, steps):
    for _ in range(steps):
        u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
        lu = U[2:, 1:-1] + U[:-2, 1:-1] + U[1:-1, 2:] + U[1:-1, :-2] - 4.0 * u
        lv = V[2:, 1:-1] + V[:-2, 1:-1] + V[1:-1, 2:] + V[1:-1, :-2] - 4.0 * v
        uvv = u * v * v
        U[1:-1, 1:-1] = u + 0.16 * lu - uvv + 0.06 * (1.0 - u)
        V[1:-1, 1:-1] = v + 0.08 * lv + uvv - 0.122 * v
    return U, V


def recurrent(x, w, steps):
    for _ in range(steps):
        x = np.tanh(x @ w) + 0.5 * x
    return x


def kmeans(points, centers, steps):
    for _ in range(steps):
        d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
        onehot = (d.argmin(axis=1)[:, None] == np.arange(centers.shape[0])).astype(np.float64)
        centers = (onehot.T @ points + centers) / (onehot.sum(axis=0)[:, None] + 1.0)
    return centers


def diagonal(a, steps):
    s = 0.0
    for i in range(steps):
        s += np.tanh(a[i, i])
    return s


def stacked(x, steps):
    history = []
    for _ in range(steps):
        x = np.tanh(x) * 0.9
        history.append(x)
    return np.stack(history)


def stacked_numba(x, steps):  # numba's np.stack takes no list: the rows written in place
    history = np.empty((steps, x.shape[0]))
    for t in range(steps):
        x = np.tanh(x) * 0.9
        history[t] = x
    return history


def converge(x, c, steps):
    """A fixed-point iteration until the update is small: how many iterations is the data's
    (``steps`` is not read; the rolled graph is a while_loop)."""
    err = 1.0
    while err > 1e-9:
        y = 0.5 * np.cos(x) + 0.5 * x + c
        err = np.abs(y - x).max()
        x = y
    return x


def moving_literal(x, steps):
    out = np.zeros((steps, x.shape[0]))
    for t in range(steps):
        out[t] = x * t  # the Python int t is a literal that changes every iteration
    return out


def nested(x, w, steps):
    """An inner fixed-point loop in every step of an outer one (a time step with sub-steps)."""
    for _ in range(steps):
        y = x * 0.5
        for _ in range(20):
            y = np.tanh(y * 1.01 + w)
        x = x + y * 0.1
    return x


def _r(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


WORKLOADS = {  # name: (program, inputs, steps for the warm timing)
    "jacobi": (jacobi, lambda: (_r(0, 150, 150), _r(1, 150, 150)), 50),
    "heat3d": (heat3d, lambda: (_r(2, 32, 32, 32),), 50),
    "gray_scott": (gray_scott, lambda: (_r(3, 96, 96) * 0.1 + 1, _r(4, 96, 96) * 0.1), 50),
    "recurrent": (recurrent, lambda: (_r(5, 64, 64), 0.1 * _r(6, 64, 64)), 100),
    "kmeans": (kmeans, lambda: (_r(7, 2000, 2), _r(8, 4, 2)), 20),
    "converge": (converge, lambda: (_r(12, 100_000), 0.1 * _r(13, 100_000)), 0),
    "diagonal": (diagonal, lambda: (_r(9, 2000, 2000),), 2000),  # the 2,000 steps
    "stacked": (stacked, lambda: (_r(10, 256),), 100),
    "moving_literal": (moving_literal, lambda: (_r(11, 64),), 50),
    "nested": (nested, lambda: (_r(14, 256), 0.1 * _r(15, 256)), 30),
}
WRITES_INPUTS = {"jacobi", "heat3d", "gray_scott"}  # each call gets fresh copies of them
NOT_ROLLED: dict = {}  # what tracekit does not roll yet, with its own reason
NUMBA_FORMS = {stacked: stacked_numba}  # where numba cannot compile the NumPy program itself


# ---------------------------------------------------------------------- peers
def numba_version(fn):
    import numba

    return numba.njit(NUMBA_FORMS.get(fn, fn))


def jax_version(name):
    import jax
    import jax.numpy as jnp
    from jax import lax

    jax.config.update("jax_enable_x64", True)

    def fori(step):
        return lambda steps, *state: lax.fori_loop(0, steps, lambda _, s: step(*s), state)

    def jacobi_step(A, B):
        B = B.at[1:-1, 1:-1].set(
            0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        )
        A = A.at[1:-1, 1:-1].set(
            0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
        )
        return A, B

    def heat_step(u):
        c = u[1:-1, 1:-1, 1:-1]
        lap = (
            u[2:, 1:-1, 1:-1] + u[:-2, 1:-1, 1:-1] + u[1:-1, 2:, 1:-1] + u[1:-1, :-2, 1:-1]
            + u[1:-1, 1:-1, 2:] + u[1:-1, 1:-1, :-2] - 6.0 * c
        )  # fmt: skip
        return (u.at[1:-1, 1:-1, 1:-1].set(c + 0.1 * lap),)

    def gs_step(U, V):
        u, v = U[1:-1, 1:-1], V[1:-1, 1:-1]
        lu = U[2:, 1:-1] + U[:-2, 1:-1] + U[1:-1, 2:] + U[1:-1, :-2] - 4.0 * u
        lv = V[2:, 1:-1] + V[:-2, 1:-1] + V[1:-1, 2:] + V[1:-1, :-2] - 4.0 * v
        uvv = u * v * v
        U = U.at[1:-1, 1:-1].set(u + 0.16 * lu - uvv + 0.06 * (1.0 - u))
        V = V.at[1:-1, 1:-1].set(v + 0.08 * lv + uvv - 0.122 * v)
        return U, V

    def recurrent_step(x, w):
        return jnp.tanh(x @ w) + 0.5 * x, w

    def kmeans_step(points, centers):
        d = ((points[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1)
        onehot = (d.argmin(axis=1)[:, None] == jnp.arange(centers.shape[0])).astype(jnp.float64)
        return points, (onehot.T @ points + centers) / (onehot.sum(axis=0)[:, None] + 1.0)

    if name == "converge":  # lax.while_loop, the test in its condition

        def body(state):
            x, c, _ = state
            y = 0.5 * jnp.cos(x) + 0.5 * x + c
            return y, c, jnp.abs(y - x).max()

        solve = jax.jit(
            lambda x, c: lax.while_loop(lambda s: s[2] > 1e-9, body, (x, c, jnp.inf))[0]
        )

        def call_while(x, c, steps):
            out = solve(jnp.asarray(x), jnp.asarray(c))
            jax.block_until_ready(out)
            return out

        return call_while

    if name == "diagonal":  # the sum carried, the index the loop's counter
        run = jax.jit(
            lambda a, steps: lax.fori_loop(0, steps, lambda i, s: s + jnp.tanh(a[i, i]), 0.0),
            static_argnums=1,
        )
        return lambda a, steps: jax.block_until_ready(run(jnp.asarray(a), steps))
    if name == "stacked":  # lax.scan stacks what each step gives

        def scan(x, steps):
            step = lambda x, _: (jnp.tanh(x) * 0.9,) * 2  # noqa: E731
            return lax.scan(step, x, None, length=steps)[1]

        run = jax.jit(scan, static_argnums=1)
        return lambda x, steps: jax.block_until_ready(run(jnp.asarray(x), steps))
    if name == "nested":  # a fori_loop in the body of a fori_loop

        def outer(x, w, steps):
            def step(_, x):
                inner = lax.fori_loop(0, 20, lambda _, y: jnp.tanh(y * 1.01 + w), x * 0.5)
                return x + inner * 0.1

            return lax.fori_loop(0, steps, step, x)

        run = jax.jit(outer, static_argnums=2)
        return lambda x, w, steps: jax.block_until_ready(run(jnp.asarray(x), jnp.asarray(w), steps))
    if name == "moving_literal":
        run = jax.jit(
            lambda x, steps: lax.fori_loop(
                0, steps, lambda t, out: out.at[t].set(x * t), jnp.zeros((steps, x.shape[0]))
            ),
            static_argnums=1,
        )
        return lambda x, steps: jax.block_until_ready(run(jnp.asarray(x), steps))
    steps = {
        "jacobi": jacobi_step,
        "heat3d": heat_step,
        "gray_scott": gs_step,
        "recurrent": recurrent_step,
        "kmeans": kmeans_step,
    }
    run = jax.jit(fori(steps[name]), static_argnums=0)

    def call(*args):
        steps_, *state = args[-1:] + args[:-1]
        out = run(steps_, *(jnp.asarray(a) for a in state))
        jax.block_until_ready(out)
        return out

    return call


# ---------------------------------------------------------------------- measuring
def _copies(args):
    return [np.array(a, copy=True) for a in args]


def trace_and_compile(fn, args, steps):
    """(nodes of the rolled graph, trace + roll seconds, compile seconds, the Compiled)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        t = tk.trace(fn, *_copies(args), steps)
        t1 = time.perf_counter()
        c = tk.compile(t, target="cpu", cache=False, progress=False)
        t2 = time.perf_counter()
    return len(t.graph.nodes), t1 - t0, t2 - t1, c, t


def _final(x):
    return [np.asarray(v) for v in (x if isinstance(x, tuple | list) else (x,))]


def measure(name, fn, make, steps, budget, peers, counts=(10, 100, 1000)):
    args = make()
    sizes = {}
    for n in counts:
        nodes, tt, ct, _, _ = trace_and_compile(fn, args, n)
        sizes[n] = {"nodes": nodes, "trace_s": tt, "compile_s": ct}
    nodes, tt, ct, c, t = trace_and_compile(fn, args, steps)
    want = _final(fn(*_copies(args), steps))
    got = _final(c(*_copies(args), steps))
    ok = all(np.allclose(g, w, rtol=1e-9, atol=1e-12) for g, w in zip(got, want))
    fresh = (lambda: _copies(args)) if name in WRITES_INPUTS else (lambda: args)
    fns = {
        "numpy": lambda: fn(*fresh(), steps),
        "tracekit": lambda: c(*fresh(), steps),
    }
    if "numba" in peers:
        nb = numba_version(fn)
        nb(*fresh(), steps)
        fns["numba"] = lambda: nb(*fresh(), steps)
    if "jax" in peers:
        import jax.numpy as jnp

        jx = jax_version(name)
        on_jax = [jnp.asarray(a) for a in args]  # immutable: converted once, not timed
        jx(*on_jax, steps)
        fns["jax"] = lambda: jx(*on_jax, steps)
    samples = interleaved(fns, budget_s=budget, min_rounds=5, max_rounds=50)
    med = {k: summarize(v)["median_s"] for k, v in samples.items()}
    best_peer = min((med[k] for k in ("numba", "jax") if k in med), default=None)
    return {
        "workload": name,
        "steps": steps,
        "sizes": sizes,
        "rolled_nodes": nodes,
        "correct": bool(ok),
        "median_s": med,
        "ratio_vs_best_compiled_peer": None if best_peer is None else best_peer / med["tracekit"],
        "ratio_vs_numpy": med["numpy"] / med["tracekit"],
        "loops": sum(n.op == "loop" for n in c.graph.nodes),
    }


def _ms(seconds) -> str:
    """Milliseconds to three significant digits (a loop of 300 scalar steps takes µs)."""
    return f"{seconds * 1e3:.3g}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--peers", default="numpy,numba,jax")
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--quick", action="store_true", help="10 and 100 steps only, short timing")
    ap.add_argument("--json", default=str(RESULTS))
    ap.add_argument("--no-json", action="store_true")
    a = ap.parse_args(argv)
    only = [w for w in a.only.split(",") if w]
    unknown = set(only) - set(WORKLOADS)
    if unknown:
        ap.error(f"unknown workload(s) {sorted(unknown)}; choose from {sorted(WORKLOADS)}")
    counts = (10, 100) if a.quick else (10, 100, 1000)
    peers = set(a.peers.split(","))
    print(f"load average {load_average()}")
    rows, results = [], []
    for name, (fn, make, steps) in WORKLOADS.items():
        if only and name not in only:
            continue
        r = measure(name, fn, make, steps, a.budget, peers, counts)
        results.append(r)
        m, sz = r["median_s"], r["sizes"]
        best = r["ratio_vs_best_compiled_peer"]
        rows.append(
            [
                name,
                "/".join(str(sz[n]["nodes"]) for n in counts),
                "/".join(f"{sz[n]['trace_s'] + sz[n]['compile_s']:.2f}" for n in counts),
                _ms(m['numpy']),
                _ms(m.get('numba', float('nan'))),
                _ms(m.get('jax', float('nan'))),
                _ms(m['tracekit']),
                f"{r['ratio_vs_numpy']:.2f}x",
                "-" if best is None else f"{best:.2f}x",
                "yes" if r["correct"] else "NO",
            ]
        )  # fmt: skip
    steps_label = "/".join(map(str, counts))
    head = ["workload", f"nodes {steps_label}", "trace+compile s", "numpy ms", "numba ms",
            "jax ms", "tracekit ms", "vs numpy", "vs best(numba,jax)", "correct"]  # fmt: skip
    print(table(head, rows, right=set(range(1, 10))))
    for name, (fn, make, steps) in NOT_ROLLED.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = tk.trace(fn, *make(), steps)
        print(f"{name}: {len(t.graph.nodes)} nodes, not rolled: {'; '.join(t.notes)}")
    if not a.no_json:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(
            json.dumps({"load_average": load_average(), "rows": results}, indent=2)
        )
        print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
