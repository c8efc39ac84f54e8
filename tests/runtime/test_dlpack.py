"""DLPack both ways with NumPy and PyTorch: zero-copy, dtypes, ownership, capsule rules."""

import ctypes
import gc

import numpy as np
import pytest
import torch

from kiln.runtime import dlpack
from kiln.runtime import ndarray as nd
from kiln.runtime.device import cpu
from kiln.runtime.error import TVMError


def test_numpy_reads_an_ndarray_without_copying():
    a = nd.array(np.arange(6, dtype="float32").reshape(2, 3))
    view = np.from_dlpack(a)
    assert view.shape == (2, 3) and view.dtype == np.float32
    assert view.__array_interface__["data"][0] == a.data_ptr
    view[1, 2] = -1  # the consumer may write: we hand out a writable (versioned) capsule
    assert a.numpy()[1, 2] == -1


def test_ndarray_views_numpy_memory_without_copying():
    x = np.arange(8, dtype="int64").reshape(2, 4)
    a = nd.from_dlpack(x)
    assert a.shape == (2, 4) and a.dtype == "int64" and a.device == cpu(0)
    assert a.data_ptr == x.ctypes.data
    x[0, 0] = 99
    assert a.numpy()[0, 0] == 99


@pytest.mark.parametrize(
    "torch_dtype, kiln_dtype",
    [(torch.float32, "float32"), (torch.float64, "float64"), (torch.float16, "float16"),
     (torch.bfloat16, "bfloat16"), (torch.int8, "int8"), (torch.int32, "int32"),
     (torch.int64, "int64"), (torch.uint8, "uint8"), (torch.bool, "bool")],
)
def test_torch_round_trip_keeps_dtype_and_memory(torch_dtype, kiln_dtype):
    t = (torch.arange(12) % 3).to(torch_dtype).reshape(3, 4)
    a = nd.from_dlpack(t)
    assert a.dtype == kiln_dtype and a.shape == (3, 4) and a.data_ptr == t.data_ptr()
    back = torch.from_dlpack(a)
    assert back.dtype == torch_dtype and back.data_ptr() == t.data_ptr()
    assert torch.equal(back, t)


def test_torch_sees_writes_through_kiln_and_back():
    a = nd.array(np.zeros((2, 2), "float32"))
    t = torch.from_dlpack(a)
    t[0, 1] = 3.0
    assert a.numpy()[0, 1] == 3.0
    a.copyfrom(np.full((2, 2), 7.0, "float32"))
    assert float(t.sum()) == 28.0


def test_bool_is_exchanged_as_kdlbool_for_numpy():
    a = nd.array(np.array([True, False, True]))
    np.testing.assert_array_equal(np.from_dlpack(a), [True, False, True])
    assert nd.from_dlpack(np.array([False, True])).dtype == "bool"


def test_zero_dim_and_empty_tensors():
    assert nd.from_dlpack(np.array(3.5)).numpy() == 3.5
    assert nd.from_dlpack(np.zeros((0, 3), "float32")).shape == (0, 3)
    assert np.from_dlpack(nd.array(np.float32(1.25))).shape == ()


def test_dlpack_device_is_the_ndarray_device():
    assert nd.array([1.0], device=cpu(2)).__dlpack_device__() == (1, 2)


def test_raw_capsules_are_consumed_once_and_renamed():
    capsule = np.arange(3.0).__dlpack__()
    a = nd.from_dlpack(capsule)
    assert a.numpy().tolist() == [0.0, 1.0, 2.0]
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert name(capsule) == b"used_dltensor"
    with pytest.raises(TVMError, match="already consumed"):
        nd.from_dlpack(capsule)


def test_producer_memory_is_released_only_when_the_last_view_dies():
    before = dlpack.live_export_count()
    a = nd.array(np.arange(4, dtype="float32"))
    b = nd.from_dlpack(a)  # kiln -> kiln goes through a capsule too
    assert dlpack.live_export_count() == before + 1
    view = b._create_view((2,))
    del b
    gc.collect()
    assert dlpack.live_export_count() == before + 1
    del view
    gc.collect()
    assert dlpack.live_export_count() == before


def test_unconsumed_capsules_release_their_tensor():
    before = dlpack.live_export_count()
    capsule = nd.array([1.0]).__dlpack__()
    assert dlpack.live_export_count() == before + 1
    del capsule
    gc.collect()
    assert dlpack.live_export_count() == before


def test_imported_memory_outlives_the_source_object():
    x = np.arange(5, dtype="int32")
    a = nd.from_dlpack(x)
    del x
    gc.collect()
    assert a.numpy().tolist() == [0, 1, 2, 3, 4]


def test_non_contiguous_tensors_are_refused_with_advice():
    with pytest.raises(TVMError, match="contiguous"):
        nd.from_dlpack(np.zeros((4, 4), "float32")[:, ::2])
    with pytest.raises(TVMError, match="contiguous"):
        nd.from_dlpack(torch.zeros(3, 4).t())


def test_non_dlpack_objects_and_foreign_capsules_raise():
    with pytest.raises(TVMError, match="__dlpack__"):
        nd.from_dlpack([1, 2, 3])
    pycapsule_new = ctypes.pythonapi.PyCapsule_New
    pycapsule_new.restype = ctypes.py_object
    pycapsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    foreign = pycapsule_new(ctypes.addressof(ctypes.c_int(1)), b"something_else", None)
    with pytest.raises(TVMError, match="not a DLPack capsule"):
        nd.from_dlpack(foreign)


def test_export_to_another_device_is_refused():
    with pytest.raises(BufferError, match="cuda"):
        nd.array([1.0]).__dlpack__(dl_device=(2, 0))


def test_export_with_copy_true_gives_separate_memory():
    a = nd.array(np.zeros(3, "float32"))
    view = np.from_dlpack(nd.from_dlpack(a.__dlpack__(copy=True)))
    view[0] = 1
    assert a.numpy()[0] == 0


def test_read_only_memory_exports_read_only_or_not_at_all():
    frozen = np.arange(4, dtype="int64")
    frozen.flags.writeable = False
    arr = nd.NDArray._wrap(frozen, nd.DataType("int64"), nd.cpu(0))
    with pytest.raises(BufferError, match="read-only"):
        arr.__dlpack__()                                     # legacy capsule: no flag
    view = np.from_dlpack(arr)                               # NumPy asks for a versioned one
    assert not view.flags.writeable
    np.testing.assert_array_equal(view, [0, 1, 2, 3])
    copied = np.from_dlpack(arr, copy=True)
    copied[0] = 9
    np.testing.assert_array_equal(arr.numpy(), [0, 1, 2, 3])
    versioned = arr.__dlpack__(max_version=(1, 0))
    assert "versioned" in repr(versioned)
