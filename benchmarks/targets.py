"""kiln on two targets (``c`` vs ``llvm`` by default), model by model and layer by layer.

    python benchmarks/targets.py [--models resnet18,mobilenet,...] [--targets c,llvm]
                                 [--repeat 10] [--rounds 3] [--stat median|min] [--cpu-time]
                                 [--layers resnet18] [--layer-rounds 5]

Each model of ``benchmarks/models.py`` (and ``<model>_int8``: ``benchmarks/quant.py``'s
ResNet-18 or MobileNet quantized by onnxruntime) is exported to ONNX and built with
``relay.build`` at opt level 3 for both targets; the two graph executors (``lstm_vm``: two
VMs) get the same input, their outputs are compared, and each round times both at 1 and 2
threads, interleaved (the median, or ``--stat min`` the minimum, of ``--repeat`` timings).
The table gives the first target's time over the second's as min/median over the rounds,
1 thread (CPU time with ``--cpu-time``) and 2 threads, their geometric means, both compile
times and the machine load.

``--layers MODEL`` times the model's kernels one by one with the debug executor
(``run_individual``, 1 thread, both targets interleaved for ``--layer-rounds`` rounds, the
minimum kept) and lists each kernel's times and ratio, slowest first: where a target loses.
Ratios measured in the same run are the result; absolute times on shared machines are noise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402  (the model set, its export and timing helpers)


def _export(name: str, workdir: str) -> tuple[str, np.ndarray, bool]:
    """Export model ``name`` to ONNX; return (path, an input, whether it runs on the VM).
    ``<model>_int8``: quant.py's model (resnet18, mobilenet), quantized by onnxruntime."""
    import torch

    if name.endswith("_int8"):
        import quant

        shape = (1, 3, 224, 224)
        model = quant._models(224)[name[:-len("_int8")]]
        path = quant._export_and_quantize(model, shape, workdir, name, False)[1]
        return path, np.random.default_rng(1).standard_normal(shape).astype("float32"), False
    model, shape = models.build_models()[models.VM_MODELS.get(name, name)]
    model.eval()
    torch.manual_seed(1)
    x = torch.randn(*shape)
    on_vm = name in models.VM_MODELS
    path = os.path.join(workdir, f"{name}.onnx")
    dynamic = {"input": {0: "seq"}, "output": {0: "seq"}} if on_vm else None
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                      dynamo=False, opset_version=17, dynamic_axes=dynamic)
    return path, x.numpy(), on_vm


def _build(path: str, x: np.ndarray, target: str, on_vm: bool):
    """(run, output, lib, executor, compile seconds) for one target, input already set."""
    start = time.perf_counter()
    run, output, lib, executor = models._compile_kiln(path, x.shape, target, on_vm)
    seconds = time.perf_counter() - start
    if on_vm:
        executor.set_input("main", x)
    else:
        executor.set_input("input", x)
    run()
    return run, output, lib, executor, seconds


def bench_model(name: str, targets: list[str], repeat: int, rounds: int, workdir: str):
    """Per-round times of each target at 1 and 2 threads, compile times, output difference."""
    path, x, on_vm = _export(name, workdir)
    built = {t: _build(path, x, t, on_vm) for t in targets}
    outs = [built[t][1]() for t in targets]
    diff = float(np.abs(outs[0] - outs[1]).max())
    number = 1 if name.split("_")[0] in ("resnet18", "mobilenet", "transformer4") else 10

    def at(threads, run):
        def timed():
            models._set_kiln_threads(threads)
            run()
        return timed

    fns = {f"{t}{n}": at(n, built[t][0]) for n in (1, 2) for t in targets}
    per_round = [models._round_times(fns, repeat, number) for _ in range(rounds)]
    models._set_kiln_threads(int(os.environ["KILN_NUM_THREADS"]))
    return per_round, {t: built[t][4] for t in targets}, diff


def bench_layers(name: str, targets: list[str], layer_rounds: int, workdir: str) -> None:
    """Each kernel's 1-thread time on both targets (minimum over interleaved rounds)."""
    import kiln
    from kiln.contrib.debugger import debug_executor

    path, x, _ = _export(name, workdir)
    executors = {}
    for t in targets:
        lib = _build(path, x, t, False)[2]
        m = debug_executor.create(lib.get_graph_json(), lib.get_lib(), kiln.cpu(0))
        m.set_input(**lib.get_params())
        m.set_input("input", x)
        executors[t] = m
    models._set_kiln_threads(1)
    best = {t: None for t in targets}
    for _ in range(layer_rounds):
        for t in targets:
            times = np.array(executors[t].run_individual(number=3, repeat=1))
            best[t] = times if best[t] is None else np.minimum(best[t], times)
    models._set_kiln_threads(int(os.environ["KILN_NUM_THREADS"]))
    ops = executors[targets[0]].module.op_execs
    other = executors[targets[1]].module.op_execs
    if [op.func_name for op in ops] != [op.func_name for op in other]:
        print("the two targets' graphs call different kernels: no per-layer pairing")
        return
    a, b = best[targets[0]], best[targets[1]]
    print(f"\n{name} kernels, 1 thread, min of {layer_rounds} rounds "
          f"(load {os.getloadavg()[0]:.1f}); total {targets[0]} {a.sum() * 1e3:.3f} ms, "
          f"{targets[1]} {b.sum() * 1e3:.3f} ms, ratio {a.sum() / b.sum():.2f}")
    print(f"{'us ' + targets[0]:>10} {'us ' + targets[1]:>10} {'ratio':>6}  kernel")
    for i in np.argsort(-a):
        print(f"{a[i] * 1e6:10.1f} {b[i] * 1e6:10.1f} {a[i] / b[i]:6.2f}  {ops[i].func_name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=models.DEFAULT_MODELS)
    parser.add_argument("--targets", default="c,llvm", help="two kiln targets: A,B (A/B)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stat", choices=["median", "min"], default="median")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time the 1-thread runs by this process's CPU time")
    parser.add_argument("--layers", default="", help="models to time kernel by kernel")
    parser.add_argument("--layer-rounds", type=int, default=5)
    args = parser.parse_args()
    targets = args.targets.split(",")
    if len(targets) != 2:
        parser.error("--targets takes two targets, e.g. c,llvm")
    models.STATISTIC[0] = {"median": np.median, "min": np.min}[args.stat]
    if args.cpu_time:
        models.ONE_THREAD_CLOCK[0] = time.process_time
    a, b = targets
    print(f"machine: {models._machine()}; {a} vs {b}; {args.stat} of {args.repeat} repeats, "
          f"{args.rounds} rounds, 1-thread clock {'CPU' if args.cpu_time else 'wall'}, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'model':12} {a + '2 ms':>9} {b + '2 ms':>9} {'1 thr min/med':>14} "
          f"{'2 thr min/med':>14} {'compile ' + a:>10} {'compile ' + b:>10} {'max|diff|':>9}")
    ratios1, ratios2 = [], []
    with tempfile.TemporaryDirectory() as workdir:
        for name in filter(None, args.models.split(",")):
            try:
                rounds, compile_s, diff = bench_model(name, targets, args.repeat, args.rounds,
                                                      workdir)
            except Exception as err:  # report and go on with the other models
                print(f"{name:12} failed: {type(err).__name__}: {str(err).splitlines()[0]}")
                continue
            r1 = models._ratio(rounds, f"{a}1", f"{b}1")
            r2 = models._ratio(rounds, f"{a}2", f"{b}2")
            ratios1.append(r1[1])
            ratios2.append(r2[1])
            best = {k: min(r[k] for r in rounds) for k in rounds[0]}
            print(f"{name:12} {best[a + '2'] * 1e3:9.3f} {best[b + '2'] * 1e3:9.3f} "
                  f"{r1[0]:6.2f}/{r1[1]:<7.2f} {r2[0]:6.2f}/{r2[1]:<7.2f} "
                  f"{compile_s[a]:10.1f} {compile_s[b]:10.1f} {diff:9.2e}", flush=True)
        if ratios1:
            geo = [float(np.exp(np.mean(np.log(r)))) for r in (ratios1, ratios2)]
            print(f"geomean of median ratios {a}/{b}: 1 thread {geo[0]:.2f}, 2 threads "
                  f"{geo[1]:.2f}; load {os.getloadavg()[0]:.1f}")
        for name in filter(None, args.layers.split(",")):
            bench_layers(name, targets, args.layer_rounds, workdir)


if __name__ == "__main__":
    main()
