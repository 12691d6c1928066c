"""Loading generated kernel modules, through an on-disk cache of source and machine code.

A module's source is written atomically to ``<cache dir>/tk_<hash>.py`` (default
``~/.cache/tracekit``, moved by ``TRACEKIT_CACHE_DIR``), keyed by the source itself and the
tracekit, numba and NumPy versions and the CPU name; it is imported from there with numba's
``cache=True``, so a new process loads machine code instead of compiling. A cache that is
corrupt, truncated or unwritable falls back to compiling in memory, with one warning.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import threading
import types
import warnings
from collections import OrderedDict

CACHE_FLAG = "_TRACEKIT_DISK_CACHE = True"
_lock = threading.Lock()
_modules: OrderedDict = OrderedDict()  # key -> module, an LRU
MAX_MODULES = 512
_warned = set()


def cache_dir() -> str:
    return os.environ.get("TRACEKIT_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tracekit"
    )


# The tracekit modules a generated module imports (helpers numba inlines into the machine code
# it caches), read off its own import lines: an edit to one of them, or to what they import,
# must not reuse machine code cached before the edit, even without a version bump.
_IMPORTS = re.compile(r"^\s*(?:from\s+(tracekit[\w.]*)\s+import|import\s+(tracekit[\w.]*))", re.M)


def called_code(source: str) -> tuple:
    """The modules of ``tracekit.backends`` that ``source`` imports, and theirs, transitively
    (kernel code lives there; the package itself is the dispatcher)."""
    return _closure(tuple(sorted({a or b for a, b in _IMPORTS.findall(source)})))


@functools.cache
def _closure(direct: tuple) -> tuple:
    found, todo = set(), list(direct)
    while todo:
        name = todo.pop()
        if name in found or not name.startswith("tracekit.backends."):
            continue
        found.add(name)
        path = _module_file(name)
        if path is not None:
            with open(path, encoding="utf-8") as f:
                todo += [a or b for a, b in _IMPORTS.findall(f.read())]
            todo += _relative_imports(name, path)
    return tuple(sorted(found))


@functools.cache
def _module_file(name: str) -> str | None:
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    return origin if origin and origin.endswith(".py") else None


def _relative_imports(name: str, path: str) -> list[str]:
    """``from .x import y`` / ``from ..x import y`` in the module ``name`` (at ``path``)."""
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = []
    with open(path, encoding="utf-8") as f:
        for dots, mod in re.findall(r"^\s*from\s+(\.+)([\w.]*)\s+import", f.read(), re.M):
            base = package
            for _ in range(len(dots) - 1):
                base = base.rpartition(".")[0]
            out.append(f"{base}.{mod}" if mod else base)
    return out


@functools.cache
def _code_digest(names: tuple) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + module_source(name) + b"\0")
    return h.hexdigest()[:16]


def module_source(name: str) -> bytes:
    """The source of the module ``name`` (empty for one without a ``.py`` file)."""
    path = _module_file(name)
    if path is None:
        return b""
    with open(path, "rb") as f:
        return f.read()


def environment_key() -> str:
    import llvmlite.binding as llvm
    import numba
    import numpy

    from ..version import __version__
    from .scalar import NUMPY_FMA

    # numba's target (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES change it), and whether NumPy's loops
    # fuse multiply-adds (the helpers round as they do: NPY_DISABLE_CPU_FEATURES changes it)
    cpu = llvm.get_host_cpu_name()
    target = "/".join(cpu_target().target_context.codegen().magic_tuple())
    return (
        f"tracekit {__version__} numba {numba.__version__} "
        f"numpy {numpy.__version__} cpu {cpu} target {target} numpy-fma {NUMPY_FMA}"
    )


def cpu_target():
    from numba.core.registry import cpu_target as target

    return target


def module_key(source: str) -> str:
    """The cache key of a generated module: the environment, the code it calls, its source."""
    called = _code_digest(called_code(source))
    return hashlib.sha256(f"{environment_key()} {called}\n{source}".encode()).hexdigest()[:32]


def warn_once(kind: str, message: str):
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def load(source: str, disk: bool = True, folder: str | None = None) -> types.ModuleType:
    """The module for ``source`` (which must contain the line ``CACHE_FLAG``), its machine code
    kept in ``folder`` (default :func:`cache_dir`)."""
    key = module_key(source)
    with _lock:
        mod = _modules.get(key)
        if mod is not None:
            _modules.move_to_end(key)
            return mod
    mod = None
    if disk and os.environ.get("TRACEKIT_DISABLE_DISK_CACHE") != "1":
        if FAST_MATH_CALL in source:
            _cache_fast_math()
        try:
            mod = _load_from_disk(key, source, folder or cache_dir())
        except Exception as e:  # a broken cache must never break a computation
            warn_once(
                "disk",
                f"tracekit's disk cache at {cache_dir()} is not usable ({type(e).__name__}: {e}); "
                "compiling in memory instead",
            )
    if mod is None:
        mod = _load_in_memory(key, source)
    with _lock:
        _modules[key] = mod
        while len(_modules) > MAX_MODULES:
            # a module left in sys.modules would never be freed, whatever the LRU evicts
            old, _ = _modules.popitem(last=False)
            sys.modules.pop(f"tracekit_kernels_{old}", None)
    return mod


FAST_MATH_CALL = "_fast_math()"  # in a generated module that calls fast-math functions
_fast_math_cached = []


def _cache_fast_math():
    """Once per process: the fast-math functions (:mod:`.fastmath`) in the disk cache too (in
    the cache directory of the first module that calls one), so that each is compiled once per
    machine rather than once per process (the first kernel calling ``sin`` would otherwise wait
    a few tenths of a second for it in every new process)."""
    with _lock:
        if _fast_math_cached:
            return
        _fast_math_cached.append(True)
    from . import fastmath

    # (a folder numba cannot use: compiled in this process only; the kernels' own warning says so)
    fastmath.cache_in(os.path.join(cache_dir(), "fastmath"))


def discard(source: str):
    """Forget the module for ``source``: in memory, and on disk with numba's cache files."""
    key = module_key(source)
    with _lock:
        _modules.pop(key, None)
    sys.modules.pop(f"tracekit_kernels_{key}", None)
    folder = cache_dir()
    paths = [os.path.join(folder, f"tk_{key}.py")]
    paths += glob.glob(os.path.join(folder, "__pycache__", f"tk_{key}.*"))
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def load_into(folder: str, source: str) -> types.ModuleType:
    """The module for ``source`` loaded from ``folder``'s file and numba cache (written there
    where missing), whatever this process loaded before: an install step's."""
    return _load_from_disk(module_key(source), source, folder)


def _load_from_disk(key: str, source: str, folder: str) -> types.ModuleType:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"tk_{key}.py")
    if not _intact(path, source):
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tk_", suffix=".py")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    name = f"tracekit_kernels_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # numba's disk cache imports it by name; the LRU removes it
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _intact(path: str, source: str) -> bool:
    try:
        with open(path) as f:
            return f.read() == source
    except OSError:
        return False


def _load_in_memory(key: str, source: str) -> types.ModuleType:
    mod = types.ModuleType(f"tracekit_kernels_mem_{key}")
    code = compile(
        source.replace(CACHE_FLAG, "_TRACEKIT_DISK_CACHE = False"), f"<tracekit {key}>", "exec"
    )
    exec(code, mod.__dict__)
    return mod
