"""ONNX LSTM/GRU/RNN compiled for llvm match onnxruntime, on the layer-op path and off it.

The converters project all steps' inputs with one GEMM and run each direction as one kernel
over the whole sequence (``nn.contrib_lstm_sequence`` / ``nn.contrib_gru_sequence`` /
``nn.contrib_rnn_sequence``) when a layer has the default activations (an RNN: tanh, relu or
sigmoid) and no masking or peepholes; other layers compose the cell from primitive ops.
Both kinds are compared with onnxruntime (graph executor, and the VM with a sequence length
known only at run time), and the layer ops with a NumPy LSTM.
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
                     initial=0, lens=None, peepholes=False, steps=STEPS, lens_input=False,
                     **attrs):
    """An ONNX model with one ``op`` node; returns (model bytes, feeds). ``lens_input``:
    ``sequence_lens`` is a graph input fed ``lens`` (else an initializer)."""
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
    if lens is not None and lens_input:
        feeds["lens"] = np.array(lens, "int32")
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [BATCH]))
        names[4] = "lens"
    elif lens is not None:
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
def test_lstm_default_activations_run_one_kernel_per_direction(case):
    hidden = case.pop("hidden", 16)
    model, feeds = _recurrent_model("LSTM", 4, hidden, **case)
    kernels = _compile_and_compare(model, feeds)
    dirs = 2 if case["direction"] == "bidirectional" else 1
    assert sum("contrib_lstm_sequence" in k for k in kernels) == dirs
    # one projection GEMM per direction, no per-step dense
    assert sum("dense" in k for k in kernels) == dirs


@pytest.mark.parametrize("case", [
    dict(direction="forward", initial=1, linear_before_reset=1),
    dict(direction="bidirectional", linear_before_reset=0, clip=2.0),
    dict(direction="reverse", layout=1, bias=False, linear_before_reset=1, hidden=12),
])
def test_gru_default_activations_run_one_kernel_per_direction(case):
    hidden = case.pop("hidden", 16)
    model, feeds = _recurrent_model("GRU", 3, hidden, **case)
    kernels = _compile_and_compare(model, feeds)
    dirs = 2 if case["direction"] == "bidirectional" else 1
    assert sum("contrib_gru_sequence" in k for k in kernels) == dirs


@pytest.mark.parametrize("case", [
    dict(direction="bidirectional", activations=["Relu", "Tanh"], initial=1, clip=1.0),
    dict(direction="reverse", activations=["Sigmoid"], bias=False, hidden=12),
])
def test_rnn_with_tanh_relu_or_sigmoid_runs_one_kernel_per_direction(case):
    hidden = case.pop("hidden", 16)
    model, feeds = _recurrent_model("RNN", 1, hidden, **case)
    kernels = _compile_and_compare(model, feeds)
    dirs = 2 if case["direction"] == "bidirectional" else 1
    assert sum("contrib_rnn_sequence" in k for k in kernels) == dirs


@pytest.mark.parametrize("op, gates, case", [
    ("LSTM", 4, dict(lens=[STEPS, 2], initial=2, direction="bidirectional")),
    ("GRU", 3, dict(lens=[1, 3], direction="reverse", linear_before_reset=0)),
    ("RNN", 1, dict(lens=[0, 2], initial=1)),
])
def test_sequence_lens_run_on_the_layer_op_in_either_direction(op, gates, case):
    model, feeds = _recurrent_model(op, gates, 16, **case)
    kernels = _compile_and_compare(model, feeds)
    assert sum(f"contrib_{op.lower()}_sequence" in k for k in kernels) == \
        (2 if case.get("direction") == "bidirectional" else 1)


@pytest.mark.parametrize("op, gates, case", [
    ("LSTM", 4, dict(peepholes=True, input_forget=1)),
    ("GRU", 3, dict(activations=["HardSigmoid", "Relu"], linear_before_reset=0)),
    ("RNN", 1, dict(direction="bidirectional", activations=["LeakyRelu", "Tanh"], initial=1)),
])
def test_other_recurrent_layers_compose_the_cell_from_primitive_ops(op, gates, case):
    model, feeds = _recurrent_model(op, gates, 8, **case)
    kernels = _compile_and_compare(model, feeds)
    assert not any("_sequence" in k for k in kernels)


@pytest.mark.parametrize("op, gates, case", [
    ("LSTM", 4, dict(peepholes=True, initial=2)),
    ("GRU", 3, dict(activations=["HardSigmoid", "Tanh"], initial=1)),
    ("RNN", 1, dict(activations=["LeakyRelu"], initial=1)),
])
def test_unrolled_layers_end_a_row_of_length_zero_with_a_zero_state(op, gates, case):
    """onnxruntime's final state of a row that runs no step is zero, not the initial state
    (the masked steps keep the initial state; the layer ops zero it too)."""
    model, feeds = _recurrent_model(op, gates, 8, lens=[0, 2], **case)
    kernels = _compile_and_compare(model, feeds)
    assert not any("_sequence" in k for k in kernels)


def _numpy_lstm(x, h, c, r, reverse):
    """(Y, final h, final c) of an LSTM direction over ``x [T, B, 4H]`` (NumPy, float64)."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    ys = [None] * len(x)
    for t in (reversed(range(len(x))) if reverse else range(len(x))):
        i, o, f, g = np.split(x[t] + h @ r.T, 4, axis=-1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = ys[t] = sig(o) * np.tanh(c)
    return np.stack(ys), h, c


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_sequence_op_matches_a_numpy_lstm(reverse):
    hidden, steps, batch = 8, 5, 2
    xproj = relay.var("xproj", shape=(steps, batch, 4 * hidden))
    state = relay.var("state", shape=(2, batch, hidden))
    r = relay.var("r", shape=(4 * hidden, hidden))
    out = relay.nn.contrib_lstm_sequence(
        xproj, state, relay.nn.pack_recurrent_weight(r, 4, hidden, 4), reverse=reverse)
    mod = kiln.IRModule.from_expr(relay.Function([xproj, state, r], out.astuple()))
    x, s, w = _rand(steps, batch, 4 * hidden), _rand(2, batch, hidden), _rand(4 * hidden, hidden)
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm")
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.run(xproj=x, state=s, r=w)
    y, h, c = _numpy_lstm(x.astype("float64"), s[0], s[1], w, reverse)
    np.testing.assert_allclose(gmod.get_output(0).numpy(), y, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(gmod.get_output(1).numpy(), np.stack([h, c]), rtol=1e-5,
                               atol=2e-6)


def _infer(args, call):
    return relay.transform.InferType()(kiln.IRModule.from_expr(relay.Function(
        args, call.astuple())))


def test_sequence_ops_reject_mismatched_operands_by_name():
    xproj = relay.var("xproj", shape=(3, 1, 32))
    state = relay.var("state", shape=(2, 1, 8))
    weight = relay.var("w", shape=(2, 8, 3, 4))  # packs 3 gates, the LSTM needs 4
    with pytest.raises(kiln.TVMError, match=r"not \[H / n, H, 4, n\] packed"):
        _infer([xproj, state, weight], relay.nn.contrib_lstm_sequence(xproj, state, weight))
    good = relay.var("w4", shape=(2, 8, 4, 4))
    wide = relay.var("x", shape=(3, 1, 24))
    with pytest.raises(kiln.TVMError, match=r"xproj \(3, 1, 24\) does not match batch 1"):
        _infer([wide, state, good], relay.nn.contrib_lstm_sequence(wide, state, good))
    x64 = relay.var("x64", shape=(3, 1, 32), dtype="float64")
    with pytest.raises(kiln.TVMError, match="operands must be float32"):
        _infer([x64, state, good], relay.nn.contrib_lstm_sequence(x64, state, good))
    h = relay.var("h", shape=(1, 8))
    bias = relay.var("hb", shape=(4,))
    w3 = relay.var("w3", shape=(2, 8, 3, 4))
    with pytest.raises(kiln.TVMError, match=r"hbias must be float32 \[H\] = \[8\], got \(4,\)"):
        x3 = relay.var("x3", shape=(3, 1, 24))
        _infer([x3, h, w3, bias], relay.nn.contrib_gru_sequence(x3, h, w3, bias))
    with pytest.raises(kiln.TVMError, match="activation 'gelu' is not one of"):
        w1 = relay.var("w1", shape=(2, 8, 1, 4))
        x1 = relay.var("x1", shape=(3, 1, 8))
        _infer([x1, h, w1], relay.nn.contrib_rnn_sequence(x1, h, w1, "gelu"))
    with pytest.raises(kiln.TVMError, match="hidden size 10 is not a multiple of 4"):
        relay.nn.pack_recurrent_weight(relay.var("r", shape=(40, 10)), 4, 10, 4)


@pytest.mark.parametrize("op, gates, direction, lbr", [("LSTM", 4, "forward", None),
                                                       ("GRU", 3, "bidirectional", 1),
                                                       ("GRU", 3, "reverse", 0),
                                                       ("RNN", 1, "forward", None)])
def test_unknown_sequence_length_runs_one_kernel_per_direction_on_the_vm(op, gates, direction,
                                                                         lbr):
    from kiln.runtime.vm import VirtualMachine

    model, feeds = _recurrent_model(op, gates, 8, direction=direction, initial=1,
                                    steps="seq", linear_before_reset=lbr)
    proto = onnx.load_from_string(model)
    mod, params = from_onnx(proto, shape={"x": [relay.Any(), BATCH, INPUT],
                                          "h0": list(feeds["h0"].shape)})
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    dirs = 2 if direction == "bidirectional" else 1
    layers = [name for name in exe.primitive_names
              if f"contrib_{op.lower()}_sequence" in name and "shape_func" not in name]
    assert len(layers) == dirs, exe.primitive_names
    vm = VirtualMachine(exe, kiln.cpu(0))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for steps in (3, 1, 11):  # several lengths in one session, one step included
        x = _rand(steps, BATCH, INPUT, scale=1.0)
        got = vm.invoke("main", x, feeds["h0"])
        for value, want in zip(got, session.run(None, {"x": x, "h0": feeds["h0"]})):
            np.testing.assert_allclose(value.numpy(), want, rtol=1e-4, atol=2e-5)


def test_unknown_sequence_length_with_sequence_lens_on_the_vm():
    from kiln.runtime.vm import VirtualMachine

    model, _ = _recurrent_model("LSTM", 4, 8, direction="bidirectional", lens=[2, 1],
                                steps="seq")
    mod, params = from_onnx(onnx.load_from_string(model),
                            shape={"x": [relay.Any(), BATCH, INPUT]})
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for steps in (3, 5):
        x = _rand(steps, BATCH, INPUT, scale=1.0)
        for value, want in zip(vm.invoke("main", x), session.run(None, {"x": x})):
            np.testing.assert_allclose(value.numpy(), want, rtol=1e-4, atol=2e-5)
    # T is known only at run time: the constant lengths are checked then (as onnxruntime)
    short = _rand(1, BATCH, INPUT, scale=1.0)
    _ort_refuses(model, {"x": short})
    with pytest.raises(kiln.TVMError, match=r"LSTM: sequence_lens\[0\] = 2 is outside \[0, 1\]"):
        vm.invoke("main", short)


@pytest.mark.parametrize("op, gates, case", [
    ("LSTM", 4, dict(direction="reverse", peepholes=True, initial=2, lens=[1, 3])),
    ("GRU", 3, dict(direction="bidirectional", activations=["HardSigmoid", "Tanh"] * 2,
                    initial=1, lens=[2, 0])),
])
def test_unrolled_reverse_direction_honours_sequence_lens(op, gates, case):
    """A reverse row of length n starts at step n - 1 from the initial state (onnxruntime)."""
    model, feeds = _recurrent_model(op, gates, 8, **case)
    kernels = _compile_and_compare(model, feeds)
    assert not any("_sequence" in k for k in kernels)


def test_unknown_sequence_length_with_peepholes_is_refused_by_name():
    model, feeds = _recurrent_model("LSTM", 4, 8, peepholes=True)
    with pytest.raises(kiln.TVMError, match="sequence length unknown at conversion time"):
        from_onnx(onnx.load_from_string(model), shape={"x": [relay.Any(), BATCH, INPUT]})


def test_zero_states_shaped_from_a_dynamic_input_fold_to_constants_on_the_vm():
    """PyTorch exports the zero states of a model with a dynamic axis as ConstantOfShape of
    shape arithmetic on the input, sliced per layer: the layer op gets them as constants."""
    from kiln.runtime.vm import VirtualMachine

    hidden = 8
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["batch"], axis=0),
        helper.make_node("Concat", ["two", "batch", "hid"], ["state_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["state_shape"], ["zeros"]),
        helper.make_node("Slice", ["zeros", "zero", "one", "zero"], ["h0"]),
        helper.make_node("LSTM", ["x", "w", "r", "", "", "h0", "h0"], ["y"],
                         hidden_size=hidden)]
    inits = [numpy_helper.from_array(np.array(v, "int64"), name) for name, v in
             (("one", [1]), ("zero", [0]), ("two", [2]), ("hid", [hidden]))]
    inits += [numpy_helper.from_array(_rand(1, 4 * hidden, INPUT), "w"),
              numpy_helper.from_array(_rand(1, 4 * hidden, hidden), "r")]
    graph = helper.make_graph(
        nodes, "zero_state",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", BATCH, INPUT])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["seq", 1, BATCH, hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    mod, params = from_onnx(model, shape={"x": [relay.Any(), BATCH, INPUT]})
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    assert not [n for n in exe.primitive_names if "full" in n or "shape_of" in n], \
        exe.primitive_names
    vm = VirtualMachine(exe, kiln.cpu(0))
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for steps in (2, 6):
        x = _rand(steps, BATCH, INPUT, scale=1.0)
        np.testing.assert_allclose(vm.invoke("main", x).numpy(),
                                   session.run(None, {"x": x})[0], rtol=1e-4, atol=2e-5)


def _ort_refuses(model, feeds):
    with pytest.raises(Exception, match="Invalid value/s in sequence_lens"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("op, gates, case, target", [
    ("LSTM", 4, dict(direction="bidirectional"), "llvm"),  # the layer op's path
    ("GRU", 3, dict(direction="reverse", linear_before_reset=0), "c"),
    ("LSTM", 4, dict(peepholes=True, initial=2), "llvm"),  # the unrolled cells' path
])
def test_sequence_lens_outside_the_sequence_raise_at_run_time_as_onnxruntime(op, gates, case,
                                                                            target):
    """onnxruntime refuses a length below 0 or above T; kiln raised nothing and clamped it.
    Lengths fed at run time are checked by the graph's kernel; good ones still match."""
    model, feeds = _recurrent_model(op, gates, 8, lens=[0, STEPS], lens_input=True, **case)
    _compile_and_compare(model, feeds)  # 0 and T are inside
    mod, params = from_onnx(onnx.load_from_string(model),
                            shape={k: list(v.shape) for k, v in feeds.items()})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    for bad, row in (([1, STEPS + 1], 1), ([-1, 2], 0)):
        feeds["lens"] = np.array(bad, "int32")
        _ort_refuses(model, feeds)
        with pytest.raises(kiln.TVMError, match=rf"{op}: sequence_lens\[{row}\] = "
                           rf"{bad[row]} is outside \[0, {STEPS}\]"):
            gmod.run(**feeds)


def test_constant_sequence_lens_outside_a_static_sequence_raise_at_conversion():
    model, feeds = _recurrent_model("RNN", 1, 8, lens=[2, STEPS + 3])
    _ort_refuses(model, feeds)
    with pytest.raises(kiln.TVMError, match=rf"RNN: sequence_lens\[1\] = {STEPS + 3} is "
                       rf"outside \[0, {STEPS}\]"):
        from_onnx(onnx.load_from_string(model), shape={"x": [STEPS, BATCH, INPUT]})


def test_the_sequence_lens_check_op_raises_in_the_interpreter_and_refuses_bad_operands():
    from kiln.relay.op.nn.rnn import contrib_check_sequence_lens

    lens = relay.var("lens", shape=(2,), dtype="int32")
    x = relay.var("x", shape=(3, 2, 4))
    func = relay.Function([lens, x], contrib_check_sequence_lens(lens, x, "gru"))
    run = relay.create_executor("debug", mod=kiln.IRModule.from_expr(func)).evaluate()
    data = np.zeros((3, 2, 4), "float32")
    np.testing.assert_array_equal(run(np.array([3, 0], "int32"), data).numpy(), [3, 0])
    with pytest.raises(kiln.TVMError, match=r"GRU: sequence_lens\[0\] = 4 is outside \[0, 3\]"):
        run(np.array([4, 0], "int32"), data)
    bad = relay.var("bad", shape=(2,), dtype="float32")
    with pytest.raises(kiln.TVMError, match="sequence_lens must be an int32 vector"):
        relay.transform.InferType()(kiln.IRModule.from_expr(
            relay.Function([bad, x], contrib_check_sequence_lens(bad, x, "gru"))))
