"""One reshape resolver: the type relation, the reference interpreter and the VM's shape
function resolve ``0, -1, -2, -3, -4`` with the same arithmetic, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import relay
from kiln.relay.type_infer import infer_expr
from kiln.runtime.vm import VirtualMachine


def _relation_shape(shape, newshape):
    ty = infer_expr(relay.reshape(relay.var("x", shape=shape), newshape))
    return tuple(int(d) for d in ty.concrete_shape)


def _interpreter_shape(shape, newshape):
    x = relay.var("x", shape=shape)
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.reshape(x, newshape)))
    out = relay.create_executor("debug", mod=mod).evaluate()(np.zeros(shape, "float32"))
    return out.numpy().shape


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.data())
def test_zero_copies_and_minus_one_match_numpy_with_zero_size_dims(shape, data):
    # NumPy has no 0-code: spell the copies out for it
    rank = data.draw(st.integers(1, len(shape)))
    newshape = [data.draw(st.sampled_from([0, shape[k]])) for k in range(rank)]
    newshape[data.draw(st.integers(0, rank - 1))] = -1
    copied = [shape[k] if v == 0 else v for k, v in enumerate(newshape)]
    try:
        expected = np.empty(shape).reshape(copied).shape
    except ValueError:
        return  # NumPy cannot infer this one (a 0 extent among the known ones)
    assert _relation_shape(tuple(shape), newshape) == expected
    assert _interpreter_shape(tuple(shape), newshape) == expected


@pytest.mark.parametrize("shape, newshape, expected", [
    ((0, 3, 4), (0, -1), (0, 12)),  # TVM's rule: -1 from the dims 0 did not copy
    ((2, 0, 4), (-3, -1), (0, 4)),
    ((2, 3, 4), (-4, -1, 2, -2), (1, 2, 3, 4)),
    ((6, 4), (-4, 2, -1, 0), (2, 3, 4)),
])
def test_relation_and_interpreter_agree_on_special_codes(shape, newshape, expected):
    assert _relation_shape(shape, newshape) == expected
    assert _interpreter_shape(shape, newshape) == expected


def test_vm_shape_function_resolves_minus_one_like_the_relation():
    # (?, 3, 4) -> (0, -1): the relation says (?, 12); with 0 rows at run time the shape
    # function must give (0, 12), not 0 / 0
    x = relay.var("x", shape=(relay.Any(), 3, 4), dtype="float32")
    func = relay.Function([x], relay.reshape(x, (0, -1)))
    assert infer_expr(func).ret_type.shape[1] == 12
    exe = relay.vm.compile(kiln.IRModule.from_expr(func), "c")
    vm = VirtualMachine(exe, kiln.cpu(0))
    for rows in (0, 2):
        data = np.arange(rows * 12, dtype="float32").reshape(rows, 3, 4)
        out = vm.run(data).numpy()
        assert out.shape == (rows, 12)
        np.testing.assert_array_equal(out, data.reshape(rows, 12))


@pytest.mark.parametrize("newshape, message", [
    ((-1, -1), "more than one -1"), ((0, 0, 0, 0), "reads past"), ((-4, -1, -1), "two -1"),
    ((-4, 5, 2, 0, 0), "does not cover"), ((-3, 5), "cannot reshape"), ((-7,), "invalid"),
])
def test_bad_codes_are_type_errors_naming_reshape(newshape, message):
    with pytest.raises(kiln.TVMError, match=f"reshape: .*{message}"):
        infer_expr(relay.reshape(relay.var("x", shape=(2, 3, 4)), newshape))


def test_vm_dyn_reshape_resolves_run_time_codes_like_the_resolver():
    # the codes arrive as a tensor; 0 copies and -1 infers with the same rule as above
    x = relay.var("x", shape=(relay.Any(), 3, 4), dtype="float32")
    s = relay.var("s", shape=(2,), dtype="int64")
    exe = relay.vm.compile(kiln.IRModule.from_expr(relay.Function([x, s], relay.reshape(x, s))),
                           "c")
    vm = VirtualMachine(exe, kiln.cpu(0))
    for rows, codes, expected in ((0, (0, -1), (0, 12)), (2, (0, -1), (2, 12)),
                                  (2, (-1, 4), (6, 4)), (0, (-1, 4), (0, 4))):
        data = np.ones((rows, 3, 4), "float32")
        out = vm.run(data, np.array(codes, "int64")).numpy()
        assert out.shape == expected, codes
