"""GPU strategies (target key ``gpu``: OpenCL here): injective groups run one work-item per
output element (:func:`kiln.topi.gpu.schedule_injective`).

Entry points: the ``gpu`` schedule for injective groups. Reductions and complex ops keep the
generic schedules, whose outer loop the OpenCL code generator turns into the NDRange.
"""

from __future__ import annotations

from kiln.relay.op.strategy.registry import register_target_schedule
from kiln.topi import gpu as topi_gpu


@register_target_schedule("injective", "gpu")
def schedule_injective_gpu(outs):
    return topi_gpu.schedule_injective(outs)
