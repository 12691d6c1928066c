"""Example-based tracing: run the user's function once on real arrays, record every op.

A :class:`TracedArray` wraps a real NumPy value and the graph :class:`~tracekit.ir.Var` holding
it. NumPy's own protocols (``__array_ufunc__``, ``__array_function__``) and Python's operators
route every operation here, where it is computed for real (so shapes, dtypes, errors and view
semantics are NumPy's own) and recorded as a node.

In-place writes and views are functionalised: every array lives in a :class:`Buffer` whose
``var`` is its current contents; a view is a buffer plus the chain of view ops that derive it.
Reading a view replays the chain on the buffer's current Var; writing through a view records
update nodes that produce the buffer's new Var, so every alias sees the write.

The modules, from the bottom up:

- :mod:`.source`: which frames are the user's, the source line of an op, ``unsupported``;
- :mod:`.array`: :class:`TracedArray` (its Var, static attributes, conversions baked in as
  guards, the ``__array_function__`` table), buffers and view steps;
- :mod:`.active`: the trace that is recording;
- :mod:`.movement`, :mod:`.indexing`, :mod:`.reductions`, :mod:`.ufuncs`: the operations,
  recorded (views, functionalised writes, reductions and scans, NumPy's ufuncs);
- :mod:`.captures`: arrays the traced code reaches without receiving them;
- :mod:`.context`: :class:`TraceContext`, which records nodes, inputs and guards;
- :mod:`.methods`, :mod:`.operators`: NumPy's ndarray methods and Python's operators, set on
  :class:`TracedArray`; :mod:`.scopes`: ``tk.scope``.

NumPy's functions (``__array_function__`` handlers) are in :mod:`tracekit.numpy_functions`;
``tk.trace`` and the ``Traced`` callable in :mod:`tracekit.traced`.
"""

from . import methods, operators  # noqa: F401  (set NumPy's methods and Python's operators)
from .active import ctx_of, current
from .array import Buffer, TracedArray, implements, is_python_scalar, iter_deep
from .captures import install_captures, restore_captures, scan_captures
from .context import TraceContext, identifier, same_layout_copy
from .movement import array_from, astype, broadcast_to, copy, reshape
from .randomness import RandomDraws
from .scopes import scope
from .source import is_user_frame, unsupported, user_source

__all__ = [
    "Buffer",
    "RandomDraws",
    "TraceContext",
    "TracedArray",
    "array_from",
    "astype",
    "broadcast_to",
    "copy",
    "ctx_of",
    "current",
    "identifier",
    "implements",
    "install_captures",
    "is_python_scalar",
    "is_user_frame",
    "iter_deep",
    "reshape",
    "restore_captures",
    "same_layout_copy",
    "scan_captures",
    "scope",
    "unsupported",
    "user_source",
]
