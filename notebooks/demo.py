"""``make demo``: a short tour of tracekit in the terminal."""

from __future__ import annotations

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
    """Later stages of the tour, each present when its part of tracekit is."""
    steps = []
    try:
        from tracekit import render  # noqa: F401

        steps.append(_render_step)
    except ImportError:
        pass
    return steps


def _render_step(t, model, x):
    try:
        svg = tk.render(t).pipe(format="svg")
    except Exception as e:  # rendering is optional in the terminal tour
        print(f"(rendering skipped: {e})")
        return
    with open("demo.svg", "wb") as f:
        f.write(svg)
    section("rendered")
    print("wrote demo.svg: the graph as a picture (open it in a browser)")


if __name__ == "__main__":
    main()
