"""Types: shape normalization, dynamic dims, printing, bad input; attrs and make_node."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir.attrs import Attrs, DictAttrs, make_node
from kiln.ir.expr import IntImm
from kiln.ir.type import (
    Any,
    FuncType,
    GlobalTypeVar,
    RelayRefType,
    TensorType,
    TupleType,
    TypeCall,
    TypeKind,
    TypeVar,
    is_dynamic,
)
from kiln.runtime.object import register_object


def test_tensor_type_stores_int32_imms():
    ty = TensorType((1, np.int64(10)), "float16")
    assert all(isinstance(d, IntImm) and str(d.dtype) == "int32" for d in ty.shape)
    assert ty.concrete_shape == (1, 10)
    assert ty.dtype == "float16"
    assert not ty.is_dynamic
    assert TensorType(()).concrete_shape == ()


def test_any_dims_make_a_type_dynamic():
    ty = TensorType((Any(), 3))
    assert ty.is_dynamic
    assert repr(ty) == "Tensor[(?, 3), float32]"
    with pytest.raises(kiln.TVMError, match="dynamic"):
        _ = ty.concrete_shape
    assert is_dynamic(TupleType([TensorType((1,)), ty]))
    assert not is_dynamic(FuncType([TensorType((1,))], TensorType((2,))))
    assert kiln.relay.Any().dtype == "int32"


@pytest.mark.parametrize("bad", [(-1,), (1.5,), ("a",), (True,)])
def test_bad_dims_are_rejected(bad):
    with pytest.raises((TypeError, ValueError)):
        TensorType(bad)


def test_reprs_read_like_relay_text():
    a = TypeVar("a")
    lst = GlobalTypeVar("List")
    assert repr(TensorType((1, 10))) == "Tensor[(1, 10), float32]"
    assert repr(TensorType((3,), "int8")) == "Tensor[(3,), int8]"
    assert repr(TupleType([])) == "()"
    assert repr(FuncType([a], a, [a])) == "fn <a>(a) -> a"
    assert repr(TypeCall(lst, [a])) == "List[a]"
    assert repr(RelayRefType(TensorType(()))) == "Ref[Tensor[(), float32]]"


def test_type_kinds():
    assert TypeVar("a").kind == TypeKind.Type
    assert GlobalTypeVar("L").kind == TypeKind.AdtHandle
    assert int(TypeKind.ShapeVar) == 1


def test_dict_attrs_access():
    attrs = DictAttrs({"Primitive": 1, "global_symbol": "f"})
    assert attrs["Primitive"] == 1 and attrs.global_symbol == "f"
    assert sorted(attrs.keys()) == ["Primitive", "global_symbol"]
    assert attrs.get("missing", 7) == 7
    assert attrs.with_attr("Inline", 1)["Inline"] == 1 and "Inline" not in attrs
    with pytest.raises(AttributeError):
        _ = attrs.missing


@register_object("tests.ir.PadAttrs")
class PadAttrs(Attrs):
    _fields = {"pad_width": int, "mode": str}


def test_typed_attrs_and_make_node():
    attrs = make_node("tests.ir.PadAttrs", pad_width=2, mode="edge")
    assert isinstance(attrs, PadAttrs)
    assert attrs["pad_width"] == 2 and attrs.get_int("pad_width") == 2
    assert attrs.get_str("mode") == "edge" and attrs.keys() == ["pad_width", "mode"]
    with pytest.raises(KeyError, match="no attribute"):
        attrs["nope"]
    with pytest.raises(TypeError, match="no field"):
        make_node("tests.ir.PadAttrs", nope=1)
    with pytest.raises(KeyError):
        make_node("tests.ir.NoSuchAttrs")
    assert make_node("DictAttrs", a=1)["a"] == 1


def test_types_are_immutable():
    ty = TensorType((1,))
    with pytest.raises(AttributeError, match="immutable"):
        ty.dtype = "int8"


def test_ir_namespace_exposes_tvm_names():
    for name in ["IRModule", "TensorType", "TupleType", "FuncType", "TypeVar", "GlobalTypeVar",
                 "IncompleteType", "TypeCall", "RelayRefType", "TypeData", "Constructor",
                 "Attrs", "DictAttrs", "make_node", "Op", "structural_equal",
                 "structural_hash", "assert_structural_equal", "transform", "Span",
                 "SourceName", "PrimExpr", "IntImm", "FloatImm", "GlobalVar", "Range",
                 "BaseFunc"]:
        assert getattr(kiln.ir, name) is not None, name
    with pytest.raises(AttributeError):
        _ = kiln.ir.NoSuchName


def test_symbolic_dims_from_tir_vars():
    n = kiln.tir.Var("n", "int32")
    ty = TensorType((n, 4))
    assert ty.shape[0] is n and ty.is_dynamic
    assert TensorType((n, 4)) == ty
    assert TensorType((kiln.tir.Var("n", "int32"), 4)) != ty  # a different free variable


def test_dtype_is_validated_and_canonical():
    assert TensorType((1,), "int").dtype == "int32"
    with pytest.raises(kiln.TVMError, match="flaot32"):
        TensorType((1,), "flaot32")
