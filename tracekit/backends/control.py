"""Control ops on a target: a loop runs its body, compiled once for the target, ``trips`` times.

A target compiles a loop's body like any graph (optimised, lowered, planned and fused) and
calls it once per iteration with the carried values and the invariants; compile time is the
body's, not the unrolled trace's. Buffers of carried values alternate between two of the body
program's result buffers: a result the loop still holds is never reused, so the body writes
the next state into the buffer the state before last had.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..loops import unroll
from ..loops.op import is_while, iterate
from ..ops import OPS
from ..passes import PIPELINE
from .lowering import lower

# A loop of at most this many nodes unrolled is compiled unrolled: its iterations fuse into
# few kernels, and a host call per iteration would cost more than they compute.
UNROLL_AT_MOST = 128


def unroll_small_loops(graph: Graph) -> Graph:
    """``graph`` with each loop of at most ``UNROLL_AT_MOST`` unrolled nodes unrolled (a
    while loop's trip count is known only when it runs: it stays a loop)."""
    return unroll(
        graph,
        which=lambda n: (
            not is_while(n) and n.attrs["trips"] * _unrolled_size(n.attrs["body"]) <= UNROLL_AT_MOST
        ),
    )


def _unrolled_size(body: Graph) -> int:
    return sum(
        n.attrs["trips"] * _unrolled_size(n.attrs["body"]) if OPS[n.op].kind == "control" else 1
        for n in body.nodes
    )


def prepared(body: Graph) -> Graph:
    """``body`` through the passes and the lowering every compiled graph goes through."""
    for _, run_pass in PIPELINE:
        body = run_pass(body).check()
    return lower(body).check()


def loop_runner(node, run_body):
    """``run(*inputs, start=0)`` computing loop ``node`` (counting its iterations from
    ``start``); ``run_body(values, k, start)`` runs its body's iteration ``k`` and returns its
    outputs (a list); it may write into the buffers of the carried values it is given (they
    are the loop's own)."""
    carried = node.attrs["carried"]

    def run(*inputs, handed=(), start=0):
        # the body may write into the state's buffers: copies of the inputs, but for those the
        # caller hands over (positions in ``handed``: buffers of its own it never reads again)
        owned = [
            x.copy() if isinstance(x, np.ndarray) and k not in handed else x
            for k, x in enumerate(inputs[:carried])
        ]
        body = run_body if not start else lambda values, k: run_body(values, k, start)
        outs = iterate(owned + list(inputs[carried:]), node.attrs, body)
        kept = [x for k, x in enumerate(inputs) if k not in handed]
        outs = [_unshared(o, kept) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return run


def _unshared(value, inputs):
    """``value``, or a copy where it may share memory with an input (the body passed a
    carried value through, or returned a view of an invariant)."""
    if isinstance(value, np.ndarray) and any(
        isinstance(x, np.ndarray) and np.may_share_memory(value, x) for x in inputs
    ):
        return value.copy()
    return value
