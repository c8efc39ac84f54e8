"""The x86 Winograd convolution (``topi/x86/conv2d_winograd.py``) and when it applies.

Entry points: :data:`CONV2D_WINOGRAD` (``conv2d_nchw_winograd.x86``, for ``nn.conv2d``: the
kernel transformed at run time), :data:`CONV2D_WINOGRAD_NCHWC` (``conv2d_winograd_nchwc.x86``,
for ``nn.contrib_conv2d_winograd_without_weight_transform`` on a kernel transformed and
packed at compile time), :func:`winograd_applies`, and :func:`alter_to_winograd`, which
AlterOpLayout calls for a conv whose ``conv2d_nchw_winograd.x86`` tuning record beats the
direct conv's (TVM's arm_cpu ``_alter_conv2d_layout`` does the same for its winograd).

The nn.conv2d strategy adds ``conv2d_nchw_winograd.x86`` below the direct conv's plevel, so
untuned builds keep the direct conv, and task extraction yields the Winograd task beside the
direct one for 3x3 stride-1 float32 convs.
"""

from __future__ import annotations

from typing import Any

from kiln.relay.op.strategy.registry import (
    IMPLEMENTATIONS,
    OpStrategy,
    register_implementation,
    register_strategy,
    tuned_config,
)
from kiln.topi.x86 import conv2d_winograd as x86_winograd

__all__ = ["CONV2D_WINOGRAD", "CONV2D_WINOGRAD_NCHWC", "WINOGRAD_OP", "winograd_applies",
           "alter_to_winograd"]

WINOGRAD_OP = "nn.contrib_conv2d_winograd_without_weight_transform"
# below the direct conv's 15: chosen only where a tuning record says it is faster
_PLEVEL = 5


def _dtype(out_type) -> str:
    return str(out_type.dtype)


CONV2D_WINOGRAD = register_implementation(
    lambda a, i, t, config=None: [x86_winograd.conv2d_nchw_winograd(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_winograd.schedule_conv2d_winograd(
        outs, config),
    "conv2d_nchw_winograd.x86", plevel=_PLEVEL, config=x86_winograd.DEFAULT_CONFIG,
    op_name="nn.conv2d")
CONV2D_WINOGRAD_NCHWC = register_implementation(
    lambda a, i, t, config=None: [x86_winograd.conv2d_winograd_nchwc(
        i[0], i[1], list(a.padding), a.out_layout or a.data_layout, _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_winograd.schedule_conv2d_winograd(
        outs, config),
    "conv2d_winograd_nchwc.x86", plevel=15, config=x86_winograd.DEFAULT_CONFIG,
    op_name=WINOGRAD_OP)


def _static(tensor) -> bool:
    return all(hasattr(d, "value") or isinstance(d, int) for d in tensor.shape)


def winograd_applies(attrs, inputs, out_type) -> bool:
    """Whether ``conv2d_nchw_winograd.x86`` computes this ``nn.conv2d``: float32 NCHW/OIHW,
    3x3, stride 1, dilation 1, groups 1, static shapes, output channels that one of its
    channel blocks divides (else its tuning space is empty)."""
    return (attrs.data_layout == "NCHW" and attrs.kernel_layout == "OIHW"
            and attrs.out_layout in ("", "NCHW") and len(inputs[1].shape) == 4
            and all(_static(t) for t in inputs[:2]) and _dtype(out_type) == "float32"
            and any(int(getattr(inputs[1].shape[0], "value", inputs[1].shape[0])) % b == 0
                    for b in x86_winograd.OC_BLOCKS)
            and str(inputs[0].dtype) == "float32"
            and x86_winograd.applies(inputs[1].shape[2:], attrs.strides, attrs.dilation,
                                     attrs.groups))


@register_strategy(WINOGRAD_OP, "cpu")
def conv2d_winograd_strategy_cpu(attrs, inputs, out_type, target):
    """The x86 kernel for a packed ``[alpha, alpha, O / oc_bn, I, oc_bn]`` weight, the generic
    compute for TVM's ``[alpha, alpha, O, I]`` one (and for a stride or dilation other than 1,
    which it refuses naming them)."""
    strategy = OpStrategy()
    # the x86 kernel computes stride 1, dilation 1 only; the generic compute refuses others
    if len(inputs[1].shape) == 5 and x86_winograd.applies((3, 3), attrs.strides,
                                                          attrs.dilation, attrs.groups):
        strategy.add(CONV2D_WINOGRAD_NCHWC)
    else:
        # TVM's [alpha, alpha, O, I] weight: the op's generic implementation
        strategy.add(IMPLEMENTATIONS[f"{WINOGRAD_OP.split('.')[-1]}.generic"])
    return strategy


def _winograd_preferred(attrs, tinfos, out_type, target) -> dict | None:
    """The Winograd record's knobs when it has one and the direct conv has none or a slower
    one (TVM's rule: the lowest measured cost among implementations with records)."""
    winograd = tuned_config(CONV2D_WINOGRAD.name, attrs, tinfos, out_type, target)
    if winograd is None:
        return None
    direct = tuned_config("conv2d_NCHWc.x86", attrs, tinfos, out_type, target)
    return winograd[1] if direct is None or winograd[0] < direct[0] else None


def alter_to_winograd(attrs, inputs, tinfos, out_type, target, data_block: int,
                      out_block: int) -> Any:
    """The conv as ``contrib_conv2d_winograd_without_weight_transform`` on ``NCHW{data_block}c``
    data giving ``NCHW{out_block}c`` (the direct conv's blocks, so neighbours need no
    transform), its kernel transformed and packed by ops FoldConstant folds; None when no
    Winograd record wins for this call."""
    from kiln.relay.op.nn.conv import (
        contrib_conv2d_winograd_weight_transform,
        contrib_conv2d_winograd_without_weight_transform,
    )
    from kiln.relay.op.transform import reshape, transpose

    if not winograd_applies(attrs, tinfos, out_type):
        return None
    knobs = _winograd_preferred(attrs, tinfos, out_type, target)
    if knobs is None:
        return None
    cfg = {**x86_winograd.DEFAULT_CONFIG, **knobs}
    n, _, out_height, out_width = (int(d.value) for d in out_type.shape)
    m, oc_bn = x86_winograd.tile_size(n, out_height, out_width, cfg), int(cfg["oc_bn"])
    out_channels, in_channels = (int(d.value) for d in tinfos[1].shape[:2])
    alpha = m + 2
    # TVM's arm_cpu packing: [alpha, alpha, O, I] -> [alpha, alpha, O / oc_bn, I, oc_bn]
    weight = contrib_conv2d_winograd_weight_transform(inputs[1], m)
    weight = reshape(weight, (alpha, alpha, out_channels // oc_bn, oc_bn, in_channels))
    weight = transpose(weight, (0, 1, 2, 4, 3))
    return contrib_conv2d_winograd_without_weight_transform(
        inputs[0], weight, m, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
        out_channels, (3, 3), f"NCHW{data_block}c", "OIHW",
        f"NCHW{out_block}c", attrs.out_dtype)
