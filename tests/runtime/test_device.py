"""Device: TVM's device type codes, names, printing and equality."""

import pickle

import pytest

import kiln
from kiln.runtime.device import (
    Device,
    DeviceType,
    cpu,
    cuda,
    device,
    ext_dev,
    metal,
    opencl,
    vulkan,
)
from kiln.runtime.error import TVMError


def test_device_type_codes_follow_dlpack():
    names = ["kDLCPU", "kDLCUDA", "kDLCUDAHost", "kDLOpenCL", "kDLVulkan", "kDLMetal", "kDLVPI",
             "kDLROCM", "kDLExtDev", "kDLHexagon", "kDLMicroDev"]
    assert [int(DeviceType[n]) for n in names] == [1, 2, 3, 4, 7, 8, 9, 10, 12, 16, 35]


@pytest.mark.parametrize(
    "name, code",
    [("cpu", 1), ("llvm", 1), ("c", 1), ("stackvm", 1), ("cuda", 2), ("gpu", 2), ("nvptx", 2),
     ("opencl", 4), ("cl", 4), ("vulkan", 7), ("metal", 8), ("vpi", 9), ("rocm", 10),
     ("ext_dev", 12), ("hexagon", 16), ("microdev", 35)],
)
def test_names_map_to_type_codes(name, code):
    assert Device.STR2MASK[name] == code
    assert device(name, 3) == Device(code, 3)


def test_printing_matches_tvm():
    assert repr(cpu(0)) == "cpu(0)" and str(cuda(1)) == "cuda(1)"
    assert str(opencl(2)) == "opencl(2)" and str(ext_dev(0)) == "ext_dev(0)"
    assert str(vulkan(0)) == "vulkan(0)" and str(metal(0)) == "metal(0)"
    assert str(Device(1 + 128 * 2, 0)) == "remote[1]:cpu(0)"


def test_helpers_and_ints_build_the_same_device():
    assert cpu(2) == device("cpu", 2) == device(1, 2) == Device(DeviceType.kDLCPU, 2)
    assert device("llvm -mcpu=znver3") == cpu(0)
    assert kiln.cpu(0) == kiln.device("cpu") and kiln.nd.cpu is cpu


def test_equality_and_hash_use_type_and_id():
    assert cpu(0) != cpu(1) and cpu(0) != cuda(0)
    assert len({cpu(0), cpu(0), cpu(1)}) == 2
    assert (cpu(0) == "cpu(0)") is False


def test_devices_without_a_device_api_do_not_exist():
    assert cpu(0).exist and cpu(5).exist
    assert not cuda(0).exist and not vulkan(0).exist  # opencl(0) exists with pyopencl


def test_device_is_immutable_and_picklable():
    dev = cuda(3)
    with pytest.raises(AttributeError):
        dev.device_id = 0
    assert pickle.loads(pickle.dumps(dev)) == dev


def test_unknown_device_names_raise_listing_the_known_ones():
    with pytest.raises(TVMError, match="unknown device type 'tpu'.*cpu"):
        device("tpu")
    with pytest.raises(TVMError, match="must be a name or an int"):
        device(1.5)


def test_numpy_integers_are_accepted_as_codes():
    import numpy as np

    assert device(np.int64(2), np.int32(1)) == cuda(1)
    with pytest.raises(TVMError, match="bool"):
        device(True)
