"""tvm.testing, tvm.contrib.utils, tvm.error and tvm._ffi used the way TVM's own tests use them."""

import os

import numpy as np
import pytest
import tvm
import tvm.testing
from tvm.contrib import utils

shape = tvm.testing.parameter((2, 3), (4,), ids=["matrix", "vector"])
dtype, tolerance = tvm.testing.parameters(("float32", 1e-5), ("float64", 1e-12))
calls = []


@tvm.testing.fixture(cache_return_value=True)
def reference(shape):
    calls.append(shape)
    return np.arange(np.prod(shape), dtype="float64").reshape(shape)


def test_parameter_and_cached_fixture(shape, reference):
    assert reference.shape == shape
    reference[...] = -1  # each test gets its own copy of the cached value
    assert calls.count(shape) == 1


def test_parameters_vary_together(dtype, tolerance):
    assert (dtype, tolerance) in [("float32", 1e-5), ("float64", 1e-12)]


def test_target_runs_on_each_enabled_target(target, dev):
    assert target in [t for t, _ in tvm.testing.enabled_targets()]
    assert dev.exist and dev == tvm.cpu(0)


@tvm.testing.parametrize_targets("llvm", "cuda")
def test_named_targets_skip_missing_hardware(target, dev):
    assert target == "llvm", "cuda must have been skipped on a machine with no GPU"


@tvm.testing.known_failing_targets("c")
@tvm.testing.parametrize_targets("c")
def test_known_failing_target_is_xfail(target):
    raise AssertionError("expected failure on c")


@tvm.testing.exclude_targets("c")
def test_excluded_target_never_runs(target):
    assert target != "c"


@tvm.testing.uses_gpu
def test_uses_gpu_still_runs_without_gpu():
    assert not tvm.cuda(0).exist


@tvm.testing.requires_gpu
def test_requires_gpu_matches_device_presence():
    assert any(tvm.device(k).exist for k in ("cuda", "rocm", "opencl", "metal", "vulkan"))


@tvm.testing.requires_package("numpy")
def test_requires_package_present():
    assert np.__name__ == "numpy"


@tvm.testing.requires_package("surely_not_a_package_kiln")
def test_requires_package_missing():
    raise AssertionError("should have been skipped")


def test_assert_allclose_defaults_are_tvm_tight():
    tvm.testing.assert_allclose(tvm.nd.array(np.ones(3, "float32")), np.ones(3))
    with pytest.raises(AssertionError):
        tvm.testing.assert_allclose(np.ones(3), np.ones(3) + 1e-6)
    with pytest.raises(AssertionError):
        tvm.testing.assert_allclose(np.ones((3, 1)), np.ones(3))


def test_check_numerical_grads_accepts_true_and_rejects_wrong_gradients():
    x, y = np.array([0.5, -1.0, 2.0]), np.array([[1.0, 2.0], [3.0, 4.0]])

    def f(x, y):
        return float(np.sum(np.sin(x)) * np.sum(y**2))

    # d/dx and d/dy written by hand: the oracle is calculus, not the function under test.
    gx, gy = np.cos(x) * np.sum(y**2), 2 * y * np.sum(np.sin(x))
    tvm.testing.check_numerical_grads(f, [x, y], [gx, gy])
    tvm.testing.check_numerical_grads(f, {"x": x, "y": y}, {"x": gx, "y": gy})
    with pytest.raises(AssertionError, match="wrt 'y' differ too much"):
        tvm.testing.check_numerical_grads(f, {"x": x, "y": y}, {"x": gx, "y": gy * 1.5})
    with pytest.raises(AssertionError, match="unexpected shape"):
        tvm.testing.check_numerical_grads(f, [x, y], [gx, gy.ravel()])


def test_ffi_testing_functions():
    assert tvm.testing.echo("abc") == "abc"
    assert tvm.testing.nop(1, 2) is None
    dev = tvm.cpu(0)
    assert tvm.testing.device_test(dev, 1, 0) == dev
    with pytest.raises(tvm.TVMError, match=r"expected device \(2, 0\)"):
        tvm.testing.device_test(dev, 2, 0)
    held = tvm.nd.array(np.zeros(2))
    before = tvm.testing.object_use_count(held)
    alias = held
    assert tvm.testing.object_use_count(held) == before + 1
    del alias


def test_tempdir_lifecycle():
    temp = utils.tempdir()
    path = temp.relpath("a.txt")
    with open(path, "w") as f:
        f.write("x")
    assert temp.listdir() == ["a.txt"] and (temp / "a.txt").exists()
    root = temp.temp_dir
    del temp
    assert not os.path.exists(root)
    kept = utils.tempdir(keep_for_debug=True)
    kept.remove()
    assert os.path.isdir(kept.temp_dir)
    os.rmdir(kept.temp_dir)


def test_error_classes_and_register_error():
    assert issubclass(tvm.error.OpNotImplemented, (tvm.error.OpError, NotImplementedError))
    assert issubclass(tvm.error.OpAttributeInvalid, AttributeError)
    assert issubclass(tvm.error.DiagnosticError, tvm.error.TVMError)
    assert issubclass(tvm.error.RPCSessionTimeoutError, TimeoutError)

    @tvm.error.register_error
    class MyKilnTestError(tvm.error.TVMError):
        pass

    err = tvm.error.create_ffi_error("MyKilnTestError: something broke")
    assert isinstance(err, MyKilnTestError)
    assert type(tvm.error.create_ffi_error("no type here")) is tvm.error.TVMError
    with pytest.raises(TypeError, match="exception class"):
        tvm.error.register_error("NotAnError", int)


def test_ffi_registration_and_init_api():
    import sys
    import types

    @tvm._ffi.register_func("kiln_compat_test.triple")
    def triple(x):
        return 3 * x

    assert tvm._ffi.get_global_func("kiln_compat_test.triple")(4) == 12
    module = types.ModuleType("kiln_compat_test_api")
    sys.modules[module.__name__] = module
    try:
        tvm._ffi._init_api("tvm.kiln_compat_test", module.__name__)
        assert module.triple(5) == 15
    finally:
        del sys.modules[module.__name__]
        tvm.runtime.registry.remove_global_func("kiln_compat_test.triple")
    with pytest.raises(ValueError, match="not imported"):
        tvm._ffi._init_api("kiln_compat_test", "no_such_module_kiln")


def test_cuda_graph_behaves_as_tvm_without_cuda_graphs():
    from tvm.contrib.cuda_graph import cuda_graph_executor

    with pytest.raises(ValueError, match="USE_GRAPH_EXECUTOR_CUGRAPH"):
        cuda_graph_executor.create("{}", None, tvm.cuda(0))
    with pytest.raises(tvm.TVMError, match="needs a CUDA graph executor module"):
        cuda_graph_executor.GraphModuleCudaGraph(None)
