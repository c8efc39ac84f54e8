"""ONNX DFT on the compiled path against NumPy's FFT in float64 (forward, one-sided, inverse,
inverse one-sided, with dft_length cutting or padding the signal)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln import relay
from kiln.relay.frontend import from_onnx
from kiln.runtime.vm import VirtualMachine

RNG = np.random.default_rng(3)


def _dft(x, length=None, **attrs):
    inputs = ["x", "n"] if length is not None else ["x"]
    inits = [helper.make_tensor("n", TensorProto.INT64, [], [length])] if length else []
    node = helper.make_node("DFT", inputs, ["y"], axis=1, **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    mod, params = from_onnx(model)
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    return VirtualMachine(exe, kiln.cpu(0)).invoke("main", x).numpy()


def _pairs(z):
    return np.stack([z.real, z.imag], -1)


@pytest.mark.parametrize("length", [None, 6, 12])
def test_forward_dft_of_a_real_signal(length):
    x = RNG.standard_normal((2, 8, 3, 1)).astype("float32")
    want = np.fft.fft(x[..., 0].astype("float64"), n=length or 8, axis=1)
    np.testing.assert_allclose(_dft(x, length), _pairs(want), rtol=1e-5, atol=1e-5)


def test_onesided_dft_keeps_the_first_half_of_the_bins():
    x = RNG.standard_normal((1, 9, 2, 1)).astype("float32")
    want = np.fft.rfft(x[..., 0].astype("float64"), axis=1)
    np.testing.assert_allclose(_dft(x, onesided=1), _pairs(want), rtol=1e-5, atol=1e-5)


def test_inverse_dft_of_a_complex_spectrum():
    z = RNG.standard_normal((1, 7, 2)) + 1j * RNG.standard_normal((1, 7, 2))
    x = _pairs(z).astype("float32")
    want = np.fft.ifft(x[..., 0].astype("float64") + 1j * x[..., 1], axis=1)
    np.testing.assert_allclose(_dft(x, inverse=1), _pairs(want), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length", [None, 9])
def test_inverse_onesided_dft_is_numpys_irfft(length):
    z = RNG.standard_normal((2, 5, 1)) + 1j * RNG.standard_normal((2, 5, 1))
    x = _pairs(z).astype("float32")
    spectrum = x[..., 0].astype("float64") + 1j * x[..., 1]
    want = np.fft.irfft(spectrum, n=length, axis=1)[..., None]
    np.testing.assert_allclose(_dft(x, length, inverse=1, onesided=1), want,
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("length, shape", [(None, (2, 10, 3, 2)), (12, (1, 9, 2, 2)),
                                           (None, (1, 15, 1, 1))])
def test_inverse_dft_rounds_as_numpys_float32_ifft(length, shape):
    # np.fft.ifft of complex64 runs pocketfft in single precision: kiln's float32 inverse
    # DFT takes the same passes and matches it bit for bit (zeros included, which a more
    # exact transform leaves as 0 where NumPy has rounding noise)
    x = RNG.standard_normal(shape).astype("float32")
    z = x[..., 0] + 1j * (x[..., 1] if shape[-1] == 2 else 0)
    want = np.fft.ifft(z.astype(np.complex64), n=length, axis=1)
    np.testing.assert_array_equal(_dft(x, length, inverse=1), _pairs(want))


def test_pocketfft_factor_order():
    from kiln.relay.frontend.onnx_fft import pocketfft_factors

    assert pocketfft_factors(10) == [2, 5]
    assert pocketfft_factors(20) == [4, 5] and pocketfft_factors(45) == [3, 3, 5]
    assert pocketfft_factors(7) is None and pocketfft_factors(32) is None
