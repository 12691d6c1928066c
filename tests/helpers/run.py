"""Running traced code: quietly, against NumPy, as its generated ``.code``, compiled.

tracekit (and pytest) are imported by the functions that use them, not at import time: the
fuzzer imports this module before it sets up numba's environment.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np

from helpers.compare import assert_same, assert_same_type


def quiet():
    """Silence NumPy's floating-point and casting warnings (and TracerWarnings)."""

    class _Q:
        def __enter__(self):
            self.err = np.errstate(all="ignore")
            self.err.__enter__()
            self.w = warnings.catch_warnings()
            self.w.__enter__()
            warnings.simplefilter("ignore")

        def __exit__(self, *exc):
            self.w.__exit__(*exc)
            self.err.__exit__(*exc)

    return _Q()


def _copy_args(args):
    return copy.deepcopy(args)


def check_trace(fn, make_args, *, expect_op=None, values=True, rtol=0.0):
    """Trace ``fn`` on ``make_args(0)``, run it on ``make_args(1)``, compare with NumPy.

    If NumPy raises on the example, tracing must raise the same exception type; if it raises
    on the new inputs, the Traced must too. Writes into inputs are compared as well.
    Returns the Traced (or None when NumPy raised while tracing).
    """
    import pytest

    import tracekit as tk

    ex = make_args(0)
    with quiet():
        try:
            fn(*_copy_args(ex))
        except Exception as err:
            with pytest.raises(type(err)):
                tk.trace(fn, *ex)
            return None
        before = _copy_args(ex)
        t = tk.trace(fn, *ex)
    for i, (a, b) in enumerate(zip(ex, before)):
        assert_same(a, b, f"example argument {i} (tracing must not modify it)")
    t.graph.check()
    if expect_op is not None:
        assert expect_op in {n.op for n in t.graph.nodes}, (expect_op, str(t.graph))
    new = make_args(1)
    a1, a2 = _copy_args(new), _copy_args(new)
    with quiet():
        try:
            expected = fn(*a1)
        except Exception as err:
            with pytest.raises(type(err)):
                t(*a2)
            return t
        got = t(*a2)
    if values:
        assert_same(got, expected, rtol=rtol)
        assert_same(list(a2), list(a1), "arguments after the call (write-backs)", rtol)
    else:
        assert_same_type(got, expected)
    return t


def load_code(code: str, name: str):
    """Exec ``code`` (a ``Traced.code``) in a namespace of its own (it imports NumPy itself);
    returns its function ``name``."""
    ns: dict = {}
    exec(compile(code, f"<tracekit code of {name}>", "exec"), ns)
    assert set(ns) - {"__builtins__"} >= {"np", name}
    return ns[name]


def run_code(t, *args):
    """Call ``t.code`` the way a user would: arguments positionally, captures by keyword."""
    from tracekit import pytree
    from tracekit.codegen_py import parameter_names

    g = t.graph
    fn = load_code(t.code, g.name if g.name.isidentifier() else "traced")
    leaves, _ = pytree.flatten(list(args))
    names, kw = parameter_names(g), {}
    for v, spec, get in zip(g.inputs, g.specs, t.capture_getters):
        if spec.kind == "capture":
            kw[names[v]] = get()
    n_args = sum(s.kind == "arg" for s in g.specs)
    return fn(*leaves[:n_args], **kw)


def compiled(fn, *args, math="fast", cache=True):
    """(Compiled, Traced) of ``fn`` traced on ``args``, compiled for the CPU."""
    import tracekit as tk

    with quiet():
        t = tk.trace(fn, *args)
    return tk.compile(t, target="cpu", math=math, progress=False, cache=cache), t


def both(c, t, *args):
    """Results of the compiled and the interpreted program on copies of ``args``."""
    a1 = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
    a2 = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
    with quiet():
        got = c(*a1)
        want = t(*a2)
    return got, want, a1, a2


def hypothesis_settings(default_examples: int):
    """The settings of tracekit's hypothesis tests: ``default_examples`` examples, derandomized
    (``TK_HYPOTHESIS_EXAMPLES=N`` explores N examples, randomized), no deadline, no database."""
    import os

    from hypothesis import HealthCheck, settings

    chosen = os.environ.get("TK_HYPOTHESIS_EXAMPLES")
    return settings(
        max_examples=int(chosen or default_examples),
        deadline=None,
        database=None,
        derandomize=chosen is None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,
        ],
    )


def in_threads(work, n: int):
    """Run ``work(k)`` for k in range(n) on n threads at once; raise the first error any met."""
    import threading

    errors = []

    def call(k):
        try:
            work(k)
        except BaseException as e:  # noqa: BLE001 (raised below, in the caller)
            errors.append(e)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
