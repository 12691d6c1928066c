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


CALLS: list = []  # the process id of each forward call of a CountingScale in this process


class CountingScale:
    """A stateful python op (``python_func_type``): each instance counts its forward calls."""

    def __init__(self, f):
        self.f, self.calls = f, 0

    def forward(self, x):
        self.calls += 1
        CALLS.append((os.getpid(), id(self), self.calls))
        return self.f(x)


def triple(x):
    return x * 3.0


def calls() -> list:
    return list(CALLS)
