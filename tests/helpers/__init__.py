"""Helpers the test modules and the differential fuzzer (``tests/fuzz/fuzzgen.py``) share.

- :mod:`helpers.values`: dtypes, seeds, random input values, memory layouts.
- :mod:`helpers.compare`: bit-for-bit comparison, ulp distance, same-structure assertions.
- :mod:`helpers.run`: running traced code (quietly, against NumPy, as ``.code``, compiled).
- :mod:`helpers.stencils`: the stencil programs the benchmarks measure.

``tests/conftest.py`` puts ``tests/`` on ``sys.path`` for pytest; the fuzzer does the same when
it runs as a script. None of these modules imports tracekit at import time, so the fuzzer can
set up numba's environment before tracekit loads.
"""
