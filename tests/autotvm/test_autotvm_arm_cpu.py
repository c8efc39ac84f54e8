"""The Cortex-M (arm_cpu) templates: every config computes the convolution or dense NumPy
computes (run on the host: kiln's Cortex-M C also compiles there), the untuned default is a
point of each space, and a Relay call maps to its template's workload."""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import autotvm, te
from kiln.autotvm.task.task import default_config_index
from kiln.autotvm.topi_x86 import KNOBS

TARGET = "c -keys=arm_cpu -mcpu=cortex-m4"


def _conv_nhwc(x, w_hwio, pad):
    x = np.pad(x.astype("int64" if x.dtype == np.int8 else "float64"),
               ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w_hwio.shape[:2]
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = 0
    for dy in range(kh):
        for dx in range(kw):
            out = out + np.einsum("nhwc,co->nhwo", x[:, dy:dy + oh, dx:dx + ow, :],
                                  w_hwio[dy, dx].astype(x.dtype))
    return out


def _cases():
    rng = np.random.default_rng(0)
    f = rng.standard_normal
    i8 = lambda *s: rng.integers(-100, 100, size=s).astype("int8")  # noqa: E731
    x, w = f((1, 5, 5, 3)).astype("float32"), f((3, 3, 3, 12)).astype("float32")
    x1, w1 = f((1, 4, 4, 6)).astype("float32"), f((1, 1, 6, 12)).astype("float32")
    xd, wd = f((3, 20)).astype("float32"), f((12, 20)).astype("float32")
    xs, ws = i8(2, 24), i8(12, 24)
    xc, wc = i8(1, 5, 5, 8), i8(3, 3, 8, 12)  # HWIO; the template takes OHWI
    xw, ww = i8(1, 6, 6, 16), i8(3, 3, 16, 1)  # depthwise HWOI: one filter per channel
    depthwise = sum(np.pad(xw.astype("int64"), ((0, 0), (1, 1), (1, 1), (0, 0)))
                    [:, dy:dy + 6, dx:dx + 6, :] * ww[dy, dx, :, 0]
                    for dy in range(3) for dx in range(3))
    return [
        ("depthwise_conv2d_nhwc_s8.arm_cpu", [xw, ww], ((1, 1), (1, 1, 1, 1), (1, 1), "HWOI"),
         depthwise),
        ("conv2d_direct.arm_cpu", [x, w], ((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO",
                                          "float32"), _conv_nhwc(x, w, 1)),
        ("conv2d_nhwc_1x1_micro_kernel.arm_cpu", [x1, w1], ((1, 1), "float32"),
         _conv_nhwc(x1, w1, 0)),
        ("dense_micro_kernel.arm_cpu", [xd, wd], ("float32",), xd @ wd.T),
        ("dense_s8_micro_kernel.arm_cpu", [xs, ws], (),
         xs.astype("int64") @ ws.astype("int64").T),
        ("conv2d_nhwc_ohwi_s8.arm_cpu", [xc, wc.transpose(3, 0, 1, 2).copy()],
         ((1, 1), (1, 1, 1, 1)), _conv_nhwc(xc, wc, 1)),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_every_config_of_the_arm_cpu_templates_computes_the_same(case):
    name, arrays, rest, want = case
    tensors = [te.placeholder(a.shape, str(a.dtype)) for a in arrays]
    task = autotvm.task.create(name, (*tensors, *rest), TARGET)
    space = task.config_space
    assert 2 <= len(space) <= 16
    default = default_config_index(task)
    assert default is not None
    assert KNOBS[name](space.get(default))  # a tuned default names its knobs
    for index in range(len(space)):
        with tvm.target.Target(TARGET):
            sch, args = task.instantiate(space.get(index))
        func = tvm.build(sch, args, TARGET, name="default_function")
        out = tvm.nd.empty(tuple(int(d) for d in args[-1].shape), str(args[-1].dtype))
        func(*(tvm.nd.array(a) for a in arrays), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4,
                                   err_msg=str(space.get(index)))


def test_relay_calls_on_cortex_m_extract_their_templates():
    from kiln import relay

    data = relay.var("data", shape=(1, 4, 4, 6), dtype="float32")
    w1 = relay.var("w1", shape=(1, 1, 6, 8), dtype="float32")
    w2 = relay.var("w2", shape=(3, 3, 8, 8), dtype="float32")
    y = relay.nn.conv2d(data, w1, channels=8, kernel_size=(1, 1), data_layout="NHWC",
                        kernel_layout="HWIO")
    y = relay.nn.conv2d(y, w2, channels=8, kernel_size=(3, 3), padding=(1, 1),
                        data_layout="NHWC", kernel_layout="HWIO")
    y = relay.nn.dense(relay.reshape(y, (1, -1)), relay.var("w3", shape=(10, 128)))
    mod = tvm.IRModule.from_expr(relay.Function(relay.analysis.free_vars(y), y))
    tasks = autotvm.task.extract_from_program(mod, None, TARGET)
    names = sorted(t.name for t in tasks)
    assert names == ["conv2d_direct.arm_cpu", "conv2d_direct.arm_cpu",
                     "conv2d_nhwc_1x1_micro_kernel.arm_cpu", "dense_micro_kernel.arm_cpu"]


def test_an_int8_hwio_conv_is_tuned_as_the_ohwi_micro_kernel_relay_build_runs(tmp_path):
    from kiln import relay
    from kiln.autotvm.measure import MeasureInput, MeasureResult
    from kiln.relay.op.strategy.registry import select_implementation

    rng = np.random.default_rng(4)
    x = relay.var("x", shape=(1, 6, 6, 8), dtype="int8")
    weight = rng.integers(-5, 5, (3, 3, 8, 16)).astype("int8")
    y = relay.nn.conv2d(x, relay.const(weight), padding=(1, 1), channels=16,
                        kernel_size=(3, 3), data_layout="NHWC", kernel_layout="HWIO",
                        out_dtype="int32")
    (task,) = autotvm.task.extract_from_program(tvm.IRModule.from_expr(
        relay.Function([x], y)), None, TARGET)
    assert task.name == "conv2d_nhwc_ohwi_s8.arm_cpu"
    assert task.args[1] == ("TENSOR", (16, 3, 3, 8), "int8")  # the OHWI kernel
    tuned = next(c for c in (task.config_space.get(i) for i in range(len(task.config_space)))
                 if c["tile_co"].size[-1] == 2)
    log = tmp_path / "s8.log"
    log.write_text(autotvm.record.encode(MeasureInput(task.target, task, tuned),
                                         MeasureResult((1e-4,), 0, 0.1, 0.0)) + "\n")
    call = relay.nn.conv2d(x, relay.var("w", shape=(16, 3, 3, 8), dtype="int8"),
                           padding=(1, 1), channels=16, kernel_size=(3, 3),
                           data_layout="NHWC", kernel_layout="OHWI", out_dtype="int32")
    inputs = [te.placeholder((1, 6, 6, 8), "int8"), te.placeholder((16, 3, 3, 8), "int8")]
    target = tvm.target.Target(TARGET)
    with autotvm.apply_history_best(str(log)), target:
        impl, _ = select_implementation("nn.conv2d", call.attrs, inputs,
                                        relay.TensorType((1, 6, 6, 16), "int32"), target)
    assert impl.name == "conv2d_nhwc_ohwi_s8.arm_cpu" and impl.config["rows"] == 2
