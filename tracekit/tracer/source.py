"""Where in the user's code an op is recorded: which frames are the user's (not tracekit's, not
NumPy's), the :class:`~tracekit.ir.Source` of a line, and the error that names a NumPy function
the tracer does not follow at the user's line."""

from __future__ import annotations

import contextlib
import functools
import linecache
import os
import sys

import numpy as np

from ..errors import UnsupportedOperation
from ..ir import Source

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tracekit/
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))
_SKIP_FILES = {os.path.abspath(contextlib.__file__), os.path.abspath(functools.__file__)}


def _package_dir(name: str) -> str | None:
    """Where package ``name`` is installed, without importing it (dask's and numba's frames are
    not the user's, as NumPy's are not: a numba ufunc's call is blamed on the line calling it)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return os.path.abspath(locations[0]) + os.sep if locations else None


_LIBRARY_DIRS = tuple(d for d in (_package_dir("dask"), _package_dir("numba")) if d)


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return False
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    return not (
        path.startswith(_PKG_DIR + os.sep)
        or path.startswith(_NUMPY_DIR)
        or path in _SKIP_FILES
        or path.startswith(_LIBRARY_DIRS)
    )


USER_FILES: dict = {}


def is_user_frame(frame) -> bool:
    fn = frame.f_code.co_filename
    hit = USER_FILES.get(fn)
    if hit is None:
        hit = USER_FILES[fn] = _is_user_file(fn)
    return hit


def short_qualname(code) -> str:
    q = getattr(code, "co_qualname", code.co_name)
    return q.split(".<locals>.")[-1]


_sources: dict = {}


def source_of(frame) -> Source:
    code, line = frame.f_code, frame.f_lineno
    key = (code, line)  # one Source per line: unrolled loops record thousands of nodes there
    src = _sources.get(key)
    if src is None:
        fn = code.co_filename
        src = Source(fn, line, short_qualname(code), linecache.getline(fn, line).strip())
        if len(_sources) > 100_000:
            _sources.clear()
        _sources[key] = src
    return src


_at_offsets: dict = {}  # id(code) -> (code, {instruction offset: Source})


def source_at(frame) -> Source:
    """``source_of(frame)``, found by the frame's instruction offset: an offset is always on
    the same line, and finding an offset's line scans the code's line table."""
    code = frame.f_code
    entry = _at_offsets.get(id(code))
    if entry is None or entry[0] is not code:  # held: no other code object at that address
        if len(_at_offsets) > 10_000:
            _at_offsets.clear()
        entry = _at_offsets[id(code)] = (code, {})
    offsets = entry[1]
    offset = frame.f_lasti
    src = offsets.get(offset)
    if src is None:
        src = offsets[offset] = source_of(frame)
    return src


def user_frame(depth: int = 1):
    """The innermost frame outside tracekit and NumPy, from ``depth`` frames above the
    caller's (None if there is none)."""
    f = sys._getframe(depth + 1)
    while f is not None and not is_user_frame(f):
        f = f.f_back
    return f


def user_source(depth: int = 1) -> Source | None:
    """The source line of the innermost frame outside tracekit and NumPy."""
    f = user_frame(depth)
    return source_of(f) if f is not None else None


# NumPy's public namespaces, searched in this order for the path a function is known by
_PUBLIC = ("numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.polynomial", "numpy.ma")


def public_name(func) -> str:
    """``func`` as NumPy's users write it: ``np.linalg.inv``, ``np.fft.fft``, ``np.sort``.

    >>> import numpy as np
    >>> public_name(np.linalg.inv), public_name(np.fft.fft), public_name(np.sort)
    ('np.linalg.inv', 'np.fft.fft', 'np.sort')
    """
    name = getattr(func, "__name__", str(func))
    for path in _PUBLIC:
        module = sys.modules.get(path)
        if module is not None and getattr(module, name, None) is func:
            return "np" + path[len("numpy") :] + "." + name
    mod = getattr(func, "__module__", "") or ""
    mod = "np" if mod.startswith("numpy") and mod.count(".") <= 1 else mod.replace("numpy", "np")
    return f"{mod}.{name}"


def unsupported(func) -> UnsupportedOperation:
    name = public_name(func)
    src = user_source(3)
    where = f" at {src} `{src.text}`" if src else ""
    return UnsupportedOperation(
        f"{name} is not supported by tracekit's tracer{where}. Wrap the code that needs it "
        f"in tk.python_op(...) to run it as one opaque Python op in the graph."
    )
