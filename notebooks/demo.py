"""``make demo``: a short tour of tracekit in the terminal."""

from __future__ import annotations

import time

import numpy as np

import tracekit as tk


class Linear:
    def __init__(self, n_in, n_out, rng):
        self.w = rng.standard_normal((n_in, n_out)).astype(np.float32) / n_in**0.5
        self.b = np.zeros(n_out, np.float32)

    def __call__(self, x):
        return x @ self.w + self.b


class MLP:
    def __init__(self, sizes, seed=0):
        rng = np.random.default_rng(seed)
        self.layers = [Linear(a, b, rng) for a, b in zip(sizes[:-1], sizes[1:])]

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = np.maximum(layer(x), 0.0)
        return self.layers[-1](x)


def section(title):
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def main():
    model = MLP([16, 32, 32, 4])
    x = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    t = tk.trace(model, x)

    section("the traced graph (one line per op, with the source line and the scope)")
    print(t.graph)
    section("the same graph as Python (t.code)")
    print(t.code)
    section("running it")
    x2 = np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32)
    diff = np.abs(t(x2) - model(x2)).max()
    print(f"t(x2) equals model(x2): max |difference| = {diff:.3g}")
    for step in extras():
        step(t, model, x2)
    section("where next")
    print("make lab   opens the notebooks (notebooks/01_tour.ipynb first)")
    print("make test  runs the test suite")


def extras():
    """Later stages of the tour: the picture, then compiling."""
    return [_render_step, _compile_step]


def _median_ms(fn, repeats=15):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[len(times) // 2]


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x):
    m = x.mean(axis=-1, keepdims=True)
    d = x - m
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)


def _compile_step(t, model, x):
    section("compiled with numba (tk.compile)")
    c = tk.compile(t, target="cpu")
    print(c.plan)
    diff = np.abs(c(x) - model(x)).max()
    print(f"compiled result equals NumPy's: max |difference| = {diff:.3g}")
    section("speedups measured now, on this machine (median of 15 runs)")
    rng = np.random.default_rng(0)
    work = [
        ("gelu f32[4M]", gelu, rng.standard_normal(4_000_000).astype(np.float32)),
        ("softmax f32[1024,1024]", softmax, rng.standard_normal((1024, 1024)).astype(np.float32)),
        ("layernorm f32[1024,1024]", layernorm, rng.standard_normal((1024, 1024)).astype(np.float32)),
    ]
    print(f"{'workload':28s} {'NumPy ms':>10s} {'tracekit ms':>12s} {'speedup':>8s} {'kernels':>8s}")
    for name, fn, arg in work:
        ck = tk.compile(tk.trace(fn, arg), progress=False)
        ok = np.allclose(ck(arg), fn(arg), rtol=1e-4, atol=1e-5)
        a, b = _median_ms(lambda: fn(arg)), _median_ms(lambda: ck(arg))
        flag = "" if ok else "  (MISMATCH)"
        print(f"{name:28s} {a:10.2f} {b:12.2f} {a / b:7.1f}x {len(ck.kernels):8d}{flag}")
    print("(benchmarks/cpu.py compares with numexpr and jax.jit too: make bench)")


def _render_step(t, model, x):
    import os

    from tracekit.render import find_engine

    section("the graph as a picture (tk.render)")
    try:
        path_to_dot, how = find_engine(describe=True)
        svg = tk.render(t).pipe(format="svg")
    except Exception as e:  # rendering is optional in the terminal tour
        print(f"(rendering skipped: {e})")
        return
    path = os.path.abspath("demo.svg")
    with open(path, "wb") as f:
        f.write(svg)
    print(f"wrote {path}: the graph as a picture, laid out by {how} ({path_to_dot})")
    print("open it in a browser; in a notebook, evaluating `t` shows the same picture")


if __name__ == "__main__":
    main()
