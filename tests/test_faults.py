"""Faults: a broken, unwritable or shared disk cache, an interrupted compile, many threads on one
Compiled, and memory over many distinct graphs.

Every test uses its own cache folder. Subprocesses run ``tracekit`` fresh, as a new notebook
kernel would (the in-memory module cache of this process would hide the disk cache).
"""

from __future__ import annotations

import gc
import glob
import os
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref
from collections import OrderedDict

import numpy as np
import pytest

import tracekit as tk
from tracekit.backends import cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _f(x, y):
    return np.tanh(x) * y + x.sum(axis=0)


X = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
Y = np.arange(12.0).reshape(3, 4)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """A private cache folder, and this process's in-memory module cache emptied."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "_modules", OrderedDict())
    monkeypatch.setattr(cache, "_warned", set())
    return tmp_path / "cache"


def _forget_in_memory():
    """As a new process would: no module in memory (the disk cache is what gets loaded)."""
    for key in list(cache._modules):
        sys.modules.pop(f"tracekit_kernels_{key}", None)
    cache._modules.clear()
    cache._warned.clear()


def _compile_and_check(fn=_f, args=(X, Y)):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = tk.compile(tk.trace(fn, *args), progress=False)
        np.testing.assert_allclose(c(*args), fn(*args), rtol=1e-12)
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


# ---------------------------------------------------------------------- a broken disk cache
def _numba_files(folder, ext):
    return glob.glob(os.path.join(folder, "__pycache__", f"tk_*.{ext}"))


def _truncate(path):
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 3])


def _garbage(path):
    with open(path, "wb") as f:
        f.write(np.random.default_rng(0).bytes(4096))


@pytest.mark.parametrize(
    "ext,damage", [("nbc", _truncate), ("nbi", _garbage)], ids=["truncated-nbc", "garbage-nbi"]
)
def test_corrupt_numba_cache_files_are_recompiled(fresh_cache, ext, damage):
    assert _compile_and_check() == []
    files = _numba_files(fresh_cache, ext)
    assert files, os.listdir(fresh_cache)
    for path in files:
        damage(path)
    _forget_in_memory()
    # before: CompileError "numba could not compile segment0 ... pickle data was truncated"
    warned = _compile_and_check()
    assert any("corrupt entry" in w for w in warned), warned
    _forget_in_memory()
    assert _compile_and_check() == []  # the entry was rewritten: a clean load now


# (a truncated source, an unusable or read-only folder: tests/backends/test_cpu_runtime.py)
def test_unwritable_cache_folder_compiles_in_memory(fresh_cache, monkeypatch):
    def refuse(*a, **k):  # what a read-only filesystem answers (root ignores chmod)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache.tempfile, "mkstemp", refuse)
    warned = _compile_and_check()
    assert any("not usable" in w for w in warned), warned
    assert not glob.glob(os.path.join(fresh_cache, "tk_*.py"))


def test_interrupted_source_write_leaves_no_file(fresh_cache, monkeypatch):
    real_replace = os.replace

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tk.compile(tk.trace(_f, X, Y), progress=False)
    assert os.listdir(fresh_cache) == []  # neither the temporary file nor a partial entry
    monkeypatch.setattr(cache.os, "replace", real_replace)
    _forget_in_memory()
    assert _compile_and_check() == []


# ---------------------------------------------------------------------- other processes
_CHILD = textwrap.dedent(
    """
    import sys, warnings
    import numpy as np
    import tracekit as tk
    {setup}
    def f(x, y):
        return np.tanh(x) * y + x.sum(axis=0)
    x = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    y = np.arange(12.0).reshape(3, 4)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        c = tk.compile(tk.trace(f, x, y), progress=False)
        ok = np.allclose(c(x, y), f(x, y), rtol=1e-12)
    print("RESULT", ok, [str(m.message) for m in w if issubclass(m.category, RuntimeWarning)])
    """
)


def _child(cache_dir, setup=""):
    env = dict(os.environ, TRACEKIT_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
    code = _CHILD.format(setup=setup)
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _result(p, timeout=240):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out.decode(), err.decode()


def test_two_processes_compile_one_graph_into_one_cache(tmp_path):
    procs = [_child(tmp_path), _child(tmp_path)]
    for p in procs:
        rc, out, err = _result(p)
        assert rc == 0, err[-2000:]
        assert "RESULT True []" in out, out + err[-2000:]
    rc, out, err = _result(_child(tmp_path))  # and a third one loads what they wrote
    assert rc == 0 and "RESULT True []" in out, out + err[-2000:]
    assert not glob.glob(os.path.join(tmp_path, ".tk_*")), os.listdir(tmp_path)


def test_keyboard_interrupt_while_numba_saves_leaves_no_broken_entry(tmp_path):
    # the interrupt lands after numba wrote the machine code, before it wrote its index
    setup = textwrap.dedent(
        """
        import numba.core.caching as caching
        def interrupted(self, overloads):
            raise KeyboardInterrupt
        caching.IndexDataCacheFile._save_index = interrupted
        """
    )
    rc, out, err = _result(_child(tmp_path, setup))
    assert rc != 0 and "KeyboardInterrupt" in err, (rc, out, err[-2000:])
    rc, out, err = _result(_child(tmp_path))
    assert rc == 0 and "RESULT True []" in out, out + err[-2000:]
    rc, out, err = _result(_child(tmp_path))  # and the entry the second process wrote loads
    assert rc == 0 and "RESULT True []" in out, out + err[-2000:]


# ---------------------------------------------------------------------- threads
def _hammer(call, make_args, expected, n_threads=12, n_calls=25):
    errors = []
    barrier = threading.Barrier(n_threads)

    def worker(k):
        try:
            barrier.wait()
            for i in range(n_calls):
                args = make_args(k, i)
                got = call(*args)
                want = expected(*args)
                if not np.allclose(got, want, rtol=1e-12):
                    errors.append((k, i, got, want))
        except Exception as e:  # pragma: no cover - reported below
            errors.append((k, repr(e)))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def _g(x, w):
    h = np.tanh(x @ w)
    return (h - h.mean(axis=-1, keepdims=True)) * 2.0


def _args(k, i):
    rng = np.random.default_rng([k, i])
    return rng.standard_normal((16, 8)), rng.standard_normal((8, 32))


def test_one_compiled_called_from_many_threads():
    c = tk.compile(tk.trace(_g, *_args(0, 0)), progress=False)
    _hammer(c, _args, _g)
    tr = tk.trace(_g, *_args(0, 0))
    _hammer(tr, _args, _g, n_threads=6, n_calls=10)


def test_one_compiled_with_out_and_writebacks_from_many_threads():
    def h(x, acc):
        acc += x
        return np.exp(x) - 1.0

    c = tk.compile(tk.trace(h, np.ones(64), np.zeros(64)), progress=False)
    errors = []

    def worker(k):
        acc, out = np.zeros(64), np.empty(64)
        for i in range(30):
            x = np.full(64, 0.01 * (k + i))
            c(x, acc, out=out)
            if not np.allclose(out, np.exp(x) - 1.0):
                errors.append((k, i))
        if not np.allclose(acc, sum(0.01 * (k + i) for i in range(30))):
            errors.append((k, "acc"))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def _small_args(k, i):
    rng = np.random.default_rng([k, i])
    return rng.standard_normal((4, 3)), rng.standard_normal((3, 8))


def test_one_cuda_compiled_from_several_threads():
    c = tk.compile(tk.trace(_g, *_small_args(0, 0)), target="cuda", progress=False)
    _hammer(c, _small_args, _g, n_threads=4, n_calls=3)


# ---------------------------------------------------------------------- memory
def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")  # pragma: no cover


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc")
def test_many_distinct_graphs_free_what_the_lru_evicts(fresh_cache, monkeypatch):
    """The LRU bounds the kernel modules kept alive (before: every module stayed in
    sys.modules forever). What remains is numba's: its JIT keeps each compiled function's
    machine code for the life of the process (about 0.9 MB for a tiny njit function, measured),
    and a function numba has just compiled *and saved to its disk cache* stays referenced by
    numba (modules loaded from the cache, or compiled in memory as here, are freed)."""
    monkeypatch.setattr(cache, "MAX_MODULES", 8)
    monkeypatch.setenv("TRACEKIT_DISABLE_DISK_CACHE", "1")
    x = np.ones(8)
    refs, rss = [], []
    before = {m for m in sys.modules if m.startswith("tracekit_kernels_")}
    n = 40
    for k in range(n):
        c = tk.compile(tk.trace(lambda a, k=k: a * (k + 0.5) + 1.25, x), progress=False)
        assert c(x)[0] == (k + 0.5) + 1.25
        refs.append(weakref.ref(c.program.module))
        del c
        if k % 8 == 7:
            gc.collect()
            rss.append(_rss_mb())
    gc.collect()
    alive = sum(r() is not None for r in refs)
    loaded = [m for m in sys.modules if m.startswith("tracekit_kernels_") and m not in before]
    assert alive <= cache.MAX_MODULES, alive
    assert len(loaded) <= cache.MAX_MODULES, len(loaded)
    per_graph = (rss[-1] - rss[1]) / (8 * (len(rss) - 2))
    print(f"RSS {rss[0]:.0f} -> {rss[-1]:.0f} MB over {n} graphs: {per_graph:.2f} MB per graph")
    assert per_graph < 2.5, rss  # numba's ~1 MB per compiled function, not the modules/pools
