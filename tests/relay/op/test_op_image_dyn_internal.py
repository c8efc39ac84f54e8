"""image.resize1d/2d, the dyn.* ops (rank known, extents Any) and the compiler-internal ops."""

from __future__ import annotations

import pytest

from kiln import relay
from kiln.ir.op import Op
from kiln.ir.type import Any, FuncType, TensorType, TupleType
from kiln.relay.op import annotation
from kiln.relay.type_infer import infer_expr
from kiln.runtime.error import TypeInferenceError


def shape_of(ty: TensorType) -> tuple:
    return tuple("?" if isinstance(d, Any) else int(d) for d in ty.shape)


def v(shape, dtype="float32", name="x"):
    return relay.var(name, shape=shape, dtype=dtype)


def rel(name):
    return Op.get(name).get_attr("FTVMTypeRelation")


# ---- image ------------------------------------------------------------------------------------
def test_resize2d_defaults_and_shapes():
    call = relay.image.resize2d(v((1, 3, 8, 8)), size=(16, 12))
    a = call.attrs
    assert (a.layout, a.method, a.coordinate_transformation_mode, a.rounding_method) == (
        "NCHW", "linear", "half_pixel", "")
    assert (a.cubic_alpha, a.cubic_exclude, a.extrapolation_value, a.roi) == (
        -0.5, 0, 0.0, (0.0, 0.0, 0.0, 0.0))
    assert shape_of(infer_expr(call)) == (1, 3, 16, 12)
    nhwc = relay.image.resize2d(v((1, 8, 8, 3)), (4, 4), layout="NHWC",
                                method="nearest_neighbor", rounding_method="round",
                                out_dtype="float16")
    ty = infer_expr(nhwc)
    assert shape_of(ty) == (1, 4, 4, 3) and ty.dtype == "float16"
    cubic = relay.image.resize2d(v((Any(), 3, 8, 8)), 5, method="cubic", cubic_alpha=-0.75,
                                 coordinate_transformation_mode="align_corners")
    assert shape_of(infer_expr(cubic)) == ("?", 3, 5, 5)


def test_resize1d():
    call = relay.image.resize1d(v((2, 3, 10)), (20,))
    assert call.attrs.layout == "NCW"
    assert shape_of(infer_expr(call)) == (2, 3, 20)


@pytest.mark.parametrize("kwargs,match", [
    ({"method": "bilinear"}, "method must be one of"),
    ({"coordinate_transformation_mode": "centered"}, "coordinate_transformation_mode"),
    ({"rounding_method": "nearest"}, "rounding_method"),
    ({"layout": "NCDW"}, "has no H axis"),
])
def test_resize2d_rejects_bad_attrs(kwargs, match):
    with pytest.raises(TypeInferenceError, match=match):
        infer_expr(relay.image.resize2d(v((1, 3, 8, 8)), (4, 4), **kwargs))


def test_resize2d_with_expr_size_is_dynamic():
    call = relay.image.resize2d(v((1, 3, 8, 8)), v((2,), "int64", "s"))
    assert call.op is Op.get("dyn.image.resize2d")
    assert shape_of(infer_expr(call)) == (1, 3, "?", "?")


# ---- dyn --------------------------------------------------------------------------------------
def test_dyn_ops_know_the_rank_only():
    shape3 = v((3,), "int64", "s")
    cases = [
        (relay.broadcast_to(v((4,)), shape3), "dyn.broadcast_to", ("?", "?", "?")),
        (relay.expand_dims(v((2, 3)), v((), "int32", "a"), 2), "dyn.expand_dims",
         ("?", "?", "?", "?")),
        (relay.full(relay.const(1.0), shape3), "dyn.full", ("?", "?", "?")),
        (relay.ones(shape3, "int8"), "dyn.ones", ("?", "?", "?")),
        (relay.squeeze(v((1, 3, 1)), v((2,), "int64", "a")), "dyn.squeeze", ("?",)),
        (relay.tile(v((2, 3)), shape3), "dyn.tile", ("?", "?", "?")),
    ]
    for call, name, expected in cases:
        assert call.op is Op.get(name)
        assert shape_of(infer_expr(call)) == expected


def test_dyn_relations_reject_bad_shape_tensors():
    with pytest.raises(TypeInferenceError, match="1-D tensor of static length"):
        rel("dyn.reshape")([TensorType((2, 3)), TensorType((Any(),), "int64")], None)
    with pytest.raises(TypeInferenceError, match="cannot broadcast rank 3 to rank 2"):
        rel("dyn.broadcast_to")([TensorType((2, 3, 4)), TensorType((2,), "int64")], None)
    with pytest.raises(TypeInferenceError, match="pad_width must have shape"):
        infer_expr(relay.nn.pad(v((2, 3)), v((3, 2), "int64", "p"), 0.0))


def test_dyn_full_dtype_defaults_to_fill_value():
    ty = infer_expr(relay.full(relay.const(1, "int32"), v((2,), "int64", "s")))
    assert ty.dtype == "int32" and shape_of(ty) == ("?", "?")


# ---- internal ops -----------------------------------------------------------------------------
def test_annotations_are_identity_and_non_computational():
    x = v((2, 3))
    for call in (annotation.stop_fusion(x), annotation.checkpoint(x),
                 annotation.compiler_begin(x, "ccompiler"), annotation.cast_hint(x, "float16"),
                 annotation.on_device(x, None), annotation.device_copy(x, None, None)):
        assert shape_of(infer_expr(call)) == (2, 3)
        assert call.op.get_attr("TNonComputational") is True
    assert annotation.on_device(x, None).attrs.constrain_body is True


def test_memory_and_vm_ops():
    storage = annotation.alloc_storage(64, [4, 4], 64, None)
    assert len(storage.args) == 3 and storage.attrs.dtype == "float32"
    assert infer_expr(storage) is annotation.STORAGE_TYPE
    storage_ty = annotation.STORAGE_TYPE
    with pytest.raises(TypeInferenceError, match="alignment must be an int64 scalar"):
        rel("memory.alloc_storage")([TensorType((), "int64"), TensorType((2,), "int64"),
                                     TensorType((), "int32")], None)
    tensor = annotation.alloc_tensor(v((), name="st"), 0, [2, 3], "float32")
    assert tensor.attrs.const_shape == (2, 3)
    assert shape_of(rel("memory.alloc_tensor")(
        [storage_ty, TensorType((), "int64"), TensorType((2,), "int64")], tensor.attrs)) == (2, 3)
    open_shape = annotation.alloc_tensor(v((), name="st"), 0, v((3,), "int64", "s"))
    ty = rel("memory.alloc_tensor")(
        [storage_ty, TensorType((), "int64"), TensorType((3,), "int64")], open_shape.attrs)
    assert shape_of(ty) == ("?", "?", "?")
    killed = rel("memory.kill")([TensorType((2,))], None)
    assert isinstance(killed, TupleType) and len(killed.fields) == 0
    assert Op.get("memory.alloc_storage").get_attr("TOpIsStateful") is True
    ty = infer_expr(annotation.shape_of(v((2, Any(), 4))))
    assert shape_of(ty) == (3,) and ty.dtype == "int64"
    reshaped = annotation.reshape_tensor(v((2, 6)), relay.const([3, 4], "int64"), (3, 4))
    assert shape_of(infer_expr(reshaped)) == (3, 4)


def test_call_lowered_returns_the_function_result_type():
    fn_ty = FuncType([TensorType((2,))], TensorType((5,), "int8"))
    ty = rel("call_lowered")([fn_ty, TupleType([TensorType((2,))])], None)
    assert shape_of(ty) == (5,) and ty.dtype == "int8"
    with pytest.raises(TypeInferenceError, match="must be a function"):
        rel("call_lowered")([TensorType((2,)), TupleType([])], None)


def test_debug_passes_its_argument_through():
    assert shape_of(infer_expr(annotation.debug(v((4,))))) == (4,)
