"""x86 (target key ``cpu``) strategies: parallel, vectorized schedules.

Entry points: the ``cpu`` schedules for injective and reduction groups, and the ``cpu``
strategies of ``nn.dense`` (``dense_pack.x86``), ``nn.contrib_dense_pack`` and ``nn.conv2d``
(``conv2d_nchw.x86`` for NCHW/OIHW with groups 1, ``depthwise_conv2d_nchw.x86`` when groups
equal the channels), each beside its generic fallback.
"""

from __future__ import annotations

import re

from kiln import topi
from kiln.relay.op.strategy.generic import COMPUTES, schedule_opaque
from kiln.relay.op.strategy.registry import (
    OpStrategy,
    register_implementation,
    register_strategy,
    register_target_schedule,
)
from kiln.topi.x86 import batch_matmul as x86_batch_matmul
from kiln.topi.x86 import conv2d as x86_conv2d
from kiln.topi.x86 import dense as x86_dense
from kiln.topi.x86 import depthwise as x86_depthwise


@register_target_schedule("injective", "cpu")
def schedule_injective_cpu(outs):
    return topi.x86.schedule_injective(outs)


@register_target_schedule("reduce", "cpu")
def schedule_reduce_cpu(outs):
    return topi.x86.schedule_reduce(outs)


@register_target_schedule("opaque", "cpu")
def schedule_opaque_cpu(outs):
    return topi.x86.schedule_opaque(outs)


def _dtype(out_type) -> str:
    return str(out_type.dtype)


# Each tunable implementation's compute and schedule take an optional ``config`` (the knobs
# of its DEFAULT_CONFIG); a tuner passes the same config to both halves.
DENSE_PACK = register_implementation(
    lambda attrs, inputs, out_type, config=None: [x86_dense.dense_pack(
        inputs[0], inputs[1], None, _dtype(out_type), config)],
    lambda attrs, outs, target, config=None: x86_dense.schedule_dense_pack(outs, config),
    "dense_pack.x86", plevel=15, config=x86_dense.DEFAULT_CONFIG, op_name="nn.dense")
PREPACKED_DENSE = register_implementation(
    COMPUTES["nn.contrib_dense_pack"],
    lambda attrs, outs, target, config=None: x86_dense.schedule_dense_pack(outs, config),
    "contrib_dense_pack.x86", plevel=15, config=x86_dense.DEFAULT_CONFIG,
    op_name="nn.contrib_dense_pack")
CONV2D_NCHW = register_implementation(
    lambda a, i, t, config=None: [x86_conv2d.conv2d_nchw(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_conv2d.schedule_conv2d_nchw(outs, config),
    "conv2d_nchw.x86", plevel=15, config=x86_conv2d.DEFAULT_CONFIG, op_name="nn.conv2d")
CONV2D_NCHW_PREPACKED = register_implementation(
    lambda a, i, t, config=None: [x86_conv2d.conv2d_nchw_packed(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), _dtype(t))],
    lambda attrs, outs, target, config=None: x86_conv2d.schedule_conv2d_nchw(outs, config),
    "conv2d_nchw_prepacked.x86", plevel=15, config=x86_conv2d.DEFAULT_CONFIG,
    op_name="nn.conv2d")
DEPTHWISE_NCHW = register_implementation(
    COMPUTES["nn.conv2d"],
    lambda attrs, outs, target, config=None: x86_depthwise.schedule_depthwise_conv2d_nchw(
        outs, config),
    "depthwise_conv2d_nchw.x86", plevel=15, config=x86_depthwise.DEFAULT_CONFIG,
    op_name="nn.conv2d")
BATCH_MATMUL_PACK = register_implementation(
    lambda a, i, t, config=None: [x86_batch_matmul.batch_matmul_pack(
        i[0], i[1], _dtype(t), bool(a.transpose_b), config)],
    lambda attrs, outs, target, config=None: x86_batch_matmul.schedule_batch_matmul_pack(
        outs, config),
    "batch_matmul_pack.x86", plevel=15, config=x86_batch_matmul.DEFAULT_CONFIG,
    op_name="nn.batch_matmul")
_GENERIC = {name: register_implementation(COMPUTES[name], schedule_opaque,
                                          f"{name.split('.')[-1]}.generic", op_name=name)
            for name in ("nn.dense", "nn.contrib_dense_pack", "nn.conv2d", "nn.batch_matmul")}


def _static_2d(tensor) -> bool:
    return all(hasattr(d, "value") for d in tensor.shape)


@register_strategy("nn.dense", "cpu")
def dense_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC["nn.dense"])
    if _static_2d(inputs[1]) and len(inputs[0].shape) == 2:
        strategy.add(DENSE_PACK)
    return strategy


@register_strategy("nn.batch_matmul", "cpu")
def batch_matmul_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC["nn.batch_matmul"])
    static = all(_static_2d(t) for t in inputs)
    if static and not attrs.transpose_a and len(inputs[0].shape) == 3:
        strategy.add(BATCH_MATMUL_PACK)
    return strategy


@register_strategy("nn.contrib_dense_pack", "cpu")
def dense_pack_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC["nn.contrib_dense_pack"])
    strategy.add(PREPACKED_DENSE)
    return strategy


@register_strategy("nn.conv2d", "cpu")
def conv2d_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC["nn.conv2d"])
    nchw = attrs.data_layout == "NCHW" and attrs.kernel_layout == "OIHW"
    channels = inputs[0].shape[1] if len(inputs[0].shape) == 4 else None
    prepacked = attrs.data_layout == "NCHW" and _PACKED_KERNEL.fullmatch(attrs.kernel_layout)
    if prepacked and attrs.groups == 1 and attrs.out_layout in ("", "NCHW"):
        strategy.add(CONV2D_NCHW_PREPACKED)
    elif nchw and attrs.groups == 1:
        strategy.add(CONV2D_NCHW)
    elif nchw and channels is not None and attrs.groups == int(getattr(channels, "value", -1)):
        strategy.add(DEPTHWISE_NCHW)
    return strategy


def _foldable_weight(weight, tinfos) -> bool:
    """Alter only where it pays: the weight is computed from constants (FoldConstant then packs
    it once at compile time) and every shape is static (the packed kernels need constants)."""
    from kiln.relay.analysis import free_vars

    shapes_static = all(hasattr(d, "value") for t in tinfos for d in t.shape)
    return shapes_static and not free_vars(weight)


def alter_dense_layout(attrs, inputs, tinfos, out_type):
    """``FTVMAlterOpLayout`` of ``nn.dense`` on cpu targets: use ``contrib_dense_pack`` with the
    weight behind a ``layout_transform`` to ``NC{n}n``, which FoldConstant folds away for a
    constant weight (so ``dense_pack.x86`` packs nothing at run time). None elsewhere."""
    from kiln.relay.op.nn.conv import contrib_dense_pack
    from kiln.relay.op.strategy.registry import target_keys
    from kiln.relay.op.transform import layout_transform
    from kiln.target import Target

    target = Target.current(allow_none=True)
    keys = target_keys(target)
    if "cpu" not in keys or "arm_cpu" in keys or len(tinfos[1].shape) != 2:
        return None
    if not _foldable_weight(inputs[1], tinfos):
        return None
    units = tinfos[1].shape[0]
    if not hasattr(units, "value"):
        return None
    lanes = x86_dense.DEFAULT_CONFIG["tile_x"]
    lanes = max(d for d in range(1, lanes + 1) if int(units.value) % d == 0)
    weight = layout_transform(inputs[1], "NC", f"NC{lanes}n")
    return contrib_dense_pack(inputs[0], weight, f"NC{lanes}n", attrs.units, attrs.out_dtype)


# OIHW with output channels blocked by n: the layout conv2d_nchw_prepacked.x86 consumes
_PACKED_KERNEL = re.compile(r"OIHW(\d+)o")


def alter_conv2d_layout(attrs, inputs, tinfos, out_type):
    """``FTVMAlterOpLayout`` of ``nn.conv2d`` on cpu targets: NCHW/OIHW convolutions (groups 1)
    take their kernel in ``OIHW{n}o`` behind a ``layout_transform`` that FoldConstant folds for
    a constant weight, so the channel-blocked schedule packs nothing at run time."""
    from kiln.relay.op.nn.conv import conv2d
    from kiln.relay.op.strategy.registry import target_keys
    from kiln.relay.op.transform import layout_transform
    from kiln.target import Target

    keys = target_keys(Target.current(allow_none=True))
    if "cpu" not in keys or "arm_cpu" in keys or attrs.groups != 1:
        return None
    if not _foldable_weight(inputs[1], tinfos):
        return None
    if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW" or attrs.out_layout:
        return None
    dims = [*tinfos[1].shape, *out_type.shape]
    if not all(hasattr(d, "value") for d in dims):
        return None
    out_channels, out_width = int(out_type.shape[1].value), int(out_type.shape[3].value)
    bn, _ = x86_conv2d.block_shape(out_channels, out_width, x86_conv2d.DEFAULT_CONFIG)
    if bn <= 1:
        return None
    kernel_layout = f"OIHW{bn}o"
    weight = layout_transform(inputs[1], "OIHW", kernel_layout)
    return conv2d(inputs[0], weight, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                  attrs.channels, attrs.kernel_size, "NCHW", kernel_layout, "",
                  attrs.out_dtype)


def _register_alter_layouts() -> None:
    from kiln.ir.op import Op

    for name, alter in (("nn.dense", alter_dense_layout), ("nn.conv2d", alter_conv2d_layout)):
        op = Op.get(name)
        if op.get_attr("FTVMAlterOpLayout") is None:
            op.set_attr("FTVMAlterOpLayout", alter)


_register_alter_layouts()
