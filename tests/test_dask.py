"""The dask target: traced functions on dask arrays, lowered to dask graphs of compiled kernels,
checked against NumPy on the threaded scheduler and on a LocalCluster of worker processes."""

import pickle

import numpy as np
import pytest

import tracekit as tk
from tracekit.backends.dask import ChunkKernel, at_shapes

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

rng = np.random.default_rng(7)
X = rng.standard_normal((30, 20))
CHUNKINGS = {"one chunk": (30, 20), "uneven": (7, 6), "size-1 rows": (1, 20), "rows": (10, 20)}


def compute(*arrays):
    return dask.compute(*arrays, scheduler="threads")


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layernorm(x):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + 1e-5)


PROGRAMS = {
    "gelu-like": lambda x: 0.5 * x * (1.0 + np.tanh(0.79788456 * (x + 0.044715 * x**3))),
    "softmax": softmax,
    "layernorm": layernorm,
    "sum": lambda x: np.sin(x).sum(),
    "mean over rows": lambda x: (x * 2.0).mean(axis=0),
    "max": lambda x: np.abs(x).max(),
    "min axis 1": lambda x: (x + 1.0).min(axis=1, keepdims=True),
    "std": lambda x: x.std(),
    "var axis 0": lambda x: np.exp(x).var(axis=0, ddof=1),
    "prod": lambda x: (1.0 + 0.01 * x).prod(axis=0),
    "any": lambda x: (x > 2.5).any(),
    "argmax": lambda x: np.argmax(x * 2.0, axis=0),
    "matmul": lambda x: np.tanh(x @ x.T) + 1.0,
    "stencil": lambda x: x[1:-1, 2:] + x[1:-1, :-2] - 2.0 * x[1:-1, 1:-1],
    "transpose": lambda x: (x.T * 3.0).sum(axis=0),
    "two results": lambda x: (np.cos(x), np.cos(x).sum(axis=1)),
    "sort, median, histogram": lambda x: (
        np.sort(x, axis=0) + 1.0,
        np.median(x),
        *np.histogram(x, 5, weights=x * x),
    ),
    "linalg, interp": lambda x: (
        np.linalg.inv(x[:20] + 5.0 * np.eye(20)),
        np.interp(x, np.sort(x[0]), x[1]),
    ),
}


@pytest.mark.parametrize("chunks", list(CHUNKINGS.values()), ids=list(CHUNKINGS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_each_op_kind_on_dask_equals_numpy(name, chunks):
    fn = PROGRAMS[name]
    f = tk.jit(fn)
    result = f(da.from_array(X, chunks=chunks))
    want = fn(X)
    if isinstance(want, tuple):
        got = compute(*result)
        assert all(isinstance(r, da.Array) for r in result)
    else:
        assert isinstance(result, da.Array)
        got, want = compute(result), (want,)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert f.compiled.target == "dask" and f.compiled.dask_layers


def test_fused_groups_become_blockwise_kernels_and_split_reductions_tree_reductions():
    # one pass per distinct reduction: moments' three sums of x are one
    f = tk.jit(lambda x: (np.tanh(x) * 2.0 + 1.0, np.tanh(x).sum()))
    y, s = f(da.from_array(X, chunks=(10, 20)))
    layers = "\n".join(f.compiled.dask_layers)
    assert "blockwise, compiled per chunk" in layers
    assert layers.count("tree reduction, compiled chunk step") == 1
    m = tk.jit(lambda a: (a.sum(), a.mean(), a.std()))
    compute(*m(da.from_array(X, chunks=(10, 20))))
    assert "".join(m.compiled.dask_layers).count("tree reduction") == 2  # sum; squared deviations
    gy, gs = compute(y, s)
    np.testing.assert_allclose(gy, np.tanh(X) * 2 + 1, rtol=1e-13)
    np.testing.assert_allclose(gs, np.tanh(X).sum(), rtol=1e-12)


def test_row_kernels_stay_in_chunk_or_become_tree_reductions():
    f = tk.jit(softmax)
    f(da.from_array(X, chunks=(10, 20)))
    assert "blockwise" in f.compiled.dask_layers[0] and "tree" not in f.compiled.dask_layers[0]
    y = f(da.from_array(X, chunks=(10, 7)))  # rows split over 3 chunks: max, sum, then divide
    assert f.compiled.dask_layers[0].count("tree reduction") == 2
    np.testing.assert_allclose(compute(y)[0], softmax(X), rtol=1e-13)


def _argmax_and_its_remainder(x):
    b = np.argmax(x, axis=2)
    return b, np.remainder(b, 4) * 10 + b


@pytest.mark.parametrize("chunks", [(2, 3, 5), (1, 1, 5), (4, 3, 5)])
def test_a_reduced_result_read_again_in_its_group_keeps_its_axes(chunks):
    """A group's reduced result that is also a result is read by the group's next result as
    the array it is: over the kept axes, not the group's last ones (fuzz seed 17100455: (4, 4)
    for (4, 1), computing to (2, 2))."""
    x = np.random.default_rng(3).random((4, 3, 5))
    got = tk.compile(tk.trace(_argmax_and_its_remainder, x), target="dask", progress=False)(
        da.from_array(x, chunks=chunks)
    )
    for g, w in zip(compute(*got), _argmax_and_its_remainder(x), strict=True):
        np.testing.assert_array_equal(g, w)


def test_row_kernels_without_tree_form_rechunk_with_a_note():
    fn = lambda x: (x * 2.0).argmax(axis=1) + 1  # noqa: E731  (positions do not combine)
    f = tk.jit(fn)
    y = f(da.from_array(X, chunks=(10, 7)))
    assert "rechunked to hold axes [1] in one chunk" in f.compiled.dask_layers[0]
    assert "dask layers (the last call's chunks):\n  k0: rechunked" in str(f.compiled.plan)
    np.testing.assert_array_equal(compute(y)[0], fn(X))


def test_fusion_does_not_add_tasks():
    fn = PROGRAMS["gelu-like"]
    x = da.from_array(X, chunks=(5, 10))
    ours = tk.jit(fn)(x)
    theirs = fn(x)
    (ours_opt,), (theirs_opt,) = dask.optimize(ours), dask.optimize(theirs)
    assert len(ours_opt.__dask_graph__()) <= len(theirs_opt.__dask_graph__())


def test_explicit_dask_target_for_a_trace_of_numpy_arrays():
    t = tk.trace(layernorm, X)
    c = tk.compile(t, target="dask", progress=False)
    y = c(da.from_array(X, chunks=(6, 20)))
    np.testing.assert_allclose(compute(y)[0], layernorm(X), rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="expected shape"):
        c(da.from_array(X[:5], chunks=(5, 20)))


def _python_numbers_between_groups(x, y, s):
    counts = np.concatenate([x.astype(np.uint32)] * 2)
    mean = np.mean(counts, axis=0, keepdims=True)  # (a tree reduction: the groups split here)
    a = s * 7.25  # a Python float computed in one group (a result too), read in another
    ge = counts >= 7.25
    return x, y, counts, mean, a, ge, a**ge


@pytest.mark.parametrize("s", [0.5, -1.5])
def test_python_numbers_computed_in_one_group_and_read_in_another(s):
    """A Python float that one group computes reaches the next as a 0-d block, as a Python
    int does: its kernels take it as a 0-d array made the Python number again (fuzz seed
    20400071, shrunk: 'argument 3: traced with a Python float, got ndarray')."""
    x, y = np.array([True]), (np.arange(2) + 1j).reshape(2, 1, 1)
    t = tk.trace(_python_numbers_between_groups, x, y, 0.5)
    c = tk.compile(t, target="dask", progress=False)
    got = dask.compute(*c(da.from_array(x), da.from_array(y), s), scheduler="sync")
    for g, w in zip(got, _python_numbers_between_groups(x, y, s)):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-14)


def test_nothing_is_computed_while_tracing_and_branches_on_data_are_refused():
    def f(x):
        if x.max() > 0:  # reads the data
            return x * 2
        return x

    with pytest.raises(tk.TraceError, match=r"test_dask.py:\d+ `if x.max\(\) > 0:.*np.where"):
        tk.jit(f)(da.from_array(X, chunks=(10, 20)))


def test_writes_into_dask_arguments():
    def returned(a):
        a[1:-1, 1:-1] = 0.25 * (a[2:, 1:-1] + a[:-2, 1:-1] + a[1:-1, 2:] + a[1:-1, :-2])
        return a

    x = da.from_array(X, chunks=(10, 10))
    y = tk.jit(returned)(x)
    np.testing.assert_allclose(compute(y)[0], returned(X.copy()), rtol=1e-13)
    np.testing.assert_array_equal(compute(x)[0], X)  # the caller's dask array is unchanged

    def lost(a):
        a[0] = 1.0

    with pytest.raises(ValueError, match="dask arrays are immutable.*return the written array"):
        tk.jit(lost)(x)


def test_writes_whose_effect_depends_on_memory_layout_are_refused():
    def f(a):
        b = a.reshape(-1)
        b[0] = 5.0
        return a

    with pytest.raises(tk.TraceError, match="reshape"):
        tk.jit(f)(da.from_array(X, chunks=(10, 20)))


def test_unknown_chunk_sizes_are_refused_with_advice():
    x = da.from_array(X, chunks=(10, 20))
    x = x[x[:, 0] > 0]  # NaN chunks
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        tk.jit(np.sin)(x)


def test_chunk_kernels_pickle_and_retype_per_block_shape():
    t = tk.trace(lambda x: np.exp(x).sum(axis=1, keepdims=True), X)
    g = at_shapes(t.graph, [(4, 20)])
    assert g.outputs[0].shape == (4, 1)
    k = ChunkKernel(t.graph.nodes, t.graph.inputs, t.graph.outputs, tk.compile)
    k2 = pickle.loads(pickle.dumps(k))
    for rows in (4, 3):
        block = X[:rows]
        np.testing.assert_allclose(k2(block), np.exp(block).sum(axis=1, keepdims=True), rtol=1e-14)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_on_a_local_cluster_of_worker_processes(client):
    f = tk.jit(lambda x: (softmax(x), np.tanh(x).mean()))
    x = da.from_array(rng.standard_normal((400, 64)), chunks=(50, 64))
    y, m = f(x)
    gy, gm = client.compute([y, m], sync=True)
    want_y, want_m = softmax(x.compute()), np.tanh(x.compute()).mean()
    np.testing.assert_allclose(gy, want_y, rtol=1e-12)
    np.testing.assert_allclose(gm, want_m, rtol=1e-12)
    pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2  # two worker processes did the work


def test_python_op_builders_run_once_per_worker_process_never_on_the_client(client):
    from helpers import workers

    op = tk.python_op((workers.make_scaler, (3.0,), {}), name="scale")
    fn = lambda x: op(np.sin(x)) + 1.0  # noqa: E731
    c = tk.compile(tk.trace(fn, X), target="dask", progress=False)
    traced_builds = len(workers.BUILT)  # tracing ran it here once, on the example
    x = da.from_array(X, chunks=(10, 20))
    for _ in range(2):
        np.testing.assert_allclose(client.compute(c(x), sync=True), fn(X), rtol=1e-14)
    assert len(workers.BUILT) == traced_builds  # no execution on the client
    per_worker = client.run(workers.builds)
    assert sum(len(b) for b in per_worker.values()) >= 1
    assert all(len(b) <= 1 for b in per_worker.values()), per_worker


def test_python_ops_on_dask_arrays_ask_for_a_trace_on_numpy_examples():
    op = tk.python_op(np.sinh)
    with pytest.raises(tk.TraceError, match="target='dask'"):
        tk.jit(lambda x: op(x) + 1.0)(da.from_array(X, chunks=(10, 20)))


def test_jit_functions_pickle_and_serve_xarray_apply_ufunc_on_workers(client):
    xr = pytest.importorskip("xarray")
    cloudpickle = pytest.importorskip("cloudpickle")  # what distributed ships functions with
    f = tk.jit(lambda a: np.tanh(a) * 2.0 + 1.0)
    f(X)  # compiled here: what goes to the workers is the function, not its kernels
    g = cloudpickle.loads(cloudpickle.dumps(f))
    np.testing.assert_allclose(g(X), np.tanh(X) * 2 + 1, rtol=1e-13, atol=1e-14)
    arr = xr.DataArray(da.from_array(X, chunks=(10, 20)), dims=("time", "space"))
    out = xr.apply_ufunc(f, arr, dask="parallelized", output_dtypes=[X.dtype])
    got = client.compute(out.data, sync=True)
    np.testing.assert_allclose(got, np.tanh(X) * 2 + 1, rtol=1e-13, atol=1e-14)


def test_a_worker_killed_during_a_compute_is_retried_and_the_result_is_right(client):
    import os
    import signal
    import time

    from helpers import workers

    data = rng.standard_normal((400, 20))
    x = da.from_array(data, chunks=(5, 20)).map_blocks(workers.slow_copy)  # 80 slow tasks
    f = tk.jit(lambda a: (np.exp(a) * 0.5 + a, np.tanh(a).sum()))
    y, s = f(x)
    futures = client.compute([y, s])
    time.sleep(0.6)
    pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    os.kill(victim, signal.SIGKILL)
    gy, gs = client.gather(futures)
    np.testing.assert_allclose(gy, np.exp(data) * 0.5 + data, rtol=1e-13)
    np.testing.assert_allclose(gs, np.tanh(data).sum(), rtol=1e-12)
    assert victim not in client.run(os.getpid).values()  # it was gone; its nanny made another


@pytest.mark.parametrize("chunks", [(7, 6), (10, 10), (3, 3), (30, 20)])
def test_stencils_read_halos_from_neighbouring_chunks(chunks):
    def laplace(a):
        return a[2:, 1:-1] + a[:-2, 1:-1] + a[1:-1, 2:] + a[1:-1, :-2] - 4.0 * a[1:-1, 1:-1]

    f = tk.jit(laplace)
    y = f(da.from_array(X, chunks=chunks))
    np.testing.assert_array_equal(compute(y)[0], laplace(X))
    assert "halo of depth" in f.compiled.dask_layers[-2]


def test_a_halo_deeper_than_a_chunk_falls_back_to_dask_slicing():
    f = tk.jit(lambda a: a[3:] - a[:-3])
    y = f(da.from_array(X, chunks=(7, 20)))  # the last chunk has 2 rows
    np.testing.assert_array_equal(compute(y)[0], X[3:] - X[:-3])
    assert "halo" not in f.compiled.dask_layers[-2]


def test_arguments_chunked_differently_are_rechunked_with_a_note():
    f = tk.jit(lambda a, b: np.tanh(a) * b + 1.0)
    y = f(da.from_array(X, chunks=(10, 20)), da.from_array(X, chunks=(7, 5)))
    assert "chunked differently along axes [0, 1]: rechunked to agree" in f.compiled.dask_layers[0]
    np.testing.assert_allclose(compute(y)[0], np.tanh(X) * X + 1.0, rtol=1e-13, atol=1e-14)


def test_results_are_plain_dask_arrays_that_dask_can_draw(tmp_path):
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("dask's visualize needs the system dot")
    y = tk.jit(softmax)(da.from_array(X, chunks=(10, 20)))
    y.visualize(filename=str(tmp_path / "graph.svg"))
    assert (tmp_path / "graph.svg").read_text().count("<svg") == 1


def test_gradients_on_dask_arrays():
    f = lambda x: (np.tanh(x) ** 2).sum()  # noqa: E731
    x = da.from_array(X, chunks=(10, 20))
    lazy = tk.grad(f)(x)  # the backward graph interpreted on dask arrays
    jitted = tk.jit(tk.grad(f))
    compiled = jitted(x)  # ... or traced on them and compiled for dask
    assert isinstance(lazy, da.Array) and isinstance(compiled, da.Array)
    want = 2 * np.tanh(X) * (1 - np.tanh(X) ** 2)
    for g in compute(lazy, compiled):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)
    assert any("compiled per chunk" in layer for layer in jitted.compiled.dask_layers)


def test_gradients_of_python_ops_through_dask():
    op = tk.python_op(np.sinh, grad_f=lambda x, y, gy: gy * np.cosh(x))
    c = tk.compile(tk.trace(tk.grad(lambda x: op(x).sum()), X), target="dask", progress=False)
    g = c(da.from_array(X, chunks=(10, 20)))
    np.testing.assert_allclose(compute(g)[0], np.cosh(X), rtol=1e-14)
    assert "python op 'sinh_grad' as one task on a worker" in "".join(c.dask_layers)


def test_a_guard_in_a_loop_body_is_refused_on_dask_arrays():
    def f(x, limit):
        for _ in range(3):
            x = x * 2.0 if float(limit.max()) < 5.0 else x + 1.0
        return x

    c = tk.compile(tk.trace(f, X, np.ones(3)), target="dask", progress=False)
    with pytest.raises(TypeError, match="guards"):
        c(da.from_array(X, chunks=(10, 20)), np.ones(3))


def test_the_drawing_and_the_plan_say_what_each_kernel_became():
    f = tk.jit(lambda a: (np.tanh(a) * 2.0, np.tanh(a).sum()))
    compute(*f(da.from_array(X, chunks=(10, 20))))
    c = f.compiled
    assert [k.name for k in c.kernels] == ["k0"]
    assert "tree reduction" in c.kernels[0].layer
    svg = tk.render(c).pipe(format="svg").decode()
    assert "kernel k0" in svg and "dask: " in svg and "tree reduction" in svg
    assert "tasks in the results' graph" in c.dask_layers[-1]


def test_stateful_python_ops_keep_one_state_per_worker_process(client):
    from helpers import workers

    op = tk.python_op(workers.triple, python_func_type=workers.CountingScale, name="counted")
    c = tk.compile(tk.trace(lambda x: op(x) + 1.0, X), target="dask", progress=False)
    here = len(workers.CALLS)  # tracing called it here, on the example
    x = da.from_array(X, chunks=(10, 20))
    for _ in range(4):
        np.testing.assert_allclose(client.compute(c(x), sync=True), X * 3 + 1, rtol=1e-15)
    assert len(workers.CALLS) == here
    per_worker = [v for v in client.run(workers.calls).values() if v]
    assert sum(len(v) for v in per_worker) == 4
    for calls in per_worker:  # one instance per worker process, counting on across computes
        assert len({instance for _, instance, _ in calls}) == 1
        assert [n for _, _, n in calls] == list(range(1, len(calls) + 1))


def test_computing_on_the_callers_thread_leaves_its_numba_threads_alone():
    import numba

    before = numba.get_num_threads()
    y = tk.jit(lambda a: np.tanh(a) + 1.0)(da.from_array(X, chunks=(10, 20)))
    dask.compute(y, scheduler="sync")  # the chunk kernels ran single-threaded, on this thread
    assert numba.get_num_threads() == before
