"""The ``cpu`` strategy of ``nn.matmul``: ``matmul_pack.x86`` beside ``matmul.generic``.

Entry point: :data:`MATMUL_PACK` (the implementation; see :mod:`kiln.topi.x86.matmul`).
``nn.matmul`` with static 2-D operands and any transposes runs the packed micro-kernel of
``nn.dense`` with no transpose kernel in front; arm_cpu targets keep the generic compute
(the micro-kernel's register blocking assumes AVX2 vectors).
"""

from __future__ import annotations

from kiln.relay.op.strategy.registry import (
    IMPLEMENTATIONS,
    OpStrategy,
    register_implementation,
    register_strategy,
)
from kiln.topi.x86 import matmul as x86_matmul

__all__ = ["MATMUL_PACK"]


MATMUL_PACK = register_implementation(
    lambda attrs, inputs, out_type, config=None: [x86_matmul.matmul_pack(
        inputs[0], inputs[1], None, str(out_type.dtype), bool(attrs.transpose_a),
        bool(attrs.transpose_b), config)],
    lambda attrs, outs, target, config=None: x86_matmul.schedule_matmul_pack(outs, config),
    "matmul_pack.x86", plevel=15, config=x86_matmul.DEFAULT_CONFIG, op_name="nn.matmul")


def _static_2d(tensor) -> bool:
    return len(tensor.shape) == 2 and all(hasattr(d, "value") for d in tensor.shape)


@register_strategy("nn.matmul", "cpu")
def matmul_strategy_cpu(attrs, inputs, out_type, target):
    """Generic matmul, and the packed micro-kernel for static 2-D operands."""
    strategy = OpStrategy()
    strategy.add(IMPLEMENTATIONS["matmul.generic"])
    if all(_static_2d(t) for t in inputs):
        strategy.add(MATMUL_PACK)
    return strategy


@register_strategy("nn.matmul", "arm_cpu")
def matmul_strategy_arm_cpu(attrs, inputs, out_type, target):
    """Generic matmul only."""
    strategy = OpStrategy()
    strategy.add(IMPLEMENTATIONS["matmul.generic"])
    return strategy
