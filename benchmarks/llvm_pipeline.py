"""LLVM pipelines side by side: LLVM's stock -O3 vs kiln's (unroller only on marked loops).

    python benchmarks/llvm_pipeline.py [--models mlp1,mlp64,cnn,...] [--layers resnet18,...]
                                       [--rounds 5] [--repeat 7]

Each case is built twice in this process, once per pipeline
(``kiln.target.llvm_toolchain.LLVM_UNROLLER`` True = stock, False = kiln's), each against a
fresh ``KILN_CACHE_DIR``; the row gives the CPU seconds kiln's LLVM thread spent on each build
and the run times of the two libraries, timed in interleaved rounds (stock, kiln, kiln,
stock, ...): at 1 thread by this process's CPU time (load does not inflate it), at 2 threads
by wall time; ratios kiln/stock as min/median over the rounds (below 1: kiln's pipeline is
faster), and whether the two outputs are equal. Models are ``benchmarks/models.py``'s (graph
executor); layers are ``benchmarks/ops.py``'s ResNet-18 and MobileNet convolutions and denses
as one-op models. The machine load is printed: compare ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
os.environ.setdefault("OMP_WAIT_POLICY", "passive")
PIPELINES = {"stock": True, "kiln": False}  # name -> LLVM_UNROLLER


def build_both(make):
    """``{pipeline: (run, output, llvm cpu s)}`` of ``make()`` (a build returning run and
    output functions) under each pipeline, each with an empty cache directory."""
    from kiln.target import llvm_toolchain

    built = {}
    for name, unroller in PIPELINES.items():
        llvm_toolchain.LLVM_UNROLLER = unroller
        os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-pipeline-")
        start = llvm_toolchain.llvm_thread_seconds()
        run, output = make()
        built[name] = (run, output, llvm_toolchain.llvm_thread_seconds() - start)
    llvm_toolchain.LLVM_UNROLLER = False
    return built


def model_builder(name: str, workdir: str):
    """A function building benchmark model ``name`` (exported to ONNX once)."""
    import torch
    from models import build_models

    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule
    from kiln.relay.frontend import from_onnx

    model, shape = build_models()[name]
    model.eval()
    x = torch.randn(*shape)
    path = os.path.join(workdir, f"{name}.onnx")
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                      dynamo=False, opset_version=17)

    def make():
        mod, params = from_onnx(path, shape={"input": list(shape)})
        with kiln.transform.PassContext(opt_level=3):
            lib = relay.build(mod, target="llvm", params=params)
        gmod = GraphModule(lib["default"](kiln.cpu(0)))
        gmod.set_input("input", x.numpy())
        return gmod.run, lambda: gmod.get_output(0).numpy()

    return make


def layer_builders(group: str) -> dict:
    """name -> builder of ops.py's layers of ``group`` (resnet18, mobilenet or dense)."""
    import ops

    from kiln import relay

    rng = np.random.default_rng(0)

    def conv(c, h, w, o, kernel, stride, pad, groups=1):
        x = rng.standard_normal((1, c, h, w)).astype("float32")
        wt = rng.standard_normal((o, c // groups, kernel, kernel)).astype("float32") * 0.1

        def call(d, p):
            return relay.nn.conv2d(d, p["w"], (stride, stride), (pad,) * 4, channels=o,
                                   kernel_size=(kernel, kernel), groups=groups)
        return lambda: ops.kiln_one_op(call, x, {"w": wt}, "llvm")[1:]

    def dense(m, k, n):
        x = rng.standard_normal((m, k)).astype("float32")
        w = rng.standard_normal((n, k)).astype("float32")
        return lambda: ops.kiln_one_op(lambda d, p: relay.nn.dense(d, p["w"], units=n), x,
                                       {"w": w}, "llvm")[1:]

    if group == "resnet18":
        return {f"conv{c}x{h}->{o}k{k}s{s}": conv(c, h, w, o, k, s, p)
                for c, h, w, o, k, s, p in ops.RESNET18_CONVS}
    if group == "mobilenet":
        return {f"{'dw' if g > 1 else 'conv'}{c}x{h}->{o}k{k}s{s}": conv(c, h, w, o, k, s, p, g)
                for c, h, w, o, k, s, p, g in ops.MOBILENET_CONVS}
    if group == "dense":
        return {f"dense{m}x{k}->{n}": dense(m, k, n) for m, k, n in ops.DENSES}
    raise SystemExit(f"unknown layer group {group!r}: resnet18, mobilenet or dense")


def _set_threads(n: int) -> None:
    from kiln.runtime.native import load_runtime_lib

    load_runtime_lib().KilnRuntimeSetNumThreads(n)


def compare(built: dict, rounds: int, repeat: int) -> dict:
    """Per thread count, the per-round kiln/stock ratios of the best of ``repeat`` timings."""
    runs = {name: run for name, (run, _, _) in built.items()}
    first = next(iter(runs.values()))
    start = time.perf_counter()
    first()
    number = max(1, int(0.02 / max(time.perf_counter() - start, 1e-6)))  # ~20 ms a timing
    ratios = {}
    for threads, clock in ((1, time.process_time), (2, time.perf_counter)):
        _set_threads(threads)
        per_round = []
        for r in range(rounds):
            best = {}
            for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                runs[name]()
                samples = []
                for _ in range(repeat):
                    t = clock()
                    for _ in range(number):
                        runs[name]()
                    samples.append((clock() - t) / number)
                best[name] = min(samples)
            per_round.append(best["kiln"] / best["stock"])
        ratios[threads] = per_round
    _set_threads(int(os.environ.get("KILN_NUM_THREADS", "2")))
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp1,mlp64,cnn,resnet18,mobilenet,lstm,gru,"
                        "transformer,transformer4")
    parser.add_argument("--layers", default="resnet18,mobilenet,dense",
                        help="ops.py layer groups, or '' for none")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"load {os.getloadavg()[0]:.1f}; ratios kiln/stock, min/median of {args.rounds} "
          f"rounds; 1 thread CPU time, 2 threads wall")
    print(f"{'case':24} {'llvm cpu s stock/kiln':>22} {'t1 min/med':>12} {'t2 min/med':>12} "
          f"{'same out':>8} load")
    cases = {}
    with tempfile.TemporaryDirectory() as workdir:
        for name in filter(None, args.models.split(",")):
            cases[name] = model_builder(name, workdir)
        for group in filter(None, args.layers.split(",")):
            cases.update(layer_builders(group))
        cpu = {"stock": 0.0, "kiln": 0.0}
        for name, make in cases.items():
            built = build_both(make)
            outputs = {key: (run(), output())[1] for key, (run, output, _) in built.items()}
            same = np.array_equal(outputs["stock"], outputs["kiln"])
            close = same or np.allclose(outputs["stock"], outputs["kiln"], rtol=1e-4,
                                        atol=1e-5)
            ratios = compare(built, args.rounds, args.repeat)
            for key in cpu:
                cpu[key] += built[key][2]
            t1, t2 = (f"{min(ratios[t]):.3f}/{np.median(ratios[t]):.3f}" for t in (1, 2))
            print(f"{name:24} {built['stock'][2]:10.3f}/{built['kiln'][2]:<11.3f} {t1:>12} "
                  f"{t2:>12} {'yes' if same else 'close' if close else 'NO':>8} "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
        print(f"LLVM CPU seconds in all: stock {cpu['stock']:.2f}, kiln {cpu['kiln']:.2f} "
              f"({cpu['kiln'] / max(cpu['stock'], 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
