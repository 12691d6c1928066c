"""Fusion across constant offsets (backends/offsets.py): a cheap elementwise value read only
through slices is computed again in its readers' kernels. Programs against NumPy, the plan's
decisions and refusals, and the cases that must keep the value as an array."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.run import hypothesis_settings, quiet
from helpers.stencils import programs
from hypothesis import given
from hypothesis import strategies as st

import tracekit as tk
from tracekit.backends import offsets, pads


def _compile(fn, *args):
    with quiet():
        return tk.compile(tk.trace(fn, *args), target="cpu", cache=False, progress=False)


def hdiff(f, coeff):
    lap = 4.0 * f[1:-1, 1:-1] - (f[2:, 1:-1] + f[:-2, 1:-1] + f[1:-1, 2:] + f[1:-1, :-2])
    res = lap[1:, 1:-1] - lap[:-1, 1:-1]
    flx = np.where(res * (f[2:-1, 2:-2] - f[1:-2, 2:-2]) > 0, 0, res)
    res = lap[1:-1, 1:] - lap[1:-1, :-1]
    fly = np.where(res * (f[2:-2, 2:-1] - f[2:-2, 1:-2]) > 0, 0, res)
    return f[2:-2, 2:-2] - coeff * (flx[1:] - flx[:-1] + fly[:, 1:] - fly[:, :-1])


def chain(a):
    b = np.tanh(a[1:] - a[:-1])  # a transcendental: it weighs more in the cost
    c = b[2:] * 0.5 + b[:-2] * 0.25
    return c[::2] + c[1::2]  # strided slices of c


def test_a_stencil_computes_its_cheap_stages_again_at_each_offset():
    rng = np.random.default_rng(0)
    f, coeff = rng.standard_normal((20, 18)), rng.standard_normal((16, 14))
    c = _compile(hdiff, f, coeff)
    fused = [d for d in c.plan.offsets if d.fused]
    kept = [d for d in c.plan.offsets if not d.fused]
    assert [(d.slices, d.cost) for d in fused] == [(4, 5)]  # the Laplacian, at its 4 offsets
    assert "lap = " in str(fused[0]) and "test_offsets.py" in str(fused[0])
    assert len(kept) == 2 and all("2 slices x 15 op(s)" in str(d) for d in kept)  # the fluxes
    assert "fusion across offsets:" in str(c.plan)
    assert len(c.plan.kernels) == 3  # the two fluxes (each with the Laplacian), the update
    for x, k in [(f, coeff), (rng.standard_normal((20, 18)), rng.standard_normal((16, 14)))]:
        np.testing.assert_allclose(c(x, k), hdiff(x, k), rtol=1e-13, atol=1e-13)


def test_without_the_budget_every_stage_is_an_array(monkeypatch):
    f = np.random.default_rng(1).standard_normal((20, 18))
    coeff = np.ones((16, 14))
    monkeypatch.setattr(offsets, "MAX_RECOMPUTE", 0)
    c = _compile(hdiff, f, coeff)
    assert len(c.plan.kernels) == 4 and not any(d.fused for d in c.plan.offsets)
    np.testing.assert_allclose(c(f, coeff), hdiff(f, coeff), rtol=1e-13, atol=1e-13)


def scaled_differences(a, c):
    d = c * (a[:, :-1] - a[:, 1:])  # c: a Python float, weak beside float32 (NEP 50)
    return d[1:] - d[:-1]


def test_a_value_computed_again_with_a_python_float_keeps_its_float32():
    """The value computed again at each offset is float32 as the traced one was, not float64
    as a float64 zero in place of the Python float would make it (fuzz seed 15300034: float64
    differences rounded to float32 once, an ulp from NumPy's)."""
    a = np.random.default_rng(3).standard_normal((9, 8)).astype(np.float32)
    c = _compile(scaled_differences, a, 0.3)
    assert [d.slices for d in c.plan.offsets if d.fused] == [2]
    assert all(v.dtype == np.float32 for k in c.plan.kernels for n in k.nodes for v in n.outputs)
    got, want = c(a, 0.3), scaled_differences(a, 0.3)
    assert got.dtype == np.float32 and np.array_equal(got, want)


@pytest.mark.parametrize("budget", [0, 8, 24, 100])
def test_strided_slices_and_transcendentals_at_every_budget(budget, monkeypatch):
    monkeypatch.setattr(offsets, "MAX_RECOMPUTE", budget)
    a = np.random.default_rng(2).standard_normal(41)
    c = _compile(chain, a)
    for d in c.plan.offsets:
        assert d.fused == (d.slices * d.cost <= budget), str(d)
    np.testing.assert_allclose(c(a), chain(a), rtol=1e-14, atol=1e-15)


def read_directly(a):
    b = a[1:] + a[:-1]
    return b[1:] * b[:-1], b.sum()  # b itself is read too: it stays an array


def of_a_reduction(a):
    s = a.sum(axis=1)
    return s[1:] - s[:-1]


@pytest.mark.parametrize("fn", [read_directly, of_a_reduction], ids=lambda f: f.__name__)
def test_values_not_read_only_through_slices_or_not_elementwise_stay_arrays(fn):
    args = (np.random.default_rng(3).standard_normal((6, 5)),)
    c = _compile(fn, *args)
    assert not any(d.fused for d in c.plan.offsets), [str(d) for d in c.plan.offsets]
    got, want = c(*args), fn(*args)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=1e-13)


def broadcast(a, w, r):
    b = a * w + r  # w (5,) broadcast along the rows, r (6, 1) along the columns
    return b[None, 1:, ::-1] - b[None, :-1], b[-1, 1:3] * b[0, :2]


def test_a_value_of_broadcast_inputs_is_computed_again_from_their_slices():
    rng = np.random.default_rng(3)
    args = rng.standard_normal((6, 5)), rng.standard_normal(5), rng.standard_normal((6, 1))
    c = _compile(broadcast, *args)
    (d,) = c.plan.offsets
    assert d.fused and d.slices == 4, str(d)
    assert len(c.plan.kernels) == 2  # one per result, each computing b at its offsets
    for got, want in zip(c(*args), broadcast(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-14)


def test_a_loop_body_is_fused_across_offsets_too():
    def steps(u):
        for _ in range(30):
            lap = u[2:] + u[:-2] - 2.0 * u[1:-1]
            u[2:-2] = u[2:-2] + 0.1 * (lap[1:-1] - 0.5 * (lap[2:] + lap[:-2]))
        return u

    u = np.random.default_rng(4).standard_normal(40)
    c = _compile(steps, u.copy())
    (run,) = c.program.loops.values()
    assert run.how == "one numba function" and run.source.count("def segment") == 1
    np.testing.assert_allclose(c(u.copy()), steps(u.copy()), rtol=1e-12)


@st.composite
def stencil_chains(draw):
    """A chain of two or three stages over 1-3 dims of sizes 1-7: each stage a few elementwise
    ops of slices of the stage before at constant offsets (negative steps, ints, size-1 and
    size-2 axes included), as (shape, stages): a stage is [(op, index, index), ...]."""
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=3)))
    stages, cur = [], shape
    for _ in range(draw(st.integers(2, 3))):
        idx_a, idx_b = [], []
        out = []
        for n in cur:
            d = draw(st.integers(0, min(2, n - 1)))  # the halo: slices n - d long
            w = n - d
            for idx in (idx_a, idx_b):
                o = draw(st.integers(0, d))
                if draw(st.booleans()):
                    idx.append(slice(o, o + w))
                else:  # reversed: the same elements, last first
                    idx.append(slice(o + w - 1, o - 1 if o else None, -1))
            out.append(w)
        ops = draw(
            st.lists(
                st.sampled_from(["add", "subtract", "multiply", "tanh"]), min_size=1, max_size=3
            )
        )
        stages.append((tuple(idx_a), tuple(idx_b), ops))
        cur = tuple(out)
    return shape, stages


def _run_chain(stages, x):
    for idx_a, idx_b, ops in stages:
        a, b = x[idx_a], x[idx_b]
        for op in ops:
            a = np.tanh(a) if op == "tanh" else getattr(np, op)(a, b)
        x = a
    return x


@hypothesis_settings(25)
@given(stencil_chains(), st.sampled_from([0, 8, 24, 200]))
def test_random_stencil_chains_equal_numpy_at_every_budget(chain, budget):
    shape, stages = chain
    old = offsets.MAX_RECOMPUTE
    offsets.MAX_RECOMPUTE = budget
    try:
        x = np.random.default_rng(len(stages)).standard_normal(shape)
        c = _compile(lambda v: _run_chain(stages, v), x)
    finally:
        offsets.MAX_RECOMPUTE = old
    for d in c.plan.offsets:
        assert d.fused == (d.slices * d.cost <= budget), str(d)
    for y in (x, np.asfortranarray(x + 1.0), (x - 1.0)[..., ::-1]):
        np.testing.assert_allclose(c(y), _run_chain(stages, y), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fn", [hdiff, chain, broadcast], ids=lambda f: f.__name__)
def test_the_cuda_target_computes_again_at_offsets_and_reads_slices_in_place(fn):
    """On the device too (the simulator here): the same decisions, the kernels index the
    arrays their slices view (no gather kernel materialises a slice), values equal NumPy's."""
    pytest.importorskip("numba.cuda")
    from tracekit.backends.cuda import simulator_active

    if not simulator_active():
        pytest.skip("runs on the CUDA simulator")
    rng = np.random.default_rng(7)
    shapes = {hdiff: [(9, 8), (5, 4)], chain: [(13,)], broadcast: [(6, 5), (5,), (6, 1)]}[fn]
    args = [rng.standard_normal(s) for s in shapes]
    with quiet():
        c = tk.compile(tk.trace(fn, *args), target="cuda", cache=False, progress=False)
    cpu = _compile(fn, *args)

    def again(plan):  # values computed again at offsets (the CPU's tiles aside)
        return [(d.value.name, d.slices) for d in plan.offsets if d.fused and not d.how]

    assert again(c.plan) == again(cpu.plan) and any(d.fused for d in c.plan.offsets)
    kernels = [it for it in c.program.items if it.kind == "kernel"]
    assert len(kernels) == len(c.plan.kernels)  # no gather kernel (single elements: aliases)
    assert "base_" in c.program.source
    args[0] = np.asfortranarray(args[0])  # a strided input: copied on the device once
    got, want = c(*args), fn(*args)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)


def costly(a):
    b = np.tanh(a[1:] - a[:-1]) * np.exp(-a[1:] * a[1:])  # 2 transcendental functions
    return b[2:] * b[1:-1] - 0.5 * b[:-2] + b[1:-1, ::-1]  # rows 1, 0 and 2 of b per row


def test_a_costly_producer_is_computed_in_tiles_of_its_readers_rows(monkeypatch):
    """A value too costly to compute again at its 4 offsets: its rows, a tile (and its halo)
    at a time, go to scratch inside the kernel reading it, with odd sizes, several tiles,
    a last tile cut short, a reversed axis, non-contiguous inputs, and threads: the large
    one's tiles as chunks on numba's threads (its driver), or in numba's parallel loop with
    scratch per thread (``TRACEKIT_CPU_THREADS=prange``)."""
    from tracekit.backends import drivers, tiles

    rng = np.random.default_rng(8)
    monkeypatch.setattr(drivers, "worth_driving", lambda *args: True)  # however small
    for mode in ("numba", "prange"):
        monkeypatch.setenv("TRACEKIT_CPU_THREADS", mode)
        for a in (rng.standard_normal((40, 23)), rng.standard_normal((203, 200))):
            monkeypatch.setattr(tiles, "TILE_BYTES", 8 * a.shape[1] * 11)  # 9 + 2 halo rows
            c = _compile(costly, a)
            (d,) = [d for d in c.plan.offsets if d.value.shape == (a.shape[0] - 1, a.shape[1])]
            assert d.fused and d.how.startswith("tiles of ") and "+2 halo rows" in d.how
            assert "computed in tiles" in str(d) and "test_offsets.py" in str(d)
            (k,) = c.plan.kernels
            assert len(k.tiles) == 1 and "in tiles of" in str(c.plan)
            for x in (a, np.asfortranarray(a), np.repeat(a, 2, axis=1)[:, ::2]):
                np.testing.assert_allclose(c(x), costly(x), rtol=1e-13, atol=1e-14)
        if mode == "prange":
            assert "prange" in c.source and "get_thread_id" in c.source  # the large one
        else:
            assert list(c.program.drivers) == list(c.program.chunks) == ["segment0"]


def read_twice(a):
    b = np.tanh(a[1:] - a[:-1]) * np.exp(a[1:])
    return b[2:] + b[1:-1] * b[:-2] - b[1:-1] * 2.0, (b[::-1] * 2.0).sum()


def reversed_rows(a):
    b = np.tanh(a[1:] - a[:-1]) * np.exp(a[1:])
    return b[2:] + b[1:-1] * b[:-2] - b[-1:1:-1] * 2.0  # its rows last first


@pytest.mark.parametrize(
    "fn, why",
    [
        (costly, "written and read back within the cache"),  # small: the default tile holds it
        (read_twice, "read by more than one kernel"),
        (reversed_rows, "do not follow the reading kernel's first axis"),
    ],
    ids=["fits", "read_twice", "reversed"],
)
def test_producers_not_computed_in_tiles_say_why(fn, why):
    a = np.random.default_rng(9).standard_normal((30, 17))
    c = _compile(fn, a)
    kept = [d for d in c.plan.offsets if not d.fused]
    assert kept and all("not in tiles: " in d.reason for d in kept)
    assert any(why in d.reason for d in kept), [str(d) for d in kept]
    assert not any(k.tiles for k in c.plan.kernels)
    got, want = c(a), fn(a)
    for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def stencil_loss(u, w):
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    flux = np.tanh(lap[1:] - lap[:-1])
    return (flux[1:, 1:-1] * w - 0.5 * flux[:-1, 2:] * flux[:-1, :-2]).sum()


def test_gradients_of_a_stencil_chain_equal_finite_differences():
    """The backward graph (slices transposed into writes of zeros padded around) compiled,
    against central differences of NumPy's loss."""
    rng = np.random.default_rng(10)
    u, w = rng.standard_normal((9, 8)), rng.standard_normal((5, 4))
    c = _compile(tk.grad(stencil_loss), u, w)
    got = c(np.asfortranarray(u), w)
    want, h = np.empty_like(u), 1e-6
    for i in np.ndindex(u.shape):
        up, down = u.copy(), u.copy()
        up[i] += h
        down[i] -= h
        want[i] = (stencil_loss(up, w) - stencil_loss(down, w)) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def biharmonic_loss(u):
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    out = lap[2:, 1:-1] + lap[:-2, 1:-1] + lap[1:-1, 2:] + lap[1:-1, :-2] - 4.0 * lap[1:-1, 1:-1]
    return (out * out).sum()


def hdiff_loss(f, coeff):
    return np.tanh(hdiff(f, coeff)).sum()


def _central_differences(fn, u, *rest, h=1e-6):
    want = np.empty_like(u)
    for i in np.ndindex(u.shape):
        up, down = u.copy(), u.copy()
        up[i] += h
        down[i] -= h
        want[i] = (fn(up, *rest) - fn(down, *rest)) / (2 * h)
    return want


@pytest.mark.parametrize(
    "fn, shape, rest",
    [(biharmonic_loss, (9, 7), ()), (hdiff_loss, (8, 9), (0.3,)), (biharmonic_loss, (5, 6), ())],
)
def test_gradients_of_stencil_chains_read_their_blocks_as_pads(fn, shape, rest):
    """The gradient of each slice (zeros with the gradient written in) is read in place as a
    pad by the kernel adding them up: no host step, every block read through a window; values
    equal the interpreter's and central differences (odd sizes, a Fortran-ordered input)."""
    u = np.random.default_rng(3).standard_normal(shape)
    t = tk.trace(tk.grad(fn), u, *rest)
    c = _compile(tk.grad(fn), u, *rest)
    assert not [st for st in c.plan.steps if st.kind == "host"], str(c.plan)
    read = [d for d in c.plan.offsets if isinstance(d, pads.PadRead)]
    assert read and all(d.fused for d in read), str(c.plan)
    assert all(st.nodes[0].op != "index_update" for st in c.plan.steps)
    got = c(np.asfortranarray(u), *rest)
    np.testing.assert_allclose(got, t(u, *rest), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, _central_differences(fn, u, *rest), rtol=1e-6, atol=1e-7)


def _pads_by_kernel(c) -> dict:
    by_kernel: dict = {}
    for d in c.plan.offsets:
        if isinstance(d, pads.PadRead) and d.fused:
            by_kernel.setdefault(str(d).split("by kernel(s) ")[1].split(":")[0], []).append(d)
    return by_kernel


def test_the_biharmonic_gradient_without_pads_pushed_is_one_kernel_per_stage(monkeypatch):
    """Pads not pushed through the values they pad: forward, the Laplacian (kept: 5 slices
    x 5 ops over the budget), then the second Laplacian with the loss's gradient; backward:
    one kernel per stage, each reading the stage after's gradient through 5 pads (none made,
    no NumPy call)."""
    monkeypatch.setattr(offsets, "THROUGH_PADS", False)
    c = _compile(tk.grad(biharmonic_loss), np.zeros((30, 21)))
    assert len(c.plan.kernels) == 4, str(c.plan)
    assert sorted(len(v) for v in _pads_by_kernel(c).values()) == [5, 5], str(c.plan)
    assert not [r for r in c.plan.refusals if r.node.op == "pad"]
    said = str(c.plan)
    assert "read in place through" in said and "rows (1, 1), (0, 2) of 0.0 around it" in said
    _, drawn = offsets.drawn_notes(c.graph, c.plan.offsets)  # the compiled view's notes
    assert sum(note.startswith("a pad read in place") for note in drawn.values()) == 10


def test_the_biharmonic_gradient_pushes_pads_through_its_cheap_values_only():
    """The backward of the biharmonic: the loss's gradient scaled (13 op(s) with its pad
    reads) is computed again through its one pad in the stage before it; the stages read at
    5 offsets through pads cost more than the budget (a pad read weighs ``PAD_READ``) and
    stay arrays, saying so; the one-input ops over the last (a negation, a scale by 4, read
    at one pad) are computed again from it, so each stage's kernel writes one array.
    Values equal the interpreter's bit for bit."""
    u = np.random.default_rng(12).standard_normal((30, 21))
    c = _compile(tk.grad(biharmonic_loss), u)
    fused = {d.value.name: d for d in c.plan.offsets if isinstance(d, offsets.OffsetFusion)}
    said = {name: str(d) for name, d in fused.items()}
    assert fused["28"].fused and fused["28"].pads == 1, said
    assert "computed again at 1 offsets, 1 of them through pads: %28" in said["28"]
    assert not fused["42"].fused and "5 pad(s) x 26 op(s) per element > 24" in said["42"]
    assert not fused["26"].fused and "5 pad(s) x 11 op(s) per element > 24" in said["26"]
    onto = {name: (d.onto.name, d.pads, d.cost) for name, d in fused.items() if d.onto}
    assert onto == {"43": ("42", 1, 1), "44": ("43", 1, 1)}, said
    assert "1 of them through pads, from %42 read there" in said["43"]
    assert [len(k.outputs) for k in c.plan.kernels] == [1, 1, 1, 1], str(c.plan)
    assert not [st for st in c.plan.steps if st.kind == "host"], str(c.plan)
    got, want = c(u), tk.trace(tk.grad(biharmonic_loss), u)(u)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_backward_stages_read_through_pads_say_why_they_stay_arrays(monkeypatch):
    """The backward of the biharmonic, pads not pushed: each stage's gradient is read by the
    stage before through pads (zeros around it), which fusion across offsets does not compute
    again: the plan keeps each as an array with that reason, and so does the compiled view's
    drawing (pads not read through in tiles either, ``tiles.THROUGH_PADS``)."""
    from tracekit.backends import tiles

    monkeypatch.setattr(offsets, "THROUGH_PADS", False)
    monkeypatch.setattr(tiles, "THROUGH_PADS", False)
    c = _compile(tk.grad(biharmonic_loss), np.zeros((30, 21)))
    pad_reads = [d for d in c.plan.offsets if isinstance(d, pads.PadRead) and d.fused]
    blocks = {d.reason.split(":")[0][1:] for d in pad_reads}  # "%26: f64[...] (rows ..."
    kept = [d for d in c.plan.offsets if isinstance(d, offsets.OffsetFusion) and not d.fused]
    read_through_pads = {d.value.name: d for d in kept if "pad(s)" in d.reason}
    assert set(read_through_pads) == blocks, str(c.plan)  # every block a pad reads
    assert sum(d.slices for d in read_through_pads.values()) == len(pad_reads) == 10
    for d in read_through_pads.values():
        assert "computed again only where read through slices" in d.reason, d.reason
        assert "not in tiles: read through a pad" in d.reason, d.reason
    why, _ = offsets.drawn_notes(c.graph, c.plan.offsets)
    assert all("pad(s) (a slice's gradient" in why[name] for name in blocks), why


def pad_of_a_result(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = np.cos(u)  # (not pushed through: cos is 0 at no constant 0, -0.0, 1)
    return z, z[2:] * z[:-2]


def pad_read_by_a_reduction(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = u * 2.0
    return (z * u[0]).sum(axis=0) + z[0]


@pytest.mark.parametrize(
    "fn, why",
    [
        (pad_of_a_result, "a result of the function"),
        (pad_read_by_a_reduction, "not an elementwise"),
    ],
)
def test_pads_that_stay_arrays_say_why(fn, why):
    u = np.random.default_rng(4).standard_normal((6, 3))
    c = _compile(fn, u)
    kept = [d for d in c.plan.offsets if isinstance(d, pads.PadRead) and not d.fused]
    assert kept and why in kept[0].reason, str(c.plan)
    for got, want in zip(c(u), fn(u)):
        np.testing.assert_array_equal(got, want)


def test_a_block_written_into_ones_is_read_with_its_fill_and_slices_of_it():
    """Other fills than zeros, slices of the pad (their windows keep the guards, reversed
    ones too), size-1 and size-2 axes."""

    def fn(a, b):
        z = np.full((a.shape[0] + 3, a.shape[1]), 1.5)
        z[2:-1, :] = a * b
        return z[1:] - z[:-1] + 2 * z[:-1, ::-1]

    for shape in [(4, 1), (1, 2), (2, 5)]:
        a = np.random.default_rng(5).standard_normal(shape)
        c = _compile(fn, a, a + 1)
        read = [d for d in c.plan.offsets if isinstance(d, pads.PadRead)]
        assert read and all(d.fused for d in read), str(c.plan)
        np.testing.assert_allclose(c(a, a + 1), fn(a, a + 1), rtol=1e-13)


def blocks_that_are_no_pads(u):
    z = np.zeros(u.shape[0] + 2)
    z[1:-1, None] = u[:, :1]  # a new axis in the index
    y = np.zeros(u.shape)
    y[::2] = u[::2]  # a stride
    w = np.zeros(u.shape)
    w[0] = u[1]  # an int
    return z[1:] + z[:-1], y[1:] - y[:-1], w[1:] * w[:-1]


def test_blocks_written_through_other_indices_stay_index_updates():
    u = np.random.default_rng(7).standard_normal((5, 3))
    c = _compile(blocks_that_are_no_pads, u)
    assert not [d for d in c.plan.offsets if isinstance(d, pads.PadRead)], str(c.plan)
    for got, want in zip(c(u), blocks_that_are_no_pads(u)):
        np.testing.assert_array_equal(got, want)


def test_a_block_written_into_after_its_pad_is_read_keeps_its_values():
    """The kernel reading a pad reads the block's buffer: a later write into the block (an
    in-place update where nothing reads the block after it) must come after that kernel."""

    def fn(u):
        g = u * 2.0
        z = np.zeros((u.shape[0] + 2, u.shape[1]))
        z[1:-1] = g
        g[0] = 7.0
        return z[1:] * z[:-1] + z[:-1], g

    u = np.random.default_rng(6).standard_normal((5, 4))
    c = _compile(fn, u)
    assert any(isinstance(d, pads.PadRead) and d.fused for d in c.plan.offsets), str(c.plan)
    for got, want in zip(c(u), fn(u)):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def laplace3_stages(u):
    return programs.laplace3_stage(programs.laplace3_stage(u))


def mixed_offsets(u):
    a = u[2:, :-1] - u[:-2, 1:]  # offsets of both signs, mixed across axes
    b = np.where(a > 0, a, -0.5 * a)
    return b[1:, 1:] * b[:-1, :-1] - b[1:, :-1]


def along_rows(u):
    a = u[1:] - u[:-1]
    return a[1:] + 2.0 * a[:-1]


def blur_rows_then_columns(u):
    a = 0.25 * u[:, :-2] + 0.5 * u[:, 1:-1] + 0.25 * u[:, 2:]
    return 0.25 * a[:-2] + 0.5 * a[1:-1] + 0.25 * a[2:]


def _weighted(fn):
    def loss(u, w):
        return (fn(u) * w).sum()

    return loss


@pytest.mark.parametrize(
    "fn, shape, fewer",
    [
        (laplace3_stages, (11, 10, 9), True),
        (laplace3_stages, (5, 9, 5), False),
        (mixed_offsets, (13, 12), True),
        (mixed_offsets, (4, 3), False),
        (along_rows, (7, 1), False),
        (along_rows, (3, 2), False),
        (blur_rows_then_columns, (13, 14), True),
        (blur_rows_then_columns, (5, 3), False),
        (programs.blur3, (13, 14), False),  # its stages divide: no pad pushed through them
        (programs.blur3, (7, 2), False),
    ],
)
def test_gradients_push_pads_through_backward_stages(fn, shape, fewer, monkeypatch):
    """Gradients of stencil chains with pads pushed through their backward stages: the same
    values as the interpreter's bit for bit (the signs of zeros too), and as central
    differences; no more kernels than without (odd sizes, size-1 and size-2 axes, negative
    and mixed offsets); ``fewer`` where every array has 65 elements or more (zeros of up to
    64 are folded constants, written into by NumPy calls)."""
    rng = np.random.default_rng(sum(shape))
    u = rng.standard_normal(shape)
    w = rng.standard_normal(np.shape(fn(u)))
    grad = tk.grad(_weighted(fn))
    want = tk.trace(grad, u, w)(u, w)
    c = _compile(grad, u, w)
    got = c(u, w)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_allclose(got, _central_differences(_weighted(fn), u, w), atol=1e-7)
    monkeypatch.setattr(offsets, "THROUGH_PADS", False)
    before = _compile(grad, u, w)
    assert len(c.plan.kernels) <= len(before.plan.kernels), str(c.plan)
    if fewer:
        assert len(c.plan.kernels) < len(before.plan.kernels), str(c.plan)
        assert "of them through pads" in str(c.plan)


def negated_pads(u):
    z = np.zeros(u.shape[0] + 2)
    z[1:-1] = -u  # pad(-u): -u of pads of -0.0
    y = np.zeros(u.shape[0] + 4)
    y[1:-1] = -(z * 3.0)  # a pad of 0.0 around one of -0.0 (after the push)
    return y * 2.0


def test_pads_pushed_through_negations_keep_the_signs_of_zeros():
    """``pad(-u, 0.0)`` is ``-pad(u, -0.0)``: a pad of a pad whose constants differ in sign
    is read with both, each outside its own block (NumPy's -0.0 and 0.0 where it has them)."""
    u = np.array([1.0, -2.0, 0.0, -0.0, 3.5])
    c = _compile(negated_pads, u)
    assert len(c.plan.kernels) == 1, str(c.plan)
    assert "of them through pads" in str(c.plan)
    got, want = c(u), negated_pads(u)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert np.signbit(want).any() and not np.signbit(want).all()


def pad_of_exp(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = np.exp(u)
    return z[1:] + z[:-1]


def pad_of_a_reciprocal(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = 1.0 / u  # 1 / c is 0 for no constant c but infinities: pads of 0 would give inf
    return z[1:] + z[:-1]


def pad_of_cos(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = np.cos(u * 2.0)  # cos is 0 at no constant (0, -0.0, 1)
    return z[1:] + z[:-1]


def pad_of_arctan(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = np.arctan(u * 2.0)
    return z[1:] + z[:-1]


def pad_of_ones(u):
    z = np.full((u.shape[0] + 2, u.shape[1]), 1.5)
    z[1:-1] = u * 2.0
    return z[1:] + z[:-1]


def pad_of_broadcast(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    z[1:-1] = u * u[0]
    return z[1:] + z[:-1]


def pad_of_a_new_axis(u):
    z = np.zeros((u.shape[0], 3))
    z[:, 1:2] = u[:, 0, None] * 2.0  # a pad of it would pad the new axis
    return z * 3.0 + 1.0


def pad_of_a_reduced_value(u):
    z = np.zeros((u.shape[0] + 2, u.shape[1]))
    g = u * 2.0
    z[1:-1] = g
    return z[1:] + z[:-1], g.sum(axis=0)


@pytest.mark.parametrize(
    "fn, why",
    [
        (pad_of_exp, "exp of no constants (0, -0.0, 1) is its pad's constant"),
        (pad_of_a_reciprocal, "divide is not pushed through a pad (a division per pad read"),
        (pad_of_cos, "cos of no constants (0, -0.0, 1) is its pad's constant"),
        (pad_of_arctan, "arctan is not pushed through a pad (not exact at 0 and 1"),
        (pad_of_broadcast, "an input broadcast to its shape"),
        (pad_of_a_reduced_value, "also read as an array"),
        (pad_of_ones, "a pad's constant is not 0 or 1"),
        (pad_of_a_new_axis, "a slice adding an axis"),
    ],
)
def test_values_pads_are_not_pushed_through_say_why(fn, why):
    u = np.random.default_rng(8).standard_normal((5, 4))
    c = _compile(fn, u)
    kept = [d for d in c.plan.offsets if isinstance(d, offsets.OffsetFusion) and not d.fused]
    assert any("pad(s)" in d.reason and why in d.reason for d in kept), str(c.plan)
    got, want = c(u), fn(u)
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want))):
        np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("fn, shape", [(mixed_offsets, (13, 12)), (along_rows, (5, 2))])
def test_gradients_of_stencil_chains_on_the_cuda_simulator(fn, shape):
    """The CUDA target writes slices' gradients as NumPy does (no pads there, none pushed):
    its gradients equal the interpreter's and the CPU's with pads pushed."""
    pytest.importorskip("numba.cuda")
    from tracekit.backends.cuda import simulator_active

    if not simulator_active():
        pytest.skip("runs on the CUDA simulator")
    rng = np.random.default_rng(11)
    u = rng.standard_normal(shape)
    w = rng.standard_normal(np.shape(fn(u)))
    grad = tk.grad(_weighted(fn))
    with quiet():
        c = tk.compile(tk.trace(grad, u, w), target="cuda", cache=False, progress=False)
    assert not [d for d in c.plan.offsets if getattr(d, "pads", 0)], str(c.plan)
    want = tk.trace(grad, u, w)(u, w)
    np.testing.assert_allclose(c(u, w), want, rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(_compile(grad, u, w)(u, w), want)


def scaled_laplacian(u):
    lap = u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4.0 * u[1:-1, 1:-1]
    t = -(lap * 3.0)  # one-input ops on top: 7 ops per element, read at 4 offsets
    return t[2:, 1:-1] * t[:-2, 1:-1] + t[1:-1, 2:] - t[1:-1, :-2]


@pytest.mark.parametrize("shape", [(9, 8, 1), (7, 5, 2), (6, 11, 3)])
@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_a_value_over_the_budget_is_computed_again_from_its_one_input(shape, target, monkeypatch):
    """``-(lap * 3.0)`` read at 4 offsets costs 4 x 7 ops, over the budget: its negation alone
    is computed again at each offset from ``lap * 3.0``, which then fits (4 x 6) and is
    computed again too; kept whole (``ONE_INPUT`` off), it is a kernel's array. Values
    equal NumPy's (size-1 and size-2 trailing axes, a reversed and a Fortran-ordered input)
    on the CPU and the CUDA simulator."""
    if target == "cuda":
        pytest.importorskip("numba.cuda")
        from tracekit.backends.cuda import simulator_active

        if not simulator_active():
            pytest.skip("runs on the CUDA simulator")
    u = np.random.default_rng(sum(shape)).standard_normal(shape)
    with quiet():
        c = tk.compile(tk.trace(scaled_laplacian, u), target=target, cache=False, progress=False)
    said = str(c.plan)
    (first,) = [d for d in c.plan.offsets if d.onto is not None]
    assert (first.slices, first.cost, first.onto.shape) == (4, 1, first.value.shape), said
    assert f"4 offsets, from %{first.onto.name} read there" in str(first), said
    assert all(d.fused for d in c.plan.offsets) and len(c.plan.kernels) == 1, said
    for x in (u, u[::-1], np.asfortranarray(u)):
        np.testing.assert_allclose(c(x), scaled_laplacian(x), rtol=1e-13, atol=1e-13)
    monkeypatch.setattr(offsets, "ONE_INPUT", False)
    with quiet():
        whole = tk.compile(
            tk.trace(scaled_laplacian, u), target=target, cache=False, progress=False
        )
    kept = [d for d in whole.plan.offsets if not d.fused]
    assert [(d.slices, d.cost) for d in kept] == [(4, 7)], str(whole.plan)
    assert len(whole.plan.kernels) == 2, str(whole.plan)


@pytest.mark.parametrize(
    "name, shapes",
    [
        ("hdiff", [(9, 10, 2), (5, 6, 2)]),
        ("hdiff", [(8, 7, 1), (4, 3, 1)]),
        ("biharmonic", [(9, 8)]),
        ("laplace3", [(11, 12, 9)]),  # its last stage 90 elements: not a folded constant
    ],
)
def test_each_backward_stage_of_the_benchmarks_stencils_writes_one_array(name, shapes):
    """The gradients of ``benchmarks/stencils.py``'s programs: each stage's kernel writes one
    array, the one-input ops on top of it (negations, scales) computed again from it at each
    pad read (the plan says from which); the same values as the interpreter's, bit for bit
    with the signs of zeros (odd sizes, size-1 and size-2 axes, a non-contiguous input)."""
    fn = getattr(programs, name)
    rng = np.random.default_rng(len(shapes[0]) + shapes[0][0])
    args = [rng.standard_normal(s) for s in shapes]
    w = rng.standard_normal(np.shape(fn(*args)))

    def loss(x, w, *rest):
        return (fn(x, *rest) * w).sum()

    grad = tk.grad(loss)
    c = _compile(grad, args[0], w, *args[1:])
    assert all(len(k.outputs) == 1 for k in c.plan.kernels), str(c.plan)
    onto = [d for d in c.plan.offsets if getattr(d, "onto", None) is not None]
    assert onto and all(d.fused and d.pads and d.cost == 1 for d in onto), str(c.plan)
    assert all(f"from %{d.onto.name} read there" in str(d) for d in onto)
    x = args[0][::-1].copy()[::-1]  # the same values, a negative stride
    want = tk.trace(grad, x, w, *args[1:])(x, w, *args[1:])
    got = c(x, w, *args[1:])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def quotients_and_exponentials(u, v):
    z = np.zeros((u.shape[0] + 2, u.shape[1] + 1))
    z[1:-1, 1:] = u / (1.0 + v * v) + u * np.exp(v)  # pads: u of 0, 1 + v * v and exp(v) of 1
    return z[1:, :-1] * 0.5 - 1.0


def test_pads_are_pushed_through_divisions_and_exp_with_their_identity_constants(monkeypatch):
    """``pad(u / (1 + v * v) + u * exp(v), 0)``, divisions allowed (``THROUGH_DIVISIONS``):
    ``u`` padded with 0, the divisor and the factor ``exp(v)`` with 1 (so ``v`` with 0):
    outside the block ``0 / 1 + 0 * 1``, which is 0, never ``0 / 0`` or ``0 * inf``; inside it
    the NumPy values, NaN and infinities included (``exp`` overflowing where ``u`` is 0). One
    kernel; ``1 / u`` is not pushed (no constant gives 0 but infinities). By default the
    division is not pushed, saying why: the sum is an array written and read back."""
    rng = np.random.default_rng(21)
    u, v = rng.standard_normal((7, 5)), rng.standard_normal((7, 5))
    u[1, 2], u[3, 0], v[1, 2], v[4, 4], v[5, 1] = 0.0, -0.0, 800.0, -800.0, 800.0
    before = _compile(quotients_and_exponentials, u, v)
    assert len(before.plan.kernels) == 2, str(before.plan)
    assert "divide is not pushed through a pad (a division per pad read" in str(before.plan)
    monkeypatch.setattr(offsets, "THROUGH_DIVISIONS", True)
    c = _compile(quotients_and_exponentials, u, v)
    assert len(c.plan.kernels) == 1, str(c.plan)
    assert all(d.fused for d in c.plan.offsets), str(c.plan)  # u and v read through pads
    assert "1 of them through pads: %6" in str(c.plan), str(c.plan)
    for x, y in [(u, v), (u.T.copy().T, v[::-1].copy()[::-1])]:
        with np.errstate(all="ignore"):
            want = quotients_and_exponentials(x, y)
        got = c(x, y)
        assert np.isnan(want).any() and np.isinf(want).any()
        finite = np.isfinite(want)  # exp is within its 1 ulp of NumPy's there, not equal
        np.testing.assert_array_equal(np.where(finite, 0.0, got), np.where(finite, 0.0, want))
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-15, atol=0)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    reciprocal = _compile(pad_of_a_reciprocal, u)
    assert "divide of no constants (0, -0.0, 1) is its pad's constant" in str(reciprocal.plan)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(reciprocal(u), pad_of_a_reciprocal(u))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_functions_pads_are_pushed_through_are_exact_at_their_constants(dtype):
    """What ``offsets.EXACT_AT_CONSTANTS`` promises of the compiled kernels (the fast-math
    functions among them): where NumPy's value at 0, -0.0 or 1 is a pad's constant (0, -0.0,
    1), in a vectorised loop and its tail, the same bits."""
    x = np.tile(np.array([0.0, -0.0, 1.0], dtype), 67)
    for op in sorted(offsets.EXACT_AT_CONSTANTS):
        f = getattr(np, op)
        if not isinstance(f, np.ufunc) or f.nin != 1 or op.startswith("logical"):
            continue
        c = _compile(lambda a, f=f: f(a * dtype(1.0)), x)
        with np.errstate(all="ignore"):
            want = f(x)
        got = c(x)
        constant = (want == 0) | (want == 1)  # where a pad's constant may come out of it
        assert constant[:3].any() and got.dtype == want.dtype, op
        np.testing.assert_array_equal(got[constant], want[constant], err_msg=op)
        np.testing.assert_array_equal(np.signbit(got[constant]), np.signbit(want[constant]))


def _tiled_through_pads(c) -> list:
    return [d for d in c.plan.offsets if d.how and " pad(s)" in d.reason]


@pytest.mark.parametrize(
    "name, shapes, tiled",
    [
        ("biharmonic", [(31, 9)], 1),
        ("biharmonic", [(31, 6)], 1),  # a size-2 axis (the result's)
        ("hdiff", [(13, 11, 3), (9, 7, 3)], 3),  # fluxes in tiles of the Laplacian's
        ("hdiff", [(9, 10, 1), (5, 6, 1)], 3),  # a size-1 axis
        ("laplace3", [(15, 9, 8)], 1),
        ("blur3", [(23, 6)], 2),  # (its last stage, 42 elements, a folded constant)
    ],
)
def test_backward_stages_read_through_pads_are_computed_in_tiles(name, shapes, tiled, monkeypatch):
    """A backward stage over the budget, read by the stage before it through pads (its
    gradient's zeros around it, rows before and after), is computed in tiles of that stage's
    kernel: each tile computes the rows the pads' blocks have (the first tile's first rows and
    the last tile's last rows are the pads' zeros, not computed), the plan says so with the
    tiles' rows and halo; a chain of such stages in tiles of the first one, each tile
    computing the stages in order (their halos added up: the plan says which kernel reads
    each); ``tiled`` kernels fewer than with the stages kept arrays. Bit for bit the
    interpreter's values (several tiles, a last one cut short, odd sizes, size-1 and size-2
    axes, a non-contiguous input)."""
    from tracekit.backends import tiles

    fn = getattr(programs, name)
    rng = np.random.default_rng(sum(shapes[0]))
    args = [rng.standard_normal(s) for s in shapes]
    w = rng.standard_normal(np.shape(fn(*args)))
    grad = tk.grad(_vjp(fn))
    row = 8 * int(np.prod(shapes[0][1:]))
    monkeypatch.setattr(tiles, "TILE_BYTES", 7 * row)  # a few rows a tile, at these sizes
    monkeypatch.setattr(tiles, "OPS_PER_BYTE", 1e3)  # the halo's work not weighed
    c = _compile(grad, args[0], w, *args[1:])
    done = _tiled_through_pads(c)
    assert len(done) == tiled, str(c.plan)
    assert all(d.fused and " halo rows) in kernel k" in d.how for d in done)
    assert all("computed in tiles of" in str(d) for d in done)
    assert "max(0, " in c.source and "min(" in c.source  # the pads' rows: not computed
    nested = [d for d in done if "rows there" in d.how]
    assert len(nested) == tiled - 1, str(c.plan)  # the kernels the last stage's reads
    assert len(c.plan.kernels[-1].tiles) == tiled
    x = args[0][::-1].copy()[::-1]  # the same values, a negative stride
    want = tk.trace(grad, x, w, *args[1:])(x, w, *args[1:])
    got = c(x, w, *args[1:])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    monkeypatch.setattr(tiles, "THROUGH_PADS", False)
    before = _compile(grad, args[0], w, *args[1:])
    assert len(c.plan.kernels) == len(before.plan.kernels) - tiled, str(before.plan)
    assert not _tiled_through_pads(before)
    kept = [d for d in before.plan.offsets if "not in tiles: read through a pad" in d.reason]
    assert len(kept) >= tiled, str(before.plan)


def _vjp(fn):
    def loss(x, w, *rest):
        return (fn(x, *rest) * w).sum()

    return loss


@pytest.mark.parametrize(
    "name, shapes, kernels, tiled, halo",
    [
        ("biharmonic", [(1024, 1024)], 1, ["%40: f64[1022,1022]"], []),
        ("blur3", [(2048, 2048)], 1, ["%23: f64[2046,2044]", "%32: f64[2046,2046]",
                                      "%41: f64[2048,2046]"], []),
        ("hdiff", [(68, 68, 60), (64, 64, 60)], 2, ["%57: f64[64,65,60]", "%64: f64[65,64,60]"],
         ["%71: f64[66,66,60] (tiles of 3 row(s) in 512 KB: their halo rows would add 75.7"]),
        ("laplace3", [(96, 96, 96)], 3, [],
         ["%68: f64[92,92,92] (tiles of 5 row(s) in 512 KB: their halo rows would add 16.4",
          "%90: f64[94,94,94] (tiles of 5 row(s) in 512 KB: their halo rows would add 16.4"]),
    ],
)  # fmt: skip
def test_the_benchmarks_backward_stages_are_computed_in_tiles(name, shapes, kernels, tiled, halo):
    """At ``benchmarks/stencils.py``'s sizes, the plans of the gradients (not run): the
    stages over the budget read through pads are computed in tiles where the cost model
    says so (blur3's three stages in tiles of its first, in order), each decision with its
    tiles and what it saves, each refusal with its reason: the work the halo rows add, a pad
    read weighing ``offsets.PAD_READ`` (laplace3's 94² rows, 7 pads of 41 operations: 16.4
    operations per element against 16 bytes, measured slower in tiles)."""
    fn = getattr(programs, name)
    args = [np.zeros(s) for s in shapes]
    c = _compile(tk.grad(_vjp(fn)), args[0], np.zeros(np.shape(fn(*args))), *args[1:])
    assert len(c.plan.kernels) == kernels, str(c.plan)
    done = _tiled_through_pads(c)
    assert [f"%{d.value.name}: {d.value.type}" for d in done] == tiled, str(c.plan)
    assert all("MB not written and read back" in str(d) for d in done)
    kept = [d for d in c.plan.offsets if isinstance(d, offsets.OffsetFusion) and not d.fused]
    assert all("; not in tiles: " in d.reason for d in kept), str(c.plan)
    said = [f"%{d.value.name}: {d.value.type} ({d.reason.split('not in tiles: ')[1]}" for d in kept]
    assert [s[: len(h)] for s, h in zip(said, halo)] == halo and len(said) == len(halo), said
