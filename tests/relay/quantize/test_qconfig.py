"""relay.quantize.qconfig (TVM's names and defaults), calibration scales, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.relay.quantize.calibrate import activation_scale, kl_divergence_scale, weight_scale
from kiln.runtime.error import TVMError


def test_defaults_are_tvms_and_contexts_nest():
    cfg = relay.quantize.current_qconfig()
    assert (cfg.nbit_input, cfg.nbit_weight, cfg.nbit_activation) == (8, 8, 32)
    assert (cfg.calibrate_mode, cfg.global_scale, cfg.weight_scale) == ("global_scale", 8.0,
                                                                         "power2")
    assert cfg.skip_conv_layers == [0] and cfg.skip_dense_layer is True
    assert (cfg.dtype_input, cfg.dtype_weight, cfg.dtype_activation) == ("int8", "int8", "int32")
    with relay.quantize.qconfig(global_scale=4.0):
        with relay.quantize.qconfig(calibrate_mode="percentile"):
            inner = relay.quantize.current_qconfig()
            assert inner.calibrate_mode == "percentile" and inner.global_scale == 8.0
        assert relay.quantize.current_qconfig().global_scale == 4.0
    assert relay.quantize.current_qconfig().global_scale == 8.0


@pytest.mark.parametrize("kwargs,match", [
    ({"calibrate_mod": "kl_divergence"}, "unknown option.*calibrate_mod"),
    ({"calibrate_mode": "entropy"}, "calibrate_mode='entropy' is not supported"),
    ({"weight_scale": "mean"}, "weight_scale"),
    ({"nbit_input": 16}, "nbit_input=16"),
    ({"dtype_input": "uint8"}, "dtype_input"),
    ({"global_scale": 0.0}, "global_scale must be positive"),
    ({"partition_conversions": "enabled"}, "partition_conversions"),
    ({"do_simulation": True}, "do_simulation"),
    ({"nbit_activation": 16}, "nbit_activation"),
])
def test_bad_qconfig(kwargs, match):
    with pytest.raises(TVMError, match=match):
        relay.quantize.qconfig(**kwargs)


def test_weight_scales():
    w = np.array([0.3, -0.7, 0.1])
    assert weight_scale(w, "power2") == 1.0
    assert weight_scale(w, "max") == pytest.approx(0.7)
    assert weight_scale(np.array([3.0]), "power2") == 4.0


def test_kl_threshold_clips_outliers_but_not_uniform_data():
    rng = np.random.default_rng(0)
    uniform = rng.uniform(-1, 1, 50000)
    assert kl_divergence_scale(uniform) == pytest.approx(1.0, abs=0.05)
    heavy = np.concatenate([rng.standard_normal(50000), [40.0, -40.0]])
    threshold = kl_divergence_scale(heavy)
    assert 2.0 < threshold < 10.0


def test_percentile_scale():
    class Cfg:
        calibrate_mode = "percentile"

    values = np.concatenate([np.linspace(-1, 1, 1_000_000), [100.0]])
    assert activation_scale(values, Cfg) == pytest.approx(1.0, abs=1e-3)


def test_calibration_modes_need_a_dataset():
    x = relay.var("x", shape=(1, 4))
    w = relay.const(np.ones((2, 4), "float32"))
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w)))
    with relay.quantize.qconfig(calibrate_mode="kl_divergence", skip_dense_layer=False):
        with pytest.raises(TVMError, match="needs a dataset"):
            relay.quantize.quantize(mod, {})
        with pytest.raises(TVMError, match="dataset is empty"):
            relay.quantize.quantize(mod, {}, dataset=[])
    with pytest.raises(TVMError, match="expects an IRModule"):
        relay.quantize.quantize(mod["main"], {})


def test_dense_realizes_to_integer_math_matching_numpy():
    """One int8 dense: the result equals NumPy's integer math on the same quantized values."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(2, 8))
    w = rng.uniform(-1, 1, (3, 8)).astype("float32")
    mod = kiln.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, relay.const(w))))
    with relay.quantize.qconfig(skip_dense_layer=False, global_scale=2.0, weight_scale="max"):
        qmod = relay.quantize.quantize(mod, {})
    value = rng.uniform(-2, 2, (2, 8)).astype("float32")
    out = relay.create_executor("graph", mod=qmod).evaluate()(value).numpy()
    step_x, step_w = 2.0 / 128, float(np.abs(w).max()) / 128
    qx = np.clip(np.floor(value / np.float32(step_x) + 0.5), -127, 127)
    qw = np.clip(np.floor(w / np.float32(step_w) + 0.5), -127, 127)
    expected = (qx @ qw.T) * np.float32(step_x * step_w)
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    np.testing.assert_allclose(out, value @ w.T, atol=0.1)


def test_debug_enabled_ops_limits_the_quantized_layers():
    x = relay.var("x", shape=(1, 1, 6, 6))
    w = relay.const(np.ones((2, 1, 3, 3), "float32"))
    d = relay.const(np.ones((3, 32), "float32"))
    y = relay.nn.dense(relay.nn.batch_flatten(relay.nn.conv2d(x, w, channels=2,
                                                              kernel_size=(3, 3))), d)
    mod = kiln.IRModule.from_expr(relay.Function([x], y))
    with relay.quantize.qconfig(skip_conv_layers=[], skip_dense_layer=False,
                                debug_enabled_ops=["nn.dense"]):
        text = relay.quantize.quantize(mod, {}).astext()
    assert text.count('out_dtype="int32"') == 1 and "nn.dense" in text


def test_control_flow_is_refused():
    x, c = relay.var("x", shape=(2,)), relay.var("c", shape=(), dtype="bool")
    body = relay.If(c, x, relay.negative(x))
    mod = kiln.IRModule.from_expr(relay.Function([x, c], body))
    with pytest.raises(TVMError, match="dataflow graphs; found a If"):
        relay.quantize.quantize(mod, {})
