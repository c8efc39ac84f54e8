"""The TVM module status table of docs/porting_from_tvm.md, generated from the code.

``python -m kiln.compat.status`` prints the table; ``--write`` updates the document between its
markers. A test regenerates it and fails when the committed table is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kiln.compat import resolve_kiln_module

__all__ = ["TVM_MODULES", "module_status", "render_table", "update_document"]

DOC = Path(__file__).resolve().parents[2] / "docs" / "porting_from_tvm.md"
BEGIN, END = "<!-- status table: begin -->", "<!-- status table: end -->"

# TVM v0.16 modules and the names Relay-era code most often takes from each.
TVM_MODULES: dict[str, tuple[str, ...]] = {
    "tvm": ("IRModule", "build", "lower", "cpu", "cuda", "device", "nd", "transform", "target",
            "TVMError", "register_func", "get_global_func", "instrument", "error", "testing"),
    "tvm.runtime": ("load_module", "Module", "NDArray", "Object", "convert", "ndarray"),
    "tvm.runtime.vm": ("VirtualMachine", "Executable"),
    "tvm.runtime.profiler_vm": ("VirtualMachineProfiler",),
    "tvm.runtime.profiling": ("Report", "DeviceWrapper", "profile_function"),
    "tvm.ir": ("IRModule", "Op", "structural_equal", "structural_hash", "transform",
               "instrument", "EnvFunc"),
    "tvm.ir.instrument": ("PassInstrument", "pass_instrument", "PassTimingInstrument",
                          "PassPrintingInstrument", "PrintAfterAll", "PrintBeforeAll"),
    "tvm.transform": ("PassContext", "Sequential", "module_pass", "PrintIR"),
    "tvm.error": ("TVMError", "InternalError", "OpError", "OpNotImplemented",
                  "OpAttributeInvalid", "OpAttributeRequired", "OpAttributeUnImplemented",
                  "DiagnosticError", "RPCError", "register_error"),
    "tvm._ffi": ("register_func", "register_object", "get_global_func", "register_error",
                 "_init_api"),
    "tvm.target": ("Target",),
    "tvm.te": ("placeholder", "compute", "create_schedule", "reduce_axis", "sum"),
    "tvm.te.schedule": ("InferBound", "ScheduleOps"),
    "tvm.tir": ("PrimFunc", "Var", "const", "ir_builder"),
    "tvm.tir.ir_builder": ("create",),
    "tvm.topi": ("add", "nn", "testing"),
    "tvm.topi.testing": ("conv2d_nchw_python", "conv2d_nhwc_python",
                         "depthwise_conv2d_python_nchw", "dense", "batch_matmul",
                         "poolnd_python", "softmax_python", "log_softmax_python",
                         "gather_python", "one_hot", "resize2d_python", "roi_align_nchw_python"),
    "tvm.relay": ("var", "const", "Function", "build", "create_executor", "transform",
                  "analysis", "frontend", "vm", "parse_expr"),
    "tvm.relay.transform": ("InferType", "FoldConstant", "FuseOps", "SimplifyInference",
                            "ToANormalForm", "LambdaLift", "DeadCodeElimination"),
    "tvm.relay.analysis": ("free_vars", "bound_vars", "all_vars", "free_type_vars",
                           "well_formed", "check_kind", "post_order_visit",
                           "get_total_mac_number", "detect_feature", "Feature",
                           "extract_fused_functions", "list_op_freqs", "check_constant",
                           "CallGraph", "count_layers"),
    "tvm.relay.testing": ("run_infer_type", "run_opt_pass", "create_workload", "resnet",
                          "mobilenet", "squeezenet", "vgg", "dcgan", "lstm", "dqn", "mlp",
                          "densenet", "inception_v3", "resnet_3d", "synthetic", "layers",
                          "init", "make_nat_expr", "make_nat_value", "count", "check_grad",
                          "rand", "to_python"),
    "tvm.relay.frontend": ("from_onnx",),
    "tvm.relay.prelude": ("Prelude", "TensorArrayOps", "StaticTensorArrayOps",
                          "get_tensor_array_shape"),
    "tvm.parser": ("parse", "parse_expr"),
    "tvm.contrib.graph_executor": ("GraphModule", "create"),
    "tvm.contrib.debugger.debug_executor": ("GraphModuleDebug", "create"),
    "tvm.contrib.utils": ("tempdir", "TempDirectory", "which"),
    "tvm.contrib.cc": ("create_shared",),
    "tvm.testing": ("assert_allclose", "check_numerical_grads", "uses_gpu", "requires_gpu",
                    "requires_llvm", "requires_cuda", "requires_package",
                    "parametrize_targets", "exclude_targets", "known_failing_targets",
                    "parameter", "parameters", "fixture", "enabled_targets", "device_enabled",
                    "echo", "nop", "object_use_count", "device_test"),
    "tvm.rpc": ("connect", "Server", "LocalSession"),
    "tvm.micro": ("export_model_library_format",),
    "tvm.autotvm": ("task", "tuner", "apply_history_best", "measure_option", "LocalBuilder",
                    "LocalRunner", "RPCRunner", "record", "callback", "template",
                    "register_topi_compute", "register_topi_schedule", "get_config"),
    "tvm.contrib.cuda_graph.cuda_graph_executor": ("create", "GraphModuleCudaGraph"),
}


def module_status(tvm_name: str, names: tuple[str, ...]) -> tuple[str, str, list[str]]:
    """``(kiln module, status, missing names)`` for TVM module ``tvm_name``."""
    try:
        module = resolve_kiln_module(tvm_name)
    except ImportError as err:  # the kiln module exists but cannot be imported here
        return "", f"import fails ({type(err).__name__})", list(names)
    if module is None:
        return "", "missing", list(names)
    missing = [n for n in names if not hasattr(module, n)]
    status = "complete" if not missing else f"partial ({len(names) - len(missing)}/{len(names)})"
    return module.__name__, status, missing


def render_table() -> str:
    """The markdown status table, one row per TVM module."""
    rows = ["| TVM module | kiln module | status | names missing |", "|---|---|---|---|"]
    for tvm_name, names in TVM_MODULES.items():
        kiln_name, status, missing = module_status(tvm_name, names)
        home = f"`{kiln_name}`" if kiln_name else "—"
        rows.append(f"| `{tvm_name}` | {home} | {status} | {', '.join(missing) or '—'} |")
    return "\n".join(rows)


def update_document(path: Path = DOC) -> bool:
    """Rewrite the table between the markers in ``path``; returns whether it changed."""
    text = path.read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise ValueError(f"{path} lacks the markers {BEGIN!r} ... {END!r}")
    new = f"{head}{BEGIN}\n{render_table()}\n{END}{tail}"
    path.write_text(new)
    return new != text


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        print("updated" if update_document() else "unchanged", DOC)
    else:
        print(render_table())
