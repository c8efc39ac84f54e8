"""Device memory through the device-API registry: OpenCL buffers (pyopencl + pocl run OpenCL
on the CPU here) behind NDArrays on ``opencl(0)``, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.runtime import ndarray as nd
from kiln.runtime.device_api import DeviceNDArray, get_device_api, has_device_api

CL = kiln.opencl(0)


def test_an_array_round_trips_through_device_memory():
    data = np.arange(12, dtype="float32").reshape(3, 4)
    a = nd.array(data, CL)
    assert isinstance(a, DeviceNDArray) and a.device == CL
    assert a.shape == (3, 4) and a.dtype == "float32" and a.nbytes == 48
    np.testing.assert_array_equal(a.numpy(), data)
    np.testing.assert_array_equal(a.copyto(kiln.cpu(0)).numpy(), data)


def test_copies_between_host_and_device_and_within_the_device():
    data = np.random.default_rng(0).random((5,)).astype("float32")
    a = nd.array(data, CL)
    b = nd.empty((5,), "float32", CL)
    np.testing.assert_array_equal(b.numpy(), np.zeros(5, "float32"))  # zero-filled
    b.copyfrom(a)
    host = nd.empty((5,), "float32").copyfrom(b)
    np.testing.assert_array_equal(host.numpy(), data)
    b.copyfrom([1, 2, 3, 4, 5])
    np.testing.assert_array_equal(np.asarray(b), [1, 2, 3, 4, 5])


def test_a_view_shares_the_buffer():
    a = nd.array(np.arange(6, dtype="int32"), CL)
    view = a._create_view((2, 3))
    np.testing.assert_array_equal(view.numpy(), np.arange(6).reshape(2, 3))
    view.copyfrom(np.full((2, 3), 7, "int32"))
    np.testing.assert_array_equal(a.numpy(), np.full(6, 7))
    with pytest.raises(kiln.TVMError, match="needs 28 bytes"):
        a._create_view((7,))


def test_the_dltensor_carries_the_device_handle():
    a = nd.array(np.ones(4, "float32"), CL)
    tensor = a.handle.contents
    assert tensor.data == get_device_api(4).buffer(tensor.data).int_ptr
    assert (tensor.device.device_type, tensor.device.device_id) == (4, 0)


def test_mismatched_copies_and_unknown_devices_are_errors():
    a = nd.array(np.ones(4, "float32"), CL)
    with pytest.raises(kiln.TVMError, match="does not match"):
        a.copyfrom(nd.array(np.ones(5, "float32")))
    with pytest.raises(kiln.TVMError, match="does not exist"):
        nd.empty((2,), "float32", kiln.opencl(7))
    with pytest.raises(BufferError, match="DLPack"):
        a.__dlpack__()
    assert has_device_api(4) and not has_device_api(2)
