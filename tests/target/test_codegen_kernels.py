"""Both native codegens (c, llvm) on hand-built TIR: results equal NumPy, bad calls raise."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln
from kiln.runtime.error import TVMError

rng = np.random.default_rng(0)


def nd(array):
    return kiln.nd.array(np.ascontiguousarray(array))


def run(built, name, *arrays):
    """Call kernel ``name`` with NumPy arrays (or scalars); return the arrays' new values."""
    _, module = built
    args = [nd(a) if isinstance(a, np.ndarray) else a for a in arrays]
    module[name](*args)
    return [a.numpy() for a in args if isinstance(a, kiln.nd.NDArray)]


@pytest.mark.parametrize("rows", [1, 7, 33])
def test_exp_scale_symbolic_rows_parallel(built, rows):
    a = rng.standard_normal((rows, 4)).astype("float32")
    _, out = run(built, "exp_scale", a, np.zeros_like(a))
    np.testing.assert_allclose(out, np.exp(a) * 2, rtol=1e-6)


def test_broadcast_add(built):
    x = rng.standard_normal((3, 16)).astype("float32")
    y = rng.standard_normal(16).astype("float32")
    *_, z = run(built, "bcast_add", x, y, np.zeros_like(x))
    np.testing.assert_allclose(z, x + y, rtol=1e-6)


def test_row_sum_with_stack_accumulator(built):
    a = rng.standard_normal((5, 7)).astype("float32")
    _, out = run(built, "row_sum", a, np.zeros(5, "float32"))
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("rows", [2, 50])
def test_transpose_through_workspace(built, rows):
    a = rng.standard_normal((rows, 3)).astype("float32")
    _, out = run(built, "transpose_ws", a, np.zeros((3, rows), "float32"))
    np.testing.assert_allclose(out, a.T, atol=1e-6)  # +1 then -1 rounds in float32


def test_vector_ramp_broadcast_and_gather(built):
    a = rng.standard_normal(64).astype("float32")
    _, scaled = run(built, "vec_scale", a, np.zeros(32, "float32"))
    np.testing.assert_allclose(scaled, a[:32] * 3, rtol=1e-6)
    _, gathered = run(built, "vec_gather", a, np.zeros(32, "float32"))
    expected = np.concatenate([a[i * 16: i * 16 + 16: 2] for i in range(4)])
    np.testing.assert_array_equal(gathered, expected)


def test_vector_select_with_mask(built):
    a = (rng.standard_normal(64) * 2).astype("float32")
    _, out = run(built, "vec_select", a, np.zeros(32, "float32"))
    x = a[:32]
    np.testing.assert_array_equal(out, np.where((x > 0) & (x < 1), x, -x))


def test_exp_accuracy_over_the_float32_range(built):
    """float32 exp (kiln_expf in C) stays within 1e-6 relative, subnormals and limits too."""
    a = np.concatenate([np.linspace(-110, 90, 4092), [np.inf, -np.inf, 0.0, -0.0]])
    a = a.astype("float32").reshape(-1, 4)
    _, out = run(built, "exp_scale", a, np.zeros_like(a))
    with np.errstate(over="ignore"):
        expected = np.exp(a) * 2
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-44)


def test_integer_ops_floor_semantics(built):
    x = np.arange(-6, 6, dtype="int32")
    _, out = run(built, "int_ops", x, np.zeros((5, 12), "int32"))
    expected = np.stack([x // 3, x % 3, np.clip(x, -2, 4), np.where(x > 0, x * 2, x - 1),
                         (x.astype("float32") * 0.5).astype("int32")])
    np.testing.assert_array_equal(out, expected)


def test_if_then_else_padding_float64(built):
    a = rng.standard_normal(6)
    _, out = run(built, "pad", a, np.zeros(10))
    np.testing.assert_array_equal(out, np.pad(a, 2))


def test_scalar_parameters(built):
    a = rng.standard_normal(8).astype("float32")
    _, out = run(built, "axpb", a, np.zeros(8, "float32"), 2.5, 3)
    np.testing.assert_allclose(out, a * 2.5 + 3, rtol=1e-6)


def test_parallel_loop_after_a_loop_with_a_let(built):
    a = rng.standard_normal(8).astype("float32")
    _, out = run(built, "let_then_parallel", a, np.zeros(8, "float32"))
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)


def test_int64_arithmetic(built):
    a = np.array([-7, 0, 5, 2**20], dtype="int64")
    _, out = run(built, "int64_ops", a, np.zeros(4, "int64"))
    np.testing.assert_array_equal(out, a * 3_000_000_000 + a % 5)


def test_import_c_micro_kernel(built):
    w = rng.standard_normal((8, 8)).astype("float32")
    x = rng.standard_normal(8).astype("float32")
    *_, y = run(built, "gemv_import_c", w, x, np.full(8, 99.0, "float32"))
    np.testing.assert_allclose(y, w @ x, rtol=1e-5)


def test_failed_assert_raises_with_message(built):
    (ok,) = run(built, "checked", np.array([1, 0, 0, 0], "float32"))
    assert ok[0] == 2.0
    with pytest.raises(TVMError, match="Q\\[0\\] must be non-negative"):
        run(built, "checked", np.array([-1, 0, 0, 0], "float32"))


# -- bad calls: a TVMError naming the argument, never a crash --------------------------------

def test_wrong_argument_count(built):
    with pytest.raises(TVMError, match=r"bcast_add: expected 3 arguments \(X, Y, Z\), got 2"):
        run(built, "bcast_add", np.zeros((3, 16), "float32"), np.zeros(16, "float32"))


def test_wrong_dtype_names_argument(built):
    with pytest.raises(TVMError, match=r"argument Y \(#1\): expected dtype float32"):
        run(built, "bcast_add", np.zeros((3, 16), "float32"), np.zeros(16, "float64"),
            np.zeros((3, 16), "float32"))


def test_wrong_ndim_names_argument(built):
    with pytest.raises(TVMError, match=r"argument X \(#0\): expected ndim 2, got 1"):
        run(built, "bcast_add", np.zeros(48, "float32"), np.zeros(16, "float32"),
            np.zeros((3, 16), "float32"))


def test_wrong_constant_shape_names_argument(built):
    with pytest.raises(TVMError, match=r"argument Z \(#2\): expected shape\[1\] == 16, got 8"):
        run(built, "bcast_add", np.zeros((3, 16), "float32"), np.zeros(16, "float32"),
            np.zeros((3, 8), "float32"))


def test_mismatched_symbolic_shape_names_argument(built):
    with pytest.raises(TVMError, match=r"argument B \(#1\): shape\[0\] must equal n; got, "
                                       r"expected = 3, 5"):
        run(built, "exp_scale", np.zeros((5, 4), "float32"), np.zeros((3, 4), "float32"))


def test_non_tensor_argument_names_it(built):
    with pytest.raises(TVMError, match=r"argument S_in \(#0\): expected a tensor"):
        run(built, "axpb", 1.0, np.zeros(8, "float32"), 2.5, 3)
    with pytest.raises(TVMError, match=r"argument shift \(#3\): expected an int"):
        run(built, "axpb", np.zeros(8, "float32"), np.zeros(8, "float32"), 2.5, 1.5)


def _dltensor(array: np.ndarray, strides=None):
    """A DLTensor over ``array`` (strides in elements, or None for compact)."""
    from kiln.runtime.dlpack import DLDataType, DLDevice, DLTensor

    shape = (ctypes.c_int64 * array.ndim)(*array.shape)
    stride_arr = (ctypes.c_int64 * array.ndim)(*strides) if strides else None
    tensor = DLTensor()
    tensor.data = array.ctypes.data
    tensor.device = DLDevice(1, 0)
    tensor.ndim = array.ndim
    tensor.dtype = DLDataType(2, 32, 1)
    tensor.shape = shape
    if stride_arr is not None:
        tensor.strides = stride_arr
    tensor.byte_offset = 0
    return tensor, (shape, stride_arr, array)


def _call_raw(func, tensors):
    """Call a packed kernel through its C address with kTVMDLTensorHandle arguments."""
    from kiln.runtime.packed_func import TVMValue

    n = len(tensors)
    values = (TVMValue * n)()
    for slot, tensor in zip(values, tensors):
        slot.v_handle = ctypes.cast(ctypes.pointer(tensor), ctypes.c_void_p)
    codes = (ctypes.c_int * n)(*([7] * n))
    ret, ret_code = TVMValue(), ctypes.c_int(0)
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    return proto(func.c_address)(ctypes.addressof(values), ctypes.addressof(codes), n,
                                 ctypes.addressof(ret), ctypes.addressof(ret_code), None)


def test_strided_tensor_is_rejected_and_compact_strides_accepted(built):
    from kiln.runtime.packed_func import get_last_error

    _, module = built
    x = np.ones((3, 16), "float32")
    y = np.ones(16, "float32")
    wide = np.zeros((3, 32), "float32")
    keep = [_dltensor(x), _dltensor(y), _dltensor(wide[:, :16], strides=[32, 1])]
    assert _call_raw(module["bcast_add"], [t for t, _ in keep]) == -1
    assert "argument Z (#2): expected a compact row-major tensor" in get_last_error()
    z = np.zeros((3, 16), "float32")
    keep[2] = _dltensor(z, strides=[16, 1])
    assert _call_raw(module["bcast_add"], [t for t, _ in keep]) == 0
    np.testing.assert_array_equal(z, np.full((3, 16), 2.0, "float32"))
