"""The one compile pipeline: the passes every executor runs, its TE compilers, kernel assembly.

Entry points: :data:`OPTIMIZE_PASSES`, :func:`pass_pipeline`, :func:`make_compilers`,
:func:`build_kernels`.

``relay.build`` (graph and AOT executors) and ``relay.vm.compile`` read the same three steps:

1. :func:`pass_pipeline` — QNN legalization + canonicalization (when the module has ``qnn.*`` ops),
   ``PlanDevices``, the optimization passes (:data:`OPTIMIZE_PASSES`, each gated by its own
   opt level in the current ``PassContext``), ``PlanDevices`` again and ``FuseOps``; the VM
   adds A-normal form and ``ManifestLifetimes`` (TVM's ``GetPassPrefix`` plus the VM's tail);
2. :func:`make_compilers` — one :class:`~kiln.relay.backend.te_compiler.TECompiler` per target
   (kernel names drawn from one set), which the executor's codegen lowers primitives with;
3. :func:`build_kernels` — all kernels of a target in one module; the host's imports the
   others.

Example
-------
>>> import kiln
>>> from kiln import relay
>>> x = relay.var("x", shape=(2,))
>>> mod = kiln.IRModule.from_expr(relay.Function([x], relay.exp(relay.add(x, x))))
>>> fused = pass_pipeline(mod, kiln.cpu(0))(mod)
>>> fused["main"].body.op.attrs["Primitive"]
1
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kiln.ir.transform import Pass, PassContext, Sequential
from kiln.relay.backend.te_compiler import TECompiler
from kiln.relay.qnn.transform import Legalize as QnnLegalize
from kiln.relay.qnn.transform import has_qnn_ops
from kiln.relay.transform import InferType
from kiln.relay.transform.alter_op_layout import AlterOpLayout
from kiln.relay.transform.canonicalize_ops import CanonicalizeOps
from kiln.relay.transform.eliminate_common_subexpr import EliminateCommonSubexpr
from kiln.relay.transform.fast_math import FastMath
from kiln.relay.transform.fold_constant import FoldConstant
from kiln.relay.transform.fold_scale_axis import FoldScaleAxis
from kiln.relay.transform.fuse_ops import FuseOps
from kiln.relay.transform.manifest_lifetimes import ManifestLifetimes
from kiln.relay.transform.normal_forms import to_a_normal_form
from kiln.relay.transform.pass_util import relay_function_pass
from kiln.relay.transform.plan_devices import PlanDevices
from kiln.relay.transform.remove_unused_functions import RemoveUnusedFunctions
from kiln.relay.transform.simplify_expr import SimplifyExpr
from kiln.relay.transform.simplify_inference import SimplifyInference
from kiln.runtime.error import TVMError

__all__ = ["OPTIMIZE_PASSES", "EXECUTORS", "pass_pipeline", "qnn_lowering_passes",
           "make_compilers", "build_kernels"]

# The optimization passes, in order (TVM's GetPassPrefix). Each pass has its own opt level;
# PassContext(opt_level=...) decides which run.
OPTIMIZE_PASSES = (
    RemoveUnusedFunctions,
    SimplifyInference,
    EliminateCommonSubexpr,
    FoldConstant,
    FoldScaleAxis,
    SimplifyExpr,
    CanonicalizeOps,
    AlterOpLayout,
    FastMath,
    FoldConstant,
)

EXECUTORS = ("graph", "aot", "vm")


def qnn_lowering_passes(mod: Any) -> list[Pass]:
    """QNN legalization + canonicalization when ``mod`` calls ``qnn.*`` ops (first in TVM's
    pass prefix): the QNN ops have no kernels."""
    return [QnnLegalize()] if has_qnn_ops(mod) else []


def _to_a_normal_form_at_any_level() -> Pass:
    """ToANormalForm that runs at opt_level 0 too: the VM compiler walks let chains in a loop,
    while a nested call chain (3,000 unfused ops) would recurse once per call."""
    return relay_function_pass("ToANormalForm", 0,
                               lambda func, mod, ctx: to_a_normal_form(func),
                               skip_primitive=True)


def pass_pipeline(mod: Any, default_device: Any, executor: str = "graph") -> Sequential:
    """The passes that take ``mod`` to fused primitive functions for ``executor``.

    ``default_device`` is where expressions no ``on_device`` places run. Run the result under
    the CPU kernels' target (``with target:``), as ``relay.build`` does.
    """
    if executor not in EXECUTORS:
        raise TVMError(f"no compile pipeline for executor {executor!r}; executors: "
                       f"{', '.join(EXECUTORS)}")
    # PlanDevices first too: once on_device became device_copy, common-subexpression
    # elimination cannot merge equal computations meant for different devices
    passes = [InferType(), *qnn_lowering_passes(mod), PlanDevices(default_device)]
    passes += [make_pass() for make_pass in OPTIMIZE_PASSES]
    passes += [InferType(), PlanDevices(default_device), FuseOps(), InferType()]
    if executor == "vm":
        passes += [_to_a_normal_form_at_any_level(), InferType()]
        if "ManifestLifetimes" not in (PassContext.current().disabled_pass or ()):
            passes += [ManifestLifetimes(), InferType()]
    return Sequential(passes, name=f"{executor}_optimize")


def make_compilers(targets: Mapping[int, Any], host: Any, mod_name: str = "default",
                   build_as_lowered: bool = False) -> dict[int, TECompiler]:
    """One TE compiler per device type (the host's under device type 1), drawing kernel names
    from one set, so a kernel lowered for two targets gets two names.

    ``build_as_lowered``: the caller will :func:`build_kernels`, so each kernel starts
    compiling as soon as it is lowered (LLVM optimizes on another core meanwhile).
    """
    names: set[str] = set()
    compilers = {device_type: TECompiler(target, mod_name, names, build_as_lowered)
                 for device_type, target in targets.items()}
    compilers.setdefault(1, TECompiler(host, mod_name, names, build_as_lowered))
    return compilers


def build_kernels(compilers: Mapping[int, TECompiler], always_host: bool = True) -> Any:
    """Compile each target's kernels into one module; the host's (device type 1) imports the
    others.

    With ``always_host=False`` a host without kernels builds nothing: the first other module
    is the root, and None is returned when no compiler lowered a kernel (a VM program of
    closures and ADTs only).
    """
    root = None
    host = compilers[1]
    if host.lowered or always_host:
        with host.target:
            root = host.build()
    for device_type, compiler in compilers.items():
        if device_type == 1 or not compiler.lowered:
            continue
        with compiler.target:
            lib = compiler.build()
        if root is None:
            root = lib
        else:
            root.import_module(lib)
    return root
