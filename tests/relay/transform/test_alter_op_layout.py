"""AlterOpLayout: ops take their target-preferred layout forms, numerics unchanged."""

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.relay.backend.interpreter import Interpreter
from kiln.relay.transform import FoldConstant, InferType
from kiln.relay.transform.alter_op_layout import AlterOpLayout


def _dense_module():
    x = relay.var("x", shape=(2, 64))
    w = relay.const(np.random.default_rng(0).standard_normal((32, 64)).astype("float32"))
    return tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.dense(x, w))))


def _run(mod, target, opt_level=3):
    passes = tvm.transform.Sequential([InferType(), AlterOpLayout(), FoldConstant()])
    with tvm.target.Target(target), tvm.transform.PassContext(opt_level=opt_level):
        return passes(mod)  # Sequential skips passes above the context's opt level


def test_dense_becomes_dense_pack_on_cpu_and_the_weight_is_folded():
    mod = _dense_module()
    altered = _run(mod, "llvm")
    dense = altered["main"].body.args[0]
    assert dense.op.name == "nn.contrib_dense_pack"
    assert isinstance(dense.args[1], relay.Constant)  # layout_transform folded away
    x = np.random.default_rng(1).standard_normal((2, 64)).astype("float32")
    np.testing.assert_allclose(Interpreter(altered).evaluate()(x).numpy(),
                               Interpreter(mod).evaluate()(x).numpy(), rtol=1e-5, atol=1e-5)


def test_arm_cpu_and_low_opt_level_keep_plain_dense():
    mod = _dense_module()
    assert _run(mod, "c -keys=arm_cpu")["main"].body.args[0].op.name == "nn.dense"
    assert _run(mod, "llvm", opt_level=2)["main"].body.args[0].op.name == "nn.dense"


def test_conv2d_becomes_nchwc_with_a_prepacked_kernel_on_cpu():
    x = relay.var("x", shape=(1, 8, 10, 10))
    w = relay.const(np.random.default_rng(2).standard_normal((32, 8, 3, 3)).astype("float32"))
    y = relay.nn.conv2d(x, w, padding=(1, 1), channels=32, kernel_size=(3, 3))
    mod = tvm.IRModule.from_expr(relay.Function([x], y))
    altered = _run(mod, "llvm")
    conv = altered["main"].body
    # only the result reads it: the conv unpacks to NCHW itself, no separate transform
    assert conv.op.name == "nn.contrib_conv2d_NCHWc" and conv.attrs.out_layout == "NCHW"
    # the input comes straight from a variable: read as NCHW, kernel OIHW16o (folded)
    assert conv.attrs.data_layout == "NCHW" and conv.attrs.kernel_layout == "OIHW16o"
    assert isinstance(conv.args[1], relay.Constant) and conv.args[1].data.ndim == 5
    xv = np.random.default_rng(3).standard_normal((1, 8, 10, 10)).astype("float32")
    np.testing.assert_allclose(Interpreter(altered).evaluate()(xv).numpy(),
                               Interpreter(mod).evaluate()(xv).numpy(), rtol=1e-4, atol=1e-4)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c")
    from kiln.contrib import graph_executor

    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(x=xv)
    np.testing.assert_allclose(m.get_output(0).numpy(), Interpreter(mod).evaluate()(xv).numpy(),
                               rtol=1e-4, atol=1e-4)
