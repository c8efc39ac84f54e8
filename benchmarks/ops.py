"""Operator benchmarks: kiln's dense, ResNet-18 conv2d, MobileNet-style depthwise and
pointwise convs, topk and nn (pools, softmax, layer_norm, conv1d, conv2d_transpose, sum)
kernels vs ONNX Runtime and PyTorch.

Run: ``python benchmarks/ops.py [--quick] [--only dense|conv|mobilenet|topk|nn] [--threads 2]
[--stat median|min] [--target llvm]``.

The kiln measured is this checkout's (the script puts it first on ``sys.path``).
Each kiln case is a one-op Relay model whose weight is a constant, compiled with
``relay.build`` at opt level 3 and run by the graph executor -- exactly how the op runs inside
a model: AlterOpLayout turns ``nn.dense`` into ``nn.contrib_dense_pack`` and ``nn.conv2d`` into
``nn.contrib_conv2d_NCHWc`` (``conv2d_NCHWc.x86``; inside a model the activations between
convs stay NCHW16c; one layer alone has NCHW at both ends: a 1x1 conv runs as a GEMM over
pixels, ``conv2d_pointwise_nchw.x86``, a stem of <= 4 channels and <= 3x3 kernel vectorized
over output columns, ``conv2d_stem_nchw.x86``, other convs read their NCHW input and unpack
their own NCHW result), and
FoldConstant packs the weight once at compile time (ONNX Runtime likewise packs its constant
weights once, at session creation).
The "kiln kernels" column names the fused kernels the graph runs.
ONNX Runtime runs a one-op model made with ``onnx.helper`` (``--threads`` intra-op threads,
default 2); PyTorch runs ``torch.nn.functional`` with as many. kiln uses ``KILN_NUM_THREADS``
(default: ``--threads``). The table gives median times of call blocks (or, with ``--stat
min``, the minimum over single calls, each timed on its own), taken in
interleaved rounds (kiln, ORT, torch, kiln, ...), and the ratios kiln/ORT and kiln/torch
(below 1 means kiln is faster). Times on shared machines are noisy: compare the ratios of one
run, and run it 2-3 times; when other processes load the cores, ``--threads 1 --stat min``
still compares the kernels themselves.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import sys
import time

import numpy as np

# the checkout this script sits in, not whichever kiln the environment installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# libgomp's default spin-waiting collapses when the 2 cores are shared with other processes
# (a launch can wait a whole scheduler slice); passive waiting keeps launches in microseconds.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

DENSES = [(1, 512, 512), (64, 784, 512), (128, 1024, 1024)]
# ResNet-18, batch 1, 224x224: (C, H, W, O, kernel, stride, pad)
RESNET18_CONVS = [
    (3, 224, 224, 64, 7, 2, 3),
    (64, 56, 56, 64, 3, 1, 1),
    (64, 56, 56, 128, 3, 2, 1),
    (64, 56, 56, 128, 1, 2, 0),
    (128, 28, 28, 128, 3, 1, 1),
    (128, 28, 28, 256, 3, 2, 1),
    (128, 28, 28, 256, 1, 2, 0),
    (256, 14, 14, 256, 3, 1, 1),
    (256, 14, 14, 512, 3, 2, 1),
    (256, 14, 14, 512, 1, 2, 0),
    (512, 7, 7, 512, 3, 1, 1),
]
# MobileNet-style (benchmarks/models.py's separable CNN), batch 1: (C, H, W, O, kernel, stride,
# pad, groups): depthwise 3x3 (groups = C) at stride 1 and 2, pointwise 1x1, the stride-2 stem
MOBILENET_CONVS = [
    (3, 224, 224, 32, 3, 2, 1, 1),
    (32, 112, 112, 32, 3, 1, 1, 32),
    (32, 112, 112, 64, 1, 1, 0, 1),
    (64, 112, 112, 64, 3, 2, 1, 64),
    (128, 56, 56, 128, 3, 1, 1, 128),
    (128, 56, 56, 128, 1, 1, 0, 1),
    (256, 28, 28, 256, 1, 1, 0, 1),
    (512, 14, 14, 512, 3, 1, 1, 512),
    (512, 14, 14, 512, 1, 1, 0, 1),
    (1024, 7, 7, 1024, 1, 1, 0, 1),
]

# topk rows: (rows, axis length, k); k <= n/4 takes the heap, k equal to the length is a full
# merge sort.
# settable from the command line: threads of ORT/torch (and kiln), statistic of the rounds
THREADS = [2]
STATISTIC = [statistics.median]

TOPKS = [(1, 1000, 5), (64, 4096, 10), (64, 4096, 100), (16, 4096, 4096)]


def side_by_side(runs: dict, repeat: int, number: int) -> dict:
    """Median seconds per call of each runner, timed in interleaved rounds (kiln, ort, torch,
    kiln, ...) so that a slow period of the shared machine hits all of them alike. A short
    pause before each block lets the previous runtime's spinning worker threads (ORT spins
    after a run) go idle instead of stealing the next runner's cores."""
    for fn in runs.values():
        fn()
    times: dict = {name: [] for name in runs}
    # The minimum resists load only over short samples (one call each): the minimum of
    # 3 two-call means read 1.76x ORT for a conv whose single-call minimum was 1.02x.
    per_call = STATISTIC[0] is min
    for _ in range(repeat):
        for name, fn in runs.items():
            time.sleep(0.02)
            block = time.perf_counter()
            for _ in range(number):
                start = time.perf_counter()
                fn()
                if per_call:
                    times[name].append(time.perf_counter() - start)
            if not per_call:
                times[name].append((time.perf_counter() - block) / number)
    return {name: STATISTIC[0](t) for name, t in times.items()}


def kiln_one_op(make_call, x: np.ndarray, weights: dict, target):
    """A one-op Relay model built like a real one: ``make_call(data, weight_vars)`` over data
    ``x``, with ``weights`` bound as constants by ``relay.build`` (opt level 3, so
    AlterOpLayout packs them and FoldConstant folds the packing away) and run by the graph
    executor. Returns (kernel names, run, output getter)."""
    import json

    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule

    data = relay.var("x", shape=x.shape, dtype="float32")
    params = {name: relay.var(name, shape=a.shape, dtype="float32")
              for name, a in weights.items()}
    func = relay.Function([data, *params.values()], make_call(data, params))
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(kiln.IRModule.from_expr(func), target=target, params=weights)
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.set_input("x", x)
    graph = json.loads(lib.get_graph_json())
    kernels = [n["attrs"]["func_name"].removeprefix("tvmgen_default_")
               for n in graph["nodes"] if n["op"] == "tvm_op"]
    return ",".join(kernels), gmod.run, lambda: gmod.get_output(0).numpy()


def ort_session(node, inputs, initializers, output_shape):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node], "op",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel()) for n, a in initializers])
    return ort_runner(graph, dict(inputs))


def ort_runner(graph, feed: dict, opset: int = 13):
    """A call running the ONNX ``graph`` (opset 13) on ``feed`` in ONNX Runtime (``--threads``
    intra-op threads)."""
    import onnxruntime as ort
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS[0]
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, feed)


def bench_dense(m, k, n, target, repeat, number):
    import torch
    from onnx import helper

    from kiln import relay

    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype("float32")
    w = rng.standard_normal((n, k)).astype("float32")
    name, run_kiln, output = kiln_one_op(lambda d, p: relay.nn.dense(d, p["w"], units=n),
                                         x, {"w": w}, target)
    run_kiln()
    assert np.allclose(output(), x @ w.T, rtol=1e-3, atol=1e-3)
    run_ort = ort_session(helper.make_node("Gemm", ["x", "w"], ["y"], transB=1),
                          [("x", x)], [("w", w)], [m, n])
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    times = side_by_side({"kiln": run_kiln, "ort": run_ort,
                          "torch": lambda: torch.nn.functional.linear(tx, tw)}, repeat, number)
    return name, times["kiln"], times["ort"], times["torch"]


def bench_conv(c, h, w, o, kernel, stride, pad, target, repeat, number, groups=1):
    import torch
    from onnx import helper

    from kiln import relay

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    wt = rng.standard_normal((o, c // groups, kernel, kernel)).astype("float32") * 0.1
    oh = (h + 2 * pad - kernel) // stride + 1
    ow = (w + 2 * pad - kernel) // stride + 1
    name, run_kiln, output = kiln_one_op(
        lambda d, p: relay.nn.conv2d(d, p["w"], (stride, stride), (pad,) * 4, channels=o,
                                     kernel_size=(kernel, kernel), groups=groups), x,
        {"w": wt}, target)
    run_kiln()
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), stride=stride,
                                     padding=pad, groups=groups).numpy()
    assert np.allclose(output(), ref, rtol=1e-3, atol=1e-3)
    run_ort = ort_session(helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * 2,
                                           pads=[pad] * 4, kernel_shape=[kernel] * 2,
                                           group=groups),
                          [("x", x)], [("w", wt)], [1, o, oh, ow])
    tx, tw = torch.from_numpy(x), torch.from_numpy(wt)
    times = side_by_side({"kiln": run_kiln, "ort": run_ort,
                          "torch": lambda: torch.nn.functional.conv2d(
                              tx, tw, stride=stride, padding=pad, groups=groups)}, repeat,
                          number)
    return name, times["kiln"], times["ort"], times["torch"]


def bench_topk(rows, n, k, target, repeat, number):
    import torch
    from onnx import TensorProto, helper

    from kiln import relay

    x = np.random.default_rng(0).standard_normal((rows, n)).astype("float32")
    name, run_kiln, output = kiln_one_op(
        lambda d, p: relay.topk(d, k, axis=-1, ret_type="both")[0], x, {}, target)
    run_kiln()
    assert np.array_equal(output(), -np.sort(-x, -1)[:, :k])
    graph = helper.make_graph(
        [helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)], "topk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, k]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [rows, k])],
        [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    tx = torch.from_numpy(x)
    times = side_by_side({"kiln": run_kiln, "ort": ort_runner(graph, {"x": x}),
                          "torch": lambda: torch.topk(tx, k)}, repeat, number)
    return name, times["kiln"], times["ort"], times["torch"]


# ---- pools, softmax, layer_norm, conv1d, conv2d_transpose, reductions (topi.x86 schedules) --
def _nn_cases():
    """(label, input shape, weights, relay call, ONNX node + initializers + output shape,
    torch call) for each op of the nn family."""
    import torch.nn.functional as F  # noqa: N812
    from onnx import TensorProto, helper

    from kiln import relay

    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.1).astype("float32")

    conv1d_w, deconv_w = w(64, 64, 3), w(64, 64, 4, 4)
    gamma, beta = w(768) + 1, w(768)
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    return [
        ("max_pool2d 1x64x112x112 3x3 s2", (1, 64, 112, 112), {},
         lambda d, p: relay.nn.max_pool2d(d, (3, 3), (2, 2), padding=(1, 1)),
         (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                           pads=[1, 1, 1, 1]), [], [1, 64, 56, 56]),
         lambda x: F.max_pool2d(x, 3, 2, 1)),
        ("global_avg_pool2d 1x512x7x7", (1, 512, 7, 7), {},
         lambda d, p: relay.nn.global_avg_pool2d(d),
         (helper.make_node("GlobalAveragePool", ["x"], ["y"]), [], [1, 512, 1, 1]),
         lambda x: F.adaptive_avg_pool2d(x, 1)),
        ("softmax 64x1000", (64, 1000), {}, lambda d, p: relay.nn.softmax(d, axis=-1),
         (helper.make_node("Softmax", ["x"], ["y"], axis=-1), [], [64, 1000]),
         lambda x: F.softmax(x, -1)),
        ("softmax 12x128x128", (12, 128, 128), {}, lambda d, p: relay.nn.softmax(d, axis=-1),
         (helper.make_node("Softmax", ["x"], ["y"], axis=-1), [], [12, 128, 128]),
         lambda x: F.softmax(x, -1)),
        ("layer_norm 128x768", (128, 768), {"g": gamma, "b": beta},
         lambda d, p: relay.nn.layer_norm(d, p["g"], p["b"]),
         (helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1),
          [("g", gamma), ("b", beta)], [128, 768]),
         lambda x: F.layer_norm(x, (768,), torch_of(gamma), torch_of(beta))),
        ("conv1d 1x64x1024 k3", (1, 64, 1024), {"w": conv1d_w},
         lambda d, p: relay.nn.conv1d(d, p["w"], padding=(1, 1), channels=64,
                                      kernel_size=(3,)),
         (helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3], pads=[1, 1]),
          [("w", conv1d_w)], [1, 64, 1024]),
         lambda x: F.conv1d(x, torch_of(conv1d_w), padding=1)),
        ("conv2d_transpose 1x64x32x32 k4 s2", (1, 64, 32, 32), {"w": deconv_w},
         lambda d, p: relay.nn.conv2d_transpose(d, p["w"], strides=(2, 2), padding=(1, 1),
                                                channels=64, kernel_size=(4, 4)),
         (helper.make_node("ConvTranspose", ["x", "w"], ["y"], kernel_shape=[4, 4],
                           strides=[2, 2], pads=[1, 1, 1, 1]), [("w", deconv_w)],
          [1, 64, 64, 64]),
         lambda x: F.conv_transpose2d(x, torch_of(deconv_w), stride=2, padding=1)),
        ("sum axis 1 of 256x1024", (256, 1024), {}, lambda d, p: relay.sum(d, axis=1),
         (helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0), [axes], [256]),
         lambda x: x.sum(1)),
    ]


def torch_of(a: np.ndarray):
    import torch

    return torch.from_numpy(a)


def bench_nn(case, target, repeat, number):
    """One nn-family case: kiln (relay.build, graph executor) vs ORT vs torch."""
    import torch
    from onnx import TensorProto, helper

    _, shape, weights, relay_call, (node, initializers, out_shape), torch_call = case
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    name, run_kiln, output = kiln_one_op(relay_call, x, weights, target)
    run_kiln()
    tx = torch.from_numpy(x)
    assert np.allclose(output(), torch_call(tx).numpy(), rtol=1e-3, atol=1e-4)
    tensors = [i if not isinstance(i, tuple) else
               helper.make_tensor(i[0], TensorProto.FLOAT, i[1].shape, i[1].ravel())
               for i in initializers]
    graph = helper.make_graph(
        [node], "op", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], tensors)
    times = side_by_side({"kiln": run_kiln, "ort": ort_runner(graph, {"x": x}, opset=17),
                          "torch": lambda: torch_call(tx)}, repeat, number)
    return name, times["kiln"], times["ort"], times["torch"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm", help="kiln target (default: the host CPU, "
                        "as benchmarks/models.py builds)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--threads", type=int, default=2,
                        help="threads of every runtime (kiln: KILN_NUM_THREADS if unset)")
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="per-runner statistic over the rounds (min resists a loaded "
                             "machine better)")
    parser.add_argument("--only", choices=["dense", "conv", "mobilenet", "topk", "nn"],
                        help="one op family")
    args = parser.parse_args()
    THREADS[0] = args.threads
    STATISTIC[0] = {"median": statistics.median, "min": min}[args.stat]
    os.environ.setdefault("KILN_NUM_THREADS", str(args.threads))
    import torch

    from kiln.target import Target

    torch.set_num_threads(args.threads)
    repeat, number = (3, 2) if args.quick else (7, 5)
    if args.stat == "min":  # single calls, timed each: more of them
        repeat, number = repeat * 2, number * 2
    target = Target(args.target)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; target {args.target}; "
          f"KILN_NUM_THREADS={os.environ.get('KILN_NUM_THREADS', 'default')}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, ORT and torch {args.threads} "
          f"threads; {args.stat} of the rounds")
    header = f"{'op':34s} {'kiln kernels':28s} {'kiln ms':>9s} {'ort ms':>9s} {'torch ms':>9s} " \
             f"{'kiln/ort':>9s} {'kiln/torch':>10s}"
    print(header)
    families = {
        "dense": [(f"dense {m}x{k}x{n}", bench_dense, (m, k, n)) for m, k, n in DENSES],
        "conv": [(f"conv2d {c}x{h}x{w}->{o} k{kernel} s{stride}", bench_conv, spec)
                 for spec in RESNET18_CONVS for c, h, w, o, kernel, stride, _ in [spec]],
        "mobilenet": [(f"{'dw' if g > 1 else 'conv'} {c}x{h}x{w}->{o} k{kernel} s{stride}",
                       functools.partial(bench_conv, groups=g), spec[:7])
                      for spec in MOBILENET_CONVS for c, h, w, o, kernel, stride, _, g in [spec]],
        "topk": [(f"topk {r}x{n} k={k}", bench_topk, (r, n, k)) for r, n, k in TOPKS],
        "nn": [(case[0], bench_nn, (case,)) for case in _nn_cases()],
    }
    rows = []
    for family, cases in families.items():
        if args.only not in (None, family):
            continue
        for label, bench, spec in cases:
            result = bench(*spec, target, repeat, number)
            _print(label, result)
            rows.append((label, result))
    for column, label in ((2, "ort"), (3, "torch")):
        ratios = [r[1][1] / r[1][column] for r in rows]
        print(f"geometric mean kiln/{label}: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


def _print(label, result) -> None:
    name, kiln_t, ort_t, torch_t = result
    print(f"{label:34s} {name[:28]:28s} {kiln_t * 1e3:9.3f} {ort_t * 1e3:9.3f} "
          f"{torch_t * 1e3:9.3f} "
          f"{kiln_t / ort_t:9.2f} {kiln_t / torch_t:10.2f}", flush=True)


if __name__ == "__main__":
    main()
