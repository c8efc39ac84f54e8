"""fast_exp / fast_tanh / fast_erf stay within their documented error over a dense sweep.

References are float64 NumPy / math.erf. The sweep covers zero, subnormal inputs, the whole
normal range up to large magnitudes, the exp under/overflow thresholds, +-inf and NaN; one
build per target holds all three ops (and their float16 and float64 forms).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import kiln
from kiln import te, topi

TINY = float(np.finfo(np.float32).tiny)


def _sweep() -> np.ndarray:
    magnitudes = np.concatenate([np.geomspace(1e-45, TINY, 500), np.geomspace(TINY, 1e3, 200_000),
                                 [1e10, 1e30, 3.4e38]])
    specials = [0.0, np.inf, -np.inf, np.nan, 88.72283935546875, 88.7229, 88.3762626647950,
                -87.33654, -103.97208, -103.98, -104.0, 4.0, 9.0]
    values = np.concatenate([magnitudes, -magnitudes, specials]).astype("float32")
    return np.unique(values)  # NaN kept once at the end


X = _sweep()
X16 = np.linspace(-12, 12, 1001).astype("float16")
X64 = np.linspace(-30, 30, 1001)
EXACT = {
    "fast_exp": np.exp,
    "fast_tanh": np.tanh,
    "fast_erf": np.vectorize(lambda v: math.nan if math.isnan(v) else math.erf(v)),
}


def _renamed(tensor, name):
    """A uniquely named copy: the llvm target's C glue names parameters after tensors."""
    return te.compute(tensor.shape, lambda *i: tensor(*i), name=name)


@pytest.fixture(scope="module", params=["c", "llvm"])
def outputs(request):
    """name -> (float32 result, float16 result, float64 result), one build per target."""
    holders = [te.placeholder(a.shape, str(a.dtype), name=f"x_{a.dtype}")
               for a in (X, X16, X64)]
    outs = [_renamed(getattr(topi, name)(h), f"{name}_{h.dtype}")
            for name in EXACT for h in holders]
    mod = kiln.build(topi.generic.default_schedule(outs), holders + outs,
                     target=request.param, name="fast")
    arrays = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
    mod["fast"](*(kiln.nd.array(a) for a in (X, X16, X64)), *arrays)
    got = [a.numpy() for a in arrays]
    return {name: tuple(got[3 * k:3 * k + 3]) for k, name in enumerate(EXACT)}


def _errors(got: np.ndarray, x: np.ndarray, exact) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with np.errstate(over="ignore"):
        ref = exact(x.astype("float64"))
    finite = np.isfinite(ref) & (np.abs(ref) <= np.finfo(np.float32).max)
    abs_err = np.abs(got.astype("float64")[finite] - ref[finite])
    return ref, finite, abs_err


def test_fast_exp_error_bounds(outputs):
    got = outputs["fast_exp"][0]
    ref, finite, abs_err = _errors(got, X, np.exp)
    normal = np.abs(ref[finite]) >= TINY
    assert (abs_err[normal] / ref[finite][normal]).max() < 1.5e-7
    assert abs_err[~normal].max() < 3e-45
    assert np.all(got[X > 88.72283935546875] == np.inf)
    assert np.all(got[X < -103.97208404541016] == 0)
    assert np.all(got[(X > -1e-38) & (X < 1e-38)] == 1)  # subnormal and zero inputs


@pytest.mark.parametrize("name, bound, saturate_at", [("fast_tanh", 8e-7, 9.0),
                                                      ("fast_erf", 5e-7, 4.0)])
def test_fast_tanh_and_erf_error_bounds(outputs, name, bound, saturate_at):
    got = outputs[name][0]
    ref, finite, abs_err = _errors(got, X, EXACT[name])
    assert abs_err.max() < bound
    normal = np.abs(ref[finite]) >= TINY  # a subnormal result has fewer bits to be right in
    assert (abs_err[normal] / np.abs(ref[finite][normal])).max() < bound
    far = np.abs(X) >= saturate_at
    np.testing.assert_allclose(got[far], np.sign(X[far]), atol=bound)
    assert got[X == np.inf][0] == pytest.approx(1, abs=bound)
    assert got[X == -np.inf][0] == pytest.approx(-1, abs=bound)
    tiny = (np.abs(X) < 1e-30) & (X != 0)  # subnormal inputs: f(x) ~ x (times 2/sqrt(pi))
    assert np.all(np.sign(got[tiny]) == np.sign(X[tiny]))


@pytest.mark.parametrize("name", list(EXACT))
def test_nan_stays_nan(outputs, name):
    assert np.isnan(outputs[name][0][np.isnan(X)]).all()


@pytest.mark.parametrize("name", list(EXACT))
def test_float16_goes_through_float32_and_float64_is_exact(outputs, name):
    _, half, double = outputs[name]
    assert half.dtype == np.float16 and double.dtype == np.float64
    with np.errstate(over="ignore"):
        want16 = EXACT[name](X16.astype("float64")).astype("float16")
    np.testing.assert_allclose(half.astype("float64"), want16.astype("float64"), rtol=1e-3,
                               atol=1e-4)
    np.testing.assert_allclose(double, EXACT[name](X64), rtol=1e-13, atol=1e-15)
