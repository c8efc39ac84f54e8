"""The x86 Winograd conv2d as an AutoTVM template (``conv2d_nchw_winograd.x86``).

Entry point: the TOPI template ``conv2d_nchw_winograd.x86`` (registered on import; its knobs
and Relay workloads are added to :data:`kiln.autotvm.topi_x86.KNOBS` and
:data:`~kiln.autotvm.topi_x86.RELAY_TASKS`). TVM registers ``conv2d_nchw_winograd`` for
arm_cpu and cuda; kiln adds an x86 one with the same workload arguments
``(data, kernel, strides, padding, dilation, out_dtype)`` in NCHW/OIHW terms.

Knobs: ``tile_size`` (F(2x2, 3x3) or F(4x4, 3x3)), ``tile_oc`` (the GEMM's output channel
vector block, also the packing of the transformed kernel), ``tile_t`` (Winograd tiles per
register block, at most: the largest divisor of the tile count up to it is used) and
``gemm_parallel`` (the GEMM's parallel axis: transform points or tile blocks). The cost
counts the direct conv's flops, as TVM's Winograd templates do, so GFLOPS compare with it.

While tuning, the data is a placeholder in the direct conv's default ``NCHW{c}c`` block and the
kernel one already transformed and packed, as Relay feeds them (AlterOpLayout blocks the
activations and FoldConstant transforms the kernel at compile time).
"""

from __future__ import annotations

from typing import Any

from kiln import te
from kiln.autotvm.env import GLOBAL_SCOPE
from kiln.autotvm.task.task import DEFAULT_CONFIG_INDEX
from kiln.autotvm.task.topi_integration import register_topi_compute, register_topi_schedule
from kiln.autotvm.topi_x86 import KNOBS, RELAY_TASKS, entity_size, entity_val, knobs_of
from kiln.topi.nn.conv import conv_output_size, get_pad_tuple
from kiln.topi.utils import get_const_tuple
from kiln.topi.x86 import conv2d as x86_conv2d
from kiln.topi.x86 import conv2d_winograd as x86_winograd

__all__ = ["WINOGRAD_KNOBS"]

WINOGRAD_KNOBS = {"tile_size": lambda c: entity_val(c, "tile_size"),
                  "oc_bn": lambda c: entity_size(c, "tile_oc"),
                  "tile_t": lambda c: entity_val(c, "tile_t"),
                  "gemm_parallel": lambda c: entity_val(c, "gemm_parallel")}
# register blocks of up to this many tiles (x oc_bn / lanes accumulators)
_TILE_T = [4, 7, 8, 14, 16]


def _space(cfg: Any, o: int) -> None:
    cfg.define_knob("tile_size", [2, 4])
    cfg.define_split("tile_oc", o, num_outputs=2,
                     filter=lambda e: e.size[-1] in x86_winograd.OC_BLOCKS)
    cfg.define_knob("tile_t", _TILE_T)
    cfg.define_knob("gemm_parallel", ["point", "tiles"])


@register_topi_compute("conv2d_nchw_winograd.x86")
def conv2d_nchw_winograd(cfg, data, kernel, strides, padding, dilation, out_dtype=None):
    """3x3 stride-1 NCHW conv2d by Winograd F(m x m, 3x3), the knobs from ``cfg``."""
    n, c, h, w = get_const_tuple(data.shape)
    o = get_const_tuple(kernel.shape)[0]
    (pt, pl), (pb, pr) = get_pad_tuple(padding, 2)
    oh, ow = conv_output_size(h, 3, 1, 1, pt, pb), conv_output_size(w, 3, 1, 1, pl, pr)
    _space(cfg, o)
    cfg.add_flop(2 * n * o * oh * ow * c * 9)
    knobs = knobs_of(cfg, WINOGRAD_KNOBS)
    if not GLOBAL_SCOPE.in_tuning:
        return x86_winograd.conv2d_nchw_winograd(data, kernel, strides, padding, dilation,
                                                 out_dtype, knobs)
    config = {**x86_winograd.DEFAULT_CONFIG, **knobs}
    m, oc_bn = x86_winograd.tile_size(n, oh, ow, config), int(config["oc_bn"])
    ic_bn, out_bn = x86_conv2d.channel_block(c), x86_conv2d.channel_block(o)
    data = te.placeholder((n, c // ic_bn, h, w, ic_bn), data.dtype, name="data")
    packed = te.placeholder((m + 2, m + 2, o // oc_bn, c, oc_bn), kernel.dtype,
                            name="kernel_packed")
    return x86_winograd.conv2d_winograd_nchwc(data, packed, padding, f"NCHW{out_bn}c",
                                              out_dtype, knobs)


@register_topi_schedule("conv2d_nchw_winograd.x86")
def schedule_conv2d_nchw_winograd(cfg, outs):
    """:func:`kiln.topi.x86.conv2d_winograd.schedule_conv2d_winograd`."""
    return x86_winograd.schedule_conv2d_winograd(outs, knobs_of(cfg, WINOGRAD_KNOBS))


KNOBS["conv2d_nchw_winograd.x86"] = lambda cfg: knobs_of(cfg, WINOGRAD_KNOBS)


def _default_index(task: Any) -> int | None:
    """The config of :data:`~kiln.topi.x86.conv2d_winograd.DEFAULT_CONFIG` (the schedule a
    fallback config runs; untuned builds run the direct conv)."""
    default = x86_winograd.DEFAULT_CONFIG
    data = task.args[0]
    n, _, h, w = data[1]
    (pt, pl), (pb, pr) = get_pad_tuple(task.args[3], 2)
    m = x86_winograd.tile_size(n, h + pt + pb - 2, w + pl + pr - 2, default)
    want = {"tile_size": m, "oc_bn": default["oc_bn"],
            "tile_t": max(_TILE_T), "gemm_parallel": default["gemm_parallel"]}
    space = task.config_space
    for index in range(space.range_length):
        if KNOBS[task.name](space.get(index)) == want:
            return index
    return None


DEFAULT_CONFIG_INDEX["conv2d_nchw_winograd.x86"] = _default_index


# ---- Relay calls -> workloads -------------------------------------------------------------

def _static(t: Any) -> tuple[int, ...] | None:
    dims = [getattr(d, "value", d) for d in t.shape]
    return tuple(dims) if all(isinstance(d, int) for d in dims) else None


def _ints(values: Any) -> tuple:
    return tuple(int(getattr(v, "value", v)) for v in values)


def _winograd_task(attrs, inputs, out_type):
    """The NCHW-terms workload of a float32 3x3 stride-1 conv, whatever layouts its data and
    kernel are in now (NCHW or ``NCHW{c}c`` data; OIHW or the packed transformed kernel
    ``[alpha, alpha, O / oc_bn, I, oc_bn]``): one record tunes the call and its altered
    form."""
    data, kernel = _static(inputs[0]), _static(inputs[1])
    if data is None or kernel is None or str(out_type.dtype) != "float32":
        return None
    n, c, h, w = data[:4]
    c *= data[4] if len(data) == 5 else 1
    o = kernel[2] * kernel[4] if len(kernel) == 5 else kernel[0]
    if not x86_winograd.applies((3, 3) if len(kernel) == 5 else kernel[2:], attrs.strides,
                                attrs.dilation, attrs.groups):
        return None
    return "conv2d_nchw_winograd.x86", (
        ("TENSOR", (n, c, h, w), str(inputs[0].dtype)),
        ("TENSOR", (o, c, 3, 3), str(inputs[1].dtype)), _ints(attrs.strides),
        _ints(attrs.padding), _ints(attrs.dilation), str(out_type.dtype))


RELAY_TASKS.update({"conv2d_nchw_winograd.x86": _winograd_task,
                    "conv2d_winograd_nchwc.x86": _winograd_task})
