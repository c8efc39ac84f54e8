"""ConvertLayout (TVM's pass): NHWC convs become NCHW, the ops between follow, answers equal
the original program's (the reference interpreter and NumPy)."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.backend.interpreter import Interpreter
from kiln.relay.transform import ConvertLayout
from kiln.runtime.error import TVMError

RNG = np.random.default_rng(3)


def _nhwc_net():
    """conv (HWIO) + relu, max pool, depthwise conv (HWOI), residual add, conv: all NHWC."""
    x = relay.var("x", shape=(1, 10, 10, 8))

    def const(*shape):
        return relay.const(RNG.standard_normal(shape).astype("float32") * 0.3)

    y = relay.nn.relu(relay.nn.conv2d(x, const(3, 3, 8, 16), padding=1, data_layout="NHWC",
                                      kernel_layout="HWIO"))
    y = relay.nn.max_pool2d(y, (2, 2), (2, 2), layout="NHWC")
    d = relay.nn.conv2d(y, const(3, 3, 16, 1), padding=1, groups=16, data_layout="NHWC",
                        kernel_layout="HWOI")
    y = relay.add(y, relay.clip(d, 0.0, 6.0))
    y = relay.nn.conv2d(y, const(1, 1, 16, 12), data_layout="NHWC", kernel_layout="HWIO")
    return tvm.IRModule.from_expr(relay.Function([x], y))


def _convert(mod, layouts):
    with tvm.transform.PassContext(opt_level=3):
        return ConvertLayout(layouts)(mod)


def test_nhwc_convs_become_nchw_with_transforms_only_at_the_edges():
    mod = _nhwc_net()
    converted = _convert(mod, {"nn.conv2d": ["NCHW", "default"]})
    text = converted["main"].astext(show_meta_data=False)
    assert 'data_layout="NHWC"' not in text and ', layout="NHWC"' not in text  # pool too
    assert text.count("layout_transform(") == 5  # the input, the result, three kernels
    assert 'kernel_layout="OIHW"' not in text  # (the default, not printed)
    x = RNG.standard_normal((1, 10, 10, 8)).astype("float32")
    want = Interpreter(mod).evaluate()(x).numpy()
    np.testing.assert_allclose(Interpreter(converted).evaluate()(x).numpy(), want, rtol=1e-5,
                               atol=1e-5)


def test_converted_model_builds_blocked_and_matches():
    mod = _nhwc_net()
    x = RNG.standard_normal((1, 10, 10, 8)).astype("float32")
    want = Interpreter(mod).evaluate()(x).numpy()
    converted = _convert(mod, {"nn.conv2d": ["NCHW", "default"]})
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(converted, target="llvm")
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(x=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)
    assert "contrib_conv2d_NCHWc" in lib.get_graph_json()


def test_nchw_to_nhwc_and_explicit_kernel_layouts():
    x = relay.var("x", shape=(1, 4, 6, 6))
    w = relay.const(RNG.standard_normal((8, 4, 3, 3)).astype("float32"))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.conv2d(x, w))))
    converted = _convert(mod, {"nn.conv2d": ["NHWC", "OHWI"]})
    conv = converted["main"].body.args[0].args[0]
    assert (conv.attrs.data_layout, conv.attrs.kernel_layout) == ("NHWC", "OHWI")
    xv = RNG.standard_normal((1, 4, 6, 6)).astype("float32")
    np.testing.assert_allclose(Interpreter(converted).evaluate()(xv).numpy(),
                               Interpreter(mod).evaluate()(xv).numpy(), rtol=1e-5, atol=1e-5)


def test_below_opt_level_3_nothing_changes():
    mod = _nhwc_net()
    passes = tvm.transform.Sequential([ConvertLayout({"nn.conv2d": ["NCHW", "default"]})])
    with tvm.transform.PassContext(opt_level=2):
        same = passes(mod)  # Sequential skips passes above the context's opt level
    assert "layout_transform" not in same["main"].astext(show_meta_data=False)


def test_ops_without_a_conversion_and_unknown_defaults_raise():
    mod = _nhwc_net()
    with pytest.raises(TVMError, match="nn.relu has no FTVMConvertOpLayout"):
        _convert(mod, {"nn.relu": ["NCHW"]})
    with pytest.raises(TVMError, match="no default kernel layout"):
        _convert(mod, {"nn.conv2d": ["NCHW16c", "default"]})
