"""A compile server: a child process that compiles graphs into the disk cache.

numba's compiler is Python code holding the GIL most of the time; compiled in a thread of the
caller's process, it takes the interpreter away from the caller's own work. The server compiles
in its own process (its own GIL, another core), writing the machine code into tracekit's disk
cache (``cache.py``); the caller then loads it from there, which takes milliseconds.

The server starts on first use and serves one job at a time. A request is a graph as JSON (its
argument and result structure pickled beside it); a reply says whether it compiled, or what
numba could not compile and at which line of the user's code. The server ends when the caller
does (its stdin closes); a compile running then finishes its writes, which are atomic
(``cache.py``; numba writes its data file and then its index, each by an atomic rename).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import pickle
import subprocess
import sys
import threading


class Unavailable(Exception):
    """The server cannot take this job (not serialisable, no server): compile in-process."""


class Failed(Exception):
    """numba could not compile the graph; the message names the node and the user's line."""


class _Server:
    """The child process and the thread reading its replies."""

    def __init__(self):
        env = dict(os.environ)
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.abspath(package_parent), env.get("PYTHONPATH")) if p
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracekit.backends.compile_server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.ids = itertools.count()
        self.waiting: dict = {}  # request id -> [Event, reply]
        self.lock = threading.Lock()
        self.alive = True
        threading.Thread(target=self._read, name="tracekit-compile-replies", daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                slot = self.waiting.pop(reply.get("id"), None)
            if slot is not None:
                slot[1] = reply
                slot[0].set()
        with self.lock:
            self.alive = False
            for slot in self.waiting.values():
                slot[0].set()  # no reply: the server is gone
            self.waiting.clear()

    def compile(self, request: dict):
        done = threading.Event()
        slot = [done, None]
        with self.lock:
            if not self.alive:
                raise Unavailable("the compile server has exited")
            request["id"] = next(self.ids)
            self.waiting[request["id"]] = slot
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except OSError as e:
                self.waiting.pop(request["id"], None)
                raise Unavailable(f"the compile server has exited ({e})") from e
        done.wait()
        reply = slot[1]
        if reply is None:
            raise Unavailable("the compile server exited during the compile")
        if not reply["ok"]:
            raise (Failed if reply.get("kind") == "compile" else Unavailable)(reply["error"])


_server: _Server | None = None
_start_lock = threading.Lock()


def _running() -> _Server:
    global _server
    with _start_lock:
        if _server is None or not _server.alive:
            try:
                _server = _Server()
            except OSError as e:
                raise Unavailable(f"cannot start the compile server ({e})") from e
        return _server


def request_for(traced, target: str, math: str, graph: str | None = None) -> dict:
    """The JSON request compiling ``traced``; ``Unavailable`` where it cannot be sent (a python
    op the JSON cannot name, a static argument pickle cannot write). ``graph``: its graph's
    JSON, where the caller has it."""
    from .cache import cache_dir

    try:
        graph = graph or traced.graph.to_json()
        trees = base64.b64encode(pickle.dumps((traced.in_tree, traced.out_tree))).decode()
    except Exception as e:
        raise Unavailable(f"the graph cannot be sent to the compile server ({e})") from e
    return {"graph": graph, "trees": trees, "target": target, "math": math, "dir": cache_dir()}


def compile_in_server(traced, target: str = "cpu", math: str = "fast", graph: str | None = None):
    """Compile ``traced`` in the server, into the disk cache; returns when it is there.
    ``Failed`` when numba cannot compile it; ``Unavailable`` when the server cannot."""
    _running().compile(request_for(traced, target, math, graph))


def stop():
    """End the server (the next job starts another)."""
    global _server
    with _start_lock:
        server, _server = _server, None
    if server is not None:
        server.proc.stdin.close()
        server.proc.wait()


# ---------------------------------------------------------------------- the server's side
def _serve(requests, replies):
    from ..ir import Graph
    from ..traced import Traced
    from . import compile as compile_graph
    from .cpu import CompileError

    for line in requests:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        reply = {"id": request.get("id"), "ok": True}
        try:
            os.environ["TRACEKIT_CACHE_DIR"] = request["dir"]
            in_tree, out_tree = pickle.loads(base64.b64decode(request["trees"]))
            traced = Traced(Graph.from_json(request["graph"]), in_tree, out_tree, [], [])
            compile_graph(traced, target=request["target"], math=request["math"], progress=False)
        except CompileError as e:
            reply.update(ok=False, kind="compile", error=str(e))
        except Exception as e:
            reply.update(ok=False, kind="other", error=f"{type(e).__name__}: {e}")
        replies.write((json.dumps(reply) + "\n").encode())
        replies.flush()


def main():
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed while compiling (numba, LLVM) stays out of the replies
    sys.stdout = sys.stderr
    _serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
