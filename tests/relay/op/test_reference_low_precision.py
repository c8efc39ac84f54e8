"""Reference (interpreter) rules on 16-bit floats against NumPy in float32.

ml_dtypes' bfloat16 has NumPy kind ``V``, not ``f``: a rule that picked its accumulator by
``dtype.kind == "f"`` cast bfloat16 operands to int64 and returned zeros.
"""

import ml_dtypes
import numpy as np
import pytest

from kiln import relay

BF16 = ml_dtypes.bfloat16


def _run(expr_of, *arrays):
    params = [relay.var(f"x{i}", shape=a.shape, dtype=str(a.dtype)) for i, a in enumerate(arrays)]
    func = relay.Function(params, expr_of(*params))
    return relay.create_executor("debug").evaluate(func)(*arrays).numpy()


def _close(got, want, dtype):
    # one rounding of the float32 result to the 16-bit type, plus one ulp
    tol = float(ml_dtypes.finfo(dtype).eps) * 2
    np.testing.assert_allclose(got.astype("float32"), want.astype(dtype).astype("float32"),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_matrix_products_accumulate_16_bit_floats_as_floats(dtype):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (2, 3, 5)).astype(dtype)
    b = rng.uniform(-1, 1, (2, 5, 4)).astype(dtype)
    f32 = lambda x: x.astype("float32")  # noqa: E731
    _close(_run(lambda x, y: relay.nn.batch_matmul(x, y, transpose_b=False), a, b),
           f32(a) @ f32(b), dtype)
    w = rng.uniform(-1, 1, (4, 5)).astype(dtype)
    _close(_run(relay.nn.dense, a[0], w), f32(a[0]) @ f32(w).T, dtype)


def test_conv2d_and_resize_keep_bfloat16_fractions():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, 2, 5, 5)).astype(BF16)
    w = rng.uniform(-1, 1, (3, 2, 3, 3)).astype(BF16)
    got = _run(lambda d, k: relay.nn.conv2d(d, k, padding=(1, 1)), x, w)
    xf, wf = x.astype("float32"), w.astype("float32")
    pad = np.pad(xf, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 5, 5), "float32")
    for i in range(5):
        for j in range(5):
            want[0, :, i, j] = np.tensordot(wf, pad[0, :, i:i + 3, j:j + 3], axes=3)
    _close(got, want, BF16)
    up = _run(lambda d: relay.image.resize2d(d, (10, 10), method="linear"), x)
    assert np.abs(up.astype("float32") - np.round(up.astype("float32"))).max() > 0.01
