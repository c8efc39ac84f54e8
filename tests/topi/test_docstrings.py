"""The runnable examples in the topi and strategy docstrings pass."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import kiln.relay.op.strategy
import kiln.topi


def _modules():
    for package in (kiln.topi, kiln.relay.op.strategy):
        yield package.__name__
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            yield info.name


@pytest.mark.parametrize("name", sorted(set(_modules())))
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
