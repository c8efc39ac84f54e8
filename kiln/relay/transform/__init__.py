"""Relay passes (TVM's ``tvm.relay.transform``).

Entry points here: :func:`InferType`, :func:`InferTypeLocal`, :class:`FunctionPass`,
:func:`function_pass`, and the pass infrastructure re-exported from :mod:`kiln.ir.transform`
(``PassContext``, ``Sequential``, ``module_pass`` …).

Passes written by other modules of this package are listed in ``_LAZY`` (name -> module or
(module, attr)); a pass module adds its one line there and loads on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kiln._lazy import attach
from kiln.ir.transform import (
    ModulePass,
    Pass,
    PassContext,
    PassInfo,
    PassInstrument,
    PassTimingInstrument,
    PrintIR,
    Sequential,
    make_pass_decorator,
    module_pass,
    pass_instrument,
)
from kiln.runtime.object import register_object

__all__ = ["InferType", "InferTypeLocal", "FunctionPass", "function_pass", "PassContext",
           "PassInfo", "Pass", "ModulePass", "Sequential", "module_pass", "PassInstrument",
           "pass_instrument", "PassTimingInstrument", "PrintIR"]

_LAZY: dict[str, Any] = {
    "FuseOps": ("kiln.relay.transform.fuse_ops", "FuseOps"),
    "fused_function_name": ("kiln.relay.transform.fuse_ops", "fused_function_name"),
    "FoldConstant": ("kiln.relay.transform.fold_constant", "FoldConstant"),
    "DeadCodeElimination": ("kiln.relay.transform.dead_code", "DeadCodeElimination"),
    "EliminateCommonSubexpr": ("kiln.relay.transform.eliminate_common_subexpr",
                               "EliminateCommonSubexpr"),
    "SimplifyInference": ("kiln.relay.transform.simplify_inference", "SimplifyInference"),
    "FastMath": ("kiln.relay.transform.fast_math", "FastMath"),
    "SimplifyExpr": ("kiln.relay.transform.simplify_expr", "SimplifyExpr"),
    "FoldScaleAxis": ("kiln.relay.transform.fold_scale_axis", "FoldScaleAxis"),
    "ForwardFoldScaleAxis": ("kiln.relay.transform.fold_scale_axis", "ForwardFoldScaleAxis"),
    "BackwardFoldScaleAxis": ("kiln.relay.transform.fold_scale_axis", "BackwardFoldScaleAxis"),
    "CanonicalizeOps": ("kiln.relay.transform.canonicalize_ops", "CanonicalizeOps"),
    "AlterOpLayout": ("kiln.relay.transform.alter_op_layout", "AlterOpLayout"),
    "ConvertLayout": ("kiln.relay.transform.alter_op_layout", "ConvertLayout"),
    "InferCorrectLayoutOutput": ("kiln.relay.op.layout", "InferCorrectLayoutOutput"),
    "ToANormalForm": ("kiln.relay.transform.normal_forms", "ToANormalForm"),
    "ToANormalFormExpr": ("kiln.relay.transform.normal_forms", "ToANormalFormExpr"),
    "ToGraphNormalForm": ("kiln.relay.transform.normal_forms", "ToGraphNormalForm"),
    "ToBasicBlockNormalForm": ("kiln.relay.transform.normal_forms", "ToBasicBlockNormalForm"),
    "ManifestLifetimes": ("kiln.relay.transform.manifest_lifetimes", "ManifestLifetimes"),
    "LambdaLift": ("kiln.relay.transform.lambda_lift", "LambdaLift"),
    "Inline": ("kiln.relay.transform.inline", "Inline"),
    "EtaExpand": ("kiln.relay.transform.eta_expand", "EtaExpand"),
    "PlanDevices": ("kiln.relay.transform.plan_devices", "PlanDevices"),
    "RemoveUnusedFunctions": ("kiln.relay.transform.remove_unused_functions",
                              "RemoveUnusedFunctions"),
    "DefuseOps": ("kiln.relay.transform.defuse_ops", "DefuseOps"),
    "LabelOps": ("kiln.relay.transform.label_ops", "LabelOps"),
    "AnnotateSpans": ("kiln.relay.transform.annotate_spans", "AnnotateSpans"),
    "Gradient": ("kiln.relay.transform.autodiff", "Gradient"),
    "gradient": ("kiln.relay.transform.autodiff", "gradient"),
    "FakeQuantizationToInteger": ("kiln.relay.qnn.fake_quantization",
                                  "FakeQuantizationToInteger"),
}

_lazy_getattr, __dir__ = attach(__name__, _LAZY)


def __getattr__(name: str) -> Any:
    return _lazy_getattr(name)


def InferType() -> ModulePass:  # noqa: N802 (TVM's name)
    """The pass that fills ``checked_type_`` on every expression of every Relay function.

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(2,))
    >>> mod = InferType()(kiln.IRModule.from_expr(relay.Tuple([x])))
    >>> mod["main"].body.checked_type
    (Tensor[(2,), float32],)
    """
    from kiln.relay.type_infer import infer_module

    return ModulePass(lambda mod, ctx: infer_module(mod), PassInfo(0, "InferType"))


def InferTypeLocal(expr: Any) -> Any:  # noqa: N802 (TVM's name)
    """Infer the type of a single expression (no module); returns it and fills checked_type_."""
    from kiln.relay.type_infer import infer_expr

    return infer_expr(expr)


@register_object("relay.FunctionPass")
class FunctionPass(Pass):
    """A pass applying ``pass_func(func, mod, ctx) -> func`` to each Relay function.

    Functions marked ``SkipOptimization`` or handed to an external ``Compiler`` are left alone;
    the result is type-checked again (as TVM does).
    """

    _fields = {"pass_func": "any"}

    def __init__(self, pass_func: Callable, pass_info: PassInfo) -> None:
        super().__init__(pass_info, pass_func)

    def _transform(self, mod, ctx: PassContext):
        from kiln.relay.expr import Function
        from kiln.relay.type_infer import infer_module

        updated = mod.copy()
        for gvar, func in list(mod.functions.items()):
            if not isinstance(func, Function) or func.get_attr("SkipOptimization") or \
                    func.get_attr("Compiler"):
                continue
            new_func = self.pass_func(func, mod, ctx)
            if new_func is not func:
                updated.update_func(updated.get_global_var(gvar.name_hint), new_func)
        return infer_module(updated)


def _wrap_class_function_pass(pass_cls: type, info: PassInfo) -> type:
    class PyFunctionPass(FunctionPass):
        _extra_slots = ("_inst",)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            inst = pass_cls(*args, **kwargs)
            super().__init__(inst.transform_function, info)
            self._set("_inst", inst)

        def __getattr__(self, name: str) -> Any:
            if name == "_inst":
                raise AttributeError(name)
            return getattr(self._inst, name)

    PyFunctionPass.__name__ = pass_cls.__name__
    PyFunctionPass.__qualname__ = pass_cls.__qualname__
    PyFunctionPass.__doc__ = pass_cls.__doc__
    return PyFunctionPass


def function_pass(pass_func: Callable | type | None = None, opt_level: int | None = None,
                  name: str | None = None, required: Sequence[str] | None = None):
    """Decorate ``f(func, mod, ctx) -> func`` (or a class with ``transform_function``).

    Example
    -------
    >>> @function_pass(opt_level=1)
    ... def keep(func, mod, ctx):
    ...     return func
    >>> keep.info.name
    'keep'
    """
    return make_pass_decorator("function", _wrap_class_function_pass, FunctionPass,
                               pass_func, opt_level, name, required)
