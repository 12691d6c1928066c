"""Shared test setup: the CUDA simulator when there is no GPU, a private disk cache."""

import os
import shutil
import tempfile

if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("TRACEKIT_CACHE_DIR", tempfile.mkdtemp(prefix="tracekit-test-cache-"))
