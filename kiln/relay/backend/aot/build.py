"""The back half of ``relay.build`` for the AOT executor and for the C runtime (CRT).

Entry points: :func:`build_aot` (``Executor("aot")``), :func:`build_graph_crt`
(``Executor("graph")`` with ``Runtime("crt")``), :func:`emit_crt_kernels`,
:func:`check_crt_names`, :data:`CRT_NAME_LIMITS`, :func:`output_tensor_names`.

Both take the optimized, fused module that ``relay.build`` made. The kernels are lowered by
the one TE compiler; for the C runtime they are printed by the bare-metal C dialect
(:class:`~kiln.target.codegen_c_baremetal.CodeGenCBareMetal`: no OpenMP, big scratch from the
caller, parallel loops made serial by ``tir.ConvertForLoopsToSerial``) and kept as source
(:class:`~kiln.target.source_module.CSourceModule`) for the firmware's toolchain and the CRT
headers; a crt graph build's kernels also compile for the host on demand, so its factory runs
on the host graph executor. For the C++ runtime (host AOT) the AOT main is compiled and
linked with the kernels into one shared library.
"""

from __future__ import annotations

import math
import time
from typing import Any

from kiln.ir.transform import PassContext
from kiln.relay.backend.aot.aot_codegen import AotPlan, plan_aot
from kiln.relay.backend.aot.aot_emit import AotOptions, AotSource, emit_aot
from kiln.relay.backend.executor_config import Executor, Runtime, check_combination
from kiln.relay.backend.graph_executor_codegen import build_nodes
from kiln.relay.backend.pipeline import build_kernels, make_compilers
from kiln.relay.backend.te_compiler import TECompiler, kernel_recursion_room
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError

__all__ = ["build_aot", "build_graph_crt", "emit_crt_kernels", "check_crt_names",
           "CRT_NAME_LIMITS", "kernel_workspace_bytes", "output_tensor_names"]

# The CRT's fixed name buffers (crt_config.h, TVM's CRTConfig.cmake defaults); a name must
# leave room for its NUL. A longer name would be cut off silently on the device (issue #8953).
CRT_NAME_LIMITS = {
    "TVM_CRT_MAX_STRLEN_FUNCTION_NAME": 120,
    "TVM_CRT_MAX_STRLEN_PARAM_NAME": 80,
    "TVM_CRT_MAX_STRLEN_DLTYPE": 10,
}


def check_crt_names(function_names: list[str], param_names: list[str],
                    dtypes: list[str]) -> None:
    """Refuse names the CRT's fixed-size buffers cannot hold, naming the limit to raise."""
    checks = [("function", "TVM_CRT_MAX_STRLEN_FUNCTION_NAME", function_names),
              ("parameter", "TVM_CRT_MAX_STRLEN_PARAM_NAME", param_names),
              ("dtype", "TVM_CRT_MAX_STRLEN_DLTYPE", dtypes)]
    for what, macro, names in checks:
        limit = CRT_NAME_LIMITS[macro]
        for name in names:
            if len(name) >= limit:
                raise TVMError(
                    f"{what} name {name!r} is {len(name)} characters, but the C runtime "
                    f"stores it in {macro} = {limit} bytes (at most {limit - 1} characters "
                    "and the NUL); a longer name would be truncated on the device (TVM issue "
                    "#8953). Use a shorter mod_name or names in the model, or build with a "
                    f"crt_config.h whose {macro} is larger")


def kernel_workspace_bytes(prim_func: Any) -> int:
    """Bytes of constant-size scratch (``Allocate``) a kernel needs while it runs."""
    from kiln.tir import stmt as s
    from kiln.tir.stmt_functor import post_order_visit

    total = [0]

    def visit(node: Any) -> None:
        if isinstance(node, s.Allocate):
            extents = [getattr(e, "value", None) for e in node.extents]
            if all(isinstance(e, int) for e in extents):
                dtype = DataType(str(node.dtype))
                total[0] += math.prod(extents) * ((dtype.bits * dtype.lanes + 7) // 8)

    post_order_visit(prim_func.body, visit)
    return total[0]


def emit_crt_kernels(compiler: TECompiler) -> tuple[str, list[str]]:
    """C source of every kernel in the bare-metal dialect, and the kernels' packed names."""
    from kiln.target.codegen_c import emit_c
    from kiln.tir.transform import ConvertForLoopsToSerial

    if compiler.target.kind.name != "c":
        raise TVMError(f"Runtime('crt') needs a C target ('c -mcpu=...'), got "
                       f"{compiler.target}: the C runtime's firmware is built from C source")
    mod = ConvertForLoopsToSerial()(compiler.ir_module())
    deepest = max((lowered.num_ops for lowered in compiler.lowered), default=1)
    with kernel_recursion_room(deepest):
        source, names = emit_c(mod, compiler.target, bare_metal=True)
    return source, names


def _config() -> dict[str, Any]:
    return dict(PassContext.current().config or {})


def _target_comment(source: str, target: Any) -> str:
    """Put the full target string (with -mcpu) in the generated C's first comment."""
    return f"/* kiln kernels for target: {target} */\n" + source


def output_tensor_names(main: Any) -> list[str] | None:
    """``main``'s ``output_tensor_names`` attribute (TVM names the outputs after it)."""
    attrs = main.attrs or {}
    if "output_tensor_names" not in attrs:
        return None
    return [str(name) for name in attrs["output_tensor_names"]]


def _pool_settings(workspace_pools: Any, constant_pools: Any, interface: str,
                   usmp: bool) -> tuple[dict[str, Any], list[int | None]]:
    """AotOptions fields and workspace pool limits for user-given memory pools."""
    from kiln.ir.memory_pools import ConstantMemoryPools, WorkspaceMemoryPools

    fields: dict[str, Any] = {}
    limits: list[int | None] = [None]
    if workspace_pools is not None:
        if not isinstance(workspace_pools, WorkspaceMemoryPools):
            raise TVMError("workspace_memory_pools must be a WorkspaceMemoryPools, got "
                           f"{type(workspace_pools).__name__}")
        if not usmp:
            raise TVMError("workspace_memory_pools need the planner (tir.usmp.enable)")
        names = [p.pool_name for p in workspace_pools.pools]
        limits = [None if p.size_hint_bytes < 0 else p.size_hint_bytes
                  for p in workspace_pools.pools]
        fields.update(workspace_pools=tuple(names), user_workspace_pools=True)
    if constant_pools is not None:
        if not isinstance(constant_pools, ConstantMemoryPools):
            raise TVMError("constant_memory_pools must be a ConstantMemoryPools, got "
                           f"{type(constant_pools).__name__}")
        if interface != "c":
            raise TVMError("constant_memory_pools need interface-api 'c': the application "
                           "fills the pool from TVMGEN_<MOD>_<POOL>_CONSTANT_POOL_DATA")
        fields.update(constant_pool=constant_pools.pools[0].pool_name, user_constant_pool=True)
    return fields, limits


def build_aot(mod: Any, target: Any, executor: Executor, runtime: Runtime, mod_name: str,
              workspace_pools: Any = None, constant_pools: Any = None) -> Any:
    """Generate the AOT executor of a fused module; returns an AOTExecutorFactoryModule.
    ``workspace_pools`` / ``constant_pools`` are the user's ``WorkspaceMemoryPools`` /
    ``ConstantMemoryPools`` (pools the application provides)."""
    from kiln.relay.backend.executor_factory import AOTExecutorFactoryModule
    from kiln.target.source_module import CSourceModule

    start = time.perf_counter()
    unpacked, interface = check_combination(executor, runtime)
    config = _config()
    usmp = config.get("tir.usmp.enable", True)
    use_io = config.get("tir.usmp.use_workspace_io", False)
    if use_io and (interface != "c" or not usmp):
        raise TVMError("tir.usmp.use_workspace_io needs interface-api 'c' (got "
                       f"{interface!r}) and tir.usmp.enable (got {usmp}): the application "
                       "finds its inputs and outputs in the pool through "
                       "tvmgen_<mod>_map_inputs/map_outputs of the C interface")
    pool_fields, limits = _pool_settings(workspace_pools, constant_pools, interface, usmp)
    link_params = executor["link-params"]
    # the host runtime builds the kernels' library (the C runtime gets their source)
    compiler = make_compilers({1: target}, target, mod_name,
                              build_as_lowered=runtime.name != "crt")[1]
    main = mod["main"]
    nodes, heads, params, kernel_calls = build_nodes(main, compiler)
    kernels = {lowered.name: lowered for lowered in compiler.lowered}
    scratch = {}
    if runtime.name == "crt":  # the bare-metal dialect takes big scratch from the pool
        from kiln.target.codegen_c_baremetal import scratch_layout

        scratch = {name: scratch_layout(f.prim_func)[1] for name, f in kernels.items()}
    plan = plan_aot(nodes, heads, len(main.params), params, kernels,
                    mod_name, link_params=link_params,
                    algorithm=config.get("tir.usmp.algorithm", "greedy_by_size"),
                    workspace_alignment=executor.get("workspace-byte-alignment", 16),
                    constant_alignment=executor.get("constant-byte-alignment", 16),
                    use_workspace_io=use_io, scratch=scratch, pool_limits=limits,
                    output_names=output_tensor_names(main))
    options = AotOptions(interface, unpacked, runtime.name, bool(runtime.get("system-lib")),
                         usmp, executor.get("workspace-byte-alignment", 16),
                         executor.get("constant-byte-alignment", 16), str(target),
                         **pool_fields)
    if runtime.name == "crt":
        kernel_source, kernel_names = emit_crt_kernels(compiler)
        aot = emit_aot(plan, options, kernel_names)
        check_crt_names(kernel_names + aot.packed_functions + [aot.main_name],
                        [s.name for s in plan.inputs + plan.outputs],
                        [s.dtype for s in plan.inputs + plan.outputs])
        lib = CSourceModule(aot.lib0, aot.packed_functions,
                            f"{mod_name}_lib0.c")
        lib.import_module(CSourceModule(_target_comment(kernel_source, target), kernel_names,
                                        f"{mod_name}_lib1.c"))
    else:
        aot = emit_aot(plan, options, [])
        kernel_lib = build_kernels({1: compiler})
        lib = kernel_lib.with_source(f"{mod_name}_lib0.c", aot.lib0,
                                     aot.packed_functions)
    stats = _stats(plan, aot, compiler, kernel_calls, time.perf_counter() - start)
    unlinked = {} if link_params else {name: params[name] for name in params}
    return AOTExecutorFactoryModule(mod, target, runtime, executor, mod_name, lib, unlinked,
                                    plan, aot, compiler, stats)


def _stats(plan: AotPlan, aot: AotSource, compiler: TECompiler, kernel_calls: int,
           seconds: float) -> dict[str, Any]:
    return {
        "kernels": len(compiler.lowered),
        "kernel_calls": kernel_calls,
        "workspace_pool_bytes": plan.workspace.size,
        "workspace_lower_bound_bytes": plan.workspace.lower_bound,
        "usmp_algorithm": plan.workspace.algorithm,
        "constant_pool_bytes": plan.constant_pool_size,
        "io_bytes": sum(s.nbytes for s in plan.inputs + plan.outputs),
        "workspace_size_bytes": aot.workspace_size,
        "compile_seconds": seconds,
    }


def build_graph_crt(mod: Any, target: Any, executor: Executor, runtime: Runtime,
                    mod_name: str) -> tuple[Any, Any, str]:
    """Graph executor for the C runtime: ``(codegen result, lib, lib0 source)``; the kernels
    in the bare-metal dialect, plus (``system-lib``) the CRT function registry and
    (``link-params``) ``_lookup_linked_param``, which hands the C graph executor a pointer
    to each linked constant's storage."""
    from kiln.relay.backend.graph_executor_codegen import codegen
    from kiln.target.c_abi import crt_system_lib_source
    from kiln.target.source_module import CSourceModule

    compiler = make_compilers({1: target}, target, mod_name)[1]
    result = codegen(mod["main"], compiler)
    kernel_source, kernel_names = emit_crt_kernels(compiler)
    import json

    graph = json.loads(result.graph_json)
    node_names = [n["name"] for n in graph["nodes"]]
    check_crt_names(kernel_names + node_names, list(result.params),
                    list(graph["attrs"]["dltype"][1]))
    parts, defined = [], []
    if executor["link-params"] and result.params:
        parts.append(_linked_params_source(graph, result.params))
        defined.append("_lookup_linked_param")
    if runtime.get("system-lib"):
        parts.append(crt_system_lib_source(defined + kernel_names, defined_here=defined))
    from kiln.target.codegen_c import compile_options

    # the kernels need only the TVM C API: they also run on the host graph executor
    kernels = CSourceModule(_target_comment(kernel_source, target), kernel_names,
                            f"{mod_name}_lib1.c" if parts else f"{mod_name}_lib0.c",
                            host_options=compile_options(target))
    if not parts:
        return result, kernels, ""
    header = ("#include <stdint.h>\n#include <tvm/runtime/c_runtime_api.h>\n"
              "#include <tvm/runtime/c_backend_api.h>\n")
    lib0 = _target_comment(header + "\n\n".join(parts) + "\n", target)
    lib = CSourceModule(lib0, defined, f"{mod_name}_lib0.c")
    lib.import_module(kernels)
    return result, lib, lib0


def _linked_params_source(graph: dict, params: dict[str, Any]) -> str:
    """Static arrays of the params and ``_lookup_linked_param(sid)`` returning their address
    by storage id (NULL for storage that is not a linked param)."""
    from kiln.relay.backend.aot.aot_emit import UNUSED_PACKED_PARAMS, constant_array_source

    storage = graph["attrs"]["storage_id"][1]
    row_ptr = graph["node_row_ptr"]
    cases, arrays = [], []
    for nid in graph["arg_nodes"]:
        name = graph["nodes"][nid]["name"]
        if name not in params:
            continue
        symbol = f"__tvm_param__{name}"
        arrays.append(constant_array_source(symbol, params[name]))
        cases.append(f"    case {storage[row_ptr[nid]]}: "
                     f"out_ret_value[0].v_handle = (void*){symbol}; break;")
    return "\n".join(arrays + [
        "TVM_DLL int32_t _lookup_linked_param(TVMValue* args, int* type_codes, int num_args, "
        "TVMValue* out_ret_value, int* out_ret_tcode, void* resource_handle);",
        "int32_t _lookup_linked_param(TVMValue* args, int* type_codes, int num_args, "
        "TVMValue* out_ret_value, int* out_ret_tcode, void* resource_handle) {",
        UNUSED_PACKED_PARAMS.rstrip("\n"),
        "  if (num_args != 1 || type_codes[0] != kTVMArgInt) {",
        '    TVMAPISetLastError("_lookup_linked_param: expected one int (a storage id)");',
        "    return -1;", "  }",
        "  out_ret_value[0].v_handle = NULL;",
        "  switch (args[0].v_int64) {", *cases, "    default: break;", "  }",
        "  out_ret_tcode[0] = kTVMOpaqueHandle;", "  return 0;", "}"])
