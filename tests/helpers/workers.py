"""A python op builder for the dask tests: it records each call in the process that makes it
(worker processes import this module by name to build the op)."""

import os

BUILT: list = []  # the process id of each call of the builder in this process


def make_scaler(k: float):
    BUILT.append(os.getpid())

    def scale(x):
        return x * k

    return scale


def builds() -> list:
    return list(BUILT)


def slow_copy(block):
    """A block after a pause: a compute long enough to kill a worker in the middle of it."""
    import time

    time.sleep(0.05)
    return block.copy()
