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
from .saving import load, save
from .traced import Traced, trace
from .tracer import scope
from .version import __version__ as __version__


def render(x, **options):
    """Render a Traced, Compiled or Graph as a ``graphviz.Digraph`` (see ``tracekit.render``).

    >>> import numpy as np, tracekit as tk
    >>> d = tk.render(tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)), rankdir="LR")
    >>> type(d).__name__, "exp" in d.source, "rankdir=LR" in d.source
    ('Digraph', True, True)
    """
    from .render import render as _render

    return _render(x, **options)


def explore(x, **options):
    """An interactive notebook widget for a Traced / Compiled / backward graph.

    See ``tracekit.explore.explore`` (options: ``view``, ``target``, ``height``, and
    :func:`render`'s). ipywidgets is imported on the first call, not at ``import tracekit``.

    >>> import numpy as np, tracekit as tk
    >>> w = tk.explore(tk.trace(lambda x: np.tanh(x) * 2, np.ones(3)))
    >>> type(w).__name__, w.view, w.title
    ('Explorer', 'forward', '<lambda>')
    """
    from .explore import explore as _explore

    # That import bound `tracekit.explore` to the submodule: put this function back.
    globals()["explore"] = _explore_entry
    return _explore(x, **options)


_explore_entry = explore


def compile(traced, target: str = "cpu", **options):  # noqa: A001  (the public name)
    """Compile a Traced (or a Graph, or a Traced from :func:`load`) into fused kernels for
    ``target`` ("cpu", "cuda" or "dask").

    Options: ``math`` ("fast", vectorised, or "libm"), ``progress``, ``cache`` (the disk
    cache), ``stream`` (cuda). Returns a :class:`~tracekit.backends.Compiled`.

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: np.tanh(x) * 2 + 1, np.ones(1000, np.float32))
    >>> c = tk.compile(t, target="cpu", progress=False)
    >>> c(np.zeros(1000, np.float32))[:3], len(c.kernels)
    (array([1., 1., 1.], dtype=float32), 1)
    """
    from .backends import compile as _compile

    return _compile(traced, target=target, **options)


def optimize(traced, passes=None):
    """Run the optimisation passes on a Traced (or a Graph); returns a new Traced whose
    ``history`` records each pass (see ``tracekit.passes.optimize``).

    >>> import numpy as np, tracekit as tk
    >>> g = tk.Graph.from_json(tk.trace(lambda x: x * 1.0 + 0.0, np.ones(3)).graph.to_json())
    >>> [n.op for n in tk.optimize(g, passes=["simplify", "dce"]).graph.nodes]
    ['add']
    >>> tk.optimize(g, passes=["nope"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: tk.optimize: unknown pass 'nope'; the passes are cse, fold_constants, ...
    """
    from .passes import optimize as _optimize
    from .saving import as_traced

    return _optimize(as_traced(traced, "tk.optimize"), passes)


def jit(fn=None, *, target: str = "cpu", **options):
    """Decorator: trace and compile ``fn`` per signature (shapes, dtypes, static args).

    A new signature's first call answers through the interpreter while its kernels compile off
    the caller's path; ``wait=True`` (or ``TRACEKIT_JIT_WAIT=1``) compiles first instead.

    >>> import numpy as np, tracekit as tk
    >>> @tk.jit(wait=True)
    ... def f(x):
    ...     return np.tanh(x) * 2
    >>> f(np.zeros(3)).tolist(), f.explain()  # (or: machine code loaded from the disk cache)
    ([0.0, 0.0, 0.0], 'first call: traced...')
    >>> f(np.ones(3)).round(3).tolist(), f.explain()
    ([1.523, 1.523, 1.523], 'cache hit: no retrace, no recompile')
    """
    from .backends.jit import jit as _jit

    return _jit(fn, target=target, **options)


def grad(fn, argnums=0, checkpoint=None):
    """``d fn / d args[argnums]`` as a function (``fn`` must return a scalar).

    Through a loop, the gradient is a reverse loop over the residuals the forward iterations
    saved; ``checkpoint=1`` saves their states instead (the reverse replays each iteration),
    ``checkpoint=S`` one state per ``S`` iterations (the reverse replays each segment).

    >>> import numpy as np, tracekit as tk
    >>> tk.grad(lambda x: np.sum(x**2))(np.array([1.0, 2.0]))
    array([2., 4.])
    >>> tk.grad(lambda x, y: np.sum(x * y), argnums=1)(np.array([1.0, 2.0]), np.ones(2))
    array([1., 2.])
    """
    from .autodiff import grad as _grad

    return _grad(fn, argnums, checkpoint)


def value_and_grad(fn, argnums=0, checkpoint=None):
    """Like :func:`grad`, returning ``(value, gradient)``.

    >>> import numpy as np, tracekit as tk
    >>> value, g = tk.value_and_grad(lambda x: np.sum(x**2))(np.array([1.0, 2.0]))
    >>> float(value), g
    (5.0, array([2., 4.]))
    """
    from .autodiff import value_and_grad as _vag

    return _vag(fn, argnums, checkpoint)


def vjp(traced, checkpoint=None):
    """The backward graph of a Traced, as a Traced.

    It takes the inputs, then a cotangent per output, and returns the inputs' cotangents
    (``checkpoint``: as for :func:`grad`).

    >>> import numpy as np, tracekit as tk
    >>> b = tk.vjp(tk.trace(lambda x: np.sin(x), np.zeros(2)))
    >>> [n.op for n in b.graph.nodes], b(np.zeros(2), np.array([1.0, 2.0]))
    (['cos', 'multiply'], (array([1., 2.]),))
    """
    from .autodiff import vjp as _vjp

    return _vjp(traced, checkpoint)


def python_op(
    f,
    grad_f=None,
    python_func_type=None,
    grad_output_indices=None,
    grad_input_indices=None,
    name=None,
    pass_workspace=False,
):
    """An opaque Python function usable inside traced code (caffe2's ``Net.Python``).

    See :func:`tracekit.pyop.python_op` for the parameters (``pass_workspace=True``: ``f``
    also receives the run's :class:`~tracekit.pyop.Workspace`, at your own risk).

    >>> import numpy as np, tracekit as tk
    >>> op = tk.python_op(np.sinh, grad_f=lambda x, y, gy: gy * np.cosh(x), name="my_sinh")
    >>> t = tk.trace(lambda x: op(x) * 2, np.zeros(3))
    >>> [n.op for n in t.graph.nodes], t(np.zeros(3))
    (['python_op', 'multiply'], array([0., 0., 0.]))
    >>> tk.grad(lambda x: op(x).sum())(np.zeros(2))
    array([1., 1.])
    """
    from .pyop import python_op as _python_op

    return _python_op(
        f, grad_f, python_func_type, grad_output_indices, grad_input_indices, name, pass_workspace
    )


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
    "save",
    "load",
    "TracerWarning",
    "TraceError",
    "UnsupportedOperation",
    "GuardError",
    "Traced",
    "Graph",
    "Node",
    "Var",
]
