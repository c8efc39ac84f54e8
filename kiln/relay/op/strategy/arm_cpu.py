"""arm_cpu strategies: serial schedules that compile for bare metal (no threads).

Entry points: the ``arm_cpu`` schedules for injective, reduction and opaque groups.
"""

from __future__ import annotations

from kiln import topi
from kiln.relay.op.strategy.registry import register_target_schedule


@register_target_schedule("injective", "arm_cpu")
def schedule_injective_arm(outs):
    return topi.arm_cpu.schedule_injective(outs)


@register_target_schedule("reduce", "arm_cpu")
def schedule_reduce_arm(outs):
    return topi.generic.schedule_reduce(outs)


@register_target_schedule("opaque", "arm_cpu")
def schedule_opaque_arm(outs):
    return topi.generic.default_schedule(outs)
