"""Operator benchmarks: kiln's dense and ResNet-18 conv2d kernels vs ONNX Runtime and PyTorch.

Run: ``python benchmarks/ops.py [--quick] [--target "llvm -mcpu=znver3"]``.

The kiln kernels are the x86 implementations the op strategy picks for the target
(``dense_pack.x86`` via ``nn.contrib_dense_pack``, ``conv2d_nchw.x86``), with the weights
pre-packed as Relay's constant folding of the layout transform would do (ONNX Runtime also
packs its constant weights once, at session creation).
ONNX Runtime runs a one-op model made with ``onnx.helper`` (2 intra-op threads); PyTorch runs
``torch.nn.functional`` with 2 threads. kiln uses ``KILN_NUM_THREADS`` (default: all cores).
The table gives median times and the ratios kiln/ORT and kiln/torch (below 1 means kiln is
faster). Times on shared machines are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

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


def median_time(fn, repeat: int, number: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def kiln_kernel(op_name, attrs, arrays, out_shape, target):
    """Build the strategy's chosen implementation; returns (impl name, callable)."""
    import kiln
    from kiln import te
    from kiln.ir.type import TensorType
    from kiln.relay.op.strategy import select_implementation

    holders = [te.placeholder(a.shape, name=f"in{k}") for k, a in enumerate(arrays)]
    impl, outs = select_implementation(op_name, attrs, holders,
                                       TensorType(out_shape, "float32"), target)
    sch = impl.schedule(attrs, outs, target)
    mod = kiln.build(sch, holders + outs, target=target, name="op")
    func = mod["op"]
    args = [kiln.nd.array(a) for a in arrays] + [kiln.nd.empty(out_shape, "float32")]
    return impl.name, (lambda: func(*args)), args[-1]


def kiln_conv_prepacked(attrs, x, wt, out_shape, target):
    """``conv2d_nchw.x86`` (the cpu strategy's choice) with its kernel packed ahead of time."""
    import kiln
    from kiln import te
    from kiln.relay.op.strategy.registry import IMPLEMENTATIONS
    from kiln.topi.x86 import conv2d as x86_conv2d

    impl = IMPLEMENTATIONS["conv2d_nchw.x86"]
    o, c, kh, kw = wt.shape
    bn, _ = x86_conv2d.block_shape(o, out_shape[3], x86_conv2d.DEFAULT_CONFIG)
    packed = wt.reshape(o // bn, bn, c, kh, kw).transpose(0, 2, 3, 4, 1).copy()
    data = te.placeholder(x.shape, name="data")
    weight = te.placeholder(packed.shape, name="packed")
    out = x86_conv2d.conv2d_nchw_packed(data, weight, list(attrs.strides),
                                        list(attrs.padding), list(attrs.dilation))
    sch = impl.schedule(attrs, [out], target)
    func = kiln.build(sch, [data, weight, out], target=target, name="op")["op"]
    args = [kiln.nd.array(x), kiln.nd.array(packed), kiln.nd.empty(out_shape, "float32")]
    return impl.name, (lambda: func(*args)), args[-1]


def ort_session(node, inputs, initializers, output_shape):
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node], "op",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        [helper.make_tensor(n, TensorProto.FLOAT, a.shape, a.ravel()) for n, a in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    feed = dict(inputs)
    return lambda: sess.run(None, feed)


def bench_dense(m, k, n, target, repeat, number):
    import torch

    from kiln.relay.op import op_attrs as A

    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype("float32")
    w = rng.standard_normal((n, k)).astype("float32")
    lanes = 16
    packed = w.reshape(n // lanes, lanes, k).transpose(0, 2, 1).copy()
    name, run_kiln, out = kiln_kernel("nn.contrib_dense_pack",
                                      A.DensePackAttrs(weight_layout=f"NC{lanes}n"),
                                      [x, packed], (m, n), target)
    run_kiln()
    assert np.allclose(out.numpy(), x @ w.T, rtol=1e-3, atol=1e-3)
    from onnx import helper

    run_ort = ort_session(helper.make_node("Gemm", ["x", "w"], ["y"], transB=1),
                          [("x", x)], [("w", w)], [m, n])
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    return (name, median_time(run_kiln, repeat, number), median_time(run_ort, repeat, number),
            median_time(lambda: torch.nn.functional.linear(tx, tw), repeat, number))


def bench_conv(c, h, w, o, kernel, stride, pad, target, repeat, number):
    import torch
    from onnx import helper

    from kiln.relay.op import op_attrs as A

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, h, w)).astype("float32")
    wt = rng.standard_normal((o, c, kernel, kernel)).astype("float32") * 0.1
    oh = (h + 2 * pad - kernel) // stride + 1
    ow = (w + 2 * pad - kernel) // stride + 1
    attrs = A.Conv2DAttrs(strides=(stride, stride), padding=(pad,) * 4, channels=o,
                          kernel_size=(kernel, kernel))
    name, run_kiln, out = kiln_conv_prepacked(attrs, x, wt, (1, o, oh, ow), target)
    run_kiln()
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(wt), stride=stride,
                                     padding=pad).numpy()
    assert np.allclose(out.numpy(), ref, rtol=1e-3, atol=1e-3)
    run_ort = ort_session(helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride] * 2,
                                           pads=[pad] * 4, kernel_shape=[kernel] * 2),
                          [("x", x)], [("w", wt)], [1, o, oh, ow])
    tx, tw = torch.from_numpy(x), torch.from_numpy(wt)
    return (name, median_time(run_kiln, repeat, number), median_time(run_ort, repeat, number),
            median_time(lambda: torch.nn.functional.conv2d(tx, tw, stride=stride,
                                                           padding=pad), repeat, number))


def main() -> None:
    import torch

    from kiln.target import Target

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm -mcpu=znver3")
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    torch.set_num_threads(2)
    repeat, number = (3, 2) if args.quick else (7, 5)
    target = Target(args.target)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}; target {args.target}; "
          f"KILN_NUM_THREADS={os.environ.get('KILN_NUM_THREADS', 'default')}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}, ORT and torch 2 threads")
    header = f"{'op':34s} {'impl':18s} {'kiln ms':>9s} {'ort ms':>9s} {'torch ms':>9s} " \
             f"{'kiln/ort':>9s} {'kiln/torch':>10s}"
    print(header)
    rows = [(f"dense {m}x{k}x{n}", bench_dense(m, k, n, target, repeat, number))
            for m, k, n in DENSES]
    for row in rows:
        _print(*row)
    for spec in RESNET18_CONVS:
        c, h, w, o, kernel, stride, pad = spec
        label = f"conv2d {c}x{h}x{w}->{o} k{kernel} s{stride}"
        result = bench_conv(*spec, target, repeat, number)
        _print(label, result)
        rows.append((label, result))
    for column, label in ((2, "ort"), (3, "torch")):
        ratios = [r[1][1] / r[1][column] for r in rows]
        print(f"geometric mean kiln/{label}: {float(np.exp(np.mean(np.log(ratios)))):.2f}")


def _print(label, result) -> None:
    name, kiln_t, ort_t, torch_t = result
    print(f"{label:34s} {name:18s} {kiln_t * 1e3:9.3f} {ort_t * 1e3:9.3f} {torch_t * 1e3:9.3f} "
          f"{kiln_t / ort_t:9.2f} {kiln_t / torch_t:10.2f}", flush=True)


if __name__ == "__main__":
    main()
