"""The runnable examples in the docstrings of the IR core and Relay core modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "kiln.ir", "kiln.ir.type", "kiln.ir.adt", "kiln.ir.attrs", "kiln.ir.module",
    "kiln.ir.structural", "kiln.ir.transform", "kiln.relay", "kiln.relay.base",
    "kiln.relay.expr", "kiln.relay.adt", "kiln.relay.ty", "kiln.relay.scope_builder",
    "kiln.relay.expr_functor", "kiln.relay.type_infer", "kiln.relay.transform",
    "kiln.relay.analysis.variables", "kiln.relay.analysis.kinds",
    "kiln.relay.analysis.call_graph", "kiln.relay.analysis.mac_count",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
