"""relay.quantize's realize on integer concatenations and average pools (TVM's
ConcatenateRealize / AvgPoolRealize): the realized graph stays integer through them and
computes what NumPy computes on the same integers."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor

RNG = np.random.default_rng(0)


def weight(*shape):
    return relay.const((RNG.standard_normal(shape) * 0.3).astype("float32"))


def conv_relu(h, channels, cin, size):
    return relay.nn.relu(relay.nn.conv2d(h, weight(channels, cin, size, size),
                                         padding=(size // 2,) * 2, channels=channels,
                                         kernel_size=(size, size)))


def run(mod, x):
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input("data", x)
    m.run()
    return m.get_output(0).numpy()


def quantized(func):
    mod = kiln.IRModule.from_expr(func)
    with relay.quantize.qconfig(skip_conv_layers=[], skip_dense_layer=False):
        return mod, relay.quantize.quantize(mod, {})


def calls(mod, name):
    from kiln.relay.expr_functor import post_order_visit

    found = []
    post_order_visit(mod["main"].body, lambda n: found.append(n) if isinstance(n, relay.Call)
                     and getattr(n.op, "name", "") == name else None)
    return found


def test_concatenate_of_two_scales_requantizes_to_the_finer():
    """A branch at the conv's accumulator scale and one requantized to the next layer's
    input: int32 at the finer scale, then the average pool in int32."""
    x = relay.var("data", shape=(2, 1, 8, 8))
    h = conv_relu(x, 8, 1, 3)
    cat = relay.concatenate([conv_relu(h, 8, 8, 3), conv_relu(h, 4, 8, 1)], axis=1)
    pool = relay.nn.avg_pool2d(cat, pool_size=(2, 2), strides=(2, 2))
    y = relay.nn.global_avg_pool2d(conv_relu(pool, 16, 12, 3))
    mod, qmod = quantized(relay.Function([x], relay.nn.batch_flatten(y)))
    for name in ("concatenate", "nn.avg_pool2d", "nn.global_avg_pool2d"):
        (call,) = calls(qmod, name)
        assert str(call.checked_type.dtype) == "int32", name
    xv = RNG.uniform(0, 1, (2, 1, 8, 8)).astype("float32")
    want, got = run(mod, xv), run(qmod, xv)
    assert np.abs(got - want).max() <= 0.1 * np.abs(want).max()


def test_concatenate_with_a_float_field_stays_float():
    """A field the realizer keeps in float (a sigmoid) makes the concatenation float."""
    x = relay.var("data", shape=(1, 1, 6, 6))
    h = conv_relu(x, 4, 1, 3)
    cat = relay.concatenate([h, relay.sigmoid(x)], axis=1)
    _, qmod = quantized(relay.Function([x], cat))
    (call,) = calls(qmod, "concatenate")
    assert str(call.checked_type.dtype) == "float32"


@pytest.mark.parametrize("executor", ["graph", "debug"])
def test_integer_average_pools_truncate_like_numpy(executor):
    """int32 averages (what realize produces) divide with truncation toward zero, as TVM's
    integer ``div``, on compiled kernels and the interpreter alike."""
    x = relay.var("data", shape=(2, 3, 4, 5), dtype="int32")
    y = relay.Tuple([relay.nn.global_avg_pool2d(x),
                     relay.nn.avg_pool2d(x, pool_size=(2, 2), strides=(2, 1))])
    mod = kiln.IRModule.from_expr(relay.Function([x], y))
    xv = RNG.integers(-1000, 1000, (2, 3, 4, 5)).astype("int32")
    out = relay.create_executor(executor, mod=mod, target="llvm").evaluate()(xv)
    whole = np.trunc(xv.sum(axis=(2, 3), keepdims=True) / 20).astype("int32")
    windows = np.lib.stride_tricks.sliding_window_view(xv, (2, 2), axis=(2, 3))[:, :, ::2]
    window = np.trunc(windows.sum(axis=(-2, -1)) / 4).astype("int32")
    np.testing.assert_array_equal(out[0].numpy(), whole)
    np.testing.assert_array_equal(out[1].numpy(), window)
