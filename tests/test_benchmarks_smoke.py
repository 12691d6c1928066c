"""The benchmark harness must keep running: ``benchmarks/cpu.py --quick --only gelu``.

No timing is asserted (benchmarks are scripts, not timed tests); these tests only check that the
harness runs to the end, prints its table, checks answers and writes JSON, with whichever peers
(jax, torch, numexpr) happen to be importable, and that a missing peer is skipped, not fatal.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CPU = ROOT / "benchmarks" / "cpu.py"
TIMEOUT = 600  # torch.compile's first compile alone takes ~30 s on 2 busy cores


def run_cpu(tmp_path, *extra, env=None):
    out = tmp_path / "result.json"
    p = subprocess.run(
        [sys.executable, str(CPU), "--quick", "--only", "gelu", "--keep-caches", "--json", str(out)]
        + list(extra),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
        env=env,
    )
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p.stdout, json.loads(out.read_text())


def table_rows(stdout: str) -> dict[str, str]:
    """peer name -> its row in the gelu table."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("gelu:"))
    assert lines[start + 1].split()[:3] == ["peer", "cold", "warm"], lines[start + 1]
    rows = {}
    for ln in lines[start + 3 :]:
        if not ln.strip() or ln.startswith("  ("):
            break
        name = "tracekit out=" if ln.startswith("tracekit out=") else ln.split("  ")[0].strip()
        rows[name] = ln
    return rows


def test_cpu_quick_gelu_runs_and_prints_a_table(tmp_path):
    stdout, data = run_cpu(tmp_path)
    rows = table_rows(stdout)
    assert {"numpy", "numexpr", "jax.jit", "torch.compile", "tracekit"} <= set(rows)
    assert "ms" in rows["numpy"] or "us" in rows["numpy"]  # NumPy itself was timed
    assert "summary:" in stdout

    (w,) = data["workloads"]
    assert w["name"] == "gelu" and data["copy_GBps"] > 0
    res = w["results"]
    assert res["numpy"]["status"] == "ok" and res["numpy"]["median_s"] > 0
    for peer, mod in (("numexpr", "numexpr"), ("jax.jit", "jax"), ("torch.compile", "torch")):
        installed = data["versions"][mod.split(".")[0]] is not None
        expected = {"ok"} if installed else {"skipped"}
        assert res[peer]["status"] in expected, (peer, res[peer])
    # tracekit may be unfinished (an error row is fine) but never silently wrong
    assert res["tracekit"]["status"] in {"ok", "ERROR"}, res["tracekit"]
    assert data["wrong"] == [] and data["harness_errors"] == []


def test_cpu_quick_skips_missing_peers(tmp_path):
    """jax and torch made unimportable: their rows say so and the run still succeeds."""
    block = tmp_path / "block"
    for mod in ("jax", "torch"):
        (block / mod).mkdir(parents=True)
        (block / mod / "__init__.py").write_text(f"raise ImportError('{mod} blocked by test')\n")
    path = os.pathsep.join([str(block), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    stdout, data = run_cpu(tmp_path, "--peers", "numpy,jax,torch", env=env)
    rows = table_rows(stdout)
    assert "skipped" in rows["jax.jit"] and "skipped" in rows["torch.compile"]
    res = data["workloads"][0]["results"]
    assert res["jax.jit"]["status"] == "skipped" and res["numpy"]["status"] == "ok"


def test_cpu_rejects_unknown_workload():
    p = subprocess.run(
        [sys.executable, str(CPU), "--only", "nope"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2 and "unknown workload" in p.stderr


@pytest.mark.parametrize("script", ["cpu.py", "run.py", "loop_trace.py"])
def test_scripts_have_help(script):
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0 and "--quick" in p.stdout


def test_loops_quick_runs_and_checks_its_results():
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "loops.py"), "--quick", "--only", "kmeans",
         "--peers", "numpy", "--budget", "0.2", "--no-json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = [line for line in p.stdout.splitlines() if line.startswith("kmeans")]
    assert row.split()[1] == "1/1"  # one loop node at 10 and at 100 steps
    assert row.split()[-1] == "yes"  # the compiled loop computes NumPy's result


def test_stencils_quick_runs_and_checks_its_results():
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "stencils.py"), "--quick", "--only", "hdiff",
         "--peers", "numpy", "--no-json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = [line for line in p.stdout.splitlines() if line.startswith("hdiff ")]
    # the Laplacian computed in the flux kernels, the fluxes in tiles of the update's
    assert row.split()[1:4] == ["4", "->", "1"]
    assert row.split()[-1] == "yes"  # fused and unfused compute NumPy's result


def test_random_programs_quick_runs_checks_and_reports(tmp_path):
    """Three tiny random programs: every peer's answer checked against NumPy, the distribution
    and the worst programs' listings printed, the JSON written; no time is judged."""
    out = tmp_path / "random.json"
    peers = "numpy,jax" if importlib.util.find_spec("jax") else "numpy"
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "random_programs.py"), "--quick", "--count",
         "3", "--max-size", "4096", "--peers", peers, "--budget", "0.02", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads(out.read_text())
    assert [r["index"] for r in data["programs"]] == [0, 1, 2]
    for r in data["programs"]:
        assert r["source"].startswith(f"def program_{r['index']}(")
        assert r["size"] <= 4096 and r["lines"] >= 1
        assert r["peers"]["tracekit"]["status"] == "ok", r["peers"]["tracekit"]
        assert r["peers"]["numpy"]["status"] == "ok" and r["peers"]["numpy"]["median_s"] > 0
        if peers != "numpy":
            assert r["speedup"] > 0
    assert "speed-up distribution:" in p.stdout and "worst" in p.stdout


def test_random_programs_are_repeatable_and_depend_on_the_seed():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import random_programs as rp
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    a = [rp.generate(5, i, 1 << 14).source for i in range(6)]
    assert a == [rp.generate(5, i, 1 << 14).source for i in range(6)]
    assert a != [rp.generate(6, i, 1 << 14).source for i in range(6)]
    assert {rp.generate(5, i, 1 << 14).kind for i in range(40)} == set(rp.KINDS)
    rows = [p.index for p in rp.chosen_programs(rp.parse_args(["--count", "40", "--kind", "rows"]))]
    assert rows and rows == [i for i in range(40) if rp.generate(1, i, 1 << 24).kind == "rows"]
    with pytest.raises(SystemExit):
        rp.parse_args(["--kind", "row"])  # a kind that does not exist
    prog = rp.generate(5, 3, 1 << 14)
    args = rp.make_inputs(prog)
    assert all(a.dtype == np.dtype(prog.dtype) for a in args)
    with np.errstate(all="ignore"):
        assert all(np.isfinite(np.asarray(r)).all() for r in rp.as_tuple(prog.function(np)(*args)))


def test_loops_cold_runs_a_workload_in_a_new_process():
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "loops_cold.py"), "--only", "stacked"]
        + ["--steps", "10"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (row,) = [line.split() for line in p.stdout.splitlines() if line.split()[:1] == ["stacked"]]
    assert row[1] == "10" and all(float(v.rstrip("s")) >= 0 for v in row[2:]), p.stdout


def test_chunk_threads_runs_and_its_chunked_kernels_compute_the_same():
    """``chunk_threads.py --warm`` checks each chunked kernel's results against the prange
    kernel's (the same array elements, NaN-filled outputs before) and fails where they differ:
    a 1-D chain with interleaved streams and a tail, and trig with its fallback loop."""
    p = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chunk_threads.py"), "--warm", "--budget",
         "0.05", "--only", "chain20-4k-forced,trig"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = [line.split()[0] for line in p.stdout.splitlines() if line.startswith(("chain", "trig"))]
    assert rows == ["chain20-4k-forced", "trig"], p.stdout


@pytest.mark.parametrize("pool_name", ["Pool", "ClaimingPool"])
def test_chunk_threads_pools_cover_the_range_and_raise_a_workers_error(pool_name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import chunk_threads
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    pool = getattr(chunk_threads, pool_name)(3)
    done = []
    pool.run(lambda lo, hi, out: out.append((lo, hi)), 101, (done,), 4)
    assert sorted(i for lo, hi in done for i in range(lo, hi)) == list(range(101))

    def fails_after_the_first_chunk(lo, hi):
        if lo > 0:
            raise ValueError(f"chunk from {lo}")

    with pytest.raises(ValueError, match="chunk from"):
        pool.run(fails_after_the_first_chunk, 101, (), 4)
    done.clear()
    pool.run(lambda lo, hi, out: out.append((lo, hi)), 101, (done,), 4)  # usable again
    assert sum(hi - lo for lo, hi in done) == 101
