"""Whole-model benchmark: kiln vs onnxruntime (1 and 2 threads) vs PyTorch, in one run.

    python benchmarks/models.py [--models mlp1,mlp64,cnn,...] [--target T] [--repeat 10]
                                [--rounds 3] [--stat median|min] [--cpu-time]

Each model is defined here in PyTorch (no torchvision), exported to ONNX at run time
(``torch.onnx.export(..., dynamo=False)``), imported with ``relay.frontend.from_onnx``,
compiled with ``relay.build`` and run on kiln's graph executor; ``lstm_vm`` is the LSTM
exported with a symbolic sequence length and run on the VM (``relay.vm.compile``). Models:
MLP at batch 1 and 64, a small CNN on 32x32 images, ResNet-18, a MobileNet-style
depthwise-separable CNN, a 2-layer LSTM and GRU (hidden 256, seq 32), a transformer encoder
block (seq 128, d 256) and a 4-layer encoder. Each round times every runtime (the median, or
with ``--stat min`` the minimum, of ``--repeat`` timings); the table gives kiln's ratio to
onnxruntime at 1 thread (kiln 1 thread) and 2 threads (kiln 2 threads) as min/median over the
rounds, their geometric means, kiln's compile time, and the largest difference between kiln's
and PyTorch's outputs. Column ``reload``: the compiled library is
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

# the checkout this script sits in, not whichever kiln the environment installed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KILN_NUM_THREADS", "2")
# before torch loads libgomp: its default spin-waiting workers would keep burning the 2 shared
# cores after each torch run, slowing whichever runtime is timed next (kiln at 1 thread)
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# the per-runtime statistic over the repeats (``--stat``): median, or min on a loaded machine
STATISTIC = [np.median]
# the clock of the 1-thread runtimes (``--cpu-time``): wall time, or this process's CPU time
ONE_THREAD_CLOCK = [time.perf_counter]


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

    class Encoder(nn.Module):
        def __init__(self, layers, d=256, heads=4):
            super().__init__()
            self.layers = nn.Sequential(*[
                nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
                for _ in range(layers)])

        def forward(self, x):
            return self.layers(x)

    class SeparableCNN(nn.Module):
        """MobileNet-v1 style: a stride-2 stem, then depthwise 3x3 + pointwise 1x1 pairs."""

        def __init__(self):
            super().__init__()

            def separable(cin, cout, stride):
                return [nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
                        nn.BatchNorm2d(cin), nn.ReLU(),
                        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

            layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()]
            for cin, cout, stride in ((32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2),
                                      (256, 256, 1), (256, 512, 2), (512, 512, 1),
                                      (512, 1024, 2)):
                layers += separable(cin, cout, stride)
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(1024, 1000)

        def forward(self, x):
            x = self.features(x)
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    class Recurrent(nn.Module):
        """``nn.LSTM`` / ``nn.GRU`` (2 layers, hidden 256), returning the output sequence."""

        def __init__(self, cell):
            super().__init__()
            self.rnn = cell(256, 256, num_layers=2)

        def forward(self, x):
            return self.rnn(x)[0]

    torch.manual_seed(0)
    return {
        "mlp1": (MLP(), (1, 784)),
        "mlp64": (MLP(), (64, 784)),
        "cnn": (SmallCNN(), (1, 3, 32, 32)),
        "resnet18": (ResNet18(), (1, 3, 224, 224)),
        "mobilenet": (SeparableCNN(), (1, 3, 224, 224)),
        "lstm": (Recurrent(nn.LSTM), (32, 1, 256)),
        "gru": (Recurrent(nn.GRU), (32, 1, 256)),
        "transformer": (Encoder(1), (1, 128, 256)),
        "transformer4": (Encoder(4), (1, 128, 256)),
    }


# Models run on the VM with a symbolic leading (sequence) dimension: name -> graph model.
VM_MODELS = {"lstm_vm": "lstm"}
DEFAULT_MODELS = ("mlp1,mlp64,cnn,resnet18,mobilenet,lstm,gru,transformer,transformer4,"
                  "lstm_vm")


def _set_kiln_threads(n: int) -> None:
    from kiln.runtime.native import load_runtime_lib

    load_runtime_lib().KilnRuntimeSetNumThreads(n)


def _round_times(fns: dict, repeat: int, number: int) -> dict:
    """One round: each runtime's statistic over ``repeat`` timings of ``number`` calls. A short
    pause before each runtime lets the previous one's spinning pool threads (ORT spins after a
    run) go idle instead of stealing the next one's cores."""
    times = {}
    for key, fn in fns.items():
        clock = ONE_THREAD_CLOCK[0] if key.endswith("1") else time.perf_counter
        time.sleep(0.05)
        fn()
        samples = []
        for _ in range(repeat):
            start = clock()
            for _ in range(number):
                fn()
            samples.append((clock() - start) / number)
        times[key] = float(STATISTIC[0](samples))
    return times


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


def _compile_kiln(path, shape, target, on_vm: bool):
    """Import and build the ONNX file; return (a run function, an output function, the lib)."""
    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule
    from kiln.relay.frontend import from_onnx
    from kiln.runtime.vm import VirtualMachine

    dev = kiln.cpu(0)
    if on_vm:
        mod, params = from_onnx(path, shape={"input": [relay.Any(), *shape[1:]]})
        with kiln.transform.PassContext(opt_level=3):
            exe = relay.vm.compile(mod, target=target, params=params)
        vm = VirtualMachine(exe, dev)
        return (lambda: vm.invoke_stateful("main"),
                lambda: vm.get_outputs()[0].numpy(), None, vm)
    mod, params = from_onnx(path, shape={"input": list(shape)})
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    gmod = GraphModule(lib["default"](dev))
    return gmod.run, lambda: gmod.get_output(0).numpy(), lib, gmod


def bench_model(name, model, shape, target, repeat, rounds, workdir):
    """Per-round times of kiln and onnxruntime at 1 and 2 threads and PyTorch at 2."""
    import onnxruntime as ort
    import torch

    model.eval()
    x = torch.randn(*shape)
    path = os.path.join(workdir, f"{name}.onnx")
    on_vm = name in VM_MODELS
    dynamic = {"input": {0: "seq"}, "output": {0: "seq"}} if on_vm else None
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                      dynamo=False, opset_version=17, dynamic_axes=dynamic)
    xn = x.numpy()
    number = 1 if name in ("resnet18", "mobilenet", "transformer4") else 10

    start = time.perf_counter()
    run, output, lib, executor = _compile_kiln(path, shape, target, on_vm)
    compile_s = time.perf_counter() - start
    if on_vm:
        executor.set_input("main", xn)
    else:
        executor.set_input("input", xn)
    run()
    out = output()
    reload = _reload_matches(lib, xn, out, workdir, name) if lib is not None else "-"

    sessions = {}
    for threads in (1, 2):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        sessions[threads] = ort.InferenceSession(path, opts,
                                                 providers=["CPUExecutionProvider"])

    def kiln_at(threads):
        def timed():
            _set_kiln_threads(threads)
            run()
        return timed

    def torch_run():
        with torch.no_grad():
            model(x)

    torch.set_num_threads(2)
    fns = {"kiln1": kiln_at(1), "ort1": lambda: sessions[1].run(None, {"input": xn}),
           "kiln2": kiln_at(2), "ort2": lambda: sessions[2].run(None, {"input": xn}),
           "torch": torch_run}
    per_round = [_round_times(fns, repeat, number) for _ in range(rounds)]
    _set_kiln_threads(int(os.environ["KILN_NUM_THREADS"]))
    with torch.no_grad():
        ref = model(x).numpy()
    return per_round, compile_s, float(np.abs(out - ref).max()), reload


def _ratio(per_round, num: str, den: str) -> tuple[float, float]:
    """(min, median) over the rounds of the ratio measured within each round."""
    ratios = [r[num] / r[den] for r in per_round]
    return float(np.min(ratios)), float(np.median(ratios))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--target", default=None, help="kiln target (default: llvm if "
                        "llvmlite is installed, else c)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of timings; ratios are reported as min/median of rounds")
    parser.add_argument("--stat", choices=["median", "min"], default="median",
                        help="statistic over the repeats (min resists other processes' load)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the 1-thread runs (kiln1, ort1) by this process's CPU time, "
                        "which other processes' load does not inflate (both run on the "
                        "calling thread alone)")
    args = parser.parse_args()
    STATISTIC[0] = {"median": np.median, "min": np.min}[args.stat]
    if args.cpu_time:
        ONE_THREAD_CLOCK[0] = time.process_time
    from kiln.target.codegen_llvm import llvm_available

    target = args.target or ("llvm" if llvm_available() else "c")
    print(f"machine: {_machine()}; kiln target: {target}; KILN_NUM_THREADS="
          f"{os.environ['KILN_NUM_THREADS']}; {args.stat} of {args.repeat} repeats, "
          f"{args.rounds} rounds, 1-thread clock "
          f"{'CPU' if args.cpu_time else 'wall'}, load {os.getloadavg()[0]:.1f}")
    print(f"{'model':12} {'kiln2 ms':>9} {'ort2 ms':>9} {'torch ms':>9} {'k1/o1 min/med':>14} "
          f"{'k2/o2 min/med':>14} {'torch/o2':>8} {'compile s':>9} {'max|diff|':>9} reload")
    models = build_models()
    ratios1, ratios2 = [], []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            model, shape = models[VM_MODELS.get(name, name)]
            try:
                rounds, compile_s, diff, reload = bench_model(
                    name, model, shape, target, args.repeat, args.rounds, workdir)
            except Exception as err:  # report and go on with the other models
                print(f"{name:12} failed: {type(err).__name__}: {str(err).splitlines()[0]}")
                continue
            best = {k: min(r[k] for r in rounds) for k in rounds[0]}
            r1, r2 = _ratio(rounds, "kiln1", "ort1"), _ratio(rounds, "kiln2", "ort2")
            ratios1.append(r1[1])
            ratios2.append(r2[1])
            print(f"{name:12} {best['kiln2'] * 1e3:9.3f} {best['ort2'] * 1e3:9.3f} "
                  f"{best['torch'] * 1e3:9.3f} {r1[0]:6.2f}/{r1[1]:<7.2f} "
                  f"{r2[0]:6.2f}/{r2[1]:<7.2f} {best['torch'] / best['ort2']:8.2f} "
                  f"{compile_s:9.1f} {diff:9.2e} {reload}", flush=True)
    if ratios2:
        geo = [float(np.exp(np.mean(np.log(r)))) for r in (ratios1, ratios2)]
        print(f"geomean of median ratios: kiln1/ort1 {geo[0]:.2f}, kiln2/ort2 {geo[1]:.2f}; "
              f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
