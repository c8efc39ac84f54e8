"""Elementwise/broadcast ops: constructors build the right calls, InferType gives NumPy's
broadcast shapes (with ``Any`` dims), and bad operands raise TypeInferenceError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import relay
from kiln.ir.op import Op
from kiln.ir.type import Any, TensorType
from kiln.relay.op import tensor
from kiln.relay.type_infer import infer_expr
from kiln.runtime.error import TypeInferenceError


def shape_of(ty: TensorType) -> tuple:
    return tuple("?" if isinstance(d, Any) else int(d) for d in ty.shape)


@pytest.mark.parametrize("name", sorted(tensor.UNARY_OPS))
def test_unary_ops_keep_the_input_type(name):
    x = relay.var("x", shape=(2, Any(), 4), dtype="float32")
    call = getattr(relay, name)(x)
    assert call.op is Op.get(name) and call.attrs is None
    ty = infer_expr(call)
    assert shape_of(ty) == (2, "?", 4) and ty.dtype == "float32"


@pytest.mark.parametrize("name", sorted(tensor.CLASSIFY_OPS))
def test_classification_ops_give_bool(name):
    ty = infer_expr(getattr(relay, name)(relay.var("x", shape=(3, 5))))
    assert shape_of(ty) == (3, 5) and ty.dtype == "bool"


@pytest.mark.parametrize("name", sorted(tensor.BINARY_OPS))
def test_binary_ops_broadcast_and_keep_dtype(name):
    a = relay.var("a", shape=(4, 1, 3), dtype="int32")
    b = relay.var("b", shape=(5, 1), dtype="int32")
    call = getattr(relay, name)(a, b)
    assert call.op.name == name and len(call.args) == 2
    ty = infer_expr(call)
    assert shape_of(ty) == np.broadcast_shapes((4, 1, 3), (5, 1)) and ty.dtype == "int32"


@pytest.mark.parametrize("name", sorted(tensor.COMPARE_OPS))
def test_comparisons_broadcast_to_bool(name):
    ty = infer_expr(getattr(relay, name)(relay.var("a", shape=(2, 3)),
                                         relay.var("b", shape=(3,))))
    assert shape_of(ty) == (2, 3) and ty.dtype == "bool"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=0, max_size=4),
       st.lists(st.integers(1, 4), min_size=0, max_size=4))
def test_broadcast_matches_numpy(s1, s2):
    rel = Op.get("add").get_attr("FTVMTypeRelation")
    try:
        expected = np.broadcast_shapes(tuple(s1), tuple(s2))
    except ValueError:
        with pytest.raises(TypeInferenceError, match="not broadcast-compatible"):
            rel([TensorType(s1), TensorType(s2)], None)
        return
    assert shape_of(rel([TensorType(s1), TensorType(s2)], None)) == expected


@pytest.mark.parametrize("lhs,rhs,expected", [
    ((Any(), 3), (1, 3), ("?", 3)),
    ((Any(), 3), (5, 3), (5, 3)),
    ((1, 3), (Any(), 1), ("?", 3)),
    ((Any(),), (Any(),), ("?",)),
    ((2, Any()), (4, 2, 1), (4, 2, "?")),
])
def test_broadcast_with_any_dims(lhs, rhs, expected):
    ty = infer_expr(relay.add(relay.var("a", shape=lhs), relay.var("b", shape=rhs)))
    assert shape_of(ty) == expected


def test_incompatible_shapes_name_the_op_and_shapes():
    with pytest.raises(TypeInferenceError,
                       match=r"add: shapes \(3,\) and \(4,\) are not broadcast-compatible"):
        infer_expr(relay.add(relay.var("a", shape=(3,)), relay.var("b", shape=(4,))))


def test_mismatched_dtypes_are_rejected():
    with pytest.raises(TypeInferenceError, match="float32 and int32 do not match"):
        infer_expr(relay.multiply(relay.var("a", shape=(2,)),
                                  relay.var("b", shape=(2,), dtype="int32")))


def test_non_tensor_argument_is_rejected():
    rel = Op.get("exp").get_attr("FTVMTypeRelation")
    with pytest.raises(TypeInferenceError, match="must be a tensor"):
        rel([relay.TupleType([])], None)


def test_python_scalars_become_constants():
    call = relay.add(relay.var("a", shape=(2,)), 1.0)
    assert isinstance(call.args[1], relay.Constant)
    assert shape_of(infer_expr(call)) == (2,)


def test_symbolic_extents_compare_structurally():
    import kiln

    n = kiln.tir.Var("n", "int32")
    ty = infer_expr(relay.add(relay.var("a", shape=(n * 2, 3)), relay.var("b", shape=(n * 2, 3))))
    assert str(ty.shape[1]) == "3" and not isinstance(ty.shape[0], Any)
    other = kiln.tir.Var("m", "int32")
    with pytest.raises(TypeInferenceError, match="not broadcast-compatible"):
        infer_expr(relay.add(relay.var("a", shape=(n,)), relay.var("b", shape=(other,))))
