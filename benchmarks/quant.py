"""int8 models: kiln int8 vs onnxruntime int8 vs kiln float32, in one run (2 threads each;
``KILN_NUM_THREADS=n`` gives both kiln and onnxruntime n threads).

    python benchmarks/quant.py [--models resnet18,mobilenet] [--size 224] [--repeat 10]
                               [--per-channel] [--target llvm] [--cpu-time]

Each model is defined in PyTorch (ResNet-18 from ``benchmarks/models.py``, a MobileNet-v1
style depthwise-separable net here), exported to ONNX, quantized by onnxruntime's
``quantize_static`` (QDQ format, uint8 activations, int8 weights, calibrated on random
inputs), imported with ``relay.frontend.from_onnx`` (QDQ regions become QNN integer ops),
built with ``relay.build`` and run on kiln's graph executor. The float model is built too.
Columns: kiln int8, onnxruntime int8 and kiln float32 (ms), the
ratio kiln int8 / ort int8 (goal <= 1.0), kiln float32 / kiln int8 (goal >= 1.5 on
ResNet-18), compile seconds, and the largest difference of kiln's int8 output from
onnxruntime's in output quantization steps. The three run in turns (one call of each per
round, ``--repeat`` rounds) and each gets a min row and a median row: on a loaded shared
machine the min is the steadier; absolute times there are noise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("KILN_NUM_THREADS", "2")
_HERE = os.path.dirname(os.path.abspath(__file__))
# this checkout's kiln (not an installed one) and benchmarks/models.py
sys.path[:0] = [os.path.dirname(_HERE), _HERE]


def mobilenet_style():
    """MobileNet-v1 style: a 3x3 stem, then depthwise 3x3 + pointwise 1x1 blocks."""
    import torch
    from torch import nn

    def separable(cin, cout, stride):
        return nn.Sequential(
            nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
            nn.ReLU(), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class MobileNet(nn.Module):
        def __init__(self):
            super().__init__()
            cfg = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1),
                   (256, 512, 2), (512, 512, 1), (512, 512, 1), (512, 1024, 2)]
            self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False),
                                      nn.BatchNorm2d(32), nn.ReLU())
            self.blocks = nn.Sequential(*[separable(*c) for c in cfg])
            self.fc = nn.Linear(1024, 1000)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(0)
    return MobileNet()


def _models(size: int) -> dict:
    from models import build_models

    return {"resnet18": build_models()["resnet18"][0], "mobilenet": mobilenet_style()}


def _time_interleaved(fns: list, repeat: int, clock=time.perf_counter) -> list[tuple[float,
                                                                                  float]]:
    """(min, median) seconds of each of ``fns``, timed in turns (one call of each per round),
    so that the load of a shared machine drifts over all of them alike. As in models.py, a
    short pause and an untimed call come before each timed one: the previous runtime's pool
    threads (ORT's spin after a run, kiln's linger) go idle instead of taking this one's
    cores (without it kiln's 2-thread MobileNet int8 median was 7.1 ms against 2.9 alone)."""
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, samples in zip(fns, times):
            time.sleep(0.05)
            fn()
            start = clock()
            fn()
            samples.append(clock() - start)
    return [(float(np.min(t)), float(np.median(t))) for t in times]


def _export_and_quantize(model, shape, workdir, name, per_channel):
    import onnx
    import torch
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model.eval()
    f_path, q_path = (os.path.join(workdir, f"{name}_{k}.onnx") for k in ("f32", "int8"))
    torch.onnx.export(model, (torch.randn(*shape),), f_path, input_names=["input"],
                      output_names=["output"], dynamo=False, opset_version=17)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"input": rng.standard_normal(shape).astype("float32")}
                                 for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(f_path, q_path, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=per_channel)
    out_scale = [onnx.numpy_helper.to_array(i) for i in onnx.load(q_path).graph.initializer
                 if i.name.startswith("output_scale")]
    return f_path, q_path, float(out_scale[0]) if out_scale else float("nan")


def _kiln(path, shape, x, target):
    """kiln's graph executor for the ONNX model at ``path``: (run, compile seconds, output)."""
    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule
    from kiln.relay.frontend import from_onnx

    start = time.perf_counter()
    mod, params = from_onnx(path, shape={"input": list(shape)})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    compile_s = time.perf_counter() - start
    gmod = GraphModule(lib["default"](kiln.cpu(0)))
    gmod.set_input("input", x)
    gmod.run()
    return gmod.run, compile_s, gmod.get_output(0).numpy()


def _ort(path, x, threads=int(os.environ["KILN_NUM_THREADS"])):
    """onnxruntime's session for the model at ``path``: (run, output)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return (lambda: sess.run(None, {"input": x})), sess.run(None, {"input": x})[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,mobilenet")
    parser.add_argument("--size", type=int, default=224, help="input height and width")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--per-channel", action="store_true")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time CPU seconds of the process (time.process_time: all its "
                             "threads, so use it with KILN_NUM_THREADS=1) instead of wall time")
    args = parser.parse_args()
    from models import _machine

    print(_machine(), f"| KILN_NUM_THREADS={os.environ['KILN_NUM_THREADS']} | "
          f"input {args.size}x{args.size} | per_channel={args.per_channel} | "
          f"{'CPU' if args.cpu_time else 'wall'} time | target {args.target!r}")
    header = (f"{'model':10} {'kiln int8':>10} {'ort int8':>9} {'kiln f32':>9} "
              f"{'int8/ort':>9} {'f32/int8':>9} {'compile s':>10} {'max steps':>9}")
    print(header + "   (min ms, then median ms, over --repeat interleaved rounds)")
    models = _models(args.size)
    shape = (1, 3, args.size, args.size)
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            f_path, q_path, out_scale = _export_and_quantize(models[name], shape, workdir, name,
                                                             args.per_channel)
            run8, compile_s, out8 = _kiln(q_path, shape, x, args.target)
            run32, _, _ = _kiln(f_path, shape, x, args.target)
            run_ort, ref8 = _ort(q_path, x)
            steps = float(np.max(np.abs(out8 - ref8)) / out_scale)
            timings = _time_interleaved([run8, run_ort, run32], args.repeat,
                                        time.process_time if args.cpu_time else time.perf_counter)
            for stat, label in ((0, "min"), (1, "median")):
                k8, o8, k32 = (t[stat] * 1e3 for t in timings)
                print(f"{name + ' ' + label:10} {k8:10.2f} {o8:9.2f} {k32:9.2f} "
                      f"{k8 / o8:9.2f} {k32 / k8:9.2f} {compile_s:10.1f} {steps:9.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
