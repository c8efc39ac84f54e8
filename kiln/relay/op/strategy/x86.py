"""x86 (target key ``cpu``) strategies: parallel, vectorized schedules.

Entry points: the ``cpu`` schedules for injective and reduction groups, and the ``cpu``
strategies of ``nn.dense`` (``dense_pack.x86``), ``nn.contrib_dense_pack`` and ``nn.conv2d``
(``conv2d_nchw.x86`` for NCHW/OIHW with groups 1, ``depthwise_conv2d_nchw.x86`` when groups
equal the channels), each beside its generic fallback; and ``<op>.x86`` implementations of the
pools, softmax family, normalizations, reductions, conv1d/conv3d and transposed convolutions
(last section), which arm_cpu targets skip.
"""

from __future__ import annotations

import re

from kiln import topi
from kiln.relay.op.nn.conv_nchwc import CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC
from kiln.relay.op.nn.dense import batch_matmul_strategy, dense_pack_strategy, dense_strategy
from kiln.relay.op.strategy import x86_int8, x86_winograd
from kiln.relay.op.strategy.generic import COMPUTES, schedule_opaque
from kiln.relay.op.strategy.registry import (
    IMPLEMENTATIONS,
    OpStrategy,
    register_implementation,
    register_strategy,
    register_target_schedule,
    target_keys,
    tuned_config,
)
from kiln.target.x86 import simd_32bit_lanes
from kiln.topi.utils import normalize_axes
from kiln.topi.x86 import batch_matmul as x86_batch_matmul
from kiln.topi.x86 import conv1d as x86_conv1d
from kiln.topi.x86 import conv2d as x86_conv2d
from kiln.topi.x86 import conv2d_pointwise as x86_pointwise
from kiln.topi.x86 import conv2d_stem as x86_stem
from kiln.topi.x86 import conv3d as x86_conv3d
from kiln.topi.x86 import conv_transpose as x86_conv_transpose
from kiln.topi.x86 import dense as x86_dense
from kiln.topi.x86 import depthwise as x86_depthwise
from kiln.topi.x86 import nn as x86_nn
from kiln.topi.x86 import pool as x86_pool
from kiln.topi.x86 import reduction as x86_reduction
from kiln.topi.x86.conv2d import MIN_BLOCKED_CHANNELS, channel_block


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
    "dense_pack.x86", plevel=15, config=x86_dense.DEFAULT_CONFIG,
    op_name=dense_strategy.op_name)
PREPACKED_DENSE = register_implementation(
    lambda attrs, inputs, out_type, config=None: [x86_dense.dense_packed_weight(
        inputs[0], inputs[1], None, _dtype(out_type), config)],
    lambda attrs, outs, target, config=None: x86_dense.schedule_dense_pack(outs, config),
    "contrib_dense_pack.x86", plevel=15, config=x86_dense.DEFAULT_CONFIG,
    op_name=dense_pack_strategy.op_name)
CONV2D_NCHW = register_implementation(
    lambda a, i, t, config=None: [x86_conv2d.conv2d_nchw(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_conv2d.schedule_conv2d_nchw(outs, config),
    "conv2d_nchw.x86", plevel=15, config=x86_conv2d.DEFAULT_CONFIG, op_name="nn.conv2d")
CONV2D_NCHW_PREPACKED = register_implementation(
    lambda a, i, t, config=None: [x86_conv2d.conv2d_nchw_packed(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_conv2d.schedule_conv2d_nchw(outs, config),
    "conv2d_nchw_prepacked.x86", plevel=15, config=x86_conv2d.DEFAULT_CONFIG,
    op_name="nn.conv2d")
DEPTHWISE_NCHW = register_implementation(
    lambda a, i, t, config=None: [x86_depthwise.depthwise_conv2d_nchw(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_depthwise.schedule_depthwise_conv2d_nchw(
        outs, config),
    "depthwise_conv2d_nchw.x86", plevel=15, config=x86_depthwise.DEFAULT_CONFIG,
    op_name="nn.conv2d")
CONV2D_NCHWC_X86 = register_implementation(
    lambda a, i, t, config=None: [x86_conv2d.conv2d_NCHWc(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), a.data_layout,
        a.out_layout or a.data_layout, _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_conv2d.schedule_conv2d_nchw(outs, config),
    "conv2d_NCHWc.x86", plevel=15, config=x86_conv2d.DEFAULT_CONFIG, op_name=CONV2D_NCHWC)
DEPTHWISE_NCHWC_X86 = register_implementation(
    lambda a, i, t, config=None: [x86_depthwise.depthwise_conv2d_NCHWc(
        i[0], i[1], list(a.strides), list(a.padding), list(a.dilation), a.data_layout,
        a.out_layout or a.data_layout, _dtype(t), config)],
    lambda attrs, outs, target, config=None: x86_depthwise.schedule_depthwise_conv2d_nchw(
        outs, config),
    "depthwise_conv2d_NCHWc.x86", plevel=15, config=x86_depthwise.DEFAULT_CONFIG,
    op_name=DEPTHWISE_CONV2D_NCHWC)


def _compute_pointwise(a, i, t, config=None):
    return [x86_pointwise.conv2d_pointwise_nchw(i[0], i[1], list(a.strides), _dtype(t))]


def _schedule_pointwise(attrs, outs, target, config=None):
    return x86_pointwise.schedule_conv2d_pointwise(outs, config)


def _compute_stem(a, i, t, config=None):
    return [x86_stem.conv2d_stem_nchw(i[0], i[1], list(a.strides), list(a.padding),
                                      list(a.dilation), _dtype(t))]


def _schedule_stem(attrs, outs, target, config=None):
    return x86_stem.schedule_conv2d_stem(outs, config)


# Convs with NCHW data and result, as nn.conv2d (OIHW kernel) or, after AlterOpLayout, as the
# blocked op with NCHW ends (OIHW{n}o kernel): a 1x1 conv is a GEMM over the pixels, a stem
# (an image's few channels) is vectorized over output columns; plevel above the blocked
# kernel's, which would transpose its result back to NCHW.
for _op_name in ("nn.conv2d", CONV2D_NCHWC):
    CONV2D_POINTWISE_X86 = register_implementation(
        _compute_pointwise, _schedule_pointwise, "conv2d_pointwise_nchw.x86", plevel=16,
        config=x86_pointwise.DEFAULT_CONFIG, op_name=_op_name)
    CONV2D_STEM_X86 = register_implementation(
        _compute_stem, _schedule_stem, "conv2d_stem_nchw.x86", plevel=16,
        config=x86_stem.DEFAULT_CONFIG, op_name=_op_name)


BATCH_MATMUL_PACK = register_implementation(
    lambda a, i, t, config=None: [x86_batch_matmul.batch_matmul_pack(
        i[0], i[1], _dtype(t), bool(a.transpose_b), config)],
    lambda attrs, outs, target, config=None: x86_batch_matmul.schedule_batch_matmul_pack(
        outs, config),
    "batch_matmul_pack.x86", plevel=15, config=x86_batch_matmul.DEFAULT_CONFIG,
    op_name=batch_matmul_strategy.op_name)
_GENERIC = {name: register_implementation(COMPUTES[name], schedule_opaque,
                                          f"{name.split('.')[-1]}.generic", op_name=name)
            for name in (dense_strategy.op_name, dense_pack_strategy.op_name, "nn.conv2d",
                         batch_matmul_strategy.op_name, CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC)}


def _static_2d(tensor) -> bool:
    return all(hasattr(d, "value") for d in tensor.shape)


@dense_strategy.register("cpu")
def dense_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC[dense_strategy.op_name])
    if x86_int8.int8_dense_applies(attrs, inputs, out_type, target):
        strategy.add(x86_int8.DENSE_INT8)
    elif _static_2d(inputs[1]) and len(inputs[0].shape) == 2:
        strategy.add(DENSE_PACK)
    return strategy


@batch_matmul_strategy.register("cpu")
def batch_matmul_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC[batch_matmul_strategy.op_name])
    static = all(_static_2d(t) for t in inputs)
    if static and not attrs.transpose_a and len(inputs[0].shape) == 3:
        strategy.add(BATCH_MATMUL_PACK)
    return strategy


@dense_pack_strategy.register("cpu")
def dense_pack_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC[dense_pack_strategy.op_name])
    strategy.add(PREPACKED_DENSE)
    return strategy


@register_strategy("nn.conv2d", "cpu")
def conv2d_strategy_cpu(attrs, inputs, out_type, target):
    strategy = OpStrategy()
    strategy.add(_GENERIC["nn.conv2d"])
    if attrs.out_layout not in ("", attrs.data_layout):
        return strategy  # the kernels below write the data's layout; generic transforms
    nchw = attrs.data_layout == "NCHW" and attrs.kernel_layout == "OIHW"
    channels = inputs[0].shape[1] if len(inputs[0].shape) == 4 else None
    prepacked = attrs.data_layout == "NCHW" and _PACKED_KERNEL.fullmatch(attrs.kernel_layout)
    if x86_int8.int8_conv2d_applies(attrs, inputs, out_type, target):
        strategy.add(x86_int8.CONV2D_NCHW_INT8)
    elif prepacked and attrs.groups == 1 and attrs.out_layout in ("", "NCHW"):
        strategy.add(CONV2D_NCHW_PREPACKED)
    elif nchw and attrs.groups == 1:
        strategy.add(CONV2D_NCHW)
        nchw_ends = _nchw_ends_kernel(attrs, inputs, out_type, target)
        if nchw_ends is not None:
            strategy.add(nchw_ends)
        if x86_winograd.winograd_applies(attrs, inputs, out_type):
            strategy.add(x86_winograd.CONV2D_WINOGRAD)
    elif x86_int8.int8_depthwise_applies(attrs, inputs, out_type, target):
        strategy.add(x86_int8.DEPTHWISE_NCHW_INT8)
    elif nchw and channels is not None and attrs.groups == int(getattr(channels, "value", -1)):
        strategy.add(DEPTHWISE_NCHW)
    return strategy


def _blocked_conv_strategy(op_name: str, impl, applies: bool) -> OpStrategy:
    """The generic blocked conv (through NCHW), plus the x86 kernel for float32 where
    ``applies``."""
    strategy = OpStrategy()
    strategy.add(_GENERIC[op_name])
    if applies:
        strategy.add(impl)
    return strategy


def _nchw_ends_kernel(attrs, inputs, out_type, target):
    """The pointwise or stem kernel for a float32 conv whose data and result are NCHW, if
    one applies, else None."""
    float32 = all(str(t.dtype) == "float32" for t in (inputs[0], inputs[1], out_type))
    if not float32 or attrs.data_layout != "NCHW" or attrs.out_layout not in ("", "NCHW"):
        return None
    data, kernel, lanes = inputs[0].shape, inputs[1].shape, simd_32bit_lanes(target)
    if x86_pointwise.pointwise_applies(data, kernel, attrs.strides, attrs.padding,
                                       attrs.groups, lanes):
        return CONV2D_POINTWISE_X86
    if x86_stem.stem_applies(data, kernel, attrs.strides, attrs.padding, attrs.dilation,
                             attrs.groups, lanes):
        return CONV2D_STEM_X86
    return None


@register_strategy(CONV2D_NCHWC, "cpu")
def conv2d_nchwc_strategy_cpu(attrs, inputs, out_type, target):
    strategy = _blocked_conv_strategy(CONV2D_NCHWC, CONV2D_NCHWC_X86,
                                      attrs.groups == 1 and str(out_type.dtype) == "float32")
    # only a conv whose ends are both NCHW (the blocked op's out_layout is never empty)
    nchw_ends = _nchw_ends_kernel(attrs, inputs, out_type, target) \
        if attrs.out_layout == "NCHW" else None
    if nchw_ends is not None:
        strategy.add(nchw_ends)
    return strategy


@register_strategy(DEPTHWISE_CONV2D_NCHWC, "cpu")
def depthwise_conv2d_nchwc_strategy_cpu(attrs, inputs, out_type, target):
    return _blocked_conv_strategy(DEPTHWISE_CONV2D_NCHWC, DEPTHWISE_NCHWC_X86,
                                  str(out_type.dtype) == "float32")


def _foldable_weight(weight, tinfos) -> bool:
    """Alter only where it pays: the weight is computed from constants (FoldConstant then packs
    it once at compile time) and its shape is static (packing needs a constant block count).
    The data's shape may be symbolic: a ``relay.Any`` batch still runs on the packed weight."""
    from kiln.relay.analysis import free_vars

    return _static_2d(tinfos[1]) and not free_vars(weight)


def _tuned_knobs(impl_name, attrs, tinfos, out_type, target, defaults: dict) -> dict:
    """The knobs tuning records give ``impl_name`` for this call over ``defaults``: the packed
    layout chosen here must be the one the tuned schedule was measured with."""
    tuned = tuned_config(impl_name, attrs, tinfos, out_type, target)
    return {**defaults, **(tuned[1] if tuned is not None else {})}


def alter_dense_layout(attrs, inputs, tinfos, out_type):
    """``FTVMAlterOpLayout`` of ``nn.dense`` on cpu targets: use ``contrib_dense_pack`` with the
    weight behind a ``layout_transform`` to ``NC{n}n``, which FoldConstant folds away for a
    constant weight (so ``dense_pack.x86`` packs nothing at run time). None elsewhere."""
    from kiln.relay.op.nn.dense import contrib_dense_pack
    from kiln.relay.op.strategy.registry import target_keys
    from kiln.relay.op.transform import layout_transform
    from kiln.target import Target

    target = Target.current(allow_none=True)
    keys = target_keys(target)
    if "cpu" not in keys or "arm_cpu" in keys or len(tinfos[1].shape) != 2:
        return None
    if not _foldable_weight(inputs[1], tinfos) or \
            x86_int8.int8_dense_applies(attrs, tinfos, out_type, target):
        return None
    units = tinfos[1].shape[0]
    if not hasattr(units, "value"):
        return None
    lanes = _tuned_knobs("dense_pack.x86", attrs, tinfos, out_type, target,
                         x86_dense.DEFAULT_CONFIG)["tile_x"]
    lanes = x86_dense.pack_lanes(int(units.value), lanes)
    weight = layout_transform(inputs[1], "NC", f"NC{lanes}n")
    return contrib_dense_pack(inputs[0], weight, f"NC{lanes}n", attrs.units, attrs.out_dtype)


# OIHW with output channels blocked by n: the layout conv2d_nchw_prepacked.x86 consumes
_PACKED_KERNEL = re.compile(r"OIHW(\d+)o")




def alter_conv2d_layout(attrs, inputs, tinfos, out_type):
    """``FTVMAlterOpLayout`` of ``nn.conv2d`` on cpu targets (TVM's x86
    ``_alter_conv2d_layout``): an NCHW/OIHW float32 conv with a constant kernel becomes
    ``nn.contrib_conv2d_NCHWc`` (groups 1) or ``nn.contrib_depthwise_conv2d_NCHWc``
    (groups = channels), data ``NCHW{ic}c``, kernel ``OIHW{ic}i{oc}o`` (``OIHW1i{oc}o``),
    output ``NCHW{oc}c``. The blocks are a ``conv2d_NCHWc.x86`` tuning record's tile_ic /
    tile_oc (``depthwise_conv2d_NCHWc.x86``'s tile_oc) when one applies, else kiln's
    defaults (:func:`channel_block`). AlterOpLayout transforms the kernel (FoldConstant folds
    that) and the activations where a neighbour's blocks differ. Under 8 output channels the
    kernel alone is prepacked, ``OIHW{n}o`` (n from a ``conv2d_nchw.x86`` record if any).
    An ``out_layout`` of ``NCHW{n}c`` (groups 1) sets the output block to n."""
    from kiln.relay.op.nn.conv_nchwc import contrib_conv2d_nchwc, contrib_depthwise_conv2d_nchwc
    from kiln.target import Target

    target = Target.current(allow_none=True)
    keys = target_keys(target)
    if "cpu" not in keys or "arm_cpu" in keys or not _foldable_weight(inputs[1], tinfos):
        return None
    if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
        return None
    # a blocked result asked for (NCHW{n}c) fixes the output block of a groups-1 conv
    out_block = re.fullmatch(r"NCHW(\d+)c", attrs.out_layout)
    if attrs.out_layout not in ("", "NCHW") and (out_block is None or attrs.groups != 1):
        return None
    if x86_int8.int8_conv2d_applies(attrs, tinfos, out_type, target):
        # the 8-bit micro-kernel's own packed layout (an NCHW result)
        return None if out_block else \
            x86_int8.alter_int8_conv2d_layout(attrs, inputs, tinfos, out_type, target)
    dims = [*tinfos[1].shape, *out_type.shape[1:]]
    if not all(hasattr(d, "value") for d in dims) or str(out_type.dtype) != "float32":
        return None
    out_channels, in_per_group = (int(d.value) for d in tinfos[1].shape[:2])  # OIHW
    common = (attrs.strides, attrs.padding, attrs.dilation, attrs.groups, out_channels,
              attrs.kernel_size)
    narrow = out_channels < MIN_BLOCKED_CHANNELS
    if attrs.groups > 1:
        if in_per_group != 1 or attrs.groups != out_channels or narrow:
            return None  # grouped, a channel multiplier or narrow: the NCHW kernels
        knobs = _tuned_knobs("depthwise_conv2d_NCHWc.x86", attrs, tinfos, out_type, target,
                             {"c_bn": channel_block(out_channels)})
        bn = knobs["c_bn"]
        return contrib_depthwise_conv2d_nchwc(inputs[0], inputs[1], *common, f"NCHW{bn}c",
                                              f"OIHW1i{bn}o", f"NCHW{bn}c", attrs.out_dtype)
    if narrow and out_block is None:
        return _prepack_narrow_conv(attrs, inputs, tinfos, out_type, target)
    # a faster Winograd record: on the untuned blocks, which its neighbours most likely use
    winograd = None if out_block else x86_winograd.alter_to_winograd(
        attrs, inputs, tinfos, out_type, target, channel_block(in_per_group),
        channel_block(out_channels))
    if winograd is not None:
        return winograd
    tuned = _tuned_knobs("conv2d_NCHWc.x86", attrs, tinfos, out_type, target, {})
    ic_bn = tuned.get("ic_bn") or channel_block(in_per_group)
    oc_bn = int(out_block.group(1)) if out_block else \
        tuned.get("oc_bn") or channel_block(out_channels)
    return contrib_conv2d_nchwc(inputs[0], inputs[1], *common, f"NCHW{ic_bn}c",
                                f"OIHW{ic_bn}i{oc_bn}o", f"NCHW{oc_bn}c", attrs.out_dtype)


def _prepack_narrow_conv(attrs, inputs, tinfos, out_type, target):
    """A conv with fewer output channels than a vector stays NCHW; its kernel is packed
    ``OIHW{n}o`` at compile time (n from a ``conv2d_nchw.x86`` record, else modelled)."""
    from kiln.relay.op.nn.conv import conv2d
    from kiln.relay.op.transform import layout_transform

    knobs = _tuned_knobs("conv2d_nchw.x86", attrs, tinfos, out_type, target,
                         x86_conv2d.DEFAULT_CONFIG)
    oc_bn, _ = x86_conv2d.block_shape(int(out_type.shape[1].value),
                                      int(out_type.shape[3].value), knobs,
                                      int(tinfos[1].shape[3].value))
    if oc_bn <= 1:
        return None
    weight = layout_transform(inputs[1], "OIHW", f"OIHW{oc_bn}o")
    return conv2d(inputs[0], weight, attrs.strides, attrs.padding, attrs.dilation,
                  attrs.groups, attrs.channels, attrs.kernel_size, "NCHW", f"OIHW{oc_bn}o",
                  "", attrs.out_dtype)


def _register_alter_layouts() -> None:
    from kiln.ir.op import Op

    for name, alter in ((dense_strategy.op_name, alter_dense_layout),
                        ("nn.conv2d", alter_conv2d_layout)):
        op = Op.get(name)
        if op.get_attr("FTVMAlterOpLayout") is None:
            op.set_attr("FTVMAlterOpLayout", alter)


_register_alter_layouts()


# ---- pools, softmax, norms, reductions, conv1d/conv3d, transposed convs ------------------
# Each op keeps its generic implementation and gains an x86 one (plevel 15) where its
# schedule applies (static shapes; the layouts and groups named below). arm_cpu targets also
# carry the ``cpu`` key: they keep the generic, thread-free implementation.


def _static(tensors) -> bool:
    return all(hasattr(d, "value") for t in tensors for d in t.shape)


def _x86_impl(op_name: str, compute, schedule, config: dict) -> object:
    return register_implementation(compute, schedule, f"{op_name.split('.')[-1]}.x86",
                                   plevel=15, config=config, op_name=op_name)


def _register_x86(op_name: str, impl, applies=lambda attrs, inputs: True) -> None:
    """The cpu strategy of ``op_name``: generic, plus ``impl`` where ``applies``."""
    generic = IMPLEMENTATIONS[f"{op_name.split('.')[-1]}.generic"]

    def fstrategy(attrs, inputs, out_type, target):
        strategy = OpStrategy()
        strategy.add(generic)
        x86_target = "arm_cpu" not in target_keys(target)
        if x86_target and _static(inputs) and applies(attrs, inputs):
            strategy.add(impl)
        return strategy

    fstrategy.__name__ = f"{op_name.split('.')[-1]}_strategy_cpu"
    register_strategy(op_name, "cpu")(fstrategy)


def _schedule_reduce_x86(attrs, outs, target, config=None):
    return x86_reduction.schedule_reduce(outs, config)


for _name in ("sum", "mean", "max", "min", "prod", "argmax", "argmin", "variance"):
    _register_x86(_name, _x86_impl(_name, COMPUTES[_name], _schedule_reduce_x86,
                                   x86_reduction.DEFAULT_CONFIG),
                  lambda attrs, inputs: inputs[0].dtype != "bool")


def _pool_compute(kind: str):
    def compute(a, i, t, config=None):
        return [x86_pool.pool(i[0], list(a.pool_size), list(a.strides), list(a.dilation),
                              list(a.padding), kind, a.ceil_mode, a.layout,
                              getattr(a, "count_include_pad", False))]
    return compute


def _schedule_pool_x86(attrs, outs, target, config=None):
    return x86_pool.schedule_pool(outs, attrs.layout, config)


def _schedule_global_pool_x86(attrs, outs, target, config=None):
    return x86_pool.schedule_global_pool(outs, config)


for _kind in ("max", "avg"):
    for _rank in (1, 2, 3):
        _name = f"nn.{_kind}_pool{_rank}d"
        _register_x86(_name, _x86_impl(_name, _pool_compute(_kind), _schedule_pool_x86,
                                       x86_pool.DEFAULT_CONFIG))
    _name = f"nn.global_{_kind}_pool2d"
    _register_x86(_name, _x86_impl(
        _name, lambda a, i, t, config=None, kind=_kind: [x86_pool.global_pool(i[0], kind,
                                                                              a.layout)],
        _schedule_global_pool_x86, x86_reduction.DEFAULT_CONFIG))
    for _rank in (1, 2):
        _name = f"nn.adaptive_{_kind}_pool{_rank}d"
        _register_x86(_name, _x86_impl(_name, COMPUTES[_name], _schedule_global_pool_x86,
                                       x86_reduction.DEFAULT_CONFIG))


def _schedule_softmax_x86(attrs, outs, target, config=None):
    return x86_nn.schedule_softmax(outs, attrs.axis, config)


for _name in ("nn.softmax", "nn.fast_softmax"):
    _register_x86(_name, _x86_impl(
        _name, lambda a, i, t, config=None: [x86_nn.softmax(i[0], a.axis)],
        _schedule_softmax_x86, x86_nn.DEFAULT_CONFIG))
_register_x86("nn.log_softmax", _x86_impl(
    "nn.log_softmax", lambda a, i, t, config=None: [x86_nn.log_softmax(i[0], a.axis)],
    _schedule_softmax_x86, x86_nn.DEFAULT_CONFIG))

# the axes each normalization's statistics span (its rows are the axes before them)
_NORM_AXES = {
    "nn.layer_norm": lambda a, ndim: normalize_axes(a.axis, ndim),
    "nn.instance_norm": lambda a, ndim: [k for k in range(1, ndim)
                                         if k != normalize_axes(a.axis, ndim)[0]],
    "nn.group_norm": lambda a, ndim: normalize_axes(a.axis, ndim),
    "nn.l2_normalize": lambda a, ndim: normalize_axes(a.axis, ndim),
    "nn.lrn": lambda a, ndim: [ndim - 1],
}


def _norm_schedule(op_name: str):
    def schedule(attrs, outs, target, config=None):
        return x86_nn.schedule_norm(outs, _NORM_AXES[op_name](attrs, outs[0].ndim), config)
    return schedule


for _name in _NORM_AXES:
    _register_x86(_name, _x86_impl(_name, COMPUTES[_name], _norm_schedule(_name),
                                   x86_nn.DEFAULT_CONFIG))
_register_x86("nn.batch_norm", _x86_impl(
    "nn.batch_norm", COMPUTES["nn.batch_norm"],
    lambda attrs, outs, target, config=None: topi.x86.schedule_injective(outs), {}))

_register_x86("nn.conv1d", _x86_impl(
    "nn.conv1d", COMPUTES["nn.conv1d"],
    lambda attrs, outs, target, config=None: x86_conv1d.schedule_conv1d_ncw(
        outs, config or x86_conv1d.default_config(target)),
    x86_conv1d.DEFAULT_CONFIG),
    lambda a, i: a.groups == 1 and (a.data_layout, a.kernel_layout, a.out_layout or "NCW")
    == ("NCW", "OIW", "NCW"))
_register_x86("nn.conv3d", _x86_impl(
    "nn.conv3d", COMPUTES["nn.conv3d"],
    lambda attrs, outs, target, config=None: x86_conv3d.schedule_conv3d_ncdhw(
        outs, config or x86_conv1d.default_config(target)),
    x86_conv3d.DEFAULT_CONFIG),
    lambda a, i: a.groups == 1 and (a.data_layout, a.kernel_layout, a.out_layout or "NCDHW")
    == ("NCDHW", "OIDHW", "NCDHW"))


def _conv_transpose_x86(a, i, t, config=None):
    return [x86_conv_transpose.conv_transpose_phased(
        i[0], i[1], list(a.strides), list(a.padding), list(a.output_padding), _dtype(t))]


def _phased_applies(a, i) -> bool:
    layouts = {("NCW", "IOW"), ("NCHW", "IOHW")}
    return a.groups == 1 and all(int(d) == 1 for d in a.dilation) and \
        (a.data_layout, a.kernel_layout) in layouts and a.out_layout in ("", a.data_layout)


for _name in ("nn.conv1d_transpose", "nn.conv2d_transpose"):
    _register_x86(_name, _x86_impl(
        _name, _conv_transpose_x86,
        lambda attrs, outs, target, config=None: x86_conv_transpose.schedule_conv_transpose(
            outs, config or x86_conv1d.default_config(target)),
        x86_conv_transpose.DEFAULT_CONFIG), _phased_applies)
