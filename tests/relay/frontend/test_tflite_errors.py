"""from_tflite on bad input: unsupported ops listed at once, corrupt flatbuffers, bad attributes."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import relay
from kiln.relay.testing.tflite import TFLiteModelBuilder
from kiln.runtime.error import OpAttributeInvalid, OpNotImplemented, TVMError

pytest.importorskip("tflite")


def relu_model() -> bytes:
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 4))
    y = b.add_tensor("y", (1, 4))
    b.add_operator("RELU", [x], [y])
    b.add_output(y)
    return b.finish()


def test_accepts_bytes_and_tflite_model():
    import tflite

    data = relu_model()
    for model in (data, bytearray(data), tflite.Model.GetRootAsModel(data, 0)):
        mod, params = relay.frontend.from_tflite(model)
        assert params == {}
        assert mod["main"].body.op.name == "nn.relu"


def test_shape_and_dtype_dict_override_inputs():
    mod, _ = relay.frontend.from_tflite(relu_model(), shape_dict={"x": (1, 4)},
                                        dtype_dict={"x": "float32"})
    assert tuple(mod["main"].params[0].type_annotation.shape) == (1, 4)


def test_unsupported_ops_are_listed_in_one_error():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (4,))
    y, z, w = (b.add_tensor(n, (4,)) for n in "yzw")
    b.add_operator("LSH_PROJECTION", [x], [y])
    b.add_operator("RELU", [y], [z])
    b.add_operator("HASHTABLE_LOOKUP", [z], [w])
    b.add_operator(32, [w], [b.add_tensor("c", (4,))], custom_code="MyOp")
    b.add_output(w)
    with pytest.raises(OpNotImplemented) as info:
        relay.frontend.from_tflite(b.finish())
    assert str(info.value).endswith("frontend: CUSTOM(MyOp), HASHTABLE_LOOKUP, LSH_PROJECTION")


@pytest.mark.parametrize("data,match", [
    (b"", "too short"),
    (b"\x00" * 4 + b"ONNX" + b"\x00" * 16, "file identifier"),
    (b"\x10\x00\x00\x00TFL3" + b"\x00" * 8, "corrupt TFLite model"),
])
def test_not_a_model(data, match):
    with pytest.raises(TVMError, match=match):
        relay.frontend.from_tflite(data)


def test_truncated_model_raises_tvmerror():
    data = relu_model()
    for cut in (12, len(data) // 2, len(data) - 9):
        with pytest.raises(TVMError):
            relay.frontend.from_tflite(data[:cut])


def test_wrong_argument_type():
    with pytest.raises(TVMError, match="tflite.Model or the model's bytes"):
        relay.frontend.from_tflite(42)


def test_buffer_size_must_match_shape():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2, 3))
    w = b.add_tensor("w", (3, 3), "float32", np.zeros(4, "float32"))
    y = b.add_tensor("y", (2, 3))
    b.add_operator("ADD", [x, w], [y])
    b.add_output(y)
    with pytest.raises(TVMError, match="needs 36 bytes, its buffer 1 holds 16"):
        relay.frontend.from_tflite(b.finish())


def test_operator_naming_a_missing_tensor():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2,))
    y = b.add_tensor("y", (2,))
    b.add_operator("ADD", [x, 7], [y])
    b.add_output(y)
    with pytest.raises(TVMError, match="names tensor 7, the subgraph has 2 tensors"):
        relay.frontend.from_tflite(b.finish())


def test_bad_attribute_names_the_operator():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2, 6))
    y = b.add_tensor("y", (5, 2))
    b.add_operator("RESHAPE", [x, b.add_const("s", np.array([5, 2], "int32"))], [y])
    b.add_output(y)
    with pytest.raises(OpAttributeInvalid, match=r"operator 0 \(RESHAPE\).*cannot reshape"):
        relay.frontend.from_tflite(b.finish())


def test_declared_output_shape_is_checked():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (2, 3))
    y = b.add_tensor("y", (3, 2))
    b.add_operator("RELU", [x], [y])
    b.add_output(y)
    with pytest.raises(TVMError, match=r"has shape \(2, 3\) but the model declares \(3, 2\)"):
        relay.frontend.from_tflite(b.finish())


def test_zero_scale_is_refused():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (4,), "int8", scale=[0.5, 0.0, 0.5, 0.5], zero_point=[0, 0, 0, 0])
    y = b.add_tensor("y", (4,), "int8", scale=0.5, zero_point=0)
    b.add_operator("RELU", [x], [y])
    b.add_output(y)
    with pytest.raises(TVMError, match="a quantization scale is 0"):
        relay.frontend.from_tflite(b.finish())


def test_unsupported_tensor_type():
    b = TFLiteModelBuilder()
    x = b.add_input("x", (4,), raw_type=5)   # STRING
    b.add_output(x)
    with pytest.raises(OpNotImplemented, match="TFLite type 5"):
        relay.frontend.from_tflite(b.finish())



def test_tensor_names_are_kept_as_tvm_does():
    b = TFLiteModelBuilder()
    x = b.add_input("serving_default_input:0", (1, 4))
    w = b.add_const("dense/kernel", np.ones((2, 4), "float32"))
    y = b.add_tensor("Identity", (1, 2))
    b.add_operator("FULLY_CONNECTED", [x, w], [y])
    b.add_output(y)
    mod, params = relay.frontend.from_tflite(b.finish())
    assert [p.name_hint for p in mod["main"].params] == ["serving_default_input:0",
                                                         "dense/kernel"]
    assert list(params) == ["dense/kernel"]
