"""What the compiled targets share at run time, below all of them: device arrays, ``out=``
checks, whether numba simulates CUDA. Imports nothing of tracekit."""

from __future__ import annotations

import numpy as np


def is_device_array(x) -> bool:
    """An array in GPU memory (``__cuda_array_interface__``: numba, CuPy, torch; or a CUDA
    simulator array), which the cuda target uses in place."""
    if isinstance(x, np.ndarray | np.generic):
        return False
    return hasattr(x, "__cuda_array_interface__") or bool(getattr(x, "__cuda_ndarray__", False))


def device_array_types(args) -> tuple:
    """The types of the device arrays anywhere in ``args`` (extra pytree leaf types)."""
    found, todo = set(), list(args)
    while todo:
        x = todo.pop()
        if isinstance(x, tuple | list):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.values())
        elif is_device_array(x):
            found.add(type(x))
    return tuple(found)


def check_out_types(outs, results):
    """Each ``out=`` buffer has its result's shape, and a dtype the result casts to."""
    for i, (o, v) in enumerate(zip(outs, results or ())):
        shape, dtype = getattr(o, "shape", None), getattr(o, "dtype", None)
        if shape is not None and tuple(shape) != v.shape:
            raise ValueError(f"out[{i}]: the result is {v.type}, got an array of shape {shape}")
        if dtype is not None and not np.can_cast(v.dtype, dtype, "same_kind"):
            raise TypeError(f"out[{i}]: cannot store the {v.type} result in an array of {dtype}")


def simulator_active() -> bool:
    """Whether numba runs CUDA kernels in its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    import numba

    cfg = getattr(getattr(numba, "cuda", None), "config", None) or numba.config
    return bool(getattr(cfg, "ENABLE_CUDASIM", 0))
