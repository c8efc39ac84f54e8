"""NDArray: allocation, alignment, copies, views, the DLTensor seen from C, errors."""

import ctypes
import gc
import pickle

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.runtime import ndarray as nd
from kiln.runtime.device import cpu, cuda
from kiln.runtime.error import TVMError
from kiln.runtime.ndarray import DLTensor, NDArray


def test_kiln_nd_is_this_module():
    assert kiln.nd is nd and kiln.nd.array is nd.array and kiln.runtime.NDArray is NDArray


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int32", "int64",
                                   "uint8", "uint16", "uint32", "uint64", "bool"])
def test_array_round_trips_numpy_data(dtype, rng):
    data = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    a = nd.array(data)
    assert a.shape == (3, 5) and a.dtype == dtype and a.device == cpu(0)
    np.testing.assert_array_equal(a.numpy(), data)
    assert a.numpy().dtype == np.dtype(dtype)


def test_storage_is_64_byte_aligned():
    for n in range(1, 40):
        assert nd.empty((n,), "int8").data_ptr % 64 == 0
        assert nd.array(np.zeros(n, "float64")[1:]).data_ptr % 64 == 0


def test_empty_is_zero_filled_with_shape_dtype_device():
    a = nd.empty((2, 0, 3), "int16", cpu(3))
    assert (a.shape, a.dtype, a.device, a.nbytes) == ((2, 0, 3), "int16", cpu(3), 0)
    b = nd.empty((4,))
    assert b.dtype == "float32" and not b.numpy().any()


def test_zero_dim_array():
    a = nd.array(np.float32(2.5))
    assert a.shape == () and a.ndim == 0 and a.numpy() == np.float32(2.5)
    assert a.handle.contents.ndim == 0


def test_array_infers_numpy_dtypes_and_converts_on_request():
    assert nd.array([1, 2]).dtype == "int64"
    assert nd.array([1.0]).dtype == "float64"
    assert nd.array([True]).dtype == "bool"
    a = nd.array([1.7, -2.2], dtype="int32")
    np.testing.assert_array_equal(a.numpy(), np.array([1.7, -2.2]).astype("int32"))
    b = nd.array(a, dtype="float32")
    assert b.dtype == "float32" and b.numpy().tolist() == [1.0, -2.0]


def test_bfloat16_uses_ml_dtypes():
    a = nd.array(np.array([1.0, 0.1, -3.5], "float32"), dtype="bfloat16")
    expected = np.array([1.0, 0.1, -3.5], "float32").astype(ml_dtypes.bfloat16)
    assert a.dtype == "bfloat16" and a.numpy().dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(a.numpy().view(np.uint16), expected.view(np.uint16))


def test_bfloat16_without_ml_dtypes_rounds_to_nearest_even_bits(monkeypatch):
    from kiln.runtime import ndarray as module

    monkeypatch.setattr(module, "BFLOAT16_NUMPY", None)
    data = np.array([1.0, 0.1, -3.5, 1.00390625, np.nan], "float32")
    bits = module._to_storage(data, kiln.DataType("bfloat16"), "unsafe")
    expected = data.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(bits[:4], expected[:4])
    assert bits[4] == 0x7FC0


def test_vector_dtypes_keep_lanes_as_a_trailing_axis():
    data = np.arange(12, dtype="float32").reshape(3, 4)
    a = nd.array(data, dtype="float32x4")
    assert a.shape == (3,) and a.dtype == "float32x4" and a.nbytes == 48
    np.testing.assert_array_equal(a.numpy(), data)
    with pytest.raises(TVMError, match="4 lanes"):
        nd.array(np.zeros((3, 3), "float32"), dtype="float32x4")


def test_numpy_returns_a_copy():
    a = nd.array(np.zeros(3, "float32"))
    a.numpy()[0] = 5
    assert a.numpy()[0] == 0
    np.asarray(a)[0] = 5
    assert a.numpy()[0] == 0
    np.asarray(a, copy=False)[0] = 5  # explicitly asked for the memory
    assert a.numpy()[0] == 5
    assert a.asnumpy()[0] == 5


def test_copyfrom_numpy_list_and_ndarray():
    a = nd.empty((2, 2), "float32")
    assert a.copyfrom([[1, 2], [3, 4]]) is a
    np.testing.assert_array_equal(a.numpy(), [[1, 2], [3, 4]])
    a.copyfrom(np.full((2, 2), 0.5))  # float64 into float32 keeps its kind: allowed
    assert a.numpy()[1, 1] == np.float32(0.5)
    b = nd.empty((2, 2), "float32")
    b.copyfrom(a)
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    b[:] = np.ones((2, 2), "float32")
    assert b.numpy().sum() == 4


def test_copyfrom_rejects_shape_and_kind_mismatches():
    a = nd.empty((2, 3), "int32")
    with pytest.raises(TVMError, match=r"shape \(3, 2\) does not match.*\(2, 3\)"):
        a.copyfrom(np.zeros((3, 2), "int32"))
    with pytest.raises(TVMError, match="float64 data in a int32"):
        a.copyfrom(np.zeros((2, 3)))
    with pytest.raises(TVMError, match="does not match destination"):
        a.copyfrom(nd.empty((2, 3), "int64"))
    with pytest.raises(TVMError, match="whole-array"):
        a[0] = 1


def test_copyto_device_and_ndarray():
    a = nd.array(np.arange(6, dtype="float32"))
    b = a.copyto(cpu(1))
    assert b.device == cpu(1) and b.data_ptr != a.data_ptr
    np.testing.assert_array_equal(b.numpy(), a.numpy())
    c = nd.empty((6,), "float32")
    assert a.copyto(c) is c
    np.testing.assert_array_equal(c.numpy(), a.numpy())
    with pytest.raises(TVMError, match="Device or an NDArray"):
        a.copyto("cpu")


def test_allocating_on_a_device_this_machine_lacks_raises():
    with pytest.raises(TVMError, match=r"no device API for cuda\(0\) on this machine"):
        nd.empty((2,), "float32", cuda(0))
    with pytest.raises(TVMError, match=r"cuda\(1\)"):
        nd.array([1.0], device=cuda(1))
    with pytest.raises(TVMError, match=r"cuda\(0\)"):
        nd.array([1.0]).copyto(cuda(0))


def test_create_view_shares_memory_and_must_fit():
    a = nd.array(np.arange(12, dtype="float32"))
    v = a._create_view((3, 4))
    assert v.shape == (3, 4) and v.data_ptr == a.data_ptr
    v.copyfrom(np.ones((3, 4), "float32"))
    assert a.numpy().sum() == 12
    bits = a._create_view((2,), "int32")
    assert bits.numpy().tolist() == [np.float32(1).view(np.int32)] * 2
    with pytest.raises(TVMError, match="needs 52 bytes but the NDArray has only 48"):
        a._create_view((13,))
    with pytest.raises(TVMError, match="needs 96 bytes"):
        a._create_view((12,), "float64")


def test_view_keeps_memory_alive_after_the_base_dies():
    a = nd.array(np.arange(4, dtype="int32"))
    v = a._create_view((2,))
    del a
    gc.collect()
    assert v.numpy().tolist() == [0, 1]


def test_dltensor_seen_from_c_describes_the_array():
    a = nd.array(np.arange(6, dtype="int16").reshape(2, 3), device=cpu(2))
    handle = a.handle
    t = handle.contents
    assert isinstance(t, DLTensor) and t.data == a.data_ptr
    assert (t.device.device_type, t.device.device_id, t.ndim) == (1, 2, 2)
    assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (0, 16, 1)
    assert [t.shape[0], t.shape[1]] == [2, 3] and not t.strides and t.byte_offset == 0
    assert a.handle is handle  # built once
    # Read the data through the raw pointer, as C would.
    raw = ctypes.cast(ctypes.c_void_p(t.data), ctypes.POINTER(ctypes.c_int16))
    assert [raw[i] for i in range(6)] == list(range(6))
    assert ctypes.sizeof(DLTensor) == 48


def test_from_dltensor_ptr_views_c_memory_without_copying():
    backing = (ctypes.c_float * 6)(*range(6))
    shape = (ctypes.c_int64 * 2)(2, 3)
    t = DLTensor()
    t.data = ctypes.addressof(backing)
    t.device.device_type, t.device.device_id = 1, 0
    t.ndim = 2
    t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    view = NDArray.from_dltensor_ptr(ctypes.addressof(t), owner=backing)
    assert view.shape == (2, 3) and view.dtype == "float32"
    np.testing.assert_array_equal(view.numpy(), np.arange(6, dtype="float32").reshape(2, 3))
    view.copyfrom(np.zeros((2, 3), "float32"))
    assert list(backing) == [0.0] * 6


def test_from_dltensor_ptr_honours_strides_and_byte_offset():
    backing = np.arange(24, dtype="int32")
    shape = (ctypes.c_int64 * 2)(3, 2)
    strides = (ctypes.c_int64 * 2)(4, 2)  # elements
    t = DLTensor()
    t.data = backing.ctypes.data
    t.byte_offset = 4  # start at element 1
    t.device.device_type = 1
    t.ndim = 2
    t.dtype.code, t.dtype.bits, t.dtype.lanes = 0, 32, 1
    t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    view = NDArray.from_dltensor_ptr(ctypes.addressof(t), owner=backing)
    np.testing.assert_array_equal(view.numpy(), backing[1:].reshape(-1)[: 12].reshape(3, 4)[:, ::2])
    assert not view.is_contiguous()
    assert [view.handle.contents.strides[i] for i in range(2)] == [4, 2]


def test_from_dltensor_ptr_rejects_bad_tensors():
    t = DLTensor()
    t.device.device_type = 1
    t.ndim = -1
    with pytest.raises(TVMError, match="invalid ndim"):
        NDArray.from_dltensor_ptr(ctypes.addressof(t))
    t.ndim = 1
    t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    with pytest.raises(TVMError, match="NULL shape"):
        NDArray.from_dltensor_ptr(ctypes.addressof(t))
    t.device.device_type = 4
    with pytest.raises(TVMError, match="opencl"):
        NDArray.from_dltensor_ptr(ctypes.addressof(t))
    with pytest.raises(TVMError, match="NULL"):
        NDArray.from_dltensor_ptr(0)


def test_bad_shapes_and_dtypes_raise():
    with pytest.raises(TVMError, match="negative"):
        nd.empty((2, -1))
    with pytest.raises(TVMError, match="sequence of ints"):
        nd.empty((2.5,))
    with pytest.raises(TVMError, match="unknown data type 'float31'"):
        nd.empty((2,), "float31")
    with pytest.raises(TVMError, match="object"):
        nd.array(np.array([object()]))
    with pytest.raises(TVMError, match="kiln.nd.array"):
        NDArray()


def test_repr_like_tvm():
    text = repr(nd.array(np.zeros((2, 3), "float32"), device=cpu(1)))
    assert text.startswith("<kiln.nd.NDArray shape=(2, 3), cpu(1)>\narray([[0., 0., 0.],")


def test_identity_is_reference_equality():
    a = nd.array([1.0])
    assert a.same_as(a) and not a.same_as(nd.array([1.0]))
    assert nd.is_ndarray(a) and not nd.is_ndarray(np.zeros(1))


def test_pickle_round_trip():
    a = nd.array(np.arange(3, dtype="uint8"), device=cpu(1))
    b = pickle.loads(pickle.dumps(a))
    assert b.device == cpu(1) and b.dtype == "uint8" and b.numpy().tolist() == [0, 1, 2]


def test_only_the_global_memory_scope_exists():
    assert nd.empty((2,), "float32", cpu(0), mem_scope="global").shape == (2,)
    with pytest.raises(TVMError, match="memory scope 'texture'"):
        nd.empty((2,), "float32", cpu(0), mem_scope="texture")


def test_read_only_memory_refuses_copyfrom():
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    view = NDArray._wrap(frozen, kiln.DataType("float64"), cpu(0))
    with pytest.raises(TVMError, match="read-only"):
        view.copyfrom([1.0, 2.0, 3.0])
