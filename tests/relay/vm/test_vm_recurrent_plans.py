"""Stacked PyTorch LSTM/GRU exported to ONNX with a symbolic sequence length, on the VM.

What the benchmark's ``lstm_vm`` runs: each length is planned on its second call (one C call
list, kiln.runtime.vm.shape_plan) and must match onnxruntime at every length, in any order,
and the bytecode (a VM with naive memory, which never plans) bit for bit. A layer's output
reaches the next layer as a view of the sequence op's tuple field, not through a copy kernel.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.relay.frontend import from_onnx  # noqa: E402
from kiln.runtime.error import TVMError  # noqa: E402
from kiln.runtime.vm import VirtualMachine  # noqa: E402

INPUT, HIDDEN = 8, 16


class _Stacked(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(INPUT, HIDDEN, num_layers=2)

    def forward(self, x):
        return self.rnn(x)[0]


@pytest.fixture(scope="module", params=["LSTM", "GRU"])
def model(request):
    """(onnxruntime session, VM executable) of a 2-layer model of symbolic length."""
    torch.manual_seed(0)
    module = _Stacked(getattr(torch.nn, request.param)).eval()
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.randn(3, 1, INPUT),), buffer, input_names=["input"],
                      output_names=["output"], dynamo=False, opset_version=17,
                      dynamic_axes={"input": {0: "seq"}, "output": {0: "seq"}})
    onnx_bytes = buffer.getvalue()
    import onnx

    mod, params = from_onnx(onnx.load_from_string(onnx_bytes),
                            shape={"input": [relay.Any(), 1, INPUT]})
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    return session, exe


def test_every_length_matches_onnxruntime_and_the_bytecode(model):
    session, exe = model
    vm = VirtualMachine(exe, kiln.cpu(0))
    bytecode = VirtualMachine(exe, kiln.cpu(0), "naive")
    rng = np.random.default_rng(3)
    for length in (1, 5, 12, 5, 1, 12):
        x = rng.standard_normal((length, 1, INPUT)).astype("float32")
        expected = session.run(None, {"input": x})[0]
        reference = bytecode.run(x).numpy()
        for _ in range(3):
            out = vm.run(x).numpy()
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_array_equal(out, reference)
    assert vm.plan_stats() == {"plans": 3, "built": 3, "disabled": False}


def test_a_layer_output_reaches_the_next_layer_without_a_copy_kernel(model):
    _, exe = model
    kernels = [name for name in exe.primitive_names if "shape_func" not in name]
    assert all("dense" in name or "_sequence" in name for name in kernels), kernels
    assert "ReshapeTensor" in exe.bytecode and "GetField" in exe.bytecode


@pytest.mark.parametrize("shape, dtype, what", [
    ((4, 1), "float32", "rank"),
    ((4, 1, INPUT), "float64", "dtype"),
    ((4, 2, INPUT), "float32", "batch"),
    ((4, 1, INPUT + 1), "float32", "features"),
])
def test_bad_input_is_refused_by_name_before_and_after_plans(model, shape, dtype, what):
    _, exe = model
    vm = VirtualMachine(exe, kiln.cpu(0))
    good = np.zeros((4, 1, INPUT), "float32")
    vm.run(good)
    vm.run(good)
    assert vm.plan_stats()["built"] == 1
    with pytest.raises(TVMError, match=r"argument 0 \('input'\) expects Tensor\[\(\?, 1, 8\)"):
        vm.run(np.zeros(shape, dtype))
    np.testing.assert_array_equal(vm.run(good).numpy(), vm.run(good).numpy())
