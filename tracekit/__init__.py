"""tracekit: trace NumPy code into a graph, see it, explore it, differentiate it, compile it.

>>> import numpy as np, tracekit as tk
>>> t = tk.trace(lambda x, w: np.maximum(x @ w, 0.0), np.ones((2, 3)), np.ones((3, 4)))
>>> [n.op for n in t.graph.nodes]
['matmul', 'maximum']
"""

# Load the submodule now: importing it later would rebind `tracekit.render` (this function)
# to the module object. graphviz is a light import (no Jupyter).
from . import render as _render_module  # noqa: E402, F401
from .errors import GuardError, TraceError, TracerWarning, UnsupportedOperation
from .ir import Graph, Node, Var
from .passes import optimize
from .traced import Traced, trace
from .tracer import scope
from .version import __version__ as __version__


def render(x, **options):
    """Render a Traced, Compiled or Graph as a ``graphviz.Digraph`` (see ``tracekit.render``)."""
    from .render import render as _render

    return _render(x, **options)


def explore(x, **options):
    """An interactive notebook widget for a Traced / Compiled / backward graph.

    See ``tracekit.explore.explore`` (options: ``view``, ``target``, ``height``, and
    :func:`render`'s). ipywidgets is imported on the first call, not at ``import tracekit``.
    """
    from .explore import explore as _explore

    # That import bound `tracekit.explore` to the submodule: put this function back.
    globals()["explore"] = _explore_entry
    return _explore(x, **options)


_explore_entry = explore


def compile(traced, target: str = "cpu", **options):  # noqa: A001  (the public name)
    """Compile a Traced into fused kernels for ``target`` ("cpu" or "cuda")."""
    from .backends import compile as _compile

    return _compile(traced, target=target, **options)


def jit(fn=None, *, target: str = "cpu", **options):
    """Decorator: trace and compile ``fn`` per signature (shapes, dtypes, static args)."""
    from .backends.jit import jit as _jit

    return _jit(fn, target=target, **options)


def grad(fn, argnums=0):
    """``d fn / d args[argnums]`` as a function (``fn`` must return a scalar)."""
    from .autodiff import grad as _grad

    return _grad(fn, argnums)


def value_and_grad(fn, argnums=0):
    """Like :func:`grad`, returning ``(value, gradient)``."""
    from .autodiff import value_and_grad as _vag

    return _vag(fn, argnums)


def vjp(traced):
    """The backward graph of a Traced, as a Traced."""
    from .autodiff import vjp as _vjp

    return _vjp(traced)


def python_op(
    f,
    grad_f=None,
    python_func_type=None,
    grad_output_indices=None,
    grad_input_indices=None,
    name=None,
):
    """An opaque Python function usable inside traced code (caffe2's ``Net.Python``)."""
    from .pyop import python_op as _python_op

    return _python_op(f, grad_f, python_func_type, grad_output_indices, grad_input_indices, name)


__all__ = [
    "trace",
    "jit",
    "compile",
    "grad",
    "value_and_grad",
    "vjp",
    "python_op",
    "scope",
    "render",
    "explore",
    "optimize",
    "TracerWarning",
    "TraceError",
    "UnsupportedOperation",
    "GuardError",
    "Traced",
    "Graph",
    "Node",
    "Var",
]
