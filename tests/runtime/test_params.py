"""NDArray and params blobs: byte-exact against the TVM layout built by hand from the spec."""

import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.runtime import ndarray as nd
from kiln.runtime.binary import BinaryReader
from kiln.runtime.error import TVMError
from kiln.runtime.params import (
    load_ndarray,
    load_param_dict,
    load_param_dict_from_file,
    save_ndarray,
    save_param_dict,
    save_param_dict_to_file,
)

NDARRAY_MAGIC = struct.pack("<Q", 0xDD5E40F096B4A13F)
LIST_MAGIC = struct.pack("<Q", 0xF7E58D4F05049CB7)
RESERVED = struct.pack("<Q", 0)
CPU0 = struct.pack("<ii", 1, 0)


def tensor_blob(code, bits, lanes, shape, data, size=None):
    """An NDArray blob, written field by field as TVM's SaveDLTensor does."""
    size = len(data) if size is None else size
    return (NDARRAY_MAGIC + RESERVED + CPU0 + struct.pack("<i", len(shape))
            + struct.pack("<BBH", code, bits, lanes) + struct.pack(f"<{len(shape)}q", *shape)
            + struct.pack("<q", size) + data)


def string(s):
    return struct.pack("<Q", len(s)) + s


FLOAT_2X2 = tensor_blob(2, 32, 1, (2, 2), struct.pack("<4f", 1, 2, 3, 4))
BF16_PAIR = tensor_blob(4, 16, 1, (2,), struct.pack("<2H", 0x3F80, 0xC000))  # 1.0, -2.0
INT_SCALAR = tensor_blob(0, 32, 1, (), struct.pack("<i", -7))
BOOL_3 = tensor_blob(1, 1, 1, (3,), bytes([1, 0, 1]))
PARAMS = (LIST_MAGIC + RESERVED + struct.pack("<Q", 2) + string(b"weight") + string(b"b")
          + struct.pack("<Q", 2) + FLOAT_2X2 + INT_SCALAR)


def test_float_array_blob_matches_tvm_bytes():
    assert save_ndarray(nd.array(np.array([[1, 2], [3, 4]], "float32"))) == FLOAT_2X2
    a = load_ndarray(BinaryReader(FLOAT_2X2))
    assert a.dtype == "float32" and a.numpy().tolist() == [[1, 2], [3, 4]]


def test_bfloat16_blob_matches_tvm_bytes():
    a = nd.array(np.array([1.0, -2.0], ml_dtypes.bfloat16))
    assert save_ndarray(a) == BF16_PAIR
    loaded = load_ndarray(BinaryReader(BF16_PAIR))
    assert loaded.dtype == "bfloat16" and loaded.numpy().astype("float32").tolist() == [1, -2]


def test_zero_dim_blob_has_no_shape_entries():
    assert save_ndarray(nd.array(np.int32(-7))) == INT_SCALAR
    loaded = load_ndarray(BinaryReader(INT_SCALAR))
    assert loaded.shape == () and loaded.numpy() == -7


def test_bool_is_uint1_with_one_byte_per_element():
    assert save_ndarray(nd.array(np.array([True, False, True]))) == BOOL_3
    assert load_ndarray(BinaryReader(BOOL_3)).numpy().tolist() == [True, False, True]


def test_vector_dtype_byte_size_ignores_lanes_like_tvm():
    a = nd.array(np.arange(8, dtype="float32").reshape(2, 4), dtype="float32x4")
    expected = tensor_blob(2, 32, 4, (2,), struct.pack("<2f", 0, 1))
    assert save_ndarray(a) == expected
    loaded = load_ndarray(BinaryReader(expected))
    assert loaded.dtype == "float32x4" and loaded.numpy()[0, :2].tolist() == [0, 1]


def test_params_blob_matches_tvm_bytes_and_keeps_order():
    params = {"weight": np.array([[1, 2], [3, 4]], "float32"), "b": nd.array(np.int32(-7))}
    assert save_param_dict(params) == PARAMS
    loaded = load_param_dict(PARAMS)
    assert list(loaded) == ["weight", "b"]
    assert loaded["weight"].numpy().tolist() == [[1, 2], [3, 4]] and loaded["b"].numpy() == -7
    assert all(isinstance(v, nd.NDArray) for v in loaded.values())


def test_empty_params_blob():
    empty = LIST_MAGIC + RESERVED + struct.pack("<Q", 0) + struct.pack("<Q", 0)
    assert save_param_dict({}) == empty and load_param_dict(empty) == {}


def test_files_round_trip(tmp_path):
    path = tmp_path / "deploy.params"
    save_param_dict_to_file({"x": np.arange(3, dtype="int8")}, path)
    assert path.read_bytes() == save_param_dict({"x": np.arange(3, dtype="int8")})
    assert load_param_dict_from_file(path)["x"].numpy().tolist() == [0, 1, 2]


@pytest.mark.parametrize("cut", range(len(PARAMS)))
def test_every_truncation_raises(cut):
    with pytest.raises(TVMError, match="params blob"):
        load_param_dict(PARAMS[:cut])


def _replace(blob, offset, data):
    return blob[:offset] + data + blob[offset + len(data):]


NAMES_END = 8 + 8 + 8 + 14 + 9  # magic, reserved, count, "weight", "b"
TENSOR0 = NAMES_END + 8


@pytest.mark.parametrize(
    "tampered, message",
    [
        (_replace(PARAMS, 0, b"\x00"), "bad magic"),
        (_replace(PARAMS, NAMES_END, struct.pack("<Q", 3)), "2 names but 3 arrays"),
        (_replace(PARAMS, TENSOR0, b"\xff"), "bad NDArray magic"),
        (_replace(PARAMS, TENSOR0 + 16, struct.pack("<i", 2)), "device type 2"),
        (_replace(PARAMS, TENSOR0 + 24, struct.pack("<i", -1)), "ndim -1"),
        (_replace(PARAMS, TENSOR0 + 24, struct.pack("<i", 1000)), "ndim 1000"),
        (_replace(PARAMS, TENSOR0 + 28, struct.pack("<B", 9)), "type code 9"),
        (_replace(PARAMS, TENSOR0 + 29, struct.pack("<B", 31)), "31 bits"),
        (_replace(PARAMS, TENSOR0 + 32, struct.pack("<q", -2)), "negative dimension"),
        (_replace(PARAMS, TENSOR0 + 48, struct.pack("<q", 15)), "data_byte_size 15"),
        (_replace(PARAMS, TENSOR0 + 48, struct.pack("<q", 1 << 60)), "data_byte_size"),
        (PARAMS + b"\x00", "trailing"),
        (_replace(PARAMS, 32, b"\xff"), "not valid UTF-8"),
    ],
)
def test_tampered_blobs_raise_a_clear_error(tampered, message):
    with pytest.raises(TVMError, match=message):
        load_param_dict(tampered)


def test_duplicate_names_are_refused():
    blob = (LIST_MAGIC + RESERVED + struct.pack("<Q", 2) + string(b"a") + string(b"a")
            + struct.pack("<Q", 2) + INT_SCALAR + INT_SCALAR)
    with pytest.raises(TVMError, match="'a' appears twice"):
        load_param_dict(blob)


def test_non_bytes_and_non_dict_inputs_raise():
    with pytest.raises(TVMError, match="expected bytes"):
        load_param_dict("not bytes")
    with pytest.raises(TVMError, match="dict of arrays"):
        save_param_dict([np.zeros(1)])


_DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8",
           "uint16", "uint32", "uint64", "bool", "bfloat16"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_DTYPES), st.lists(st.integers(0, 4), max_size=3), st.integers(0, 2**32))
def test_any_array_round_trips(dtype, shape, seed):
    data = np.random.default_rng(seed).standard_normal(shape) * 50
    a = nd.array(data, dtype=dtype)
    b = load_param_dict(save_param_dict({"p": a}))["p"]
    assert b.dtype == dtype and b.shape == tuple(shape)
    assert b.numpy().tobytes() == a.numpy().tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(PARAMS) - 1), st.integers(0, 255))
def test_any_single_byte_corruption_loads_or_raises_tvmerror(offset, value):
    blob = _replace(PARAMS, offset, bytes([value]))
    try:
        load_param_dict(blob)
    except TVMError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_tvmerror(garbage):
    with pytest.raises(TVMError):
        load_param_dict(garbage)


def test_a_tampered_lane_count_cannot_force_a_huge_allocation():
    blob = tensor_blob(2, 32, 60000, (1 << 17,), bytes(4 << 17))
    with pytest.raises(TVMError, match="too big"):
        load_ndarray(BinaryReader(blob))


@pytest.mark.parametrize("shape", [(0, 1 << 62, 1 << 62), (1 << 40, 0, 1 << 40), (0, 1 << 61)])
def test_shapes_no_array_can_have_are_refused_before_numpy_sees_them(shape):
    # The blob holds 0 bytes, matching the 0 elements, but NumPy refuses such shapes.
    with pytest.raises(TVMError, match=r"NDArray shape .* is too large for any array"):
        load_ndarray(BinaryReader(tensor_blob(2, 32, 1, shape, b"")))


def test_public_names_resolve_through_kiln_runtime():
    import kiln

    assert kiln.runtime.save_param_dict is save_param_dict
    assert kiln.runtime.load_param_dict is load_param_dict
