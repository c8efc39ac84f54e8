"""``relay.build`` and ``relay.create_executor``: compile a Relay module for an executor.

Entry points: :func:`build`, :func:`optimize`, :func:`create_executor`,
:func:`bind_params_by_name`, :class:`GraphExecutorFactoryModule`.

``build`` reads stage by stage:

1. normalize inputs (a Function becomes ``IRModule.from_expr``; targets are parsed);
2. bind ``params`` into ``main`` as constants;
3. run the optimization pipeline (:data:`OPTIMIZE_PASSES`, each gated by its opt level in the
   current ``PassContext``) and ``FuseOps``;
4. graph codegen: lower every primitive function with the TE compiler, plan memory, emit the
   graph JSON;
5. compile all kernels into one module, and wrap everything in a factory module.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from kiln.ir.module import IRModule
from kiln.ir.transform import Sequential
from kiln.relay import expr as rx
from kiln.relay.backend.executor_config import Executor, Runtime
from kiln.runtime.error import TVMError

__all__ = ["build", "optimize", "create_executor", "bind_params_by_name",
           "GraphExecutorFactoryModule", "OPTIMIZE_PASSES"]

# The default pipeline, in order (TVM's GetPassPrefix for the graph executor). Each pass has
# its own opt level; PassContext(opt_level=...) decides which run.
OPTIMIZE_PASSES = (
    "RemoveUnusedFunctions",
    "SimplifyInference",
    "EliminateCommonSubexpr",
    "FoldConstant",
    "FoldScaleAxis",
    "SimplifyExpr",
    "CanonicalizeOps",
    "AlterOpLayout",
    "FoldConstant",
)


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


def optimize(mod: IRModule, target: Any = None, params: dict | None = None) -> IRModule:
    """Run the default optimization pipeline (and FuseOps) on ``mod``."""
    from kiln.relay import transform

    if params:
        mod = mod.copy()
        mod["main"] = bind_params_by_name(mod["main"], params)
    passes = [transform.InferType()]
    passes += [getattr(transform, name)() for name in OPTIMIZE_PASSES]
    passes += [transform.InferType(), transform.FuseOps(), transform.InferType()]
    return Sequential(passes, name="relay_build_optimize")(mod)


def _parse_target(target: Any):
    """A single host target from TVM's forms: a string, Target, or dict device → target."""
    from kiln.target import Target

    if target is None:
        from kiln.target.codegen_llvm import llvm_available

        target = Target.current(allow_none=True) or ("llvm" if llvm_available() else "c")
    if isinstance(target, dict):
        kinds = {str(Target(t).kind.name) if not isinstance(t, Target) else t.kind.name
                 for t in target.values()}
        host = [t for t in target.values() if (Target(t) if isinstance(t, str) else t)
                .kind.name in ("llvm", "c")]
        if not host:
            raise TVMError(f"no CPU target among {target}; kiln generates CPU code only "
                           f"(got kinds {sorted(kinds)})")
        target = host[0]
    return Target(target) if isinstance(target, str) else target


class GraphExecutorFactoryModule:
    """What ``relay.build`` returns: graph JSON, kernel library and params (TVM's class).

    ``lib["default"](dev)`` creates an executor; ``export_library`` writes one ``.so``/``.tar``
    holding everything; ``graph, lib, params = relay.build(...)`` still works (deprecated).
    """

    def __init__(self, ir_mod: IRModule, target: Any, graph_json: str, lib: Any,
                 params: dict, mod_name: str, stats: dict) -> None:
        from kiln.runtime.executor_factory import GraphExecutorFactory

        self.ir_mod = ir_mod
        self.target = target
        self.graph_json = graph_json
        self.lib = lib
        self.params = params
        self.libmod_name = mod_name
        self.stats = stats
        self.module = GraphExecutorFactory(graph_json, lib, mod_name, params)

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
    """Compile a Relay module for the graph executor.

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
    from kiln.relay.backend.te_compiler import TECompiler

    executor = executor or Executor("graph")
    runtime = runtime or Runtime("cpp")
    if executor.name != "graph":
        raise TVMError(f"relay.build with Executor({executor.name!r}) is not available in "
                       "this kiln; use Executor('graph'), or relay.vm.compile for the VM")
    if isinstance(ir_mod, rx.Function):
        ir_mod = IRModule.from_expr(ir_mod)
    if not isinstance(ir_mod, IRModule):
        raise TVMError(f"relay.build expects an IRModule or a relay.Function, got "
                       f"{type(ir_mod).__name__}")
    target = _parse_target(target)
    start = time.perf_counter()
    with target:
        mod = optimize(ir_mod, target, params)
        compiler = TECompiler(target, mod_name)
        result = codegen(mod["main"], compiler)
        lib = compiler.build()
    stats = {
        "kernels": len(compiler.lowered),
        "kernel_calls": result.num_kernel_calls,
        "planned_bytes": result.memory_plan.planned_bytes,
        "peak_live_bytes": result.memory_plan.peak_live_bytes,
        "compile_seconds": time.perf_counter() - start,
    }
    return GraphExecutorFactoryModule(mod, target, result.graph_json, lib, result.params,
                                      mod_name, stats)


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
