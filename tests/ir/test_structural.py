"""Structural equality and hashing: variable mapping, free variables, values, consistency."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kiln
from kiln import relay
from kiln.ir import assert_structural_equal, structural_equal, structural_hash
from kiln.ir.attrs import DictAttrs
from kiln.ir.type import FuncType, TensorType, TupleType, TypeVar
from kiln.relay.op.tensor import add, multiply


def _func(name_x="x", name_y="y", op=add):
    x = relay.var(name_x, shape=(3,))
    y = relay.var(name_y, shape=(3,))
    return relay.Function([x, y], op(x, y))


def test_functions_with_different_var_objects_and_names_are_equal():
    lhs, rhs = _func("x", "y"), _func("a", "b")
    assert structural_equal(lhs, rhs)
    assert structural_hash(lhs) == structural_hash(rhs)


def test_swapped_parameter_use_is_not_equal():
    x, y = relay.var("x", shape=(3,)), relay.var("y", shape=(3,))
    lhs = relay.Function([x, y], add(x, y))
    a, b = relay.var("x", shape=(3,)), relay.var("y", shape=(3,))
    rhs = relay.Function([a, b], add(b, a))
    assert not structural_equal(lhs, rhs)


def test_different_op_is_not_equal():
    assert not structural_equal(_func(op=add), _func(op=multiply))
    assert structural_hash(_func(op=add)) != structural_hash(_func(op=multiply))


def test_param_annotations_are_compared():
    x = relay.var("x", shape=(3,))
    z = relay.var("x", shape=(4,))
    assert not structural_equal(relay.Function([x], x), relay.Function([z], z))


def test_free_vars_compare_by_identity_unless_mapped():
    x, y = relay.var("x", shape=(2,)), relay.var("x", shape=(2,))
    assert structural_equal(add(x, x), add(x, x))
    assert not structural_equal(add(x, x), add(y, y))
    assert structural_equal(add(x, x), add(y, y), map_free_vars=True)
    assert structural_hash(add(x, x), map_free_vars=True) == structural_hash(
        add(y, y), map_free_vars=True)


def test_graph_mapping_is_consistent():
    x, y = relay.var("x", shape=(2,)), relay.var("y", shape=(2,))
    a = relay.var("a", shape=(2,))
    # x->a then y->a again: one rhs variable cannot stand for two lhs variables.
    assert not structural_equal(add(x, y), add(a, a), map_free_vars=True)


def test_let_binds_its_variable():
    v1, v2 = relay.var("v"), relay.var("w")
    lhs = relay.Let(v1, relay.const(1), add(v1, v1))
    rhs = relay.Let(v2, relay.const(1), add(v2, v2))
    assert structural_equal(lhs, rhs)


def test_constants_compare_by_value():
    assert structural_equal(relay.const([1.0, 2.0]), relay.const([1.0, 2.0]))
    assert not structural_equal(relay.const([1.0, 2.0]), relay.const([1.0, 3.0]))
    assert not structural_equal(relay.const([1, 2]), relay.const([1.0, 2.0]))
    assert not structural_equal(relay.const(np.zeros((2, 1), "float32")),
                                relay.const(np.zeros((1, 2), "float32")))
    assert structural_hash(relay.const([1.0, 2.0])) == structural_hash(relay.const([1.0, 2.0]))


def test_polymorphic_types_map_type_params():
    a, b = TypeVar("a"), TypeVar("b")
    assert structural_equal(FuncType([a], a, [a]), FuncType([b], b, [b]))
    assert not structural_equal(FuncType([a], a, [a]), FuncType([b], a, [b]))
    assert structural_hash(FuncType([a], a, [a])) == structural_hash(FuncType([b], b, [b]))


def test_types_compare_with_eq_and_hash_in_dicts():
    table = {TensorType((1, 2), "float32"): "x"}
    assert table[TensorType((1, 2), "float32")] == "x"
    assert TensorType((1, 2)) != TensorType((1, 2), "int8")
    assert TupleType([TensorType(())]) == TupleType([TensorType(())])


def test_attrs_and_strings_and_numbers():
    assert structural_equal(DictAttrs({"a": 1, "b": "s"}), DictAttrs({"b": "s", "a": 1}))
    assert not structural_equal(DictAttrs({"a": 1}), DictAttrs({"a": 2}))
    assert not structural_equal(DictAttrs({"a": 1}), DictAttrs({"a": 1.0}))
    assert structural_equal([1, "x", None], (1, "x", None))


def test_shared_subgraphs_are_compared_once():
    # A diamond chain: naive tree comparison would take 2**60 steps.
    x = relay.var("x", shape=(1,))
    expr = x
    for _ in range(60):
        expr = add(expr, expr)
    other = x
    for _ in range(60):
        other = add(other, other)
    assert structural_equal(expr, other)
    assert structural_hash(expr) == structural_hash(other)


def test_deep_chain_needs_no_recursion():
    x = relay.var("x", shape=(1,))
    lhs = rhs = x
    for _ in range(8000):
        lhs = add(lhs, x)
        rhs = add(rhs, x)
    assert structural_equal(lhs, rhs)
    assert structural_hash(lhs) == structural_hash(rhs)


def test_modules_compare_by_function_names():
    lhs = kiln.IRModule.from_expr(_func())
    rhs = kiln.IRModule.from_expr(_func("p", "q"))
    assert structural_equal(lhs, rhs)
    rhs["other"] = _func()
    assert not structural_equal(lhs, rhs)


def test_assert_structural_equal_names_the_path():
    lhs = relay.Function([relay.var("x", shape=(3,))], relay.const(1.0))
    rhs = relay.Function([relay.var("x", shape=(3,))], relay.const(2.0))
    assert_structural_equal(_func(), _func("p", "q"))
    with pytest.raises(ValueError, match=r"root\.body\.data") as err:
        assert_structural_equal(lhs, rhs)
    assert "lhs" in str(err.value) and "rhs" in str(err.value)


def test_hash_of_closed_terms_is_stable_across_processes():
    code = (
        "from kiln import relay; from kiln.ir import structural_hash;"
        "from kiln.relay.op.tensor import add;"
        "x = relay.var('x', shape=(3,)); print(structural_hash(relay.Function([x], add(x, x))))"
    )
    values = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
              for seed in ("1", "2")}
    assert len(values) == 1


@given(st.lists(st.integers(1, 8), min_size=0, max_size=4),
       st.lists(st.integers(1, 8), min_size=0, max_size=4),
       st.sampled_from(["float32", "int8", "bool"]))
def test_tensor_type_equality_matches_shape_and_dtype(shape_a, shape_b, dtype):
    lhs, rhs = TensorType(shape_a, dtype), TensorType(shape_b, "float32")
    expected = shape_a == shape_b and dtype == "float32"
    assert structural_equal(lhs, rhs) == expected
    if expected:
        assert structural_hash(lhs) == structural_hash(rhs)


def test_runtime_containers_compare_by_contents():
    from kiln.runtime.container import Array, ShapeTuple

    assert structural_equal(ShapeTuple([1, 2]), ShapeTuple([1, 2]))
    assert not structural_equal(ShapeTuple([1, 2]), ShapeTuple([1, 3]))
    assert structural_equal(Array([1, 2]), [1, 2])
    assert structural_hash(Array([1, 2])) == structural_hash((1, 2))


def test_polymorphic_functions_map_type_params_before_params():
    def identity(name):
        a = TypeVar(name)
        x = relay.var("x", a)
        return relay.Function([x], x, a, [a])

    assert structural_equal(identity("a"), identity("b"))
    assert structural_hash(identity("a")) == structural_hash(identity("b"))


def test_hash_tells_minus_one_from_minus_two():
    # Python's hash(-1) is hash(-2) (and hash(-1.0) hash(-2.0)); callers key caches by it
    x = relay.var("x", shape=(3, 3), dtype="float32")
    assert structural_hash(relay.nn.softmax(x, axis=-1)) != \
        structural_hash(relay.nn.softmax(x, axis=-2))
    assert structural_hash(relay.nn.leaky_relu(x, alpha=-1.0)) != \
        structural_hash(relay.nn.leaky_relu(x, alpha=-2.0))
