"""Relay op strategies (TVM's ``relay.op.strategy``): compute + schedule per op and target.

Entry points: :class:`OpStrategy`, :class:`OpImplementation`, :func:`register_strategy`,
:func:`select_implementation`, :func:`schedule_injective`, :func:`schedule_reduce`, and the
implementations in :mod:`.generic`, :mod:`.x86` and :mod:`.x86_matmul` (target key ``cpu``)
and :mod:`.arm_cpu`.
Importing this package registers ``FTVMStrategy`` (and ``FTVMCompute``/``FTVMSchedule`` for
injective ops) on every op that has a kernel.

Example
-------
>>> from kiln import relay
>>> from kiln.relay.op import strategy
>>> y = relay.nn.dense(relay.var("x", shape=(1, 4)), relay.var("w", shape=(2, 4)))
>>> y.op.get_attr("FTVMStrategy") is not None
True
"""

from __future__ import annotations

from kiln.relay.op.strategy import (  # noqa: F401 - registers
    arm_cpu,
    generic,
    gpu,
    rnn,
    x86,
    x86_matmul,
)
from kiln.relay.op.strategy.generic import COMPUTES, schedule_injective, schedule_reduce
from kiln.relay.op.strategy.registry import (
                                            OpImplementation,
                                            OpStrategy,
                                            register_strategy,
                                            register_target_schedule,
                                            register_tuned_selector,
                                            registered_keys,
                                            select_implementation,
                                            strategy_for,
                                            target_schedule,
)

__all__ = ["OpStrategy", "OpImplementation", "register_strategy", "select_implementation",
           "strategy_for", "register_tuned_selector", "register_target_schedule",
           "target_schedule", "registered_keys", "schedule_injective", "schedule_reduce",
           "COMPUTES"]
