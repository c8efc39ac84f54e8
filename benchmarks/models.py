"""Whole-model benchmark: kiln vs onnxruntime (1 and 2 threads) vs PyTorch, in one run.

    python benchmarks/models.py [--models mlp1,mlp64,cnn,resnet18,transformer] [--target T]
                                [--repeat 10] [--stat median|min]

Each model is defined here in PyTorch (no torchvision), exported to ONNX at run time
(``torch.onnx.export(..., dynamo=False)``), imported with ``relay.frontend.from_onnx``,
compiled with ``relay.build`` and run on kiln's graph executor. The table reports medians
(or minimums, ``--stat min``, which other processes' load distorts less),
each runtime's ratio to onnxruntime with 2 threads, kiln's compile time, and the largest
difference between kiln's and PyTorch's outputs. Column ``reload``: the compiled library is
exported (``export_library``), loaded in a fresh Python process that imports only
``kiln.runtime``, run on the same input, and its output compared bit for bit with the
in-process run ("same" or "DIFFERS"). The machine is printed first: absolute times
on shared machines are noise, ratios measured in the same run are the result.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np

os.environ.setdefault("KILN_NUM_THREADS", "2")
# the per-runtime statistic over the repeats (``--stat``): median, or min on a loaded machine
STATISTIC = [np.median]


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def build_models():
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256),
                                     nn.ReLU(), nn.Linear(256, 10))

        def forward(self, x):
            return torch.softmax(self.net(x), dim=-1)

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.features(x), 1))

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            out = torch.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return torch.relu(out + (x if self.down is None else self.down(x)))

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                                      nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            x = self.layers(self.stem(x))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class EncoderBlock(nn.Module):
        def __init__(self, d=256, heads=4):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0,
                                                    batch_first=True)

        def forward(self, x):
            return self.layer(x)

    torch.manual_seed(0)
    return {
        "mlp1": (MLP(), (1, 784)),
        "mlp64": (MLP(), (64, 784)),
        "cnn": (SmallCNN(), (1, 3, 32, 32)),
        "resnet18": (ResNet18(), (1, 3, 224, 224)),
        "transformer": (EncoderBlock(), (1, 64, 256)),
    }


def _time(fn, repeat: int, number: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return float(STATISTIC[0](times))


def _reload_matches(lib, xn, out, workdir: str, name: str) -> str:
    """Export ``lib``, run it in a fresh process importing only kiln.runtime, compare."""
    so_path = os.path.join(workdir, f"{name}.so")
    x_path, y_path = (os.path.join(workdir, f"{name}_{io}.npy") for io in ("x", "y"))
    lib.export_library(so_path)
    np.save(x_path, xn)
    script = textwrap.dedent(f"""
        import sys, numpy as np
        import kiln.runtime as rt
        m = rt.load_module({so_path!r})["default"](rt.cpu(0))
        m.set_input("input", np.load({x_path!r}))
        m.run()
        np.save({y_path!r}, m.get_output(0).numpy())
        assert not [k for k in sys.modules if k.startswith("kiln.")
                    and not k.startswith("kiln.runtime") and k != "kiln._lazy"]
    """)
    subprocess.run([sys.executable, "-c", script], check=True)
    return "same" if np.array_equal(np.load(y_path), out) else "DIFFERS"


def bench_model(name, model, shape, target, repeat, workdir):
    import onnxruntime as ort
    import torch

    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule
    from kiln.relay.frontend import from_onnx

    model.eval()
    x = torch.randn(*shape)
    path = os.path.join(workdir, f"{name}.onnx")
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                      dynamo=False, opset_version=17)
    xn = x.numpy()
    number = 1 if name == "resnet18" else 10

    start = time.perf_counter()
    mod, params = from_onnx(path, shape={"input": list(shape)})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    compile_s = time.perf_counter() - start
    dev = kiln.cpu(0)
    gmod = GraphModule(lib["default"](dev))
    gmod.set_input("input", xn)
    t_kiln = _time(gmod.run, repeat, number)
    out = gmod.get_output(0).numpy()

    results = {"kiln": t_kiln, "reload": _reload_matches(lib, xn, out, workdir, name)}
    for threads in (1, 2):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        results[f"ort{threads}"] = _time(lambda s=sess: s.run(None, {"input": xn}), repeat,
                                         number)
    torch.set_num_threads(2)
    with torch.no_grad():
        results["torch"] = _time(lambda: model(x), repeat, number)
        ref = model(x).numpy()
    return results, compile_s, float(np.abs(out - ref).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp1,mlp64,cnn,resnet18,transformer")
    parser.add_argument("--target", default=None, help="kiln target (default: llvm if "
                        "llvmlite is installed, else c)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="statistic over the repeats (min resists other processes' load)")
    args = parser.parse_args()
    STATISTIC[0] = {"median": np.median, "min": np.min}[args.stat]
    from kiln.target.codegen_llvm import llvm_available

    target = args.target or ("llvm" if llvm_available() else "c")
    print(f"machine: {_machine()}; kiln target: {target}; KILN_NUM_THREADS="
          f"{os.environ['KILN_NUM_THREADS']}; {args.stat} of {args.repeat} repeats, load "
          f"{os.getloadavg()[0]:.1f}")
    header = (f"{'model':12} {'kiln ms':>9} {'ort1 ms':>9} {'ort2 ms':>9} {'torch ms':>9} "
              f"{'kiln/ort2':>9} {'torch/ort2':>10} {'compile s':>9} {'max|diff|':>10} reload")
    print(header)
    models = build_models()
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            model, shape = models[name]
            try:
                r, compile_s, diff = bench_model(name, model, shape, target, args.repeat,
                                                 workdir)
            except Exception as err:  # report and go on with the other models
                print(f"{name:12} failed: {type(err).__name__}: {str(err).splitlines()[0]}")
                continue
            print(f"{name:12} {r['kiln'] * 1e3:9.3f} {r['ort1'] * 1e3:9.3f} "
                  f"{r['ort2'] * 1e3:9.3f} {r['torch'] * 1e3:9.3f} "
                  f"{r['kiln'] / r['ort2']:9.2f} {r['torch'] / r['ort2']:10.2f} "
                  f"{compile_s:9.1f} {diff:10.2e} {r['reload']}", flush=True)


if __name__ == "__main__":
    main()
