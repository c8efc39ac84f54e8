"""Generic strategies: every op with a compute and a schedule gets one (``<op>.generic``).

Entry points: :data:`COMPUTES` (op name → ``compute(attrs, inputs, out_type)``, read from the
registry), :func:`schedule_kind` (``"injective"``, ``"reduce"`` or ``"opaque"``),
:func:`schedule_injective`, :func:`schedule_reduce`, :func:`schedule_opaque`,
:func:`wrap_strategy`.

This module holds no per-op knowledge. Op family modules (``kiln/relay/op/nn/dense.py`` …)
register each op's compute and schedule beside the op (``register_compute``,
``register_injective_schedule`` …); after import :data:`COMPUTES` lists every op's compute so
target strategies (:mod:`.x86`, :mod:`.arm_cpu`) can reuse an op's generic compute by name.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln import topi
from kiln.relay.op.op import SCHEDULE_KINDS, schedule_injective, schedule_opaque, schedule_reduce
from kiln.relay.op.rule_util import out_shape
from kiln.relay.op.strategy.registry import (
    OpStrategy,
    register_generic_strategy,
    register_implementation,
    register_target_schedule,
)

__all__ = ["COMPUTES", "out_shape", "schedule_kind", "schedule_injective",
           "schedule_reduce", "schedule_opaque", "wrap_strategy"]


COMPUTES: dict[str, Callable] = {}
"""Every op's ``FTVMCompute`` by op name (filled from the registry on import)."""


def schedule_kind(op_name: str) -> str:
    """``"injective"``, ``"reduce"`` or ``"opaque"``: how ``op_name``'s groups are scheduled
    (an op with its own target schedules, or none, counts as ``"injective"``)."""
    from kiln.ir.op import Op

    return SCHEDULE_KINDS.get(Op.get(op_name).get_attr("FTVMSchedule"), "injective")


@register_target_schedule("injective", "generic")
def _generic_injective(outs):
    return topi.generic.schedule_injective(outs)


@register_target_schedule("reduce", "generic")
def _generic_reduce(outs):
    return topi.generic.schedule_reduce(outs)


@register_target_schedule("opaque", "generic")
def _generic_opaque(outs):
    return topi.generic.default_schedule(outs)


def wrap_strategy(compute: Callable, schedule: Callable, name: str,
                  config: dict | None = None, op_name: str | None = None) -> Callable:
    """A strategy function with one (registered) implementation."""
    impl = register_implementation(compute, schedule, name, config=config, op_name=op_name)

    def fstrategy(attrs, inputs, out_type, target):
        strategy = OpStrategy()
        strategy.add(impl)
        return strategy

    return fstrategy


def _register_all() -> None:
    """Generic strategies for every op with a compute and a schedule; :data:`COMPUTES` from
    the registry."""
    from kiln.ir.op import Op

    for op_name in Op.list_op_names():
        register_generic_strategy(op_name)
        compute = Op.get(op_name).get_attr("FTVMCompute")
        if compute is not None:
            COMPUTES.setdefault(op_name, compute)


_register_all()
