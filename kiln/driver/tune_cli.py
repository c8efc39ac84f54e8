"""``kiln tune``: AutoTVM tuning of a model's kernels from the command line.

Entry points: :func:`add_tune_parser`, :func:`cmd_tune`.

``kiln tune model.onnx --trials N -o tune.log [--tuner xgb|ga|random|grid] [--ray ADDRESS]
[--plot curve.png]`` extracts the model's tunable tasks (one per distinct workload), tunes
each for at most ``N`` trials (fewer when its space is smaller) with a progress bar, appends
every measured config to ``tune.log`` and prints each task's best GFLOPS. ``--ray`` builds
and measures on a Ray cluster (``auto``, ``ray://host:10001``, or ``local`` for a Ray on this
machine). For a Cortex-M target (``--target "c -keys=arm_cpu -mcpu=cortex-m4"``) the candidates
are cross-compiled and measured on that core under QEMU (``kiln.micro.autotvm``). ``kiln
compile --tuning-records tune.log`` builds with the best configs.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

__all__ = ["add_tune_parser", "cmd_tune"]

_TUNERS = {"xgb": "XGBTuner", "ga": "GATuner", "random": "RandomTuner",
           "grid": "GridSearchTuner"}


def _measure_option(args: argparse.Namespace) -> dict:
    from kiln import autotvm

    cluster = None
    if args.ray:
        cluster = "ray" if args.ray == "local" else \
            args.ray if args.ray.startswith("ray://") else "ray:" + args.ray
    build_func, loader = "default", None
    if _is_cortex_m(args.target):  # candidates run on the target's core under QEMU
        from kiln import micro
        from kiln.micro.autotvm import board_for_target

        build_func = micro.autotvm_build_func
        loader = micro.AutoTvmModuleLoader(micro.get_microtvm_template_projects(
            "qemu-cortex-m"), {"board": board_for_target(args.target)})
    return autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=args.timeout, n_parallel=args.parallel,
                                     build_func=build_func),
        runner=autotvm.LocalRunner(number=args.number, repeat=args.repeat,
                                   min_repeat_ms=args.min_repeat_ms, timeout=args.timeout,
                                   module_loader=loader),
        cluster=cluster)


def _is_cortex_m(target: str) -> bool:
    from kiln.target import Target

    return str(getattr(Target(target), "mcpu", "") or "").startswith("cortex-m")


def _make_tuner(name: str, task: Any) -> Any:
    from kiln.autotvm import tuner

    return getattr(tuner, _TUNERS[name])(task)


def cmd_tune(args: argparse.Namespace) -> int:
    """Tune every task of a model; write the records; print each task's best."""
    from kiln import autotvm
    from kiln.driver.cli import CLIError, default_target, load_model, parse_input_shapes, progress

    if args.target is None:  # what `kiln compile` builds for, so its records apply there
        args.target = default_target()
    if args.trials < 1:
        raise CLIError(f"--trials must be at least 1, got {args.trials}")
    mod, params = load_model(Path(args.model), parse_input_shapes(args.input_shapes))
    progress(f"extracting tuning tasks for {args.target}")
    tasks = autotvm.task.extract_from_program(mod, params, args.target)
    if not tasks:
        raise CLIError(f"{args.model} has no tunable kernels for {args.target}",
                       "tunable: dense, conv2d (NCHW), depthwise conv2d, batch_matmul, "
                       "matmul; on Cortex-M: conv2d, dense (float and int8)")
    log = Path(args.output)
    curves: dict[str, list[float]] = {}
    for k, task in enumerate(tasks, 1):
        trials = min(args.trials, len(task.config_space))
        prefix = f"[Task {k:2d}/{len(tasks):2d}] {task.name}"
        monitor = autotvm.callback.Monitor()
        tuner = _make_tuner(args.tuner, task)
        start = time.perf_counter()
        tuner.tune(trials, _measure_option(args), early_stopping=args.early_stopping,
                   callbacks=[autotvm.callback.progress_bar(trials, prefix=prefix),
                              autotvm.callback.log_to_file(str(log)), monitor])
        curves[f"{k}: {task.name}"] = monitor.trial_scores()
        print(f"{prefix}: best {tuner.best_flops / 1e9:.2f} GFLOPS after "
              f"{len(monitor.trial_scores())} trials, {time.perf_counter() - start:.1f} s")
    if args.plot:
        autotvm.callback.plot_curves(curves, args.plot)
        progress(f"tuning curves drawn in {args.plot}")
    print(f"tuned {len(tasks)} tasks of {args.model}: records in {log}; build with "
          f"`kiln compile {args.model} --target \"{args.target}\" --tuning-records {log}`")
    return 0


def add_tune_parser(sub: Any) -> None:
    """The ``tune`` subcommand."""
    p = sub.add_parser("tune", help="tune a model's kernels with AutoTVM",
                       description="Extract a model's tunable kernels and search their "
                       "schedules by measuring candidates (AutoTVM).")
    p.add_argument("model", help="model file: .onnx or Relay text (.rly)")
    p.add_argument("--target", default=None, help="target string (default: the one "
                   "`kiln compile` uses: llvm -mcpu=native with llvmlite, else c -mcpu=native)")
    p.add_argument("--input-shapes", help='pin input shapes: "x:[1,3,224,224]"')
    p.add_argument("--trials", type=int, default=64, help="trials per task (default 64)")
    p.add_argument("--tuner", choices=sorted(_TUNERS), default="xgb",
                   help="search: xgb (XGBoost model, default), ga, random or grid")
    p.add_argument("--early-stopping", type=int, default=None,
                   help="stop a task after this many trials without a better config")
    p.add_argument("--number", type=int, default=4, help="runs per measurement (default 4)")
    p.add_argument("--repeat", type=int, default=3, help="measurements (default 3)")
    p.add_argument("--min-repeat-ms", type=float, default=0,
                   help="grow runs until a measurement lasts this long (default 0)")
    p.add_argument("--timeout", type=float, default=20, help="seconds per build or run")
    p.add_argument("--parallel", type=int, default=None,
                   help="parallel builds (default: the CPU count)")
    p.add_argument("--ray", metavar="ADDRESS", help="build and measure on a Ray cluster: "
                   "auto, ray://host:10001, or local")
    p.add_argument("--plot", metavar="PNG", help="draw best GFLOPS against trials per task "
                   "(needs matplotlib)")
    p.add_argument("-o", "--output", default="tune.log", help="records (appended; default "
                   "tune.log)")
    p.set_defaults(func=cmd_tune)
