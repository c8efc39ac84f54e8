"""kiln's Cortex-M (``arm_cpu``) schedules as AutoTVM templates, and the Relay calls they tune.

Entry points: the TOPI templates ``conv2d_direct.arm_cpu`` (float and int8 direct
convolution), ``conv2d_nhwc_1x1_micro_kernel.arm_cpu``, ``dense_micro_kernel.arm_cpu``,
``dense_s8_micro_kernel.arm_cpu``, ``conv2d_nhwc_ohwi_s8.arm_cpu`` and
``depthwise_conv2d_nhwc_s8.arm_cpu`` (registered on import;
their knobs and Relay workloads are added to :data:`kiln.autotvm.topi_x86.KNOBS` and
:data:`~kiln.autotvm.topi_x86.RELAY_TASKS`, which Relay's config lookup reads).

The knobs are the ones kiln's Cortex-M schedules have: the block of results computed
together (``tile_co``/``tile_x``: the direct convolution's register block along the output's
innermost axis, or the outputs per micro-kernel call) and, for the direct convolution,
whether that block is unrolled. TVM's v0.16 ``conv2d_nhwc_dsp``/``dense_dsp`` templates tune
the same thing (how many outputs one SMLAD-based call computes). A fallback config sets no
knob, so an untuned build is the default schedule. Candidates are measured on a Cortex-M
under QEMU with ``kiln.micro.autotvm_build_func`` and ``kiln.micro.AutoTvmModuleLoader``.
"""

from __future__ import annotations

from typing import Any

from kiln.autotvm.task.task import DEFAULT_CONFIG_INDEX
from kiln.autotvm.task.topi_integration import (
    get_workload,
    register_topi_compute,
    register_topi_schedule,
)
from kiln.autotvm.topi_x86 import KNOBS, RELAY_TASKS, entity_size, entity_val, knobs_of
from kiln.topi.arm_cpu import conv2d as arm_conv2d
from kiln.topi.arm_cpu import dense as arm_dense
from kiln.topi.arm_cpu import depthwise_s8, gemv_s8
from kiln.topi.nn.conv import conv
from kiln.topi.utils import divisor_at_most, get_const_tuple

__all__ = ["TEMPLATES"]

# the widest block offered: past 16 partial sums even the M4F's 32 s-registers spill
_MAX_BLOCK = 16

_DIRECT_KNOBS = {"block": lambda c: entity_size(c, "tile_co"),
                 "unroll": lambda c: entity_val(c, "unroll")}
_CO_ROWS = {"rows": lambda c: entity_size(c, "tile_co")}
_X_ROWS = {"rows": lambda c: entity_size(c, "tile_x")}


def _define_block(cfg: Any, name: str, extent: int) -> None:
    cfg.define_split(name, extent, num_outputs=2, filter=lambda e: e.size[-1] <= _MAX_BLOCK)


def _flop(out: Any, per_output: int) -> int:
    total = 2 * per_output
    for d in get_const_tuple(out.shape):
        total *= d
    return total


def _reduce_size(op: Any) -> int:
    size = 1
    for axis in op.reduce_axis:
        size *= int(axis.dom.extent.value)
    return size


def _target_dsp() -> bool:
    from kiln.target import Target

    target = Target.current(allow_none=True)
    return target is not None and gemv_s8.has_dsp(target)


# ---- conv2d_direct.arm_cpu: any layout, groups and dtype ---------------------------------

@register_topi_compute("conv2d_direct.arm_cpu")
def conv2d_direct(cfg, data, kernel, strides, padding, dilation, groups, data_layout,
                  kernel_layout, out_dtype):
    """The generic convolution, scheduled in register blocks along the output's innermost
    axis (``tile_co``), unrolled or not (``unroll``)."""
    out = conv(data, kernel, list(strides), list(padding), list(dilation), groups,
               data_layout, kernel_layout, out_dtype, name="conv2d")
    _define_block(cfg, "tile_co", get_const_tuple(out.shape)[-1])
    cfg.define_knob("unroll", [True, False])
    cfg.add_flop(_flop(out, _reduce_size(out.op)))
    return out


@register_topi_schedule("conv2d_direct.arm_cpu")
def schedule_conv2d_direct(cfg, outs):
    """:func:`kiln.topi.arm_cpu.conv2d.schedule_conv2d_direct` with ``cfg``'s block."""
    return arm_conv2d.schedule_conv2d_direct(outs, knobs_of(cfg, _DIRECT_KNOBS))


# ---- float micro-kernels ------------------------------------------------------------------

@register_topi_compute("dense_micro_kernel.arm_cpu")
def dense_micro_kernel(cfg, data, weight, out_dtype):
    """Float dense through the C micro-kernel, ``tile_x`` outputs per call."""
    out = arm_dense.dense_micro_kernel(data, weight, None, out_dtype)
    _define_block(cfg, "tile_x", get_const_tuple(out.shape)[-1])
    cfg.add_flop(_flop(out, get_const_tuple(data.shape)[-1]))
    return out


@register_topi_schedule("dense_micro_kernel.arm_cpu")
def schedule_dense_micro_kernel(cfg, outs):
    return arm_dense.schedule_dense_micro_kernel(outs, knobs_of(cfg, _X_ROWS).get("rows"))


@register_topi_compute("conv2d_nhwc_1x1_micro_kernel.arm_cpu")
def conv2d_nhwc_1x1_micro_kernel(cfg, data, kernel, strides, out_dtype):
    """Pointwise NHWC/HWIO convolution through the micro-kernel, ``tile_co`` channels per
    call."""
    out = arm_dense.conv2d_nhwc_1x1_micro_kernel(data, kernel, list(strides), out_dtype)
    _define_block(cfg, "tile_co", get_const_tuple(out.shape)[-1])
    cfg.add_flop(_flop(out, get_const_tuple(data.shape)[-1]))
    return out


@register_topi_schedule("conv2d_nhwc_1x1_micro_kernel.arm_cpu")
def schedule_conv2d_nhwc_1x1_micro_kernel(cfg, outs):
    return arm_dense.schedule_conv2d_nhwc_1x1_micro_kernel(
        outs, knobs_of(cfg, _CO_ROWS).get("rows"))


# ---- int8 micro-kernels (SMLAD with the DSP extension) -----------------------------------

@register_topi_compute("dense_s8_micro_kernel.arm_cpu")
def dense_s8_micro_kernel(cfg, data, weight):
    """int8 x int8 -> int32 dense through the int8 micro-kernel, ``tile_x`` rows per call."""
    out = gemv_s8.dense_s8_micro_kernel(data, weight)
    _define_block(cfg, "tile_x", get_const_tuple(out.shape)[-1])
    cfg.add_flop(_flop(out, get_const_tuple(data.shape)[-1]))
    return out


@register_topi_schedule("dense_s8_micro_kernel.arm_cpu")
def schedule_dense_s8_micro_kernel(cfg, outs):
    return gemv_s8.schedule_dense_s8_micro_kernel(outs, _target_dsp(),
                                                  knobs_of(cfg, _X_ROWS).get("rows"))


@register_topi_compute("conv2d_nhwc_ohwi_s8.arm_cpu")
def conv2d_nhwc_ohwi_s8(cfg, data, kernel, strides, padding):
    """int8 NHWC/OHWI convolution through the int8 micro-kernel, ``tile_co`` output
    channels per call."""
    out = gemv_s8.conv2d_nhwc_ohwi_s8(data, kernel, list(strides), list(padding))
    _define_block(cfg, "tile_co", get_const_tuple(out.shape)[-1])
    cfg.add_flop(_flop(out, _reduce_size(out.op)))
    return out


@register_topi_schedule("conv2d_nhwc_ohwi_s8.arm_cpu")
def schedule_conv2d_nhwc_ohwi_s8(cfg, outs):
    return gemv_s8.schedule_conv2d_nhwc_ohwi_s8(outs, _target_dsp(),
                                                knobs_of(cfg, _CO_ROWS).get("rows"))


@register_topi_compute("depthwise_conv2d_nhwc_s8.arm_cpu")
def depthwise_conv2d_nhwc_s8(cfg, data, kernel, strides, padding, dilation, kernel_layout):
    """int8 depthwise NHWC convolution through the depthwise micro-kernel, ``tile_co``
    channels per call."""
    out = depthwise_s8.depthwise_conv2d_nhwc_s8(data, kernel, list(strides), list(padding),
                                                list(dilation), kernel_layout)
    _define_block(cfg, "tile_co", get_const_tuple(out.shape)[-1])
    cfg.add_flop(_flop(out, _reduce_size(out.op)))
    return out


@register_topi_schedule("depthwise_conv2d_nhwc_s8.arm_cpu")
def schedule_depthwise_conv2d_nhwc_s8(cfg, outs):
    # the workload the compute stamped: (name, data, kernel, strides, padding, dilation, ...)
    dilation = get_workload(outs, "depthwise_conv2d_nhwc_s8.arm_cpu")[5]
    return depthwise_s8.schedule_depthwise_conv2d_nhwc_s8(
        outs, dilation, _target_dsp(), knobs_of(cfg, _CO_ROWS).get("rows"))


# template name -> (knob table, the knobs of kiln's default schedule for a block extent)
TEMPLATES = {
    "conv2d_direct.arm_cpu": (_DIRECT_KNOBS, lambda n: {
        "block": divisor_at_most(n, arm_conv2d.BLOCK), "unroll": True}),
    "conv2d_nhwc_1x1_micro_kernel.arm_cpu": (_CO_ROWS, lambda n: {
        "rows": divisor_at_most(n, arm_dense.MAX_ROWS)}),
    "dense_micro_kernel.arm_cpu": (_X_ROWS, lambda n: {
        "rows": divisor_at_most(n, arm_dense.MAX_ROWS)}),
    "dense_s8_micro_kernel.arm_cpu": (_X_ROWS, lambda n: {
        "rows": divisor_at_most(n, arm_dense.MAX_ROWS)}),
    "conv2d_nhwc_ohwi_s8.arm_cpu": (_CO_ROWS, lambda n: {
        "rows": divisor_at_most(n, arm_dense.MAX_ROWS)}),
    "depthwise_conv2d_nhwc_s8.arm_cpu": (_CO_ROWS, lambda n: {
        "rows": divisor_at_most(n, arm_dense.MAX_ROWS)}),
}


def _default_index(task: Any) -> int | None:
    """The index of the config that reproduces kiln's untuned schedule."""
    table, default = TEMPLATES[task.name]
    space = task.config_space
    block = next(iter(space.space_map.values()))  # the block split comes first
    want = default(block.product)
    for index in range(space.range_length):
        if knobs_of(space.get(index), table) == want:
            return index
    return None


for _name, (_table, _) in TEMPLATES.items():
    KNOBS[_name] = (lambda table: lambda cfg: knobs_of(cfg, table))(_table)
    DEFAULT_CONFIG_INDEX[_name] = _default_index


# ---- Relay calls -> workloads -------------------------------------------------------------

def _static(t: Any) -> tuple[int, ...] | None:
    dims = [getattr(d, "value", d) for d in t.shape]
    return tuple(dims) if all(isinstance(d, int) for d in dims) else None


def _ints(values: Any) -> tuple:
    return tuple(int(getattr(v, "value", v)) for v in values)


def _tensors(inputs: list) -> tuple | None:
    shapes = [_static(t) for t in inputs[:2]]
    if any(s is None for s in shapes):
        return None
    return tuple(("TENSOR", s, str(t.dtype)) for s, t in zip(shapes, inputs))


def _becomes_ohwi_s8(attrs, tensors, out_type) -> bool:
    """Whether the Cortex-M AlterOpLayout hook turns this call into the int8 OHWI
    micro-kernel's (int8 NHWC/HWIO, one group, no dilation): relay.build then runs that
    template, so that is the workload to tune (task extraction runs without AlterOpLayout)."""
    return (tensors[0][2] == "int8" and tensors[1][2] == "int8"
            and str(out_type.dtype) == "int32" and attrs.data_layout == "NHWC"
            and attrs.kernel_layout == "HWIO" and int(attrs.groups) == 1
            and not attrs.out_layout and all(d == 1 for d in _ints(attrs.dilation)))


def _conv_direct_task(attrs, inputs, out_type):
    tensors = _tensors(inputs)
    if tensors is not None and _becomes_ohwi_s8(attrs, tensors, out_type):
        h, w, i, o = tensors[1][1]
        return "conv2d_nhwc_ohwi_s8.arm_cpu", (
            tensors[0], ("TENSOR", (o, h, w, i), "int8"), _ints(attrs.strides),
            _ints(attrs.padding))
    return None if tensors is None else ("conv2d_direct.arm_cpu", (
        *tensors, _ints(attrs.strides), _ints(attrs.padding), _ints(attrs.dilation),
        int(attrs.groups), str(attrs.data_layout), str(attrs.kernel_layout),
        str(out_type.dtype)))


def _conv_1x1_task(attrs, inputs, out_type):
    tensors = _tensors(inputs)
    return None if tensors is None else ("conv2d_nhwc_1x1_micro_kernel.arm_cpu", (
        *tensors, _ints(attrs.strides), str(out_type.dtype)))


def _dense_task(attrs, inputs, out_type):
    tensors = _tensors(inputs)
    return None if tensors is None else ("dense_micro_kernel.arm_cpu",
                                         (*tensors, str(out_type.dtype)))


def _dense_s8_task(attrs, inputs, out_type):
    tensors = _tensors(inputs)
    return None if tensors is None else ("dense_s8_micro_kernel.arm_cpu", tensors)


def _conv_s8_task(attrs, inputs, out_type):
    tensors = _tensors(inputs)
    return None if tensors is None else ("conv2d_nhwc_ohwi_s8.arm_cpu", (
        *tensors, _ints(attrs.strides), _ints(attrs.padding)))


def _depthwise_s8_task(attrs, inputs, out_type):
    tensors = _tensors(inputs)
    return None if tensors is None else ("depthwise_conv2d_nhwc_s8.arm_cpu", (
        *tensors, _ints(attrs.strides), _ints(attrs.padding), _ints(attrs.dilation),
        str(attrs.kernel_layout)))


RELAY_TASKS.update({
    "depthwise_conv2d_nhwc_s8.arm_cpu": _depthwise_s8_task,
    "conv2d_direct.arm_cpu": _conv_direct_task,
    "conv2d_nhwc_1x1_micro_kernel.arm_cpu": _conv_1x1_task,
    "dense_micro_kernel.arm_cpu": _dense_task,
    "dense_s8_micro_kernel.arm_cpu": _dense_s8_task,
    "conv2d_nhwc_ohwi_s8.arm_cpu": _conv_s8_task,
})
