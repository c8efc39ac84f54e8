"""The x86 8-bit convolution implementations and when they apply: ``conv2d_nchw_int8.x86``
(groups 1; 1x1 stride-1 convolutions take the pixel GEMM of ``topi/x86/conv2d_int8_1x1.py``,
others the channel-block micro-kernel of ``conv2d_int8.py``),
``depthwise_conv2d_nchw_int8.x86`` (``topi/x86/depthwise_int8.py``) and ``dense_int8.x86``
(``topi/x86/dense_int8.py``, for ``nn.dense``).

Entry points: :data:`CONV2D_NCHW_INT8`, :data:`DEPTHWISE_NCHW_INT8`, :data:`DENSE_INT8`,
:func:`int8_conv2d_applies`, :func:`int8_depthwise_applies`, :func:`int8_dense_applies`,
:func:`target_has_avx2`. The ``cpu`` strategies of ``nn.conv2d`` and ``nn.dense`` add them
(above the float schedules) for 8-bit operands with an int32 result — what ``qnn.conv2d`` and
``qnn.dense`` lower to after ``relay.qnn.transform.Legalize``.
"""

from __future__ import annotations

from kiln.relay.op.nn.dense import dense_strategy
from kiln.relay.op.strategy.registry import register_implementation
from kiln.target.x86 import target_has_features
from kiln.topi.x86 import (
    conv2d_int8,
    conv2d_int8_1x1,
    dense_int8,
    depthwise_int8,
)

__all__ = ["CONV2D_NCHW_INT8", "DEPTHWISE_NCHW_INT8", "DENSE_INT8", "int8_conv2d_applies",
           "int8_depthwise_applies", "int8_dense_applies", "target_has_avx2",
           "alter_int8_conv2d_layout"]

def target_has_avx2(target) -> bool:
    """Whether ``target`` (an llvm/c CPU target) may use AVX2: ``-mattr`` when it names it,
    else ``-mcpu``, else the host (kiln builds CPU code for the host by default)."""
    return target_has_features("avx2", target)


def int8_conv2d_applies(attrs, inputs, out_type, target) -> bool:
    """Whether ``conv2d_nchw_int8.x86`` computes this ``nn.conv2d`` call."""
    static = all(hasattr(d, "value") for t in inputs for d in t.shape)
    kind = getattr(getattr(target, "kind", None), "name", "")
    return static and kind in ("llvm", "c") and conv2d_int8.conv2d_int8_applies(
        attrs, str(inputs[0].dtype), str(inputs[1].dtype), str(out_type.dtype),
        target_has_avx2(target))


def _lanes(data_dtype: str, kernel_dtype: str, target=None) -> int:
    """Input channels per int32 lane of the micro-kernel for these operands on ``target``
    (default: the current one): uint8 x int8 quads with AVX512-VNNI, else int16 pairs."""
    quads = conv2d_int8.quads_apply(data_dtype, kernel_dtype, target)
    return conv2d_int8.QUADS if quads else 2


def _compute(attrs, inputs, out_type, config=None):
    lanes = _lanes(str(inputs[0].dtype), str(inputs[1].dtype))
    if conv2d_int8_1x1.pointwise_int8_applies(inputs[1].shape, attrs.strides, attrs.padding):
        return [conv2d_int8_1x1.conv2d_1x1_nchw_int8(inputs[0], inputs[1], str(out_type.dtype),
                                                     lanes)]
    return [conv2d_int8.conv2d_nchw_int8(inputs[0], inputs[1], list(attrs.strides),
                                         list(attrs.padding), list(attrs.dilation),
                                         str(out_type.dtype), lanes)]


def _schedule(attrs, outs, target, config=None):
    return conv2d_int8.schedule_conv2d_nchw_int8(outs)


CONV2D_NCHW_INT8 = register_implementation(_compute, _schedule, "conv2d_nchw_int8.x86",
                                           plevel=20, op_name="nn.conv2d")


def int8_depthwise_applies(attrs, inputs, out_type, target) -> bool:
    """Whether ``depthwise_conv2d_nchw_int8.x86`` computes this ``nn.conv2d`` call: 8-bit
    NCHW/OIHW depthwise with an int32 result, static shapes and rows where the kernel wins
    (:func:`kiln.topi.x86.depthwise_int8.depthwise_int8_applies`), on an llvm/c CPU target."""
    static = all(hasattr(d, "value") for t in inputs for d in t.shape)
    kind = getattr(getattr(target, "kind", None), "name", "")
    return static and kind in ("llvm", "c") and attrs.data_layout == "NCHW" and \
        attrs.kernel_layout == "OIHW" and attrs.out_layout in ("", "NCHW") and \
        depthwise_int8.depthwise_int8_applies(
            [int(d.value) for d in inputs[0].shape], [int(d.value) for d in inputs[1].shape],
            attrs.groups, str(inputs[0].dtype), str(inputs[1].dtype), str(out_type.dtype),
            attrs.strides, int(out_type.shape[3]), attrs.dilation,
            depthwise_int8.quads_apply(str(inputs[0].dtype), str(inputs[1].dtype), target))


def _depthwise_compute(attrs, inputs, out_type, config=None):
    return [depthwise_int8.depthwise_conv2d_nchw_int8(
        inputs[0], inputs[1], list(attrs.strides), list(attrs.padding), list(attrs.dilation),
        str(out_type.dtype),
        depthwise_int8.quads_apply(str(inputs[0].dtype), str(inputs[1].dtype)))]


DEPTHWISE_NCHW_INT8 = register_implementation(_depthwise_compute, _schedule,
                                              "depthwise_conv2d_nchw_int8.x86", plevel=20,
                                              op_name="nn.conv2d")


def int8_dense_applies(attrs, inputs, out_type, target) -> bool:
    """Whether ``dense_int8.x86`` computes this ``nn.dense`` call (8-bit 2-D operands, int32
    result, static shapes, an llvm/c CPU target); AlterOpLayout then leaves it unpacked."""
    static = all(hasattr(d, "value") for t in inputs for d in t.shape)
    kind = getattr(getattr(target, "kind", None), "name", "")
    return static and kind in ("llvm", "c") and dense_int8.dense_int8_applies(
        inputs[0].shape, inputs[1].shape, str(inputs[0].dtype), str(inputs[1].dtype),
        str(out_type.dtype))


DENSE_INT8 = register_implementation(
    lambda attrs, inputs, out_type, config=None: [dense_int8.dense_int8(
        inputs[0], inputs[1], str(out_type.dtype))],
    lambda attrs, outs, target, config=None: dense_int8.schedule_dense_int8(outs),
    "dense_int8.x86", plevel=20, op_name=dense_strategy.op_name)


def alter_int8_conv2d_layout(attrs, inputs, tinfos, out_type, target):
    """The conv with its kernel packed for the micro-kernel (int16 ``OIHW16o2i``, or int8
    ``OIHW16o4i`` for the AVX512-VNNI quads) behind a ``layout_transform`` (which FoldConstant
    folds for a constant kernel), when the micro-kernel computes it and the channels fill the
    blocks; else None."""
    from kiln.relay.op.nn.conv import conv2d
    from kiln.relay.op.transform import cast, layout_transform

    if not int8_conv2d_applies(attrs, tinfos, out_type, target) or \
            attrs.kernel_layout != "OIHW":
        return None
    lanes = _lanes(str(tinfos[0].dtype), str(tinfos[1].dtype), target)
    oc, ic = (int(d.value) for d in tinfos[1].shape[:2])
    if oc % conv2d_int8.OC_BLOCK or ic % lanes:
        return None
    layout = conv2d_int8.packed_kernel_layout(lanes)
    weight = layout_transform(cast(inputs[1], conv2d_int8.PACKED_DTYPES[lanes][1]), "OIHW",
                              layout)
    return conv2d(inputs[0], weight, attrs.strides, attrs.padding, attrs.dilation, 1,
                  attrs.channels, attrs.kernel_size, "NCHW", layout, "", "int32")
