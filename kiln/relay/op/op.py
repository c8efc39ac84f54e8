"""Relay's view of the operator registry: pattern kinds and registration helpers.

Entry points: :class:`OpPattern`, :func:`get`, :func:`register_op_attr`, :func:`define_op`,
:func:`register_pattern`, :func:`register_arg_types`, :func:`register_compute`,
:func:`register_strategy`, :func:`register_shape_func`, :func:`register_shape_requirement`,
:func:`register_gradient`,
:func:`register_reference`, :func:`register_mac_count`, :func:`register_injective_schedule`,
:func:`register_reduce_schedule`, :func:`register_opaque_schedule`, :func:`call`.

Every op family module (``tensor.py``, ``transform.py``, ``nn/dense.py`` …) declares its ops
with :func:`define_op`, which registers the op together with its type relation and pattern kind
in one line, and registers everything else about the op beside it with the ``register_*``
helpers here (see ``docs/adding_an_op.md``):

==============================  =======================  ====================================
helper                          attribute                who asks
==============================  =======================  ====================================
:func:`register_compute`        ``FTVMCompute``          the generic strategy (TE compiler)
``register_*_schedule``         ``FTVMSchedule``         the generic strategy, fused groups
:func:`register_strategy`       ``FTVMStrategy``         TE compiler (target-keyed strategies
                                                         use ``strategy.register_strategy``)
:func:`register_reference`      ``FNumpyEval``           interpreter, FoldConstant, importers
:func:`register_shape_func`     ``FShapeFunc``           VM shape functions (``Any`` dims)
``register_shape_requirement``  ``TShapeValueRequirement``  the VM's shape-check message
:func:`register_gradient`       ``FPrimalGradient``      ``relay.transform.gradient``
:func:`register_mac_count`      ``FMacCount``            ``analysis.get_total_mac_number``
``register_fold_scale_axis``    ``FScaleAxisOutput/Input``  ``transform.FoldScaleAxis``
``register_scale_axis_role``    ``TScaleAxisRole``       ``transform.FoldScaleAxis``
==============================  =======================  ====================================

An op with a compute and a schedule gets its ``generic`` strategy from them (TVM's
``_create_fstrategy_from_schedule``), so a new elementwise op needs no strategy code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any

from kiln.ir.op import Op, get, list_op_names, register, register_op_attr
from kiln.runtime.error import TVMError

__all__ = [
    "OpPattern",
    "Op",
    "get",
    "list_op_names",
    "register",
    "register_op_attr",
    "define_op",
    "register_pattern",
    "register_type_rel",
    "register_arg_types",
    "register_compute",
    "register_strategy",
    "StrategyFunction",
    "register_shape_func",
    "register_shape_requirement",
    "register_gradient",
    "register_stateful",
    "register_alter_op_layout",
    "register_convert_op_layout",
    "register_infer_correct_layout",
    "register_legalize",
    "register_schedule",
    "register_injective_schedule",
    "register_broadcast_schedule",
    "register_reduce_schedule",
    "register_opaque_schedule",
    "register_reference",
    "register_mac_count",
    "register_fold_scale_axis",
    "register_scale_axis_role",
    "SCALE_AXIS_ROLES",
    "schedule_injective",
    "schedule_reduce",
    "schedule_opaque",
    "call",
    "as_expr",
    "is_expr",
    "constant_value",
    "OPAQUE",
    "ELEMWISE",
    "BROADCAST",
    "INJECTIVE",
    "COMM_REDUCE",
    "OUT_ELEMWISE_FUSABLE",
    "TUPLE",
]


class OpPattern(IntEnum):
    """How an op's output elements depend on its inputs (TVM's ``OpPatternKind``, for FuseOps)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8

    # TVM's C++ spellings, so both read naturally.
    kElemWise = 0
    kBroadcast = 1
    kInjective = 2
    kCommReduce = 3
    kOutEWiseFusable = 4
    kTuple = 7
    kOpaque = 8


ELEMWISE = OpPattern.ELEMWISE
BROADCAST = OpPattern.BROADCAST
INJECTIVE = OpPattern.INJECTIVE
COMM_REDUCE = OpPattern.COMM_REDUCE
OUT_ELEMWISE_FUSABLE = OpPattern.OUT_ELEMWISE_FUSABLE
TUPLE = OpPattern.TUPLE
OPAQUE = OpPattern.OPAQUE

TypeRelation = Callable[[list, Any], Any]


def define_op(
    name: str,
    rel: TypeRelation,
    pattern: OpPattern,
    num_inputs: int,
    attrs_type: type | None = None,
    describe: str = "",
    support_level: int = 10,
) -> Op:
    """Register op ``name`` with its type relation and pattern kind (one line per op).

    ``rel(arg_types, attrs, op_name)`` returns the output type given the argument types; it
    raises :class:`~kiln.runtime.error.TypeInferenceError` for ill-typed arguments. It is
    stored as ``FTVMTypeRelation`` with ``op_name`` bound: ``rel(arg_types, attrs)``.
    """
    from kiln.relay.op.type_relations import named

    op = register(name, describe)
    op.set_num_inputs(num_inputs)
    op.set_support_level(support_level)
    if attrs_type is not None:
        op.set_attrs_type_key(attrs_type.type_key)
    if not op.has_attr("FTVMTypeRelation"):
        op.set_attr("FTVMTypeRelation", named(rel, name))
        op.set_attr("TOpPattern", int(pattern))
    return op


def register_pattern(op_name: str, pattern: int, level: int = 10) -> None:
    """Set the pattern kind (``TOpPattern``) of ``op_name``."""
    register_op_attr(op_name, "TOpPattern", int(pattern), level)


def register_type_rel(op_name: str, rel: TypeRelation | None = None, level: int = 10):
    """Set the type relation of ``op_name`` (decorator when ``rel`` is None)."""
    return register_op_attr(op_name, "FTVMTypeRelation", rel, level)


def register_arg_types(op_name: str, rule: Callable, level: int = 10) -> None:
    """Set ``FInferArgTypes`` of ``op_name``: types of unannotated arguments, from the rest.

    ``rule(arg_types, attrs, op_name)`` gets the argument types with ``None`` for each one not
    known yet and returns ``{index: TensorType}`` for those it can determine (a weight from
    the data's shape and ``units``, ``channels``, ``kernel_size`` …). Type inference unifies
    them in; the op's type relation then checks the whole call as usual.
    """
    from kiln.relay.op.type_relations import named

    register_op_attr(op_name, "FInferArgTypes", named(rule, op_name), level)


def register_compute(op_name: str, compute: Callable | None = None, level: int = 10):
    """Set the TE compute (``FTVMCompute``) of ``op_name`` (decorator when None)."""
    return register_op_attr(op_name, "FTVMCompute", compute, level)


def register_strategy(op_name: str, strategy: Callable | None = None, level: int = 10):
    """Set the op strategy (``FTVMStrategy``) of ``op_name`` (decorator when None)."""
    return register_op_attr(op_name, "FTVMStrategy", strategy, level)


class StrategyFunction:
    """An op's strategy, overridden per target key (TVM's ``dense_strategy`` generic function).

    The op's family module makes one beside the op (``dense_strategy =
    StrategyFunction(dense_op)``); target strategy modules register their implementations on
    it with ``@dense_strategy.register("cpu")`` and name it by ``dense_strategy.op_name``, so
    only the family module spells the op's name.
    """

    def __init__(self, op: Op) -> None:
        self.op = op

    @property
    def op_name(self) -> str:
        """The op's registered name."""
        return self.op.name

    def register(self, target_key: str) -> Callable:
        """Decorator: ``fstrategy(attrs, inputs, out_type, target)`` for ``target_key``."""
        # the strategy layer imports TOPI; binding late keeps declaring an op free of it
        from kiln.relay.op.strategy.registry import register_strategy as register_keyed

        return register_keyed(self.op.name, target_key)

    def __repr__(self) -> str:
        return f"StrategyFunction({self.op.name})"


def register_schedule(op_name: str, schedule: Callable | None = None, level: int = 10):
    """Set the schedule (``FTVMSchedule``) of ``op_name`` (decorator when None)."""
    return register_op_attr(op_name, "FTVMSchedule", schedule, level)


def schedule_injective(attrs: Any, outs: Any, target: Any) -> Any:
    """Schedule a fused injective group for ``target`` (TVM's ``strategy.schedule_injective``)."""
    return _target_schedule("injective", outs, target)


def schedule_reduce(attrs: Any, outs: Any, target: Any) -> Any:
    """Schedule a fused group ending in a reduction for ``target``."""
    return _target_schedule("reduce", outs, target)


def schedule_opaque(attrs: Any, outs: Any, target: Any) -> Any:
    """Schedule an op with its own loop nest (matmul, conv, sort …) with the default recipe."""
    return _target_schedule("opaque", outs, target)


def _target_schedule(kind: str, outs: Any, target: Any) -> Any:
    # The per-target recipes live in the strategy layer, which imports TOPI; binding late
    # keeps declaring an op free of TOPI.
    from kiln.relay.op.strategy.registry import target_schedule

    return target_schedule(kind, outs, target)


# The schedule kind of each standard schedule, for the strategy layer and the coverage table.
SCHEDULE_KINDS: dict[Callable, str] = {
    schedule_injective: "injective",
    schedule_reduce: "reduce",
    schedule_opaque: "opaque",
}


def register_injective_schedule(op_name: str, level: int = 10) -> None:
    """Schedule ``op_name`` with the generic injective schedule (TVM's helper of this name)."""
    register_op_attr(op_name, "FTVMSchedule", schedule_injective, level)


def register_broadcast_schedule(op_name: str, level: int = 10) -> None:
    """Schedule ``op_name`` like a broadcast op (the injective schedule, as in TVM)."""
    register_injective_schedule(op_name, level)


def register_reduce_schedule(op_name: str, level: int = 10) -> None:
    """Schedule ``op_name`` with the generic reduction schedule."""
    register_op_attr(op_name, "FTVMSchedule", schedule_reduce, level)


def register_opaque_schedule(op_name: str, level: int = 10) -> None:
    """Schedule ``op_name`` with the default schedule for ops with their own loop nest."""
    register_op_attr(op_name, "FTVMSchedule", schedule_opaque, level)


def register_reference(op_name: str, reference: Callable | None = None, level: int = 10):
    """Set the reference NumPy semantics (``FNumpyEval``) of ``op_name`` (decorator when None).

    ``reference(attrs, args, out_type)`` gets NumPy arrays (tuples for tuple arguments) and
    returns the result (a tuple for tuple results); ``out_type`` is the call's checked type.
    The interpreter, FoldConstant and the frontends evaluate with it, so a test checks every
    rule against an independent oracle (``tests/relay/op/test_reference_oracles.py``).
    """
    return register_op_attr(op_name, "FNumpyEval", reference, level)


def register_fold_scale_axis(op_name: str, output_rule: Callable, input_rule: Callable,
                             level: int = 10) -> None:
    """Let FoldScaleAxis fold per-channel scales into ``op_name``'s weight (argument 1).

    ``output_rule(call)`` / ``input_rule(call)`` return ``(channel axis of the result / of the
    data, the matching weight axis, the weight's rank)``, or None when this call cannot take
    a scale; they are stored as ``FScaleAxisOutput`` / ``FScaleAxisInput``.
    """
    register_op_attr(op_name, "FScaleAxisOutput", output_rule, level)
    register_op_attr(op_name, "FScaleAxisInput", input_rule, level)


SCALE_AXIS_ROLES = ("scale", "positive_homogeneous", "distributive")
"""How an op takes part in FoldScaleAxis (``TScaleAxisRole``): ``"scale"`` applies a channel
scale (``x * s``, one side a constant); ``"positive_homogeneous"`` commutes with a positive
scale (``f(x * s) == f(x) * s`` for ``s > 0``); ``"distributive"`` lets a scale distribute over
its two arguments (``(a + b) * s == a * s + b * s``)."""


def register_scale_axis_role(op_name: str, role: str, level: int = 10) -> None:
    """Set how ``op_name`` takes part in FoldScaleAxis (one of :data:`SCALE_AXIS_ROLES`)."""
    if role not in SCALE_AXIS_ROLES:
        raise TVMError(f"register_scale_axis_role: {op_name}: role must be one of "
                       f"{SCALE_AXIS_ROLES}, got {role!r}")
    register_op_attr(op_name, "TScaleAxisRole", role, level)


def register_mac_count(op_name: str, fmac: Callable | None = None, level: int = 10):
    """Set ``FMacCount`` of ``op_name``: ``fmac(call) -> int`` multiply-accumulates of a typed
    call, summed by ``relay.analysis.get_total_mac_number`` (decorator when None)."""
    return register_op_attr(op_name, "FMacCount", fmac, level)


def register_shape_func(
    op_name: str, data_dependent: bool, shape_func: Callable | None = None, level: int = 10
):
    """Set the VM shape function (``FShapeFunc``) of ``op_name`` (decorator when None).

    ``data_dependent`` says whether the function reads input *values* (``TShapeDataDependent``)
    rather than only input shapes.
    """
    register_op_attr(op_name, "TShapeDataDependent", bool(data_dependent), level)
    return register_op_attr(op_name, "FShapeFunc", shape_func, level)


def register_shape_requirement(op_name: str, requirement: str, level: int = 10) -> None:
    """Say what ``op_name``'s run-time shape values must satisfy (``TShapeValueRequirement``).

    A shape function turns the extents it cannot accept into -1; the VM's shape kernel then
    fails with a message naming each op of the fused function with its requirement (e.g.
    ``"dyn.reshape: the new shape must keep the element count"``).
    """
    register_op_attr(op_name, "TShapeValueRequirement", str(requirement), level)


def register_gradient(op_name: str, fgradient: Callable | None = None, level: int = 10):
    """Set the gradient (``FPrimalGradient``) of ``op_name`` (decorator when None)."""
    return register_op_attr(op_name, "FPrimalGradient", fgradient, level)


def register_alter_op_layout(op_name: str, alter_layout: Callable | None = None,
                             level: int = 10):
    """Set ``FTVMAlterOpLayout`` (used by AlterOpLayout) of ``op_name`` (decorator when None)."""
    return register_op_attr(op_name, "FTVMAlterOpLayout", alter_layout, level)


def register_convert_op_layout(op_name: str, convert_layout: Callable | None = None,
                               level: int = 10):
    """Set ``FTVMConvertOpLayout`` (used by ConvertLayout) (decorator when None)."""
    return register_op_attr(op_name, "FTVMConvertOpLayout", convert_layout, level)


def register_infer_correct_layout(op_name: str, infer_layout: Callable | None = None,
                                  level: int = 10):
    """Set ``FInferCorrectLayout`` of ``op_name`` (decorator when None): how the op follows
    its inputs into another layout (``kiln.relay.op.layout`` describes the rule)."""
    return register_op_attr(op_name, "FInferCorrectLayout", infer_layout, level)


def register_legalize(op_name: str, legal_op: Callable | None = None, level: int = 10):
    """Set ``FTVMLegalize`` (used by Legalize) of ``op_name`` (decorator when None)."""
    return register_op_attr(op_name, "FTVMLegalize", legal_op, level)


def register_stateful(op_name: str, stateful: bool, level: int = 10) -> None:
    """Mark ``op_name`` as stateful (``TOpIsStateful``): passes must not duplicate or drop it."""
    register_op_attr(op_name, "TOpIsStateful", bool(stateful), level)


def call(op_name: str, args: Sequence[Any], attrs: Any = None) -> Any:
    """Build ``Call(Op.get(op_name), args, attrs)`` — what every op constructor returns."""
    from kiln.relay.expr import Call

    return Call(Op.get(op_name), list(args), attrs)


def is_expr(value: Any) -> bool:
    """Whether ``value`` is a Relay expression (not a Python value)."""
    from kiln.ir.expr import RelayExpr

    return isinstance(value, RelayExpr)


def as_expr(value: Any, dtype: str | None = None) -> Any:
    """Python/NumPy values become ``relay.const``; Relay expressions pass through."""
    if is_expr(value):
        return value
    from kiln.relay.expr import const

    return const(value, dtype) if dtype else const(value)


def constant_value(expr: Any) -> Any:
    """The NumPy value of a ``relay.Constant``, or None for any other expression."""
    data = getattr(expr, "data", None) if is_expr(expr) else None
    if data is None:
        return None
    import numpy as np

    return np.asarray(data.numpy() if hasattr(data, "numpy") else data)


def shape_arg(shape: Any) -> Any:
    """A shape argument as TVM's constructors take it: a Constant becomes a list of ints, any
    other Relay expression stays (the op goes dynamic), an int becomes ``[int]``."""
    value = constant_value(shape)
    if value is not None:
        return [int(v) for v in value.reshape(-1)]
    if is_expr(shape):
        return shape
    if isinstance(shape, int):
        return [int(shape)]
    return [int(v) for v in shape]
