"""ONNX LSTM/GRU/RNN compiled for llvm match onnxruntime, on the fused-cell path and off it.

The converters project all steps' inputs with one GEMM and run each step as one fused cell
kernel (``nn.contrib_lstm_cell`` / ``nn.contrib_gru_cell`` / ``nn.contrib_rnn_cell``) when a
layer has the default activations (an RNN: tanh, relu or sigmoid) and no masking or
peepholes; other layers compose the cell from primitive ops.
Both kinds are compared with onnxruntime, and the cell ops with a NumPy LSTM/GRU step.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib.graph_executor import GraphModule  # noqa: E402
from kiln.relay.frontend import from_onnx  # noqa: E402

helper, TensorProto, numpy_helper = onnx.helper, onnx.TensorProto, onnx.numpy_helper
RNG = np.random.default_rng(7)
STEPS, BATCH, INPUT = 4, 2, 5


def _rand(*shape, scale=0.5):
    return (RNG.standard_normal(shape) * scale).astype("float32")


def _recurrent_model(op, gates, hidden, direction="forward", layout=0, bias=True,
                     initial=0, lens=None, peepholes=False, steps=STEPS, **attrs):
    """An ONNX model with one ``op`` node; returns (model bytes, feeds)."""
    dirs = 2 if direction == "bidirectional" else 1
    x_shape = [BATCH, steps, INPUT] if layout else [steps, BATCH, INPUT]
    state_shape = [BATCH, dirs, hidden] if layout else [dirs, BATCH, hidden]
    inits = [numpy_helper.from_array(_rand(dirs, gates * hidden, INPUT), "w"),
             numpy_helper.from_array(_rand(dirs, gates * hidden, hidden), "r")]
    names = ["x", "w", "r", ""]
    if bias:
        inits.append(numpy_helper.from_array(_rand(dirs, 2 * gates * hidden), "b"))
        names[3] = "b"
    feeds = {"x": _rand(*(STEPS if d == steps else d for d in x_shape), scale=1.0)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    names.append("")
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, "int32"), "lens"))
        names[4] = "lens"
    for state in ["h0", "c0"][:initial]:
        feeds[state] = _rand(*state_shape)
        inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, state_shape))
        names.append(state)
    if peepholes:
        names += [""] * (7 - len(names)) + ["p"]
        inits.append(numpy_helper.from_array(_rand(dirs, 3 * hidden), "p"))
    while names and names[-1] == "":
        names.pop()
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction,
                            layout=layout, **{k: v for k, v in attrs.items() if v is not None})
    y_shape = [BATCH, steps, dirs, hidden] if layout else [steps, dirs, BATCH, hidden]
    graph = helper.make_graph(
        [node], "rnn", inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape if o == "y" else state_shape)
         for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model.SerializeToString(), feeds


def _compile_and_compare(model_bytes, feeds):
    """Build for llvm, run on the graph executor, compare every output with onnxruntime (the
    ONNX reference evaluator for ``layout=1``, which onnxruntime's CPU kernels refuse)."""
    attrs = {a.name: a for a in onnx.load_from_string(model_bytes).graph.node[0].attribute}
    if attrs["layout"].i:
        from onnx.reference import ReferenceEvaluator

        expected = ReferenceEvaluator(onnx.load_from_string(model_bytes)).run(None, feeds)
    else:
        expected = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(
            None, feeds)
    mod, params = from_onnx(onnx.load_from_string(model_bytes),
                            shape={k: list(v.shape) for k, v in feeds.items()})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.run(**feeds)
    for index, want in enumerate(expected):
        np.testing.assert_allclose(gmod.get_output(index).numpy(), want, rtol=1e-4, atol=2e-5)
    return [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"]
            if n["op"] == "tvm_op"]


@pytest.mark.parametrize("case", [
    dict(direction="forward", initial=2, clip=1.5),
    dict(direction="bidirectional", layout=1, bias=False),
    dict(direction="reverse", initial=1, hidden=12),
])
def test_lstm_default_activations_run_one_fused_kernel_per_step(case):
    hidden = case.pop("hidden", 16)
    model, feeds = _recurrent_model("LSTM", 4, hidden, **case)
    kernels = _compile_and_compare(model, feeds)
    dirs = 2 if case["direction"] == "bidirectional" else 1
    assert sum("contrib_lstm_cell" in k for k in kernels) == STEPS * dirs
    # one projection GEMM per direction, no per-step dense
    assert sum("dense" in k for k in kernels) == dirs


@pytest.mark.parametrize("case", [
    dict(direction="forward", initial=1, linear_before_reset=1),
    dict(direction="bidirectional", linear_before_reset=0, clip=2.0),
    dict(direction="reverse", layout=1, bias=False, linear_before_reset=1, hidden=12),
])
def test_gru_default_activations_run_one_fused_kernel_per_step(case):
    hidden = case.pop("hidden", 16)
    model, feeds = _recurrent_model("GRU", 3, hidden, **case)
    kernels = _compile_and_compare(model, feeds)
    dirs = 2 if case["direction"] == "bidirectional" else 1
    assert sum("contrib_gru_cell" in k for k in kernels) == STEPS * dirs


@pytest.mark.parametrize("case", [
    dict(direction="bidirectional", activations=["Relu", "Tanh"], initial=1, clip=1.0),
    dict(direction="reverse", activations=["Sigmoid"], bias=False, hidden=12),
])
def test_rnn_with_tanh_relu_or_sigmoid_runs_one_fused_kernel_per_step(case):
    hidden = case.pop("hidden", 16)
    model, feeds = _recurrent_model("RNN", 1, hidden, **case)
    kernels = _compile_and_compare(model, feeds)
    dirs = 2 if case["direction"] == "bidirectional" else 1
    assert sum("contrib_rnn_cell" in k for k in kernels) == STEPS * dirs


@pytest.mark.parametrize("op, gates, case", [
    ("LSTM", 4, dict(lens=[STEPS, 2], initial=2)),
    ("LSTM", 4, dict(peepholes=True, input_forget=1)),
    ("GRU", 3, dict(activations=["HardSigmoid", "Relu"], linear_before_reset=0)),
    ("RNN", 1, dict(direction="bidirectional", activations=["LeakyRelu", "Tanh"], initial=1)),
])
def test_other_recurrent_layers_compose_the_cell_from_primitive_ops(op, gates, case):
    model, feeds = _recurrent_model(op, gates, 8, **case)
    kernels = _compile_and_compare(model, feeds)
    assert not any("contrib_" in k and "_cell" in k for k in kernels)


def _numpy_lstm_step(x_row, h, c, r):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, o, f, g = np.split(x_row + h @ r.T, 4, axis=-1)
    c_next = sig(f) * c + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c_next), c_next


def _run(func, *args):
    mod = kiln.IRModule.from_expr(func)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    for index, value in enumerate(args):
        gmod.set_input(index, value)
    gmod.run()
    return gmod.get_output(0).numpy()


def test_lstm_cell_op_reads_its_step_and_clamps_it():
    hidden, steps = 8, 3
    xproj = relay.var("xproj", shape=(steps, 1, 4 * hidden))
    state = relay.var("state", shape=(2, 1, hidden))
    r = relay.var("r", shape=(4 * hidden, hidden))
    step = relay.var("step", shape=(), dtype="int32")
    out = relay.nn.contrib_lstm_cell(
        xproj, state, relay.nn.pack_recurrent_weight(r, 4, hidden, 4), step)
    func = relay.Function([xproj, state, r, step], out)
    x, s, w = _rand(steps, 1, 4 * hidden), _rand(2, 1, hidden), _rand(4 * hidden, hidden)
    for value, row in ((1, 1), (7, steps - 1), (-3, 0)):
        got = _run(func, x, s, w, np.array(value, "int32"))
        h, c = _numpy_lstm_step(x[row], s[0], s[1], w)
        np.testing.assert_allclose(got, np.stack([h, c]), rtol=1e-5, atol=2e-6)


def test_cell_ops_reject_mismatched_operands():
    xproj = relay.var("xproj", shape=(3, 1, 32))
    state = relay.var("state", shape=(2, 1, 8))
    weight = relay.var("w", shape=(2, 8, 3, 4))  # packs 3 gates, the LSTM needs 4
    call = relay.nn.contrib_lstm_cell(xproj, state, weight, 0)
    with pytest.raises(kiln.TVMError, match=r"not \[H / n, H, 4, n\] packed"):
        relay.transform.InferType()(kiln.IRModule.from_expr(relay.Function(
            [xproj, state, weight], call)))
    good = relay.var("w4", shape=(2, 8, 4, 4))
    bad_step = relay.var("step", shape=(), dtype="float32")
    call = relay.nn.contrib_lstm_cell(xproj, state, good, bad_step)
    with pytest.raises(kiln.TVMError, match="step must be a 0-d int32 tensor"):
        relay.transform.InferType()(kiln.IRModule.from_expr(relay.Function(
            [xproj, state, good, bad_step], call)))
    with pytest.raises(kiln.TVMError, match="hidden size 10 is not a multiple of 4"):
        relay.nn.pack_recurrent_weight(relay.var("r", shape=(40, 10)), 4, 10, 4)


@pytest.mark.parametrize("op, gates, direction", [("LSTM", 4, "forward"),
                                                  ("GRU", 3, "bidirectional")])
def test_unknown_sequence_length_runs_as_a_loop_on_the_vm(op, gates, direction, monkeypatch):
    from kiln.relay.frontend import onnx_ops_rnn
    from kiln.runtime.vm import VirtualMachine

    monkeypatch.setattr(onnx_ops_rnn, "UNROLL", 4)  # fewer kernels to compile than 8
    model, feeds = _recurrent_model(op, gates, 8, direction=direction, initial=1,
                                    steps="seq",
                                    linear_before_reset=1 if op == "GRU" else None)
    proto = onnx.load_from_string(model)
    mod, params = from_onnx(proto, shape={"x": [relay.Any(), BATCH, INPUT],
                                          "h0": list(feeds["h0"].shape)})
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for steps in (3, 11):  # shorter than one unrolled call, and 4 + 4 + 3
        x = _rand(steps, BATCH, INPUT, scale=1.0)
        got = vm.invoke("main", x, feeds["h0"])
        for value, want in zip(got, session.run(None, {"x": x, "h0": feeds["h0"]})):
            np.testing.assert_allclose(value.numpy(), want, rtol=1e-4, atol=2e-5)


def test_unknown_sequence_length_with_masking_is_refused_by_name():
    model, feeds = _recurrent_model("LSTM", 4, 8, lens=[STEPS, 2])
    with pytest.raises(kiln.TVMError, match="sequence length unknown at conversion time"):
        from_onnx(onnx.load_from_string(model), shape={"x": [relay.Any(), BATCH, INPUT]})
