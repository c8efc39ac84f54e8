"""The runnable examples in kiln.autotvm's docstrings pass."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import kiln.autotvm


def _modules():
    yield kiln.autotvm.__name__
    for info in pkgutil.walk_packages(kiln.autotvm.__path__, kiln.autotvm.__name__ + "."):
        yield info.name


@pytest.mark.parametrize("name", sorted(set(_modules())))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
