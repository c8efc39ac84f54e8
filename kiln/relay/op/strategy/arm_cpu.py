"""arm_cpu strategies: serial schedules that compile for bare metal (no threads).

Entry points: the ``arm_cpu`` schedules for injective, reduction and opaque groups, and the
``nn.dense`` strategy that adds ``dense_micro_kernel.arm_cpu`` (a hand-written C micro-kernel
through ``pragma("import_c")`` + ``tensorize``) on Cortex-M targets (``-mcpu=cortex-m*``).
"""

from __future__ import annotations

from kiln import topi
from kiln.relay.op.nn.dense import dense_strategy
from kiln.relay.op.strategy import generic  # noqa: F401 - registers the generic pairs reused here
from kiln.relay.op.strategy.arm_cpu_int8 import add_int8_conv2d, add_int8_dense
from kiln.relay.op.strategy.registry import (
    IMPLEMENTATIONS,
    OpStrategy,
    register_implementation,
    register_strategy,
    register_target_schedule,
)


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
    impl = IMPLEMENTATIONS[f"{op_name.split('.')[-1]}.generic"]

    def fstrategy(attrs, inputs, out_type, target):
        strategy = OpStrategy()
        strategy.add(impl)
        return strategy

    register_strategy(op_name, "arm_cpu")(fstrategy)


for _name in ("nn.contrib_dense_pack", "nn.batch_matmul"):
    _generic_only(_name)


def _is_cortex_m(target) -> bool:
    return str(getattr(target, "mcpu", "") or "").startswith("cortex-m")


# Tunable implementations take an optional ``config`` (AutoTVM's knobs, see
# kiln.autotvm.topi_arm_cpu) in both halves; the computes ignore it (only schedules change).
_DENSE_MICRO_KERNEL = register_implementation(
    lambda attrs, inputs, out_type, config=None: [topi.arm_cpu.dense_micro_kernel(
        inputs[0], inputs[1], None, attrs.out_dtype or out_type.dtype)],
    lambda attrs, outs, target, config=None: topi.arm_cpu.schedule_dense_micro_kernel(
        outs, (config or {}).get("rows")),
    "dense_micro_kernel.arm_cpu", plevel=15, op_name=dense_strategy.op_name)


_CONV2D_1X1_MICRO_KERNEL = register_implementation(
    lambda attrs, inputs, out_type, config=None: [topi.arm_cpu.conv2d_nhwc_1x1_micro_kernel(
        inputs[0], inputs[1], list(attrs.strides), attrs.out_dtype or out_type.dtype)],
    lambda attrs, outs, target, config=None: (
        topi.arm_cpu.schedule_conv2d_nhwc_1x1_micro_kernel(outs, (config or {}).get("rows"))),
    "conv2d_nhwc_1x1_micro_kernel.arm_cpu", plevel=15, op_name="nn.conv2d")


def _conv2d_direct_compute(attrs, inputs, out_type, config=None):
    return IMPLEMENTATIONS["conv2d.generic"].compute(attrs, inputs, out_type)


_CONV2D_DIRECT = register_implementation(
    _conv2d_direct_compute,
    lambda attrs, outs, target, config=None: topi.arm_cpu.schedule_conv2d_direct(outs, config),
    "conv2d_direct.arm_cpu", plevel=12, op_name="nn.conv2d")


def _micro_kernel_fits(inputs, out_type, target) -> bool:
    """A Cortex-M target, float32 everywhere, static shapes."""
    static = all(hasattr(d, "value") for t in inputs for d in t.shape)
    float32 = all(t.dtype == "float32" for t in inputs) and out_type.dtype == "float32"
    return _is_cortex_m(target) and static and float32


@dense_strategy.register("arm_cpu")
def dense_strategy_arm_cpu(attrs, inputs, out_type, target):
    """Generic dense everywhere; on a Cortex-M the micro-kernel (plevel 15) too."""
    strategy = OpStrategy()
    strategy.add(IMPLEMENTATIONS["dense.generic"])
    if _micro_kernel_fits(inputs, out_type, target):
        strategy.add(_DENSE_MICRO_KERNEL)
    add_int8_dense(strategy, attrs, inputs, out_type, target)
    return strategy


@register_strategy("nn.conv2d", "arm_cpu")
def conv2d_strategy_arm_cpu(attrs, inputs, out_type, target):
    """Generic conv2d everywhere; on a Cortex-M the direct schedule (plevel 12) and, for
    pointwise NHWC/HWIO convolutions, the micro-kernel (plevel 15)."""
    strategy = OpStrategy()
    strategy.add(IMPLEMENTATIONS["conv2d.generic"])
    if attrs.out_layout not in ("", attrs.data_layout):
        return strategy  # the kernels below write the data's layout; generic transforms
    if _micro_kernel_fits(inputs, out_type, target):
        strategy.add(_CONV2D_DIRECT)
        if topi.arm_cpu.conv2d_1x1_applies(attrs, inputs[0].shape,
                                           [int(d.value) for d in inputs[1].shape]):
            strategy.add(_CONV2D_1X1_MICRO_KERNEL)
    add_int8_conv2d(strategy, attrs, inputs, out_type, target, _CONV2D_DIRECT)
    return strategy
