"""float32 tanh on the LLVM target: vector IR (no libm call per lane), within 2 ulp of NumPy's
float64 tanh, with tanh's special values."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import te


def build_tanh(n: int, dtype: str):
    x = te.placeholder((n,), name="x", dtype=dtype)
    y = te.compute((n,), lambda i: te.tanh(x[i]), name="y")
    s = te.create_schedule(y.op)
    _, inner = s[y].split(y.op.axis[0], factor=8)
    s[y].vectorize(inner)
    return kiln.build(s, [x, y], target="llvm")


def run(f, values: np.ndarray) -> np.ndarray:
    out = kiln.nd.empty(values.shape, str(values.dtype))
    f(kiln.nd.array(values), out)
    return out.numpy()


def test_float32_tanh_is_inline_vector_code():
    ir = build_tanh(64, "float32").get_source("ll")
    assert "tanhf" not in ir


def test_float32_tanh_within_two_ulp():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4096) * 3, rng.uniform(-0.7, 0.7, 4096),
                        np.logspace(-30, 1.3, 2048), -np.logspace(-30, 1.3, 2048),
                        [0.625, -0.625, np.nextafter(np.float32(0.625), np.float32(0))]])
    x = x.astype("float32")
    x = np.resize(x, 8 * (len(x) // 8))
    got = run(build_tanh(len(x), "float32"), x).astype(np.float64)
    ref = np.tanh(x.astype(np.float64))
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - ref) / ulp) <= 2.0


def test_float32_tanh_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 100.0, -100.0, 1e-40], dtype="float32")
    got = run(build_tanh(len(x), "float32"), x)
    np.testing.assert_array_equal(got[[0, 1, 3, 5, 6]], [1.0, -1.0, 0.0, 1.0, -1.0])
    assert np.isnan(got[2])
    assert np.signbit(got[4]) and got[4] == 0.0
    assert got[7] == np.float32(1e-40)  # a subnormal: tanh(x) == x


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_widths_keep_libm_accuracy(dtype):
    x = np.linspace(-6, 6, 64).astype(dtype)
    got = run(build_tanh(64, dtype), x)
    rtol = 1e-12 if dtype == "float64" else 1e-3
    np.testing.assert_allclose(got, np.tanh(x.astype(np.float64)), rtol=rtol, atol=0)
