"""Relay VM benchmarks: a static MLP (VM vs graph executor) and an LSTM loop written in Relay
(VM vs ONNX Runtime vs PyTorch), printed as ratios measured in the same run.

1. **MLP** 784 → 512 → 256 → 10 (dense + bias + relu), batch 8, and **ResNet-18** (batch 1,
   224×224, ``kiln.relay.testing.resnet``): ``relay.vm.compile`` and ``relay.build``
   (graph executor), both at ``opt_level=3``, compile the same kernels; the ratio shows what
   the VM's bytecode dispatch and per-call arena cost over the graph executor's flat op list.
   Timed twice: the run alone (``invoke_stateful`` vs ``run``), and end to end from a NumPy
   input to a NumPy output (``vm.run(x).numpy()`` vs ``set_input``/``run``/``get_output``).
2. **LSTM** seq 32, hidden 256, input 256, as a tail-recursive Relay function over the time
   step (the input projection for all steps as one dense first, then per step ``take``, one
   dense, gates, cell update) — the kind of model only the VM runs — with a static batch of 1
   and with an ``Any`` batch (one executable run at batch 1 and 8). The same weights run
   through an ONNX ``LSTM`` node in ONNX Runtime and ``torch.nn.LSTM``; outputs are checked
   to agree before timing.

Run: ``python benchmarks/vm_models.py [--target llvm] [--repeat 20] [--threads 2]
[--models mlp,resnet18,lstm]``
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

SEQ, HIDDEN, INPUT = 32, 256, 256


def best_times(fns, repeat: int) -> list[float]:
    """Best wall time of each of ``fns`` over ``repeat`` rounds (after one warm-up).

    The functions take turns within each round, so a burst of load on the shared machine
    hits all of them rather than skewing one.
    """
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


# -- 1. static MLP: VM vs graph executor ---------------------------------------------------


def mlp_module(rng):
    import kiln
    from kiln import relay

    sizes = [784, 512, 256, 10]
    x = relay.var("x", shape=(8, sizes[0]))
    params, h = {}, x
    for k, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        w = relay.var(f"w{k}", shape=(n_out, n_in))
        b = relay.var(f"b{k}", shape=(n_out,))
        params[f"w{k}"] = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype("float32")
        params[f"b{k}"] = rng.standard_normal(n_out).astype("float32")
        h = relay.nn.bias_add(relay.nn.dense(h, w), b)
        if k < len(sizes) - 2:
            h = relay.nn.relu(h)
    func = relay.Function(relay.analysis.free_vars(h), h)
    return kiln.IRModule.from_expr(func), params


def vm_versus_graph(label: str, mod, params, data, target: str, repeat: int) -> None:
    """Compile ``mod`` for both executors, check they agree, print both times and the ratio."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.runtime.vm import VirtualMachine

    with kiln.transform.PassContext(opt_level=3):  # both at 3: the same (packed) kernels
        exe = relay.vm.compile(mod, target, params=params)
        lib = relay.build(mod, target, params=params)
    vm = VirtualMachine(exe, kiln.cpu(0))
    vm.set_input("main", data)
    gmod = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gmod.set_input(0, data)
    gmod.run()
    np.testing.assert_allclose(vm.invoke("main").numpy(), gmod.get_output(0).numpy(),
                               rtol=1e-4, atol=1e-4)
    t_vm, t_graph = best_times([lambda: vm.invoke_stateful("main"), gmod.run], repeat)
    print(f"{label} ({target}): vm {t_vm * 1e3:.3f} ms, graph {t_graph * 1e3:.3f} ms, "
          f"vm/graph = {t_vm / t_graph:.2f}x")

    def graph_end_to_end():
        gmod.set_input(0, data)
        gmod.run()
        return gmod.get_output(0).numpy()

    t_vm, t_graph = best_times([lambda: vm.run(data).numpy(), graph_end_to_end], repeat)
    print(f"{label} ({target}) end to end, NumPy in and out: vm {t_vm * 1e3:.3f} ms, "
          f"graph {t_graph * 1e3:.3f} ms, vm/graph = {t_vm / t_graph:.2f}x")


def bench_mlp(target: str, repeat: int) -> None:
    rng = np.random.default_rng(0)
    mod, params = mlp_module(rng)
    data = rng.standard_normal((8, 784)).astype("float32")
    vm_versus_graph("MLP 784-512-256-10 batch 8", mod, params, data, target, 10 * repeat)


def bench_resnet18(target: str, repeat: int) -> None:
    from kiln.relay.testing import resnet

    mod, params = resnet.get_workload(batch_size=1, num_layers=18)
    data = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype("float32")
    vm_versus_graph("ResNet-18 batch 1", mod, params, data, target, max(repeat // 4, 3))


# -- 2. LSTM loop in Relay vs ONNX Runtime vs PyTorch ---------------------------------------


def lstm_weights(rng):
    """PyTorch-layout weights: gates stacked in the order i, f, g, o."""
    scale = 1.0 / np.sqrt(HIDDEN)
    return {
        "w_ih": rng.uniform(-scale, scale, (4 * HIDDEN, INPUT)).astype("float32"),
        "w_hh": rng.uniform(-scale, scale, (4 * HIDDEN, HIDDEN)).astype("float32"),
        "b_ih": rng.uniform(-scale, scale, 4 * HIDDEN).astype("float32"),
        "b_hh": rng.uniform(-scale, scale, 4 * HIDDEN).astype("float32"),
    }


def lstm_relay_module(weights, dynamic_batch: bool = False):
    """``@step(t, h, c, xw)``: one LSTM cell per call, tail-recursing until t == SEQ.

    ``main`` first projects the whole input sequence through ``w_ih`` in one dense (as ONNX
    Runtime's and PyTorch's LSTMs do), so each step does one dense (``h @ w_hh``) and the
    gates. With ``dynamic_batch`` the batch dimension is ``relay.Any()``: one executable runs
    every batch size.
    """
    import kiln
    from kiln import relay

    batch = relay.Any() if dynamic_batch else 1
    mod = kiln.IRModule()
    step = relay.GlobalVar("step")
    t = relay.var("t", shape=(), dtype="int32")
    h = relay.var("h", shape=(batch, HIDDEN))
    c = relay.var("c", shape=(batch, HIDDEN))
    xw = relay.var("xw", shape=(SEQ, batch, 4 * HIDDEN))
    w_hh = relay.const(weights["w_hh"])
    gates = relay.add(relay.take(xw, t, axis=0), relay.nn.dense(h, w_hh))
    i, f, g, o = (relay.split(gates, 4, axis=1)[k] for k in range(4))
    c_next = relay.add(relay.multiply(relay.sigmoid(f), c),
                       relay.multiply(relay.sigmoid(i), relay.tanh(g)))
    h_next = relay.multiply(relay.sigmoid(o), relay.tanh(c_next))
    t_next = relay.add(t, relay.const(1, "int32"))
    done = relay.equal(t_next, relay.const(SEQ, "int32"))
    body = relay.If(done, relay.Tuple([h_next, c_next]), step(t_next, h_next, c_next, xw))
    state = relay.TensorType((batch, HIDDEN))
    mod[step] = relay.Function([t, h, c, xw], body, relay.TupleType([state, state]))

    x_in = relay.var("x", shape=(SEQ, batch, INPUT))
    projected = relay.add(relay.nn.dense(relay.reshape(x_in, (-1, INPUT)),
                                         relay.const(weights["w_ih"])),
                          relay.const(weights["b_ih"] + weights["b_hh"]))
    xw_all = relay.reshape(projected, (SEQ, -1, 4 * HIDDEN))
    # Zero state of the input's batch size (INPUT == HIDDEN, so a zeroed step input fits).
    zeros = relay.zeros_like(relay.take(x_in, relay.const(0, "int32"), axis=0))
    mod["main"] = relay.Function([x_in], step(relay.const(0, "int32"), zeros, zeros, xw_all))
    return mod


def lstm_onnx_session(weights, dynamic_batch: bool = False):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    def reorder(w):  # PyTorch i, f, g, o -> ONNX i, o, f, c
        i, f, g, o = np.split(w, 4, axis=0)
        return np.concatenate([i, o, f, g], axis=0)

    inits = [
        numpy_helper.from_array(reorder(weights["w_ih"])[None], "W"),
        numpy_helper.from_array(reorder(weights["w_hh"])[None], "R"),
        numpy_helper.from_array(np.concatenate([reorder(weights["b_ih"]),
                                                reorder(weights["b_hh"])])[None], "B"),
    ]
    node = helper.make_node("LSTM", ["X", "W", "R", "B"], ["Y", "Y_h", "Y_c"],
                            hidden_size=HIDDEN)
    batch = "batch" if dynamic_batch else 1
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                      [SEQ, batch, INPUT])],
        [helper.make_tensor_value_info("Y_h", TensorProto.FLOAT, [1, batch, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8  # what every onnxruntime release reads
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("KILN_NUM_THREADS", "2"))
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def bench_lstm(target: str, repeat: int) -> None:
    """The LSTM with a static batch of 1, then one ``Any``-batch executable at batch 1 and 8."""
    import torch

    import kiln
    from kiln import relay
    from kiln.runtime.vm import VirtualMachine

    assert INPUT == HIDDEN  # the Relay model's zero state is shaped like a step's input
    rng = np.random.default_rng(1)
    weights = lstm_weights(rng)
    torch.set_num_threads(int(os.environ.get("KILN_NUM_THREADS", "2")))
    lstm = torch.nn.LSTM(INPUT, HIDDEN)
    with torch.no_grad():
        for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
            getattr(lstm, f"{'weight' if name[0] == 'w' else 'bias'}_{name[2:]}_l0").copy_(
                torch.from_numpy(weights[name]))

    for dynamic_batch, batches in ((False, [1]), (True, [1, 8])):
        with kiln.transform.PassContext(opt_level=3):
            exe = relay.vm.compile(lstm_relay_module(weights, dynamic_batch), target)
        vm = VirtualMachine(exe, kiln.cpu(0))
        session = lstm_onnx_session(weights, dynamic_batch)
        for batch in batches:
            xs = rng.standard_normal((SEQ, batch, INPUT)).astype("float32")
            vm.set_input("main", xs)
            h_vm = vm.invoke("main")[0].numpy()
            h_ort = session.run(["Y_h"], {"X": xs})[0][0]
            x_torch = torch.from_numpy(xs)
            with torch.no_grad():
                h_torch = lstm(x_torch)[1][0][0].numpy()
            np.testing.assert_allclose(h_vm, h_ort, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(h_vm, h_torch, rtol=1e-4, atol=1e-5)

            def run_torch(x=x_torch):
                with torch.no_grad():
                    lstm(x)

            t_vm, t_ort, t_torch = best_times(
                [lambda vm=vm: vm.invoke_stateful("main"),
                 lambda s=session, xs=xs: s.run(["Y_h"], {"X": xs}), run_torch], repeat)
            kind = "Any batch" if dynamic_batch else "static"
            print(f"LSTM seq {SEQ} hidden {HIDDEN} {kind}, batch {batch} ({target}): vm "
                  f"{t_vm * 1e3:.3f} ms, onnxruntime {t_ort * 1e3:.3f} ms, pytorch "
                  f"{t_torch * 1e3:.3f} ms; vm/onnxruntime = {t_vm / t_ort:.2f}x, "
                  f"vm/pytorch = {t_vm / t_torch:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="mlp,resnet18,lstm")
    opts = parser.parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", str(opts.threads))
    benches = {"mlp": bench_mlp, "resnet18": bench_resnet18, "lstm": bench_lstm}
    for name in opts.models.split(","):
        benches[name](opts.target, opts.repeat)


if __name__ == "__main__":
    main()
