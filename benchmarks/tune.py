"""AutoTVM benchmark: search efficiency, tuning throughput (local vs Ray), ResNet-18 tuned.

    python benchmarks/tune.py [--sections search,throughput,resnet] [--target T]
                              [--trials 32] [--budget-min 20] [--candidates 16]

Three tables, each from one run on this machine (ratios are the result; absolute times on a
shared machine are noise):

* ``search``: a small conv task (``conv2d_nchw.x86``, 1x32x28x28, 32 filters 3x3). Grid
  search measures the whole space; XGBTuner and RandomTuner then search it again against a
  *replay* of the grid's measurements (each config costs what grid measured), so the table
  shows search efficiency alone: trials each tuner needs to come within 5% of the grid
  optimum, against the grid's full space.
* ``throughput``: measured candidates per minute of ``conv2d_nchw.x86`` (ResNet-18's
  64-channel 3x3 layer) with LocalBuilder + LocalRunner, then with RayBuilder + RayRunner
  on a local Ray over the same configs; the Ray overhead is the relative difference.
* ``resnet``: ResNet-18 (batch 1, defined in ``benchmarks/models.py``), every task tuned
  with XGBTuner for at most ``--trials`` trials within ``--budget-min`` minutes in all;
  per-task GFLOPS of the default (untuned) config and of the best tuned one, tuning time per
  task; then the whole model untuned, tuned, and ONNX Runtime with 2 threads.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("KILN_NUM_THREADS", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _option(builder=None, runner=None, number=4, repeat=3):
    from kiln import autotvm

    return autotvm.measure_option(
        builder=builder or autotvm.LocalBuilder(n_parallel=2, timeout=30),
        runner=runner or autotvm.LocalRunner(number=number, repeat=repeat, min_repeat_ms=20,
                                             cooldown_interval=0.05, timeout=30))


def _conv_task(shape, filters, kernel, stride, pad, target):
    from kiln import autotvm, te

    data = te.placeholder(shape)
    weight = te.placeholder((filters, shape[1], kernel, kernel))
    return autotvm.task.create("conv2d_nchw.x86", (data, weight, (stride, stride),
                                                   (pad,) * 4, (1, 1), "float32"), target)


def section_search(target: str, grid_file: str | None = None) -> None:
    from kiln import autotvm
    from kiln.autotvm.measure import MeasureResult
    from kiln.autotvm.measure.measure import Builder, BuildResult, Runner

    task = _conv_task((1, 32, 28, 28), 32, 3, 1, 1, target)
    start = time.perf_counter()
    if grid_file and os.path.exists(grid_file):
        scores = [float(v) for v in Path(grid_file).read_text().split()]
    else:
        monitor = autotvm.callback.Monitor()
        autotvm.tuner.GridSearchTuner(task).tune(len(task.config_space), _option(),
                                                callbacks=[monitor])
        scores = monitor.trial_scores()
        if grid_file:
            Path(grid_file).write_text(" ".join(repr(v) for v in scores))
    grid_s = time.perf_counter() - start
    measured = dict(zip(range(len(task.config_space)), scores))
    optimum = max(measured.values())

    class Replay(Builder, Runner):
        """Each config costs what grid search measured for it."""

        def __init__(self):
            Builder.__init__(self, n_parallel=4)

        def build(self, inputs):
            return [BuildResult("replay", [], None, 0.0) for _ in inputs]

        def run(self, inputs, builds):
            now = time.time()
            return [MeasureResult((task.flop / measured[i.config.index],), 0, 0.0, now)
                    if measured[i.config.index] > 0 else
                    MeasureResult(("failed in grid",), 4, 0.0, now) for i in inputs]

    def trials_to_95(tuner) -> int:
        replay = Replay()
        mon = autotvm.callback.Monitor()
        tuner.tune(len(task.config_space), {"builder": replay, "runner": replay},
                   callbacks=[mon])
        best = np.maximum.accumulate(mon.trial_scores())
        return int(np.argmax(best >= 0.95 * optimum)) + 1

    print(f"\n## search: conv2d_nchw.x86 1x32x28x28 -> 32 3x3, {len(task.config_space)} "
          f"configs, grid optimum {optimum / 1e9:.1f} GFLOPS (grid took {grid_s:.0f} s)")
    print(f"{'tuner':18} {'trials to 95%':>14} {'of grid':>8}")
    print(f"{'GridSearchTuner':18} {len(task.config_space):14d} {1.0:8.2f}")
    for name, make in (("XGBTuner", lambda s: autotvm.tuner.XGBTuner(task, plan_size=4,
                                                                     seed=s)),
                       ("RandomTuner", lambda s: autotvm.tuner.RandomTuner(task, seed=s))):
        runs = [trials_to_95(make(seed)) for seed in range(5)]
        mean = float(np.mean(runs))
        print(f"{name:18} {mean:14.1f} {mean / len(task.config_space):8.2f}   "
              f"(5 seeds: {runs})")


def section_throughput(target: str, candidates: int) -> None:
    from kiln import autotvm
    from kiln.autotvm.measure import MeasureInput, create_measure_batch

    task = _conv_task((1, 64, 56, 56), 64, 3, 1, 1, target)
    configs = [task.config_space.get(i) for i in range(min(candidates,
                                                           len(task.config_space)))]
    inputs = [MeasureInput(task.target, task, c) for c in configs]

    def per_minute(option) -> float:
        batch = create_measure_batch(task, option)
        batch(inputs[:2])  # warm the workers outside the timing
        batch(inputs[2:4])
        start = time.perf_counter()
        for k in range(0, len(inputs), 2):
            batch(inputs[k:k + 2])
        elapsed = time.perf_counter() - start
        option["builder"].close()
        option["runner"].close()
        return len(inputs) / elapsed * 60

    local = per_minute(_option())
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        on_ray = per_minute(_option(autotvm.RayBuilder(timeout=30),
                                    autotvm.RayRunner(number=4, repeat=3, min_repeat_ms=20,
                                                      cooldown_interval=0.05, timeout=30)))
    finally:
        ray.shutdown()
    print(f"\n## throughput: {len(inputs)} candidates of conv2d_nchw.x86 1x64x56x56 -> 64 3x3")
    print(f"{'measurement':14} {'candidates/min':>15}")
    print(f"{'local':14} {local:15.1f}")
    print(f"{'ray (local)':14} {on_ray:15.1f}   overhead {(local / on_ray - 1) * 100:+.1f}%")


def _time(fn, repeat=20) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def section_resnet(target: str, trials: int, budget_min: float) -> None:
    import onnxruntime as ort
    import torch
    from models import build_models

    import kiln
    from kiln import autotvm, relay
    from kiln.autotvm.measure import MeasureInput, create_measure_batch
    from kiln.autotvm.task.space import FallbackConfigEntity
    from kiln.contrib.graph_executor import GraphModule
    from kiln.relay.frontend import from_onnx

    model, shape = build_models()["resnet18"]
    model.eval()
    workdir = tempfile.mkdtemp(prefix="kiln_tune_bench_")
    path = os.path.join(workdir, "resnet18.onnx")
    x = torch.randn(*shape)
    torch.onnx.export(model, (x,), path, input_names=["input"], output_names=["output"],
                      dynamo=False, opset_version=17)
    mod, params = from_onnx(path, shape={"input": list(shape)})
    tasks = autotvm.task.extract_from_program(mod, params, target)
    log = os.path.join(workdir, "resnet18.log")
    deadline = time.perf_counter() + budget_min * 60
    print(f"\n## resnet18: {len(tasks)} tasks, at most {trials} trials each, "
          f"{budget_min:g} min budget (target {target})")
    print(f"{'task':44} {'configs':>7} {'trials':>6} {'default GF':>10} {'tuned GF':>9} "
          f"{'tune s':>7}")
    for task in tasks:
        left = deadline - time.perf_counter()
        if left <= 0:
            print(f"{task.name:44} budget spent: untuned")
            continue
        option = _option()
        batch = create_measure_batch(task, option)
        default = batch([MeasureInput(task.target, task, FallbackConfigEntity())])[0]
        default_gf = task.flop / np.mean(default.costs) / 1e9 if default.error_no == 0 else 0
        n = min(trials, len(task.config_space))
        tuner = autotvm.tuner.XGBTuner(task, plan_size=max(4, min(16, n // 2)))
        start = time.perf_counter()
        tuner.tune(n, option, callbacks=[autotvm.callback.log_to_file(log)])
        shape_text = "x".join(str(d) for d in task.args[0][1]) + " w" + "x".join(
            str(d) for d in task.args[1][1])
        print(f"{task.name[:20] + ' ' + shape_text:44} {len(task.config_space):7d} {n:6d} "
              f"{default_gf:10.1f} {tuner.best_flops / 1e9:9.1f} "
              f"{time.perf_counter() - start:7.1f}", flush=True)

    xn = x.numpy()
    times = {}
    outs = {}
    for label, ctx in (("kiln untuned", None), ("kiln tuned", log)):
        with kiln.transform.PassContext(opt_level=3):
            if ctx is None:
                lib = relay.build(mod, target=target, params=params)
            else:
                with autotvm.apply_history_best(ctx):
                    lib = relay.build(mod, target=target, params=params)
        gmod = GraphModule(lib["default"](kiln.cpu(0)))
        gmod.set_input("input", xn)
        times[label] = _time(gmod.run)
        outs[label] = gmod.get_output(0).numpy()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    times["onnxruntime 2 threads"] = _time(lambda: sess.run(None, {"input": xn}))
    diff = float(np.abs(outs["kiln tuned"] - outs["kiln untuned"]).max())
    print(f"\n{'resnet18 batch 1':24} {'ms':>8} {'vs ORT2':>8}")
    for label, t in times.items():
        print(f"{label:24} {t * 1e3:8.2f} {t / times['onnxruntime 2 threads']:8.2f}")
    print(f"tuned speed-up over untuned: {times['kiln untuned'] / times['kiln tuned']:.2f}x; "
          f"max |tuned - untuned| = {diff:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="search,throughput,resnet")
    parser.add_argument("--target", default=None, help="default: llvm if llvmlite is "
                        "installed, else c")
    parser.add_argument("--trials", type=int, default=32, help="resnet: trials per task")
    parser.add_argument("--budget-min", type=float, default=20, help="resnet: minutes in all")
    parser.add_argument("--candidates", type=int, default=24, help="throughput: candidates")
    parser.add_argument("--grid-file", help="search: reuse (or save) the grid's measured "
                        "GFLOPS from this file, to compare search settings on one surface")
    args = parser.parse_args()
    from kiln.target.codegen_llvm import llvm_available

    target = args.target or ("llvm" if llvm_available() else "c")
    print(f"kiln target {target}; KILN_NUM_THREADS={os.environ['KILN_NUM_THREADS']}; "
          f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    sections = args.sections.split(",")
    if "search" in sections:
        section_search(target, args.grid_file)
    if "throughput" in sections:
        section_throughput(target, args.candidates)
    if "resnet" in sections:
        section_resnet(target, args.trials, args.budget_min)


if __name__ == "__main__":
    main()
