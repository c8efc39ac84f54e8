"""AutoTVM benchmark: search efficiency, tuning throughput (local vs Ray), ResNet-18 tuned.

    python benchmarks/tune.py [--sections search,throughput,resnet,micro] [--target T]
                              [--seeds 20] [--passes 3] [--grid-file F] [--tophub LOG]
                              [--candidates 24] [--rounds 3] [--trials 64] [--budget-min 20]

Three tables, each from one run on this machine (ratios are the result; absolute times on a
shared machine are noise):

* ``search``: ResNet-18's first 3x3 conv (``conv2d_nchw.x86`` 1x64x56x56, 64 filters: 280
  configs over tile_ic, tile_oc, tile_ow, unroll_kw). The whole grid is measured once with
  one thread (each config built once, timed in ``--passes`` shuffled passes, the fastest
  kept) and saved to ``--grid-file`` (``benchmarks/out/``; reused when present). Each tuner
  then searches a *replay* of that table (``kiln.autotvm.measure.replay``) with ``--seeds``
  seeds: trials needed to come within 5% of the grid optimum, mean and worst, against the
  grid's full space. ``--tophub LOG`` appends the grid's best config to a TopHub package.
* ``throughput``: measured candidates per minute of the same conv with LocalBuilder +
  LocalRunner and with RayBuilder + RayRunner on a local Ray, in ``--rounds`` interleaved
  rounds (Ray stays up through both); the Ray overhead is ``local / ray - 1`` per round.
* ``resnet``: ResNet-18 (batch 1, defined in ``benchmarks/models.py``), every task tuned
  with XGBTuner for at most ``--trials`` trials within ``--budget-min`` minutes in all (each
  task's trials cut to its share of the budget left, at least 8); then the tuner's 5 fastest
  configs and kiln's default re-timed side by side in 3 shuffled passes (the fastest kept),
  which the table reports (default / best GFLOPS) and the tuned builds use;
  per-task GFLOPS of the default (untuned) config and of the best tuned one, tuning time per
  task (the convolutions are ``conv2d_NCHWc.x86`` tasks, whose tile_ic / tile_oc choose the
  blocked activation layouts; the 3x3 stride-1 ones also ``conv2d_nchw_winograd.x86`` tasks,
  whose records win where faster: a second table shows, per such conv, the untuned GFLOPS
  against the best direct and Winograd configs); the graph tuner (``DPTuner``, 8 candidates
  per conv, layout transforms timed) then picks configs whose layouts agree; the whole model
  untuned, tuned (``apply_history_best``), tuned + graph tuner (``apply_graph_best``), and
  ONNX Runtime with 2 threads, timed in interleaved rounds.
* ``micro`` (not in the default sections): six Cortex-M tasks (float and int8 conv and
  dense, keyword-spotting sizes), every config measured on ``--board`` under QEMU
  (``kiln.micro.autotvm``: exact instruction counts, so the table does not depend on load);
  kiln's default schedule against the best config.
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


def search_task(target: str):
    """ResNet-18's first 3x3 conv (1x64x56x56, 64 filters): 280 configs over tile_ic,
    tile_oc, tile_ow and unroll_kw (AVX2 blocks: AVX-512 widens tile_ow to 392 configs,
    so the target is pinned to the shipped grid's)."""
    return _conv_task((1, 64, 56, 56), 64, 3, 1, 1, f"{target} -mcpu=core-avx2")


def trials_to_within(task, table: dict, make_tuner, seed: int, within: float = 0.05) -> int:
    """Trials ``make_tuner(seed)`` needs on the replayed ``table`` to come within ``within``
    of its optimum."""
    from kiln import autotvm
    from kiln.autotvm.measure.replay import replay_option

    optimum = min(c for c in table.values() if c is not None)
    tuner = make_tuner(task, seed)
    mon = autotvm.callback.Monitor()
    tuner.tune(len(table), replay_option(table), early_stopping=None, callbacks=[mon])
    best = np.maximum.accumulate(mon.trial_scores())
    hit = np.nonzero(best >= (1 - within) * task.flop / optimum)[0]
    return int(hit[0]) + 1 if len(hit) else len(table) + 1


SEARCH_TUNERS = {
    "XGBTuner": lambda task, seed: _xgb(task, seed),
    "XGB plan 64": lambda task, seed: _tuner("XGBTuner", task, seed, plan_size=64),
    "GATuner": lambda task, seed: _tuner("GATuner", task, seed, pop_size=16),
    "RandomTuner": lambda task, seed: _tuner("RandomTuner", task, seed),
}


def _xgb(task, seed):
    from kiln import autotvm

    return autotvm.tuner.XGBTuner(task, seed=seed)


def _tuner(name, task, seed, **kwargs):
    from kiln import autotvm

    return getattr(autotvm.tuner, name)(task, seed=seed, **kwargs)


def write_tophub_record(path: str, task, table: dict) -> None:
    """Append the grid's best config as a record (kiln's TopHub package is made so)."""
    from kiln.autotvm import record
    from kiln.autotvm.measure import MeasureInput, MeasureResult

    cost, index = min((c, i) for i, c in table.items() if c is not None)
    inp = MeasureInput(task.target, task, task.config_space.get(index))
    with open(path, "a") as f:
        f.write(record.encode(inp, MeasureResult((cost,), 0, cost, time.time())) + "\n")
    print(f"wrote the best config ({task.config_space.get(index)}) to {path}")


def section_search(target: str, grid_file: str, seeds: int, passes: int,
                   tophub_file: str | None = None) -> None:
    from kiln.autotvm.measure.replay import load_table, measure_table, save_table

    task = search_task(target)
    if os.path.exists(grid_file):
        table, how = load_table(grid_file, task), f"replayed from {grid_file}"
    else:
        load, start = os.getloadavg()[0], time.perf_counter()
        # one thread: a parallel launch waits for its slowest worker, which on a shared
        # machine is noise, not the schedule (workers read the variable when they start)
        threads, os.environ["KILN_NUM_THREADS"] = os.environ["KILN_NUM_THREADS"], "1"
        try:
            table = measure_table(task, _option(number=4, repeat=5), passes=passes)
        finally:
            os.environ["KILN_NUM_THREADS"] = threads
        how = (f"grid measured ({passes} shuffled passes, 1 thread) in "
               f"{time.perf_counter() - start:.0f} s from load {load:.1f}, saved to {grid_file}")
        Path(grid_file).parent.mkdir(parents=True, exist_ok=True)
        save_table(grid_file, task, table, load=load, passes=passes, threads=1,
                   measured=time.ctime())
    valid = [c for c in table.values() if c is not None]
    optimum = min(valid)
    if tophub_file:
        write_tophub_record(tophub_file, task, table)
    near = sum(c <= optimum / 0.95 for c in valid)
    print(f"\n## search: conv2d_nchw.x86 1x64x56x56 -> 64 3x3 (ResNet-18 layer 1), "
          f"{len(table)} configs ({len(table) - len(valid)} failed); grid optimum "
          f"{task.flop / optimum / 1e9:.1f} GFLOPS; {near} configs within 5% of it; {how}")
    print(f"{'tuner':14} {'mean trials':>11} {'worst':>6} {'mean/grid':>9} {'worst/grid':>10}"
          f"   ({seeds} seeds)")
    print(f"{'GridSearch':14} {len(table):11d} {len(table):6d} {1.0:9.2f} {1.0:10.2f}")
    for name, make in SEARCH_TUNERS.items() if seeds else ():
        runs = [trials_to_within(task, table, make, seed) for seed in range(seeds)]
        mean, worst = float(np.mean(runs)), max(runs)
        print(f"{name:14} {mean:11.1f} {worst:6d} {mean / len(table):9.2f} "
              f"{worst / len(table):10.2f}   {runs}", flush=True)


def section_throughput(target: str, candidates: int, rounds: int) -> None:
    import ray

    from kiln import autotvm
    from kiln.autotvm.measure import MeasureInput, create_measure_batch

    task = search_task(target)
    configs = [task.config_space.get(i) for i in range(0, len(task.config_space),
                                                       len(task.config_space) // candidates)]
    inputs = [MeasureInput(task.target, task, c) for c in configs[:candidates]]

    def per_minute(option) -> float:
        batch = create_measure_batch(task, option)
        batch(inputs[:2])  # start the workers outside the timing
        start = time.perf_counter()
        for k in range(0, len(inputs), 2):
            batch(inputs[k:k + 2])
        elapsed = time.perf_counter() - start
        option["builder"].close()
        option["runner"].close()
        return len(inputs) / elapsed * 60

    def ray_option():
        return _option(autotvm.RayBuilder(timeout=30),
                       autotvm.RayRunner(number=4, repeat=3, min_repeat_ms=20,
                                         cooldown_interval=0.05, timeout=30))

    # Ray stays up through the local rounds too: both see its idle daemons, and the rounds
    # alternate so that both see the same drift of the machine's load
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    local, on_ray, loads = [], [], []
    try:
        for _ in range(rounds):
            loads.append(os.getloadavg()[0])
            local.append(per_minute(_option()))
            on_ray.append(per_minute(ray_option()))
    finally:
        ray.shutdown()
    ratios = [a / b - 1 for a, b in zip(local, on_ray)]
    print(f"\n## throughput: {len(inputs)} candidates of conv2d_nchw.x86 1x64x56x56 -> 64 3x3, "
          f"{rounds} interleaved rounds, load {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'measurement':14} {'best':>6} {'median':>7} {'worst':>6}   candidates/min per round")
    for name, runs in (("local", local), ("ray (local)", on_ray)):
        print(f"{name:14} {max(runs):6.1f} {float(np.median(runs)):7.1f} {min(runs):6.1f}   "
              f"{[round(r, 1) for r in runs]}")
    print(f"Ray overhead (local/ray - 1) per round: {[f'{r:+.1%}' for r in ratios]}; "
          f"median {float(np.median(ratios)):+.1%}")


def _interleaved_times(fns: dict, rounds: int = 7, per_round: int = 5) -> dict:
    """Per label: the median and min over ``rounds`` rounds of the mean of ``per_round``
    runs, the labels' rounds interleaved so that all see the same drift of the load. A short
    pause and an untimed call before each label's runs let the previous runtime's spinning
    pool threads (ORT spins after a run) go idle instead of taking the next one's cores
    (without it kiln untuned, timed right after ORT, read 1.39x ORT here; models.py 1.03x)."""
    for fn in fns.values():
        fn()
    samples: dict = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            time.sleep(0.05)
            fn()
            start = time.perf_counter()
            for _ in range(per_round):
                fn()
            samples[label].append((time.perf_counter() - start) / per_round)
    return {label: (float(np.median(v)), float(min(v))) for label, v in samples.items()}


def _graph_tune(mod, shape, log: str, target: str, workdir: str, max_sch_num: int) -> str:
    """The graph tuner's choice of conv records (DPTuner; layout transforms timed here):
    the records file for ``apply_graph_best``."""
    from kiln import relay
    from kiln.autotvm.graph_tuner import DPTuner

    start = time.perf_counter()
    tuner = DPTuner(mod["main"], {"input": tuple(shape)}, log, [relay.op.get("nn.conv2d")],
                    target, max_sch_num=max_sch_num)
    tuner.benchmark_layout_transform(min_exec_num=50)
    tuner.run()
    out = os.path.join(workdir, "resnet18_graph.log")
    tuner.write_opt_sch2record_file(out)
    members, _, _ = tuner.problem()
    best = tuner.total_cost(tuner.per_layer_best_choice())
    chosen = tuner.total_cost(tuner.chosen_choice())
    print(f"graph tuner: {len(members)} conv workloads, {max_sch_num} candidates each, "
          f"modelled {best * 1e3:.2f} ms per-layer best -> {chosen * 1e3:.2f} ms chosen "
          f"({time.perf_counter() - start:.0f} s)")
    for inp, _ in tuner.get_optimal_records():
        cfg = inp.config
        print(f"  {'x'.join(str(d) for d in inp.task.args[1][1]):14} "
              f"NCHW{cfg['tile_ic'].size[-1]}c -> NCHW{cfg['tile_oc'].size[-1]}c "
              f"tile_ow {cfg['tile_ow'].size[-1]}")
    return out


# configs per task timed again after tuning (the tuner's fastest and kiln's default)
REMEASURED = 6


def _remeasure(task, log: str, option, passes: int = 3) -> tuple[list, float]:
    """The tuner's ``REMEASURED - 1`` fastest configs of ``task`` in ``log`` and kiln's
    default config, timed again together in ``passes`` shuffled passes, the fastest of each
    kept: ``(records, default cost)``. One noisy measurement among dozens picks the luckiest
    config, not the fastest; re-timing the few best side by side removes that bias from the
    tuned model and from the per-task table."""
    from kiln.autotvm.measure import MeasureInput, MeasureResult, create_measure_batch
    from kiln.autotvm.record import load_from_file
    from kiln.autotvm.task.task import default_config_index

    rows = sorted((float(np.mean(res.costs)), str(inp.config), inp.config)
                  for inp, res in load_from_file(log)
                  if inp.task.workload == task.workload and res.error_no == 0)
    configs: dict = {}
    for _, key, config in rows:
        if len(configs) < REMEASURED - 1:
            configs.setdefault(key, config)
    with task.target:
        default = task.config_space.get(default_config_index(task))
    configs.setdefault(str(default), default)
    configs = list(configs.values())
    batch = create_measure_batch(task, option)
    best = [float("inf")] * len(configs)
    rng = np.random.default_rng(0)
    for _ in range(passes):
        order = rng.permutation(len(configs))
        results = batch([MeasureInput(task.target, task, configs[i]) for i in order])
        for i, res in zip(order, results):
            if res.error_no == 0:
                best[i] = min(best[i], float(np.mean(res.costs)))
    records = [(MeasureInput(task.target, task, config), MeasureResult((cost,), 0, 0.0,
                                                                        time.time()))
               for config, cost in zip(configs, best) if cost < float("inf")]
    return records, best[configs.index(default)]


def _task_label(task) -> str:
    name = task.name.split(".")[0]
    return f"{name} " + "x".join(str(d) for d in task.args[0][1]) + " w" + "x".join(
        str(d) for d in task.args[1][1])


def _print_winograd_gains(per_task: dict) -> None:
    """Per 3x3 stride-1 conv: the untuned (direct default) GFLOPS against the best direct
    and the best Winograd config (both count the direct conv's flops); the faster is what
    apply_history_best builds."""
    rows = [(args, gf) for (name, args), gf in per_task.items()
            if name == "conv2d_nchw_winograd.x86"]
    if not rows:
        return
    print(f"\n{'3x3 stride-1 conv':34} {'untuned GF':>10} {'direct best':>11} "
          f"{'winograd best':>13} {'speed-up':>8}")
    for args, (_, winograd) in rows:
        direct = per_task.get(("conv2d_NCHWc.x86", args))
        if direct is None:
            continue
        label = "x".join(str(d) for d in args[0][1]) + " w" + "x".join(
            str(d) for d in args[1][1])
        print(f"{label:34} {direct[0]:10.1f} {direct[1]:11.1f} {winograd:13.1f} "
              f"{max(direct[1], winograd) / direct[0]:7.2f}x")


def section_resnet(target: str, trials: int, budget_min: float) -> None:
    import onnxruntime as ort
    import torch
    from models import build_models

    import kiln
    from kiln import autotvm, relay
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
          f"{budget_min:g} min budget (target {target}; logs in {workdir})")
    print(f"{'task':46} {'configs':>7} {'trials':>6} {'tuner GF':>8} {'default GF':>10} "
          f"{'best GF':>8} {'tune s':>7}  best config (re-measured)")
    refined = os.path.join(workdir, "resnet18_remeasured.log")
    # seconds per trial: a first guess, then what each template's trials took (a Winograd
    # candidate builds 3-4x longer than a direct conv's)
    measured: dict = {}
    per_task: dict = {}  # (task name, NCHW-terms conv args) -> (default GF, best GF)
    for k, task in enumerate(tasks):
        left = deadline - time.perf_counter()
        if left <= 0:
            print(f"{_task_label(task):46} budget spent: untuned")
            continue
        option = _option()
        # the budget shared by the tasks left, so that every task gets tuned
        guesses = measured.get(task.name) or [t for v in measured.values() for t in v] or [1.0]
        share = int(left / (len(tasks) - k) / float(np.mean(guesses)))
        n = max(8, min(trials, len(task.config_space), share))
        tuner = autotvm.tuner.XGBTuner(task, plan_size=max(4, min(16, n // 2)))
        start = time.perf_counter()
        tuner.tune(n, option, callbacks=[autotvm.callback.log_to_file(log)])
        seconds = time.perf_counter() - start
        option = _option()
        records, default_cost = _remeasure(task, log, option)
        option["builder"].close()
        option["runner"].close()
        # the re-timing counts too: left out, the shares overran the budget and the last
        # tasks (ResNet's 56 x 56 convs) went untuned on a loaded machine
        measured.setdefault(task.name, []).append((time.perf_counter() - start) / n)
        with open(refined, "a") as f:
            f.writelines(autotvm.record.encode(inp, res) + "\n" for inp, res in records)
        best_inp, best_res = min(records, key=lambda r: r[1].costs[0])
        per_task[(task.name, task.args[:5])] = (task.flop / default_cost / 1e9,
                                                task.flop / best_res.costs[0] / 1e9)
        print(f"{_task_label(task):46} {len(task.config_space):7d} {n:6d} "
              f"{tuner.best_flops / 1e9:8.1f} {task.flop / default_cost / 1e9:10.1f} "
              f"{task.flop / best_res.costs[0] / 1e9:8.1f} {seconds:7.1f}  "
              f"{best_inp.config}", flush=True)
    _print_winograd_gains(per_task)
    tuned = {inp.task.workload for inp, res in autotvm.record.load_from_file(refined)
             if res.error_no == 0}
    graph_log = None
    if all(task.workload in tuned for task in tasks):
        graph_log = _graph_tune(mod, shape, refined, target, workdir, max_sch_num=REMEASURED)
    else:
        print("graph tuner skipped: the budget left some tasks untuned")
    log = refined

    xn = x.numpy()
    runs, outs = {}, {}
    contexts = {"kiln untuned": (), "kiln tuned": (autotvm.apply_history_best(log),)}
    if graph_log is not None:
        contexts["kiln tuned + graph"] = (autotvm.apply_history_best(log),
                                          autotvm.apply_graph_best(graph_log))
    for label, ctxs in contexts.items():
        with kiln.transform.PassContext(opt_level=3):
            for ctx in ctxs:
                ctx.__enter__()
            try:
                lib = relay.build(mod, target=target, params=params)
            finally:
                for ctx in reversed(ctxs):
                    ctx.__exit__(None, None, None)
        gmod = GraphModule(lib["default"](kiln.cpu(0)))
        gmod.set_input("input", xn)
        gmod.run()
        outs[label] = gmod.get_output(0).numpy()
        transforms = lib.get_graph_json().count("layout_transform")
        print(f"{label}: {transforms} layout_transform kernels in the graph")
        runs[label] = gmod.run
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    runs["onnxruntime 2 threads"] = lambda: sess.run(None, {"input": xn})
    load = os.getloadavg()[0]
    times = _interleaved_times(runs)
    ort_median = times["onnxruntime 2 threads"][0]
    print(f"\n{'resnet18 batch 1':24} {'median ms':>9} {'min ms':>8} {'vs ORT2':>8}   "
          f"(7 interleaved rounds of 5 runs, load {load:.1f})")
    for label, (median, best) in times.items():
        print(f"{label:24} {median * 1e3:9.2f} {best * 1e3:8.2f} {median / ort_median:8.2f}")
    untuned = times["kiln untuned"][0]
    for label in [label for label in contexts if label != "kiln untuned"]:
        diff = float(np.abs(outs[label] - outs["kiln untuned"]).max())
        print(f"{label}: speed-up over untuned {untuned / times[label][0]:.2f}x (medians); "
              f"max |{label} - untuned| = {diff:.2e}")


# Cortex-M workloads of keyword-spotting / MobileNet-sized models: (template, args, label)
def _micro_tasks(target: str) -> list:
    from kiln import autotvm, te

    f32, i8 = "float32", "int8"
    cases = [
        ("conv2d_direct.arm_cpu", [((1, 10, 10, 16), f32), ((3, 3, 16, 16), f32)],
         ((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO", f32), "f32 conv 3x3 10x10x16->16"),
        ("conv2d_nhwc_1x1_micro_kernel.arm_cpu", [((1, 10, 10, 32), f32),
                                                  ((1, 1, 32, 32), f32)],
         ((1, 1), f32), "f32 conv 1x1 10x10x32->32"),
        ("dense_micro_kernel.arm_cpu", [((1, 256), f32), ((64, 256), f32)], (f32,),
         "f32 dense 256->64"),
        ("conv2d_nhwc_ohwi_s8.arm_cpu", [((1, 10, 10, 16), i8), ((32, 3, 3, 16), i8)],
         ((1, 1), (1, 1, 1, 1)), "int8 conv 3x3 10x10x16->32 (SMLAD)"),
        ("dense_s8_micro_kernel.arm_cpu", [((1, 256), i8), ((64, 256), i8)], (),
         "int8 dense 256->64 (SMLAD)"),
        ("depthwise_conv2d_nhwc_s8.arm_cpu", [((1, 10, 10, 64), i8), ((3, 3, 64, 1), i8)],
         ((1, 1), (1, 1, 1, 1), (1, 1), "HWOI"), "int8 depthwise 3x3 10x10x64 (SMLAD)"),
    ]
    return [(autotvm.task.create(name, (*(te.placeholder(s, d) for s, d in tensors), *rest),
                                 target), label) for name, tensors, rest, label in cases]


def section_micro(board: str) -> None:
    """Every config of each Cortex-M task measured on QEMU (exact instruction counts):
    kiln's default schedule against the best, and the tuning time."""
    from kiln import autotvm, micro
    from kiln.autotvm.measure import MeasureInput
    from kiln.autotvm.task.task import default_config_index

    target = f"c -keys=arm_cpu -mcpu={board.removeprefix('qemu-')}"
    print(f"\n## micro: every config of each task on {board} (QEMU -icount: instructions)")
    print("| task | configs | default (instr.) | best (instr.) | default / best | best config "
          "| tuning s |")
    print("|---|---:|---:|---:|---:|---|---:|")
    option = _option(
        builder=autotvm.LocalBuilder(n_parallel=2, timeout=120,
                                     build_func=micro.autotvm_build_func),
        runner=autotvm.LocalRunner(timeout=60, module_loader=micro.AutoTvmModuleLoader(
            micro.get_microtvm_template_projects("qemu-cortex-m"), {"board": board})))
    try:
        for task, label in _micro_tasks(target):
            start = time.perf_counter()
            space = task.config_space
            batch = autotvm.create_measure_batch(task, option)
            results = batch([MeasureInput(task.target, task, space.get(i))
                             for i in range(len(space))])
            seconds = time.perf_counter() - start
            cost = [r.costs[0] * 1e9 if r.error_no == 0 else float("inf") for r in results]
            best = int(np.argmin(cost))
            default = cost[default_config_index(task)]
            print(f"| {label} | {len(space)} | {default:,.0f} | {cost[best]:,.0f} | "
                  f"{default / cost[best]:.2f} | {space.get(best)} | {seconds:.0f} |",
                  flush=True)
    finally:
        option["builder"].close()
        option["runner"].close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", default="search,throughput,resnet")
    parser.add_argument("--target", default=None, help="default: llvm if llvmlite is "
                        "installed, else c")
    parser.add_argument("--trials", type=int, default=64, help="resnet: trials per task")
    parser.add_argument("--budget-min", type=float, default=20, help="resnet: minutes in all")
    parser.add_argument("--candidates", type=int, default=24, help="throughput: candidates")
    parser.add_argument("--rounds", type=int, default=3, help="throughput: interleaved "
                        "local/Ray rounds")
    parser.add_argument("--grid-file", default=str(Path(__file__).parent / "out" /
                                                   "tune_grid_conv2d_resnet_l1.json"),
                        help="search: the grid's measured costs; measured and saved there "
                        "when missing, replayed otherwise")
    parser.add_argument("--seeds", type=int, default=20, help="search: seeds per tuner")
    parser.add_argument("--tophub", help="search: append the grid's best config to this "
                        "TopHub package (kiln/autotvm/tophub_packages/llvm_v0.01.log)")
    parser.add_argument("--board", default="qemu-cortex-m4", help="micro: the QEMU board")
    parser.add_argument("--passes", type=int, default=3, help="search: shuffled timing "
                        "passes over the grid (the fastest of them is kept)")
    args = parser.parse_args()
    from kiln.target.codegen_llvm import llvm_available

    target = args.target or ("llvm" if llvm_available() else "c")
    print(f"kiln target {target}; KILN_NUM_THREADS={os.environ['KILN_NUM_THREADS']}; "
          f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}")
    sections = args.sections.split(",")
    if "search" in sections:
        section_search(target, args.grid_file, args.seeds, args.passes, args.tophub)
    if "throughput" in sections:
        section_throughput(target, args.candidates, args.rounds)
    if "resnet" in sections:
        section_resnet(target, args.trials, args.budget_min)
    if "micro" in sections:
        section_micro(args.board)


if __name__ == "__main__":
    main()
