"""The examples in tracekit's docstrings run and print what they say, and every public function
of the public API has one."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import types

import pytest

import tracekit
from tracekit.backends import Compiled
from tracekit.pyop import PyOp

MODULES = ["tracekit"] + sorted(
    m.name for m in pkgutil.walk_packages(tracekit.__path__, "tracekit.")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def _public_api() -> dict:
    """Qualified name -> object: everything in ``tracekit.__all__``, and the public methods and
    properties (``__call__`` included) of the classes a user holds."""
    from tracekit.explore import Explorer

    api = {}
    for name in tracekit.__all__:
        obj = getattr(tracekit, name)
        if isinstance(obj, types.ModuleType):  # `tracekit.explore` after its submodule loaded
            obj = getattr(tracekit, f"_{name}_entry")
        api[f"tk.{name}"] = obj
    for cls in (tracekit.Traced, Compiled, tracekit.Graph, PyOp, Explorer):
        for name, member in vars(cls).items():
            if name.startswith("_") and name != "__call__":
                continue
            if isinstance(member, property):
                member = member.fget
            elif isinstance(member, classmethod | staticmethod):
                member = member.__func__
            if inspect.isfunction(member):
                api[f"{cls.__name__}.{name}"] = member
    return api


def test_every_public_function_has_an_example():
    api = _public_api()
    assert {"tk.trace", "tk.compile", "Traced.__call__", "Graph.to_json", "Explorer.select"} <= set(
        api
    )
    missing = sorted(name for name, obj in api.items() if ">>>" not in (obj.__doc__ or ""))
    assert not missing, f"public functions without a runnable example (>>>): {missing}"
