"""arm_cpu int8 strategies for Cortex-M: int8 x int8 -> int32 dense, convolution and
depthwise convolution through the int8 micro-kernels (DSP instructions, portable C without),
and the compile-time kernel layout change (HWIO -> OHWI) that gives convolutions k-contiguous
weights.

Entry points: :func:`int8_fits`, :func:`add_int8_dense`, :func:`add_int8_conv2d`,
:func:`alter_conv2d_int8_layout`.

After QNN canonicalization a quantized layer is an ``nn.dense``/``nn.conv2d`` on int8 operands
with ``out_dtype="int32"`` followed by its zero-point terms and requantize, which the schedules
inline into the micro-kernel's epilogue. :mod:`.arm_cpu` asks these functions from its dense and
conv2d strategies.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op.nn.dense import dense_strategy
from kiln.relay.op.strategy.registry import register_implementation
from kiln.topi.arm_cpu.depthwise_s8 import (
    depthwise_conv2d_nhwc_s8,
    depthwise_s8_applies,
    schedule_depthwise_conv2d_nhwc_s8,
)
from kiln.topi.arm_cpu.gemv_s8 import (
    conv2d_nhwc_ohwi_s8,
    dense_s8_micro_kernel,
    has_dsp,
    schedule_conv2d_nhwc_ohwi_s8,
    schedule_dense_s8_micro_kernel,
)

__all__ = ["int8_fits", "add_int8_dense", "add_int8_conv2d", "alter_conv2d_int8_layout"]

# ``config``: AutoTVM's knobs (kiln.autotvm.topi_arm_cpu), rows per micro-kernel call
_DENSE_S8 = register_implementation(
    lambda attrs, inputs, out_type, config=None: [dense_s8_micro_kernel(inputs[0], inputs[1])],
    lambda attrs, outs, target, config=None: schedule_dense_s8_micro_kernel(
        outs, has_dsp(target), (config or {}).get("rows")),
    "dense_s8_micro_kernel.arm_cpu", plevel=15, op_name=dense_strategy.op_name)

_CONV2D_S8 = register_implementation(
    lambda attrs, inputs, out_type, config=None: [conv2d_nhwc_ohwi_s8(
        inputs[0], inputs[1], list(attrs.strides), list(attrs.padding))],
    lambda attrs, outs, target, config=None: schedule_conv2d_nhwc_ohwi_s8(
        outs, has_dsp(target), (config or {}).get("rows")),
    "conv2d_nhwc_ohwi_s8.arm_cpu", plevel=15, op_name="nn.conv2d")

_DEPTHWISE_S8 = register_implementation(
    lambda attrs, inputs, out_type, config=None: [depthwise_conv2d_nhwc_s8(
        inputs[0], inputs[1], list(attrs.strides), list(attrs.padding), list(attrs.dilation),
        attrs.kernel_layout)],
    lambda attrs, outs, target, config=None: schedule_depthwise_conv2d_nhwc_s8(
        outs, list(attrs.dilation), has_dsp(target), (config or {}).get("rows")),
    "depthwise_conv2d_nhwc_s8.arm_cpu", plevel=15, op_name="nn.conv2d")


def _is_cortex_m(target: Any) -> bool:
    return str(getattr(target, "mcpu", "") or "").startswith("cortex-m")


def int8_fits(inputs, out_type, target) -> bool:
    """A Cortex-M target, int8 operands accumulating in int32, static shapes."""
    static = all(hasattr(d, "value") for t in inputs for d in t.shape)
    int8 = all(t.dtype == "int8" for t in inputs) and out_type.dtype == "int32"
    return _is_cortex_m(target) and static and int8


def add_int8_dense(strategy, attrs, inputs, out_type, target) -> None:
    if int8_fits(inputs, out_type, target):
        strategy.add(_DENSE_S8)


def _kernel_rows_contiguous(attrs) -> bool:
    """NHWC data and OHWI kernel, one group, no dilation: a kernel row's inputs and weights
    are contiguous."""
    return (attrs.data_layout == "NHWC" and attrs.kernel_layout in ("OHWI", "HWIO")
            and attrs.groups == 1 and all(int(d) == 1 for d in attrs.dilation)
            and not attrs.out_layout)


def add_int8_conv2d(strategy, attrs, inputs, out_type, target, direct) -> None:
    """The micro-kernel for OHWI int8 convolutions, the depthwise kernel for depthwise NHWC
    ones; the direct schedule for the others (grouped, dilated)."""
    if not int8_fits(inputs, out_type, target):
        return
    if attrs.kernel_layout == "OHWI" and _kernel_rows_contiguous(attrs):
        strategy.add(_CONV2D_S8)
    elif attrs.kernel_layout != "OHWI":
        strategy.add(direct)
        if depthwise_s8_applies(attrs, inputs[0].shape, inputs[1].shape):
            strategy.add(_DEPTHWISE_S8)


def alter_conv2d_int8_layout(attrs, inputs, tinfos, out_type):
    """On Cortex-M, an int8 NHWC/HWIO convolution (one group, no dilation) with a constant
    kernel takes it as OHWI (a ``layout_transform`` FoldConstant folds), so each output
    channel's weights of a kernel row are contiguous for the micro-kernel's word loads. None
    when it does not apply."""
    from kiln.relay.analysis import free_vars
    from kiln.relay.op.nn.conv import conv2d
    from kiln.relay.op.transform import layout_transform
    from kiln.target import Target

    target = Target.current(allow_none=True)
    if target is None or not int8_fits(tinfos, out_type, target):
        return None
    if attrs.kernel_layout != "HWIO" or not _kernel_rows_contiguous(attrs) or \
            free_vars(inputs[1]):
        return None
    weight = layout_transform(inputs[1], "HWIO", "OHWI")
    return conv2d(inputs[0], weight, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                  attrs.channels, attrs.kernel_size, "NHWC", "OHWI", "", attrs.out_dtype)


def _alter_conv2d_layout(attrs, inputs, tinfos, out_type):
    """nn.conv2d's one AlterOpLayout hook: this module's on Cortex-M, x86's elsewhere."""
    from kiln.relay.op.strategy.x86 import alter_conv2d_layout

    out = alter_conv2d_int8_layout(attrs, inputs, tinfos, out_type)
    return out if out is not None else alter_conv2d_layout(attrs, inputs, tinfos, out_type)


def _register_alter_layout() -> None:
    from kiln.ir.op import Op

    # above x86's plevel (10), which registers later and skips a taken slot
    Op.get("nn.conv2d").set_attr("FTVMAlterOpLayout", _alter_conv2d_layout, plevel=11)


_register_alter_layout()
