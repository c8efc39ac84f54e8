"""The runnable examples in the docstrings of the AOT / microTVM modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["kiln.relay.backend.executor_config", "kiln.relay.backend.aot.usmp",
           "kiln.target.source_module", "kiln.micro.testing.utils"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_registry_blob_example():
    from kiln.target import c_abi

    finder = doctest.DocTestFinder()
    [test] = [t for t in finder.find(c_abi.crt_func_registry_names) if t.examples]
    assert doctest.DocTestRunner().run(test).failed == 0
