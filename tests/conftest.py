"""Shared test setup: the CUDA simulator when there is no GPU, a private disk cache, ``tk.jit``
compiling before its first answer (the tests of compiled code test compiled code; the tier tests
ask for ``wait=False``), and ``tests/`` on ``sys.path`` for the shared helpers
(``tests/helpers/``)."""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("TRACEKIT_CACHE_DIR", tempfile.mkdtemp(prefix="tracekit-test-cache-"))
os.environ.setdefault("TRACEKIT_JIT_WAIT", "1")
