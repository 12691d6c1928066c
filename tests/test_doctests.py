"""The examples in tracekit's docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import tracekit

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(tracekit.__path__, "tracekit.")
    if m.name.split(".")[-1] not in ("explore",)  # needs a Jupyter front end
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
