"""DataType: parsing, TVM's printed form, NumPy mapping, equality with strings."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln.runtime.dtype import DataType, DataTypeCode, dtype_str
from kiln.runtime.error import TVMError


@pytest.mark.parametrize(
    "text, code, bits, lanes",
    [
        ("float32", 2, 32, 1),
        ("float16", 2, 16, 1),
        ("float64", 2, 64, 1),
        ("int8", 0, 8, 1),
        ("int64", 0, 64, 1),
        ("uint16", 1, 16, 1),
        ("bool", 1, 1, 1),
        ("bfloat16", 4, 16, 1),
        ("handle", 3, 64, 1),
        ("float32x4", 2, 32, 4),
        ("int8x4", 0, 8, 4),
        ("int4", 0, 4, 1),
    ],
)
def test_string_parses_to_the_dlpack_triple_and_prints_back(text, code, bits, lanes):
    t = DataType(text)
    assert (t.type_code, t.bits, t.lanes) == (code, bits, lanes)
    assert str(t) == text


def test_short_names_mean_32_bits_like_tvm():
    assert str(DataType("float")) == "float32"
    assert str(DataType("int")) == "int32"
    assert str(DataType("uint")) == "uint32"


def test_bool_is_uint1_and_prints_as_bool():
    t = DataType.from_fields(DataTypeCode.UINT, 1, 1)
    assert str(t) == "bool" and t.is_bool and t.is_uint and t.itemsize == 1


def test_itemsize_counts_lanes():
    assert DataType("float32x4").itemsize == 16
    assert DataType("int8").itemsize == 1
    assert DataType("float64").itemsize == 8


def test_element_of_and_with_lanes():
    t = DataType("float32x4")
    assert t.element_of == "float32" and t.element_of.lanes == 1
    assert DataType("int8").with_lanes(8) == "int8x8"


def test_equality_and_hash_agree_with_the_string():
    t = DataType("float32")
    assert t == "float32" and "float32" == t and t != "float16"
    assert t == "float" and t == DataType(t)
    assert {t: 1}["float32"] == 1
    assert hash(t) == hash("float32")
    assert t != "not a dtype"
    assert t == np.float32 and t == np.dtype("float32")


def test_kind_predicates():
    assert DataType("float16").is_float and DataType("bfloat16").is_float
    assert DataType("int32").is_int and not DataType("int32").is_uint
    assert DataType("handle").is_handle and not DataType("uint8").is_bool


@pytest.mark.parametrize(
    "np_dtype, text",
    [
        (np.float32, "float32"),
        (np.float64, "float64"),
        (np.float16, "float16"),
        (np.int8, "int8"),
        (np.int32, "int32"),
        (np.uint64, "uint64"),
        (np.bool_, "bool"),
        (ml_dtypes.bfloat16, "bfloat16"),
    ],
)
def test_numpy_dtypes_map_both_ways(np_dtype, text):
    assert str(DataType.from_numpy(np.dtype(np_dtype))) == text
    assert str(DataType(np_dtype)) == text
    assert DataType(text).numpy_dtype == np.dtype(np_dtype)


def test_vector_numpy_dtype_is_the_lane_type():
    assert DataType("float32x4").numpy_dtype == np.dtype("float32")


def test_dtype_str_canonicalizes_anything_acceptable():
    assert dtype_str("float") == "float32"
    assert dtype_str(np.dtype("int16")) == "int16"
    assert dtype_str(DataType("uint8x2")) == "uint8x2"


@pytest.mark.parametrize(
    "bad",
    ["float31", "floot32", "int128", "bfloat32", "", "float32x", "float32x0", "x4", "Float32"],
)
def test_unknown_strings_raise_naming_them(bad):
    with pytest.raises(TVMError, match="unknown data type"):
        DataType(bad)


def test_unsupported_numpy_dtypes_raise():
    with pytest.raises(TVMError, match="complex64"):
        DataType(np.complex64)
    with pytest.raises(TVMError, match="object"):
        DataType(np.dtype(object))


def test_from_fields_validates_the_triple():
    with pytest.raises(TVMError, match="unknown type code 9"):
        DataType.from_fields(9, 32, 1)
    with pytest.raises(TVMError, match="invalid data type"):
        DataType.from_fields(DataTypeCode.FLOAT, 8, 1)
    with pytest.raises(TVMError, match="invalid data type"):
        DataType.from_fields(DataTypeCode.INT, 32, 0)


def test_types_without_numpy_storage_raise_on_numpy_dtype():
    with pytest.raises(TVMError, match="int3 has no NumPy"):
        _ = DataType("int3").numpy_dtype


NARROW = {"float8_e4m3fn": 10, "float8_e4m3fnuz": 11, "float8_e5m2": 12, "float8_e5m2fnuz": 13}


@pytest.mark.parametrize("name", sorted(NARROW))
def test_float8_types_parse_print_and_map_to_ml_dtypes(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = DataType(name)
    assert t.as_tuple() == (NARROW[name], 8, 1) and str(t) == name and t.itemsize == 1
    assert t.is_float and t.is_float8 and not t.is_int
    assert t.numpy_dtype == np.dtype(getattr(ml_dtypes, name))
    assert DataType(getattr(ml_dtypes, name)) == t
    assert str(DataType(f"{name}x4")) == f"{name}x4"
    assert DataType.from_fields(NARROW[name], 8) == name


def test_tvm_v016_float8_spellings_and_bad_float8_names():
    assert DataType("e4m3_float8") == "float8_e4m3fn"
    assert DataType("e5m2_float8") == "float8_e5m2"
    with pytest.raises(TVMError, match="the 8-bit floats are"):
        DataType("float8_e4m3")
    with pytest.raises(TVMError, match="16 bits"):
        DataType.from_fields(NARROW["float8_e5m2"], 16)


@pytest.mark.parametrize("name", ["int4", "uint4", "int2", "uint2"])
def test_sub_byte_integers_store_one_byte_per_element(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = DataType(name)
    assert t.itemsize == 1 and t.numpy_dtype == np.dtype(getattr(ml_dtypes, name))
    assert DataType(getattr(ml_dtypes, name)) == name


def test_datatype_is_immutable():
    with pytest.raises(AttributeError):
        DataType("int8").bits = 16


_SCALARS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float16", "float32", "float64", "bfloat16"]


@given(st.sampled_from(_SCALARS), st.integers(min_value=1, max_value=64))
def test_printed_form_round_trips(scalar, lanes):
    text = scalar if lanes == 1 else f"{scalar}x{lanes}"
    t = DataType(text)
    assert str(t) == text and DataType(str(t)) == t
    assert t.itemsize == (t.bits * lanes + 7) // 8


def test_public_names_resolve():
    import kiln

    assert kiln.DataType is DataType and kiln.runtime.DataTypeCode is DataTypeCode
    assert DataType("float32") is DataType("float32")  # immutable, so shared
