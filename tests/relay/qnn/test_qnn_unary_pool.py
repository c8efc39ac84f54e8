"""qnn unary ops, leaky_relu, avg_pool2d, conv2d_transpose and relay.qnn.transform.Legalize,
against NumPy float math (within one integer step where float functions round differently)
and NumPy integer math."""

from __future__ import annotations

import math

import numpy as np
import pytest
from qnn_reference import conv2d_nchw, numpy_requantize, run

import kiln
from kiln import relay
from kiln.relay.expr_functor import ExprVisitor
from kiln.runtime.error import TVMError
from kiln.target import Target

_ERF = np.vectorize(math.erf)
FLOAT_FUNCS = {
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "exp": np.exp, "tanh": np.tanh,
    "erf": _ERF, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "log": np.log, "abs": np.abs,
    "hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6,
}
# (input scale, zp) per op: a domain where the function is defined
DOMAINS = {"sqrt": (0.05, -128), "rsqrt": (0.05, -128), "log": (0.05, -128)}


def numpy_unary(name, q, scale, zp, out_scale, out_zp, dtype):
    x = (q.astype("int64") - zp).astype("float64") * np.float32(scale)
    with np.errstate(all="ignore"):
        y = FLOAT_FUNCS[name](x)
    info = np.iinfo(dtype)
    return np.clip(np.round(y / np.float32(out_scale)) + out_zp, info.min, info.max)


@pytest.mark.parametrize("kind", ["graph", "vm", "debug"])
@pytest.mark.parametrize("name", sorted(FLOAT_FUNCS))
def test_unary_ops_match_numpy_within_one_step(kind, name):
    dtype = "int8"
    scale, zp = DOMAINS.get(name, (0.04, 3))
    q = np.arange(-128, 128, dtype=dtype)
    if name in DOMAINS:
        q = q[1:]  # x = 0: rsqrt/log are infinite there
    out_scale, out_zp = 0.02, -10
    y = getattr(relay.qnn.op, name)(relay.var("q", shape=q.shape, dtype=dtype), scale, zp,
                                    out_scale, out_zp)
    out = run(y, {"q": q}, kind)
    assert out.dtype == np.int8
    expected = numpy_unary(name, q, scale, zp, out_scale, out_zp, dtype)
    assert np.max(np.abs(out.astype("int64") - expected)) <= 1


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "hardswish", "exp"])
def test_unary_lookup_table_equals_the_canonical_form(name):
    """graph/VM run Legalize's table (uint8), the interpreter the dequantize-op-quantize form."""
    q = np.arange(0, 256, dtype="uint8")
    y = getattr(relay.qnn.op, name)(relay.var("q", shape=(256,), dtype="uint8"), 0.03, 128,
                                    1 / 128, 0)
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    with Target("llvm"):
        legal = relay.qnn.transform.Legalize()(mod)
    assert "take" in legal.astext() and "tanh(" not in legal.astext()
    np.testing.assert_array_equal(run(y, {"q": q}, "graph"), run(y, {"q": q}, "debug"))


@pytest.mark.parametrize("kind", ["graph", "vm"])
@pytest.mark.parametrize("dtype,alpha", [("int8", 0.1), ("uint8", 0.25), ("int8", 0.0)])
def test_leaky_relu_matches_numpy_within_one_step(kind, dtype, alpha):
    info = np.iinfo(dtype)
    q = np.arange(info.min, info.max + 1, dtype=dtype)
    zp, out_zp = (5, -3) if dtype == "int8" else (120, 60)
    y = relay.qnn.op.leaky_relu(relay.var("q", shape=q.shape, dtype=dtype), alpha, 0.05, zp,
                                0.04, out_zp)
    x = (q.astype("int64") - zp) * np.float32(0.05)
    ref = np.clip(np.round(np.where(x < 0, alpha * x, x) / np.float32(0.04)) + out_zp,
                  info.min, info.max)
    out = run(y, {"q": q}, kind)
    assert out.dtype == np.dtype(dtype)
    assert np.max(np.abs(out.astype("int64") - ref)) <= 1


@pytest.mark.parametrize("kind", ["graph", "vm", "debug"])
@pytest.mark.parametrize("same_params", [True, False])
def test_avg_pool2d_matches_numpy(kind, same_params):
    rng = np.random.default_rng(0)
    q = rng.integers(0, 256, (1, 6, 6, 3)).astype("uint8")
    out_scale, out_zp = (0.1, 7) if same_params else (0.15, 20)
    y = relay.qnn.op.avg_pool2d(relay.var("q", shape=q.shape, dtype="uint8"), 0.1, 7,
                                out_scale, out_zp, pool_size=(3, 3), strides=(2, 2),
                                padding=(1, 1), dilation=(1, 1), count_include_pad=False)
    acc = numpy_requantize(q, 0.1, 7, out_scale, out_zp, -1, "UPWARD", "int32").astype("int64")
    padded = np.pad(acc, ((0, 0), (1, 1), (1, 1), (0, 0)))
    valid = np.pad(np.ones_like(acc), ((0, 0), (1, 1), (1, 1), (0, 0)))
    expected = np.zeros((1, 3, 3, 3), "int64")
    for i in range(3):
        for j in range(3):
            win = padded[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            cnt = valid[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3].sum(axis=(1, 2))
            expected[:, i, j] = np.trunc(win.sum(axis=(1, 2)) / cnt)
    np.testing.assert_array_equal(run(y, {"q": q}, kind), np.clip(expected, 0, 255))


@pytest.mark.parametrize("kind", ["graph", "vm"])
def test_conv2d_transpose_matches_numpy(kind):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, (1, 3, 4, 5)).astype("uint8")
    weight = rng.integers(-128, 128, (3, 2, 3, 3)).astype("int8")  # IOHW
    zp_w = np.array([2, -5])
    y = relay.qnn.op.conv2d_transpose(
        relay.var("d", shape=data.shape, dtype="uint8"), relay.const(weight), 100,
        relay.const(zp_w.astype("int32")), 0.5, relay.const(np.array([0.1, 0.2], "float32")),
        strides=(2, 2), padding=(1, 1), output_padding=(1, 1))
    # transposed conv = scatter of each input pixel times the kernel
    a = data.astype("int64") - 100
    w = weight.astype("int64") - zp_w[None, :, None, None]
    full = np.zeros((1, 2, (4 - 1) * 2 + 3 + 1, (5 - 1) * 2 + 3 + 1), "int64")
    for i in range(4):
        for j in range(5):
            full[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] += np.einsum(
                "c,cohw->ohw", a[0, :, i, j], w)
    expected = full[:, :, 1:1 + 8, 1:1 + 10]
    np.testing.assert_array_equal(run(y, {"d": data}, kind), expected)


# ---- Legalize -------------------------------------------------------------------------------
class _ConvInputs(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.seen = []

    def visit_call(self, call):
        super().visit_call(call)
        if getattr(call.op, "name", "") in ("qnn.conv2d", "qnn.dense", "nn.conv2d", "nn.dense"):
            self.seen.append((call.op.name, str(call.args[0].checked_type.dtype),
                              str(call.args[1].checked_type.dtype)))


def _legalized(expr, target):
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(expr), expr))
    mod = relay.transform.InferType()(mod)
    from kiln.relay.qnn.transform import legalize_qnn

    with Target(target):
        body = legalize_qnn(mod["main"], Target(target), mod)
    visitor = _ConvInputs()
    visitor.visit(body)
    return visitor.seen


def _int8_conv(dtypes=("int8", "uint8")):
    return relay.qnn.op.conv2d(relay.var("d", shape=(1, 3, 5, 5), dtype=dtypes[0]),
                               relay.var("w", shape=(4, 3, 3, 3), dtype=dtypes[1]), 1, 2, 0.5,
                               0.5, (3, 3), 4)


def test_legalize_makes_uint8_data_int8_kernel_on_x86():
    assert _legalized(_int8_conv(), "llvm -mcpu=skylake") == [("qnn.conv2d", "uint8", "int8")]
    dense = relay.qnn.op.dense(relay.var("x", shape=(2, 4), dtype="int8"),
                               relay.var("w", shape=(3, 4), dtype="int8"), 0, 0, 1.0, 1.0, 3)
    assert _legalized(dense, "llvm -mattr=+avx2") == [("qnn.dense", "uint8", "int8")]


def test_legalize_without_sse42_uses_int16_nn_ops():
    assert _legalized(_int8_conv(), "llvm -mcpu=core2") == [("nn.conv2d", "int16", "int16")]


def test_legalize_on_arm_cpu_makes_dtypes_equal():
    target = "c -keys=arm_cpu -mcpu=cortex-m7"
    assert _legalized(_int8_conv(), target) == [("qnn.conv2d", "uint8", "uint8")]


@pytest.mark.parametrize("target", ["llvm -mcpu=skylake", "llvm -mcpu=core2"])
@pytest.mark.parametrize("dtypes", [("int8", "uint8"), ("int8", "int8")])
def test_legalized_conv_matches_numpy(target, dtypes):
    rng = np.random.default_rng(2)
    info_d, info_w = np.iinfo(dtypes[0]), np.iinfo(dtypes[1])
    data = rng.integers(info_d.min, info_d.max + 1, (1, 3, 5, 5)).astype(dtypes[0])
    weight = rng.integers(info_w.min, info_w.max + 1, (4, 3, 3, 3)).astype(dtypes[1])
    y = relay.qnn.op.conv2d(relay.var("d", shape=data.shape, dtype=dtypes[0]),
                            relay.const(weight), -7, 9, 0.5, 0.5, (3, 3), 4, padding=(1, 1))
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    out = relay.create_executor("graph", mod=mod, target=target).evaluate()(data).numpy()
    np.testing.assert_array_equal(out, conv2d_nchw(data, weight, -7, 9, padding=(1, 1, 1, 1)))


@pytest.mark.parametrize("build,message", [
    (lambda: relay.qnn.op.tanh(relay.var("q", shape=(3,), dtype="float32"), 0.1, 0, 0.1, 0),
     "data must be one of"),
    (lambda: relay.qnn.op.sigmoid(relay.var("q", shape=(3,), dtype="int8"),
                                  relay.const(np.ones(3, "float32")), 0, 0.1, 0),
     "scale must be a scalar"),
    (lambda: relay.qnn.op.avg_pool2d(relay.var("q", shape=(1, 4, 4, 1), dtype="int8"), 0.1,
                                     relay.const(0.5), 0.1, 0, (2, 2), (1, 1), (0, 0), (1, 1)),
     "input_zero_point must be an integer"),
])
def test_ill_typed_calls_raise(build, message):
    with pytest.raises(TVMError) as info:
        relay.transform.InferType()(kiln.IRModule.from_expr(build()))  # or the constructor
    assert message in str(info.value)


def test_bad_constructor_arguments_raise():
    with pytest.raises(TVMError, match="alpha must be finite"):
        relay.qnn.op.leaky_relu(relay.var("q", shape=(2,), dtype="int8"), float("inf"), 0.1, 0,
                                0.1, 0)
    with pytest.raises(TVMError, match="out_dtype must be one of"):
        relay.qnn.op.conv2d_transpose(relay.var("d", shape=(1, 1, 2, 2), dtype="int8"),
                                      relay.var("w", shape=(1, 1, 2, 2), dtype="int8"), 0, 0,
                                      1.0, 1.0, out_dtype="float32")
    with pytest.raises(TVMError, match="zero_point 300 is outside the input dtype uint8"):
        run(relay.qnn.op.tanh(relay.var("q", shape=(2,), dtype="uint8"), 0.1, 300, 0.1, 0),
            {"q": np.zeros(2, "uint8")}, "vm")
