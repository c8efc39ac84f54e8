"""arm_cpu strategies: serial schedules that compile for bare metal (no threads).

Entry points: the ``arm_cpu`` schedules for injective, reduction and opaque groups.
"""

from __future__ import annotations

from kiln import topi
from kiln.relay.op.strategy import generic  # noqa: F401 - registers the generic pairs reused here
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


def _generic_only(op_name: str):
    """arm_cpu targets also carry the ``cpu`` key; keep them off the threaded x86 kernels."""
    from kiln.relay.op.strategy.registry import IMPLEMENTATIONS, OpStrategy, register_strategy

    impl = IMPLEMENTATIONS[f"{op_name.split('.')[-1]}.generic"]

    def fstrategy(attrs, inputs, out_type, target):
        strategy = OpStrategy()
        strategy.add(impl)
        return strategy

    register_strategy(op_name, "arm_cpu")(fstrategy)


for _name in ("nn.dense", "nn.contrib_dense_pack", "nn.conv2d", "nn.batch_matmul"):
    _generic_only(_name)
