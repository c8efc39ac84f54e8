"""``relay.build`` and ``relay.create_executor``: compile a Relay module for an executor.

Entry points: :func:`build`, :func:`optimize`, :func:`create_executor`,
:func:`bind_params_by_name`, :class:`GraphExecutorFactoryModule`.

``build`` reads stage by stage:

1. normalize inputs (a Function becomes ``IRModule.from_expr``; targets are parsed by
   :func:`parse_targets`: one target, or one per device type for heterogeneous execution);
2. bind ``params`` into ``main`` as constants;
3. the one compile pipeline (:func:`~kiln.relay.backend.pipeline.pass_pipeline`):
   ``PlanDevices`` (``on_device`` → ``device_copy``), the optimization passes
   (:data:`OPTIMIZE_PASSES`, each gated by its opt level in the current ``PassContext``),
   ``PlanDevices`` again (on what the passes made) and ``FuseOps``;
4. graph codegen: lower every primitive function with the TE compiler of its device's target
   (:func:`~kiln.relay.backend.pipeline.make_compilers`), plan memory, emit the graph JSON;
5. compile the kernels into one module per target, the host's importing the others
   (:func:`~kiln.relay.backend.pipeline.build_kernels`), and wrap everything in a factory
   module.
"""

from __future__ import annotations

import re
import sys
import time
import warnings
from typing import Any

import numpy as np

from kiln.ir.module import IRModule
from kiln.relay import expr as rx
from kiln.relay.backend import build_cache
from kiln.relay.backend.executor_config import Executor, Runtime, check_combination
from kiln.relay.backend.pipeline import (
    OPTIMIZE_PASSES,
    build_kernels,
    make_compilers,
    pass_pipeline,
    qnn_lowering_passes,
)
from kiln.runtime.config import debug_level
from kiln.runtime.error import TVMError

__all__ = ["build", "optimize", "create_executor", "bind_params_by_name",
           "GraphExecutorFactoryModule", "OPTIMIZE_PASSES", "parse_targets",
           "qnn_lowering_passes"]


def bind_params_by_name(func: rx.Function, params: dict[str, Any]) -> rx.Function:
    """Replace the parameters of ``func`` named in ``params`` by constants."""
    from kiln.runtime.ndarray import NDArray, array

    if not params:
        return func
    by_name: dict[str, rx.Var] = {}
    for param in func.params:
        if param.name_hint in by_name:
            raise TVMError(f"multiple parameters are named {param.name_hint!r}; cannot bind "
                           "params by name")
        by_name[param.name_hint] = param
    binds = {}
    for name, value in params.items():
        if name not in by_name:
            continue  # TVM ignores params that are not inputs
        data = value if isinstance(value, NDArray) else array(np.asarray(value))
        binds[by_name[name]] = rx.Constant(data)
    kept = [p for p in func.params if p not in binds]
    body = rx.bind(func.body, binds)
    return rx.Function(kept, body, func.ret_type, func.type_params, func.attrs)


def optimize(mod: IRModule, target: Any = None, params: dict | None = None,
             default_device: Any = None) -> IRModule:
    """Run the graph executor's compile pipeline (optimization passes, PlanDevices, FuseOps)
    on ``mod``.

    ``default_device`` is where expressions no ``on_device`` places run (default: the
    device of a single target, ``cpu(0)`` for several).
    """
    if default_device is None and target is not None:
        default_device = default_device_of(parse_targets(target)[0])
    if params:
        mod = mod.copy()
        mod["main"] = bind_params_by_name(mod["main"], params)
    return pass_pipeline(mod, default_device, "graph")(mod)


def _as_target(value: Any, what: str):
    from kiln.target import Target

    if isinstance(value, Target):
        return value
    if isinstance(value, str):
        return Target(value)
    raise TVMError(f"{what} must be a target string or a Target, got {value!r}")


def _target_device_type(key: Any, target: Any) -> int:
    """The device type a target-dict entry is for: its key (a device name, type code or
    Device) or, for a Target key, the target's own kind."""
    from kiln.runtime.device import Device, device
    from kiln.target import Target

    if isinstance(key, Target):
        return key.kind.device_type
    if isinstance(key, Device):
        return key.device_type
    if isinstance(key, str | int) and not isinstance(key, bool):
        return device(key).device_type
    raise TVMError(f"a target dict is keyed by device names ('cpu', 'opencl'), device types "
                   f"or Targets, got the key {key!r} (for {target!r})")


def parse_targets(target: Any, target_host: Any = None) -> tuple[dict[int, Any], Any]:
    """``({device_type: Target}, host Target)`` from TVM's target forms.

    ``target`` is a target string or Target (one device), a dict keyed by device name, device
    type or Target (``{"cpu": "llvm", "opencl": "opencl"}``), or a list of targets (each for
    its kind's device). The host target (shape computations, the executor's own work) is
    ``target_host``, else the CPU target, else the default CPU target.

    Example
    -------
    >>> targets, host = parse_targets({"cpu": "c", 4: "opencl"})
    >>> sorted(targets), host.kind.name
    ([1, 4], 'c')
    """
    from kiln.target import Target

    if target is None:
        from kiln.target.codegen_llvm import llvm_available

        target = Target.current(allow_none=True) or ("llvm" if llvm_available() else "c")
    if isinstance(target, dict):
        if not target:
            raise TVMError("relay.build: the target dict is empty")
        targets = {}
        for key, value in target.items():
            parsed = _as_target(value if value is not None else key, f"target[{key!r}]")
            device_type = _target_device_type(key, value)
            if device_type in targets and str(targets[device_type]) != str(parsed):
                raise TVMError(f"two targets for device type {device_type}: "
                               f"{targets[device_type]} and {parsed}")
            targets[device_type] = parsed
    elif isinstance(target, list | tuple):
        targets = {}
        for value in target:
            parsed = _as_target(value, "a target in the list")
            targets.setdefault(parsed.kind.device_type, parsed)
    else:
        parsed = _as_target(target, "target")
        targets = {parsed.kind.device_type: parsed}
    if target_host is not None:
        host = _as_target(target_host, "target_host")
    elif 1 in targets:
        host = targets[1]
    else:
        host = getattr(next(iter(targets.values())), "host", None)
        if host is None:
            from kiln.target.codegen_llvm import llvm_available

            host = Target("llvm" if llvm_available() else "c")
    if host.kind.device_type != 1:
        raise TVMError(f"the host target must be a CPU target, got {host}")
    return targets, host


def default_device_of(targets: dict[int, Any]) -> Any:
    """Where unannotated expressions run: ``cpu(0)`` when a CPU target is given, else the
    device of the first target."""
    from kiln.runtime.device import Device

    return Device(1 if 1 in targets else next(iter(targets)), 0)


class GraphExecutorFactoryModule:
    """What ``relay.build`` returns: graph JSON, kernel library and params (TVM's class).

    ``lib["default"](dev)`` creates an executor; ``export_library`` writes one ``.so``/``.tar``
    holding everything; ``graph, lib, params = relay.build(...)`` still works (deprecated).
    """

    def __init__(self, ir_mod: IRModule, target: Any, graph_json: str, lib: Any,
                 params: dict, mod_name: str, stats: dict) -> None:
        from kiln.runtime.executor_factory import GraphExecutorFactory

        # on a build-cache hit ir_mod is a function remaking (optimized module, lowered
        # kernels) on first use: most users never look at them
        self._ir_mod = ir_mod
        self._lowered: dict[str, Any] | None = {}  # kernel name -> LoweredFunc
        if callable(ir_mod):
            self._ir_mod, self._lowered, self._remake = None, None, ir_mod
        self.target = target
        self.graph_json = graph_json
        self.lib = lib
        self.params = params
        self.libmod_name = mod_name
        self.stats = stats
        self.executor = Executor("graph")
        self.runtime = Runtime("cpp")
        self.module = GraphExecutorFactory(graph_json, lib, mod_name, params)

    @property
    def ir_mod(self) -> IRModule:
        """The optimized module the graph was generated from."""
        if self._ir_mod is None:
            self._ir_mod, self._lowered = self._remake()
        return self._ir_mod

    @property
    def lowered(self) -> dict[str, Any]:
        """Kernel name -> LoweredFunc (its PrimFunc) of every kernel of the library."""
        if self._lowered is None:
            self._ir_mod, self._lowered = self._remake()
        return self._lowered

    @lowered.setter
    def lowered(self, value: dict[str, Any]) -> None:
        self._lowered = value

    def __getitem__(self, name: str):
        return self.module[name]

    def __iter__(self):
        warnings.warn("legacy graph executor behavior of producing json / lib / params will be "
                      "removed in the next release. Please see documents of "
                      "tvm.contrib.graph_executor.GraphModule for the new recommended usage.",
                      DeprecationWarning, stacklevel=2)
        return iter((self.graph_json, self.lib, self.params))

    def get_graph_json(self) -> str:
        return self.graph_json

    def get_lib(self) -> Any:
        return self.lib

    def get_params(self) -> dict:
        return dict(self.params)

    def get_executor_config(self) -> str:
        return self.graph_json

    def export_library(self, file_name: str, *args: Any, **kwargs: Any) -> Any:
        return self.module.export_library(file_name, *args, **kwargs)


def build(ir_mod: Any, target: Any = None, target_host: Any = None,
          executor: Executor | None = None, runtime: Runtime | None = None,
          workspace_memory_pools: Any = None, constant_memory_pools: Any = None,
          params: dict | None = None, mod_name: str = "default") -> GraphExecutorFactoryModule:
    """Compile a Relay module for the graph executor or the AOT executor.

    ``executor`` is ``Executor("graph")`` (default) or ``Executor("aot", {...})``; ``runtime``
    is ``Runtime("cpp")`` (default; the result runs here) or ``Runtime("crt")`` (C source for
    the C runtime, exported with ``tvm.micro.export_model_library_format``). The AOT executor
    and the C runtime take one CPU target.

    Example
    -------
    >>> import kiln as tvm
    >>> from kiln import relay
    >>> a = relay.var("a", shape=(1, 10)); b = relay.var("b", shape=(1, 10))
    >>> mod = tvm.IRModule.from_expr(relay.Function([a, b], relay.add(a, b)))
    >>> with tvm.transform.PassContext(opt_level=3):
    ...     lib = relay.build(mod, target="c")
    >>> "tvmgen_default_fused_add" in lib.graph_json
    True
    """
    from kiln.relay.backend.graph_executor_codegen import codegen

    executor = executor or Executor("graph")
    runtime = runtime or Runtime("cpp")
    if not isinstance(executor, Executor) or not isinstance(runtime, Runtime):
        raise TVMError("relay.build: executor= takes relay.backend.Executor('graph'|'aot') "
                       "and runtime= takes relay.backend.Runtime('cpp'|'crt')")
    check_combination(executor, runtime)
    # Both executors put mod_name into C symbols and Model Library Format paths.
    if not isinstance(mod_name, str) or not re.fullmatch(r"[A-Za-z0-9_]+", mod_name):
        raise TVMError(f"mod_name {mod_name!r} must be letters, digits and '_': it becomes "
                       "part of C names (tvmgen_<mod_name>_run) and file names")
    if isinstance(ir_mod, rx.Function):
        ir_mod = IRModule.from_expr(ir_mod)
    if not isinstance(ir_mod, IRModule):
        raise TVMError(f"relay.build expects an IRModule or a relay.Function, got "
                       f"{type(ir_mod).__name__}")
    pools = (workspace_memory_pools, constant_memory_pools)
    if executor.name != "aot" and pools != (None, None):
        raise TVMError("relay.build: workspace_memory_pools / constant_memory_pools are "
                       "planned by the AOT executor; use executor=Executor('aot')")
    targets, host = parse_targets(target, target_host)
    default_device = default_device_of(targets)
    start = time.perf_counter()
    if executor.name == "aot" or runtime.name == "crt":
        return _build_single_target(ir_mod, targets, host, params, executor, runtime, mod_name,
                                    pools)
    target = host if len(targets) == 1 else targets
    key = build_cache.build_key(ir_mod, params, targets, host, mod_name)
    cached = build_cache.load_build(key, host) if key else None
    if cached is not None:
        stats = {**cached.stats, "compile_seconds": time.perf_counter() - start,
                 "build_cache": "hit"}
        if debug_level() >= 1:
            print(f"[kiln] relay.build: cache hit {cached.path} in "
                  f"{stats['compile_seconds']:.2f} s", file=sys.stderr)
        remake = _remake_lowering(ir_mod, params, targets, host, mod_name, default_device)
        return GraphExecutorFactoryModule(remake, target, cached.graph_json, cached.lib,
                                          cached.params, mod_name, stats)
    with targets.get(1, host):  # passes see the CPU kernels' target, as with one target
        mod = optimize(ir_mod, host, params, default_device)
        passes_done = time.perf_counter()
        compilers = make_compilers(targets, host, mod_name, build_as_lowered=True)
        result = codegen(mod["main"], compilers, default_device)
        lib = build_kernels(compilers)
    if debug_level() >= 1:
        print_build_stages(passes_done - start, time.perf_counter() - start,
                           compilers.values(), lib)
    stats = {
        "kernels": sum(len(c.lowered) for c in compilers.values()),
        "kernel_calls": result.num_kernel_calls,
        "planned_bytes": result.memory_plan.planned_bytes,
        "peak_live_bytes": result.memory_plan.peak_live_bytes,
        "compile_seconds": time.perf_counter() - start,
        "build_cache": "miss" if key else "off",
    }
    if key:
        build_cache.store_build(key, result.graph_json, lib, result.params, stats)
    factory = GraphExecutorFactoryModule(mod, target, result.graph_json, lib, result.params,
                                         mod_name, stats)
    factory.lowered = {f.name: f for c in compilers.values() for f in c.lowered}
    return factory


def _remake_lowering(ir_mod: IRModule, params: dict | None, targets: dict[int, Any],
                     host: Any, mod_name: str, default_device: Any) -> Any:
    """For a build-cache hit: a function redoing the build's passes and lowering (not its
    code generation) under the same pass context, for ``ir_mod`` and ``lowered``."""
    from kiln.ir.transform import PassContext
    from kiln.relay.backend.graph_executor_codegen import codegen

    ctx = PassContext.current()

    def remake() -> tuple[IRModule, dict[str, Any]]:
        with ctx, targets.get(1, host):
            mod = optimize(ir_mod, host, params, default_device)
            compilers = make_compilers(targets, host, mod_name)
            codegen(mod["main"], compilers, default_device)
        return mod, {f.name: f for c in compilers.values() for f in c.lowered}

    return remake


def print_build_stages(passes: float, total: float, compilers: Any, lib: Any) -> None:
    """KILN_DEBUG=1: where a build's time went -- passes, lowering (TE -> TIR), codegen
    (LLVM/C emission, and waiting for LLVM's thread), the C compiler, and the rest (graph
    codegen, memory planning, params); then the CPU seconds LLVM's thread spent optimizing
    and emitting while the kernels lowered (``llvm``: not part of the total's sum)."""
    lower = sum(c.seconds["lower"] for c in compilers)
    build = sum(c.seconds["build"] for c in compilers)
    modules = [lib, *getattr(lib, "imported_modules", [])]
    cc = sum(getattr(m, "compile_seconds", 0.0) for m in modules)
    llvm = sum(getattr(m, "llvm_seconds", 0.0) for m in modules)
    kernels = sum(len(c.lowered) for c in compilers)
    rest = total - passes - lower - build
    print(f"[kiln] relay.build stages: passes {passes:.2f} s, lower {lower:.2f} s ({kernels} "
          f"kernels), codegen {build - cc:.2f} s, cc {cc:.2f} s, other {rest:.2f} s; total "
          f"{total:.2f} s; llvm thread {llvm:.2f} s cpu", file=sys.stderr)


def _build_single_target(ir_mod: IRModule, targets: dict[int, Any], host: Any,
                         params: dict | None, executor: Executor, runtime: Runtime,
                         mod_name: str, pools: tuple[Any, Any] = (None, None)) -> Any:
    """relay.build for the AOT executor or the C runtime: one CPU target."""
    from kiln.relay.backend.aot.build import build_aot, build_graph_crt

    if list(targets) != [1]:
        raise TVMError(f"Executor({executor.name!r}) with Runtime({runtime.name!r}) compiles "
                       f"for one CPU target; got targets for device types {sorted(targets)}")
    target = targets[1]
    start = time.perf_counter()
    with target:
        mod = optimize(ir_mod, target, params, default_device_of(targets))
        if executor.name == "aot":
            return build_aot(mod, target, executor, runtime, mod_name, *pools)
        result, lib, _ = build_graph_crt(mod, target, executor, runtime, mod_name)
    stats = {
        "kernels": len(result.compilers[1].lowered),
        "kernel_calls": result.num_kernel_calls,
        "planned_bytes": result.memory_plan.planned_bytes,
        "peak_live_bytes": result.memory_plan.peak_live_bytes,
        "compile_seconds": time.perf_counter() - start,
    }
    factory = GraphExecutorFactoryModule(mod, target, result.graph_json, lib, result.params,
                                         mod_name, stats)
    factory.executor, factory.runtime = executor, runtime
    factory.lowered = {f.name: f for f in result.compilers[1].lowered}
    return factory


class _GraphExecutorEvaluator:
    """``create_executor("graph", ...)``: builds on first evaluate, runs with NumPy inputs."""

    def __init__(self, mod: IRModule, device: Any, target: Any, params: dict | None) -> None:
        self.mod, self.device, self.target, self.params = mod, device, target, params

    def evaluate(self, expr: Any = None, binds: dict | None = None):
        from kiln.contrib.graph_executor import GraphModule

        mod = self.mod if expr is None else IRModule.from_expr(
            rx.bind(expr, binds) if binds else expr, self.mod.functions,
            self.mod.type_definitions)
        lib = build(mod, self.target, params=self.params)
        gmod = GraphModule(lib["default"](self.device))
        names = [p.name_hint for p in lib.ir_mod["main"].params]

        def run(*args: Any, **kwargs: Any):
            if len(args) > len(names):
                raise TVMError(f"the function takes {len(names)} inputs, got {len(args)}")
            for name, value in zip(names, args):
                gmod.set_input(name, value)
            for name, value in kwargs.items():
                gmod.set_input(name, value)
            gmod.run()
            outputs = [gmod.get_output(i) for i in range(gmod.get_num_outputs())]
            return outputs[0] if len(outputs) == 1 else outputs

        return run


def create_executor(kind: str = "debug", mod: IRModule | None = None, device: Any = None,
                    target: Any = "llvm", params: dict | None = None):
    """An executor with ``.evaluate(expr)`` (TVM's ``relay.create_executor``).

    ``kind`` is ``"debug"`` (the reference interpreter) or ``"graph"``.
    """
    from kiln.runtime.device import cpu

    mod = mod if mod is not None else IRModule()
    device = device if device is not None else cpu(0)
    if kind == "debug":
        from kiln.relay.backend.interpreter import Interpreter

        if params:
            mod = mod.copy()
            mod["main"] = bind_params_by_name(mod["main"], params)
        return Interpreter(mod, device, target)
    if kind == "graph":
        return _GraphExecutorEvaluator(mod, device, target, params)
    if kind == "vm":
        try:
            from kiln.relay.vm import VMExecutor
        except ImportError:
            raise TVMError("create_executor('vm'): the Relay VM compiler (relay.vm) is not "
                           "available in this kiln") from None
        return VMExecutor(mod, device, target, params)
    raise TVMError(f"unknown executor kind {kind!r}; use 'debug', 'graph' or 'vm'")
