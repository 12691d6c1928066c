"""Gradients through a 1,000-step loop: memory (peak RSS) and time of the backward pass, with
the residuals saved in every iteration (the default), with the state alone saved in every
iteration (``checkpoint=1``: the reverse replays each body), with checkpointing in segments, and
jax's ``grad`` of the same program written with ``lax.fori_loop``; each measured in a fresh
process of its own, side by side in one run. Also the largest difference between the
gradients (with respect to ``x`` and ``w``).

``--program moving``: a loop whose indices move with the iteration count (a row of ``a`` read
and an element of ``out`` written in iteration ``t``), whose checkpoint segments count from
their offsets.

    .venv/bin/python benchmarks/loop_grad.py                 # 1,000 steps on a 256x256 state
    .venv/bin/python benchmarks/loop_grad.py --steps 100 --size 64
    .venv/bin/python benchmarks/loop_grad.py --program moving
    .venv/bin/python benchmarks/loop_grad.py --before /tmp/old   # and another checkout's rows
    .venv/bin/python benchmarks/loop_grad.py --state lasting   # a state that stays of order 1

``--before DIR``: the tracekit rows again with the tracekit of another checkout at ``DIR`` (an
earlier revision, ``git archive REV | tar -x -C DIR``), in the same run. ``--rounds N``: every
row N times, the rows interleaved (a loaded machine slows them alike); build and first call
are the first round's, warm ms the median of the rounds' medians.

With the default ``--state decaying`` (``w`` 0.9 times a normal) the state decays towards 0
and, after some hundred steps, part of it is subnormal (the run says how much): x86 takes
many times longer for arithmetic on subnormal numbers, which XLA's CPU code flushes to zero and
NumPy and tracekit keep, so warm times then compare IEEE arithmetic with flushed arithmetic.
``--state lasting`` (``w`` in [1.5, 2.5)) keeps the state of order 1.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def program(x, w, steps):
    for _ in range(steps):
        x = np.tanh(x * w) * 0.9 + 0.1 * x
    return (x * x).sum()


def moving(x, w, a, out, steps):
    for t in range(steps):
        x = np.tanh(x * w + a[t]) * 0.9 + 0.1 * x  # row t of a: an index moving with the loop
        out[t] = x[0, 0]  # and an element written there
    return (x * x).sum() + (out * out).sum()


def _data(size, steps=0, program="plain", state="decaying"):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((size, size)), 0.9 * rng.standard_normal((size, size))
    if state == "lasting":  # every |w| > 1: x = tanh(w * x) has a fixed point other than 0
        w = rng.uniform(1.5, 2.5, (size, size))
    if program == "plain":
        return x, w
    return x, w, 0.1 * rng.standard_normal((steps, size)), np.zeros(steps)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def _with_fori(steps, kind):
    """The program written for jax with ``lax.fori_loop``."""
    import jax
    import jax.numpy as jnp

    if kind == "plain":

        def with_fori(x, w):
            x = jax.lax.fori_loop(0, steps, lambda i, x: jnp.tanh(x * w) * 0.9 + 0.1 * x, x)
            return (x * x).sum()

        return with_fori

    def with_fori(x, w, a, out):
        def step(t, s):
            x, out = s
            x = jnp.tanh(x * w + a[t]) * 0.9 + 0.1 * x
            return x, out.at[t].set(x[0, 0])

        x, out = jax.lax.fori_loop(0, steps, step, (x, out))
        return (x * x).sum() + (out * out).sum()

    return with_fori


def run_one(
    how: str,
    steps: int,
    size: int,
    repeats: int,
    kind: str = "plain",
    root: Path = ROOT,
    state: str = "decaying",
) -> dict:
    """In this process: build the gradient function, call it ``repeats`` times; the numbers
    (tracekit imported from the checkout at ``root``)."""
    args = _data(size, steps, kind, state)
    if how == "jax":
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        on_device = [jnp.asarray(a) for a in args]
        base, start = _rss_mb(), time.perf_counter()
        fn = jax.jit(jax.grad(_with_fori(steps, kind), argnums=(0, 1)))
        fn = fn.lower(*on_device).compile()
        build = time.perf_counter() - start

        def call():
            return np.stack(jax.block_until_ready(fn(*on_device)))  # d/dx and d/dw
    else:
        sys.path.insert(0, str(root))
        import tracekit as tk

        checkpoint = None if how == "residuals" else int(how.split("=")[1])
        fn = program if kind == "plain" else moving
        base, start = _rss_mb(), time.perf_counter()
        t = tk.trace(lambda *a: fn(*a, steps), *args)
        b = tk.compile(tk.vjp(t, checkpoint=checkpoint), target="cpu", progress=False)
        build = time.perf_counter() - start
        one = np.ones(())

        def call():
            return np.stack(b(*[np.copy(a) for a in args], one)[:2])

    start = time.perf_counter()
    grad = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    np.save(_saved(kind, how, root), grad)
    return {
        "how": how,
        "build_s": build,
        "first_s": first,
        "warm_ms": 1e3 * float(np.median(times)),
        "peak_rss_mb": _rss_mb(),
        "rss_before_mb": base,
    }


def _subnormal_share(args) -> str:
    """How much of the loop's final state is subnormal or zero: arithmetic on subnormal
    numbers is many times slower on x86, unless flushed to zero (XLA's CPU code flushes them;
    NumPy and tracekit keep IEEE's)."""
    data = _data(args.size, args.steps, args.program, args.state)
    x, w = data[0], data[1]
    for t in range(args.steps):
        x = np.tanh(x * w + (data[2][t] if args.program == "moving" else 0.0)) * 0.9 + 0.1 * x
    ax = np.abs(x)
    subnormal = float(np.mean((ax > 0) & (ax < np.finfo(x.dtype).tiny)))
    return f"{100 * subnormal:.1f}% subnormal, {100 * float(np.mean(ax == 0)):.1f}% zero"


def _other(root) -> bool:
    """``root`` is another checkout than this one (``--before``)."""
    return Path(root).resolve() != ROOT


def _saved(kind: str, how: str, root: Path) -> str:
    where = "_before" if _other(root) else ""
    return f"/tmp/loop_grad_{kind}_{how.replace('=', '')}{where}.npy"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--program", choices=("plain", "moving"), default="plain")
    ap.add_argument("--before", type=Path, help="another checkout: its tracekit rows too")
    ap.add_argument("--rounds", type=int, default=1, help="each row this many times, interleaved")
    ap.add_argument(
        "--state",
        choices=("decaying", "lasting"),
        default="decaying",
        help="w of 0.9 times a normal (a state that decays to 0) or in [1.5, 2.5)",
    )
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        row = run_one(
            args.one, args.steps, args.size, args.repeats, args.program, args.root, args.state
        )
        print(json.dumps(row))
        return
    segment = max(1, int(round(args.steps**0.5)))
    hows = ["residuals", "checkpoint=1", f"checkpoint={segment}"]
    runs = [(how, ROOT) for how in hows]
    if args.before is not None:
        runs += [(how, args.before) for how in hows]
    runs.append(("jax", ROOT))
    state_mb = args.size * args.size * 8 / 2**20
    what = "loop" if args.program == "plain" else "loop whose indices move"
    print(
        f"gradient of a {args.steps}-step {what} on a {args.size}x{args.size} float64 state "
        f"({state_mb:.2f} MB a state; {args.steps} states: {args.steps * state_mb:.0f} MB)"
    )
    rows = [{"how": how, "root": str(root), "warm": []} for how, root in runs]
    for _ in range(args.rounds):
        for r in rows:
            cmd = [sys.executable, __file__, "--one", r["how"], "--steps", str(args.steps)]
            cmd += ["--size", str(args.size), "--repeats", str(args.repeats)]
            cmd += ["--program", args.program, "--root", r["root"], "--state", args.state]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            r["warm"].append(got["warm_ms"])
            r.update({k: v for k, v in got.items() if k not in r})  # the first round's
    print(f"the state after the loop: {_subnormal_share(args)}")
    ref = np.load(f"/tmp/loop_grad_{args.program}_jax.npy")
    head = ["build s", "first call s", "warm ms", "peak RSS MB", "growth MB", "max |g - jax|"]
    print(f"{'':23s} " + " ".join(f"{h:>13s}" for h in head))
    for r in rows:
        g = np.load(_saved(args.program, r["how"], r["root"]))
        diff = float(np.max(np.abs(g - ref)))
        growth = r["peak_rss_mb"] - r["rss_before_mb"]
        warm = float(np.median(r["warm"]))
        cells = [f"{r['build_s']:13.2f}", f"{r['first_s']:13.2f}", f"{warm:13.1f}"]
        cells += [f"{r['peak_rss_mb']:13.0f}", f"{growth:13.0f}", f"{diff:13.2e}"]
        label = f"before {r['how']}" if _other(r["root"]) else r["how"]
        print(f"{label:23s} " + " ".join(cells))


if __name__ == "__main__":
    main()
