"""Differential fuzzing (``fuzzgen.py``): a bounded, seeded slice of random programs, and every
shrunk failure the fuzzer found, replayed from ``regressions/``.

``make fuzz`` (``FUZZ_SECONDS=600 make fuzz``) runs the same checks for as long as asked.
"""

from __future__ import annotations

import glob
import json
import os

import fuzzgen as F
import pytest
from helpers.run import quiet

REGRESSIONS = sorted(glob.glob(os.path.join(F.REGRESSIONS, "*.json")))


@pytest.mark.parametrize("path", REGRESSIONS, ids=[os.path.basename(p)[:-5] for p in REGRESSIONS])
def test_regression(path):
    with open(path) as f:
        rec = json.load(f)
    prog = rec["program"]
    # the check that failed (an interpreter bug also ran compiled: both are replayed)
    checks = {"trace": ("interp",), "cpu": ("interp", "cpu"), "cuda": ("interp", "cuda")}.get(
        os.path.basename(path).split("-")[0], F.checks_for(prog["profile"])
    )
    failure = F.failing_check(prog, checks)
    assert failure is None, f"{rec.get('note') or rec['failure']}\nnow: {failure}"


# The slice `make test` runs: compiling dominates (about 2-6 s per CPU program on a shared
# core), so CPU programs are few and short; interpreter-only and simulator programs are cheap.
SLICE = (
    [("cpu", s) for s in range(4)]
    + [("cuda", s) for s in range(100, 112)]
    + [("grad", s) for s in range(200, 212)]
    + [("interp", s) for s in range(300, 340)]
)


def _profile_checks(kind):
    if kind == "cpu":
        return "full", ("interp", "cpu"), 12
    if kind == "cuda":
        return "cuda", ("interp", "cuda"), None
    if kind == "grad":
        return "grad", ("interp", "grad"), None
    return "full", ("interp",), None


@pytest.mark.parametrize("kind,seed", SLICE, ids=[f"{k}-{s}" for k, s in SLICE])
def test_fuzz_slice(kind, seed):
    profile, checks, n_steps = _profile_checks(kind)
    prog = F.generate(seed, profile, n_steps=n_steps)
    failure = F.failing_check(prog, checks)
    assert failure is None, (
        f"{failure}\nreproduce: python tests/fuzz/fuzzgen.py --one {seed} --profiles {profile}\n"
        f"{json.dumps(prog)}"
    )


def test_generator_is_reproducible_and_covers_the_op_table():
    """Same seed, same program; 120 programs reach every op in the table (inside loops too;
    ``imag`` of a complex value is the rarest, first in program 90 since loops were added)."""
    import tracekit as tk
    from tracekit.loops import unroll
    from tracekit.ops import OPS

    assert F.generate(5, "full") == F.generate(5, "full")
    seen = set()
    for seed in range(120):
        prog = F.generate(seed, "full")
        with quiet():
            t = tk.trace(F.program_function(prog), *F.make_inputs(prog))
        seen |= {n.op for n in unroll(t.graph).nodes} | {n.op for n in t.graph.nodes}
    assert not set(OPS) - seen, sorted(set(OPS) - seen)


def test_shrinker_keeps_the_failure_and_drops_the_rest():
    prog = F.generate(11, "full")
    target = prog["steps"][len(prog["steps"]) // 2]
    kind = (target["k"], target.get("fn"))

    def fails(p):  # "fails" while a step like the chosen one is in the program
        return any((st["k"], st.get("fn")) == kind for st in p["steps"])

    small = F.shrink(prog, fails, budget_s=30)
    assert fails(small) and len(small["steps"]) < len(prog["steps"])
    assert F._valid(small)


def test_fuzz_reaches_the_tiled_schedule():
    """A program whose two-stage stencil the planner computes in tiles (``_small_tiles``, on
    every fourth seed): its checks pass, and the compiled program has tiles."""
    prog = F.generate(948, "full", n_steps=12)
    stats = F.check(prog, ("interp", "cpu"))
    assert "cpu-tiles" in stats["checks"], json.dumps(prog)


def test_fuzz_calls_compiled_programs_on_read_only_inputs():
    """Every fourth program that NumPy runs on read-only inputs (it writes into none) is called
    again on them (numba compiles the kernels again for them), and checked against NumPy."""
    stats = F.check(F.generate(25, "full"), ("interp", "cpu"))
    assert "cpu-read-only" in stats["checks"]


CHAINS = [("cuda", 6), ("grad", 11), ("full", 9)]


@pytest.mark.parametrize("profile,seed", CHAINS, ids=[f"{p}-{s}" for p, s in CHAINS])
def test_fuzz_runs_stencil_chains(profile, seed):
    """A stencil chain of each profile (``_Chain``, issue 22) reads values it computed through
    shifted slices, and passes its profile's checks (the CPU target's, for the ``full`` one)."""
    prog = F.generate(seed, profile, chain=True)
    assert prog["chain"] and F.shifted_reads(prog) > 0
    checks = ("interp", "cpu") if profile == "full" else F.checks_for(profile)
    stats = F.check(prog, checks)
    assert {"stencil-chain", *checks} <= set(stats["checks"]), json.dumps(prog)


def test_fuzz_loop_draws_stencil_chains_from_a_stream_of_their_own():
    """About one seed in seven of the fuzz loop is a chain, and a seed's program without one
    is the program it was before chains (they draw from streams of their own)."""
    chosen = [s for s in range(1000) if F.chain_chosen(s)]
    assert 100 <= len(chosen) <= 200
    assert F.generate(chosen[0], "full") != F.generate(chosen[0], "full", chain=True)
    assert F.generate(chosen[0], "full") == F.generate(chosen[0], "full", chain=False)


LOOP_CHAINS = [("cuda", 6), ("grad", 33), ("full", 1)]  # (grad 33: a number from a table)


@pytest.mark.parametrize("profile,seed", LOOP_CHAINS, ids=[f"{p}-{s}" for p, s in LOOP_CHAINS])
def test_fuzz_runs_time_stepped_stencil_chains(profile, seed):
    """A time-stepped stencil chain of each profile (``_LoopChain``, issues 15 and 22: the
    update written into a new array and a second state (``full``), into the argument from a
    snapshot (``cuda``), into the state (``grad``); a number moving with the iteration; a
    stage stacked after the loop) rolls into a loop node whose body reads the state through
    shifted slices, and passes its profile's checks (the CPU target's, loops kept as loops,
    for the ``full`` one)."""
    prog = F.generate(seed, profile, loop_chain=True)
    loop = prog["steps"][-1]
    assert prog["loop_chain"] and loop["k"] == "loop" and "stack" in loop
    assert F.shifted_reads(prog) > 0 and '"step"' in json.dumps(loop)
    checks = ("interp", "cpu") if profile == "full" else F.checks_for(profile)
    stats = F.check(prog, checks)
    assert {"loop-chain", "loop-chain-rolled", *checks} <= set(stats["checks"]), json.dumps(prog)


def test_fuzz_loop_draws_time_stepped_chains_from_a_stream_of_their_own():
    """About one seed in ten of the fuzz loop is a time-stepped chain (never one of the
    stencil chains' seeds), and the seed's other programs are what they were."""
    chosen = [s for s in range(1000) if F.loop_chain_chosen(s)]
    assert 60 <= len(chosen) <= 150 and not any(F.chain_chosen(s) for s in chosen)
    seed = chosen[0]
    assert F.generate(seed, "full", loop_chain=True)["loop_chain"]
    assert not {"loop_chain", "chain"} & set(F.generate(seed, "full"))


def test_shrinker_counts_the_two_registers_of_a_loop_that_stacks_a_value():
    """A loop step stacking a value makes two registers (the carried value, the stack): steps
    reading either depend on it, and removing one keeps the later registers' numbers right."""
    prog = F.generate(3, "full", loop_chain=True)  # the loop alone, carrying its argument
    carry, stacked = prog["outputs"]
    negate = [{"k": "unary", "fn": "negative", "a": r} for r in (stacked, carry)]
    prog = dict(prog, steps=[*prog["steps"], *negate], outputs=[stacked + 1, stacked + 2])
    prog["approx"] = [True, True]
    assert F._dependents(prog, 0)[0] == {0, 1, 2}
    small = F.remove_steps(prog, {1})
    assert small["steps"][-1]["a"] == carry and small["outputs"] == [stacked + 1]
    assert F._valid(small)


def test_shrinker_removes_steps_of_loop_bodies():
    """A failure inside a time-stepped chain's body shrinks to the body steps it needs."""
    prog = F.generate(16, "full", loop_chain=True)
    body = prog["steps"][-1]["body"]
    target = next(st for st in body if st["k"] == "op")
    kind = (target["k"], target["fn"])

    def fails(p):  # "fails" while a loop body holds an op like the chosen one
        return any((st["k"], st.get("fn")) == kind for st in F._all_steps(p["steps"]))

    small = F.shrink(prog, fails, budget_s=30)
    assert fails(small) and len(small["steps"][-1]["body"]) < len(body)
    assert F._valid(small)
