"""The real PyTorch-exported models compiled: static ones with relay.build on the graph
executor, the symbolic-batch and control-flow ones with the VM; PyTorch is the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_onnx_models import (
    MLP,
    ConvBN,
    Encoder,
    SequenceModel,
    SmallResNet,
    _export,
    _randomize_bn,
    _torch_outputs,
)

import kiln
from kiln import relay
from kiln.contrib import graph_executor
from kiln.relay.frontend import from_onnx
from kiln.runtime.vm import VirtualMachine


def _graph_run(path, inputs: dict):
    mod, params = from_onnx(str(path), shape={k: list(v.shape) for k, v in inputs.items()})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    m.run(**inputs)
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def _models():
    torch.manual_seed(0)
    cnn, resnet = ConvBN(), SmallResNet()
    _randomize_bn(cnn)
    _randomize_bn(resnet)
    mask = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
    return {
        "mlp": (MLP(), (torch.randn(3, 16),), ["x"], ["y"]),
        "cnn": (cnn, (torch.randn(2, 3, 16, 16),), ["x"], ["y"]),
        "resnet": (resnet, (torch.randn(1, 3, 12, 12),), ["x"], ["y"]),
        "encoder": (Encoder(), (torch.randn(2, 5, 16), mask), ["x", "mask"], ["y"]),
        "sequence": (SequenceModel(), (torch.randn(2, 6, 8),), ["x"], ["y", "h"]),
    }


@pytest.mark.parametrize("name", ["mlp", "cnn", "resnet", "encoder", "sequence"])
def test_model_on_the_graph_executor_matches_pytorch(tmp_path, name):
    model, example, inputs, outputs = _models()[name]
    path = tmp_path / f"{name}.onnx"
    _export(model, example, path, inputs, outputs)
    got = _graph_run(path, {n: t.numpy() for n, t in zip(inputs, example)})
    want = _torch_outputs(model, example)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_symbolic_batch_mlp_runs_on_the_vm_at_several_batch_sizes(tmp_path):
    torch.manual_seed(5)
    model = MLP()
    path = tmp_path / "mlp_any.onnx"
    _export(model, (torch.randn(2, 16),), path, ["x"], ["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    mod, params = from_onnx(str(path))
    exe = relay.vm.compile(mod, target="llvm", params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    for batch in (1, 4, 9):
        x = torch.randn(batch, 16)
        np.testing.assert_allclose(vm.run(x.numpy()).numpy(), _torch_outputs(model, (x,))[0],
                                   rtol=1e-4, atol=1e-4)


class CountingLoop(torch.nn.Module):
    """Data-dependent control flow: repeat a step while the running sum stays small."""

    def forward(self, x, steps):
        y = x
        for _ in range(int(steps)):
            y = torch.tanh(y) + 1.0
            if bool(y.sum() > 100.0):
                y = y * 0.5
        return y


def test_scripted_loop_and_if_run_on_the_vm(tmp_path):
    scripted = torch.jit.script(CountingLoop())
    x, steps = torch.randn(3, 4), torch.tensor(5)
    path = tmp_path / "loop.onnx"
    torch.onnx.export(scripted, (x, steps), str(path), input_names=["x", "steps"],
                      output_names=["y"], dynamo=False, opset_version=17)
    mod, params = from_onnx(str(path), shape={"x": [3, 4], "steps": []})
    exe = relay.vm.compile(mod, target="llvm", params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    for n in (0, 1, 5):
        got = vm.run(x.numpy(), np.array(n, dtype="int64"))
        got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
        want = CountingLoop()(x, torch.tensor(n)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
