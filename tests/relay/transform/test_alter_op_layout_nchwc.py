"""AlterOpLayout keeps activations in NCHW{c} between x86 convs (TVM's NCHWc design):
answers against onnxruntime on every executor with the pass on and off, and the layouts the
pass leaves in the program."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend import Executor
from kiln.relay.backend.pipeline import pass_pipeline
from kiln.relay.op.layout import binary_broadcast_layout
from kiln.runtime.error import TVMError
from kiln.runtime.executor import AotModule

RNG = np.random.default_rng(7)


class _Net:
    """A small ONNX graph written op by op (onnxruntime is the oracle)."""

    def __init__(self, shape):
        self.nodes, self.inits, self.shape, self.count = [], [], shape, 0

    def _name(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array):
        name = self._name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(array, "float32"), name))
        return name

    def op(self, kind, inputs, **attrs):
        out = self._name("t")
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def conv(self, x, cin, cout, k=3, stride=1, pad=1, groups=1, bias=True):
        weight = RNG.standard_normal((cout, cin // groups, k, k)).astype("float32")
        inputs = [x, self.const(weight * (2.0 / (cin // groups * k * k)) ** 0.5)]
        if bias:
            inputs.append(self.const(RNG.standard_normal(cout) * 0.1))
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, group=groups)

    def batch_norm(self, x, c):
        params = [RNG.uniform(0.5, 1.5, c), RNG.standard_normal(c) * 0.1,
                  RNG.standard_normal(c) * 0.1, RNG.uniform(0.5, 1.5, c)]
        return self.op("BatchNormalization", [x, *map(self.const, params)])

    def model(self, out):
        graph = helper.make_graph(
            self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              self.shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, list("nchw"))], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _convnet():
    """Stem stride-2 conv + bias + relu, depthwise + clip (relu6), pointwise, a residual add
    of two branches, batch norm (folded), max pool, a conv with 20 output channels (blocks of
    10), concat of differently blocked tensors, average pool and global pool."""
    net = _Net([1, 3, 18, 18])
    x = net.op("Relu", [net.conv("x", 3, 16, stride=2)])
    dw = net.op("Clip", [net.conv(x, 16, 16, groups=16), net.const(0.0), net.const(6.0)])
    a = net.conv(dw, 16, 32, k=1, pad=0, bias=False)
    b = net.batch_norm(net.conv(x, 16, 32, k=1, pad=0, bias=False), 32)
    y = net.op("Relu", [net.op("Add", [a, b])])
    y = net.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    odd = net.op("Relu", [net.conv(y, 32, 20)])
    both = net.op("Concat", [y, odd], axis=1)
    z = net.op("AveragePool", [net.conv(both, 52, 24, k=1, pad=0)], kernel_shape=[2, 2],
               strides=[1, 1])
    z = net.conv(net.op("Relu", [z]), 24, 24, k=3, stride=2, pad=1, groups=24)
    return net.model(net.op("GlobalAveragePool", [z]))


def _residual_chain():
    """conv -> conv -> add(first) -> relu: the blocked result feeds a conv and the add."""
    net = _Net(["N", 8, 9, 9])
    a = net.op("Relu", [net.conv("x", 8, 16)])
    b = net.conv(a, 16, 16)
    return net.model(net.op("Relu", [net.op("Add", [a, b])]))


@pytest.fixture(scope="module")
def convnet():
    model = _convnet()
    x = RNG.standard_normal((1, 3, 18, 18)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model, {"x": x.shape})
    return mod, params, x, want


def _graph_run(mod, params, x, target, disabled=()):
    with tvm.transform.PassContext(opt_level=3, disabled_pass=list(disabled)):
        lib = relay.build(mod, target=target, params=params)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(x=x)
    return m.get_output(0).numpy(), lib


def _fused_ops(mod, params, target="llvm", opt_level=3):
    """The op names inside each fused function relay.build would lower."""
    mod = relay.build_module.bind_params_by_name(mod["main"], params)
    mod = tvm.IRModule.from_expr(mod)
    with tvm.target.Target(target), tvm.transform.PassContext(opt_level=opt_level):
        fused = pass_pipeline(mod, tvm.cpu(0))(mod)
    text = fused["main"].astext(show_meta_data=False)
    return text


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_graph_executor_matches_onnxruntime_with_the_pass_on_and_off(convnet, target):
    mod, params, x, want = convnet
    on, lib = _graph_run(mod, params, x, target)
    off, _ = _graph_run(mod, params, x, target, disabled=["AlterOpLayout"])
    np.testing.assert_allclose(on, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(off, want, rtol=1e-4, atol=1e-4)
    assert "contrib_conv2d_NCHWc" in lib.get_graph_json()


def test_avx2_target_matches_onnxruntime(convnet):
    from kiln.target.x86 import target_has_features

    if not target_has_features("avx2", tvm.target.Target("llvm")):
        pytest.skip("the host cannot run AVX2 code")
    mod, params, x, want = convnet
    got, _ = _graph_run(mod, params, x, "llvm -mcpu=core-avx2")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_vm_and_aot_match_onnxruntime(convnet):
    mod, params, x, want = convnet
    with tvm.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
        aot = relay.build(mod, target="c", params=params, executor=Executor("aot"))
    vm = tvm.runtime.vm.VirtualMachine(exe, tvm.cpu(0))
    np.testing.assert_allclose(vm.invoke("main", x).numpy(), want, rtol=1e-4, atol=1e-4)
    m = AotModule(aot["default"](tvm.cpu(0)))
    m.run(x=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_vm_with_a_dynamic_batch_matches_onnxruntime():
    model = _residual_chain()
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    mod, params = relay.frontend.from_onnx(model, {"x": (relay.Any(), 8, 9, 9)})
    with tvm.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    # blocked with an Any batch
    assert any("contrib_conv2d_NCHWc" in name for name in exe.primitive_ops)
    vm = tvm.runtime.vm.VirtualMachine(exe, tvm.cpu(0))
    for batch in (1, 3):
        x = RNG.standard_normal((batch, 8, 9, 9)).astype("float32")
        np.testing.assert_allclose(vm.invoke("main", x).numpy(),
                                   session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_a_lone_depthwise_conv_reads_and_writes_nchw():
    net = _Net([1, 32, 11, 11])
    model = net.model(net.op("Relu", [net.conv("x", 32, 32, stride=2, groups=32)]))
    x = RNG.standard_normal((1, 32, 11, 11)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod, params = relay.frontend.from_onnx(model, {"x": x.shape})
    got, lib = _graph_run(mod, params, x, "llvm")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert "contrib_depthwise_conv2d_NCHWc" in lib.get_graph_json()
    assert "layout_transform" not in lib.get_graph_json()


@pytest.mark.parametrize("depthwise", [False, True])
def test_a_hand_blocked_conv_on_a_blocked_parameter_builds_at_opt_level_3(depthwise):
    # the layout rule that lets a blocked conv read an NCHW producer took the parameter's
    # unknown layout for NCHW and rewrote data_layout: type inference then failed
    import torch

    groups, cin = (32, 1) if depthwise else (1, 32)
    x = RNG.standard_normal((2, 32, 9, 9)).astype("float32")
    w = RNG.standard_normal((32, cin, 3, 3)).astype("float32")
    xb = x.reshape(2, 2, 16, 9, 9).transpose(0, 1, 3, 4, 2).copy()
    if depthwise:
        wb = w.reshape(2, 16, 1, 3, 3).transpose(0, 2, 3, 4, 1)[:, :, :, :, None, :].copy()
        make, kernel_layout = relay.nn.contrib_depthwise_conv2d_nchwc, "OIHW1i16o"
    else:
        wb = w.reshape(2, 16, 2, 16, 3, 3).transpose(0, 2, 4, 5, 3, 1).copy()
        make, kernel_layout = relay.nn.contrib_conv2d_nchwc, "OIHW16i16o"
    data, weight = relay.var("x", shape=xb.shape), relay.var("w", shape=wb.shape)
    call = make(data, weight, (2, 2), (1, 1, 1, 1), groups=groups, channels=32,
                kernel_size=(3, 3), data_layout="NCHW16c", kernel_layout=kernel_layout,
                out_layout="NCHW16c")
    mod = tvm.IRModule.from_expr(relay.Function([data, weight], call))
    got, _ = _graph_run(mod, {"w": wb}, xb, "llvm")
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                                      padding=1, groups=groups).numpy()
    np.testing.assert_allclose(got.transpose(0, 1, 4, 2, 3).reshape(want.shape), want,
                               rtol=1e-4, atol=1e-4)


def test_a_hand_built_winograd_conv_on_a_blocked_parameter_builds_at_opt_level_3():
    # the Winograd op's layout rule (read an unblocked producer as NCHW) took the blocked
    # parameter's unknown layout for NCHW as well: type inference then failed at opt level 3
    import torch

    x = RNG.standard_normal((2, 32, 7, 9)).astype("float32")
    w = RNG.standard_normal((16, 32, 3, 3)).astype("float32")
    xb = x.reshape(2, 2, 16, 7, 9).transpose(0, 1, 3, 4, 2).copy()
    data = relay.var("x", shape=xb.shape)
    # the x86 kernel's packed weight: [alpha, alpha, O / 8, I, 8] of TVM's [alpha, alpha, O, I]
    weight = relay.nn.contrib_conv2d_winograd_weight_transform(relay.const(w), 2)
    weight = relay.transpose(relay.reshape(weight, (4, 4, 2, 8, 32)), (0, 1, 2, 4, 3))
    call = relay.nn.contrib_conv2d_winograd_without_weight_transform(
        data, weight, 2, padding=(1, 1), channels=16, kernel_size=(3, 3),
        data_layout="NCHW16c", kernel_layout="OIHW", out_layout="NCHW8c")
    got, _ = _graph_run(tvm.IRModule.from_expr(relay.Function([data], call)), {}, xb, "llvm")
    want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                      padding=1).numpy()
    np.testing.assert_allclose(got.transpose(0, 1, 4, 2, 3).reshape(want.shape), want,
                               rtol=1e-4, atol=1e-4)


def test_activations_stay_blocked_between_convs(convnet):
    mod, params, _, _ = convnet
    text = _fused_ops(mod, params)
    # the stem reads the NCHW input as it is; the concat of a 16- and a 10-channel block
    # is the one transform back to NCHW (the 20-channel conv and the last depthwise conv,
    # read only by an NCHW consumer, unpack their own results)
    transforms = [line for line in text.splitlines() if "layout_transform(" in line]
    assert len(transforms) == 1 and 'src_layout="NCHW16c", dst_layout="NCHW"' in transforms[0]
    assert 'layout="NCHW16c")' in text and 'layout="NCHW8c");' in text  # max and avg pool
    assert text.count("nn.contrib_conv2d_NCHWc(") == 5
    assert text.count("nn.contrib_depthwise_conv2d_NCHWc(") == 2
    assert "nn.conv2d(" not in text


def test_opt_level_below_3_keeps_nchw_convs(convnet):
    mod, params, _, _ = convnet
    text = _fused_ops(mod, params, opt_level=2)
    assert "NCHWc" not in text and "layout_transform" not in text


def test_arm_cpu_targets_keep_nchw_convs(convnet):
    mod, params, _, _ = convnet
    assert "NCHWc" not in _fused_ops(mod, params, target="c -keys=arm_cpu")


def test_bias_follows_the_blocked_layout_and_mismatched_operands_fall_back():
    from kiln.ir.type import TensorType

    data, bias = TensorType((1, 32, 4, 4), "float32"), TensorType((32, 1, 1), "float32")
    out = binary_broadcast_layout(None, ["NCHW16c", ""], ["NCHW", ""], [data, bias])
    assert out.input_layouts == ["NCHW16c", "CHW16c"] and out.output_layouts == ["NCHW16c"]
    # a [H, W] operand is no suffix of NCHW16c, a 1-channel one cannot split C by 16
    for other in (TensorType((4, 4), "float32"), TensorType((1, 1, 4, 4), "float32")):
        out = binary_broadcast_layout(None, ["NCHW16c", ""], ["NCHW", ""], [data, other])
        assert out.input_layouts == ["", ""] and out.output_layouts == [""]


def test_blocked_conv_with_wrong_layouts_raises_a_clear_error():
    x = relay.var("x", shape=(1, 2, 8, 8, 8))
    w = relay.var("w", shape=(2, 2, 3, 3, 8, 16))
    bad = relay.nn.contrib_conv2d_nchwc(x, w, padding=1, channels=32, kernel_size=3,
                                        data_layout="NCHW16c", kernel_layout="OIHW8i16o",
                                        out_layout="NCHW16c")
    with pytest.raises(TVMError, match="NCHW16c"):
        relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x, w], bad)))


def test_topi_blocked_conv_rejects_a_kernel_of_other_blocks():
    from kiln import te
    from kiln.topi.x86.conv2d import conv2d_NCHWc
    from kiln.topi.x86.depthwise import depthwise_conv2d_NCHWc

    data = te.placeholder((1, 2, 8, 8, 8))
    with pytest.raises(TVMError, match="16 input channels"):
        conv2d_NCHWc(data, te.placeholder((2, 4, 3, 3, 4, 16)), 1, 1, 1, "NCHW8c", "NCHW16c")
    with pytest.raises(TVMError, match="depthwise_conv2d_NCHWc"):
        depthwise_conv2d_NCHWc(data, te.placeholder((1, 1, 3, 3, 1, 16)), 1, 1, 1, "NCHW8c",
                               "NCHW16c")


def test_onnx_model_round_trip_is_valid():
    onnx.checker.check_model(_convnet())
