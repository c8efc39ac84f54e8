"""x86 (target key ``cpu``) strategies: parallel, vectorized schedules.

Entry points: the ``cpu`` schedules for injective and reduction groups.
"""

from __future__ import annotations

from kiln import topi
from kiln.relay.op.strategy.registry import register_target_schedule


@register_target_schedule("injective", "cpu")
def schedule_injective_cpu(outs):
    return topi.x86.schedule_injective(outs)


@register_target_schedule("reduce", "cpu")
def schedule_reduce_cpu(outs):
    return topi.x86.schedule_reduce(outs)
