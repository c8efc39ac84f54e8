"""A lone conv (NCHW data and result) runs the untuned pointwise / stem kernels; a
conv2d_NCHWc.x86 record for it selects the tuned blocked kernel, as a tuned implementation
always wins over an untuned one."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from autotvm_templates import config_with

import kiln as tvm
from kiln import autotvm, relay
from kiln.autotvm.measure import MeasureInput, MeasureResult
from kiln.contrib import graph_executor


@pytest.mark.parametrize("kernel, channels, stride, pad, marker", [
    (1, 16, 1, 0, "conv2d_pointwise"), (3, 3, 2, 1, "data_phases")])
def test_a_record_selects_the_blocked_kernel(kernel, channels, stride, pad, marker):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, channels, kernel, kernel)).astype("float32")
    x = relay.var("x", shape=(1, channels, 8, 32))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.conv2d(
        x, relay.const(w), strides=(stride, stride), padding=(pad, pad),
        kernel_size=(kernel, kernel))))
    data = rng.standard_normal((1, channels, 8, 32)).astype("float32")
    want = torch.nn.functional.conv2d(torch.from_numpy(data), torch.from_numpy(w),
                                      stride=stride, padding=pad).numpy()
    (task,) = [t for t in autotvm.task.extract_from_program(mod, {}, "llvm")
               if t.name == "conv2d_NCHWc.x86"]
    record = (MeasureInput(task.target, task, config_with(task, tile_oc=8)),
              MeasureResult((1e-5,), 0, 0.1, time.time()))
    for records, uses_marker in ((None, True), ([record], False)):
        with tvm.transform.PassContext(opt_level=3):
            if records is None:
                lib = relay.build(mod, "llvm")
            else:
                with autotvm.apply_history_best(records):
                    lib = relay.build(mod, "llvm")
        module = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        module.run(x=data)
        np.testing.assert_allclose(module.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)
        assert (marker in lib.get_lib().get_source()) == uses_marker
