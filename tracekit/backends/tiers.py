"""Tiered execution for ``tk.jit``: the interpreter answers while kernels compile elsewhere.

A new signature's first call answers with the values its trace computed on the way (NumPy's
own answer to that call: the function runs once, not once traced and once interpreted), or,
where those cannot stand for the interpreter's answer (``traced.trace_answering`` says), runs
the traced graph through the reference interpreter; then its kernels compile off the caller's
path. Later calls run through the interpreter until the kernels are ready, then use them.
How they compile (``TRACEKIT_JIT_COMPILER``):

- ``process`` (the default): the compile server (``compile_server.py``) compiles them into the
  disk cache in another process, and a thread of the caller's loads them from there. numba's
  compiler holds the GIL most of the time, so this keeps it away from the caller's own work;
  ``benchmarks/tiers.py`` measures the difference.
- ``thread``: a thread of the caller's compiles them. Used where the server cannot serve (no
  disk cache, a graph JSON cannot carry, a server that failed).

A graph whose kernels the disk cache already holds (a tiny marker file says so) is loaded in a
thread at once: no server then. A compile that fails leaves the interpreter serving, with one
warning naming the node and the user's line.
"""

from __future__ import annotations

import hashlib
import html
import os
import queue
import threading
import time
import warnings

from . import compile_server

COMPILERS = ("process", "thread")


def compiler_kind() -> str:
    """How kernels compile off the caller's path (``TRACEKIT_JIT_COMPILER``)."""
    kind = os.environ.get("TRACEKIT_JIT_COMPILER", "process")
    if kind not in COMPILERS:
        raise ValueError(f"TRACEKIT_JIT_COMPILER={kind!r}: choose one of {COMPILERS}")
    return kind


def blocking_by_default() -> bool:
    """``TRACEKIT_JIT_WAIT=1``: every ``tk.jit`` function compiles before its first answer."""
    return os.environ.get("TRACEKIT_JIT_WAIT", "0").strip().lower() in ("1", "true", "yes")


class TierWarning(RuntimeWarning):
    """Kernels compiling off the caller's path failed; the interpreter keeps answering."""


class Tiered:
    """One signature's entry in ``tk.jit``'s cache while its kernels compile: the first call
    answers with the trace's own results (``answer``, where there are), later ones through the
    interpreter (``traced``) until ``compiled`` is ready."""

    tier = "interpreter"
    started = False

    def __init__(self, traced, compile_now, math: str, cache: bool, notice=None, answer=None):
        self.traced = traced
        # the trace's own results, for the first call only (popped: one caller gets them)
        self._answer = [answer] if answer is not None else []
        self.compiled = None
        self.error: Exception | None = None
        self.warned = False
        self.how = ""  # how the kernels were made, once they are
        self.seconds = None  # from the first call to compiled kernels ready
        self._compile_now, self._math, self._cache = compile_now, math, cache
        self._notice = notice
        self._done = threading.Event()
        self._listeners: list = []
        self._started = time.perf_counter()

    def __call__(self, *args):
        compiled = self.compiled
        if compiled is not None:
            self.tier = "compiled"
            return compiled(*args)
        if self.error is not None and not self.warned:
            self.warned = True
            warnings.warn(self.failure(), TierWarning, stacklevel=3)
        if self._answer:
            result = self._first_answer(args)
            if result is not None:
                self.tier = "trace"
                return result[0]
        self.tier = "interpreter"
        return self.traced(*args)

    def _first_answer(self, args):
        """(the trace's results,) for a call on the very arguments traced, else None; either
        way the trace's values are dropped."""
        try:
            answer = self._answer.pop()
        except IndexError:  # another thread's call took them
            return None
        result = self.traced.answer(answer, args)
        return None if result is None else (result,)

    def failure(self) -> str:
        return (
            f"tk.jit: compiling {self.traced.graph.name} failed; the interpreter keeps answering "
            f"its calls.\n{self.error}"
        )

    def on_ready(self, listener):
        """``listener(self)`` once the kernels are ready (or failed)."""
        self._listeners.append(listener)

    def start(self):
        self.started = True
        start_worker()
        _jobs.put(self)  # (no wait for a new thread to be scheduled: on a busy machine, ms)
        return self

    def wait(self, timeout=None) -> bool:
        """Block until the kernels are ready or failed; whether they are ready."""
        self._done.wait(timeout)
        return self.compiled is not None

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def _run(self):
        from .cpu import CompileError

        time.sleep(0.001)  # the GIL back to the caller first: its answer returns at once
        try:
            graph = self.traced.graph.to_json()
        except Exception:  # (a python op JSON cannot name) no marker, no server
            graph = None
        marker = _marker_path(self.traced, self._math, graph) if self._cache else None
        try:
            self.how = self._prepare(marker, graph)
            compiled = self._compile_now()
        except CompileError as e:
            self.error = e
        except Exception as e:  # whatever it is, the interpreter still answers
            self.error = e
        else:
            if marker is not None:
                _touch(marker)
            self.seconds = time.perf_counter() - self._started
            self.compiled = compiled
        try:
            for listener in self._listeners:
                listener(self)
            if self._notice is not None:
                self._notice(self)
        finally:
            self._done.set()  # (after the listeners: a caller that waited finds them done)

    def _prepare(self, marker, graph) -> str:
        """Compile in the server where that helps; say how the kernels are made."""
        if marker is None:
            return "compiled in a thread"
        if os.path.exists(marker):
            return "loaded from the disk cache in a thread"
        if compiler_kind() == "thread":
            return "compiled in a thread"
        from .cpu import CompileError

        try:
            compile_server.compile_in_server(self.traced, "cpu", self._math, graph)
        except compile_server.Unavailable as e:
            return f"compiled in a thread (compile server: {e})"
        except compile_server.Failed as e:
            raise CompileError(str(e)) from None
        return "compiled by the compile server, loaded from the disk cache"


_jobs: queue.SimpleQueue = queue.SimpleQueue()
_worker: list = []
_worker_lock = threading.Lock()


def start_worker():
    """The thread that runs the entries' compiles one after another (started once, before the
    first call needs it: ``tk.jit`` starts it when it wraps a function)."""
    with _worker_lock:
        if not _worker:
            _worker.append(
                threading.Thread(target=_work, name="tracekit-tier-compile", daemon=True)
            )
            _worker[0].start()


def _work():
    while True:
        job = _jobs.get()
        try:
            job._run()
        except Exception as e:  # (a notice that failed): the next job still runs
            warnings.warn(f"tk.jit: {type(e).__name__}: {e}", TierWarning, stacklevel=1)


def _marker_path(traced, math: str, text: str | None) -> str | None:
    """A file whose presence says the disk cache holds this graph's kernels (a hint: a wrong
    one costs a compile in a thread, never a wrong kernel)."""
    from ..version import __version__
    from .cache import cache_dir

    if text is None or os.environ.get("TRACEKIT_DISABLE_DISK_CACHE") == "1":
        return None
    key = hashlib.sha256(f"{__version__} {math} {traced.in_tree!r}\n{text}".encode()).hexdigest()
    return os.path.join(cache_dir(), "graphs", key[:32])


def _touch(path: str):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass
    except OSError:
        pass


def notebook_notice(name: str):
    """In a notebook, an empty output under the calling cell that says, when compiled
    kernels take over a second or more after the first call, that they did; else None."""
    from . import _in_notebook

    if not _in_notebook():
        return None
    from IPython.display import HTML, display

    handle = display(HTML(""), display_id=True)

    def notice(entry: Tiered):
        if entry.compiled is not None and entry.seconds >= 1.0:
            text = f"{name}: compiled kernels took over after {entry.seconds:.1f} s"
        elif entry.error is not None:
            text = f"{name}: compiling failed; the interpreter keeps answering (see the warning)"
        else:
            return
        handle.update(HTML(f"<small>{html.escape(text)}</small>"))

    return notice
