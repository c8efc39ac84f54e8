"""The ``kiln`` command (also ``python -m kiln``): compile, run and benchmark models.

Entry point: :func:`main`. Subcommands:

- ``kiln compile MODEL [--target T] [--input-shapes "x:[1,3,224,224]"] [--executor graph|vm|aot]
  [--runtime cpp|crt] [-o model.tar]``: MODEL is an ONNX file (``.onnx``), a TFLite file
  (``.tflite``) or a Relay text file (``.rly``/``.txt``). With the C++ runtime (default) the
  package is a tar holding ``model.so`` (kernels plus the graph/params or VM bytecode blob,
  or the AOT main with its metadata) and ``metadata.json``
  (executor, target, inputs, outputs, compile statistics). With ``--runtime crt`` it is a
  Model Library Format tar for the C runtime: ``--executor aot`` (``tvmgen_default_run``;
  ``--interface-api c|packed``, ``--usmp-algorithm``) or ``--executor graph`` (linked params).
- ``kiln run PACKAGE [--inputs in.npz] [--outputs out.npz] [--print-time --repeat N]
  [--profile]``: random inputs when none are given; needs only ``kiln.runtime``.
- ``kiln bench MODEL.onnx``: compile, then time kiln against onnxruntime in one run.
- ``kiln tune MODEL --trials N -o tune.log [--ray ADDRESS] [--plot curve.png]``: AutoTVM
  tuning of the model's kernels (see :mod:`kiln.driver.tune_cli`); ``kiln compile
  --tuning-records tune.log`` then builds with the best configs.
- ``kiln cache info|evict [--max-mb N]|clear``: the build cache (``KILN_CACHE_DIR``, capped
  at ``KILN_CACHE_MAX_MB``; see :mod:`kiln.driver.cache_cli`).
- ``kiln micro run MODEL.tar --board host|qemu-cortex-m4|qemu-cortex-m7 [--inputs in.npz]
  [--outputs out.npz] [--io files|console|linked]``: build a Model Library Format archive
  with the C runtime into a standalone program for the board, run it once, print the outputs
  and the board's ticks (exact instructions on the emulated Cortex-M).

Without ``--target``, compile and bench use the best target of the host
(:func:`default_target`: ``llvm -mcpu=native`` with llvmlite, else ``c -mcpu=native``) and
print it with the host CPU's name; ``--runtime crt`` defaults to ``c``.

Errors print one line and a hint, exit non-zero, and show a traceback only with ``--verbose``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

from kiln.driver.cache_cli import add_cache_parser
from kiln.driver.tune_cli import add_tune_parser
from kiln.runtime.archive import safe_extract
from kiln.runtime.error import TVMError
from kiln.runtime.serialization import read_json

__all__ = ["main", "parse_input_shapes", "load_model", "CLIError", "progress"]


class CLIError(Exception):
    """A user-facing error: a message and a hint."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def host_cpu_name() -> str:
    """The host CPU as ``-mcpu`` names it (``znver3``): LLVM's answer when llvmlite is
    installed, else what ``gcc -march=native`` resolves to, else ``native``."""
    import subprocess

    try:
        import llvmlite.binding as llvm

        return llvm.get_host_cpu_name()
    except ImportError:
        pass
    try:
        text = subprocess.run(["gcc", "-march=native", "-Q", "--help=target"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "native"
    found = re.search(r"^\s*-march=\s*(\S+)", text, re.MULTILINE)
    return found.group(1) if found else "native"


def default_target() -> str:
    """The best target the host offers: ``llvm -mcpu=native`` when llvmlite is installed, else
    ``c -mcpu=native``: the host CPU and all its features (``native`` rather than the CPU's
    name, which the gcc that compiles the glue may not know: LLVM 15 says ``znver4``)."""
    from kiln.target.codegen_llvm import llvm_available

    return f"{'llvm' if llvm_available() else 'c'} -mcpu=native"


def _resolve_target(args: argparse.Namespace) -> str:
    """``--target`` as given; unset, ``c`` for the C runtime and the host's best otherwise."""
    if args.target is None:
        args.target = "c" if getattr(args, "runtime", "cpp") == "crt" else default_target()
    return args.target


def _describe_target(target: str) -> str:
    """``target`` for messages, naming the host CPU that ``-mcpu=native`` stands for."""
    return f"{target} ({host_cpu_name()})" if "-mcpu=native" in target else target


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[kiln] {message}", file=sys.stderr, flush=True)


def parse_input_shapes(text: str | None) -> dict[str, list[int]]:
    """``"x:[1,3,224,224] y:[1,10]"`` → ``{"x": [1, 3, 224, 224], "y": [1, 10]}``."""
    if not text:
        return {}
    shapes = {}
    for item in re.findall(r"[^\s:]+:\[[^\]]*\]|\S+", text.strip()):
        m = re.fullmatch(r"([^\s:]+):\[([0-9,\s]*)\]", item)
        if m is None:
            raise CLIError(f"bad input shape {item!r}", "write shapes as name:[d0,d1,...], "
                           'e.g. --input-shapes "x:[1,3,224,224]"')
        dims = [d for d in m.group(2).replace(" ", "").split(",") if d]
        shapes[m.group(1)] = [int(d) for d in dims]
    return shapes


# ---- compile ----------------------------------------------------------------------------
def load_model(path: Path, shapes: dict[str, list[int]]):
    """``(mod, params)`` of an ONNX or Relay text model file (CLIError when it cannot load)."""
    if not path.exists():
        raise CLIError(f"no such model file: {path}", "check the path")
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        try:
            import onnx  # noqa: F401
        except ImportError:
            raise CLIError("reading ONNX models needs the onnx package",
                           "pip install kiln[onnx]") from None
        from kiln.relay.frontend import from_onnx

        return from_onnx(str(path), shape=shapes or None)
    if suffix == ".tflite":
        try:
            import tflite  # noqa: F401
        except ImportError:
            raise CLIError("reading TFLite models needs the tflite package",
                           "pip install kiln[tflite]") from None
        from kiln.relay.frontend import from_tflite

        return from_tflite(path.read_bytes(), shape_dict=shapes or None)
    if suffix in (".rly", ".txt", ".relay"):
        from kiln.relay.parser import parse

        return parse(path.read_text(), str(path)), {}
    raise CLIError(f"unknown model format {suffix!r}",
                   "kiln compile reads .onnx and .tflite files and Relay text (.rly)")


def _io_info(mod) -> tuple[list[dict], list[dict]]:
    from kiln.ir.type import TensorType, TupleType
    from kiln.relay.transform import InferType

    mod = InferType()(mod)
    main_fn = mod["main"]

    def describe(ty, name):
        if isinstance(ty, TensorType):
            dims = [int(d) if hasattr(d, "value") else -1 for d in ty.shape]
            return [{"name": name, "shape": dims, "dtype": str(ty.dtype)}]
        if isinstance(ty, TupleType):
            return [x for i, f in enumerate(ty.fields) for x in describe(f, f"{name}.{i}")]
        return [{"name": name, "shape": None, "dtype": repr(ty)}]

    inputs = [x for p in main_fn.params for x in describe(p.checked_type, p.name_hint)]
    outputs = describe(main_fn.checked_type.ret_type, "output")
    return inputs, outputs


def cmd_compile(args: argparse.Namespace) -> int:
    import kiln
    from kiln import relay

    shapes = parse_input_shapes(args.input_shapes)
    start = time.perf_counter()
    progress(f"loading {args.model}")
    mod, params = load_model(Path(args.model), shapes)
    target = _resolve_target(args)
    if args.runtime == "crt":
        return _compile_micro(args, mod, params, start)
    inputs, outputs = _io_info(mod)
    with tempfile.TemporaryDirectory() as tmp, _tuning_records(args.tuning_records):
        lib_path = Path(tmp) / "model.so"
        progress(f"optimizing and compiling for {_describe_target(target)} "
                 f"({args.executor} executor)")
        with kiln.transform.PassContext(opt_level=args.opt_level):
            if args.executor == "graph":
                factory = relay.build(mod, target=target, params=params)
                factory.export_library(str(lib_path))
                stats = dict(factory.stats)
                summary = (f"{stats['kernels']} fused kernels, {stats['kernel_calls']} kernel "
                           f"calls, {stats['planned_bytes']} bytes planned (lower bound "
                           f"{stats['peak_live_bytes']})")
            elif args.executor == "aot":
                from kiln.relay.backend import Executor

                factory = relay.build(mod, target=target, params=params,
                                      executor=Executor("aot"))
                factory.export_library(str(lib_path))
                stats = dict(factory.stats)
                summary = (f"{stats['kernels']} fused kernels, AOT workspace pool "
                           f"{stats['workspace_pool_bytes']} bytes (lower bound "
                           f"{stats['workspace_lower_bound_bytes']})")
            else:
                exe = relay.vm.compile(mod, target=target, params=params)
                exe.mod.export_library(str(lib_path))
                stats = {"functions": len(exe.globals), "kernels": len(exe.primitive_ops)}
                summary = f"{stats['functions']} VM functions, {stats['kernels']} kernels"
        stats["compile_seconds"] = round(time.perf_counter() - start, 3)
        meta = {"kiln_version": kiln.__version__, "executor": args.executor,
                "target": str(target), "inputs": inputs, "outputs": outputs, "stats": stats}
        meta_path = Path(tmp) / "metadata.json"
        meta_path.write_text(json.dumps(meta, indent=2))
        with tarfile.open(args.output, "w") as tar:
            tar.add(lib_path, "model.so")
            tar.add(meta_path, "metadata.json")
    n_ops = _count_op_calls(mod["main"])
    print(f"compiled {args.model} -> {args.output} for {_describe_target(target)}: "
          f"{n_ops} operator calls, "
          f"{summary}, {stats['compile_seconds']:.2f} s")
    return 0


def _tuning_records(path: str | None):
    """``apply_history_best(path)`` when tuning records are given, else no context."""
    import contextlib

    if path is None:
        return contextlib.nullcontext()
    if not Path(path).is_file():
        raise CLIError(f"tuning records {path} do not exist", "make them with `kiln tune`")
    from kiln import autotvm

    return autotvm.apply_history_best(path)


def _compile_micro(args: argparse.Namespace, mod, params, start: float) -> int:
    """``--runtime crt``: C for the C runtime, written as a Model Library Format tar."""
    import kiln
    from kiln import relay
    from kiln.relay.backend import Executor, Runtime

    if args.executor == "vm":
        raise CLIError("the C runtime has no VM", "use --executor aot or --executor graph "
                       "with --runtime crt")
    if args.executor == "aot":
        interface = args.interface_api
        executor = Executor("aot", {"interface-api": interface,
                                    "unpacked-api": interface == "c"})
    else:
        executor = Executor("graph", {"link-params": True})
    config = {"tir.disable_vectorize": True, "tir.usmp.algorithm": args.usmp_algorithm}
    progress(f"optimizing and compiling for {args.target} ({args.executor} executor, "
              "C runtime)")
    with kiln.transform.PassContext(opt_level=args.opt_level, config=config):
        factory = relay.build(mod, target=args.target, params=params, executor=executor,
                              runtime=Runtime("crt", {"system-lib": True}))
    kiln.micro.export_model_library_format(factory, args.output)
    stats = factory.stats
    if args.executor == "aot":
        summary = (f"{stats['kernels']} fused kernels, workspace pool "
                   f"{stats['workspace_pool_bytes']} bytes (lower bound "
                   f"{stats['workspace_lower_bound_bytes']}, {stats['usmp_algorithm']}), "
                   f"constants {stats['constant_pool_bytes']} bytes")
    else:
        summary = (f"{stats['kernels']} fused kernels, {stats['planned_bytes']} bytes planned "
                   f"(lower bound {stats['peak_live_bytes']})")
    print(f"compiled {args.model} -> {args.output} (Model Library Format): {summary}, "
          f"{time.perf_counter() - start:.2f} s")
    return 0


def _count_op_calls(func) -> int:
    from kiln.ir.op import Op
    from kiln.relay.analysis import post_order_visit
    from kiln.relay.expr import Call

    calls = []
    post_order_visit(func, lambda n: calls.append(n) if isinstance(n, Call) and isinstance(
        n.op, Op) else None)
    return len(calls)


# ---- run --------------------------------------------------------------------------------
def _open_package(path: Path, workdir: str) -> tuple[dict, str]:
    if not path.exists():
        raise CLIError(f"no such package: {path}", "create one with `kiln compile`")
    try:
        root = safe_extract(path, Path(workdir) / "package")
    except TVMError as err:
        raise CLIError(f"{path} is not a readable tar archive: {err}",
                       "create one with `kiln compile`") from None
    if not ((root / "model.so").is_file() and (root / "metadata.json").is_file()):
        raise CLIError(f"{path} is not a kiln package (missing model.so or metadata.json)",
                       "create one with `kiln compile`")
    try:
        meta = read_json((root / "metadata.json").read_bytes(), "metadata.json")
    except TVMError as err:
        raise CLIError(f"{path}: metadata.json is corrupt: {err}", "recompile the model") from None
    return meta, str(root / "model.so")


def _make_inputs(meta: dict, path: str | None) -> dict[str, np.ndarray]:
    if path:
        try:
            data = dict(np.load(path))
        except Exception as err:  # numpy raises several kinds for a bad file
            raise CLIError(f"cannot read inputs from {path}: {err}",
                           "give an .npz file saved with numpy.savez") from None
        return data
    rng = np.random.default_rng(0)
    inputs = {}
    for info in meta["inputs"]:
        shape = info["shape"]
        if shape is None or any(d < 0 for d in shape):
            raise CLIError(f"input {info['name']} has a dynamic shape {shape}",
                           "pass --inputs with concrete arrays")
        dtype = np.dtype(info["dtype"])
        inputs[info["name"]] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                                else rng.integers(0, 4, shape).astype(dtype))
    return inputs


def _flatten_outputs(value) -> list[np.ndarray]:
    """A VM result (NDArray, or an ADT/tuple of them, nested) as a flat list of arrays."""
    if hasattr(value, "numpy"):
        return [value.numpy()]
    fields = getattr(value, "fields", value)
    return [array for field in fields for array in _flatten_outputs(field)]


def cmd_run(args: argparse.Namespace) -> int:
    from kiln.runtime import load_module
    from kiln.runtime.device import cpu

    with tempfile.TemporaryDirectory() as tmp:
        meta, lib_path = _open_package(Path(args.package), tmp)
        inputs = _make_inputs(meta, args.inputs)
        module = load_module(lib_path)
        dev = cpu(0)
        if meta["executor"] == "graph":
            from kiln.contrib.graph_executor import GraphModule

            gmod = GraphModule(module["default"](dev))
            for name, value in inputs.items():
                gmod.set_input(name, value)
            gmod.run()
            outputs = [gmod.get_output(i).numpy() for i in range(gmod.get_num_outputs())]
            timer = (lambda: gmod.benchmark(dev, repeat=args.repeat, number=1))
            if args.profile:
                from kiln.contrib.debugger.debug_executor import GraphModuleDebug

                debug = GraphModuleDebug(module["debug_create"]("default", dev), [dev],
                                         module["get_graph_json"](), None)
                for name, value in inputs.items():
                    debug.set_input(name, value)
                print(debug.profile())
        elif meta["executor"] == "aot":
            from kiln.runtime.executor import AotModule

            amod = AotModule(module["default"](dev))
            amod.run(**inputs)
            outputs = [amod.get_output(i).numpy() for i in range(amod.get_num_outputs())]
            timer = amod.module.time_evaluator("run", dev, number=1, repeat=args.repeat)
            if args.profile:
                raise CLIError("--profile times the graph executor's operators",
                               "compile with --executor graph to profile per operator")
        else:
            from kiln.runtime.vm import VirtualMachine

            vm = VirtualMachine(module, dev)
            ordered = [inputs[i["name"]] for i in meta["inputs"]]
            result = vm.run(*ordered)
            outputs = _flatten_outputs(result)
            timer = (lambda: vm.benchmark(dev, *ordered, repeat=args.repeat, number=1))
            if args.profile:
                print(vm.profile(*ordered))
    for i, out in enumerate(outputs):
        flat = out.reshape(-1)
        print(f"output {i}: shape {list(out.shape)} {out.dtype}, first values "
              f"{np.array2string(flat[:8], precision=4)}")
    if args.outputs:
        np.savez(args.outputs, **{f"output_{i}": o for i, o in enumerate(outputs)})
        print(f"saved outputs to {args.outputs}")
    if args.print_time:
        result = timer()
        print(f"time: median {result.median * 1e3:.3f} ms, mean {result.mean * 1e3:.3f} ms "
              f"over {len(result.results)} runs")
    return 0


# ---- bench ------------------------------------------------------------------------------
def cmd_bench(args: argparse.Namespace) -> int:
    try:
        import onnxruntime as ort
    except ImportError:
        raise CLIError("kiln bench compares against onnxruntime, which is not installed",
                       "pip install kiln[bench]") from None
    import kiln
    from kiln import relay
    from kiln.contrib.graph_executor import GraphModule

    shapes = parse_input_shapes(args.input_shapes)
    mod, params = load_model(Path(args.model), shapes)
    inputs, _ = _io_info(mod)
    feed = _make_inputs({"inputs": inputs}, None)
    progress(f"compiling with kiln for {_describe_target(_resolve_target(args))}")
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target=args.target, params=params)
    dev = kiln.cpu(0)
    gmod = GraphModule(lib["default"](dev))
    for name, value in feed.items():
        gmod.set_input(name, value)
    kiln_result = gmod.benchmark(dev, repeat=args.repeat, number=args.number)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    session = ort.InferenceSession(args.model, opts, providers=["CPUExecutionProvider"])
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        for _ in range(args.number):
            session.run(None, feed)
        times.append((time.perf_counter() - start) / args.number)
    ort_median = float(np.median(times))
    print(f"kiln        median {kiln_result.median * 1e3:.3f} ms")
    print(f"onnxruntime median {ort_median * 1e3:.3f} ms ({args.threads} threads)")
    print(f"ratio kiln/onnxruntime: {kiln_result.median / ort_median:.2f}")
    return 0


# ---- micro ------------------------------------------------------------------------------
def cmd_micro_run(args: argparse.Namespace) -> int:
    from kiln.micro.board import BOARD_NAMES, StandaloneProject

    if args.board not in BOARD_NAMES:
        raise CLIError(f"unknown board {args.board!r}", f"choose one of {list(BOARD_NAMES)}")
    if not Path(args.model).exists():
        raise CLIError(f"no such Model Library Format archive: {args.model}",
                       "export one with kiln.micro.export_model_library_format")
    project = StandaloneProject(args.model, args.board, build_dir=args.build_dir,
                                workspace_bytes=args.workspace_bytes, io=args.io)
    meta_inputs = [{"name": t.name, "shape": list(t.resolved_shape()), "dtype": t.dtype}
                   for t in project.inputs]
    inputs = _make_inputs({"inputs": meta_inputs}, args.inputs)
    progress(f"building {args.model} ({project.library.executor} executor) for "
              f"{args.board}")
    project.build()
    result = project.run(inputs, timeout=args.timeout)
    for info, out in zip(project.outputs, result.outputs):
        print(f"{info.name}: shape {list(out.shape)} {out.dtype}")
        print(np.array2string(out, precision=5, threshold=64))
    # the Cortex-M's SysTick counts CPU cycles; the host's clock counts nanoseconds
    unit = "cycles" if args.board != "host" else "ticks"
    line = (f"board {args.board}: {result.ticks} {unit} at {result.ticks_per_second / 1e6:g} "
            f"MHz = {result.seconds * 1e3:.3f} ms")
    if result.instructions is not None:
        line += f" (virtual), {result.instructions} instructions per inference"
    if result.stack_bytes:
        line += f"; stack {result.stack_bytes} B"
    print(line)
    if args.outputs:
        np.savez(args.outputs, **{t.name: o for t, o in zip(project.outputs, result.outputs)})
        print(f"saved outputs to {args.outputs}")
    return 0


def cmd_micro_project(args: argparse.Namespace) -> int:
    """``kiln micro project generate|build|flash|run``: a template project from the shell."""
    from kiln.micro import project_commands as pc
    from kiln.micro.board.library import ModelLibrary

    project_dir = Path(args.project_dir)
    if args.project_command == "generate":
        options = pc.parse_options(args.option, pc.template_options(args.template))
        pc.generate(args.template, args.model, project_dir, options)
        print(f"generated {project_dir} from template {args.template!r}")
        return 0
    if not (project_dir / "microtvm_api_server.py").is_file():
        raise CLIError(f"{project_dir} is not a generated microTVM project",
                       "create one with: kiln micro project generate")
    options = {}
    with pc.opened(project_dir, {}) as project:
        options = pc.parse_options(args.option, project.info["project_options"])
        project.options = options
        if args.project_command == "build":
            progress(f"building {project_dir}")
            project.build()
            print(f"built {project_dir}")
            return 0
        if args.project_command == "flash":
            project.flash()
            print(f"flashed {project_dir}")
            return 0
    try:
        infos = ModelLibrary(project_dir / "model.tar").inputs
        meta = {"inputs": [{"name": t.name, "shape": list(t.resolved_shape()),
                            "dtype": t.dtype} for t in infos]}
    except Exception:  # a packed-API AOT archive does not describe its inputs
        if args.inputs is None:
            raise CLIError("this archive does not describe its inputs",
                           "pass them with --inputs file.npz") from None
        meta = {"inputs": []}
    inputs = _make_inputs(meta, args.inputs)
    outputs = pc.run_project(project_dir, inputs, options)
    for i, out in enumerate(outputs):
        print(f"output {i}: shape {list(out.shape)} {out.dtype}")
        print(np.array2string(out, precision=5, threshold=64))
    if args.outputs:
        np.savez(args.outputs, *outputs)
        print(f"saved outputs to {args.outputs}")
    return 0


def _add_micro_project_parser(actions) -> None:
    p = actions.add_parser("project", help="generate/build/flash/run a template project",
                           description="microTVM template projects (crt, qemu-cortex-m) "
                           "through the Project API; run drives the model over a Session.")
    steps = p.add_subparsers(dest="project_command", metavar="STEP", required=True)
    gen = steps.add_parser("generate", help="generate a project from a template and an MLF")
    gen.add_argument("model", help="Model Library Format archive (.tar)")
    gen.add_argument("project_dir", help="the new project's directory")
    gen.add_argument("--template", default="crt", choices=["crt", "qemu-cortex-m"])
    for name in ("build", "flash", "run"):
        step = steps.add_parser(name, help=f"{name} a generated project")
        step.add_argument("project_dir")
        if name == "run":
            step.add_argument("--inputs", help=".npz file of inputs by name (default random)")
            step.add_argument("--outputs", help="save outputs to this .npz file")
    for step in steps.choices.values():
        step.add_argument("--option", "-o", action="append", default=[], metavar="KEY=VALUE",
                          help="a project option, e.g. -o board=qemu-cortex-m7")
    p.set_defaults(func=cmd_micro_project)


def _add_micro_parser(sub) -> None:
    micro = sub.add_parser("micro", help="microTVM: run a Model Library Format archive "
                           "standalone", description="Standalone microTVM programs.")
    actions = micro.add_subparsers(dest="micro_command", metavar="ACTION", required=True)
    p = actions.add_parser("run", help="build and run an MLF archive on a board",
                           description="Build a Model Library Format archive (AOT or graph "
                           "executor) and the C runtime into a program for the board, run "
                           "it once, print the outputs and the board's ticks.")
    p.add_argument("model", help="Model Library Format archive (.tar)")
    p.add_argument("--board", default="host",
                   help="host, qemu-cortex-m4 or qemu-cortex-m7 (default host)")
    p.add_argument("--inputs", help=".npz file of inputs by name (default: random inputs)")
    p.add_argument("--outputs", help="save outputs to this .npz file")
    p.add_argument("--build-dir", help="keep the build here (default: a temporary folder)")
    p.add_argument("--workspace-bytes", type=int, default=None,
                   help="the platform memory pool (default: 524288 for the graph executor, "
                   "what the archive asks for AOT)")
    p.add_argument("--io", choices=["files", "console", "linked"], default="files",
                   help="how inputs and outputs travel: files (semihosting on the Cortex-M), "
                   "console (the UART / stdin), linked (inputs compiled in, outputs on the "
                   "UART); default files")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds before the program is killed (default 120)")
    p.set_defaults(func=cmd_micro_run)
    _add_micro_project_parser(actions)


def _add_rpc_parser(sub) -> None:
    """``kiln rpc server|tracker|proxy|queue``: the programs of :mod:`kiln.exec`."""
    from kiln.exec import query_rpc_tracker, rpc_proxy, rpc_server, rpc_tracker

    rpc = sub.add_parser("rpc", help="RPC: start a server, a tracker or a proxy, show a "
                         "tracker's queue", description="TVM-protocol RPC over TCP.")
    actions = rpc.add_subparsers(dest="rpc_command", metavar="ACTION", required=True)
    for name, module, text in (("server", rpc_server, "start an RPC server"),
                               ("tracker", rpc_tracker, "start an RPC tracker"),
                               ("proxy", rpc_proxy, "start an RPC proxy"),
                               ("queue", query_rpc_tracker, "print a tracker's summary")):
        p = actions.add_parser(name, help=text, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(func=module.run)


# ---- entry ------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    import kiln

    parser = argparse.ArgumentParser(
        prog="kiln", description="kiln: compile deep-learning models to native code and run "
        "them (a Relay-era TVM in Python).")
    parser.add_argument("--version", action="version", version=f"kiln {kiln.__version__}")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compile", help="compile a model into a package (.tar)",
                       description="Compile an ONNX model or a Relay text file into a package "
                       "holding the kernels, the graph or VM bytecode, and the params.")
    p.add_argument("model", help="model file: .onnx, .tflite or Relay text (.rly)")
    p.add_argument("--target", default=None, help='target string, e.g. "llvm -mcpu=znver3" '
                   "or c (default: llvm -mcpu=native when llvmlite is installed, else "
                   "c -mcpu=native; c with --runtime crt)")
    p.add_argument("--input-shapes", help='pin input shapes: "x:[1,3,224,224] y:[1,10]"')
    p.add_argument("--executor", choices=["graph", "vm", "aot"], default="graph",
                   help="graph (static shapes), vm (control flow, dynamic shapes) or aot (one "
                   "generated C entry point over a statically planned workspace)")
    p.add_argument("--runtime", choices=["cpp", "crt"], default="cpp",
                   help="cpp: a package for kiln run (default); crt: a Model Library Format "
                   "tar for the C runtime (microcontrollers)")
    p.add_argument("--interface-api", choices=["c", "packed"], default="c",
                   help="AOT entry point for the C runtime: c (tvmgen_default_run over "
                   "structs, default) or packed (for the C AOT executor)")
    p.add_argument("--usmp-algorithm", default="greedy_by_size",
                   choices=["greedy_by_size", "greedy_by_conflicts", "hill_climb"],
                   help="AOT workspace planning (tir.usmp.algorithm)")
    p.add_argument("--opt-level", type=int, default=3, choices=range(0, 5),
                   help="optimization level 0-4 (default 3)")
    p.add_argument("--tuning-records", metavar="LOG", help="AutoTVM log (kiln tune -o LOG): "
                   "kernels use their best tuned configs")
    p.add_argument("-o", "--output", default="model.tar", help="package path (default "
                   "model.tar)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a compiled package",
                       description="Run a package made by `kiln compile` on the CPU.")
    p.add_argument("package", help="package made by kiln compile")
    p.add_argument("--inputs", help=".npz file of inputs by name (default: random inputs)")
    p.add_argument("--outputs", help="save outputs to this .npz file")
    p.add_argument("--print-time", action="store_true", help="time the model")
    p.add_argument("--repeat", type=int, default=10, help="timed runs (default 10)")
    p.add_argument("--profile", action="store_true", help="print the per-operator time table")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="compare kiln with onnxruntime on an ONNX model",
                       description="Compile an ONNX model with kiln and time it against "
                       "onnxruntime in the same process.")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--target", default=None, help="kiln target (default: llvm -mcpu=native "
                   "when llvmlite is installed, else c -mcpu=native)")
    p.add_argument("--input-shapes", help='pin input shapes: "x:[1,3,224,224]"')
    p.add_argument("--threads", type=int, default=2, help="onnxruntime threads (default 2)")
    p.add_argument("--repeat", type=int, default=10, help="timed repeats (default 10)")
    p.add_argument("--number", type=int, default=10, help="runs per repeat (default 10)")
    p.set_defaults(func=cmd_bench)
    _add_micro_parser(sub)
    _add_rpc_parser(sub)
    add_tune_parser(sub)
    add_cache_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the kiln command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except CLIError as err:
        if args.verbose:
            raise
        print(f"kiln {args.command}: error: {err}", file=sys.stderr)
        if err.hint:
            print(f"hint: {err.hint}", file=sys.stderr)
        return 1
    except Exception as err:  # a compiler error: one line unless --verbose
        if args.verbose:
            raise
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"kiln {args.command}: error: {type(err).__name__}: {message}", file=sys.stderr)
        print("hint: rerun with --verbose for the full traceback", file=sys.stderr)
        return 1


def console_entry() -> None:
    """The ``kiln`` console script: run :func:`main` on ``sys.argv`` and exit with its code."""
    sys.exit(main())


if __name__ == "__main__":
    console_entry()

