"""Review of VM argument conversion: nested tuples, lists and ADTs at any depth, shared
sub-values, and containers that contain themselves (a clear TVMError, not a RecursionError).
NumPy is the oracle."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime.container import ADT
from kiln.runtime.error import TVMError
from kiln.runtime.vm import Executable, VirtualMachine, VMFunction
from kiln.runtime.vm.bytecode import Ret
from kiln.runtime.vm.values import convert_argument

DEPTH = 5_000  # deeper than Python's recursion limit


def identity_vm() -> VirtualMachine:
    return VirtualMachine(Executable([VMFunction("main", ["x"], [Ret(0)], 1)]), kiln.cpu(0))


def innermost(value, depth: int):
    for _ in range(depth):
        value = value[0]
    return value


def test_deeply_nested_lists_convert_without_recursion():
    leaf = np.arange(3, dtype="float32")
    nested = leaf
    for _ in range(DEPTH):
        nested = [nested]
    out = identity_vm().run(nested)
    assert isinstance(out, ADT) and out.tag == 0
    np.testing.assert_array_equal(innermost(out, DEPTH).numpy(), leaf)


def test_lists_inside_adts_inside_lists_convert_at_any_depth():
    leaf = np.full((2, 2), 7, "int32")
    nested = ADT(3, [leaf])
    for _ in range(DEPTH // 2):
        nested = ADT(1, [[nested]])
    out = convert_argument(nested, kiln.cpu(0))
    for _ in range(DEPTH // 2):
        assert out.tag == 1 and out[0].tag == 0
        out = out[0][0]
    assert out.tag == 3
    np.testing.assert_array_equal(out[0].numpy(), leaf)


def test_shared_sub_values_convert_once_and_stay_shared():
    shared_adt = ADT(1, [np.ones(2, "float32")])
    shared_list = [np.zeros(2, "float32"), 3]
    out = convert_argument(ADT(0, [shared_adt, shared_adt, shared_list, shared_list]),
                           kiln.cpu(0))
    assert out[0] is out[1] and out[2] is out[3]
    np.testing.assert_array_equal(out[0][0].numpy(), np.ones(2, "float32"))
    np.testing.assert_array_equal(out[2][1].numpy(), np.array(3, "int32"))
    assert out[2][1].dtype == "int32"


def test_adt_needing_no_conversion_is_passed_as_is():
    leaf = kiln.nd.array(np.ones(2, "float32"))
    value = ADT(1, [ADT(0, [leaf]), leaf])
    assert convert_argument(value, kiln.cpu(0)) is value


def list_containing_itself():
    cycle = []
    cycle.append(cycle)
    return cycle


def list_through_an_adt():
    inner = []
    outer = ADT(0, [inner])
    inner.append(outer)
    return outer


@pytest.mark.parametrize("make", [list_containing_itself, list_through_an_adt])
def test_a_container_that_contains_itself_is_a_clear_error(make):
    with pytest.raises(TVMError, match="contains itself"):
        identity_vm().run(make())


def test_a_bad_leaf_deep_inside_names_its_type():
    nested = [np.ones(1), [(2.0, {"not": "an array"})]]
    with pytest.raises(TVMError, match="cannot pass a dict"):
        identity_vm().run(nested)
